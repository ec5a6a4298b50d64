"""Fixes with numbers computed from the incident (the field guide's formulas).

Every recommendation names the inputs it used and where they came from; where
an input is not in the bundle it says which vLLM option would log it, instead
of guessing. Inputs are measured once per incident (:func:`measure`); the
incident's one list of changes is made from these and the capacity levers by
preemptlog/fixes.py (a pipeline stage after the findings).

Formulas (field guide): block_size from the prompt-length distribution (3.2.1:
64 when about 95% of prompts are <= 64 tokens); ``max_num_seqs =
ceil(peak_rps * p95_latency_s) * 1.5`` (4.3.2); budget buffer ``ceil(peak_rps *
avg_output_len * 0.3)`` (5); speculative compensation ``max_num_batched_tokens
= 4096 + (draft_model_max_len // 16) * 1.2`` (3.2.4); the dynamic variance
threshold, 10% of the longest running length (3.2.2); ``--swap-space 4`` (4.2).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import polars as pl

from ...model.config import in_force, version_text
from ...model.fixes import fix_record
from ...model.requests import incident_requests
from ..common import G1_KEYS, FixPart, is_change, verdict_key_counts
from ..common import ranked as _ranked
from .config import EXTENSIBLE_KV_SINCE, VERSION_FLOOR_KEY

if TYPE_CHECKING:
    from ...model.result import AnalysisView

# What the plugin's records settle when a bundle has none (docs/capture.md; fixes/plan.py's "to know more").
RECORDS_HINT = (
    "preemptlog's vLLM plugin records (PREEMPTLOG_RECORD=FILE in the server's environment)",
    "the demand at each failed allocation, so the pool levers are measured, not estimated, and every change "
    "is replayed on the incident's own requests",
)
LOG_REQUESTS_HINT = (
    "log requests (--enable-log-requests from vLLM 0.10.1, on by default before) and, from 0.11.1, "
    "DEBUG logging for prompt_token_ids"
)
PROMPT_IDS_HINT = (
    "DEBUG logging (VLLM_LOGGING_LEVEL=DEBUG: vLLM 0.11.1+ logs a request's prompt_token_ids only at DEBUG), or the "
    "plugin's request records"
)
# Some request lines, too few for the number: logging requests (or DEBUG) is on, what is missing is more of them.
MORE_REQUESTS_HINT = "the request lines of a longer stretch of the log, or the plugin's request records"
PROMPTS_MIN = 20  # prompt lengths for a p95 (the block-size fix's input)
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


def _cfg(analysis: AnalysisView) -> dict[str, dict[str, Any]]:

    return in_force(analysis.config)


def measure(analysis: AnalysisView) -> dict[str, Measured]:
    """The fixes' inputs, each with where it came from. Requests (arrivals, prompt and output
    lengths, latencies) come from the incident's best request source (vllm.requests.
    incident_requests): the plugin's lifecycle records when the bundle has them, else the log's
    request lines."""
    out: dict[str, Measured] = {}
    req = analysis.requests
    st = incident_requests(analysis)  # counts of every request (the frame may hold only named rows)
    records = st.basis == "records"
    src = ", ".join(st.sources)[:200]
    what = "arrival records" if records else "received requests"
    n_pt = st.prompt_n
    if n_pt >= PROMPTS_MIN:
        how = "prompt lengths of arrival records" if records else "prompts with prompt_token_ids"
        out["prompt_n"] = Measured(n_pt, f"{n_pt} {how} in {src}")
        out["prompt_p95"] = Measured(st.prompt_quantile_higher(0.95), f"p95 of {n_pt} prompt lengths ({src})")
        out["prompt_share_le_64"] = Measured(st.prompt_share_le(64), f"share of {n_pt} prompts <= 64 tokens")
    elif n_pt:  # some prompts, too few for a p95: neither logging setting is what is missing
        out["prompt_p95"] = Measured(
            None,
            f"only {n_pt} prompt length(s) in the bundle ({src}), {PROMPTS_MIN} needed for a p95: {MORE_REQUESTS_HINT}",
        )
    elif st.received:  # request lines without their prompt: vLLM 0.11.1+ logs prompt_token_ids at DEBUG only
        out["prompt_p95"] = Measured(None, f"prompt lengths are not in the bundle: {PROMPT_IDS_HINT}")
    else:
        out["prompt_p95"] = Measured(None, f"prompt lengths are not in the bundle: {LOG_REQUESTS_HINT}")
    peak = st.peak_per_10s()
    if st.received >= 2 and st.timed and peak is not None:
        out["peak_rps"] = Measured(round(float(peak) / 10.0, 2), f"busiest 10 s of {st.received} {what} ({src})")
    elif st.received:  # request lines there, too few or untimed: logging requests is not what is missing
        out["peak_rps"] = Measured(
            None,
            f"only {st.received} {what} ({st.timed} timed) in the bundle ({src}), 2 timed needed for a rate: "
            f"{MORE_REQUESTS_HINT}",
        )
    else:
        out["peak_rps"] = Measured(None, f"request arrivals are not in the bundle: {LOG_REQUESTS_HINT}")
    mean_out = st.output_mean()
    mean = st.max_tokens_mean()
    if mean_out is not None:
        out["avg_output_len"] = Measured(
            round(mean_out, 1), f"mean output tokens of {st.outputs_n} finished requests (finish records, {src})"
        )
    elif mean is not None:
        out["avg_output_len"] = Measured(
            round(mean, 1),
            f"mean max_tokens of {st.max_tokens_n} requests (an upper bound of the output length)",
        )
    else:
        out["avg_output_len"] = Measured(None, f"output lengths are not in the bundle: {LOG_REQUESTS_HINT}")
    if st.latency_p95 is not None and st.latency_n >= 5:
        out["p95_latency_s"] = Measured(
            round(st.latency_p95, 2), f"p95 of {st.latency_n} arrival -> finish record times ({src})"
        )
    rec = req.filter(pl.col("action") == "received") if req.height and not records else req.clear()
    done = req.filter(pl.col("action").is_in(["finished", "aborted"])) if req.height else req
    if "p95_latency_s" not in out and rec.height and done.height:
        lat = (
            rec.select("request_id", pl.col("time").alias("t0"))
            .join(done.group_by("request_id").agg(pl.col("time").max().alias("t1")), on="request_id")
            .with_columns(((pl.col("t1") - pl.col("t0")).dt.total_milliseconds() / 1000.0).alias("s"))
            .filter(pl.col("s") >= 0)
            .get_column("s")
        )
        if lat.len() >= 5:
            out["p95_latency_s"] = Measured(
                round(float(lat.quantile(0.95, "higher")), 2),  # type: ignore[arg-type]  # polars scalars are typed as every literal
                f"p95 of {lat.len()} received -> finished/aborted times",
            )
    if "p95_latency_s" not in out:
        out["p95_latency_s"] = Measured(None, f"latencies are not in the bundle: {LATENCY_HINT}")
    cfg = _cfg(analysis)

    def c(key: str, cast: Callable[[Any], Any] = float, defaults: bool = True) -> Measured:
        row = cfg.get(key)
        if row is None or (not defaults and row.get("status") == "default"):
            return Measured(None, f"{key} not stated in the bundle")
        try:
            val = cast(row["value"])
        except (TypeError, ValueError, OverflowError):  # not a number: unknown, not a string to compute with
            return Measured(None, f"{key} is not a number in the bundle ({str(row['value'])[:40]!r})")
        if row.get("source"):
            return Measured(val, f"{key} {row['status']} ({row['source']}:{row['line']})")
        return Measured(val, f"{key} {row.get('note') or 'assumed: vLLM default'}")

    out["block_size"] = c("block_size", int)
    out["max_num_seqs"] = c("max_num_seqs", int)
    # vLLM's default follows the GPU's tier, which the bundle may not show (config.batch_default): a change is
    # sized from a budget the bundle states, else said relative ("+N tokens")
    out["max_num_batched_tokens"] = c("max_num_batched_tokens", int, defaults=False)
    out["gpu_memory_utilization"] = c("gpu_memory_utilization", float)
    ver = cfg.get("vllm_version")
    if ver is not None and ver.get("source"):  # only a version the bundle states
        out["vllm_version"] = Measured(
            str(ver["value"]), f"vllm_version {ver['status']} ({ver['source']}:{ver['line']})"
        )
    gmu_row = cfg.get("gpu_memory_utilization")
    floor = cfg.get(VERSION_FLOOR_KEY)
    ext = cfg.get("enable_extensible_kv_cache")
    out["extensible_kv"] = Measured(
        None if ext is None else str(ext["value"]).strip().lower() == "true",
        "enable_extensible_kv_cache not stated in the bundle"
        if ext is None
        else f"enable_extensible_kv_cache {ext['value']} "
        + (f"{ext['status']} ({ext['source']}:{ext['line']})" if ext.get("source") else f"({ext.get('note')})"),
    )
    out["kv_cache_memory_bytes"] = c("kv_cache_memory_bytes", int)
    if (
        "vllm_version" not in out
        and gmu_row is not None
        and gmu_row.get("status") == "default"
        and (cfg.get("engine") or {}).get("value") != "V0"
        and out["extensible_kv"].value is not False
    ):
        # The version is not known, so it may be 0.34+, where an unset gpu_memory_utilization is 1.0 under the
        # extensible KV cache: the assumed default raised by 0.05 would take memory away there.
        at_least = f", at least {floor['value']} ({floor['source']}:{floor['line']})" if floor is not None else ""
        out["gmu_unset_extensible"] = Measured(
            True,
            f"the vLLM version is not in the bundle{at_least}: it may be {version_text(EXTENSIBLE_KV_SINCE)} or later",
        )
    out["max_model_len"] = c("max_model_len", int)
    out["enable_chunked_prefill"] = c(
        "enable_chunked_prefill", lambda v: str(v).strip().lower() in ("true", "1", "yes")
    )
    spec = cfg.get("speculative_config") or cfg.get("speculative_model")
    spec_where = f" ({spec['source']}:{spec['line']})" if spec is not None and spec.get("source") else ""
    out["speculative"] = Measured(
        None if spec is None else (spec["value"] not in ("None", "", None)),
        f"speculative_config {spec['value'] if spec is not None else 'not stated'} in the config line{spec_where}",
    )
    ev = analysis.evidence
    if (
        ev is not None
        and "bt_batch_max_len" in ev.columns
        and ev.get_column("bt_batch_max_len").null_count() < ev.height
    ):
        i = ev.get_column("bt_batch_max_len").arg_max()
        where = (
            ev.get_column("bt_batch_max_len_src")[i] if "bt_batch_max_len_src" in ev.columns and i is not None else None
        )
        out["bt_batch_max_len"] = Measured(
            int(ev.get_column("bt_batch_max_len").max()),  # type: ignore[arg-type]  # polars scalars are typed as every literal
            "longest running length at an event" + (f" ({where})" if where else ""),
        )
    else:
        out["bt_batch_max_len"] = Measured(None, "running lengths are not in the bundle (block-table table records)")
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
    bml = m.get("bt_batch_max_len")
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
            "tensor_parallel_size, or fewer concurrent sequences (vLLM's own advice: its V0 preemption warning, and its "
            "docs for V1, Optimization and Tuning > Preemption)"
        )
    else:
        out["kv_room"] = "give the KV cache more room: raise gpu_memory_utilization or tensor_parallel_size"
    return out


EXTENSIBLE_BASIS = (
    "vLLM's own advice (vllm/config/cache.py 0.34.0 CacheConfig.gpu_memory_utilization: 'With the extensible "
    "KV cache (the default on CUDA and ROCm), leave this unset ... A lower value takes memory away from the KV "
    "cache')"
)


def _advice(engine: str | None) -> str:
    """Where vLLM itself advises more KV room: the V0 engine's preemption warning says it on every
    preemption; V1 logs no preemption line, and its docs say it (docs/configuration/optimization.md)."""
    if engine == "V0":
        return (
            "vLLM's own advice in its V0 preemption warning ('Increase gpu_memory_utilization or "
            "tensor_parallel_size to provide more KV cache memory')"
        )
    return "vLLM's own advice (its docs, Optimization and Tuning > Preemption: 'Increase gpu_memory_utilization')"


def _known(*ms: Measured | None) -> list[str]:
    """The inputs a fix used: what each known value is and where it came from."""
    return [m.how for m in ms if m is not None and m.known]


def _fix(
    fid: str,
    option: str,
    current: Any,
    suggested: Any,
    inputs: list[str],
    effect: str,
    prose: str,
    keys: list[str],
    *,
    missing: str | None = None,
) -> dict[str, Any]:
    return fix_record(fid, option, current, suggested, inputs, effect, prose, keys, missing=missing)


def structured(m: dict[str, Measured], engine: str | None = None) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """The fixes as data (option, current, suggested, inputs, expected effect, the verdict keys each
    addresses), and the ones dropped with why: a fix that changes nothing (the suggested value is the
    value in force) or whose premise is absent from the bundle (speculative decoding off, a V0-only
    option on a V1 engine) is not a fix."""
    f = formulas(m)
    out: list[dict[str, Any]] = []
    dropped: list[dict[str, str]] = []
    bs = m["block_size"]
    p95, share = m.get("prompt_p95"), m.get("prompt_share_le_64")
    if p95 is not None and p95.known and share is not None:
        rec = 64 if share.value >= 0.95 else 32 if p95.value <= 128 else (bs.value if bs.known else 16)
        item = _fix(
            "block_size",
            "--block-size",
            bs.value,
            rec,
            _known(p95, share, bs),
            "fewer fragmentation preemptions: blocks sized to the prompts leave fewer partly used blocks",
            f["block_size"],
            ["G1-kv-space/fragmentation", "G1-kv-space/capacity"],
        )
        if bs.known and rec == bs.value:
            dropped.append({"id": "block_size", "why": f"suggests block_size {rec}, the value in force ({bs.how})"})
        else:
            out.append(item)
    else:
        out.append(
            _fix(
                "block_size",
                "--block-size",
                bs.value,
                None,
                _known(bs),
                "sized to the prompt lengths",
                f["block_size"],
                ["G1-kv-space/fragmentation", "G1-kv-space/capacity"],
                missing=p95.how if p95 else LOG_REQUESTS_HINT,
            )
        )
    rps, lat, mns = m["peak_rps"], m["p95_latency_s"], m["max_num_seqs"]
    keys_seqs = G1_KEYS + ["G3-queue-overflow"]
    if rps.known and lat.known:
        n = math.ceil(math.ceil(rps.value * lat.value) * 1.5)
        item = _fix(
            "max_num_seqs",
            "--max-num-seqs",
            mns.value,
            n,
            _known(rps, lat, mns),
            "the running set matches the arrival rate: no queue overflow, fewer sequences competing for KV",
            f["max_num_seqs"],
            keys_seqs,
        )
        if mns.known and n == mns.value:
            dropped.append({"id": "max_num_seqs", "why": f"suggests max_num_seqs {n}, the value in force ({mns.how})"})
        else:
            out.append(item)
    else:
        missing = "; ".join(x.how for x in (rps, lat) if not x.known)
        out.append(
            _fix(
                "max_num_seqs",
                "--max-num-seqs",
                mns.value,
                None,
                _known(rps, lat, mns),
                "the running set matches the arrival rate",
                f["max_num_seqs"],
                keys_seqs,
                missing=missing,
            )
        )
    out_len, mbt = m["avg_output_len"], m["max_num_batched_tokens"]
    if rps.known and out_len.known:
        buf = math.ceil(rps.value * out_len.value * 0.3)
        out.append(
            _fix(
                "budget_buffer",
                "--max-num-batched-tokens",
                mbt.value,
                (mbt.value + buf) if mbt.known else f"+{buf} tokens",
                _known(rps, out_len, mbt),
                f"a token budget buffer of {buf} tokens absorbs bursts of decode growth",
                f["budget_buffer"],
                keys_seqs,
            )
        )
    else:
        missing = "; ".join(x.how for x in (rps, out_len) if not x.known)
        out.append(
            _fix(
                "budget_buffer",
                "--max-num-batched-tokens",
                mbt.value,
                None,
                _known(rps, out_len, mbt),
                "a token budget buffer absorbs bursts of decode growth",
                f["budget_buffer"],
                keys_seqs,
                missing=missing,
            )
        )
    spec = m["speculative"]
    if spec.value:
        mml = m["max_model_len"]
        val = math.ceil(4096 + (int(mml.value) // 16) * 1.2) if mml.known else None
        out.append(
            _fix(
                "spec_budget",
                "--max-num-batched-tokens",
                mbt.value,
                val,
                _known(mml, spec),
                "room in the token budget for the draft tokens of speculative decoding",
                f["spec_budget"],
                G1_KEYS,
                missing=None if mml.known else "the draft model's max_model_len",
            )
        )
    else:
        why = "speculative decoding is off" if spec.value is False else "speculative decoding is not in the bundle"
        dropped.append({"id": "spec_budget", "why": f"{why} ({spec.how})"})
    bml = m.get("bt_batch_max_len")
    if bml is not None and bml.known:
        out.append(
            _fix(
                "dynamic_variance",
                "batch variance threshold (debug hook)",
                None,
                round(bml.value * 0.1, 1),
                _known(bml),
                "fewer batch-variance preemptions on long generation (guide 3.2.2: 41% -> 2.3%)",
                f["dynamic_variance"],
                ["G2-batch-variance"],
            )
        )
    else:
        out.append(
            _fix(
                "dynamic_variance",
                "batch variance threshold (debug hook)",
                None,
                None,
                [],
                "fewer batch-variance preemptions on long generation",
                f["dynamic_variance"],
                ["G2-batch-variance"],
                missing="running lengths (block-table table records)",
            )
        )
    out.append(
        _fix(
            "traffic_shape",
            "client traffic",
            None,
            "split long documents; one narrow prompt band per batch",
            [],
            "lower batch variance",
            "shape traffic: split long documents, keep prompts of a batch in a narrow band (guide 5)",
            ["G2-batch-variance"],
        )
    )
    gmu = m["gpu_memory_utilization"]
    ver = m.get("vllm_version")
    ext = m.get("extensible_kv")
    extensible = (
        ver is not None
        and ver.known
        and _ver(str(ver.value)) >= EXTENSIBLE_KV_SINCE
        and (ext is None or ext.value is not False)
    )
    kvmem = m.get("kv_cache_memory_bytes")
    if kvmem is not None and kvmem.known:
        # --kv-cache-memory-bytes sizes the KV cache itself: vLLM ignores gpu_memory_utilization then
        # (vllm/config/cache.py CacheConfig.kv_cache_memory_bytes, 0.32-0.34)
        out.append(
            _fix(
                "kv_room",
                "--kv-cache-memory-bytes",
                kvmem.value,
                None,
                _known(kvmem),
                "more KV cache blocks",
                f"raise kv_cache_memory_bytes (now {kvmem.value}, {kvmem.how}): it sizes the KV cache, and "
                "gpu_memory_utilization is ignored while it is set",
                G1_KEYS,
                missing="the pool and the demand to size it (preemptlog's vLLM plugin records)",
            )
        )
    elif gmu.known and extensible and float(gmu.value) < 1.0:
        # vLLM 0.34+: the extensible KV cache (its default on CUDA and ROCm) sizes the pool from the memory
        # measured after warmup; a set value below 1.0 takes memory away from the KV cache.
        item = _fix(
            "kv_room",
            "--gpu-memory-utilization",
            gmu.value,
            1.0,
            _known(gmu, ver),
            "more KV cache blocks: the pool sized from the memory measured after warmup",
            f"leave gpu_memory_utilization unset (1.0 under vLLM {ver.value}'s extensible KV cache, its default "  # type: ignore[union-attr]
            f"on CUDA and ROCm), unless other processes share the GPU; now {gmu.value} ({gmu.how})",
            G1_KEYS,
        )
        item["basis"] = EXTENSIBLE_BASIS
        out.append(item)
    elif gmu.known:
        nxt = min(0.95, round(float(gmu.value) + 0.05, 2))
        if nxt <= float(gmu.value):
            dropped.append({"id": "kv_room", "why": f"gpu_memory_utilization is already {gmu.value} ({gmu.how})"})
        else:
            item = _fix(
                "kv_room",
                "--gpu-memory-utilization",
                gmu.value,
                nxt,
                _known(gmu),
                "more KV cache blocks (or a larger tensor_parallel_size, or fewer concurrent sequences)",
                f["kv_room"],
                G1_KEYS,
            )
            item["basis"] = f"{_advice(engine)}, +0.05: the bundle holds no pool and demand to size it"
            unset = m.get("gmu_unset_extensible")
            if unset is not None and unset.known:
                # vLLM 0.34+ with it unset: 1.0 already; the raised value would be a cut there.
                item["text"] = (
                    f"{item['text']}; on vLLM {version_text(EXTENSIBLE_KV_SINCE)} or later, where it is unset, leave it "
                    f"unset (1.0 under the extensible KV cache, its default on CUDA and ROCm): {nxt} would take memory "
                    f"away from the KV cache ({unset.how})"
                )
                item["basis"] += f"; on {version_text(EXTENSIBLE_KV_SINCE)}+ leave it unset (1.0 there)"
            out.append(item)
    else:
        out.append(
            _fix(
                "kv_room",
                "--gpu-memory-utilization",
                None,
                None,
                [],
                "more KV cache blocks",
                f["kv_room"],
                G1_KEYS,
                missing="gpu_memory_utilization is not in the bundle",
            )
        )
    if engine == "V1":
        dropped.append({"id": "swap_space", "why": "--swap-space is V0 only: the V1 engine does not swap"})
    else:
        out.append(
            _fix(
                "swap_space",
                "--swap-space",
                None,
                4,
                [],
                "preempted sequences swap to CPU memory instead of recomputing (V0 only)",
                "--swap-space 4 (guide 4.2; V0 only: the V1 engine does not swap)",
                ["G1-kv-space/fragmentation"],
            )
        )
    out.append(
        _fix(
            "prefix_ids",
            "client prefix ids",
            None,
            "one prefix id scheme",
            [],
            "identical histories share one prefix (guide 3.2.3: hit rate 63% -> 89%, preemptions -35%)",
            "one client-side prefix id scheme so identical histories share one prefix (guide 3.2.3: hit rate "
            "63% -> 89%, preemptions -35%)",
            ["G4-prefix-conflict"],
        )
    )
    cp = m.get("enable_chunked_prefill") or Measured(None, "enable_chunked_prefill not stated in the bundle")
    if cp.value is True:
        dropped.append({"id": "chunked_prefill", "why": f"chunked prefill is already on ({cp.how})"})
    else:
        out.append(
            _fix(
                "chunked_prefill",
                "--enable-chunked-prefill",
                cp.value,
                True,
                _known(cp),
                "long prefills no longer extend shared prefix blocks in one step",
                "--enable-chunked-prefill (guide 3.2.3; --max-prefix-cache-len does not exist in upstream vLLM)",
                ["G4-prefix-conflict"],
            )
        )
    out.append(
        _fix(
            "add_evidence",
            "bundle",
            None,
            "debug hook lines, block-table records, dmon, /metrics",
            [],
            "the gates that could not be evaluated can be",
            "add the evidence the not-evaluable gates list (debug hook lines, block-table records, dmon, /metrics)",
            ["undetermined"],
        )
    )
    return out, dropped


# Among fixes addressing as many events: the most direct first (vLLM's own advice for KV space, then
# the admission limits), as the guide orders them.
TIE_ORDER = [
    "scheduling_policy",
    "block_size",
    "capacity_gpu_memory_utilization",
    "capacity_num_gpu_blocks_override",
    "kv_room",
    "capacity_max_num_seqs",
    "capacity_max_model_len",
    "capacity_chunked_prefill_budget",
    "capacity_watermark",
    "swap_space",
    "max_num_seqs",
    "budget_buffer",
    "spec_budget",
    "dynamic_variance",
    "traffic_shape",
    "prefix_ids",
    "chunked_prefill",
    "add_evidence",
]


def ranked(fixes: list[dict[str, Any]], counts: dict[str, int]) -> list[dict[str, Any]]:
    """common.ranked with vLLM's TIE_ORDER."""
    return _ranked(fixes, counts, TIE_ORDER)


