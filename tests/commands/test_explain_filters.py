"""``preemptlog explain`` of an event the filters leave out: said as such (the bundle has it), not
"no event in this bundle (0 event(s))"; an id the bundle lacks is said of the whole bundle."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

V0_LINE = (
    "WARNING 05-01 10:00:{s:02d} [scheduler.py:10] Sequence group cmpl-{r} is preempted by "
    "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect the "
    "end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size to provide more KV "
    "cache memory. total_num_cumulative_preemption={n}\n"
)


def bundle(tmp: Path) -> Path:
    b = tmp / "b"
    b.mkdir()
    text = "INFO 05-01 10:00:00 [api_server.py:1] vLLM API server version 0.8.5\n"
    text += V0_LINE.format(s=5, r="a1", n=1) + V0_LINE.format(s=9, r="a2", n=2)
    (b / "vllm.log").write_text(text)
    return b


def explain(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "preemptlog", "explain", *args, "--tz", "UTC", "-f", "json"],
        capture_output=True,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
        cwd=tmp,
        timeout=300,
    )


def test_an_event_the_filters_leave_out_is_said_so(tmp_path):
    bundle(tmp_path)
    ok = explain(tmp_path, "vllm.log:2", "b")
    assert ok.returncode == 0, ok.stderr
    p = explain(tmp_path, "vllm.log:2", "b", "--since", "10:00:07")
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.strip() == (
        "preemptlog: error: event 'vllm.log:2' is left out by the filters (--since 10:00:07): 1 of the "
        "bundle's 2 event(s) pass them (drop or widen the filters to explain it)"
    )
    r = explain(tmp_path, "--request", "cmpl-a2", "b", "--gate", "G3")
    assert r.returncode == 2
    assert r.stderr.startswith(
        "preemptlog: error: the preemptions of cmpl-a2 are left out by the filters (--gate G3): 0 of the bundle's 2"
    )


def test_an_id_the_bundle_lacks_is_said_of_the_whole_bundle(tmp_path):
    bundle(tmp_path)
    p = explain(tmp_path, "vllm.log:7", "b", "--since", "10:00:07")
    assert p.returncode == 2
    assert p.stderr.startswith("preemptlog: error: no event 'vllm.log:7' in this bundle (2 event(s))"), p.stderr
    assert "did you mean b/vllm.log:3, b/vllm.log:2?" in p.stderr


def test_the_path_given_before_the_id_is_read_in_order(tmp_path):
    # `explain b vllm.log:2` (the bundle first): "vllm.log:2: no such file or folder" before
    bundle(tmp_path)
    right = explain(tmp_path, "vllm.log:2", "b")
    swapped = explain(tmp_path, "b", "vllm.log:2")
    assert swapped.returncode == 0, swapped.stderr
    assert swapped.stdout == right.stdout and '"cmpl-a1"' in swapped.stdout
    # a path that is not there stays a missing path, an id alone stays an id without its bundle
    missing = explain(tmp_path, "nothere", "vllm.log:2")
    assert missing.returncode != 0 and "nothere" in missing.stderr
    alone = explain(tmp_path, "vllm.log:2")
    assert alone.returncode != 0 and "give the bundle or log PATH" in alone.stderr
