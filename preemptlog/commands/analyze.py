"""``preemptlog analyze``: list every preemption."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from ..errors import ExitCode
from .common import (
    ColumnsOpt,
    CsvSafeOpt,
    DebugOpt,
    FailOnOpt,
    FormatOpt,
    GateOpt,
    KindOpt,
    MinConfidenceOpt,
    NoColorOpt,
    NoHeaderOpt,
    NoPagerOpt,
    OutputOpt,
    PathsArg,
    QuietOpt,
    RequestOpt,
    SinceOpt,
    UntilOpt,
    VerboseOpt,
    WideOpt,
    default_format,
    filters_from,
)
from .options import ANALYSIS, AnalysisArgs, analysis_options
from .runner import guarded, imports_done, progress, stderr_console, writing_to

EachOpt = Annotated[
    bool,
    typer.Option(
        "--each",
        help="Analyse every server (or every subfolder, or every input) separately; one combined output "
        "with a 'server' column naming each.",
    ),
]


def register(app: typer.Typer) -> None:
    app.command(short_help="List every preemption: time, request, gate, file:line.")(analyze)


@analysis_options()
def analyze(
    paths: PathsArg,
    format: FormatOpt = None,
    output: OutputOpt = None,
    analysis: AnalysisArgs = ANALYSIS,  # the analysis options (options.py), here in --help
    fail_on: FailOnOpt = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    gate: GateOpt = None,
    request: RequestOpt = None,
    kind: KindOpt = None,
    min_confidence: MinConfidenceOpt = None,
    columns: ColumnsOpt = None,
    wide: WideOpt = False,
    no_header: NoHeaderOpt = False,
    csv_safe: CsvSafeOpt = False,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
    no_pager: NoPagerOpt = False,
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
    'Preemptions: N' stats, the Prometheus counter between two /metrics
    scrapes, or one /metrics reading: the preemptions since the engine start,
    not placed in time), marker (any line with the word PREEMPTED), record (a
    preempt record of preemptlog's vLLM plugin: the events where they exist).
    A log that cannot show a count (a stock V1 log) says "not visible", never 0.

    Each event gets a verdict: the gate (G1-kv-space, G2-batch-variance,
    G3-queue-overflow, G4-prefix-conflict or undetermined), the evidence cited
    with file:line, contributing factors and the changes to make, computed from
    the incident (--rules, --threshold; `preemptlog rules`). On a stock upstream log
    vLLM's own code settles the gate (G1 KV space: V1 preempts only when a
    KV-block allocation fails), and the guide's other gates are "not in
    upstream vLLM"; on the field guide's patched scheduler the four gates are
    judged on its evidence.
    ndjson and csv rows hold the compact columns (event, time, kind, request,
    source, line, gate, sub-kind, rule, confidence); --wide adds the verdict's
    evidence and every evidence column of the event's window (docs/sources.md;
    --before/--after seconds, --lookback-steps, --offset), as json and parquet
    always do; --columns picks. Filters (--since, --until, --gate, --request,
    --kind, --min-confidence) apply after the analysis.
    """

    def body() -> int:
        from ..analysis import analyze as run
        from ..inputs.workspace import Workspace
        from ..outputs.outio import check_not_given, open_output
        from ..outputs.safe import neutralise
        from ..render import failon, write
        from ..render.each import SERVER
        from ..render.human import print_lines, render_lines, summary_lines, summary_width
        from ..render.view import apply_filters, output_columns, parse_columns, with_columns

        imports_done()
        conditions = failon.parse(fail_on)
        overrides, filters = filters_from(
            file_kind=analysis.file_kind,
            kind=kind,
            since=since,
            until=until,
            gate=gate,
            request=request,
            min_confidence=min_confidence,
        )
        wanted = parse_columns(columns)
        fmt = format or default_format(output)
        if fmt.binary and (output in (None, "-")) and sys.stdout.isatty():
            from ..errors import UsageError

            raise UsageError(f"--format {fmt.value} is binary; use -o FILE or a pipe")
        check_not_given(output, paths)
        with Workspace() as ws:
            options = analysis.options(debug=debug, kinds=overrides)
            if each:
                return _each(
                    paths,
                    options,
                    ws,
                    fmt,
                    output,
                    csv_safe,
                    quiet,
                    no_color,
                    conditions,
                    verbose=verbose,
                    filters=filters,
                    columns=output_columns(fmt.value, wanted, wide),
                    table_columns=wanted,
                    wide=wide,
                )
            if wanted and SERVER in wanted:  # --each's column: without it the bundle is one incident
                from ..errors import UsageError

                raise UsageError(
                    f"--columns: {SERVER} is a column of --each only (each server analysed on its own, its "
                    "name on every row); without --each the bundle is analysed as one incident",
                    hint="add --each, or leave server out of --columns",
                )
            with progress(quiet, no_color):
                full = run(paths, options, workspace=ws)
            result = apply_filters(full, filters)
            data = with_columns(result, output_columns(fmt.value, wanted, wide))
            console = stderr_console(no_color) if not quiet else None
            units = _incidents(paths, full, options, ws) if console and result is full else None
            head_lines, rest = (
                summary_lines(result, width=summary_width(console), verbose=verbose, units=units)
                if console
                else ([], [])
            )
            if verbose and console is not None:  # which log pass read the logs (compiled or polars), after the answer
                from ..render.human import _lines
                from ..sources import fastscan, vllm_log

                rest += _lines(f"log pass: {fastscan.status(vllm_log.fast_spec())}", summary_width(console), indent=2)
            # On a terminal the answer comes first: above the table (at the top of the paged text).
            first = (
                not quiet
                and fmt.value == "table"
                and output in (None, "-")
                and sys.stdout.isatty()
                and sys.stderr.isatty()
            )
            from ..render.timeline import terminal_lines

            color = bool(console and console.is_terminal and not console.no_color)
            head = render_lines(head_lines, color=color) if first and console else b""
            # The rest of the summary and the timeline follow the table; paged with it (the answer at
            # the top) when together they are taller than the screen.
            tail = render_lines(rest + terminal_lines(result, console), color=color) if first and console else b""
            if console is not None and not first:  # the answer before the data, in a pipe too
                _check_columns(data, fmt.value, wanted, wide)  # a bad --columns is the only output (exit 2)
                print_lines(head_lines, console)
                console.file.flush()
            with (
                writing_to(output),
                open_output(
                    output, protect=result.bundle.originals, terminal_text=fmt.value in ("json", "ndjson", "csv")
                ) as out,
            ):
                write(
                    data,
                    fmt,
                    out,
                    csv_safe=csv_safe,
                    table_columns=wanted,
                    wide=wide,
                    header=not no_header,
                    no_color=no_color,
                    head=head,
                    head_out=sys.stderr.buffer,
                    pager=not no_pager,
                    tail=tail,
                )
            summary = result.summary()
            if console is not None and not first:
                from ..render.timeline import print_timeline

                print_lines(rest, console)
                print_timeline(result, console)  # only on a terminal
            # the incidents whose own counts are not visible: `unknown` holds, and a count condition that
            # does not hold is judged on a lower bound
            asks = _asks_unknown(conditions) or any(c.what in ("any", "count", "rate") for c in conditions)
            hidden = _not_visible(paths, full, options, ws, units) if asks else None
        code, lines = failon.outcome(conditions, summary, not_visible=hidden)
        if quiet and result.partial and code is None and summary["warnings"]:  # -q keeps what explains exit 5
            w = summary["warnings"]
            more = f" (and {len(w) - 1} more warning(s): run without -q to see them)" if len(w) > 1 else ""
            lines = [f"preemptlog: warning: {' '.join(w[0].split())}{more}"] + lines
        for line in lines:  # even with -q: they explain the exit code
            sys.stderr.write(neutralise(line) + "\n")
        if code is not None:
            return code
        if result.partial:
            return ExitCode.PARTIAL
        return ExitCode.OK

    guarded(debug, body)


