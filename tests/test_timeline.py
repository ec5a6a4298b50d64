"""The terminal timeline of ``preemptlog analyze``: histogram by gate, KV sparkline, only on a terminal."""

from __future__ import annotations

import dataclasses
import io
from datetime import UTC, datetime, timedelta

import polars as pl
import pytest
from rich.console import Console
from typer.testing import CliRunner

from preemptlog.analysis import Analysis, AnalyzeOptions
from preemptlog.cli import app
from preemptlog.render.timeline import print_timeline

from .conftest import FIXTURES

T0 = datetime(2026, 11, 30, 5, 10, 0, tzinfo=UTC)
# (second, gate, events): a 5 s incident is binned per second
SPEC = [
    (0, "G1-kv-space", 6),
    (0, "G2-batch-variance", 2),
    (1, "G1-kv-space", 12),
    (1, "G4-prefix-conflict", 1),
    (3, "G3-queue-overflow", 3),
    (4, "undetermined", 1),
]
KV = [20.0, 60.0, 97.0, 99.0, 40.0]  # one stats line per second, half-way through it


def _analysis(untimed: int = 0, kv: list[float] | None = KV) -> Analysis:
    ids, times, gates = [], [], []
    for second, gate, n in SPEC:
        for k in range(n):
            ids.append(f"vllm.log:{len(ids) + 1}")
            times.append(T0 + timedelta(seconds=second, milliseconds=10 * k))
            gates.append(gate)
    for k in range(untimed):
        ids.append(f"vllm.log:{900 + k}")
        times.append(None)
        gates.append("undetermined")
    events = pl.DataFrame(
        {"event_id": ids, "time": times}, schema={"event_id": pl.String, "time": pl.Datetime("us", "UTC")}
    )
    stats = pl.DataFrame(
        {
            "time": [T0 + timedelta(seconds=m, milliseconds=500) for m in range(len(kv or []))],
            "engine": ["0"] * len(kv or []),
            "kv_usage": kv or [],
        },
        schema={"time": pl.Datetime("us", "UTC"), "engine": pl.String, "kv_usage": pl.Float64},
    )
    return Analysis(
        bundle=None,
        events=events,
        stats=stats,
        config=pl.DataFrame(),
        requests=pl.DataFrame(),
        records=pl.DataFrame(),
        tz="UTC",
        verdicts=pl.DataFrame({"event_id": ids, "gate": gates}),
        options=AnalyzeOptions(kv_ceiling=95.0),
    )


def _render(a: Analysis, **kw) -> str:
    console = Console(file=io.StringIO(), width=80, **({"force_terminal": True, "color_system": None} | kw))
    print_timeline(a, console)
    return console.file.getvalue()


SNAPSHOT = """\
Timeline: preemptions per second by gate (tallest column 13)
    13 │   ░░░
       │   ███
       │   ███
       │▓▓▓███
       │▓▓▓███
       │██████
       │██████   ▒▒▒
       │██████   ▒▒▒╳╳╳
     0 └───────────────
  KV % │▂▂▂▅▅▅██████▄▄▄  max 99.0%
        05:10:00  (UTC)
        █ G1-kv-space 18   ▓ G2-batch-variance 2   ▒ G3-queue-overflow 3
        ░ G4-prefix-conflict 1   ╳ undetermined 1
"""


def test_snapshot():
    out = "\n".join(line.rstrip() for line in _render(_analysis()).splitlines()) + "\n"
    assert out == SNAPSHOT


def test_bars_stack_gates_bottom_up_and_rare_gates_stay_visible():
    rows = _render(_analysis()).splitlines()[1:9]
    column = lambda c: "".join(r.split("│", 1)[1].ljust(15)[c] for r in rows)  # noqa: E731 - top to bottom
    assert column(0) == "   ▓▓███"  # second 0: 6 G1 below 2 G2
    assert column(3) == "░███████"  # second 1: 12 G1, and the single G4 event still gets a cell
    assert column(6) == "        "  # second 2: nothing
    assert column(9) == "      ▒▒" and column(12) == "       ╳"


def test_colour_by_gate_and_ceiling():
    out = _render(_analysis(), no_color=False, color_system="standard")
    assert "\x1b[31m███" in out  # G1 red
    assert "\x1b[33m▓▓▓" in out  # G2 yellow
    assert "\x1b[1;31m███" in out  # KV at or above the 95 % ceiling: bold red
    assert "\x1b[36m▂▂▂" in out  # below it: cyan


def test_untimed_events_are_said_and_no_stats_means_no_sparkline():
    out = _render(_analysis(untimed=2, kv=None))
    assert "(2 event(s) without a time not shown)" in out
    assert "KV %" not in out
    assert "tallest column 13" in out


def test_hidden_when_not_a_terminal():
    console = Console(file=io.StringIO(), width=80, force_terminal=False)
    print_timeline(_analysis(), console)
    assert console.file.getvalue() == ""


def test_nothing_without_timed_events():
    a = _analysis()
    a = dataclasses.replace(a, events=a.events.clear())
    assert _render(a) == ""


def test_wide_incident_uses_wider_buckets():
    a = _analysis()
    a = dataclasses.replace(
        a,
        events=a.events.with_columns(
            pl.Series(
                "time", [T0 + timedelta(minutes=7 * i) for i in range(a.events.height)], dtype=pl.Datetime("us", "UTC")
            )
        ),
    )
    out = _render(a)
    assert "preemptions per 5 minutes by gate" in out
    width = max(len(line) for line in out.splitlines()[1:9])
    assert width <= 80


@pytest.fixture
def no_tty_env(monkeypatch):
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)


def test_analyze_prints_it_on_a_terminal_only(no_tty_env):
    runner = CliRunner()
    args = ["analyze", str(FIXTURES / "joined"), "--tz", "UTC", "-f", "ndjson"]
    piped = runner.invoke(app, args)
    assert piped.exit_code in (0, 5), piped.stderr
    assert "preemption event(s)" in piped.stderr and "Timeline:" not in piped.stderr
    tty = runner.invoke(app, args, env={"TTY_COMPATIBLE": "1", "NO_COLOR": "1"})
    assert "Timeline: preemptions per second by gate" in tty.stderr and "KV %" in tty.stderr  # a 53 s incident
    assert tty.stderr.index("preemption event(s)") < tty.stderr.index("Timeline:")  # after the summary
    quiet = runner.invoke(app, args + ["-q"], env={"TTY_COMPATIBLE": "1"})
    # -q: no summary and no timeline; only the one line that explains exit 5 (a damaged block-table line)
    assert quiet.exit_code == 5 and quiet.stderr.startswith("preemptlog: warning: joined/blocktable.jsonl")
    assert len(quiet.stderr.splitlines()) == 1


def test_bins_follow_the_incident_span():
    from preemptlog.render.timeline import _bucket

    assert _bucket(27, 58) == 1  # a 27 s incident: one column per second
    assert _bucket(400, 58) == 10
    assert _bucket(3 * 3600, 58) == 300
    assert _bucket(30 * 86400, 58) == 86400


def test_ascii_glyphs_under_the_c_locale(monkeypatch):
    monkeypatch.setenv("LC_ALL", "C")
    out = _render(_analysis())
    assert out.isascii() and "#" in out and "|" in out
    monkeypatch.setenv("LC_ALL", "en_US.UTF-8")
    assert "█" in _render(_analysis())
