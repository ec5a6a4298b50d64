"""``preemptlog analyze``: list every preemption."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from ..cli import guarded, stderr_console
from ..errors import ExitCode
from .common import (
    analyze_options,
    AfterOpt,
    BeforeOpt,
    CsvSafeOpt,
    DebugOpt,
    FailOnOpt,
    FormatOpt,
    KindOpt,
    LookbackOpt,
    RulesOpt,
    SetOpt,
    NoColorOpt,
    OffsetOpt,
    OutputOpt,
    PathsArg,
    QuietOpt,
    TzOpt,
    YearOpt,
    default_format,
)


EachOpt = Annotated[
    bool,
    typer.Option(
        "--each",
        help="Analyse every server (or every subfolder, or every input) separately; one combined output "
        "with a 'server' column naming each.",
    ),
]


def register(app: typer.Typer) -> None:
    app.command()(analyze)


def analyze(
    paths: PathsArg,
    format: FormatOpt = None,
    output: OutputOpt = None,
    year: YearOpt = None,
    tz: TzOpt = None,
    kind: KindOpt = None,
    offset: OffsetOpt = None,
    before: BeforeOpt = 10.0,
    after: AfterOpt = 2.0,
    lookback_steps: LookbackOpt = None,
    rules: RulesOpt = None,
    set_: SetOpt = None,
    fail_on: FailOnOpt = None,
    csv_safe: CsvSafeOpt = False,
    quiet: QuietOpt = False,
    no_color: NoColorOpt = False,
    debug: DebugOpt = False,
    each: EachOpt = False,
) -> None:
    """List every preemption in vLLM logs, with time, request, kind and file:line.

    \b
    Examples:
      preemptlog analyze vllm.log
      preemptlog analyze incident/ --format json -o report.json
      kubectl logs --timestamps pod/vllm | preemptlog analyze - --fail-on any
      preemptlog analyze vllm.log.2.gz vllm.log.1 vllm.log --year 2025 --tz Europe/Berlin

    Event kinds: logged (a V0 warning line), reconstructed (V0 logs 1 in 50;
    the rest are rebuilt from total_num_cumulative_preemption), interval (V1
    'Preemptions: N' stats, or the Prometheus counter between two /metrics
    scrapes), marker (any line with the word PREEMPTED), record (a block-table
    preempt record, only when the logs show none).

    Each event gets a verdict: the gate (G1-kv-space, G2-batch-variance,
    G3-queue-overflow, G4-prefix-conflict or undetermined), the evidence cited
    with file:line, the gates that could not be evaluated, contributing factors
    and fixes computed from the incident (--rules, --set; `preemptlog rules`).
    Machine formats add the verdict and the evidence columns of each event's
    window (docs/sources.md): --before/--after seconds, --lookback-steps, --offset.
    """

    def body() -> int:
        from .. import failon
        from ..analysis import analyze as run
        from ..bundle import Workspace
        from ..outio import open_output
        from ..render import write
        from ..render.human import print_summary

        conditions = failon.parse(fail_on)
        fmt = format or default_format(output)
        if fmt.binary and (output in (None, "-")) and sys.stdout.isatty():
            from ..errors import UsageError

            raise UsageError(f"--format {fmt.value} is binary; use -o FILE or a pipe")
        with Workspace() as ws:
            options = analyze_options(
                year=year, tz=tz, kind=kind, offset=offset, before=before, after=after,
                lookback_steps=lookback_steps, rules=rules, set_=set_, debug=debug,
            )
            if each:
                return _each(paths, options, ws, fmt, output, csv_safe, quiet, no_color, conditions)
            result = run(paths, options, workspace=ws)
            with open_output(
                output, protect=result.bundle.originals, terminal_text=fmt.value in ("json", "ndjson", "csv")
            ) as out:
                write(result, fmt, out, csv_safe=csv_safe)
            summary = result.summary()
            if not quiet:
                from ..render.timeline import print_timeline

                console = stderr_console(no_color)
                print_summary(result, console)
                print_timeline(result, console)  # only on a terminal
        failed = failon.failed(conditions, summary)
        if failed:
            sys.stderr.write(f"preemptlog: --fail-on {', '.join(failed)}: condition met\n")
            return ExitCode.FAIL_ON
        if result.partial:
            return ExitCode.PARTIAL
        return ExitCode.OK

    guarded(debug, body)


def _each(paths, options, ws, fmt, output, csv_safe, quiet, no_color, conditions) -> int:
    """--each: every unit analysed on its own (each.py), one combined output, the worst exit code."""
    from .. import failon
    from ..each import run_each, write_each
    from ..outio import open_output
    from ..render.human import print_summary

    results = run_each(paths, options, ws)
    protect = [p for _, a in results for p in a.bundle.originals]
    with open_output(output, protect=protect, terminal_text=fmt.value in ("json", "ndjson", "csv")) as out:
        write_each(results, fmt, out, csv_safe=csv_safe)
    failed: list[str] = []
    for name, a in results:
        if not quiet:
            console = stderr_console(no_color)
            console.print(f"[bold]== server {name}[/bold]", markup=True, highlight=False)
            print_summary(a, console)
        failed += [c for c in failon.failed(conditions, a.summary()) if c not in failed]
    if failed:
        sys.stderr.write(f"preemptlog: --fail-on {', '.join(failed)}: condition met\n")
        return ExitCode.FAIL_ON
    if any(a.partial for _, a in results):
        return ExitCode.PARTIAL
    return ExitCode.OK


