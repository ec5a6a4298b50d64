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
    Evidence(
        "pool_step",
        "Int64",
        "blocktable",
        "engine",
        "the step of that snapshot: the latest at or before the decision step of the request's preempt record, "
        "else as of t",
    ),
    Evidence("pool_waiting", "Int64", "blocktable", "engine", "waiting requests of that snapshot"),
    Evidence(
        "pool_compared_steps",
        "Int64",
        "blocktable",
        "engine",
        "look-back snapshots with a need recorded at their own step (null: none)",
    ),
    Evidence(
        "pool_short_step",
        "Int64",
        "blocktable",
        "engine",
        "latest look-back snapshot whose own step's largest need (extend, allocate, preempt record) exceeds its free "
        "blocks",
    ),
    Evidence("pool_short_free_blocks", "Int64", "blocktable", "engine", "that snapshot's free blocks"),
    Evidence("pool_short_blocks_needed", "Int64", "blocktable", "engine", "that step's largest need (its record)"),
]


def _step_needs(frames: dict[str, Any]) -> pl.DataFrame | None:
    """Per block-table step (engine, step): the largest number of blocks a record of that step asked
    for (an extend or allocate: blocks_needed, else its growth; a preempt: the failed allocation's
    blocks_needed), with the record that asked."""
    bt = frame_of(frames, "bt_events")
    if bt is None:
        return None
    grow = pl.col("blocks_after") - pl.col("blocks_before")
    need = (
        pl.when(pl.col("action").is_in(["extend", "allocate"]))
        .then(pl.coalesce("blocks_needed", grow))
        .when(pl.col("action") == "preempt")
        .then(pl.col("blocks_needed"))
    )
    rows = with_eng(bt).select("_eng", "step", need.alias("_need"), src_expr().alias("_nsrc"))
    rows = rows.filter(pl.col("_need").is_not_null() & pl.col("step").is_not_null())
    if rows.height == 0:
        return None
    return (
        rows.sort("_need", descending=True, maintain_order=True)
        .group_by("_eng", "step", maintain_order=True)
        .agg(pl.col("_need").first(), pl.col("_nsrc").first())
    )


def section_pool(ev: pl.DataFrame, frames: dict[str, Any], k: int, before_us: int) -> pl.DataFrame | None:
    st = frame_of(frames, "bt_steps")
    if st is None:
        return None
    st = with_eng(st).sort("_eng", "step", "time").with_row_index("_row").with_columns(_psrc=src_expr())
    st = rolling_lookback(st.with_columns(_fb=pl.col("free_blocks")), ["_eng"], "_fb", k, "min").rename(
        {"_lb_val": "_p_lbmin", "_lb_row": "_p_lbmin_row", "_lb_n": "_p_lbn"}
    )
    st = rolling_lookback(
        st.with_columns(_lr=pl.col("largest_free_run").fill_null(1 << 30)), ["_eng"], "_lr", k, "min"
    ).rename({"_lb_val": "_p_lbrun", "_lb_row": "_p_lbrun_row"})
    srcs = st.get_column("_psrc")
    st = st.with_columns(
        _p_lbmin_src=srcs.gather(st.get_column("_p_lbmin_row").cast(pl.UInt32)),
        _p_lbrun_src=srcs.gather(st.get_column("_p_lbrun_row").cast(pl.UInt32)),
        _p_lbrun=pl.when(pl.col("_p_lbrun") < (1 << 30)).then(pl.col("_p_lbrun")),
    )
    st = _short_steps(st, _step_needs(frames), k)
    keep = [c for c in st.columns if c not in ("_eng", "time")]
    # The snapshot of the decision: the latest at or before the step of the request's preempt
    # record (same engine, within `before` of its time), else the snapshot as of the event's time
    # (a line stamped to the second is earlier than the records of that second).
    by_time = asof(
        ev.select("_i", "_t", "_eng"), st, left_on="_t", right_on="time", by=["_eng"], tolerance=f"{before_us}us"
    )
    j = by_time
    dec = ev.filter(pl.col("_ds").is_not_null()) if "_ds" in ev.columns else ev.head(0)
    if dec.height:
        by_step = asof(
            dec.select("_i", "_dt", "_ds", "_eng"),
            st.with_columns(pl.col("step").alias("_step")),
            left_on="_ds",
            right_on="_step",
            by=["_eng"],
        )
        near = (pl.col("_dt") - pl.col("time")).dt.total_microseconds().abs() <= before_us
        by_step = by_step.filter(near.fill_null(False)).select("_i", "time", *keep)
        j = pl.concat([by_time.join(by_step.select("_i"), on="_i", how="anti").select(by_step.columns), by_step])
    s = pl.when(pl.col("time").is_not_null()).then(pl.col("_psrc"))

    return j.select(
        "_i",
        *cited("pool_free_blocks", pl.col("free_blocks"), s),
        *cited("pool_largest_free_run", pl.col("largest_free_run"), s),
        *cited("pool_free_regions", pl.col("free_regions"), s),
        *cited("pool_block_size", pl.col("block_size"), s),
        *cited("pool_total_blocks", pl.col("num_total_blocks"), s),
        *cited("pool_step", pl.when(pl.col("time").is_not_null()).then(pl.col("step")), s),
        *cited("pool_waiting", pl.col("waiting"), s),
        *cited("lookback_min_largest_free_run", pl.col("_p_lbrun"), pl.col("_p_lbrun_src")),
        *cited("_b_lbmin", pl.col("_p_lbmin"), pl.col("_p_lbmin_src")),  # -> lookback_min_free_blocks (core)
        pl.col("_p_lbn").alias("_b_lbn"),
        *[e for c in SHORT_VALUES for e in cited(c, pl.col(c), pl.col(f"{c}_src"))],
    )


