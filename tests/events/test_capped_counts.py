"""A counter count larger than the events made of it (model.events.MAX_EVENTS_PER_COUNT): the count the
user reads is the counter's, never the cap, and the events are said to be capped, never "exact".

A jump 5 -> 1e12 between two scrapes read "100000 preemptions", "100000 counted by vLLM's counter in the
/metrics scrapes (exact)", the JSON's total 100000 (the cap); one reading of 1e12 (no scrape before it)
made 1e12 events, a MemoryError.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from preemptlog import AnalyzeOptions, analyze
from preemptlog.model import events as ev_mod

from ..conftest import ROOT

T = 1773482400  # 2026-03-14T10:00:00Z
CAP = 50  # the library tests' cap (model.events.MAX_EVENTS_PER_COUNT, 100000): the same rule, fewer events


@pytest.fixture
def small_cap(monkeypatch):
    monkeypatch.setattr(ev_mod, "MAX_EVENTS_PER_COUNT", CAP)


def _page(value: str, *, meta: bool, ts_ms: int | None = None, eof: bool = False) -> str:
    out = []
    if meta:
        out += [
            "# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.",
            "# TYPE vllm:num_preemptions_total counter",
        ]
    out.append(f'vllm:num_preemptions_total{{engine="0",model_name="m"}} {value}' + (f" {ts_ms}" if ts_ms else ""))
    if eof:
        out.append("# EOF")
    return "\n".join(out) + "\n"


def _bundle(tmp_path: Path, shape: str) -> Path:
    d = tmp_path / "b"
    d.mkdir()
    values = ("5", "1e12")
    if shape == "epoch-named":
        for i, v in enumerate(values):
            (d / f"metrics-{T + 15 * i}.prom").write_text(_page(v, meta=True))
    elif shape == "no-meta-timestamps":
        (d / "scrapes.prom").write_text(
            "".join(_page(v, meta=False, ts_ms=(T + 15 * i) * 1000) for i, v in enumerate(values))
        )
    elif shape == "openmetrics-separators":
        (d / "scrapes.txt").write_text(
            "".join(f"# scrape {T + 15 * i}\n" + _page(v, meta=True, eof=True) for i, v in enumerate(values))
        )
    return d


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PREEMPTLOG_FORMAT", None)
    env["NO_COLOR"] = "1"
    return env


def _cli(path: Path, fmt: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "preemptlog", "analyze", str(path), "-f", fmt, "--tz", "UTC"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=_env(),
    )


@pytest.mark.parametrize("shape", ["epoch-named", "no-meta-timestamps", "openmetrics-separators"])
def test_a_jump_beyond_the_cap_is_counted_whole_and_its_events_said_capped(tmp_path, shape, small_cap):
    d = _bundle(tmp_path, shape)
    a = analyze([str(d)], AnalyzeOptions(tz="UTC"))
    rec = a.summary()["reconciliation"]
    assert rec["total"] == 999_999_999_995, rec
    assert rec["events"] == a.events.height == CAP
    assert rec["quality"] == "capped" and "its events capped" in rec["rule"], rec["rule"]
    [c] = rec["capped"]
    assert (c["count"], c["events"]) == (999_999_999_995, CAP)
    [src] = [x for x in rec["sources"] if x["source"].startswith("prometheus counter (")]
    assert src["count"] == 999_999_999_995 and src["exact"] is False
    assert a.summary()["headline"].startswith(f"999999999995 preemptions by 10:00:00 ({CAP} of")


def test_the_cli_reads_the_counter_delta_never_the_cap_as_exact(tmp_path):
    d = _bundle(tmp_path, "epoch-named")
    out = _cli(d, "json")
    assert out.returncode == 5, out.stderr  # the implausible increase is a warning: damaged input
    s = json.loads(out.stdout)["summary"]
    assert s["reconciliation"]["total"] == 999_999_999_995 and s["reconciliation"]["quality"] == "capped"
    assert s["headline"].startswith("999999999995 preemptions")
    table = _cli(d, "table")
    text = " ".join((table.stdout + table.stderr).split())
    assert "999999999995 preemptions by 10:00:00 (100000 of them as events, capped)" in text, text
    assert "100000 of 999999999995 in interval (capped)" in text
    assert "999999999995 counted by vLLM's counter in the /metrics scrapes (capped:" in text
    assert "(exact)" not in text


@pytest.mark.parametrize("meta", [True, False])
def test_one_reading_beyond_the_cap_is_counted_not_made_into_every_event(tmp_path, meta, small_cap):
    """A single reading counts since the engine's start: its events are capped like an increase's."""
    d = tmp_path / "one"
    d.mkdir()
    (d / f"metrics-{T}.prom").write_text(_page("1e12", meta=meta))
    a = analyze([str(d)], AnalyzeOptions(tz="UTC"))
    rec = a.summary()["reconciliation"]
    assert a.events.height == CAP
    assert rec["total"] == 10**12 and rec["quality"] == "capped", rec
    assert rec["capped"] == [{"from": f"one/metrics-{T}.prom:{3 if meta else 1}", "count": 10**12, "events": CAP}]


def test_counts_within_the_cap_are_untouched(tmp_path, small_cap):
    d = tmp_path / "small"
    d.mkdir()
    for i, v in enumerate(("5", "9", "55")):
        (d / f"metrics-{T + 15 * i}.prom").write_text(_page(v, meta=True))
    rec = analyze([str(d)], AnalyzeOptions(tz="UTC")).summary()["reconciliation"]
    assert (rec["total"], rec["events"], rec["quality"]) == (50, 50, "exact")
    assert "capped" not in rec
