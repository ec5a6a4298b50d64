"""What the summary says in SGLang's own words (the engine's ``summary_section``, ``headline_words``
and ``log_capability``).

Every output names the engine: events carry ``engine_kind`` (events.py), the summary
``engine_kind`` (``vllm``, ``sglang``, or ``sglang+vllm`` for a bundle holding both: the
registry's ``engine_kinds``) and, when SGLang lines are in the bundle, an ``sglang`` section: the
retraction lines, their version family, the rate against SGLang's own "about once a minute is
okay", how many happened with the new-token ratio at its floor. The headline counts *retractions*
in an SGLang bundle (the engine's noun).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import polars as pl

from ...model.events import count_run
from ...model.frames import provenance_expr
from ..common import LogCapability
from . import knobs, metrics
from .log import ENGINE_KIND as SGLANG
from .log import forced

if TYPE_CHECKING:
    from ...model.result import AnalysisView


def section(a: AnalysisView, findings: Any) -> dict[str, Any] | None:
    """The summary's ``sglang`` object (None without SGLang lines)."""
    ret = a.frames.get("sgl_retractions")
    counters = a.counters.get("sglang")
    if ret is None and not counters:
        return None
    ret = ret if ret is not None else pl.DataFrame()
    ev = a.events.filter(pl.col("engine_kind") == SGLANG) if a.events.height else a.events
    # The rate against SGLang's 'about once a minute is okay' is of the retractions KV pressure made:
    # the ones SGLANG_TEST_RETRACT forced ('Testing retraction.') are not (log.forced).
    pressure = ev.filter(~forced(ev, ret)) if ev.height else ev
    rate = retraction_rate(a, pressure)
    per_minute = None if rate is None else round(rate.per_minute, 2)
    span = None if rate is None else rate.span_s
    # a single retraction is rated over its log's span (rate_over "log"), more over the retractions' own
    over = {"rate_over": rate.over} if rate is not None and rate.over == "log" else {}
    mech: dict[str, int] = {}
    pe = getattr(findings, "per_event", None)
    if pe is not None and pe.height and ev.height:
        j = ev.select("event_id").join(pe.select("event_id", "mechanism"), on="event_id", how="left")
        mech = {str(k): n for k, n in j.group_by("mechanism").len().sort("mechanism").iter_rows()}
    wordings = {str(k): n for k, n in ret.group_by("wording").len().sort("wording").iter_rows()} if ret.height else {}
    facts = counters or {}
    # retraction lines cut before their count (log.retractions): only said where there are some
    cut = {"lines_cut_before_count": int(facts["cut"])} if facts.get("cut") else {}
    # A line that retracted no request (#retracted_reqs: 0) is no retraction line: not in the count of
    # lines the headline quotes (headline_words), said apart where there are some.
    retracting = ret.filter(pl.col("retracted") > 0).height if ret.height else 0
    zero = {"lines_retracting_none": ret.height - retracting} if ret.height > retracting else {}
    return {
        "retractions": ev.height,
        "retraction_lines": retracting,
        "lines_from_other_tp_ranks": facts.get("collapsed", 0),
        "forced_by_test": facts.get("test", 0),
        "allocation_errors_not_counted": facts.get("alloc_errors", 0),
        "version_family": wordings,
        "per_minute": per_minute,
        "span_s": span,
        "docs_ok_per_minute": knobs.DOCS_OK_PER_MINUTE,
        "mechanisms": mech,
        "ratio_at_floor": mech.get("ratio-over-admission", 0),
        **over,
        **cut,
        **zero,
    }


@dataclass(frozen=True)
class Rate:
    """How often SGLang retracted, to set against its docs' 'about once a minute is okay'
    (:data:`knobs.DOCS_OK_PER_MINUTE`): ``per_minute`` over ``span_s`` seconds, at least one minute (a burst
    under a minute: its count). ``over``: ``retractions`` (the first to the last of two or more) or ``log``
    (a single retraction: its log's span, the first to the last timed line of its log, ``first``/``last``)."""

    per_minute: float
    span_s: float
    over: str
    first: Any = None
    last: Any = None


