"""A V0 stats line's ``Swapped: N reqs`` is the scheduler's swapped queue, and only a SWAP-mode preemption
adds to it (vllm/core/scheduler.py ``_preempt_by_swap``). A log whose server run holds no V0 warning (the
warning lost, filtered, or a version before 0.4.3 that writes none) but whose Swapped count rises holds at
least that many preemptions: interval events of mode SWAP, a lower bound (preemptions.swap_events).

Before: a 0.6.3 log from its banner with Swapped 0, 3, 3, 0 and no warning said "0 preemptions (exact)"
(V0 logs the first preemption of a run, so none since the banner was read as none at all).
Through the CLI, a real subprocess; the logs are written by hand.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_cli
from tests.support.scrapes import reconciled

BANNER = "INFO 10-17 10:00:00 api_server.py:528] vLLM API server version {v}"
STATS = (
    "INFO 10-17 10:{m:02d}:{s:02d} metrics.py:349] Avg prompt throughput: 100.0 tokens/s, Avg generation throughput: "
    "500.0 tokens/s, Running: 40 reqs, Swapped: {sw} reqs, Pending: 12 reqs, GPU KV cache usage: 99.5%, CPU KV "
    "cache usage: {cpu}%."
)
WARN = (
    "WARNING 10-17 10:{m:02d}:{s:02d} scheduler.py:1077] Sequence group {r} is preempted by PreemptionMode.SWAP "
    "mode because there is not enough KV cache space. This can affect the end-to-end performance. Increase "
    "gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
    "total_num_cumulative_preemption={n}"
)


def _stats(swapped: list[int], start_s: int = 10) -> list[str]:
    out = []
    for i, sw in enumerate(swapped):
        t = start_s + 5 * i
        out.append(STATS.format(m=t // 60, s=t % 60, sw=sw, cpu=f"{2.5 * sw:.1f}"))
    return out


def _log(tmp_path: Path, lines: list[str], name: str = "vllm.log") -> Path:
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p


def _swap_events(ev: list[dict]) -> list[dict]:
    return [e for e in ev if e["mode"] == "SWAP" and e["kind"] == "interval"]


def test_rises_from_the_banner_are_a_lower_bound(tmp_path):
    # 0 -> 3 (+3), 3 -> 1, 1 -> 4 (+3), 4 -> 0: at least 6
    log = _log(tmp_path, [BANNER.format(v="0.6.3"), *_stats([0, 3, 1, 4, 0])])
    rec, ev = reconciled(log)
    assert (rec["total"], rec["quality"]) == (6, "lower bound")
    assert "Swapped" in rec["rule"] and "_preempt_by_swap" in rec["rule"]
    (src,) = [s for s in rec["sources"] if "Swapped" in s["source"]]
    assert (src["count"], src["exact"], src["in_events"]) == (6, False, 6)
    assert f"{log}:3" in src["note"] and "up to 4 swapped" in src["note"]
    swaps = _swap_events(ev)
    assert len(swaps) == 6
    # each event inside the interval of the line whose rise it is, cited to that line
    assert sorted({e["line"] for e in swaps}) == [3, 5]
    for e in swaps:
        assert e["interval_start"] < e["time"] <= e["interval_end"]
        assert e["request_id"] is None
    out = run_cli("analyze", str(log), "--tz", "UTC")
    assert "at least 6 preemptions" in out.stderr
    assert "(exact)" not in out.stderr.splitlines()[0]


def test_the_first_line_of_a_log_without_its_start_counts_no_rise(tmp_path):
    # no banner: the 2 swapped at the first line were preempted before the log began; 2 -> 2 -> 5: 3
    log = _log(tmp_path, _stats([2, 2, 5]))
    rec, ev = reconciled(log)
    assert rec["total"] == 3 and rec["quality"] == "lower bound"
    assert {e["line"] for e in _swap_events(ev)} == {3}


def test_a_banner_starts_the_count_again(tmp_path):
    # a restart between the lines: the second run's first line counts from 0 (its 2 are new swaps)
    lines = [BANNER.format(v="0.6.3"), *_stats([0, 1]), BANNER.format(v="0.6.3").replace("10:00:00", "10:01:00")]
    lines += _stats([2], start_s=70)
    rec, ev = reconciled(_log(tmp_path, lines))
    assert rec["total"] == 3
    assert len(_swap_events(ev)) == 3


def test_warnings_in_the_run_count_and_the_swapped_rises_add_nothing(tmp_path):
    # the warning's counter (1) counts every preemption of the run, swapped ones included
    lines = [BANNER.format(v="0.6.3"), *_stats([0]), WARN.format(m=0, s=12, r="a", n=1), *_stats([1, 3], start_s=15)]
    rec, ev = reconciled(_log(tmp_path, lines))
    assert rec["total"] == 1
    assert _swap_events(ev) == []
    assert not [s for s in rec["sources"] if "Swapped" in s["source"]]


def test_a_version_that_logs_no_warning_counts_by_its_swapped_rises(tmp_path):
    # 0.4.1 writes no preemption line at all: before, no count ('none'); the rises are the only one there is
    log = _log(tmp_path, [BANNER.format(v="0.4.1"), *_stats([0, 0, 2])])
    rec, ev = reconciled(log)
    assert (rec["total"], rec["quality"]) == (2, "lower bound")
    assert len(_swap_events(ev)) == 2


def test_a_flat_swapped_count_makes_no_event(tmp_path):
    # requests stay swapped out (3, 3, 3) without a log start: nothing rises in the log's window
    log = _log(tmp_path, _stats([3, 3, 3]))
    rec, ev = reconciled(log)
    assert rec["total"] == 0
    assert _swap_events(ev) == []


def test_two_logs_each_count_their_own_rises(tmp_path):
    # two servers' logs (two folders): a rise in one never pairs with the other's previous line
    for name, sw in (("a", [0, 4]), ("b", [5, 5])):
        (tmp_path / name).mkdir()
        _log(tmp_path / name, [BANNER.format(v="0.6.3"), *_stats(sw)])
    out = run_cli("analyze", str(tmp_path), "--tz", "UTC", "-f", "json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["summary"]["reconciliation"]["total"] == 4 + 5
