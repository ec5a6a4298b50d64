"""vLLM: its log record families (debug hooks, engine death), stats lines, configuration and knobs,
requests, preemption events, code facts and fixes; registered as the default engine (ENGINE)."""

from ...sources.vllm_log import KIND as LOG_KIND
from .. import facts
from ..registry import Engine, register_engine
from . import (
    capability,
    codefacts,
    config,
    enginedeath,
    fixes,
    hooks,
    logfacts,
    metrics,
    preemptions,
    rejections,
    resets,
    runs,
    stats,
    trouble,
)

ENGINE = register_engine(
    Engine(
        name=facts.VLLM,
        display="vLLM",
        noun="preemption",
        verb="preempted",
        log_kinds=(LOG_KIND,),
        record_prefix=None,  # the single log pass's own record kinds are vLLM's
        metrics=metrics.TABLE,
        histogram_metric=metrics.HISTOGRAM,
        # Which of vLLM's own mechanisms made a preemption (rules/default.toml [[mechanism]])
        mechanisms=(
            "kv-capacity",
            "chunked-prefill-loop",
            "priority-churn",
            "prefix-cache-reset",
            "spec-decode-lookahead",
        ),
        code_facts=facts.rows_of(facts.VLLM),
        defaults=config.version_defaults,
        # the V0 (Pending/Swapped) and V1 (Waiting) stats lines, and the V1 Rust frontend's (stats.py)
        stats_families=("v0", "v1", stats.RUST_FAMILY),
        server_start=runs.server_start,
        log_capability=capability.log_capability,
        not_visible=capability.not_visible,
        fixes=fixes.plan_part,
        fix_tie_order=tuple(fixes.TIE_ORDER),
        prom_counter_note="{n} event(s) come from the Prometheus counter vllm:num_preemptions_total: each "
        "increase between two scrapes is spread evenly over that interval (no request id); V1 counts a "
        "preemption when the request runs again (v1/metrics/stats.py), V0 at the step that preempts it.",
        not_replayed=None,  # the what-if model is vLLM's scheduler (whatif/)
        replay_hint=fixes.LOG_REQUESTS_HINT,
        records_hint=fixes.RECORDS_HINT,
        log_facts=logfacts.LOG_FACTS,
        bundle_facts=codefacts.bundle_facts,
        capacity_fixes=fixes.capacity_fixes,
        capacity_keys=fixes.CAPACITY_KEYS,
        capacity_defaults=fixes.CAPACITY_DEFAULTS,
        startup_refusals=config.startup_refusals,
        replay_versions=config.REPLAY_VERSIONS,
        prefix_caching=config.prefix_caching,
        # V1's request status enum (vllm/v1/request.py): a line printing it shows upstream vLLM's own state
        status_marker=r"\bRequestStatus\.PREEMPTED\b",
        cache_reset_call="reset_prefix_cache(reset_running_requests=True)",
        cause_words=codefacts.cause_words,
        counter_chains=preemptions.counter_chains,
    )
)

__all__ = ["ENGINE", "enginedeath", "hooks", "rejections", "resets", "trouble"]
