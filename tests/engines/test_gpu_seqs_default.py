"""vLLM's max_num_seqs default depends on the GPU from 0.8.0 (vllm/engine/arg_utils.py
get_batch_defaults): 1024 on a GPU of at least 70 GiB other than an A100 (from 160 GiB any), else 256.
The bundle shows which where a stats line of one engine shows more running than 256 (only the large
default allows it) or where the memory profiling line states the GPU's total memory. Before, every
such server was "--max-num-seqs 256 assumed": on an H100 running 400 requests at a full KV cache, the
change sized to the pool (289) was dropped as "would not lower" the assumed 256.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from preemptlog import AnalyzeOptions, analyze

OPTS = AnalyzeOptions(tz="UTC", year=2026)


def stats(ss: int, running: int, agg: int | None = None) -> str:
    who = f"{agg} Engines Aggregated" if agg else "Engine 000"
    return (
        f"INFO 12-01 10:00:{ss:02d} [loggers.py:123] {who}: Avg prompt throughput: 100.0 tokens/s, Avg generation "
        f"throughput: 200.0 tokens/s, Running: {running} reqs, Waiting: 120 reqs, GPU KV cache usage: 99.8%, "
        "Prefix cache hit rate: 10.0%"
    )


def memory(gib: float) -> list[str]:
    return [
        "INFO 12-01 10:00:01 [gpu_worker.py:227] Memory profiling takes 4.12 seconds",
        f"the current vLLM instance can use total_gpu_memory ({gib:.2f}GiB) x gpu_memory_utilization (0.90) = "
        f"{gib * 0.9:.2f}GiB",
    ]


def seqs(tmp_path: Path, version: str, lines: list[str]) -> dict:
    p = tmp_path / "vllm.log"
    head = f"INFO 12-01 10:00:00 [api_server.py:1000] vLLM API server version {version}"
    p.write_text("\n".join([head, *lines]) + "\n", encoding="utf-8")
    a = analyze([str(p)], OPTS)
    [row] = a.config.filter(a.config["key"] == "max_num_seqs").to_dicts()
    return row


def test_more_running_on_one_engine_than_256_is_the_large_gpu_default(tmp_path):
    row = seqs(tmp_path, "0.10.1", [stats(10, 400), stats(20, 380)])
    assert row["status"] == "default" and row["value"] == "1024", row
    assert "400 running on one engine at" in row["note"] and "vllm.log:2" in row["note"], row


def test_the_top_fix_is_sized_from_1024_not_dropped_against_256(tmp_path):
    p = tmp_path / "vllm.log"
    head = "INFO 12-01 10:00:00 [api_server.py:1000] vLLM API server version 0.10.1"
    p.write_text("\n".join([head, stats(10, 400), stats(20, 380).replace("99.8%", "99.9%")]) + "\n")
    a = analyze([str(p)], OPTS)
    [top, *_] = a.summary()["fixes"]
    assert (top["option"], top["current"], top["suggested"]) == ("--max-num-seqs", 1024, 289), top
    assert top["current_from"] == "assumed (vLLM 0.10.1's default on a large GPU)", top


def test_a_sum_over_engines_says_nothing_of_one_engines_default(tmp_path):
    row = seqs(tmp_path, "0.10.1", [stats(10, 400, agg=2)])
    assert row["value"] == "256", row


@pytest.mark.parametrize(
    ("gib", "value", "said"),
    [
        (44.42, "256", "below 70 GiB"),  # L40S-class: the small default, now with its evidence
        (79.19, "256", "1024 if this GPU is not an A100"),  # H100 or A100 80GB: said, not chosen
        (178.35, "1024", "at least 160 GiB"),  # B200-class
    ],
)
def test_the_gpus_total_memory_decides_where_it_can(tmp_path, gib, value, said):
    row = seqs(tmp_path, "0.9.2", [*memory(gib), stats(10, 30)])
    assert row["value"] == value and said in row["note"] and f"total_gpu_memory {gib:g} GiB" in row["note"], row


def test_before_0_8_the_default_is_256_on_every_gpu(tmp_path):
    row = seqs(tmp_path, "0.7.3", [*memory(178.35), stats(10, 30)])
    assert row["value"] == "256" and "GiB" not in row["note"], row


def test_a_stated_max_num_seqs_is_never_touched(tmp_path):
    args = "INFO 12-01 10:00:00 [utils.py:253] non-default args: {'model': 'm', 'max_num_seqs': 64}"
    row = seqs(tmp_path, "0.10.1", [args, stats(10, 400)])
    assert row["status"] == "seen" and row["value"] == "64", row


def chunked(tokens: int) -> str:
    return f"INFO 12-01 10:00:00 [scheduler.py:228] Chunked prefill is enabled with max_num_batched_tokens={tokens}."


def moe(device: str) -> str:
    return (
        "WARNING 12-01 10:00:05 [fused_moe.py:888] Using default MoE config. Performance might be sub-optimal! "
        f"Config file not found at ['/v/fused_moe/configs/E=128,N=384,device_name={device}.json']"
    )


@pytest.mark.parametrize(
    ("tokens", "value"),
    [(8192, "1024"), (16384, "1024"), (2048, "256"), (4096, "256")],  # 4096: no tier's value, nothing said
)
def test_the_batch_size_vllm_chose_for_its_api_server_names_the_tier(tmp_path, tokens, value):
    """get_batch_defaults sets max_num_batched_tokens and max_num_seqs in one branch: the API server's
    2048 goes with 256, 8192 (>= 70 GiB, not an A100) and 16384 (>= 160 GiB) with 1024. vLLM logs the
    first ("Chunked prefill is enabled with max_num_batched_tokens=N.") on every V1 server; before, an
    H100 server whose log holds no GPU line was "256 assumed"."""
    row = seqs(tmp_path, "0.12.0", [chunked(tokens), stats(10, 30)])
    assert row["value"] == value, row
    said = f"vLLM chose max_num_batched_tokens {tokens} for its API server (" in row["note"]
    assert said == (tokens != 4096) and ("vllm.log:2" in row["note"]) == said, row


def test_a_batch_size_the_user_set_says_nothing_of_the_gpu(tmp_path):
    args = "INFO 12-01 10:00:00 [utils.py:253] non-default args: {'model': 'm', 'max_num_batched_tokens': 8192}"
    row = seqs(tmp_path, "0.12.0", [args, chunked(8192), stats(10, 30)])
    assert row["value"] == "256" and "max_num_batched_tokens" not in row["note"], row


def test_an_offline_llm_log_has_no_api_server_batch_size(tmp_path):
    """The LLM class's defaults are 8192 on small GPUs and 16384 on large ones: without vLLM's server line
    (or its usage context) the batch size names no tier."""
    p = tmp_path / "vllm.log"
    engine = "INFO 12-01 10:00:00 [core.py:93] Initializing a V1 LLM engine (v0.12.0) with config: model='m'"
    p.write_text("\n".join([engine, chunked(8192), stats(10, 30)]) + "\n", encoding="utf-8")
    [row] = analyze([str(p)], OPTS).config.filter(pl.col("key") == "max_num_seqs").to_dicts()
    assert row["value"] == "256" and "max_num_batched_tokens" not in row["note"], row


def test_a_v0_engine_keeps_256_whatever_the_batch_size(tmp_path):
    engine = "INFO 12-01 10:00:00 [llm_engine.py:232] Initializing a V0 LLM engine (v0.9.2) with config: model='m'"
    row = seqs(tmp_path, "0.9.2", [engine, chunked(8192), stats(10, 30)])
    assert row["value"] == "256" and "max_num_batched_tokens" not in row["note"], row


@pytest.mark.parametrize(
    ("device", "value", "said"),
    [
        ("NVIDIA_H100_80GB_HBM3", "1024", "vllm.log:2), 80 GB in its name, at least 70 GiB"),
        ("NVIDIA_H200", "1024", "141 GB: every H200 has it"),  # vLLM names the whole H200 family so
        ("NVIDIA_A100-SXM4-80GB", "256", "NVIDIA A100-SXM4-80GB ("),
        ("NVIDIA_L40S", "256", None),  # no memory in the name, no family known: nothing said
    ],
)
def test_the_gpu_named_in_a_moe_config_file_name(tmp_path, device, value, said):
    """vLLM's fused-MoE config file name holds the GPU's name ("device_name=NVIDIA_H100_80GB_HBM3", spaces
    made "_"): a MoE server's log names its GPU even where nvidia-smi was not captured."""
    args = "INFO 12-01 10:00:00 [utils.py:253] non-default args: {'model': 'm', 'max_num_batched_tokens': 4096}"
    row = seqs(tmp_path, "0.12.0", [moe(device), args, stats(10, 30)])
    assert row["value"] == value, row
    assert (said in row["note"]) if said else ("GB" not in row["note"]), row


