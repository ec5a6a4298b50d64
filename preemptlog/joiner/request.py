"""The preempted request: its block-table records and text ``block_table extend`` lines."""

from __future__ import annotations

from typing import Any

import polars as pl

from .common import CONFLICT_S, asof, frame_of, src_expr, us
from .declare import Evidence, cited

EVIDENCE = [
    Evidence(
        "req_blocks_before",
        "Int64",
        "blocktable or bt_text",
        "request",
        "the request's last `extend` in the window: blocks before",
    ),
    Evidence("req_blocks_after", "Int64", "blocktable or bt_text", "request", "... and after"),
    Evidence(
        "req_blocks_held",
        "Int64",
        "blocktable",
        "request",
        "blocks of the request's latest table at or before t + after",
    ),
    Evidence("req_num_tokens", "Int64", "blocktable", "request", "tokens of that table"),
    Evidence("req_shared_blocks", "Int64", "blocktable", "request", "blocks of that table shared with ref_count > 1"),
    Evidence(
        "prefix_conflict_with",
        "String",
        "blocktable",
        "request",
        "another request holding one of those blocks and extending in the same step (G4)",
    ),
    Evidence(
        "bt_preempt_offset_s",
        "Float64",
        "blocktable",
        "request",
        "the request's preempt record minus the event's time (clock skew evidence)",
    ),
    Evidence(
        "bt_preempt_blocks_before", "Int64", "blocktable", "request", "blocks the request held, from its preempt record"
    ),
    Evidence(
        "bt_preempt_blocks_needed",
        "Int64",
        "blocktable",
        "request",
        "blocks the failed allocation asked for (preempt record)",
    ),
    Evidence("bt_preempt_free_blocks", "Int64", "blocktable", "request", "free blocks the failed allocation saw"),
    Evidence("bt_preempt_largest_free_run", "Int64", "blocktable", "request", "largest contiguous free run it saw"),
    Evidence("bt_preempt_watermark_blocks", "Int64", "blocktable", "request", "watermark blocks kept back"),
    Evidence("bt_preempt_waiting", "Int64", "blocktable", "request", "waiting requests at the decision"),
]


def _extends(frames: dict[str, Any]) -> pl.DataFrame | None:
    cols = [
        "time",
        "step",
        "request_id",
        "action",
        "blocks_before",
        "blocks_after",
        "blocks_needed",
        "pool_free_blocks",
        "pool_largest_free_run",
        "watermark_blocks",
        "waiting",
        "source",
        "line",
    ]
    parts = []
    for name in ("bt_events", "bt_text"):
        df = frame_of(frames, name)
        if df is not None:
            parts.append(df.select([c for c in cols if c in df.columns]))
    if not parts:
        return None
    out = pl.concat(parts, how="diagonal_relaxed")
    for c in cols:
        if c not in out.columns:
            out = out.with_columns(pl.lit(None, pl.Int64).alias(c))
    return out.filter(pl.col("request_id").is_not_null())


