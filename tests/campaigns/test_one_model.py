"""One model of what happened (issue 38, items 1, 8 and 10), on hand-written bundles.

1. A counter's ``_created`` is its engine's start: a first reading counts since it only when the run
   it falls in is in the log; before the log it is a baseline (said, not events); a drop with a new
   ``_created`` is a restart counted from it, nothing placed in the downtime; the headline's span
   covers what it counts. Per engine, in several header families, folders and .tar.gz bundles, text
   exposition and Prometheus API JSON, vLLM and SGLang.
8. Never below vLLM's own counter: a counted preemption that no plugin record explains is an event
   without a record (counter-only, ``~c<k>``), in the interval where it was counted.
10. The fleet says what analyze says: the incident rows' count is the summary's (0 for a clean server
   with a flat counter), and the report's totals say how much comes from damaged bundles.
"""

from __future__ import annotations

import json
import tarfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from preemptlog import AnalyzeOptions, analyze

YEAR = 2025
T0 = datetime(YEAR, 5, 1, 5, 0, 0, tzinfo=UTC)


def at(sec: float) -> datetime:
    return T0 + timedelta(seconds=sec)


# ------------------------------------------------------------------ the log, in every header family

STATS = (
    "Engine {e}: Avg prompt throughput: 10.0 tokens/s, Avg generation throughput: 100.0 tokens/s, Running: "
    "{r} reqs, Waiting: {w} reqs, GPU KV cache usage: {kv:.1f}%, Prefix cache hit rate: 0.0%"
)
BANNER = "vLLM API server version 0.14.0"


def _line(fam: str, sec: float, where: str, msg: str) -> str:
    t = at(sec)
    hdr = f"INFO {t:%m-%d %H:%M:%S}"
    if fam == "v04":  # 0.4-0.7: INFO 05-27 15:38:24 file.py:133] msg
        return f"{hdr} {where}] {msg}"
    if fam == "v08":  # 0.8+: INFO 05-27 15:38:24 [file.py:133] msg
        return f"{hdr} [{where}] {msg}"
    if fam == "enginecore":  # a process prefix
        proc = "APIServer pid=1" if where.startswith("api") else "EngineCore_DP0 pid=1"
        return f"({proc}) {hdr} [{where}] {msg}"
    if fam == "kubectl":  # kubectl logs --timestamps: RFC 3339 before the vLLM header
        return f"{t:%Y-%m-%dT%H:%M:%S}.123456789Z {hdr} [{where}] {msg}"
    if fam == "json":  # vLLM 0.32+ JSON lines
        return json.dumps(
            {
                "asctime": f"{t:%Y-%m-%d %H:%M:%S},000",
                "levelname": "INFO",
                "name": "vllm." + where.split(".")[0],
                "message": msg,
            }
        )
    raise ValueError(fam)


FAMILIES = ["v04", "v08", "enginecore", "kubectl", "json"]


def log(fam: str, banner: float | None, stats: list[tuple[float, str, float]]) -> str:
    """A stock V1 log: the API server banner at ``banner`` (None: a log that begins mid-run) and stats
    lines ``(sec, engine, kv %)``."""
    rows = [] if banner is None else [(banner, _line(fam, banner, "api_server.py:1900", BANNER))]
    for sec, eng, kv in stats:
        rows.append((sec, _line(fam, sec, "loggers.py:248", STATS.format(e=eng, r=8, w=3 if kv > 95 else 0, kv=kv))))
    return "\n".join(r for _, r in sorted(rows, key=lambda x: x[0])) + "\n"


# ------------------------------------------------------------------ /metrics, text and JSON


