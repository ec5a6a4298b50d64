"""Finding 3: a stall, not preemption.

A stall: at least :data:`MIN_LINES` consecutive stats lines of one stream and engine where
Waiting > 0, generation throughput is 0 and Running is 0 or unchanged from the line before. The
server holds work it does not run; no amount of preemption forensics explains that. Reported
with its span and the lines. (V0 from 0.6.6 and V1 from 0.8.5 move lines of idle intervals to
DEBUG, so an INFO log can hide a stall; without stats lines the finding is not evaluable.)

The special case of a request that can never fit: a prompt longer than the KV cache in tokens
(``GPU KV cache size: N tokens``, or # GPU blocks x block_size), or vLLM's own
``Maximum concurrency for N tokens per request: X`` below 1 (one max-length request does not fit).

/metrics scrapes show a stall too (issue 38): at least :data:`MIN_LINES` consecutive scrapes of one
engine with ``vllm:num_requests_waiting`` > 0 and ``vllm:num_requests_running`` 0. A stall is not
a preemption: the preemption counter's increase over it (0 when flat) and the events counted in it
say so (``preemptions``), and ``holds`` names what holds the queue, with its evidence: a request
or limit that can never fit (above), requests deferred (``Deferred: N reqs`` in the stats line,
0.20+, or ``vllm:num_requests_waiting_by_reason{reason="deferred"}``: a LoRA budget, KV loads from
a connector, a blocked request), or requests waiting for capacity with nothing running and the KV
cache empty (``vllm:num_requests_waiting_by_reason{reason="capacity"}``: not KV space, the
scheduler admits none; vLLM #53130's admission wedge shows this way). Nothing in the bundle that
says it: ``holds`` is empty and ``holds_not_evaluable`` says what would.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import polars as pl

from .. import engines
from ..model.places import folders, shared_depth
from ..model.requests import stats_of
from .common import cfg_number, frame, src_expr

if TYPE_CHECKING:
    from ..model.result import AnalysisView as Analysis

MIN_LINES = 2


def compute(a: Analysis) -> dict[str, Any]:
    st = a.stats
    out: dict[str, Any] = {"spans": [], "never_fits": _never_fits(a)}
    scraped = _scrape_spans(a)
    if st.height == 0 or st.filter(pl.col("waiting").is_not_null() & pl.col("gen_tput").is_not_null()).height == 0:
        if scraped is not None:  # /metrics scrapes with the running and waiting gauges
            out.update(evaluable=True, spans=scraped, not_evaluable=None)
            out.update(found=bool(scraped) or bool(out["never_fits"]["found"]), **_holds(a, scraped, out["never_fits"]))
            return out
        out.update(
            evaluable=False,
            found=False,
            not_evaluable="no stats lines with Waiting and generation throughput (or /metrics scrapes of the "
            "running and waiting gauges) in the bundle",
        )
        return out
    keys = ["stream", "engine"]
    df = (
        st.lazy()
        .filter(pl.col("time").is_not_null())
        .sort([*keys, "time"])
        .with_columns(_prev_run=pl.col("running").shift(1).over(keys))
        .with_columns(
            _stall=(
                (pl.col("waiting") > 0)
                & (pl.col("gen_tput") == 0)
                & ((pl.col("running") == 0) | (pl.col("running") == pl.col("_prev_run")))
            ).fill_null(False)
        )
        .with_columns(
            _run=(pl.col("_stall") != pl.col("_stall").shift(1).over(keys)).fill_null(True).cum_sum().over(keys)
        )
        .filter(pl.col("_stall"))
        .group_by([*keys, "_run"])
        .agg(
            pl.len().alias("lines"),
            pl.col("time").min().alias("start"),
            pl.col("time").max().alias("end"),
            pl.col("waiting").max().alias("max_waiting"),
            pl.col("running").max().alias("running"),
            src_expr().first().alias("first_line"),
            src_expr().last().alias("last_line"),
            pl.col("kv_usage").max().alias("max_kv_usage"),
            pl.col("deferred").max().alias("max_deferred"),
            _at_max("deferred").alias("deferred_line"),
            pl.col("prompt_tput").max().alias("max_prompt_tput"),
            pl.col("source").first().alias("_source"),
            src_expr().filter(pl.col("kv_usage").is_not_null()).first().alias("kv_first_line"),
            src_expr().filter(pl.col("kv_usage").is_not_null()).last().alias("kv_last_line"),
        )
        .filter(pl.col("lines") >= MIN_LINES)
        .sort("start")
        .collect()
    )
    df = _scraped_reasons(a, df, st)
    spans = [
        {
            "engine": r["engine"],
            "start": r["start"],
            "end": r["end"],
            "seconds": (r["end"] - r["start"]).total_seconds(),
            "stats_lines": r["lines"],
            "max_waiting": r["max_waiting"],
            "running": r["running"],
            "first_line": r["first_line"],
            "last_line": r["last_line"],
            "source": "log",
            # nothing ran: no request running and no token computed on any of its lines (nothing to preempt)
            "nothing_ran": r["running"] == 0 and not (r["max_prompt_tput"] or 0),
            "max_kv_usage": r["max_kv_usage"],
            "kv_first_line": r["kv_first_line"],
            "kv_last_line": r["kv_last_line"],
            "max_deferred": r["max_deferred"],
            "deferred_line": r["deferred_line"],
            **(
                {
                    "max_deferred": r["scr_deferred"],
                    "deferred_line": r["scr_deferred_line"],
                    "deferred_from": "scrapes",
                }
                if not r["max_deferred"] and r["scr_deferred"]
                else {}
            ),
            "max_capacity": r["scr_capacity"],
            "capacity_line": r["scr_capacity_line"],
            **_counted_in(a, r["engine"], r["start"], r["end"]),
        }
        for r in df.iter_rows(named=True)
    ]
    spans += scraped or []
    out.update(evaluable=True, found=bool(spans) or bool(out["never_fits"]["found"]), spans=spans, not_evaluable=None)
    out.update(_holds(a, spans, out["never_fits"]))
    return out


# vLLM's stats lines come every VLLM_LOG_STATS_INTERVAL seconds (10 by default): a stall seen on a log's
# last line is taken to last one interval past it, and no longer.
STATS_INTERVAL_S = 10


def _scraped_reasons(a: Analysis, spans: pl.DataFrame, st: pl.DataFrame) -> pl.DataFrame:
    """A log's stall spans with what the /metrics scrapes read during them say holds the queue:
    ``scr_capacity`` / ``scr_deferred`` (vllm:num_requests_waiting_by_reason, the largest reading above 0)
    and their ``file:line``. A reading counts for a span when it is of the span's engine, its scrape is one
    the span's log reads (the scrapes nearest it in the folder tree: model/places.py; another server's
    folder is another server), and it lies in the stall: from the span's first line to the next line
    of its log and engine (which no longer stalls), or STATS_INTERVAL_S past the span when the log has
    none. A single reading suffices (one scrape taken during a stall is the usual bundle)."""
    none = spans.with_columns(
        scr_capacity=pl.lit(None, pl.Int64),
        scr_capacity_line=pl.lit(None, pl.String),
        scr_deferred=pl.lit(None, pl.Int64),
        scr_deferred_line=pl.lit(None, pl.String),
    )
    ps = frame(a, "prom_series")
    if spans.height == 0 or ps is None or not {"waiting_capacity", "waiting_deferred"} <= set(ps.columns):
        return none
    ps = ps.filter(pl.col("time").is_not_null() & ((pl.col("waiting_capacity") > 0) | (pl.col("waiting_deferred") > 0)))
    if ps.height == 0:
        return none
    # where each span's stall ends at the latest: the next line of its log and engine
    nxt = (
        st.filter(pl.col("time").is_not_null())
        .select("stream", "engine", "time")
        .sort("time")
        .join_asof(
            spans.select("stream", "engine", pl.col("end").alias("_end"), "_run").sort("_end"),
            left_on="time",
            right_on="_end",
            by=["stream", "engine"],
            strategy="backward",
            allow_exact_matches=False,
            check_sortedness=False,  # sorted by time within each group (the sort above)
        )
        .filter(pl.col("_run").is_not_null())
        .group_by("stream", "engine", "_run")
        .agg(pl.col("time").min().alias("_until"))
    )
    spans = spans.join(nxt, on=["stream", "engine", "_run"], how="left").with_columns(
        _until=pl.coalesce("_until", pl.col("end") + pl.duration(seconds=STATS_INTERVAL_S))
    )
    # every log of the bundle (a scrape nearest another server's log, even one that never stalls, is that server's)
    logs = {str(x) for x in st.get_column("source").drop_nulls().unique().to_list()}
    rec = a.records
    if rec.height and "source" in rec.columns:
        logs |= {str(x) for x in rec.get_column("source").drop_nulls().unique().to_list()}
    nearest = {
        c: max((shared_depth([folders(lg), folders(c)]) for lg in logs), default=0)
        for c in ps.get_column("source").cast(pl.String).unique().to_list()
    }
    rows = []
    for r in spans.iter_rows(named=True):
        fl = folders(r["_source"])
        mine = [c for c, d in nearest.items() if shared_depth([fl, folders(c)]) == d]
        got = ps.filter(
            pl.col("source").is_in(mine)
            & (pl.col("engine").fill_null("0") == (r["engine"] or "0"))
            & (pl.col("time") >= r["start"])
            & (pl.col("time") < r["_until"])
        )
        out: dict[str, int | str | None] = dict.fromkeys(
            ("scr_capacity", "scr_capacity_line", "scr_deferred", "scr_deferred_line")
        )
        for col, key in (("waiting_capacity", "scr_capacity"), ("waiting_deferred", "scr_deferred")):
            hit = got.filter(pl.col(col) > 0).sort([col, "time"], descending=[True, False]).head(1)
            if hit.height:
                h = hit.row(0, named=True)
                out[key] = int(h[col])
                out[f"{key}_line"] = f"{h['source']}:{h[f'{col}_line'] or h['line']}"
        rows.append(out)
    return spans.drop("_until").hstack(pl.DataFrame(rows, schema=dict(none.select(pl.col("^scr_.*$")).schema)))


def _counted_in(a: Analysis, engine: str | None, start: Any, end: Any) -> dict[str, Any]:
    """The preemptions counted in a stall span [start, end] of one engine: the bundle's events there (and
    the rest of a capped count logged there) and,
    from /metrics, the counter's increase between the scrapes at or around the span (``counter_increase``,
    with the readings it is from; None without a counter of that engine)."""
    ev = a.events
    eng = engine or "0"
    n = 0
    if ev.height:
        t = pl.coalesce("time", "interval_end")
        n = ev.filter((pl.col("engine").fill_null("0") == eng) & (t >= start) & (t <= end)).height
    # a count above the event cap (frame capped_counts) made fewer events than it counts: its rest is
    # counted where the count was logged (a stats line of the span)
    capped = a.frames.get("capped_counts")
    if capped is not None and capped.height:
        rest = capped.filter(
            (pl.col("engine").fill_null("0") == eng) & (pl.col("time") >= start) & (pl.col("time") <= end)
        ).select((pl.col("count") - pl.col("events")).sum())
        n += int(rest.item() or 0)
    out: dict[str, Any] = {"preemptions": n, "counter_increase": None, "counter_readings": None}
    pre = frame(a, "prom_preemptions")
    if pre is not None:
        p = pre.filter((pl.col("engine").fill_null("0") == eng) & pl.col("end").is_not_null()).sort("end")
        at = p.filter((pl.col("end") >= start) & (pl.col("end") <= end))
        if at.height >= 2 or (at.height and at.get_column("increase").is_not_null().any()):
            first, last = at.row(0, named=True), at.row(at.height - 1, named=True)
            inc = at.slice(1).get_column("increase").fill_null(0).sum() if at.height > 1 else 0
            if first["increase"] is not None and first["start"] is not None and first["start"] >= start:
                inc += first["increase"]
            out["counter_increase"] = int(inc)
            out["counter_readings"] = [
                f"{int(round(first['value']))} ({first['source']}:{first['line']})",
                f"{int(round(last['value']))} ({last['source']}:{last['line']})",
            ]
    return out


def _at_max(col: str, line: str = "line") -> pl.Expr:
    """``file:line`` of the first row where ``col`` is at its (positive) maximum: the line of the value
    a span reports as its maximum (null when none is above 0)."""
    return src_expr(line=line).filter((pl.col(col) > 0) & (pl.col(col) == pl.col(col).max())).first()


def _scrape_spans(a: Analysis) -> list[dict[str, Any]] | None:
    """Stall spans of /metrics scrapes: consecutive scrapes of one engine with requests waiting and none
    running (None: no scrape reads both gauges)."""
    ps = frame(a, "prom_series")
    if ps is None or ps.filter(pl.col("waiting").is_not_null() & pl.col("running").is_not_null()).height == 0:
        return None
    keys = ["scope", "engine", "model_name"]
    df = (
        ps.lazy()
        .filter(pl.col("time").is_not_null() & pl.col("waiting").is_not_null() & pl.col("running").is_not_null())
        .sort([*keys, "time"])
        .with_columns(_stall=(pl.col("waiting") > 0) & (pl.col("running") == 0))
        .with_columns(
            _run=(pl.col("_stall") != pl.col("_stall").shift(1).over(keys)).fill_null(True).cum_sum().over(keys)
        )
        .filter(pl.col("_stall"))
        .group_by([*keys, "_run"])
        .agg(
            pl.len().alias("lines"),
            pl.col("time").min().alias("start"),
            pl.col("time").max().alias("end"),
            pl.col("waiting").max().alias("max_waiting"),
            pl.col("running").max().alias("running"),
            # A scrape holds each gauge on its own line (prom_series ``<gauge>_line``): a figure cites its
            # own sample; the span's ends, the waiting gauge that makes it a stall.
            src_expr(line="waiting_line").first().alias("first_line"),
            src_expr(line="waiting_line").last().alias("last_line"),
            pl.col("kv_usage").max().alias("max_kv_usage"),
            src_expr(line="kv_usage_line").filter(pl.col("kv_usage").is_not_null()).first().alias("kv_first_line"),
            src_expr(line="kv_usage_line").filter(pl.col("kv_usage").is_not_null()).last().alias("kv_last_line"),
            pl.col("waiting_capacity").max().alias("max_capacity"),
            _at_max("waiting_capacity", "waiting_capacity_line").alias("capacity_line"),
            pl.col("waiting_deferred").max().alias("max_deferred"),
            _at_max("waiting_deferred", "waiting_deferred_line").alias("deferred_line"),
        )
        .filter(pl.col("lines") >= MIN_LINES)
        .sort("start")
        .collect()
    )
    return [
        {
            "engine": r["engine"],
            "start": r["start"],
            "end": r["end"],
            "seconds": (r["end"] - r["start"]).total_seconds(),
            "scrapes": r["lines"],
            "max_waiting": None if r["max_waiting"] is None else int(r["max_waiting"]),
            "running": None if r["running"] is None else int(r["running"]),
            "first_line": r["first_line"],
            "last_line": r["last_line"],
            "source": "scrapes",
            "nothing_ran": r["running"] == 0,
            "max_kv_usage": r["max_kv_usage"],
            "kv_first_line": r["kv_first_line"],
            "kv_last_line": r["kv_last_line"],
            "max_capacity": None if r["max_capacity"] is None else int(r["max_capacity"]),
            "capacity_line": r["capacity_line"],
            "max_deferred": None if r["max_deferred"] is None else int(r["max_deferred"]),
            "deferred_line": r["deferred_line"],
            **_counted_in(a, r["engine"], r["start"], r["end"]),
        }
        for r in df.iter_rows(named=True)
    ]


def _holds(a: Analysis, spans: list[dict[str, Any]], nf: dict[str, Any]) -> dict[str, Any]:
    """What holds the stalled queue (``holds``: what, text, evidence), from what the bundle shows; and
    what would say it when nothing does (``holds_not_evaluable``)."""
    holds: list[dict[str, Any]] = []
    if not spans:
        return {}
    if nf.get("found"):
        for item in nf["items"][:3]:
            holds.append({"what": "never-fits", "text": item["text"], "evidence": list(item["inputs"])})
    deferred = [s for s in spans if s.get("max_deferred")]
    if deferred:
        s = max(deferred, key=lambda x: (x["max_deferred"], x["source"] == "scrapes"))
        how = (
            f'vllm:num_requests_waiting_by_reason{{reason="deferred"}} {s["max_deferred"]}'
            if s["source"] == "scrapes" or s.get("deferred_from") == "scrapes"
            else f"Deferred: {s['max_deferred']} reqs"
        )
        holds.append(
            {
                "what": "deferred",
                "text": f"{s['max_deferred']} request(s) deferred: vLLM skips them until what they wait for is "
                "ready (a LoRA slot, KV loaded by a connector, a blocked request)",
                "evidence": [f"{how} ({s['deferred_line']})"],
            }
        )
    capacity = [s for s in spans if s.get("max_capacity")]
    if capacity:
        # the scrapes' own stall span first where both see it (its KV figure is the scrape's gauge, read beside)
        s = max(capacity, key=lambda x: (x["max_capacity"], x["source"] == "scrapes"))
        kv = s.get("max_kv_usage")
        empty = kv is not None and kv < 5.0
        holds.append(
            {
                "what": "capacity-wedge" if empty else "capacity",
                "text": f"{s['max_capacity']} request(s) waiting for capacity with none running"
                + (
                    f" and the KV cache at {kv:g} %: not KV space; the scheduler admits none (the admission wedge "
                    "of vLLM #53130 shows this way: running + skipped waiting at max_num_seqs; a restart recovers)"
                    if empty
                    else (f", KV cache at {kv:g} %" if kv is not None else "")
                ),
                "evidence": [
                    f'vllm:num_requests_waiting_by_reason{{reason="capacity"}} {s["max_capacity"]} ({s["capacity_line"]})',
                    *(
                        [
                            f"vllm:kv_cache_usage_perc max {kv:g} % over {s['kv_first_line']} .. {s['kv_last_line']}"
                            if s["source"] == "scrapes"
                            else f"GPU KV cache usage max {kv:g} % over {s['kv_first_line']} .. {s['kv_last_line']}"
                        ]
                        if kv is not None
                        else []
                    ),
                ],
            }
        )
    missing = None
    if not holds:
        missing = (
            "nothing in the bundle says what holds the queue: /metrics scrapes of vLLM 0.20+ "
            "(vllm:num_requests_waiting_by_reason: capacity or deferred), the start-up lines with the KV cache size "
            "('GPU KV cache size: N tokens', 'Maximum concurrency') and request lines with prompt lengths would"
        )
    return {"holds": holds, "holds_not_evaluable": missing}


def _never_fits(a: Analysis) -> dict[str, Any]:
    # the prompts are the default engine's (its request lines, its records): so is the KV cache they must fit
    a = engines.own_view(a, engines.DEFAULT)
    kv = cfg_number(a, "kv_cache_tokens")
    conc = cfg_number(a, "max_concurrency")
    mml = cfg_number(a, "max_model_len")
    items: list[dict[str, Any]] = []
    if conc is not None and conc.value < 1:
        items.append(
            {
                "what": "max_model_len does not fit the KV cache",
                "value": conc.value,
                "text": f"Maximum concurrency {conc.value:g}x < 1: one request of max_model_len "
                f"{int(mml.value) if mml else '?'} tokens does not fit the KV cache",
                "inputs": [conc.cite()] + ([mml.cite()] if mml else []),
            }
        )
    prompts = []
    br = frame(a, "bt_requests")
    if br is not None:
        prompts.append(
            br.filter(pl.col("phase") == "arrival").select("request_id", "prompt_tokens", src_expr().alias("src"))
        )
    if stats_of(a).rows:  # the frame holds every row the filter below can keep (vllm/requests.py)
        prompts.append(
            a.requests.filter(pl.col("action") == "received").select(
                "request_id", "prompt_tokens", src_expr().alias("src")
            )
        )
    if kv is not None and prompts:
        big = (
            pl.concat(prompts, how="vertical_relaxed")
            .filter(pl.col("prompt_tokens") > kv.value)
            .unique("request_id", keep="first", maintain_order=True)
            .sort("prompt_tokens", descending=True)
        )
        for r in big.head(20).iter_rows(named=True):
            items.append(
                {
                    "what": "prompt longer than the KV cache",
                    "request_id": r["request_id"],
                    "value": r["prompt_tokens"],
                    "text": f"request {r['request_id']}: prompt {r['prompt_tokens']} tokens > KV cache {int(kv.value)} tokens",
                    "inputs": [f"prompt_tokens {r['prompt_tokens']} ({r['src']})", kv.cite()],
                }
            )
    evaluable = conc is not None or (kv is not None and bool(prompts))
    return {
        "evaluable": evaluable,
        "found": bool(items),
        "items": items,
        "not_evaluable": None
        if evaluable
        else (
            "needs the KV cache size ('GPU KV cache size: N tokens' or # GPU blocks and block_size) with prompt "
            "lengths, or the 'Maximum concurrency for N tokens per request' line"
        ),
    }
