"""Contributing factors: conditions that make preemption likelier, each with the evidence that raised it.

Column-wise over all events (``{factor, detail, src}`` structs). Factors:

- ``speculative-decoding``: the config has a speculative model (the guide: about
  20% of the budget is reserved for draft tokens; V0 reserves lookahead slots).
- ``delayed-preemption``: the decision condition held within the look-back
  steps but not at the log line's own step (the guide's delayed preemption).
- ``odd-max-model-len``: max_model_len is not a multiple of block_size (guide
  4.1: 8193 caused an off-by-one in block accounting).
- ``alignment-gap``: the request's block table holds more token slots than
  tokens (guide 2.1: physical slots are block-aligned).
- ``v0-sampled``: the event was reconstructed from V0's 1-in-50 sampled warnings.
- ``effective-budget``: max_num_batched_tokens x gpu_memory_utilization x
  (1 - speculative reserve) is below the nominal budget (guide 4.3.1).
- ``repeated-preemption``: the same request was preempted more than once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .engine import Compiler
from .model import RuleSet

if TYPE_CHECKING:
    import polars as pl


# Names the factors read (for grouping events with identical inputs).
FACTOR_INPUTS = [
    "cfg_speculative",
    "needed_blocks",
    "free_blocks",
    "lookback_min_free_blocks",
    "lookback_steps",
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


def _s(e: "pl.Expr") -> "pl.Expr":
    import polars as pl

    f = e.cast(pl.Float64, strict=False)
    return pl.when(f % 1 == 0).then(f.cast(pl.Int64).cast(pl.String)).otherwise(f.round(2).cast(pl.String))


def factors(frame: "pl.DataFrame", rs: RuleSet) -> "pl.Expr":
    """An expression giving each event's list of contributing factors."""
    import polars as pl

    c = Compiler(rs, set(frame.columns))
    v, src = c.value, c.src
    reserve = float(rs.thresholds["spec_reserve"].value) if "spec_reserve" in rs.thresholds else 0.2
    items = []

    def item(cond: "pl.Expr", name: str, detail: "pl.Expr", source: "pl.Expr") -> None:
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
    needed, free, look = v("needed_blocks"), v("free_blocks"), v("lookback_min_free_blocks")
    item(
        (needed > look) & ~(needed > free),
        "delayed-preemption",
        pl.concat_str(
            [
                pl.lit("the shortage held within the last "),
                _s(v("lookback_steps")),
                pl.lit(" scheduler step(s) (min free blocks "),
                _s(look),
                pl.lit(", needed "),
                _s(needed),
                pl.lit(") but not at the line's own step (free "),
                _s(free),
                pl.lit(
                    "): the PREEMPTED line came after the decision (the guide's delayed preemption; upstream "
                    "vLLM has no delayed_preemption setting)"
                ),
            ]
        ),
        src("lookback_min_free_blocks"),
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
        pl.concat_str([pl.col("source"), pl.lit(":"), pl.col("line").cast(pl.String)]),
    )
    mnbt, util = v("cfg_max_num_batched_tokens"), v("cfg_gpu_memory_utilization")
    spec = pl.when(v("cfg_speculative") == True).then(pl.lit(1.0 - reserve)).otherwise(pl.lit(1.0))  # noqa: E712
    eff = mnbt * util * spec
    seen_mnbt = (pl.col("cfg_max_num_batched_tokens_status") != "default") if "cfg_max_num_batched_tokens_status" in frame.columns else pl.lit(True)
    item(
        seen_mnbt & (eff < mnbt),
        "effective-budget",
        pl.concat_str(
            [
                pl.lit("effective token budget about "),
                _s(eff.floor()),
                pl.lit(" of the nominal "),
                _s(mnbt),
                pl.lit(" (max_num_batched_tokens x gpu_memory_utilization "),
                _s(util),
                pl.lit(" x (1 - speculative reserve), guide 4.3.1)"),
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
