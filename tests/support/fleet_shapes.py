"""Hand-made bundles of several shapes for the fleet and export tests (small: seconds to analyse).

Each shape is a bundle as an operator collects one, named after its server: a V0 log
(``INFO 12-31 ... file.py:N]``), a V1 JSON/ANSI log as a single file, a kubectl/syslog log under a
generic file name (the folder names the server), a stock V1 log with /metrics scrapes, a stock V1
log alone (count not visible), a data-parallel V1 log (two engines), a .tar.gz archive, a folder of
two servers, a truncated .gz (damaged) and a folder of nothing recognisable (fails).
"""

from __future__ import annotations

import gzip
import shutil
import tarfile
from pathlib import Path

from ..conftest import FIXTURES

GOLDEN = FIXTURES / "golden"

V1_STOCK = """\
(APIServer pid=11) INFO 11-27 08:00:00 [api_server.py:1900] vLLM API server version 0.11.1
(APIServer pid=11) INFO 11-27 08:00:00 [utils.py:233] non-default args: {{'model': '{model}', 'max_num_seqs': 64}}
(EngineCore_DP0 pid=40) INFO 11-27 08:00:05 [core.py:77] Initializing a V1 LLM engine (v0.11.1) with config: model='{model}', max_seq_len=8192
(APIServer pid=11) INFO 11-27 08:00:20 [loggers.py:208] Engine 000: Avg prompt throughput: 900.0 tokens/s, Avg generation throughput: 80.0 tokens/s, Running: 64 reqs, Waiting: 30 reqs, GPU KV cache usage: 99.5%, Prefix cache hit rate: 0.0%
(APIServer pid=11) INFO 11-27 08:00:30 [loggers.py:208] Engine 000: Avg prompt throughput: 850.0 tokens/s, Avg generation throughput: 70.0 tokens/s, Running: 60 reqs, Waiting: 41 reqs, GPU KV cache usage: 99.9%, Prefix cache hit rate: 0.0%
"""

V0_DOCKER = """\
vllm-a-1  | INFO 11-26 14:00:00 api_server.py:212] vLLM API server version 0.6.3
vllm-a-1  | INFO 11-26 14:00:01 llm_engine.py:237] Initializing an LLM engine (v0.6.3) with config: model='meta-llama/Llama-3.1-8B-Instruct', max_seq_len=8192, block_size=16
vllm-a-1  | WARNING 11-26 14:00:07 scheduler.py:1481] Sequence group cmpl-aa1 is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect the end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. total_num_cumulative_preemption=1
vllm-a-1  | INFO 11-26 14:00:10 metrics.py:351] Avg prompt throughput: 200.0 tokens/s, Avg generation throughput: 50.0 tokens/s, Running: 30 reqs, Swapped: 0 reqs, Pending: 12 reqs, GPU KV cache usage: 99.0%, CPU KV cache usage: 0.0%.
vllm-a-1  | WARNING 11-26 14:00:18 scheduler.py:1481] Sequence group cmpl-aa9 is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect the end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. total_num_cumulative_preemption=51
vllm-a-1  | INFO 11-26 14:00:20 metrics.py:351] Avg prompt throughput: 180.0 tokens/s, Avg generation throughput: 45.0 tokens/s, Running: 28 reqs, Swapped: 0 reqs, Pending: 15 reqs, GPU KV cache usage: 99.5%, CPU KV cache usage: 0.0%.
"""


def make_fleet(root: Path, *, damaged: bool = True) -> dict[str, Path]:
    """Write the shapes under ``root``; {shape: bundle path}."""
    root.mkdir(parents=True, exist_ok=True)
    out: dict[str, Path] = {}

    d = root / "srv-v0"  # V0 log, folder bundle
    d.mkdir()
    shutil.copy(GOLDEN / "v0-unbracketed-0.6.log", d / "vllm.log")
    out["v0"] = d

    f = root / "srv-json.log"  # V1 JSON + ANSI lines, a single file
    shutil.copy(GOLDEN / "v1-0.32-json.log", f)
    out["v1-json"] = f

    d = root / "gpu-node-7"  # kubectl/syslog lines under a generic file name
    d.mkdir()
    shutil.copy(GOLDEN / "kubectl-syslog.log", d / "vllm.log")
    out["kubectl"] = d / "vllm.log"

    d = root / "srv-scrapes"  # stock V1 with /metrics scrapes: the counter is the count
    shutil.copytree(FIXTURES / "prometheus" / "stock-v1", d)
    out["scrapes"] = d

    d = root / "srv-stock"  # stock V1 alone: the count is not visible
    d.mkdir()
    (d / "vllm.log").write_text(V1_STOCK.format(model="mistralai/Mistral-7B-Instruct-v0.3"))
    out["stock"] = d

    d = root / "srv-dp"  # data parallel: two engines
    shutil.copytree(FIXTURES / "handwritten" / "r4-per-engine-stats" / "apiserver", d)
    out["dp"] = d

    src = root / "_v0docker"  # a docker compose V0 log, as a .tar.gz archive
    src.mkdir()
    (src / "vllm.log").write_text(V0_DOCKER)
    arc = root / "srv-archive.tar.gz"
    with tarfile.open(arc, "w:gz") as tf:
        tf.add(src / "vllm.log", arcname="srv-archive/vllm.log")
    shutil.rmtree(src)
    out["archive"] = arc

    d = root / "rack-3"  # one bundle, two servers (subfolders)
    (d / "node1").mkdir(parents=True)
    (d / "node2").mkdir()
    shutil.copy(GOLDEN / "v0-bracketed-0.8.log", d / "node1" / "vllm.log")
    shutil.copy(GOLDEN / "guide-iso-markers.log", d / "node2" / "vllm.log")
    out["two-servers"] = d

    d = root / "srv-layout"  # one server, its log and its scrapes in subfolders of their own
    (d / "logs").mkdir(parents=True)
    shutil.copy(FIXTURES / "prometheus" / "stock-v1" / "vllm.log", d / "logs" / "vllm.log")
    shutil.copytree(FIXTURES / "prometheus" / "stock-v1", d / "metrics", ignore=shutil.ignore_patterns("vllm.log"))
    out["subfolders"] = d

    if damaged:
        d = root / "srv-damaged"  # a truncated .gz: the analysis runs on what decompresses (exit 5)
        d.mkdir()
        data = gzip.compress((GOLDEN / "v0-bracketed-0.8.log").read_bytes() * 40)
        (d / "vllm.log.gz").write_bytes(data[: len(data) // 2])
        out["damaged"] = d

        d = root / "srv-junk"  # nothing recognisable (exit 3)
        d.mkdir()
        (d / "notes.txt").write_text("the on-call notes, no log here\n")
        out["junk"] = d
    return out
