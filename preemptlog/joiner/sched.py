"""Scheduler steps: the [SCHEDULER] / Req- / [BATCH] debug-hook lines, and the per-step look-back."""

from __future__ import annotations

from typing import Any

import polars as pl

from .common import asof, frame_of, rolling_lookback, src_expr, with_eng
from .declare import Evidence, cited

EVIDENCE = [
    Evidence(
        "sched_step",
        "Int64",
        "vllm-log (hooks)",
        "step",
        "nearest [SCHEDULER] step at or before the event on the (time, stream, line) order, within `before`",
    ),
    Evidence("sched_free_blocks", "Int64", "vllm-log (hooks)", "step", "that step's free blocks"),
    Evidence("sched_pending", "Int64", "vllm-log (hooks)", "step", "that step's pending requests"),
    Evidence("sched_running", "Int64", "vllm-log (hooks)", "step", "that step's running requests"),
    Evidence("sched_age_s", "Float64", "vllm-log (hooks)", "step", "seconds from that step to the event"),
    Evidence(
        "lookback_steps",
        "Int64",
        "vllm-log (hooks) or blocktable",
        "step",
        "steps in the look-back (the snapshot step and the K before it)",
    ),
    Evidence(
        "lookback_min_free_blocks",
        "Int64",
        "vllm-log (hooks) or blocktable",
        "step",
        "min free blocks over the look-back (shown; never compared with another step's need)",
    ),
    Evidence("pending_count", "Int64", "vllm-log (hooks)", "step", "the snapshot step's `Req-` lines"),
    Evidence("pending_max_blocks_needed", "Int64", "vllm-log (hooks)", "step", "largest blocks_needed of those lines"),
    Evidence("pending_min_blocks_needed", "Int64", "vllm-log (hooks)", "step", "smallest blocks_needed of those lines"),
    Evidence(
        "pending_over_free",
        "Int64",
        "vllm-log (hooks)",
        "step",
        "how many of them need more blocks than the step's free blocks",
    ),
    Evidence(
        "batch_variance",
        "Float64",
        "vllm-log (hooks)",
        "step",
        "the snapshot step's [BATCH] variance (the last line if several)",
    ),
    Evidence("batch_threshold", "Float64", "vllm-log (hooks)", "step", "the threshold printed on that line"),
    Evidence("lookback_max_variance", "Float64", "vllm-log (hooks)", "step", "max variance over the look-back steps"),
    Evidence("lookback_variance_step", "Int64", "vllm-log (hooks)", "step", "the step of that maximum"),
    Evidence(
        "lookback_variance_threshold",
        "Float64",
        "vllm-log (hooks)",
        "step",
        "the threshold printed on that same [BATCH] line",
    ),
    Evidence(
        "lookback_compared_steps",
        "Int64",
        "vllm-log (hooks)",
        "step",
        "look-back steps with pending lines to compare (null: none)",
    ),
    Evidence(
        "lookback_short_step",
        "Int64",
        "vllm-log (hooks)",
        "step",
        "latest look-back step whose own pending request needs more blocks than its own free blocks",
    ),
    Evidence("lookback_short_free_blocks", "Int64", "vllm-log (hooks)", "step", "that step's free blocks"),
    Evidence(
        "lookback_short_blocks_needed",
        "Int64",
        "vllm-log (hooks)",
        "step",
        "that step's largest blocks_needed (its `Req-` line)",
    ),
    Evidence("lookback_max_pending", "Int64", "vllm-log (hooks)", "step", "deepest pending queue of the look-back"),
    Evidence("lookback_max_pending_step", "Int64", "vllm-log (hooks)", "step", "its step"),
    Evidence(
        "req_pending_step",
        "Int64",
        "vllm-log (hooks)",
        "request",
        "latest look-back step whose `Req-` lines list the event's request as pending (it held no blocks)",
    ),
]


