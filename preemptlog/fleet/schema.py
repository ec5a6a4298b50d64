"""The fleet dataset's tables: one declared schema per table, the one home of the contract.

Every table is a folder of Hive-partitioned Parquet (``<table>/day=YYYY-MM-DD/part-<bundle>.parquet``,
docs/fleet.md). The partition key ``day`` lives in the folder name only, never inside a file;
every other column is declared here, flat (no lists or structs: Spark, Trino/Athena, DuckDB and
Dask agree on flat columns), strings UTF-8, counts Int64, times microseconds in UTC (Spark refuses
nanosecond Parquet). ``SCHEMA_VERSION`` goes into each file's key-value metadata
(``preemptlog.schema_version``), into the ``schema_version`` column of ``bundles``, and into the
dataset's ``_preemptlog.json``.

Schema versions: 1, the first; 2 (issue 38), ``events.partial`` (the event's server was analysed from
a bundle read in part, as ``incidents.partial`` says of its incident rows).
"""

from __future__ import annotations

from typing import Any

import polars as pl

from ..model.frames import polars_dtype

SCHEMA_VERSION = 2
TABLES = ("events", "incidents", "findings", "errors", "bundles")
PARTITION = "day"
META_VERSION = "preemptlog.schema_version"
META_TABLE = "preemptlog.table"
MARKER = "_preemptlog.json"  # the dataset's own description at its root ('_': readers skip it)
TIME = "Datetime(time_unit='us', time_zone='UTC')"

# Columns every per-server table starts with: which bundle, which server and engine, what it ran.
KEY: dict[str, str] = {
    "bundle_id": "String",  # the bundle's content digest (sha256, 32 hex digits): the part file's name
    "server": "String",  # the bundle's folder or file name (with a unit when one bundle holds several servers)
    "engine_kind": "String",  # "vllm" (an SGLang engine will say "sglang")
    "engine": "String",  # the engine index within the server ("0"; "1", ... for data-parallel ranks)
    "model": "String",  # the served model as the log names it
    "vllm_version": "String",  # the engine's version as the log names it
}

COLUMNS: dict[str, dict[str, str]] = {
    "events": {
        **KEY,
        "event_id": "String",
        "time": TIME,
        "time_precision": "String",
        "interval_start": TIME,
        "interval_end": TIME,
        "kind": "String",
        "request_id": "String",
        "mode": "String",
        "cumulative": "Int64",
        "source": "String",
        "line": "Int64",
        "gate": "String",
        "sub_kind": "String",
        "rule": "String",
        "confidence": "String",
        "mechanism": "String",
        "mechanism_confidence": "String",
        "recompute_tokens": "Int64",
        "recompute_bound": "String",
        "preempted_s": "Float64",
        "raw": "String",
        "partial": "Boolean",  # its server's bundle was damaged and read in part (schema 2)
    },
    "incidents": {
        **KEY,
        "generation": "String",  # V0 / V1, as derived from the log
        "host": "String",  # the host the log names (a process prefix's ip=, a compose service)
        "instance": "String",  # the /metrics scrapes' instance label, when they carry one
        "log_first": TIME,
        "log_last": TIME,
        "first_event": TIME,
        "last_event": TIME,
        "count_visible": "Boolean",
        "preemptions": "Int64",  # null when the count is not visible (never a 0 that means "cannot tell")
        "count_quality": "String",
        "not_visible_reason": "String",
        "remedy": "String",
        "requests_received": "Int64",  # server-level
        "preemption_rate": "Float64",  # server-level
        "g1_kv_space": "Int64",
        "g2_batch_variance": "Int64",
        "g3_queue_overflow": "Int64",
        "g4_prefix_conflict": "Int64",
        "undetermined": "Int64",
        "top_cause": "String",
        "causes": "String",
        "top_mechanism": "String",
        "mechanisms": "String",
        "recompute_tokens": "Int64",
        "recompute_lower_bound": "Boolean",
        "recompute_share": "Float64",  # server-level: of the tokens processed in the same stats intervals
        "thrash_requests": "Int64",  # server-level: requests preempted more than once (null: not evaluable)
        "thrash_5_or_more": "Int64",  # server-level
        "stall_s": "Float64",  # server-level: the longest stall
        "cfg_max_num_seqs": "String",
        "cfg_max_num_batched_tokens": "String",
        "cfg_gpu_memory_utilization": "String",
        "cfg_block_size": "String",
        "cfg_num_gpu_blocks": "String",
        "cfg_max_model_len": "String",
        "cfg_enable_prefix_caching": "String",
        "cfg_enable_chunked_prefill": "String",
        "cfg_tensor_parallel_size": "String",
        "cfg_kv_cache_dtype": "String",
        "headline": "String",  # server-level: summary.headline
        "top_fix": "String",  # server-level: the rank-1 fix (summary.fix_line)
        "top_fix_option": "String",
        "top_fix_suggested": "String",
        "top_fix_events": "Int64",
        "top_fix_verified": "String",  # fixes.plan's status of the rank-1 change: verified / not verified
        "to_know_more": "String",  # server-level: what to add to the bundle and what it would settle
        "warnings": "Int64",
        "partial": "Boolean",  # the bundle was damaged and read in part: its rows count what could be read
    },
    "findings": {
        **KEY,
        "finding": "String",  # cause | mechanism | fix | recompute | thrash | stall | never_fits | pressure
        "key": "String",  # the cause (gate/sub-kind), mechanism, option, ...
        "count": "Int64",  # events of that cause or mechanism; events a fix addresses; requests; ...
        "value": "Float64",  # tokens, seconds, the fix's rank, ...
        "text": "String",
        "evidence": "String",  # file:line (or the inputs) it was computed from
    },
    "errors": {
        "bundle_id": "String",
        "path": "String",
        "server": "String",  # null: the whole bundle
        "exit_code": "Int64",  # errors.ExitCode: 1 internal or crash, 3 no input, 5 damaged (partial), ...
        "error": "String",  # the exit code's name
        "message": "String",  # one line
    },
    "bundles": {
        "bundle_id": "String",
        "path": "String",
        "name": "String",
        "bytes": "Int64",
        "files": "Int64",
        "servers": "Int64",
        "outcome": "String",  # ok | partial | error
        "exit_code": "Int64",
        "events": "Int64",
        "first_event": TIME,
        "last_event": TIME,
        "log_first": TIME,
        "log_last": TIME,
        "timezone": "String",
        "assumptions": "String",
        "options": "String",  # the analysis options that shape the rows (--tz, --year), as JSON
        "preemptlog_version": "String",
        "schema_version": "Int64",
        "analysed_at": TIME,
        "analysis_s": "Float64",
        "worker_peak_rss_mb": "Float64",
    },
}

