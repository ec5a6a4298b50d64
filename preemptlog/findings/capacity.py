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
from ..model.requests import stats_of
from .common import Cfg, cfg_default, cfg_number, cfg_text, frame, src_expr

if TYPE_CHECKING:
    from ..model.result import AnalysisView as Analysis


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


def _failed(a: Analysis) -> dict[str, Any] | None:
    """What the failed allocations of the preempt records asked for: the largest, and the recorded
    watermark (the watermark fix reads these; they are not a demand)."""
    bt = frame(a, "bt_events")
    if bt is None:
        return None
    p = bt.filter((pl.col("action") == "preempt") & pl.col("blocks_needed").is_not_null())
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


def _peak_estimated(a: Analysis, pool: dict[str, Any]) -> dict[str, Any] | None:
    """No preempt record measures the demand: estimate it from what a stock bundle holds. The
    running count at the engine's pressure samples (KV cache at the ceiling with requests waiting:
    pressure.py), times the blocks an average request needs at its end (:func:`request_tokens`).
    An estimate (labelled so): requests differ in length and a running request has not yet grown
    to its end, so the lever values computed from it are a first step, checked by the next run."""
    piv = frame(a, "pressure_intervals")
    req = request_tokens(a)
    if piv is None or req is None or not pool.get("block_size"):
        return None
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
        "text": f"estimated: {running} running at the KV ceiling ({where}) x {per_req} blocks per request "
        f"({req['how']}) = {demand} blocks",
    }


def _peak(a: Analysis, pool: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """The peak KV demand, from the requests' tokens in the records: at each preempt record, the
    blocks the requests in flight then (first scheduled, not finished) need to finish, each
    ``ceil((prompt + output tokens) / block_size)`` from its arrival and finish records (an
    unfinished request's output: its max_tokens, an upper bound). Measured only at preemptions
    where the records hold every running request (the preempt record's ``running`` count); the
    largest of those. Returns (peak, why not)."""
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
            "text": f"{blocks} blocks for the {n} request(s) in flight at the preemption {top['_src']} (each "
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


def held_share(a: Analysis, engine: engines.Engine | None = None) -> dict[str, Any] | None:
    """What a stock log's stats lines say of the KV pool per running request, where the pool held
    back waiting requests (KV usage >= :data:`HELD_KV` % with requests waiting), in a log that shows
    pressure (a suspected pressure interval of its stats lines: pressure.py). Per sample, the share of
    the pool one running request holds is ``KV usage / running``; ``share`` is their mean (percent of
    the pool), ``running`` the median running count of those samples and ``in_engine`` the most
    requests in the engine (running + waiting) at one of them. Lines aggregated over several engines
    (``N Engines Aggregated``) are left out: their running count is not one engine's. None when the
    log shows no pressure or fewer than :data:`MIN_HELD` such samples. With ``engine``, only that
    engine's stats lines (its levers are said from them: another engine's batch lines never size them)."""
    st = a.stats
    if engine is not None and st.height and "family" in st.columns:
        st = st.filter(engines.stats_of(engine))
    piv = frame(a, "pressure_intervals")
    if st.height == 0 or piv is None or piv.filter(pl.col("series") == "log").height == 0:
        return None
    h = st.filter(
        (pl.col("waiting").fill_null(0) > 0)
        & (pl.col("running").fill_null(0) > 0)
        & (pl.col("kv_usage") >= HELD_KV).fill_null(False)
        & (pl.col("engine").fill_null("0") != "all")
    )
    if h.height < MIN_HELD:
        return None
    h = h.sort("time", "line", nulls_last=True).with_columns(
        _share=pl.col("kv_usage") / pl.col("running"), _src=src_expr()
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
        "text": f"{h.height} stats line(s) with requests waiting at KV usage >= {HELD_KV:g} % ({where}): "
        + (f"{int(running.min())}-{int(running.max())}" if running.min() != running.max() else f"{int(running.max())}")  # type: ignore[arg-type]
        + f" running, {share:.1f} % of the pool each on average",
    }


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


def compute(a: Analysis, victims: pl.DataFrame) -> dict[str, Any]:

    lever = lever_engine(a)
    capacity_fixes = lever.capacity_fixes
    assert capacity_fixes is not None
    # the pool, the levers' settings and the version: the lever engine's own configuration (a bundle of two
    # engines holds both under the same keys: an SGLang log's kv_cache_tokens is not vLLM's pool)
    a = engines.own_view(a, lever.name)
    pool = _pool(a)
    peak, peak_why = _peak(a, pool) if pool is not None and pool["blocks"] else (None, None)
    if peak is None and pool is not None and pool["blocks"]:
        peak = _peak_estimated(a, pool)  # a stock bundle: estimated from what it holds, said so
    failed = _failed(a)
    held = held_share(a, lever)  # a stock log's stats lines: the levers' basis when no peak demand is measured
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
    inputs = {
        "pool": pool,
        "peak": peak,
        "failed_allocation": failed,
        "held": held,
        "cfg": cfg,
        "victim_prompts": _victim_prompts(a, victims),
        "chunked_prefill": None if chunked is None or chunked[2] == "default" else chunked,
        "vllm_version": None if version is None or version[2] == "default" else version,
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
        "not_evaluable": None
        if pool is not None
        else (
            "the KV pool is not in the bundle: the 'GPU KV cache size: N tokens' / '# GPU blocks' startup lines with "
            "block_size, or block-table step records with num_total_blocks and block_size"
        ),
        "peak_not_evaluable": None if peak is not None else (peak_why or "the KV pool is not in the bundle"),
    }
