"""Times in the headline's words are instants: a span over a DST change shows each end's UTC offset
(the wall clock went back), a span over days shows dates, and a crash is placed among the
preemptions by its instant, not by its clock text (which sorts 23:59 after 00:01)."""

from __future__ import annotations

from pathlib import Path

from preemptlog.render import summary as words

from ..conftest import run_cli


def _stats(t: str, pre: int, kv: float, running: int, waiting: int) -> str:
    return (
        f"INFO 10-25 {t} [loggers.py:118] Engine 000: Avg prompt throughput: 100.0 tokens/s, Avg generation "
        f"throughput: 50.0 tokens/s, Running: {running} reqs, Waiting: {waiting} reqs, Preemptions: {pre}, "
        f"GPU KV cache usage: {kv:.1f}%, Prefix cache hit rate: 0.0%"
    )


def test_span_over_the_fall_back_hour_shows_offsets(tmp_path: Path) -> None:
    # Europe/Berlin, 2026-10-25: 02:59:59 CEST is followed by 02:00:00 CET.
    lines = ["INFO 10-25 01:50:00 [api_server.py:1] vLLM API server version 0.10.0"]
    lines += [_stats(f"02:58:{s:02d}", 0, 50.0, 20, 0) for s in range(0, 60, 10)]
    lines += [_stats(f"02:59:{s:02d}", 1, 99.0, 20, 5) for s in range(0, 60, 10)]
    lines += [_stats(f"02:00:{s:02d}", 2, 99.5, 10, 8) for s in range(0, 60, 10)]
    (tmp_path / "vllm.log").write_text("\n".join(lines) + "\n")
    got = run_cli("analyze", str(tmp_path / "vllm.log"), "--tz", "Europe/Berlin", "--year", "2026", "-f", "table")
    assert got.returncode == 0, got.stderr
    head = " ".join((got.stdout + got.stderr).split())
    assert "02:59:00+02:00 to 02:00:50+01:00" in head, head
    assert "02:59:00-02:00:50" not in head  # before: a range that reads backwards


def test_span_words() -> None:
    assert words._hms_span("2026-10-25T02:10:00+02:00", "2026-10-25T02:40:00+02:00") == "02:10:00-02:40:00"
    assert words._hms_span("2026-03-29T01:59:00+01:00", "2026-03-29T03:01:00+02:00") == (
        "01:59:00+01:00 to 03:01:00+02:00"
    )
    assert words._hms_span("2026-05-01T23:00:00+00:00", "2026-05-03T01:00:00+00:00") == (
        "2026-05-01 23:00:00 to 2026-05-03 01:00:00"
    )
    assert words._hms_span("2026-05-01T23:59:00+00:00", "2026-05-02T00:01:00+00:00") == "23:59:00-00:01:00"
    assert words._hms_span(None, "2026-05-02T00:01:00+00:00") == "?-00:01:00"


def test_crash_among_preemptions_over_midnight() -> None:
    s = {
        "first_event": "2026-05-01T23:59:00+00:00",
        "last_event": "2026-05-02T00:01:00+00:00",
        "crashes": [{"what": "AssertionError", "where": "scheduler.py:1", "time": "2026-05-02T00:00:30+00:00"}],
    }
    assert words.crash_words(s).endswith(", among the preemptions")
    s["crashes"][0]["time"] = "2026-05-02T00:01:00.400000+00:00"
    s["first_event"] = "2026-05-02T00:00:59+00:00"
    s["last_event"] = "2026-05-02T00:01:00+00:00"
    assert words.crash_words(s).endswith(", the second of a preemption")
    s["crashes"][0]["time"] = "2026-05-02T00:05:00+00:00"
    assert ", among" not in words.crash_words(s) and ", the second" not in words.crash_words(s)