def section_request(ev: pl.DataFrame, frames: dict[str, Any], before_us: int, after_us: int) -> pl.DataFrame | None:
    allev = _extends(frames)
    tables = frame_of(frames, "bt_tables")
    if allev is None and tables is None:
        return None
    er = ev.filter(pl.col("request_id").is_not_null()).select("_i", "_t", "_lo", "_hi", "request_id", "kind")
    out = ev.select("_i")
    decision = None
    tol = f"{before_us + after_us}us"
    if allev is not None:
        ext: pl.DataFrame | None = allev.filter(pl.col("action") == "extend").with_columns(_xsrc=src_expr())
        assert ext is not None
        j = asof(
            er,
            ext.select("time", "request_id", "blocks_before", "blocks_after", "_xsrc"),
            left_on="_hi",
            right_on="time",
            by=["request_id"],
            tolerance=tol,
        )
        s = pl.when(pl.col("time").is_not_null()).then(pl.col("_xsrc"))
        out = out.join(
            j.select(
                "_i",
                *cited("req_blocks_before", pl.col("blocks_before"), s),
                *cited("req_blocks_after", pl.col("blocks_after"), s),
            ),
            on="_i",
            how="left",
        )
        pre = allev.filter(pl.col("action") == "preempt").with_columns(_psrc=src_expr())
        if pre.height:
            pcols = [
                "time",
                "step",
                "request_id",
                "_psrc",
                "blocks_before",
                "blocks_needed",
                "pool_free_blocks",
                "pool_largest_free_run",
                "watermark_blocks",
                "waiting",
            ]
            j = _match_preempts(er, pre.select(pcols), max(before_us, after_us))
            off = ((pl.col("time") - pl.col("_t")).dt.total_microseconds() / 1e6).round(6)
            keep = pl.col("time").is_not_null() & (pl.col("kind") != "record")
            # The decision time: the preempt record's own time when there is one.
            decision = j.select("_i", pl.col("time").alias("_dt"), pl.col("step").alias("_ds"))
            out = out.join(
                j.select(
                    "_i",
                    *cited("bt_preempt_offset_s", pl.when(keep).then(off), pl.col("_psrc")),
                    # The request's preempt record: the blocks it held, and when an allocation
                    # failed, what it asked for and the pool it asked (G1 evidence at the decision).
                    *[
                        e
                        for col, name in (
                            ("blocks_before", "bt_preempt_blocks_before"),
                            ("blocks_needed", "bt_preempt_blocks_needed"),
                            ("pool_free_blocks", "bt_preempt_free_blocks"),
                            ("pool_largest_free_run", "bt_preempt_largest_free_run"),
                            ("watermark_blocks", "bt_preempt_watermark_blocks"),
                            ("waiting", "bt_preempt_waiting"),
                        )
                        for e in cited(name, pl.col(col).cast(pl.Int64), pl.col("_psrc"))
                    ],
                ),
                on="_i",
                how="left",
            )
    if tables is not None:
        tb = tables.with_columns(_tsrc=src_expr())
        j = asof(
            er,
            tb.select("time", "request_id", "num_blocks", "num_tokens", "shared_blocks", "shared_block_ids", "_tsrc"),
            left_on="_hi",
            right_on="time",
            by=["request_id"],
            tolerance=tol,
        )
        s = pl.when(pl.col("time").is_not_null()).then(pl.col("_tsrc"))
        out = out.join(
            j.select(
                "_i",
                *cited("req_blocks_held", pl.col("num_blocks"), s),
                *cited("req_num_tokens", pl.col("num_tokens"), s),
                *cited("req_shared_blocks", pl.col("shared_blocks"), s),
            ),
            on="_i",
            how="left",
        )
        # G4: another request holding one of those shared blocks, extending (or allocating)
        # within CONFLICT_S seconds of the decision (the preempt record's time, else the event's).
        c_us = us(CONFLICT_S)
        shared = j.filter(pl.col("shared_blocks") > 0).select(
            "_i", "_t", "request_id", pl.col("shared_block_ids").alias("_b")
        )
        if decision is not None:
            shared = shared.join(decision, on="_i", how="left").with_columns(_dt=pl.coalesce("_dt", "_t"))
        else:
            shared = shared.with_columns(_dt=pl.col("_t"), _ds=pl.lit(None, pl.Int64))
        shared = shared.with_columns(
            _lo=pl.col("_dt") - pl.duration(microseconds=c_us), _hi=pl.col("_dt") + pl.duration(microseconds=c_us)
        ).explode("_b")
        ext = allev.filter(pl.col("action").is_in(["extend", "allocate"])) if allev is not None else None
        if shared.height and ext is not None and ext.height:
            tx = (
                tb.select(
                    pl.col("request_id").alias("_other"), pl.col("time").alias("_tt"), pl.col("block_ids").alias("_b")
                )
                .explode("_b")
                .join(shared.select("_b").unique(), on="_b", how="semi")
            )
            cand = (
                shared.join(tx, on="_b", how="inner")
                .filter(
                    (pl.col("_other") != pl.col("request_id")) & pl.col("_tt").is_between(pl.col("_lo"), pl.col("_hi"))
                )
                .select("_i", "_lo", "_hi", "_other")
                .unique()
            )
            x = ext.select(
                pl.col("request_id").alias("_other"),
                pl.col("time").alias("_xt"),
                pl.col("step").alias("_xs"),
                src_expr().alias("_xsrc"),
            )
            # When the decision has a scheduler step, the other request's extension must be a
            # record of the same step or the one before; else (no steps) within the time window.
            hit = (
                cand.join(shared.select("_i", "_ds").unique(), on="_i", how="left")
                .join(x, on="_other", how="inner")
                .filter(
                    pl.when(pl.col("_ds").is_not_null())
                    .then(pl.col("_xs").is_between(pl.col("_ds") - 1, pl.col("_ds")).fill_null(False))
                    .otherwise(pl.col("_xt").is_between(pl.col("_lo"), pl.col("_hi")))
                )
                .sort("_i", "_xt", "_other")
                .group_by("_i", maintain_order=True)
                .agg(
                    pl.col("_other").first().alias("prefix_conflict_with"),
                    pl.col("_xsrc").first().alias("prefix_conflict_with_src"),
                )
            )
            out = out.join(hit, on="_i", how="left")
    return out


def _match_preempts(er: pl.DataFrame, pre: pl.DataFrame, tol_us: int) -> pl.DataFrame:
    """Each event of a request gets one of that request's preempt records.

    When a request has as many preempt records as events, the k-th event (in
    time, then line order) takes the k-th record: a request preempted several
    times within one second of a second-resolution log would otherwise map every
    line to the same record. Otherwise the nearest record within the tolerance.
    """
    ne = er.group_by("request_id").len("_ne")
    nr = pre.group_by("request_id").len("_nr")
    er2 = er.join(ne, on="request_id", how="left").join(nr, on="request_id", how="left")
    same = pl.col("_ne") == pl.col("_nr")
    ordinal_ev = (
        er2.filter(same.fill_null(False)).sort("_t", "_i").with_columns(_k=pl.int_range(pl.len()).over("request_id"))
    )
    ranked = pre.sort("time").with_columns(_k=pl.int_range(pl.len()).over("request_id"))
    ordinal = ordinal_ev.join(ranked, on=["request_id", "_k"], how="left").filter(
        ((pl.col("time") - pl.col("_t")).abs() <= pl.duration(microseconds=tol_us)).fill_null(False)
    )
    rest = er2.join(ordinal.select("_i"), on="_i", how="anti")
    nearest = asof(
        rest, pre, left_on="_t", right_on="time", by=["request_id"], strategy="nearest", tolerance=f"{tol_us}us"
    )
    cols = list(er.columns) + [c for c in pre.columns if c not in er.columns]
    return pl.concat([ordinal.select(cols), nearest.select(cols)], how="vertical_relaxed")
