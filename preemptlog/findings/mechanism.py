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

from ..model.requests import with_request_key
from ..rules.mechanisms import MECHANISM_EVIDENCE, active
from ..rules.mechanisms import evaluate as run
from ..rules.verdicts import event_frame
from .common import frame, per_server, stats_intervals
from .thrash import COMPLETE_KINDS

if TYPE_CHECKING:
    from ..model.result import AnalysisView as Analysis


def evidence(a: Analysis, v: pl.DataFrame) -> pl.DataFrame:
    """``event_id`` + the mech_* columns."""

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
    # a request is (server, id): model.requests.with_request_key, as every count of a request's preemptions
    keys = with_request_key(
        a.events.select(
            "event_id", "request_id", "kind", "source", *[c for c in ("stream", "seq") if c in a.events.columns]
        ),
        a.records,
    ).select("event_id", "_rkey")
    df = df.join(keys, on="event_id", how="left", maintain_order="left")
    df = df.with_columns(_t=pl.col("time").dt.epoch("us").fill_null(0), _o=pl.int_range(pl.len()))
    df = (
        df.sort("_t", "_o")
        .with_columns(
            mech_request_preemptions=pl.when(complete).then(pl.len().over("_rkey", complete)).cast(pl.Int64),
            mech_request_index=pl.when(complete)
            .then(pl.int_range(1, pl.len() + 1).over("_rkey", complete))
            .cast(pl.Int64),
        )
        .sort("_o")
        .drop("_rkey")
    )
    df = df.with_columns(
        mech_prompt_tokens=pl.col("prompt_tokens"),
        mech_policy=pl.col("p_policy"),
        mech_victim_priority=pl.col("t_priority"),
    )
    # each server's counted events placed by its own request records (common.per_server)
    att_schema = {
        "event_id": pl.String,
        "_a_rid": pl.String,
        **{c: pl.Int64 for c in ("_a_pre", "_a_idx", "_a_prompt")},
    }

    def placed(view: Analysis) -> pl.DataFrame:
        got = attributed(view)
        return pl.DataFrame(schema=att_schema) if got is None else got

    att = per_server(a, placed).drop_nulls("_a_pre")
    if att.height:
        # A counted event (no request id) that a request's own preemption count places: that request's values.
        df = (
            df.join(att, on="event_id", how="left")
            .with_columns(
                mech_request_preemptions=pl.coalesce("mech_request_preemptions", "_a_pre"),
                mech_request_index=pl.coalesce("mech_request_index", "_a_idx"),
                mech_prompt_tokens=pl.coalesce("mech_prompt_tokens", "_a_prompt"),
            )
            .drop("_a_pre", "_a_idx", "_a_prompt", "_a_rid")
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
        # The event's own engine's stats line (another engine's never explains it); a log's event, its
        # own log's line (another log beside it is another server's: joiner/stats.py lanes).
        logs = frame(a, "log_streams")
        has_stream = "stream" in a.events.columns and "stream" in a_stats.columns and logs is not None
        log_ids = logs.get_column("stream").implode() if logs is not None else pl.Series([], dtype=pl.Int32)
        own = (
            pl.when(pl.col("_strm").is_in(log_ids).fill_null(False))
            .then(pl.concat_str([pl.col("_eng"), pl.lit("|s:"), pl.col("_strm").cast(pl.String)]))
            .otherwise(pl.col("_eng"))
        )
        stream_of = pl.col("stream").cast(pl.Int32) if has_stream else pl.lit(None, pl.Int32)
        lines = a_stats.filter(pl.col("time").is_not_null()).select(
            pl.col("time").alias("_st"),
            pl.col("engine").fill_null("0").alias("_eng"),
            stream_of.alias("_strm"),
            pl.col("prompt_tput").alias("mech_prompt_tput_at"),
            pl.col("gen_tput").alias("mech_gen_tput_at"),
        )
        # every line under its engine's key and under its log's key
        tput = pl.concat(
            [lines.with_columns(_k=pl.col("_eng")), lines.with_columns(_k=own).filter(pl.col("_k") != pl.col("_eng"))]
        ).sort("_st")
        evs = timed.select("event_id", "time", pl.col("engine").fill_null("0").alias("_eng"))
        if has_stream:
            evs = evs.join(
                a.events.select("event_id", pl.col("stream").cast(pl.Int32).alias("_strm")), on="event_id", how="left"
            )
        else:
            evs = evs.with_columns(_strm=pl.lit(None, pl.Int32))
        near = (
            evs.with_columns(_k=own)
            .sort("time")
            .join_asof(
                tput.select("_st", "_k", "mech_prompt_tput_at", "mech_gen_tput_at"),
                left_on="time",
                right_on="_st",
                by="_k",
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


def attributed(a: Analysis) -> pl.DataFrame | None:
    """Counted events (no request id: a V1 ``Preemptions: N`` interval, a /metrics increase) that a
    request's own preemption count places: ``event_id, _a_rid, _a_pre, _a_idx, _a_prompt``.

    A request's count is vLLM's own (its finish record's ``num_preemptions``, else its resume records);
    V1 counts a preemption when the request runs again, so each resume record falls in the counted
    interval (of its engine) that counts it; without resume records, all of its preemptions are in the
    one counted interval of its engine that overlaps its life (arrival to finish), when it finished
    before the last count (the counter had counted them all). The interval's events are given to such requests in order (most preemptions
    first; which of the interval's interchangeable events is whose is not known), at most as many as
    the interval counts; the others stay unattributed. None when nothing is placed."""

    br = frame(a, "bt_requests")
    ev = a.events
    if br is None or ev.height == 0 or "phase" not in br.columns:
        return None
    counted = ev.filter(
        pl.col("request_id").is_null()
        & pl.col("interval_end").is_not_null()
        & (
            pl.col("kind").is_in(["interval", "reconstructed"])
            | pl.col("time_precision").is_in(["interval", "unplaced"])
        )
    )
    if counted.height == 0:
        return None
    eng = pl.col("engine").cast(pl.String).fill_null("0")
    counted = counted.select(
        "event_id", eng.alias("_eng"), pl.col("interval_start").alias("_lo"), pl.col("interval_end").alias("_hi")
    ).with_row_index("_o")
    ivs = counted.group_by("_eng", "_lo", "_hi", maintain_order=True).agg(pl.len().alias("_n")).with_row_index("_v")
    # requests already named by complete events (records, markers) count there, not here
    named = ev.filter(pl.col("request_id").is_not_null()).get_column("request_id").unique()
    rq = br.filter(~pl.col("request_id").is_in(named.implode())).with_columns(_eng=eng)
    life = rq.group_by("_eng", "request_id").agg(
        pl.col("time").filter(pl.col("phase") == "arrival").min().alias("_arr"),
        pl.col("time").filter(pl.col("phase") == "finish").max().alias("_fin"),
        pl.col("num_preemptions").filter(pl.col("phase") == "finish").max().alias("_npre"),
        (pl.col("phase") == "resume").sum().cast(pl.Int64).alias("_nres"),
        pl.col("prompt_tokens").filter(pl.col("phase") == "arrival").first().alias("_prompt"),
    )
    life = life.with_columns(_k=pl.coalesce("_npre", pl.when(pl.col("_nres") > 0).then(pl.col("_nres"))))
    life = life.filter(pl.col("_k") > 0)
    if life.height == 0:
        return None
    # resume records: each in the interval that counts it
    res = rq.filter(pl.col("phase") == "resume").join(
        life.select("_eng", "request_id", "_k"), on=["_eng", "request_id"]
    )
    by_resume = (
        res.join(ivs, on="_eng")
        .filter(
            (pl.col("time") > pl.col("_lo").fill_null(pl.col("time") - pl.duration(days=1)))
            & (pl.col("time") <= pl.col("_hi"))
        )
        .group_by("_v", "request_id")
        .agg(pl.len().cast(pl.Int64).alias("_m"))
    )
    # no resume records: the life inside the counted span, one counted interval overlapping it
    span = ivs.group_by("_eng").agg(pl.col("_lo").min().alias("_slo"), pl.col("_hi").max().alias("_shi"))
    whole = (
        life.filter((pl.col("_nres") == 0) & pl.col("_arr").is_not_null() & pl.col("_fin").is_not_null())
        .join(span, on="_eng")
        .filter(pl.col("_fin") <= pl.col("_shi"))
        .join(ivs, on="_eng")
        .filter((pl.col("_lo").is_null() | (pl.col("_lo") < pl.col("_fin"))) & (pl.col("_hi") > pl.col("_arr")))
        .filter(pl.len().over("_eng", "request_id") == 1)
        .select("_v", "request_id", pl.col("_k").alias("_m"))
    )
    placed = pl.concat([by_resume, whole], how="vertical_relaxed")
    if placed.height == 0:
        return None
    placed = placed.join(life.select("request_id", "_k", "_prompt"), on="request_id", how="left").sort(
        "_v", "_k", "request_id", descending=[False, True, False]
    )
    # the interval's events, in order, to each placed request in turn (at most what the interval counts)
    slots = placed.with_columns(_end=pl.col("_m").cum_sum().over("_v")).with_columns(
        _start=pl.col("_end") - pl.col("_m")
    )
    evs = counted.join(
        ivs.select("_eng", "_lo", "_hi", "_v"), on=["_eng", "_lo", "_hi"], nulls_equal=True
    ).with_columns(_pos=pl.int_range(pl.len()).over("_v"))
    j = evs.join(slots, on="_v").filter((pl.col("_pos") >= pl.col("_start")) & (pl.col("_pos") < pl.col("_end")))
    if j.height == 0:
        return None
    return j.select(
        "event_id",
        pl.col("request_id").alias("_a_rid"),
        pl.col("_k").cast(pl.Int64).alias("_a_pre"),
        (pl.col("_pos") - pl.col("_start") + 1).cast(pl.Int64).alias("_a_idx"),
        pl.col("_prompt").cast(pl.Int64).alias("_a_prompt"),
    )


def evaluate(a: Analysis, mech: pl.DataFrame) -> pl.DataFrame | None:
    """Per event: mechanism, mechanism_rule, mechanism_confidence, mechanism_evidence, mechanism_missing;
    None without a rule set (``--no-rules``)."""

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