def scrape(sec: float, engines: dict[str, tuple[int, float | None]], prefix: str = "vllm") -> str:
    """One text scrape: per engine (counter value, _created second or None); `# scrape <time>` first."""
    counter = "vllm:num_preemptions" if prefix == "vllm" else "sglang:num_retracted_requests"
    label = "engine" if prefix == "vllm" else "dp_rank"
    out = [f"# scrape {at(sec).isoformat()}", f"# TYPE {counter}_total counter"]
    for e, (v, c) in engines.items():
        lab = f'{label}="{e}",model_name="m"'
        out.append(f"{counter}_total{{{lab}}} {float(v)}")
        if c is not None:
            out.append(f"{counter}_created{{{lab}}} {at(c).timestamp()}")
        if prefix == "vllm":
            out.append(f"vllm:kv_cache_usage_perc{{{lab}}} 0.99")
    return "\n".join(out) + "\n"


def query_range(series: dict[str, list[tuple[float, float]]], engine: str = "0") -> str:
    """A Prometheus /api/v1/query_range answer: metric name -> [(sec, value)]."""
    result = [
        {
            "metric": {"__name__": name, "engine": engine, "model_name": "m", "instance": "h:8000"},
            "values": [[at(s).timestamp(), str(v)] for s, v in pts],
        }
        for name, pts in series.items()
    ]
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}})


def bundle(tmp: Path, name: str, files: dict[str, str], archive: bool = False) -> Path:
    d = tmp / name
    d.mkdir(parents=True)
    for rel, text in files.items():
        p = d / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    if not archive:
        return d
    arc = tmp / f"{name}.tar.gz"
    with tarfile.open(arc, "w:gz") as tf:
        tf.add(d, arcname=name)
    return arc


def run(path: Path, **kw):
    return analyze([str(path)], AnalyzeOptions(tz="UTC", year=YEAR, **kw))


def per_engine(a) -> dict[str, int]:
    return dict(a.events.group_by(pl.col("engine").fill_null("0")).len().iter_rows()) if a.events.height else {}


# ================================================================== item 1: _created is the engine's start


@pytest.mark.parametrize("fam", FAMILIES)
def test_a_log_that_begins_mid_run_makes_the_first_scrape_a_baseline(tmp_path, fam):
    """The engine started at 05:05 (its _created), the log begins at 09:30 with a banner of its own
    (the issue's shape): the first scrape's 7 are before the log, the window holds 5."""
    b = bundle(
        tmp_path,
        fam,
        {
            "vllm.log": log(fam, 570, [(571, "000", 50.0), (580, "000", 99.0), (590, "000", 80.0)]),
            "metrics.prom": scrape(571, {"0": (7, 300)})
            + scrape(581, {"0": (10, 300)})
            + scrape(592, {"0": (12, 300)}),
        },
    )
    a = run(b)
    s = a.summary()
    assert s["events"] == 5, s["headline"]
    assert a.events.get_column("time").null_count() == 0  # nothing unplaced: the 7 are not events
    rec = s["reconciliation"]
    assert rec["quality"] == "exact"
    assert "since the engine started" not in s["headline"]
    assert any("a baseline" in n and "05:05:00" in n for n in a.notes), a.notes


@pytest.mark.parametrize("fam", ["v08", "kubectl", "json"])
def test_one_reading_of_an_engine_started_before_the_log_is_said_not_counted(tmp_path, fam):
    """A stock V1 log (it counts nothing) and one /metrics reading since 05:05, before the log's first
    line at 09:30: the window's count is not visible; the reading is said as a number."""
    b = bundle(
        tmp_path,
        fam,
        {
            "vllm.log": log(fam, 570, [(571, "000", 50.0), (580, "000", 99.0), (590, "000", 80.0)]),
            "metrics.prom": scrape(592, {"0": (24, 300)}),
        },
    )
    s = run(b).summary()
    assert s["count_visible"] is False and s["events"] is None
    base = s["reconciliation"]["baseline_readings"]
    assert [(x["engine"], x["value"]) for x in base] == [("0", 24)]
    assert base[0]["engine_start"].startswith(f"{YEAR}-05-01T05:05:00")
    assert "counter read 24" in s["headline"] and "before the log" in s["headline"]