# Columns that differ between two runs on the same bundles (when, how long): left out of comparisons.
RUN_COLUMNS = ("analysed_at", "analysis_s", "worker_peak_rss_mb")


def polars_schema(table: str) -> pl.Schema:
    return pl.Schema({k: polars_dtype(v) for k, v in COLUMNS[table].items()})


def conform(table: str, df: pl.DataFrame) -> pl.DataFrame:
    """The table's columns in order and type (missing ones null), plus ``day`` when present."""
    schema = polars_schema(table)
    cols = [pl.col(c).cast(t) if c in df.columns else pl.lit(None, t).alias(c) for c, t in schema.items()]
    if PARTITION in df.columns:
        cols.append(pl.col(PARTITION).cast(pl.Date))
    return df.select(cols)


def empty(table: str) -> pl.DataFrame:
    return pl.DataFrame(schema={**polars_schema(table), PARTITION: pl.Date})


_SPARK = {"String": "string", "Int64": "bigint", "Float64": "double", "Boolean": "boolean"}


def spark_ddl(table: str) -> str:
    """The table as a Spark DDL string, with ``day date`` last (the partition column)."""
    parts = [f"`{c}` {'timestamp' if t.startswith('Datetime') else _SPARK[t]}" for c, t in COLUMNS[table].items()]
    return ", ".join([*parts, f"`{PARTITION}` date"])


def file_metadata(table: str) -> dict[str, str]:
    return {META_VERSION: str(SCHEMA_VERSION), META_TABLE: table}


_NOTES = {
    "events": "one row per preemption event (report: servers, causes, trend); day = the event's UTC date",
    "incidents": "one row per bundle x server x engine; day = the first event's (else the log's first line's) UTC date",
    "findings": "long rows: causes and mechanisms per engine, fixes and server-level findings (engine null)",
    "errors": "a bundle (or one of its servers) that failed or was damaged; day = the bundle's newest file's UTC date",
    "bundles": "one row per bundle analysed (the resume marker: written last); day = its first event's UTC date",
}


def markdown() -> str:
    """The tables as Markdown (docs/fleet.md embeds it; a test keeps them equal)."""
    out = [f"schema_version {SCHEMA_VERSION}; partition column `{PARTITION}` (date) in the folder names only.", ""]
    for t in TABLES:
        out += [f"#### `{t}/`", "", _NOTES[t] + ".", "", "| column | type |", "|---|---|"]
        out += [f"| `{c}` | {'timestamp[us, UTC]' if v.startswith('Datetime') else v} |" for c, v in COLUMNS[t].items()]
        out.append("")
    return "\n".join(out)


def describe() -> dict[str, Any]:
    """The dataset's description (``_preemptlog.json``): version, layout, every table's columns."""
    return {
        "schema_version": SCHEMA_VERSION,
        "partitioning": "hive",
        "partition_by": [PARTITION],
        "tables": {t: dict(COLUMNS[t]) for t in TABLES},
    }
