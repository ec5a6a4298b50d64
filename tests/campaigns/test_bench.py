"""bench/run --quick runs end to end on a few MB and writes its table (no timing is asserted)."""

from __future__ import annotations

import subprocess
import sys

from ..conftest import ROOT


def test_bench_quick_writes_its_table(tmp_path):
    out = tmp_path / "performance.md"
    out.write_text(
        "# Performance\n\nprose kept by hand\n\n<!-- bench: written by bench/run -->\nold\n<!-- /bench -->\n\nmore prose\n"
    )
    p = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "run"),
            "--quick",
            "--runs",
            "1",
            "--no-install",
            "--data",
            str(tmp_path / "data"),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    text = out.read_text()
    assert "prose kept by hand" in text and "more prose" in text and "\nold\n" not in text
    table = [ln for ln in text.splitlines() if ln.startswith("| ")]
    assert table[0].startswith("| case |")
    cases = " ".join(table)
    for case in (
        "analyze 4M request-heavy V1 log",
        "analyze 16M request-heavy V1 log",
        "analyze 4M long-line V0 log",
        "analyze 16M long-line V0 log",
        "analyze 4M long-line log as .gz",
        "preemptlog --help",
        "analyze 1M V0 log (end to end)",
        "analyze 1M request-heavy V1 log (end to end)",
        "floor: line reader alone",
        "joiner",
    ):
        assert case in cases, case
    # Every baseline of the issue-18 yardstick, named as such, in the same alternation.
    for base in ("`4-pattern grep -F -c`", "-pattern grep -F -c`", "`cat > /dev/null`"):
        assert base in cases, base
    assert "Machine:" in text and "polars" in text and "Busy:" in text
    assert "preemptlog profile: vllm logs" in text


def test_reqlog_is_deterministic_and_request_heavy(tmp_path):
    """bench/reqlog.py: same seed and size, same bytes; the issue-18 line mix (no timing)."""
    import json

    outs = []
    for name in ("a.log", "b.log"):
        p = subprocess.run(
            [sys.executable, str(ROOT / "bench" / "reqlog.py"), str(tmp_path / name), "--size", "3M", "--seed", "7"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert p.returncode == 0, p.stderr
        outs.append(json.loads(p.stdout))
    a, b = (tmp_path / "a.log").read_bytes(), (tmp_path / "b.log").read_bytes()
    assert a == b and len(a) <= 3 << 20 and a.endswith(b"\n")
    c = outs[0]
    assert c["lines"] == a.count(b"\n")
    # Per 1.89 M lines the log has 850 k received, 565 k added, 282 k details, 189 k access.
    assert 0.40 < c["received"] / c["lines"] < 0.50
    assert 0.60 < c["added"] / c["received"] < 0.72 and 0.28 < c["details"] / c["received"] < 0.38
    assert 0.15 < c["access"] / c["received"] < 0.30 and c["stats"] > 0
    p = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "reqlog.py"), str(tmp_path / "c.log"), "--size", "3M", "--seed", "8"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (tmp_path / "c.log").read_bytes() != a