# One scheduler's steps: a stream (log file and its rotated siblings), an engine and a server
# run (a restart starts the look-back over: vllm/runs.py).
LANE = ["stream", "_eng", "_run"]
STEP_KEY = ["stream", "_eng", "step"]


def _with_run(steps: pl.DataFrame, runs: pl.DataFrame | None) -> pl.DataFrame:
    """``_run``: the server run of each step's line (-1 where the stream has no runs)."""
    if runs is None or runs.height == 0:
        return steps.with_columns(_run=pl.lit(-1, pl.Int32))
    j = asof(
        steps.with_row_index("_k"),
        runs.select("stream", "first_seq", "run"),
        left_on="seq",
        right_on="first_seq",
        by=["stream"],
    )
    return j.sort("_k").select(*steps.columns, pl.col("run").fill_null(-1).cast(pl.Int32).alias("_run"))


def section_sched(ev: pl.DataFrame, frames: dict[str, Any], k: int, before_us: int) -> pl.DataFrame | None:
    steps = frame_of(frames, "hook_steps")
    if steps is None:
        return None
    # Steps are numbered per engine (sources/hooks.py): every join below keys on (stream, engine, step).
    steps = _with_run(with_eng(steps), frames.get("server_runs"))
    steps = steps.sort("stream", "seq").with_row_index("_row").with_columns(_ssrc=src_expr())
    # Pending lines per step.
    pend = frames.get("hook_pending")
    if pend is not None and pend.height:
        pend = with_eng(pend)
        # Narrow columns, and the rows cited are picked by number: a file:line text is made per
        # step, not per pending line (a hook prints every pending request at every step).
        p = (
            pend.select(*STEP_KEY, "seq", "blocks_needed", "source", "line")
            .join(steps.select("stream", "_eng", "step", "free_blocks"), on=STEP_KEY, how="inner")
            .sort("stream", "seq")
            .with_row_index("_k")
        )
        pagg = p.group_by(*STEP_KEY).agg(
            pl.len().cast(pl.Int64).alias("pending_count"),
            pl.col("blocks_needed").max().alias("pending_max_blocks_needed"),
            pl.col("blocks_needed").min().alias("pending_min_blocks_needed"),
            (pl.col("blocks_needed") > pl.col("free_blocks")).sum().cast(pl.Int64).alias("pending_over_free"),
            pl.col("_k").sort_by(pl.col("blocks_needed"), descending=True).first().alias("_pmax_k"),
            pl.col("_k").sort_by(pl.col("blocks_needed")).first().alias("_pmin_k"),
        )
        cite = p.select("source", "line")
        pagg = pagg.with_columns(
            _pmax_src=_src_at(cite, pagg.get_column("_pmax_k")), _pmin_src=_src_at(cite, pagg.get_column("_pmin_k"))
        ).drop("_pmax_k", "_pmin_k")
        del p, cite
        steps = steps.join(pagg, on=STEP_KEY, how="left", maintain_order="left").with_columns(
            pl.col("pending_count").fill_null(0), pl.col("pending_over_free").fill_null(0)
        )
    else:
        steps = steps.with_columns(
            pending_count=pl.lit(0, pl.Int64),
            pending_max_blocks_needed=pl.lit(None, pl.Int64),
            pending_min_blocks_needed=pl.lit(None, pl.Int64),
            pending_over_free=pl.lit(0, pl.Int64),
            _pmax_src=pl.lit(None, pl.String),
            _pmin_src=pl.lit(None, pl.String),
        )
    # Batch line per step (the last one).
    bat = frames.get("hook_batch")
    if bat is not None and bat.height:
        bagg = (
            with_eng(bat)
            .sort("stream", "seq")
            .group_by(*STEP_KEY)
            .agg(
                pl.col("variance").last().alias("batch_variance"),
                pl.col("threshold").last().alias("batch_threshold"),
                src_expr().last().alias("_bsrc"),
            )
        )
        steps = steps.join(bagg, on=STEP_KEY, how="left", maintain_order="left")
    else:
        steps = steps.with_columns(
            batch_variance=pl.lit(None, pl.Float64),
            batch_threshold=pl.lit(None, pl.Float64),
            _bsrc=pl.lit(None, pl.String),
        )
    # Look-back over K steps (rows are in step order within a stream).
    steps = rolling_lookback(steps, LANE, "free_blocks", k, "min").rename(
        {"_lb_val": "lookback_min_free_blocks", "_lb_row": "_lbf_row", "_lb_n": "lookback_steps"}
    )
    # Variance look-back (scaled to keep one decimal... use x1000 fixed point).
    var = pl.col("batch_variance")
    steps = steps.with_columns(  # absurd values (inf, 1e300 in a damaged line) left out, not overflowed
        _var_fx=pl.when(var.abs() < 1e6).then(var * 1000).round().cast(pl.Int64, strict=False)
    )
    has_var = steps.get_column("_var_fx").is_not_null().any()
    if has_var:
        steps = rolling_lookback(
            steps.with_columns(_var_fx=pl.col("_var_fx").fill_null(-(1 << 28))), LANE, "_var_fx", k, "max"
        )
        steps = steps.with_columns(
            lookback_max_variance=pl.when(pl.col("_lb_val") > -(1 << 28)).then((pl.col("_lb_val") / 1000.0).round(3)),
            _lbv_row=pl.when(pl.col("_lb_val") > -(1 << 28)).then(pl.col("_lb_row")),
        )
    else:
        steps = steps.with_columns(lookback_max_variance=pl.lit(None, pl.Float64), _lbv_row=pl.lit(None, pl.Int64))
    srcs = steps.get_column("_ssrc")
    steps = steps.with_columns(_lbf_src=srcs.gather(steps.get_column("_lbf_row").cast(pl.UInt32)))
    steps = _lookback_per_step(steps, k)
    if has_var:
        bsrcs = steps.get_column("_bsrc")
        steps = steps.with_columns(
            _lbv_src=bsrcs.gather(steps.get_column("_lbv_row").fill_null(0).cast(pl.UInt32))
        ).with_columns(_lbv_src=pl.when(pl.col("_lbv_row").is_not_null()).then(pl.col("_lbv_src")))
    else:
        steps = steps.with_columns(_lbv_src=pl.lit(None, pl.String))

    # Order events and steps on one (time, stream, line) timeline, then as-of on the ordinal.
    e = ev.select(
        pl.col("time").alias("_t"),
        pl.col("stream").alias("_s"),
        pl.col("seq").alias("_q"),
        pl.lit(1, pl.Int8).alias("_isev"),
        pl.col("_i").cast(pl.Int64).alias("_id"),
        "_eng",
    )
    s = steps.select(
        pl.col("time").alias("_t"),
        pl.col("stream").alias("_s"),
        pl.col("seq").alias("_q"),
        pl.lit(0, pl.Int8).alias("_isev"),
        pl.col("_row").cast(pl.Int64).alias("_id"),
        "_eng",
    )
    tl = pl.concat([e, s]).sort("_t", "_s", "_q", "_isev", nulls_last=True).with_row_index("_ord")
    e_o = tl.filter(pl.col("_isev") == 1).select(pl.col("_id").cast(pl.UInt32).alias("_i"), "_ord", "_t", "_eng")
    s_o = tl.filter(pl.col("_isev") == 0).select(pl.col("_id").alias("_row"), pl.col("_ord").alias("_sord"))
    steps = steps.with_columns(pl.col("_row").cast(pl.Int64)).join(s_o, on="_row", how="left")
    # Only the event's own engine's steps (a step of another engine never explains it).
    j = asof(e_o, steps, left_on="_ord", right_on="_sord", by=["_eng"])
    age_us = (pl.col("_t") - pl.col("time")).dt.total_microseconds()
    ok = pl.col("time").is_not_null() & (age_us <= before_us)

    def v(expr: pl.Expr) -> pl.Expr:
        return pl.when(ok).then(expr)

    step = pl.col("_ssrc")
    out = j.select(
        "_i",
        *cited("sched_step", v(pl.col("step")), step),
        *cited("sched_free_blocks", v(pl.col("free_blocks")), step),
        *cited("sched_pending", v(pl.col("pending")), step),
        *cited("sched_running", v(pl.col("running")), step),
        *cited("sched_age_s", v((age_us / 1e6).round(6)), step),
        *cited("lookback_steps", v(pl.col("lookback_steps")), step),
        *cited("_h_lbmin", v(pl.col("lookback_min_free_blocks")), pl.col("_lbf_src")),  # -> lookback_min_free_blocks
        *cited("pending_count", v(pl.col("pending_count")), step),
        *cited("pending_max_blocks_needed", v(pl.col("pending_max_blocks_needed")), pl.col("_pmax_src")),
        *cited("pending_min_blocks_needed", v(pl.col("pending_min_blocks_needed")), pl.col("_pmin_src")),
        *cited("pending_over_free", v(pl.col("pending_over_free")), step),
        *cited("batch_variance", v(pl.col("batch_variance")), pl.col("_bsrc")),
        *cited("batch_threshold", v(pl.col("batch_threshold")), pl.col("_bsrc")),
        *cited("lookback_max_variance", v(pl.col("lookback_max_variance")), pl.col("_lbv_src")),
        *[e for c in LOOKBACK_VALUES for e in cited(c, v(pl.col(c)), pl.col(f"{c}_src"))],
    )
    # The event's request listed among the pending requests of a look-back step: it was
    # waiting at the decision, holding no KV blocks (G3's "blocks held", issue 25).
    out = out.with_columns(req_pending_step=pl.lit(None, pl.Int64), req_pending_step_src=pl.lit(None, pl.String))
    mine = ev.filter(pl.col("request_id").is_not_null()).select("_i", "request_id")
    if pend is not None and pend.height and mine.height:
        snap = j.filter(ok).select("_i", "stream", "_eng", "_run", pl.col("step").alias("_snap"))
        # The k + 1 look-back steps of each event (a step of its run), then the request's pending
        # lines at those steps: an equality join, never every pending line of the request
        # (a request listed at thousands of steps, preempted many times: events x lines, issue 36).
        looked = (
            snap.join(mine, on="_i", how="inner")
            .with_columns(step=pl.int_ranges(pl.col("_snap") - k, pl.col("_snap") + 1))
            .explode("step")
            .cast({"step": steps.schema["step"]})
            .join(steps.select(*STEP_KEY, "_run"), on=[*STEP_KEY, "_run"], how="semi")
        )
        hit = (
            looked.join(
                pend.select(*STEP_KEY, "request_id", "source", "line"), on=[*STEP_KEY, "request_id"], how="inner"
            )
            .with_columns(_rsrc=src_expr())
            .sort("_i", "step")
            .group_by("_i", maintain_order=True)
            .agg(pl.col("step").last(), pl.col("_rsrc").last())
        )
        if hit.height:
            out = out.drop("req_pending_step", "req_pending_step_src").join(
                hit.select("_i", *cited("req_pending_step", pl.col("step"), pl.col("_rsrc"))), on="_i", how="left"
            )
    return out


