"""Issue 15: findings beyond the field guide, on hand-written bundles (fixtures/findings/).

Each bundle is a small text file written by hand in one of several shapes: a V1 log alone, a V0
log with request lines, a log with v2 block-table records, records alone, a log with /metrics
scrapes. Every finding and mechanism has a positive and a negative case; the real corpus logs
without preemptions must fire none.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from preemptlog.analysis import Analysis, AnalyzeOptions, analyze
from preemptlog.findings import EVENT_COLUMNS, as_dict, compute

from ..conftest import corpus2_dir, corpus_dir

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "fixtures" / "findings"
FIX_KEYS = {"id", "option", "current", "suggested", "inputs", "expected_effect", "missing", "addresses", "text"}

_CACHE: dict[str, Analysis] = {}


def run(name: str) -> Analysis:
    if name not in _CACHE:
        _CACHE[name] = analyze([str(FIX / name)], AnalyzeOptions(tz="UTC", year=2026))
    return _CACHE[name]


def per_event(name: str) -> list[dict]:
    a = run(name)
    return a.events.select("event_id", "request_id", "kind").join(a.findings.per_event, on="event_id").to_dicts()


# ---------------------------------------------------------------- 1. recompute cost
def test_records_give_exact_recompute_per_preemption_and_time_preempted():
    rows = {(r["request_id"], r["event_id"]): r for r in per_event("v1-records")}
    by_line = {eid.rsplit(":", 1)[1]: r for (_, eid), r in rows.items()}
    # records.jsonl lines 7, 9, 11, 12: num_computed_tokens_lost 119, 130, 150, 90
    assert {k: v["recompute_tokens"] for k, v in by_line.items()} == {"7": 119, "9": 130, "11": 150, "12": 90}
    assert {v["recompute_bound"] for v in by_line.values()} == {"exact"}
    assert by_line["7"]["recompute_src"] == "v1-records/records.jsonl:7"
    # preempted at step 40 (10:00:12), allocated again at step 50 (10:00:14, line 8)
    assert (
        by_line["7"]["preempted_s"] == pytest.approx(2.0)
        and by_line["7"]["resumed_src"] == "v1-records/records.jsonl:8"
    )
    assert by_line["7"]["preempted_bound"] == "exact"
    assert by_line["9"]["preempted_s"] == pytest.approx(3.0)
    assert by_line["11"]["preempted_s"] is None  # no later allocation in the records: unknown, not a guess
    rc = run("v1-records").findings.recompute
    assert rc["tokens"] == 489 and not rc["tokens_is_lower_bound"] and rc["preemptions_exact"] == 4
    # processed: the stats intervals 10:00:10-20 (60 tok/s) and 20-30 (40 tok/s) overlap the events
    assert rc["processed_tokens"] == pytest.approx(1000.0)
    # vLLM's throughput leaves recomputation out: the share is of processed + recomputed (never above 1)
    assert rc["share_of_processed"] == pytest.approx(489 / (1000 + 489))
    assert rc["processed_window"]["first_line"] == "v1-records/vllm.log:6"


def test_v0_prompts_are_a_lower_bound_swap_recomputes_nothing_counts_are_unknown():
    rows = per_event("v0-log")
    logged = {r["request_id"]: r for r in rows if r["kind"] == "logged"}
    assert logged["cmpl-a"]["recompute_tokens"] == 10 and logged["cmpl-a"]["recompute_bound"] == "lower"
    assert logged["cmpl-a"]["recompute_src"] == "v0-log/vllm.log:5"  # its Received request line
    assert logged["cmpl-b"]["recompute_tokens"] == 0 and "SWAP" in logged["cmpl-b"]["recompute_basis"]
    recon = [r for r in rows if r["kind"] == "reconstructed"]
    assert recon and all(r["recompute_tokens"] is None for r in recon)
    assert all(r["recompute_basis"].startswith("unknown") for r in recon)
    rc = run("v0-log").findings.recompute
    assert rc["tokens_is_lower_bound"] and rc["preemptions_unknown"] == len(recon)
    # V0 preempts only when blocks cannot be appended: the warning and its counter's events are kv-capacity
    assert {r["mechanism"] for r in rows} == {"kv-capacity"}


def test_counts_without_request_ids_leave_the_cost_unknown():
    f = run("log-scrapes").findings
    assert f.recompute["preemptions"] == 9 and f.recompute["tokens"] is None
    assert f.recompute["not_evaluable"]
    assert "tokens recomputed unknown" in run("log-scrapes").summary()["findings_headline"]


def test_per_minute_totals_carry_the_processed_tokens():
    pm = run("v1-records").findings.recompute_per_minute
    assert pm.height == 1 and pm.row(0, named=True)["tokens"] == 489
    assert pm.row(0, named=True)["processed_tokens"] == pytest.approx(1000.0)


# ---------------------------------------------------------------- 2. thrash
def test_thrash_ranking_from_records():
    f = run("v1-records").findings
    th = f.thrash
    assert th["evaluable"] and th["distribution"] == {"1": 1, "2": 0, "3-5": 1, "6+": 0}
    assert th["requests_preempted_more_than_once"] == 1 and th["max_preemptions_per_request"] == 3
    assert th["requests_known"] == 4 and th["requests_preempted_share"] == 0.5
    assert th["reference"]["requests_preempted_share"] == 0.074
    top = f.thrash_table.row(0, named=True)
    assert top["request_id"] == "r1" and top["preemptions"] == 3 and top["tokens_recomputed"] == 399
    assert top["finished"] == "finished (length)" and top["finished_src"] == "v1-records/records.jsonl:13"


def test_thrash_is_not_evaluable_from_sampled_v0_warnings():
    th = run("v0-log").findings.thrash
    assert th["evaluable"] is False and "50th" in th["not_evaluable"]


def test_thrash_distribution_from_vllms_histogram_in_scrapes():
    a = run("scrapes-histogram")
    th = a.findings.thrash
    assert th["evaluable"] is False  # no request ids: no ranking
    h = th["histogram"]
    assert h["requests_finished"] == 60 and h["preemptions"] == 116  # the increase between the two scrapes
    assert h["distribution"] == {"0-1": 40, "2": 8, "3-5": 9, "6+": 3}
    assert h["requests_preempted_5_or_more"] == 6 and h["max_preemptions_per_request_at_most"] == 10
    assert (
        h["first_line"] == "scrapes-histogram/metrics.prom:15" and h["last_line"] == "scrapes-histogram/metrics.prom:31"
    )
    assert "6 requests preempted 5+ times (vLLM's histogram)" in a.summary()["findings_headline"]
    assert run("log-scrapes").findings.thrash["histogram"] is None  # scrapes without the histogram


def test_no_request_preempted_twice_is_no_thrash():
    th = run("spec").findings.thrash
    assert th["evaluable"] and th["requests_preempted_more_than_once"] == 0
    assert run("spec").findings.thrash_table.height == 0


# ---------------------------------------------------------------- 3. stall
def test_stall_span_with_its_lines():
    st = run("v1-stall").findings.stall
    assert st["evaluable"] and st["found"]
    (span,) = st["spans"]
    assert span["stats_lines"] == 3 and span["seconds"] == 20.0
    assert span["first_line"] == "v1-stall/vllm.log:2" and span["last_line"] == "v1-stall/vllm.log:4"
    assert "stall 20 s" in run("v1-stall").summary()["findings_headline"]


def test_no_stall_while_generating_or_for_one_line():
    st = run("v1-busy").findings.stall
    assert st["evaluable"] and st["spans"] == [] and not st["found"]
    assert "no stall" in run("v1-busy").summary()["findings_headline"]


def test_stall_not_evaluable_without_stats_lines():
    st = run("prefix-reset").findings.stall
    assert st["evaluable"] is False and st["not_evaluable"]
    assert "stall" not in run("prefix-reset").summary()["findings_headline"]


def test_never_fits_from_maximum_concurrency():
    nf = run("never-fits").findings.stall["never_fits"]
    assert nf["found"] and nf["items"][0]["value"] == pytest.approx(0.24)
    assert any("never-fits/vllm.log:3" in i for i in nf["items"][0]["inputs"])
    assert not run("v1-busy").findings.stall["never_fits"]["found"]
    assert run("v1-busy").findings.stall["never_fits"]["evaluable"] is False


# ---------------------------------------------------------------- 4. mechanisms
@pytest.mark.parametrize(
    "name, mechanism, rule",
    [
        ("v1-records", "kv-capacity", "M-kv-capacity"),
        ("prefix-reset", "prefix-cache-reset", "M-prefix-cache-reset"),
        ("priority", "priority-churn", "M-priority-churn"),
        ("chunked", "chunked-prefill-loop", "M-chunked-prefill-loop"),
        ("spec", "spec-decode-lookahead", "M-spec-decode-lookahead"),
        # a stock V1 log with scrapes: upstream vLLM's code says a failed allocation (engine_facts.py)
        ("log-scrapes", "kv-capacity", "M-kv-capacity-by-code"),
    ],
)
def test_mechanism_per_event(name, mechanism, rule):
    rows = per_event(name)
    if name == "priority":  # the later victim table shows "low" running again by then: an upper bound
        first = min(rows, key=lambda r: r["event_id"])
        assert first["preempted_bound"] == "at most" and first["preempted_s"] == pytest.approx(3.0)
    assert rows and {r["mechanism"] for r in rows} == {mechanism}, [
        (r["mechanism"], r["mechanism_missing"]) for r in rows
    ]
    assert {r["mechanism_rule"] for r in rows} == {rule}
    assert all(r["mechanism_evidence"] for r in rows)
    assert all(e["src"] for r in rows for e in r["mechanism_evidence"])


def test_mechanism_negatives():
    # a capacity storm with fcfs is not priority churn nor a prefix reset; one preemption is no loop
    assert {r["mechanism"] for r in per_event("v1-records")} == {"kv-capacity"}
    assert {r["mechanism"] for r in per_event("spec")} == {"spec-decode-lookahead"}
    # markers of the guide's scheduler carry no decision record: unknown, with what would tell
    a = analyze([str(ROOT / "fixtures" / "guide-demo")], AnalyzeOptions(tz="UTC"))
    marker = a.events.filter(pl.col("kind") == "marker").select("event_id").join(a.findings.per_event, on="event_id")
    unknown = marker.filter(pl.col("mechanism") == "unknown")
    assert unknown.height and unknown.get_column("mechanism_missing").null_count() == 0


def test_gate_verdicts_do_not_depend_on_the_findings():
    a = run("prefix-reset")
    gates_before = a.verdicts.select("event_id", "gate", "sub_kind", "confidence")
    again = compute(a)
    assert a.verdicts.select("event_id", "gate", "sub_kind", "confidence").equals(gates_before)
    assert again.per_event.equals(a.findings.per_event)


def test_compute_is_pure():
    a = run("v1-records")
    snap = {f.name: getattr(a, f.name) for f in dataclasses.fields(a)}
    frames = {k: v.clone() for k, v in a.frames.items()}
    compute(a)
    for f in dataclasses.fields(a):
        v = getattr(a, f.name)
        assert v is snap[f.name], f.name
    for k, v in a.frames.items():
        assert v.equals(frames[k]), k


# ---------------------------------------------------------------- 5. capacity
def test_capacity_fixes_with_inputs_cited():
    cap = run("v1-records").findings.capacity
    assert cap["pool"]["tokens"] == 1024 and cap["pool"]["blocks"] == 64
    # peak: the 4 requests in flight at records.jsonl:7 need ceil((prompt + output) / 16) blocks each to
    # finish: r1 (100 + 200) 19, r2 (80 + max_tokens 200, unfinished: an upper bound) 18, r3 and r4
    # (150 + 100) 16 each = 69 (not "pool - free + needed" at a failed allocation, always about the pool)
    peak = cap["peak_demand"]
    assert (peak["blocks"], peak["running"], peak["src"]) == (69, 4, "v1-records/records.jsonl:7"), peak
    assert peak["upper_bound"] is True
    fixes = {x["id"]: x for x in cap["fixes"]}
    g = fixes["capacity_gpu_memory_utilization"]
    assert set(g) == FIX_KEYS and g["current"] == 0.8 and g["suggested"] == 0.87  # ceil(0.8 x 69/64, 2 places)
    assert any("v1-records/vllm.log:2" in i for i in g["inputs"])
    m = fixes["capacity_max_model_len"]
    assert m["current"] == 2048 and m["suggested"] == 1024
    s = fixes["capacity_max_num_seqs"]
    assert s["suggested"] == 3 and s["current"] == 8  # floor(64 / (69/4))
    for x in cap["fixes"]:
        assert x["option"].startswith("--") and x["suggested"] is not None and x["inputs"]


def test_capacity_silent_without_inputs_or_when_it_changes_nothing():
    assert run("prefix-reset").findings.capacity["fixes"] == []  # no failed allocation: no peak, no gmu
    cap = run("v1-stall").findings.capacity
    assert cap["evaluable"] is False and cap["fixes"] == [] and cap["not_evaluable"]
    ids = {x["id"] for x in run("chunked").findings.capacity["dropped"]}
    assert "capacity_gpu_memory_utilization" in ids


def test_chunked_prefill_budget_fix():
    cap = run("chunked").findings.capacity
    assert cap["pool"]["tokens"] == 8192
    fixes = {x["id"]: x for x in cap["fixes"]}
    f = fixes["capacity_chunked_prefill_budget"]
    assert f["current"] == 512 and f["suggested"] == 3000 and f["option"] == "--max-num-batched-tokens"
    assert any("chunked/vllm.log:3" in i for i in f["inputs"]) and any("records.jsonl:1" in i for i in f["inputs"])
    # every victim prompt within the budget: no such fix
    assert "capacity_chunked_prefill_budget" not in {x["id"] for x in run("v1-records").findings.capacity["fixes"]}


def test_capacity_fixes_join_the_ranked_fixes_in_the_summary():
    s = run("v1-records").summary()
    ids = [x["id"] for x in s["fixes"]]
    assert "capacity_gpu_memory_utilization" in ids
    assert [x["rank"] for x in s["fixes"]] == list(range(1, len(ids) + 1))


# ---------------------------------------------------------------- output
def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "preemptlog", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=str(ROOT),
    )


def test_cli_json_has_a_findings_object_and_event_columns():
    p = _cli("analyze", str(FIX / "v1-records"), "--tz", "UTC", "--year", "2026", "-f", "json")
    assert p.returncode in (0, 5), p.stderr
    doc = json.loads(p.stdout)
    f = doc["findings"]
    assert set(f) == {"version", "recompute", "thrash", "stall", "mechanisms", "capacity", "headline"}
    assert f["recompute"]["tokens"] == 489 and f["thrash"]["ranking"][0]["request_id"] == "r1"
    assert f["mechanisms"] == {"kv-capacity": 4}
    for e in doc["events"]:
        assert set(EVENT_COLUMNS) <= set(e)
    # vLLM 0.26 (V1): prefix caching on by default, and no resume record: the lost tokens bound the recompute
    assert (
        "up to 489 tokens recomputed (lost to preemption, at most 33% of the tokens computed: prefix caching on by "
        "default, no resume records)"
    ) in doc["summary"]["findings_headline"]
    assert "1 request preempted more than once" in doc["summary"]["findings_headline"]


def test_cli_ndjson_compact_has_the_mechanism_beside_the_gate():
    p = _cli("analyze", str(FIX / "prefix-reset"), "--tz", "UTC", "-f", "ndjson")
    assert p.returncode in (0, 5), p.stderr
    rows = [json.loads(x) for x in p.stdout.splitlines() if x.strip()]
    assert len(rows) == 3 and {r["mechanism"] for r in rows} == {"prefix-cache-reset"}
    keys = list(rows[0])
    assert keys.index("mechanism") == keys.index("confidence") + 1
    assert "270 tokens recomputed" in p.stderr


def test_cli_parquet_carries_the_per_event_findings(tmp_path):
    out = tmp_path / "e.parquet"
    p = _cli("analyze", str(FIX / "v1-records"), "--tz", "UTC", "--year", "2026", "-o", str(out))
    assert p.returncode in (0, 5), p.stderr
    df = pl.read_parquet(out)
    assert df.get_column("recompute_tokens").sum() == 489 and set(df.get_column("mechanism")) == {"kv-capacity"}
    meta = pl.read_parquet_metadata(out)
    f = json.loads(meta["preemptlog.findings"])
    assert f["recompute"]["tokens"] == 489 and f["thrash"]["ranking"][0]["request_id"] == "r1"


def test_report_has_the_recompute_panel_and_the_thrash_table(tmp_path):
    out = tmp_path / "r.html"
    p = _cli("report", str(FIX / "v1-records"), "--tz", "UTC", "--year", "2026", "-o", str(out))
    assert p.returncode in (0, 5), p.stderr
    t = out.read_text()
    i = t.index('<section id="findings">')
    sec = t[i : t.index("</section>", i)]
    assert '<svg id="recompute-chart"' in sec and '<table id="thrash-table">' in sec
    assert "v1-records/records.jsonl:7" in sec and "http" not in sec
    assert "--gpu-memory-utilization 0.8 -&gt; 0.87" in sec


def test_cli_rules_check_runs_the_mechanism_samples():
    p = _cli("rules", "--check")
    assert p.returncode == 0, p.stderr
    assert "M-prefix-cache-reset" in p.stdout and "M-kv-capacity" in p.stdout


def test_as_dict_is_json():
    json.dumps(as_dict(run("v1-records").findings, "UTC"))


# ---------------------------------------------------------------- real logs
def _corpus_logs() -> list[Path]:
    out: list[Path] = []
    for d in (corpus_dir(), corpus2_dir()):
        if d is not None:
            out += sorted(d.glob("vllm-*.log"))
    return out


def test_no_finding_fires_on_idle_real_logs():
    logs = _corpus_logs()
    if not logs:
        pytest.skip("real-log corpus not found (../shared/corpus*; set PREEMPTLOG_CORPUS / PREEMPTLOG_CORPUS2)")
    idle = 0
    for p in logs:
        a = analyze([str(p)], AnalyzeOptions(tz="UTC", year=2025))
        if a.events.height:
            continue
        idle += 1
        f = a.findings
        assert f.stall["spans"] == [], p.name
        assert not f.stall["never_fits"]["found"], p.name
        assert f.recompute["preemptions"] == 0 and f.recompute["tokens"] is None, p.name
        assert not f.thrash["evaluable"], p.name
        # a stock log that shows pressure gets the levers its stats lines support, estimated (issue 39)
        assert all(x.get("pressure") and x["basis"].startswith("estimated from") for x in f.capacity["fixes"]), p.name
        assert not f.capacity["fixes"] or a.summary()["cause"]["pressure"], p.name
        assert f.mechanisms == {}, p.name
    assert idle >= 5


def test_mechanism_rules_are_listed_and_can_be_switched_off():
    p = _cli("rules", "-f", "json")
    assert p.returncode == 0, p.stderr
    ids = [m["id"] for m in json.loads(p.stdout)["mechanisms"]]
    assert ids[0] == "M-prefix-cache-reset" and "M-kv-capacity" in ids
    p = _cli(
        "analyze", str(FIX / "spec"), "--tz", "UTC", "-f", "ndjson", "--set", "M-spec-decode-lookahead.enabled=false"
    )
    assert p.returncode in (0, 5), p.stderr
    assert [json.loads(x)["mechanism"] for x in p.stdout.splitlines() if x.strip()] == ["kv-capacity"]


def test_a_bad_mechanism_rule_is_refused_with_one_line(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('version = 1\n[[mechanism]]\nid = "X"\nmechanism = "teleport"\nwhen = "true"\n')
    p = _cli("rules", "--rules", str(bad))
    assert p.returncode != 0 and "unknown mechanism 'teleport'" in p.stderr and "Traceback" not in p.stderr


# ---------------------------------------------------------------- a real vLLM 0.32 scheduler, recorded
CAPTURE = (
    FIX / "capture-pressure"
)  # records + log of tests/support/vllm_driver.py's pressure run (truth.json: vLLM's counts)
GOLDEN = CAPTURE / "findings.golden.json"


def test_recorded_real_scheduler_recompute_is_the_victims_computed_tokens():
    import os

    recs = [json.loads(x) for x in (CAPTURE / "records.jsonl").read_text().splitlines() if x.strip()]
    truth = json.loads((CAPTURE / "truth.json").read_text())
    a = analyze([str(CAPTURE)], AnalyzeOptions(tz="UTC"))
    pe = a.events.select("event_id", "request_id", "line").join(a.findings.per_event, on="event_id").sort("line")
    tables = [r for r in recs if r["type"] == "table" and r.get("at") == "preempt"]
    preempts = [r for r in recs if r["type"] == "event" and r["action"] == "preempt"]
    assert pe.height == len(tables) == len(preempts) == truth["scheduler_preempted"] == int(truth["counter"])
    assert [[r["step"], r["request_id"]] for r in preempts] == truth["preempted_by_step"]
    assert pe.get_column("request_id").to_list() == [t["request_id"] for t in tables]
    assert pe.get_column("recompute_tokens").to_list() == [t["num_computed_tokens"] for t in tables]
    assert set(pe.get_column("recompute_bound")) == {"exact"}
    finish = {r["request_id"]: r["num_preemptions"] for r in recs if r["type"] == "request" and r["phase"] == "finish"}
    th = a.findings.thrash
    assert th["requests_preempted"] == sum(1 for n in finish.values() if n) and th["requests_known"] == len(finish)
    assert {r["request_id"]: r["preemptions"] for r in a.findings.thrash_table.to_dicts()} == {
        k: v for k, v in finish.items() if v > 1
    }
    assert set(pe.get_column("mechanism")) == {"kv-capacity"}
    doc = as_dict(a.findings, "UTC")
    text = json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    if os.environ.get("PREEMPTLOG_UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text(), "findings of the recorded capture moved (PREEMPTLOG_UPDATE_GOLDEN=1 to accept)"
