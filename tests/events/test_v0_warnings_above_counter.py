"""V0 warnings whose own total_num_cumulative_preemption counts more in the scrape window than the /metrics
counter rose: vLLM's two counts of one server agree (both count each preemption as it happens), so the two
are not one count (another server's scrapes, or a restart between them). The counter's count is then no
exact one: a lower bound, said in the rule (events/reconcile.py ``log_above``).

Warnings 1, 51, 101 at 00:45:03/:13/:23 and scrapes 0, 80 around them. Before: "80 (exact)", the
disagreement only under -v. Agreeing scrapes (0, 101) stay exact. Through the CLI, a real subprocess.
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


def _bundle(tmp_path: Path, last: int) -> Path:
    b = tmp_path / "inc"
    b.mkdir()
    lines = ["INFO 05-09 00:40:00 api_server.py:212] vLLM API server version 0.6.3"]
    lines += [WARN.format(s=s, r=r, n=n) for s, r, n in ((3, "a", 1), (13, "b", 51), (23, "c", 101))]
    (b / "vllm.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
    write_counter_scrapes(
        b,
        datetime(2026, 5, 9, 0, 45, tzinfo=UTC),
        [(0, {None: 0}), (30, {None: last})],
        datetime(2026, 5, 9, 0, 40, 5, tzinfo=UTC),
    )
    return b


def test_warnings_above_the_counter_make_the_count_a_lower_bound(tmp_path):
    rec, _ = reconciled(_bundle(tmp_path, 80))
    assert rec["quality"] == "lower bound"
    assert "counts 101 in the scrape window, more than the counter rose" in rec["rule"]
    assert any("account for 101" in d for d in rec["disagreements"])


def test_agreeing_warnings_and_counter_stay_exact(tmp_path):
    rec, _ = reconciled(_bundle(tmp_path, 101))
    assert (rec["total"], rec["quality"]) == (101, "exact")
    assert rec["disagreements"] == []