SHORT_VALUES = ["pool_compared_steps", "pool_short_step", "pool_short_free_blocks", "pool_short_blocks_needed"]


def _short_steps(st: pl.DataFrame, needs: pl.DataFrame | None, k: int) -> pl.DataFrame:
    """The block-table look-back, each step compared with itself (rule 2 of issue 13): over a
    snapshot and the k snapshots before it (same engine), the latest one whose own step's largest
    need exceeds its own free blocks, cited by the snapshot and the record that asked."""
    if needs is None:
        nulls = {c: pl.lit(None, pl.Int64) for c in SHORT_VALUES} | {
            f"{c}_src": pl.lit(None, pl.String) for c in SHORT_VALUES
        }
        return st.with_columns(**nulls)
    st = st.join(needs, on=["_eng", "step"], how="left", maintain_order="left")
    row = pl.col("_row").cast(pl.Int64)
    short = (pl.col("_need") > pl.col("free_blocks")).fill_null(False)
    st = st.with_columns(
        _srow=pl.when(short).then(row).rolling_max(k + 1, min_samples=1).over("_eng"),
        _cmp=pl.col("_need").is_not_null().cast(pl.Int64).rolling_sum(k + 1, min_samples=1).over("_eng"),
    )
    ok = st.get_column("_srow").is_not_null()
    rows = st.get_column("_srow").fill_null(0).cast(pl.UInt32)

    def at(col: str) -> pl.Series:
        return st.get_column(col).gather(rows)

    return st.with_columns(
        pool_compared_steps=pl.when(pl.col("_cmp") > 0).then(pl.col("_cmp")),
        pool_compared_steps_src=pl.when(pl.col("_cmp") > 0).then(pl.col("_psrc")),
        pool_short_step=pl.when(ok).then(at("step")),
        pool_short_step_src=pl.when(ok).then(at("_psrc")),
        pool_short_free_blocks=pl.when(ok).then(at("free_blocks")),
        pool_short_free_blocks_src=pl.when(ok).then(at("_psrc")),
        pool_short_blocks_needed=pl.when(ok).then(at("_need")),
        pool_short_blocks_needed_src=pl.when(ok).then(at("_nsrc")),
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
