"""SGLang: its log kind (retraction, batch and start-up lines), knobs, metric names, evidence, summary
words and fixes; registered as an engine (ENGINE)."""

from .. import facts
from ..registry import Engine, EvidenceSection, register_engine
from . import evidence, fixes, knobs, log, metrics, source, summary

ENGINE = register_engine(
    Engine(
        name=log.ENGINE_KIND,
        display="SGLang",
        noun="retraction",
        verb="retracted",
        log_kinds=(source.KIND,),
        record_prefix=log.RECORD_PREFIX,
        metrics=metrics.TABLE,
        histogram_metric=metrics.HISTOGRAM,
        # SGLang's (issue 29): its new-token ratio decayed to the floor before the retraction, a hybrid
        # (SWA / mamba) pool, and a retraction forced by SGLANG_TEST_RETRACT.
        mechanisms=("ratio-over-admission", "hybrid-pool", "test-retraction"),
        code_facts=facts.rows_of(facts.SGLANG),
        defaults=lambda seen: list(knobs.DEFAULTS),
        stats_families=(log.ENGINE_KIND,),  # its Decode / Prefill batch lines (log.stats_rows)
        server_start=log.server_start,
        log_capability=summary.log_capability,
        not_visible=summary.not_visible,
        fixes=fixes.plan_part,
        fix_tie_order=(),
        prom_counter_note="{n} event(s) come from SGLang's retraction counter (sglang:num_retracted_requests_total, "
        "or 0.4.10-0.5.1's sglang:total_retracted_reqs): each increase between two scrapes is spread evenly over "
        "that interval (no request id).",
        not_replayed="the what-if model replays vLLM's scheduler, not SGLang's",
        evidence=EvidenceSection(declared=tuple(evidence.EVIDENCE), section=evidence.section),
        summary_section=summary.section,
        headline_words=summary.headline_words,
        tokens_unknown="unknown: SGLang's retraction line names no request and prints #new_tokens_gained only from "
        "0.5.10 (/metrics sglang:num_retracted_{input,output}_tokens_total give the incident's total)",
        recompute_counters=summary.recompute_counters,
        event_tokens=summary.event_tokens,
        event_tokens_basis=summary.EVENT_TOKENS_BASIS,
        capacity_fixes=fixes.capacity_fixes,
        capacity_keys=fixes.CAPACITY_KEYS,
        cause_code=summary.CAUSE_CODE,
        cause_words=summary.cause_words,
    )
)

__all__ = ["ENGINE", "source"]
