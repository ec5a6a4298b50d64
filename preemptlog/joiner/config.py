"""The configuration in force at each event (seen, derived, or preemptlog's default)."""

from __future__ import annotations

import polars as pl

from .common import asof, src_expr
from .declare import Evidence, cited

EVIDENCE = [
    Evidence(
        "cfg_block_size",
        "Int64",
        "vllm-log, blocktable, prometheus (config)",
        "bundle",
        "block_size in force at t (else for the bundle, else preemptlog's default)",
        status=True,
    ),
    Evidence(
        "cfg_max_num_seqs",
        "Int64",
        "vllm-log, blocktable, prometheus (config)",
        "bundle",
        "max_num_seqs, as above",
        status=True,
    ),
    Evidence(
        "cfg_max_num_batched_tokens",
        "Int64",
        "vllm-log, blocktable, prometheus (config)",
        "bundle",
        "max_num_batched_tokens, as above",
        status=True,
    ),
    Evidence(
        "cfg_max_model_len",
        "Int64",
        "vllm-log, blocktable, prometheus (config)",
        "bundle",
        "max_model_len, as above",
        status=True,
    ),
    Evidence(
        "cfg_num_gpu_blocks",
        "Int64",
        "vllm-log, blocktable, prometheus (config)",
        "bundle",
        "num_gpu_blocks, as above",
        status=True,
    ),
    Evidence(
        "cfg_gpu_memory_utilization",
        "Float64",
        "vllm-log, blocktable, prometheus (config)",
        "bundle",
        "gpu_memory_utilization, as above",
        status=True,
    ),
    Evidence(
        "cfg_enable_prefix_caching",
        "Boolean",
        "vllm-log, blocktable, prometheus (config)",
        "bundle",
        "prefix caching on, as above",
        status=True,
    ),
    Evidence(
        "cfg_enable_chunked_prefill",
        "Boolean",
        "vllm-log, blocktable, prometheus (config)",
        "bundle",
        "chunked prefill on, as above",
        status=True,
    ),
    Evidence(
        "cfg_speculative",
        "Boolean",
        "vllm-log, blocktable, prometheus (config)",
        "bundle",
        "a speculative model configured, as above",
        status=True,
    ),
    Evidence(
        "cfg_scheduling_policy",
        "String",
        "vllm-log, blocktable, prometheus (config)",
        "bundle",
        "scheduling policy (fcfs / priority), as above",
        status=True,
    ),
]

# config column -> config keys it reads
CONFIG_KEYS = {
    "cfg_block_size": "block_size",
    "cfg_max_num_seqs": "max_num_seqs",
    "cfg_max_num_batched_tokens": "max_num_batched_tokens",
    "cfg_max_model_len": "max_model_len",
    "cfg_num_gpu_blocks": "num_gpu_blocks",
    "cfg_gpu_memory_utilization": "gpu_memory_utilization",
    "cfg_enable_prefix_caching": "enable_prefix_caching",
    "cfg_enable_chunked_prefill": "enable_chunked_prefill",
    "cfg_speculative": "speculative",
    "cfg_scheduling_policy": "scheduling_policy",
}


def _config_rows(config: pl.DataFrame) -> pl.DataFrame:
    """Config rows for the evidence keys, with a derived boolean ``speculative`` key."""
    cfg = config
    spec_keys = ["speculative_config", "speculative_model", "num_speculative_tokens"]
    val = pl.col("value").str.strip_chars("'\" ")
    spec = cfg.filter(pl.col("key").is_in(spec_keys)).with_columns(
        value=pl.when(pl.col("key") == "num_speculative_tokens")
        .then((val.cast(pl.Int64, strict=False).fill_null(0) > 0).cast(pl.String))
        .otherwise((~val.str.to_lowercase().is_in(["none", "null", "", "{}", "false"])).cast(pl.String)),
        key=pl.lit("speculative"),
    )
    return pl.concat([cfg, spec], how="vertical")


def _cast_cfg(expr: pl.Expr, dtype: str) -> pl.Expr:
    if dtype == "Boolean":
        low = expr.str.strip_chars("'\" ").str.to_lowercase()
        return (
            pl.when(low.is_in(["true", "1", "yes", "on"]))
            .then(True)
            .when(low.is_in(["false", "0", "no", "off", "none"]))
            .then(False)
        )
    if dtype == "String":
        return expr.str.strip_chars("'\" ").str.to_lowercase()
    if dtype == "Int64":
        return expr.str.replace_all(",", "", literal=True).cast(pl.Float64, strict=False).cast(pl.Int64, strict=False)
    return expr.cast(pl.Float64, strict=False)


def section_config(ev: pl.DataFrame, config: pl.DataFrame | None) -> pl.DataFrame | None:
    from ..vllm.config import in_force

    if config is None or config.height == 0:
        return None
    cfg = _config_rows(config).with_columns(_csrc=pl.when(pl.col("source").is_not_null()).then(src_expr()))
    forced = in_force(cfg)
    out = ev.select("_i")
    dtypes = {e.name: e.dtype for e in EVIDENCE}
    for col, key in CONFIG_KEYS.items():
        rows = cfg.filter((pl.col("key") == key) & (pl.col("status") != "default") & pl.col("time").is_not_null())
        fb = forced.get(key)
        fb_val = fb["value"] if fb else None
        fb_src = f"{fb['source']}:{fb['line']}" if fb and fb.get("source") else None
        fb_status = fb["status"] if fb else None
        if rows.height:
            j = asof(
                ev.select("_i", "_t"), rows.select("time", "value", "status", "_csrc"), left_on="_t", right_on="time"
            )
            j = j.select(
                "_i",
                pl.when(pl.col("time").is_not_null())
                .then(pl.col("value"))
                .otherwise(pl.lit(fb_val, pl.String))
                .alias("_v"),
                pl.when(pl.col("time").is_not_null())
                .then(pl.col("_csrc"))
                .otherwise(pl.lit(fb_src, pl.String))
                .alias("_s"),
                pl.when(pl.col("time").is_not_null())
                .then(pl.col("status"))
                .otherwise(pl.lit(fb_status, pl.String))
                .alias("_st"),
            )
        else:
            j = ev.select(
                "_i",
                pl.lit(fb_val, pl.String).alias("_v"),
                pl.lit(fb_src, pl.String).alias("_s"),
                pl.lit(fb_status, pl.String).alias("_st"),
            )
        j = j.select("_i", *cited(col, _cast_cfg(pl.col("_v"), dtypes[col]), pl.col("_s"), pl.col("_st")))
        out = out.join(j, on="_i", how="left")
    return out
