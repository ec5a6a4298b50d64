"""Shared test fixtures.

The real-log corpus lives beside the checkout (../shared/corpus); tests that
need it skip with a reason when it is absent. It is never copied here.
Set PREEMPTLOG_CORPUS to point elsewhere.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"


def _shared_dir(name: str, env: str, marker: str) -> Path | None:
    """``../shared/<name>`` beside the checkout (``$<env>`` first), when it holds ``marker``."""
    candidates = [Path(os.environ[env])] if os.environ.get(env) else []
    candidates += [ROOT.parent / "shared" / name, Path("/work/shared") / name]
    for c in candidates:
        if (c / marker).is_file():
            return c
    return None


def corpus_dir() -> Path | None:
    return _shared_dir("corpus", "PREEMPTLOG_CORPUS", "SOURCES.md")


def corpus2_dir() -> Path | None:
    """The second real-log corpus (../shared/corpus2, with truth.json); PREEMPTLOG_CORPUS2 overrides."""
    return _shared_dir("corpus2", "PREEMPTLOG_CORPUS2", "truth.json")


@pytest.fixture
def corpus() -> Path:
    c = corpus_dir()
    if c is None:
        pytest.skip("real-log corpus not found (../shared/corpus; set PREEMPTLOG_CORPUS)")
    return c


@pytest.fixture
def corpus2() -> Path:
    c = corpus2_dir()
    if c is None:
        pytest.skip("second real-log corpus not found (../shared/corpus2/truth.json; set PREEMPTLOG_CORPUS2)")
    return c


@pytest.fixture
def in_root(monkeypatch):
    """Run with the repository root as working directory (golden outputs hold relative paths)."""
    monkeypatch.chdir(ROOT)
    return ROOT


def write_lines(path: Path, lines: list[str], newline: str = "\n") -> Path:
    path.write_bytes((newline.join(lines) + newline).encode("utf-8"))
    return path
