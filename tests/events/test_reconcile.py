"""One count from several sources, nothing counted twice (reconcile.py, docs/prometheus.md)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from preemptlog import AnalyzeOptions, analyze
from preemptlog.events.reconcile import PROM_COUNTER, per_request_records

from ..conftest import FIXTURES, write_lines

T0 = datetime(2026, 3, 14, 10, 0, 0, tzinfo=UTC)


def hms(sec: int) -> str:
    return (T0 + timedelta(seconds=sec)).strftime("%H:%M:%S")


def scrapes(values: list[int], step: int = 15, start: int = 0, engine: str | None = "0") -> list[str]:
    lab = f'engine="{engine}",model_name="m"' if engine is not None else 'model_name="m"'
    out = []
    for i, v in enumerate(values):
        t = (T0 + timedelta(seconds=start + step * i)).strftime("%Y-%m-%dT%H:%M:%SZ")
        out += [
            f"# scrape {t}",
            "# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.",
            "# TYPE vllm:num_preemptions_total counter",
            f"vllm:num_preemptions_total{{{lab}}} {float(v)}",
        ]
    return out


def v1_stats(sec: int, pre: int | None, engine: str = "000") -> str:
    p = f"Preemptions: {pre}, " if pre is not None else ""
    return (
        f"(APIServer pid=7) INFO 03-14 {hms(sec)} [loggers.py:208] Engine {engine}: Avg prompt throughput: 10.0 "
        f"tokens/s, Avg generation throughput: 900.0 tokens/s, Running: 30 reqs, Waiting: 5 reqs, {p}GPU KV cache "
        "usage: 99.0%, Prefix cache hit rate: 12.0%"
    )


def v0_warn(sec: int, rid: str, total: int) -> str:
    return (
        f"WARNING 03-14 {hms(sec)} [scheduler.py:1775] Sequence group {rid} is preempted by PreemptionMode.RECOMPUTE "
        "mode because there is not enough KV cache space. This can affect the end-to-end performance. Increase "
        f"gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
        f"total_num_cumulative_preemption={total}"
    )


def run(tmp_path, log_lines: list[str] | None, prom_lines: list[str] | None, **kw):
    paths = []
    if log_lines is not None:
        paths.append(str(write_lines(tmp_path / "vllm.log", log_lines)))
    if prom_lines is not None:
        paths.append(str(write_lines(tmp_path / "metrics.prom", prom_lines)))
    return analyze(paths, AnalyzeOptions(tz="UTC", **kw))


def src(rec: dict, name: str) -> dict:
    return next(s for s in rec["sources"] if s["source"].startswith(name))


# --------------------------------------------------------------------------- the "done when" bundle


def test_stock_v1_log_and_scrapes(in_root):
    a = analyze(["fixtures/prometheus/stock-v1"], AnalyzeOptions(tz="UTC"))
    pairs = a.frames["prom_preemptions"].filter(pl.col("increase").is_not_null())
    counter_increase = int(pairs.get_column("increase").sum())
    assert counter_increase == 25
    ev = a.events
    assert ev.height == counter_increase
    assert set(ev.get_column("source").str.contains("metrics-").to_list()) == {True}
    # every event lies in the interval of the scrape pair that produced it
    joined = ev.join(pairs.select("source", "line", "start", "end"), on=["source", "line"], how="left")
    assert (joined.get_column("interval_start") == joined.get_column("start")).all()
    assert (
        (joined.get_column("time") > joined.get_column("start"))
        & (joined.get_column("time") <= joined.get_column("end"))
    ).all()
    s = a.summary()
    assert s["config"]["block_size"] == {
        "value": "16",
        "status": "seen",
        "from": "stock-v1/metrics-1773482415.prom:44",
        "note": "label of vllm:cache_config_info (engine 0)",
    }
    assert s["config"]["num_gpu_blocks"]["value"] == "27153"
    rec = s["reconciliation"]
    assert rec["total"] == 25 and rec["quality"] == "exact" and rec["disagreements"] == []
    assert src(rec, PROM_COUNTER)["count"] == 25 and src(rec, PROM_COUNTER)["in_events"] == 25
    note = next(n for n in s["notes"] if "0.12.0" in n)
    assert "comes from the Prometheus counter" in note
    assert s["pressure_intervals"] and s["pressure_intervals"][0]["counted_events_in_interval"] == 22


# --------------------------------------------------------------------------- log counts vs the counter


def test_patched_v1_log_and_scrapes_are_not_counted_twice(tmp_path):
    """The fields' 3 in (10 s, 20 s] and 4 in (30 s, 40 s] fit the counter's +3 in (15 s, 30 s] and +4 in
    (30 s, 45 s]: they agree, so the log's events stand there (finer in time) and the counter makes
    none; the 2 at 10:01:30 lie outside the window. Once each: 9."""
    log = [
        v1_stats(s, p)
        for s, p in [(10, None), (20, 3), (30, None), (40, 4), (50, None), (60, None), (80, None), (90, 2)]
    ]
    prom = scrapes([0, 0, 3, 7, 7])  # 10:00:00 .. 10:01:00
    a = run(tmp_path, log, prom)
    ev = a.events
    from_log = ev.filter(pl.col("source").str.ends_with("vllm.log"))
    from_prom = ev.filter(pl.col("source").str.ends_with("metrics.prom"))
    assert from_prom.height == 0
    assert from_log.height == 9
    assert (from_log.filter(pl.col("time") > T0 + timedelta(seconds=60)).height) == 2  # outside the window
    rec = a.summary()["reconciliation"]
    assert rec["total"] == 9 == ev.height
    assert src(rec, "log 'Preemptions: N'")["count"] == 9
    assert src(rec, "log 'Preemptions: N'")["in_events"] == 9
    assert src(rec, PROM_COUNTER)["count"] == 7 and src(rec, PROM_COUNTER)["in_events"] == 0
    assert rec["log_events_outside_scrape_window"] == 2
    assert rec["disagreements"] == []
    assert [(t["engine"], t["count"]) for t in rec["log_timing"]] == [("0", 7)]


def test_patched_v1_log_beside_a_counter_counting_more_is_replaced(tmp_path):
    """The same log beside a counter that rose by 9 in the window (2 the fields do not hold): they
    disagree, so the counter is authoritative there (its 9) and the disagreement is listed."""
    log = [
        v1_stats(s, p)
        for s, p in [(10, None), (20, 3), (30, None), (40, 4), (50, None), (60, None), (80, None), (90, 2)]
    ]
    a = run(tmp_path, log, scrapes([0, 0, 3, 9, 9]))
    ev = a.events
    assert ev.filter(pl.col("source").str.ends_with("metrics.prom")).height == 9
    assert ev.filter(pl.col("source").str.ends_with("vllm.log")).height == 2  # outside the window
    rec = a.summary()["reconciliation"]
    assert rec["total"] == 11 and "log_timing" not in rec
    (d,) = rec["disagreements"]
    assert "add up to 7" in d and "rose by 9" in d


def test_disagreement_is_reported_not_hidden(tmp_path):
    log = [v1_stats(s, p) for s, p in [(10, None), (20, 3), (30, None), (40, 9), (50, None)]]
    a = run(tmp_path, log, scrapes([0, 0, 3, 7, 7]))
    rec = a.summary()["reconciliation"]
    assert a.events.height == 7  # the counter wins inside its window
    assert len(rec["disagreements"]) == 1
    d = rec["disagreements"][0]
    assert "add up to 12" in d and "rose by 7" in d
    assert any(n.startswith("sources disagree:") for n in a.notes)


def test_v0_warnings_kept_reconstructed_replaced_by_the_counter(tmp_path):
    """The counter rose by 60, the warnings say 51 (a lower bound: 9 after the 51st are not logged):
    the warnings are kept, the reconstructed 49 are replaced by the counter's increases less them."""
    log = [v0_warn(5, "seq-a", 1), v0_warn(50, "seq-b", 51)]
    prom = scrapes([0, 30, 60], step=30, engine=None)  # V0: no engine label
    a = run(tmp_path, log, prom)
    ev = a.events
    kinds = dict(ev.group_by("kind").len().iter_rows())
    assert kinds == {"logged": 2, "interval": 58}
    assert ev.height == 60  # = the counter's increase
    assert sorted(ev.filter(pl.col("kind") == "logged").get_column("request_id").to_list()) == ["seq-a", "seq-b"]
    per = ev.filter(pl.col("kind") == "interval").group_by("interval_end").len().sort("interval_end")
    assert per.get_column("len").to_list() == [29, 29]  # 30 - 1 logged, 30 - 1 logged
    rec = a.summary()["reconciliation"]
    v0 = src(rec, "log V0 warnings")
    assert v0["count"] == 51 and v0["in_events"] == 2 and not v0["exact"]
    assert rec["total"] == 60 and rec["quality"] == "exact" and "log_timing" not in rec