def _check_columns(data, fmt: str, wanted, wide: bool) -> None:
    """Raise the usage error of an unknown --columns name before anything is printed."""
    import dataclasses

    if not wanted:
        return
    if fmt == "table":
        from ..render.table import resolve_columns

        resolve_columns(wanted, wide)
    elif data.events.height:
        from ..render import event_rows

        event_rows(dataclasses.replace(data, events=data.events.head(1)))


def _incidents(paths, full, options, ws):
    """A bundle of several incidents (servers, logs that do not meet in time): each analysed on its own,
    for the summary's one line each (at most human.MAX_UNITS; --each gives them all); None for one."""
    from ..analysis import analyze as run
    from ..render.each import split_by_incident
    from ..render.human import MAX_UNITS

    if not full.summary().get("incidents"):
        return None
    units = split_by_incident(paths, full)
    most = 3 * MAX_UNITS  # analysed to find the ones with preemptions or pressure (listed first)
    done = [(u.name, run(u.paths, u.options(options), workspace=ws)) for u in units[:most]]
    return done + [(u.name, None) for u in units[most:]]


def _asks_unknown(conditions) -> bool:
    return any(c.what == "unknown" for c in conditions)


def _not_visible(paths, full, options, ws, done=None) -> list[str]:
    """The incidents of a bundle of several (summary ``incidents``) whose own counts are not visible,
    each analysed on its own as the summary's one line each (``done``: those analysed already, by
    :func:`_incidents`; the others without the rules, which the count does not depend on). The
    bundle's total is not known when one of them cannot show its count: ``--fail-on unknown`` holds.
    The files of no server's log that meet none in time (``(other sources)``: dmon, records) are no
    server's count."""
    import dataclasses

    from ..analysis import analyze as run
    from ..render.each import split_by_incident
    from ..sources import LOG_KINDS

    if not full.summary().get("incidents"):
        return []
    known = {name: a for name, a in done or [] if a is not None}
    quick = dataclasses.replace(options, rules=False)
    out = []
    for u in split_by_incident(paths, full):
        a = known.get(u.name) or run(u.paths, u.options(quick), workspace=ws)
        if a.summary().get("count_visible") is False and any(f.kind in LOG_KINDS for f in a.bundle.files):
            out.append(u.name)
    return out


