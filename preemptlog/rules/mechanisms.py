"""Mechanism rules: which of vLLM's own mechanisms made a preemption (issue 15).

A second rule kind beside the four gates. The gates are the field guide's model and give the
verdict; a mechanism rule names what upstream vLLM really did (vllm-facts.md section 6):

- ``kv-capacity``: an allocation failed for lack of free blocks;
- ``chunked-prefill-loop``: the same request preempted again and again while re-prefilling;
- ``priority-churn``: the priority policy picks victims, and re-admitted requests are preempted again;
- ``prefix-cache-reset``: every running request preempted in one step (``reset_prefix_cache``);
- ``spec-decode-lookahead``: speculative decoding's lookahead slots raise the per-step demand;
- ``unknown``: no rule could tell (the event lists what would).

A rules file holds them as ``[[mechanism]]`` tables (fields :data:`MECH_FIELDS`), with samples
checked by ``preemptlog rules --check`` like the gates. They read the joiner's evidence, the event
columns, the gate rules' ``[derived]`` values, thresholds, and the per-event values of
:data:`MECHANISM_EVIDENCE` (computed by preemptlog/findings/mechanism.py). The lowest
``priority`` that fires names the mechanism; nothing here changes a gate verdict.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import polars as pl

from . import expr as E

if TYPE_CHECKING:
    from .model import RuleSet

from .engine import (
    EVIDENCE_DTYPE,
    WINNER,
    Compiler,
    cited_lists,
    first_true,
    has_cites,
    lists_per_row,
    per_winner,
    winners,
)
from .engine import sample_frame as gate_frame
from .model import MECH_FIELDS, MECHANISM_EVIDENCE, MECHANISMS, UNKNOWN, MechanismRule
from .model import build_mechanism as build
from .model import mechanism_known_names as known_names
from .model import merge_mechanisms as merge
from .model import validate_mechanisms as validate

__all__ = [
    "MECHANISMS",
    "MECHANISM_EVIDENCE",
    "MECH_FIELDS",
    "UNKNOWN",
    "MechanismRule",
    "active",
    "build",
    "evaluate",
    "flags",
    "known_names",
    "merge",
    "run_samples",
    "validate",
]


def active(rs: RuleSet) -> list[MechanismRule]:
    return sorted((r for r in getattr(rs, "mechanisms", []) if r.enabled), key=lambda r: (r.priority, r.order))


def flags(frame: pl.DataFrame, rs: RuleSet, rules: list[MechanismRule]) -> pl.DataFrame:
    """``evaluable__<id>`` / ``fired__<id>`` per mechanism rule (nulls count as false)."""

    c = Compiler(rs, set(frame.columns))
    cols = []
    for r in rules:
        ev = _applies(r, frame)
        for n in r.requires:
            ev = ev & c.present(n)
        if r.requires_any:
            any_ = pl.lit(False)
            for n in r.requires_any:
                any_ = any_ | c.present(n)
            ev = ev & any_
        fired = ev & c.expr(r.when).fill_null(False)
        cols += [ev.fill_null(False).alias(f"mevaluable__{r.id}"), fired.fill_null(False).alias(f"mfired__{r.id}")]
    return frame.with_columns(cols) if cols else frame


def _applies(r: MechanismRule, frame: pl.DataFrame) -> pl.Expr:
    """A rule bound to one engine (``engine = "sglang"``) applies to that engine's events only."""
    if r.engine is None:
        return pl.lit(True)
    kind = pl.col("engine_kind") if "engine_kind" in frame.columns else pl.lit(None, pl.String)
    return kind.is_null() | (kind == r.engine)  # events always name it; a rule sample (null) tests the rule itself


