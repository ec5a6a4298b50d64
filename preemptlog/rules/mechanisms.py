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

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import expr as E

if TYPE_CHECKING:
    import polars as pl

    from .model import RuleSet

MECHANISMS = ("kv-capacity", "chunked-prefill-loop", "priority-churn", "prefix-cache-reset", "spec-decode-lookahead")
UNKNOWN = "unknown"
MECH_FIELDS = {"id", "mechanism", "priority", "confidence", "description", "requires", "requires_any", "when",
               "cite", "enabled", "sample"}

# Per-event values only the mechanism rules read (name -> polars dtype name, one line of doc).
MECHANISM_EVIDENCE: dict[str, tuple[str, str]] = {
    "mech_alloc_failed": ("Boolean", "a recorded allocation failed for lack of free blocks (preempt record: blocks needed + watermark > free), or V0's 'not enough KV cache space' warning (and the events reconstructed from its counter)"),
    "mech_no_failed_alloc": ("Boolean", "the preempt record saw no failed allocation (e.g. reset_prefix_cache)"),
    "mech_step_preempted": ("Int64", "preemptions recorded in the event's scheduler step (same engine)"),
    "mech_step_running": ("Int64", "running requests at the step, before its preemptions (preempt record 'running')"),
    "mech_request_preemptions": ("Int64", "times the victim was preempted in the bundle (only from complete sources: records, markers)"),
    "mech_request_index": ("Int64", "this preemption's number for its request (1 = first)"),
    "mech_prompt_tokens": ("Int64", "the victim's prompt length (request record, or prompt_token_ids of its request line)"),
    "mech_policy": ("String", "the scheduling policy the preempt record names (fcfs | priority)"),
    "mech_victim_priority": ("Int64", "the victim's priority (preempt table record)"),
    "mech_prompt_tput_at": ("Float64", "prompt throughput (tokens/s) of the stats line whose interval holds the event"),
    "mech_gen_tput_at": ("Float64", "generation throughput (tokens/s) of the same stats line"),
}


@dataclass
class MechanismRule:
    id: str
    mechanism: str
    when: str
    priority: int = 100
    confidence: str = "medium"
    description: str = ""
    requires: list[str] = field(default_factory=list)
    requires_any: list[str] = field(default_factory=list)
    cite: list[str] = field(default_factory=list)
    enabled: bool = True
    samples: list[dict[str, Any]] = field(default_factory=list)
    origin: str = "default.toml"
    order: int = 0


def _err(msg: str, hint: str | None = None) -> Exception:
    from .model import RulesError

    return RulesError(msg, hint=hint)


def build(doc: Any, src: str, order: int) -> MechanismRule:
    from .model import CONFIDENCE, EXPECT, SAMPLE_FIELDS, _check_keys, _str_list

    if not isinstance(doc, dict):
        raise _err(f"{src}: every [[mechanism]] must be a table")
    rid = doc.get("id")
    where = f"{src}: mechanism rule {rid!r}" if rid else f"{src}: mechanism rule #{order + 1}"
    _check_keys(where, doc, MECH_FIELDS)
    if not isinstance(rid, str) or not rid:
        raise _err(f"{where}: 'id' (a string) is required")
    mech = doc.get("mechanism")
    if mech not in MECHANISMS:
        raise _err(f"{where}: unknown mechanism {mech!r}", hint="one of " + ", ".join(MECHANISMS))
    when = doc.get("when")
    if not isinstance(when, str):
        raise _err(f"{where}: 'when' (a condition string) is required")
    conf = doc.get("confidence", "medium")
    if conf not in CONFIDENCE:
        raise _err(f"{where}: confidence must be one of {', '.join(CONFIDENCE)}")
    prio = doc.get("priority", 100)
    if not isinstance(prio, int) or isinstance(prio, bool):
        raise _err(f"{where}: priority must be an integer")
    enabled = doc.get("enabled", True)
    if not isinstance(enabled, bool):
        raise _err(f"{where}: enabled must be true or false")
    if "description" in doc and not isinstance(doc["description"], str):
        raise _err(f"{where}: description must be a string")
    samples = doc.get("sample", [])
    if not isinstance(samples, list):
        raise _err(f"{where}: sample must be an array of tables")
    for i, s in enumerate(samples):
        if not isinstance(s, dict):
            raise _err(f"{where}: sample #{i + 1} must be a table")
        _check_keys(f"{where} sample #{i + 1}", s, SAMPLE_FIELDS)
        if s.get("expect") not in EXPECT:
            raise _err(f"{where} sample #{i + 1}: expect must be one of {', '.join(EXPECT)}")
        if not isinstance(s.get("evidence", {}), dict):
            raise _err(f"{where} sample #{i + 1}: evidence must be a table")
    return MechanismRule(
        id=rid, mechanism=mech, when=when, priority=prio, confidence=conf,
        description=doc.get("description", ""),
        requires=_str_list(f"{where} requires", doc.get("requires", [])),
        requires_any=_str_list(f"{where} requires_any", doc.get("requires_any", [])),
        cite=_str_list(f"{where} cite", doc.get("cite", [])),
        enabled=enabled, samples=samples, origin=src, order=order,
    )


