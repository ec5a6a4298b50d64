"""bench/reqlog.py's preemption density and bench/run's preemption-heavy case (issue 36; no timing)."""

from __future__ import annotations

import json
import subprocess
import sys

from ..conftest import ROOT


def _gen(tmp_path, name: str, *extra: str) -> tuple[bytes, dict]:
    out = tmp_path / name
    p = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "reqlog.py"), str(out), "--size", "4M", *extra],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    return out.read_bytes(), json.loads(p.stdout)


def test_density_option(tmp_path):
    """The default stays the issue-18 log (~440 per GB: the bench's numbers hold); a density per GB
    adds markers on the same random stream (the other line families barely move)."""
    default, c0 = _gen(tmp_path, "a.log")
    again, _ = _gen(tmp_path, "b.log")
    assert default == again
    heavy, c1 = _gen(tmp_path, "c.log", "--preemptions-per-gb", "26000")
    assert c0["preempted"] <= 10  # 4 MB at ~440 per GB
    assert 60 <= c1["preempted"] <= 150  # ~100 expected at 26 000 per GB
    assert heavy.count(b"RequestStatus.PREEMPTED") == c1["preempted"]
    assert abs(c1["received"] - c0["received"]) <= c1["preempted"]


def test_bench_only_preemption_heavy(tmp_path):
    p = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "run"),
            "--quick",
            "--runs",
            "1",
            "--no-install",
            "--only",
            "preemption-heavy",
            "--data",
            str(tmp_path / "data"),
            "--out",
            str(tmp_path / "never-written.md"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    assert "analyze 16M preemption-heavy V1 log" in p.stdout
    assert "RSS <= 400 MB" in p.stdout
    assert "preemptlog profile: joiner" in p.stdout
    assert not (tmp_path / "never-written.md").exists()
