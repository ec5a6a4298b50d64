"""Fixes with numbers computed from the incident (the field guide's formulas).

Every recommendation names the inputs it used and where they came from; where
an input is not in the bundle it says which vLLM option would log it, instead
of guessing. Inputs are measured once per incident (:func:`measure`), then
each gate (and G1 sub-kind) gets its list (:func:`by_gate`).

Formulas (field guide): block_size from the prompt-length distribution (3.2.1:
64 when about 95% of prompts are <= 64 tokens); ``max_num_seqs =
ceil(peak_rps * p95_latency_s) * 1.5`` (4.3.2); budget buffer ``ceil(peak_rps *
avg_output_len * 0.3)`` (5); speculative compensation ``max_num_batched_tokens
= 4096 + (draft_model_max_len // 16) * 1.2`` (3.2.4); the dynamic variance
threshold, 10% of the longest running length (3.2.2); ``--swap-space 4`` (4.2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..analysis import Analysis

LOG_REQUESTS_HINT = (
    "log requests (--enable-log-requests from vLLM 0.10.1; on by default before) and, from 0.11.1, "
    "DEBUG logging for prompt_token_ids"
)
LATENCY_HINT = (
    "request latencies: 'Finished request' lines (V0 AsyncLLMEngine with request logging) or OpenTelemetry "
    "traces (--otlp-traces-endpoint)"
)


@dataclass
class Measured:
    value: Any
    how: str  # what it is and where it came from

    @property
    def known(self) -> bool:
        return self.value is not None


def _cfg(analysis: "Analysis") -> dict[str, dict]:
    from ..vllm.config import in_force

    return in_force(analysis.config)


def measure(analysis: "Analysis") -> dict[str, Measured]:
    import polars as pl

    out: dict[str, Measured] = {}
    req = analysis.requests
    rec = req.filter(pl.col("action") == "received") if req.height else req
    src = ", ".join(sorted(rec.get_column("source").unique().to_list()))[:200] if rec.height else ""
    pt = rec.filter(pl.col("prompt_tokens").is_not_null()).get_column("prompt_tokens") if rec.height else None
    if pt is not None and pt.len() >= 20:
        out["prompt_n"] = Measured(pt.len(), f"{pt.len()} prompts with prompt_token_ids in {src}")
        out["prompt_p95"] = Measured(int(pt.quantile(0.95, "higher")), f"p95 of {pt.len()} prompt lengths ({src})")
        out["prompt_share_le_64"] = Measured(float((pt <= 64).mean()), f"share of {pt.len()} prompts <= 64 tokens")
    else:
        out["prompt_p95"] = Measured(None, f"prompt lengths are not in the bundle: {LOG_REQUESTS_HINT}")
    if rec.height >= 2 and rec.get_column("time").null_count() < rec.height:
        per10 = (
            rec.filter(pl.col("time").is_not_null())
            .sort("time")
            .group_by_dynamic("time", every="10s")
            .agg(pl.len().alias("n"))
            .get_column("n")
        )
        peak = float(per10.max()) / 10.0
        out["peak_rps"] = Measured(round(peak, 2), f"busiest 10 s of {rec.height} received requests ({src})")
    else:
        out["peak_rps"] = Measured(None, f"request arrivals are not in the bundle: {LOG_REQUESTS_HINT}")
    mt = rec.filter(pl.col("max_tokens").is_not_null()).get_column("max_tokens") if rec.height else None
    if mt is not None and mt.len():
        out["avg_output_len"] = Measured(
            round(float(mt.mean()), 1), f"mean max_tokens of {mt.len()} requests (an upper bound of the output length)"
        )
    else:
        out["avg_output_len"] = Measured(None, f"output lengths are not in the bundle: {LOG_REQUESTS_HINT}")
    done = req.filter(pl.col("action").is_in(["finished", "aborted"])) if req.height else req
    if rec.height and done.height:
        lat = (
            rec.select("request_id", pl.col("time").alias("t0"))
            .join(done.group_by("request_id").agg(pl.col("time").max().alias("t1")), on="request_id")
            .with_columns(((pl.col("t1") - pl.col("t0")).dt.total_milliseconds() / 1000.0).alias("s"))
            .filter(pl.col("s") >= 0)
            .get_column("s")
        )
        if lat.len() >= 5:
            out["p95_latency_s"] = Measured(
                round(float(lat.quantile(0.95, "higher")), 2), f"p95 of {lat.len()} received -> finished/aborted times"
            )
    if "p95_latency_s" not in out:
        out["p95_latency_s"] = Measured(None, f"latencies are not in the bundle: {LATENCY_HINT}")
    cfg = _cfg(analysis)

    def c(key: str, cast=float) -> Measured:
        row = cfg.get(key)
        if row is None:
            return Measured(None, f"{key} not stated in the bundle")
        try:
            val = cast(row["value"])
        except (TypeError, ValueError, OverflowError):  # not a number: unknown, not a string to compute with
            return Measured(None, f"{key} is not a number in the bundle ({str(row['value'])[:40]!r})")
        where = f"{row['source']}:{row['line']}" if row.get("source") else "preemptlog default"
        return Measured(val, f"{key} {row['status']} ({where})")

    out["block_size"] = c("block_size", int)
    out["max_num_seqs"] = c("max_num_seqs", int)
    out["max_num_batched_tokens"] = c("max_num_batched_tokens", int)
    out["gpu_memory_utilization"] = c("gpu_memory_utilization", float)
    out["max_model_len"] = c("max_model_len", int)
    spec = cfg.get("speculative_config") or cfg.get("speculative_model")
    out["speculative"] = Measured(
        None if spec is None else (spec["value"] not in ("None", "", None)), "speculative_config in the config line"
    )
    ev = analysis.evidence
    if ev is not None and "batch_max_len" in ev.columns and ev.get_column("batch_max_len").null_count() < ev.height:
        out["batch_max_len"] = Measured(int(ev.get_column("batch_max_len").max()), "longest running length at an event")
    else:
        out["batch_max_len"] = Measured(None, "running lengths are not in the bundle (block-table table records)")
    return out


def _fmt(m: Measured) -> str:
    return f"{m.value} ({m.how})" if m.known else f"unknown: {m.how}"


def formulas(m: dict[str, Measured]) -> dict[str, str]:
    """Each formula with its result, or the input it lacks."""
    out: dict[str, str] = {}
    p95, share = m.get("prompt_p95"), m.get("prompt_share_le_64")
    bs = m["block_size"]
    if p95 is not None and p95.known and share is not None:
        if share.value >= 0.95:
            rec = 64
        elif p95.value <= 128:
            rec = 32
        else:
            rec = bs.value if bs.known else 16
        out["block_size"] = (
            f"block_size {rec} (now {bs.value if bs.known else 'unknown'}): {share.value:.0%} of prompts are <= 64 "
            f"tokens and the p95 prompt is {p95.value} tokens (guide 3.2.1: 64 when about 95% are <= 64; the card "
            "matters: L20 best at 32, MI50 at 16); inputs: " + p95.how
        )
    else:
        out["block_size"] = f"block_size: cannot size it, {p95.how if p95 else LOG_REQUESTS_HINT}"
    rps, lat = m["peak_rps"], m["p95_latency_s"]
    if rps.known and lat.known:
        n = math.ceil(rps.value * lat.value) * 1.5
        out["max_num_seqs"] = (
            f"max_num_seqs = ceil(peak_rps {rps.value} x p95 latency {lat.value} s) x 1.5 = {math.ceil(n)} "
            f"(now {m['max_num_seqs'].value}, {m['max_num_seqs'].how}; guide 4.3.2); inputs: {rps.how}; {lat.how}"
        )
    else:
        missing = [x.how for x in (rps, lat) if not x.known]
        out["max_num_seqs"] = "max_num_seqs = ceil(peak_rps x p95_latency_s) x 1.5 (guide 4.3.2): " + "; ".join(missing)
    out_len = m["avg_output_len"]
    if rps.known and out_len.known:
        buf = math.ceil(rps.value * out_len.value * 0.3)
        out["budget_buffer"] = (
            f"keep a budget buffer of ceil(peak_rps {rps.value} x avg output {out_len.value} x 0.3) = {buf} tokens "
            f"(guide 5); inputs: {rps.how}; {out_len.how}"
        )
    else:
        missing = [x.how for x in (rps, out_len) if not x.known]
        out["budget_buffer"] = "budget buffer ceil(peak_rps x avg_output_len x 0.3) (guide 5): " + "; ".join(missing)
    mml = m["max_model_len"]
    if mml.known:
        val = 4096 + (int(mml.value) // 16) * 1.2
        out["spec_budget"] = (
            f"with speculative decoding, max_num_batched_tokens = 4096 + (draft_model_max_len // 16) x 1.2 = "
            f"{math.ceil(val)} taking the target's max_model_len {mml.value} as the draft's (an upper bound; use the "
            "draft model's own max_model_len) (guide 3.2.4)"
        )
    else:
        out["spec_budget"] = (
            "with speculative decoding, max_num_batched_tokens = 4096 + (draft_model_max_len // 16) x 1.2 "
            "(guide 3.2.4): the draft model's max_model_len is not in the bundle"
        )
    bml = m.get("batch_max_len")
    if bml is not None and bml.known:
        out["dynamic_variance"] = (
            f"a dynamic variance threshold of 10% of the longest running length = {bml.value * 0.1:g} "
            f"(guide 3.2.2: 41% -> 2.3% preemptions on long generation); input: {bml.how}"
        )
    else:
        out["dynamic_variance"] = (
            "a dynamic variance threshold of 10% of the longest running length (guide 3.2.2); "
            "running lengths are not in the bundle"
        )
    gmu = m["gpu_memory_utilization"]
    if gmu.known:
        nxt = min(0.95, round(float(gmu.value) + 0.05, 2))
        out["kv_room"] = (
            f"give the KV cache more room: gpu_memory_utilization {gmu.value} -> {nxt} ({gmu.how}), a larger "
            "tensor_parallel_size, or fewer concurrent sequences (vLLM's own advice in its V0 warning)"
        )
    else:
        out["kv_room"] = "give the KV cache more room: raise gpu_memory_utilization or tensor_parallel_size"
    return out


def by_gate(analysis: "Analysis") -> dict[str, list[str]]:
    """Recommendations per verdict key (``gate`` or ``gate/sub_kind``)."""
    m = measure(analysis)
    f = formulas(m)
    spec = [f["spec_budget"]] if m["speculative"].value else []
    g1_common = [f["kv_room"], f["max_num_seqs"], f["budget_buffer"]] + spec
    return {
        "G1-kv-space/fragmentation": [
            f["block_size"],
            "--swap-space 4 (guide 4.2; V0 only: the V1 engine does not swap)",
        ]
        + g1_common,
        "G1-kv-space/capacity": g1_common + [f["block_size"]],
        "G1-kv-space/kv-exhausted": g1_common,
        "G2-batch-variance": [
            f["dynamic_variance"],
            "shape traffic: split long documents, keep prompts of a batch in a narrow band (guide 5)",
        ],
        "G3-queue-overflow": [f["max_num_seqs"], f["budget_buffer"]],
        "G4-prefix-conflict": [
            "one client-side prefix id scheme so identical histories share one prefix (guide 3.2.3: hit rate "
            "63% -> 89%, preemptions -35%)",
            "--enable-chunked-prefill (guide 3.2.3; --max-prefix-cache-len does not exist in upstream vLLM)",
        ],
        "undetermined": [
            "add the evidence the not-evaluable gates list (debug hook lines, block-table records, dmon, /metrics)"
        ],
    }
