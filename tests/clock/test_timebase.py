"""Year and zone inference: rollover, Feb 29, reordering, precedence of year sources."""

from __future__ import annotations

import gzip
import os
from datetime import UTC, datetime, timedelta

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from preemptlog import AnalyzeOptions, analyze
from preemptlog.clock.timebase import check_zone, local_zone
from preemptlog.errors import UsageError

from ..conftest import write_lines

WARN = (
    "WARNING {ts} [scheduler.py:1775] Sequence group r{i} is preempted by PreemptionMode.RECOMPUTE mode because "
    "there is not enough KV cache space. total_num_cumulative_preemption={n}"
)


def _lines(times: list[datetime]) -> list[str]:
    # Every line is a logged warning (counter step 1 so no reconstruction).
    return [WARN.format(ts=t.strftime("%m-%d %H:%M:%S"), i=i, n=i + 1) for i, t in enumerate(times)]


def _times_of(result) -> list[datetime]:
    ev = result.events.filter(pl.col("kind") == "logged").sort("line")
    return [t.replace(tzinfo=None) for t in ev.get_column("time").to_list()]


gaps = st.lists(
    st.integers(min_value=0, max_value=200 * 86400),  # forward gaps up to 200 days
    min_size=1,
    max_size=25,
)
starts = st.datetimes(min_value=datetime(2001, 1, 1), max_value=datetime(2090, 12, 31)).map(
    lambda d: d.replace(microsecond=0)
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(start=starts, steps=gaps)
def test_rollover_recovered_with_year(tmp_path, start, steps):
    times = [start]
    for g in steps:
        times.append(times[-1] + timedelta(seconds=g))
    path = write_lines(tmp_path / "v.log", _lines(times))
    result = analyze([str(path)], AnalyzeOptions(tz="UTC", year=start.year))
    assert _times_of(result) == times


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(start=starts, steps=gaps, lag=st.integers(min_value=0, max_value=20 * 3600))
def test_rollover_recovered_from_mtime(tmp_path, start, steps, lag):
    times = [start]
    for g in steps:
        times.append(times[-1] + timedelta(seconds=g))
    path = write_lines(tmp_path / "v.log", _lines(times))
    mtime = (times[-1] + timedelta(seconds=lag)).replace(tzinfo=UTC).timestamp()
    os.utime(path, (mtime, mtime))
    result = analyze([str(path)], AnalyzeOptions(tz="UTC"))
    assert _times_of(result) == times
    year = next(a for a in result.assumptions if a.topic == "year")
    assert "file mtime" in year.source


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    year=st.integers(min_value=2001, max_value=2090),
    offsets=st.lists(st.integers(min_value=-30, max_value=30), min_size=3, max_size=30),
)
def test_new_year_reordering(tmp_path, year, offsets):
    """Lines a few seconds out of order around New Year keep their own year."""
    base = datetime(year, 12, 31, 23, 59, 45)
    times = [base + timedelta(seconds=20 * i / len(offsets)) + timedelta(seconds=o) for i, o in enumerate(offsets)]
    times = [t.replace(microsecond=0) for t in times]
    path = write_lines(tmp_path / "v.log", _lines(times))
    result = analyze([str(path)], AnalyzeOptions(tz="UTC", year=times[0].year))
    assert _times_of(result) == times


def test_feb29_moves_inferred_year_to_leap_year(tmp_path):
    times = [datetime(2024, 2, 29, 10, 0, 0), datetime(2024, 2, 29, 10, 0, 5)]
    path = write_lines(tmp_path / "v.log", _lines(times))
    # mtime in 2025: plain inference would say 2025, which has no 29 February.
    mtime = datetime(2025, 3, 1, tzinfo=UTC).timestamp()
    os.utime(path, (mtime, mtime))
    result = analyze([str(path)], AnalyzeOptions(tz="UTC"))
    assert _times_of(result) == times
    year = next(a for a in result.assumptions if a.topic == "year")
    assert "02-29" in year.source


def test_feb29_with_impossible_year_is_a_usage_error(tmp_path):
    path = write_lines(tmp_path / "v.log", _lines([datetime(2024, 2, 29, 10, 0, 0)]))
    with pytest.raises(UsageError, match="29 February"):
        analyze([str(path)], AnalyzeOptions(tz="UTC", year=2025))


def test_year_from_gzip_header_beats_file_mtime(tmp_path):
    times = [datetime(2023, 6, 1, 12, 0, 0)]
    raw = ("\n".join(_lines(times)) + "\n").encode()
    path = tmp_path / "v.log.gz"
    with open(path, "wb") as fh:
        with gzip.GzipFile(fileobj=fh, mode="wb", mtime=int(datetime(2023, 6, 2, tzinfo=UTC).timestamp())) as gz:
            gz.write(raw)
    os.utime(path, (0, datetime(2026, 1, 1, tzinfo=UTC).timestamp()))
    result = analyze([str(path)], AnalyzeOptions(tz="UTC"))
    assert _times_of(result) == times
    assert "gzip header" in next(a for a in result.assumptions if a.topic == "year").source


def test_full_date_in_bundle_beats_mtime(tmp_path):
    """A docker -t line elsewhere in the bundle anchors the year of a year-less log."""
    times = [datetime(2022, 3, 5, 8, 0, 0)]
    plain = write_lines(tmp_path / "a" / "v.log" if False else tmp_path / "v.log", _lines(times))
    other = write_lines(
        tmp_path / "w.log",
        [
            "2022-03-05T08:00:10.000Z INFO 03-05 08:00:10 [loggers.py:1] Engine 000: Avg prompt throughput: 1.0 tokens/s, "
            "Avg generation throughput: 1.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.0%, "
            "Prefix cache hit rate: 0.0%"
        ],
    )
    os.utime(plain, (0, datetime(2026, 1, 1, tzinfo=UTC).timestamp()))
    result = analyze([str(plain), str(other)], AnalyzeOptions(tz="UTC"))
    assert _times_of(result) == times


def test_zone_conversion_and_offset_output(tmp_path):
    times = [datetime(2025, 7, 1, 12, 0, 0)]
    path = write_lines(tmp_path / "v.log", _lines(times))
    result = analyze([str(path)], AnalyzeOptions(tz="Europe/Berlin", year=2025))
    t = result.events.get_column("time")[0]
    assert t == datetime(2025, 7, 1, 10, 0, 0, tzinfo=UTC)
    from preemptlog.render.summary import iso

    assert iso(t, "Europe/Berlin") == "2025-07-01T12:00:00+02:00"


def test_nonexistent_local_time_is_kept(tmp_path):
    """02:30 on the spring-forward day does not exist in Berlin; the line is still placed (standard time)."""
    times = [datetime(2025, 3, 30, 2, 30, 0)]
    path = write_lines(tmp_path / "v.log", _lines(times))
    result = analyze([str(path)], AnalyzeOptions(tz="Europe/Berlin", year=2025))
    assert result.events.get_column("time")[0] == datetime(2025, 3, 30, 1, 30, tzinfo=UTC)


def test_line_order_kept_within_a_second(tmp_path):
    t = datetime(2025, 5, 5, 5, 5, 5)
    path = write_lines(tmp_path / "v.log", _lines([t] * 20))
    result = analyze([str(path)], AnalyzeOptions(tz="UTC", year=2025))
    assert result.events.get_column("line").to_list() == list(range(1, 21))


def test_check_zone():
    assert check_zone("utc") == "UTC"
    assert check_zone("+05:30") == "+05:30"
    with pytest.raises(UsageError):
        check_zone("Mars/Olympus")
    assert local_zone()
