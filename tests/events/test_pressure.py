"""What a log can count, and suspected pressure intervals (pressure.py, docs/prometheus.md)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl
import pytest

from preemptlog import AnalyzeOptions, analyze
from preemptlog.events.pressure import find_intervals, log_capability

from ..conftest import FIXTURES, corpus_dir, write_lines

T0 = datetime(2026, 3, 14, 10, 0, 0, tzinfo=UTC)


def stats_frame(rows: list[tuple[int, int, float]], step: int = 10, engine: str = "0") -> pl.DataFrame:
    """(running, waiting, kv%) per sample, ``step`` seconds apart."""
    return pl.DataFrame(
        {
            "time": [T0 + timedelta(seconds=step * i) for i in range(len(rows))],
            "engine": [engine] * len(rows),
            "running": [r for r, _, _ in rows],
            "waiting": [w for _, w, _ in rows],
            "kv_usage": [k for _, _, k in rows],
            "source": ["s.log"] * len(rows),
            "line": list(range(1, len(rows) + 1)),
        },
        schema_overrides={"time": pl.Datetime("us", "UTC"), "line": pl.UInt32},
    )


# --------------------------------------------------------------------------- the rule


def test_kv_at_ceiling_with_waiting_is_flagged():
    iv = find_intervals(stats_frame([(10, 0, 50.0), (20, 3, 96.0), (20, 4, 99.0), (15, 0, 60.0)]))
    assert iv.height == 1
    r = iv.row(0, named=True)
    assert (r["start"], r["end"], r["since"]) == (T0 + timedelta(seconds=10), T0 + timedelta(seconds=20), T0)
    assert r["peak_kv_usage"] == 99.0 and r["max_waiting"] == 4 and r["signals"] == ["kv"]
    assert r["evidence"] == ["s.log:2", "s.log:3"] and r["samples"] == 2


def test_waiting_with_low_kv_is_queueing_not_pressure():
    assert find_intervals(stats_frame([(4, 0, 5.0), (4, 9, 7.0), (3, 12, 6.0), (4, 3, 7.5)])).height == 0


def test_kv_at_ceiling_without_waiting_is_not_flagged():
    assert find_intervals(stats_frame([(40, 0, 99.0), (40, 0, 100.0)])).height == 0


def test_shuffle_after_the_ceiling():
    # running falls and waiting rises right after a sample at the ceiling, KV now below it
    iv = find_intervals(stats_frame([(40, 2, 99.0), (30, 9, 80.0), (30, 0, 50.0)]))
    assert iv.height == 1
    assert iv.row(0, named=True)["signals"] == ["kv", "shuffle"]
    assert iv.row(0, named=True)["end"] == T0 + timedelta(seconds=10)


def test_bridge_one_sample_and_split_on_long_gaps():
    rows = [(40, 5, 99.0), (38, 5, 90.0), (38, 6, 98.0), (10, 0, 10.0)]
    assert find_intervals(stats_frame(rows)).height == 1  # the 90 % sample with waiting is bridged
    rows2 = [(40, 5, 99.0), (38, 0, 90.0), (38, 6, 98.0)]
    assert find_intervals(stats_frame(rows2)).height == 2  # nobody waiting: no bridge
    assert find_intervals(stats_frame([(40, 5, 99.0), (40, 5, 99.0)], step=600)).height == 2  # silence splits


def test_ceiling_is_a_parameter():
    rows = [(2, 1, 93.7), (2, 1, 57.0)]
    assert find_intervals(stats_frame(rows)).height == 0
    assert find_intervals(stats_frame(rows), ceiling=90.0).height == 1


def test_engines_are_separate():
    df = pl.concat([stats_frame([(40, 5, 99.0)], engine="0"), stats_frame([(40, 0, 99.0)], engine="1")])
    iv = find_intervals(df)
    assert iv.get_column("engine").to_list() == ["0"]


# --------------------------------------------------------------------------- corpus


EXPECTED = {
    # KV 100 % with Waiting up to 27: preemption pressure that V1 never logs
    "vllm-v0110-l4-kvfull-waiting-ansi.log": [("19:32:00", "19:33:00", 100.0)],
    # Waiting > 0 but KV < 8 %: queueing from max-num-seqs, not KV pressure
    "vllm-v0251-dgxspark-waiting.log": [],
    # KV up to 93.7 %: below the 95 % ceiling
    "vllm-v0261rc1-autoscientists-kv83.log": [],
}


def _corpus_logs() -> list[str]:
    c = corpus_dir()
    return sorted(p.name for p in c.glob("vllm-*.log")) if c else []


@pytest.mark.parametrize("name", _corpus_logs())
def test_corpus_pressure_intervals(corpus, name):
    a = analyze([str(corpus / name)], AnalyzeOptions(tz="UTC"))
    got = [(r["start"][11:19], r["end"][11:19], r["peak_kv_usage"]) for r in a.summary()["pressure_intervals"]]
    assert got == EXPECTED.get(name, [])  # every other corpus log is idle or uncongested


def test_corpus_kvfull_interval_details(corpus):
    a = analyze([str(corpus / "vllm-v0110-l4-kvfull-waiting-ansi.log")], AnalyzeOptions(tz="UTC"))
    (r,) = a.summary()["pressure_intervals"]
    assert r["max_waiting"] == 24 and (r["max_running"], r["min_running"]) == (66, 26)
    assert r["evidence"][0].endswith("vllm-v0110-l4-kvfull-waiting-ansi.log:9")
    assert set(r["signals"]) == {"kv", "shuffle"}
    assert a.events.height == 0  # never added to the count
    note = next(n for n in a.notes if "suspected pressure interval" in n)
    assert "version not in the log" in note and "/metrics" in note


def test_corpus_kv83_with_a_lower_ceiling(corpus):
    a = analyze([str(corpus / "vllm-v0261rc1-autoscientists-kv83.log")], AnalyzeOptions(tz="UTC", kv_ceiling=90.0))
    assert [r["start"][11:19] for r in a.summary()["pressure_intervals"]] == ["13:47:40"]


# --------------------------------------------------------------------------- stock V1 log alone


def test_stock_v1_log_alone_says_it_cannot_count_and_lists_pressure():
    a = analyze([str(FIXTURES / "prometheus" / "stock-v1" / "vllm.log")], AnalyzeOptions(tz="UTC", year=2026))
    s = a.summary()
    assert s["events"] is None and s["count_visible"] is False  # not a count of zero
    assert s["reconciliation"]["quality"] == "unknown"
    assert s["reconciliation"]["log"]["counts"] == "none"
    notes = [n for n in s["notes"] if "0.12.0" in n]
    assert len(notes) == 1  # one note, not two
    n = notes[0]
    assert "never print" in n and "PR #38452" in n
    assert "add /metrics scrapes (vllm:num_preemptions_total" in n and "preemptlog capture --metrics URL" in n
    assert "PREEMPTLOG_RECORD" in n  # the capture plugin, the other way to make the count visible
    assert "1 suspected pressure interval(s)" in n
    (r,) = s["pressure_intervals"]
    assert (r["start"], r["end"]) == ("2026-03-14T10:01:00+00:00", "2026-03-14T10:02:10+00:00")
    assert r["peak_kv_usage"] == 100.0 and r["max_waiting"] == 24 and r["counted_events_in_interval"] == 0


def test_idle_v1_log_lists_none(tmp_path):
    lines = [
        "(APIServer pid=1) INFO 03-14 10:00:00 [api_server.py:1772] vLLM API server version 0.20.1",
    ] + [
        f"(APIServer pid=1) INFO 03-14 10:00:{s:02d} [loggers.py:266] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
        f"Avg generation throughput: 12.5 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.4%, "
        "Prefix cache hit rate: 0.0%"
        for s in (10, 20, 30)
    ]
    a = analyze([str(write_lines(tmp_path / "idle.log", lines))], AnalyzeOptions(tz="UTC", year=2026))
    s = a.summary()
    assert s["pressure_intervals"] == []
    (n,) = [n for n in s["notes"] if "0.20.1" in n]
    assert "show no interval of KV pressure" in n


def _stats_line(sec: int, running: int, waiting: int, kv: float) -> str:
    return (
        f"(APIServer pid=1) INFO 03-14 {10 + sec // 3600:02d}:{sec // 60 % 60:02d}:{sec % 60:02d} [loggers.py:259] "
        f"Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 900.0 tokens/s, Running: "
        f"{running} reqs, Waiting: {waiting} reqs, GPU KV cache usage: {kv}%, Prefix cache hit rate: 0.0%"
    )


def test_a_server_restart_splits_an_interval(tmp_path):
    """Pressure before a restart and pressure after it (less than max_gap_s apart) are two server runs: two
    intervals, never one spanning the downtime (the new run's first sample has no sample before it)."""
    start = "(APIServer pid={p}) INFO 03-14 10:{m:02d}:01 [api_server.py:1896] vLLM API server version 0.34.0"
    lines = [
        start.format(p=1, m=0),
        _stats_line(70, 100, 10, 98.5),
        _stats_line(80, 96, 14, 99.0),
        "(APIServer pid=1) INFO 03-14 10:01:25 [launcher.py:110] Shutting down FastAPI HTTP server.",
        start.format(p=2, m=2),
        _stats_line(180, 100, 12, 99.0),
        _stats_line(190, 90, 0, 90.0),
    ]
    a = analyze([str(write_lines(tmp_path / "r.log", lines))], AnalyzeOptions(tz="UTC", year=2026))
    got = [(r["since"], r["start"], r["end"]) for r in a.summary()["pressure_intervals"]]
    assert got == [
        (None, "2026-03-14T10:01:10+00:00", "2026-03-14T10:01:20+00:00"),
        (None, "2026-03-14T10:03:00+00:00", "2026-03-14T10:03:00+00:00"),
    ]
    one = find_intervals(a.stats)  # without the starts: one stream, 100 s apart, one interval
    assert one.height == 1


# --------------------------------------------------------------------------- capability


def _log(tmp_path, lines):
    return analyze([str(write_lines(tmp_path / "c.log", lines))], AnalyzeOptions(tz="UTC", year=2025))


def _stats(pre: str = "") -> str:
    return (
        "(APIServer pid=1) INFO 05-02 10:00:10 [loggers.py:208] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
        f"Avg generation throughput: 1.0 tokens/s, Running: 5 reqs, Waiting: 2 reqs, {pre}GPU KV cache usage: 99.0%, "
        "Prefix cache hit rate: 0.0%"
    )


def test_capability_patched_build_counts(tmp_path):
    cap = log_capability(_log(tmp_path, [_stats("Preemptions: 3, ")]))
    assert cap.counts == "exact" and "PR #38452" in cap.reason


@pytest.mark.parametrize(
    "version,needle,metric",
    [
        ("0.10.0", "has no preemption field", True),
        ("0.7.3", "has no preemption field", False),
        ("0.14.0", "stock builds never print it", True),
    ],
)
def test_capability_v1_versions(tmp_path, version, needle, metric):
    a = _log(tmp_path, [f"INFO 05-02 10:00:00 [api_server.py:1] vLLM API server version {version}", _stats()])
    cap = log_capability(a)
    assert cap.family == "V1" and cap.counts == "none" and needle in cap.reason
    assert cap.prometheus_metric is metric
    assert cap.version == version and cap.version_from.endswith("c.log:1")


def test_capability_v0_is_sampled(tmp_path):
    line = (
        "WARNING 05-02 10:00:00 [scheduler.py:1775] Sequence group 7 is preempted by PreemptionMode.SWAP mode because "
        "there is not enough KV cache space. total_num_cumulative_preemption=1"
    )
    cap = log_capability(_log(tmp_path, [line]))
    assert cap.family == "V0" and cap.counts == "sampled"
