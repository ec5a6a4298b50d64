"""nvidia-smi snapshots beside a log (sources/gpuinfo.py): the GPU's name and total memory, in each
shape an engineer saves, and what they settle: vLLM's max_num_seqs default from 0.8 (1024 on a GPU
of >= 70 GiB other than an A100, else 256; engines/vllm/config.py). Before, such a file was "not
recognised" and an H100 server's default was "256 assumed"."""

from __future__ import annotations

import json

import pytest

from preemptlog import sources
from preemptlog.sources import gpuinfo

from ..conftest import run_cli

TABLE = """Mon Dec  1 10:00:30 2026
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |
|-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |
|=========================================+========================+======================|
|   0  {name:<30}On  |   00000000:18:00.0 Off |                    0 |
| N/A   45C    P0            312W /  700W |   76012MiB /  {mib}MiB |     98%      Default |
|                                         |                        |             Disabled |
+-----------------------------------------+------------------------+----------------------+
|   1  {name:<30}On  |   00000000:2A:00.0 Off |                    0 |
| N/A   44C    P0            301W /  700W |   76012MiB /  {mib}MiB |     97%      Default |
+-----------------------------------------+------------------------+----------------------+
"""

QUERY = """
==============NVSMI LOG==============

Timestamp                                 : Mon Dec  1 10:00:30 2026
Driver Version                            : 550.54.15
Attached GPUs                             : 1
GPU 00000000:18:00.0
    Product Name                          : {name}
    Product Brand                         : NVIDIA
    FB Memory Usage
        Total                             : {mib} MiB
        Reserved                          : 559 MiB
        Used                              : 76012 MiB
    BAR1 Memory Usage
        Total                             : 131072 MiB
"""

SHAPES = {
    "table": lambda name, mib: TABLE.format(name=name, mib=mib),
    "query": lambda name, mib: QUERY.format(name=name, mib=mib),
    "list": lambda name, mib: (
        f"GPU 0: {name} (UUID: GPU-5a1f0e2c-7d3b-4c1e-9f0a-1b2c3d4e5f60)\n"
        f"GPU 1: {name} (UUID: GPU-6b2f0e2c-7d3b-4c1e-9f0a-1b2c3d4e5f61)\n"
    ),
    "csv": lambda name, mib: f"index, name, memory.total [MiB]\n0, {name}, {mib} MiB\n1, {name}, {mib} MiB\n",
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_each_shape_is_recognised_and_read(shape):
    text = SHAPES[shape]("NVIDIA H100 80GB HBM3", 81559)
    assert sources.sniff(text)[0] == gpuinfo.KIND
    gpus = gpuinfo.read(text)
    assert gpus[0]["name"] == "NVIDIA H100 80GB HBM3"
    assert gpus[0]["mib"] == (None if shape == "list" else 81559)


@pytest.mark.parametrize("i", range(len(gpuinfo.SAMPLES)))
def test_the_samples(i):
    text, expect = gpuinfo.SAMPLES[i]
    [first, *_] = gpuinfo.read(text)
    assert {k: first[k] for k in expect} == expect


def _bundle(tmp_path, smi: str, running: int = 30):
    d = tmp_path / "b"
    d.mkdir()
    stats = (
        "INFO 12-01 10:00:{ss} [loggers.py:123] Engine 000: Avg prompt throughput: 100.0 tokens/s, Avg generation "
        "throughput: 200.0 tokens/s, Running: {r} reqs, Waiting: 12 reqs, GPU KV cache usage: 99.8%, Prefix cache "
        "hit rate: 10.0%"
    )
    (d / "vllm.log").write_text(
        "INFO 12-01 10:00:00 [api_server.py:1000] vLLM API server version 0.10.1\n"
        + "\n".join(stats.format(ss=ss, r=running) for ss in (10, 20))
        + "\n"
    )
    (d / "gpu.txt").write_text(smi)
    r = run_cli("analyze", str(d), "--tz", "UTC", "--year", "2026", "-f", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    return doc["summary"]["config"]["max_num_seqs"], doc


@pytest.mark.parametrize("shape", list(SHAPES))
def test_an_h100_snapshot_makes_the_default_1024(tmp_path, shape):
    seqs, doc = _bundle(tmp_path, SHAPES[shape]("NVIDIA H100 80GB HBM3", 81559))
    assert seqs["value"] == "1024" and "NVIDIA H100 80GB HBM3" in seqs["note"], seqs
    [gpu] = [f for f in doc["summary"]["inputs"] if f["file"].endswith("gpu.txt")]
    assert gpu["kind"] == "nvidia-smi", gpu


def test_an_a100_80gb_keeps_256_and_says_why(tmp_path):
    seqs, _ = _bundle(tmp_path, SHAPES["table"]("NVIDIA A100-SXM4-80GB", 81920))
    assert seqs["value"] == "256" and "NVIDIA A100-SXM4-80GB" in seqs["note"] and "keeps it" in seqs["note"], seqs


def test_a_small_gpu_keeps_256_with_its_memory(tmp_path):
    seqs, _ = _bundle(tmp_path, SHAPES["csv"]("NVIDIA L40S", 46068))
    assert seqs["value"] == "256" and "below 70 GiB" in seqs["note"], seqs


def test_gpus_of_two_kinds_settle_nothing(tmp_path):
    text = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\nGPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-2)\n"
    seqs, doc = _bundle(tmp_path, text)
    assert seqs["value"] == "256" and "this GPU" not in seqs["note"], seqs
    assert any("GPUs of 2 kinds" in n for n in doc["summary"]["notes"]), doc["summary"]["notes"]
