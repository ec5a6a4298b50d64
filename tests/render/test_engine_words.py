"""Each engine's count is said in its own words (nothing outside engines/ names an engine).

A count taken from SGLang's retraction counter is "SGLang's counter", never vLLM's; a bundle of
SGLang's events alone is never told to add preemptlog's vLLM plugin records (a vLLM capture); a
vLLM bundle keeps both; a bundle of both engines says "the engines' counter". Hand-written
bundles in several shapes: scrapes alone, a first reading with ``_created`` (the span since the
engine's start), a log and scrapes, and the CLI through a real subprocess (the human summary on
stderr, the JSON on stdout).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import ROOT

T15, T16 = 1793607300000, 1793607360000  # 2026-11-02 08:15:00 and 08:16:00 UTC, in ms
SG = "sglang:num_retracted_requests_total"
VL = "vllm:num_preemptions_total"


def prom(metric: str, labels: str, value: float, ms: int, created: float | None = None) -> str:
    base = metric.removesuffix("_total")
    out = f"# HELP {metric} The count.\n# TYPE {metric} counter\n{metric}{{{labels}}} {value} {ms}\n"
    if created is not None:
        out += f"# TYPE {base}_created gauge\n{base}_created{{{labels}}} {created} {ms}\n"
    return out


SG_LABELS = 'model_name="Qwen/Qwen3-8B",tp_rank="0"'
VL_LABELS = 'engine="0",model_name="m"'
SG_LOG = (
    "[2026-11-02 08:00:00] server_args=ServerArgs(model_path='Qwen/Qwen3-8B', tp_size=1, "
    "schedule_conservativeness=1.0, retraction_policy='length')\n"
    "[2026-11-02 08:15:30 TP0] Decode batch, #running-req: 60, #token: 199000, token usage: 1.00, "
    "gen throughput (token/s): 2100.00, #queue-req: 12\n"
    "[2026-11-02 08:15:31 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 2, "
    "#new_token_ratio: 0.0980 -> 0.4210\n"
    "[2026-11-02 08:15:33 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 1, "
    "#new_token_ratio: 0.4150 -> 0.4302\n"
)


def bundle(tmp: Path, files: dict[str, str]) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (tmp / name).write_text(text, encoding="utf-8")
    return tmp


def run(path: Path) -> tuple[str, dict]:
    p = subprocess.run(
        [sys.executable, "-m", "preemptlog", "analyze", str(path), "--tz", "UTC", "-f", "json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert p.returncode in (0, 5), p.stderr[-2000:]
    return p.stderr, json.loads(p.stdout)


def counter_metrics(doc: dict) -> list[str]:
    """The counter source's ``metrics`` (the reconciliation's JSON): which counters were read, by name."""
    (src,) = [x for x in doc["summary"]["reconciliation"]["sources"] if x["source"].startswith("prometheus counter (")]
    return src["metrics"]


def know_more(doc: dict) -> list[str]:
    fixes = doc.get("fixes") or doc["summary"].get("fixes") or {}
    items = fixes.get("to_know_more") if isinstance(fixes, dict) else None
    items = items if items is not None else doc["summary"].get("to_know_more") or []
    return [x["add"] for x in items]


SHAPES = {
    "sglang scrapes": (
        {"a.prom": prom(SG, SG_LABELS, 0.0, T15), "b.prom": prom(SG, SG_LABELS, 3.0, T16)},
        "SGLang's counter in the /metrics scrapes",
    ),
    "sglang one reading since _created": (
        {"b.prom": prom(SG, SG_LABELS, 3.0, T16, created=1793606400.0)},
        "SGLang's counter in one /metrics reading",
    ),
    "sglang log and scrapes": (
        {"sglang.log": SG_LOG, "a.prom": prom(SG, SG_LABELS, 0.0, T15), "b.prom": prom(SG, SG_LABELS, 3.0, T16)},
        None,  # the log's own lines are the events: no counter words, still no vLLM plugin
    ),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_sglang_counts_are_sglangs(shape: str, tmp_path: Path) -> None:
    files, words = SHAPES[shape]
    err, doc = run(bundle(tmp_path / "b", files))
    assert len(doc["events"]) == 3, err
    assert "vLLM's counter" not in err
    if words:
        assert words in " ".join(err.split()), err
    if "_created" in shape:
        assert "(SGLang's counter at 08:16:00)" in " ".join(err.split()), err
    assert not any("vLLM plugin" in a for a in know_more(doc)), know_more(doc)
    assert "vLLM plugin" not in err
    if "one reading" not in shape:
        assert counter_metrics(doc) == [SG]


def test_vllm_counts_keep_vllms_words_and_the_plugin(tmp_path: Path) -> None:
    err, doc = run(
        bundle(tmp_path / "v", {"a.prom": prom(VL, VL_LABELS, 0.0, T15), "b.prom": prom(VL, VL_LABELS, 4.0, T16)})
    )
    assert len(doc["events"]) == 4
    assert "vLLM's counter in the /metrics scrapes" in " ".join(err.split()), err
    assert counter_metrics(doc) == [VL]
    assert any("vLLM plugin" in a for a in know_more(doc)), know_more(doc)


def test_both_engines_say_the_engines_counter(tmp_path: Path) -> None:
    files = {
        "a.prom": prom(VL, VL_LABELS, 0.0, T15) + prom(SG, SG_LABELS, 0.0, T15),
        "b.prom": prom(VL, VL_LABELS, 4.0, T16) + prom(SG, SG_LABELS, 3.0, T16),
    }
    err, doc = run(bundle(tmp_path / "both", files))
    assert len(doc["events"]) == 7
    assert "the engines' counter" in " ".join(err.split()), err
    assert counter_metrics(doc) == sorted([SG, VL])
    assert any("vLLM plugin" in a for a in know_more(doc))  # the vLLM events would gain from it


def test_a_vllm_log_without_events_beside_sglangs_counter(tmp_path: Path) -> None:
    """A bundle with a vLLM stats log (no preemption) and SGLang's counter, no SGLang log: the counter is
    another server's (events/scopes.py: a log of one engine never shows another engine's server), so it
    makes no event and no count of the vLLM server's, and is named in the reconciliation; nothing says
    "the engines'" counter. (Before, its 3 retractions were the vLLM log's count.)"""
    stats = (
        "INFO 11-02 08:15:{s:02d} [loggers.py:1] Engine 000: Avg prompt throughput: 100.0 tokens/s, Avg generation "
        "throughput: 50.0 tokens/s, Running: 4 reqs, Waiting: 0 reqs, GPU KV cache usage: 10.0%, Prefix cache hit "
        "rate: 0.0%\n"
    )
    files = {
        "vllm.log": stats.format(s=10) + stats.format(s=20),
        "a.prom": prom(SG, SG_LABELS, 0.0, T15),
        "b.prom": prom(SG, SG_LABELS, 3.0, T16),
    }
    err, doc = run(bundle(tmp_path / "mix", files))
    assert not doc["events"]
    other = doc["summary"]["reconciliation"]["other_servers"]
    assert [(o["engine_kind"], o["count"]) for o in other] == [("sglang", 3)], other
    words = " ".join(err.split())
    assert "the engines' counter" not in words and "SGLang's counter" not in words, err
