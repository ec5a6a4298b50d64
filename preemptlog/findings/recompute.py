"""Finding 1: recompute cost. What each preemption threw away and how long the victim waited.

Per event, the tokens the victim must compute again, from the best evidence the bundle holds:

1. ``num_computed_tokens_lost`` of the victim's block-table preempt record (the vLLM plugin, v2):
   exact (V1 sets ``num_computed_tokens = 0`` on preemption);
2. ``num_computed_tokens`` of the victim's table record at the preemption step: exact;
3. ``num_tokens`` of the victim's latest table record before the event (prompt + generated so
   far, V0 RECOMPUTE recomputes them all): a lower bound (the request only grew since);
4. the prompt length of its request line (``prompt_token_ids``) or request record: a lower bound
   (what it generated before the preemption is not in the bundle);
5. otherwise unknown (no request id, or no tokens for it). V0 SWAP-mode victims recompute nothing.

Time preempted: from the preemption to the victim's next allocation at a later step of the same
engine: an ``allocate`` / ``swap_in`` event or a ``scheduled`` record (exact), else its next table
record holding blocks (``at most``: it was running again by then), only where records show it.

Totals per minute and for the incident, with the tokens the server processed in the same stats
intervals (prompt + generation throughput x interval, common.stats_intervals) and the recomputed
share of all the tokens computed: recomputed / (processed + recomputed), since vLLM's throughput
counts each prompt once and leaves recomputation out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import polars as pl

from .. import engines
from .common import frame, per_server, src_expr, stats_intervals

if TYPE_CHECKING:
    from ..model.result import AnalysisView as Analysis

NEAR_S = 2.0  # a log event and a preempt record of the same request this close are the same preemption

PREEMPT_COLS = {
    "p_step": "Int64",
    "p_engine": "String",
    "p_lost": "Int64",
    "p_needed": "Int64",
    "p_free": "Int64",
    "p_watermark": "Int64",
    "p_running": "Int64",
    "p_policy": "String",
    "p_reason": "String",
    "p_src": "String",
    "p_time": "Datetime",
}


def _preempts(a: Analysis) -> pl.DataFrame | None:
    bt = frame(a, "bt_events")
    if bt is None or "num_computed_tokens_lost" not in bt.columns:
        return None
    p = bt.filter(pl.col("action") == "preempt")
    if p.height == 0:
        return None
    return p.select(
        pl.col("source").alias("_psource"),
        pl.col("line").alias("_pline"),
        pl.col("request_id").alias("_prid"),
        pl.col("time").alias("p_time"),
        pl.col("step").alias("p_step"),
        pl.col("engine").fill_null("0").alias("p_engine"),
        pl.col("num_computed_tokens_lost").alias("p_lost"),
        pl.col("blocks_needed").alias("p_needed"),
        pl.col("pool_free_blocks").alias("p_free"),
        pl.col("watermark_blocks").alias("p_watermark"),
        pl.col("running").alias("p_running"),
        pl.col("policy").alias("p_policy"),
        pl.col("reason").alias("p_reason"),
        src_expr().alias("p_src"),
    )


def victims(a: Analysis) -> pl.DataFrame:
    """One row per event: the victim's preempt record, table and request facts (internal columns), each
    from the event's own server's records and request lines (common.per_server)."""
    return per_server(a, _victims)


def _victims(a: Analysis) -> pl.DataFrame:
    ev = a.events.select(
        "event_id",
        "time",
        "kind",
        "mode",
        "request_id",
        pl.col("engine").fill_null("0"),
        pl.col("engine_kind") if "engine_kind" in a.events.columns else pl.lit(engines.DEFAULT).alias("engine_kind"),
        "source",
        "line",
    )
    p = _preempts(a)
    if p is not None and ev.height:
        by_line = (
            ev.filter(pl.col("kind") == "record")
            .join(p, left_on=["source", "line"], right_on=["_psource", "_pline"], how="inner")
            .drop("_prid")
        )
        rest = ev.filter(
            (pl.col("kind") != "record") & pl.col("request_id").is_not_null() & pl.col("time").is_not_null()
        )
        near = None
        if rest.height:
            near = (
                rest.sort("time")
                .join_asof(
                    # the same request of the same engine (a record of another engine never matches)
                    p.filter(pl.col("p_time").is_not_null()).with_columns(_peng=pl.col("p_engine")).sort("p_time"),
                    left_on="time",
                    right_on="p_time",
                    by_left=["request_id", "engine"],
                    by_right=["_prid", "_peng"],
                    strategy="nearest",
                    tolerance=f"{int(NEAR_S * 1000)}ms",
                    check_sortedness=False,
                )
                .drop("_psource", "_pline")
                .filter(pl.col("p_src").is_not_null())
            )
        matched = pl.concat([by_line, near], how="diagonal_relaxed") if near is not None else by_line
        ev = ev.join(matched.select(["event_id", *PREEMPT_COLS]), on="event_id", how="left")
    else:
        ev = ev.with_columns(
            [
                pl.lit(None, getattr(pl, t) if t != "Datetime" else pl.Datetime("us", "UTC")).alias(c)
                for c, t in PREEMPT_COLS.items()
            ]
        )
    ev = _with_tables(a, ev)
    ev = _with_prompts(a, ev)
    return _with_engines(a, ev)


def _engine_words(words: Callable[[engines.Engine], str | None]) -> pl.Expr:
    """Each engine's words for its own events (``engine_kind``), null for an engine without them."""
    out: Any = None
    for eng in engines.registered():
        w = words(eng)
        if w is None:
            continue
        cond = pl.col("engine_kind") == eng.name
        out = pl.when(cond).then(pl.lit(w)) if out is None else out.when(cond).then(pl.lit(w))
    return pl.lit(None, pl.String) if out is None else out.otherwise(pl.lit(None, pl.String))


