"""Replayed latency against the real vLLM 0.32 scheduler's (fake executor, a real step time).

A capture at A (the pressure workload, the engine sleeping 5 ms per step so that steps take real
time; records and vLLM's own stats lines), and a real run of the same workload at C (max_num_seqs 4,
a quarter of A's: no preemptions), recorded too. ``preemptlog whatif`` on A's bundle replays A and the fix C on the
records' own step clock; each p95 latency must be within 25 % of the real run's (its records'
arrival -> finish times), and C's preemption count within 15 % (issue 27's bounds for a
replayed fix). Two driver runs, one after the other (~20 s each). A real vLLM run: slow; in CI a
missing venv is a failure.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from ..capture.test_capture_vllm import PRESSURE, PY, REAL_VLLM, run_driver

pytestmark = [*REAL_VLLM, pytest.mark.real_vllm_alone]
A = {**PRESSURE, "wall": 0.005, "log_every": 25}
C = {**A, "max_num_seqs": 4}
REC = {"PREEMPTLOG_RECORD": "{dir}/records.jsonl"}


def _p95_latency(records: list[dict]) -> float:
    arr = {r["request_id"]: r["ts"] for r in records if r.get("type") == "request" and r.get("phase") == "arrival"}
    fin = {r["request_id"]: r["ts"] for r in records if r.get("type") == "request" and r.get("phase") == "finish"}
    lat = sorted(fin[k] - arr[k] for k in fin if k in arr)
    return lat[min(len(lat) - 1, math.ceil(0.95 * len(lat)) - 1)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    if PY is None:
        pytest.fail("no vLLM 0.32 venv in CI: .ci/run builds it with ci/vllm-venv")
    out = tmp_path_factory.mktemp("latency-runs")
    return {"A": run_driver("A", A, REC, out), "C": run_driver("C", C, REC, out)}


def test_replayed_latency_and_fix_within_the_bounds(runs, tmp_path):
    b = tmp_path / "bundle"
    b.mkdir()
    for f in ("records.jsonl", "vllm.log"):
        (b / f).write_bytes((runs["A"]["dir"] / f).read_bytes())
    p = subprocess.run(
        [sys.executable, "-m", "preemptlog", "whatif", str(b), "--base", "max_num_seqs=16"]
        + ["--base", "max_num_batched_tokens=512", "--config", "max_num_seqs=4", "-f", "json"],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert "the block-table records' own step times" in doc["step_time"]["how"]
    obs, fix = doc["scenarios"]
    real = {k: _p95_latency(runs[k]["records"]) for k in ("A", "C")}
    got = {"A": obs["latency_p95_s"], "C": fix["latency_p95_s"]}
    print(
        f"p95 latency predicted {got}, real {real}; preemptions C predicted {fix['preemptions']}, "
        f"real {runs['C']['scheduler_preempted']}; clock {doc['step_time']['how']}"
    )
    for k in ("A", "C"):
        assert got[k] is not None and abs(got[k] - real[k]) <= 0.25 * real[k], (k, got, real)
    t = runs["C"]["scheduler_preempted"]
    assert abs(fix["preemptions"] - t) <= max(3, 0.15 * t), (fix["preemptions"], t)
    assert obs["preemptions"] == runs["A"]["scheduler_preempted"]
