"""Contributing factors: conditions that make preemption likelier, each with the evidence that raised it.

Column-wise over all events (``{factor, detail, src}`` structs). Factors:

- ``speculative-decoding``: the config has a speculative model (the guide: about
  20% of the budget is reserved for draft tokens; V0 reserves lookahead slots).
- ``delayed-preemption``: a gate's condition (G1 shortage, G2 variance, G3 queue
  depth) held at an earlier step of the look-back but not at the log line's own
  step (the guide's delayed preemption); one factor per gate, citing the step.
- ``odd-max-model-len``: max_model_len is not a multiple of block_size (guide
  4.1: 8193 caused an off-by-one in block accounting).
- ``alignment-gap``: the request's block table holds more token slots than
  tokens (guide 2.1: physical slots are block-aligned).
- ``v0-sampled``: the event was reconstructed from V0's 1-in-50 sampled warnings.
- ``effective-budget``: max_num_batched_tokens x gpu_memory_utilization x
  (1 - speculative reserve) is below the nominal budget (guide 4.3.1); on the guide's evidence only
  (guide_model): upstream vLLM schedules against max_num_batched_tokens as given.
- ``repeated-preemption``: the same request was preempted more than once.
"""

from __future__ import annotations

import polars as pl

from ..model.frames import provenance_expr
from .engine import Compiler
from .model import RuleSet

# Names the factors read (for grouping events with identical inputs).
FACTOR_INPUTS = [
    "cfg_speculative",
    "needed_blocks",
    "free_blocks",
    "sched_step",
    "sched_free_blocks",
    "pending_max_blocks_needed",
    "lookback_short_step",
    "lookback_short_free_blocks",
    "lookback_short_blocks_needed",
    "pool_step",
    "pool_short_step",
    "pool_short_free_blocks",
    "pool_short_blocks_needed",
    "batch_variance",
    "variance_limit",
    "lookback_max_variance",
    "lookback_variance_step",
    "lookback_variance_threshold",
    "queue_depth",
    "queue_limit",
    "lookback_max_pending",
    "lookback_max_pending_step",
    "pool_block_size",
    "cfg_block_size",
    "cfg_max_model_len",
    "req_blocks_held",
    "req_num_tokens",
    "kind",
    "cfg_max_num_batched_tokens",
    "cfg_gpu_memory_utilization",
    "request_id",
]


def _s(e: pl.Expr) -> pl.Expr:
    f = e.cast(pl.Float64, strict=False)
    return pl.when(f % 1 == 0).then(f.cast(pl.Int64).cast(pl.String)).otherwise(f.round(2).cast(pl.String))


