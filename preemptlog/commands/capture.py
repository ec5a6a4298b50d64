"""``preemptlog capture``: scrape a live vLLM /metrics (and follow its log) into an incident bundle."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .common import DebugOpt, QuietOpt
from .runner import _say, guarded, writing_into


def register(app: typer.Typer) -> None:
    app.command(short_help="Scrape a live server's /metrics (and follow its log) into a bundle.")(capture)


def capture(
    output: Annotated[
        Path,
        typer.Option(
            "--output", "-o", metavar="DIR", help="Folder to write the bundle into (created; existing files are kept)."
        ),
    ],
    metrics: Annotated[
        str | None,
        typer.Option(
            "--metrics",
            metavar="URL",
            help="The server's /metrics URL, e.g. http://127.0.0.1:8000/metrics.",
            show_default=False,
        ),
    ] = None,
    every: Annotated[
        str, typer.Option("--every", metavar="DURATION", help="Time between scrapes (>= 1s), e.g. 10s, 500ms, 1m.")
    ] = "10s",
    for_: Annotated[
        str | None,
        typer.Option(
            "--for",
            metavar="DURATION",
            help="Stop after this long (e.g. 30m); default: until Ctrl-C.",
            show_default=False,
        ),
    ] = None,
    log: Annotated[
        Path | None,
        typer.Option(
            "--log",
            metavar="FILE",
            help="A log file to follow: what is appended to it is copied into the bundle.",
            show_default=False,
        ),
    ] = None,
    quiet: QuietOpt = False,
    debug: DebugOpt = False,
) -> None:
    """Capture an incident: scrape /metrics into DIR/metrics-<epoch>.prom every --every, follow a log.

    Each scrape is written atomically; a failed scrape is one line on stderr, the next attempt backs
    off, and the span is recorded as a gap in DIR/capture.jsonl, which `preemptlog analyze DIR`
    reports. Stops on Ctrl-C, SIGINT or SIGTERM (also when started in the background of a script,
    where SIGINT arrives ignored) or after --for; then run `preemptlog analyze DIR`.
    Exit 0, or 5 when some scrapes failed, 3 when none succeeded and no log line was copied
    or when the --log file was not there at any time.
    """

    def body() -> int:
        from ..capture.scrape import Capture
        from ..errors import ExitCode, InputError, OutputError, UsageError
        from .common import parse_duration

        if not metrics and log is None:
            raise UsageError("nothing to capture", hint="give --metrics URL and/or --log FILE")
        try:
            step = parse_duration(every)
        except ValueError:
            raise UsageError(f"--every {every!r} is not a duration", hint="e.g. 10s, 500ms, 1m") from None
        if step < 1.0:
            raise UsageError(f"--every {every}: at least 1s", hint="scrape files are named by the second")
        limit = None
        if for_ is not None:
            try:
                limit = parse_duration(for_)
            except ValueError:
                raise UsageError(f"--for {for_!r} is not a duration", hint="e.g. 30s, 10m, 2h") from None
            if limit <= 0:
                raise UsageError(f"--for {for_}: must be positive")
        if metrics and not metrics.startswith(("http://", "https://")):
            raise UsageError(f"--metrics {metrics!r}: not an http(s) URL", hint="e.g. http://127.0.0.1:8000/metrics")
        if output.exists() and not output.is_dir():
            raise OutputError(f"-o {output}: exists and is not a folder")
        if log is not None:
            if log.exists() and log.is_dir():
                raise UsageError(f"--log {log}: is a folder")
            if log.resolve().parent == output.resolve():
                raise UsageError(f"--log {log}: is inside the output folder", hint="capture into another folder")
        try:
            output.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OutputError(f"-o {output}: cannot create ({exc.strerror or exc})") from None

        def say(line: str) -> None:
            if not quiet or "error" in line:
                _say(line)

        what = [f"{metrics} every {step:g}s" if metrics else None, f"following {log}" if log else None]
        say(
            f"preemptlog: capturing {', '.join(w for w in what if w)} into {output} "
            f"({'for ' + for_ if for_ else 'Ctrl-C stops'})"
        )
        # what it writes (capture.jsonl, the scrapes, the copied log) is in -o: a write that fails there
        # (the folder removed, a name taken by a folder, a full disk) is an output error, exit 2
        with writing_into(output):
            cap = Capture(output, url=metrics, every=step, duration=limit, log=log, say=say)
            restore = cap.handle_signals()
            try:
                stats = cap.run()
            finally:
                restore()
        failed: InputError | None = None
        if stats.log_never_found and stats.scrapes == 0:
            failed = InputError(
                f"--log {log}: not there at any time during the capture: nothing was captured",
                hint="give the path the server writes its log to (e.g. the file of its stdout redirect)",
            )
        elif metrics and stats.scrapes == 0 and stats.log_bytes == 0:
            failed = InputError(
                f"{metrics}: no scrape succeeded ({stats.failures} attempt(s))",
                hint=f"the gaps are in {output}/capture.jsonl",
            )
        # the counts always; the next step only when the bundle holds something to analyze (before: the
        # line said "next: preemptlog analyze DIR" right before the error that nothing was captured)
        counts = (
            f"preemptlog: capture: {stats.scrapes} scrape(s), {stats.failures} failed ({stats.gaps} gap(s)), "
            f"{stats.log_bytes} byte(s) of log copied"
        )
        say(counts if failed else f"{counts}; next: preemptlog analyze {output}")
        if failed:
            raise failed
        return int(ExitCode.PARTIAL if stats.failures else ExitCode.OK)

    guarded(debug, body)
