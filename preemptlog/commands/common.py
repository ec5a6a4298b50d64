"""Options shared by several commands (one definition, reused)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..render import OutputFormat

def default_format(output: Optional[str]) -> OutputFormat:
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
    ),
]
FormatOpt = Annotated[
    Optional[OutputFormat],
    typer.Option(
        "--format",
        "-f",
        help="Output format. Default: table on a terminal, ndjson otherwise (or from -o's extension); "
        "env PREEMPTLOG_FORMAT.",
        case_sensitive=False,
    ),
]
OutputOpt = Annotated[
    Optional[str],
    typer.Option("--output", "-o", help="Write the data here (atomically) instead of standard output; - is stdout."),
]
YearOpt = Annotated[
    Optional[int],
    typer.Option(
        "--year",
        min=1970,
        max=2200,
        help="Year of the first line of each log (vLLM timestamps have none). Default: inferred from full dates "
        "in the bundle, the gzip header or the file mtime.",
    ),
]
TzOpt = Annotated[
    Optional[str],
    typer.Option("--tz", help="Zone of timestamps that carry none (IANA name or +HH:MM). Default: this machine's zone."),
]
KindOpt = Annotated[
    Optional[list[str]],
    typer.Option("--kind", help="Force a file's kind: FILE=KIND (e.g. dmon.txt=dmon). Repeatable."),
]
FailOnOpt = Annotated[
    Optional[list[str]],
    typer.Option(
        "--fail-on",
        help="Exit with code 4 when a condition holds: any | count>N | rate>X (fraction or N%). Repeatable.",
    ),
]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No summary on stderr (errors still show).")]
DebugOpt = Annotated[bool, typer.Option("--debug", help="Show tracebacks for bug reports.")]
NoColorOpt = Annotated[bool, typer.Option("--no-color", help="No colour on stderr (also NO_COLOR=1).")]
CsvSafeOpt = Annotated[
    bool, typer.Option("--csv-safe", help="Quote CSV cells that start with = + - @ so spreadsheets do not run them.")
]


