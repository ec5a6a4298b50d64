"""Preemption events: V0 reconstruction, V1 interval counts, marker lines. Totals must be exact."""

from __future__ import annotations

import polars as pl
import pytest

from preemptlog import AnalyzeOptions, analyze
from preemptlog.engines.vllm.preemptions import MARKER_ID_RES

from ..conftest import write_lines


def warn(ts: str, rid: str, n: int | None, mode: str = "RECOMPUTE") -> str:
    tail = f" total_num_cumulative_preemption={n}" if n is not None else " total_num_cumulative_pr"
    return (
        f"WARNING 05-02 {ts} [scheduler.py:1775] Sequence group {rid} is preempted by PreemptionMode.{mode} "
        f"mode because there is not enough KV cache space. This can affect the end-to-end performance.{tail}"
    )


def stats(ts: str, pre: int | None, engine: str = "000") -> str:
    p = f"Preemptions: {pre}, " if pre is not None else ""
    return (
        f"(APIServer pid=1) INFO 05-02 {ts} [loggers.py:208] Engine {engine}: Avg prompt throughput: 0.0 tokens/s, "
        f"Avg generation throughput: 1.0 tokens/s, Running: 5 reqs, Waiting: 2 reqs, {p}GPU KV cache usage: "
        "99.0%, Prefix cache hit rate: 0.0%"
    )


def run(tmp_path, lines, name="v.log"):
    return analyze([str(write_lines(tmp_path / name, lines))], AnalyzeOptions(tz="UTC", year=2025))


def test_v0_reconstruction_is_exact(tmp_path):
    r = run(tmp_path, [warn("10:00:00", "a", 1), warn("10:00:50", "b", 51), warn("10:01:40", "c", 101)])
    ev = r.events
    assert ev.height == 101
    assert ev.filter(pl.col("kind") == "logged").get_column("request_id").to_list() == ["a", "b", "c"]
    rec = ev.filter(pl.col("kind") == "reconstructed")
    assert rec.height == 98
    assert sorted(ev.get_column("cumulative").to_list()) == list(range(1, 102))
    # reconstructed events of the first gap lie strictly inside (10:00:00, 10:00:50)
    first_gap = rec.filter(pl.col("event_id").str.contains(":2~r"))
    assert first_gap.height == 49
    assert first_gap.get_column("interval_start").unique().to_list()[0].isoformat() == "2025-05-02T10:00:00+00:00"
    assert first_gap.get_column("time").is_sorted()
    assert (first_gap.get_column("time") > first_gap.get_column("interval_start")).all()
    assert (first_gap.get_column("time") < first_gap.get_column("interval_end")).all()
    assert ev.get_column("event_id").n_unique() == ev.height


def test_v0_counter_started_before_the_log(tmp_path):
    ev = run(tmp_path, [warn("10:00:00", "x", 151)]).events
    assert ev.height == 151
    rec = ev.filter(pl.col("kind") == "reconstructed")
    assert rec.get_column("interval_start").null_count() == 150


def test_v0_restart_and_duplicates(tmp_path):
    lines = [
        warn("10:00:00", "a", 1),
        warn("10:00:00", "a", 1),
        warn("10:01:00", "b", 51),
        warn("10:05:00", "c", 1),
        warn("10:06:00", "d", 51),
    ]
    r = run(tmp_path, lines)
    assert r.events.height == 102
    assert r.counters["v0"]["duplicates"] == 1
    assert r.counters["v0"]["runs"] == 2


def test_v0_cut_counter_is_a_lower_bound(tmp_path):
    r = run(tmp_path, [warn("10:00:00", "a", 1), warn("10:00:10", "b", None), warn("10:01:00", "c", 101)])
    # b's counter is cut; V0 samples at 1, 51, 101, so b is #51 and the totals stay exact.
    assert r.events.height == 101
    logged = r.events.filter(pl.col("kind") == "logged")
    assert logged.get_column("cumulative").to_list() == [1, 51, 101]
    assert any("inferred as the previous logged value + 50" in n for n in r.notes)


def test_v0_cut_counter_without_anchor_is_reported(tmp_path):
    r = run(tmp_path, [warn("10:00:10", "b", None)])
    assert r.events.height == 1
    assert any("no readable total_num_cumulative_preemption" in n for n in r.notes)


