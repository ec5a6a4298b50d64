"""An aggregated stats line (``2 Engines Aggregated``, engine ``all``) across the scrape window's start is
split by the engines' first readings summed (reconcile._straddling), never by the share of time.

Lines say Preemptions 4 at 09:14:10 and 6 at 09:14:20 (each the tick before it); the counters of engines
0 and 1 read 0/0 at 09:14:05 and 7/3 at 09:14:35. No preemption happened before :05 (both counters were
0 there), so all 4 of the :10 line are in the window: 10. Before: 12 "(exact)", 2 of the :10 line kept
before :05 by the share of time, while -v said "0 preemption(s) before each series' first reading", and a
disagreement "the log's fields add up to 8 inside the scrape window, the counter rose by 10". Through the
CLI, a real subprocess.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from tests.support.scrapes import reconciled, write_counter_scrapes

LINE = (
    "(APIServer pid=77) INFO 11-20 09:14:{s:02d} [loggers.py:208] 2 Engines Aggregated: Avg prompt throughput: 0.0 "
    "tokens/s, Avg generation throughput: 4100.0 tokens/s, Running: 90 reqs, Waiting: {w} reqs, {p}GPU KV cache "
    "usage: {kv}%, Prefix cache hit rate: 30.1%"
)


def _bundle(tmp_path: Path, first_at: int) -> Path:
    b = tmp_path / "inc"
    b.mkdir()
    lines = [
        "(APIServer pid=77) INFO 11-20 09:13:50 [api_server.py:1885] vLLM API server version 0.12.0",
        "(EngineCore_DP0 pid=78) INFO 11-20 09:13:54 [kv_cache_utils.py:1087] GPU KV cache size: 42,656 tokens",
        "(EngineCore_DP1 pid=79) INFO 11-20 09:13:54 [kv_cache_utils.py:1087] GPU KV cache size: 42,656 tokens",
    ]
    for s, w, p, kv in ((0, 0, 0, 80.0), (10, 12, 4, 97.9), (20, 12, 6, 99.0), (30, 0, 0, 50.0)):
        lines.append(LINE.format(s=s, w=w, p=f"Preemptions: {p}, " if p else "", kv=kv))
    (b / "vllm.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
    write_counter_scrapes(
        b,
        datetime(2026, 11, 20, 9, 14, tzinfo=UTC),
        [(sec, {"0": v0, "1": v1}) for sec, v0, v1 in ((first_at, 0, 0), (35, 7, 3))],
        datetime(2026, 11, 20, 9, 13, 55, tzinfo=UTC),
    )
    return b


_run = reconciled


def test_an_aggregated_line_keeps_none_before_first_readings_of_zero(tmp_path):
    rec, ev = _run(_bundle(tmp_path, 5))
    assert (rec["total"], rec["quality"]) == (10, "exact")
    assert rec["disagreements"] == []
    assert [e for e in ev if e["time"] is None or e["time"] <= "2026-11-20T09:14:05+00:00"] == []


def test_a_window_covering_the_lines_is_the_counters(tmp_path):
    rec, _ = _run(_bundle(tmp_path, 0))
    assert (rec["total"], rec["quality"]) == (10, "exact")