def _src_at(cite: pl.DataFrame, rows: pl.Series) -> pl.Series:
    """``file:line`` of the given rows of ``cite`` (columns source, line); null where the row is."""
    picked = cite.select(pl.all().gather(rows.fill_null(0)))
    return picked.select(pl.when(rows.is_not_null()).then(src_expr())).to_series()


# Per-step look-back evidence (rule 2 of issue 13): each step is compared with itself.
LOOKBACK_VALUES = [
    "lookback_compared_steps",
    "lookback_short_step",
    "lookback_short_free_blocks",
    "lookback_short_blocks_needed",
    "lookback_variance_step",
    "lookback_variance_threshold",
    "lookback_max_pending",
    "lookback_max_pending_step",
]
LOOKBACK_STEP_COLUMNS = [n for c in LOOKBACK_VALUES for n in (c, f"{c}_src")]


def _lookback_per_step(steps: pl.DataFrame, k: int) -> pl.DataFrame:
    """Look-back evidence where every comparison stays inside one scheduler step.

    Over the snapshot step and the k steps before it (same stream, rows in step order):

    - ``lookback_short_*``: the latest step whose own pending requests (``Req-`` lines)
      need more blocks than that step's free blocks; its step number, free blocks and
      the largest blocks_needed, cited by its [SCHEDULER] and ``Req-`` lines;
    - ``lookback_compared_steps``: how many look-back steps had pending lines to compare
      (null when none had: nothing could be compared);
    - ``lookback_variance_step`` / ``_threshold``: the step of ``lookback_max_variance``
      and the threshold printed on that same [BATCH] line;
    - ``lookback_max_pending`` / ``_step``: the deepest pending queue of the look-back.
    """
    row = pl.col("_row").cast(pl.Int64)
    has_p = pl.col("pending_max_blocks_needed").is_not_null()
    short = (pl.col("pending_max_blocks_needed") > pl.col("free_blocks")).fill_null(False)
    steps = steps.with_columns(
        _short_row=pl.when(short).then(row).rolling_max(k + 1, min_samples=1).over(LANE),
        _cmp_n=has_p.cast(pl.Int64).rolling_sum(k + 1, min_samples=1).over(LANE),
    )
    rows = steps.get_column("_short_row").fill_null(0).cast(pl.UInt32)
    ok = steps.get_column("_short_row").is_not_null()

    def at(col: str) -> pl.Series:
        return steps.get_column(col).gather(rows)

    out = steps.with_columns(
        lookback_compared_steps=pl.when(pl.col("_cmp_n") > 0).then(pl.col("_cmp_n")),
        lookback_compared_steps_src=pl.when(pl.col("_cmp_n") > 0).then(pl.col("_ssrc")),
        lookback_short_step=pl.when(ok).then(at("step")),
        lookback_short_step_src=pl.when(ok).then(at("_ssrc")),
        lookback_short_free_blocks=pl.when(ok).then(at("free_blocks")),
        lookback_short_free_blocks_src=pl.when(ok).then(at("_ssrc")),
        lookback_short_blocks_needed=pl.when(ok).then(at("pending_max_blocks_needed")),
        lookback_short_blocks_needed_src=pl.when(ok).then(at("_pmax_src")),
    )
    vrow = out.get_column("_lbv_row")
    vok = vrow.is_not_null()
    vr = vrow.fill_null(0).cast(pl.UInt32)
    out = out.with_columns(
        lookback_variance_step=pl.when(vok).then(out.get_column("step").gather(vr)),
        lookback_variance_step_src=pl.when(vok).then(out.get_column("_ssrc").gather(vr)),
        lookback_variance_threshold=pl.when(vok).then(out.get_column("batch_threshold").gather(vr)),
        lookback_variance_threshold_src=pl.when(vok).then(out.get_column("_bsrc").gather(vr)),
    )
    out = out.with_columns(
        lookback_variance_threshold_src=pl.when(pl.col("lookback_variance_threshold").is_not_null()).then(
            pl.col("lookback_variance_threshold_src")
        )
    )
    tmp = rolling_lookback(out.with_columns(_pend=pl.col("pending")), LANE, "_pend", k, "max")
    prow = tmp.get_column("_lb_row")
    pok = tmp.get_column("_lb_val").is_not_null()
    pr = prow.fill_null(0).cast(pl.UInt32)
    return out.with_columns(
        lookback_max_pending=tmp.get_column("_lb_val"),
        lookback_max_pending_src=pl.when(pok).then(out.get_column("_ssrc").gather(pr)),
        lookback_max_pending_step=pl.when(pok).then(out.get_column("step").gather(pr)),
        lookback_max_pending_step_src=pl.when(pok).then(out.get_column("_ssrc").gather(pr)),
    )
