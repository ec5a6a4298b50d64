"""vLLM's Prometheus names (``/metrics``): what sources/prometheus reads of them, and how.

Registered with the engine (engines/vllm/__init__.py ``METRICS``; sources.registry.MetricTable):
the names are ``vllm:x``, read in every spelling (``vllm_x``, Ray Serve's ``ray_vllm:x``).
"""

from __future__ import annotations

from ...sources.registry import MetricTable

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
}

# vLLM's own histogram of preemptions per finished request (0.30+; findings/thrash.py).
HISTOGRAM = "vllm:request_num_preemptions"

TABLE = MetricTable(engine="vllm", prefix="vllm", metrics=METRICS, created=CREATED, line_starts=("vllm", "ray_vllm"))
