"""Shared helpers for the frames every stage passes on.

Provenance travels with every row: ``source`` (the file as the user named it)
and ``line`` (1-based). ``provenance_expr`` renders them as ``file:line``.

Schemas are declared as ``{column: dtype name}`` (the names ``str(dtype)`` prints, e.g.
``"Int64"``, ``"Datetime(time_unit='us', time_zone='UTC')"``); :func:`polars_schema` is the
one map from those names to polars types.
"""

from __future__ import annotations

from typing import TypeAlias

import polars as pl
from polars.datatypes import DataTypeClass

PolarsType: TypeAlias = "pl.DataType | DataTypeClass"
Schema: TypeAlias = pl.Schema

UTC_TIME = pl.Datetime("us", "UTC")
DTYPES: dict[str, PolarsType] = {
    "String": pl.String,
    "Boolean": pl.Boolean,
    "Float64": pl.Float64,
    "Float32": pl.Float32,
    "Int64": pl.Int64,
    "Int32": pl.Int32,
    "Int16": pl.Int16,
    "Int8": pl.Int8,
    "UInt64": pl.UInt64,
    "UInt32": pl.UInt32,
    "UInt16": pl.UInt16,
    "UInt8": pl.UInt8,
}


def polars_dtype(name: str) -> PolarsType:
    """The polars type for a declared dtype name; every ``Datetime...`` is microseconds in UTC."""
    if name.startswith("Datetime"):
        return UTC_TIME
    return DTYPES[name]


def polars_schema(schema: dict[str, str]) -> Schema:
    """A declared ``{column: dtype name}`` schema as polars types (a ``pl.Schema``, in column order)."""
    return pl.Schema({k: polars_dtype(v) for k, v in schema.items()})


def with_source(df: pl.DataFrame, names: dict[int, str]) -> pl.DataFrame:
    """Add ``source`` (file display name) from ``file_id``.

    Memory (issue 18): a column lookup, not a join (a join gathers every column
    of the frame: +120 MB at 1.75 M records); one file's frame gets a constant.
    """
    ids = df.get_column("file_id").unique().to_list() if df.height else []
    if len(ids) == 1 and ids[0] is not None:
        return df.with_columns(pl.lit(names.get(ids[0]), pl.String).alias("source"))
    keys = pl.Series(list(names.keys()), dtype=pl.UInt16)
    values = pl.Series(list(names.values()), dtype=pl.String)
    return df.with_columns(
        pl.col("file_id").replace_strict(keys, values, default=None, return_dtype=pl.String).alias("source")
    )


def provenance_expr(source: str | pl.Expr = "source", line: str | pl.Expr = "line") -> pl.Expr:
    """``file:line`` from a source and a line column (names or expressions); null when either is."""
    src = pl.col(source) if isinstance(source, str) else source
    ln = pl.col(line) if isinstance(line, str) else line
    return pl.concat_str([src, pl.lit(":"), ln.cast(pl.String)])


def schema_of(df: pl.DataFrame) -> dict[str, str]:
    return {name: str(dtype) for name, dtype in df.schema.items()}


def empty_frame(schema: dict[str, str] | dict[str, PolarsType] | Schema) -> pl.DataFrame:
    """An empty frame of a declared schema (dtype names or polars types)."""
    return pl.DataFrame(schema={k: polars_dtype(v) if isinstance(v, str) else v for k, v in schema.items()})
