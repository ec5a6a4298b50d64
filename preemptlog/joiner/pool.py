"""The block pool: block-table step snapshots (per engine) and the longest running request."""

from __future__ import annotations

from typing import Any

import polars as pl

from .common import asof, frame_of, rolling_lookback, src_expr, with_eng
from .declare import Evidence, cited

EVIDENCE = [
    Evidence(
        "bt_batch_max_len",
        "Int64",
        "blocktable",
        "engine",
        "longest running request (tokens) in the nearest block-table step (dynamic G2 threshold)",
    ),
    Evidence("pool_free_blocks", "Int64", "blocktable", "engine", "free blocks of the block-table step as of t"),
    Evidence("pool_largest_free_run", "Int64", "blocktable", "engine", "its largest contiguous free run"),
    Evidence("pool_free_regions", "Int64", "blocktable", "engine", "its number of free regions"),
    Evidence("pool_block_size", "Int64", "blocktable", "engine", "its block size"),
    Evidence("pool_total_blocks", "Int64", "blocktable", "engine", "its total blocks"),
    Evidence(
        "lookback_min_largest_free_run",
        "Int64",
        "blocktable",
        "engine",
        "min largest free run over the look-back steps (same engine)",
    ),
]


def section_pool(ev: pl.DataFrame, frames: dict[str, Any], k: int, before_us: int) -> pl.DataFrame | None:
    st = frame_of(frames, "bt_steps")
    if st is None:
        return None
    st = st.sort("engine", "step", "time").with_row_index("_row").with_columns(_psrc=src_expr())
    st = rolling_lookback(st.with_columns(_fb=pl.col("free_blocks")), ["engine"], "_fb", k, "min").rename(
        {"_lb_val": "_p_lbmin", "_lb_row": "_p_lbmin_row", "_lb_n": "_p_lbn"}
    )
    st = rolling_lookback(
        st.with_columns(_lr=pl.col("largest_free_run").fill_null(1 << 30)), ["engine"], "_lr", k, "min"
    ).rename({"_lb_val": "_p_lbrun", "_lb_row": "_p_lbrun_row"})
    srcs = st.get_column("_psrc")
    st = st.with_columns(
        _p_lbmin_src=srcs.gather(st.get_column("_p_lbmin_row").cast(pl.UInt32)),
        _p_lbrun_src=srcs.gather(st.get_column("_p_lbrun_row").cast(pl.UInt32)),
        _p_lbrun=pl.when(pl.col("_p_lbrun") < (1 << 30)).then(pl.col("_p_lbrun")),
    )
    st = with_eng(st)
    j = asof(ev.select("_i", "_t", "_eng"), st, left_on="_t", right_on="time", by=["_eng"], tolerance=f"{before_us}us")
    s = pl.when(pl.col("time").is_not_null()).then(pl.col("_psrc"))

    return j.select(
        "_i",
        *cited("pool_free_blocks", pl.col("free_blocks"), s),
        *cited("pool_largest_free_run", pl.col("largest_free_run"), s),
        *cited("pool_free_regions", pl.col("free_regions"), s),
        *cited("pool_block_size", pl.col("block_size"), s),
        *cited("pool_total_blocks", pl.col("num_total_blocks"), s),
        *cited("lookback_min_largest_free_run", pl.col("_p_lbrun"), pl.col("_p_lbrun_src")),
        *cited("_b_lbmin", pl.col("_p_lbmin"), pl.col("_p_lbmin_src")),  # -> lookback_min_free_blocks (core)
        pl.col("_p_lbn").alias("_b_lbn"),
    )


def section_batch_len(ev: pl.DataFrame, frames: dict[str, Any], before_us: int) -> pl.DataFrame | None:
    """``bt_batch_max_len``: the longest running request (tokens) in the nearest block-table step."""
    tables = frame_of(frames, "bt_tables")
    if tables is None or "num_tokens" not in tables.columns:
        return None
    per_step = (
        tables.filter(pl.col("num_tokens").is_not_null())
        .with_columns(_src_=src_expr())
        .sort("num_tokens", descending=True)
        .pipe(with_eng)
        .group_by("_eng", "step", maintain_order=True)
        .agg(pl.col("time").max(), pl.col("num_tokens").first().alias("_mx"), pl.col("_src_").first())
        .sort("time")
    )
    if per_step.height == 0:
        return None
    j = asof(
        ev.select("_i", "_t", "_eng"),
        per_step.select("time", "_eng", "_mx", "_src_"),
        left_on="_t",
        right_on="time",
        by=["_eng"],
        tolerance=f"{before_us}us",
    )
    return j.select("_i", *cited("bt_batch_max_len", pl.col("_mx"), pl.col("_src_")))
