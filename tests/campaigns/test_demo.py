"""The simulated guide-world bundle (fixtures/guide-demo) is what the simulator writes today (fixtures/guide-demo.args)."""

from __future__ import annotations

import shlex

from typer.testing import CliRunner

from preemptlog.cli import app

from ..conftest import FIXTURES


def test_demo_bundle_is_current(tmp_path):
    args = shlex.split((FIXTURES / "guide-demo.args").read_text())
    out = tmp_path / "guide-demo"
    r = CliRunner().invoke(app, ["simulate", *args, "-o", str(out), "-q"])
    assert r.exit_code == 0, r.stderr
    committed = sorted(p.name for p in (FIXTURES / "guide-demo").iterdir())
    assert committed == sorted(p.name for p in out.iterdir())
    for name in committed:
        assert (out / name).read_bytes() == (FIXTURES / "guide-demo" / name).read_bytes(), (
            f"fixtures/guide-demo/{name} is stale: regenerate with "
            "preemptlog simulate $(cat fixtures/guide-demo.args) -o fixtures/guide-demo --force"
        )


def test_demo_analysis_names_every_gate():
    from preemptlog import AnalyzeOptions, analyze

    r = analyze([str(FIXTURES / "guide-demo")], AnalyzeOptions(tz="UTC"))
    s = r.summary()
    assert s["events"] > 100
    assert all(s["by_gate"][g] > 0 for g in ("G1-kv-space", "G2-batch-variance", "G4-prefix-conflict"))
    kinds = {f["file"].split("/")[-1]: f["kind"] for f in s["inputs"]}
    assert kinds["dmon.txt"] == "dmon" and kinds["blocktable.jsonl"] == "blocktable"
    assert kinds["scenario.json"] == "unknown" and kinds["truth.jsonl"] == "unknown"


# ------------------------------------------------------------------ the README's demo (fixtures/demo)
def _notes_counts() -> dict[str, int]:
    import re

    text = (FIXTURES / "demo" / "NOTES.md").read_text()
    return {
        "counter": int(re.search(r"vllm:num_preemptions_total (\d+)", text).group(1)),
        "finished": int(re.search(r"over (\d+) finished requests", text).group(1)),
    }


def test_the_readme_demo_is_a_real_stock_vllm_incident():
    """fixtures/demo (bench/make_demo): a stock vLLM 0.32 server's own log and one `curl /metrics`
    after the incident. The count is vLLM's own counter, exact; the cause is vLLM's code; the top
    change is not contradicted by its own replay."""
    import json
    import subprocess
    import sys

    p = subprocess.run(
        [sys.executable, "-m", "preemptlog", "analyze", str(FIXTURES / "demo"), "--tz", "UTC", "-f", "json"],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    s = doc["summary"]
    want = _notes_counts()
    assert s["count_visible"] and s["events"] == want["counter"] > 100
    assert s["reconciliation"]["quality"] == "exact"
    assert s["requests_received"] == want["finished"]
    assert {(e["gate"], e["sub_kind"], e["confidence"]) for e in doc["events"]} == {("G1-kv-space", "capacity", "high")}
    assert s["headline"].startswith(f"{want['counter']} preemptions since the engine started")
    assert "KV cache exhausted" in s["headline"] and "vLLM V1 preempts" in s["headline"]
    top = s["fixes"][0]
    assert top["option"].startswith("--") and top["suggested"] is not None
    assert top["status"] == "verified" and top["replay"]["gain"] is True
    kinds = {f["file"].split("/")[-1]: f["kind"] for f in s["inputs"]}
    assert kinds["NOTES.md"] == "document" and kinds["vllm.log"] == "vllm-log"
    # the first lines on stderr: the answer, then the change to make
    lines = p.stderr.splitlines()
    fix = next(i for i, ln in enumerate(lines) if ln.startswith("Top fix: "))
    assert " ".join(ln.strip() for ln in lines[:fix]) == s["headline"] and lines[fix].startswith("Top fix: --")
