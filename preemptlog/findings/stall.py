"""Finding 3: a stall, not preemption.

A stall: at least :data:`MIN_LINES` consecutive stats lines of one stream and engine where
Waiting > 0, generation throughput is 0 and Running is 0 or unchanged from the line before. The
server holds work it does not run; no amount of preemption forensics explains that. Reported
with its span and the lines. (V0 from 0.6.6 and V1 from 0.8.5 move lines of idle intervals to
DEBUG, so an INFO log can hide a stall; without stats lines the finding is not evaluable.)

The special case of a request that can never fit: a prompt longer than the KV cache in tokens
(``GPU KV cache size: N tokens``, or # GPU blocks x block_size), or vLLM's own
``Maximum concurrency for N tokens per request: X`` below 1 (one max-length request does not fit).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import polars as pl

from ..model.requests import stats_of
from .common import cfg_number, frame, src_expr

if TYPE_CHECKING:
    from ..model.result import AnalysisView as Analysis

MIN_LINES = 2


def compute(a: Analysis) -> dict[str, Any]:
    st = a.stats
    out: dict[str, Any] = {"spans": [], "never_fits": _never_fits(a)}
    if st.height == 0 or st.filter(pl.col("waiting").is_not_null() & pl.col("gen_tput").is_not_null()).height == 0:
        out.update(
            evaluable=False,
            found=False,
            not_evaluable="no stats lines with Waiting and generation throughput in the bundle",
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
        )
        .filter(pl.col("lines") >= MIN_LINES)
        .sort("start")
        .collect()
    )
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
        }
        for r in df.iter_rows(named=True)
    ]
    out.update(evaluable=True, found=bool(spans) or bool(out["never_fits"]["found"]), spans=spans, not_evaluable=None)
    return out


def _never_fits(a: Analysis) -> dict[str, Any]:
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
