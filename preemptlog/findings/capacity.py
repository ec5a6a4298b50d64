"""Finding 5: capacity arithmetic behind the fixes.

The KV pool in tokens (the ``GPU KV cache size: N tokens`` line, or # GPU blocks x block_size, or
the block-table records' ``num_total_blocks`` x ``block_size``) against the observed peak demand:
the KV blocks the requests in flight at a preemption need to finish (their prompt and output
tokens from the plugin's arrival and finish records; :func:`_peak`), with their count. A failed
allocation's "pool + blocks needed" is not a demand (it is always about the pool); its largest ask
feeds the watermark fix only (:func:`_failed`). From those, per lever, the computed value
(rules/recommend.capacity_fixes builds the fixes, same shape as every other fix). Preemptlog's
assumed defaults are never an input: a lever whose inputs are not in the bundle is listed as
not evaluable, and one whose value changes nothing is dropped with why.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import polars as pl

from .. import engines
from ..engines.common import verdict_key
from ..model.requests import stats_of
from .common import Cfg, cfg_default, cfg_number, cfg_text, frame, src_expr

if TYPE_CHECKING:
    from ..model.result import AnalysisView as Analysis

# The engine index of an "N Engines Aggregated" stats line or of an event counted from one: no one engine's.
AGGREGATED = "all"


def engine_index(col: str = "engine") -> pl.Expr:
    """A row's engine index, as the events, stats lines, records and pressure intervals carry it (vLLM's
    data-parallel ``Engine 001:`` and /metrics ``engine="1"``, an SGLang DP rank: "0", "1"...; ``all``
    for aggregated lines; null is engine "0", the one engine of a server without data parallelism)."""
    return pl.col(col).cast(pl.String).fill_null("0")


def _of(index: str | None) -> str:
    return "" if index is None else f" of engine {index}"


def _index_order(i: str) -> tuple[int, int, str]:
    return (0, int(i), i) if i.isdigit() else (1, 0, i)


def engine_indices(a: Analysis, lever: engines.Engine) -> list[str]:
    """The engine indices of ``lever``'s stats lines and events (never ``all``: an aggregated line is no
    one engine's), in index order. More than one: data-parallel engines, each with its own KV pool and
    scheduler, whose capacity figures are computed on their own (:func:`compute`)."""
    found: set[str] = set()
    st = a.stats
    if st.height and "engine" in st.columns:
        if "family" in st.columns:
            st = st.filter(engines.stats_of(lever))
        found |= set(st.select(engine_index()).to_series().unique().to_list())
    ev = a.events
    if ev.height and "engine" in ev.columns:
        if "engine_kind" in ev.columns:
            ev = ev.filter(engines.events_of(lever.name))
        found |= set(ev.select(engine_index()).to_series().unique().to_list())
    found.discard(AGGREGATED)
    return sorted(found, key=_index_order)


def _pool(a: Analysis) -> dict[str, Any] | None:
    bs = cfg_number(a, "block_size")
    kv = cfg_number(a, "kv_cache_tokens")
    nb = cfg_number(a, "num_gpu_blocks")
    if kv is not None and bs is not None:
        return {
            "tokens": int(kv.value),
            "blocks": int(kv.value // bs.value),
            "block_size": int(bs.value),
            "inputs": [kv.cite(), bs.cite()],
        }
    if nb is not None and bs is not None:
        return {
            "tokens": int(nb.value * bs.value),
            "blocks": int(nb.value),
            "block_size": int(bs.value),
            "inputs": [nb.cite(), bs.cite()],
        }
    st = frame(a, "bt_steps")
    if st is not None:
        row = st.filter(pl.col("num_total_blocks").is_not_null() & pl.col("block_size").is_not_null()).head(1)
        if row.height:
            r = row.with_columns(_src=src_expr()).row(0, named=True)
            return {
                "tokens": int(r["num_total_blocks"] * r["block_size"]),
                "blocks": int(r["num_total_blocks"]),
                "block_size": int(r["block_size"]),
                "inputs": [
                    (
                        f"num_total_blocks={r['num_total_blocks']}, block_size={r['block_size']} "
                        f"(block-table step record, {r['_src']})"
                    )
                ],
            }
    if kv is not None:  # tokens only (V1 logs no block_size): the levers in blocks are not evaluable
        return {"tokens": int(kv.value), "blocks": None, "block_size": None, "inputs": [kv.cite()]}
    return None


def _failed(a: Analysis, index: str | None = None) -> dict[str, Any] | None:
    """What the failed allocations of the preempt records asked for: the largest, and the recorded
    watermark (the watermark fix reads these; they are not a demand). With ``index``, that engine's
    records only."""
    bt = frame(a, "bt_events")
    if bt is None:
        return None
    p = bt.filter((pl.col("action") == "preempt") & pl.col("blocks_needed").is_not_null())
    if index is not None:
        p = p.filter(engine_index() == index)
    if p.height == 0:
        return None
    r = p.with_columns(_src=src_expr()).sort(["blocks_needed", "time"], descending=[True, False]).row(0, named=True)
    return {
        "blocks_needed_max": int(r["blocks_needed"]),
        "watermark_blocks": r["watermark_blocks"],
        "src": r["_src"],
        "records": p.height,
    }


def request_tokens(a: Analysis) -> dict[str, Any] | None:
    """Tokens of an average request at its end (prompt + output) and where they come from: vLLM's
    own per-request histograms in /metrics (sum / count since engine start, the latest scrape), else
    the log's request lines (mean prompt_token_ids length + mean max_tokens, an upper bound)."""
    ps = frame(a, "prom_samples")
    if ps is not None:
        want = ["req_prompt_sum", "req_prompt_count", "req_gen_sum", "req_gen_count"]
        h = ps.filter(pl.col("field").is_in(want) & pl.col("value").is_finite())
        if h.height:
            last = (
                h.sort("time", nulls_last=False)
                .group_by("field")
                .agg(pl.col("value").last(), src_expr().last().alias("_src"))
            )
            v = {f: (x, src) for f, x, src in last.iter_rows()}
            if all(k in v for k in want) and v["req_prompt_count"][0] > 0 and v["req_gen_count"][0] > 0:
                p = v["req_prompt_sum"][0] / v["req_prompt_count"][0]
                g = v["req_gen_sum"][0] / v["req_gen_count"][0]
                return {
                    "tokens": p + g,
                    "prompt": p,
                    "output": g,
                    "requests": int(v["req_prompt_count"][0]),
                    "src": v["req_prompt_sum"][1],
                    "how": f"mean prompt {p:.0f} + mean output {g:.0f} tokens of {int(v['req_prompt_count'][0])} "
                    f"finished request(s) (vllm:request_prompt_tokens and vllm:request_generation_tokens, "
                    f"{v['req_prompt_sum'][1]})",
                }

    st = stats_of(a)
    if st.prompt_n >= 5 and st.max_tokens_mean() is not None:
        pr = st.prompts
        p = float(pr.select((pl.col("prompt_tokens") * pl.col("n")).sum() / pl.col("n").sum()).item())
        g = float(st.max_tokens_mean() or 0)
        src = ", ".join(st.sources)[:120]
        return {
            "tokens": p + g,
            "prompt": p,
            "output": g,
            "requests": st.prompt_n,
            "src": src,
            "how": f"mean prompt {p:.0f} + mean max_tokens {g:.0f} tokens of {st.prompt_n} request line(s) ({src}; "
            "max_tokens is an upper bound of the output)",
        }
    return None