def test_v0_warnings_and_reconstructed_equal_to_the_counter_are_kept(tmp_path):
    """The counter rose by 30 then 21: the warning at 5 s and 29 of the 49 reconstructed in (5 s, 50 s]
    by 30 s, the other 20 and the warning at 50 s after. Exactly the counter's 51: the log's events
    stand (the reconstructed ones between the warnings), the counter makes none."""
    log = [v0_warn(5, "seq-a", 1), v0_warn(50, "seq-b", 51)]
    a = run(tmp_path, log, scrapes([0, 30, 51], step=30, engine=None))
    ev = a.events
    assert dict(ev.group_by("kind").len().iter_rows()) == {"logged": 2, "reconstructed": 49}
    rec = a.summary()["reconciliation"]
    assert rec["total"] == 51 == ev.height and rec["quality"] == "exact"
    assert src(rec, "log V0 warnings")["in_events"] == 51 and src(rec, PROM_COUNTER)["in_events"] == 0
    assert rec["log_timing"][0]["kinds"] == {"logged": 2, "reconstructed": 49}


@pytest.mark.parametrize("b_log", ["b/vllm.log", "b/logs/vllm.log"])
def test_another_servers_counter_does_not_replace_a_logs_counts(tmp_path, b_log):
    """Two servers side by side, both engine "0": a/ a V0 log (51 preemptions), b/ a stock V1 log with
    its scrapes (+3). b's counter is b's: a's 49 reconstructed preemptions stand beside its 3."""
    for name, lines in (
        ("a/vllm.log", [v0_warn(5, "seq-a", 1), v0_warn(50, "seq-b", 51)]),
        (b_log, [v1_stats(10, None), v1_stats(40, None)]),
        ("b/metrics.prom", scrapes([0, 3], step=30)),
    ):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        write_lines(tmp_path / name, lines)
    a = analyze([str(tmp_path)], AnalyzeOptions(tz="UTC"))
    assert dict(a.events.group_by("kind").len().iter_rows()) == {"logged": 2, "reconstructed": 49, "interval": 3}
    rec = a.summary()["reconciliation"]
    assert rec["total"] == 54 and not rec["disagreements"]


