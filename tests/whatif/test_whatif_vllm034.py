"""The what-if on vLLM 0.34.0: both engines against the real 0.34.0 and 0.32.0 schedulers (issue 37, item 4).

A priority workload where the versions' running loops part (from 0.33 a lowest-priority request that
preempts itself no longer stops the loop) runs on the real 0.34.0 scheduler with the capture plugin
recording, and on the real 0.32.0 one (tests/support/vllm_driver.py, a simulated executor; the same runner as
tests/capture/test_capture_vllm034.py). ``preemptlog whatif --engine vllm`` on the 0.34 capture picks the 0.34
venv by the bundle's version (``PREEMPTLOG_VLLM_034_PYTHON``; no --vllm-python) and must reproduce the
scheduler's count exactly; its ``vllm_version=0.32.0`` row runs in the 0.32 venv and must equal the
real 0.32 run. The model engine must equal both, version by version. Then vLLM 0.34's cache-aware
admission: a shared-prefix workload through the model and through the real 0.34 scheduler, with the
window off and on (the window changes the count): equal, step by step.

Real vLLM runs: slow; without a venv a skip, in CI (``CI=true``, .ci/run builds them) a failure.
About 2-4 minutes (two captures side by side, then three vLLM processes).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest

from preemptlog.whatif.engine_model import StepClock, replay
from preemptlog.whatif.engine_vllm import replay_vllm_many
from preemptlog.whatif.metrics import StepTime
from preemptlog.whatif.workload import ReplayConfig, Workload, WRequest

from ..capture.test_capture_vllm import IN_CI, ONE_VLLM_AT_A_TIME
from ..capture.test_capture_vllm034 import PY32, PY34, run_driver

pytestmark = [
    pytest.mark.slow,
    ONE_VLLM_AT_A_TIME,
    pytest.mark.skipif(
        (PY34 is None or PY32 is None) and not IN_CI,
        reason="no vLLM 0.34 venv (ci/vllm-034-venv) or 0.32 venv (ci/vllm-venv); .ci/run builds both",
    ),
]

# tests/support/vllm_driver.py's pressure workload under priority (i % 3): 23 preemptions on 0.32.0, 15 on 0.34.0
PRIO = {
    "workload": "pressure",
    "requests": 32,
    "prompt": 40,
    "max_tokens": 40,
    "blocks": 32,
    "max_num_seqs": 16,
    "max_num_batched_tokens": 512,
    "arrive_every": 2,
    "policy": "priority",
}
# the driver's settings its log does not print (EngineArgs, no CLI)
BASE = ["--base", "max_num_seqs=16", "--base", "max_num_batched_tokens=512"]


def _need() -> None:
    if PY34 is None or PY32 is None:
        pytest.fail("no vLLM 0.34 / 0.32 venv in CI: .ci/run builds them (ci/vllm-034-venv, ci/vllm-venv)")


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    _need()
    out = tmp_path_factory.mktemp("whatif034")
    rec = {"PREEMPTLOG_RECORD": "{dir}/records.jsonl"}
    with ThreadPoolExecutor(max_workers=2) as ex:
        runs = {v: ex.submit(run_driver, py, v, "prio", PRIO, rec, out) for v, py in (("0.34", PY34), ("0.32", PY32))}
        return {v: f.result() for v, f in runs.items()}


@pytest.fixture(scope="module")
def bundle(real, tmp_path_factory):
    d = tmp_path_factory.mktemp("capture034")
    for f in ("records.jsonl", "vllm.log"):
        (d / f).write_bytes((real["0.34"]["dir"] / f).read_bytes())
    return d


def _whatif(bundle, engine: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREEMPTLOG_VLLM")}
    env |= {"PREEMPTLOG_VLLM_034_PYTHON": str(PY34), "PREEMPTLOG_VLLM_PYTHON": str(PY32)}
    cmd = [sys.executable, "-m", "preemptlog", "whatif", str(bundle), *BASE, "--engine", engine, "-f", "json"]
    cmd += ["--set", "vllm_version=0.32.0", "--tz", "UTC"]
    p = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=900, env=env)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


@pytest.fixture(scope="module")
def replayed(bundle):
    return {"vllm": _whatif(bundle, "vllm"), "model": _whatif(bundle, "model")}


def test_the_versions_part_on_this_workload(real):
    r34, r32 = real["0.34"], real["0.32"]
    assert r34["vllm_version"] == "0.34.0" and r32["vllm_version"].startswith("0.32")
    assert (
        r34["scheduler_preempted"]
        == r34["counter"]
        == len([x for x in r34["records"] if x["type"] == "event" and x["action"] == "preempt"])
    )
    assert r34["scheduler_preempted"] != r32["scheduler_preempted"], "the priority loop must matter here"


def test_the_vllm_engine_replays_the_capture_on_its_own_version_exactly(real, replayed):
    doc = replayed["vllm"]
    obs, v32 = doc["scenarios"]
    assert doc["config_provenance"]["vllm_version"].startswith("vLLM 0.34.0 (")
    assert obs["cfg_vllm_version"] == "0.34.0" and obs["status"] == "vllm"
    assert obs["preemptions"] == real["0.34"]["scheduler_preempted"]  # exact: the 0.34.0 scheduler's own
    assert "replayed on vLLM" not in obs["notes"]  # it ran in the 0.34 venv, picked by the bundle's version
    # the same workload asked on 0.32: the 0.32 venv, the real 0.32 run's count
    assert v32["cfg_vllm_version"] == "0.32.0" and "replayed on vLLM" not in v32["notes"]
    assert v32["preemptions"] == real["0.32"]["scheduler_preempted"]
    assert doc["calibration"]["status"] == "calibrated"


def test_the_model_engine_equals_each_versions_scheduler(real, replayed):
    obs, v32 = replayed["model"]["scenarios"]
    assert obs["preemptions"] == real["0.34"]["scheduler_preempted"]
    assert v32["preemptions"] == real["0.32"]["scheduler_preempted"]
    assert replayed["model"]["calibration"]["status"] == "calibrated"


def _prefix_workload() -> tuple[Workload, ReplayConfig]:
    """Requests of three shared prefixes arriving mixed (vLLM's block hashes give their identity:
    the `vllm` engine turns equal hashes into equal tokens), a 32-block pool under prefix caching."""
    rng = random.Random(4)
    n, every, groups, shared = 32, 2, 3, 48
    reqs = []
    for i in range(n):
        g = rng.randrange(groups)
        p = shared + rng.randint(8, 60)
        hashes = tuple(f"g{g}-{k}" for k in range(shared // 16)) + tuple(f"r{i}-{k}" for k in range((p - shared) // 16))
        o = rng.randint(20, 80)
        reqs.append(WRequest(f"req-{i}", 0.0, p, o, o, arrival_step=every * i, block_hashes=hashes))
    cfg = ReplayConfig(
        num_gpu_blocks=32,
        block_size=16,
        max_num_seqs=32,
        max_num_batched_tokens=512,
        max_model_len=496,
        enable_prefix_caching=True,
        vllm_version="0.34.0",
    )
    return Workload(reqs, "records", "test"), cfg


def test_cache_aware_admission_model_equals_the_real_0_34_scheduler():
    _need()
    wl, cfg = _prefix_workload()
    cfgs = [
        cfg,
        replace(cfg, cache_aware_admission_window=8),
        replace(cfg, cache_aware_admission_window=8, cache_aware_admission_threshold=0.0),
        replace(cfg, cache_aware_admission_window=3, cache_aware_admission_threshold=0.9),
    ]
    real = replay_vllm_many(
        wl, cfgs, StepTime(0.03, 0.0, "test", True), arrivals="step", python=PY34, hash_block_size=16
    )
    assert {t.scheduler_version for t in real} == {"0.34.0"} and not any(t.refused for t in real)
    for c, rt in zip(cfgs, real, strict=True):
        mt = replay(wl, c, StepClock(0.03, 0.0), arrivals="step", hash_block=16)
        assert mt.preempted == rt.preempted, (c, mt.preemptions, rt.preemptions)
        assert mt.step_tokens == rt.step_tokens and mt.finish_step == rt.finish_step
    assert real[0].preemptions != real[1].preemptions, "the window must change the count here"
