"""A log whose clock goes back (a restart on another clock, two servers' output in one file) is said so.

Before: a log whose second run's lines are stamped 30 min before the first run's was read silently,
its second run sorted before the first ("52 preemptions in 30 min"), with no word in the output.
Lines a few seconds out of order, the fall-back hour of a zone and New Year are no step back.
"""

from __future__ import annotations

from pathlib import Path

from preemptlog import AnalyzeOptions, analyze

W = (
    "Sequence group {rid} is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache "
    "space. This can affect the end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size "
    "to provide more KV cache memory. total_num_cumulative_preemption={n}"
)


def _stats(md: str, ts: str) -> str:
    return (
        f"INFO {md} {ts} [metrics.py:486] Avg prompt throughput: 10.0 tokens/s, Avg generation throughput: 200.0 "
        "tokens/s, Running: 30 reqs, Swapped: 0 reqs, Pending: 5 reqs, GPU KV cache usage: 99.0%, CPU KV cache usage: 0.0%."
    )


def _run(md: str, start: str) -> list[str]:
    return [
        f"INFO {md} {start} [api_server.py:1090] vLLM API server version 0.8.5",
        _stats(md, start[:-2] + "05"),
        f"WARNING {md} {start[:-2]}06 [scheduler.py:1775] " + W.format(rid=f"r{start}", n=1),
        _stats(md, start[:-2] + "10"),
    ]


def _warnings(tmp_path: Path, lines: list[str], tz: str = "UTC") -> list[str]:
    p = tmp_path / "vllm.log"
    p.write_text("\n".join(lines) + "\n")
    a = analyze([str(p)], AnalyzeOptions(tz=tz, year=2026, rules=False))
    return [w for w in a.warnings if "clock goes back" in w]


def test_a_restart_stamped_half_an_hour_earlier_is_said(tmp_path: Path) -> None:
    said = _warnings(tmp_path, _run("06-10", "10:00:00") + _run("06-10", "09:30:00"))
    assert len(said) == 1
    w = said[0]
    assert "vllm.log: its clock goes back by 30 min 10 s at line 5" in w
    assert "(2026-06-10T10:00:10+00:00 before it, 2026-06-10T09:30:00+00:00 there)" in w
    assert "more step" not in w  # the lines after the step are not more steps


def test_each_step_back_is_counted_once(tmp_path: Path) -> None:
    said = _warnings(tmp_path, _run("06-10", "10:00:00") + _run("06-10", "09:30:00") + _run("06-10", "09:00:00"))
    assert len(said) == 1 and "at line 5" in said[0] and "; 1 more step(s) back later" in said[0]


def test_lines_a_few_seconds_out_of_order_are_no_step_back(tmp_path: Path) -> None:
    lines = _run("06-10", "10:00:00")
    lines.insert(3, _stats("06-10", "10:00:01"))  # 10:00:06, then 10:00:01: 5 s back
    assert _warnings(tmp_path, lines) == []


def test_the_fall_back_hour_and_new_year_are_no_step_back(tmp_path: Path) -> None:
    # 02:59:50 summer time, then 02:00:00 winter time: 10 s later, not 1 h earlier
    berlin = [_stats("10-25", "02:59:40"), _stats("10-25", "02:59:50"), _stats("10-25", "02:00:00")]
    assert _warnings(tmp_path, berlin, tz="Europe/Berlin") == []
    assert _warnings(tmp_path, [_stats("12-31", "23:59:50"), _stats("01-01", "00:00:00")]) == []
