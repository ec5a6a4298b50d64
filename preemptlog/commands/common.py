"""Options shared by several commands (one definition, reused)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from ..render import OutputFormat


def command_group(name: str, help: str) -> typer.Typer:
    """A command with subcommands (fleet, export): help with -h too, plain text, the list when bare."""
    return typer.Typer(
        name=name,
        help=help,
        no_args_is_help=True,
        rich_markup_mode=None,
        context_settings={"help_option_names": ["-h", "--help"]},
    )


def default_format(output: str | None) -> OutputFormat:
    env = os.environ.get("PREEMPTLOG_FORMAT")
    if env:
        try:  # as --format reads it: JSON is json
            return OutputFormat(env.strip().lower())
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
KindOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--kind",
        metavar="KIND",
        help="Only events of this kind (logged, reconstructed, interval, marker, record). Repeatable. "
        "(FILE=KIND still forces a file's kind, with a note: that is --file-kind now.)",
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


ColumnsOpt = Annotated[
    str | None,
    typer.Option(
        "--columns",
        metavar="COL,COL,...",
        help="Event columns to write, in this order, in every format (table: time, event, request, verdict, "
        "confidence, where, kind, n, mode; with --each also server). Default ndjson/csv: the compact set "
        "(docs/output.md); json/parquet: all.",
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

    from ..render.view import make_filters, split_kind_option

    overrides, kinds = split_kind_option(kind)
    if overrides:
        sys.stderr.write("preemptlog: note: --kind FILE=KIND is --file-kind FILE=KIND now (the old spelling works)\n")
        check_file_kinds(overrides, "--kind")
    overrides += file_kinds(file_kind)
    return overrides, make_filters(
        since=since, until=until, gate=gate, request=request, kinds=kinds, min_confidence=min_confidence
    )


def file_kinds(items: list[str] | None) -> list[str]:
    """``--file-kind FILE=KIND`` values, checked: the ``=`` and the kind (:func:`check_file_kinds`)."""
    from ..errors import UsageError

    for item in items or []:
        if "=" not in item:
            raise UsageError(f"--file-kind expects FILE=KIND, got {item!r}", hint="e.g. --file-kind dmon.txt=dmon")
    check_file_kinds(items, "--file-kind")
    return list(items or [])


def check_file_kinds(items: list[str] | None, option: str) -> None:
    """Each ``FILE=KIND`` names a known source kind (or ``ignore``), else a usage error naming the
    option it came with (``--file-kind``, or ``--kind``, its old spelling): the pipeline checks them
    again (pipeline.bundle.parse_kind_overrides), but it cannot tell which option the user typed."""
    from .. import engines, sources
    from ..errors import UsageError

    engines.registered()  # every engine's log kind is a source kind once the engines are loaded
    known = set(sources.kinds()) | {"ignore"}  # as parse_kind_overrides
    for item in items or []:
        kind = item.rsplit("=", 1)[1]
        if kind not in known:
            raise UsageError(f"{option} {item!r}: unknown kind {kind!r}", hint="known: " + ", ".join(sorted(known)))


_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "": 1.0}


def parse_duration(text: str) -> float:
    """``-2s``, ``+1.5s``, ``500ms``, ``-1m``, ``2`` (seconds) -> seconds."""
    import re

    m = re.fullmatch(r"\s*([+-]?\d+(?:\.\d+)?)\s*(us|ms|s|min|m|h)?\s*", text)
    if not m:
        raise ValueError(text)
    return float(m.group(1)) * _UNITS[m.group(2) or ""]
