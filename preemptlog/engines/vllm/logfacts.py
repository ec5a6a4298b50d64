"""vLLM's parsers of the single log pass's own records, in the order the pipeline calls them.

The engine's ``log_facts`` (engines.LogFacts): the stats lines (stats.py), the configuration
frame (config.py, with the other sources' rows and every shown engine's defaults), the events
of the log (preemptions.py: logged and reconstructed V0 warnings, V1 interval counts, markers),
the requests frame (requests.py) and the server runs (runs.py). The pipeline's sources stage
asks the registry for them (engines.log_reader) and never imports them.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from ...model import events as ev
from ...model.requests import RequestStats
from ..registry import LogEvents, LogFacts
from . import config, preemptions, requests, runs, stats


def log_events(records: pl.DataFrame, stats_rows: pl.DataFrame) -> LogEvents:
    """The log's events: V0 warnings (logged, and reconstructed from the counter), V1 interval
    counts, markers; the V0 facts (counter ``v0``), the warning of implausibly large counts and the
    one of stats-line percentages that are no reading (stats.not_readings_warning)."""
    logged, recon, v0facts = preemptions.logged_and_reconstructed(records)
    interval = preemptions.interval_events(stats_rows, records)
    warnings: list[str] = []
    partial = False
    v1_counted = stats_rows.filter(pl.col("preemptions") > 0).get_column("preemptions").sum() or 0
    if v0facts.get("capped_counts") or v1_counted > interval.height:  # see preemptions.capped_count
        warnings.append(
            "preemption counts in the logs are implausibly large (a damaged counter?): at most "
            f"{ev.MAX_EVENTS_PER_COUNT} events made from one count, {ev.MAX_EVENTS_FROM_COUNTS} in all"
        )
        partial = True
    bad_percent = stats.not_readings_warning(records)
    if bad_percent:
        warnings.append(bad_percent)
    markers = preemptions.marker_events(records)
    return LogEvents(
        parts=[logged, recon, interval, markers], counters={"v0": v0facts}, warnings=warnings, partial=partial
    )


def log_config(records: pl.DataFrame, stats_rows: pl.DataFrame, extra: list[pl.DataFrame]) -> pl.DataFrame:
    return config.parse(records, stats_rows, extra=extra)


def log_requests(
    records: pl.DataFrame, request_rows: list[Any], needed_ids: list[str], cfg: pl.DataFrame
) -> tuple[pl.DataFrame, RequestStats]:
    return requests.parse_with_stats(
        records, request_rows, needed_ids=needed_ids, kv_min=config.smallest_kv_tokens(cfg)
    )


LOG_FACTS = LogFacts(
    stats=stats.parse,
    config=log_config,
    events=log_events,
    requests=log_requests,
    runs=runs.runs_table,
)