def test_more_marker_lines_than_the_counter_keeps_lines_and_reports(tmp_path):
    marker = "INFO 03-14 {} [scheduler.py:9] Engine 000: request req-{} PREEMPTED (patched)"
    log = [marker.format(hms(s), i) for i, s in enumerate((20, 22, 24))]
    a = run(tmp_path, log, scrapes([0, 0, 1]))  # +1 in (10:00:15, 10:00:30], 3 lines there
    ev = a.events
    assert ev.height == 3 and set(ev.get_column("kind").to_list()) == {"marker"}
    rec = a.summary()["reconciliation"]
    assert any("3 per-preemption line(s)" in d and "rose by 1" in d for d in rec["disagreements"])


def test_single_reading_compared_with_the_log(tmp_path):
    log = [v1_stats(s, p) for s, p in [(10, None), (20, 5), (30, 4)]]
    prom = [
        "# TYPE vllm:num_preemptions_total counter",
        'vllm:num_preemptions_total{engine="0",model_name="m"} 6.0 '
        + str(int((T0 + timedelta(seconds=40)).timestamp() * 1000)),
    ]
    a = run(tmp_path, log, prom)
    rec = a.summary()["reconciliation"]
    assert a.events.height == 9  # the log's own count: a single reading adds no events
    assert rec["single_readings"][0]["value"] == 6
    assert src(rec, "prometheus counter, single reading")["count"] == 6
    assert any(
        "counted 9 preemption(s) up to" in d and "counter's 6 since engine start" in d for d in rec["disagreements"]
    )


def _stock(sec: int) -> str:
    return v1_stats(sec, None).replace("Waiting: 5 reqs", "Waiting: 0 reqs").replace("99.0%", "40.0%")


def _reading(value: int, at: int, created: int) -> list[str]:
    ms = int((T0 + timedelta(seconds=at)).timestamp() * 1000)
    return [
        "# TYPE vllm:num_preemptions_total counter",
        f'vllm:num_preemptions_total{{engine="0",model_name="m"}} {float(value)} {ms}',
        f'vllm:num_preemptions_created{{engine="0",model_name="m"}} {(T0 + timedelta(seconds=created)).timestamp()} {ms}',
    ]


