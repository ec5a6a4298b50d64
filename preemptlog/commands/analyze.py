"""``preemptlog analyze``: list every preemption."""

from __future__ import annotations

import sys

import typer

from ..cli import guarded, stderr_console
from ..errors import ExitCode
from .common import (
    CsvSafeOpt,
    DebugOpt,
    FailOnOpt,
    FormatOpt,
    KindOpt,
    NoColorOpt,
    OutputOpt,
    PathsArg,
    QuietOpt,
    TzOpt,
    YearOpt,
    default_format,
)


def register(app: typer.Typer) -> None:
    app.command()(analyze)


def analyze(
    paths: PathsArg,
    format: FormatOpt = None,
    output: OutputOpt = None,
    year: YearOpt = None,
    tz: TzOpt = None,
    kind: KindOpt = None,
    fail_on: FailOnOpt = None,
    csv_safe: CsvSafeOpt = False,
    quiet: QuietOpt = False,
    no_color: NoColorOpt = False,
    debug: DebugOpt = False,
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
    'Preemptions: N' stats), marker (any line with the word PREEMPTED).
    """

    def body() -> int:
        from .. import failon
        from ..analysis import AnalyzeOptions, analyze as run
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
            result = run(paths, AnalyzeOptions(year=year, tz=tz, kinds=kind, debug=debug), workspace=ws)
            with open_output(output) as out:
                write(result, fmt, out, csv_safe=csv_safe)
            summary = result.summary()
            if not quiet:
                print_summary(result, stderr_console(no_color))
        failed = failon.failed(conditions, summary)
        if failed:
            sys.stderr.write(f"preemptlog: --fail-on {', '.join(failed)}: condition met\n")
            return ExitCode.FAIL_ON
        if result.partial:
            return ExitCode.PARTIAL
        return ExitCode.OK

    guarded(debug, body)


