"""What the event's engine can do by its own code, and what its engine and interval show of it.

vLLM's scheduler code is evidence like a log line (preemptlog/engine_facts.py, each fact citing the
upstream source file): for an event of an engine whose generation, version and scheduling policy
the bundle shows, ``code_trigger`` is what triggers a preemption in that code (V1: a failed
KV-block allocation for a running request), ``code_not_gates`` the field guide's gates that code
cannot produce, ``code_reset`` whether it has ``reset_prefix_cache(reset_running_requests=True)``.
Corroboration is the event's own engine and interval (a counted interval: its interval; a line:
its window): ``up_pressure`` a suspected pressure interval (pressure.py) of that engine overlapping
it; ``up_kv_max_before`` the largest KV cache usage the engine showed from the log's start up to
its end (a pool that never came near the ceiling contradicts a failed allocation).

The code facts are the bundle's configuration in force (vllm/config.py in_force): one value for
every event. Computed for every event, with or without a time (a count not placed in time still
has an engine and an interval).
"""

from __future__ import annotations

import polars as pl

from .. import engines
from .common import asof, engine_key, src_expr
from .declare import Evidence, cited
from .spans import failed_in_spans, pressure_in_spans

SOURCE = "engine code (engine_facts.py), vllm-log (config)"
EVIDENCE = [
    Evidence(
        "code_trigger",
        "String",
        SOURCE,
        "engine",
        "what triggers a preemption in the upstream code of the event's engine, generation, version and policy",
    ),
    Evidence("code_kv", "Boolean", SOURCE, "engine", "that trigger is a failed KV-block allocation (KV space)"),
    Evidence(
        "code_reset",
        "Boolean",
        SOURCE,
        "engine",
        "the engine's code also preempts every running request on reset_prefix_cache (vLLM V1 0.12+)",
    ),
    Evidence("code_engine", "String", SOURCE, "engine", "the engine as the code facts read it, e.g. vLLM V1 0.32.0"),
    Evidence(
        "code_not_gates",
        "String",
        SOURCE,
        "engine",
        "the field guide's gates the engine's upstream code cannot produce, comma-joined",
    ),
    Evidence(
        "up_pressure",
        "String",
        "vllm-log (stats), prometheus (pressure intervals)",
        "engine",
        "a suspected KV pressure interval of the event's engine overlapping its interval (or window)",
    ),
    Evidence(
        "up_failed_allocs",
        "Int64",
        "blocktable (preempt records)",
        "engine",
        "preempt records of the event's engine in its interval (or window) whose allocation failed: needed > free",
    ),
    Evidence(
        "code_priority_path",
        "Int64",
        "vllm-log (lines naming _schedule_priority_preemption)",
        "engine",
        "lines in the event's window (or interval) naming vLLM V0's priority preemption, _schedule_priority_preemption "
        "(a debug print or a traceback frame): which path preempted",
    ),
    Evidence(
        "up_kv_max_before",
        "Float64",
        "vllm-log (stats), prometheus",
        "engine",
        "largest KV cache usage of the event's engine from the first sample up to the end of its interval (or window)",
    ),
]


def section_code(
    events: pl.DataFrame,
    config: pl.DataFrame | None,
    frames: dict[str, pl.DataFrame],
    stats: pl.DataFrame | None,
    before_us: int,
    after_us: int,
) -> pl.DataFrame | None:
    """``events`` needs _i, time, kind, time_precision, interval_start, interval_end, _eng (every event,
    timed or not)."""
    # Each engine's code facts (Engine.bundle_facts: what its configuration in force settles), for its events.
    per_engine = [(e.name, e.bundle_facts(config)) for e in engines.registered() if e.bundle_facts is not None]
    # A count (an interval, or events spread in one: time_precision "interval" or "unplaced") is
    # judged by its interval, every event of it alike; a line by the window around its time.
    counted = (pl.col("kind") == "interval") | (
        pl.col("time_precision").is_in(["interval", "unplaced"]) & pl.col("interval_end").is_not_null()
        if "time_precision" in events.columns
        else pl.lit(False)
    )
    point = pl.col("time").is_not_null() & ~counted
    span = events.select(
        "_i",
        "_eng",
        pl.when(point)
        .then(pl.col("time") - pl.duration(microseconds=before_us))
        .otherwise(pl.col("interval_start"))
        .alias("_slo"),
        pl.when(point)
        .then(pl.col("time") + pl.duration(microseconds=after_us))
        .otherwise(pl.coalesce("interval_end", "time"))
        .alias("_shi"),
    )
    out = span.select("_i")
    per = [(kind, facts) for kind, facts in per_engine if facts is not None]
    if per:
        masked = "engine_kind" in events.columns  # an engine's code facts are for its events only
        if masked:
            out = out.join(events.select("_i", "engine_kind"), on="_i", how="left")
        cols: dict[str, list[pl.Expr]] = {}
        for kind, facts in per:
            src = pl.lit(facts["src"])
            esrc = pl.lit(facts["engine_src"], pl.String)
            mine = engines.events_of(kind) if masked else pl.lit(True)
            for x in (
                *cited("code_trigger", pl.lit(facts["trigger"]), src),
                *cited("code_kv", pl.lit(facts["kv"]), src),
                *cited("code_reset", pl.lit(facts["reset"]), pl.lit(facts["reset_src"])),
                *cited("code_engine", pl.lit(facts["label"]), esrc),
                *cited("code_not_gates", pl.lit(facts["not_gates"]), src),
            ):
                name = x.meta.output_name()
                cols.setdefault(name, []).append(pl.when(mine).then(x).alias(name) if masked else x)
        out = out.with_columns([xs[0] if len(xs) == 1 else pl.coalesce(xs).alias(n) for n, xs in cols.items()])
        if masked:
            out = out.drop("engine_kind")
    pressure = pressure_in_spans(span, frames.get("pressure_intervals"))
    if pressure is not None:
        out = out.join(pressure, on="_i", how="left")
    failed = _failed_allocations(span, frames.get("bt_events"))
    if failed is not None:
        out = out.join(failed, on="_i", how="left")
    kv_before = _kv_max_before(span, stats, frames.get("prom_series"))
    if kv_before is not None:
        out = out.join(kv_before, on="_i", how="left")
    prio = _priority_path(span, frames.get("v0_priority_lines"))
    if prio is not None:
        out = out.join(prio, on="_i", how="left")
    return out if out.width > 1 else None


