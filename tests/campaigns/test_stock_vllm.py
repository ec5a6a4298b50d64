"""Stock bundles of a real vLLM 0.32 scheduler, answered in vLLM's terms (issue 30).

Each run is tests/support/vllm_driver.py in the vLLM venv (ci/vllm-venv; see test_capture_vllm.py): vLLM's
own EngineCore, Scheduler and stat loggers with a fake executor, no preemptlog recording. From a
run come the bundles an on-call engineer really holds: the stock V1 log from the engine's start
plus one final ``curl /metrics``; the log with ``Preemptions: N`` (PREEMPTLOG_FIX_STATS=1, the fix
of vllm-project/vllm PR #38452); the stock log plus /metrics scrapes taken during the run (in
``preemptlog capture``'s format, ``# scrape <time>``), with and without the final reading beside
them. Every count is checked against vLLM's own counter; every event must be G1 KV space by
vLLM's code at medium or high confidence; no ranked fix may be a data request or a "cannot
compute"; the headline must name the count and the cause.
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ..capture.test_capture_vllm import PREFIX, PRESSURE, PY, REAL_VLLM, run_driver

pytestmark = REAL_VLLM

SCRAPE_EVERY = 10  # steps
RUNS = {
    "fcfs": (PRESSURE, {}),
    "fcfs_fix": (PRESSURE, {"PREEMPTLOG_FIX_STATS": "1"}),
    "priority": ({**PRESSURE, "policy": "priority"}, {}),
    "prefix": (PREFIX, {}),
    "prefix_fix": (PREFIX, {"PREEMPTLOG_FIX_STATS": "1"}),
    "clean": ({**PRESSURE, "requests": 4, "blocks": 256}, {}),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    if PY is None:
        pytest.fail("no vLLM 0.32 venv in CI: .ci/run builds it with ci/vllm-venv")
    out = tmp_path_factory.mktemp("stock-runs")
    steps = list(range(SCRAPE_EVERY, 4000, SCRAPE_EVERY))
    with ThreadPoolExecutor(max_workers=2) as ex:
        futs = {
            name: ex.submit(run_driver, name, {**spec, "metrics": True, "metrics_at": steps}, env, out)
            for name, (spec, env) in RUNS.items()
        }
        return {name: f.result() for name, f in futs.items()}


def bundle(res: dict, tmp: Path, *, final: bool, scrapes: bool) -> Path:
    """A bundle of the run's stock log, its final /metrics reading and/or its scrapes."""
    b = tmp / "bundle"
    b.mkdir(parents=True)
    (b / "vllm.log").write_text(res["log_text"])
    if final:
        (b / "metrics.prom").write_text(res["metrics"])
    if scrapes:
        d = b / "scrapes"
        d.mkdir()
        for i, snap in enumerate(res["metrics_snapshots"]):
            when = datetime.fromtimestamp(snap["time"], UTC).isoformat(timespec="milliseconds")
            (d / f"metrics-{i:04d}.prom").write_text(f"# scrape {when}\n" + snap["text"])
    return b


def analyze_json(path: Path, *extra: str) -> tuple[dict, str, int]:
    """`preemptlog analyze PATH -f json` through a real subprocess: (document, stderr, exit code)."""
    p = subprocess.run(
        [sys.executable, "-m", "preemptlog", "analyze", str(path), "-f", "json", "--tz", "UTC", *extra],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode in (0, 4, 5), p.stderr  # 4: a --fail-on condition met, 5: a partial result
    return json.loads(p.stdout), p.stderr, p.returncode


def check_answer(doc: dict, counter: int) -> None:
    s = doc["summary"]
    assert s["count_visible"] is True
    assert s["events"] == counter, (s["events"], counter, s["reconciliation"]["rule"])
    for e in doc["events"]:
        assert e["gate"] == "G1-kv-space" and e["sub_kind"] == "capacity", (e["event_id"], e["gate"], e["rule"])
        assert e["confidence"] in ("medium", "high"), (e["event_id"], e["rule"], e["confidence"])
        assert e["not_evaluable"] == [], e["not_evaluable"]
        assert {x["gate"] for x in e["not_in_upstream"]} == {
            "G2-batch-variance",
            "G3-queue-overflow",
            "G4-prefix-conflict",
        }
    for x in s["fixes"] or []:  # changes to make: a computed value for a real option
        assert x["suggested"] is not None and x["option"].startswith("--"), x
        assert x["id"] != "add_evidence"
    if counter:
        assert s["headline"].startswith(f"{counter} preemption"), s["headline"]
        assert "KV" in s["headline"] and "vLLM V1 preempts" in s["headline"], s["headline"]


@pytest.mark.parametrize("name", ["fcfs", "priority", "prefix", "clean"])
def test_stock_log_and_one_final_reading_count_exactly(runs, name, tmp_path):
    res = runs[name]
    counter = int(res["counter"])
    doc, err, _ = analyze_json(bundle(res, tmp_path, final=True, scrapes=False))
    check_answer(doc, counter)
    rec = doc["summary"]["reconciliation"]
    assert rec["quality"] == "exact", rec["rule"]
    if name == "clean":
        assert counter == 0 and doc["summary"]["events"] == 0
        assert doc["summary"]["headline"].startswith("0 preemptions")
    else:
        assert counter > 0
        # one row per engine in the table, not placed in time
        assert {e["time_precision"] for e in doc["events"]} == {"unplaced"}
    # --fail-on count>N uses the count
    _, err, code = analyze_json(bundle(res, tmp_path / "again", final=True, scrapes=False), "--fail-on", "count>0")
    assert code == (4 if counter else 0), err  # CONDITION_MET


@pytest.mark.parametrize("name", ["fcfs_fix", "prefix_fix"])
def test_preemptions_field_log_gives_g1_at_medium_or_high(runs, name, tmp_path):
    res = runs[name]
    assert "Preemptions:" in res["log_text"]
    doc, _, _ = analyze_json(bundle(res, tmp_path, final=False, scrapes=False))
    check_answer(doc, int(res["iteration_preempted"]))


@pytest.mark.parametrize("name", ["fcfs", "priority", "prefix"])
def test_stock_log_with_scrapes_gives_g1_at_medium_or_high(runs, name, tmp_path):
    res = runs[name]
    assert len(res["metrics_snapshots"]) >= 3
    doc, _, _ = analyze_json(bundle(res, tmp_path, final=False, scrapes=True))
    check_answer(doc, int(res["counter"]))


def test_a_final_reading_beside_the_scrapes_is_counted_once(runs, tmp_path):
    res = runs["fcfs"]
    doc, _, _ = analyze_json(bundle(res, tmp_path, final=True, scrapes=True))
    check_answer(doc, int(res["counter"]))
    assert doc["summary"]["reconciliation"]["repeated_readings"], doc["summary"]["reconciliation"]


def test_stock_log_alone_is_not_visible_and_names_the_cause_by_code(runs, tmp_path):
    res = runs["fcfs"]
    doc, _, _ = analyze_json(bundle(res, tmp_path, final=False, scrapes=False))
    s = doc["summary"]
    assert s["count_visible"] is False and s["events"] is None
    assert "not visible" in s["headline"] and "vLLM V1 preempts" in s["headline"]
    assert s["to_know_more"] and "/metrics" in s["to_know_more"][0]["add"]
