"""The change proposed from a stock V1 log alone, checked on the real vLLM 0.32 scheduler (issue 39 item 1).

Each run is tests/support/vllm_driver.py in the vLLM venv (ci/vllm-venv; see test_capture_vllm.py): vLLM's own
EngineCore, Scheduler and stat loggers with a fake executor, and no preemptlog recording. The bundle is
the run's stock log only: no /metrics, no records, no request lines. preemptlog analyzes it and proposes
changes from what the log shows (findings/capacity.held_share, engines/vllm/fixes.held_levers); the
same workload is then run again with each proposed change applied:

- on preemption-heavy runs (several shapes: long outputs, long prompts, a burst, prefix caching, the
  priority policy) every proposed change must at least halve vLLM's own preemption count
  (``vllm:num_preemptions_total``) and take at most a quarter more scheduler steps;
- the driver pins the pool with ``num_gpu_blocks_override`` (the log says so: ``Overriding
  num_gpu_blocks=8192 with num_gpu_blocks_override=64``): the pool is moved by that lever, never by
  ``--gpu-memory-utilization``, and it is the first change proposed;
- on clean runs (no preemption) no change is proposed that creates preemptions (none is proposed).
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ..capture.test_capture_vllm import PREFIX, PRESSURE, PY, REAL_VLLM, run_driver

pytestmark = REAL_VLLM

HEAVY = {
    "pressure": PRESSURE,
    "long_outputs": {"workload": "pressure", "requests": 40, "prompt": 40, "max_tokens": 200, "blocks": 96},
    "long_prompts": {"workload": "pressure", "requests": 40, "prompt": 300, "max_tokens": 30, "blocks": 128},
    "burst": {
        "workload": "pressure",
        "requests": 60,
        "prompt": 150,
        "max_tokens": 100,
        "blocks": 160,
        "arrive_every": 1,
        "max_num_seqs": 32,
    },
    "prefix": PREFIX,
    "priority": {**PRESSURE, "policy": "priority"},
}
CLEAN = {
    "clean": {**PRESSURE, "requests": 4, "blocks": 256},
    "clean_busy": {"workload": "pressure", "requests": 12, "prompt": 100, "max_tokens": 60, "blocks": 320},
}
# The lever a change moves, as the driver's spec key (the driver pins the pool: num_gpu_blocks_override).
SPEC_KEY = {"--num-gpu-blocks-override": "blocks", "--max-num-seqs": "max_num_seqs"}
MAX_PREEMPTIONS = 0.5  # of the run without the change
MAX_STEPS = 1.25


def _pool(executor: ThreadPoolExecutor, specs: dict, out: Path) -> dict:
    futs = {name: executor.submit(run_driver, name, spec, {}, out) for name, spec in specs.items()}
    return {name: f.result() for name, f in futs.items()}


def _proposed(log_text: str, tmp: Path) -> dict:
    """`preemptlog analyze` of the stock log alone (a real subprocess): the summary."""
    tmp.mkdir(parents=True, exist_ok=True)
    log = tmp / "vllm.log"
    log.write_text(log_text)
    p = subprocess.run(
        [sys.executable, "-m", "preemptlog", "analyze", str(log), "-f", "json", "--tz", "UTC", "-q"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode in (0, 5), p.stderr
    return json.loads(p.stdout)["summary"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    if PY is None:
        pytest.fail("no vLLM 0.32 venv in CI: .ci/run builds it with ci/vllm-venv")
    out = tmp_path_factory.mktemp("stock-fix-runs")
    with ThreadPoolExecutor(max_workers=2) as ex:
        base = _pool(ex, {**HEAVY, **CLEAN}, out / "base")
        summaries = {name: _proposed(res["log_text"], out / "bundles" / name) for name, res in base.items()}
        again: dict[str, dict] = {}
        for name, s in summaries.items():
            for x in s.get("fixes") or []:
                key = SPEC_KEY.get(x["option"])
                if key is not None:
                    again[f"{name}|{x['option']}"] = {**(HEAVY | CLEAN)[name], key: int(x["suggested"])}
        changed = _pool(ex, again, out / "again")
    return base, summaries, changed


@pytest.mark.parametrize("name", sorted(HEAVY))
def test_a_stock_log_alone_gets_changes_that_halve_the_preemptions(runs, name):
    base, summaries, changed = runs
    before = base[name]
    assert before["counter"] and before["counter"] >= 6, (name, before["counter"])  # preemption-heavy
    s = summaries[name]
    assert s["count_visible"] is False  # a stock V1 log: the count is not visible ...
    fixes = s["fixes"] or []
    assert fixes, s["fixes_dropped"]  # ... and still it gets a change to make
    # A pinned pool (num_gpu_blocks_override in the log) is moved by that lever, never by the memory share.
    assert fixes[0]["option"] == "--num-gpu-blocks-override", fixes
    assert not any(x["option"] == "--gpu-memory-utilization" for x in fixes), fixes
    for x in fixes:
        assert x["status"] == "not verified" and x["basis"].startswith("estimated from"), x
        assert x["option"] in SPEC_KEY, x  # every proposed change is checked below
        after = changed[f"{name}|{x['option']}"]
        assert after["counter"] <= MAX_PREEMPTIONS * before["counter"], (
            name,
            x["option"],
            x["suggested"],
            after["counter"],
            before["counter"],
        )
        assert after["num_steps"] <= MAX_STEPS * before["num_steps"], (
            name,
            x["option"],
            x["suggested"],
            after["num_steps"],
            before["num_steps"],
        )


@pytest.mark.parametrize("name", sorted(CLEAN))
def test_a_clean_run_gets_no_change_that_creates_preemptions(runs, name):
    base, summaries, changed = runs
    assert base[name]["counter"] == 0, base[name]["counter"]
    for x in summaries[name].get("fixes") or []:
        after = changed.get(f"{name}|{x['option']}")
        assert after is not None and after["counter"] == 0, (name, x)


def test_the_headline_says_the_signs_and_the_first_lines_the_change(runs):
    """On the stock log the first lines say the count is not visible (once), the signs that preemption
    happened (the KV ceiling, running falling as waiting grows), and the change with its basis."""
    base, summaries, _ = runs
    s = summaries["pressure"]
    h = s["headline"]
    assert h.count("not visible") == 1 and "KV cache at the ceiling" in h and "vLLM V1 preempts" in h
    top = s["fixes"][0]
    assert top["current"] == 64 and top["suggested"] > 64 and "num_gpu_blocks_profiled=8192" in " ".join(top["inputs"])
