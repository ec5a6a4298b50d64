"""A reset of the engine's prefix cache at the event: every evidence path to one answer.

vLLM V1 0.12+ ``reset_prefix_cache(reset_running_requests=True)`` preempts every running request and
moves it to the waiting queue (engines/facts.py, row ``vllm-v1-reset-prefix-cache``). A bundle shows
the reset in one or more of these ways, and each one is the same reset:

- the engine's ``Successfully reset prefix cache`` line (frame ``cache_resets``, a record family of
  the engine's log);
- the KV cache events' ``AllBlocksCleared`` (frame ``kv_events``, ``cleared``; per
  ``data_parallel_rank``);
- block-table preempt records (frame ``bt_events``) whose ``reason`` names it (a code fact's
  ``record_reason``: ``reset_prefix_cache``, vLLM's ``prefix_cache_reset``, the plugin's
  ``preempted outside schedule()``), or a scheduler step whose records preempted every running request
  (at least two, as many as were running) without a failed allocation.

Sightings of one engine within :data:`SAME_RESET_S` of each other are one reset. Per event: the resets
of its engine at its moment (a preempt record's own time, or a line's: +-``SAME_RESET_S``; a counted
interval: the interval), ``reset_calls`` with the lines that show them, and ``reset_preempted``, how
many running requests they preempted: the preempt records of the reset's step, else the engine's events
the reset explains (this bundle's count of them). Null when the bundle has none of these sources; 0
when it has them and no reset is at the event.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from .. import engines
from .common import engine_key, frame_of, rows_in_ranges, src_expr, us
from .declare import Evidence, cited

SAME_RESET_S = 1.0
SOURCE = "vllm-log (reset lines), kvevents, blocktable (preempt records)"
EVIDENCE = [
    Evidence(
        "reset_calls",
        "Int64",
        SOURCE,
        "window",
        "resets of the event's engine's prefix cache at the event (a 'Successfully reset prefix cache' line, a "
        "KV-events AllBlocksCleared, preempt records naming the reset or taking every running request in one "
        "step without a failed allocation; one reset seen several ways counts once)",
    ),
    Evidence(
        "reset_preempted",
        "Int64",
        SOURCE,
        "window",
        "running requests those resets preempted (the preempt records of the reset's step, else the engine's "
        "events the reset explains)",
    ),
]
_DT = pl.Datetime("us", "UTC")
_SIGHTING = {"_eng": pl.String, "time": _DT, "_src": pl.String, "_n": pl.Int64}


def reset_reasons() -> str | None:
    """One regex of every engine's preempt-record reasons that name a cache reset (its code facts)."""
    res = [
        f.record_reason
        for e in engines.registered()
        for f in e.code_facts
        if f.record_reason and f.sub_kind == "cache-reset"
    ]
    return "|".join(f"(?:{r})" for r in res) if res else None


def _log_lines(frames: dict[str, Any]) -> pl.DataFrame | None:
    df = frame_of(frames, "cache_resets")
    if df is None:
        return None
    return df.select(
        engine_key("engine").alias("_eng"), "time", src_expr().alias("_src"), pl.lit(None, pl.Int64).alias("_n")
    )


def _cleared(frames: dict[str, Any]) -> pl.DataFrame | None:
    kv = frame_of(frames, "kv_events")
    if kv is None or "cleared" not in kv.columns:
        return None
    eng = engine_key("dp_rank") if "dp_rank" in kv.columns else pl.lit("0")
    return kv.filter(pl.col("cleared").fill_null(0) > 0).select(
        eng.alias("_eng"), "time", src_expr().alias("_src"), pl.lit(None, pl.Int64).alias("_n")
    )


def _record_steps(frames: dict[str, Any]) -> pl.DataFrame | None:
    """Scheduler steps (per engine) whose preempt records show a reset: a reason naming it, or every
    running request preempted (two or more) with no failed allocation among them."""
    bt = frame_of(frames, "bt_events")
    if bt is None or "action" not in bt.columns:
        return None
    pre = bt.filter(pl.col("action") == "preempt")
    if pre.height == 0:
        return None

    def col(name: str, dtype: Any = pl.Int64) -> pl.Expr:
        return pl.col(name) if name in pre.columns else pl.lit(None, dtype)

    rx = reset_reasons()
    named = col("reason", pl.String).fill_null("").str.contains(rx) if rx else pl.lit(False)
    failed = (col("blocks_needed") + col("watermark_blocks").fill_null(0) > col("pool_free_blocks")).fill_null(False)
    pre = pre.with_columns(
        _eng=engine_key("engine") if "engine" in pre.columns else pl.lit("0"),
        # a record without a step is its own moment
        _key=pl.coalesce(col("step").cast(pl.String), pl.col("time").cast(pl.String)),
        _named=named,
        _failed=failed,
        _run=col("running"),
        _src=src_expr(),
    )
    steps = pre.group_by("_eng", "_key").agg(
        pl.col("time").min(),
        pl.len().cast(pl.Int64).alias("_n"),
        pl.col("_run").max().alias("_running"),
        pl.col("_named").any().alias("_named"),
        pl.col("_failed").any().alias("_failed"),
        _lines(pl.col("_src")).alias("_src"),
    )
    every = (pl.col("_n") >= 2) & (pl.col("_n") >= pl.col("_running")).fill_null(False) & ~pl.col("_failed")
    return steps.filter(pl.col("_named") | every).select("_eng", "time", "_src", "_n")


