"""A Rust-frontend log beside /metrics scrapes: where its counts agree with the counter, its timing stands.

The Rust frontend's stats line (vLLM 0.33+, ``VLLM_USE_RUST_FRONTEND=1``) counts every preemption of
its ~10 s tick, summed over the engines (engine ``all``). Against a counter of one engine that is the
same count as the counter's, and finer in time than a scrape a minute apart: reconcile rule 1 keeps
the log's events (its ``file:line`` and intervals) as it does for a Python ``Preemptions: N`` line.
With several data-parallel engines the counter's per-engine events stand (the log cannot say which
engine). Through the CLI, a real subprocess.
"""

from __future__ import annotations

from ..support.rust_bundle import ndjson_events as _events
from ..support.rust_bundle import rust_incident as _bundle


def test_one_engines_counter_agreeing_keeps_the_rust_lines_timing(tmp_path):
    """Scrapes a minute apart (0 -> 11) around 4 + 7 preemptions the log places in 10 s ticks: the 11
    events are the log's, at vllm.log:4 and vllm.log:5, inside (10:00:10, 10:00:20] and (10:00:20,
    10:00:30]; before, the counter's 11 were spread over the minute (one at 10:00:54)."""
    b = _bundle(tmp_path, [("2026-12-01T10:00:00", {"0": 0}), ("2026-12-01T10:01:00", {"0": 11})])
    ev = _events(b)
    assert len(ev) == 11
    by_line: dict[int, int] = {}
    for e in ev:
        assert e["source"].endswith("vllm.log"), e
        by_line[e["line"]] = by_line.get(e["line"], 0) + 1
        assert "10:00:10" < e["time"][11:19] <= "10:00:30"
    assert by_line == {4: 4, 5: 7}


def test_two_engines_counter_keeps_its_engines(tmp_path):
    """With two data-parallel engines the counter says which engine: its events stand (the log's line
    says only 'all')."""
    b = _bundle(tmp_path, [("2026-12-01T10:00:00", {"0": 0, "1": 0}), ("2026-12-01T10:01:00", {"0": 5, "1": 6})])
    ev = _events(b)
    assert len(ev) == 11
    assert sorted({e["engine"] for e in ev}) == ["0", "1"]
    assert all(e["source"].endswith(".prom") for e in ev)


def test_a_counter_that_disagrees_stands(tmp_path):
    """12 on the counter against the log's 11: not the same count, the counter's events stand."""
    b = _bundle(tmp_path, [("2026-12-01T10:00:00", {"0": 0}), ("2026-12-01T10:01:00", {"0": 12})])
    ev = _events(b)
    assert len(ev) == 12
    assert all(e["source"].endswith(".prom") for e in ev)
