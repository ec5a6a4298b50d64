"""``preemptlog watch``: follow live servers; each preemption storm told as it happens, saved as an
incident folder and explained in analyze's words (preemptlog/watch/, docs/watch.md)."""

from __future__ import annotations

import os
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from .common import DebugOpt, FailOnOpt, parse_duration
from .options import ANALYSIS, AnalysisArgs, analysis_options
from .runner import guarded


class WatchFormat(str, Enum):
    text = "text"
    ndjson = "ndjson"


def register(app: typer.Typer) -> None:
    app.command(short_help="Follow live servers: each preemption storm told, saved as a bundle and explained.")(watch)


@analysis_options()
def watch(
    metrics: Annotated[
        list[str],
        typer.Option(
            "--metrics",
            metavar="URL",
            help="A server's /metrics URL, e.g. http://127.0.0.1:8000/metrics. Repeatable: one per server.",
            show_default=False,
        ),
    ],
    log: Annotated[
        list[Path] | None,
        typer.Option(
            "--log",
            metavar="FILE",
            help="The server's log file, followed like tail -F (rotation and truncation followed). Repeatable: "
            "the n-th goes with the n-th --metrics.",
            show_default=False,
        ),
    ] = None,
    records: Annotated[
        list[str] | None,
        typer.Option(
            "--records",
            metavar="FILE",
            help="The records of preemptlog's vLLM plugin: a file, or a quoted pattern for PREEMPTLOG_RECORD's "
            "{pid} files ('/var/log/vllm/preempt-*.jsonl'). Repeatable, paired with --metrics like --log.",
            show_default=False,
        ),
    ] = None,
    every: Annotated[
        str,
        typer.Option(
            "--every", metavar="SECONDS", help="Time between two scrapes of a server (>= 1; 5, 2.5, 500ms, 1m)."
        ),
    ] = "5",
    out: Annotated[
        Path,
        typer.Option("--out", "-o", metavar="DIR", help="Folder the storms' incident folders are saved in (created)."),
    ] = Path("preemptlog-incidents"),
    quiet: Annotated[
        str,
        typer.Option(
            "--quiet",
            metavar="SECONDS",
            help="A storm is over after this long without a new preemption (at least twice --every).",
        ),
    ] = "60",
    duration: Annotated[
        str | None,
        typer.Option(
            "--duration",
            metavar="SECONDS",
            help="Stop after this long (e.g. 600, 30m, 2h); default: until Ctrl-C or SIGTERM.",
            show_default=False,
        ),
    ] = None,
    format: Annotated[
        WatchFormat | None,
        typer.Option(
            "--format",
            "-f",
            help="text: a line per event and, on a terminal, a live status line per server; ndjson: one JSON "
            "object per line. Default: text on a terminal, ndjson otherwise.",
            case_sensitive=False,
            show_default=False,
        ),
    ] = None,
    grafana_url: Annotated[
        str | None,
        typer.Option(
            "--grafana-url",
            metavar="URL",
            help="Post each storm as an annotation on vLLM's KV-cache dashboard in this Grafana (token in "
            "$GRAFANA_TOKEN), as `export grafana` does.",
            show_default=False,
        ),
    ] = None,
    analysis: AnalysisArgs = ANALYSIS,  # how each storm's folder is analysed (as `preemptlog analyze` would)
    fail_on: FailOnOpt = None,
    debug: DebugOpt = False,
) -> None:
    """Watch live vLLM servers: tell each preemption storm while it happens, save it, explain it.

    \b
    Examples:
      preemptlog watch --metrics http://127.0.0.1:8000/metrics --log /var/log/vllm/vllm.log
      preemptlog watch --metrics http://a:8000/metrics --metrics http://b:8000/metrics --every 10 | jq .
      preemptlog watch --metrics URL --duration 10m --quiet 30 --fail-on any   # a CI smoke test

    Scrapes each server's /metrics every --every seconds (one request at a time, a timeout, backoff
    when the server is slow) and follows its log like tail -F. A storm opens at the first scrape
    whose vllm:num_preemptions_total rose and closes after --quiet seconds without an increase. In
    ndjson each line is one object: storm_start (within an interval of the counter's move),
    storm_end (preemptions: the counter's exact increase; cause and fix: what `preemptlog analyze`
    says of the saved folder; bundle: its path; cut: true when the watch stopped during it),
    status, server_down, server_up, restart, start and stop (docs/watch.md). Each storm is saved
    under --out: the scrapes, the log lines and the records of its window, capture.jsonl and a
    README; `preemptlog analyze` of it gives the same count and cause. SIGINT, SIGTERM or
    --duration end an open storm (cut) and exit 0; --fail-on is judged on the storms' count.
    """

    def body() -> int:
        from ..errors import ExitCode, UsageError
        from ..render import failon
        from ..watch import Watch, WatchOptions
        from ..watch.output import make

        conditions = failon.parse(fail_on)
        step = _seconds("--every", every)
        if step < 1.0:
            raise UsageError(f"--every {every}: at least 1 second", hint="e.g. --every 5")
        calm = _seconds("--quiet", quiet)
        if calm < 2 * step:
            raise UsageError(
                f"--quiet {quiet}: at least twice --every ({2 * step:g} s)",
                hint="a storm must outlast one scrape without an increase",
            )
        limit = _seconds("--duration", duration) if duration is not None else None
        if limit is not None and limit <= 0:
            raise UsageError(f"--duration {duration}: must be positive")
        for url in metrics:
            if not url.startswith(("http://", "https://")):
                raise UsageError(f"--metrics {url!r}: not an http(s) URL", hint="e.g. http://127.0.0.1:8000/metrics")
            _check_url("--metrics", url)
        dup = sorted({u for u in metrics if metrics.count(u) > 1})
        if dup:
            raise UsageError(f"--metrics {dup[0]}: given twice")
        logs, recs = list(log or []), list(records or [])
        for name, items in (("--log", logs), ("--records", recs)):
            if items and len(items) != len(metrics):
                raise UsageError(
                    f"{name}: {len(items)} given for {len(metrics)} --metrics",
                    hint=f"give one {name} per --metrics, in the same order, or none",
                )
        for p in logs:
            if p.is_dir():
                raise UsageError(f"--log {p}: is a folder", hint="give the log file the server writes")
        if out.exists() and not out.is_dir():
            raise UsageError(f"--out {out}: exists and is not a folder")
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"--out {out}: cannot create ({exc.strerror or exc})") from None
        if grafana_url is not None and not grafana_url.startswith(("http://", "https://")):
            raise UsageError(f"--grafana-url {grafana_url!r}: not an http(s) URL", hint="e.g. https://grafana:3000")
        if grafana_url is not None:
            _check_url("--grafana-url", grafana_url)
        fmt = (format.value if format is not None else None) or ("text" if sys.stdout.isatty() else "ndjson")
        opts = WatchOptions(
            servers=tuple(metrics),
            logs=tuple(logs),
            records=tuple(recs),
            every=step,
            quiet=calm,
            out=out,
            duration=limit,
            analysis=analysis.options(debug=debug),
            analyze_args=_analysis_args(analysis),
            debug=debug,
        )
        w = Watch(opts, make(fmt), post=_grafana(grafana_url) if grafana_url else None)
        restore = w.handle_signals()
        try:
            outcome = w.run()
        finally:
            restore()
        received = sum(int(s.get("requests_received") or 0) for s in outcome.storms)
        hidden = {url: "it never answered a scrape" for url in outcome.servers_never_up}
        hidden.update(
            {url: "its page never showed a readable preemption counter" for url in outcome.servers_no_counter}
        )
        rate = outcome.preemptions / received if received else None
        code, lines = judge(conditions, outcome.preemptions, rate, len(metrics), hidden)
        for line in lines:
            sys.stderr.write(line + "\n")
        return int(code) if code is not None else int(ExitCode.OK)

    guarded(debug, body)


