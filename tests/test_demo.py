"""The README's demo bundle is what the simulator writes today (fixtures/demo.args)."""

from __future__ import annotations

import shlex

from typer.testing import CliRunner

from preemptlog.cli import app

from .conftest import FIXTURES


def test_demo_bundle_is_current(tmp_path):
    args = shlex.split((FIXTURES / "demo.args").read_text())
    out = tmp_path / "demo"
    r = CliRunner().invoke(app, ["simulate", *args, "-o", str(out), "-q"])
    assert r.exit_code == 0, r.stderr
    committed = sorted(p.name for p in (FIXTURES / "demo").iterdir())
    assert committed == sorted(p.name for p in out.iterdir())
    for name in committed:
        assert (out / name).read_bytes() == (FIXTURES / "demo" / name).read_bytes(), (
            f"fixtures/demo/{name} is stale: regenerate with "
            "preemptlog simulate $(cat fixtures/demo.args) -o fixtures/demo --force"
        )


def test_demo_analysis_names_every_gate():
    from preemptlog import AnalyzeOptions, analyze

    r = analyze([str(FIXTURES / "demo")], AnalyzeOptions(tz="UTC"))
    s = r.summary()
    assert s["events"] > 100
    assert all(s["by_gate"][g] > 0 for g in ("G1-kv-space", "G2-batch-variance", "G4-prefix-conflict"))
    kinds = {f["file"].split("/")[-1]: f["kind"] for f in s["inputs"]}
    assert kinds["dmon.txt"] == "dmon" and kinds["blocktable.jsonl"] == "blocktable"
    assert kinds["scenario.json"] == "unknown" and kinds["truth.jsonl"] == "unknown"
