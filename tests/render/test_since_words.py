"""A count since the engine started says when, in the words a reader can check: a start on another day
than the reading carries its date (a start 'at 19:46:40' with the counter read 'at 18:05:03' read
backwards), and a reading time nothing in the page states (its file's mtime, the moment standard
input was read) is said to be assumed in the headline, not only under -v. Hand-written pages."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ..conftest import run_cli

PAGE = (
    "# TYPE vllm:num_preemptions counter\n"
    'vllm:num_preemptions_total{{engine="0",model_name="m"}} 17\n'
    'vllm:num_preemptions_created{{engine="0",model_name="m"}} {created}\n'
)
READ = 1796600000  # 2026-12-06 23:33:20 UTC


def _headline(folder: Path) -> str:
    r = run_cli("analyze", str(folder), "--tz", "UTC", "-f", "json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["summary"]["headline"]


def test_a_page_dated_by_its_mtime_says_so_and_dates_a_start_of_the_day_before(tmp_path: Path) -> None:
    p = tmp_path / "metrics.prom"
    p.write_text(PAGE.format(created=READ - 90000))  # 25 h before the reading: the day before
    os.utime(p, (READ, READ))
    h = _headline(tmp_path)
    assert h.startswith("17 preemptions since the engine started at 2026-12-05 22:33:20 (vLLM's counter at 23:33:20")
    assert "its file's modification time, assumed" in h


def test_a_page_named_by_its_time_is_not_assumed_and_one_day_keeps_the_clock_time(tmp_path: Path) -> None:
    (tmp_path / f"metrics-{READ}.prom").write_text(PAGE.format(created=READ - 600))
    h = _headline(tmp_path)
    assert h.startswith("17 preemptions since the engine started at 23:23:20 (vLLM's counter at 23:33:20)")
    assert "assumed" not in h


def test_a_piped_page_is_dated_when_it_was_read_and_says_so() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "preemptlog", "analyze", "-", "--tz", "UTC", "-f", "json"],
        input=PAGE.format(created=1700000000),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    h = json.loads(r.stdout)["summary"]["headline"]
    assert "since the engine started at 2023-11-14 22:13:20 (vLLM's counter at " in h
    assert h.split("(vLLM's counter at ", 1)[1].split(")")[0].endswith(": when preemptlog read it, assumed")