def occurrences(ev: pl.DataFrame) -> pl.DataFrame:
    """One row per retraction SGLang logged (a line's ``#retracted_reqs: N`` events are one), the rest
    an event each: SGLang's docs' 'about once a minute is okay' is of the message, not of the requests
    one message retracts."""
    if ev.height == 0:
        return ev
    occ = pl.when(pl.col("kind") == "logged").then(count_run()).otherwise(pl.col("event_id"))
    return ev.with_columns(_occ=occ).unique("_occ", keep="first", maintain_order=True).drop("_occ")


def retraction_rate(a: AnalysisView, pressure: pl.DataFrame) -> Rate | None:
    """The rate of the retractions KV pressure made (``pressure``: SGLang's events less the forced ones):
    two or more timed, over their own span; a single one (the only event), over its log's span (a log and
    its rotated parts: the records of its stream), where one retraction is at most once a minute; None
    otherwise (no time, or a single timed one beside untimed ones). A line's N retracted requests are one
    retraction here (:func:`occurrences`)."""
    pressure = occurrences(pressure)
    timed = pressure.filter(pl.col("time").is_not_null()) if pressure.height else pressure
    if timed.height > 1:
        span = float(timed.select((pl.col("time").max() - pl.col("time").min()).dt.total_microseconds()).item()) / 1e6
        return Rate(timed.height / max(span / 60.0, 1.0), span, "retractions")
    if timed.height != 1 or pressure.height != 1:
        return None
    r = a.records
    if r.height and "stream" in timed.columns and timed.get_column("stream")[0] is not None:
        r = r.filter(pl.col("stream") == timed.get_column("stream")[0])
    t = r.get_column("time").drop_nulls() if r.height else timed.get_column("time")
    if t.len() == 0:
        t = timed.get_column("time")
    first, last = t.min(), t.max()
    span = float(t.to_frame("t").select((pl.col("t").max() - pl.col("t").min()).dt.total_microseconds()).item()) / 1e6
    return Rate(1.0 / max(span / 60.0, 1.0), span, "log", first, last)


def headline_words(s: dict[str, Any]) -> str:
    """The headline's words in SGLang's terms (after the gates): what SGLang said, how often against its
    own 'about once a minute is okay', and how many came with the new-token ratio at its floor. Only
    the lines KV pressure made are quoted and rated: 'Testing retraction.' lines (SGLANG_TEST_RETRACT)
    are said as forced, never as 'KV cache pool is full'."""
    sg = s.get("sglang") or {}
    if not sg.get("retractions"):
        cut = int(sg.get("lines_cut_before_count") or 0)
        # none counted, but lines that say SGLang retracted (cut before how many): never a bare 0
        return f"; SGLang: {cut} retraction line(s) cut before their count: it retracted there" if cut else ""
    n_forced = int(sg.get("forced_by_test") or 0)
    kv_lines = int(sg.get("retraction_lines") or 0) - n_forced
    fams = sg.get("version_family") or {}
    parts = []
    if kv_lines > 0:
        said = (
            "'decode out of memory happened'"
            if set(fams) == {"0.1-0.2"}
            else "'Decode out of memory happened'"
            if set(fams) <= {"0.1-0.2", "0.3.0-0.4.6"}
            else "'KV cache pool is full'"
        )
        parts.append(f"{said} on {kv_lines} line(s)")
        pm = sg.get("per_minute")  # of the retractions KV pressure made (section)
        if pm is not None:
            ok = "more often than" if pm > sg["docs_ok_per_minute"] else "within"
            span_s = sg.get("span_s") or 0
            if sg.get("rate_over") == "log":  # a single retraction, over its log's span
                rate = f"1 in the log's {_duration(span_s)}" + (f", {pm:g} per minute" if span_s >= 60 else "")
            else:  # under a minute, per_minute is the count of those retractions (a burst: its count)
                rate = f"{pm:g} within a minute" if span_s < 60 else f"{pm:g} per minute"
            parts.append(f"{rate} ({ok} its docs' 'about once a minute is okay')")
        if sg.get("ratio_at_floor"):
            parts.append(f"the new-token ratio at its floor before {sg['ratio_at_floor']}")
    if n_forced:
        parts.append(f"{n_forced} 'Testing retraction.' line(s) forced by SGLANG_TEST_RETRACT, not KV pressure")
    if sg.get("lines_cut_before_count"):
        parts.append(
            f"{sg['lines_cut_before_count']} more retraction line(s) cut before their count: at least this many"
        )
    return "; SGLang: " + ", ".join(parts)


