"""The plugin's ``resume`` records against a real vLLM 0.32 with prefix caching (issue 27, item 2).

A preempted request re-admitted under prefix caching gets part of what it lost back from the
cache. The plugin records each resume with the victim's computed tokens at re-admission; their
sum must be vLLM's own count of prefix-cache hits of previously preempted requests
(``PrefixCacheStats.preempted_hits``, summed by tests/support/vllm_driver.py), one resume per preemption,
and the recompute finding then reports lost, re-served from the cache and truly recomputed, each
exact. One driver run (~20 s). A real vLLM run: slow; in CI a missing venv is a failure.
"""

from __future__ import annotations

import pytest

from .test_capture_vllm import PREFIX, PY, REAL_VLLM, run_driver

pytestmark = REAL_VLLM


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    if PY is None:
        pytest.fail("no vLLM 0.32 venv in CI: .ci/run builds it with ci/vllm-venv")
    return run_driver("prefix", PREFIX, {"PREEMPTLOG_RECORD": "{dir}/records.jsonl"}, tmp_path_factory.mktemp("r"))


def test_resume_records_are_vllms_own_cache_hits(run):
    recs = run["records"]
    resumes = [r for r in recs if r.get("type") == "request" and r.get("phase") == "resume"]
    preempts = [r for r in recs if r.get("type") == "event" and r.get("action") == "preempt"]
    assert run["scheduler_preempted"] > 5 and len(preempts) == run["scheduler_preempted"]
    # every victim came back (all requests finish): one resume per preemption, after it
    assert len(resumes) == len(preempts)
    assert sum(r["num_computed_tokens"] for r in resumes) == run["preempted_hits"] > 0
    first_pre = {}
    for p in preempts:
        first_pre.setdefault(p["request_id"], p["step"])
    assert all(r["step"] > first_pre[r["request_id"]] for r in resumes)


def test_recompute_is_split_into_lost_cached_and_recomputed(run, tmp_path):
    from preemptlog.analysis import AnalyzeOptions, analyze
    from preemptlog.pipeline.bundle import Workspace

    b = tmp_path / "bundle"
    b.mkdir()
    for f in ("records.jsonl", "vllm.log"):
        (b / f).write_bytes((run["dir"] / f).read_bytes())
    lost = sum(r["num_computed_tokens_lost"] for r in run["records"] if r.get("action") == "preempt")
    with Workspace() as ws:
        a = analyze([str(b)], AnalyzeOptions(), workspace=ws)
        pc = a.findings.recompute["prefix_cache"]
        head = a.findings.top()
    assert pc["tokens_lost"] == lost and pc["preemptions_without_resume"] == 0
    assert 0 < pc["tokens_from_cache"] <= run["preempted_hits"]
    assert pc["tokens_recomputed"] == lost - pc["tokens_from_cache"]
    assert "re-served from the prefix cache" in head and "recomputed" in head


def test_block_hashes_let_the_vllm_engine_replay_the_prefix_sharing(run, tmp_path):
    """Item 6: the arrival records carry vLLM's prompt block hashes; the `vllm` engine gives requests
    that shared a hash the same tokens and the model engine's pool shares their blocks, so both
    replay the capture exactly (without the hashes every prompt is unique: 15 preemptions where
    the run had 19, measured)."""
    import json
    import subprocess
    import sys

    arrivals = [r for r in run["records"] if r.get("type") == "request" and r.get("phase") == "arrival"]
    assert all(len(r["block_hashes"]) == r["prompt_tokens"] // 16 for r in arrivals)
    shared = {r["block_hashes"][0] for r in arrivals}
    assert len(shared) == 1  # the workload's common prefix: one first block for all
    b = tmp_path / "bundle"
    b.mkdir()
    for f in ("records.jsonl", "vllm.log"):
        (b / f).write_bytes((run["dir"] / f).read_bytes())
    p = subprocess.run(
        [sys.executable, "-m", "preemptlog", "whatif", str(b), "--engine", "vllm", "--vllm-python", str(PY)]
        + ["--base", "max_num_seqs=16", "--base", "max_num_batched_tokens=512", "--base", "enable_prefix_caching=true"]
        + ["-f", "json"],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr
    obs = json.loads(p.stdout)["scenarios"][0]
    assert obs["preemptions"] == run["scheduler_preempted"]
    # the model engine replays the prefix cache with the same hashes: the count and the lost tokens
    m = subprocess.run(
        [sys.executable, "-m", "preemptlog", "whatif", str(b), "-f", "json"]
        + ["--base", "max_num_seqs=16", "--base", "max_num_batched_tokens=512", "--base", "enable_prefix_caching=true"],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert m.returncode == 0, m.stderr
    mobs = json.loads(m.stdout)["scenarios"][0]
    lost = sum(r["num_computed_tokens_lost"] for r in run["records"] if r.get("action") == "preempt")
    assert mobs["preemptions"] == run["scheduler_preempted"] and mobs["recomputed_tokens"] == lost
