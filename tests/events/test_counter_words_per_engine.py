"""A /metrics count is said in its own engine's words: SGLang's retraction counter is not
vllm:num_preemptions_total, and an unplaced count (one reading since the engine started) of one
engine never makes another engine's placed count negative (an SGLang reading alone said
'note: -12 event(s) come from the Prometheus counter'). Hand-written scrapes."""

from __future__ import annotations

import json
from pathlib import Path

from ..conftest import run_cli

SGL = """# scraped at {t}
# TYPE sglang:num_retracted_requests_total counter
sglang:num_retracted_requests_total{{model_name="m",tp_rank="0"}} {v}
# TYPE sglang:token_usage gauge
sglang:token_usage{{model_name="m",tp_rank="0"}} 0.97
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{{model_name="m",tp_rank="0"}} 12
"""
VLLM = """# scraped at {t}
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{{engine="0",model_name="m"}} {v}
"""


def _run(folder: Path, *extra: str) -> tuple[str, dict]:
    text = run_cli("analyze", str(folder), "--tz", "UTC", "-f", "table", "-v", *extra)
    assert text.returncode == 0, text.stderr
    doc = run_cli("analyze", str(folder), "--tz", "UTC", "-f", "json")
    assert doc.returncode == 0, doc.stderr
    return text.stdout + text.stderr, json.loads(doc.stdout)


def test_one_sglang_reading_is_said_as_sglang_and_no_count_is_negative(tmp_path: Path) -> None:
    (tmp_path / "metrics.prom").write_text(SGL.format(t=1789000030, v=12))
    out, doc = _run(tmp_path)
    notes = doc["summary"]["notes"]
    assert not [n for n in notes if n.startswith("-") or " -1" in n], notes
    assert "vllm:num_preemptions_total" not in out
    assert any(n.startswith("12 event(s) are retractions SGLang's /metrics counter counted") for n in notes), notes
    assert any("12 retraction(s) of engine 0 counted by sglang:num_retracted_requests_total" in n for n in notes)
    assert "counted by SGLang's /metrics counter since the engine started" in " ".join(out.split())


def test_sglang_scrapes_name_their_counter_under_v(tmp_path: Path) -> None:
    for i, v in enumerate((0, 3, 12)):
        (tmp_path / f"scrape-{i}.prom").write_text(SGL.format(t=1789000000 + 15 * i, v=v))
    out, doc = _run(tmp_path)
    flat = " ".join(out.split())
    assert "prometheus counter (sglang:num_retracted_requests_total): 12" in flat
    assert "vllm:num_preemptions_total" not in flat
    # the JSON keeps its key, with the counter's own name beside it
    src = [s for s in doc["summary"]["reconciliation"]["sources"] if s["source"].startswith("prometheus counter (")]
    assert src and src[0]["metrics"] == ["sglang:num_retracted_requests_total"]


def test_one_vllm_reading_keeps_vllm_words(tmp_path: Path) -> None:
    (tmp_path / "metrics.prom").write_text(VLLM.format(t=1789000030, v=7))
    out, doc = _run(tmp_path)
    notes = doc["summary"]["notes"]
    assert any(n.startswith("7 event(s) are preemptions vLLM's /metrics counter counted") for n in notes), notes
    assert any("7 preemption(s) of engine 0 counted by vllm:num_preemptions_total" in n for n in notes), notes
    assert not [n for n in notes if n.startswith("-")]


def test_the_vllm_counter_note_says_when_each_engine_generation_counts(tmp_path: Path) -> None:
    """vllm:num_preemptions_total is counted when the request runs again in V1 (v1/metrics/stats.py) and
    at the preempting step in V0: the note is true of a V0 bundle's scrapes too."""
    (tmp_path / "metrics-1789000000.prom").write_text(VLLM.format(t=1789000000, v=2))
    (tmp_path / "metrics-1789000030.prom").write_text(VLLM.format(t=1789000030, v=5))
    _, doc = _run(tmp_path)
    note = next(n for n in doc["summary"]["notes"] if "vllm:num_preemptions_total" in n and "spread evenly" in n)
    assert "V1 counts a preemption when the request runs again" in note and "V0 at the step that preempts it" in note