def factors(frame: pl.DataFrame, rs: RuleSet) -> pl.Expr:
    """An expression giving each event's list of contributing factors."""
    c = Compiler(rs, set(frame.columns))
    v, src = c.value, c.src
    reserve = float(rs.thresholds["spec_reserve"].value) if "spec_reserve" in rs.thresholds else 0.2
    items = []

    def item(cond: pl.Expr, name: str, detail: pl.Expr, source: pl.Expr) -> None:
        items.append(
            pl.when(cond.fill_null(False)).then(
                pl.struct(pl.lit(name).alias("factor"), detail.alias("detail"), source.cast(pl.String).alias("src"))
            )
        )

    item(
        v("cfg_speculative") == True,  # noqa: E712 - polars expression
        "speculative-decoding",
        pl.lit(
            f"speculative decoding is on: the guide reserves about {reserve:.0%} of the token budget for draft "
            "tokens, and every step needs blocks for the lookahead slots"
        ),
        src("cfg_speculative"),
    )
    # Delayed preemption (the guide's 1-3 steps): a gate's condition held at an earlier step of
    # the look-back than the log line's own step, and not at that step. One factor per gate.
    step = v("sched_step")
    note = pl.lit(
        ": the PREEMPTED line came after the decision (the guide's delayed preemption; upstream vLLM has "
        "no delayed_preemption setting)"
    )

    def delayed(
        gate: str,
        at: pl.Expr,
        held_then: pl.Expr,
        held_now: pl.Expr,
        what: pl.Expr,
        source: pl.Expr,
        own: pl.Expr = step,
        where: str = "scheduler step",
    ) -> None:
        item(
            held_then & at.is_not_null() & (at < own) & ~held_now.fill_null(False),
            "delayed-preemption",
            pl.concat_str(
                [
                    pl.lit(f"{gate}: "),
                    what,
                    pl.lit(f" at {where} "),
                    _s(at),
                    pl.lit(", "),
                    _s(own - at),
                    pl.lit(" step(s) before the line's own step "),
                    _s(own),
                    note,
                ]
            ),
            source,
        )

    short_step = v("lookback_short_step")
    delayed(
        "G1-kv-space",
        short_step,
        short_step.is_not_null(),
        v("pending_max_blocks_needed") > v("sched_free_blocks"),
        pl.concat_str(
            [
                pl.lit("a pending request needed "),
                _s(v("lookback_short_blocks_needed")),
                pl.lit(" blocks with "),
                _s(v("lookback_short_free_blocks")),
                pl.lit(" free"),
            ]
        ),
        pl.concat_str(
            [src("lookback_short_free_blocks"), pl.lit("; "), src("lookback_short_blocks_needed")], ignore_nulls=True
        ),
    )
    # The same over the block-table step snapshots (when no hook step showed a shortage): a
    # record of an earlier step asked for more blocks than that step had free.
    pool_short = v("pool_short_step")
    delayed(
        "G1-kv-space",
        pool_short,
        pool_short.is_not_null() & short_step.is_null(),
        pool_short == v("pool_step"),
        pl.concat_str(
            [
                pl.lit("a record asked for "),
                _s(v("pool_short_blocks_needed")),
                pl.lit(" blocks with "),
                _s(v("pool_short_free_blocks")),
                pl.lit(" free"),
            ]
        ),
        pl.concat_str(
            [src("pool_short_free_blocks"), pl.lit("; "), src("pool_short_blocks_needed")], ignore_nulls=True
        ),
        own=v("pool_step"),
        where="block-table step",
    )
    var_thr = pl.coalesce(v("lookback_variance_threshold"), v("variance_limit"))
    delayed(
        "G2-batch-variance",
        v("lookback_variance_step"),
        v("lookback_max_variance") > var_thr,
        v("batch_variance") > v("variance_limit"),
        pl.concat_str(
            [pl.lit("batch variance "), _s(v("lookback_max_variance")), pl.lit(" above its threshold "), _s(var_thr)]
        ),
        src("lookback_max_variance"),
    )
    delayed(
        "G3-queue-overflow",
        v("lookback_max_pending_step"),
        v("lookback_max_pending") >= v("queue_limit"),
        v("queue_depth") >= v("queue_limit"),
        pl.concat_str(
            [
                pl.lit("the pending queue was "),
                _s(v("lookback_max_pending")),
                pl.lit(" (cap "),
                _s(v("queue_limit")),
                pl.lit(")"),
            ]
        ),
        src("lookback_max_pending"),
    )
    bs = pl.coalesce(v("pool_block_size"), v("cfg_block_size"))
    mml = v("cfg_max_model_len")
    item(
        (mml % bs != 0),
        "odd-max-model-len",
        pl.concat_str(
            [
                pl.lit("max_model_len "),
                _s(mml),
                pl.lit(" is not a multiple of block_size "),
                _s(bs),
                pl.lit(" (the guide saw 8193 cause an off-by-one in block accounting)"),
            ]
        ),
        src("cfg_max_model_len"),
    )
    slots = v("req_blocks_held") * bs
    gap = slots - v("req_num_tokens")
    item(
        gap > 0,
        "alignment-gap",
        pl.concat_str(
            [
                _s(gap),
                pl.lit(" of the "),
                _s(slots),
                pl.lit(" token slots in the request's "),
                _s(v("req_blocks_held")),
                pl.lit(" blocks are empty (blocks are allocated whole)"),
            ]
        ),
        src("req_blocks_held"),
    )
    item(
        v("kind") == "reconstructed",
        "v0-sampled",
        pl.lit(
            "vLLM V0 logs only every 50th preemption; this event was reconstructed from "
            "total_num_cumulative_preemption and has no request id"
        ),
        provenance_expr(),
    )
    mnbt, util = v("cfg_max_num_batched_tokens"), v("cfg_gpu_memory_utilization")
    spec = pl.when(v("cfg_speculative") == True).then(pl.lit(1.0 - reserve)).otherwise(pl.lit(1.0))  # noqa: E712
    eff = mnbt * util * spec
    seen_mnbt = (
        (pl.col("cfg_max_num_batched_tokens_status") != "default")
        if "cfg_max_num_batched_tokens_status" in frame.columns
        else pl.lit(True)
    )
    # The guide's arithmetic for its patched scheduler: only on the guide's evidence (upstream vLLM
    # schedules against max_num_batched_tokens as given).
    guide = pl.col("guide_model").fill_null(False) if "guide_model" in frame.columns else pl.lit(False)
    item(
        guide & seen_mnbt & (eff < mnbt),
        "effective-budget",
        pl.concat_str(
            [
                pl.lit("effective token budget about "),
                _s(eff.floor()),
                pl.lit(" of the nominal "),
                _s(mnbt),
                pl.lit(" (max_num_batched_tokens x gpu_memory_utilization "),
                _s(util),
                pl.lit(" x (1 - speculative reserve): the field guide's arithmetic for its patched scheduler, 4.3.1)"),
            ]
        ),
        src("cfg_max_num_batched_tokens"),
    )
    if "_request_preemptions" in frame.columns:
        item(
            pl.col("_request_preemptions") > 1,
            "repeated-preemption",
            pl.concat_str(
                [
                    pl.lit("request "),
                    pl.col("request_id"),
                    pl.lit(" was preempted "),
                    pl.col("_request_preemptions").cast(pl.String),
                    pl.lit(" times in this incident"),
                ]
            ),
            pl.lit(None, pl.String),
        )
    return pl.concat_list(items).list.drop_nulls()
