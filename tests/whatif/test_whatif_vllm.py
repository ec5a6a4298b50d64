"""`whatif --engine vllm` and the model engine against real vLLM 0.32 runs (fake executor).

A workload runs at configuration A with the capture plugin recording; `preemptlog whatif` on that
bundle replays A (it must reproduce the count exactly) and B, C, D (more blocks, fewer
max_num_seqs, another policy), whose counts must equal real runs at B, C and D. The model engine
must stay within the documented tolerance (docs/whatif.md). Runs: four drivers, two at a time
(~15-20 s each, mostly importing vLLM), then one whatif replay process for all four configs.
Skips with the reason when the vLLM venv is absent (see tests/capture/test_capture_vllm.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.capture.test_capture_vllm import PRESSURE, PY, REAL_VLLM, run_driver

pytestmark = REAL_VLLM

A = {**PRESSURE, "policy": "priority"}  # priorities 0-2 recorded (i % 3)
REAL = {
    "A": (A, {"PREEMPTLOG_RECORD": "{dir}/records.jsonl"}),
    "B": ({**A, "blocks": 96}, {}),
    "C": ({**A, "max_num_seqs": 6}, {}),
    "D": ({**A, "policy": "fcfs"}, {}),
}
ASKED = {"B": "num_gpu_blocks=96", "C": "max_num_seqs=6", "D": "scheduling_policy=fcfs"}
# The driver's settings the log does not print (EngineArgs, no CLI): given as the observed config.
BASE = ["--base", "max_num_seqs=16", "--base", "max_num_batched_tokens=512"]


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    out = tmp_path_factory.mktemp("whatif-vllm")
    with ThreadPoolExecutor(max_workers=2) as ex:
        futs = {k: ex.submit(run_driver, k, spec, env, out) for k, (spec, env) in REAL.items()}
        return {k: f.result() for k, f in futs.items()}


@pytest.fixture(scope="module")
def bundle(real, tmp_path_factory):
    d = tmp_path_factory.mktemp("whatif-bundle")
    for f in ("records.jsonl", "vllm.log"):
        (d / f).write_bytes((real["A"]["dir"] / f).read_bytes())
    return d


def _whatif(bundle, engine: str) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "preemptlog",
        "whatif",
        str(bundle),
        *BASE,
        "--engine",
        engine,
        "-f",
        "json",
        "--vllm-python",
        str(PY),
        *[x for k in ("B", "C", "D") for x in ("--config", ASKED[k])],
    ]
    p = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


@pytest.fixture(scope="module")
def replayed(bundle):
    return {"vllm": _whatif(bundle, "vllm"), "model": _whatif(bundle, "model")}


def _counts(doc: dict) -> dict[str, int]:
    rows = doc["scenarios"]
    names = ["A", "B", "C", "D"]
    assert [r["scenario"] for r in rows] == ["observed", ASKED["B"], ASKED["C"], ASKED["D"]]
    return {n: r["preemptions"] for n, r in zip(names, rows)}


def test_the_workload_comes_from_the_capture(replayed):
    w = replayed["vllm"]["workload"]
    assert w["source"] == "records" and w["requests"] == PRESSURE["requests"]
    assert replayed["vllm"]["arrivals"] == "step"
    # the policy in force is read from the preempt records, not assumed
    assert "block-table preempt records" in replayed["vllm"]["config_provenance"]["scheduling_policy"]


def test_vllm_engine_reproduces_a_exactly_and_equals_real_runs_at_b_c_d(real, replayed):
    got = _counts(replayed["vllm"])
    truth = {k: real[k]["scheduler_preempted"] for k in REAL}
    assert truth["A"] == real["A"]["counter"] > 5
    assert got == truth, (got, truth)
    assert len({truth["A"], truth["B"], truth["C"]}) > 1, "the configurations must change the count"
    assert replayed["vllm"]["calibration"]["status"] == "calibrated"


def test_model_engine_within_the_documented_tolerance(real, replayed):
    from preemptlog.whatif.metrics import CALIBRATION_ABS, CALIBRATION_TOL

    got = _counts(replayed["model"])
    for k in REAL:
        t = real[k]["scheduler_preempted"]
        assert abs(got[k] - t) <= max(CALIBRATION_ABS, CALIBRATION_TOL * t), (k, got[k], t)
    assert replayed["model"]["calibration"]["status"] == "calibrated"
