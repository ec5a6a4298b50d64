"""The periodic stats lines of V0 (metrics.py) and V1 (loggers.py), every variant.

Schema of :func:`parse` (``STATS_SCHEMA``): one row per stats line.
``waiting`` is V1 ``Waiting`` or V0 ``Pending`` (both include
recompute-preempted requests). ``kv_usage`` is the device KV cache usage in
percent (GPU, or XPU... from 0.30). ``preemptions`` is the V1 ``Preemptions:``
field (0.11.1+; stock builds never print it), null when absent.
``prefix_hit`` is V1's ``Prefix cache hit rate`` or the V0 follow-up line
``Prefix cache hit rate: GPU: x%`` joined to its stats line.
"""

from __future__ import annotations

import polars as pl


def _num(text: pl.Expr, rx: str, dtype) -> pl.Expr:
    return text.str.extract(rx, 1).str.replace_all(",", "", literal=True).cast(dtype, strict=False)


def parse(records: pl.DataFrame) -> pl.DataFrame:
    rows = records.filter(pl.col("kind") == "stats")
    t = pl.col("text")
    engine = (
        pl.when(t.str.contains(r"\d+ Engines Aggregated:"))
        .then(pl.lit("all"))
        .otherwise(t.str.extract(r"Engine (\d+):", 1).cast(pl.Int64, strict=False).cast(pl.String))
        .fill_null("0")
    )
    family = pl.when(t.str.contains(r"(?:Pending|Swapped): \d+ reqs")).then(pl.lit("v0")).otherwise(pl.lit("v1"))
    stats = rows.select(
        "time",
        "time_precision",
        "stream",
        "seq",
        engine.alias("engine"),
        family.alias("family"),
        _num(t, r"Avg prompt throughput: ([\d.]+)", pl.Float64).alias("prompt_tput"),
        _num(t, r"Avg generation throughput: ([\d.]+)", pl.Float64).alias("gen_tput"),
        _num(t, r"Running: (\d+) reqs", pl.Int64).alias("running"),
        _num(t, r"(?:Waiting|Pending): (\d+) reqs", pl.Int64).alias("waiting"),
        _num(t, r"Swapped: (\d+) reqs", pl.Int64).alias("swapped"),
        _num(t, r"Deferred: (\d+) reqs", pl.Int64).alias("deferred"),
        _num(t, r"Preemptions: (\d+)", pl.Int64).alias("preemptions"),
        _num(t, r"[A-Z]+ KV cache usage: ([\d.]+)%", pl.Float64).alias("kv_usage"),
        _num(t, r"CPU KV cache usage: ([\d.]+)%", pl.Float64).alias("cpu_kv_usage"),
        _num(t, r"Prefix cache hit rate: ([\d.]+)%", pl.Float64).alias("prefix_hit"),
        "source",
        pl.col("n").alias("line"),
    )
    # V0 0.5.5+: the prefix cache hit rate is a separate line right after the stats line.
    v0_prefix = records.filter(pl.col("kind") == "stats_prefix").select(
        "stream",
        "seq",
        _num(pl.col("text"), r"Prefix cache hit rate: GPU: ([\d.]+)%", pl.Float64).alias("_gpu_hit"),
    )
    if v0_prefix.height and stats.height:
        stats = stats.sort("seq")
        joined = v0_prefix.sort("seq").join_asof(
            stats.select("stream", "seq").with_columns(pl.col("seq").alias("_stats_seq")),
            on="seq",
            by="stream",
            strategy="backward",
            check_sortedness=False,
        )
        joined = (
            joined.filter(pl.col("_stats_seq").is_not_null()).group_by("_stats_seq").agg(pl.col("_gpu_hit").first())
        )
        stats = (
            stats.join(joined, left_on="seq", right_on="_stats_seq", how="left")
            .with_columns(prefix_hit=pl.coalesce("prefix_hit", "_gpu_hit"))
            .drop("_gpu_hit")
        )
    return stats.sort("seq")
