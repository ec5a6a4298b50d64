"""preemptlog explain EVENT_ID PATHS...: one event's window from every source."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from preemptlog.cli import app

from ..conftest import FIXTURES

runner = CliRunner()
JOINED = str(FIXTURES / "joined")
EVENT = "joined/vllm.log:17"


def test_explain_json():
    r = runner.invoke(app, ["explain", EVENT, JOINED, "--tz", "UTC", "--year", "2026", "-f", "json", "--all"])
    assert r.exit_code == 5, r.stderr  # partial: the block-table file has a bad line
    doc = json.loads(r.stdout)
    assert doc["event"]["event_id"] == EVENT and doc["event"]["request_id"] == "42"
    ev = {e["name"]: (e["value"], e["src"]) for e in doc["evidence"]}
    assert ev["pool_largest_free_run"] == (4, "joined/blocktable.jsonl:7")
    assert ev["dmon_fb_jump_mb"] == (6000.0, "joined/dmon.txt:8")
    win = doc["window"]
    times = [w["time"] for w in win]
    assert times == sorted(times)
    assert {w["kind"] for w in win} == {"vllm-log", "blocktable", "kvevents", "dmon"}
    assert win[0]["time"] == "2026-11-30T05:10:30+00:00"
    assert win[-1]["time"] == "2026-11-30T05:10:40+00:00"
    assert any(w["src"] == EVENT and w["offset_s"] == 0.0 for w in win)
    assert any(w["what"] == "event preempt" and "reason=no free blocks" in w["value"] for w in win)
    assert any(w["kind"] == "dmon" and w["what"] == "gpu 1" and "fb_mb=41000.0" in w["value"] for w in win)


def test_explain_ndjson_and_window_options():
    r = runner.invoke(
        app,
        [
            "explain",
            EVENT,
            JOINED,
            "--tz",
            "UTC",
            "--year",
            "2026",
            "-f",
            "ndjson",
            "--before",
            "1",
            "--after",
            "0",
            "--offset",
            "dmon=+60s",
        ],
    )
    rows = [json.loads(x) for x in r.stdout.splitlines()]
    assert rows and all(-1.0 <= x["offset_s"] <= 0.0 for x in rows)
    assert not any(x["kind"] == "dmon" for x in rows)


def test_explain_table_keeps_log_text_inert(tmp_path):
    p = tmp_path / "v.log"
    p.write_text(
        "INFO 11-30 05:10:30 [x.py:1] Received request [bold red]boom[/] \x1b[31mred\x1b[0m: params: "
        "SamplingParams(max_tokens=5), lora_request: None.\n"
        "WARNING 11-30 05:10:38 [scheduler.py:10] Req-1 PREEMPTED [link=http://x]click[/link] \x1b]0;t\x07\n"
    )
    r = runner.invoke(app, ["explain", f"{p}:2", str(p), "--tz", "UTC", "--year", "2026", "-f", "table"])
    assert r.exit_code == 0, r.stderr
    assert "[link=http://x]click[/link]" in r.stdout
    assert "\x1b" not in r.stdout and "\x07" not in r.stdout


def test_unknown_event_id_is_a_usage_error():
    r = runner.invoke(app, ["explain", "nope:1", JOINED, "--tz", "UTC", "--year", "2026"])
    assert r.exit_code == 2
    assert "no event 'nope:1'" in r.stderr and "preemptlog analyze" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_bad_offset_is_a_usage_error():
    r = runner.invoke(app, ["explain", EVENT, JOINED, "--offset", "dmon=soon"])
    assert r.exit_code == 2 and "not a duration" in r.stderr


def test_analyze_ndjson_has_evidence_columns():
    r = runner.invoke(
        app,
        [
            "analyze",
            JOINED,
            "--tz",
            "UTC",
            "--year",
            "2026",
            "-f",
            "ndjson",
            "-q",
            "--wide",
            "--before",
            "10",
            "--after",
            "2",
            "--lookback-steps",
            "3",
        ],
    )
    rows = [json.loads(x) for x in r.stdout.splitlines()]
    assert [x["event_id"] for x in rows] == [EVENT, "joined/vllm.log:20"]
    assert list(rows[0])[0] == "event_id" and rows[0]["sched_free_blocks"] == 9
    assert rows[0]["prefix_conflict_with"] == "9"