def merge(rs: RuleSet, doc: dict[str, Any], src: str) -> None:
    """Add (or, by id, replace) the ``[[mechanism]]`` rules of one rules file."""
    raw = doc.get("mechanism", [])
    if not isinstance(raw, list):
        raise _err(f"{src}: 'mechanism' must be an array of tables ([[mechanism]])")
    by_id = {r.id: i for i, r in enumerate(rs.mechanisms)}
    for i, item in enumerate(raw):
        rule = build(item, src, len(rs.mechanisms) + i)
        if rule.id in by_id:
            rule.order = rs.mechanisms[by_id[rule.id]].order
            rs.mechanisms[by_id[rule.id]] = rule
        else:
            by_id[rule.id] = len(rs.mechanisms)
            rs.mechanisms.append(rule)


def known_names() -> set[str]:
    from .model import known_names as gate_names

    return gate_names() | set(MECHANISM_EVIDENCE)


def validate(rs: RuleSet) -> None:
    from .model import _check_expr

    known = known_names()
    names_ok = known | set(rs.derived)
    for r in rs.mechanisms:
        where = f"{r.origin}: mechanism rule {r.id!r}"
        _check_expr(f"{where} when", r.when, names_ok, rs)
        for c in r.cite:
            _check_expr(f"{where} cite {c!r}", c, names_ok, rs)
        for n in r.requires + r.requires_any:
            if n not in names_ok:
                raise _err(f"{where}: requires unknown evidence {n!r}")
        for i, s in enumerate(r.samples):
            for n in s.get("evidence", {}):
                if n not in known:
                    raise _err(f"{where} sample #{i + 1}: unknown evidence {n!r}")


def active(rs: RuleSet) -> list[MechanismRule]:
    return sorted((r for r in getattr(rs, "mechanisms", []) if r.enabled), key=lambda r: (r.priority, r.order))


def flags(frame: pl.DataFrame, rs: RuleSet, rules: list[MechanismRule]) -> pl.DataFrame:
    """``evaluable__<id>`` / ``fired__<id>`` per mechanism rule (nulls count as false)."""
    import polars as pl

    from .engine import Compiler

    c = Compiler(rs, set(frame.columns))
    cols = []
    for r in rules:
        ev = pl.lit(True)
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


def evaluate(frame: pl.DataFrame, rs: RuleSet) -> pl.DataFrame:
    """Per row: ``mechanism``, ``mechanism_rule``, ``mechanism_confidence``, ``mechanism_evidence``
    (the cited values with their lines), ``mechanism_missing`` (when unknown: the evidence the
    unevaluable rules lacked, i.e. what would tell)."""
    import polars as pl

    from .engine import Compiler, _cite_structs

    rules = active(rs)
    df = flags(frame, rs, rules)
    c = Compiler(rs, set(frame.columns))

    def chain(value: Any, default: pl.Expr) -> pl.Expr:
        expr: Any = None
        for r in rules:
            cond = pl.col(f"mfired__{r.id}")
            expr = pl.when(cond).then(value(r)) if expr is None else expr.when(cond).then(value(r))
        return default if expr is None else expr.otherwise(default)

    missing_parts = []
    for r in rules:
        for n in r.requires + r.requires_any:
            missing_parts.append(pl.when(~c.present(n)).then(pl.lit(f"{r.mechanism}: {n}")))
    missing = (
        pl.concat_list(missing_parts).list.drop_nulls().list.unique(maintain_order=True)
        if missing_parts else pl.lit([], pl.List(pl.String))
    )
    any_fired = pl.lit(False)
    for r in rules:
        any_fired = any_fired | pl.col(f"mfired__{r.id}")
    return df.select(
        "event_id",
        chain(lambda r: pl.lit(r.mechanism), pl.lit(UNKNOWN)).alias("mechanism"),
        chain(lambda r: pl.lit(r.id), pl.lit(None, pl.String)).alias("mechanism_rule"),
        chain(lambda r: pl.lit(r.confidence), pl.lit("none")).alias("mechanism_confidence"),
        # A cited value without a line (a default preemptlog assumed) is not evidence: left out.
        chain(lambda r: _cite_structs(c, r.cite, df.schema), pl.lit(None))
        .list.eval(pl.element().filter(pl.element().struct.field("src").is_not_null()))
        .alias("mechanism_evidence"),
        pl.when(any_fired).then(pl.lit([], pl.List(pl.String))).otherwise(missing).alias("mechanism_missing"),
    )


def sample_frame(evidence: dict[str, Any]) -> pl.DataFrame:
    import polars as pl

    from .samples import sample_frame as gate_frame

    base: pl.DataFrame = gate_frame({k: v for k, v in evidence.items() if k not in MECHANISM_EVIDENCE})  # type: ignore[assignment]
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