def _duration(span_s: float) -> str:
    """``10.3 min``, ``40 s``."""
    return f"{span_s / 60:.1f} min" if span_s >= 60 else f"{span_s:.0f} s"


CAUSE_CODE = (
    "SGLang retracts running requests only when its KV pool cannot hold the next decode step "
    "(scheduler update_running_batch: check_decode_mem failed)"
)


def cause_words(a: AnalysisView) -> str | None:
    """The summary's cause (``code``) of a bundle with retractions SGLANG_TEST_RETRACT forced: not only
    KV pressure then (None otherwise: :data:`CAUSE_CODE` stands)."""
    ev = a.events.filter(pl.col("engine_kind") == SGLANG) if a.events.height else a.events
    n = int(forced(ev, a.frames.get("sgl_retractions")).sum()) if ev.height else 0
    if not n:
        return None
    return (
        "SGLang retracts running requests when its KV pool cannot hold the next decode step (scheduler "
        "update_running_batch: check_decode_mem failed), and when SGLANG_TEST_RETRACT forces it: "
        f"{n} of these retraction(s) are forced ('Testing retraction.'), not KV pressure"
    )


REASON = (
    "SGLang's scheduler logs every retraction it makes (update_running_batch: 'KV cache pool is full. Retract "
    "requests.', before 0.4.7 'Decode out of memory happened'), at INFO (WARNING from 0.5.10)"
)


def log_capability(a: AnalysisView) -> LogCapability:
    """SGLang's log (issue 29) prints every retraction: its count is exact, 0 included; unless some of
    its retraction lines were cut before their count (log.retractions): then what the lines hold is a
    lower bound."""
    facts = (a.counters or {}).get("sglang") or {}
    cut = int(facts.get("cut") or 0)
    if cut:
        return LogCapability(
            has_log=True,
            family="SGLang",
            counts="lower bound",
            reason=f"{REASON}; but {cut} of its retraction line(s) were cut before their #retracted_reqs (first: "
            f"{facts.get('cut_first')}): how many they retracted is not in the log",
        )
    return LogCapability(has_log=True, family="SGLang", counts="exact", reason=REASON)


def recompute_counters(counters: dict[str, Any]) -> dict[str, Any] | None:
    """SGLang's own recompute cost (0.5.10+ /metrics): the input and output tokens of the requests it
    retracted, ``sglang:num_retracted_{input,output}_tokens_total`` increases (at most what is prefilled
    again: the radix cache may keep a prefix). The findings' ``sglang_counters``."""
    got = (counters.get("prometheus") or {}).get("retracted_tokens")
    if not got:
        return None
    return {
        **got,
        "tokens_at_most": got["input_tokens"] + got["output_tokens"],
        "basis": "sglang:num_retracted_input_tokens_total + sglang:num_retracted_output_tokens_total increases "
        "(the retracted requests' prompt and generated tokens: at most what is prefilled again)",
    }


EVENT_TOKENS_BASIS = (
    "#new_tokens_gained of SGLang's retraction line: the KV it freed, prefilled again when the request runs again "
    "(at least; split evenly over the line's requests)"
)


