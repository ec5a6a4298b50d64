"""A V0 warning's counter cut inside its digits (the file's last line, no line end: "=15" of 151) is no
restart to 15: V0 prints only 50k + 1 (the 1st, 51st, 101st... preemption), so a value below the one before
it and of another form is a missing counter, inferred as the previous + 50 (engines/vllm/preemptions.py).
A rising value of another form (a build that logs more often) stands.

Before: warnings 1, 51, 101, then "=15" cut, said "at least 116" and two counter runs (a restart).
Through the CLI, a real subprocess; the logs are written by hand.
"""

from __future__ import annotations

import json
from pathlib import Path

from preemptlog.errors import ExitCode
from tests.conftest import run_cli

WARN = (
    "WARNING 11-03 14:05:{s:02d} scheduler.py:1077] Sequence group {r} is preempted by PreemptionMode.RECOMPUTE "
    "mode because there is not enough KV cache space. This can affect the end-to-end performance. Increase "
    "gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
    "total_num_cumulative_preemption={n}"
)
BANNER = "INFO 11-03 14:00:00 api_server.py:528] vLLM API server version 0.6.3"


def _summary(tmp_path: Path, counters: list[str], end: str = "") -> dict:
    lines = [BANNER, *(WARN.format(s=5 * i, r=f"r{i}", n=n) for i, n in enumerate(counters))]
    p = tmp_path / "vllm.log"
    p.write_text("\n".join(lines) + end, encoding="utf-8")
    out = run_cli("analyze", str(p), "--tz", "UTC", "-f", "json")
    # a file that ends inside a line is damaged input: the analysis runs and exits PARTIAL
    assert out.returncode == (ExitCode.OK if end else ExitCode.PARTIAL), out.stderr
    return json.loads(out.stdout)["summary"]


def test_a_counter_cut_inside_its_digits_is_the_previous_plus_50(tmp_path):
    s = _summary(tmp_path, ["1", "51", "101", "15"])  # no line end: the last line was cut
    assert s["reconciliation"]["total"] == 151
    assert s["v0_counter"]["runs"] == 1
    assert any("below the one before it" in n and "vllm.log:5" in n for n in s["notes"])


def test_a_restart_to_1_is_still_a_restart(tmp_path):
    # 1 is a value V0 prints: a restart whose banner is not in the log, a run of its own
    s = _summary(tmp_path, ["1", "51", "101", "1"], end="\n")
    assert s["reconciliation"]["total"] == 102
    assert s["v0_counter"]["runs"] == 2


def test_a_build_that_logs_every_preemption_keeps_its_counts(tmp_path):
    s = _summary(tmp_path, ["1", "2", "3", "4"], end="\n")
    assert s["reconciliation"]["total"] == 4
    assert not any("below the one before it" in n for n in s["notes"])
