"""The accuracy harness: verdicts scored against simulated truth."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from preemptlog.cli import app
from preemptlog.simulate.evaluate import aggregate, score_bundle

from ..conftest import FIXTURES


def test_demo_bundle_scores():
    s = score_bundle(str(FIXTURES / "guide-demo"))
    assert s.truth_total > 100
    assert s.events == s.truth_visible  # each preemption counted once (markers + V0 counter merged)
    assert s.matched == s.truth_total
    assert s.accuracy >= 0.95
    total = aggregate([s])
    assert total["per_gate"]["G1-kv-space"]["support"] > 0


def test_eval_command_json(tmp_path):
    r = CliRunner().invoke(app, ["eval", str(FIXTURES / "guide-demo"), "-f", "json"])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["total"]["gate_accuracy"] >= 0.95
    assert set(doc["total"]["confusion"]) == {
        "G1-kv-space",
        "G2-batch-variance",
        "G3-queue-overflow",
        "G4-prefix-conflict",
    }


def test_eval_refuses_a_non_simulated_bundle(tmp_path):
    (tmp_path / "vllm.log").write_text("x\n")
    r = CliRunner().invoke(app, ["eval", str(tmp_path)])
    assert r.exit_code == 3 and "not a simulated bundle" in r.stderr
