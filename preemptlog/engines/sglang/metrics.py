"""SGLang's Prometheus names (``/metrics``): what sources/prometheus reads of them, and how.

SGLang (issue 29; observability/metrics_collector.py per release, sglang-facts.md 2.3). A retraction
is SGLang's preemption: its counters fill the same fields as vLLM's preemption counters.
Registered with the engine (engines/sglang/__init__.py; sources.registry.MetricTable): the names
are ``sglang:x``, also read as ``sglang_x``.
"""

from __future__ import annotations

from ...sources.registry import MetricTable
from .log import ENGINE_KIND

# name -> (field, type, scale). 0.4.10-0.5.1 keep the running total in a gauge
# (total_retracted_reqs, "due to kvcache full"): read as the counter it is.
METRICS: dict[str, tuple[str, str, float]] = {
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

# ``<family>_created`` -> the counter fields it dates.
CREATED: dict[str, list[str]] = {
    "sglang:num_retracted_requests_created": ["preemptions"],
    "sglang:num_retracted_input_tokens_created": ["retracted_input_tokens"],
    "sglang:num_retracted_output_tokens_created": ["retracted_output_tokens"],
    "sglang:num_retractions_created": ["hist_count", "hist_sum", "hist_bucket"],
}

# SGLang's own histogram of retractions per finished request (0.5.5-0.5.10; findings/thrash.py).
HISTOGRAM = "sglang:num_retractions"

TABLE = MetricTable(engine=ENGINE_KIND, prefix="sglang", metrics=METRICS, created=CREATED, line_starts=("sglang",))
