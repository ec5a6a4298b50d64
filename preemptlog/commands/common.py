"""Options shared by several commands (one definition, reused)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from ..render import OutputFormat


def default_format(output: str | None) -> OutputFormat:
    env = os.environ.get("PREEMPTLOG_FORMAT")
    if env:
        try:
            return OutputFormat(env)
        except ValueError:
            from ..errors import UsageError

            raise UsageError(
                f"PREEMPTLOG_FORMAT={env!r} is not a format", hint="one of " + ", ".join(f.value for f in OutputFormat)
            ) from None
    if output and output != "-":
        ext = Path(output).suffix.lower()
        return {
            ".json": OutputFormat.json,
            ".ndjson": OutputFormat.ndjson,
            ".jsonl": OutputFormat.ndjson,
            ".csv": OutputFormat.csv,
            ".parquet": OutputFormat.parquet,
            ".txt": OutputFormat.table,
        }.get(ext, OutputFormat.ndjson)
    return OutputFormat.table if sys.stdout.isatty() else OutputFormat.ndjson


PathsArg = Annotated[
    list[str],
    typer.Argument(
        help="vLLM log files, incident bundle folders or archives (.tar.gz, .zip), or - for standard input.",
        show_default=False,
        metavar="PATH",
    ),
]
FormatOpt = Annotated[
    OutputFormat | None,
    typer.Option(
        "--format",
        "-f",
        help="Output format. Default: table on a terminal, ndjson otherwise (or from -o's extension); "
        "env PREEMPTLOG_FORMAT.",
        case_sensitive=False,
    ),
]
OutputOpt = Annotated[
    str | None,
    typer.Option(
        "--output",
        "-o",
        metavar="FILE",
        help="Write the data here (atomically) instead of standard output; - is stdout.",
    ),
]
YearOpt = Annotated[
    int | None,
    typer.Option(
        "--year",
        metavar="YEAR",
        min=1970,
        max=2200,
        help="Year of the first line of each log (vLLM timestamps have none). Default: inferred from full dates "
        "in the bundle, the gzip header or the file mtime.",
    ),
]
TzOpt = Annotated[
    str | None,
    typer.Option(
        "--tz",
        metavar="ZONE",
        help="Zone of timestamps that carry none (IANA name or +HH:MM). Default: this machine's zone.",
    ),
]
KindOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--kind",
        metavar="KIND",
        help="Only events of this kind (logged, reconstructed, interval, marker, record). Repeatable. "
        "(FILE=KIND still forces a file's kind, with a note: that is --file-kind now.)",
    ),
]
FileKindOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--file-kind",
        metavar="FILE=KIND",
        help="Force a file's kind (e.g. dmon.txt=dmon, notes.md=vllm-log) instead of sniffing it. Repeatable.",
    ),
]
FailOnOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--fail-on",
        metavar="COND",
        help="Exit with code 4 when a condition holds: any | count>N | rate>X (fraction or N%); unknown exits 6 "
        "when the count is not visible in the bundle. Repeatable.",
    ),
]
QuietOpt = Annotated[
    bool,
    typer.Option(
        "--quiet",
        "-q",
        help="No summary or progress on stderr (errors and warnings that set the exit code still show).",
    ),
]
DebugOpt = Annotated[bool, typer.Option("--debug", help="Show tracebacks for bug reports.")]
VerboseOpt = Annotated[
    bool,
    typer.Option(
        "--verbose",
        "-v",
        help="The full summary: every change, the count per source, pressure intervals, assumptions and notes "
        "(by default: the answer, the top change, where the count comes from, the cost and the warnings).",
    ),
]
NoPagerOpt = Annotated[
    bool,
    typer.Option("--no-pager", help="Never page the output on a terminal (also PAGER=cat)."),
]
NoColorOpt = Annotated[bool, typer.Option("--no-color", help="No colour on stderr (also NO_COLOR=1).")]
CsvSafeOpt = Annotated[
    bool, typer.Option("--csv-safe", help="Quote CSV cells that start with = + - @ so spreadsheets do not run them.")
]


OffsetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--offset",
        metavar="SOURCE=DURATION",
        help="Shift a source's clock before joining: KIND_OR_FILE=±DURATION, e.g. dmon=-2s, "
        "blocktable=+0.5s, vllm-log=1m, node1/dmon.txt=-1500ms. Repeatable.",
    ),
]
BeforeOpt = Annotated[
    float, typer.Option("--before", metavar="SECONDS", min=0.0, help="Evidence window: seconds before each event.")
]
AfterOpt = Annotated[
    float, typer.Option("--after", metavar="SECONDS", min=0.0, help="Evidence window: seconds after each event.")
]
LookbackOpt = Annotated[
    int | None,
    typer.Option(
        "--lookback-steps",
        metavar="STEPS",
        min=0,
        help="Scheduler steps to look back from the nearest step (the PREEMPTED line can come 1-3 steps late). "
        "Default: the rules threshold lookback_steps (3).",
    ),
]
RulesOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--rules",
        metavar="FILE",
        help="A TOML rules file overlaid on the shipped rules (same id replaces, new ids add, enabled=false "
        "switches off). Repeatable. See `preemptlog rules`.",
    ),
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--threshold",
        "--set",
        metavar="NAME=VALUE",
        help="Override a rules threshold (kv_ceiling=90, queue_cap=128, ...) or switch a rule "
        "(G2-batch-variance-dynamic.enabled=true). Repeatable. (--set, the old spelling, still works, with a "
        "note: in whatif --set is a vLLM setting.)",
    ),
]


def note_old_set(values: list[str] | None) -> None:
    """One line when the rules threshold was given with the old spelling ``--set`` (it means a vLLM
    setting in ``whatif``): the option is ``--threshold`` now."""
    import sys

    if values and any(a == "--set" or a.startswith("--set=") for a in sys.argv[1:]):
        sys.stderr.write("preemptlog: note: a rules threshold is --threshold NAME=VALUE now (--set still works)\n")


ColumnsOpt = Annotated[
    str | None,
    typer.Option(
        "--columns",
        metavar="COL,COL,...",
        help="Event columns to write, in this order, in every format (table: time, event, request, verdict, "
        "confidence, where, kind, n, mode). Default ndjson/csv: the compact set (README); json/parquet: all.",
    ),
]
WideOpt = Annotated[
    bool, typer.Option("--wide", help="Every column: the full evidence rows in ndjson/csv, every table column.")
]
NoHeaderOpt = Annotated[bool, typer.Option("--no-header", help="No header row (csv) or header lines (table).")]
SinceOpt = Annotated[
    str | None,
    typer.Option(
        "--since",
        metavar="TIME",
        help="Only events at or after TIME: ISO 8601, HH:MM[:SS] on the last line's day, or relative to the "
        "last line (-30m, -90s). Applied after the analysis.",
    ),
]
UntilOpt = Annotated[
    str | None, typer.Option("--until", metavar="TIME", help="Only events at or before TIME (as --since).")
]
GATE_NAMES = ("G1-kv-space", "G2-batch-variance", "G3-queue-overflow", "G4-prefix-conflict", "undetermined")


def complete_gate(incomplete: str) -> list[str]:
    """Shell completion of --gate: the gate ids starting with what was typed (G1 gives G1-kv-space)."""
    return [g for g in GATE_NAMES if g.lower().startswith(incomplete.lower())]


GateOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--gate",
        metavar="GATE",
        help="Only events of this gate (G1-kv-space, G1-kv or G1, ..., undetermined). Repeatable.",
        autocompletion=complete_gate,
    ),
]
RequestOpt = Annotated[
    list[str] | None, typer.Option("--request", metavar="REQUEST_ID", help="Only this request's events. Repeatable.")
]
MinConfidenceOpt = Annotated[
    str | None,
    typer.Option("--min-confidence", metavar="LEVEL", help="Only verdicts at least this confident: low, medium, high."),
]


def filters_from(*, kind, since, until, gate, request, min_confidence, file_kind=None):
    """(file kind overrides, the event Filters) from the shared filter options: ``--file-kind FILE=KIND``
    forces a file's kind, ``--kind KIND`` filters events; ``--kind FILE=KIND`` (the old spelling)
    still forces one, with a one-line note."""
    import sys

    from ..errors import UsageError
    from ..render.view import make_filters, split_kind_option

    overrides, kinds = split_kind_option(kind)
    if overrides:
        sys.stderr.write("preemptlog: note: --kind FILE=KIND is --file-kind FILE=KIND now (the old spelling works)\n")
    for item in file_kind or []:
        if "=" not in item:
            raise UsageError(f"--file-kind expects FILE=KIND, got {item!r}", hint="e.g. --file-kind dmon.txt=dmon")
        overrides.append(item)
    return overrides, make_filters(
        since=since, until=until, gate=gate, request=request, kinds=kinds, min_confidence=min_confidence
    )


_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "": 1.0}


def parse_duration(text: str) -> float:
    """``-2s``, ``+1.5s``, ``500ms``, ``-1m``, ``2`` (seconds) -> seconds."""
    import re

    m = re.fullmatch(r"\s*([+-]?\d+(?:\.\d+)?)\s*(us|ms|s|min|m|h)?\s*", text)
    if not m:
        raise ValueError(text)
    return float(m.group(1)) * _UNITS[m.group(2) or ""]


def parse_offsets(items: list[str] | None) -> dict[str, float]:
    """``--offset KIND_OR_FILE=±DURATION`` pairs -> {kind or file: seconds}."""
    from ..errors import UsageError

    out: dict[str, float] = {}
    for item in items or []:
        if "=" not in item:
            raise UsageError(f"--offset expects KIND_OR_FILE=DURATION, got {item!r}", hint="e.g. --offset dmon=-2s")
        key, value = item.rsplit("=", 1)
        try:
            out[key.strip()] = parse_duration(value)
        except ValueError:
            raise UsageError(
                f"--offset {item!r}: {value!r} is not a duration", hint="e.g. -2s, +1.5s, 500ms, -1m"
            ) from None
    return out


def analyze_options(
    *,
    year,
    tz,
    kind,
    offset,
    before,
    after,
    lookback_steps,
    rules,
    set_,
    debug,
):
    """The shared analysis options of analyze / explain / report, as the library takes them."""
    from ..analysis import AnalyzeOptions

    note_old_set(set_)

    return AnalyzeOptions(
        year=year,
        tz=tz,
        kinds=kind,
        offsets=parse_offsets(offset),
        debug=debug,
        before=before,
        after=after,
        lookback_steps=lookback_steps,
        rules_files=list(rules or []),
        sets=list(set_ or []),
    )