def _with_engines(a: Analysis, ev: pl.DataFrame) -> pl.DataFrame:
    """The tokens an engine's own log gives an event (``e_gained``, ``e_gained_src``: each engine's
    ``event_tokens``, of its own events only; SGLang's retraction line)."""
    cols = {"e_gained": pl.Int64, "e_gained_src": pl.String}
    parts: list[pl.DataFrame] = []
    if ev.height and "stream" in a.events.columns:
        for eng in engines.registered():
            if eng.event_tokens is None:
                continue
            keys = a.events.filter(engines.events_of(eng.name)).select(
                "event_id", pl.col("stream").cast(pl.Int32), pl.col("seq").cast(pl.UInt32), "_sub"
            )
            got = eng.event_tokens(a, keys)
            if got is not None and got.height:
                parts.append(got.select(pl.col("event_id"), pl.col("tokens").cast(pl.Int64), pl.col("tokens_src")))
    if not parts:
        return ev.with_columns([pl.lit(None, t).alias(c) for c, t in cols.items()])
    got = pl.concat(parts).unique("event_id", keep="first", maintain_order=True)
    return ev.join(got.rename({"tokens": "e_gained", "tokens_src": "e_gained_src"}), on="event_id", how="left")


def _with_tables(a: Analysis, ev: pl.DataFrame) -> pl.DataFrame:
    """The victim's table at the preemption step (computed tokens) and its latest table before."""
    tb = frame(a, "bt_tables")
    cols = {
        "t_computed": pl.Int64,
        "t_computed_src": pl.String,
        "t_priority": pl.Int64,
        "t_tokens": pl.Int64,
        "t_tokens_src": pl.String,
    }
    if tb is None or ev.height == 0:
        return ev.with_columns([pl.lit(None, t).alias(c) for c, t in cols.items()])
    tb = tb.with_columns(pl.col("engine").fill_null("0"), _src=src_expr())
    at = (
        tb.filter(pl.col("num_computed_tokens").is_not_null() | pl.col("priority").is_not_null())
        .group_by("engine", "step", "request_id")
        .agg(
            pl.col("num_computed_tokens").last().alias("t_computed"),
            pl.col("_src").last().alias("t_computed_src"),
            pl.col("priority").last().alias("t_priority"),
        )
    )
    ev = ev.join(
        at, left_on=["p_engine", "p_step", "request_id"], right_on=["engine", "step", "request_id"], how="left"
    )
    ev = ev.with_columns(t_computed_src=pl.when(pl.col("t_computed").is_not_null()).then(pl.col("t_computed_src")))
    # The latest table of the request at or before the event (tokens held: prompt + generated so far).
    tt = tb.filter(pl.col("num_tokens").is_not_null() & pl.col("time").is_not_null()).select(
        pl.col("request_id").alias("_trid"),
        pl.col("time").alias("_ttime"),
        pl.col("num_tokens").alias("t_tokens"),
        pl.col("_src").alias("t_tokens_src"),
    )
    timed = ev.filter(pl.col("time").is_not_null() & pl.col("request_id").is_not_null())
    if tt.height and timed.height:
        window = f"{int(max(a.options.before, 0.001) * 1000)}ms"
        # A log line stamped to the second covers that whole second: a table later in it is before the event.
        key = pl.col("time") + pl.when(pl.col("time_precision") == "1s").then(
            pl.duration(microseconds=999_999)
        ).otherwise(pl.duration(microseconds=0))
        near = (
            ev.filter(pl.col("time").is_not_null() & pl.col("request_id").is_not_null())
            .join(a.events.select("event_id", "time_precision"), on="event_id", how="left")
            .select("event_id", key.alias("_key"), "request_id")
            .sort("_key")
            .join_asof(
                tt.sort("_ttime"),
                left_on="_key",
                right_on="_ttime",
                by_left="request_id",
                by_right="_trid",
                strategy="backward",
                tolerance=window,
                check_sortedness=False,
            )
            .select("event_id", "t_tokens", "t_tokens_src")
        )
        ev = ev.join(near, on="event_id", how="left")
    else:
        ev = ev.with_columns(t_tokens=pl.lit(None, pl.Int64), t_tokens_src=pl.lit(None, pl.String))
    return ev


