"""``preemptlog whatif`` on a damaged bundle: exit 5 (as analyze of it) and the damage said, even
with -q; a workload missing because of the damage is said with the damage."""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "fixtures" / "demo"


def cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "preemptlog", *args, "--tz", "UTC", "-q"],
        capture_output=True,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
        cwd=cwd,
        timeout=300,
    )


def test_a_damaged_input_beside_the_workload_is_exit_5_and_said(tmp_path):
    """Before: exit 0 and not a word of the damaged file (analyze and report of the bundle: exit 5)."""
    b = tmp_path / "b"
    shutil.copytree(DEMO, b)
    (b / "old.log.gz").write_bytes(gzip.compress((DEMO / "vllm.log").read_bytes())[:60])
    a = cli(tmp_path, "analyze", "b", "-f", "json")
    assert a.returncode == 5
    p = cli(tmp_path, "whatif", "b", "--set", "max_num_seqs=4", "-f", "csv")
    assert p.returncode == 5, p.stderr
    assert [r.split(",")[0] for r in p.stdout.splitlines()[1:]] == ["observed", "max_num_seqs=4"]
    assert p.stderr.startswith("preemptlog: warning: b/old.log.gz: damaged gzip file"), p.stderr


def test_a_workload_lost_to_the_damage_is_said_with_it(tmp_path):
    """Before: only "no workload in the bundle" (exit 8): nothing said that the archive was cut."""
    with tarfile.open(tmp_path / "full.tar", "w") as tf:
        tf.add(DEMO, arcname="demo")
    with tarfile.open(tmp_path / "full.tar") as tf:
        at = tf.getmember("demo/vllm.log").offset_data  # cut 100 bytes into the log: its start-up lines only
    (tmp_path / "cut.tar").write_bytes((tmp_path / "full.tar").read_bytes()[: at + 100])
    p = cli(tmp_path, "whatif", "cut.tar", "--set", "max_num_seqs=4", "-f", "csv")
    assert p.returncode == 8, p.stderr
    lines = p.stderr.strip().splitlines()
    assert lines[0].startswith("preemptlog: warning: archive cut.tar is damaged"), p.stderr
    assert lines[1].startswith("preemptlog: error: no workload in the bundle")
