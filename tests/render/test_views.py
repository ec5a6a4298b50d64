"""What an on-call engineer reads: the headline, "not visible", fixes as data, compact views,
filters, explain's scope and ids, the table on a real pseudo-terminal, the pager, progress, ASCII.

Inputs are written by hand in several vLLM header families; the demo bundle is the big case.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from preemptlog.cli import app
from preemptlog.errors import ExitCode
from preemptlog.render.view import COMPACT_COLUMNS

from ..conftest import FIXTURES, ROOT, write_lines
from ..support.ptyrun import run_on_pty

runner = CliRunner()
DEMO = str(FIXTURES / "guide-demo")
V0 = str(FIXTURES / "golden" / "v0-unbracketed-0.6.log")


def invoke(*args, env=None):
    return runner.invoke(app, list(args), env=env)


# --------------------------------------------------------------------------- stock V1 logs

STOCK_V1 = {
    # vLLM 0.11+ (APIServer pid=N) prefix, bracketed file
    "apiserver.log": [
        "(APIServer pid=5) INFO 11-30 05:10:00 [api_server.py:1900] vLLM API server version 0.11.1",
        "(APIServer pid=5) INFO 11-30 05:10:10 [loggers.py:273] Engine 000: Avg prompt throughput: 10.0 tokens/s, "
        "Avg generation throughput: 5.0 tokens/s, Running: 3 reqs, Waiting: 2 reqs, GPU KV cache usage: 99.0%, "
        "Prefix cache hit rate: 0.0%",
    ],
    # docker compose prefix in front of the same
    "compose.log": [
        "vllm-1  | INFO 11-30 05:10:00 [api_server.py:1900] vLLM API server version 0.12.0",
        "vllm-1  | INFO 11-30 05:10:10 [loggers.py:273] Engine 000: Avg prompt throughput: 1.0 tokens/s, Avg "
        "generation throughput: 5.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 9.0%, "
        "Prefix cache hit rate: 0.0%",
    ],
    # kubectl --timestamps RFC 3339 prefix
    "kubectl.log": [
        "2026-11-30T05:10:00.123456Z INFO 11-30 05:10:00 [api_server.py:1900] vLLM API server version 0.14.0",
        "2026-11-30T05:10:10.123456Z INFO 11-30 05:10:10 [loggers.py:273] Engine 000: Avg prompt throughput: 1.0 "
        "tokens/s, Avg generation throughput: 5.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: "
        "9.0%, Prefix cache hit rate: 0.0%",
    ],
}


@pytest.mark.parametrize("name", sorted(STOCK_V1))
def test_stock_v1_count_is_not_visible_and_fail_on_unknown(tmp_path, name):
    p = write_lines(tmp_path / name, STOCK_V1[name])
    r = invoke("analyze", str(p), "--year", "2026", "--tz", "UTC", "-f", "json", "--fail-on", "unknown")
    assert r.exit_code == ExitCode.NOT_VISIBLE, r.stderr
    doc = json.loads(r.stdout)
    assert doc["summary"]["count_visible"] is False and doc["summary"]["events"] is None
    assert doc["summary"]["not_visible"]["remedy"] and "/metrics" in doc["summary"]["not_visible"]["remedy"]
    assert doc["summary"]["headline"].startswith("Preemptions: not visible (")
    assert r.stderr.startswith("Preemptions: not visible (")
    assert "0 preemption" not in r.stderr
    assert "--fail-on unknown: the preemption count is not visible" in r.stderr
    # --fail-on any cannot hold: said, even with -q, and the exit code stays 0
    q = invoke("analyze", str(p), "--year", "2026", "-q", "-f", "ndjson", "--fail-on", "any")
    assert q.exit_code == ExitCode.OK
    assert "cannot hold" in q.stderr and "--fail-on unknown" in q.stderr
    assert len(q.stderr.strip().splitlines()) == 1


def test_fail_on_unknown_holds_not_when_the_log_counts():
    r = invoke("analyze", V0, "--year", "2025", "-q", "-f", "ndjson", "--fail-on", "unknown")
    assert r.exit_code == ExitCode.OK and r.stderr == ""
    assert invoke("analyze", V0, "--year", "2025", "-q", "--fail-on", "unknown>3").exit_code == ExitCode.USAGE


def test_not_visible_in_the_table(tmp_path):
    p = write_lines(tmp_path / "v.log", STOCK_V1["apiserver.log"])
    r = invoke("analyze", str(p), "--year", "2026", "--tz", "UTC", "-f", "table")
    assert r.exit_code == 0
    assert "no events to list" in r.stdout and "not visible" not in r.stdout  # said once, in the summary
    assert r.stderr.count("not visible") == 1
    assert "/metrics" in r.stderr and "/metrics" not in r.stdout  # what to add: said once, in the summary


# --------------------------------------------------------------------------- headline and fixes


def _env():
    env = dict(os.environ)
    env.pop("PREEMPTLOG_FORMAT", None)
    env["NO_COLOR"] = "1"
    return env


def test_headline_first_on_a_non_terminal_stderr():
    out = subprocess.run(
        [sys.executable, "-m", "preemptlog", "analyze", DEMO, "--tz", "UTC"],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stderr.splitlines()
    assert all(len(ln) <= 80 for ln in lines)  # wrapped to 80 columns off a terminal, at word boundaries
    fix = next(i for i, ln in enumerate(lines) if ln.startswith("Top fix: "))
    assert " ".join(ln.strip() for ln in lines[:fix]) == (
        "at least 226 preemptions in 27 s (1.07 per received request): G1 KV space 160 (fragmentation 156, capacity 4), "
        "G2 batch variance 44, G4 prefix conflict 21, G3 queue overflow 1"  # the gates spelled out
    )
    assert all(ln.startswith("  ") for ln in lines[1:fix])  # a hanging indent
    # the cost of the incident (findings) on a line of its own, after the change to make
    text = " ".join(ln.strip() for ln in lines)
    # prefix caching on (the engine config line) and no resume records: what the victims lost, not what
    # was recomputed (issue 38, item 11)
    assert (
        "cost: at least 135 k tokens lost to preemption (prefix caching was on, no resume records: how many "
        "recomputed is not known); 16 requests preempted 5+ times" in text
    )
    assert text.index("Top fix:") < text.index("cost:")
    assert "Timeline" not in out.stderr  # the chart is for terminals


def test_fixes_are_ranked_data_without_no_ops(tmp_path):
    r = invoke("analyze", DEMO, "--tz", "UTC", "-f", "json", "-q")
    s = json.loads(r.stdout)["summary"]
    fixes = s["fixes"]
    assert [x["rank"] for x in fixes] == list(range(1, len(fixes) + 1))
    # verified changes first, then by events; a replay that does not reproduce the incident and shows no
    # gain says nothing for or against a change: its figures are not the change's words (issue 39)
    key = [(x["status"] != "verified", -x["events_addressed"]) for x in fixes]
    assert key == sorted(key) and fixes[0]["events_addressed"] > 0
    for x in fixes:
        rp = x.get("replay") or {}
        if rp.get("gain") is False:
            assert not x.get("verified") and "replay" not in str(x.get("expected_effect")), x
    for x in fixes:
        assert {"option", "current", "suggested", "inputs", "expected_effect", "rank", "status"} <= set(x)
        assert x["suggested"] is not None  # a change to make; "cannot compute" is a to-know-more item
        assert x["current"] is None or str(x["current"]) != str(x["suggested"])
    assert s["to_know_more"] and all({"add", "settles"} <= set(x) for x in s["to_know_more"])
    ids = {x["id"] for x in fixes}
    dropped = {x["id"]: x["why"] for x in s["fixes_dropped"]}
    # The demo runs block_size 16 and the formula says 16: a no-op, dropped with why.
    assert "block_size" not in ids and "value in force" in dropped["block_size"]
    # speculative_config=None in the config line: the speculative budget has no premise.
    assert "spec_budget" not in ids and "off" in dropped["spec_budget"]
    # inputs cite where the config values come from. The demo's records hold no request lifecycle
    # (arrival / finish): the peak demand is not measured, so no lever is computed from it and the
    # guide's formula stands (one suggestion per option either way)
    kv = next(x for x in fixes if x["id"] == "kv_room")
    assert any("guide-demo/vllm.log:" in i for i in kv["inputs"])
    assert "capacity_gpu_memory_utilization" not in ids
    assert len([x for x in fixes if x["option"] == "--gpu-memory-utilization"]) == 1
    # per event: the same fixes as data, and as prose
    wide = invoke("analyze", DEMO, "--tz", "UTC", "-f", "ndjson", "-q", "--wide")
    row = json.loads(wide.stdout.splitlines()[0])
    assert row["fixes"] and row["fixes"][0]["rank"] >= 1 and row["fixes"][0]["option"]
    assert len(row["recommendations"]) == len(row["fixes"])
    assert not any("block_size 16 (now 16)" in x for x in row["recommendations"])


def test_spec_budget_kept_when_speculative_decoding_is_on(tmp_path):
    from preemptlog.engines.vllm.fixes import Measured, structured

    def m(**kw):
        base = {
            k: Measured(None, f"{k} unknown")
            for k in (
                "block_size",
                "max_num_seqs",
                "max_num_batched_tokens",
                "gpu_memory_utilization",
                "peak_rps",
                "p95_latency_s",
                "avg_output_len",
            )
        }
        base["max_model_len"] = Measured(4096, "max_model_len seen (v.log:2)")
        base.update(kw)
        return base

    on, _ = structured(m(speculative=Measured(True, "speculative_config {...} (v.log:2)")))
    off, dropped = structured(m(speculative=Measured(False, "speculative_config None (v.log:2)")))
    assert any(x["id"] == "spec_budget" and x["suggested"] == 4404 for x in on)
    assert not any(x["id"] == "spec_budget" for x in off) and any(d["id"] == "spec_budget" for d in dropped)
    same, dropped = structured(
        m(
            gpu_memory_utilization=Measured(0.95, "gpu_memory_utilization seen (v.log:2)"),
            speculative=Measured(False, "x"),
        )
    )
    assert not any(x["id"] == "kv_room" for x in same) and any(d["id"] == "kv_room" for d in dropped)


def test_kv_room_cites_where_vllm_gives_the_advice():
    """V0 says it in its preemption warning; V1 logs no preemption line, its docs say it."""
    from preemptlog.engines.vllm.fixes import Measured, structured

    names = ("block_size", "max_num_seqs", "max_num_batched_tokens", "peak_rps", "p95_latency_s", "avg_output_len")
    m = {k: Measured(None, f"{k} unknown") for k in names}
    m["max_model_len"] = Measured(4096, "max_model_len seen (v.log:2)")
    m["speculative"] = Measured(False, "speculative_config None (v.log:2)")
    m["gpu_memory_utilization"] = Measured(0.85, "gpu_memory_utilization seen (v.log:2)")
    basis = {}
    for engine in ("V0", "V1", None):
        fixes, _ = structured(dict(m), engine)
        kv = next(x for x in fixes if x["id"] == "kv_room")
        assert kv["suggested"] == 0.9
        basis[engine] = kv["basis"]
    assert "V0 preemption warning" in basis["V0"] and "tensor_parallel_size" in basis["V0"]
    assert "Optimization and Tuning" in basis["V1"] and "warning" not in basis["V1"]
    assert basis[None] == basis["V1"]


def test_quiet_keeps_the_warnings_behind_exit_5(tmp_path):
    import gzip

    data = gzip.compress(Path(V0).read_bytes() * 50)
    p = tmp_path / "vllm.log.gz"
    p.write_bytes(data[: len(data) // 2])
    r = invoke("analyze", str(p), "--year", "2025", "-f", "ndjson", "-q")
    assert r.exit_code == ExitCode.PARTIAL
    assert "damaged gzip" in r.stderr and "preemptions in" not in r.stderr


# --------------------------------------------------------------------------- columns in every format


def test_default_ndjson_and_csv_rows_are_compact_and_wide_is_full():
    nd = invoke("analyze", DEMO, "--tz", "UTC", "-f", "ndjson", "-q")
    row = json.loads(nd.stdout.splitlines()[0])
    assert list(row) == COMPACT_COLUMNS
    csv = invoke("analyze", DEMO, "--tz", "UTC", "-f", "csv", "-q")
    assert csv.stdout.splitlines()[0].split(",") == COMPACT_COLUMNS
    wide = json.loads(invoke("analyze", DEMO, "--tz", "UTC", "-f", "ndjson", "-q", "--wide").stdout.splitlines()[0])
    doc = json.loads(invoke("analyze", DEMO, "--tz", "UTC", "-f", "json", "-q").stdout)
    assert list(wide) == list(doc["events"][0]) and len(wide) > 100  # json stays full
    assert {"raw", "evidence", "sched_free_blocks", "fixes"} <= set(wide)


@pytest.mark.parametrize("fmt", ["ndjson", "csv", "json", "parquet"])
def test_columns_in_every_machine_format(tmp_path, fmt):
    cols = "event_id,time,request_id,gate,sub_kind"
    out = tmp_path / f"e.{fmt}"
    r = invoke("analyze", DEMO, "--tz", "UTC", "-f", fmt, "-q", "--columns", cols, "-o", str(out))
    assert r.exit_code == 0, r.stderr
    if fmt == "ndjson":
        names = list(json.loads(out.read_text().splitlines()[0]))
    elif fmt == "csv":
        names = out.read_text().splitlines()[0].split(",")
    elif fmt == "json":
        doc = json.loads(out.read_text())
        names = list(doc["events"][0])
        assert doc["summary"]["events"] == 226  # the summary is whole
    else:
        names = pl.read_parquet(out).columns
        assert pl.read_parquet(out).schema["time"] == pl.Datetime("us", "UTC")
    assert names == cols.split(",")


def test_columns_on_the_table_and_no_header():
    r = invoke("analyze", DEMO, "--tz", "UTC", "-f", "table", "--columns", "event_id,request_id,kind", "--no-header")
    lines = r.stdout.splitlines()
    assert lines[0].split()[:2] == ["vllm.log:140", "chatcmpl-fc8ef4388c448e97757734696953c40b"]
    assert lines[0].split()[2] == "logged" and "row(s)" not in r.stdout
    wide = invoke("analyze", DEMO, "--tz", "UTC", "-f", "table", "--wide")
    lines = wide.stdout.splitlines()
    assert lines[1].startswith("verdict ")  # what the verdicts shown mean, above the rows (issue 39)
    assert next(ln for ln in lines if ln.startswith("time")).split() == [
        "time",
        "event",
        "kind",
        "n",
        "request",
        "mode",
        "verdict",
        "confidence",
    ]
    csv = invoke("analyze", DEMO, "--tz", "UTC", "-f", "csv", "-q", "--no-header", "--columns", "event_id,line")
    assert csv.stdout.splitlines()[0] == "guide-demo/vllm.log:140,140"


def test_folded_rows_of_one_interval_share_the_interval_verdict():
    log = str(FIXTURES / "golden" / "v1-patched-0.14.log")
    r = invoke("analyze", log, "--year", "2026", "--tz", "UTC", "-f", "table", "-q", "--no-header")
    rows = {ln.split()[1]: ln for ln in r.stdout.splitlines() if ln.strip()}
    assert "6 in interval" in rows["v1-patched-0.14.log:13~i*"]
    # The events of one counted interval are judged by the line that reports it (and the engine's
    # line before): one verdict for the whole fold.
    assert "3 in interval" in rows["v1-patched-0.14.log:15~i*"]
    assert "G1-kv-space/capacity" in rows["v1-patched-0.14.log:15~i*"]
    assert "verdicts" not in rows["v1-patched-0.14.log:15~i*"]
    nd = invoke("analyze", log, "--year", "2026", "--tz", "UTC", "-f", "ndjson", "-q")
    ids = [json.loads(x)["event_id"] for x in nd.stdout.splitlines() if ":15~i" in x]
    assert len(ids) == 3  # ndjson keeps each event


def test_one_lines_retractions_are_one_row_and_explain_takes_it(tmp_path):
    """SGLang's ``#retracted_reqs: N`` is N events of one line (``:14``, ``:14~q2``...): one row, like the
    other counts of one line, which ``explain`` takes; a single retraction and other lines stay rows."""
    log = str(FIXTURES / "golden" / "sglang-0.4-tp.log")
    r = invoke("analyze", log, "--year", "2025", "--tz", "UTC", "-f", "table", "-q", "--no-header")
    rows = {ln.split()[1]: ln for ln in r.stdout.splitlines() if ln.strip()}
    assert set(rows) == {"sglang-0.4-tp.log:8", "sglang-0.4-tp.log:14~q*"}, rows
    assert "2 on one line" in rows["sglang-0.4-tp.log:14~q*"]
    nd = invoke("analyze", log, "--year", "2025", "--tz", "UTC", "-f", "ndjson", "-q")
    assert len(nd.stdout.splitlines()) == 3  # ndjson keeps each event
    ex = invoke("explain", "sglang-0.4-tp.log:14~q*", log, "--year", "2025", "--tz", "UTC", "-f", "json")
    doc = json.loads(ex.stdout)
    assert doc["event"]["event_id"].endswith("sglang-0.4-tp.log:14"), doc["event"]
    lone = invoke("explain", "sglang-0.4-tp.log:14", log, "--year", "2025", "--tz", "UTC", "-f", "json")
    assert json.loads(lone.stdout)["event"]["event_id"].endswith("sglang-0.4-tp.log:14")


def test_a_lines_capped_retractions_are_one_row_of_the_count(tmp_path, monkeypatch):
    from preemptlog import AnalyzeOptions, analyze
    from preemptlog.model import events as ev_mod
    from preemptlog.render.table import render_table

    monkeypatch.setattr(ev_mod, "MAX_EVENTS_PER_COUNT", 40)
    p = tmp_path / "sgl.log"
    p.write_text(
        "[2026-03-14 10:00:10 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 500, "
        "#new_token_ratio: 0.5000 -> 0.6000\n"
    )
    a = analyze([str(p)], AnalyzeOptions(tz="UTC", year=2026))
    body = [ln for ln in render_table(a, width=120, header=False).splitlines() if ln.strip()]
    assert len(body) == 1 and "40 of 500 on one line (capped)" in body[0], body


def test_folded_rows_say_when_their_events_differ():
    from types import SimpleNamespace

    import polars as pl

    from preemptlog.render.table import display_rows

    ids = ["v.log:9~r1", "v.log:9~r2", "v.log:9~r3", "v.log:12"]
    events = pl.DataFrame(
        {
            "event_id": ids,
            "kind": ["reconstructed"] * 3 + ["logged"],
            "time": [1, 2, 3, 4],
            "request_id": [None, None, None, "7"],
            "mode": [None] * 4,
            "source": ["v.log"] * 4,
            "line": [9, 9, 9, 12],
        }
    )
    verdicts = pl.DataFrame(
        {
            "event_id": ids,
            "gate": ["G1-kv-space", "undetermined", "undetermined", "G1-kv-space"],
            "sub_kind": ["kv-exhausted", None, None, "kv-exhausted"],
            "confidence": ["low", "none", "none", "high"],
        }
    )
    rows = display_rows(SimpleNamespace(events=events, verdicts=verdicts)).to_dicts()
    assert [(r["event_id"], r["count"], r["verdicts"]) for r in rows] == [("v.log:9~r*", 3, 2), ("v.log:12", 1, 1)]


def test_unknown_column_is_a_usage_error_with_the_nearest():
    r = invoke("analyze", DEMO, "--tz", "UTC", "-f", "ndjson", "--columns", "event_id,requestid")
    assert r.exit_code == ExitCode.USAGE
    assert "requestid" in r.stderr and "did you mean 'request_id'" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_empty_result_keeps_the_compact_header(tmp_path):
    p = write_lines(tmp_path / "v.log", ["INFO 05-02 10:00:00 [x.py:1] Req-1 PREEMPTED"])
    r = invoke("analyze", str(p), "--year", "2025", "-f", "csv", "-q", "--gate", "G3")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.splitlines()[0].split(",") == COMPACT_COLUMNS and len(r.stdout.splitlines()) == 1


# --------------------------------------------------------------------------- filters


def _ids(*args) -> list[str]:
    r = invoke(
        "analyze", DEMO, "--tz", "UTC", "-f", "ndjson", "-q", "--columns", "event_id,time,gate,kind,confidence", *args
    )
    assert r.exit_code == 0, r.stderr
    return [json.loads(x) for x in r.stdout.splitlines()]


def test_filters_apply_after_the_analysis():
    every = _ids()
    g2 = _ids("--gate", "G2")
    assert len(g2) == 44 and {x["gate"] for x in g2} == {"G2-batch-variance"}
    assert len(_ids("--gate", "G1-kv-space", "--gate", "G4")) == 181
    high = _ids("--min-confidence", "high")
    assert high and {x["confidence"] for x in high} == {"high"}
    last = max(x["time"] for x in every)
    recent = _ids("--since", "-15s")  # the log's last line is 23:58:50
    assert recent and all(x["time"] >= "2026-11-29T23:58:35" for x in recent) and len(recent) < len(every)
    assert _ids("--since", "-5s") == []
    window = _ids("--since", "23:58:20", "--until", "2026-11-29T23:58:25+00:00")
    assert window and all("23:58:20" <= x["time"][11:19] <= "23:58:25" for x in window)
    assert _ids("--kind", "logged") == [x for x in every if x["kind"] == "logged"]
    assert last[:10] == "2026-11-29"


def test_filtered_summary_says_what_was_filtered():
    r = invoke("analyze", DEMO, "--tz", "UTC", "-f", "json", "--gate", "G2")
    doc = json.loads(r.stdout)
    assert doc["summary"]["filters"] == {"text": "--gate G2-batch-variance", "kept": 44, "total": 226}
    assert doc["summary"]["events"] == 44 and len(doc["events"]) == 44
    assert "filtered (--gate G2-batch-variance): 44 of 226 event(s) shown" in r.stderr


def test_filter_values_are_checked():
    for args in (["--gate", "G9"], ["--since", "yesterday"], ["--min-confidence", "sure"], ["--kind", "bogus"]):
        r = invoke("analyze", DEMO, "--tz", "UTC", "-f", "ndjson", *args)
        assert r.exit_code == ExitCode.USAGE, args
        assert len(r.stderr.strip().splitlines()) == 1


def test_kind_still_forces_a_file_kind(tmp_path):
    p = write_lines(tmp_path / "weird.txt", ["INFO 05-02 10:00:00 [x.py:1] Req-1 PREEMPTED"])
    r = invoke("analyze", str(p), "--year", "2025", "-f", "ndjson", "-q", "--kind", f"{p}=vllm-log", "--kind", "marker")
    assert r.exit_code == 0, r.stderr
    assert [json.loads(x)["kind"] for x in r.stdout.splitlines()] == ["marker"]


# --------------------------------------------------------------------------- explain


def _explain(*args):
    r = invoke("explain", *args, "--tz", "UTC", "-f", "json")
    return r, (json.loads(r.stdout) if r.exit_code == 0 else None)


def test_explain_scopes_to_the_request_and_the_cited_rows():
    r, doc = _explain("guide-demo/vllm.log:9799", DEMO)
    assert r.exit_code == 0, r.stderr
    rid = doc["event"]["request_id"]
    cited = {c["src"] for c in doc["verdict"]["evidence"]} | {e["src"] for e in doc["evidence"]}
    assert doc["scope"] != "all" and doc["window_rows_in_scope"] < doc["window_rows_total"]
    assert all(rid in w["value"] or w["src"] in cited or w["src"] == "guide-demo/vllm.log:9799" for w in doc["window"])
    assert any(w["src"] == "guide-demo/vllm.log:9799" for w in doc["window"])
    _, full = _explain("guide-demo/vllm.log:9799", DEMO, "--all")
    assert len(full["window"]) == doc["window_rows_total"] > len(doc["window"])
    _, few = _explain("guide-demo/vllm.log:9799", DEMO, "--limit", "3")
    assert len(few["window"]) == 3 and few["window_rows_in_scope"] == doc["window_rows_in_scope"]


def test_explain_takes_every_id_the_table_prints(tmp_path):
    _, by_base = _explain("vllm.log:9799", DEMO)  # the table's id (folder stripped)
    assert by_base["event"]["event_id"] == "guide-demo/vllm.log:9799"
    # a V0 log: the table folds the reconstructed run into one `~r*` row
    table = invoke("analyze", V0, "--year", "2025", "--tz", "UTC", "-f", "table", "--no-header", "--columns", "event")
    folded = next(x.strip() for x in table.stdout.splitlines() if x.strip().endswith("~r*"))
    r, doc = _explain(folded, V0, "--year", "2025")
    assert r.exit_code == 0, r.stderr
    assert doc["event"]["kind"] == "reconstructed" and doc["run"]["events"] > 1
    assert doc["event"]["event_id"] == doc["run"]["first"]


def test_explain_takes_an_id_the_table_cut_in_the_middle(tmp_path):
    name = "vllm-server-with-a-rather-long-file-name.log"
    p = write_lines(
        tmp_path / name,
        [
            "INFO 05-02 10:00:00 [x.py:1] Req-1 PREEMPTED",
            "INFO 05-02 10:00:01 [x.py:1] Req-2 PREEMPTED",
        ],
    )
    from preemptlog import AnalyzeOptions, analyze
    from preemptlog.render.table import render_table

    shown = render_table(
        analyze([str(p)], AnalyzeOptions(year=2025, tz="UTC")), width=40, header=False, columns=["event", "request"]
    )
    cut = "vllm-server-with-a…file-name.log:2"
    assert "…" in shown.splitlines()[-1]  # the table did cut it
    r, doc = _explain(cut, str(p), "--year", "2025")
    assert r.exit_code == 0, r.stderr
    assert doc["event"]["event_id"].endswith(name + ":2")
    r, doc = _explain(cut.replace("…", ".."), str(p), "--year", "2025")  # the ASCII ellipsis
    assert r.exit_code == 0 and doc["event"]["request_id"] == "2"


def test_explain_unknown_id_suggests_the_nearest():
    r = invoke("explain", "vllm.log:141", DEMO, "--tz", "UTC")
    assert r.exit_code == ExitCode.USAGE
    assert "did you mean guide-demo/vllm.log:140" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_explain_request_lists_every_preemption_of_it():
    rid = "chatcmpl-48494ec1a1194b704494380bdf89f075"
    r = invoke("explain", "--request", rid, DEMO, "--tz", "UTC", "-f", "json", "--limit", "2")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert len(doc["explanations"]) == 11  # the summary's "x11"
    assert {d["event"]["request_id"] for d in doc["explanations"]} == {rid}
    bad = invoke("explain", "--request", rid[:-1] + "0", DEMO, "--tz", "UTC")
    assert bad.exit_code == ExitCode.USAGE and f"did you mean {rid}" in bad.stderr


# --------------------------------------------------------------------------- a real terminal


def _pty(args: list[str], cols: int, rows: int = 50, env: dict | None = None, timeout: float = 120) -> tuple[str, int]:
    """Run preemptlog on a pseudo-terminal of ``cols`` x ``rows``; (everything it wrote, exit code)."""
    e = _env() | {"TERM": "xterm", "LANG": "C.UTF-8"}
    e.pop("LC_ALL", None)
    e |= env or {}
    return run_on_pty(args, cols, rows, e, timeout)


def _table_lines(out: str) -> list[str]:
    import re

    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out)
    return [ln for ln in plain.splitlines() if ln[:2].isdigit() and ln[2:3] == ":"]


@pytest.mark.parametrize("cols", [80, 120])
def test_table_is_readable_on_a_terminal(cols):
    out, code = _pty(["analyze", DEMO, "--tz", "UTC", "-f", "table", "-q"], cols, env={"PAGER": "cat"})
    assert code == 0, out
    rows = _table_lines(out)
    assert len(rows) == 226  # one line per event: nothing wraps
    assert all(len(r.rstrip()) <= cols for r in rows)
    first = rows[0].split()
    assert first[0] == "23:58:13" and first[1] == "vllm.log:140"
    if cols == 80:  # cut in the middle; whole from 120 columns
        assert "…" in first[2] and first[2].startswith("chatcmpl-") and first[2].endswith("53c40b")
    else:
        assert first[2] == "chatcmpl-fc8ef4388c448e97757734696953c40b"
    assert "226 row(s), 226 event(s); 2026-11-29 (UTC); files under guide-demo/" in out
    gate = "G1-kv-space/fragmentation" if cols >= 110 else "G1-kv/fragmentation"
    assert any(gate in r for r in rows)


def test_table_taller_than_the_terminal_is_paged(tmp_path):
    seen = tmp_path / "paged.txt"
    pager = f"{sys.executable} -c \"import sys; open({str(seen)!r}, 'w').write(sys.stdin.read())\""
    out, code = _pty(["analyze", DEMO, "--tz", "UTC", "-f", "table", "-q"], 80, rows=30, env={"PAGER": pager})
    assert code == 0, out
    assert seen.exists() and seen.read_text().count("\n") > 226 and "vllm.log:140" in seen.read_text()
    assert "vllm.log:140" not in out  # went to the pager, not around it
    short, _ = _pty(
        ["analyze", DEMO, "--tz", "UTC", "-f", "table", "-q", "--gate", "G3"],
        80,
        rows=30,
        env={"PAGER": pager + " && exit 9"},
    )
    assert "vllm.log:" in short  # fits: printed directly
    # in a pipe: never paged
    piped = subprocess.run(
        [sys.executable, "-m", "preemptlog", "analyze", DEMO, "--tz", "UTC", "-f", "table", "-q"],
        capture_output=True,
        text=True,
        env=_env() | {"PAGER": "false"},
        cwd=ROOT,
    )
    assert piped.returncode == 0 and piped.stdout.count("\n") > 226


def test_explain_is_paged_on_a_terminal(tmp_path):
    seen = tmp_path / "paged.txt"
    pager = f"{sys.executable} -c \"import sys; open({str(seen)!r}, 'w').write(sys.stdin.read())\""
    out, code = _pty(["explain", "vllm.log:9799", DEMO, "--tz", "UTC", "--all"], 120, rows=30, env={"PAGER": pager})
    assert code == 0, out
    assert "verdict: G1-kv-space / fragmentation" in seen.read_text()


def test_progress_only_on_a_terminal_and_not_with_quiet():
    env = {"PREEMPTLOG_PROGRESS_AFTER": "0"}
    out, code = _pty(["analyze", DEMO, "--tz", "UTC", "-f", "ndjson", "-o", os.devnull], 100, env=env)
    assert code == 0 and "reading the" in out and " MB" in out
    quiet, _ = _pty(["analyze", DEMO, "--tz", "UTC", "-f", "ndjson", "-o", os.devnull, "-q"], 100, env=env)
    assert "reading the" not in quiet and quiet.strip() == ""
    piped = subprocess.run(
        [sys.executable, "-m", "preemptlog", "analyze", DEMO, "--tz", "UTC", "-f", "ndjson"],
        capture_output=True,
        text=True,
        env=_env() | env,
        cwd=ROOT,
    )
    assert "reading the" not in piped.stderr and "\x1b" not in piped.stderr


def test_ascii_under_the_c_locale():
    out, code = _pty(
        ["analyze", DEMO, "--tz", "UTC", "-f", "table"],
        100,
        rows=400,
        env={"LC_ALL": "C", "PAGER": "cat", "PREEMPTLOG_PROGRESS_AFTER": "0"},
    )
    assert code == 0
    assert out.isascii(), sorted({c for c in out if not c.isascii()})
    assert "Timeline," in out and "#" in out  # the stderr timeline, in ASCII
    import re

    assert re.search(r"chatcmpl-\w+\.\.\w+ ", out)  # the ellipsis in ASCII


# --------------------------------------------------------------------------- help and small things


def test_help_names_what_each_option_wants():
    r = invoke("analyze", "--help", env={"COLUMNS": "200"})
    for text in (
        "--file-kind FILE=KIND",
        "--kind KIND",
        "--offset SOURCE=DURATION",
        "-o, --output FILE",
        "PATH",
        "--columns COL,COL",
        "--since TIME",
        "--wide",
        "--no-header",
    ):
        assert text in r.stdout, text
    assert "<list[str]>" not in r.stdout and "<str>" not in r.stdout
    from preemptlog.commands import COMMANDS

    for name in COMMANDS:  # every command: placeholders, never Python types
        h = invoke(name, "--help", env={"COLUMNS": "200"}).stdout
        assert not any(t in h for t in ("<list[", "<str>", "<int>", "<float>")), name
    top = invoke("--help", env={"COLUMNS": "80"})
    commands = top.stdout.split("Commands:", 1)[1]
    assert "..." not in commands  # blurbs are whole
    assert "--install-completion" in top.stdout


def test_version_short_flag():
    r = invoke("-V")
    assert r.exit_code == 0 and r.stdout.startswith("preemptlog ")


def test_no_internal_references_in_user_text():
    import re

    for path in [ROOT / "preemptlog" / "rules" / "default.toml", *(ROOT / "preemptlog" / "commands").glob("*.py")]:
        assert not re.search(r"issue #?\d", path.read_text(), re.I), path
    r = invoke("rules", "-f", "json")
    assert not re.search(r"issue #?\d", r.stdout, re.I)


def test_rules_check_ends_with_a_total_and_exits_7_on_a_failing_sample(tmp_path):
    ok = invoke("rules", "--check", "-f", "json")
    assert ok.exit_code == 0
    assert ok.stderr.strip().splitlines()[-1].endswith("passed")
    bad = tmp_path / "bad.toml"
    bad.write_text(
        '[[rule]]\nid = "ours-always-wrong"\ngate = "G2-batch-variance"\npriority = 50\nconfidence = "low"\n'
        'description = "a sample that expects the opposite of its condition"\nrequires = ["batch_variance"]\n'
        'when = "batch_variance > 1000"\ncite = ["batch_variance"]\n'
        '[[rule.sample]]\nevidence = { batch_variance = 5 }\nexpect = "fired"\n'
    )
    r = invoke("rules", "--rules", str(bad), "--check", "-f", "json")
    assert r.exit_code == ExitCode.CHECK_FAILED, r.stderr
    assert "failed" in r.stderr.strip().splitlines()[-1]


def test_shell_completion_is_switched_on():
    env = _env() | {
        "_PREEMPTLOG_COMPLETE": "complete_bash",
        "COMP_WORDS": "preemptlog analyze --min-c",
        "COMP_CWORD": "2",
    }
    script = Path(sys.executable).parent / "preemptlog"  # the console script: completion keys on its name
    if not script.exists():
        pytest.skip("the preemptlog console script is not installed next to this Python")
    out = subprocess.run([str(script)], capture_output=True, text=True, env=env, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.split() == ["--min-confidence"]


def test_every_terminal_table_is_ascii_under_the_c_locale():
    env = {"LC_ALL": "C"}
    for args in (
        ["rules", "-f", "table"],
        ["explain", "vllm.log:140", DEMO, "--tz", "UTC", "-f", "table", "--limit", "3"],
        ["analyze", DEMO, "--tz", "UTC", "-f", "table", "--gate", "G3"],
    ):
        r = invoke(*args, env=env)
        assert r.exit_code == 0, (args, r.stderr)
        assert r.stdout.isascii(), (args, sorted({c for c in r.stdout if not c.isascii()}))
    utf8 = invoke("rules", "-f", "table", env={"LC_ALL": "C.UTF-8"})
    assert not utf8.stdout.isascii()
