"""Block-table preempt records are the events; counts are cross-checks (issue 31, recordmatch.py).

Hand-written bundles in the plugin's record format (arrival, scheduled, preempt, finish records)
with the counts vLLM keeps beside them: /metrics scrapes in preemptlog's capture format, the
``Preemptions: N`` stats field (PREEMPTLOG_FIX_STATS) in several header families, both, records that
stop before the counter, two engines. vLLM counts a preemption when the request is next reported,
so every count here lags its records.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from preemptlog import AnalyzeOptions, analyze
from preemptlog.events.recordmatch import count_groups, match

from ..conftest import write_lines

T0 = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)


def at(sec: float) -> datetime:
    return T0 + timedelta(seconds=sec)


def records(preempts: list[tuple[float, str]], engine: str = "0", start: float = 0.0, finish: float | None = None):
    """Plugin records: an arrival and a first schedule per request from ``start``, one preempt
    (step + table + event) per ``(time, request)``, a finish per request at ``finish``."""
    rids = sorted({r for _, r in preempts})
    out: list[dict] = []
    for i, rid in enumerate(rids):
        t = at(start + 0.01 * i).timestamp()
        out.append(
            {
                "type": "request",
                "ts": t,
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
                "type": "request",
                "ts": t + 0.001,
                "step": 2,
                "engine": engine,
                "request_id": rid,
                "phase": "scheduled",
                "num_computed_tokens": 0,
            }
        )
    for k, (sec, rid) in enumerate(sorted(preempts)):
        ts = at(sec).timestamp()
        step = 10 + k
        out.append(
            {
                "type": "step",
                "ts": ts,
                "step": step,
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
                "type": "table",
                "ts": ts,
                "step": step,
                "engine": engine,
                "request_id": rid,
                "block_ids": [1, 2, 3],
                "num_tokens": 240,
                "num_computed_tokens": 230,
                "at": "preempt",
            }
        )
        out.append(
            {
                "type": "event",
                "ts": ts,
                "step": step,
                "engine": engine,
                "request_id": rid,
                "action": "preempt",
                "blocks_before": 3,
                "blocks_after": 0,
                "pool_free_blocks": 1,
                "blocks_needed": 2,
                "watermark_blocks": 0,
                "running": 4,
                "waiting": 2,
                "policy": "fcfs",
                "num_computed_tokens_lost": 230,
                "reason": "allocation failed",
            }
        )
    if finish is not None:
        n_pre = {rid: sum(1 for _, r in preempts if r == rid) for rid in rids}
        for i, rid in enumerate(rids):
            out.append(
                {
                    "type": "request",
                    "ts": at(finish + 0.01 * i).timestamp(),
                    "step": 99,
                    "engine": engine,
                    "request_id": rid,
                    "phase": "finish",
                    "output_tokens": 100,
                    "finish_reason": "length",
                    "num_preemptions": n_pre[rid],
                }
            )
    for r in out:
        r["v"] = 2
    return sorted(out, key=lambda r: r["ts"])


def write_records(path: Path, recs: list[dict]) -> Path:
    return write_lines(path, [json.dumps(r) for r in recs])


def scrape_file(
    d: Path,
    sec: float,
    values: dict[str, int],
    hist: dict[str, tuple[int, int]] | None = None,
    answer_s: float | None = None,
) -> Path:
    """One scrape as ``preemptlog capture`` writes it: ``# scrape <ISO time>`` then the body; with
    ``answer_s``, capture's mark line too (the time is when the answer arrived, that long after
    the request)."""
    from preemptlog.capture.scrape import mark

    lines = [f"# scrape {at(sec).isoformat(timespec='milliseconds')}"]
    if answer_s is not None:
        lines.append(mark(answer_s))
    lines.append("# TYPE vllm:num_preemptions_total counter")
    lines += [f'vllm:num_preemptions_total{{engine="{e}",model_name="m"}} {float(v)}' for e, v in values.items()]
    if hist:
        lines.append("# TYPE vllm:request_num_preemptions histogram")
        for e, (count, total) in hist.items():
            lab = f'engine="{e}",model_name="m"'
            lines += [
                f'vllm:request_num_preemptions_bucket{{{lab},le="+Inf"}} {float(count)}',
                f"vllm:request_num_preemptions_count{{{lab}}} {float(count)}",
                f"vllm:request_num_preemptions_sum{{{lab}}} {float(total)}",
            ]
    return write_lines(d / f"metrics-{int(at(sec).timestamp())}.prom", lines)


STATS = (
    "Engine {e}: Avg prompt throughput: 100.0 tokens/s, Avg generation throughput: 200.0 tokens/s, Running: 4 "
    "reqs, Waiting: 2 reqs, {p}GPU KV cache usage: 99.0%, Prefix cache hit rate: 0.0%"
)
FAMILIES = {
    # V1 header with a process prefix
    "apiserver": lambda sec, text: f"(APIServer pid=7) INFO {at(sec):%m-%d %H:%M:%S} [loggers.py:335] {text}",
    # docker compose prefix
    "compose": lambda sec, text: f"vllm-1  | INFO {at(sec):%m-%d %H:%M:%S} [loggers.py:335] {text}",
    # kubectl logs --timestamps
    "kubectl": lambda sec, text: (
        f"{at(sec):%Y-%m-%dT%H:%M:%S}.000123456Z INFO {at(sec):%m-%d %H:%M:%S} [loggers.py:335] {text}"
    ),
    # JSON lines (python-json-logger)
    "json": lambda sec, text: json.dumps(
        {
            "asctime": f"{at(sec):%Y-%m-%d %H:%M:%S},000",
            "levelname": "INFO",
            "name": "vllm.v1.metrics.loggers",
            "message": text,
        }
    ),
}


def stats_log(path: Path, lines: list[tuple[float, int | None]], family: str = "apiserver", engine: str = "000"):
    fmt = FAMILIES[family]
    return write_lines(
        path, [fmt(sec, STATS.format(e=engine, p=f"Preemptions: {n}, " if n is not None else "")) for sec, n in lines]
    )


def run(paths: list[Path]):
    return analyze([str(p) for p in paths], AnalyzeOptions(tz="UTC", year=2026))


def kinds(a) -> dict[str, int]:
    return dict(a.events.group_by("kind").len().iter_rows())


# --------------------------------------------------------------------------- the shape of issue 31


def test_three_records_and_scrapes_reading_0_0_3_are_three_events(tmp_path):
    """The records fall between the first two scrapes; the counter moves only at the third (vLLM
    counts them when the requests are reported again). Before: 3 records + 3 counter events = 6."""
    recs = records([(10.2, "a"), (10.5, "b"), (10.8, "c")], start=5.0, finish=30.0)
    write_records(tmp_path / "records-1.jsonl", recs)
    for sec, v in ((10.0, 0), (11.0, 0), (12.0, 3)):
        scrape_file(tmp_path, sec, {"0": v})
    a = run([tmp_path])
    assert kinds(a) == {"record": 3}, (kinds(a), a.notes)
    rec = a.counters["reconciliation"]
    assert rec["total"] == 3 and rec["quality"] == "exact", rec
    assert rec["disagreements"] == [], rec["disagreements"]
    counter = next(s for s in rec["sources"] if s["source"].startswith("prometheus counter"))
    (check,) = counter["vs_records"]
    assert (check["counted"], check["matched"], check["agrees"]) == (3, 3, True)
    # the verdicts, the recompute and the thrash come from the records
    assert set(a.verdicts.get_column("gate")) == {"G1-kv-space"}
    assert a.findings.recompute["tokens"] == 3 * 230 and a.findings.recompute["preemptions_exact"] == 3


def test_a_count_that_leads_the_records_beyond_the_slack_is_a_counter_only_event(tmp_path):
    """The counter reads 5 while 3 records exist (the recorder lost two): never below vLLM's own count
    (issue 38): 3 record events and 2 events without a record (counter-only, ``~c``) in the interval
    where the counter rose, and the disagreement said."""
    recs = records([(10.2, "a"), (10.5, "b"), (10.8, "c")], start=5.0, finish=40.0)
    write_records(tmp_path / "records-1.jsonl", recs)
    for sec, v in ((10.0, 0), (12.0, 3), (20.0, 5), (45.0, 5)):
        scrape_file(tmp_path, sec, {"0": v})
    a = run([tmp_path])
    assert kinds(a) == {"record": 3, "interval": 2}
    co = a.events.filter(pl.col("kind") == "interval")
    assert all(e.endswith(("~c1", "~c2")) for e in co.get_column("event_id"))
    assert co.get_column("time").min() > at(12) and co.get_column("time").max() <= at(20)
    rec = a.counters["reconciliation"]
    assert rec["total"] == 5 and rec["counter_only"] == {"0": 2} and rec["quality"] == "exact"
    assert any("2 of its 5 counted preemption(s) have no preempt record" in d for d in rec["disagreements"]), rec
    assert any("counter-only" in n for n in a.notes)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_records_and_preemptions_lines_that_lag_them(tmp_path, family):
    """PREEMPTLOG_FIX_STATS: 'Preemptions: N' counts a preemption in the interval where the request
    is reported again, here the interval after the records (in four header families)."""
    recs = records([(4.2, "a"), (9.5, "b"), (9.8, "c")], start=1.0, finish=25.0)
    write_records(tmp_path / "records-1.jsonl", recs)
    stats_log(tmp_path / "vllm.log", [(0, None), (10, 1), (20, 2), (30, None)], family)
    a = run([tmp_path])
    assert kinds(a) == {"record": 3}, (kinds(a), a.notes)
    rec = a.counters["reconciliation"]
    assert rec["quality"] == "exact" and rec["disagreements"] == [], rec
    fields = next(s for s in rec["sources"] if s["source"].startswith("log 'Preemptions"))
    assert fields["count"] == 3 and fields["vs_records"][0]["agrees"]
    # the note says where the count comes from: the records, not the log or the counter
    assert not any("comes from the Prometheus counter" in n for n in a.notes)


def test_records_with_both_scrapes_and_preemptions_lines(tmp_path):
    recs = records([(4.2, "a"), (9.5, "b"), (9.8, "c"), (14.0, "a")], start=1.0, finish=28.0)
    write_records(tmp_path / "records-1.jsonl", recs)
    stats_log(tmp_path / "vllm.log", [(0, None), (10, 1), (20, 3), (30, None)])
    for sec, v in ((2.0, 0), (8.0, 1), (12.0, 1), (18.0, 4), (29.0, 4)):
        scrape_file(tmp_path, sec, {"0": v}, hist={"0": (0 if sec < 28 else 3, 0 if sec < 28 else 4)})
    a = run([tmp_path])
    assert kinds(a) == {"record": 4}, (kinds(a), a.notes)
    rec = a.counters["reconciliation"]
    assert rec["disagreements"] == [], rec["disagreements"]
    assert rec["quality"] == "exact"
    by = {s["source"].split(" (")[0]: s for s in rec["sources"]}
    assert by["prometheus counter"]["vs_records"][0]["agrees"]
    assert by["log 'Preemptions: N' stats fields"]["vs_records"][0]["agrees"]
    assert by["prometheus histogram"]["vs_records"]["agrees"]
    th = a.findings.thrash
    assert th["requests_preempted_more_than_once"] == 1  # "a", twice (the records, not the counter)


def test_records_that_stop_before_the_counter(tmp_path):
    """The recorder's last record is at 20 s; the counter rises by 4 after 30 s: the records are
    the events up to where they stop, the counter's 4 later ones are events of the counter, and the
    end of the evidence is said."""
    recs = records([(10.2, "a"), (10.5, "b")], start=5.0)
    write_records(tmp_path / "records-1.jsonl", recs)
    for sec, v in ((8.0, 0), (12.0, 2), (30.0, 2), (40.0, 6)):
        scrape_file(tmp_path, sec, {"0": v})
    a = run([tmp_path])
    assert kinds(a) == {"record": 2, "interval": 4}, (kinds(a), a.notes)
    later = a.events.filter(pl.col("kind") == "interval")
    assert later.get_column("time").min() > at(30)
    rec = a.counters["reconciliation"]
    assert any("records stop at" in d for d in rec["disagreements"]), rec["disagreements"]
    assert any("after its last record" in n for n in a.notes), a.notes


def test_records_not_counted_although_their_requests_finished_are_beyond_the_lag(tmp_path):
    recs = records([(10.2, "a"), (10.5, "b"), (10.8, "c")], start=5.0, finish=15.0)
    write_records(tmp_path / "records-1.jsonl", recs)
    for sec, v in ((8.0, 0), (20.0, 1), (30.0, 1)):
        scrape_file(tmp_path, sec, {"0": v})
    a = run([tmp_path])
    assert kinds(a) == {"record": 3}
    rec = a.counters["reconciliation"]
    assert any("2 preempt record(s) up to its last count" in d for d in rec["disagreements"]), rec


def test_a_slow_scrape_stamped_at_its_answer_counts_records_made_while_it_waited(tmp_path):
    """A loaded server answered 8 s late: the page (made while the request waited) counted the
    preemptions recorded at 14-16 s; stamped when the answer arrived (20 s), the count holds them:
    three records, no counter-only event."""
    recs = records([(14.0, "a"), (15.0, "b"), (16.0, "c")], start=5.0, finish=40.0)
    write_records(tmp_path / "records-1.jsonl", recs)
    scrape_file(tmp_path, 10.0, {"0": 0}, answer_s=0.05)
    scrape_file(tmp_path, 20.0, {"0": 3}, answer_s=8.0)
    scrape_file(tmp_path, 45.0, {"0": 3}, answer_s=0.05)
    a = run([tmp_path])
    assert kinds(a) == {"record": 3}, (kinds(a), a.notes)
    rec = a.counters["reconciliation"]
    assert rec["total"] == 3 and rec["disagreements"] == [], rec


@pytest.mark.parametrize(("answer_s", "beyond"), [(None, 2), (0.05, 2), (8.0, 0)])
def test_requests_that_finished_while_the_last_scrape_waited_are_within_the_lag(tmp_path, answer_s, beyond):
    """The last scrape was sent at 12 s and answered at 20 s, its page made at once and counting 1 of
    3 records; b and c finished at 15 s, after the page. Only a scrape that says how long its answer
    took (capture's mark) shows that they may have finished after it was made: within the lag, not a
    disagreement. Without the mark (or answered at once) they finished 5 s before it: beyond the lag."""
    recs = records([(10.2, "a"), (10.5, "b"), (10.8, "c")], start=5.0, finish=15.0)
    write_records(tmp_path / "records-1.jsonl", recs)
    scrape_file(tmp_path, 8.0, {"0": 0}, answer_s=None if answer_s is None else 0.05)
    scrape_file(tmp_path, 20.0, {"0": 1}, answer_s=answer_s)
    a = run([tmp_path])
    assert kinds(a) == {"record": 3}
    rec = a.counters["reconciliation"]
    (check,) = next(s for s in rec["sources"] if s["source"].startswith("prometheus counter"))["vs_records"]
    assert (check["records_not_yet_counted"], check["beyond_the_lag"]) == (2, beyond), check
    assert bool(rec["disagreements"]) == bool(beyond), rec["disagreements"]


def test_records_not_yet_counted_while_their_requests_wait_are_within_the_lag(tmp_path):
    recs = records([(10.2, "a"), (10.5, "b"), (10.8, "c")], start=5.0)  # no finish: still waiting
    write_records(tmp_path / "records-1.jsonl", recs)
    for sec, v in ((8.0, 0), (20.0, 1), (30.0, 1)):
        scrape_file(tmp_path, sec, {"0": v})
    a = run([tmp_path])
    rec = a.counters["reconciliation"]
    assert rec["disagreements"] == [] and rec["quality"] == "exact", rec
    (check,) = next(s for s in rec["sources"] if s["source"].startswith("prometheus counter"))["vs_records"]
    assert (check["records_not_yet_counted"], check["of_which_within_the_lag"]) == (2, 2)


def test_two_engines_each_with_its_records_and_its_counter(tmp_path):
    r0 = records([(10.2, "a0"), (10.6, "b0")], engine="0", start=5.0, finish=30.0)
    r1 = records([(11.0, "a1"), (11.5, "b1"), (11.9, "c1")], engine="1", start=5.0, finish=30.0)
    write_records(tmp_path / "records-10.jsonl", r0)
    write_records(tmp_path / "records-11.jsonl", r1)
    for sec, v0, v1 in ((9.0, 0, 0), (11.0, 0, 0), (13.0, 2, 1), (20.0, 2, 3), (35.0, 2, 3)):
        scrape_file(tmp_path, sec, {"0": v0, "1": v1})
    a = run([tmp_path])
    assert kinds(a) == {"record": 5}
    per = dict(a.events.group_by("engine").len().iter_rows())
    assert per == {"0": 2, "1": 3}
    rec = a.counters["reconciliation"]
    assert rec["disagreements"] == [] and rec["quality"] == "exact", rec
    checks = next(s for s in rec["sources"] if s["source"].startswith("prometheus counter"))["vs_records"]
    assert sorted((c["engine"], c["counted"], c["matched"]) for c in checks) == [("0", 2, 2), ("1", 3, 3)]


def test_an_engine_without_records_keeps_its_counter_events(tmp_path):
    write_records(tmp_path / "records-10.jsonl", records([(10.2, "a0")], engine="0", start=5.0, finish=30.0))
    for sec, v0, v1 in ((9.0, 0, 0), (13.0, 1, 4), (35.0, 1, 4)):
        scrape_file(tmp_path, sec, {"0": v0, "1": v1})
    a = run([tmp_path])
    per = {(e, k): n for e, k, n in a.events.group_by("engine", "kind").len().iter_rows()}
    assert per == {("0", "record"): 1, ("1", "interval"): 4}


# --------------------------------------------------------------------------- the matching itself


def test_matching_takes_the_oldest_records_and_never_a_later_one():
    times = pl.Series([at(x) for x in (1.0, 2.0, 3.0, 50.0)])
    ev = pl.DataFrame(
        {
            "event_id": ["p:1~i1", "p:2~i1", "p:2~i2", "p:3~i1"],
            "kind": ["interval"] * 4,
            "engine": ["0"] * 4,
            "source": ["p", "p", "p", "p"],
            "line": [1, 2, 2, 3],
            "interval_start": [at(0), at(10), at(10), at(20)],
            "interval_end": [at(10), at(20), at(20), at(30)],
            "time": [at(10), at(15), at(20), at(30)],
        },
        schema_overrides={"line": pl.UInt32},
    )
    g = match(count_groups(ev), times)
    # (0,10] takes 1 of 3 available; (10,20] takes the other 2; (20,30] has nothing left (50 s is later)
    assert g.select("n", "avail", "matched", "unmatched").rows() == [(1, 3, 1, 0), (2, 3, 2, 0), (1, 3, 0, 1)]


# --------------------------------------------------------------------------- requests from the records


def _many_requests(tmp_path: Path, n: int = 300, preempted: int = 150) -> Path:
    """``n`` arrival / scheduled / finish records (prompt 100-399, 50-149 output tokens), the first
    ``preempted`` of them preempted once."""
    recs = records([(10.0 + 0.01 * i, f"r{i:03d}") for i in range(preempted)], start=1.0, finish=40.0)
    extra = []
    for i in range(preempted, n):
        t = at(1.0 + 0.01 * i).timestamp()
        extra += [
            {
                "type": "request",
                "ts": t,
                "step": 1,
                "engine": "0",
                "request_id": f"r{i:03d}",
                "phase": "arrival",
                "prompt_tokens": 100 + i,
                "max_tokens": 150,
                "v": 2,
            },
            {
                "type": "request",
                "ts": t + 0.001,
                "step": 2,
                "engine": "0",
                "request_id": f"r{i:03d}",
                "phase": "scheduled",
                "v": 2,
            },
            {
                "type": "request",
                "ts": at(40.0 + 0.01 * i).timestamp(),
                "step": 99,
                "engine": "0",
                "request_id": f"r{i:03d}",
                "phase": "finish",
                "output_tokens": 50 + i % 100,
                "finish_reason": "length",
                "num_preemptions": 0,
                "v": 2,
            },
        ]
    d = tmp_path / "bundle"
    d.mkdir()
    write_records(d / "records-1.jsonl", sorted(recs + extra, key=lambda r: r["ts"]))
    # the server log: stats lines and the scraper's own access lines (not requests)
    access = [f'INFO:     127.0.0.1:{40000 + k} - "GET /metrics HTTP/1.1" 200 OK' for k in range(40)]
    stats = [FAMILIES["apiserver"](sec, STATS.format(e="000", p="")) for sec in (0, 10, 20, 30, 40)]
    write_lines(d / "vllm.log", stats[:2] + access + stats[2:])
    return d


def test_requests_and_the_rate_come_from_the_arrival_records(tmp_path):
    d = _many_requests(tmp_path)
    a = run([d])
    s = a.summary()
    assert s["requests_received"] == 300 and s["preemption_rate"] == pytest.approx(0.5)
    assert s["events"] == 150
    assert a.requests.height == 0  # the GET /metrics access lines are not request lines
    from preemptlog.engines.vllm.fixes import measure

    m = measure(a)
    assert m["prompt_p95"].known and "arrival records" in m["prompt_n"].how
    assert m["peak_rps"].known and "300 arrival records" in m["peak_rps"].how
    assert m["avg_output_len"].known and "finish records" in m["avg_output_len"].how
    assert m["p95_latency_s"].known and "arrival -> finish" in m["p95_latency_s"].how


def test_the_rate_gate_works_on_a_records_bundle(tmp_path):
    import subprocess
    import sys

    d = _many_requests(tmp_path)

    def gate(cond: str) -> int:
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "preemptlog",
                "analyze",
                str(d),
                "--tz",
                "UTC",
                "-q",
                "-f",
                "json",
                "--fail-on",
                cond,
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert "Traceback" not in p.stderr, p.stderr
        return p.returncode

    assert gate("rate>0.4") == 4  # 150 / 300 = 0.5: the gate holds (FAIL_ON)
    assert gate("rate>0.6") == 0


# --------------------------------------------------------------------------- the capture format


def test_scrape_times_recorded_by_preemptlog_capture_are_not_assumptions(tmp_path):
    from preemptlog.capture.scrape import CAPTURE_MARK

    body = ['vllm:num_preemptions_total{engine="0",model_name="m"} 0.0']
    for k in range(5):
        write_lines(
            tmp_path / f"metrics-{1796119200 + k}.prom",
            [f"# scrape {at(k).isoformat(timespec='milliseconds')}", CAPTURE_MARK, *body],
        )
    a = run([tmp_path])
    assert not [x for x in a.assumptions if x.topic == "scrape time"], a.assumptions
    assert a.frames["prom_samples"].get_column("time").to_list() == [at(k) for k in range(5)]


def test_assumptions_of_one_kind_are_one_line_with_a_count(tmp_path):
    body = ['vllm:num_preemptions_total{engine="0",model_name="m"} 0.0']
    for k in range(30):  # separators without the capture mark: the time is read, and assumed
        write_lines(tmp_path / f"m{k:02d}.prom", [f"# scrape {at(k).isoformat()}", *body])
    s = run([tmp_path]).summary()
    scrape = [x for x in s["assumptions"] if x["topic"] == "scrape time"]
    assert len(scrape) == 1 and scrape[0]["count"] == 30, scrape
    assert scrape[0]["scope"].startswith("30 files: ")


# --------------------------------------------------------------------------- an engine that died


KILL = (
    "(APIServer pid=7) WARNING {t} [utils.py:653] [shutdown] Process manager: force killing remaining process "
    "EngineCore pid 10146"
)
DEAD = (
    "(APIServer pid=7) ERROR {t} [serving.py:412] vllm.v1.engine.exceptions.EngineDeadError: EngineCore "
    "encountered an issue. See stack trace (above) for the root cause."
)
RUN = (
    "(APIServer pid=7) INFO {t} [loggers.py:335] Engine 000: Avg prompt throughput: {p} tokens/s, Avg generation "
    "throughput: {p} tokens/s, Running: {r} reqs, Waiting: {w} reqs, GPU KV cache usage: 84.1%, Prefix cache hit "
    "rate: 0.0%"
)


def _t(sec: float) -> str:
    return f"{at(sec):%m-%d %H:%M:%S}"


def test_an_engine_killed_mid_incident_is_said_with_where_its_evidence_stops(tmp_path):
    write_records(tmp_path / "records-1.jsonl", records([(10.2, "a"), (10.5, "b")], start=5.0))
    write_lines(
        tmp_path / "vllm.log",
        [
            RUN.format(t=_t(10), p="600.0", r=4, w=44),
            KILL.format(t=_t(12)),
            DEAD.format(t=_t(12)),
            RUN.format(t=_t(20), p="658.0", r=4, w=44),  # stale: the API server's last view of a dead engine
            RUN.format(t=_t(30), p="0.0", r=4, w=44),
        ],
    )
    a = run([tmp_path])
    died = [w for w in a.warnings if "died mid-incident" in w]
    assert len(died) == 1, a.warnings
    assert "with 4 running and 44 waiting" in died[0] and "2 stats line(s) after it are stale" in died[0]
    assert "vllm.log:2" in died[0]  # where it says so
    assert any("block-table records stop at" in n and "died at" in n for n in a.notes), a.notes
    assert kinds(a) == {"record": 2}


@pytest.mark.parametrize("after", [False, True])
def test_an_idle_server_stopped_is_a_note_not_a_warning(tmp_path, after):
    lines = [RUN.format(t=_t(10), p="0.0", r=0, w=0), KILL.format(t=_t(12))]
    if after:  # the API server's last line repeats an idle engine
        lines.append(RUN.format(t=_t(13), p="0.0", r=0, w=0))
    write_lines(tmp_path / "vllm.log", lines)
    a = run([tmp_path / "vllm.log"])
    assert not [w for w in a.warnings if "died" in w], a.warnings
    assert any("the engine was stopped at" in n and "idle" in n for n in a.notes), a.notes


@pytest.mark.parametrize(
    ("lines", "cites"),
    [
        # the stats line before the kill shows no request at that instant but tokens in its interval
        (
            [RUN.format(t=_t(10), p="1310.3", r=0, w=0), KILL.format(t=_t(12))],
            ("while serving 2620.6 tokens/s (", "vllm.log:1)"),  # prompt + generation
        ),
        # the Rust frontend's stats line (VLLM_USE_RUST_FRONTEND=1): its own words for the same facts
        (
            [
                f"(RustFrontend pid=7) INFO {_t(10)} [log_stats.rs:88] Avg prompt tput: 1310.3 toks/s, Avg generation tput: "
                "0.0 toks/s, Reqs Running: 0, Waiting: 0, GPU KV cache used: 99.0%, Prefix cache hit rate: 0.0%",
                KILL.format(t=_t(12)),
            ],
            ("while serving 1310.3 tokens/s (", "vllm.log:1)"),
        ),
        # idle by the line before; the line after repeats the engine's last report: 6 running, 25 waiting
        (
            [
                RUN.format(t=_t(10), p="0.0", r=0, w=0),
                KILL.format(t=_t(12)),
                RUN.format(t=_t(13), p="1274.3", r=6, w=25),
            ],
            (
                "with 6 running and 25 waiting request(s) (",
                "vllm.log:3, the engine's last report, repeated after its death)",
            ),
        ),
    ],
)
def test_a_busy_engine_killed_is_a_warning_whatever_instant_the_last_line_caught(tmp_path, lines, cites):
    """A real `vllm serve` killed under load on a busy runner: its last stats line before the kill said
    Running 0, Waiting 0 (an instant between two bursts, 1,310 prompt tokens/s in its interval) and the
    line after it, the engine's last report, 6 running and 25 waiting; it was called idle."""
    write_lines(tmp_path / "vllm.log", lines)
    a = run([tmp_path / "vllm.log"])
    died = [w for w in a.warnings if "died mid-incident" in w]
    assert len(died) == 1 and all(c in died[0] for c in cites), a.warnings
    assert not any("the engine was stopped at" in n for n in a.notes), a.notes