@pytest.mark.parametrize("at", [40, 30])  # after the log's last line (10:00:30), or at it
def test_a_flat_counter_read_after_a_mid_run_log_is_an_exact_zero(tmp_path, at):
    """A reading of 0 since an engine start before the log (a log that begins mid-run), taken at or
    after the log's last line, holds the whole window: 0 there too, exact, not a baseline that leaves
    the count "not visible" (vLLM #40991: the flat counter rules preemption out)."""
    a = run(tmp_path, [_stock(s) for s in (10, 20, 30)], _reading(0, at, created=-3600))
    s = a.summary()
    rec = s["reconciliation"]
    assert s["count_visible"] is True and s["events"] == 0
    assert rec["quality"] == "exact" and "baseline_readings" not in rec
    assert src(rec, "prometheus counter, single reading")["count"] == 0


def test_a_flat_counter_read_inside_a_mid_run_log_stays_a_baseline(tmp_path):
    """Read before the log's last line, or counting more than 0, the reading does not hold the window."""
    a = run(tmp_path, [_stock(s) for s in (10, 20, 30)], _reading(0, 15, created=-3600))
    assert a.summary()["count_visible"] is False
    (tmp_path / "b").mkdir()
    b = run(tmp_path / "b", [_stock(s) for s in (10, 20, 30)], _reading(4, 40, created=-3600))
    assert b.summary()["count_visible"] is False
    assert [x["value"] for x in b.summary()["reconciliation"]["baseline_readings"]] == [4]


def test_two_engines_each_reconciled_on_its_own(tmp_path):
    log = [v1_stats(10, None, "000"), v1_stats(10, None, "001"), v1_stats(20, 2, "000"), v1_stats(20, 1, "001")]
    prom = scrapes([0, 2], step=30, engine="0") + scrapes([0, 1], step=30, engine="1")
    a = run(tmp_path, log, prom)
    ev = a.events
    assert ev.height == 3
    assert dict(ev.group_by("engine").len().iter_rows()) == {"0": 2, "1": 1}
    # each engine's fields agree with its own counter: the log's events, each engine's decided on its own
    assert set(ev.get_column("source").to_list()) == {str(tmp_path / "vllm.log")}
    assert [t["engine"] for t in a.summary()["reconciliation"]["log_timing"]] == ["0", "1"]
    # engine 1's counter rising by 2 (its field says 1): engine 1 the counter's, engine 0 still the log's
    prom = scrapes([0, 2], step=30, engine="0") + scrapes([0, 2], step=30, engine="1")
    (tmp_path / "b").mkdir()
    b = run(tmp_path / "b", log, prom)
    got = {
        (e, log): n
        for e, log, n in b.events.group_by("engine", pl.col("source").str.ends_with("vllm.log")).len().iter_rows()
    }
    assert got == {("0", True): 2, ("1", False): 2}


def test_without_prometheus_nothing_changes(tmp_path):
    log = [v1_stats(s, p) for s, p in [(10, None), (20, 3), (30, 4)]]
    a = run(tmp_path, log, None)
    rec = a.summary()["reconciliation"]
    assert a.events.height == 7 and rec["total"] == 7 and rec["quality"] == "exact"
    assert rec["rule"].startswith("the log's 'Preemptions: N'")


def test_v0_alone_is_a_lower_bound(tmp_path):
    a = run(tmp_path, [v0_warn(5, "a", 1), v0_warn(50, "b", 51)], None)
    rec = a.summary()["reconciliation"]
    assert rec["total"] == 51 and rec["quality"] == "lower bound"
    assert "49 more" in src(rec, "log V0 warnings")["note"]


def test_block_table_records_are_found_by_shape():
    t = [T0, T0 + timedelta(seconds=1)]
    frames = {
        "bt_events": pl.DataFrame({"time": t, "request_id": ["a", "b"], "action": ["preempt", "free"]}),
        "blocktable_preempts": pl.DataFrame({"time": t, "request_id": ["a", "b"]}),
        "prom_series": pl.DataFrame({"time": t}),
        "dmon": pl.DataFrame({"time": t, "sm": [1, 2]}),
    }
    found = per_request_records(frames)
    assert {k: v.height for k, v in found.items()} == {"bt_events": 1, "blocktable_preempts": 2}


@pytest.mark.parametrize(
    ("name", "word"),
    [
        ("query_range-two-engines.json", "reset"),  # a drop without _created: the gap before it is unknown
        # a drop with a new _created: a restart, counted from it (issue 38); what the run before counted
        # after its last scrape is unseen all the same (tests/events/test_reset_quality.py)
        ("concat-two-engines-reset.prom", "restart"),
    ],
)
def test_resets_make_the_total_a_lower_bound(in_root, name, word):
    a = analyze([f"fixtures/prometheus/{name}"], AnalyzeOptions(tz="UTC"))
    rec = a.summary()["reconciliation"]
    assert rec["quality"] == "lower bound"
    assert word in src(rec, PROM_COUNTER)["note"]
    assert rec["total"] == a.events.height == src(rec, PROM_COUNTER)["count"]


