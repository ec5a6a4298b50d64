"""A bundle of two servers side by side (``a/`` and ``b/``, each a log and its /metrics scrapes, both
started at the same time): each server's scrapes go with its own log's incident (render/each.py
split_by_incident, the nearest folder among the incidents a file meets in time), so the one-line
answers are each server's own count, as ``--each`` gives them; the headline does not say the logs do
not meet in time when they are two servers."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from ..conftest import ROOT

CREATED = datetime(2026, 12, 1, 10, 0, 3, tzinfo=UTC).timestamp()


def _stats(t: str, waiting: int, kv: float) -> str:
    return (
        f"INFO 12-01 {t} [loggers.py:208] Engine 000: Avg prompt throughput: 10.0 tokens/s, Avg generation "
        f"throughput: 200.0 tokens/s, Running: 4 reqs, Waiting: {waiting} reqs, GPU KV cache usage: {kv}%, "
        "Prefix cache hit rate: 0.0%"
    )


def _scrape(t: str, n: int, waiting: int, kv: float) -> str:
    return (
        f"# scrape 2026-12-01T10:00:{t}+00:00\n# TYPE vllm:num_preemptions_total counter\n"
        f'vllm:num_preemptions_total{{engine="0",model_name="m"}} {n}\n'
        f'vllm:num_preemptions_created{{engine="0",model_name="m"}} {CREATED}\n'
        f'vllm:num_requests_running{{engine="0",model_name="m"}} 4\n'
        f'vllm:num_requests_waiting{{engine="0",model_name="m"}} {waiting}\n'
        f'vllm:kv_cache_usage_perc{{engine="0",model_name="m"}} {kv}\n'
    )


def _server(folder: Path, kv: float, waiting: int, counts: tuple[int, int, int]) -> None:
    folder.mkdir(parents=True)
    lines = [
        "INFO 12-01 10:00:00 [api_server.py:1043] vLLM API server version 0.26.0",
        "INFO 12-01 10:00:02 [kv_cache_utils.py:864] GPU KV cache size: 1,024 tokens",
        *(_stats(t, waiting, kv * 100) for t in ("10:00:10", "10:00:20", "10:00:30")),
    ]
    (folder / "vllm.log").write_text("\n".join(lines) + "\n")
    (folder / "metrics.prom").write_text(
        "".join(_scrape(t, n, waiting, kv) for t, n in zip(("15", "25", "35"), counts))
    )


def test_each_server_s_scrapes_go_with_its_own_log(tmp_path):
    b = tmp_path / "two"
    _server(b / "a", 0.99, 5, (0, 3, 6))
    _server(b / "b", 0.40, 0, (0, 0, 1))
    p = subprocess.run(
        [sys.executable, "-m", "preemptlog", "analyze", str(b), "--tz", "UTC", "-f", "json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    s = json.loads(p.stdout)["summary"]
    assert s["incidents"] and len(s["incidents"]) == 2
    assert "of different servers" in s["headline"]
    said = " ".join(p.stderr.split())
    assert "a/vllm.log: 6 preemptions" in said  # before: 7, b's scrape counted with a's
    assert "b/vllm.log: 1 preemption" in said  # before: count not visible
