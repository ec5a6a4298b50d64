"""One frame of preemption events from every source.

``EVENTS_SCHEMA`` is the stable machine contract (docs/output.md "Event schema").
Each event has a stable id: ``<file>:<line>`` for a line of its own,
``<file>:<line>~r<k>`` for the k-th event reconstructed from the V0 counter
jump revealed on that line, ``<file>:<line>~i<k>`` for the k-th event of an
interval count. ``.<seg>`` follows the line number when a physical line held
several logical lines (lone CR).
"""

from __future__ import annotations

from typing import Any

import polars as pl

from . import kinds

EVENT_KINDS = ("logged", "reconstructed", "interval", "marker", "record")

EVENTS_SCHEMA = {
    "event_id": "String",
    "time": "Datetime(time_unit='us', time_zone='UTC')",
    "time_precision": "String",
    "interval_start": "Datetime(time_unit='us', time_zone='UTC')",
    "interval_end": "Datetime(time_unit='us', time_zone='UTC')",
    "kind": "String",
    "request_id": "String",
    "mode": "String",
    "engine": "String",
    "engine_kind": "String",
    "cumulative": "Int64",
    "source": "String",
    "line": "UInt32",
    "raw": "String",
}
# Internal ordering columns kept next to the contract columns.
ORDER_COLUMNS = ["stream", "seq", "_sub"]


def polars_schema() -> dict[str, Any]:
    dt = pl.Datetime("us", "UTC")
    return {
        "event_id": pl.String,
        "time": dt,
        "time_precision": pl.String,
        "interval_start": dt,
        "interval_end": dt,
        "kind": pl.String,
        "request_id": pl.String,
        "mode": pl.String,
        "engine": pl.String,
        "engine_kind": pl.String,
        "cumulative": pl.Int64,
        "source": pl.String,
        "line": pl.UInt32,
        "raw": pl.String,
        "stream": pl.Int32,
        "seq": pl.UInt32,
        "_sub": pl.Int64,
    }


def conform(df: pl.DataFrame) -> pl.DataFrame:
    """Select and cast a partial event frame to the contract (plus ordering columns).

    ``engine_kind`` (the serving engine: ``vllm`` | ``sglang``) is the default engine (kinds.default:
    vLLM) where a source does not say (every source but SGLang's log and SGLang's /metrics names is
    vLLM's)."""
    schema = polars_schema()
    default = kinds.default()
    if "line" not in df.columns and "n" in df.columns:
        df = df.with_columns(pl.col("n").alias("line"))
    cols = []
    for name, dtype in schema.items():
        if name in df.columns:
            expr = pl.col(name).cast(dtype)
            cols.append(expr.fill_null(default).alias(name) if name == "engine_kind" else expr)
        elif name == "engine_kind":
            cols.append(pl.lit(default, dtype).alias(name))
        else:
            cols.append(pl.lit(None, dtype).alias(name))
    return df.select(cols)


def combine(parts: list[pl.DataFrame]) -> pl.DataFrame:
    frames = [conform(p) for p in parts if p is not None and p.height]
    if not frames:
        return pl.DataFrame(schema=polars_schema())
    out = pl.concat(frames, how="vertical")
    return out.sort(["time", "stream", "seq", "_sub"], nulls_last=True, maintain_order=True)


def public(df: pl.DataFrame) -> pl.DataFrame:
    """The contract columns only (drops internal ordering columns)."""
    return df.select(
        [c for c in EVENTS_SCHEMA if c in df.columns]
        + [c for c in df.columns if c not in EVENTS_SCHEMA and not c.startswith("_") and c not in ("stream", "seq")]
    )


def spread_interval(start: pl.Expr, end: pl.Expr, k: pl.Expr, n: pl.Expr) -> pl.Expr:
    """The time of the k-th of n events spread evenly over the interval (start, end]:
    ``start + (end - start) * k / n`` (microseconds, floored), or ``end`` when start is unknown.

    Every count without per-event times (V0 counter jumps, V1 ``Preemptions: N`` fields,
    Prometheus counter increases, the kept part of a straddling interval) is placed this way.
    """
    s = start.dt.epoch("us")
    e = end.dt.epoch("us")
    mid = s + (e - s) * k // n
    return pl.when(start.is_null()).then(end).otherwise(pl.from_epoch(mid, time_unit="us").dt.replace_time_zone("UTC"))


