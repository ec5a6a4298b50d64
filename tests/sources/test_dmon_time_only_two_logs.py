"""A ``dmon -o T`` capture (time of day, no date) beside two logs that ran on different days: it takes
the day that puts it on one log's own span, never a day in the gap between the logs.

Before: the capture was dated by the hull of the logs' spans (September to November): every day
in between overlapped it, the first won, and the capture landed on the September log's day; the
November log's preemptions, whose seconds the capture covers, read no GPU evidence at all."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

STATS = (
    "(APIServer pid=1) INFO {md} {hms} [loggers.py:266] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg "
    "generation throughput: 100.0 tokens/s, Running: 8 reqs, Waiting: 2 reqs, Preemptions: 2, GPU KV cache usage: "
    "99.0%, Prefix cache hit rate: 0.0%"
)
BANNER = "(APIServer pid=1) INFO {md} {hms} [api_server.py:1] vLLM API server version 0.30.0"


def _log(md: str, hh: str) -> str:
    return "\n".join(
        [
            BANNER.format(md=md, hms=f"{hh}:59:00"),
            STATS.format(md=md, hms=f"{hh}:59:40"),
            STATS.format(md=md, hms=f"{hh}:59:50"),
        ]
    )


def _dmon() -> str:
    # 23:59:30 .. 23:59:59, GPU 0: the frame buffer rises by 5000 MB at 23:59:45 (line 18)
    rows = [f" 23:59:{s:02d}      0  {1000 + (5000 if s >= 45 else 0)}   50" for s in range(30, 60)]
    return "\n".join(["#Time        gpu    fb    sm", "#HH:MM:SS    Idx    MB     %", *rows]) + "\n"


def _run(bundle: Path) -> tuple[dict, str]:
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "preemptlog",
            "analyze",
            str(bundle),
            "--tz",
            "UTC",
            "--year",
            "2026",
            "-f",
            "json",
            "-v",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout), p.stderr


def _check(doc: dict, stderr: str, late: str) -> None:
    assert "dmon date (b/dmon.txt): 2026-11-30" in " ".join(stderr.split())
    got = {e["event_id"]: e for e in doc["events"] if e["event_id"].startswith(late)}
    assert len(got) == 4
    # the interval 23:59:40-23:59:50 holds the rise at 23:59:45
    for eid in (f"{late}:3~i1", f"{late}:3~i2"):
        assert got[eid]["dmon_fb_jump_mb"] == 5000.0 and got[eid]["dmon_fb_jump_mb_src"] == "b/dmon.txt:18"
        assert got[eid]["dmon_fb_at_mb"] == 6000.0
    # the earlier log's events (another day) read nothing from it
    early = [e for e in doc["events"] if not e["event_id"].startswith(late)]
    assert early and all(e["dmon_fb_at_mb"] is None and e["dmon_fb_jump_mb"] is None for e in early)


def test_a_time_only_capture_lands_on_the_log_whose_seconds_it_covers(tmp_path):
    b = tmp_path / "b"
    b.mkdir()
    (b / "sep.log").write_text(_log("09-13", "16") + "\n")
    (b / "nov.log").write_text(_log("11-30", "23") + "\n")
    (b / "dmon.txt").write_text(_dmon())
    doc, err = _run(b)
    _check(doc, err, "b/nov.log")


def test_beside_a_log_of_another_engine_too(tmp_path):
    b = tmp_path / "b"
    b.mkdir()
    (b / "sglang.log").write_text(
        "[2026-09-13 16:05:00] server_args=ServerArgs(model_path='m', tp_size=1, schedule_conservativeness=1.0)\n"
        "[2026-09-13 16:06:07 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 2, "
        "#new_tokens_gained: 646, #new_token_ratio: 0.0980 -> 0.3487\n"
    )
    (b / "vllm.log").write_text(_log("11-30", "23") + "\n")
    (b / "dmon.txt").write_text(_dmon())
    doc, err = _run(b)
    _check(doc, err, "b/vllm.log")


def test_a_dated_capture_in_the_gap_between_two_logs_is_said_not_to_meet_them(tmp_path):
    # before: a capture of Oct 15 lay inside the hull of the logs (Sep 13 .. Nov 30): no warning, and
    # the reader took the silence for "no GPU evidence near the preemptions"
    b = tmp_path / "b"
    b.mkdir()
    (b / "sep.log").write_text(_log("09-13", "16") + "\n")
    (b / "nov.log").write_text(_log("11-30", "23") + "\n")
    rows = [f" 20261015   12:00:{s:02d}      0  1000   50" for s in range(30, 60)]
    head = ["#Date       Time        gpu    fb    sm", "#YYYYMMDD   HH:MM:SS    Idx    MB     %"]
    (b / "dmon.txt").write_text("\n".join([*head, *rows]) + "\n")
    doc, err = _run(b)
    words = " ".join(err.split())
    # said against the nearer log (Sep 13 16:59:50, 31.8 days before the capture)
    assert "b/dmon.txt: its dmon samples (2026-10-15T12:00:30+00:00 to 2026-10-15T12:00:59+00:00) do not meet" in words
    assert "(2026-09-13T16:59:00+00:00 to 2026-09-13T16:59:50+00:00; 32 days after it)" in words
    assert all(e["dmon_fb_at_mb"] is None for e in doc["events"])
