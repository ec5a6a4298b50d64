"""Configuration seen in the log, and the defaults assumed where it is silent.

Sources (facts page section 4): the engine config line (``... with config:``),
``non-default args: {...}`` (0.9+), ``args: Namespace(...)`` (0.4.2-0.8.5),
``Chunked prefill is enabled with max_num_batched_tokens=N``,
``# GPU blocks: N, # CPU blocks: M`` / ``# cuda blocks``, ``GPU KV cache size:
N tokens``, ``Maximum concurrency for N tokens per request: Xx``, the server
version line, ``Using max model len N``, DEBUG ``num_gpu_blocks is: N``,
``Setting/Defaulting max_num_seqs to N`` and ``Setting kv cache block size to N for X
backend(s).`` (0.32+).

Frame (``CONFIG_SCHEMA``), long format, one row per value seen:
key, value (text as logged), status (``seen`` | ``derived`` | ``default``),
time, source, line, note, run (the server run of the log line: vllm/runs.py; null for
other sources and defaults, which are the bundle's); then ``engine_kind`` (registry.CONFIG_ENGINE),
whose configuration the row is: vLLM's own lines, /metrics and block-table rows and vLLM's defaults
are vLLM's, another engine's rows (given in ``extra``: an SGLang log's) and defaults that engine's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import polars as pl

from ...model.config import VERSION_SHAPE, version_text
from ...model.config import in_force as in_force  # re-exported (moved to model/config.py)
from ...model.config import version_tuple as _version_tuple
from ...model.frames import polars_schema
from ...model.schemas import CONFIG_SCHEMA
from ..common import arg_pattern as _arg
from ..facts import NEWEST_VLLM_READ, VLLM
from ..registry import (
    CONFIG_ENGINE,
    Budget,
    ReplaySetting,
    ReplayVersions,
    SchedulerVersion,
    config_engines,
    config_of,
    get,
    owns,
    shown,
)
from .runs import record_runs
from .stats import RUST_FAMILY, V1_STATS_FAMILIES

# vLLM's stats lines (the stats frame's ``family``): the only ones its derived values read
OWN_STATS_FAMILIES = frozenset({"v0", *V1_STATS_FAMILIES})

# (record kind, key, regex with one group)
EXTRACTORS: list[tuple[str, str, str]] = [
    # the version: its longest prefix of VERSION_SHAPE, what follows up to the closing parenthesis left
    ("cfg_engine", "vllm_version", rf"engine \(v({VERSION_SHAPE})[^)]*\)"),
    ("cfg_engine", "engine", r"Initializing an? (V[01]) LLM engine"),
    ("cfg_engine", "model", _arg("model")),
    # the name the server's /metrics label model_name carries (ModelConfig.served_model_name: the first of
    # --served-model-name, else the model); 0.4.3+ engine config lines state it (events/scopes.py)
    ("cfg_engine", "served_model_name", _arg("served_model_name")),
    ("cfg_engine", "max_model_len", _arg("max_seq_len")),
    ("cfg_engine", "tensor_parallel_size", _arg("tensor_parallel_size")),
    ("cfg_engine", "pipeline_parallel_size", _arg("pipeline_parallel_size")),
    ("cfg_engine", "data_parallel_size", _arg("data_parallel_size")),
    ("cfg_engine", "enable_prefix_caching", _arg("enable_prefix_caching")),
    ("cfg_engine", "enable_chunked_prefill", _arg("chunked_prefill_enabled")),
    ("cfg_engine", "enable_chunked_prefill", _arg("enable_chunked_prefill")),
    ("cfg_engine", "speculative_config", r"speculative_config=(None|[A-Za-z]\w*\([^)]*\)|\{[^}]*\})"),
    ("cfg_engine", "kv_cache_dtype", _arg("kv_cache_dtype")),
    ("cfg_engine", "quantization", _arg("quantization")),
    ("cfg_engine", "num_scheduler_steps", _arg("num_scheduler_steps")),
    ("cfg_engine", "use_v2_block_manager", _arg("use_v2_block_manager")),
    ("cfg_chunked", "max_num_batched_tokens", r"max_num_batched_tokens=(\d+)"),
    ("cfg_chunked", "enable_chunked_prefill", r"(Chunked prefill is enabled)"),
    ("cfg_blocks", "num_gpu_blocks", r"# \w+ blocks: (\d+), # CPU"),
    ("cfg_blocks", "num_gpu_blocks", r"^(?:.*\] )?# (?:GPU|cuda|rocm|TPU|HPU|XPU|NPU|tpu|hpu|xpu|npu) blocks: (\d+)$"),
    ("cfg_blocks", "num_cpu_blocks", r"# CPU blocks: (\d+)"),
    ("cfg_kv_size", "kv_cache_tokens", r"KV cache size: ([\d,]+) tokens"),
    # 0.30+ names the KV cache's device ("%s KV cache size", kv_cache_utils.py: "GPU" on CUDA and ROCm, else
    # the device type upper-cased): only another device's is kept (the max_num_seqs default on CPU)
    ("cfg_kv_size", "kv_cache_device", r"^(?:.*\] )?(CPU|XPU|TPU|HPU|NPU) KV cache size: [\d,]+ tokens"),
    ("cfg_kv_size", "max_model_len", r"Maximum concurrency for ([\d,]+) tokens per request"),
    ("cfg_kv_size", "max_concurrency", r"Maximum concurrency for [\d,]+ tokens per request: ([\d.]+)x"),
    ("cfg_concurrency", "max_model_len", r"Maximum concurrency for ([\d,]+) tokens per request"),
    ("cfg_concurrency", "max_concurrency", r"Maximum concurrency for [\d,]+ tokens per request: ([\d.]+)x"),
    ("cfg_version", "vllm_version", rf"(?:server version|█\s+version) v?({VERSION_SHAPE})"),
    ("cfg_max_len", "max_model_len", r"Using max model len (\d+)"),
    # --max-model-len auto: "Auto-fit max_model_len: reduced from X to Y ...", "... using max_model_len=X, which
    # fits ...", "... full model context length X fits ...", "--max-model-len auto reduced max_model_len from X to Y"
    # (the last one logged is the length in force: under 0.34's extensible KV cache a first fit is re-done after
    # warmup)
    (
        "cfg_autofit",
        "max_model_len",
        r"(?:reduced (?:max_model_len )?from \d+ to |max_model_len=|context length )(\d+)",
    ),
    ("cfg_num_gpu_blocks", "num_gpu_blocks", r"num_gpu_blocks is: (\d+)"),
    ("cfg_max_num_seqs", "max_num_seqs", r"max_num_seqs to (\d+)"),
    ("cfg_kv_memory", "kv_cache_memory_gib", r"Available KV cache memory: ([\d.]+) GiB"),
    # V1 0.9+ (kv_cache_utils.py): "Overriding num_gpu_blocks=8192 with num_gpu_blocks_override=64"
    ("cfg_override", "num_gpu_blocks_override", r"with num_gpu_blocks_override=(\d+)"),
    ("cfg_override", "num_gpu_blocks", r"with num_gpu_blocks_override=(\d+)"),
    # ... and the blocks the memory profile found, what the GPU holds (a pinned pool can grow to it)
    ("cfg_override", "num_gpu_blocks_profiled", r"Overriding num_gpu_blocks=(\d+) with"),
    # 0.32+ (vllm/platforms/interface.py update_block_size_for_backend): "Setting kv cache block size to
    # 32 for FLASH_ATTN backend(s)." -- the block size the engine set (see _backend_block_size)
    ("cfg_block_size", "block_size", r"Setting kv cache block size to (\d+) for "),
    ("cfg_block_size", "block_size", r"Setting attention block size to (\d+) tokens"),
    # a later line that turns a feature off (its value: "False", see _DISABLED)
    ("cfg_disable", "enable_chunked_prefill", r"(Disabling) chunked prefill\b"),
    ("cfg_disable", "enable_prefix_caching", r"(Disabling) prefix caching\b"),
    ("cfg_disable", "enable_extensible_kv_cache", r"(Disabling) the extensible KV cache\b"),
    ("cfg_disable", "enable_extensible_kv_cache", r"Extensible KV cache (off):"),
    ("cfg_max_num_seqs", "max_num_batched_tokens", r"Defaulting max_num_batched_tokens to (\d+)"),
    # memory lines (issue 16, `whatif`): V1 gpu_model_runner / V0 model_runner and the V0 profiling line
    ("cfg_weights", "model_weights_gib", r"(?:Model loading took|Loading model weights took) ([\d.]+) ?Gi?B"),
    ("cfg_total_mem", "total_gpu_memory_gib", r"total_gpu_memory \(([\d.]+) ?GiB\)"),
    ("cfg_total_mem", "model_weights_gib", r"model weights take ([\d.]+) ?GiB"),
    ("cfg_total_mem", "kv_cache_memory_gib", r"reserved for KV Cache is ([\d.]+) ?GiB"),
    # the GPU's name in a fused-MoE config file's name (vllm/model_executor/layers/fused_moe/fused_moe.py
    # get_config_file_name: "E=128,N=384,device_name=NVIDIA_H100_80GB_HBM3.json", the name's spaces and
    # slashes made "_", the H200 family named "NVIDIA_H200"; logged as "Using configuration from %s for MoE
    # layer." or "Using default MoE config. ... Config file not found at %s")
    ("cfg_moe_device", "gpu_name", r"device_name=([A-Za-z0-9_\-]+?)(?:,|\.json)"),
]
ARG_KEYS = [
    "model",
    "served_model_name",  # the args line's --served-model-name (a list from 0.4.3): the model_name label's value
    "max_num_seqs",
    "max_num_batched_tokens",
    "block_size",
    "gpu_memory_utilization",
    "enable_prefix_caching",
    "enable_chunked_prefill",
    "max_model_len",
    "swap_space",
    "preemption_mode",
    "scheduling_policy",
    "speculative_model",
    "num_speculative_tokens",
    "speculative_config",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "data_parallel_size",
    "kv_cache_dtype",
    "num_gpu_blocks_override",
    "max_prefix_cache_len",
    # the scheduler's admission settings the what-if replays (SCHEDULER_SETTINGS)
    "watermark",
    "scheduler_reserve_full_isl",
    "cache_aware_admission_window",
    "cache_aware_admission_threshold",
    "max_num_inflight_kv_loads",
    # how vLLM sizes the KV cache and its defaults (version_defaults): 0.34's extensible KV cache and what turns it
    # off; a fixed KV cache size (gpu_memory_utilization is then ignored); the performance mode doubling defaults
    "enable_extensible_kv_cache",
    "kv_cache_memory_bytes",
    "enable_elastic_ep",
    "performance_mode",
]
for _k in ARG_KEYS:
    if _k == "speculative_config":  # a dict value: read whole (the generic value stops at its first space)
        EXTRACTORS.append(
            (
                "cfg_args",
                _k,
                r"(?:'speculative_config':\s*|\bspeculative_config=)(None|\{[^{}]*\}|[A-Za-z]\w*\([^)]*\))",
            )
        )
        continue
    if _k == "served_model_name":  # a list in the args (['qwen']), a name in the engine config line
        EXTRACTORS.append(
            ("cfg_args", _k, r"(?:'served_model_name':\s*|\bserved_model_name=)(None|\[[^\]]*\]|'[^']*'|[^,\s)}]+)")
        )
        continue
    EXTRACTORS.append(("cfg_args", _k, _arg(_k)))

# Keys read from the whole text of their line: the value is itself a nested config object; every
# other key of an args dict or engine config line is read at that line's top level only (_top_level).
NESTED_VALUE_KEYS = frozenset({"speculative_config", "served_model_name"})

# Where a config line's own keys begin, and the bracket depth they sit at there: the args dict
# (``non-default args: {...}``, 0.9+), the Namespace (``args: Namespace(...)``, 0.4.2-0.8.5) and
# the engine line (``... with config: k=v, ...``).
_TOP_LEVEL_STARTS = (("non-default args: ", 1), ("args: Namespace(", 1), (" with config: ", 0))

# vLLM's own defaults, used when the log is silent: (key, first version, value, where vLLM sets it),
# newest first; read from the released wheels' source (gpu_memory_utilization: 0.9 in 0.4-0.19.1,
# 0.92 from 0.20.0 through 0.33.0; 0.34.0 leaves it unset, which resolves to 1.0 under the extensible
# KV cache, on by default on CUDA and ROCm, and to 0.92 without it; block_size: DEFAULT_BLOCK_SIZE 16
# through 0.33.0, 64 in 0.34.0). A default row's note says "assumed: vLLM X.Y default (file)".
VERSION_DEFAULTS: dict[str, list[tuple[tuple[int, ...] | None, str, str]]] = {
    "gpu_memory_utilization": [
        (
            (0, 34, 0),
            "1.0",
            "vllm/config/cache.py CacheConfig.resolved_gpu_memory_utilization: unset, 1.0 under the extensible KV "
            "cache, on by default on CUDA and ROCm (the cache is sized from the memory measured after warmup), "
            "0.92 without it",
        ),
        ((0, 20, 0), "0.92", "vllm/config/cache.py CacheConfig.gpu_memory_utilization"),
        (None, "0.9", "vllm/config/cache.py (vllm/config.py before 0.10) CacheConfig.gpu_memory_utilization"),
    ],
    "block_size": [
        (
            (0, 34, 0),
            "64",
            "vllm/config/cache.py CacheConfig.DEFAULT_BLOCK_SIZE, on CUDA (an attention backend may pick another)",
        ),
        (
            None,
            "16",
            "vllm/config/cache.py CacheConfig.DEFAULT_BLOCK_SIZE, on CUDA (an attention backend may pick another)",
        ),
    ],
    "max_num_seqs": [
        (
            (0, 8, 0),
            "256",
            "vllm/engine/arg_utils.py _set_default_args: 256 on most GPUs, 1024 on H100/H200/B200-class, "
            "128 x world size on CPU",
        ),
        (None, "256", "vllm/config.py SchedulerConfig.max_num_seqs"),
    ],
    "scheduling_policy": [(None, "fcfs", "vllm/config/scheduler.py SchedulerConfig.policy")],
}


# A line only some versions write bounds the version from below when no line names it: the Rust
# frontend (``VLLM_USE_RUST_FRONTEND=1``; its stats line, stats.RUST_FAMILY) ships from vLLM 0.33.0
# (vllm-rs, rust/src/llm/src/log_stats.rs of the 0.33.0 and 0.34.0 wheels; none before).
RUST_FRONTEND_SINCE = "0.33.0"
# V1's KV cache lines: "GPU KV cache size: N tokens" and "Maximum concurrency for M tokens per request: Xx" are
# two lines through 0.27, one line ("... N tokens, Maximum concurrency for ...") from 0.28.0 (vllm-facts.md 4)
KV_SIZE_ONE_LINE_SINCE = "0.28.0"
KV_SIZE_ONE_LINE_RE = r"KV cache size: [\d,]+ tokens, Maximum concurrency for "
VERSION_FLOOR_KEY = "vllm_version_floor"


def default_rows(
    version: str | None, floor: str | None = None, floor_why: str | None = None
) -> list[tuple[str, str, str]]:
    """(key, value, note) of vLLM's defaults for ``version`` (None: not in the bundle). Without a
    version, ``floor`` (a version the bundle's own lines show it is at least: ``floor_why``) keeps
    only the defaults of the versions from it on: one left is that default, several the one in force
    at the floor, with the newer ones named in the note."""
    vt = _version_tuple(version) if version else None
    ft = _version_tuple(floor) if floor and vt is None else None
    out = []
    for key, rows in VERSION_DEFAULTS.items():
        if ft is not None:
            at_floor = next((r for r in rows if r[0] is None or ft >= r[0]), rows[-1])
            newer = [r for r in rows if r[0] is not None and r[0] > ft][::-1]
            why = f"the version is not in the bundle, at least {floor}: {floor_why or 'the bundle shows it'}"
            if not newer:
                out.append((key, at_floor[1], f"assumed: vLLM's default from {floor} on ({at_floor[2]}; {why})"))
                continue
            changes = ", ".join(f"{r[1]} from {version_text(r[0])}" for r in newer)
            out.append(
                (
                    key,
                    at_floor[1],
                    f"assumed: vLLM's default from {floor} until {version_text(newer[0][0])} ({changes}; {why}; "
                    f"{at_floor[2]})",
                )
            )
            continue
        chosen = next((r for r in rows if vt is not None and r[0] is not None and vt >= r[0]), None)
        if chosen is None:
            chosen = rows[-1] if vt is not None else rows[0] if len(rows) == 1 else None
        if chosen is None:  # the version is not in the bundle and the default changed between versions
            oldest, newer = rows[-1], rows[-2::-1]
            since = [version_text(r[0]) for r in newer]
            changes = ", ".join(f"{r[1]} from {v}" for r, v in zip(newer, since, strict=True))
            note = (
                f"assumed: vLLM's default ({oldest[1]} before {since[0]}, {changes}; the version is not in "
                f"the bundle; {oldest[2]})"
            )
            out.append((key, oldest[1], note))
            continue
        label = f"vLLM {version} default" if version else "vLLM default"
        out.append((key, chosen[1], f"assumed: {label} ({chosen[2]})"))
    return out


_NONE_MEANINGFUL = {"speculative_config", "speculative_model", "quantization"}

# Keys whose values are normalised: thousands separators removed, quotes stripped.
_NUMERIC = {
    "max_model_len",
    "kv_cache_tokens",
    "num_gpu_blocks",
    "num_cpu_blocks",
    "max_num_seqs",
    "max_num_batched_tokens",
    "block_size",
    "num_gpu_blocks_override",
    "num_gpu_blocks_profiled",
}


def parse(
    records: pl.DataFrame, stats: pl.DataFrame | None = None, extra: list[pl.DataFrame] | None = None
) -> pl.DataFrame:
    """Config rows from the log, plus ``extra`` rows from other sources, derived values and defaults,
    each with the engine whose configuration it is (``engine_kind``: registry.config_engines). Values are
    derived from vLLM's own rows, stats lines and records only; the defaults are those of every engine the
    bundle shows (registry.shown: vLLM's unless every log line is another engine's, so an SGLang-only
    bundle is not given vLLM's block_size or max_num_seqs), each for the keys its own rows leave unsaid."""

    cfg = records.filter(pl.col("kind").str.starts_with("cfg_"))
    # Each value belongs to the server run of its line (a restart resets the configuration).
    runs = record_runs(records)
    cfg = cfg.join(runs, on="seq", how="left") if "seq" in cfg.columns else cfg.with_columns(run=pl.lit(None, pl.Int32))
    cfg = cfg.select("kind", "text", "time", "source", "n", "run")
    parts = [_extracted(cfg)] if cfg.height else []
    schema = polars_schema(CONFIG_SCHEMA)
    seen = pl.concat(parts) if parts else pl.DataFrame(schema=schema)
    # _arg values end with their delimiter; speculative_config's own regex keeps its closing bracket.
    closed = (
        pl.when(pl.col("key") == "speculative_config")
        .then(pl.col("value"))
        .otherwise(pl.col("value").str.replace(r"[,)}\s]$", ""))
    )
    value = closed.str.strip_chars("'\"")
    seen = seen.with_columns(
        value=pl.when(pl.col("key").is_in(list(_NUMERIC)))
        .then(value.str.replace_all(",", "", literal=True))
        .otherwise(value)
    ).with_columns(
        value=pl.when(pl.col("key") == "gpu_name")
        .then(pl.col("value").str.replace_all("_", " ", literal=True))
        .when(pl.col("value") == "Chunked prefill is enabled")
        .then(pl.lit("True"))
        .when(pl.col("value").is_in(["Disabling", "off"]))
        .then(pl.lit("False"))
        .otherwise(pl.col("value"))
    )
    # A logged None means "not set" (vLLM picks a default), except where None is the setting itself.
    seen = seen.filter((pl.col("value") != "None") | pl.col("key").is_in(list(_NONE_MEANINGFUL)))
    for more in extra or []:
        if "run" not in more.columns:  # other sources' values are the bundle's
            more = more.with_columns(run=pl.lit(None, pl.Int32))
        seen = pl.concat([seen, more.select(list(schema)).cast(schema)], how="vertical")
    seen = seen.unique(maintain_order=True).sort("time", "source", "line", nulls_last=True, maintain_order=True)
    seen = _backend_block_size(seen, cfg)
    seen = _data_parallel_sum(seen, cfg)
    # Whose configuration each row is (registry.config_engines): another engine's rows (an SGLang log's
    # max_model_len, kv_cache_tokens...) are kept for that engine, and never derive or stand for vLLM's.
    seen = config_engines(seen, records)
    own = seen.filter(pl.col(CONFIG_ENGINE) == VLLM).drop(CONFIG_ENGINE)
    own_stats = stats.filter(pl.col("family").is_in(list(OWN_STATS_FAMILIES))) if stats is not None else None
    own_records = records.filter(owns(get(VLLM))) if records.height and "kind" in records.columns else records
    derived = _derive(own, own_stats, own_records).with_columns(pl.lit(VLLM, pl.String).alias(CONFIG_ENGINE))
    out = pl.concat([seen, derived], how="vertical")
    run_ids = set(runs.get_column("run").unique().to_list())
    defaults = []
    for e in shown(records, seen):
        theirs = out.filter(pl.col(CONFIG_ENGINE) == e.name)
        have = _stated_in_every_run(theirs, run_ids)
        defaults += [
            {
                "key": k,
                "value": v,
                "status": "default",
                "time": None,
                "source": None,
                "line": None,
                "note": note,
                "run": None,
                CONFIG_ENGINE: e.name,
            }
            for k, v, note in e.defaults(theirs.drop(CONFIG_ENGINE))
            if k not in have
        ]
    if defaults:
        out = pl.concat([out, pl.DataFrame(defaults, schema=out.schema)], how="vertical")
    server = _api_server(records, cfg, own_stats)
    out = _seqs_default_on_this_gpu(out, own_stats, server, _batch_chosen_by_vllm(seen, cfg) if server else None)
    return _batch_default_on_this_gpu(out, own_stats, server, run_ids)


# From 0.8.0 vLLM's max_num_seqs default depends on the GPU (vllm/engine/arg_utils.py _set_default_args,
# get_batch_defaults in 0.32-0.34): 1024 on a GPU of at least 70 GiB that is not an A100 (H100, H200;
# from 160 GiB any: B200), 256 on the others (performance_mode throughput doubles either).
GPU_SEQS_SINCE = (0, 8, 0)
LARGE_GPU_GIB, HUGE_GPU_GIB = 70.0, 160.0
GPU_SEQS_SRC = "vllm/engine/arg_utils.py get_batch_defaults: 1024 on a GPU of >= 70 GiB other than an A100, else 256"


# The API server's max_num_batched_tokens default of each tier (get_batch_defaults, the same branch that sets
# max_num_seqs; doubled, like max_num_seqs, in throughput mode): small GPUs 2048, large 8192, >= 160 GiB 16384.
API_BATCH_BY_TIER = {2048: "small", 8192: "large", 16384: "large"}
BATCH_TIER_SRC = (
    "vllm/engine/arg_utils.py get_batch_defaults: the API server's max_num_batched_tokens 2048 with "
    "max_num_seqs 256, 8192 or 16384 with 1024, in one branch"
)
# GPUs whose name holds no memory size but whose every model has at least 70 GiB (vLLM's MoE config files
# name the whole H200 family "NVIDIA_H200"; AMD's are "AMD_Instinct_MI300X"): GB assumed from the maker's
# specification.
NAMED_GPU_GIB = {
    "H200": 141.0,
    "H20": 96.0,
    "B200": 180.0,
    "B300": 288.0,
    "MI300X": 192.0,
    "MI325X": 256.0,
    "MI355X": 288.0,
}


def _api_server(records: pl.DataFrame, cfg: pl.DataFrame, stats: pl.DataFrame | None = None) -> bool:
    """The log is an API server's (vLLM's defaults differ for the offline ``LLM`` class): its "vLLM API server
    version" line, an ``APIServer`` process prefix (V1 0.10+), the "openai-api-server usage context" of
    its "Defaulting max_num_batched_tokens" line, the Rust frontend's stats lines (``stats``, family
    ``RUST_FAMILY``: the frontend runs only under ``vllm serve``, entrypoints/cli/serve.py 0.33-0.34, whose
    usage context is the API server's), or a request of the OpenAI server: a "Received request" line (its
    request logger, vllm/entrypoints/logger.py; the LLM class logs none) or an "Added request" line of a
    ``chatcmpl-`` / ``cmpl-`` id (the ids of its chat and completion endpoints)."""
    if stats is not None and stats.height and "family" in stats.columns and (stats["family"] == RUST_FAMILY).any():
        return True
    if records.height and "req_id" in records.columns:
        req = records.filter(pl.col("kind").is_in(["req_received", "req_added"]))
        openai = pl.col("req_id").fill_null("").str.contains(r"^(?:chatcmpl|cmpl)-")
        if req.height and req.select((pl.col("kind") == "req_received").any() | openai.any()).item():
            return True
    if cfg.height and (
        cfg.filter(pl.col("kind") == "cfg_version").height
        or cfg.get_column("text").str.contains("openai-api-server usage context", literal=True).any()
    ):
        return True
    if "proc" not in records.columns or records.height == 0:
        return False
    return bool(records.select(pl.col("proc").str.starts_with("APIServer").any()).item())


def _batch_chosen_by_vllm(seen: pl.DataFrame, cfg: pl.DataFrame) -> dict | None:
    """The max_num_batched_tokens vLLM chose itself (the row of its "Chunked prefill is enabled with
    max_num_batched_tokens=N" or "Defaulting max_num_batched_tokens to N" line), when no args or config line
    of the user's states it: None otherwise."""
    if cfg.height == 0:
        return None
    rows = seen.filter(pl.col("key") == "max_num_batched_tokens")
    kinds = cfg.select("source", pl.col("n").cast(rows.schema["line"]).alias("line"), "kind", "text").unique(
        ["source", "line"], keep="first", maintain_order=True
    )
    rows = rows.join(kinds, on=["source", "line"], how="left", maintain_order="left")
    # every row is one of vLLM's own choice lines (the user's args, config lines and other sources' rows may
    # hold a value the user set)
    if rows.height == 0 or not rows.get_column("kind").is_in(["cfg_chunked", "cfg_max_num_seqs"]).all():
        return None
    return rows.drop("kind", "text").row(rows.height - 1, named=True)


@dataclass(frozen=True)
class GpuShown:
    """What the bundle shows of the GPU vLLM's per-GPU defaults follow (get_batch_defaults' branches):
    ``cpu`` its "CPU KV cache size" line (the CPU backend); ``busy`` a stats line of one engine running more
    than the small GPUs' max_num_seqs and no more than the large ones' (only the large branch allows it);
    ``tier`` by the GPU's memory or name: "small" (below 70 GiB), "huge" (from 160 GiB), "large" (70-160 GiB,
    named, not an A100), "named-small" (an A100 or GB10 whatever its memory), "unless-a100" (70-160 GiB, no
    name), None where neither is shown; ``cite`` the memory's words with its file:line, ``named`` the GPU's
    name with its file:line."""

    cpu: dict | None = None
    busy: dict | None = None
    tier: str | None = None
    cite: str | None = None
    named: str | None = None


def _gpu_shown(mine: pl.DataFrame, stats: pl.DataFrame | None, small: int) -> GpuShown:
    """The GPU as far as vLLM's rows (``mine``) and stats lines show it, ``small`` the small GPUs'
    max_num_seqs (256, 512 in throughput mode): ``total_gpu_memory`` (V0 and V1 0.8-0.10's memory profiling
    line) or nvidia-smi's memory, else the GPU's name (nvidia-smi's, or vLLM's MoE config file name)."""
    one = (
        stats.filter((pl.col("engines") == 1) & pl.col("running").is_not_null())
        if stats is not None and stats.height and "engines" in stats.columns
        else None
    )
    top = one.sort("running", descending=True, maintain_order=True).head(1) if one is not None and one.height else None
    busy = top.row(0, named=True) if top is not None and small < int(top.item(0, "running")) <= 4 * small else None
    mem = _last(mine, "total_gpu_memory_gib") or _last(mine, "gpu_memory_total_gib")  # vLLM's line, nvidia-smi's
    gib = _float(mem["value"]) if mem else None
    gpu = _last(mine, "gpu_name")  # nvidia-smi's (sources/gpuinfo.py)
    name = str(gpu["value"]) if gpu else None
    named_gb = re.search(r"(\d+)\s*GB\b", name or "")
    if gib is None and named_gb:  # nvidia-smi -L: the name's memory ("NVIDIA H100 80GB HBM3")
        mem, gib = gpu, float(named_gb.group(1))
    family = next((t for t in re.split(r"[\s_-]+", name or "") if t.upper() in NAMED_GPU_GIB), None)
    if gib is None and family is not None:  # "NVIDIA H200": every model of the family has at least 70 GiB
        mem, gib = gpu, NAMED_GPU_GIB[family.upper()]
    device = _last(mine, "kv_cache_device")
    cpu = device if device is not None and str(device["value"]) == "CPU" else None
    if gib is None:
        return GpuShown(cpu, busy)
    assert mem is not None
    if mem is not gpu:
        cite = f"{str(mem['key']).removesuffix('_gib')} {gib:g} GiB{_where(mem)}"
    elif named_gb:
        cite = f"{gib:g} GB in its name"
    else:
        cite = f"{gib:g} GB: every {family} has it, assumed from the maker's specification"
    named = f"{name}{_where(gpu)}" if gpu else None
    if gib < LARGE_GPU_GIB:
        tier = "small"
    elif gib >= HUGE_GPU_GIB:
        tier = "huge"
    elif name is not None:
        tier = "named-small" if _small_tier(name) else "large"
    else:
        tier = "unless-a100"
    return GpuShown(cpu, busy, tier, cite, named)


def _seqs_default_on_this_gpu(
    out: pl.DataFrame, stats: pl.DataFrame | None, server: bool, batch: dict | None
) -> pl.DataFrame:
    """vLLM's max_num_seqs default (a ``default`` row: no line states it) as far as the bundle shows the GPU
    (``GPU_SEQS_SINCE`` on): on CPU (vLLM's "CPU KV cache size" line) 128 x world size for the API server
    (``server``), 256 x for the LLM class; the API server's max_num_batched_tokens that vLLM chose itself
    (``batch``: the same branch of get_batch_defaults sets both) names the tier on a V1 server; more requests
    running on one engine than the small GPUs' default (a stats line of one engine, never a sum over engines) can only be
    the large GPUs' default; ``total_gpu_memory`` (V0 and V1 0.8-0.10's memory profiling line) or the GPU's
    name (nvidia-smi's, or vLLM's MoE config file name) below 70 GiB is the small one, from 160 GiB the large
    one, in between the large one unless the GPU is an A100 (said, the value kept): :func:`_gpu_shown`."""
    is_row = (pl.col("key") == "max_num_seqs") & (pl.col("status") == "default") & (pl.col(CONFIG_ENGINE) == VLLM)
    row = out.filter(is_row)
    if row.height != 1 or not str(row.item(0, "value")).isdigit():
        return out
    mine = out.filter((pl.col(CONFIG_ENGINE) == VLLM) & (pl.col("status") != "default"))
    ver = _last(mine, "vllm_version")
    vt = _version_tuple(str(ver["value"])) if ver else None
    if vt is None:
        floor = _last(mine, VERSION_FLOOR_KEY)
        vt = _version_tuple(str(floor["value"])) if floor else None
    if vt is None or vt < GPU_SEQS_SINCE:
        return out
    label = f"vLLM {ver['value']}'s" if ver else "vLLM's"
    small = int(row.item(0, "value"))
    large = 4 * small  # 256 -> 1024 (512 -> 2048 in throughput mode)
    note = str(row.item(0, "note") or "")
    value = small
    gpu = _gpu_shown(mine, stats, small)
    if gpu.cpu is not None and small in (256, 512):
        return _seqs_default_on_cpu(out, is_row, mine, gpu.cpu, server, label, small // 256)
    tier = None
    if batch is not None and small in (256, 512) and _is_v1(mine, vt):
        tier = API_BATCH_BY_TIER.get(int(str(batch["value"])) * 256 // small)
    if tier is not None:
        assert batch is not None
        said = f"vLLM chose max_num_batched_tokens {batch['value']} for its API server{_where(batch)}"
        if tier == "large":
            value = large
            note = f"assumed: {label} default on a large GPU ({said}; {BATCH_TIER_SRC})"
        else:
            note = f"{note}; {small} on this GPU: {said} ({BATCH_TIER_SRC})"
    elif gpu.busy is not None:
        top = gpu.busy
        value = large
        note = (
            f"assumed: {label} default on a large GPU ({top['running']} running on one engine at "
            f"{top['source']}:{top['line']}, more than the {small} of other GPUs; {GPU_SEQS_SRC})"
        )
    elif gpu.tier == "small":
        note = f"{note}; {small} on this GPU: {gpu.cite}, below {LARGE_GPU_GIB:g} GiB ({GPU_SEQS_SRC})"
    elif gpu.tier == "huge":
        value = large
        note = f"assumed: {label} default on this GPU ({gpu.cite}, at least {HUGE_GPU_GIB:g} GiB; {GPU_SEQS_SRC})"
    elif gpu.tier == "large":
        value = large
        note = (
            f"assumed: {label} default on this GPU ({gpu.named}, {gpu.cite}, at least {LARGE_GPU_GIB:g} GiB; "
            f"{GPU_SEQS_SRC})"
        )
    elif gpu.tier == "named-small":
        note = f"{note}; {small} on this GPU: {gpu.named} keeps it whatever its memory ({GPU_SEQS_SRC})"
    elif gpu.tier == "unless-a100":
        note = (
            f"{note}; {large} if this GPU is not an A100: {gpu.cite}, at least {LARGE_GPU_GIB:g} GiB (an A100 keeps "
            f"{small}; {GPU_SEQS_SRC})"
        )
    else:
        return out
    return out.with_columns(
        value=pl.when(is_row).then(pl.lit(str(value))).otherwise(pl.col("value")),
        note=pl.when(is_row).then(pl.lit(note)).otherwise(pl.col("note")),
    )


CPU_SEQS_SRC = (
    "vllm/engine/arg_utils.py get_batch_defaults, cpu specific default values: max_num_seqs 128 x world size for "
    "the API server, 256 x for the LLM class (world size: pipeline x tensor parallel)"
)


def _world_size(mine: pl.DataFrame) -> tuple[int, str]:
    """vLLM's world size (pipeline x tensor parallel, as get_batch_defaults takes it) and its words."""
    sizes = []
    for key in ("tensor_parallel_size", "pipeline_parallel_size"):
        r = _last(mine, key)
        sizes.append((key, int(str(r["value"])) if r is not None and str(r["value"]).isdigit() else 1, r))
    parts = ", ".join(f"{k} {n}{_where(r) if r else ' (default)'}" for k, n, r in sizes)
    return sizes[0][1] * sizes[1][1], parts


def _seqs_default_on_cpu(
    out: pl.DataFrame, is_row: pl.Expr, mine: pl.DataFrame, device: dict, server: bool, label: str, mode: int
) -> pl.DataFrame:
    """The max_num_seqs default on vLLM's CPU backend (its "CPU KV cache size" line, ``device``): 128 x world
    size for the API server, 256 x for the LLM class (``mode``: 2 in throughput mode, which doubles it)."""
    world, parts = _world_size(mine)
    cpu = f"CPU{_where(device)}, world size {world}: {parts}"
    if server:
        value = str(128 * world * mode)
        note = f"assumed: {label} default on CPU for the API server ({cpu}; {CPU_SEQS_SRC})"
    else:
        value = str(256 * world * mode)
        note = (
            f"assumed: {label} default on CPU for the LLM class, no API server line seen ({cpu}; "
            f"{128 * world * mode} for the API server; {CPU_SEQS_SRC})"
        )
    return out.with_columns(
        value=pl.when(is_row).then(pl.lit(value)).otherwise(pl.col("value")),
        note=pl.when(is_row).then(pl.lit(note)).otherwise(pl.col("note")),
    )


# vLLM V1's max_num_batched_tokens where nothing sets it: from 0.8.0 the branch of get_batch_defaults that sets
# max_num_seqs (above; read in vllm/engine/arg_utils.py 0.32 and 0.34: get_batch_defaults, applied by
# _set_default_max_num_seqs_and_batched_tokens_args), by usage context: the API server (``vllm serve``) 2048 on
# a GPU below 70 GiB or an A100 (or a GB10, 0.34), 8192 from 70 GiB, 16384 from 160 GiB; the LLM class 8192,
# 16384, 16384; on CPU 2048 (API server) and 4096 (LLM class) x world size; throughput mode doubles it. The
# memory tiers came in spring 2025 (vllm-project/vllm#17073, A100 out again in #17885); before them the large
# values went to a GPU named H100 or H200 only: the one rule above is kept for every version from 0.8.0, as for
# max_num_seqs. Before 0.8.0 (V1 opt-in, 0.6.4-0.7.x: EngineArgs._override_v1_engine_args) 2048 for the API
# server and 8192 for the LLM class on every GPU but one named H100 or H200 (8192 and 16384 from
# vllm-project/vllm#12369, January 2025). V0's own defaults: replay_budget.
BATCH_BY_TIER = {"small": (2048, 8192), "large": (8192, 16384), "huge": (16384, 16384)}  # (API server, LLM class)
BATCH_CPU = (2048, 4096)  # x world size
BATCH_SRC = "vllm/engine/arg_utils.py get_batch_defaults"
BATCH_BEFORE_SRC = (
    "vllm/engine/arg_utils.py EngineArgs._override_v1_engine_args: V1 before 0.8.0 took 2048 for the API server and "
    "8192 for the LLM class, 8192 and 16384 on a GPU named H100 or H200 from vllm-project/vllm#12369 (January 2025)"
)
# the words of a value that is one tier's among others the bundle cannot tell apart
BATCH_HINT = "give --base max_num_batched_tokens=N"


def batch_default(
    gpu: GpuShown,
    server: bool,
    version: tuple[int, ...] | None,
    label: str,
    mode: int = 1,
    world: tuple[int, str] = (1, "(default)"),
) -> tuple[int, str]:
    """vLLM V1's max_num_batched_tokens default, and its note, on the GPU ``gpu`` shows: for the API server
    (``server``) or the LLM class, for ``version`` (None: not in the bundle, taken as 0.8.0 or later),
    ``label`` vLLM's name ("vLLM 0.10.0's"), ``mode`` 2 in throughput mode (it doubles the default),
    ``world`` the world size and its words (:func:`_world_size`: the CPU default is per worker). A note
    with ``BATCH_HINT`` is a value the bundle does not settle (the GPU's tier, a version before 0.8.0)."""
    i = 0 if server else 1
    ctx = "API-server" if server else "LLM-class"
    doubled = "; doubled: performance_mode throughput" if mode == 2 else ""

    def who(api: int) -> str:  # the LLM class is taken where no line shows an API server: its value said
        return "" if server else f"; no API server line seen: {api} for the API server"

    if version is not None and version < GPU_SEQS_SINCE:
        return BATCH_BY_TIER["small"][i] * mode, (
            f"assumed: {label} V1 {ctx} default before 0.8.0 (on every GPU but one named H100 or H200"
            f"{who(BATCH_BY_TIER['small'][0] * mode)}{doubled}; {BATCH_HINT}; {BATCH_BEFORE_SRC})"
        )
    if gpu.cpu is not None:
        n, parts = world
        return BATCH_CPU[i] * n * mode, (
            f"assumed: {label} {ctx} default on CPU (CPU{_where(gpu.cpu)}, {BATCH_CPU[i]} x world size {n}: "
            f"{parts}{who(BATCH_CPU[0] * n * mode)}{doubled}; {BATCH_SRC}, cpu specific default values)"
        )
    small, large, huge = (BATCH_BY_TIER[t][i] * mode for t in ("small", "large", "huge"))
    api = {t: BATCH_BY_TIER[t][0] * mode for t in BATCH_BY_TIER}
    shown = {
        "small": ("small", f"{gpu.cite}, below {LARGE_GPU_GIB:g} GiB"),
        "huge": ("huge", f"{gpu.cite}, at least {HUGE_GPU_GIB:g} GiB"),
        "large": ("large", f"{gpu.named}, {gpu.cite}, at least {LARGE_GPU_GIB:g} GiB and not an A100"),
        "named-small": ("small", f"{gpu.named} keeps the small GPUs' default whatever its memory"),
    }.get(gpu.tier or "")
    if shown is not None:
        tier, why = shown
        value = BATCH_BY_TIER[tier][i] * mode
        return value, f"assumed: {label} {ctx} default on this GPU ({why}{who(api[tier])}{doubled}; {BATCH_SRC})"
    if gpu.busy is not None:
        top = gpu.busy
        also = f"; {huge} if it has 160 GiB or more: {BATCH_HINT}" if huge != large else ""
        return large, (
            f"assumed: {label} {ctx} default on a GPU of >= {LARGE_GPU_GIB:g} GiB other than an A100 "
            f"({top['running']} running on one engine at {top['source']}:{top['line']}, more than the small GPUs' "
            f"max_num_seqs allows{also}{who(api['large'])}{doubled}; {BATCH_SRC})"
        )
    if gpu.tier == "unless-a100":
        return small, (
            f"assumed: {label} {ctx} default on an A100 ({gpu.cite}, at least {LARGE_GPU_GIB:g} GiB: {large} if this "
            f"GPU is not an A100{who(api['small'])}{doubled}; {BATCH_HINT}; {BATCH_SRC})"
        )
    since = "; the version is not in the bundle: 0.8.0 or later assumed" if version is None else ""
    also = f", {huge} from {HUGE_GPU_GIB:g} GiB" if huge != large else ""
    return small, (
        f"assumed: {label} {ctx} default on a GPU below {LARGE_GPU_GIB:g} GiB or an A100 (the bundle shows neither "
        f"the GPU nor its memory; {large} on a GPU of >= {LARGE_GPU_GIB:g} GiB other than an A100{also}"
        f"{who(api['small'])}{since}{doubled}; {BATCH_HINT}; {BATCH_SRC})"
    )


def _batch_default_on_this_gpu(
    out: pl.DataFrame, stats: pl.DataFrame | None, server: bool, run_ids: set[int]
) -> pl.DataFrame:
    """A ``default`` row of max_num_batched_tokens for a vLLM V1 server whose runs do not all state it
    (:func:`batch_default`, on the GPU :func:`_gpu_shown` finds, the same evidence as max_num_seqs'). V0's
    default follows chunked prefill and max_model_len: the what-if's (replay_budget), no row here."""
    mine = out.filter((pl.col(CONFIG_ENGINE) == VLLM) & (pl.col("status") != "default"))
    engine = _last(mine, "engine")
    if engine is None or str(engine["value"]) != "V1":
        return out
    if "max_num_batched_tokens" in _stated_in_every_run(mine.drop(CONFIG_ENGINE), run_ids):
        return out
    ver = _last(mine, "vllm_version")
    floor = None if ver else _last(mine, VERSION_FLOOR_KEY)
    vt = _version_tuple(str((ver or floor or {}).get("value"))) if ver or floor else None
    label = f"vLLM {ver['value']}'s" if ver else "vLLM's"
    mode_row = _last(mine, "performance_mode")
    mode = 2 if mode_row is not None and str(mode_row["value"]) == "throughput" else 1
    value, note = batch_default(_gpu_shown(mine, stats, 256 * mode), server, vt, label, mode, _world_size(mine))
    row = {k: None for k in out.columns} | {
        "key": "max_num_batched_tokens",
        "value": str(value),
        "status": "default",
        "note": note,
        CONFIG_ENGINE: VLLM,
    }
    return pl.concat([out, pl.DataFrame([row], schema=out.schema)], how="vertical")


def _is_v1(mine: pl.DataFrame, version: tuple[int, ...]) -> bool:
    """The server's engine is V1: its engine row (seen or derived), else its version (0.11+ has only V1)."""
    engine = _last(mine, "engine")
    return str(engine["value"]) == "V1" if engine else version >= (0, 11, 0)


def _small_tier(gpu_name: str) -> bool:
    """A GPU vLLM keeps on the small defaults whatever its memory: an A100 (PR #17885), a GB10 (DGX Spark,
    compute capability 12.1: 0.34's ``is_gb10``)."""
    n = gpu_name.lower()
    return "a100" in n or "gb10" in n.replace(" ", "")


def _float(v: Any) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


DP_SUM_KEY = "num_gpu_blocks_all_engines"
DP_SUM_NOTE = (
    "the API server's sum over its {dp} data-parallel engines, not one engine's pool (vllm/v1/engine/core_client.py "
    "0.32-0.34: 'Sum num_gpu_blocks from all engines in DP case')"
)


def _data_parallel_sum(seen: pl.DataFrame, cfg: pl.DataFrame) -> pl.DataFrame:
    """With data parallel, the ``num_gpu_blocks`` the API server reports (``... num_gpu_blocks is: N``,
    /metrics ``cache_config_info``) is the sum of its engines' pools: such a row becomes
    ``num_gpu_blocks_all_engines`` where its run (or, for /metrics, the bundle) states
    ``data_parallel_size`` > 1, so no engine's pool is taken for N (each engine's own lines, ``GPU KV
    cache size: N tokens`` of its EngineCore_DPk, give its pool)."""
    dp = seen.filter((pl.col("key") == "data_parallel_size") & pl.col("value").str.contains(r"^\d+$"))
    dp = dp.filter(pl.col("value").cast(pl.Int64) > 1)
    if dp.height == 0:
        return seen
    runs_dp = {r: v for r, v in dp.select("run", "value").iter_rows()}
    any_dp = dp.get_column("value").max()
    api_lines = cfg.filter(pl.col("kind") == "cfg_num_gpu_blocks").select(
        "source", pl.col("n").alias("line"), pl.lit(True).alias("_api")
    )
    s = seen.join(api_lines, on=["source", "line"], how="left", nulls_equal=False)
    label = pl.col("note").fill_null("").str.starts_with("label of vllm:cache_config_info")
    of_run = pl.col("run").replace_strict(runs_dp, default=None, return_dtype=pl.String)
    dp_here = pl.when(label).then(pl.lit(any_dp)).when(pl.col("_api").fill_null(False)).then(of_run)
    hit = (pl.col("key") == "num_gpu_blocks") & dp_here.is_not_null()
    return s.with_columns(
        key=pl.when(hit).then(pl.lit(DP_SUM_KEY)).otherwise(pl.col("key")),
        note=pl.when(hit)
        .then(pl.lit(DP_SUM_NOTE.split("{dp}")[0]) + dp_here + pl.lit(DP_SUM_NOTE.split("{dp}")[1]))
        .otherwise(pl.col("note")),
    ).drop("_api")


BACKEND_BLOCK_SIZE_NOTE = (
    "the block size vLLM's attention backend(s) set (vllm/platforms/interface.py update_block_size_for_backend, "
    "logged when --block-size is not given)"
)


def _backend_block_size(seen: pl.DataFrame, cfg: pl.DataFrame) -> pl.DataFrame:
    """``Setting kv cache block size to N for X backend(s).`` (``cfg_block_size``) is the block size in
    force in its server run, over a ``block_size`` of the run's args or engine config line.

    vLLM 0.32-0.34 (vllm/platforms/interface.py ``update_block_size_for_backend``) logs the line only
    when the user did not set --block-size (``CacheConfig.user_specified_block_size``), after the args
    are parsed, and then sets ``cache_config.block_size`` to N: it reports the size the engine used.
    A run whose log shows both (two servers' lines in one file, lines out of order) has the line as the
    stronger evidence: an args/engine-line ``block_size`` of the same run at or after it is dropped, so
    "the last value" is the line's whatever the order; earlier ones stay (the line overrides them in
    time). Values of another run, and of other sources (a /metrics ``cache_config_info``), are left."""
    if cfg.height == 0 or "cfg_block_size" not in set(cfg.get_column("kind").unique().to_list()):
        return seen
    kinds = cfg.select("source", pl.col("n").alias("line"), pl.col("kind").alias("_kind")).unique(["source", "line"])
    s = seen.with_row_index("_o").join(kinds, on=["source", "line"], how="left").sort("_o")
    backend = (pl.col("key") == "block_size") & (pl.col("_kind") == "cfg_block_size")
    first = pl.col("time").filter(backend).min().over("run")  # the run's first such line (null run: one group)
    weaker = (
        (pl.col("key") == "block_size") & pl.col("_kind").is_in(["cfg_args", "cfg_engine"]) & (pl.col("time") >= first)
    ).fill_null(False)
    return (
        s.filter(~weaker)
        .with_columns(
            note=pl.when(backend.fill_null(False) & pl.col("note").is_null())
            .then(pl.lit(BACKEND_BLOCK_SIZE_NOTE))
            .otherwise(pl.col("note"))
        )
        .select(seen.columns)
    )


def _top_level(text: str | None) -> str | None:
    """A config line with what nested objects hold blanked: the values of ``kv_transfer_config``'s
    ``kv_connector_extra_config`` (``'block_size': 64``, the CPU offload's chunk), a
    ``speculative_config``'s draft ``max_model_len``, a ``compilation_config``'s sizes are not the
    server's settings. Text inside a bracket opened below the line's top level (its args dict or
    Namespace, or the engine line's ``k=v`` list) becomes spaces; quoted text is not read for
    brackets. A line that is none of these is returned as is. Config lines are few (one per start):
    plain Python."""
    if text is None:
        return None
    found = next(((m, top, text.find(m)) for m, top in _TOP_LEVEL_STARTS if m in text), None)
    if found is None:
        return text
    marker, top, at = found
    start = at + len(marker)
    out = list(text)
    depth, quote, esc = (1 if marker.endswith("(") else 0), "", False
    for i in range(start, len(text)):
        c = text[i]
        if quote:
            if depth > top:
                out[i] = " "
            if esc:
                esc = False
            elif c == "\\":
                esc = True
            elif c == quote:
                quote = ""
            continue
        if c in "'\"":
            quote = c
        elif c in "{[(":
            depth += 1
            if depth - 1 > top:
                out[i] = " "
            continue
        elif c in "}])":
            depth -= 1
            if depth > top:
                out[i] = " "
            continue
        if depth > top:
            out[i] = " "
    return "".join(out)


def _extracted(cfg: pl.DataFrame) -> pl.DataFrame:
    """The values the EXTRACTORS find in config lines (``kind``, ``text``, ``time``, ``source``,
    ``n``, ``run``): one row per extractor and line it matched, in extractor order, lines in order
    within each. Every extractor runs in one query (a value column each, on its kind's rows): a
    query per extractor cost ~0.3 ms each, 62 of them."""
    kinds = set(cfg.get_column("kind").unique().to_list())
    mine = [(j, k, key, rx) for j, (k, key, rx) in enumerate(EXTRACTORS) if k in kinds]
    nested = ("cfg_args", "cfg_engine")
    flat = pl.Series(
        "_flat",
        [
            _top_level(x) if k in nested else x
            for k, x in zip(cfg.get_column("kind"), cfg.get_column("text"), strict=True)
        ],
        dtype=pl.String,
    )
    wide = (
        cfg.with_columns(flat)
        .with_row_index("_o")
        .select(
            "_o",
            "time",
            "source",
            pl.col("n").alias("line"),
            "run",
            *[
                pl.when(pl.col("kind") == k)
                .then(pl.col("text" if key in NESTED_VALUE_KEYS else "_flat").str.extract(rx, 1))
                .alias(f"_x{j}")
                for j, k, key, rx in mine
            ],
        )
    )
    keys = pl.DataFrame(
        {"_x": [f"_x{j}" for j, *_ in mine], "key": [key for _, _, key, _ in mine], "_e": list(range(len(mine)))},
        schema={"_x": pl.String, "key": pl.String, "_e": pl.UInt32},
    )
    return (
        wide.unpivot(
            on=keys.get_column("_x").to_list(),
            index=["_o", "time", "source", "line", "run"],
            variable_name="_x",
            value_name="value",
        )
        .filter(pl.col("value").is_not_null())
        .join(keys, on="_x", how="left")
        .sort("_e", "_o")
        .select(
            "key",
            pl.col("value").cast(pl.String),
            pl.lit("seen").alias("status"),
            "time",
            "source",
            "line",
            pl.lit(None, pl.String).alias("note"),
            "run",
        )
    )


def _stated_in_every_run(rows: pl.DataFrame, run_ids: set[int]) -> set[str]:
    """Keys with a value for every server run: one of the bundle's (no run), or one in each run."""
    out = set()
    for key, runs in rows.group_by("key").agg(pl.col("run")).iter_rows():
        if None in runs or set(runs) >= run_ids:
            out.add(key)
    return out


# The scheduler settings the what-if replays, by version (read from the released wheels'
# vllm/config/scheduler.py SchedulerConfig and vllm/engine/arg_utils.py; 0.19 and 0.24 from the facts
# page): the first version with each, its default there, and what a version without it does. Kept
# out of VERSION_DEFAULTS: those are rows of every analysis's configuration frame, these are the
# what-if's only. The replay's names (whatif.workload.SETTINGS): ``reserve_full_isl`` is vLLM's
# ``scheduler_reserve_full_isl``.
_SCHED = "vllm/config/scheduler.py SchedulerConfig"
SCHEDULER_SETTINGS = (
    ReplaySetting(
        "reserve_full_isl",
        (0, 19, 0),
        True,
        False,
        "--scheduler-reserve-full-isl",
        f"{_SCHED}.scheduler_reserve_full_isl",
    ),
    ReplaySetting("watermark", (0, 24, 0), 0.0, 0.0, "--watermark", f"{_SCHED}.watermark"),
    ReplaySetting(
        "cache_aware_admission_window",
        (0, 34, 0),
        0,
        0,
        "--cache-aware-admission-window",
        f"{_SCHED}.cache_aware_admission_window (0: admission in arrival order)",
    ),
    ReplaySetting(
        "cache_aware_admission_threshold",
        (0, 34, 0),
        0.5,
        0.5,
        "--cache-aware-admission-threshold",
        f"{_SCHED}.cache_aware_admission_threshold",
    ),
    ReplaySetting(
        "max_num_inflight_kv_loads",
        (0, 34, 0),
        None,
        None,
        "--max-num-inflight-kv-loads",
        f"{_SCHED}.max_num_inflight_kv_loads (None: no cap)",
    ),
)
# The version the what-if's model reads as its reference (docs/whatif.md), replayed when the bundle
# does not name its version.
REFERENCE_VERSION = "0.32.0"
# From 0.33 (vllm/v1/core/sched/scheduler.py, the running loop of schedule()): under the priority
# policy a request that preempted itself (the lowest-priority running one) no longer stops the
# running loop: "The requests after it have higher priority and may still fit". 0.32: ``break``.
SELF_PREEMPT_CONTINUES = (0, 33, 0)
# From 0.34 (the same function): long_prefill_token_threshold applies only with chunked prefill on
# (``if self.scheduler_config.enable_chunked_prefill and num_eligible_reqs > 1``); 0.32-0.33 apply it
# without chunked prefill too.
LONG_PREFILL_NEEDS_CHUNKED = (0, 34, 0)
# argparse's words for an option a version does not have (vllm serve on 0.32.0 and 0.33.0, checked)
UNKNOWN_OPTION = "vllm serve: error: unrecognized arguments: {arg}"


# The newest version whose scheduler the what-if models (its settings, defaults and behaviours, read from the
# released wheel): a newer version is replayed as this one's, and said (SchedulerVersion.caveat).
NEWEST_MODELLED = NEWEST_VLLM_READ


def scheduler_version(version: str | None, where: str) -> SchedulerVersion:
    """What the scheduler of ``version`` has (its replay settings, their defaults, its behaviours);
    None: the reference version is replayed. A version of a release newer than ``NEWEST_MODELLED``
    (major.minor) is replayed as that one's, and its ``caveat`` says so."""
    vt = _version_tuple(version) if version else None
    replayed = version if vt is not None else REFERENCE_VERSION
    caveat = None
    if vt is not None and vt[:2] > NEWEST_MODELLED[:2]:
        replayed, vt = version_text(NEWEST_MODELLED), NEWEST_MODELLED
        caveat = (
            f"vLLM {version} ({where}) is newer than the newest version modelled ({replayed}): replayed as vLLM "
            f"{replayed}'s scheduler (its settings, defaults and behaviours; --engine vllm runs the scheduler of its "
            f"venv); what changed after {replayed} is not in the model"
        )
    rt = vt or _version_tuple(REFERENCE_VERSION) or ()
    if caveat is not None:
        how = f"vLLM {replayed}'s scheduler (vLLM {version}, {where}, is newer than the newest version modelled)"
    elif vt is not None:
        how = f"vLLM {version} ({where})"
    else:
        how = f"vLLM {REFERENCE_VERSION}'s scheduler (the version is not in the bundle: {where})"
    return SchedulerVersion(
        display="vLLM",
        version=version if vt is not None else None,
        replayed=replayed.lstrip("v"),
        how=how,
        settings=SCHEDULER_SETTINGS,
        self_preempt_continues=rt >= SELF_PREEMPT_CONTINUES,
        long_prefill_needs_chunked=rt >= LONG_PREFILL_NEEDS_CHUNKED,
        unknown_words=UNKNOWN_OPTION,
        caveat=caveat,
    )


def bundle_version(config: pl.DataFrame) -> tuple[str | None, str]:
    """The vLLM version the bundle names (the engine config line, the server version line, the plugin
    records' header), and where; (None, why) without one."""
    row = in_force(config).get("vllm_version")
    if row is None or row.get("status") == "default" or not _version_tuple(str(row["value"])):
        return None, "no version line, no records' header"
    return str(row["value"]).lstrip("v"), f"{row['source']}:{row['line']}" if row.get("source") else str(row["status"])


def prefix_caching(config: pl.DataFrame, frames: Mapping[str, pl.DataFrame]) -> tuple[bool | None, str]:
    """Whether prefix caching was on, and the evidence: ``enable_prefix_caching`` seen (the engine
    config line prints the value in force), else vLLM's block hashes on the plugin's arrival records
    (vLLM hashes a request's blocks only with prefix caching on or a KV connector: vllm/v1/engine/core.py
    ``request_block_hasher``), else the default of the engine generation: V1 on (vllm/engine/arg_utils.py
    ``_set_default_args``: None -> ``model_config.is_prefix_caching_supported``, true for generative
    models), V0 off (``EngineArgs.enable_prefix_caching = False``); (None, why) when nothing says."""
    cfg = in_force(config)
    row = cfg.get("enable_prefix_caching")
    if row is not None and row.get("status") != "default":
        text = str(row["value"]).strip().strip("'\"").lower()
        src = f"{row['source']}:{row['line']}" if row.get("source") else str(row["status"])
        if text in ("true", "false"):
            return text == "true", f"enable_prefix_caching={text.title()} ({row['status']}, {src})"
    bt = frames.get("bt_requests")
    if bt is not None and bt.height and "block_hashes" in bt.columns:
        hashed = bt.filter(pl.col("block_hashes").list.len() > 0).head(1)
        if hashed.height:
            r = hashed.row(0, named=True)
            return True, (
                f"vLLM's block hashes on the arrival records ({r['source']}:{r['line']}): vLLM hashes a request's "
                "blocks only with prefix caching on (or a KV connector)"
            )
    gen = cfg.get("engine")
    ver = cfg.get("vllm_version")
    vt = _version_tuple(str(ver["value"])) if ver is not None and ver.get("status") != "default" else None
    family = str(gen["value"]) if gen is not None else ("V1" if vt is not None and vt >= (0, 11, 0) else None)
    if family == "V1":
        return True, (
            "assumed: vLLM V1's default, on for generative models (vllm/engine/arg_utils.py _set_default_args); "
            "the bundle does not print enable_prefix_caching"
        )
    if family == "V0":
        return False, "assumed: vLLM V0's default, off (EngineArgs.enable_prefix_caching)"
    return None, "not in the bundle (no enable_prefix_caching, no engine generation or version)"


def replay_caveats(config: pl.DataFrame) -> list[str]:
    """What the what-if's replay is not of this bundle: a V0 engine's incident is replayed by the model of
    V1's scheduler (the only one modelled), whose preemption and admission differ from V0's."""
    row = in_force(config).get("engine")
    if row is None or str(row.get("value")) != "V0":
        return []
    where = f"{row['source']}:{row['line']}" if row.get("source") else str(row.get("status"))
    return [
        f"the incident ran vLLM's V0 engine ({where}); the replay is of the V1 scheduler "
        "(vllm/v1/core/sched/scheduler.py: it preempts when a KV-block allocation fails and never admits past "
        "max_num_seqs), not of V0's (vllm/core/scheduler.py: _schedule_running preempts when it cannot append a "
        "slot, admission keeps a 1 % watermark of the blocks, SWAP for groups of several sequences), under V0's "
        "token budget where the bundle does not state it: compare the replays with each other, not with the incident"
    ]


# vLLM V0's token budget where the log does not state it (V0: every version before 0.6.4, the default engine until
# 0.8.0, the fallback through 0.10.2), read from vLLM's source (vllm-project/vllm, the 0.7 line: vllm/config.py at
# 0004438, vllm/engine/arg_utils.py at 001999d; 0.8-0.10 the same rules, in EngineArgs._set_default_args_v0 and
# with _DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048):
# - vllm/engine/arg_utils.py EngineArgs.create_engine_config: an unset enable_chunked_prefill is turned on only for
#   a max_model_len over 32768 on a CUDA GPU without a sliding window, speculative decoding, LoRA, prompt adapters
#   or a pooling model (WARNING "Chunked prefill is enabled by default for models with max_model_len > 32K"),
#   else off (SchedulerConfig.enable_chunked_prefill = False);
# - vllm/config.py SchedulerConfig (__post_init__): logs "Chunked prefill is enabled with max_num_batched_tokens=%d."
#   whenever it is on; an unset max_num_batched_tokens is max(max_model_len, 2048) without chunked prefill ("If
#   max_model_len is too short, use 2048 as the default value for higher throughput"), 2048 with it (512 before
#   vllm-project/vllm#10544, 0.6.5).
V0_LONG_CONTEXT = 32768
V0_BATCH_FLOOR = 2048
V0_CHUNKED_BATCH_SINCE, V0_CHUNKED_BATCH, V0_CHUNKED_BATCH_BEFORE = (0, 6, 5), 2048, 512
_V0_SCHED = "vllm/config.py SchedulerConfig"
_V0_ARGS = "vllm/engine/arg_utils.py EngineArgs.create_engine_config"


def replay_budget(
    config: pl.DataFrame, chunked: bool | None, mbt: int | None, mml: int | None, longest: int | None
) -> Budget:
    """enable_chunked_prefill and max_num_batched_tokens for the what-if where the bundle does not state
    them (``chunked``, ``mbt``: None), by the engine the bundle ran: V0's defaults for a V0 log (the
    configuration's ``engine`` V0; rules above), else V1's (on; vLLM's default on the GPU the bundle shows,
    the configuration's ``default`` row: :func:`batch_default`). ``mml``: max_model_len, None when
    the bundle does not state it; ``longest``: the workload's longest request in tokens (prompt +
    output), a floor of max_model_len."""
    gen = in_force(config).get("engine")
    out: list[str] = []
    if gen is None or str(gen.get("value")) != "V0":
        if mbt is None:
            mbt, said = _v1_budget(config)
            # a value the bundle does not settle says so first (BATCH_HINT: the GPU's tier, the version)
            taken = f"{mbt}, assumed" if BATCH_HINT in said else str(mbt)
            said = said.removeprefix("assumed: ")
            if chunked is False and mml is not None and mml > mbt:  # stated off: a prompt must fit one step
                said = (
                    f"max_model_len {mml}: with chunked prefill off vLLM raises its default to it ({_V1_SET_BATCH}: "
                    f"max(max_model_len, {mbt}), {said})"
                )
                taken = str(mml)
                mbt = mml
            out.append(f"max_num_batched_tokens not in the bundle: taken as {taken} ({said})")
        if chunked is None:
            chunked = True
            out.append("enable_chunked_prefill not in the bundle: taken as on (the V1 default)")
        return Budget(chunked, mbt, tuple(out))
    where = f"{gen['source']}:{gen['line']}" if gen.get("source") else str(gen.get("note") or gen.get("status"))
    if chunked is None:
        chunked = False
        if mml is None:
            tail = "the bundle has no such line, and no max_model_len"
        elif mml > V0_LONG_CONTEXT:
            tail = (
                f"the bundle has no such line though max_model_len {mml} is over 32K: one of V0's exceptions held "
                "(a sliding window, speculative decoding, LoRA...)"
            )
        else:
            tail = f"the bundle has no such line, and max_model_len {mml} is not over 32K"
        out.append(
            f"enable_chunked_prefill not in the bundle: taken as off (the V0 default: the incident ran vLLM's V0 "
            f"engine ({where}), which turns it on by itself only for a max_model_len over 32K on a GPU ({_V0_ARGS}) "
            f"and then logs 'Chunked prefill is enabled with max_num_batched_tokens=N' ({_V0_SCHED}); {tail})"
        )
    if mbt is not None:
        return Budget(chunked, mbt, tuple(out))
    if chunked:
        ver = in_force(config).get("vllm_version")
        vt = _version_tuple(str(ver["value"])) if ver is not None and ver.get("status") != "default" else None
        mbt = V0_CHUNKED_BATCH_BEFORE if vt is not None and vt < V0_CHUNKED_BATCH_SINCE else V0_CHUNKED_BATCH
        out.append(
            f"max_num_batched_tokens not in the bundle: taken as {mbt} (the V0 default with chunked prefill"
            + (f" in vLLM {ver['value']}" if vt is not None else "")
            + f" (V0: {where}): {_V0_SCHED}, {V0_CHUNKED_BATCH_BEFORE} before "
            f"{version_text(V0_CHUNKED_BATCH_SINCE)}, {V0_CHUNKED_BATCH} from it)"
        )
    elif mml is not None:
        mbt = max(mml, V0_BATCH_FLOOR)
        out.append(
            f"max_num_batched_tokens not in the bundle: taken as {mbt} (the V0 default without chunked prefill "
            f"(V0: {where}): max(max_model_len {mml}, {V0_BATCH_FLOOR}), {_V0_SCHED})"
        )
    else:
        mbt = max(longest or 0, V0_BATCH_FLOOR)
        floor = (
            f"taken as at least the workload's longest request, {longest} tokens (prompt + output: no request of a "
            "V0 server runs past max_model_len)"
            if longest
            else f"taken as at most {V0_BATCH_FLOOR}"
        )
        out.append(
            f"max_num_batched_tokens not in the bundle: taken as {mbt} (the V0 default without chunked prefill "
            f"(V0: {where}), max(max_model_len, {V0_BATCH_FLOOR}), {_V0_SCHED}; max_model_len is not in the bundle: "
            f"{floor}); --base max_num_batched_tokens=N gives the real one"
        )
    return Budget(chunked, mbt, tuple(out))


_V1_SET_BATCH = "vllm/engine/arg_utils.py _set_default_max_num_seqs_and_batched_tokens_args"


def _v1_budget(config: pl.DataFrame) -> tuple[int, str]:
    """vLLM V1's max_num_batched_tokens where the bundle does not state it: the configuration's ``default``
    row (the GPU's tier, the API server's or the LLM class's: :func:`_batch_default_on_this_gpu`), else (no V1
    engine row: a bundle without vLLM's start-up lines) the API server's on a GPU the bundle does not show."""
    cfg = in_force(config)
    row = cfg.get("max_num_batched_tokens")
    if row is not None and row.get("status") == "default" and str(row["value"]).isdigit():
        return int(str(row["value"])), str(row.get("note") or "")
    ver = cfg.get("vllm_version")
    ver = ver if ver is not None and ver.get("status") != "default" else None
    vt = _version_tuple(str(ver["value"])) if ver else None
    return batch_default(GpuShown(), True, vt, f"vLLM {ver['value']}'s" if ver and vt else "vLLM's")


REPLAY_VERSIONS = ReplayVersions(
    of_bundle=bundle_version, scheduler=scheduler_version, caveats=replay_caveats, budget=replay_budget
)


# vLLM 0.34.0 sizes the KV cache from the memory measured after warmup (the extensible KV cache, its default on
# CUDA and ROCm) unless a setting overrides that measure (vllm/config/vllm.py VllmConfig._resolve_extensible_kv_cache)
EXTENSIBLE_KV_SINCE = (0, 34, 0)
EXTENSIBLE_OFF_BY = ("kv_cache_memory_bytes", "num_gpu_blocks_override", "enable_elastic_ep")
EXTENSIBLE_SRC = "vllm/config/vllm.py 0.34.0 VllmConfig._resolve_extensible_kv_cache"
GMU_RESOLVED_SRC = (
    "vllm/config/cache.py 0.34.0 CacheConfig.resolved_gpu_memory_utilization: unset, 1.0 with the extensible KV "
    "cache, 0.92 without it"
)


def _where(row: dict) -> str:
    return f" ({row['source']}:{row['line']})" if row.get("source") else ""


def extensible_kv(seen: pl.DataFrame, version: tuple[int, ...] | None) -> tuple[bool, str] | None:
    """Whether vLLM 0.34's extensible KV cache was on, and why: the setting or a line saying it
    (``enable_extensible_kv_cache`` in the args or a /metrics cache_config_info label, vLLM's
    "Disabling the extensible KV cache" / "Extensible KV cache off" lines), else on a 0.34+ server
    a setting that turns it off (``kv_cache_memory_bytes``, ``num_gpu_blocks_override``,
    ``enable_elastic_ep``), else its default (on). None: not a 0.34+ server as far as the rows show."""
    row = _last(seen.filter(pl.col("status") != "default"), "enable_extensible_kv_cache")
    if row is not None:
        on = str(row["value"]).strip().lower() == "true"
        return on, f"enable_extensible_kv_cache {row['value']}{_where(row)}"
    if version is None or version < EXTENSIBLE_KV_SINCE:
        return None
    for key in EXTENSIBLE_OFF_BY:
        row = _last(seen.filter(pl.col("status") != "default"), key)
        if row is not None and str(row["value"]).strip().lower() not in ("false", "none", ""):
            return False, f"{key} {row['value']}{_where(row)} turns it off ({EXTENSIBLE_SRC})"
    return True, f"vLLM {version_text(version)}'s default on CUDA and ROCm ({EXTENSIBLE_SRC})"


def version_defaults(seen: pl.DataFrame) -> list[tuple[str, str, str]]:
    """vLLM's defaults for the version the configuration rows seen name (the engine's ``defaults``),
    with what the rows say of how the defaults resolve: 0.34's gpu_memory_utilization under the
    extensible KV cache or without it (:func:`extensible_kv`), ``performance_mode throughput``
    doubling max_num_seqs (vllm/engine/arg_utils.py _set_default_args, 0.32-0.34)."""
    ver = _last(seen, "vllm_version")
    floor = None if ver else _last(seen, VERSION_FLOOR_KEY)
    if floor is not None:
        rows = default_rows(None, str(floor["value"]), f"{floor['note']}{_where(floor)}")
    else:
        rows = default_rows(ver["value"] if ver else None)
    vt = _version_tuple(str(ver["value"])) if ver else None
    ext = extensible_kv(seen, vt)
    mode = _last(seen.filter(pl.col("status") != "default"), "performance_mode")
    out = []
    for key, value, note in rows:
        if key == "gpu_memory_utilization" and ext is not None:
            on, why = ext
            value = "1.0" if on else "0.92"
            label = f"vLLM {ver['value']}" if ver else "vLLM's"
            note = (
                f"assumed: {label} default with the extensible KV cache {'on' if on else 'off'} ({why}; "
                f"{GMU_RESOLVED_SRC})"
            )
        elif key == "max_num_seqs" and mode is not None and str(mode["value"]) == "throughput" and value.isdigit():
            value = str(2 * int(value))
            note = (
                f"{note}; doubled: performance_mode throughput{_where(mode)} (vllm/engine/arg_utils.py "
                "_set_default_args: 'If throughput mode is set, double max_num_batched_tokens and max_num_seqs')"
            )
        out.append((key, value, note))
    if ext is not None:  # shown where no row states it (parse adds defaults for keys a run leaves unsaid)
        out.append(("enable_extensible_kv_cache", str(ext[0]), f"assumed: {ext[1]}"))
    return out


def _last(seen: pl.DataFrame, key: str):
    sub = seen.filter(pl.col("key") == key)
    if sub.height == 0:
        return None
    return sub.row(sub.height - 1, named=True)


# Lines only one engine generation writes (vllm-facts.md sections 1b, 2a, 4): the process names
# of V1's engine core and workers, V1's "KV cache size: N tokens" line; V0's worker processes,
# its preemption warning and its "# GPU blocks: N, # CPU blocks: M" line.
V1_PROC_RE = r"^(?:EngineCore|DPEngineCoreActor|VllmWorker rank=|VllmWorker(?: (?:PP\d+_)?TP\d+)? pid=|Worker(?:_[A-Z]+\d+)* pid=)"
V0_PROC_RE = r"^VllmWorkerProcess pid="


def _generation_marks(records: pl.DataFrame | None) -> dict[str, dict | None]:
    """The first line of the records that only a V1 (or only a V0) engine writes, per generation."""
    out: dict[str, dict | None] = {"V1": None, "V0": None}
    if records is None or records.height == 0 or "source" not in records.columns:
        return out
    proc = pl.col("proc").fill_null("")
    text = pl.col("text").fill_null("")
    marks = {
        "V1": (pl.col("kind") == "cfg_kv_size") | proc.str.contains(V1_PROC_RE),
        "V0": (pl.col("kind") == "v0_preempt")
        | proc.str.contains(V0_PROC_RE)
        | ((pl.col("kind") == "cfg_blocks") & text.str.contains("# CPU blocks", literal=True)),
    }
    for gen, cond in marks.items():
        hit = records.filter(cond).head(1)
        if hit.height:
            r = hit.row(0, named=True)
            what = (
                f"process {r['proc']}"
                if r.get("proc") and re_match(V1_PROC_RE if gen == "V1" else V0_PROC_RE, r["proc"])
                else {"cfg_kv_size": "the 'KV cache size: N tokens' line", "v0_preempt": "a V0 preemption warning"}.get(
                    r["kind"], "the '# GPU blocks: N, # CPU blocks: M' line"
                )
            )
            out[gen] = {"time": r["time"], "source": r["source"], "line": r["n"], "what": what}
    return out


def re_match(pattern: str, text: str) -> bool:
    import re

    return re.search(pattern, text) is not None


def _derive(seen: pl.DataFrame, stats: pl.DataFrame | None, records: pl.DataFrame | None = None) -> pl.DataFrame:
    rows = []

    def add(key: str, value: str, basis: list[dict | None], note: str) -> None:
        src = next((b for b in basis if b is not None), None)
        rows.append(
            {
                "key": key,
                "value": value,
                "status": "derived",
                "time": src["time"] if src else None,
                "source": src["source"] if src else None,
                "line": src["line"] if src else None,
                "note": note,
                "run": src.get("run") if src else None,
            }
        )

    tokens, blocks = _last(seen, "kv_cache_tokens"), _last(seen, "num_gpu_blocks")
    if _last(seen, "block_size") is None and tokens and blocks:
        try:
            bs = int(tokens["value"]) / int(blocks["value"])
            if bs.is_integer() and bs > 0:
                add("block_size", str(int(bs)), [tokens, blocks], "kv_cache_tokens / num_gpu_blocks")
        except (ValueError, ZeroDivisionError, OverflowError):  # OverflowError: a 300-digit value
            pass
    conc, mml = _last(seen, "max_concurrency"), _last(seen, "max_model_len")
    if _last(seen, "block_size") is None and not rows and conc and mml and blocks and tokens is None:
        try:
            raw = float(conc["value"]) * int(mml["value"]) / int(blocks["value"])
            for cand in (8, 16, 32, 64, 128, 256):
                if abs(raw - cand) / cand < 0.02:
                    add(
                        "block_size",
                        str(cand),
                        [conc, blocks],
                        f"max_concurrency x max_model_len / num_gpu_blocks = {raw:.2f}, nearest block size",
                    )
                    break
        except (ValueError, ZeroDivisionError, OverflowError):  # OverflowError: a 300-digit value
            pass
    if tokens is None and blocks:
        bs = _last(seen, "block_size")
        if bs:
            try:
                add(
                    "kv_cache_tokens",
                    str(int(blocks["value"]) * int(bs["value"])),
                    [blocks, bs],
                    "num_gpu_blocks x block_size",
                )
            except ValueError:
                pass
    if (
        _last(seen, "scheduling_policy") is None
        and records is not None
        and records.height
        and "kind" in records.columns
    ):
        # a line naming V0's _schedule_priority_preemption (trouble.py): that path runs only under priority
        prio = records.filter(pl.col("kind") == "v0_priority_path").head(1)
        if prio.height:
            r = prio.row(0, named=True)
            add(
                "scheduling_policy",
                "priority",
                [{"time": r["time"], "source": r["source"], "line": r["n"]}],
                "a line names _schedule_priority_preemption, which vLLM V0 runs only under --scheduling-policy priority",
            )
    if _last(seen, "engine") is None:
        fam = None
        if stats is not None and stats.height:
            fams = set(stats.get_column("family").to_list())
            fam = "V0" if fams == {"v0"} else "V1" if fams and fams <= V1_STATS_FAMILIES else None
            if fam:
                first = stats.row(0, named=True)
                add(
                    "engine",
                    fam,
                    [{"time": first["time"], "source": first["source"], "line": first["line"]}],
                    "from the stats line format (metrics.py Pending/Swapped = V0, loggers.py Waiting = V1, "
                    "the Rust frontend's log_stats.rs = V1)"
                    if RUST_FAMILY in fams
                    else "from the stats line format (metrics.py Pending/Swapped = V0, loggers.py Waiting = V1)",
                )
        if fam is None:
            ver = _last(seen, "vllm_version")
            if ver:
                v = _version_tuple(ver["value"])
                if v and v >= (0, 11, 0):
                    add("engine", "V1", [ver], "vLLM >= 0.11 has only the V1 engine")
                    fam = "V1"
                elif v and v < (0, 6, 4):
                    add("engine", "V0", [ver], "vLLM before 0.6.4 has only the V0 engine")
                    fam = "V0"
        if fam is None:
            marks = _generation_marks(records)
            if marks["V1"] and not marks["V0"]:
                add("engine", "V1", [marks["V1"]], f"{marks['V1']['what']}: written only by vLLM's V1 engine")
            elif marks["V0"] and not marks["V1"]:
                add("engine", "V0", [marks["V0"]], f"{marks['V0']['what']}: written only by vLLM's V0 engine")
    if _last(seen, "vllm_version") is None:
        floors = []  # (version, where, why): the highest bounds the version
        rust = stats.filter(pl.col("family") == RUST_FAMILY).head(1) if stats is not None and stats.height else None
        if rust is not None and rust.height:
            r = rust.row(0, named=True)
            floors.append(
                (
                    RUST_FRONTEND_SINCE,
                    {"time": r["time"], "source": r["source"], "line": r["line"]},
                    f"the Rust frontend's stats line (VLLM_USE_RUST_FRONTEND=1, vllm-rs log_stats.rs), shipped from "
                    f"vLLM {RUST_FRONTEND_SINCE}",
                )
            )
        if records is not None and records.height and {"kind", "text"} <= set(records.columns):
            one = records.filter(
                (pl.col("kind") == "cfg_kv_size") & pl.col("text").str.contains(KV_SIZE_ONE_LINE_RE)
            ).head(1)
            if one.height:
                r = one.row(0, named=True)
                floors.append(
                    (
                        KV_SIZE_ONE_LINE_SINCE,
                        {"time": r.get("time"), "source": r.get("source"), "line": r.get("n")},
                        "the KV cache size and the maximum concurrency on one line (vllm/v1/core/kv_cache_utils.py: "
                        f"two lines before {KV_SIZE_ONE_LINE_SINCE})",
                    )
                )
        if floors:
            v, where, why = max(floors, key=lambda f: _version_tuple(f[0]) or ())
            add(VERSION_FLOOR_KEY, v, [where], why)
    schema = polars_schema(CONFIG_SCHEMA)
    return pl.DataFrame(rows, schema=schema)


def smallest_kv_tokens(config: pl.DataFrame) -> float | None:
    """The smallest KV cache size in tokens that the config frame holds (seen or derived): the
    request rows with longer prompts are kept for the never-fits finding (vllm/requests.py)."""
    config = config_of(config, VLLM)  # vLLM's own pool (another engine's kv_cache_tokens is its own)
    if config.height == 0:
        return None
    vals = []
    for v in config.filter((pl.col("key") == "kv_cache_tokens") & (pl.col("status") != "default")).get_column("value"):
        try:
            vals.append(float(str(v).replace(",", "").rstrip("x")))
        except (TypeError, ValueError):
            continue
    return min(vals) if vals else None


# ---------------------------------------------------------------------------------- start-up checks

# Where vLLM 0.32 refuses to start, read from the released wheel's source (each message quotes it):
KV_CHECK_WHERE = (
    "vllm/v1/core/kv_cache_utils.py get_kv_cache_configs -> _check_enough_kv_cache_memory "
    "(FullAttentionSpec.max_memory_usage_bytes = cdiv(max_model_len, block_size) pages, less the null block)"
)
SCHED_CHECK_WHERE = "vllm/config/scheduler.py SchedulerConfig.verify_max_model_len"


def startup_refusals(
    *,
    num_gpu_blocks: int,
    block_size: int,
    max_model_len: int,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    enable_chunked_prefill: bool,
    long_prefill_token_threshold: int = 0,
    max_model_len_how: str = "max_model_len",
) -> list[str]:
    """The reasons vLLM 0.32 would refuse to start with this configuration (empty: it starts).

    The scheduler checks first (``SchedulerConfig.verify_max_model_len``, run when the engine
    config is created), then the KV pool check of the engine core: the pool, less the null block
    the block pool holds back, must hold one request of ``max_model_len`` tokens
    (``cdiv(max_model_len, block_size)`` blocks); else vLLM raises "To serve at least one request
    with the model's max seq len ... the estimated maximum model length is N", N the longest
    length that fits (``(num_gpu_blocks - 1) x block_size``), found by vLLM's binary search.
    ``max_model_len_how`` says where the length came from (it is quoted in the reason).
    """
    out: list[str] = []
    if max_num_batched_tokens < max_model_len and not enable_chunked_prefill:
        out.append(
            f"max_num_batched_tokens ({max_num_batched_tokens}) is smaller than max_model_len ({max_model_len}) "
            f"without chunked prefill ({SCHED_CHECK_WHERE})"
        )
    if max_num_batched_tokens < max_num_seqs:
        out.append(
            f"max_num_batched_tokens ({max_num_batched_tokens}) must be greater than or equal to max_num_seqs "
            f"({max_num_seqs}) ({SCHED_CHECK_WHERE})"
        )
    if long_prefill_token_threshold > max_model_len:
        out.append(
            f"long_prefill_token_threshold ({long_prefill_token_threshold}) cannot be greater than the "
            f"max_model_len ({max_model_len}) ({SCHED_CHECK_WHERE})"
        )
    usable = num_gpu_blocks - 1
    if usable <= 0:
        out.append(
            f"no available memory for the cache blocks: {num_gpu_blocks} block(s), less the null block ({KV_CHECK_WHERE})"
        )
        return out
    needed = -(-max_model_len // block_size)
    if needed > usable:
        accepted = usable * block_size
        out.append(
            f"to serve one request of {max_model_len_how} {max_model_len} tokens the KV cache needs {needed} blocks of "
            f"{block_size} tokens, the pool has {usable} ({num_gpu_blocks} less the null block); the estimated maximum "
            f"model length is {accepted}: the largest max_model_len it would accept ({KV_CHECK_WHERE})"
        )
    return out
