"""The terminal timeline of ``preemptlog analyze``: one line per lane (gates, KV, waiting), only on a terminal."""

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

from ..conftest import FIXTURES

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
Timeline, one column per second (UTC); each lane scaled to its own peak
G1-kv-space  ▅▅▅███           18, up to 12 per second
G2-batch     ███              2, up to 2 per second
G3-queue              ███     3, up to 3 per second
G4-prefix       ███           1, up to 1 per second
undetermined             ███  1, up to 1 per second
KV %         ▂▂▂▅▅▅██████▄▄▄  max 99 %
             05:10:00
"""


def test_snapshot_one_line_per_lane():
    out = "\n".join(line.rstrip() for line in _render(_analysis()).splitlines()) + "\n"
    assert out == SNAPSHOT


def test_each_lane_is_one_line_scaled_to_its_own_peak():
    rows = _render(_analysis()).splitlines()
    lanes = {r.split()[0]: r for r in rows[1:6]}
    assert set(lanes) == {"G1-kv-space", "G2-batch", "G3-queue", "G4-prefix", "undetermined"}
    g1 = lanes["G1-kv-space"][13:28]
    assert g1[:3] == "▅▅▅" and g1[3:6] == "███"  # 6 then 12 events: half, then the lane's peak
    assert lanes["G4-prefix"][13:28].strip() == "███"  # a single event is drawn at its lane's full height


def test_colour_by_gate_and_ceiling():
    out = _render(_analysis(), no_color=False, color_system="standard")
    assert "\x1b[31m███" in out  # G1 red
    assert "\x1b[33m███" in out  # G2 yellow
    assert "\x1b[1;31m███" in out  # KV at or above the 95 % ceiling: bold red
    assert "\x1b[36m▂▂▂" in out  # below it: cyan


def test_untimed_events_are_said_and_no_stats_means_no_kv_lane():
    out = _render(_analysis(untimed=2, kv=None))
    assert "2 more counted without a place in time (not drawn)" in out
    assert "KV %" not in out
    assert "18, up to 12 per second" in out


def test_a_count_without_a_place_in_time_is_not_drawn_in_one_column():
    """4250 events rebuilt from one V0 warning's total_num_cumulative_preemption (no earlier line: no
    interval start) are said, never drawn as "4250 per second" at the line's second."""
    a = _analysis()
    extra = pl.DataFrame(
        {
            "event_id": [f"vllm.log:1~r{k}" for k in range(4250)],
            "time": [T0 + timedelta(seconds=2)] * 4250,
            "time_precision": ["interval"] * 4250,
            "interval_start": [None] * 4250,
        },
        schema={
            "event_id": pl.String,
            "time": pl.Datetime("us", "UTC"),
            "time_precision": pl.String,
            "interval_start": pl.Datetime("us", "UTC"),
        },
    )
    events = pl.concat([a.events, extra], how="diagonal_relaxed")
    verdicts = pl.concat([a.verdicts, pl.DataFrame({"event_id": extra["event_id"], "gate": ["G1-kv-space"] * 4250})])
    out = _render(dataclasses.replace(a, events=events, verdicts=verdicts))
    assert "4250 more counted without a place in time (not drawn)" in out
    assert "18, up to 12 per second" in out  # the placed events only


def test_the_kv_lane_covers_the_pressure_the_headline_names():
    from preemptlog import AnalyzeOptions, analyze

    a = analyze([str(FIXTURES / "joined")], AnalyzeOptions(tz="UTC"))
    out = _render(a)
    peak = max(p["peak_kv_usage"] for p in a.summary()["pressure_intervals"])
    assert f"max {peak:g} %" in out


def test_hidden_when_not_a_terminal():
    console = Console(file=io.StringIO(), width=80, force_terminal=False)
    print_timeline(_analysis(), console)
    assert console.file.getvalue() == ""


def test_nothing_without_timed_events_or_pressure():
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
    assert "one column per 5 minutes" in out
    assert max(len(line) for line in out.splitlines()) <= 80
    assert len(out.splitlines()) == 8  # five gate lanes, KV, the title and the axis


@pytest.fixture
def no_tty_env(monkeypatch):
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)


def test_analyze_prints_it_on_a_terminal_only(no_tty_env):
    runner = CliRunner()
    args = ["analyze", str(FIXTURES / "joined"), "--tz", "UTC", "-f", "ndjson"]
    piped = runner.invoke(app, args)
    assert piped.exit_code in (0, 5), piped.stderr
    assert "preemption event(s)" in piped.stderr and "Timeline," not in piped.stderr
    tty = runner.invoke(app, args, env={"TTY_COMPATIBLE": "1", "NO_COLOR": "1"})
    assert "Timeline, one column per 2 seconds" in tty.stderr and "KV %" in tty.stderr  # a 53 s incident + pressure
    assert tty.stderr.index("preemption event(s)") < tty.stderr.index("Timeline,")  # after the summary
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
    assert out.isascii() and "#" in out and "_" in out
    monkeypatch.setenv("LC_ALL", "en_US.UTF-8")
    assert "█" in _render(_analysis())
