"""A reset of vLLM's prefix cache, in the vLLM log (a record family of the single log pass).

``BlockPool.reset_prefix_cache`` logs ``Successfully reset prefix cache`` (INFO,
vllm/v1/core/block_pool.py; 0.32.0 line 861) once the cache is cleared, in the engine core's process
(``(EngineCore_DP0 pid=N)``). From 0.12.0 the scheduler's ``reset_prefix_cache(reset_running_requests=True)``
first preempts every running request and moves it to the waiting queue (an RL weight sync, for one); with
running requests and ``reset_running_requests=False`` the reset fails instead ("Failed to reset prefix cache
because some blocks (N) are not freed yet", no preemption). So the line is the moment of the reset: a
preemption of that engine at that moment is the reset's (joiner/reset.py reads frame ``cache_resets``).

Frame ``cache_resets``: time, engine (from the process prefix; null: the one engine), source, line.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from ...model.frames import polars_schema
from ...sources.registry import RecordFamily, SourceOutput, TimeContext, register_family, register_samples
from ...sources.vllm_log import engine_of_proc

KIND = "cache_reset"
MARKERS = [("Successfully reset prefix cache", KIND)]
VERIFY = {KIND: r"\bSuccessfully reset prefix cache\b"}
RESETS_SCHEMA = {
    "time": "Datetime(time_unit='us', time_zone='UTC')",
    "engine": "String",
    "source": "String",
    "line": "UInt32",
}


def from_records(records: pl.DataFrame, ctx: TimeContext) -> SourceOutput:

    out = SourceOutput()
    rows = records.filter(pl.col("kind") == KIND) if records.height else records
    if rows.height == 0:
        return out
    proc = pl.col("proc") if "proc" in rows.columns else pl.lit(None, pl.String)
    resets = rows.select("time", engine_of_proc(proc).alias("engine"), "source", pl.col("n").alias("line")).cast(
        polars_schema(RESETS_SCHEMA)
    )
    out.frames["cache_resets"] = resets
    out.counters["cache_resets"] = {"lines": resets.height}
    return out


register_family(RecordFamily(name="cache_reset", markers=MARKERS, from_records=from_records, verify=VERIFY))

SAMPLES: list[tuple[str, dict[str, Any]]] = [
    (
        "(vLLMHttpServer pid=542833) (EngineCore_DP0 pid=548418) INFO 04-21 06:58:41 [v1/core/block_pool.py:428] "
        "Successfully reset prefix cache",
        {"kind": KIND, "proc": "EngineCore_DP0 pid=548418"},
    ),
    ("INFO 05-01 10:00:15 [block_pool.py:861] Successfully reset prefix cache", {"kind": KIND}),
    (
        "WARNING 05-01 10:00:15 [block_pool.py:839] Failed to reset prefix cache because some blocks (12) are not "
        "freed yet",
        {"_dropped": True},
    ),
]
register_samples("cache_reset", SAMPLES)