def test_fixture_dir_exists():
    assert (FIXTURES / "prometheus" / "stock-v1").is_dir()


@pytest.mark.parametrize("first_has_start", [True, False])
def test_records_within_the_second_of_a_whole_second_stats_line_are_the_events(tmp_path, first_has_start):
    """vLLM stamps its lines to the second: a 'Preemptions: N' line at 10:00:10 covers preemptions
    up to 10:00:10.999. Records at 10:00:10.3 and .6 count the same preemptions, so they are the events
    (a fast engine prints several stats lines within one second)."""
    lines = ([v1_stats(0, None)] if first_has_start else []) + [v1_stats(10, 2)]
    log = write_lines(tmp_path / "vllm.log", lines)
    base = (T0 + timedelta(seconds=10)).timestamp()
    recs = [
        {
            "type": "event",
            "ts": base + frac,
            "step": 5 + i,
            "engine": "0",
            "request_id": f"req-{i}",
            "action": "preempt",
            "blocks_before": 4,
            "blocks_after": 0,
            "blocks_needed": 3,
            "pool_free_blocks": 1,
            "v": 2,
        }
        for i, frac in enumerate((0.3, 0.6))
    ]
    import json

    bt = write_lines(tmp_path / "records.jsonl", [json.dumps(r) for r in recs])
    r = analyze([str(log), str(bt)], AnalyzeOptions(year=2026, tz="UTC"))
    kinds = r.events.get_column("kind").to_list()
    assert kinds == ["record", "record"], (kinds, r.notes)
    assert sorted(r.events.get_column("request_id").to_list()) == ["req-0", "req-1"]


def _preempt_records(path: Path, times: list[float]) -> Path:
    import json

    recs = [
        {
            "type": "event",
            "ts": t,
            "step": 5 + i,
            "engine": "0",
            "request_id": f"req-{i}",
            "action": "preempt",
            "blocks_before": 4,
            "blocks_after": 0,
            "blocks_needed": 3,
            "pool_free_blocks": 1,
            "v": 2,
        }
        for i, t in enumerate(times)
    ]
    return write_lines(path, [json.dumps(r) for r in recs])


@pytest.mark.parametrize(
    ("after", "expect"),
    [
        # two of the three counted preemptions are stamped after the count's line (the records'
        # clock behind the log's): the three records are the events, not 3 counts + 2 records
        ((12.5, 13.0), ["record"] * 3),
        # more records after the last count than the shortfall: the records are the events and
        # the later ones are preemptions the log had not counted yet
        ((12.5, 13.0, 14.0), ["record"] * 4),
    ],
)
def test_records_stamped_after_the_last_count_are_not_counted_twice(tmp_path, after, expect):
    log = write_lines(tmp_path / "vllm.log", [v1_stats(0, None), v1_stats(10, 3)])
    base = T0.timestamp()
    bt = _preempt_records(tmp_path / "records.jsonl", [base + 4.0] + [base + x for x in after])
    r = analyze([str(log), str(bt)], AnalyzeOptions(year=2026, tz="UTC"))
    assert r.events.get_column("kind").to_list() == expect, r.notes
    assert any("are the events" in n and "cross-checks" in n for n in r.notes), r.notes
    assert r.counters["reconciliation"]["disagreements"] == []


def test_a_count_before_the_first_record_is_kept_the_records_are_the_events(tmp_path):
    # 2 counted in (0 s, 10 s], 1 in (10 s, 20 s]; records at 15 s (the file's first record) and 30 s.
    # The first count lies wholly before the records begin: its 2 are events of the count (kind
    # interval); the second is the record at 15 s; the record at 30 s is not counted yet (the lag).
    log = write_lines(tmp_path / "vllm.log", [v1_stats(0, None), v1_stats(10, 2), v1_stats(20, 1)])
    base = T0.timestamp()
    bt = _preempt_records(tmp_path / "records.jsonl", [base + 15.0, base + 30.0])
    r = analyze([str(log), str(bt)], AnalyzeOptions(year=2026, tz="UTC"))
    kinds = sorted(r.events.get_column("kind").to_list())
    assert kinds == ["interval", "interval", "record", "record"], (kinds, r.notes)
    kept = r.events.filter(pl.col("kind") == "interval")
    assert kept.get_column("time").max() <= T0 + timedelta(seconds=10), kept
    assert any("before its first record" in n for n in r.notes), r.notes
    assert r.counters["reconciliation"]["disagreements"] == []