@pytest.mark.parametrize("fam", FAMILIES)
@pytest.mark.parametrize("archive", [False, True])
def test_one_reading_counts_since_created_when_the_run_is_in_the_log(tmp_path, fam, archive):
    """Banner at 05:00:00, the engine's counter created at 05:00:40 (the model loaded), one reading of
    10 at 05:09:52: 10 events not placed in time, in [05:00:40, 05:09:52], exact."""
    b = bundle(
        tmp_path,
        fam,
        {
            "vllm.log": log(fam, 0, [(91, "000", 50.0), (580, "000", 99.0), (590, "000", 80.0)]),
            "metrics.prom": scrape(592, {"0": (10, 40)}),
        },
        archive=archive,
    )
    a = run(b)
    s = a.summary()
    assert s["events"] == 10 and s["reconciliation"]["quality"] == "exact"
    ev = a.events
    assert set(ev.get_column("time_precision")) == {"unplaced"}
    assert set(ev.get_column("interval_start")) == {at(40)} and set(ev.get_column("interval_end")) == {at(592)}
    assert s["headline"].startswith("10 preemptions since the engine started at 05:00:40")
    assert "_created dates that start" in s["reconciliation"]["rule"]


@pytest.mark.parametrize("archive", [False, True])
def test_data_parallel_engines_whose_created_disagree(tmp_path, archive):
    """Engine 0's counter began at 04:50 (before the log), engine 1's at 05:00:40 (in it): engine 0
    counts its increases only, engine 1 its first reading (since 05:00:40) and its increases."""
    b = bundle(
        tmp_path,
        "dp",
        {
            "vllm.log": log("enginecore", 0, [(91, "000", 50.0), (91, "001", 40.0), (580, "000", 99.0)]),
            "scrapes/m1.prom": scrape(560, {"0": (10, -600), "1": (6, 40)}),
            "scrapes/m2.prom": scrape(580, {"0": (13, -600), "1": (8, 40)}),
        },
        archive=archive,
    )
    a = run(b)
    assert per_engine(a) == {"0": 3, "1": 8}
    s = a.summary()
    assert s["events"] == 11 and s["reconciliation"]["quality"] == "exact"
    one = a.events.filter((pl.col("engine") == "1") & (pl.col("time_precision") == "unplaced"))
    assert one.height == 6 and set(one.get_column("interval_start")) == {at(40)}
    assert [x["engine"] for x in s["reconciliation"]["baseline_readings"]] == ["0"]
    # the headline's span is each engine's start to the last thing counted
    assert "since the engine started at 05:00:40, to 05:09:40" in s["headline"], s["headline"]


def test_data_parallel_single_readings_one_before_the_log_one_in_it(tmp_path):
    """One reading per engine: engine 1's 6 since its start in the log count; engine 0's 10 since
    before the log are a baseline, so its window is not counted: a lower bound, said."""
    b = bundle(
        tmp_path,
        "dp1",
        {
            "vllm.log": log("v08", 0, [(91, "000", 50.0), (580, "001", 99.0)]),
            "metrics.prom": scrape(592, {"0": (10, -600), "1": (6, 40)}),
        },
    )
    a = run(b)
    assert per_engine(a) == {"1": 6}
    rec = a.summary()["reconciliation"]
    assert rec["quality"] == "lower bound" and "engine(s) 0: a baseline reading only" in rec["rule"]


