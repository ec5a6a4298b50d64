"""Output formats: one formatter per format, data to the output stream.

The human summary is rendered separately (render/human.py) to stderr.
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, Any, BinaryIO

if TYPE_CHECKING:
    from ..model.result import Analysis

# The frame every machine format writes (render/rows.py) imports polars: it is loaded on first
# use, so that importing OutputFormat (the CLI does, for --help) stays cheap.
_ROWS = ("SCHEMA_VERSION", "TIME_COLUMNS", "event_rows", "iso_expr", "write_parquet")


def __getattr__(name: str) -> Any:
    if name in _ROWS:
        from . import rows

        return getattr(rows, name)
    raise AttributeError(name)


class OutputFormat(str, Enum):
    table = "table"
    json = "json"
    ndjson = "ndjson"
    csv = "csv"
    parquet = "parquet"

    @property
    def binary(self) -> bool:
        return self is OutputFormat.parquet


def write(
    analysis: Analysis,
    fmt: OutputFormat,
    out: BinaryIO,
    *,
    csv_safe: bool = False,
    console_width: int | None = None,
    table_columns: list[str] | None = None,
    wide: bool = False,
    header: bool = True,
    no_color: bool = False,
    head: bytes = b"",
    head_out: BinaryIO | None = None,
    pager: bool = True,
    tail: bytes = b"",
) -> None:
    """Write the events in ``fmt``. Machine formats write the columns ``analysis.columns`` names (all
    when None: see view.output_columns); the table picks its own (``table_columns``, ``wide``). The
    table on a terminal shows ``head`` (the summary's answer) first and ``tail`` (the rest of the summary,
    the timeline) last, paged together when taller than the screen: render/pager.py."""
    if fmt is OutputFormat.table:
        from .table import write_table

        write_table(
            analysis,
            out,
            width=console_width,
            columns=table_columns,
            wide=wide,
            header=header,
            no_color=no_color,
            head=head,
            head_out=head_out,
            pager=pager,
            tail=tail,
        )
    elif fmt is OutputFormat.json:
        from .jsonfmt import write_json

        write_json(analysis, out)
    elif fmt is OutputFormat.ndjson:
        from .jsonfmt import write_ndjson

        write_ndjson(analysis, out)
    elif fmt is OutputFormat.csv:
        from .csvfmt import write_csv

        write_csv(analysis, out, safe=csv_safe, header=header)
    elif fmt is OutputFormat.parquet:
        from .rows import write_parquet

        write_parquet(analysis, out)
    else:  # pragma: no cover - exhaustive
        raise AssertionError(fmt)