def _lines(src: pl.Expr) -> pl.Expr:
    """Up to 4 distinct lines, ``; ``-joined, with ``(+N more)``."""
    u = src.drop_nulls().unique(maintain_order=True)
    more = u.len().cast(pl.Int64) - 4
    return pl.concat_str(
        [
            u.head(4).str.join("; "),
            pl.when(more > 0).then(pl.format(" (+{} more)", more)).otherwise(pl.lit("")),
        ]
    )


def _resets(frames: dict[str, Any]) -> pl.DataFrame | None:
    """Every reset seen, per engine: sightings within SAME_RESET_S of the previous one are the same reset."""
    parts = [p for p in (_log_lines(frames), _cleared(frames), _record_steps(frames)) if p is not None]
    if not parts:
        return None
    s = pl.concat([p.cast(_SIGHTING) for p in parts]).filter(pl.col("time").is_not_null()).sort("_eng", "time")  # type: ignore[arg-type]
    gap = (pl.col("time") - pl.col("time").shift(1).over("_eng")).dt.total_microseconds()
    s = s.with_columns(_new=(gap.is_null() | (gap > us(SAME_RESET_S))).cum_sum().over("_eng"))
    return (
        s.group_by("_eng", "_new", maintain_order=True)
        .agg(pl.col("time").min(), _lines(pl.col("_src")).alias("_src"), pl.col("_n").max())
        .drop("_new")
        .with_row_index("_k")
    )


def section_reset(
    ev: pl.DataFrame, members: pl.DataFrame, base: pl.DataFrame, frames: dict[str, Any]
) -> pl.DataFrame | None:
    """``ev``: the timed events as the sections read them (one representative per counted interval:
    ``_i``, ``_t``, ``_eng``, ``_iend``, ``_lo``, ``_hi``, ``_dt``); ``members``: each event's
    representative (``_i``, ``_rep``); ``base``: every event (``_i``, ``source``, ``line``)."""
    resets = _resets(frames)
    if resets is None:
        return None
    near = us(SAME_RESET_S)
    moment = pl.coalesce("_dt", "_t") if "_dt" in ev.columns else pl.col("_t")
    # Only the events of an engine whose code has such a call (Engine.cache_reset_call): another
    # engine's event of the same label is not this reset's.
    kinds = [e.name for e in engines.registered() if e.cache_reset_call]
    if not kinds:
        return None
    mine = pl.lit(False)
    for k in kinds:
        mine = mine | engines.events_of(k)
    kind = (
        base.select("_i", "engine_kind")
        if "engine_kind" in base.columns
        else base.select("_i").with_columns(engine_kind=pl.lit(None, pl.String))
    )
    lines = base.select("_i", src_expr().alias("source"))
    ev = ev.join(kind, on="_i", how="left").filter(mine)
    if ev.height == 0:
        return None
    q = ev.join(lines, on="_i", how="left").select(
        "_i",
        "_eng",
        "source",
        pl.when(pl.col("_iend").is_not_null())
        .then(pl.col("_lo"))
        .otherwise(moment - pl.duration(microseconds=near))
        .alias("_wlo"),
        pl.when(pl.col("_iend").is_not_null())
        .then(pl.col("_hi"))
        .otherwise(moment + pl.duration(microseconds=near))
        .alias("_whi"),
    )
    # An event of "N Engines Aggregated" (engine "all") is every engine's.
    rows = pl.concat([resets, resets.with_columns(_eng=pl.lit("all"))])
    pairs = rows_in_ranges(q, rows, ["_eng"], "time", "_wlo", "_whi")
    zero = q.select("_i", *cited("reset_calls", pl.lit(0, pl.Int64), pl.lit(None, pl.String)))
    zero = zero.with_columns(
        reset_preempted=pl.lit(None, pl.Int64),
        reset_preempted_src=pl.lit(None, pl.String),
        reset_calls_src=pl.lit(None, pl.String),
    )
    if pairs.height == 0:
        return zero
    hit = pl.DataFrame(
        {
            "_i": q.get_column("_i").gather(pairs.get_column("_q")),
            "_k": rows.get_column("_k").gather(pairs.get_column("_r")),
        }
    ).unique()
    # Events each reset explains: the members of the representatives it falls in.
    size = members.group_by("_rep").len().rename({"_rep": "_i", "len": "_m"})
    ev_src = q.select("_i", pl.col("source"))
    explained = (
        hit.join(size, on="_i", how="left")
        .group_by("_k")
        .agg(pl.col("_m").fill_null(1).sum().cast(pl.Int64).alias("_events"))
    )
    per_reset = resets.join(explained, on="_k", how="left").with_columns(
        _pre=pl.coalesce("_n", "_events"),
    )
    j = hit.join(per_reset.select("_k", "_src", "_n", "_pre"), on="_k", how="left").join(ev_src, on="_i", how="left")
    agg = (
        j.sort("_i", "_k")
        .group_by("_i")
        .agg(
            pl.len().cast(pl.Int64).alias("_calls"),
            pl.col("_src").str.join("; ").alias("_csrc"),
            pl.col("_pre").sum().cast(pl.Int64).alias("_pre"),
            # The count's lines: the reset step's records, else the engine's events it explains.
            pl.when(pl.col("_n").is_not_null()).then(pl.col("_src")).otherwise(pl.col("source")).alias("_psrc"),
        )
        .with_columns(_psrc=pl.col("_psrc").list.drop_nulls().list.unique(maintain_order=True).list.join("; "))
    )
    found = agg.select(
        "_i",
        *cited("reset_calls", pl.col("_calls"), pl.col("_csrc")),
        *cited("reset_preempted", pl.col("_pre"), pl.col("_psrc").replace("", None)),
    )
    return pl.concat([found, zero.join(found.select("_i"), on="_i", how="anti")], how="vertical_relaxed")