def _with_prompts(a: Analysis, ev: pl.DataFrame) -> pl.DataFrame:
    """The victim's prompt length: its request record (arrival), else its request line."""
    parts = []
    br = frame(a, "bt_requests")
    if br is not None:
        parts.append(
            br.filter((pl.col("phase") == "arrival") & pl.col("prompt_tokens").is_not_null()).select(
                "request_id", "prompt_tokens", src_expr().alias("prompt_src")
            )
        )
    rq = a.requests
    if rq.height:
        # V1 0.14+ logs the internal id (external + '-' + 8 chars) on 'Added request': events may name either.
        rec = rq.filter((pl.col("action") == "received") & pl.col("prompt_tokens").is_not_null())
        parts.append(rec.select("request_id", "prompt_tokens", src_expr().alias("prompt_src")))
        if "internal_id" in rq.columns:
            inner = (
                rq.filter(pl.col("internal_id").is_not_null()).select("request_id", "internal_id").unique("internal_id")
            )
            parts.append(
                rec.join(inner, on="request_id").select(
                    pl.col("internal_id").alias("request_id"), "prompt_tokens", src_expr().alias("prompt_src")
                )
            )
    if not parts or ev.height == 0:
        return ev.with_columns(prompt_tokens=pl.lit(None, pl.Int64), prompt_src=pl.lit(None, pl.String))
    pr = pl.concat(parts, how="vertical_relaxed").unique("request_id", keep="first", maintain_order=True)
    return ev.join(pr, on="request_id", how="left")


