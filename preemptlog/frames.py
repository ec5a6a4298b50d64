"""Shared helpers for the frames every stage passes on.

Provenance travels with every row: ``source`` (the file as the user named it)
and ``line`` (1-based). ``provenance_expr`` renders them as ``file:line``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars as pl


def with_source(df: "pl.DataFrame", names: dict[int, str]) -> "pl.DataFrame":
    """Add ``source`` (file display name) from ``file_id``."""
    import polars as pl

    lookup = pl.DataFrame(
        {"file_id": list(names.keys()), "source": list(names.values())},
        schema={"file_id": pl.UInt16, "source": pl.String},
    )
    return df.join(lookup, on="file_id", how="left")


def provenance_expr(source: str = "source", line: str = "line") -> "pl.Expr":
    import polars as pl

    return pl.concat_str([pl.col(source), pl.lit(":"), pl.col(line).cast(pl.String)])


def schema_of(df: "pl.DataFrame") -> dict[str, str]:
    return {name: str(dtype) for name, dtype in df.schema.items()}


def empty_frame(schema: dict) -> "pl.DataFrame":
    import polars as pl

    return pl.DataFrame(schema=schema)