def kv_size(device: str) -> str:
    return (
        f"INFO 12-01 10:00:06 [kv_cache_utils.py:2327] {device} KV cache size: 2,048 tokens, Maximum concurrency "
        "for 1,024 tokens per request: 2.00x"
    )


@pytest.mark.parametrize(
    ("server", "tp", "value", "said"),
    [
        (True, None, "128", "default on CPU for the API server (CPU ("),
        (True, 2, "256", "world size 2: tensor_parallel_size 2 ("),
        (False, None, "256", "for the LLM class, no API server line seen (CPU ("),
    ],
)
def test_on_cpu_the_default_is_128_per_worker_for_the_api_server(tmp_path, server, tp, value, said):
    """vLLM's CPU backend (its "CPU KV cache size" line, 0.30+) defaults max_num_seqs to 128 x world size
    for the API server, 256 x for the LLM class (get_batch_defaults); before, a stock CPU server was
    "256 assumed", and its 2048 batch size would have read as the small GPUs' branch."""
    engine = (
        "INFO 12-01 10:00:00 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: model='m', "
        f"speculative_config=None, tensor_parallel_size={tp or 1}, pipeline_parallel_size=1, data_parallel_size=1"
    )
    lines = [engine, chunked(2048), kv_size("CPU"), stats(10, 3)]
    p = tmp_path / "vllm.log"
    head = ["INFO 12-01 10:00:00 [api_server.py:1000] vLLM API server version 0.32.0"] if server else []
    p.write_text("\n".join([*head, *lines]) + "\n", encoding="utf-8")
    [row] = analyze([str(p)], OPTS).config.filter(pl.col("key") == "max_num_seqs").to_dicts()
    assert row["value"] == value and said in row["note"] and "vllm.log:" in row["note"], row


def test_a_gpu_kv_cache_line_says_nothing_of_the_device(tmp_path):
    row = seqs(tmp_path, "0.32.0", [kv_size("GPU"), stats(10, 3)])
    assert row["value"] == "256" and "CPU" not in row["note"].replace("on CPU", ""), row
