"""Prometheus /metrics scrapes and API answers (sources/prometheus/, docs/prometheus.md).

Fixtures under fixtures/prometheus/ are hand-built in the shape vLLM's
prometheus_client exposes (HELP/TYPE lines, ``_created`` series, labels
``engine``/``model_name``). Golden event files: regenerate with
PREEMPTLOG_UPDATE_GOLDEN=1 python -m pytest tests/sources/test_prometheus.py and review the diff.
"""

from __future__ import annotations

import gzip
import io
import os
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from preemptlog import AnalyzeOptions, analyze
from preemptlog.model.events import EVENTS_SCHEMA
from preemptlog.model.frames import schema_of
from preemptlog.render import event_rows
from preemptlog.sources import prometheus as prom
from preemptlog.sources import sniff

from ..conftest import FIXTURES, write_lines

PROM = FIXTURES / "prometheus"
GOLDEN = PROM / "golden"
REL = Path("fixtures/prometheus")  # with the in_root fixture: relative names, as in the outputs
E0 = 1773482400  # 2026-03-14T10:00:00Z, the fixtures' engine start
MODEL = "Qwen/Qwen2.5-7B-Instruct"


def run(paths, **kw):
    return analyze([str(p) for p in paths], AnalyzeOptions(tz="UTC", **kw))


def increases(a, engine: str | None = None) -> list[int]:
    p = a.frames["prom_preemptions"].filter(pl.col("increase").is_not_null())
    if engine is not None:
        p = p.filter(pl.col("engine") == engine)
    return p.sort("end").get_column("increase").to_list()


def utc(sec: float) -> datetime:
    return datetime.fromtimestamp(sec, UTC)


# --------------------------------------------------------------------------- sniffing


@pytest.mark.parametrize(
    "name",
    [
        "stock-v1/metrics-1773482415.prom",
        "concat-two-engines-reset.prom",
        "federate-help-repeat.prom",
        "openmetrics-eof.txt",
        "query_range-two-engines.json",
        "query-vector-total.json",
    ],
)
def test_fixtures_sniff_as_prometheus_and_beat_the_log_kind(name):
    kind, score = sniff((PROM / name).read_text()[:65536])
    assert kind == "prometheus"
    assert score > 50  # vllm-log scores at most 50


def test_vllm_log_still_sniffs_as_log():
    kind, _ = sniff((PROM / "stock-v1" / "vllm.log").read_text())
    assert kind == "vllm-log"


def test_metrics_page_whose_vllm_part_is_beyond_the_head():
    head = (
        "# HELP python_gc_objects_collected_total Objects collected\n# TYPE python_gc_objects_collected_total counter\n"
    )
    assert prom._sniff(head) == 55
    assert prom._sniff("INFO 03-14 10:00:00 [x.py:1] hello\n") == 0


# --------------------------------------------------------------------------- golden events


GOLDEN_CASES = {
    "stock-v1-metrics-only": [
        "fixtures/prometheus/stock-v1/" + p.name for p in sorted((PROM / "stock-v1").glob("*.prom"))
    ],
    "concat-two-engines-reset": ["fixtures/prometheus/concat-two-engines-reset.prom"],
    "federate-help-repeat": ["fixtures/prometheus/federate-help-repeat.prom"],
    "openmetrics-eof": ["fixtures/prometheus/openmetrics-eof.txt"],
    "query_range-two-engines": ["fixtures/prometheus/query_range-two-engines.json"],
    "query-vector-total": ["fixtures/prometheus/query-vector-total.json"],
    "stock-v1-bundle": ["fixtures/prometheus/stock-v1"],
    # SGLang 0.5.10 names (issue 29): two TP ranks of one engine, token counters, the retractions histogram
    "sglang-two-tp-ranks": ["fixtures/prometheus/sglang-two-tp-ranks.prom"],
}


