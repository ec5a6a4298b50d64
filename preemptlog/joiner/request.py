"""The preempted request: its block-table records and text ``block_table extend`` lines."""

from __future__ import annotations

from typing import Any

import polars as pl

from .common import CONFLICT_S, asof, frame_of, rows_in_ranges, src_expr, us, with_eng
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
    Evidence(
        "req_run_records",
        "Int64",
        "blocktable or bt_text",
        "request",
        "the request's records of running before the event (allocate, extend, swap_in, table, scheduled; "
        "text extend lines) since its last free/preempt; null when no such record of any request of the engine "
        "falls in the event's window",
    ),
]
# A request's own records of one engine: a request id is matched within its engine.
RQ = ["request_id", "_eng"]
RUN_ACTIONS = ("allocate", "extend", "swap_in")
END_ACTIONS = ("free", "preempt", "swap_out")


def _extends(frames: dict[str, Any]) -> pl.DataFrame | None:
    cols = [
        "time",
        "engine",
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
    return with_eng(out.filter(pl.col("request_id").is_not_null()))


def section_request(ev: pl.DataFrame, frames: dict[str, Any], before_us: int, after_us: int) -> pl.DataFrame | None:
    allev = _extends(frames)
    tables = frame_of(frames, "bt_tables")
    if allev is None and tables is None:
        return None
    er = ev.filter(pl.col("request_id").is_not_null()).select("_i", "_t", "_lo", "_hi", "request_id", "kind", "_eng")
    out = ev.select("_i")
    decision = None
    tol = f"{before_us + after_us}us"
    if allev is not None:
        ext: pl.DataFrame | None = allev.filter(pl.col("action") == "extend").with_columns(_xsrc=src_expr())
        assert ext is not None
        j = asof(
            er,
            ext.select("time", *RQ, "blocks_before", "blocks_after", "_xsrc"),
            left_on="_hi",
            right_on="time",
            by=RQ,
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
                *RQ,
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
        tb = with_eng(tables).with_columns(_tsrc=src_expr())
        j = asof(
            er,
            tb.select("time", *RQ, "num_blocks", "num_tokens", "shared_blocks", "shared_block_ids", "_tsrc"),
            left_on="_hi",
            right_on="time",
            by=RQ,
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
        # Block ids are an engine's own: the other request is of the same engine.
        shared = j.filter(pl.col("shared_blocks") > 0).select(
            "_i", "_t", "request_id", "_eng", pl.col("shared_block_ids").alias("_b")
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
            hit = _prefix_conflicts(shared, tb, ext)
            out = out.join(hit, on="_i", how="left")
    run = _run_records(er, frames)
    if run is not None:
        out = out.join(run, on="_i", how="left")
    return out


def _prefix_conflicts(shared: pl.DataFrame, tb: pl.DataFrame, ext: pl.DataFrame) -> pl.DataFrame:
    """G4 per event: the other request (``prefix_conflict_with``) whose table held one of the event's
    shared blocks within its window ``[_lo, _hi]`` and that extended (or allocated) in the decision's
    step or the one before (``_ds``), else within the window; the earliest such record, cited.

    ``shared``: one row per event and shared block (``_i``, ``request_id``, ``_eng``, ``_b``, ``_lo``,
    ``_hi``, ``_ds``). The tables and records are looked up by range (joiner/common.rows_in_ranges):
    only those inside each event's window or steps are paired, never every table that ever held a
    block (a prefix block every request shares made events x tables rows, issue 36)."""
    tx = (
        tb.select(
            pl.col("request_id").alias("_other"), "_eng", pl.col("time").alias("_tt"), pl.col("block_ids").alias("_b")
        )
        .explode("_b")
        .join(shared.select("_b", "_eng").unique(), on=["_b", "_eng"], how="semi")
    )
    held = rows_in_ranges(shared, tx, ["_b", "_eng"], "_tt", "_lo", "_hi")
    cand = (
        held.join(
            shared.with_row_index("_q").select("_q", "_i", "_lo", "_hi", "request_id", "_eng"), on="_q", how="left"
        )
        .with_columns(_other=tx.get_column("_other").gather(held.get_column("_r")))
        .filter(pl.col("_other") != pl.col("request_id"))
        .select("_i", "_lo", "_hi", "_other", "_eng")
        .unique()
        .join(shared.select("_i", "_ds").unique(), on="_i", how="left")
    )
    x = ext.select(
        pl.col("request_id").alias("_other"),
        "_eng",
        pl.col("time").alias("_xt"),
        pl.col("step").alias("_xs"),
        src_expr().alias("_xsrc"),
    )
    # When the decision has a scheduler step, the other request's extension must be a record of
    # the same step or the one before; else (no steps) within the time window.
    by_step = cand.filter(pl.col("_ds").is_not_null()).with_columns(_dlo=pl.col("_ds") - 1)
    by_time = cand.filter(pl.col("_ds").is_null())
    parts = []
    for c, on, lo, hi in ((by_step, "_xs", "_dlo", "_ds"), (by_time, "_xt", "_lo", "_hi")):
        pairs = rows_in_ranges(c, x, ["_other", "_eng"], on, lo, hi)
        parts.append(
            pairs.join(c.with_row_index("_q").select("_q", "_i", "_other"), on="_q", how="left").select(
                "_i", "_other", "_r"
            )
        )
    found = pl.concat(parts, how="vertical").sort("_i", "_r")
    found = found.with_columns(
        _xt=x.get_column("_xt").gather(found.get_column("_r")),
        _xsrc=x.get_column("_xsrc").gather(found.get_column("_r")),
    )
    return (
        found.sort("_i", "_xt", "_other", maintain_order=True)
        .group_by("_i", maintain_order=True)
        .agg(
            pl.col("_other").first().alias("prefix_conflict_with"),
            pl.col("_xsrc").first().alias("prefix_conflict_with_src"),
        )
    )


def _lifecycle(frames: dict[str, Any]) -> pl.DataFrame | None:
    """Every per-request record of running (``_run`` true) or of leaving the blocks behind (false):
    block-table allocate/extend/swap_in and free/preempt/swap_out events, tables, request
    records (scheduled / finish) and text ``block_table extend`` lines; with ``_eng`` and ``_src``."""
    parts = []
    for name in ("bt_events", "bt_text"):
        df = frame_of(frames, name)
        if df is not None:
            act = pl.col("action")
            parts.append(
                df.filter(act.is_in([*RUN_ACTIONS, *END_ACTIONS])).select(
                    "time", "request_id", "engine", "source", "line", act.is_in(list(RUN_ACTIONS)).alias("_run")
                )
            )
    tb = frame_of(frames, "bt_tables")
    if tb is not None:
        parts.append(tb.select("time", "request_id", "engine", "source", "line", pl.lit(True).alias("_run")))
    rq = frame_of(frames, "bt_requests")
    if rq is not None:
        phase = pl.col("phase")
        parts.append(
            rq.filter(phase.is_in(["scheduled", "finish"])).select(
                "time", "request_id", "engine", "source", "line", (phase == "scheduled").alias("_run")
            )
        )
    if not parts:
        return None
    out = pl.concat([p.cast({"line": pl.UInt32}) for p in parts], how="vertical_relaxed")
    out = with_eng(out.filter(pl.col("request_id").is_not_null())).with_columns(_src=src_expr())
    return out if out.height else None


def _run_records(er: pl.DataFrame, frames: dict[str, Any]) -> pl.DataFrame | None:
    """``req_run_records``: the request's records of running up to ``t + after``, counted since its
    last free/preempt record before ``t - before`` (a request preempted earlier and queued
    again starts over), on its engine. Null when no record of running of any request of the
    engine falls in the event's window: the records do not cover the time of the event, so their
    silence about the request says nothing. Cited: the request's latest record of running, or
    (none) the span of the engine's records up to the event's window."""
    life = _lifecycle(frames)
    if life is None or er.height == 0:
        return None
    run = life.filter(pl.col("_run")).sort("time")
    if run.height == 0:
        return None
    run = run.with_columns(_c=pl.int_range(1, pl.len() + 1).over(RQ))
    ends = life.filter(~pl.col("_run")).select("time", *RQ).sort("time").rename({"time": "_end"})
    hi = asof(er, run.select("time", *RQ, "_c", "_src"), left_on="_hi", right_on="time", by=RQ)
    hi = hi.select("_i", pl.col("_c").fill_null(0).alias("_c_hi"), pl.col("_src").alias("_own"))
    if ends.height:
        last_end = asof(er, ends, left_on="_lo", right_on="_end", by=RQ, allow_exact=False).select("_i", *RQ, "_end")
        base = asof(
            last_end.filter(pl.col("_end").is_not_null()),
            run.select("time", *RQ, "_c"),
            left_on="_end",
            right_on="time",
            by=RQ,
        ).select("_i", pl.col("_c").fill_null(0).alias("_c_lo"))
        hi = hi.join(base, on="_i", how="left")
    else:
        hi = hi.with_columns(_c_lo=pl.lit(None, pl.Int64))
    # Coverage: the engine's records of running (any request) reach the event's window; where they start.
    eng = run.select("time", "_eng", "_src", "source", "line")
    first = eng.group_by("_eng").agg(pl.col("_src").first().alias("_first"), pl.col("source").first().alias("_ff"))
    cov = asof(er.select("_i", "_lo", "_hi", "_eng"), eng, left_on="_hi", right_on="time", by=["_eng"])
    cov = cov.join(first, on="_eng", how="left").select(
        "_i",
        pl.when(pl.col("time").is_null() | (pl.col("time") < pl.col("_lo")))
        .then(None)
        .when(pl.col("source") == pl.col("_ff"))
        .then(pl.concat_str([pl.col("_first"), pl.lit("-"), pl.col("line").cast(pl.String)]))
        .otherwise(pl.concat_str([pl.col("_first"), pl.lit("; "), pl.col("_src")]))
        .alias("_cov"),
    )
    j = hi.join(cov, on="_i", how="left")
    n = pl.col("_c_hi") - pl.col("_c_lo").fill_null(0)
    value = pl.when(pl.col("_cov").is_not_null() | (n > 0)).then(n)
    src = pl.when(n > 0).then(pl.col("_own")).otherwise(pl.col("_cov"))
    return j.select("_i", *cited("req_run_records", value, src))


def decision_steps(ev: pl.DataFrame, frames: dict[str, Any], before_us: int, after_us: int) -> pl.DataFrame | None:
    """Per event with a matched preempt record of its request (:func:`_match_preempts`): the
    record's time ``_dt`` and scheduler step ``_ds`` (the decision; the pool snapshot is matched to
    it, joiner/pool.py)."""
    allev = _extends(frames)
    if allev is None:
        return None
    pre = allev.filter((pl.col("action") == "preempt") & pl.col("step").is_not_null())
    er = ev.filter(pl.col("request_id").is_not_null()).select("_i", "_t", "_lo", "_hi", "request_id", "kind", "_eng")
    if pre.height == 0 or er.height == 0:
        return None
    j = _match_preempts(er, pre.select("time", "step", *RQ), max(before_us, after_us))
    return j.filter(pl.col("time").is_not_null()).select("_i", pl.col("time").alias("_dt"), pl.col("step").alias("_ds"))


def _match_preempts(er: pl.DataFrame, pre: pl.DataFrame, tol_us: int) -> pl.DataFrame:
    """Each event of a request gets one of that request's preempt records.

    When a request has as many preempt records as events, the k-th event (in
    time, then line order) takes the k-th record: a request preempted several
    times within one second of a second-resolution log would otherwise map every
    line to the same record. Otherwise the nearest record within the tolerance.
    """
    ne = er.group_by(RQ).len("_ne")
    nr = pre.group_by(RQ).len("_nr")
    er2 = er.join(ne, on=RQ, how="left").join(nr, on=RQ, how="left")
    same = pl.col("_ne") == pl.col("_nr")
    ordinal_ev = er2.filter(same.fill_null(False)).sort("_t", "_i").with_columns(_k=pl.int_range(pl.len()).over(RQ))
    ranked = pre.sort("time").with_columns(_k=pl.int_range(pl.len()).over(RQ))
    ordinal = ordinal_ev.join(ranked, on=[*RQ, "_k"], how="left").filter(
        ((pl.col("time") - pl.col("_t")).abs() <= pl.duration(microseconds=tol_us)).fill_null(False)
    )
    rest = er2.join(ordinal.select("_i"), on="_i", how="anti")
    nearest = asof(rest, pre, left_on="_t", right_on="time", by=RQ, strategy="nearest", tolerance=f"{tol_us}us")
    cols = list(er.columns) + [c for c in pre.columns if c not in er.columns]
    return pl.concat([ordinal.select(cols), nearest.select(cols)], how="vertical_relaxed")
