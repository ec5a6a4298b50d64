"""``preemptlog report``: an offline HTML incident report with a shared-time-axis timeline."""

from __future__ import annotations

from typing import Annotated

import typer

from ..errors import ExitCode
from .common import (
    DebugOpt,
    GateOpt,
    KindOpt,
    MinConfidenceOpt,
    NoColorOpt,
    PathsArg,
    QuietOpt,
    RequestOpt,
    SinceOpt,
    UntilOpt,
    filters_from,
)
from .options import ANALYSIS, AnalysisArgs, analysis_options
from .runner import guarded, stderr_console, writing_to


def register(app: typer.Typer) -> None:
    app.command(short_help="Write an offline HTML incident report.")(report)


@analysis_options()
def report(
    paths: PathsArg,
    output: Annotated[
        str | None,
        typer.Option(
            "--output",
            "-o",
            metavar="FILE",
            help="Write the HTML here (atomically); - is stdout. Required on a terminal.",
        ),
    ] = None,
    title: Annotated[
        str | None, typer.Option("--title", help="Page title. Default: preemptlog incident report.")
    ] = None,
    analysis: AnalysisArgs = ANALYSIS,  # the analysis options (options.py), here in --help
    since: SinceOpt = None,
    until: UntilOpt = None,
    gate: GateOpt = None,
    request: RequestOpt = None,
    kind: KindOpt = None,
    min_confidence: MinConfidenceOpt = None,
    quiet: QuietOpt = False,
    no_color: NoColorOpt = False,
    debug: DebugOpt = False,
) -> None:
    """Write one self-contained HTML incident report that opens offline.

    \b
    Examples:
      preemptlog report incident/ -o report.html
      preemptlog report vllm.log dmon.txt blocktable.jsonl --tz UTC -o report.html
      preemptlog report incident.tar.gz -o - | gzip > report.html.gz

    The page holds a timeline on one shared, zoomable time axis (KV cache
    usage, running / waiting / swapped requests, GPU memory and SM use per GPU
    from dmon, free blocks and the largest free run from block records, and
    every preemption as a marker coloured by gate; estimated times drawn
    open), the summary and its assumptions, the configuration in force, and
    one card per event with its verdict, evidence (file:line), gates that
    could not be evaluated, contributing factors and fixes (one card per
    group of similar events when there are many). plotly.js is inlined (about
    5 MB); the page makes no network request.
    """

    def body() -> int:
        import sys

        from ..analysis import analyze as run
        from ..errors import UsageError
        from ..inputs.workspace import Workspace
        from ..outputs.outio import check_not_given, open_output
        from ..render.view import apply_filters
        from .runner import progress

        overrides, filters = filters_from(
            file_kind=analysis.file_kind,
            kind=kind,
            since=since,
            until=until,
            gate=gate,
            request=request,
            min_confidence=min_confidence,
        )
        if output is None and sys.stdout.isatty():
            raise UsageError("the report is an HTML file; give -o FILE (or -o - to write it to standard output)")
        try:
            import plotly  # noqa: F401
        except ImportError:
            raise UsageError("preemptlog report needs the plotly package", hint="pip install 'plotly>=6'") from None
        check_not_given(output, paths)
        with Workspace() as ws:
            options = analysis.options(debug=debug, kinds=overrides)
            with progress(quiet, no_color):
                result = apply_filters(run(paths, options, workspace=ws), filters)
            from ..report import render_html

            doc = render_html(result, title=title).encode("utf-8")
            # Never over an input file; on a terminal (-o -), control characters are shown as escapes.
            with writing_to(output), open_output(output, protect=result.bundle.originals, terminal_text=True) as out:
                out.write(doc)
        if not quiet:
            from ..outputs.safe import markup

            where = "standard output" if output in (None, "-") else output
            s = result.summary()
            console = stderr_console(no_color)
            console.print(f"[bold]{markup(s['headline'])}[/bold]")
            console.print(f"wrote {markup(where)}: {len(doc) / 1e6:.1f} MB, {result.events.height} preemption event(s)")
        return ExitCode.PARTIAL if result.partial else ExitCode.OK

    guarded(debug, body)
