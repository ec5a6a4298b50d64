"""A V0 warning's total_num_cumulative_preemption is vLLM's exact count since the engine started; the
/metrics counter counts from the same start. Where a warning's reconstructed count straddles the scrape
window's edge, its events are split by their numbers against the counter's reading there, never by the
share of time (reconcile._straddling, ``_by_number``).

Warnings 1, 51, 101 at 00:45:03/:13/:23; scrapes read 30 at 00:45:08 and 70 at 00:45:20. Before: 86
"(exact)" (the :23 warning's interval (:13, :23] kept 15 of its 49 by time after :20), and "the V0
warnings account for 57 preemptions in the scrape window, more than the counter's increase of 40". The
log says 101: 101 - 70 = 31 after the last scrape (30 reconstructed, numbered 71-100, and the warning).
Through the CLI, a real subprocess.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from tests.support.scrapes import reconciled, write_counter_scrapes

WARN = (
    "WARNING 05-09 00:45:{s:02d} scheduler.py:1077] Sequence group {r} is preempted by PreemptionMode.RECOMPUTE "
    "mode because there is not enough KV cache space. This can affect the end-to-end performance. Increase "
    "gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
    "total_num_cumulative_preemption={n}"
)
STATS = (
    "INFO 05-09 00:45:{s:02d} metrics.py:349] Avg prompt throughput: 100.0 tokens/s, Avg generation throughput: "
    "500.0 tokens/s, Running: 30 reqs, Swapped: 0 reqs, Pending: 9 reqs, GPU KV cache usage: 99.0%, CPU KV cache "
    "usage: 0.0%."
)


def _bundle(tmp_path: Path, scrapes: list[tuple[int, int]]) -> Path:
    b = tmp_path / "inc"
    b.mkdir()
    lines = ["INFO 05-09 00:40:00 api_server.py:212] vLLM API server version 0.6.3", STATS.format(s=0)]
    for s, r, n in ((3, "a", 1), (13, "b", 51), (23, "c", 101)):
        lines += [WARN.format(s=s, r=r, n=n), STATS.format(s=s + 2)]
    (b / "vllm.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
    write_counter_scrapes(
        b,
        datetime(2026, 5, 9, 0, 45, tzinfo=UTC),
        [(sec, {None: v}) for sec, v in scrapes],
        datetime(2026, 5, 9, 0, 40, 5, tzinfo=UTC),
    )
    return b


_run = reconciled


def test_a_warning_after_the_last_scrape_keeps_its_numbers_above_the_counter(tmp_path):
    rec, ev = _run(_bundle(tmp_path, [(8, 30), (20, 70)]))
    assert (rec["total"], rec["quality"]) == (101, "exact")
    assert rec["disagreements"] == []
    after = [e for e in ev if e["time"] > "2026-05-09T00:45:20+00:00"]
    assert len(after) == 31
    assert sorted(e["cumulative"] for e in after if e["kind"] == "reconstructed") == list(range(71, 101))
    # before the first scrape: numbers 1-30 (the warning and 29 reconstructed), the counter's 30
    assert len([e for e in ev if e["time"] <= "2026-05-09T00:45:08+00:00"]) == 30


def test_scrapes_bracketing_the_warnings_stay_the_counters(tmp_path):
    rec, _ = _run(_bundle(tmp_path, [(8, 30), (30, 110)]))
    assert (rec["total"], rec["quality"]) == (110, "exact")
