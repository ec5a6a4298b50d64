"""Finding 4: vLLM's own mechanism behind each event, beside the gate.

The per-event values the mechanism rules read (rules/mechanisms.py MECHANISM_EVIDENCE) are
computed here from the victim's preempt record and table (recompute.victims), the counts of
complete sources (records, markers) and the stats line of the event's interval; then the
``[[mechanism]]`` rules of the rule set are evaluated column-wise. The gate verdict is not read
and not changed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import polars as pl

from .common import stats_intervals
from .thrash import COMPLETE_KINDS

if TYPE_CHECKING:
    from ..model.result import AnalysisView as Analysis


def evidence(a: Analysis, v: pl.DataFrame) -> pl.DataFrame:
    """``event_id`` + the mech_* columns."""
    from ..rules.mechanisms import MECHANISM_EVIDENCE

    has_need = pl.col("p_needed").is_not_null() & pl.col("p_free").is_not_null()
    failed = (
        pl.when(has_need)
        .then(pl.col("p_needed") + pl.col("p_watermark").fill_null(0) > pl.col("p_free"))
        # V0: "... because there is not enough KV cache space"; its counter's reconstructed events are the same calls
        .when(pl.col("kind").is_in(["logged", "reconstructed"]))
        .then(pl.lit(True))
    )
    no_fail = pl.when(pl.col("p_src").is_not_null()).then(pl.col("p_needed").is_null())
    df = v.with_columns(mech_alloc_failed=failed, mech_no_failed_alloc=no_fail)
    step_key = ["p_engine", "p_step"]
    df = df.with_columns(
        mech_step_preempted=pl.when(pl.col("p_step").is_not_null()).then(pl.len().over(step_key)).cast(pl.Int64),
        mech_step_running=pl.when(pl.col("p_step").is_not_null()).then(pl.col("p_running").max().over(step_key)),
    )
    complete = pl.col("kind").is_in(COMPLETE_KINDS) & pl.col("request_id").is_not_null()
    df = df.with_columns(_t=pl.col("time").dt.epoch("us").fill_null(0), _o=pl.int_range(pl.len()))
    df = (
        df.sort("_t", "_o")
        .with_columns(
            mech_request_preemptions=pl.when(complete).then(pl.len().over("request_id", complete)).cast(pl.Int64),
            mech_request_index=pl.when(complete)
            .then(pl.int_range(1, pl.len() + 1).over("request_id", complete))
            .cast(pl.Int64),
        )
        .sort("_o")
    )
    df = df.with_columns(
        mech_prompt_tokens=pl.col("prompt_tokens"),
        mech_policy=pl.col("p_policy"),
        mech_victim_priority=pl.col("t_priority"),
    )
    iv = stats_intervals(a)
    a_stats = a.stats
    # An event spread in a counted interval is read at the interval's end, as every event of it.
    spread = a.events.select(
        "event_id",
        pl.when((pl.col("time_precision") == "interval") & pl.col("interval_end").is_not_null())
        .then(pl.col("interval_end"))
        .alias("_iend"),
    )
    timed = (
        df.join(spread, on="event_id", how="left")
        .with_columns(time=pl.coalesce("_iend", "time"))
        .filter(pl.col("time").is_not_null())
    )
    if iv.height and timed.height and a_stats.height:
        # The event's own engine's stats line (another engine's never explains it).
        tput = (
            a_stats.filter(pl.col("time").is_not_null())
            .select(
                pl.col("time").alias("_st"),
                pl.col("engine").fill_null("0").alias("_eng"),
                pl.col("prompt_tput").alias("mech_prompt_tput_at"),
                pl.col("gen_tput").alias("mech_gen_tput_at"),
            )
            .sort("_st")
        )
        near = (
            timed.select("event_id", "time", pl.col("engine").fill_null("0").alias("_eng"))
            .sort("time")
            .join_asof(
                tput,
                left_on="time",
                right_on="_st",
                by="_eng",
                strategy="forward",
                tolerance="60s",
                check_sortedness=False,
            )
            .select("event_id", "mech_prompt_tput_at", "mech_gen_tput_at")
        )
        df = df.join(near, on="event_id", how="left")
    else:
        df = df.with_columns(mech_prompt_tput_at=pl.lit(None, pl.Float64), mech_gen_tput_at=pl.lit(None, pl.Float64))
    cols = ["event_id"] + [pl.col(k).cast(getattr(pl, t)) for k, (t, _) in MECHANISM_EVIDENCE.items()]
    return df.select(cols)


def evaluate(a: Analysis, mech: pl.DataFrame) -> pl.DataFrame | None:
    """Per event: mechanism, mechanism_rule, mechanism_confidence, mechanism_evidence, mechanism_missing;
    None without a rule set (``--no-rules``)."""
    from ..rules.mechanisms import active
    from ..rules.mechanisms import evaluate as run
    from ..rules.verdicts import event_frame

    rs = a.ruleset
    if rs is None or not active(rs) or a.events.height == 0:
        return None
    fr = event_frame(a).join(mech, on="event_id", how="left")
    out = run(fr, rs)
    return out.with_columns(pl.col("mechanism_missing").list.join("; ").replace("", None).alias("mechanism_missing"))


def counts(per_event: pl.DataFrame | None) -> dict[str, Any]:
    if per_event is None or per_event.height == 0 or "mechanism" not in per_event.columns:
        return {}
    rows = per_event.group_by("mechanism").len().sort(["len", "mechanism"], descending=[True, False]).iter_rows()
    return {str(k): int(n) for k, n in rows}