@pytest.mark.parametrize("fam", ["v04", "enginecore"])
def test_a_restart_with_a_new_created_places_nothing_in_the_downtime(tmp_path, fam):
    """0 and 4 in the first run; the server restarts (banner at 05:05:00, counter created 05:06:00);
    3 and 5 after: 4 + 3 + 2 = 9, the restart's 3 in (05:06:00, 05:07:00]; what the first run counted
    after its last scrape (05:03:00) is not visible, so the total is a lower bound."""
    b = bundle(
        tmp_path,
        fam,
        {
            "vllm.log": log(fam, 0, [(91, "000", 50.0)]) + log(fam, 300, [(590, "000", 80.0)]),
            "metrics.prom": scrape(60, {"0": (0, 30)})
            + scrape(180, {"0": (4, 30)})
            + scrape(420, {"0": (3, 360)})
            + scrape(480, {"0": (5, 360)}),
        },
    )
    a = run(b)
    s = a.summary()
    assert s["events"] == 9 and s["reconciliation"]["quality"] == "lower bound"
    times = a.events.get_column("time")
    assert not times.is_between(at(180), at(360), closed="right").any()  # the downtime: nothing
    restart = a.events.filter(pl.col("interval_end") == at(420))
    assert restart.height == 3 and set(restart.get_column("interval_start")) == {at(360)}
    assert any("restart" in n and "new _created" in n for n in a.notes)


def test_a_drop_without_created_is_still_a_lower_bound(tmp_path):
    b = bundle(
        tmp_path,
        "nocreated",
        {
            "vllm.log": log("v08", 0, [(91, "000", 50.0)]),
            "metrics.prom": scrape(60, {"0": (0, None)})
            + scrape(180, {"0": (4, None)})
            + scrape(420, {"0": (3, None)}),
        },
    )
    a = run(b)
    assert a.summary()["events"] == 7 and a.summary()["reconciliation"]["quality"] == "lower bound"
    assert a.events.filter(pl.col("interval_end") == at(420)).get_column("interval_start").unique().to_list() == [
        at(180)
    ]


def test_without_created_the_banner_still_dates_a_reading(tmp_path):
    b = bundle(
        tmp_path,
        "banner",
        {"vllm.log": log("v08", 0, [(91, "000", 99.0)]), "metrics.prom": scrape(592, {"0": (10, None)})},
    )
    a = run(b)
    assert a.summary()["events"] == 10 and set(a.events.get_column("interval_start")) == {at(0)}


@pytest.mark.parametrize("split", [False, True])
def test_prometheus_api_json_with_created_series(tmp_path, split):
    """A query_range answer holding the counter and its _created (or the _created in a second
    answer of its own): a log that begins mid-run makes the first value a baseline, and a drop with
    a new _created is a restart counted from it."""
    total = [(571, 7), (581, 10), (591, 2), (601, 4)]
    created = [
        (571, at(300).timestamp()),
        (581, at(300).timestamp()),
        (591, at(586).timestamp()),
        (601, at(586).timestamp()),
    ]
    files = {"vllm.log": log("json", 570, [(571, "000", 50.0), (580, "000", 99.0), (600, "000", 80.0)])}
    if split:
        files["prom/total.json"] = query_range({"vllm:num_preemptions_total": total})
        files["prom/created.json"] = query_range({"vllm:num_preemptions_created": created})
    else:
        files["prom/range.json"] = query_range(
            {"vllm:num_preemptions_total": total, "vllm:num_preemptions_created": created}
        )
    a = run(bundle(tmp_path, "api", files))
    s = a.summary()
    assert s["events"] == 3 + 2 + 2, s["headline"]
    assert s["reconciliation"]["quality"] == "lower bound"  # the window spans the restart
    restart = a.events.filter(pl.col("interval_end") == at(591))
    assert restart.height == 2 and set(restart.get_column("interval_start")) == {at(586)}
    p = a.frames["prom_preemptions"]
    assert p.get_column("created").null_count() == 0


SGL_RETRACT = "KV cache pool is full. Retract requests. #retracted_reqs: 1, #new_token_ratio: 0.5000 -> 0.6000"


def _sgl(sec: float, text: str) -> str:
    return f"[{at(sec):%Y-%m-%d %H:%M:%S} TP0] {text}"


