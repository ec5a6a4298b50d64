"""vLLM V0 with pipeline parallelism: one Scheduler per virtual engine (vllm/engine/llm_engine.py builds
``pipeline_parallel_size`` of them), each with its own ``num_cumulative_preemption``, so one server's
log interleaves their sampled warnings: 1, 1, 51, 51.

Before: such a log (its engine config says pipeline_parallel_size=2) was called 'Not one server: ...
interleaves two or more servers' lines' and counted 53 (the second '1' and '51' read as steps back).
Now each scheduler is a counter chain of its own: 4 logged + 2 x 49 reconstructed = 102 (a lower
bound: up to 49 more per chain), one server, each reconstructed event in its own scheduler's interval.
A log that states no pipeline parallelism keeps the warning."""

from __future__ import annotations

import json
import subprocess
import sys

W = (
    "WARNING 05-02 {t} [scheduler.py:1775] Sequence group {r} is preempted by PreemptionMode.RECOMPUTE mode "
    "because there is not enough KV cache space. This can affect the end-to-end performance. Increase "
    "gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
    "total_num_cumulative_preemption={n}"
)
S = (
    "INFO 05-02 {t} [metrics.py:455] Avg prompt throughput: 10.0 tokens/s, Avg generation throughput: 500.0 "
    "tokens/s, Running: 30 reqs, Swapped: 0 reqs, Pending: 3 reqs, GPU KV cache usage: 99.0%, CPU KV cache "
    "usage: 0.0%."
)
BANNER = "INFO 05-02 14:00:00 [api_server.py:100] vLLM API server version 0.8.5"
ENGINE = (
    "INFO 05-02 14:00:01 [llm_engine.py:240] Initializing a V0 LLM engine (v0.8.5) with config: model='m', "
    "tensor_parallel_size=1, pipeline_parallel_size={pp}, disable_custom_all_reduce=False"
)
ARGS = "INFO 05-02 14:00:00 [api_server.py:101] non-default args: {{'model': 'm', 'pipeline_parallel_size': {pp}}}"


def _log(head: list[str]) -> str:
    body = [
        S.format(t="14:00:10"),
        W.format(t="14:00:12", r=1, n=1),  # scheduler 0
        W.format(t="14:00:13", r=2, n=1),  # scheduler 1
        S.format(t="14:00:15"),
        W.format(t="14:00:20", r=3, n=51),  # scheduler 0
        W.format(t="14:00:21", r=4, n=51),  # scheduler 1
        S.format(t="14:00:25"),
    ]
    return "\n".join([*head, *body]) + "\n"


def _run(tmp_path, text: str) -> tuple[int, dict, str]:
    p = tmp_path / "vllm.log"
    p.write_text(text)
    r = subprocess.run(
        [sys.executable, "-m", "preemptlog", "analyze", str(p), "--year", "2026", "--tz", "UTC", "-f", "json"],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return r.returncode, json.loads(r.stdout), " ".join(r.stderr.split())


def test_two_virtual_engines_counters_are_two_chains(tmp_path):
    rc, doc, err = _run(tmp_path, _log([BANNER, ENGINE.format(pp=2)]))
    assert rc == 0, err
    assert len(doc["events"]) == 102
    assert "Not one server" not in err and "interleaved" not in err
    assert err.startswith("at least 102 preemptions")
    assert "UserWarning" not in err
    recon = {}
    for e in doc["events"]:
        if e["kind"] == "reconstructed":
            recon.setdefault(e["line"], []).append(e)
    assert sorted(recon) == [7, 8] and all(len(v) == 49 for v in recon.values())
    # each in its own scheduler's interval: 14:00:12-14:00:20 and 14:00:13-14:00:21
    assert recon[7][0]["interval_start"].endswith("14:00:12+00:00") and recon[7][0]["interval_end"].endswith(
        "14:00:20+00:00"
    )
    assert recon[8][0]["interval_start"].endswith("14:00:13+00:00") and recon[8][0]["interval_end"].endswith(
        "14:00:21+00:00"
    )
    assert [e["cumulative"] for e in recon[8]] == list(range(2, 51))


def test_the_pipeline_size_from_the_non_default_args(tmp_path):
    # the args line comes before the engine's start line (another server run by the start banners)
    rc, doc, err = _run(tmp_path, _log([BANNER, ARGS.format(pp=2)]))
    assert rc == 0, err
    assert len(doc["events"]) == 102 and "Not one server" not in err


def test_without_pipeline_parallelism_the_steps_back_are_still_two_servers(tmp_path):
    _, doc, err = _run(tmp_path, _log([BANNER, ENGINE.format(pp=1)]))
    assert err.startswith("Not one server") and len(doc["events"]) == 53
