"""Hand-written logs of servers that run at the same time, for bundles of more than one server.

Each log is a list of lines in the format strings of the facts pages (vllm-facts.md, sglang-facts.md):
a vLLM V1 0.14 API server with its request lines and ``Preemptions: N`` stats lines, a vLLM V0 0.8.5
server with its preemption warnings, an SGLang 0.4 server with its start-up, batch and retraction
lines. They share one morning (2026-11-20, 09:13-09:15 UTC; give ``year=2026`` for the vLLM lines),
so their lines interleave when they are written into one file behind their container prefixes
(:func:`interleaved`: docker compose's ``svc  | ``, kubectl logs --prefix's ``[pod/NAME/CONTAINER] ``).
"""

from __future__ import annotations

import re
from pathlib import Path

# vLLM V1 0.14: non-default args, the engine line, the KV pool, request lines, stats lines with Preemptions
VLLM_V1 = [
    "(APIServer pid=4121) INFO 11-20 09:13:50 [api_server.py:1800] vLLM API server version 0.14.0",
    "(APIServer pid=4121) INFO 11-20 09:13:50 [utils.py:233] non-default args: {'model_tag': "
    "'Qwen/Qwen2.5-7B-Instruct', 'max_num_seqs': 64, 'block_size': 32, 'gpu_memory_utilization': 0.85, "
    "'max_model_len': 8192}",
    "(EngineCore_DP0 pid=4200) INFO 11-20 09:13:55 [core.py:77] Initializing a V1 LLM engine (v0.14.0) with "
    "config: model='Qwen/Qwen2.5-7B-Instruct', speculative_config=None, max_seq_len=8192, tensor_parallel_size=1, "
    "enable_prefix_caching=True, enable_chunked_prefill=True",
    "(EngineCore_DP0 pid=4200) INFO 11-20 09:14:00 [kv_cache_utils.py:1087] GPU KV cache size: 131,072 tokens",
    "(EngineCore_DP0 pid=4200) INFO 11-20 09:14:00 [kv_cache_utils.py:1091] Maximum concurrency for 8,192 tokens "
    "per request: 16.00x",
    "(APIServer pid=4121) INFO 11-20 09:14:01 [logger.py:39] Received request chatcmpl-aaa111: params: "
    "SamplingParams(n=1, temperature=0.7, max_tokens=1024, min_tokens=0), lora_request: None.",
    "(APIServer pid=4121) INFO 11-20 09:14:01 [async_llm.py:320] Added request chatcmpl-aaa111-0f1e2d3c.",
    "(APIServer pid=4121) INFO 11-20 09:14:02 [logger.py:39] Received request chatcmpl-bbb222: params: "
    "SamplingParams(n=1, max_tokens=16, min_tokens=0), lora_request: None.",
    "(APIServer pid=4121) INFO 11-20 09:14:02 [async_llm.py:320] Added request chatcmpl-bbb222-9a8b7c6d.",
    "(APIServer pid=4121) INFO 11-20 09:14:10 [loggers.py:208] Engine 000: Avg prompt throughput: 812.4 tokens/s, "
    "Avg generation throughput: 2310.9 tokens/s, Running: 58 reqs, Waiting: 17 reqs, GPU KV cache usage: 88.7%, "
    "Prefix cache hit rate: 35.2%",
    "(APIServer pid=4121) INFO 11-20 09:14:20 [loggers.py:208] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
    "Avg generation throughput: 2100.1 tokens/s, Running: 55 reqs, Waiting: 20 reqs, Preemptions: 6, "
    "GPU KV cache usage: 98.7%, Prefix cache hit rate: 35.2%",
    "(APIServer pid=4121) INFO 11-20 09:14:30 [loggers.py:208] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
    "Avg generation throughput: 1890.2 tokens/s, Running: 41 reqs, Waiting: 23 reqs, Preemptions: 3, "
    "GPU KV cache usage: 99.2%, Prefix cache hit rate: 12.5%",
    "(APIServer pid=4121) INFO 11-20 09:14:30 [async_llm.py:499] Aborted request(s) "
    "chatcmpl-aaa111-0f1e2d3c,chatcmpl-bbb222-9a8b7c6d.",
]

_V0_WARNING = (
    "WARNING 11-20 {t} [scheduler.py:1775] Sequence group {g} is preempted by PreemptionMode.RECOMPUTE mode because "
    "there is not enough KV cache space. This can affect the end-to-end performance. Increase "
    "gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
    "total_num_cumulative_preemption={n}"
)
_V0_STATS = (
    "INFO 11-20 {t} [metrics.py:486] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 450.0 tokens/s, "
    "Running: {r} reqs, Swapped: 0 reqs, Pending: {p} reqs, GPU KV cache usage: {kv}%, CPU KV cache usage: 0.0%."
)

# vLLM V0 0.8.5: the engine line, chunked prefill, '# cuda blocks', warnings with the cumulative counter
VLLM_V0 = [
    "INFO 11-20 09:13:40 [api_server.py:1043] vLLM API server version 0.8.5",
    "INFO 11-20 09:13:41 [llm_engine.py:240] Initializing a V0 LLM engine (v0.8.5) with config: model='m', "
    "speculative_config=None, max_seq_len=4096, enable_prefix_caching=True, chunked_prefill_enabled=True, "
    "use_async_output_proc=True,",
    "INFO 11-20 09:13:41 [config.py:1970] Chunked prefill is enabled with max_num_batched_tokens=2048.",
    "INFO 11-20 09:13:59 [executor_base.py:111] # cuda blocks: 4739, # CPU blocks: 859",
    "INFO 11-20 09:13:59 [executor_base.py:116] Maximum concurrency for 4096 tokens per request: 18.51x",
    _V0_STATS.format(t="09:14:05", r=40, p=9, kv=99.1),
    _V0_WARNING.format(t="09:14:11", g=7, n=1),
    _V0_WARNING.format(t="09:14:15", g=93, n=2),
    _V0_STATS.format(t="09:14:25", r=38, p=12, kv=98.0),
    _V0_WARNING.format(t="09:14:31", g=120, n=5),
    _V0_STATS.format(t="09:14:45", r=30, p=15, kv=97.0),
]

