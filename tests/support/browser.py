"""Headless chromium, offline: the one argument list of the browser tests (tests/report) and of
bench/screenshot. Every network path is closed (no DNS, a dead proxy, loopback only), so a page that
reached for the network would show it; scripts get a virtual 10 s."""

from __future__ import annotations

import shutil
from pathlib import Path

OFFLINE = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-default-apps",
    "--disable-extensions",
    "--no-default-browser-check",
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--proxy-server=http://127.0.0.1:9",
    "--proxy-bypass-list=<-loopback>",
    "--virtual-time-budget=10000",
    "--hide-scrollbars",
]


def find_chromium() -> str | None:
    """Debian's ``chromium`` (or ``chromium-browser``) on PATH, or None."""
    return next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser")) if p), None)


def chromium_argv(
    binary: str, profile: Path, size: str, *, screenshot: Path | None = None, dump_dom: bool = False
) -> list[str]:
    """The command line that loads a page offline in a ``size`` ("W,H") window with its own profile
    folder; the page's URL goes last."""
    cmd = [binary, *OFFLINE, f"--user-data-dir={profile}", f"--window-size={size}"]
    if screenshot is not None:
        cmd.append(f"--screenshot={screenshot}")
    if dump_dom:
        cmd.append("--dump-dom")
    return cmd
