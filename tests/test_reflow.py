"""Wrapped, reflowed, quoted and indented captures (preemptlog/reflow.py).

The property: a real log (../shared/corpus and corpus2, read at test time)
hard-wrapped at any width from 60 to 200 columns, with or without padded
continuation lines, gives the same events, stats and config as the log itself.
Hand-written lines in several header families check each repair on its own.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from preemptlog import AnalyzeOptions, analyze, reflow

from .conftest import corpus2_dir, corpus_dir, write_lines


def hard_wrap(lines: list[str], width: int, pad: int = 0) -> list[str]:
    """What a terminal capture does: cut every line at ``width`` characters (continuations padded with ``pad`` spaces)."""
    out = []
    for ln in lines:
        if len(ln) <= width:
            out.append(ln)
            continue
        out.append(ln[:width])
        rest = ln[width:]
        while rest:
            out.append(" " * pad + rest[: width - pad])
            rest = rest[width - pad :]
    return out


def _real_logs() -> list[Path]:
    out = []
    for c in (corpus_dir(), corpus2_dir()):
        if c is not None:
            out += [p for p in sorted(c.glob("*.log")) if "wrapped" not in p.name]
    return out


REAL_LOGS = _real_logs()


def fingerprint(a) -> dict:
    ev = a.events.select("kind", "request_id", "mode", "cumulative", "time").sort(pl.all(), nulls_last=True)
    stats = a.stats.drop("seq", "line", "source").sort(pl.all(), nulls_last=True)
    cfg = a.config.filter(pl.col("status") != "default").select("key", "value", "status").unique().sort(pl.all())
    return {"events": ev.rows(), "stats": stats.rows(), "config": cfg.rows()}


def _lines(path: Path) -> list[str]:
    text = path.read_bytes().decode("utf-8", "replace")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def _analyze_lines(tmp_path: Path, name: str, lines: list[str]):
    p = write_lines(tmp_path / name, lines)
    return analyze([str(p)], AnalyzeOptions(tz="UTC", year=2025, rules=False))


_BASE: dict[str, dict] = {}


def _baseline(path: Path, tmp_path: Path) -> dict:
    if path.name not in _BASE:
        _BASE[path.name] = fingerprint(analyze([str(path)], AnalyzeOptions(tz="UTC", year=2025, rules=False)))
    return _BASE[path.name]


def _check_wrapped(path: Path, width: int, pad: int, tmp_path: Path) -> None:
    base = _baseline(path, tmp_path)
    wrapped = hard_wrap(_lines(path), width, pad)
    got = fingerprint(_analyze_lines(tmp_path, f"w{width}p{pad}-{path.name}", wrapped))
    assert got == base, (path.name, width, pad)


@pytest.mark.parametrize("width", [60, 80, 120, 135, 200])
@pytest.mark.parametrize("path", REAL_LOGS, ids=[p.name for p in REAL_LOGS])
def test_real_log_wrapped_gives_the_same_analysis(path, width, tmp_path):
    _check_wrapped(path, width, 0, tmp_path)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_real_log_wrapped_at_any_width_property(data, tmp_path):
    if not REAL_LOGS:
        pytest.skip("real-log corpora not found")
    path = data.draw(st.sampled_from(REAL_LOGS), label="log")
    width = data.draw(st.integers(60, 200), label="width")
    pad = data.draw(st.sampled_from([0, 0, 2, 4]), label="pad")
    _check_wrapped(path, width, pad, tmp_path)
