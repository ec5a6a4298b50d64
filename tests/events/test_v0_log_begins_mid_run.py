"""A V0 log that begins inside a server run (no start before its first warning, no file it continues): the
first warning's total_num_cumulative_preemption counts since the engine started, and the warning 50 before
it is not in the log, so the preemptions numbered up to that one happened before the log began. They are
counted, not placed in the log's window (time_precision "unplaced"); the up to 49 after it stay in the
interval that ends at the warning (engines/vllm/preemptions.py ``before_log``).

Before: warnings 301 and 351 50 s apart said "at least 351 preemptions in 50 s", with 300 events stamped
at the first warning's second. Through the CLI, a real subprocess; the logs are written by hand.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_cli

WARN = (
    "WARNING 11-29 10:{m:02d}:{s:02d} scheduler.py:1481] Sequence group {r} is preempted by "
    "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect the end-to-end "
    "performance. Increase gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
    "total_num_cumulative_preemption={n}"
)
BANNER = "INFO 11-29 09:59:00 api_server.py:528] vLLM API server version 0.6.3"


def _run(tmp_path: Path, lines: list[str]) -> tuple[dict, list[dict], str]:
    p = tmp_path / "vllm.log"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    args = ("analyze", str(p), "--tz", "UTC", "--year", "2026")
    js, nd, text = run_cli(*args, "-f", "json"), run_cli(*args, "-f", "ndjson"), run_cli(*args)
    assert js.returncode == nd.returncode == text.returncode == 0, text.stderr
    return json.loads(js.stdout)["summary"], [json.loads(x) for x in nd.stdout.splitlines() if x], text.stderr


def test_the_count_before_the_log_is_not_placed_in_its_window(tmp_path):
    s, ev, head = _run(tmp_path, [WARN.format(m=0, s=50, r="a", n=301), WARN.format(m=1, s=40, r="b", n=351)])
    assert s["reconciliation"]["total"] == 351
    unplaced = [e for e in ev if e["time_precision"] == "unplaced"]
    assert sorted(e["cumulative"] for e in unplaced) == list(range(1, 252))
    assert all(e["time"] is None and e["interval_end"] == "2026-11-29T10:00:50+00:00" for e in unplaced)
    placed = [e for e in ev if e["time"] is not None]
    assert len(placed) == 100  # 252..300 (in the interval that ends at 301), 301, 302..350, 351
    first = " ".join(head.split())
    assert first.startswith("at least 351 preemptions since the engine started"), head
    assert "in 50 s" not in first.split(":")[0]
    assert "251 event(s) counted by the first V0 warning" in " ".join(
        run_cli("analyze", str(tmp_path / "vllm.log"), "--tz", "UTC", "--year", "2026", "-v").stderr.split()
    )


def test_a_log_from_its_start_places_every_count(tmp_path):
    s, ev, _ = _run(tmp_path, [BANNER, WARN.format(m=0, s=50, r="a", n=1), WARN.format(m=1, s=40, r="b", n=51)])
    assert s["reconciliation"]["total"] == 51
    assert not [e for e in ev if e["time_precision"] == "unplaced"]


def test_a_first_warning_of_1_has_nothing_before_it(tmp_path):
    s, ev, _ = _run(tmp_path, [WARN.format(m=0, s=50, r="a", n=1), WARN.format(m=1, s=40, r="b", n=51)])
    assert s["reconciliation"]["total"] == 51
    assert not [e for e in ev if e["time_precision"] == "unplaced"]


def test_a_restart_inside_the_log_counts_inside_it(tmp_path):
    # the counter goes back (a restart without its banner): its run began inside the log, all placed
    lines = [
        WARN.format(m=0, s=10, r="a", n=1),
        WARN.format(m=0, s=50, r="b", n=1),
        WARN.format(m=1, s=40, r="c", n=101),
    ]
    s, ev, _ = _run(tmp_path, lines)
    assert s["reconciliation"]["total"] == 102
    assert not [e for e in ev if e["time_precision"] == "unplaced"]
