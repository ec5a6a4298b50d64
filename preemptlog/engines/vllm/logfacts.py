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
    counts, markers; the V0 facts (counter ``v0``), the counts whose events were capped
    (events.CAPPED_SCHEMA) with the warning of implausibly large counts, and the warning of stats-line
    percentages that are no reading (stats.not_readings_warning)."""
    logged, recon, v0facts, v0_capped = preemptions.logged_and_reconstructed(records)
    interval, v1_capped = preemptions.interval_events(stats_rows, records)
    swapped, swap_capped, swap_facts = preemptions.swap_events(stats_rows, records)
    v0facts.update(swap_facts)
    warnings: list[str] = []
    partial = False
    capped = pl.concat([v0_capped, v1_capped, swap_capped])
    if capped.height:  # the counts are said whole (events/reconcile.py), their events capped
        warnings.append(ev.capped_warning())
        partial = True
    bad_percent = stats.not_readings_warning(records)
    if bad_percent:
        warnings.append(bad_percent)
    markers = preemptions.marker_events(records)
    return LogEvents(
        parts=[logged, recon, interval, swapped, markers],
        counters={"v0": v0facts},
        warnings=warnings,
        partial=partial,
        capped=capped,
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