def per_event(v: pl.DataFrame, a: Analysis) -> pl.DataFrame:
    """``event_id, recompute_tokens, recompute_bound, recompute_basis, recompute_src, preempted_s,
    preempted_bound, resumed_src``."""
    swap = pl.col("mode").fill_null("") == "SWAP"
    tokens = (
        pl.when(swap)
        .then(pl.lit(0, pl.Int64))
        .when(pl.col("p_lost").is_not_null())
        .then(pl.col("p_lost"))
        .when(pl.col("t_computed").is_not_null())
        .then(pl.col("t_computed"))
        .when(pl.col("t_tokens").is_not_null())
        .then(pl.col("t_tokens"))
        .when(pl.col("e_gained").is_not_null())
        .then(pl.col("e_gained"))
        .when(pl.col("prompt_tokens").is_not_null())
        .then(pl.col("prompt_tokens"))
    )
    bound = (
        pl.when(swap | pl.col("p_lost").is_not_null() | pl.col("t_computed").is_not_null())
        .then(pl.lit("exact"))
        .when(
            pl.col("t_tokens").is_not_null() | pl.col("e_gained").is_not_null() | pl.col("prompt_tokens").is_not_null()
        )
        .then(pl.lit("lower"))
    )
    known = (
        pl.when(swap)
        .then(pl.lit("V0 SWAP mode: the blocks go to CPU memory and come back; nothing is recomputed"))
        .when(pl.col("p_lost").is_not_null())
        .then(pl.lit("num_computed_tokens_lost of the victim's preempt record"))
        .when(pl.col("t_computed").is_not_null())
        .then(pl.lit("num_computed_tokens of the victim's table at the preemption step"))
        .when(pl.col("t_tokens").is_not_null())
        .then(pl.lit("num_tokens of the victim's latest table before the event (prompt + generated so far; at least)"))
        .when(pl.col("e_gained").is_not_null())
        .then(_engine_words(lambda e: e.event_tokens_basis))
        .when(pl.col("prompt_tokens").is_not_null())
        .then(pl.lit("the victim's prompt length (at least; what it generated before is not in the bundle)"))
    )
    for eng in engines.registered():  # why an engine's event has no tokens, in its terms (SGLang's line)
        if eng.tokens_unknown is not None:
            known = known.when(pl.col("engine_kind") == eng.name).then(pl.lit(eng.tokens_unknown))
    basis = (
        known.when(pl.col("request_id").is_null())
        .then(pl.lit("unknown: the event names no request"))
        .otherwise(pl.lit("unknown: no tokens of this request in the bundle (block-table records or prompt_token_ids)"))
    )
    src = (
        pl.when(swap)
        .then(pl.concat_str([pl.col("source"), pl.lit(":"), pl.col("line").cast(pl.String)]))
        .when(pl.col("p_lost").is_not_null())
        .then(pl.col("p_src"))
        .when(pl.col("t_computed").is_not_null())
        .then(pl.col("t_computed_src"))
        .when(pl.col("t_tokens").is_not_null())
        .then(pl.col("t_tokens_src"))
        .when(pl.col("e_gained").is_not_null())
        .then(pl.col("e_gained_src"))
        .when(pl.col("prompt_tokens").is_not_null())
        .then(pl.col("prompt_src"))
    )
    out = v.with_columns(
        recompute_tokens=tokens.cast(pl.Int64), recompute_bound=bound, recompute_basis=basis, recompute_src=src
    )

    def resumed(view: Analysis) -> pl.DataFrame:  # the victim's resume, from its own server's records
        mine = out.join(view.events.select("event_id"), on="event_id", how="semi", maintain_order="left")
        return _with_cache_hits(view, _with_resume(view, mine))

    return per_server(a, resumed).select(
        "event_id",
        "recompute_tokens",
        "recompute_bound",
        "recompute_basis",
        "recompute_src",
        "preempted_s",
        "preempted_bound",
        "resumed_src",
        "resume_cached_tokens",
        "resume_cached_src",
    )


def _with_cache_hits(a: Analysis, v: pl.DataFrame) -> pl.DataFrame:
    """``resume_cached_tokens``: the victim's computed tokens when it was re-admitted, from its next
    ``resume`` record after the preemption step (the vLLM plugin): prefix-cache hits, not computed
    again. Null without such a record."""
    br = frame(a, "bt_requests")
    none = v.with_columns(resume_cached_tokens=pl.lit(None, pl.Int64), resume_cached_src=pl.lit(None, pl.String))
    if br is None or "num_computed_tokens" not in br.columns:
        return none
    res = br.filter(
        (pl.col("phase") == "resume") & pl.col("step").is_not_null() & pl.col("num_computed_tokens").is_not_null()
    ).select(
        pl.col("engine").fill_null("0").alias("_ceng"),
        pl.col("request_id").alias("_crid"),
        pl.col("step").alias("_cstep"),
        pl.col("num_computed_tokens").cast(pl.Int64).alias("resume_cached_tokens"),
        src_expr().alias("resume_cached_src"),
    )
    known = v.filter(pl.col("p_step").is_not_null() & pl.col("request_id").is_not_null())
    if res.height == 0 or known.height == 0:
        return none
    hits = (
        known.select("event_id", "p_engine", "request_id", (pl.col("p_step") + 1).alias("_key"))
        .sort("_key")
        .join_asof(
            res.sort("_cstep"),
            left_on="_key",
            right_on="_cstep",
            by_left=["p_engine", "request_id"],
            by_right=["_ceng", "_crid"],
            strategy="forward",
            check_sortedness=False,
        )
        .select("event_id", "resume_cached_tokens", "resume_cached_src")
    )
    return v.join(hits, on="event_id", how="left")