def evaluate(frame: pl.DataFrame, rs: RuleSet) -> pl.DataFrame:
    """Per row: ``mechanism``, ``mechanism_rule``, ``mechanism_confidence``, ``mechanism_evidence``
    (the cited values with their lines), ``mechanism_missing`` (when unknown: the evidence the
    unevaluable rules lacked, i.e. what would tell)."""

    rules = active(rs)
    df = flags(frame, rs, rules)
    c = Compiler(rs, set(frame.columns))
    # the first rule that fired, then only the rules that won somewhere (rules/engine.py)
    df = df.with_columns(first_true([pl.col(f"mfired__{r.id}") for r in rules]).alias(WINNER))
    won = winners(df)

    def chain(value: Any, default: pl.Expr) -> pl.Expr:
        return per_winner(won, lambda i: value(rules[i]), default)

    cited = EVIDENCE_DTYPE if any(has_cites(r.cite) for r in rules) else pl.Null

    any_fired = pl.lit(False)
    for r in rules:
        any_fired = any_fired | pl.col(f"mfired__{r.id}")
    # when no rule fired: what the rules that could not be evaluated lacked, each once
    missing_parts = []
    for r in rules:
        for n in r.requires + r.requires_any:
            cond = ~any_fired & ~c.present(n) & _applies(r, frame)
            missing_parts.append((cond, pl.lit(f"{r.mechanism}: {n}")))
    missing = lists_per_row(df, missing_parts, pl.String, unique=True)
    out = df.select(
        "event_id",
        chain(lambda r: pl.lit(r.mechanism), pl.lit(UNKNOWN)).alias("mechanism"),
        chain(lambda r: pl.lit(r.id), pl.lit(None, pl.String)).alias("mechanism_rule"),
        chain(lambda r: pl.lit(r.confidence), pl.lit("none")).alias("mechanism_confidence"),
    )
    out = out.with_columns(missing.alias("mechanism_missing"))
    # A cited value without a line (a default preemptlog assumed) is not evidence: left out.
    evidence = cited_lists(
        df, won, lambda i: rules[i].cite, c, cited, keep=lambda v: v.struct.field("src").is_not_null()
    )
    return out.insert_column(out.columns.index("mechanism_missing"), evidence.alias("mechanism_evidence"))


def sample_frame(evidence: dict[str, Any]) -> pl.DataFrame:

    base: pl.DataFrame = gate_frame({k: v for k, v in evidence.items() if k not in MECHANISM_EVIDENCE})
    extra = {k: pl.Series(k, [evidence.get(k)], dtype=getattr(pl, t)) for k, (t, _) in MECHANISM_EVIDENCE.items()}
    return base.with_columns(list(extra.values()))


def run_samples(rs: RuleSet) -> list[tuple[str, int, str, str]]:
    """(rule id, sample number, expected, got) for every mechanism rule's samples."""
    out = []
    for rule in rs.mechanisms:
        for i, sample in enumerate(rule.samples):
            f = flags(sample_frame(sample.get("evidence", {})), rs, [rule])
            ev = f.get_column(f"mevaluable__{rule.id}")[0]
            fired = f.get_column(f"mfired__{rule.id}")[0]
            got = "fired" if fired else ("not-fired" if ev else "not-evaluable")
            out.append((rule.id, i + 1, sample["expect"], got))
    return out


def help_text() -> dict[str, str]:
    """What would tell each mechanism (docs and the 'unknown' explanation)."""
    _ = E
    return {
        "kv-capacity": "a block-table preempt record with blocks_needed and pool_free_blocks (the vLLM plugin), "
        "or V0's 'not enough KV cache space' warning",
        "chunked-prefill-loop": "per-request preemption counts (records or markers), the prompt length and "
        "max_num_batched_tokens (the 'Chunked prefill is enabled' line)",
        "priority-churn": "the scheduling policy (non-default args or the preempt record's policy) and "
        "per-request preemption counts",
        "prefix-cache-reset": "preempt records of one step with the running count, or a KV-events AllBlocksCleared",
        "spec-decode-lookahead": "speculative_config in the engine config line and a failed allocation",
    }
