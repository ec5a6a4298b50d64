"""Shared helpers for the frames every stage passes on.

Provenance travels with every row: ``source`` (the file as the user named it)
and ``line`` (1-based). ``provenance_expr`` renders them as ``file:line``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars as pl


def with_source(df: "pl.DataFrame", names: dict[int, str]) -> "pl.DataFrame":
    """Add ``source`` (file display name) from ``file_id``.

    Memory (issue 18): a column lookup, not a join (a join gathers every column
    of the frame: +120 MB at 1.75 M records); one file's frame gets a constant.
    """
    import polars as pl

    ids = df.get_column("file_id").unique().to_list() if df.height else []
    if len(ids) == 1 and ids[0] is not None:
        return df.with_columns(pl.lit(names.get(ids[0]), pl.String).alias("source"))
    keys = pl.Series(list(names.keys()), dtype=pl.UInt16)
    values = pl.Series(list(names.values()), dtype=pl.String)
    return df.with_columns(
        pl.col("file_id").replace_strict(keys, values, default=None, return_dtype=pl.String).alias("source")
    )


def provenance_expr(source: str = "source", line: str = "line") -> "pl.Expr":
    import polars as pl

    return pl.concat_str([pl.col(source), pl.lit(":"), pl.col(line).cast(pl.String)])


def schema_of(df: "pl.DataFrame") -> dict[str, str]:
    return {name: str(dtype) for name, dtype in df.schema.items()}


def empty_frame(schema: dict) -> "pl.DataFrame":
    import polars as pl

    return pl.DataFrame(schema=schema)