def _ndjson(a) -> str:
    """The event contract columns only (other stages may add columns)."""
    buf = io.BytesIO()
    event_rows(a).select(list(EVENTS_SCHEMA)).write_ndjson(buf)
    return buf.getvalue().decode()


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_golden_events(case, in_root):
    a = analyze(GOLDEN_CASES[case], AnalyzeOptions(tz="UTC"))
    actual = _ndjson(a)
    path = GOLDEN / f"{case}.events.ndjson"
    if os.environ.get("PREEMPTLOG_UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(actual)
        return
    assert path.exists(), f"missing golden file {path}; run with PREEMPTLOG_UPDATE_GOLDEN=1"
    assert actual == path.read_text(), f"{path.name} differs from the golden output"


# --------------------------------------------------------------------------- text exposition


def test_single_scrape_files_form_one_series_timed_by_file_name(in_root):
    a = run(sorted(REL.joinpath("stock-v1").glob("*.prom")))
    assert increases(a) == [0, 0, 0, 3, 7, 8, 0, 7, 0, 0, 0]
    assert a.events.height == 25
    ev = a.events.sort("time")
    # the first event of the 10:01:00 -> 10:01:15 interval: id from the later scrape's sample line
    first = ev.row(0, named=True)
    assert first["event_id"] == f"fixtures/prometheus/stock-v1/metrics-{E0 + 75}.prom:35~i1"
    assert first["interval_start"] == utc(E0 + 60) and first["interval_end"] == utc(E0 + 75)
    assert first["time"] == utc(E0 + 65)  # 1/3 of the interval
    assert first["kind"] == "interval" and first["time_precision"] == "interval"
    assert first["cumulative"] == 1 and first["request_id"] is None
    assert (ev.get_column("time") > ev.get_column("interval_start")).all()
    assert (ev.get_column("time") <= ev.get_column("interval_end")).all()
    topics = {(x.topic, x.value.split(" (")[0]) for x in a.assumptions if x.topic == "scrape time"}
    assert topics == {("scrape time", "the file name")}


def test_prom_series_gauges_in_percent_and_hit_rate(in_root):
    a = run(sorted(REL.joinpath("stock-v1").glob("*.prom")))
    s = a.frames["prom_series"]
    assert schema_of(s) == prom.PROM_SERIES_SCHEMA
    assert s.height == 12  # one row per scrape per engine (cache_config_info has no model label)
    row = s.filter(pl.col("time") == utc(E0 + 90)).row(0, named=True)
    assert row["running"] == 39 and row["waiting"] == 24 and row["kv_usage"] == pytest.approx(100.0)
    assert row["preemptions_total"] == 10 and row["preemptions"] == 7
    # hits/queries increase of the interval: (16384 + 256*5) / (40960 + 1024*5)
    assert row["prefix_hit_rate"] == pytest.approx((16384 + 1280) / (40960 + 5120) * 100)
    assert schema_of(a.frames["prom_samples"]) == prom.PROM_SAMPLES_SCHEMA
    assert schema_of(a.frames["prom_preemptions"]) == prom.PROM_PREEMPTIONS_SCHEMA


def test_config_from_cache_config_info(in_root):
    a = run(sorted(REL.joinpath("stock-v1").glob("*.prom")))
    seen = a.config.filter(pl.col("status") == "seen")
    got = {k: v for k, v in seen.select("key", "value").iter_rows()}
    assert got["block_size"] == "16"
    assert got["num_gpu_blocks"] == "27153"
    assert got["gpu_memory_utilization"] == "0.9"
    assert got["kv_cache_dtype"] == "auto"  # label cache_dtype
    assert "num_cpu_blocks" not in got and "sliding_window" not in got  # "None" labels are skipped
    row = seen.filter(pl.col("key") == "block_size").row(0, named=True)
    assert row["source"] == f"fixtures/prometheus/stock-v1/metrics-{E0 + 15}.prom" and row["line"] == 44
    assert "cache_config_info" in row["note"]
    s = a.summary()["config"]
    assert s["block_size"]["status"] == "seen"
    assert s["kv_cache_tokens"]["value"] == str(27153 * 16)  # derived by vllm/config.py


def test_concatenated_scrapes_two_engines_and_reset(in_root):
    a = run([REL / "concat-two-engines-reset.prom"])
    assert increases(a, "0") == [5, 6, 6, 9]
    assert increases(a, "1") == [5, 8, 2, 4]  # 20 -> 2 with a new _created: a reset, the increase is 2
    p = a.frames["prom_preemptions"]
    assert p.filter(pl.col("reset")).select("engine", "prev_value", "value").rows() == [("1", 20.0, 2.0)]
    assert a.events.height == 45
    assert a.events.group_by("engine").len().sort("engine").rows() == [("0", 26), ("1", 19)]
    assert any("counter reset" in n for n in a.notes)
    assert [x.value for x in a.assumptions if x.topic == "scrape time"] == ["separator lines"]
    facts = a.counters["prometheus"]
    assert facts["scrapes"] == 5 and facts["resets"] == 1 and facts["series"] == 2


def test_created_change_is_a_reset_even_when_the_value_rises(tmp_path):
    def scrape(t, v, created):
        return [
            f"# scrape {t}",
            "# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.",
            "# TYPE vllm:num_preemptions_total counter",
            f'vllm:num_preemptions_total{{engine="0",model_name="m"}} {v}',
            "# HELP vllm:num_preemptions_created Cumulative number of preemption from the engine.",
            "# TYPE vllm:num_preemptions_created gauge",
            f'vllm:num_preemptions_created{{engine="0",model_name="m"}} {created}',
        ]

    lines = scrape("2026-03-14T10:00:00Z", 5.0, 1.7e9) + scrape("2026-03-14T10:00:30Z", 9.0, 1.7000001e9)
    a = run([write_lines(tmp_path / "m.prom", lines)])
    assert increases(a) == [9]  # restarted and reached 9 since: 9, not 4
    assert a.events.height == 9


def test_federate_help_repeat_and_ms_timestamps(in_root):
    a = run([REL / "federate-help-repeat.prom"])
    assert a.counters["prometheus"]["scrapes"] == 3
    assert increases(a) == [6, 8]
    p = a.frames["prom_preemptions"].sort("end")
    assert p.get_column("end").to_list() == [utc(E0 + 600), utc(E0 + 620), utc(E0 + 640)]
    assert [x.value for x in a.assumptions if x.topic == "scrape time"] == ["sample timestamps"]
    s = a.frames["prom_series"].sort("time")
    assert s.get_column("finished_requests").to_list()[1:] == [12.0, 11.0]
    assert s.get_column("finished_preemptions").to_list()[1:] == [6.0, 8.0]
    # finished in the interval minus those in the le="0.0" bucket: preempted at least once
    assert s.get_column("finished_preempted_requests").to_list()[1:] == [4.0, 4.0]
    hist = a.counters["prometheus"]["histogram"]
    assert hist == {"finished_requests": 23.0, "preemptions_of_finished_requests": 14.0, "since_engine_start": False}


def test_openmetrics_eof_bare_date_lines_and_exemplars(in_root):
    a = run([REL / "openmetrics-eof.txt"])
    assert increases(a) == [0, 3, 6]
    assert a.events.height == 9
    assert [x.value for x in a.assumptions if x.topic == "scrape time"] == ["separator lines"]
    ends = a.frames["prom_preemptions"].sort("end").get_column("end").to_list()
    assert ends == [utc(E0 + 900 + 10 * i) for i in range(4)]
    assert a.frames["prom_series"].get_column("kv_usage").to_list() == pytest.approx([97.0, 98.0, 99.0, 100.0])


def test_separators_dash_epoch_and_date_output(tmp_path):
    def block(v):
        return ["# TYPE vllm:num_preemptions_total counter", f'vllm:num_preemptions_total{{engine="0"}} {v}']

    lines = (
        ["--- 2026-03-14T10:00:00Z"]
        + block(1)
        + ["1773482410"]
        + block(4)
        + ["Sat Mar 14 10:00:20 UTC 2026"]
        + block(4)
        + ["# scrape: 2026-03-14 10:00:30"]
        + block(10)  # no zone: --tz (UTC here)
    )
    a = run([write_lines(tmp_path / "loop.txt", lines)])
    p = a.frames["prom_preemptions"].sort("end")
    assert p.get_column("end").to_list() == [utc(E0 + 10 * i) for i in range(4)]
    assert increases(a) == [3, 0, 6]


def test_bare_samples_repeated_without_any_separator(tmp_path):
    lines = [
        f'vllm:num_preemptions_total{{engine="0",model_name="m"}} {v} {(E0 + 15 * i) * 1000}'
        for i, v in enumerate([0, 2, 2, 7])
    ]
    a = run([write_lines(tmp_path / "bare.prom", lines)])
    assert increases(a) == [2, 0, 5]


def test_openmetrics_sample_timestamps_in_seconds(tmp_path):
    lines = [
        "# TYPE vllm:num_preemptions counter",
        f'vllm:num_preemptions_total{{engine="0"}} 1.0 {E0}.250',
        f'vllm:num_preemptions_total{{engine="0"}} 5.0 {E0 + 10}.250',
        "# EOF",
    ]
    a = run([write_lines(tmp_path / "om.txt", lines)])
    ends = a.frames["prom_preemptions"].sort("end").get_column("end").to_list()
    assert ends == [utc(E0 + 0.25), utc(E0 + 10.25)]
    assert increases(a) == [4]


def test_untimed_scrapes_are_counted_but_not_placed(tmp_path):
    lines = []
    for v in (1, 4, 9):
        lines += [
            "# HELP vllm:num_preemptions_total x",
            "# TYPE vllm:num_preemptions_total counter",
            f'vllm:num_preemptions_total{{engine="0"}} {v}',
        ]
    p = write_lines(tmp_path / "noname.prom", lines)
    os.utime(p, (E0 + 100, E0 + 100))
    a = run([p])
    assert a.counters["prometheus"]["scrapes"] == 3
    assert increases(a) == [3, 5]
    assert a.events.height == 8
    ev = a.events
    # the last scrape has the mtime; the one before has no time: its events carry no time
    assert ev.filter(pl.col("time").is_null()).height == 3
    assert ev.filter(pl.col("time").is_not_null()).get_column("time").to_list() == [utc(E0 + 100)] * 5
    assert any("have no time" in w for w in a.warnings)
    assert any(x.topic == "scrape time" and x.value.startswith("the file mtime") for x in a.assumptions)


def test_file_name_iso_time_and_gzip(tmp_path):
    body = "\n".join(
        ["# TYPE vllm:num_preemptions_total counter", 'vllm:num_preemptions_total{engine="0"} 3.0', ""]
    ).encode()
    (tmp_path / "metrics-2026-03-14T10:00:15Z.prom.gz").write_bytes(gzip.compress(body))
    (tmp_path / "metrics-20260314T100030.prom").write_bytes(body.replace(b"3.0", b"5.0"))  # no zone: --tz
    a = run([tmp_path])
    assert [f.kind for f in a.bundle.files] == ["prometheus", "prometheus"]
    p = a.frames["prom_preemptions"].sort("end")
    assert p.get_column("end").to_list() == [utc(E0 + 15), utc(E0 + 30)]
    assert increases(a) == [2]


def test_unreadable_values_and_other_metrics_are_skipped(tmp_path):
    lines = [
        "# TYPE vllm:num_preemptions_total counter",
        'vllm:num_preemptions_total{engine="0"} 2 1773482400000',
        'vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1"} 7 1773482400000',
        'vllm:num_requests_waiting{engine="0"} NaN 1773482400000',
        'vllm:num_preemptions_total{engine="0"} 3 1773482410000',
        'vllm:num_preemptions_total{engine="0"} oops 1773482420000',
    ]
    a = run([write_lines(tmp_path / "x.prom", lines)])
    assert increases(a) == [1]
    assert set(a.frames["prom_samples"].get_column("metric").to_list()) == {
        "vllm:num_preemptions_total",
        "vllm:num_requests_waiting",
    }
    assert any("unreadable value" in w for w in a.warnings)


def test_label_values_with_commas_braces_and_quotes(tmp_path):
    lines = [
        "# TYPE vllm:num_preemptions_total counter",
        'vllm:num_preemptions_total{model_name="org/m,v{2}",engine="3"} 1 1773482400000',
        'vllm:num_preemptions_total{model_name="org/m,v{2}",engine="3"} 4 1773482410000',
        'vllm:num_preemptions_total{model_name="say \\"hi\\"",engine="3"} 0 1773482400000',
    ]
    a = run([write_lines(tmp_path / "x.prom", lines)])
    p = a.frames["prom_preemptions"]
    assert set(p.get_column("model_name").to_list()) == {"org/m,v{2}", 'say \\"hi\\"'}
    assert a.events.height == 3 and set(a.events.get_column("engine").to_list()) == {"3"}


# --------------------------------------------------------------------------- JSON answers


def test_query_range_matrix_two_engines_with_reset(in_root):
    a = run([REL / "query_range-two-engines.json"])
    assert increases(a, "0") == [0, 4, 5, 0, 1, 2]  # 9 -> 1 is a restart
    assert increases(a, "1") == [0, 0, 3, 5, 0, 0]
    assert a.events.height == 20
    ids = a.events.get_column("event_id").to_list()
    assert len(set(ids)) == 20
    # pretty-printed answer: the line and column of the [time, "value"] pair
    assert "fixtures/prometheus/query_range-two-engines.json:23:11~i1" in ids
    assert [x.value for x in a.assumptions if x.topic == "scrape time"] == ["the times in the JSON answer"]
    scopes = set(a.frames["prom_preemptions"].get_column("scope").to_list())
    assert scopes == {"fixtures/prometheus|gpu-node-3:8000"}
    s = a.frames["prom_series"].filter(pl.col("engine") == "0").sort("time")
    assert s.get_column("kv_usage").to_list()[3] == pytest.approx(100.0)


def test_query_vector_single_reading_counts_since_engine_start(in_root):
    """One reading and no log: vLLM's counter since the engine's last start counts (issue 30), as
    events not placed in time; the start is not in the bundle, so the count is a lower bound."""
    a = run([REL / "query-vector-total.json"])
    assert a.events.height == 422
    assert a.events.get_column("time").null_count() == 422
    assert set(a.events.get_column("time_precision").to_list()) == {"unplaced"}
    assert a.events.get_column("interval_start").null_count() == 422
    readings = a.counters["prometheus"]["counter_totals"]
    assert len(readings) == 1
    r = readings[0]
    assert (r["value"], r["samples"], r["engine"]) == (422, 1, "0")
    assert r["time"] == datetime(2026, 3, 14, 10, 25, 0, 781000, tzinfo=UTC)
    assert r["from"] == "fixtures/prometheus/query-vector-total.json:1:216"  # compact JSON: one line
    rec = a.summary()["reconciliation"]
    assert rec["total"] == 422 and rec["quality"] == "lower bound"
    assert rec["single_readings"] == [
        {
            "engine": "0",
            "value": 422,
            "time": "2026-03-14T10:25:00.781+00:00",
            "from": r["from"],
            "engine_start": None,
            "in_events": 422,
        }
    ]
    assert a.summary()["events"] == 422


def test_json_without_metric_name_and_error_answers(tmp_path):
    p = tmp_path / "rate.json"
    p.write_text(
        '{"status":"success","data":{"resultType":"vector","result":[{"metric":{"engine":"0"},"value":[1773482400,"0.5"]}]}}\n'
        '{"status":"error","errorType":"bad_data","error":"parse error"}\n'
    )
    a = run([p], kinds=[f"{p}=prometheus"])
    assert a.events.height == 0
    assert any("without __name__" in w for w in a.warnings)
    assert any("bad_data" in w for w in a.warnings)


def test_offset_shifts_scrape_times(in_root):
    a = run([REL / "openmetrics-eof.txt"], offsets={"prometheus": 2.5})
    ends = a.frames["prom_preemptions"].sort("end").get_column("end").to_list()
    assert ends[0] == datetime(2026, 3, 14, 10, 15, 2, 500000, tzinfo=UTC)


def test_scrape_times_anchor_the_year_of_a_yearless_log(in_root):
    a = run([REL / "stock-v1"])
    years = [x for x in a.assumptions if x.topic == "year"]
    assert years and years[0].value == "2026" and "metrics-" in years[0].source


# --------------------------------------------------------------------------- property


def _write_counter(path: Path, values: list[int], restarts: list[bool]) -> None:
    lines = []
    created = 1.7e9
    for i, (v, r) in enumerate(zip(values, restarts, strict=True)):
        if r:
            created += 1000.0
        t = datetime.fromtimestamp(E0 + 15 * i, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        lines += [
            f"# scrape {t}",
            "# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.",
            "# TYPE vllm:num_preemptions_total counter",
            f'vllm:num_preemptions_total{{engine="0",model_name="m"}} {float(v)}',
            "# HELP vllm:num_preemptions_created Cumulative number of preemption from the engine.",
            "# TYPE vllm:num_preemptions_created gauge",
            f'vllm:num_preemptions_created{{engine="0",model_name="m"}} {created}',
        ]
    write_lines(path, lines)


@st.composite
def counter_runs(draw):
    n = draw(st.integers(2, 12))
    values, restarts, expected = [], [], 0
    v = draw(st.integers(0, 30))
    values.append(v)
    restarts.append(False)
    for _ in range(n - 1):
        restart = draw(st.booleans()) and draw(st.booleans())  # ~1 in 4
        if restart:
            v = draw(st.integers(0, 40))  # may be above or below the previous value
            expected += v
        else:
            step = draw(st.integers(0, 25))
            v += step
            expected += step
        values.append(v)
        restarts.append(restart)
    return values, restarts, expected


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(counter_runs())
def test_property_events_total_equals_sum_of_increases(tmp_path, run_):
    values, restarts, expected = run_
    path = tmp_path / "prop.prom"
    _write_counter(path, values, restarts)
    a = run([path])
    assert a.events.height == expected
    assert sum(increases(a)) == expected
    ev = a.events
    if ev.height:
        assert (ev.get_column("time") > ev.get_column("interval_start")).all()
        assert (ev.get_column("time") <= ev.get_column("interval_end")).all()
        assert ev.get_column("event_id").n_unique() == ev.height
