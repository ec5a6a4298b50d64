"""The same counter read twice: from /metrics pages and from a Prometheus query_range answer over the same
time. The answer carries the instance (and job) labels Prometheus adds, the page does not, so they were two
scopes and both were counted: "14 preemptions" for 7. Two sources of one series are one series: merged,
one reading per time, said in a note."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from preemptlog import AnalyzeOptions, analyze

from ..conftest import ROOT

T = 1773482400  # 2026-03-14T10:00:00Z
VALUES = (5, 8, 12)
NAME = "vllm:num_preemptions_total"


def _pages(d: Path, shape: str) -> None:
    if shape == "epoch-named":
        for i, v in enumerate(VALUES):
            (d / f"metrics-{T + 15 * i}.prom").write_text(
                f'# HELP {NAME} x\n# TYPE {NAME} counter\n{NAME}{{engine="0",model_name="m"}} {v}.0\n'
            )
    elif shape == "timestamps":
        (d / "all.prom").write_text(
            "".join(f'{NAME}{{engine="0",model_name="m"}} {v} {(T + 15 * i) * 1000}\n' for i, v in enumerate(VALUES))
        )
    elif shape == "openmetrics":
        (d / "all.txt").write_text(
            "".join(
                f'# scrape {T + 15 * i}\n# TYPE vllm:num_preemptions counter\n{NAME}{{engine="0",model_name="m"}} {v}\n# EOF\n'
                for i, v in enumerate(VALUES)
            )
        )


def _answer(d: Path, instance: bool, values=VALUES) -> None:
    labels = {"__name__": NAME, "engine": "0", "model_name": "m"}
    if instance:
        labels |= {"instance": "gpu-node-3:8000", "job": "vllm"}
    pts = [[T + 15 * i, str(v)] for i, v in enumerate(values)]
    body = {"status": "success", "data": {"resultType": "matrix", "result": [{"metric": labels, "values": pts}]}}
    (d / "range.json").write_text(json.dumps(body))


def _bundle(tmp_path: Path, shape: str, instance: bool = True) -> Path:
    d = tmp_path / "b"
    d.mkdir()
    _pages(d, shape)
    _answer(d, instance)
    return d


@pytest.mark.parametrize("shape", ["epoch-named", "timestamps", "openmetrics"])
@pytest.mark.parametrize("instance", [True, False])
def test_a_page_and_a_query_range_answer_of_one_series_count_once(tmp_path, shape, instance):
    a = analyze([str(_bundle(tmp_path, shape, instance))], AnalyzeOptions(tz="UTC"))
    rec = a.summary()["reconciliation"]
    assert (rec["total"], rec["quality"]) == (7, "exact"), rec["rule"]
    assert a.counters["prometheus"]["series"] == 1
    assert any("3 reading(s) repeat a reading of the same series at the same time" in n for n in a.notes), a.notes
    moved = [n for n in a.notes if "no instance label" in n]
    assert bool(moved) == instance
    if instance:
        assert "(gpu-node-3:8000; same metric, engine and model)" in moved[0]


def test_two_instances_with_the_same_labels_stay_apart(tmp_path):
    """A page beside answers of two servers with the same labels: whose it is cannot be told."""
    d = tmp_path / "b"
    d.mkdir()
    _pages(d, "epoch-named")
    labels = {"__name__": NAME, "engine": "0", "model_name": "m", "job": "vllm"}
    result = [
        {"metric": labels | {"instance": h}, "values": [[T + 15 * i, str(v + k)] for i, v in enumerate(VALUES)]}
        for k, h in enumerate(("a:8000", "b:8000"))
    ]
    (d / "range.json").write_text(json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}}))
    a = analyze([str(d)], AnalyzeOptions(tz="UTC"))
    assert a.counters["prometheus"]["series"] == 3
    assert not [n for n in a.notes if "no instance label" in n]


def test_the_cli_counts_the_series_once(tmp_path):
    d = _bundle(tmp_path, "epoch-named")
    env = {k: v for k, v in os.environ.items() if k != "PREEMPTLOG_FORMAT"} | {"NO_COLOR": "1"}
    run = [sys.executable, "-m", "preemptlog", "analyze", str(d), "--tz", "UTC"]
    out = subprocess.run([*run, "-f", "json"], capture_output=True, text=True, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stderr
    s = json.loads(out.stdout)["summary"]
    assert s["reconciliation"]["total"] == 7 and s["headline"].startswith("7 preemptions")
    table = subprocess.run([*run, "-f", "table"], capture_output=True, text=True, cwd=ROOT, env=env)
    text = " ".join((table.stdout + table.stderr).split())
    assert "7 preemptions in" in text and "range.json" not in text.split("an id ending")[0], text
