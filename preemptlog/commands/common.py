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


OffsetOpt = Annotated[
    Optional[list[str]],
    typer.Option(
        "--offset",
        help="Shift a source's clock before joining: KIND_OR_FILE=±DURATION, e.g. dmon=-2s, "
        "blocktable=+0.5s, vllm-log=1m, node1/dmon.txt=-1500ms. Repeatable.",
    ),
]
BeforeOpt = Annotated[
    float, typer.Option("--before", min=0.0, help="Evidence window: seconds before each event.")
]
AfterOpt = Annotated[float, typer.Option("--after", min=0.0, help="Evidence window: seconds after each event.")]
LookbackOpt = Annotated[
    Optional[int],
    typer.Option(
        "--lookback-steps",
        min=0,
        help="Scheduler steps to look back from the nearest step (the PREEMPTED line can come 1-3 steps late). "
        "Default: the rules threshold lookback_steps (3).",
    ),
]
RulesOpt = Annotated[
    Optional[list[str]],
    typer.Option(
        "--rules",
        help="A TOML rules file overlaid on the shipped rules (same id replaces, new ids add, enabled=false "
        "switches off). Repeatable. See `preemptlog rules`.",
    ),
]
SetOpt = Annotated[
    Optional[list[str]],
    typer.Option(
        "--set",
        help="Override a rules threshold (kv_ceiling=90, queue_cap=128, ...) or switch a rule "
        "(G2-batch-variance-dynamic.enabled=true). Repeatable.",
    ),
]

_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "": 1.0}


def parse_duration(text: str) -> float:
    """``-2s``, ``+1.5s``, ``500ms``, ``-1m``, ``2`` (seconds) -> seconds."""
    import re

    m = re.fullmatch(r"\s*([+-]?\d+(?:\.\d+)?)\s*(us|ms|s|min|m|h)?\s*", text)
    if not m:
        raise ValueError(text)
    return float(m.group(1)) * _UNITS[m.group(2) or ""]


def parse_offsets(items: Optional[list[str]]) -> dict[str, float]:
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
