"""vLLM's max_num_seqs default depends on the GPU from 0.8.0 (vllm/engine/arg_utils.py
get_batch_defaults): 1024 on a GPU of at least 70 GiB other than an A100 (from 160 GiB any), else 256.
The bundle shows which where a stats line of one engine shows more running than 256 (only the large
default allows it) or where the memory profiling line states the GPU's total memory. Before, every
such server was "--max-num-seqs 256 assumed": on an H100 running 400 requests at a full KV cache, the
change sized to the pool (289) was dropped as "would not lower" the assumed 256.
"""

from __future__ import annotations

from pathlib import Path

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
