"""SGLang server logs (0.1 to 0.5.23): the second engine's retractions, stats and configuration.

A source kind (``sglang-log``, sniffed by content) whose lines are read by the same single
log pass as vLLM's (``vllm_log.scan``): the kind tells the file listing and ``--each`` what a
file is, and its *record family* (same name) adds SGLang's literal markers to that pass, so
every wrapping the pass knows (docker / kubectl / compose prefixes, RFC 3339 and ISO prefixes,
JSON lines of a ``SGLANG_LOGGING_CONFIG_PATH`` formatter, ANSI codes, pasted captures,
rotation) is read for SGLang too, and a file holding both engines' lines is read once.

SGLang's own prefix ``[YYYY-MM-DD HH:MM:SS{.ms}{ DPi}{ TPi}{ EPi}{ PPi}] message`` carries a full
date (the pass reads it as a full timestamp in ``--tz``), no level and no ``file:line``.
The line families and what becomes of them: preemptlog/sglang/log.py.

Sniffing: SGLang's own message texts (the retraction and batch lines, the start-up pool line,
``server_args=``) score 60, above vLLM's marker count (20) and its JSON lines (40); the
bracketed full-date prefix with SGLang's rank tokens, or lines naming ``sglang``, score 45.
"""

from __future__ import annotations

import re
from typing import Any

import polars as pl

from ...sources import vllm_log
from ...sources.registry import (
    RecordFamily,
    SourceKind,
    SourceOutput,
    TimeContext,
    register,
    register_family,
    register_samples,
)
from . import log as sgl

KIND = "sglang-log"

# (literal marker, record kind): SGLang's messages, verbatim from its source (sglang/log.py).
MARKERS: list[tuple[str, str]] = [
    ("KV cache pool is full. Retract requests.", sgl.RETRACT),
    ("Testing retraction. #retracted_reqs", sgl.RETRACT),
    ("Decode out of memory happened.", sgl.RETRACT),
    ("decode out of memory happened,", sgl.RETRACT),
    ("Decode out of memory. ", sgl.ALLOC_ERROR),
    ("Decode batch", sgl.DECODE),
    ("Prefill batch", sgl.PREFILL),
    ("max_total_num_tokens=", sgl.STARTUP),
    ("max_total_num_token=", sgl.STARTUP),  # 0.1.x: "Rank 0: max_total_num_token=N, max_prefill_num_token=N, ..."
    ("#running-req: ", sgl.DECODE),  # 0.1.x's stats line has no "Decode batch" before it (tp_rank 0 only)
    ("server_args=", sgl.ARGS),
    ("KV Cache is allocated. #tokens:", sgl.KV_ALLOC),
    ("Load weight begin. avail mem=", sgl.WEIGHTS),
]
VERIFY = {
    sgl.RETRACT: r"#retracted_reqs: \d|" + sgl.CUT_RE,  # or cut before its count (log.retractions notes it)
    # 0.1.x printed "This should nerver happen." [sic] (managers/router/infer_batch.py)
    sgl.ALLOC_ERROR: r"Decode out of memory\. (?:Try to lower your batch size|This should ne?r?ver happen)",
    sgl.DECODE: r"Decode batch[^,.#]*[.,] #running-req: \d|(?:^|\s)#running-req: \d+, #token: \d+, token usage: ",
    sgl.PREFILL: r"Prefill batch[^,.#]*[.,] #new-seq: \d",
    sgl.STARTUP: r"max_total_num_tokens=\d+.*max_running_requests=|max_total_num_token=\d+, max_prefill_num_token=",
    sgl.ARGS: r"server_args=(?:ServerArgs\(|\{)",
    sgl.KV_ALLOC: r"KV Cache is allocated\. #tokens: \d",
}

