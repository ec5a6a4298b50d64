"""A log count whose interval straddles the scrape window's end is split by the counter's value, not by
time (reconcile._straddling, ``_window_rise``): the counter's increase over the window is every
preemption in it, so what the log's counts before the interval do not hold of it is the interval's part
inside, and the rest is after the last scrape.

Stats lines say Preemptions 6, 4, 3 at 09:14:10/:20/:30 (each the tick before it); the counter reads 0
at 09:14:05 and 10 at 09:14:25. The counter's 10 by :25 are the lines' up to :20 (6 + 4), so all 3 of
the :30 line are after the last scrape: 13. Before: 12 "(exact)" (2 of the 3 kept, by the share of time
after :25). The same with the Rust frontend's line (engine ``all``) against a counter of one engine.
Through the CLI, a real subprocess.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.support.scrapes import reconciled, write_counter_scrapes

V1 = (
    "(APIServer pid=77) INFO 11-20 09:14:{s:02d} [loggers.py:208] Engine 000: Avg prompt throughput: 812.4 tokens/s, "
    "Avg generation throughput: 2310.9 tokens/s, Running: 50 reqs, Waiting: 17 reqs, {p}GPU KV cache usage: {kv}%, "
    "Prefix cache hit rate: 35.2%"
)
RUST = (
    "(RustFrontend pid=11) INFO 11-20 09:14:{s:02d} [server/src/lib.rs:133] Avg prompt tput: 120.5 toks/s, Avg "
    "generation tput: 900.1 toks/s, Reqs Running: 50, Waiting: 17, {p}GPU KV cache used: {kv}%, Prefix cache hit "
    "rate: 12.0%"
)
HEAD = {
    "v1": [
        "(APIServer pid=77) INFO 11-20 09:13:50 [api_server.py:1885] vLLM API server version 0.12.0",
        "(EngineCore_DP0 pid=78) INFO 11-20 09:13:54 [kv_cache_utils.py:1087] GPU KV cache size: 42,656 tokens",
    ],
    "rust": ["(APIServer pid=10) INFO 11-20 09:13:50 [api_server.py:100] vLLM server version 0.34.0, serving model m"],
}


def _bundle(tmp_path: Path, kind: str, scrapes: list[tuple[int, int]]) -> Path:
    b = tmp_path / "inc"
    b.mkdir()
    fmt = V1 if kind == "v1" else RUST
    lines = list(HEAD[kind])
    for s, p, kv in ((0, 0, 80.0), (10, 6, 99.7), (20, 4, 100.0), (30, 3, 99.0), (40, 0, 60.0)):
        lines.append(fmt.format(s=s, p=f"Preemptions: {p}, " if p else "", kv=kv))
    (b / "vllm.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
    write_counter_scrapes(
        b,
        datetime(2026, 11, 20, 9, 14, tzinfo=UTC),
        [(sec, {"0": v}) for sec, v in scrapes],
        datetime(2026, 11, 20, 9, 13, 55, tzinfo=UTC),
    )
    return b


_run = reconciled


@pytest.mark.parametrize("kind", ["v1", "rust"])
def test_a_stats_line_across_the_last_scrape_is_split_by_the_counters_value(tmp_path, kind):
    rec, ev = _run(_bundle(tmp_path, kind, [(5, 0), (25, 10)]))
    assert (rec["total"], rec["quality"]) == (13, "exact")
    assert rec["disagreements"] == []
    after = [e for e in ev if e["time"] > "2026-11-20T09:14:25+00:00"]
    assert len(after) == 3 and {e["source"].rsplit("/", 1)[-1] for e in after} == {"vllm.log"}


def test_a_window_covering_the_lines_is_the_counters(tmp_path):
    rec, _ = _run(_bundle(tmp_path, "v1", [(0, 0), (35, 13)]))
    assert (rec["total"], rec["quality"]) == (13, "exact")
