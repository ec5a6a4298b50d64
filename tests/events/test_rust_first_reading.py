"""A Rust-frontend log beside a /metrics reading counted since the engine's start: nothing twice.

The Rust frontend's stats line (vLLM 0.33+) counts every engine's preemptions (engine ``all``);
``vllm:num_preemptions_total`` counts per engine since the engine started. The on-call shape: the log
and one ``curl /metrics`` taken after the incident. The reading's count less the log's own events is
what the log does not hold: the log's ``all`` events are some engine's own (before: they were nobody's,
and 11 preemptions were reported as 22, "exact"). A scrape series whose first reading falls inside a
log tick: that reading says how many of the tick's preemptions came before it. Through the CLI, a real
subprocess.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ..support.rust_bundle import rust_incident as _bundle


def _summary(b: Path, tmp_path: Path) -> dict:
    out = tmp_path / "out.json"
    r = subprocess.run(
        [sys.executable, "-m", "preemptlog", "analyze", str(b), "--year", "2026", "--tz", "UTC", "-q"]
        + ["-f", "json", "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    return json.loads(out.read_text(encoding="utf-8"))


def test_one_reading_after_the_incident_holds_the_logs_own_preemptions(tmp_path):
    doc = _summary(_bundle(tmp_path, [("2026-12-01T10:01:00", {"0": 11})]), tmp_path)
    assert doc["summary"]["reconciliation"]["total"] == 11
    assert len(doc["events"]) == 11
    assert all(e["source"].endswith("vllm.log") for e in doc["events"])


def test_one_reading_of_two_engines_holds_the_logs_sum(tmp_path):
    """Two data-parallel engines, 5 + 6 by the reading: the log's 11 (every engine summed) are those."""
    doc = _summary(_bundle(tmp_path, [("2026-12-01T10:01:00", {"0": 5, "1": 6})]), tmp_path)
    assert doc["summary"]["reconciliation"]["total"] == 11


def test_a_scrape_series_starting_inside_a_tick_splits_it_by_its_first_reading(tmp_path):
    """The counter read 2 at 10:00:12, inside the tick (10:00:10, 10:00:20] of 4: 2 of them came before
    the scrapes, 2 after; then +9 to 10:01:00 (2 + 7). 11 in all (before: 12, the first reading's 2
    counted again beside the log's)."""
    doc = _summary(_bundle(tmp_path, [("2026-12-01T10:00:12", {"0": 2}), ("2026-12-01T10:01:00", {"0": 11})]), tmp_path)
    assert doc["summary"]["reconciliation"]["total"] == 11
    before = [e for e in doc["events"] if e["time"] and e["time"][11:19] <= "10:00:12"]
    assert len(before) == 2, before
