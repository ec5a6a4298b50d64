"""Input limits from the environment, through real processes: a value that cannot be a limit is a
usage error naming it, never a limit that refuses every archive."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from preemptlog.errors import ExitCode

from ..conftest import ROOT, write_lines

M = "INFO 05-04 05:25:{:02d} [scheduler.py:10] Req-r{} PREEMPTED"


def bundle_tgz(tmp_path: Path) -> Path:
    log = write_lines(tmp_path / "vllm.log", [M.format(i, i) for i in range(5)])
    tgz = tmp_path / "incident.tar.gz"
    with tarfile.open(tgz, "w:gz") as tf:
        tf.add(log, arcname="vllm.log")
    return tgz


def run(*args: str, env: dict[str, str]):
    return subprocess.run(
        [sys.executable, "-m", "preemptlog", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, NO_COLOR="1", TZ="UTC", **env),
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    "name,value",
    [
        ("PREEMPTLOG_ARCHIVE_MAX_MEMBERS", "0.5"),
        ("PREEMPTLOG_ARCHIVE_MAX_MEMBERS", "2.5"),
        ("PREEMPTLOG_ARCHIVE_MAX_BYTES", "0.1"),
        ("PREEMPTLOG_ARCHIVE_MAX_BYTES", "0.5B"),
    ],
)
def test_archive_limit_that_is_no_whole_count_is_a_usage_error(tmp_path, name, value):
    """PREEMPTLOG_ARCHIVE_MAX_MEMBERS=0.5 was taken as 0 members: every archive was refused (exit 3,
    "more than 0 members"). A count of members or bytes is a whole number of at least 1."""
    out = run("analyze", str(bundle_tgz(tmp_path)), "-q", env={name: value})
    assert out.returncode == ExitCode.USAGE, out.stderr
    assert out.stderr.count("\n") == 1 and name in out.stderr and "Traceback" not in out.stderr, out.stderr


@pytest.mark.parametrize(
    "name,value",
    [
        ("PREEMPTLOG_ARCHIVE_MAX_MEMBERS", "10"),
        ("PREEMPTLOG_ARCHIVE_MAX_BYTES", "1.5K"),
        ("PREEMPTLOG_ARCHIVE_MAX_RATIO", "0.5"),
    ],
)
def test_archive_limits_that_are_counts_still_work(tmp_path, name, value):
    out = run("analyze", str(bundle_tgz(tmp_path)), "-q", "-f", "json", env={name: value})
    assert out.returncode == ExitCode.OK, out.stderr