def _priority_path(span: pl.DataFrame, lines: pl.DataFrame | None) -> pl.DataFrame | None:
    """Lines naming V0's ``_schedule_priority_preemption`` inside the event's span (V0 has one engine:
    the lines are every span's engine's)."""
    if lines is None or lines.height == 0:
        return None

    out = []
    for eng in span.get_column("_eng").unique(maintain_order=True).to_list():
        rec = lines.select("time", pl.lit(eng).alias("_reng"), src_expr().alias("_src"))
        j = failed_in_spans(span.filter(pl.col("_eng") == eng), rec)
        if j is not None:
            out.append(j)
    if not out:
        return None
    j = pl.concat(out)
    return j.select("_i", *cited("code_priority_path", pl.col("_n").cast(pl.Int64), pl.col("_srcs")))


def _kv_max_before(span: pl.DataFrame, stats: pl.DataFrame | None, prom: pl.DataFrame | None) -> pl.DataFrame | None:
    """Running maximum of the engine's KV usage samples, as of the end of the event's span."""

    parts = []
    if stats is not None and stats.height:
        parts.append(stats.select("time", _eng(stats), "kv_usage", src_expr().alias("_src")))
    if prom is not None and prom.height and "kv_usage" in prom.columns:
        parts.append(prom.select("time", _eng(prom), "kv_usage", src_expr().alias("_src")))
    if not parts:
        return None
    s = pl.concat(parts).filter(pl.col("time").is_not_null() & pl.col("kv_usage").is_not_null()).sort("time")
    if s.height == 0:
        return None
    # The running max and the line it was reached at, per engine.
    s = s.with_columns(_max=pl.col("kv_usage").cum_max().over("_eng"))
    s = s.with_columns(
        _msrc=pl.when(pl.col("kv_usage") == pl.col("_max")).then(pl.col("_src")).forward_fill().over("_eng")
    )
    left = span.filter(pl.col("_shi").is_not_null()).select("_i", "_eng", "_shi")
    if left.height == 0:
        return None
    j = asof(left, s.select("time", "_eng", "_max", "_msrc"), left_on="_shi", right_on="time", by=["_eng"])
    return j.select("_i", *cited("up_kv_max_before", pl.col("_max"), pl.col("_msrc")))


def _eng(df: pl.DataFrame) -> pl.Expr:

    return (engine_key("engine") if "engine" in df.columns else pl.lit("0")).alias("_eng")


def _failed_allocations(span: pl.DataFrame, bt: pl.DataFrame | None) -> pl.DataFrame | None:
    """Preempt records of the event's engine inside its span that show a failed allocation."""
    if bt is None or bt.height == 0 or not {"action", "blocks_needed", "pool_free_blocks"} <= set(bt.columns):
        return None

    rec = bt.filter(
        (pl.col("action") == "preempt")
        & pl.col("time").is_not_null()
        & (
            pl.col("blocks_needed")
            + (pl.col("watermark_blocks").fill_null(0) if "watermark_blocks" in bt.columns else pl.lit(0))
            > pl.col("pool_free_blocks")
        ).fill_null(False)
    ).select("time", _eng(bt).alias("_reng"), src_expr().alias("_src"))
    if rec.height == 0:
        return None
    # Counted per span by binary search, never a cross join of spans and records (issue 36).
    j = failed_in_spans(span, rec)
    if j is None:
        return None
    src = (
        pl.when(pl.col("_n") > 4)
        .then(pl.concat_str([pl.col("_srcs"), pl.lit(" (+"), (pl.col("_n") - 4).cast(pl.String), pl.lit(" more)")]))
        .otherwise(pl.col("_srcs"))
    )
    return j.select("_i", *cited("up_failed_allocs", pl.col("_n").cast(pl.Int64), src))
