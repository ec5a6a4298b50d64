"""A source that does not meet the vLLM log in time is said so (sources/meets.py), never silently used.

Hand-written bundles: a V0 log of 10:00:00-10:00:15 UTC and, beside it, a dmon capture, /metrics
scrapes or block-table records whose clock is 2 h ahead (a zone mismatch: local time read as UTC).
Before, nothing was said: the dmon evidence was silently empty, the scrapes' count and the records'
preemptions were placed at 12:00 under a headline that cited the log's 10:00 pressure.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from preemptlog import AnalyzeOptions, analyze
from preemptlog.sources.meets import zone_shift

W = (
    "Sequence group {rid} is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache "
    "space. This can affect the end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size "
    "to provide more KV cache memory. total_num_cumulative_preemption={n}"
)


def _stats(ts: str, pend: int, kv: float) -> str:
    return (
        f"INFO 12-01 {ts} [metrics.py:486] Avg prompt throughput: 10.0 tokens/s, Avg generation throughput: "
        f"200.0 tokens/s, Running: 30 reqs, Swapped: 0 reqs, Pending: {pend} reqs, GPU KV cache usage: {kv}%, "
        "CPU KV cache usage: 0.0%."
    )


LOG = "\n".join(
    [
        "INFO 12-01 10:00:00 [api_server.py:1090] vLLM API server version 0.8.5",
        "INFO 12-01 10:00:00 [executor_base.py:112] # cuda blocks: 1280, # CPU blocks: 2048",
        _stats("10:00:05", 5, 99.0),
        "WARNING 12-01 10:00:06 [scheduler.py:1775] " + W.format(rid="r-a", n=1),
        _stats("10:00:10", 8, 99.5),
        "WARNING 12-01 10:00:12 [scheduler.py:1775] " + W.format(rid="r-b", n=51),
        _stats("10:00:15", 8, 99.5),
    ]
)


def _dmon(start: datetime) -> str:
    rows = [
        "#Date       Time        gpu    pwr     sm    mem     fb",
        "#YYYYMMDD   HH:MM:SS    Idx      W      %      %     MB",
    ]
    for i in range(20):
        t = start + timedelta(seconds=i)
        rows.append(f" {t:%Y%m%d   %H:%M:%S}      0    250     90     80  {30000 + (5000 if i >= 10 else 0)}")
    return "\n".join(rows) + "\n"


def _scrapes(hour: int) -> str:
    out = []
    for sec, n in ((15, 0), (25, 3), (35, 5)):
        out.append(
            f"# scrape 2026-12-01T{hour}:00:{sec}+00:00\n# TYPE vllm:num_preemptions_total counter\n"
            f'vllm:num_preemptions_total{{engine="0",model_name="m"}} {n}\n'
        )
    return "".join(out)


def _records(hour: int) -> str:
    return (
        f'{{"type":"step","time":"2026-12-01T{hour}:00:07Z","step":4,"num_free_blocks":0,"num_total_blocks":64}}\n'
        f'{{"type":"event","time":"2026-12-01T{hour}:00:07Z","step":4,"request_id":"r-x","action":"preempt",'
        '"blocks_before":8,"blocks_after":0}\n'
    )


def _bundle(tmp_path: Path, name: str, text: str) -> Path:
    d = tmp_path / "incident"
    d.mkdir(parents=True)
    (d / "vllm.log").write_text(LOG + "\n")
    (d / name).write_text(text)
    return d


def _run(d: Path, **kw: object) -> object:
    return analyze([str(d)], AnalyzeOptions(tz="UTC", year=2026, rules=False, **kw))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "name,text,what,first,gap,tz_helps",
    [
        ("dmon.txt", _dmon(datetime(2026, 12, 1, 11, 59, 58)), "dmon samples", "11:59:58", "1 h 59 min", False),
        ("metrics.prom", _scrapes(12), "scrapes (and counter starts)", "12:00:15", "2 h", True),
        ("records.jsonl", _records(12), "block-table records", "12:00:07", "1 h 59 min", True),
    ],
)
def test_a_source_two_hours_ahead_is_said_not_to_meet_the_log(
    tmp_path: Path, name: str, text: str, what: str, first: str, gap: str, tz_helps: bool
) -> None:
    a = _run(_bundle(tmp_path, name, text))
    said = [w for w in a.warnings if "do not meet the vLLM log in time" in w]  # type: ignore[attr-defined]
    assert len(said) == 1, a.warnings  # type: ignore[attr-defined]
    w = said[0]
    assert w.startswith(f"incident/{name}: its {what} (2026-12-01T{first}+00:00 to ")
    assert f"(2026-12-01T10:00:00+00:00 to 2026-12-01T10:00:15+00:00; {gap} after it)" in w
    assert f"--offset incident/{name}=-2h puts it on the log" in w
    # --tz moves every time read without an offset: it helps only where the file's times state theirs
    # (an ISO time with Z, a scrape's epoch) and the log's do not; dmon's wall clock moves with the log's
    tz = "(or, if the log is the one read in the wrong zone, UTC now, --tz with the log's zone)"
    assert (tz in w) is tz_helps, w
    assert ("--tz" in w) is tz_helps, w
    assert a.partial is False  # type: ignore[attr-defined]  # said, not damage: the exit code stays


def test_the_offset_it_names_puts_it_on_the_log(tmp_path: Path) -> None:
    d = _bundle(tmp_path, "dmon.txt", _dmon(datetime(2026, 12, 1, 11, 59, 58)))
    a = _run(d, offsets={"incident/dmon.txt": -7200.0})
    assert not [w for w in a.warnings if "do not meet" in w]  # type: ignore[attr-defined]
    ev = a.evidence.row(0, named=True)  # type: ignore[attr-defined]
    assert ev["dmon_fb_at_mb"] == 30000.0 and ev["dmon_fb_at_mb_src"] == "incident/dmon.txt:11"


def test_a_source_on_the_logs_clock_is_not_warned(tmp_path: Path) -> None:
    a = _run(_bundle(tmp_path, "dmon.txt", _dmon(datetime(2026, 12, 1, 9, 59, 58))))
    assert not [w for w in a.warnings if "do not meet" in w]  # type: ignore[attr-defined]


def test_one_reading_long_after_the_log_of_an_engine_started_in_it_meets_it(tmp_path: Path) -> None:
    # curl /metrics an hour and a half after the incident: the counter counts since its engine's start
    # (its _created, 10:00:03, inside the log): the same run, no clock problem
    created = datetime(2026, 12, 1, 10, 0, 3, tzinfo=UTC).timestamp()
    text = (
        "# scrape 2026-12-01T11:30:00+00:00\n# TYPE vllm:num_preemptions_total counter\n"
        'vllm:num_preemptions_total{engine="0",model_name="m"} 42\n'
        f'vllm:num_preemptions_created{{engine="0",model_name="m"}} {created}\n'
    )
    a = _run(_bundle(tmp_path, "metrics.prom", text))
    assert not [w for w in a.warnings if "do not meet" in w]  # type: ignore[attr-defined]
    # the same reading with its engine started 2 h after the log: said
    late = text.replace(str(created), str(created + 7200))
    b = _run(_bundle(tmp_path / "late", "metrics.prom", late))
    assert [w for w in b.warnings if "do not meet" in w]  # type: ignore[attr-defined]


def test_another_day_names_no_zone_offset(tmp_path: Path) -> None:
    a = _run(_bundle(tmp_path, "records.jsonl", _records(10).replace("2026-12-01", "2026-12-04")))
    w = next(w for w in a.warnings if "do not meet" in w)  # type: ignore[attr-defined]
    assert "3 days after it" in w
    assert "--offset incident/records.jsonl=DURATION (or --offset blocktable=DURATION)" in w


def test_zone_shift_is_whole_quarter_hours_and_only_when_it_lands() -> None:
    t = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)
    ref = (t, t + timedelta(minutes=5))
    assert zone_shift(t + timedelta(hours=5, minutes=30), t + timedelta(hours=5, minutes=31), ref) == -19800
    assert zone_shift(t - timedelta(hours=2), t - timedelta(hours=1, minutes=58), ref) == 7200
    assert zone_shift(t + timedelta(days=2), t + timedelta(days=2, minutes=1), ref) is None  # no zone is 48 h


def test_a_log_with_offsets_beside_a_wall_clock_dmon_names_tz_for_the_dmon(tmp_path: Path) -> None:
    """Docker's --timestamps prefix gives the log's lines their UTC instant; dmon's wall clock is read
    in --tz: --tz with dmon's zone is what puts it on the log (never 'the log's zone')."""
    d = tmp_path / "incident"
    d.mkdir()
    lines = LOG.splitlines()
    stamped = [f"2026-12-01T10:00:{5 * (i // 3):02d}.000000000Z {line}" for i, line in enumerate(lines)]
    (d / "vllm.log").write_text("\n".join(stamped) + "\n")
    (d / "dmon.txt").write_text(_dmon(datetime(2026, 12, 1, 11, 59, 58)))
    a = _run(d)
    said = [w for w in a.warnings if "do not meet the vLLM log in time" in w]  # type: ignore[attr-defined]
    assert len(said) == 1, a.warnings  # type: ignore[attr-defined]
    assert "--offset incident/dmon.txt=-2h puts it on the log" in said[0]
    assert "--tz with incident/dmon.txt's zone" in said[0] and "the log's zone" not in said[0]