def _peak_estimated(a: Analysis, pool: dict[str, Any], index: str | None = None) -> dict[str, Any] | None:
    """No preempt record measures the demand: estimate it from what a stock bundle holds. The
    running count at the engine's pressure samples (KV cache at the ceiling with requests waiting:
    pressure.py), times the blocks an average request needs at its end (:func:`request_tokens`).
    An estimate (labelled so): requests differ in length and a running request has not yet grown
    to its end, so the lever values computed from it are a first step, checked by the next run. With
    ``index``, that engine's pressure intervals only (never the aggregated lines': their running count
    is not one engine's, whose pool this is)."""
    piv = frame(a, "pressure_intervals")
    req = request_tokens(a)
    if piv is None or req is None or not pool.get("block_size"):
        return None
    if index is not None:
        piv = piv.filter(engine_index() == index)
    top = piv.filter(pl.col("max_running").is_not_null()).sort("max_running", descending=True).head(1)
    if top.height == 0:
        return None
    r = top.row(0, named=True)
    running = int(r["max_running"])
    per_req = -(-int(round(req["tokens"])) // pool["block_size"])  # ceil: whole blocks
    demand = running * per_req
    if running < 1 or demand <= pool["blocks"]:
        return None
    ev = list(r["evidence"] or [])
    where = ", ".join(ev[:2]) + (f" (+{len(ev) - 2} more)" if len(ev) > 2 else "")
    return {
        "blocks": demand,
        "tokens": demand * pool["block_size"],
        "running": running,
        "at": r["start"],
        "src": where,
        "blocks_needed_max": None,
        "watermark_blocks": None,
        "records": 0,
        "estimated": True,
        "per_request_blocks": per_req,
        "request_tokens": req,
        "text": f"estimated: {running} running at the KV ceiling{_of(index)} ({where}) x {per_req} blocks per request "
        f"({req['how']}) = {demand} blocks",
    }


def _peak(a: Analysis, pool: dict[str, Any], index: str | None = None) -> tuple[dict[str, Any] | None, str | None]:
    """The peak KV demand, from the requests' tokens in the records: at each preempt record, the
    blocks the requests in flight then (first scheduled, not finished) need to finish, each
    ``ceil((prompt + output tokens) / block_size)`` from its arrival and finish records (an
    unfinished request's output: its max_tokens, an upper bound). Measured only at preemptions
    where the records hold every running request (the preempt record's ``running`` count); the
    largest of those; with ``index``, that engine's preemptions only. Returns (peak, why not)."""
    br = frame(a, "bt_requests")
    bt = frame(a, "bt_events")
    bs = pool["block_size"]
    if br is None or bt is None or not bs:
        return None, (
            "request lifecycle records (the vLLM plugin's arrival, scheduled and finish records) with preempt "
            "records are needed to measure the demand"
        )
    keys = ["_eng", "request_id"]
    r = br.with_columns(_eng=pl.col("engine").fill_null("0"))
    req = (
        r.group_by(keys)
        .agg(
            pl.col("time").filter(pl.col("phase") == "scheduled").min().alias("_in"),
            pl.col("time").filter(pl.col("phase") == "finish").min().alias("_out"),
            pl.col("prompt_tokens").filter(pl.col("phase") == "arrival").first().alias("_prompt"),
            pl.col("max_tokens").filter(pl.col("phase") == "arrival").first().alias("_max"),
            pl.col("output_tokens").filter(pl.col("phase") == "finish").first().alias("_output"),
        )
        .filter(pl.col("_in").is_not_null() & pl.col("_prompt").is_not_null())
        .with_columns(
            _bound=pl.col("_output").is_null(),
            _tokens=pl.col("_prompt") + pl.coalesce("_output", "_max"),
        )
        .filter(pl.col("_tokens").is_not_null())
        .with_columns(_blocks=(pl.col("_tokens") + bs - 1) // bs)
    )
    pre = bt.filter((pl.col("action") == "preempt") & pl.col("time").is_not_null()).with_columns(
        _eng=pl.col("engine").fill_null("0"), _src=src_expr()
    )
    if index is not None:
        pre = pre.filter(pl.col("_eng") == index)
    if req.height == 0 or pre.height == 0:
        return None, "no request with arrival (prompt tokens) and scheduled records around the preempt records"
    # In flight over time: +blocks when first scheduled, -blocks when finished (a sweep, no Python loop).
    steps = pl.concat(
        [
            req.select(
                "_eng", pl.col("_in").alias("t"), "_blocks", pl.lit(1).alias("_n"), pl.col("_bound").cast(pl.Int64)
            ),
            req.filter(pl.col("_out").is_not_null()).select(
                "_eng",
                pl.col("_out").alias("t"),
                (-pl.col("_blocks")).alias("_blocks"),
                pl.lit(-1).alias("_n"),
                (-pl.col("_bound").cast(pl.Int64)).alias("_bound"),
            ),
        ]
    ).sort("t")
    level = steps.with_columns(
        demand=pl.col("_blocks").cum_sum().over("_eng"),
        in_flight=pl.col("_n").cum_sum().over("_eng"),
        bounded=pl.col("_bound").cum_sum().over("_eng"),
    )
    at = (
        pre.sort("time")
        .join_asof(
            level.select("_eng", "t", "demand", "in_flight", "bounded").sort("t"),
            left_on="time",
            right_on="t",
            by="_eng",
            strategy="backward",
            check_sortedness=False,
        )
        .filter(pl.col("demand").is_not_null())
    )
    complete = at.filter(pl.col("running").is_null() | (pl.col("in_flight") >= pl.col("running")))
    if complete.height == 0:
        worst = at.sort("running", descending=True).head(1)
        n_run = worst.get_column("running").to_list()[:1]
        n_in = worst.get_column("in_flight").to_list()[:1]
        return None, (
            f"the records do not hold every running request at any preemption (e.g. {n_in[0] if n_in else 0} in flight "
            f"of {n_run[0] if n_run else '?'} running): the requests' tokens do not measure the demand"
        )
    top = complete.sort(["demand", "time"], descending=[True, False]).row(0, named=True)
    blocks, n = int(top["demand"]), int(top["in_flight"])
    upper = int(top["bounded"] or 0)
    return (
        {
            "blocks": blocks,
            "tokens": blocks * bs,
            "running": n,
            "at": top["time"],
            "src": top["_src"],
            "upper_bound": upper > 0,
            "measured_at": complete.height,
            "text": f"{blocks} blocks for the {n} request(s) in flight at the preemption{_of(index)} {top['_src']} (each "
            f"ceil((prompt + output tokens) / {bs}) from its arrival and finish records"
            + (f"; {upper} unfinished: max_tokens as output, an upper bound" if upper else "")
            + f"; the largest of {complete.height} preemption(s) where the records hold every running request)",
        },
        None,
    )


# A stats sample with requests waiting and the KV cache at least this full (percent) is one where the
# pool, not max_num_seqs, holds the running count: the next request's prompt does not fit what is free.
HELD_KV = 85.0
# An estimate averages the share over the samples (one line is a snapshot: the basis says how many).
MIN_HELD = 1


def held_share(a: Analysis, engine: engines.Engine | None = None, index: str | None = None) -> dict[str, Any] | None:
    """What a stock log's stats lines say of the KV pool per running request, where the pool held
    back waiting requests (KV usage >= :data:`HELD_KV` % with requests waiting), in a log that shows
    pressure (a suspected pressure interval of its stats lines: pressure.py). Per sample, the share of
    the pool one running request holds is ``KV usage / running``; ``share`` is their mean (percent of
    the pool), ``running`` the median running count of those samples and ``in_engine`` the most
    requests in the engine (running + waiting) at one of them. Lines aggregated over several engines
    (``N Engines Aggregated``) are left out: their running count is not one engine's. None when the
    log shows no pressure or fewer than :data:`MIN_HELD` such samples. With ``engine``, only that
    engine's stats lines (its levers are said from them: another engine's batch lines never size them).
    With ``index`` (a data-parallel engine: ``Engine 001:``, ``engine="1"``, an SGLang DP rank), only the
    lines and the pressure of that engine index: each has its own KV pool and scheduler, so another
    index's lines never size its levers (the text names it)."""
    st = a.stats
    if engine is not None and st.height and "family" in st.columns:
        st = st.filter(engines.stats_of(engine))
    piv = frame(a, "pressure_intervals")
    if index is not None:
        st = st.filter(engine_index() == index) if st.height else st
        piv = piv.filter(engine_index() == index) if piv is not None else None
    if st.height == 0 or piv is None or piv.filter(pl.col("series") == "log").height == 0:
        return None
    held = (
        (pl.col("waiting").fill_null(0) > 0)
        & (pl.col("running").fill_null(0) > 0)
        & (pl.col("kv_usage") >= HELD_KV).fill_null(False)
    )
    one_engine = pl.col("engine").fill_null("0") != AGGREGATED
    if "engines" in st.columns:
        one_engine = one_engine | (pl.col("engines") == 1).fill_null(False)
    h = st.filter(held & one_engine)
    summed = ""
    per = 1  # engines a line sums (their running and waiting added, their KV usage the mean)
    if h.height < MIN_HELD and index is None and "engines" in st.columns:
        # lines that sum every engine without saying how many (vLLM's Rust frontend): one engine's
        # figures where the server runs one engine (data_parallel_size 1, stated or its default); with
        # data_parallel_size D stated, one engine's share of its pool is D x KV usage / running (the
        # engines' pools are alike: the mean usage over the running sum), its running count the sum / D
        lever = engine or lever_engine(a)
        one = _one_engine(a, lever)
        dp = cfg_text(a, "data_parallel_size")
        if one is not None:
            h = st.filter(held & pl.col("engines").is_null())
            summed = f"; the lines sum every engine: one engine, {one}"
        elif dp is not None and dp[2] != "default" and dp[0].strip().isdigit() and int(dp[0]) > 1:
            per = int(dp[0])
            h = st.filter(held & pl.col("engines").is_null())
            summed = (
                f"; the lines sum the {per} engines of data_parallel_size {per} ({dp[1] or dp[2]}): their running "
                f"and waiting added, KV usage their mean, so one engine's share is {per} x KV usage / running and "
                f"its running count about the sum / {per} (assumed: the engines share the load evenly)"
            )
    if h.height < MIN_HELD:
        return None
    h = h.sort("time", "line", nulls_last=True).with_columns(
        _share=pl.col("kv_usage") * per / pl.col("running"),
        _src=src_expr(),
        running=(pl.col("running") / per).round().cast(pl.Int64).clip(lower_bound=1),
        waiting=(pl.col("waiting") / per).round().cast(pl.Int64),
    )
    share = round(float(h.get_column("_share").mean()), 1)  # type: ignore[arg-type]  # polars scalars are typed as every literal
    running = h.get_column("running")
    in_engine = (h.get_column("running") + h.get_column("waiting")).max()
    src = [s for s in h.get_column("_src").to_list() if s]
    where = ", ".join(src[:2]) + (f" (+{len(src) - 2} more)" if len(src) > 2 else "")
    return {
        "share": share,
        "samples": h.height,
        "running": int(round(float(running.median()))),  # type: ignore[arg-type]
        "running_max": int(running.max()),  # type: ignore[arg-type]
        "running_min": int(running.min()),  # type: ignore[arg-type]
        "in_engine": int(in_engine),  # type: ignore[arg-type]
        "src": where,
        "text": f"{h.height} stats line(s){_of(index)} with requests waiting at KV usage >= {HELD_KV:g} % ({where}): "
        + (f"{int(running.min())}-{int(running.max())}" if running.min() != running.max() else f"{int(running.max())}")  # type: ignore[arg-type]
        + f" running, {share:.1f} % of the pool each on average{summed}",
    }


def _one_engine(a: Analysis, lever: engines.Engine) -> str | None:
    """Why the bundle's server runs one engine, in words with the value's source: ``data_parallel_size 1``
    as the bundle states it, or assumed (the engine's default) where it states none and shows no engine
    index but one; None where it states more, or shows several indices."""
    if len(engine_indices(a, lever)) > 1:
        return None
    dp = cfg_text(a, "data_parallel_size")
    if dp is not None and dp[2] != "default":
        return f"data_parallel_size {dp[0]} ({dp[1] or dp[2]})" if dp[0].strip() == "1" else None
    return f"data_parallel_size 1 assumed ({lever.display}'s default: the bundle does not state it)"


def _victim_prompts(a: Analysis, victims: pl.DataFrame) -> dict[str, Any] | None:
    pr = victims.filter(pl.col("prompt_tokens").is_not_null())
    if pr.height == 0:
        return None
    i = pr.get_column("prompt_tokens").arg_max()
    r = pr.row(i, named=True) if i is not None else None
    return None if r is None else {"max": int(r["prompt_tokens"]), "src": r["prompt_src"], "victims": pr.height}


def lever_engine(a: Analysis) -> engines.Engine:
    """The engine whose levers the capacity arithmetic is said in: the one engine the bundle shows when
    it has levers of its own (an SGLang log's: ``--max-running-requests``), else the default engine's
    (whose configuration keys the pool and demand are read from)."""
    shown = list(engines.engine_kinds(a.events, a.config, a.records))
    own = engines.find(shown[0]) if len(shown) == 1 else None
    return own if own is not None and own.capacity_fixes is not None else engines.default()


def _by_key(a: Analysis, lever: engines.Engine) -> dict[str, set[str]] | None:
    """The engine indices of ``lever``'s judged events per verdict key (``gate/sub_kind`` for G1: the keys a
    fix's ``addresses`` names); None when none of its events has a verdict (no event counted)."""
    v, ev = a.verdicts, a.events
    if v is None or v.height == 0 or ev.height == 0 or "engine" not in ev.columns:
        return None
    if "engine_kind" in ev.columns:
        ev = ev.filter(engines.events_of(lever.name))
    j = v.select("event_id", verdict_key().fill_null("undetermined").alias("_k")).join(
        ev.select("event_id", engine_index().alias("_i")), on="event_id", how="inner"
    )
    if j.height == 0:
        return None
    out: dict[str, set[str]] = {}
    for k, i in j.select("_k", "_i").unique().iter_rows():
        out.setdefault(str(k), set()).add(str(i))
    return out


def _need(fix: dict[str, Any], ratio: float | None) -> tuple[float, float]:
    """How much a fix asks of its lever (the change from the value in force), then the engine's demand
    over its pool: the engine needing the most gives a lever that several engines' preemptions share."""
    pair = (fix.get("current"), fix.get("suggested"))
    nums = [float(x) for x in pair if isinstance(x, int | float) and not isinstance(x, bool)]
    return (abs(nums[1] - nums[0]) if len(nums) == 2 else -1.0, ratio or 0.0)


def _names(ix: list[str]) -> str:
    return f"engine {ix[0]}" if len(ix) == 1 else "engines " + ", ".join(ix)


def _sized_for(fix: dict[str, Any], index: str, compared: list[str], without: list[str]) -> dict[str, Any]:
    """The fix as sized from engine ``index``'s figures, saying so: ``engine`` (the index), and its effect and
    text led by whose figures they are (of the ``compared`` engines that give one; ``without``: the engines
    it addresses that give none): in its ``expected_effect`` and ``basis`` (the change's one line)."""
    out = dict(fix)
    whose = f"engine {index}'s figures"
    if len(compared) > 1:
        whose += f" (it needs the most of {_names(compared)})"
    elif without:
        whose += f" ({_names(without)} give{'s' if len(without) == 1 else ''} none)"
    out["engine"] = index
    for k in ("expected_effect", "basis"):  # what -v says, and what the one-line change says
        if out.get(k):
            out[k] = f"{whose}: {out[k]}"
    if out.get("text") and f"engine {index}" not in str(out["text"]):
        out["text"] = f"engine {index}: {out['text']}"
    return out


def _ratio(peak: dict[str, Any] | None, held: dict[str, Any] | None, pool: dict[str, Any] | None) -> float | None:
    if peak and pool and pool.get("blocks"):
        return float(peak["blocks"] / pool["blocks"])
    if held:
        return float(held["in_engine"] * held["share"] / 100)
    return None


def _per_engine(
    a: Analysis,
    lever: engines.Engine,
    pool: dict[str, Any] | None,
    base: dict[str, Any],
    ix: list[str],
) -> dict[str, Any]:
    """The capacity arithmetic of a bundle of several engine indices (data parallel: each engine its own KV
    pool and scheduler, one configuration for all). Each engine's figures (its peak demand, its stats lines'
    held share, its failed allocations) are computed on its own and give its own fixes; a fix keeps the
    figures of an engine whose preemptions it addresses (its ``addresses`` against the verdicts of each
    engine's events; an aggregated line's events are any engine's), of those the engine needing the most,
    and says which (:func:`_sized_for`). A fix that only another engine's figures give is dropped, with why:
    evidence of one engine never sizes another's fix."""
    capacity_fixes = lever.capacity_fixes
    assert capacity_fixes is not None
    runs: dict[str, dict[str, Any]] = {}
    for i in ix:
        peak, why = _peak(a, pool, i) if pool is not None and pool["blocks"] else (None, None)
        if peak is None and pool is not None and pool["blocks"]:
            peak = _peak_estimated(a, pool, i)
        held = held_share(a, lever, i)
        own, own_dropped = capacity_fixes({**base, "peak": peak, "failed_allocation": _failed(a, i), "held": held})
        runs[i] = {
            "peak": peak,
            "peak_why": why,
            "held": held,
            "ratio": _ratio(peak, held, pool),
            "fixes": own,
            "dropped": own_dropped,
        }
    by_key = _by_key(a, lever)

    def spread(found: set[str]) -> set[str]:  # an aggregated line's events are any engine's
        return (found - {AGGREGATED}) | set(ix) if AGGREGATED in found else found

    # the engines whose preemptions the capacity levers are for (every engine when none is counted)
    incident = set(ix) if by_key is None else spread(set().union(*by_key.values()))

    def addressed(fix: dict[str, Any]) -> set[str]:
        if by_key is None:
            return set(ix)
        return spread(set().union(*(by_key.get(k, set()) for k in fix.get("addresses") or [])))

    ids = list(dict.fromkeys(f["id"] for i in ix for f in runs[i]["fixes"]))
    fixes: list[dict[str, Any]] = []
    why_not: dict[str, list[str]] = {}
    chosen: str | None = None
    for fid in ids:
        given = [(i, f) for i in ix for f in runs[i]["fixes"] if f["id"] == fid]
        if len(given) == len(ix) and all(f == given[0][1] for _, f in given):
            fixes.append(given[0][1])  # the same from every engine's figures: none of them is engine-specific
            continue
        mine = addressed(given[0][1])
        valid = [(i, f) for i, f in given if i in mine]
        if not valid:
            theirs = [i for i, _ in given]
            why_not.setdefault(fid, []).append(
                f"only {_names(theirs)}'s figures give it, and the preemptions it addresses are "
                + (f"{_names(sorted(mine, key=_index_order))}'s" if mine else "none of theirs")
                + ": one engine's figures never size another's fix"
            )
            continue
        i, f = max(valid, key=lambda x: _need(x[1], runs[x[0]]["ratio"]))
        compared = [j for j, _ in valid]
        without = [j for j in sorted(mine, key=_index_order) if j not in compared]
        fixes.append(_sized_for(f, i, compared, without))
        chosen = chosen or i
    # what was dropped: each engine's reason (those whose preemptions the levers are for), one entry per lever
    kept = {f["id"] for f in fixes}
    whys: dict[str, list[tuple[str, str]]] = {}
    for i in ix:
        if i not in incident:
            continue
        for d in runs[i]["dropped"]:
            if d["id"] not in kept:
                whys.setdefault(d["id"], []).append((i, str(d["why"])))
    dropped: list[dict[str, str]] = []
    for fid in dict.fromkeys([*whys, *why_not]):
        said, other = whys.get(fid, []), why_not.get(fid, [])
        texts = list(dict.fromkeys(w for _, w in said))
        # one reason for every engine is said once; engines' own reasons (or beside another's) name theirs
        parts = texts if len(texts) <= 1 and not other else [f"engine {i}: {w}" for i, w in said]
        dropped.append({"id": fid, "why": "; ".join([*parts, *other])})
    # the figures shown: the engine the fixes were sized for, else the one of the incident needing the most
    pick = chosen or max(
        sorted(incident or set(ix), key=_index_order), key=lambda i: runs[i]["ratio"] or 0.0, default=ix[0]
    )
    r = runs[pick]
    return {
        "evaluable": pool is not None,
        "pool": pool,
        "peak_demand": r["peak"],
        "ratio": (r["peak"]["blocks"] / pool["blocks"]) if r["peak"] and pool and pool["blocks"] else None,
        "held": r["held"],
        "fixes": fixes,
        "dropped": dropped,
        "not_evaluable": None if pool is not None else NO_POOL,
        "peak_not_evaluable": None if r["peak"] is not None else (r["peak_why"] or "the KV pool is not in the bundle"),
        "engine": pick,
        "by_engine": {
            i: {
                "peak_demand": runs[i]["peak"],
                "held": runs[i]["held"],
                "ratio": runs[i]["ratio"],
                "addressed": i in incident,
            }
            for i in ix
        },
    }


NO_POOL = (
    "the KV pool is not in the bundle: the 'GPU KV cache size: N tokens' / '# GPU blocks' startup lines with "
    "block_size, or block-table step records with num_total_blocks and block_size"
)


def compute(a: Analysis, victims: pl.DataFrame) -> dict[str, Any]:

    lever = lever_engine(a)
    capacity_fixes = lever.capacity_fixes
    assert capacity_fixes is not None
    # the pool, the levers' settings and the version: the lever engine's own configuration (a bundle of two
    # engines holds both under the same keys: an SGLang log's kv_cache_tokens is not vLLM's pool)
    a = engines.own_view(a, lever.name)
    pool = _pool(a)
    # the keys the lever engine's levers read (its own declaration: engines/), the default engine's with them
    # (the pool and demand are read from its configuration keys)
    keys = dict.fromkeys((*(engines.default().capacity_keys or ()), *(lever.capacity_keys or ())))
    cfg: dict[str, Cfg | None] = {k: cfg_number(a, k) for k in keys}
    # The engine's own default for the bundle's version stands in for a value the log does not print,
    # labelled as assumed (never preemptlog's own guess: without the version there is none).
    for k in lever.capacity_defaults or ():
        if cfg.get(k) is None:
            cfg[k] = cfg_default(a, k)
    chunked = cfg_text(a, "enable_chunked_prefill")
    version = cfg_text(a, "vllm_version")
    ix = engine_indices(a, lever)
    base: dict[str, Any] = {
        "pool": pool,
        "cfg": cfg,
        "victim_prompts": _victim_prompts(a, victims),
        "chunked_prefill": None if chunked is None or chunked[2] == "default" else chunked,
        "vllm_version": None if version is None or version[2] == "default" else version,
        # the engines whose lines the bundle holds: a lever said of another engine says what it assumes
        "engine_indices": ix,
    }
    if len(ix) > 1:  # data-parallel engines: each engine's figures on their own
        return _per_engine(a, lever, pool, base, ix)
    peak, peak_why = _peak(a, pool) if pool is not None and pool["blocks"] else (None, None)
    if peak is None and pool is not None and pool["blocks"]:
        peak = _peak_estimated(a, pool)  # a stock bundle: estimated from what it holds, said so
    failed = _failed(a)
    held = held_share(a, lever)  # a stock log's stats lines: the levers' basis when no peak demand is measured
    inputs = {
        "pool": pool,
        "peak": peak,
        "failed_allocation": failed,
        "held": held,
        **base,
    }
    fixes, dropped = capacity_fixes(inputs)
    return {
        "evaluable": pool is not None,
        "pool": pool,
        "peak_demand": peak,
        "ratio": (peak["blocks"] / pool["blocks"]) if peak and pool and pool["blocks"] else None,
        "held": held,
        "fixes": fixes,
        "dropped": dropped,
        "not_evaluable": None if pool is not None else NO_POOL,
        "peak_not_evaluable": None if peak is not None else (peak_why or "the KV pool is not in the bundle"),
    }
