"""``preemptlog whatif``: a setting given twice with two values is a contradictory command line
(exit 2, one line), never a silent pick; a sweep never replays one configuration twice."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEMO = str(ROOT / "fixtures" / "demo")


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "preemptlog", "whatif", DEMO, "--tz", "UTC", "-f", "csv", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
        cwd=Path(DEMO).parent,
        timeout=300,
    )


@pytest.mark.parametrize(
    ("args", "line"),
    [
        # before: exit 0, the replay of max_num_seqs=8 alone (the 4 dropped without a word)
        (["--set", "max_num_seqs=4", "--set", "max_num_seqs=8"], "--set max_num_seqs given twice (4, then 8)"),
        (["--config", "max_num_seqs=4,max_num_seqs=8"], "--config max_num_seqs given twice (4, then 8)"),
        (["--base", "block_size=16", "--base", "block_size=32"], "--base block_size given twice (16, then 32)"),
        # before: exit 0, the rows of the second sweep only, each twice
        (["--sweep", "max_num_seqs=4", "--sweep", "max_num_seqs=8"], "--sweep max_num_seqs given twice"),
        # before: exit 0, two identical rows max_num_seqs=4 (04 is 4)
        (["--sweep", "max_num_seqs=16,4,04"], "--sweep 'max_num_seqs=16,4,04': 04 given twice"),
    ],
)
def test_a_setting_given_twice_is_a_usage_error(args, line):
    p = cli(*args)
    assert p.returncode == 2, p.stderr
    assert p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"preemptlog: error: {line}"), p.stderr


def test_the_same_value_twice_is_no_contradiction():
    p = cli("--set", "max_num_seqs=4", "--set", "max_num_seqs=4")
    assert p.returncode == 0, p.stderr[-2000:]
    rows = [r.split(",")[0] for r in p.stdout.strip().splitlines()[1:]]
    assert rows == ["observed", "max_num_seqs=4"]
