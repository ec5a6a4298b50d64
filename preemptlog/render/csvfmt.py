"""CSV: one event per row, header first.

``safe=True`` (``--csv-safe``) prefixes a quote to text cells that begin with
``=``, ``+``, ``-``, ``@``, tab or CR, so a spreadsheet does not run them as
formulas.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, BinaryIO

import polars as pl

from .rows import event_rows

if TYPE_CHECKING:
    from ..model.result import Analysis

FORMULA_START = r"^[=+\-@\t\r]"


def write_csv(analysis: Analysis, out: BinaryIO, *, safe: bool = False, header: bool = True) -> None:
    write_csv_frame(event_rows(analysis), out, safe=safe, header=header)


def write_csv_frame(df: pl.DataFrame, out: BinaryIO, *, safe: bool = False, header: bool = True) -> None:
    """Rows as CSV (the events of one analysis, or of every unit of ``--each``)."""
    # Nested verdict columns (lists, structs) become JSON text in one cell.
    nested = [c for c, t in df.schema.items() if isinstance(t, (pl.List, pl.Struct))]
    if nested:
        df = df.with_columns([json_cell(c) for c in nested])
    if safe:
        df = df.with_columns(
            [
                pl.when(pl.col(c).str.contains(FORMULA_START))
                .then(pl.concat_str([pl.lit("'"), pl.col(c)]))
                .otherwise(pl.col(c))
                .alias(c)
                for c, t in df.schema.items()
                if t == pl.String
            ]
        )
    df.write_csv(out, include_header=header)


def json_cell(col: str) -> object:
    """A nested column as compact JSON text (polars' own encoder, no Python per row)."""
    wrapped = pl.struct(pl.col(col).alias("v")).struct.json_encode()
    return wrapped.str.slice(5, wrapped.str.len_chars() - 6).alias(col)