def prefix_cache_split(a: Analysis, ev: pl.DataFrame) -> dict[str, Any] | None:
    """Lost, re-served from the prefix cache and truly recomputed, over the preemptions whose lost
    tokens are exact and whose resume was recorded (each exact there); None when the bundle has
    no resume record (then the lost tokens are all the recompute the bundle shows)."""
    br = frame(a, "bt_requests")
    if br is None or br.filter(pl.col("phase") == "resume").height == 0:
        return None
    both = ev.filter((pl.col("recompute_bound") == "exact") & pl.col("resume_cached_tokens").is_not_null())
    lost_all = ev.filter(pl.col("recompute_bound") == "exact")
    got = both.select(
        pl.col("recompute_tokens").sum().alias("lost"),
        pl.min_horizontal("resume_cached_tokens", "recompute_tokens").sum().alias("cache"),
    ).row(0)
    lost, cache = int(got[0] or 0), int(got[1] or 0)
    first = both.get_column("resume_cached_src").drop_nulls()
    return {
        "tokens_lost": lost,
        "tokens_from_cache": cache,
        "tokens_recomputed": lost - cache,
        "preemptions": both.height,
        "preemptions_without_resume": lost_all.height - both.height,
        "basis": "per preemption: num_computed_tokens_lost of its preempt record (lost), num_computed_tokens of "
        "the victim's next resume record (re-served from the prefix cache, at most what was lost), the rest "
        "recomputed" + (f"; first resume record {first[0]}" if first.len() else ""),
    }


def _with_resume(a: Analysis, v: pl.DataFrame) -> pl.DataFrame:
    """``preempted_s``: preemption -> the victim's next allocation at a later step of its engine."""
    # (frame, the rows that show the victim running again, how exact that is)
    sources = [
        ("bt_events", pl.col("action").is_in(["allocate", "swap_in"]), "exact"),
        # a table at a later step shows the request running again by then: an upper bound
        ("bt_tables", pl.col("num_blocks") > 0, "at most"),
        ("bt_requests", pl.col("phase").is_in(["scheduled", "resume"]), "exact"),
    ]
    parts = []
    for name, running_again, bound in sources:
        df = frame(a, name)
        if df is not None:
            parts.append(
                df.filter(running_again).select(
                    pl.col("engine").fill_null("0"),
                    "step",
                    "request_id",
                    "time",
                    src_expr().alias("_rsrc"),
                    pl.lit(bound).alias("_rbound"),
                )
            )
    known = v.filter(pl.col("p_step").is_not_null() & pl.col("p_time").is_not_null())
    if not parts or known.height == 0:
        return v.with_columns(
            preempted_s=pl.lit(None, pl.Float64),
            preempted_bound=pl.lit(None, pl.String),
            resumed_src=pl.lit(None, pl.String),
        )
    res = (
        pl.concat(parts, how="vertical_relaxed")
        .filter(pl.col("step").is_not_null() & pl.col("time").is_not_null())
        .select(
            pl.col("engine").alias("_reng"),
            pl.col("request_id").alias("_rrid"),
            pl.col("step").alias("_rstep"),
            pl.col("time").alias("_rtime"),
            "_rsrc",
            "_rbound",
        )
        .sort("_rbound", descending=True)  # "exact" before "at most" at the same step
        .unique(["_reng", "_rrid", "_rstep"], keep="first", maintain_order=True)
        .sort("_rstep")
    )
    nxt = (
        known.select("event_id", "p_engine", "request_id", "p_time", (pl.col("p_step") + 1).alias("_key"))
        .sort("_key")
        .join_asof(
            res,
            left_on="_key",
            right_on="_rstep",
            by_left=["p_engine", "request_id"],
            by_right=["_reng", "_rrid"],
            strategy="forward",
            check_sortedness=False,
        )
        .select(
            "event_id",
            ((pl.col("_rtime") - pl.col("p_time")).dt.total_microseconds() / 1e6).alias("preempted_s"),
            pl.col("_rbound").alias("preempted_bound"),
            pl.col("_rsrc").alias("resumed_src"),
        )
    )
    return v.join(nxt, on="event_id", how="left")


def _f(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) else 0.0