def judge(
    conditions: list[Any], preemptions: int, rate: float | None, servers: int, hidden: dict[str, str]
) -> tuple[int | None, list[str]]:
    """(exit code or None, stderr lines) of ``--fail-on`` on a watch: the conditions on the count are
    judged on the storms' total; ``hidden`` (server -> why) are the servers whose preemptions the watch
    could not see. When some are hidden the total is a lower bound: a count condition that does not hold
    is said to be unsure (it may hold on the servers not seen), and ``unknown`` holds (exit 6) unless a
    condition on the count holds (exit 4 wins, as in ``analyze``)."""
    from ..errors import ExitCode
    from ..render import failon

    if not hidden:
        return failon.outcome(conditions, {"events": preemptions, "count_visible": True, "preemption_rate": rate})
    whole = len(hidden) >= servers
    which = "; ".join(f"{url}: {why}" for url, why in hidden.items())
    summary = {"events": preemptions, "count_visible": not whole, "preemption_rate": rate}
    asked = any(c.what == "unknown" for c in conditions)
    met = [c.text for c in conditions if c.what != "unknown" and c.holds(summary)]
    unmet = [c.text for c in conditions if c.what != "unknown" and c.text not in met]
    lines: list[str] = []
    if whole:
        words = f"no server's preemption count was seen ({which})"
        if unmet and not asked:
            lines.append(
                f"preemptlog: warning: --fail-on {', '.join(unmet)} cannot hold: {words} "
                "(add --fail-on unknown to fail on that)"
            )
    else:
        words = f"the preemption count of {which} is not visible"
        if unmet:
            lines.append(
                f"preemptlog: warning: --fail-on {', '.join(unmet)}: not met on the servers seen, but the total "
                f"({preemptions}) is a lower bound: {words}"
                + ("" if asked else " (add --fail-on unknown to fail on that)")
            )
    if met:
        lines.append(f"preemptlog: --fail-on {', '.join(met)}: condition met")
        return int(ExitCode.FAIL_ON), lines
    if asked:
        total = "" if whole else ", so the total is not known either"
        lines.append(f"preemptlog: --fail-on unknown: {words}{total}")
        return int(ExitCode.NOT_VISIBLE), lines
    return None, lines