def test_sglang_mid_run_log_and_a_reading_from_before_it(tmp_path):
    """SGLang's log counts every retraction (2 here); its counter's 10 since 05:05, before the log
    begins at 05:09:30, are the count before the log, not 10 more."""
    text = (
        "\n".join([_sgl(570, "Decode batch. #running-req: 8"), _sgl(575, SGL_RETRACT), _sgl(585, SGL_RETRACT)]) + "\n"
    )
    b = bundle(tmp_path, "sgl", {"sglang.log": text, "metrics.prom": scrape(590, {"0": (10, 300)}, prefix="sglang")})
    a = run(b)
    s = a.summary()
    assert s["events"] == 2 and s["headline"].startswith("2 retractions"), s["headline"]
    assert [x["value"] for x in s["reconciliation"]["baseline_readings"]] == [10]
    assert "baseline reading only" not in s["reconciliation"]["rule"]  # the log counts the window itself


def test_sglang_reading_since_a_start_inside_the_log(tmp_path):
    text = (
        "\n".join(
            [
                f"[{at(0):%Y-%m-%d %H:%M:%S}] server_args=ServerArgs(model_path='m', schedule_conservativeness=1.0)",
                _sgl(575, SGL_RETRACT),
            ]
        )
        + "\n"
    )
    b = bundle(tmp_path, "sgl2", {"sglang.log": text, "metrics.prom": scrape(590, {"0": (4, 30)}, prefix="sglang")})
    a = run(b)
    assert a.summary()["events"] == 4  # the log's 1 and 3 more since the engine's start at 05:00:30
    unplaced = a.events.filter(pl.col("time_precision") == "unplaced")
    assert unplaced.height == 3 and set(unplaced.get_column("interval_start")) == {at(30)}
    assert set(a.events.get_column("engine_kind")) == {"sglang"}


def test_created_moves_with_its_file_offset(tmp_path):
    """--offset prometheus=... moves the scrape times and the _created beside them alike."""
    b = bundle(
        tmp_path,
        "off",
        {"vllm.log": log("v08", 0, [(91, "000", 99.0)]), "metrics.prom": scrape(592, {"0": (10, 40)})},
    )
    a = run(b, offsets={"prometheus": 5.0})
    assert set(a.events.get_column("interval_start")) == {at(45)} and set(a.events.get_column("interval_end")) == {
        at(597)
    }


# ================================================================== item 8: never below vLLM's counter


def plugin_records(times: list[float], engine: str = "0") -> list[dict]:
    """The vLLM plugin's records: an arrival and a schedule per request, a step + event per preemption."""
    out: list[dict] = []
    for k, sec in enumerate(times):
        rid = f"r{k}"
        out.append(
            {
                "type": "request",
                "ts": at(sec - 1).timestamp(),
                "step": 1,
                "engine": engine,
                "request_id": rid,
                "phase": "arrival",
                "prompt_tokens": 200,
                "max_tokens": 100,
            }
        )
        out.append(
            {
                "type": "step",
                "ts": at(sec).timestamp(),
                "step": 10 + k,
                "engine": engine,
                "at": "preempt",
                "block_size": 16,
                "num_free_blocks": 1,
                "num_total_blocks": 64,
                "running": 4,
                "waiting": 2,
            }
        )
        out.append(
            {
                "type": "event",
                "ts": at(sec).timestamp(),
                "step": 10 + k,
                "engine": engine,
                "request_id": rid,
                "action": "preempt",
                "blocks_before": 3,
                "blocks_after": 0,
                "pool_free_blocks": 1,
                "blocks_needed": 2,
                "running": 4,
                "waiting": 2,
                "policy": "fcfs",
                "num_computed_tokens_lost": 230,
                "reason": "allocation failed",
            }
        )
    for r in out:
        r["v"] = 2
    return sorted(out, key=lambda r: r["ts"])