def totals(a: Analysis, pe: pl.DataFrame) -> tuple[dict[str, Any], pl.DataFrame]:
    """The incident's recompute cost (dict) and per minute (frame: minute, preemptions, tokens,
    tokens_are_lower_bound, unknown, processed_tokens, share)."""
    ev = a.events.select("event_id", "time").join(pe, on="event_id", how="left")
    n = ev.height
    known = ev.filter(pl.col("recompute_tokens").is_not_null())
    exact = known.filter(pl.col("recompute_bound") == "exact")
    lower = known.filter(pl.col("recompute_bound") == "lower")
    unknown = n - known.height
    total = int(known.get_column("recompute_tokens").sum()) if known.height else None
    iv = stats_intervals(a)
    timed = ev.filter(pl.col("time").is_not_null())
    # The tokens its servers processed: when every timed event is a log's, the stats lines of those
    # logs only (another log beside them is another server's: its throughput is not theirs).
    logs = frame(a, "log_streams")
    if timed.height and logs is not None and logs.height and "stream" in a.events.columns:
        streams = a.events.filter(pl.col("time").is_not_null()).get_column("stream").cast(pl.Int32)
        if streams.is_in(logs.get_column("stream").implode()).fill_null(False).all():
            iv = iv.filter(pl.col("stream").is_in(streams.unique().implode()))
    processed = None
    share = None
    window: dict[str, Any] = {}
    if iv.height and timed.height:
        lo, hi = timed.get_column("time").min(), timed.get_column("time").max()
        sel = iv.filter((pl.col("t1") >= lo) & (pl.col("t0") <= hi))
        if sel.height:
            processed = _f(sel.get_column("prompt_tokens").sum()) + _f(sel.get_column("gen_tokens").sum())
            window = {
                "from": sel.get_column("t0").min(),
                "to": sel.get_column("t1").max(),
                "stats_lines": sel.height,
                "first_line": sel.get_column("src")[0],
                "last_line": sel.get_column("src")[-1],
            }
            # vLLM's throughput counts a request's prompt once, at its first token, and each token
            # generated once (IterationStats.update_from_output: prompt tokens only while
            # is_prefilling, vllm/v1/metrics/stats.py): recomputation is not in it. The share is of all
            # the tokens computed, processed + recomputed, so it is at most 1. Only the preemptions
            # whose tokens are known (exact or at least) count.
            if total is not None and processed + total > 0:
                share = total / (processed + total)
    resumed = ev.filter(pl.col("preempted_s").is_not_null())
    # Counts whose events were capped (events/reconcile.py): the preemptions are the count, the ones not
    # made into events have no victim known (unknown tokens); the per-minute rows are of the events only.
    rec = a.counters.get("reconciliation") or {}
    not_made = max(0, int(rec.get("total") or 0) - int(rec.get("events") or 0)) if rec.get("capped") else 0
    unknown += not_made
    out: dict[str, Any] = {
        "evaluable": n > 0 and known.height > 0,
        "preemptions": n + not_made,
        "tokens": total,
        "tokens_is_lower_bound": bool(lower.height) or (unknown > 0 and total is not None),
        "preemptions_exact": exact.height,
        "preemptions_lower_bound": lower.height,
        "preemptions_unknown": unknown,
        **(
            {
                "preemptions_events": n,
                "per_minute_basis": "the events only: a count larger than the events made of it (capped) is in "
                "'preemptions', not in the minutes",
            }
            if not_made
            else {}
        ),
        "per_preemption_mean": (total / known.height) if total is not None and known.height else None,
        "processed_tokens": processed,
        "processed_window": window or None,
        "processed_basis": "prompt + generation throughput x interval of the stats lines whose intervals overlap the "
        "events (counters are not read); vLLM's throughput leaves recomputation out, so the share is recomputed / "
        "(processed + recomputed)"
        if processed is not None
        else "unknown: no stats lines with throughput and a measured interval around the events",
        "share_of_processed": share,
        "preempted_seconds": {
            "measured": resumed.height,
            "upper_bounds": resumed.filter(pl.col("preempted_bound") == "at most").height,
            "median": _f(resumed.get_column("preempted_s").median()) if resumed.height else None,
            "max": _f(resumed.get_column("preempted_s").max()) if resumed.height else None,
            "sum": _f(resumed.get_column("preempted_s").sum()) if resumed.height else None,
        },
        # an engine's own recompute cost from its counters (SGLang's: "sglang_counters")
        **{
            f"{e.name}_counters": e.recompute_counters(a.counters) for e in engines.registered() if e.recompute_counters
        },
        **({"prefix_cache": split} if (split := prefix_cache_split(a, ev)) is not None else {}),
        **_recomputed_or_lost(a, total, split),
        "not_evaluable": None
        if known.height
        else (
            "no preemption events"
            if n == 0
            else "no event's victim has tokens in the bundle: add block-table records (the vLLM plugin: "
            "num_computed_tokens_lost) or request lines with prompt_token_ids"
        ),
    }
    out.update(_engine_counted(out))
    pm = _per_minute(timed, iv)
    return out, pm