_OWN = [m for m, _ in MARKERS if m not in ("Decode batch", "Prefill batch", "#running-req: ")] + [
    "Decode batch. #running-req",
    "Decode batch, #running-req",
    "Prefill batch. #new-seq",
    "Prefill batch, #new-seq",
    "new fill batch. #seq: ",  # 0.1.x
    ", token usage: ",
]
_PREFIX = re.compile(r"^(?:\S+\s+)?\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{3})?(?: [A-Z][A-Z_]*\d+)*\] ", re.M)
_RANKED = re.compile(r"^(?:\S+\s+)?\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{3})?(?: (?:DP|TP|EP|PP)\d+)+\] ", re.M)
_VLLM_LINE = re.compile(r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d[^\n]*")
_VLLM_MARKERS = tuple(m for m, _ in vllm_log.MARKERS)


def _sniff(head: str) -> int:
    """SGLang's own messages beat vLLM's header lines unless vLLM's engine lines outnumber them. Only
    header lines that carry one of the vLLM log pass's own markers count for vLLM: SGLang 0.1-0.2
    load models with vLLM's code, whose library lines (``weight_utils.py] Using model weights
    format``, NCCL, custom all-reduce) carry vLLM's header in an SGLang log."""
    own = sum(head.count(m) for m in _OWN)
    vllm = sum(1 for ln in _VLLM_LINE.findall(head) if any(m in ln for m in _VLLM_MARKERS))
    if own and (not vllm or own + len(_PREFIX.findall(head)) > vllm):
        return 60
    if vllm:
        return 0
    if _RANKED.search(head) or (len(_PREFIX.findall(head)) >= 2 and "sglang" in head.lower()):
        return 45
    return 0


def from_records(records: pl.DataFrame, ctx: TimeContext) -> SourceOutput:
    if records.height == 0 or not records.get_column("kind").is_in(list(sgl.KINDS)).any():
        return SourceOutput()
    got: dict[str, Any] = sgl.from_records(records)
    return SourceOutput(
        frames=got["frames"],
        events=[got["events"]] if got["events"].height else [],
        config=got["config"],
        stats=got["stats"],
        notes=got["notes"],
        counters=got["counters"],
        warnings=got["warnings"],
        partial=bool(got["warnings"]),  # counts whose events were capped: implausibly large (exit 5)
        capped=got["capped"],
        order={"sgl_retractions": ("time", "stream", "seq"), "sgl_batches": ("time", "stream", "seq")},
    )


register(
    SourceKind(
        name=KIND,
        description="SGLang server log (0.1-0.5.23, default prefix or a JSON logging config): retractions, "
        "batch stats, start-up pool and server_args",
        sniff=_sniff,
        log_pass=True,
        appends=True,
    )
)
register_family(RecordFamily(name=KIND, markers=MARKERS, from_records=from_records, verify=VERIFY))


# Sample lines (tests/sources/test_samples.py reads each alone; test_sglang.py checks the rest). C: built
# from the format string of the release named; R: quoted from the issue cited.
SAMPLES: list[tuple[str, dict[str, Any]]] = [
    # C 0.2.0 managers/controller/tp_worker.py:543 (format "%(message)s": no time, no rank)
    (
        "decode out of memory happened, #retracted_reqs: 2, #new_token_ratio: 0.2000 -> 0.4150",
        {"frame": "sgl_retractions", "wording": "0.1-0.2", "retracted": 2, "ratio_before": 0.2, "_events": 2},
    ),
    # R sgl-project/sglang#4184 (0.4.x, DeepSeek-R1, TP8-TP15 each print it)
    (
        "[2025-03-07 21:49:45 TP9] Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio: "
        "0.0980 -> 0.1919",
        {"frame": "sgl_retractions", "wording": "0.3.0-0.4.6", "tp": 9, "ratio_after": 0.1919, "_events": 1},
    ),
    # C 0.4.10 scheduler.py:1627 with a DP prefix (the docs' quoted line)
    (
        "[2025-08-01 10:00:00 DP1 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 1, "
        "#new_token_ratio: 0.9998 -> 1.0000",
        {"frame": "sgl_retractions", "wording": "0.4.7-0.5.5", "engine": "1", "kv_full": True, "_events": 1},
    ),
    # C 0.5.23 scheduler.py:4525 (hybrid mamba pool, SGLANG_LOG_MS=1, 0.5.10+ rank order DP PP TP EP)
    (
        "[2026-11-02 08:15:31.204 DP0 TP1 EP1] KV cache pool is full. Retract requests. #retracted_reqs: 3, "
        "#new_tokens_gained: 2048, #mamba_num_gained: 3, #new_token_ratio: 0.0980 -> 0.4210",
        {
            "frame": "sgl_retractions",
            "wording": "0.5.10+",
            "new_tokens_gained": 2048,
            "mamba_num_gained": 3,
            "time_precision": "ms",
            "_events": 3,
        },
    ),
    # C 0.5.10 scheduler.py:2598 (SGLANG_TEST_RETRACT: no ratio part)
    (
        "[2026-11-02 08:15:40] Testing retraction. #retracted_reqs: 1, #new_tokens_gained: 128",
        {"frame": "sgl_retractions", "kv_full": False, "new_tokens_gained": 128, "_events": 1},
    ),
    # C a JSON formatter configured by SGLANG_LOGGING_CONFIG_PATH (python-json-logger field names)
    (
        '{"asctime": "2026-11-02 08:15:31,204", "levelname": "WARNING", "name": "sglang.srt.managers.scheduler", '
        '"process": 4242, "message": "KV cache pool is full. Retract requests. #retracted_reqs: 2, '
        '#new_tokens_gained: 900, #new_token_ratio: 0.0980 -> 0.3000"}',
        {"frame": "sgl_retractions", "retracted": 2, "new_tokens_gained": 900, "_events": 2},
    ),
    # R sgl-project/sglang#6778 shape (0.4.x Decode batch line), C values
    (
        "[2025-05-30 17:15:07 TP0] Decode batch. #running-req: 36, #token: 958017, token usage: 0.96, "
        "gen throughput (token/s): 812.40, #queue-req: 12",
        {"frame": "sgl_batches", "phase": "decode", "running": 36, "queue": 12, "token_usage": 0.96, "_events": 0},
    ),
    # R sgl-project/sglang#14972 (0.5.x: "Decode batch," and a trailing comma)
    (
        "[2025-12-12 08:43:59 TP0] Decode batch, #running-req: 6, #token: 1920, token usage: 0.94, cuda graph: "
        "True, gen throughput (token/s): 446.45, #queue-req: 5,",
        {"frame": "sgl_batches", "running": 6, "tokens": 1920, "gen_tput": 446.45, "_events": 0},
    ),
    # R sgl-project/sglang#26248 (hybrid SWA pool)
    (
        "[2026-05-24 03:51:45 TP0] Decode batch, #running-req: 4, #full token: 2642688, full token usage: 1.00, "
        "#swa token: 14592, swa token usage: 0.06, cuda graph: True, gen throughput (token/s): 429.52, "
        "#queue-req: 3",
        {"frame": "sgl_batches", "token_usage": 1.0, "swa_token_usage": 0.06, "tokens": 2642688, "_events": 0},
    ),
    # C 0.2.0 tp_worker.py:239 (the [gpu_id=N] prefix of the message)
    (
        "[gpu_id=0] Decode batch. #running-req: 12, #token: 3000, token usage: 0.95, gen throughput (token/s): "
        "500.00, #queue-req: 3",
        {"frame": "sgl_batches", "running": 12, "engine": "0", "_events": 0},
    ),
    # C 0.5.23 metrics_reporter.py:754 (prefill line with input throughput)
    (
        "[2026-11-02 08:15:29 TP0] Prefill batch, #new-seq: 2, #new-token: 8192, #cached-token: 0, token usage: "
        "0.91, #running-req: 40, #queue-req: 11, #pending-token: 4096, input throughput (token/s): 15321.30",
        {"frame": "sgl_batches", "phase": "prefill", "new_tokens": 8192, "input_tput": 15321.3, "_events": 0},
    ),
    # C 0.4.10 scheduler.py:383 (the docs' hyperparameter_tuning.md values)
    (
        "[2025-08-01 09:59:00 TP0] max_total_num_tokens=665690, chunked_prefill_size=8192, max_prefill_tokens=16384, "
        "max_running_requests=4096, context_len=65536, available_gpu_mem=13.50 GB",
        {"frame": "sgl_config", "key": "kv_cache_tokens", "value": "665690", "_events": 0},
    ),
    # C 0.4.6 engine.py:116 (server_args repr; retraction_policy='length' is not a retraction)
    (
        "[2025-08-01 09:58:00] server_args=ServerArgs(model_path='meta-llama/Llama-3.1-8B-Instruct', tp_size=2, "
        "mem_fraction_static=0.88, max_running_requests=None, schedule_conservativeness=1.0, "
        "retraction_policy='length', chunked_prefill_size=8192)",
        {"frame": "sgl_config", "key": "schedule_conservativeness", "value": "1.0", "_events": 0},
    ),
    # C 0.5.23 engine.py:311 (server_args as a dict)
    (
        "[2026-11-02 08:00:00] server_args={'model_path': 'Qwen/Qwen3-8B', 'tp_size': 1, 'mem_fraction_static': "
        "0.85, 'schedule_conservativeness': 1.3, 'retraction_policy': 'priority', 'enable_priority_scheduling': True}",
        {"frame": "sgl_config", "key": "retraction_policy", "value": "priority", "_events": 0},
    ),
    # C 0.4.10 memory_pool.py:227
    (
        "[2025-08-01 09:58:40 TP0] KV Cache is allocated. #tokens: 665690, K size: 20.32 GB, V size: 20.32 GB",
        {"frame": "sgl_config", "key": "kv_cache_memory_gib", "value": "40.64", "_events": 0},
    ),
    # R sgl-project/sglang#11970
    (
        "[2025-10-22 20:21:39] Load weight begin. avail mem=94.69 GB",
        {"frame": "sgl_config", "key": "total_gpu_memory_gib", "value": "94.69", "_events": 0},
    ),
    # Not retractions: the allocation error (0.4.6 schedule_batch.py) and a line quoting the wording.
    ("[2025-03-07 21:49:50 TP0] Decode out of memory. Try to lower your batch size.", {"_dropped": True}),
    (
        "[2025-08-01 10:00:00] If you see KV cache pool is full. Retract requests. occasionally, it is okay",
        {"_dropped": True},
    ),
]

register_samples(KIND, SAMPLES)
