"""Benchmark of the time-window joiner on synthetic frames.

    python bench/joiner_bench.py [N_EVENTS] [N_DMON_SAMPLES] [GPUS]

Defaults: 1 000 000 events (markers with request ids) against 10 000 000
dmon samples (8 GPUs, one sample per second), plus one hook [SCHEDULER] step
per event with a pending line and a batch line each, stats lines every 10 s and
the default config. Prints the build time and the time of
``preemptlog.joiner.compute`` alone. polars only (no numpy).
"""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime


def frames(n_events: int, n_dmon: int, gpus: int = 8):
    import polars as pl

    from preemptlog.engines.vllm.config import parse as cfg_parse
    from preemptlog.sources.vllm_log import scan_empty

    utc = pl.Datetime("us", "UTC")
    t0 = int(datetime(2026, 11, 30, tzinfo=UTC).timestamp() * 1e6)
    samples = max(1, n_dmon // gpus)
    span = samples * 1_000_000

    def spread(n: int, salt: int) -> pl.Expr:
        # sorted, jittered times over the span
        i = pl.int_range(n, dtype=pl.Int64)
        jitter = (i.hash(salt) % 1_000_000).cast(pl.Int64)
        return (pl.lit(t0) + i * (span // max(n, 1)) + jitter).cast(pl.Datetime("us")).dt.replace_time_zone("UTC")

    i = pl.int_range(n_events, dtype=pl.Int64)
    events = pl.select(
        event_id=pl.concat_str([pl.lit("vllm.log:"), (i * 4 + 4).cast(pl.String)]),
        time=spread(n_events, 1),
        kind=pl.lit("marker"),
        request_id=(i.hash(2) % (n_events // 4 + 1)).cast(pl.String),
        stream=pl.lit(0, pl.Int32),
        seq=(i * 4 + 3).cast(pl.UInt32),
    ).sort("time")
    j = pl.int_range(samples * gpus, dtype=pl.Int64)
    dmon = pl.select(
        time=(pl.lit(t0) + (j // gpus) * 1_000_000).cast(pl.Datetime("us")).dt.replace_time_zone("UTC"),
        time_precision=pl.lit("1s"),
        gpu=(j % gpus).cast(pl.Int32),
        fb_mb=(20_000 + j.hash(3) % 60_000).cast(pl.Float64),
        sm_pct=(j.hash(4) % 100).cast(pl.Float64),
        mem_pct=(j.hash(5) % 100).cast(pl.Float64),
        source=pl.lit("dmon.txt"),
        line=(j + 3).cast(pl.UInt32),
    )
    hook_steps = (
        pl.select(
            stream=pl.lit(0, pl.Int32),
            seq=(i * 4).cast(pl.UInt32),
            step=i + 1,
            time=spread(n_events, 6),
            time_precision=pl.lit("inherited"),
            free_blocks=(i.hash(7) % 500).cast(pl.Int64),
            pending=(i.hash(8) % 20).cast(pl.Int64),
            running=(i.hash(9) % 64).cast(pl.Int64),
            source=pl.lit("vllm.log"),
            line=(i * 4 + 1).cast(pl.UInt32),
        )
        .sort("time")
        .with_columns(seq=(pl.int_range(pl.len()) * 4).cast(pl.UInt32), step=pl.int_range(1, pl.len() + 1))
    )
    hook_pending = hook_steps.select(
        "stream",
        (pl.col("seq") + 1).alias("seq"),
        "step",
        "time",
        pl.col("step").cast(pl.String).alias("request_id"),
        pl.lit(128, pl.Int64).alias("prompt"),
        pl.lit(512, pl.Int64).alias("max_out"),
        (pl.col("free_blocks") % 50 + 1).alias("blocks_needed"),
        "source",
        (pl.col("line") + 1).alias("line"),
    )
    hook_batch = hook_steps.select(
        "stream",
        (pl.col("seq") + 2).alias("seq"),
        "step",
        "time",
        (pl.col("running") * 5.5).alias("variance"),
        pl.lit(256.0).alias("threshold"),
        "source",
        (pl.col("line") + 2).alias("line"),
    )
    n_stats = max(1, span // 10_000_000)
    k = pl.int_range(n_stats, dtype=pl.Int64)
    stats = pl.select(
        time=(pl.lit(t0) + k * 10_000_000).cast(pl.Datetime("us")).dt.replace_time_zone("UTC"),
        stream=pl.lit(0, pl.Int32),
        seq=k.cast(pl.UInt32),
        kv_usage=((k.hash(10) % 500) / 10 + 50).cast(pl.Float64),
        waiting=(k.hash(11) % 30).cast(pl.Int64),
        running=(k.hash(12) % 64).cast(pl.Int64),
        source=pl.lit("vllm.log"),
        line=(k * 97 + 2).cast(pl.UInt32),
    )
    empty = scan_empty().with_columns(pl.lit(None, utc).alias("time"), pl.lit(None, pl.String).alias("source"))
    config = cfg_parse(empty)
    return (
        events,
        {"dmon": dmon, "hook_steps": hook_steps, "hook_pending": hook_pending, "hook_batch": hook_batch},
        stats,
        config,
    )


def run(n_events: int = 1_000_000, n_dmon: int = 10_000_000, gpus: int = 8) -> dict:
    from preemptlog.joiner import compute

    t = time.perf_counter()
    events, fr, stats, config = frames(n_events, n_dmon, gpus)
    build = time.perf_counter() - t
    t = time.perf_counter()
    ev = compute(events, fr, stats, config)
    join = time.perf_counter() - t
    return {
        "events": events.height,
        "dmon_samples": fr["dmon"].height,
        "hook_steps": fr["hook_steps"].height,
        "stats_lines": stats.height,
        "build_s": round(build, 2),
        "join_s": round(join, 2),
        "evidence_rows": ev.height,
        "with_sched": int(ev.get_column("sched_free_blocks").is_not_null().sum()),
        "with_fb_jump": int(ev.get_column("dmon_fb_jump_mb").is_not_null().sum()),
    }


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:4]]
    print(run(*args))
