"""What a counter held at its first reading is said as before *that* reading, per engine: an engine first
seen at the second scrape counts up to its own first reading, not to the first scrape (engine 0's 10 and
engine 1's 7 were '17 preemption(s) before the first scrape'). Hand-written scrapes."""

from __future__ import annotations

import json
from pathlib import Path

from ..conftest import run_cli

PAGE = "# scraped at {t}\n# TYPE vllm:num_preemptions counter\n{rows}"
ROW = 'vllm:num_preemptions_total{{engine="{e}",model_name="m"}} {v}\n'


def _note(folder: Path) -> str:
    out = run_cli("analyze", str(folder), "--tz", "UTC", "-f", "json")
    assert out.returncode == 0, out.stderr
    srcs = json.loads(out.stdout)["summary"]["reconciliation"]["sources"]
    return next(s["note"] for s in srcs if s["source"].startswith("prometheus counter ("))


def test_an_engine_first_seen_later_counts_to_its_own_first_reading(tmp_path: Path) -> None:
    (tmp_path / "a.prom").write_text(PAGE.format(t="2026-12-01T03:10:00Z", rows=ROW.format(e=0, v=10)))
    (tmp_path / "b.prom").write_text(
        PAGE.format(t="2026-12-01T03:11:00Z", rows=ROW.format(e=0, v=15) + ROW.format(e=1, v=7))
    )
    note = _note(tmp_path)
    assert "17 preemption(s) before each series' first reading (engine 0: 10, engine 1: 7)" in note
    assert "before the first scrape" not in note


def test_one_engine_says_its_count_without_a_breakdown(tmp_path: Path) -> None:
    (tmp_path / "a.prom").write_text(PAGE.format(t="2026-12-01T03:10:00Z", rows=ROW.format(e=0, v=10)))
    (tmp_path / "b.prom").write_text(PAGE.format(t="2026-12-01T03:11:00Z", rows=ROW.format(e=0, v=15)))
    note = _note(tmp_path)
    assert "10 preemption(s) before each series' first reading (since its engine's start, not placed)" in note
