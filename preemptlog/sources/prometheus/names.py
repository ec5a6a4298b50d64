"""Prometheus: what is read (metric names and their spellings, counter fields) and the shape of
phase 1's per-file data, shared by the text and the JSON readers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import polars as pl

if TYPE_CHECKING:
    from ...inputs.files import InputFile


KIND = "prometheus"


PLACED = "prom_placed"  # phase 2's per-file samples, between place and combine (sources.registry.CrossFile)


# What is read. name -> (field, type, scale). Counters are exposed with
# ``_total`` (prometheus_client adds it); ``vllm:num_preemptions`` without it
# appears in some exposures. Fractions (0-1) are scaled to percent.
METRICS: dict[str, tuple[str, str, float]] = {
    "vllm:num_preemptions_total": ("preemptions", "counter", 1.0),
    "vllm:num_preemptions": ("preemptions", "counter", 1.0),
    "vllm:num_requests_running": ("running", "gauge", 1.0),
    "vllm:num_requests_waiting": ("waiting", "gauge", 1.0),
    "vllm:num_requests_swapped": ("swapped", "gauge", 1.0),
    "vllm:num_requests_waiting_by_reason": ("waiting_by_reason", "gauge", 1.0),
    "vllm:kv_cache_usage_perc": ("kv_usage", "gauge", 100.0),
    "vllm:gpu_cache_usage_perc": ("kv_usage", "gauge", 100.0),
    "vllm:cpu_cache_usage_perc": ("cpu_kv_usage", "gauge", 100.0),
    "vllm:gpu_prefix_cache_hit_rate": ("prefix_hit_rate_gauge", "gauge", 100.0),
    "vllm:prefix_cache_queries_total": ("prefix_queries", "counter", 1.0),
    "vllm:prefix_cache_hits_total": ("prefix_hits", "counter", 1.0),
    "vllm:gpu_prefix_cache_queries_total": ("prefix_queries", "counter", 1.0),
    "vllm:gpu_prefix_cache_hits_total": ("prefix_hits", "counter", 1.0),
    "vllm:request_num_preemptions_count": ("hist_count", "counter", 1.0),
    "vllm:request_num_preemptions_sum": ("hist_sum", "counter", 1.0),
    "vllm:request_num_preemptions_bucket": ("hist_bucket", "counter", 1.0),
    "vllm:cache_config_info": ("cache_config", "info", 1.0),
    # Tokens per finished request (histogram sum / count since engine start): the size of a request
    # for the capacity estimate of a stock bundle (findings/capacity.py). Read as the latest value.
    "vllm:request_prompt_tokens_sum": ("req_prompt_sum", "gauge", 1.0),
    "vllm:request_prompt_tokens_count": ("req_prompt_count", "gauge", 1.0),
    "vllm:request_generation_tokens_sum": ("req_gen_sum", "gauge", 1.0),
    "vllm:request_generation_tokens_count": ("req_gen_count", "gauge", 1.0),
    # SGLang (issue 29; observability/metrics_collector.py per release, sglang-facts.md 2.3). A retraction is
    # SGLang's preemption: its counters fill the same fields. 0.4.10-0.5.1 keep the running total in a
    # gauge (total_retracted_reqs, "due to kvcache full"): read as the counter it is.
    "sglang:num_retracted_requests_total": ("preemptions", "counter", 1.0),  # 0.5.10+
    "sglang:total_retracted_reqs": ("preemptions", "counter", 1.0),  # 0.4.10-0.5.1
    "sglang:num_retracted_reqs": ("retracted_last", "gauge", 1.0),  # 0.5.5+: the last retraction's size, per interval
    "sglang:num_retracted_input_tokens_total": ("retracted_input_tokens", "counter", 1.0),  # 0.5.10+
    "sglang:num_retracted_output_tokens_total": ("retracted_output_tokens", "counter", 1.0),  # 0.5.10+
    "sglang:num_retractions_count": ("hist_count", "counter", 1.0),  # 0.5.5-0.5.10: retractions per request
    "sglang:num_retractions_sum": ("hist_sum", "counter", 1.0),
    "sglang:num_retractions_bucket": ("hist_bucket", "counter", 1.0),
    "sglang:num_running_reqs": ("running", "gauge", 1.0),
    "sglang:num_queue_reqs": ("waiting", "gauge", 1.0),
    "sglang:token_usage": ("kv_usage", "gauge", 100.0),
}


# ``<family>_created`` (prometheus_client's creation time of a counter) -> the
# counter fields it dates; a changed value between two samples is a reset.
CREATED: dict[str, list[str]] = {
    "vllm:num_preemptions_created": ["preemptions"],
    "vllm:prefix_cache_queries_created": ["prefix_queries"],
    "vllm:prefix_cache_hits_created": ["prefix_hits"],
    "vllm:gpu_prefix_cache_queries_created": ["prefix_queries"],
    "vllm:gpu_prefix_cache_hits_created": ["prefix_hits"],
    "vllm:request_num_preemptions_created": ["hist_count", "hist_sum", "hist_bucket"],
    "sglang:num_retracted_requests_created": ["preemptions"],
    "sglang:num_retracted_input_tokens_created": ["retracted_input_tokens"],
    "sglang:num_retracted_output_tokens_created": ["retracted_output_tokens"],
    "sglang:num_retractions_created": ["hist_count", "hist_sum", "hist_bucket"],
}


COUNTER_FIELDS = (
    "preemptions",
    "prefix_queries",
    "prefix_hits",
    "hist_count",
    "hist_sum",
    "hist_bucket",
    "retracted_input_tokens",
    "retracted_output_tokens",
)


def engine_kind_expr(name: pl.Expr) -> pl.Expr:
    """The serving engine a canonical metric name belongs to: ``sglang`` for ``sglang:``, else ``vllm``."""
    return pl.when(name.str.starts_with("sglang:")).then(pl.lit("sglang")).otherwise(pl.lit("vllm"))


# cache_config_info label -> config key (CONFIG_SCHEMA); other labels keep their name.
CONFIG_LABELS = {"cache_dtype": "kv_cache_dtype"}


CONFIG_SKIP_LABELS = {"engine", "model_name", "instance", "job", "pod", "__name__"}


# Spellings of one metric: vLLM's ``vllm:name``, the underscore form of exporters
# that do not allow ``:`` (``vllm_name``, OpenTelemetry, some relabelling), and
# Ray Serve's re-export (``ray_vllm:name``, ``ray_vllm_name``). All are read as
# ``vllm:name`` (:func:`canonical_name`).
NAME_PREFIX_RE = r"(?:ray_)?(?:vllm|sglang)[:_]"


def canonical_name(name: str) -> str:
    """``ray_vllm:x`` / ``vllm_x`` / ``ray_vllm_x`` -> ``vllm:x`` (and ``sglang_x`` -> ``sglang:x``)."""
    if name.startswith("ray_"):
        name = name[4:]
    if name.startswith("vllm_"):
        name = "vllm:" + name[5:]
    if name.startswith("sglang_"):
        name = "sglang:" + name[7:]
    return name


def _canonical_expr(col: pl.Expr) -> pl.Expr:
    return col.str.replace(r"^ray_", "").str.replace(r"^vllm_", "vllm:").str.replace(r"^sglang_", "sglang:")


def _spellings(names: list[str]) -> list[str]:
    """Literal forms of the names for the pre-filter (``ray_`` forms contain them)."""
    out = set()
    for n in names:
        out.add(n)
        for pre in ("vllm", "sglang"):
            if n.startswith(pre + ":"):
                out.add(pre + "_" + n[len(pre) + 1 :])
    return sorted(out)


RAW_LIMIT = 500


@dataclass
class _FileData:
    file: InputFile
    fmt: str  # "text" | "json"
    samples: pl.DataFrame  # see _SAMPLE_COLUMNS
    sep_times: dict[int, str] = field(default_factory=dict)  # scrape -> separator time text
    n_scrapes: int = 0
    warnings: list[str] = field(default_factory=list)
    recorded: bool = False  # preemptlog capture's own file: the separator time was recorded, not assumed


def _sample_schema() -> dict[str, Any]:
    return {
        "file_id": pl.UInt16,
        "n": pl.UInt32,
        "col": pl.UInt32,
        "scrape": pl.Int32,
        "name": pl.String,
        "labels": pl.String,
        "engine": pl.String,
        "model_name": pl.String,
        "instance": pl.String,
        "reason": pl.String,
        "le": pl.String,
        "value": pl.Float64,
        "ts_us": pl.Int64,
    }


def _label(name: str) -> pl.Expr:
    return pl.col("labels").str.extract(r"(?:^|,)\s*" + name + r'\s*=\s*"((?:[^"\\]|\\.)*)"', 1)


def _ts_to_us(col: pl.Expr) -> pl.Expr:
    """Epoch timestamp -> microseconds: ms when above 1e11 (Prometheus text), else seconds."""
    t = col.cast(pl.Float64, strict=False)
    us = pl.when(t.abs() > 1e11).then(t * 1000.0).otherwise(t * 1e6).round(0).cast(pl.Int64, strict=False)
    return pl.when(us.is_between(0, 7_258_118_400_000_000)).then(us)  # 1970-2200, else no time


class PromFiles(Protocol):
    """What the counters and the scrape clock read of a parsed Prometheus source (``PromParsed``)."""

    @property
    def files(self) -> list[_FileData]: ...