def test_v0_counter_continues_across_rotated_files(tmp_path):
    write_lines(tmp_path / "vllm.log.1", [warn("10:00:00", "a", 1)])
    write_lines(tmp_path / "vllm.log", [warn("10:01:00", "b", 51)])
    r = analyze([str(tmp_path)], AnalyzeOptions(tz="UTC", year=2025))
    assert r.events.height == 51
    assert r.events.filter(pl.col("kind") == "reconstructed").get_column("interval_start").null_count() == 0


def test_v1_interval_counts(tmp_path):
    lines = [
        stats("10:00:00", None),
        stats("10:00:10", 3),
        stats("10:00:10", 2, "001"),
        stats("10:00:20", None),
        stats("10:00:30", 1),
    ]
    ev = run(tmp_path, lines).events
    assert ev.height == 6
    assert (ev.get_column("kind") == "interval").all()
    e0 = ev.filter(pl.col("engine") == "0")
    assert e0.height == 4
    last = e0.filter(pl.col("line") == 5)
    assert last.get_column("interval_start")[0].isoformat() == "2025-05-02T10:00:20+00:00"
    # a first line's count is of one tick of vLLM's logger (10 s by default), not of an unknown span
    starts = ev.filter(pl.col("engine") == "1").get_column("interval_start")
    assert [t.isoformat() for t in starts] == ["2025-05-02T10:00:00+00:00"] * 2


def test_a_count_after_an_idle_stretch_is_of_the_last_tick(tmp_path):
    # vLLM zeroes its count at every tick of its logger, idle ones included (DEBUG lines, not in an
    # INFO log): the 2 preemptions of the line 38 h after the one before it happened in its last 10 s,
    # not across the 38 h (before, the first was placed 19 h before its line)
    later = stats("00:00:15", 2).replace("05-02", "05-04")
    lines = [stats("10:00:00", None), stats("10:00:10", 1), stats("10:00:20", None), later]
    ev = run(tmp_path, lines).events
    last = ev.filter(pl.col("line") == 4)
    assert last.height == 2
    assert [t.isoformat() for t in last.get_column("interval_start")] == ["2025-05-04T00:00:05+00:00"] * 2
    assert last.get_column("time").min().isoformat() > "2025-05-04T00:00:05"


@pytest.mark.parametrize(
    "text,rid",
    [
        ("Req-42 PREEMPTED", "42"),
        ("request_id=chatcmpl-9 status PREEMPTED", "chatcmpl-9"),
        ("req_id: 'abc-1' -> PREEMPTED", "abc-1"),
        ("seq_group 17 PREEMPTED", "17"),
        ("PREEMPTED request cmpl-7f-0 (lowest priority)", "cmpl-7f-0"),
        ("Request r-1 status: RequestStatus.PREEMPTED", "r-1"),
        ("scheduler marked a request PREEMPTED", None),
    ],
)
def test_marker_request_ids(tmp_path, text, rid):
    ev = run(tmp_path, [f"INFO 05-02 10:00:00 [scheduler.py:1] {text}"]).events
    assert ev.height == 1 and ev.get_column("kind")[0] == "marker"
    assert ev.get_column("request_id")[0] == rid


def test_marker_shapes_are_documented():
    import preemptlog.engines.vllm.preemptions as m

    for shape in ("set to RequestStatus.PREEMPTED", "Req-", "request_id=", "req_id=", "seq_group", "request <id>"):
        assert shape in m.__doc__
    assert len(MARKER_ID_RES) == 6


def test_whole_word_only(tmp_path):
    ev = run(
        tmp_path, ["INFO 05-02 10:00:00 [x.py:1] NOT_PREEMPTED_YET", "INFO 05-02 10:00:00 [x.py:1] PREEMPTEDX"]
    ).events
    assert ev.height == 0


def test_repeated_preemptions_in_summary(tmp_path):
    r = run(
        tmp_path,
        [
            "INFO 05-02 10:00:00 [x.py:1] Req-7 PREEMPTED",
            "INFO 05-02 10:00:05 [x.py:1] Req-7 PREEMPTED",
            "INFO 05-02 10:00:06 [x.py:1] Req-8 PREEMPTED",
        ],
    )
    assert r.summary()["requests_preempted_more_than_once"] == [
        {"request_id": "7", "count": 2, "source": str(tmp_path / "v.log"), "process": None}
    ]