# Events made from counts (a V0 cumulative counter, V1 interval counts, /metrics increases) are capped.
# The events one count of one line stands for share the line's id, with a suffix: ``~r<k>`` (a counter's
# reconstructed preemptions), ``~i<k>`` (an interval count's), ``~q<k>`` (the 2nd, 3rd... of one logged
# line's N, SGLang's ``#retracted_reqs: N``: the 1st is the line's id). A table row / report card each.
COUNT_SUFFIX = {"reconstructed": "r", "interval": "i", "logged": "q"}
COUNT_SUFFIX_RE = "~[" + "".join(COUNT_SUFFIX.values()) + r"]\d+$"  # any of them, at the id's end


def count_run() -> pl.Expr:
    """The id of the line count an event is one of (its id without the count suffix): the key that folds
    one count's events into one row; any other event is its own."""
    e = pl.col("event_id")
    return (
        pl.when(pl.col("kind").is_in(["reconstructed", "interval"]))
        .then(e.str.replace(f"~[{COUNT_SUFFIX['reconstructed']}{COUNT_SUFFIX['interval']}]\\d+$", ""))
        .when(pl.col("kind") == "logged")
        .then(e.str.replace(f"~{COUNT_SUFFIX['logged']}\\d+$", ""))
        .otherwise(e)
    )


MAX_EVENTS_PER_COUNT = 100_000
MAX_EVENTS_FROM_COUNTS = 1_000_000


def capped_count(count: pl.Expr) -> pl.Expr:
    """Events to make from each count, in row order: at most MAX_EVENTS_PER_COUNT each and
    MAX_EVENTS_FROM_COUNTS in all."""
    n = count.clip(lower_bound=0, upper_bound=MAX_EVENTS_PER_COUNT).fill_null(0)
    room = (MAX_EVENTS_FROM_COUNTS - (n.cum_sum() - n)).clip(lower_bound=0)
    return pl.min_horizontal(n, room)


# A count whose events were capped (``capped_count``): the count is the one counted, never the cap. Every
# maker of events from counts lists such counts in this frame (pipeline: frame ``capped_counts``), and
# events/reconcile.py says them: ``from`` is the events' id before ``~`` (``<file>:<line>[.<seg>]``, a JSON
# answer's ``:<col>``), ``kind`` their kind, ``count`` what was counted, ``events`` the events made of it
# (fewer: at most MAX_EVENTS_PER_COUNT, none once MAX_EVENTS_FROM_COUNTS are made), ``time`` the count's
# time (its interval's end: where a count that made no event would stand).
CAPPED_SCHEMA: dict[str, Any] = {
    "from": pl.String,
    "kind": pl.String,
    "count": pl.Int64,
    "events": pl.Int64,
    "engine": pl.String,
    "time": pl.Datetime("us", "UTC"),
}


def capped_rows(df: pl.DataFrame, where: pl.Expr, kind: str, count: pl.Expr, made: pl.Expr) -> pl.DataFrame:
    """The rows of ``df`` (one per count) whose ``made`` events are fewer than their ``count``, in
    ``CAPPED_SCHEMA``: ``where`` is the events' id before ``~``; ``df`` has ``engine`` and ``time``."""
    if df.height == 0:
        return pl.DataFrame(schema=CAPPED_SCHEMA)
    return (
        df.select(
            where.alias("from"),
            pl.lit(kind, pl.String).alias("kind"),
            count.cast(pl.Int64).alias("count"),
            made.cast(pl.Int64).alias("events"),
            pl.col("engine").cast(pl.String).fill_null("0").alias("engine"),
            pl.col("time").cast(CAPPED_SCHEMA["time"]).alias("time"),
        )
        .filter(pl.col("events") < pl.col("count"))
        .cast(CAPPED_SCHEMA)  # type: ignore[arg-type]
    )


def capped_warning(noun: str = "preemption") -> str:
    """The warning of counts whose events were capped (the analysis is partial: exit 5)."""
    return (
        f"{noun} counts in the logs are implausibly large (a damaged counter?): at most "
        f"{MAX_EVENTS_PER_COUNT} events made from one count, {MAX_EVENTS_FROM_COUNTS} in all"
    )
