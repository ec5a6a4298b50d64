"""The window's largest KV cache usage is the logged value itself: the x1000 fixed point it is found
by (joiner/stats.py) comes back as 99.1, not 99.10000000000001 (a float artefact in the JSON and in
``explain``'s evidence)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ..conftest import run_cli

STATS = (
    "INFO 05-02 14:03:05 [metrics.py:486] Avg prompt throughput: 10.0 tokens/s, Avg generation throughput: 500.0 "
    "tokens/s, Running: 40 reqs, Swapped: 0 reqs, Pending: 9 reqs, GPU KV cache usage: {u}%, CPU KV cache usage: 0.0%."
)
PREEMPT = (
    "WARNING 05-02 14:03:{s:02d} [scheduler.py:1775] Sequence group {g} is preempted by PreemptionMode.RECOMPUTE mode because "
    "there is not enough KV cache space. This can affect the end-to-end performance. Increase gpu_memory_utilization or "
    "tensor_parallel_size to provide more KV cache memory. total_num_cumulative_preemption={g}"
)


@pytest.mark.parametrize("usage", ["99.1", "98.7", "100.0", "95.3", "0.1", "57.9"])
def test_window_max_is_the_logged_percent(tmp_path: Path, usage: str) -> None:
    p = tmp_path / "vllm.log"
    # several events: one event's window max came out exact while a column of them did not
    p.write_text(STATS.format(u=usage) + "\n" + "".join(PREEMPT.format(s=6 + g, g=g) + "\n" for g in range(1, 9)))
    out = run_cli("analyze", str(p), "--tz", "UTC", "-f", "ndjson", "--wide")
    assert out.returncode == 0, out.stderr
    rows = [json.loads(ln) for ln in out.stdout.splitlines()]
    assert len(rows) == 8
    assert {repr(ev["stats_kv_usage_max"]) for ev in rows} == {repr(float(usage))}
