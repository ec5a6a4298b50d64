"""vLLM KV cache events summed over the window (pool-level evidence, no request ids)."""

from __future__ import annotations

from typing import Any

import polars as pl

from .common import frame_of, window_sum
from .declare import Evidence, cited

EVIDENCE = [
    Evidence("kvev_stored_blocks", "Int64", "kvevents", "window", "BlockStored blocks summed over the window"),
    Evidence("kvev_removed_blocks", "Int64", "kvevents", "window", "BlockRemoved blocks summed over the window"),
    Evidence("kvev_cleared", "Int64", "kvevents", "window", "AllBlocksCleared events in the window"),
]


def section_kv(ev: pl.DataFrame, frames: dict[str, Any]) -> pl.DataFrame | None:
    """Per engine: an event sums its own engine's KV events (``data_parallel_rank``; none: engine
    "0"); an ``N Engines Aggregated`` count (engine ``all``) every engine's."""
    kv = frame_of(frames, "kv_events")
    if kv is None:
        return None
    kv = kv.with_columns(
        _eng=pl.col("dp_rank").cast(pl.String).fill_null("0") if "dp_rank" in kv.columns else pl.lit("0")
    )
    parts = []
    for (eng,), mine in kv.group_by("_eng", maintain_order=True):
        parts.append(_sums(ev.filter(pl.col("_eng") == eng), mine))
    parts.append(_sums(ev.filter(pl.col("_eng") == "all"), kv))
    found = [p for p in parts if p is not None]
    return pl.concat(found, how="vertical_relaxed") if found else None


def _sums(ev: pl.DataFrame, kv: pl.DataFrame) -> pl.DataFrame | None:
    if ev.height == 0:
        return None
    cols = ["stored_blocks", "removed_blocks", "cleared"]
    sums, s = window_sum(ev, kv, cols)
    srcs = s.select(pl.col("source"), pl.col("line").cast(pl.String))
    first = sums.get_column("_first")
    last = sums.get_column("_last")
    f_src = srcs.get_column("source").gather(first.fill_null(0))
    l_src = srcs.get_column("source").gather(last.fill_null(0))
    f_line = srcs.get_column("line").gather(first.fill_null(0))
    l_line = srcs.get_column("line").gather(last.fill_null(0))
    rng = pl.DataFrame({"_fs": f_src, "_ls": l_src, "_fl": f_line, "_ll": l_line})
    sums = pl.concat([sums, rng], how="horizontal")
    src = pl.when(pl.col("_first").is_not_null()).then(
        pl.when(pl.col("_fs") == pl.col("_ls"))
        .then(pl.concat_str([pl.col("_fs"), pl.lit(":"), pl.col("_fl"), pl.lit("-"), pl.col("_ll")]))
        .otherwise(
            pl.concat_str(
                [pl.col("_fs"), pl.lit(":"), pl.col("_fl"), pl.lit(".."), pl.col("_ls"), pl.lit(":"), pl.col("_ll")]
            )
        )
    )
    # A quiet window sums to 0 with no line to cite (src null).
    return sums.select(
        "_i",
        *cited("kvev_stored_blocks", pl.col("stored_blocks").cast(pl.Int64), src),
        *cited("kvev_removed_blocks", pl.col("removed_blocks").cast(pl.Int64), src),
        *cited("kvev_cleared", pl.col("cleared").cast(pl.Int64), src),
    )