def _engine_counted(out: dict[str, Any]) -> dict[str, Any]:
    """No event's tokens known, but an engine's own counters give the incident's total (SGLang's
    ``sglang:num_retracted_{input,output}_tokens_total`` increases, the first scrape a baseline): that
    total is the cost, an upper bound (``tokens_is_upper_bound``; ``tokens_basis`` says whose counters)."""
    if out.get("tokens") is not None or not out.get("preemptions"):
        return {}
    own = next((v for k, v in out.items() if k.endswith("_counters") and isinstance(v, dict) and v), None)
    if own is None or own.get("tokens_at_most") is None:
        return {}
    return {
        "tokens": int(own["tokens_at_most"]),
        "tokens_is_upper_bound": True,
        "tokens_basis": f"{own['basis']}: {own['first_line']} .. {own['last_line']}",
        "evaluable": True,
        "not_evaluable": None,
    }


def prefix_caching(a: Analysis) -> tuple[bool | None, str]:
    """Whether prefix caching was on for the bundle's events, and why (each engine with events that
    can say: its ``prefix_caching``, from the configuration seen or its version's default); on when
    one of them was on."""
    said = [
        e.prefix_caching(engines.config_of(a.config, e.name), a.frames)
        for e in engines.registered()
        if e.prefix_caching is not None and e.name in engines.of_events(a.events)
    ]
    on = [why for v, why in said if v]
    if on:
        return True, "; ".join(on)
    off = [why for v, why in said if v is False]
    if off and len(off) == len(said):
        return False, "; ".join(off)
    return None, "; ".join(why for v, why in said if v is None) or "not known"


def _recomputed_or_lost(a: Analysis, total: int | None, split: dict[str, Any] | None) -> dict[str, Any]:
    """``prefix_caching`` (on, basis) and ``tokens_recomputed_at_most``: the tokens are what the
    preemptions lost; with prefix caching on and no resume record, part of them may have been
    re-served from the cache when the victims ran again, so they bound the recompute from above
    (with resume records the split says the three parts, each exact)."""
    on, basis = prefix_caching(a)
    return {
        "prefix_caching": {"on": on, "basis": basis, "assumed": basis.startswith("assumed")},
        "tokens_recomputed_at_most": bool(on) and total is not None and not (split and split["preemptions"]),
    }


def _per_minute(timed: pl.DataFrame, iv: pl.DataFrame) -> pl.DataFrame:
    schema: dict[str, Any] = {
        "minute": pl.Datetime("us", "UTC"),
        "preemptions": pl.UInt32,
        "tokens": pl.Int64,
        "tokens_are_lower_bound": pl.Boolean,
        "unknown": pl.UInt32,
        "processed_tokens": pl.Float64,
        "share": pl.Float64,
    }
    if timed.height == 0:
        return pl.DataFrame(schema=schema)
    pm = (
        timed.with_columns(minute=pl.col("time").dt.truncate("1m"))
        .group_by("minute")
        .agg(
            pl.len().alias("preemptions"),
            pl.when(pl.col("recompute_tokens").is_not_null().any())
            .then(pl.col("recompute_tokens").sum())
            .alias("tokens"),
            ((pl.col("recompute_bound") == "lower").any() | pl.col("recompute_tokens").is_null().any()).alias(
                "tokens_are_lower_bound"
            ),
            pl.col("recompute_tokens").is_null().sum().cast(pl.UInt32).alias("unknown"),
        )
    )
    if iv.height:
        proc = (
            iv.with_columns(minute=pl.col("t1").dt.truncate("1m"))
            .group_by("minute")
            .agg((pl.col("prompt_tokens") + pl.col("gen_tokens")).sum().alias("processed_tokens"))
        )
        pm = pm.join(proc, on="minute", how="left")
    else:
        pm = pm.with_columns(processed_tokens=pl.lit(None, pl.Float64))
    pm = pm.with_columns(
        share=pl.when(pl.col("processed_tokens") + pl.col("tokens") > 0).then(
            pl.col("tokens") / (pl.col("processed_tokens") + pl.col("tokens"))
        )
    ).sort("minute")
    return pm.select([pl.col(c).cast(t) for c, t in schema.items()])
