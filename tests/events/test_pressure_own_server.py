"""A scraped pressure interval is dropped as a repeat of a log's only when both are one server's.

find_intervals keeps the log's interval and drops a /metrics interval of the same engine that
overlaps it (the same pressure seen twice). Before, that held across servers: server b's scrapes
(``incident/b/metrics.prom``) at the ceiling were dropped because server a's log
(``incident/a/vllm.log``) showed pressure at the same time, both calling their engine "0"; b's own
pressure vanished and b's preemptions read a's.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl

from preemptlog.events.pressure import find_intervals

T0 = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)
DT = pl.Datetime("us", "UTC")


def _stats(source: str) -> pl.DataFrame:
    rows = [(10, 4, 0, 50.0), (20, 4, 5, 99.0), (30, 4, 5, 99.0)]
    return pl.DataFrame(
        {
            "time": [T0 + timedelta(seconds=s) for s, *_ in rows],
            "engine": ["0"] * 3,
            "running": [r for _, r, _, _ in rows],
            "waiting": [w for _, _, w, _ in rows],
            "kv_usage": [k for *_, k in rows],
            "source": [source] * 3,
            "line": [3, 4, 5],
            "stream": [0] * 3,
            "seq": [3, 4, 5],
        },
        schema_overrides={"time": DT, "line": pl.UInt32, "stream": pl.Int32, "seq": pl.UInt32},
    )


def _scrapes(source: str) -> pl.DataFrame:
    rows = [(15, 0, 50.0), (25, 4, 99.0), (35, 4, 99.0)]
    return pl.DataFrame(
        {
            "time": [T0 + timedelta(seconds=s) for s, *_ in rows],
            "engine": ["0"] * 3,
            "model_name": ["m"] * 3,
            "scope": [source.rsplit("/", 1)[0]] * 3,
            "running": [4.0] * 3,
            "waiting": [float(w) for _, w, _ in rows],
            "kv_usage": [k for *_, k in rows],
            "source": [source] * 3,
            "line": [3, 10, 17],
        },
        schema_overrides={"time": DT, "line": pl.UInt32},
    )


def test_another_servers_scrapes_keep_their_pressure() -> None:
    iv = find_intervals(_stats("incident/a/vllm.log"), _scrapes("incident/b/metrics.prom"))
    assert iv.select("series", pl.col("evidence").list.first()).rows() == [
        ("log", "incident/a/vllm.log:4"),
        ("prometheus", "incident/b/metrics.prom:10"),
    ]


def test_one_servers_scrapes_still_repeat_its_log() -> None:
    # the log and the scrapes of one server, side by side or in one folder: one interval, the log's
    for log, prom in (
        ("incident/vllm.log", "incident/metrics.prom"),
        ("incident/a/vllm.log", "incident/a/metrics.prom"),
    ):
        iv = find_intervals(_stats(log), _scrapes(prom))
        assert iv.select("series", pl.col("evidence").list.first()).rows() == [("log", f"{log}:4")]