# SGLang 0.4: server_args, the weights, the KV pool, the start-up line (its pool and context length come after
# vLLM's start-up lines), batch lines and 'Decode out of memory happened' retractions
SGLANG = [
    "[2026-11-20 09:14:01] server_args=ServerArgs(model_path='deepseek-ai/DeepSeek-R1', tp_size=4, dp_size=1, "
    "mem_fraction_static=0.80, max_running_requests=None, max_total_tokens=None, chunked_prefill_size=8192, "
    "max_prefill_tokens=16384, schedule_policy='fcfs', schedule_conservativeness=1.0, disable_radix_cache=False)",
    "[2026-11-20 09:14:02 TP0] Load weight begin. avail mem=78.50 GB",
    "[2026-11-20 09:14:05 TP0] KV Cache is allocated. #tokens: 200000, K size: 6.10 GB, V size: 6.10 GB",
    "[2026-11-20 09:14:06 TP0] max_total_num_tokens=200000, chunked_prefill_size=8192, max_prefill_tokens=16384, "
    "max_running_requests=1024, context_len=163840, available_gpu_mem=14.20 GB",
    "[2026-11-20 09:14:20 TP0] Prefill batch. #new-seq: 3, #new-token: 7800, #cached-token: 0, token usage: 0.95, "
    "#running-req: 60, #queue-req: 14",
    "[2026-11-20 09:14:21 TP0] Decode batch. #running-req: 63, #token: 198800, token usage: 0.99, "
    "gen throughput (token/s): 1010.32, #queue-req: 14",
    "[2026-11-20 09:14:22 TP0] Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio: 0.0980 -> 0.1845",
    "[2026-11-20 09:14:24 TP0] Decode batch. #running-req: 61, #token: 197900, token usage: 0.99, "
    "gen throughput (token/s): 980.10, #queue-req: 16",
    "[2026-11-20 09:14:25 TP0] Decode out of memory happened. #retracted_reqs: 2, #new_token_ratio: 0.1520 -> 0.2210",
    "[2026-11-20 09:14:30 TP0] Decode batch. #running-req: 58, #token: 190400, token usage: 0.95, "
    "gen throughput (token/s): 1120.55, #queue-req: 19",
]

# SGLang 0.4 without its 'Load weight begin' line (the memory --mem-fraction-static is a fraction of is not in
# its log), started before a vLLM server whose memory-profiling line says the GPU's total memory and KV memory
SGLANG_NO_WEIGHTS = [SGLANG[0].replace("09:14:01", "09:13:30"), SGLANG[3].replace("09:14:06", "09:13:35")] + SGLANG[4:]
VLLM_V0_MEMORY = [
    "INFO 11-20 09:13:50 [api_server.py:1043] vLLM API server version 0.8.5",
    "INFO 11-20 09:13:50 [utils.py:233] non-default args: {'model': 'm', 'max_num_seqs': 64, "
    "'gpu_memory_utilization': 0.9, 'max_model_len': 4096}",
    "INFO 11-20 09:13:55 [worker.py:267] Memory profiling takes 5 seconds; total_gpu_memory (79.3GiB) x "
    "gpu_memory_utilization (0.90) = 71.4GiB; model weights take 14.2GiB; the rest of the memory reserved for KV "
    "Cache is 50.1GiB.",
    "INFO 11-20 09:13:56 [executor_base.py:111] # cuda blocks: 4096, # CPU blocks: 2048",
    _V0_WARNING.format(t="09:14:21", g=1, n=1),
    _V0_STATS.format(t="09:14:25", r=40, p=12, kv=99.0),
]
# vLLM V0 0.8.5 with its pool in blocks only (no 'KV cache size' line, no block size): the tokens an SGLang log
# states later (max_total_num_tokens=131072 = 4096 x 32) must not make its block size
VLLM_V0_BLOCKS = [line for line in VLLM_V0_MEMORY if "Memory profiling" not in line]
SGLANG_TOKENS_LATER = [
    SGLANG[0].replace("09:14:01", "09:14:03"),
    SGLANG[3].replace("200000", "131072").replace("09:14:06", "09:14:04"),
] + SGLANG[4:]


def write_lines(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


_TIME = re.compile(r"(?:\d{4}-)?(\d\d)-(\d\d) (\d\d:\d\d:\d\d)")


def _when(line: str) -> str:
    m = _TIME.search(line)
    assert m, line
    return f"{m.group(1)}-{m.group(2)} {m.group(3)}"


def interleaved(parts: dict[str, list[str]]) -> list[str]:
    """The lines of every ``prefix: lines`` pair behind their prefix, in time order (each server's own order
    kept), as one file of their containers holds them."""
    rows = [
        (_when(line), k, i, prefix + line)
        for k, (prefix, lines) in enumerate(parts.items())
        for i, line in enumerate(lines)
    ]
    return [r[3] for r in sorted(rows)]