def _each(
    paths,
    options,
    ws,
    fmt,
    output,
    csv_safe,
    quiet,
    no_color,
    conditions,
    *,
    verbose=False,
    filters=None,
    columns=None,
    table_columns=None,
    wide=False,
) -> int:
    """--each: every unit analysed on its own (each.py), one combined output; the exit code of the
    units' outcomes combined as one run's (failon.decide: FAIL_ON over NOT_VISIBLE over PARTIAL).
    Filters and the column choice apply to every unit, as without --each."""
    from rich.markup import escape

    from ..outputs.outio import open_output
    from ..outputs.safe import neutralise
    from ..render import failon
    from ..render.each import event_columns, run_each, write_each
    from ..render.each import table_columns as each_table_columns
    from ..render.human import print_summary
    from ..render.view import apply_filters, with_columns
    from ..sources import LOG_KINDS

    if fmt.value == "table" and table_columns:
        each_table_columns(table_columns, wide)  # an unknown --columns name is a usage error before the analysis
    full = run_each(paths, options, ws)
    # --columns may name --each's own column (server): the units' event rows hold the others
    results = [(name, with_columns(apply_filters(a, filters), event_columns(columns))) for name, a in full]
    protect = [p for _, a in results for p in a.bundle.originals]
    with (
        writing_to(output),
        open_output(output, protect=protect, terminal_text=fmt.value in ("json", "ndjson", "csv")) as out,
    ):
        write_each(
            results, fmt, out, csv_safe=csv_safe, columns=columns if fmt.value != "table" else table_columns, wide=wide
        )
    # A unit of no server's log (dmon, records) beside units of logs has no count to hide, as in one run.
    logs = [any(f.kind in LOG_KINDS for f in a.bundle.files) for _, a in full]
    judged = []
    for (name, a), (_, whole), has_log in zip(results, full, logs, strict=True):
        if not quiet:
            console = stderr_console(no_color)
            console.print(f"[bold]== server {escape(name)}[/bold]", markup=True, highlight=False)
            print_summary(a, console, verbose=verbose)
        # A unit that is itself several incidents (an input of several servers): each one's count, as one run.
        hidden = _not_visible([name], whole, options, ws) if _asks_unknown(conditions) else None
        server = has_log or not any(logs)
        judged.append((name, failon.judge(conditions, a.summary(), not_visible=hidden, where=name, server=server)))
    code, lines = failon.decide(judged)
    for line in lines:  # even with -q: they explain the exit code
        sys.stderr.write(neutralise(line) + "\n")
    if code is not None:
        return code
    if any(a.partial for _, a in results):
        return ExitCode.PARTIAL
    return ExitCode.OK
