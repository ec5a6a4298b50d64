"""Prometheus gauges per engine label: the stats evidence, as /metrics scrapes saw it.

The same definitions as the stats section (joiner/stats.py), over the ``prom_series``
frame (one row per scrape and engine label): window values for an event, and for a
counted interval (a counter increase between two scrapes, or a ``Preemptions: N``
line) the scrape at or before its end and the engine's scrape before that one, both
cited. An event only reads scrapes of its own engine label.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from .common import frame_of
from .declare import Evidence
from .stats import section_stats

P = "prometheus"
EVIDENCE = [
    Evidence(
        "prom_kv_usage_max",
        "Float64",
        P,
        "engine",
        "max KV cache usage gauge of the engine's scrapes in the window; for a counted interval, of its two scrapes",
    ),
    Evidence(
        "prom_kv_usage_at", "Float64", P, "engine", "KV cache usage gauge as of t (counted interval: its end scrape)"
    ),
    Evidence(
        "prom_waiting_at",
        "Int64",
        P,
        "engine",
        "waiting-requests gauge as of t (counted interval: the larger of its two scrapes)",
    ),
    Evidence("prom_waiting_delta", "Int64", P, "engine", "change of the waiting gauge, as for stats_waiting_delta"),
    Evidence(
        "prom_running_at", "Int64", P, "engine", "running-requests gauge as of t (counted interval: its end scrape)"
    ),
    Evidence("prom_running_delta", "Int64", P, "engine", "change of the running gauge, as for stats_running_delta"),
]
_FROM_STATS = {e.name.replace("prom_", "stats_", 1): e.name for e in EVIDENCE}


def section_prom(ev: pl.DataFrame, frames: dict[str, Any], before_us: int, after_us: int) -> pl.DataFrame | None:

    ps = frame_of(frames, "prom_series")
    if ps is None:
        return None
    ps = ps.filter(pl.any_horizontal(pl.col(c).is_not_null() for c in ("kv_usage", "waiting", "running")))
    if ps.height == 0:
        return None
    series = (
        ps.sort("time", "source", "line")
        .with_row_index("seq")
        .select(
            "time",
            "engine",
            "kv_usage",
            pl.col("waiting").round().cast(pl.Int64, strict=False),
            pl.col("running").round().cast(pl.Int64, strict=False),
            pl.lit(0, pl.Int32).alias("stream"),
            pl.col("seq").cast(pl.UInt32),
            "source",
            "line",
            # each gauge's own sample line: section_stats cites each value by it (a scrape is no stats line)
            *(c for c in ("kv_usage_line", "waiting_line", "running_line") if c in ps.columns),
        )
    )
    out = section_stats(ev, series, before_us, after_us, own_stream=False)  # scrapes are no log stream
    if out is None:
        return None
    return out.rename(
        {c: c.replace(s, p, 1) for s, p in _FROM_STATS.items() for c in out.columns if c == s or c == f"{s}_src"}
    )
