"""The honesty note of a log that cannot count beside one /metrics reading says the reading's time as
the time it was read, and the engine's start as the start (it said '0 preemption(s) since engine start
at <the reading's time>'). Hand-written: a stock V1 log and one scrape of 0 with ``_created`` inside it."""

from __future__ import annotations

from pathlib import Path

from preemptlog import AnalyzeOptions, analyze

LOG = (
    "(APIServer pid=7) INFO 12-01 10:00:{s:02d} [loggers.py:259] Engine 000: Avg prompt throughput: 10.0 tokens/s, "
    "Avg generation throughput: 900.0 tokens/s, Running: 20 reqs, Waiting: 0 reqs, GPU KV cache usage: 40.0%, "
    "Prefix cache hit rate: 1.0%\n"
)
T0 = 1796119200  # 2026-12-01 10:00:00 UTC


def test_the_note_says_when_the_reading_was_taken_and_where_the_start_comes_from(tmp_path: Path) -> None:
    (tmp_path / "vllm.log").write_text("".join(LOG.format(s=s) for s in (10, 20, 30)), encoding="utf-8")
    (tmp_path / f"metrics-{T0 + 40}.prom").write_text(
        "# TYPE vllm:num_preemptions_total counter\n"
        'vllm:num_preemptions_total{engine="0",model_name="m"} 0.0\n'
        f'vllm:num_preemptions_created{{engine="0",model_name="m"}} {T0 + 15}.0\n',
        encoding="utf-8",
    )
    a = analyze([str(tmp_path)], AnalyzeOptions(tz="UTC", year=2026))
    (note,) = [n for n in a.summary()["notes"] if "The only count is one Prometheus reading" in n]
    assert "since engine start at 2026-12-01T10:00:40" not in note
    assert (
        "0 preemption(s) since the engine's start (" in note
        and "metrics-1796119240.prom:3 (_created)), read at 2026-12-01T10:00:40+00:00" in note
    )
