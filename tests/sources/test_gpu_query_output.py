"""``nvidia-smi --query-gpu=... --format=csv`` output beside a log: meant as GPU evidence, in a shape no
source reads; said in one warning that names the capture to make instead (not left to -v's "not
recognised"), the run partial (exit 5), the log's answer unchanged."""

from __future__ import annotations

from pathlib import Path

from preemptlog.errors import ExitCode
from preemptlog.sources.sniffing import gpu_query_output

from ..conftest import run_cli

LOG = (
    "(APIServer pid=1) INFO 05-01 10:00:{s:02d} [loggers.py:118] Engine 000: Avg prompt throughput: 10.0 tokens/s, "
    "Avg generation throughput: 5.0 tokens/s, Running: 30 reqs, Waiting: 12 reqs, Preemptions: {p}, GPU KV cache "
    "usage: 99.5%, Prefix cache hit rate: 0.0%"
)


def test_query_gpu_csv_is_warned_with_the_capture_to_make(tmp_path: Path) -> None:
    (tmp_path / "vllm.log").write_text("\n".join(LOG.format(s=s, p=1 if s == 30 else 0) for s in range(0, 60, 10)))
    (tmp_path / "gpu.csv").write_text(
        "timestamp, index, memory.used [MiB], utilization.gpu [%]\n"
        "2026/05/01 10:00:00.123, 0, 1000 MiB, 50 %\n"
        "2026/05/01 10:00:01.123, 0, 1000 MiB, 50 %\n"
    )
    out = run_cli("analyze", str(tmp_path), "--tz", "UTC", "-q", "-f", "json")
    assert out.returncode == ExitCode.PARTIAL, out.stderr
    warn = [ln for ln in out.stderr.splitlines() if "gpu.csv" in ln]
    assert len(warn) == 1 and "nvidia-smi --query-gpu output is not read" in warn[0]
    assert "nvidia-smi dmon -o DT -s um" in warn[0]


def test_the_header_shapes() -> None:
    assert gpu_query_output("timestamp, index, memory.used [MiB]\n1, 0, 2 MiB\n") == "nvidia-smi --query-gpu"
    assert gpu_query_output("index, name, utilization.gpu [%], memory.total [MiB]\n") == "nvidia-smi --query-gpu"
    assert gpu_query_output("\n\nTimestamp,Power.Draw [W]\n") == "nvidia-smi --query-gpu"
    assert gpu_query_output("# gpu    sm   mem   enc   dec\n# Idx     %     %     %     %\n") is None
    assert gpu_query_output("timestamp,value\n1,2\n") is None
    assert gpu_query_output("") is None