def ranked_pressure(fixes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The changes for pressure without a counted event (a stock V1 log): they address no event
    (``events_addressed`` 0, ``pressure`` true); the lever that moves a pinned pool first, then
    max_num_seqs, then the memory share (``PRESSURE_ORDER``)."""
    out = sorted(
        fixes, key=lambda x: PRESSURE_ORDER.index(x["id"]) if x["id"] in PRESSURE_ORDER else len(PRESSURE_ORDER)
    )
    for i, x in enumerate(out, 1):
        x["events_addressed"] = 0
        x["rank"] = i
    return out


# A pinned pool grows by its own option (the run stays as fast); max_num_seqs needs no memory; the memory
# share last (an upper bound of what it needs).
PRESSURE_ORDER = ["capacity_num_gpu_blocks_override", "capacity_max_num_seqs", "capacity_gpu_memory_utilization"]


def engine_family(analysis: AnalysisView) -> str | None:
    return (_cfg(analysis).get("engine") or {}).get("value")


# ---------------------------------------------------------------- issue 15: capacity arithmetic
def _ver(text: str) -> tuple[int, ...]:
    import re

    return tuple(int(x) for x in re.findall(r"\d+", text)[:3])


# the configuration keys the capacity levers read (findings/capacity.py gives them as the inputs' ``cfg``), and
# those whose default for the bundle's version stands in, assumed, when the log does not print them
CAPACITY_KEYS = (
    "gpu_memory_utilization",
    "max_num_seqs",
    "max_model_len",
    "max_num_batched_tokens",
    "kv_cache_memory_gib",
    "max_concurrency",
    "num_gpu_blocks_override",
    "num_gpu_blocks_profiled",
    "kv_cache_memory_bytes",
)
CAPACITY_DEFAULTS = ("gpu_memory_utilization", "max_num_seqs")


def capacity_fixes(c: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """Fixes computed from the KV pool and the observed peak demand (findings/capacity.py), same
    dict shape as :func:`_fix` (``option`` + ``suggested`` replay the fix). Each names its inputs
    with file:line; a lever whose inputs are missing is returned with ``missing`` in ``dropped``,
    one that changes nothing is dropped with why."""
    held = c.get("held") if c.get("peak") is None else None  # no demand measured: what the stats lines show
    if held is None:
        return _capacity_fixes(c)
    # The stats lines give the pool levers and max_num_seqs (held_levers); the other levers as before.
    mine, mine_dropped = held_levers(held, c.get("pool"), c.get("cfg") or {})
    ids = {x["id"] for x in mine} | {x["id"] for x in mine_dropped}
    rest, rest_dropped = _capacity_fixes(c)
    return [*mine, *(x for x in rest if x["id"] not in ids)], [
        *mine_dropped,
        *(x for x in rest_dropped if x["id"] not in ids),
    ]


def _capacity_fixes(c: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    out: list[dict[str, Any]] = []
    dropped: list[dict[str, str]] = []
    pool, peak, cfg = c.get("pool"), c.get("peak"), c.get("cfg") or {}
    if pool is None:
        return out, [{"id": "capacity", "why": "the KV pool size is not in the bundle"}]
    pin = list(pool["inputs"])
    gmu, mns, mml = cfg.get("gpu_memory_utilization"), cfg.get("max_num_seqs"), cfg.get("max_model_len")
    mbt, kvgib = cfg.get("max_num_batched_tokens"), cfg.get("kv_cache_memory_gib")
    override = cfg.get("num_gpu_blocks_override")
    ratio = peak["blocks"] / pool["blocks"] if peak and pool["blocks"] else None
    peak_in = [f"peak demand {peak['blocks']} blocks = {peak['tokens']} tokens: {peak['text']}"] if peak else []
    estimated = " (from an estimated peak demand)" if peak and peak.get("estimated") else ""
    # The lever that moves the pool: --num-gpu-blocks-override pins it, whatever the memory share.
    if override is not None:
        dropped.append(
            {
                "id": "capacity_gpu_memory_utilization",
                "why": f"the pool is pinned by --num-gpu-blocks-override ({override.cite()}): "
                "gpu_memory_utilization does not change it",
            }
        )
        if peak is None:
            dropped.append({"id": "capacity_num_gpu_blocks_override", "why": "needs the peak demand"})
        elif ratio is not None and ratio > 1:
            need = int(math.ceil(override.value * ratio))
            out.append(
                _fix(
                    "capacity_num_gpu_blocks_override",
                    "--num-gpu-blocks-override",
                    int(override.value),
                    need,
                    [override.cite(), *pin, *peak_in],
                    f"a KV pool of {need} blocks holds the peak demand ({ratio:.2f}x the pool){estimated}; the "
                    "GPU must have the memory for it",
                    f"num_gpu_blocks_override {int(override.value)} -> {need} = the pool {pool['blocks']} blocks x "
                    f"peak {peak['blocks']} / {pool['blocks']}",
                    G1_KEYS,
                )
            )
        else:
            dropped.append({"id": "capacity_num_gpu_blocks_override", "why": "the peak demand fits the pool"})
    # gpu_memory_utilization that holds the peak.
    kvbytes = cfg.get("kv_cache_memory_bytes")
    if override is not None:
        pass
    elif kvbytes is not None:
        dropped.append(_sized_by_bytes(kvbytes))
        if peak is None:
            dropped.append({"id": "capacity_kv_cache_memory_bytes", "why": "needs the peak demand"})
        elif ratio is not None and ratio > 1:
            need = int(math.ceil(kvbytes.value * ratio))
            out.append(
                _fix(
                    "capacity_kv_cache_memory_bytes",
                    "--kv-cache-memory-bytes",
                    int(kvbytes.value),
                    need,
                    [kvbytes.cite(), *pin, *peak_in],
                    f"a KV cache {ratio:.2f}x as large holds the peak demand{estimated}; the GPU must have the "
                    "memory for it",
                    f"kv_cache_memory_bytes {int(kvbytes.value)} -> {need} = {int(kvbytes.value)} x peak "
                    f"{peak['blocks']} / pool {pool['blocks']} blocks",
                    G1_KEYS,
                )
            )
        else:
            dropped.append({"id": "capacity_kv_cache_memory_bytes", "why": "the peak demand fits the pool"})
    elif peak is None or gmu is None:
        dropped.append(
            {
                "id": "capacity_gpu_memory_utilization",
                "why": "needs "
                + " and ".join(
                    x
                    for x, ok in (
                        ("the peak demand (preempt records with blocks_needed)", peak is not None),
                        ("gpu_memory_utilization stated in the bundle", gmu is not None),
                    )
                    if not ok
                ),
            }
        )
    elif ratio is not None and ratio > 1:
        need = math.ceil(gmu.value * ratio * 100) / 100
        extra = f"; the KV cache needs +{kvgib.value * (ratio - 1):.2f} GiB ({kvgib.cite()})" if kvgib else ""
        if need > 0.98:
            dropped.append(
                {
                    "id": "capacity_gpu_memory_utilization",
                    "why": f"holding the peak needs gpu_memory_utilization about {need} (> 0.98): not "
                    "reachable on this GPU; more GPUs (tensor_parallel_size) or fewer sequences",
                }
            )
        else:
            out.append(
                _fix(
                    "capacity_gpu_memory_utilization",
                    "--gpu-memory-utilization",
                    gmu.value,
                    need,
                    [gmu.cite(), *pin, *peak_in],
                    f"a KV pool of about {math.ceil(pool['blocks'] * ratio)} blocks holds the peak demand "
                    f"({ratio:.2f}x the pool){extra} (an upper bound: only the KV share of the budget must grow)"
                    + estimated,
                    f"gpu_memory_utilization {gmu.value:g} -> {need} = {gmu.value:g} x peak {peak['blocks']} / pool "
                    f"{pool['blocks']} blocks",
                    G1_KEYS,
                )
            )
    else:
        dropped.append({"id": "capacity_gpu_memory_utilization", "why": "the peak demand fits the pool"})
    # max_num_seqs that keeps the peak within the pool.
    if peak is None or not peak.get("running"):
        dropped.append(
            {
                "id": "capacity_max_num_seqs",
                "why": "needs the peak demand and the running count at it (preempt records)",
            }
        )
    else:
        per_req = peak["blocks"] / peak["running"]
        fit = int(pool["blocks"] // per_req) if per_req > 0 else None
        if fit is None or fit < 1 or fit >= peak["running"] or (mns is not None and fit >= mns.value):
            dropped.append(
                {
                    "id": "capacity_max_num_seqs",
                    "why": f"max_num_seqs {fit} would not lower the running "
                    f"count {peak['running']} at the peak" + (f" or the limit {mns.cite()}" if mns else ""),
                }
            )
        else:
            out.append(
                _fix(
                    "capacity_max_num_seqs",
                    "--max-num-seqs",
                    int(mns.value) if mns else None,
                    fit,
                    ([mns.cite()] if mns else [])
                    + pin
                    + peak_in
                    + [f"running {peak['running']} at the peak ({peak['src']})"],
                    f"at {per_req:.1f} blocks per running request, {fit} requests fit the pool of {pool['blocks']} blocks: "
                    "fewer preemptions, more waiting" + estimated,
                    f"max_num_seqs {fit} = floor(pool {pool['blocks']} / (peak {peak['blocks']} blocks / {peak['running']} running))",
                    G1_KEYS + ["G3-queue-overflow"],
                )
            )
    # max_model_len that fits the pool.
    conc = cfg.get("max_concurrency")
    if mml is None:
        dropped.append({"id": "capacity_max_model_len", "why": "max_model_len is not stated in the bundle"})
    elif mml.value > pool["tokens"] or (conc is not None and conc.value < 1):
        fit_len = (pool["tokens"] // pool["block_size"]) * pool["block_size"] if pool["block_size"] else pool["tokens"]
        out.append(
            _fix(
                "capacity_max_model_len",
                "--max-model-len",
                int(mml.value),
                fit_len,
                [mml.cite(), *pin] + ([conc.cite()] if conc else []),
                f"a request of max_model_len fits the KV pool of {pool['tokens']} tokens (now it never can)",
                f"max_model_len {int(mml.value)} -> {fit_len}: the KV pool holds {pool['tokens']} tokens",
                G1_KEYS,
            )
        )
    else:
        dropped.append(
            {
                "id": "capacity_max_model_len",
                "why": f"max_model_len {int(mml.value)} already fits the pool of {pool['tokens']} tokens",
            }
        )
    # chunked-prefill budget against the victims' prompts.
    vp, cp = c.get("victim_prompts"), c.get("chunked_prefill")
    if mbt is None or vp is None:
        lack = [
            x
            for x, ok in (
                ("max_num_batched_tokens (the 'Chunked prefill is enabled' line)", mbt is not None),
                ("the victims' prompt lengths (request records or prompt_token_ids)", vp is not None),
            )
            if not ok
        ]
        dropped.append({"id": "capacity_chunked_prefill_budget", "why": "needs " + " and ".join(lack)})
    elif vp["max"] > mbt.value and vp["max"] <= pool["tokens"]:
        chunks = math.ceil(vp["max"] / mbt.value)
        out.append(
            _fix(
                "capacity_chunked_prefill_budget",
                "--max-num-batched-tokens",
                int(mbt.value),
                vp["max"],
                [mbt.cite(), f"longest victim prompt {vp['max']} tokens ({vp['src']})"]
                + ([f"enable_chunked_prefill={cp[0]} ({cp[2]}, {cp[1]})"] if cp else [])
                + pin,
                f"the longest victim prompt prefills in one step instead of {chunks} chunks, so it cannot be preempted "
                "between its chunks (costs a larger per-step activation budget)",
                f"max_num_batched_tokens {int(mbt.value)} -> {vp['max']}: victim prompts of up to {vp['max']} tokens "
                f"take {chunks} chunks now",
                G1_KEYS,
            )
        )
    else:
        dropped.append(
            {
                "id": "capacity_chunked_prefill_budget",
                "why": f"every victim prompt fits max_num_batched_tokens {int(mbt.value)}"
                if vp["max"] <= mbt.value
                else "the longest victim prompt exceeds the KV pool",
            }
        )
    # watermark (V1 --watermark, 0.24+): keep room for running requests' growth when admitting.
    ver = c.get("vllm_version")
    fail = c.get("failed_allocation")  # the largest failed allocation of the preempt records
    if fail is None or not pool["blocks"] or ver is None or _ver(ver[0]) < (0, 24):
        dropped.append(
            {
                "id": "capacity_watermark",
                "why": "needs the vLLM version (>= 0.24, where V1 has --watermark) and preempt records",
            }
        )
    else:
        cur = (fail.get("watermark_blocks") or 0) / pool["blocks"]
        sug = math.ceil(fail["blocks_needed_max"] / pool["blocks"] * 100) / 100
        if sug <= cur:
            dropped.append(
                {
                    "id": "capacity_watermark",
                    "why": f"the watermark {cur:.2f} already covers the largest "
                    f"failed allocation ({fail['blocks_needed_max']} blocks)",
                }
            )
        else:
            out.append(
                _fix(
                    "capacity_watermark",
                    "--watermark",
                    round(cur, 4),
                    sug,
                    [
                        f"vllm_version {ver[0]} ({ver[1]})",
                        *pin,
                        f"recorded watermark_blocks {fail.get('watermark_blocks') or 0} ({fail['src']})",
                        f"largest failed allocation {fail['blocks_needed_max']} blocks ({fail['records']} preempt records)",
                    ],
                    "admission keeps room for the largest allocation that failed, so running requests can grow",
                    f"watermark {cur:.2f} -> {sug} = largest failed allocation {fail['blocks_needed_max']} / pool "
                    f"{pool['blocks']} blocks",
                    G1_KEYS,
                )
            )
    return out, dropped


# ---------------------------------------------------------------- a stock log: the levers its stats lines support

# The share of the KV pool a max_num_seqs estimated from the stats lines leaves free for the running
# requests to grow into (their prompts stay, their outputs grow one token a step until they finish).
GROWTH_ROOM = 0.15
# gpu_memory_utilization above this is not offered (the rest of the GPU's memory is the model's and
# the activations').
GMU_REACHABLE = 0.98


def _lines(held: dict[str, Any]) -> str:
    n = int(held["samples"])
    return "the stats lines" if n > 1 else "one stats line"


def _sized_by_bytes(kvbytes: Any) -> dict[str, str]:
    """Why no --gpu-memory-utilization lever: --kv-cache-memory-bytes sizes the KV cache (vLLM 0.32-0.34
    vllm/config/cache.py CacheConfig.kv_cache_memory_bytes: 'when not-None, ignores gpu_memory_utilization')."""
    return {
        "id": "capacity_gpu_memory_utilization",
        "why": f"the KV cache is sized by --kv-cache-memory-bytes ({kvbytes.cite()}): vLLM ignores "
        "gpu_memory_utilization while it is set (vllm/config/cache.py CacheConfig.kv_cache_memory_bytes)",
    }


def held_levers(
    held: dict[str, Any], pool: dict[str, Any] | None, cfg: dict[str, Any]
) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """The changes a stock log supports without a measured demand (findings/capacity.held_share): the
    stats lines where requests waited with the KV cache nearly full give the share of the pool one
    running request holds (``share`` %). Estimated, never verified by the log itself:

    - ``--max-num-seqs floor(100 / (share x (1 + GROWTH_ROOM)))``: as many requests as fill the pool
      to 1 / 1.15 of it at the share the log shows, so the running set has room to grow (offered when
      it lowers the most running requests the pool held);
    - the pool for the requests in the engine at the worst sample (running + waiting, at most a
      max_num_seqs stated in the log) at that share and room: ``--num-gpu-blocks-override`` when the
      log pins the pool (up to the blocks the memory profile found), else ``--gpu-memory-utilization``
      (``x`` the same ratio, an upper bound: only the KV share must grow; offered up to 0.98).
    """

    out: list[dict[str, Any]] = []
    dropped: list[dict[str, str]] = []
    share, room = float(held["share"]), 1 + GROWTH_ROOM
    mns, override = cfg.get("max_num_seqs"), cfg.get("num_gpu_blocks_override")
    gmu, profiled = cfg.get("gpu_memory_utilization"), cfg.get("num_gpu_blocks_profiled")
    seen = held["text"]
    each = f"{share:.1f} % of the pool each"
    ran = (
        f"{held['running_min']}-{held['running_max']}"
        if held["running_min"] != held["running_max"]
        else str(held["running"])
    )
    keys_seqs = G1_KEYS + ["G3-queue-overflow"]
    extra = {"estimated": "stats lines", "pressure": True}
    # max_num_seqs that leaves the running set room to grow
    fit = int(100 // (share * room)) if share > 0 else 0
    if fit < 1:
        dropped.append(
            {"id": "capacity_max_num_seqs", "why": f"one running request holds {share:.0f} % of the KV pool ({seen})"}
        )
    elif fit >= held["running_max"] or (mns is not None and fit >= mns.value):
        dropped.append(
            {
                "id": "capacity_max_num_seqs",
                "why": f"max_num_seqs {fit} would not lower the up to {held['running_max']} running the pool held "
                f"({seen})",
            }
        )
    else:
        basis = f"estimated from {_lines(held)}, {ran} running at {share:g} % of the KV pool each"
        out.append(
            fix_record(
                "capacity_max_num_seqs",
                "--max-num-seqs",
                int(mns.value) if mns is not None else None,
                fit,
                [seen, *([mns.cite()] if mns is not None else [])],
                f"{fit} running requests at {share:.1f} % of the KV pool each fill {fit * share:.0f} % of it and "
                "have room to grow: fewer preemptions, more requests waiting",
                f"max_num_seqs {fit} = floor(100 % / ({share:.1f} % per running request x {room:g})): {seen}",
                keys_seqs,
                basis=basis,
                **extra,
            )
        )
    # the pool that holds the requests in the engine at the worst sample
    in_engine = int(held["in_engine"])
    if mns is not None and mns.status != "assumed":
        in_engine = min(in_engine, int(mns.value))
    ratio = in_engine * share * room / 100
    demand = f"{in_engine} requests in the engine (running + waiting) at {each}, 15 % room: {ratio:.2f}x the pool"
    basis = f"estimated from {_lines(held)}, {in_engine} requests in the engine at {share:g} % of the pool each"
    if ratio <= 1:
        for fid in ("capacity_num_gpu_blocks_override", "capacity_gpu_memory_utilization"):
            dropped.append({"id": fid, "why": f"the stats lines' demand fits the pool ({demand})"})
    elif override is not None:
        dropped.append(
            {
                "id": "capacity_gpu_memory_utilization",
                "why": f"the pool is pinned by --num-gpu-blocks-override ({override.cite()}): "
                "gpu_memory_utilization does not change it",
            }
        )
        need = int(math.ceil(override.value * ratio))
        if profiled is not None and need > profiled.value:
            dropped.append(
                {
                    "id": "capacity_num_gpu_blocks_override",
                    "why": f"holding {demand} needs {need} blocks, more than the {int(profiled.value)} the memory "
                    f"profile found ({profiled.cite()})",
                }
            )
        else:
            room_words = (
                f"; the memory profile found {int(profiled.value)} blocks ({profiled.cite()})" if profiled else ""
            )
            out.append(
                fix_record(
                    "capacity_num_gpu_blocks_override",
                    "--num-gpu-blocks-override",
                    int(override.value),
                    need,
                    [
                        override.cite(),
                        *((pool or {}).get("inputs") or []),
                        seen,
                        *([profiled.cite()] if profiled else []),
                    ],
                    f"a KV pool of {need} blocks holds the {in_engine} requests in the engine at the peak "
                    f"({ratio:.2f}x the pool){room_words}",
                    f"num_gpu_blocks_override {int(override.value)} -> {need} = {int(override.value)} x {ratio:.2f} "
                    f"({demand})",
                    G1_KEYS,
                    basis=basis,
                    **extra,
                )
            )
    elif (kvbytes := cfg.get("kv_cache_memory_bytes")) is not None:
        dropped.append(_sized_by_bytes(kvbytes))
        need = int(math.ceil(kvbytes.value * ratio))
        out.append(
            fix_record(
                "capacity_kv_cache_memory_bytes",
                "--kv-cache-memory-bytes",
                int(kvbytes.value),
                need,
                [kvbytes.cite(), *((pool or {}).get("inputs") or []), seen],
                f"a KV cache {ratio:.2f}x as large holds the {in_engine} requests in the engine at the peak; the "
                "GPU must have the memory for it",
                f"kv_cache_memory_bytes {int(kvbytes.value)} -> {need} = {int(kvbytes.value)} x {ratio:.2f} ({demand})",
                G1_KEYS,
                basis=basis,
                **extra,
            )
        )
    elif gmu is None:
        dropped.append(
            {"id": "capacity_gpu_memory_utilization", "why": "gpu_memory_utilization is not stated in the bundle"}
        )
    else:
        need = math.ceil(gmu.value * ratio * 100) / 100
        if need > GMU_REACHABLE:
            dropped.append(
                {
                    "id": "capacity_gpu_memory_utilization",
                    "why": f"holding {demand} needs gpu_memory_utilization about {need:g} (> {GMU_REACHABLE:g}): not "
                    "reachable on this GPU; fewer sequences, or more GPUs (tensor_parallel_size)",
                }
            )
        else:
            out.append(
                fix_record(
                    "capacity_gpu_memory_utilization",
                    "--gpu-memory-utilization",
                    gmu.value,
                    need,
                    [gmu.cite(), *((pool or {}).get("inputs") or []), seen],
                    f"a KV pool {ratio:.2f}x as large holds the {in_engine} requests in the engine at the peak (an "
                    "upper bound: only the KV share of the memory must grow)",
                    f"gpu_memory_utilization {gmu.value:g} -> {need:g} = {gmu.value:g} x {ratio:.2f} ({demand})",
                    G1_KEYS,
                    basis=basis,
                    **extra,
                )
            )
    return out, dropped


# ---------------------------------------------------------------- the engine's part of the incident's fixes


def plan_part(a: AnalysisView, findings: Any, verdicts: Any) -> FixPart:
    """vLLM's changes for its events (the engine's ``fixes``; fixes/plan.py replays them): the field
    guide's formula fixes and the levers computed from the KV pool and the peak demand (the capacity
    finding's), one suggestion per option: a computed lever supersedes the formula fix for the same
    option; a pool pinned by ``--num-gpu-blocks-override`` is moved by that option, so no
    ``--gpu-memory-utilization`` fix is offered then. ``verdicts``: vLLM's events' verdicts."""
    formula, dropped = structured(measure(a), engine_family(a))
    cap = (findings.capacity if findings is not None else None) or {}
    computed = [dict(x) for x in cap.get("fixes") or []]
    dropped = [*dropped, *(cap.get("dropped") or [])]
    by_option = {x["option"]: x["id"] for x in computed if x.get("suggested") is not None}
    pinned = any(x["option"] == "--num-gpu-blocks-override" for x in computed) or _pinned(a)
    candidates = list(computed)
    for x in formula:
        if x["option"] in by_option:
            dropped.append(
                {
                    "id": x["id"],
                    "why": f"superseded by {by_option[x['option']]}, computed from the incident's KV pool and "
                    "peak demand",
                }
            )
        elif pinned and x["option"] in ("--gpu-memory-utilization", "--kv-cache-memory-bytes"):
            dropped.append(
                {
                    "id": x["id"],
                    "why": f"the KV pool is pinned by --num-gpu-blocks-override: {x['option'][2:].replace('-', '_')} "
                    "does not change it",
                }
            )
        else:
            candidates.append(x)
    candidates.extend(_policy_fixes(a))
    counts = verdict_key_counts(verdicts)
    addressing = ranked(candidates, counts)  # only fixes that address some of the incident's events
    if not counts:  # no event counted (a stock V1 log): the changes the pressure its stats lines show supports
        addressing = ranked_pressure([x for x in candidates if x.get("pressure")])
    elif any(x.get("pressure") for x in computed):  # an estimate from the incident's own stats lines ...
        gmu_levers = {x["id"] for x in computed if x["option"] == "--gpu-memory-utilization"}
        held_why = next((d["why"] for d in dropped if d["id"] == "capacity_gpu_memory_utilization"), None)
        if not gmu_levers and held_why and "not reachable" in held_why:  # ... says +0.05 cannot hold the demand
            for x in [x for x in addressing if x["id"] == "kv_room"]:
                addressing.remove(x)
                if x.get("basis") == EXTENSIBLE_BASIS:  # back to vLLM's own default (1.0): more room, not enough
                    x["text"] += f"; not enough alone, the stats lines' estimate: {held_why}"
                    x["partial"] = True  # fixes/plan ranks it after the changes sized to hold the demand
                    addressing.append(x)
                    continue
                dropped.append({"id": "kv_room", "why": f"the stats lines' estimate: {held_why}"})
    changes = [x for x in addressing if is_change(x)]
    know = [x for x in addressing if not is_change(x)]
    return FixPart(changes=changes, know=know, dropped=dropped)


def _policy_fixes(a: AnalysisView) -> list[dict[str, Any]]:
    """Under ``--scheduling-policy priority`` seen in the log, the policy itself is a lever for the
    preemptions it makes (V0's _schedule_priority_preemption: G3): ``fcfs`` makes a higher-priority
    request wait instead of preempting running ones."""

    row = _cfg(a).get("scheduling_policy")
    if row is None or row.get("status") == "default" or str(row.get("value")).strip("'\"") != "priority":
        return []
    where = f"{row['source']}:{row['line']}"
    return [
        fix_record(
            "scheduling_policy",
            "--scheduling-policy",
            "priority",
            "fcfs",
            [f"scheduling_policy=priority ({row['status']}, {where})"],
            "a higher-priority request waits for a free slot instead of preempting running requests (it loses its "
            "priority); keeping priority keeps these preemptions: they are the policy at work",
            "--scheduling-policy fcfs: vLLM V0 preempts for priority (_schedule_priority_preemption) only under "
            "--scheduling-policy priority",
            ["G3-queue-overflow"],
            basis="the priority policy preempted (the log names _schedule_priority_preemption)",
        )
    ]


def _pinned(a: AnalysisView) -> bool:
    row = _cfg(a).get("num_gpu_blocks_override")
    return row is not None and row.get("status") == "seen"