def _check_url(name: str, url: str) -> None:
    """A URL no request can be sent to (a bad IPv6 literal, a port that is no number, no host) is a bad
    command line, said once, not a server down at every scrape until the watch is stopped."""
    from urllib.parse import urlsplit

    from ..errors import UsageError

    try:
        parts = urlsplit(url)
        host, _port = parts.hostname, parts.port
    except ValueError as exc:
        raise UsageError(
            f"{name} {url!r}: not a valid URL ({exc})", hint="e.g. http://127.0.0.1:8000/metrics"
        ) from None
    if not host:
        raise UsageError(f"{name} {url!r}: no host in the URL", hint="e.g. http://127.0.0.1:8000/metrics")


def _seconds(name: str, text: str) -> float:
    from ..errors import UsageError

    try:
        return parse_duration(text)
    except ValueError:
        raise UsageError(f"{name} {text!r} is not a number of seconds", hint="e.g. 5, 2.5, 500ms, 1m") from None


def _analysis_args(a: AnalysisArgs) -> str:
    """The analysis options given, as they are written on a command line (the README repeats them)."""
    parts: list[str] = []
    if a.year is not None:
        parts.append(f"--year {a.year}")
    if a.tz is not None:
        parts.append(f"--tz {a.tz}")
    for name, values in (
        ("--file-kind", a.file_kind),
        ("--offset", a.offset),
        ("--rules", a.rules),
        ("--threshold", a.threshold),
    ):
        parts += [f"{name} {v}" for v in values or []]
    if a.before != AnalysisArgs.before:
        parts.append(f"--before {a.before:g}")
    if a.after != AnalysisArgs.after:
        parts.append(f"--after {a.after:g}")
    if a.lookback_steps is not None:
        parts.append(f"--lookback-steps {a.lookback_steps}")
    return "".join(" " + p for p in parts)


def _grafana(url: str) -> Any:
    """Post one storm's annotation to Grafana (fleet/export/grafana.py), pinned to vLLM's KV-cache panel."""

    def post(annotation: dict[str, Any]) -> str:
        from ..fleet.export.grafana import DASHBOARD_UID, PANEL_ID, TOKEN_ENV
        from ..fleet.export.grafana import post as send

        ids = send([{**annotation, "dashboardUID": DASHBOARD_UID, "panelId": PANEL_ID}], url, os.environ.get(TOKEN_ENV))
        return str(ids[0]) if ids else "posted"

    return post