def killed_mid_storm(tmp: Path, name: str, fam: str | None, archive: bool = False, extra: int = 1) -> Path:
    """A `vllm serve` killed mid-storm: 102 preempt records from 10 s to 30.2 s, 1 s scrapes that lag
    them by about half a second, the last scrape (31 s) reading ``102 + extra``: the engine counted
    preemptions whose records were never written."""
    rec_t = [10.0 + 0.2 * k for k in range(102)]
    files = {"records-1.jsonl": "\n".join(json.dumps(r) for r in plugin_records(rec_t)) + "\n"}
    body = ""
    for sec in range(9, 32):
        v = sum(1 for t in rec_t if t <= sec - 0.5)
        if sec == 31:
            v = 102 + extra
        body += scrape(sec, {"0": (v, 5)})
    files["scrapes/metrics.prom"] = body
    if fam is not None:
        files["vllm.log"] = log(fam, 0, [(20, "000", 99.0), (30, "000", 99.0)])
    return bundle(tmp, name, files, archive=archive)


@pytest.mark.parametrize(("fam", "archive"), [(None, False), ("enginecore", False), ("kubectl", True), ("json", False)])
def test_a_counter_one_above_the_records_is_one_more_preemption(tmp_path, fam, archive):
    a = run(killed_mid_storm(tmp_path, "killed", fam, archive))
    s = a.summary()
    assert s["events"] == 103, s["headline"]
    kinds = dict(a.events.group_by("kind").len().iter_rows())
    assert kinds == {"record": 102, "interval": 1}
    co = a.events.filter(pl.col("kind") == "interval").row(0, named=True)
    assert co["event_id"].endswith("~c1") and co["request_id"] is None
    assert at(30) < co["time"] <= at(31)  # in the interval where the counter rose
    rec = s["reconciliation"]
    assert rec["counter_only"] == {"0": 1} and rec["quality"] == "exact"
    assert any("counter-only" in n for n in a.notes)


def test_records_that_match_the_counter_add_nothing(tmp_path):
    a = run(killed_mid_storm(tmp_path, "same", "v08", extra=0))
    assert dict(a.events.group_by("kind").len().iter_rows()) == {"record": 102}
    assert "counter_only" not in a.summary()["reconciliation"]


def test_a_final_reading_above_the_records_since_the_engine_start(tmp_path):
    """No scrape series: one `curl /metrics` after the kill reads 103 since the engine's start
    (_created, before the first record): 102 records and one counted preemption without a record."""
    rec_t = [10.0 + 0.2 * k for k in range(102)]
    files = {
        "records-1.jsonl": "\n".join(json.dumps(r) for r in plugin_records(rec_t)) + "\n",
        "metrics.prom": scrape(31, {"0": (103, 8)}),
    }
    a = run(bundle(tmp_path, "curl", files))
    assert a.summary()["events"] == 103
    extra = a.events.filter(pl.col("kind") == "interval")
    assert extra.height == 1 and extra.get_column("time_precision").to_list() == ["unplaced"]
    assert extra.get_column("event_id")[0].endswith("~c1")


# ================================================================== item 10: the fleet says what analyze says


def _fleet_rows(path: Path):
    from preemptlog.fleet import rows

    a = run(path)
    t = rows.unit_tables("b" * 32, "srv", a, at(0).date())
    return a.summary(), t


def clean_server(tmp: Path, name: str, engines: tuple[str, ...] = ("0",), archive: bool = False) -> Path:
    """A clean stock V1 server: 1 s scrapes, the counter 0 throughout."""
    body = "".join(scrape(sec, {e: (0, 5) for e in engines}) for sec in range(10, 70))
    stats = [(sec, f"{int(e):03d}", 20.0) for sec in (20, 30, 40) for e in engines]
    return bundle(tmp, name, {"vllm.log": log("enginecore", 0, stats), "scrapes/m.prom": body}, archive=archive)


