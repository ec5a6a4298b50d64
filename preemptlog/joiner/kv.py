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
    kv = frame_of(frames, "kv_events")
    if kv is None:
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
