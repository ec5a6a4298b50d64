"""One pseudo-terminal runner for the tests that need a real terminal (test_views, test_terminal):
``preemptlog ARGS`` as a real subprocess whose stdin, stdout and stderr are a cols x rows pty."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios

from ..conftest import ROOT


def run_on_pty(args: list[str], cols: int, rows: int, env: dict[str, str], timeout: float = 120) -> tuple[str, int]:
    """(everything it wrote, CRLF as LF; its exit code). ``env`` is the whole environment; COLUMNS,
    LINES and TERM are set from the size. A run silent for ``timeout`` seconds is killed."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    env = {"TERM": "xterm", **env, "COLUMNS": str(cols), "LINES": str(rows)}
    p = subprocess.Popen(
        [sys.executable, "-m", "preemptlog", *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        cwd=ROOT,
        close_fds=True,
    )
    os.close(slave)
    out = b""
    while True:
        ready, _, _ = select.select([master], [], [], timeout)
        if not ready:
            p.kill()
            break
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    return out.decode("utf-8", "replace").replace("\r\n", "\n"), p.wait()
