"""CSV: one event per row, header first.

``safe=True`` (``--csv-safe``) prefixes a quote to text cells that begin with
``=``, ``+``, ``-``, ``@``, tab or CR, so a spreadsheet does not run them as
formulas.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, BinaryIO

from . import event_rows

if TYPE_CHECKING:
    from ..analysis import Analysis

FORMULA_START = r"^[=+\-@\t\r]"


def write_csv(analysis: "Analysis", out: BinaryIO, *, safe: bool = False) -> None:
    import polars as pl

    df = event_rows(analysis)
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
    df.write_csv(out)