def event_tokens(a: AnalysisView, keys: pl.DataFrame) -> pl.DataFrame | None:
    """SGLang 0.5.10+: ``#new_tokens_gained`` of the event's retraction line (the KV it freed, which is
    prefilled again when the request runs again), split evenly over the line's requests (the remainder on
    the line's first event). ``keys``: the events' ``event_id``, ``stream``, ``seq``, ``_sub``; the rows
    (``event_id``, ``tokens``, ``tokens_src``) of the events a retraction line of theirs gives (the engine's
    ``event_tokens``, findings/recompute.py)."""
    ret = a.frames.get("sgl_retractions")
    if ret is None or ret.height == 0 or keys.height == 0:
        return None
    r = ret.filter(pl.col("new_tokens_gained").is_not_null() & (pl.col("retracted") > 0)).select(
        pl.col("stream").cast(pl.Int32),
        pl.col("seq").cast(pl.UInt32),
        pl.col("new_tokens_gained").alias("_g"),
        pl.col("retracted").alias("_n"),
        provenance_expr().alias("tokens_src"),
    )
    gained = pl.col("_g").clip(lower_bound=0)
    return keys.join(r, on=["stream", "seq"], how="inner").select(
        "event_id",
        (gained // pl.col("_n") + pl.when(pl.col("_sub") == 1).then(gained % pl.col("_n")).otherwise(0))
        .cast(pl.Int64)
        .alias("tokens"),
        "tokens_src",
    )


# SGLang's count in /metrics (0.5.10+), and the gauge of the last retraction's requests per stats interval
COUNTER = "sglang:num_retracted_requests_total"
GAUGE = "sglang:num_retracted_reqs"
GAUGE_FIELD = metrics.METRICS[GAUGE][0]
NO_LOG_NOR_COUNTER = "no SGLang log and no /metrics retraction counter in the bundle"
MAX_CITED = 3


def gauge_seen(a: AnalysisView) -> dict[str, Any] | None:
    """What SGLang's gauge ``sglang:num_retracted_reqs`` (0.5.5+) shows of retractions: SGLang sets it to
    the requests of its last retraction and zeroes it at every stats report (the scheduler's prefill and
    ``report_decode_stats``: ``stats.num_retracted_reqs = self.num_retracted_reqs``, then 0), so a sample
    above 0 is a retraction of at least that many requests in the stats interval before it. Per series (the
    largest across TP ranks, sources/prometheus), a sample is counted when it is above 0 and differs from
    the series' sample before (the same value twice may be one interval read twice): the sum is a lower
    bound of the retracted requests, never a count (the retractions between samples are not in it). None
    without a sample above 0."""
    ps = a.frames.get("prom_samples")
    if ps is None or ps.height == 0 or "field" not in ps.columns:
        return None
    g = ps.filter((pl.col("field") == GAUGE_FIELD) & pl.col("value").is_not_null())
    if g.height == 0:
        return None
    keys = ["scope", "engine", "model_name"]
    g = g.sort([*keys, "time", "source", "line"], nulls_last=True).with_columns(
        _prev=pl.col("value").shift(1).over(keys)
    )
    new = g.filter((pl.col("value") > 0) & (pl.col("_prev").is_null() | (pl.col("value") != pl.col("_prev"))))
    if new.height == 0:
        return None
    cites = [f"{r['source']}:{r['line']}" for r in new.sort("time", "source", "line").iter_rows(named=True)]
    return {
        "metric": GAUGE,
        "retracted_requests_at_least": int(new.get_column("value").sum()),
        "samples": new.height,
        "evidence": cites,
        "basis": "each sample above 0 (not repeating the one before) is a retraction of that many requests in "
        "the stats interval before it: a lower bound, the retractions between samples are not in it",
    }


def not_visible(a: AnalysisView) -> dict[str, Any]:
    """Why a bundle of SGLang's /metrics without its retraction counter (and without its log) cannot count
    the retractions, in SGLang's words, and what to add (the engine's ``not_visible``); where the gauge
    ``sglang:num_retracted_reqs`` shows retractions, at least how many requests it shows (:func:`gauge_seen`)."""
    out: dict[str, Any] = {
        "short": NO_LOG_NOR_COUNTER,
        "reason": NO_LOG_NOR_COUNTER,
        "remedy": "add the SGLang server log (it logs every retraction: 'KV cache pool is full. Retract requests.') "
        f"or /metrics scrapes of SGLang 0.5.10+ ({COUNTER})",
    }
    seen = gauge_seen(a)
    if seen is None:
        return out
    ev = seen["evidence"]
    cited = ", ".join(ev[:MAX_CITED]) + (f" and {len(ev) - MAX_CITED} more" if len(ev) > MAX_CITED else "")
    n = seen["retracted_requests_at_least"]
    shown = f"the gauge {GAUGE} shows at least {n} retracted request{'' if n == 1 else 's'} ({cited})"
    out["short"] = f"{NO_LOG_NOR_COUNTER}; {shown}"
    out["reason"] = (
        f"{NO_LOG_NOR_COUNTER}; {shown}. The gauge holds the requests of the last retraction in "
        "each stats interval and is zeroed at every stats line: a lower bound, not a count (the retractions "
        "between scrapes are not in it)"
    )
    out["seen"] = seen
    return out