@pytest.mark.parametrize(("engines", "archive"), [(("0",), False), (("0", "1"), False), (("0",), True)])
def test_a_clean_server_is_zero_preemptions_in_the_fleet_rows_too(tmp_path, engines, archive):
    s, t = _fleet_rows(clean_server(tmp_path, "clean", engines, archive))
    assert s["headline"] == "0 preemptions (exact)" and s["events"] == 0
    inc = t["incidents"]
    assert inc.height == len(engines)
    assert inc.get_column("preemptions").to_list() == [0] * len(engines)
    assert inc.get_column("g1_kv_space").to_list() == [0] * len(engines)
    assert inc.get_column("count_quality").to_list() == ["exact"] * len(engines)


@pytest.mark.parametrize("shape", ["counted", "not-visible", "dp"])
def test_the_fleet_rows_add_up_to_the_summary(tmp_path, shape):
    if shape == "counted":
        b = killed_mid_storm(tmp_path, "k", "v08")
    elif shape == "dp":
        b = bundle(
            tmp_path,
            "dp",
            {
                "vllm.log": log("enginecore", 0, [(91, "000", 50.0), (91, "001", 40.0)]),
                "m1.prom": scrape(560, {"0": (10, -600), "1": (6, 40)}),
                "m2.prom": scrape(580, {"0": (13, -600), "1": (8, 40)}),
            },
        )
    else:
        b = bundle(tmp_path, "nv", {"vllm.log": log("v08", 0, [(20, "000", 99.0)])})
    s, t = _fleet_rows(b)
    inc = t["incidents"]
    if s["count_visible"]:
        assert int(inc.get_column("preemptions").sum()) == s["events"] == t["events"].height
    else:
        assert inc.get_column("preemptions").null_count() == inc.height


def test_the_report_says_how_much_comes_from_damaged_bundles(tmp_path):
    """A damaged bundle (a truncated .gz) salvaged in part keeps its rows, flagged partial; the
    report's totals and headline say how many of the preemptions come from it."""
    import gzip

    from preemptlog.fleet import dataset, report, work

    good = killed_mid_storm(tmp_path / "in", "srv-good", "v08", extra=0)
    bad = tmp_path / "in" / "srv-bad"
    bad.mkdir()
    v0 = "\n".join(
        f"INFO 05-01 05:{m:02d}:00 scheduler.py:1481] Sequence group s{m} is preempted by PreemptionMode.RECOMPUTE "
        "mode because there is not enough KV cache space. total_num_cumulative_preemption=1"
        for m in range(1, 50)
    ).encode()
    data = gzip.compress(v0 * 30)
    (bad / "vllm.log.gz").write_bytes(data[: len(data) // 2])
    out = tmp_path / "fleet"
    dataset.write_marker(out)
    opts = AnalyzeOptions(tz="UTC", year=YEAR)
    results = {}
    for p in (good, bad):
        r = work.analyse_bundle(str(p), opts)
        dataset.write_bundle(out, r.bundle_id, r.tables)
        results[p.name] = r
    assert results["srv-bad"].outcome == "partial" and results["srv-good"].outcome == "ok"
    bad_inc = results["srv-bad"].tables["incidents"]
    assert bad_inc.get_column("partial").all()
    assert results["srv-bad"].tables["events"].get_column("partial").all()
    assert not results["srv-good"].tables["events"].get_column("partial").any()
    sections = report.report(str(out))
    tot = sections["totals"].to_dicts()[0]
    n_bad = int(bad_inc.get_column("preemptions").sum())
    assert n_bad > 0
    assert tot["preemptions_from_partial"] == n_bad and tot["preemptions"] == 102 + n_bad
    assert tot["partial_bundles_with_rows"] == 1 and tot["partial"] == 1
    assert f"{n_bad} of the preemptions come from 1 damaged bundle(s) read in part" in report.headline(sections)
