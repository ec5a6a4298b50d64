"""Rule files: load, validate, overlay, override.

A rules file is TOML with these top-level keys only: ``version``,
``thresholds`` (name -> {value, source}), ``derived`` (name -> expression),
``rule`` (array of tables), ``gates`` (gate -> {evidence}). A rule has only
the fields in :data:`RULE_FIELDS`. Anything else, an unknown gate, a name that
is neither evidence nor derived nor an event column, an unknown threshold or a
condition the expression language cannot parse is refused with one clear
error naming the file and the rule: nothing from a rules file is ever run as
code.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from .. import engines
from ..errors import UsageError
from ..joiner import RENAMED_IN_2, VALUE_COLUMNS
from . import expr as E

GATES = ("G1-kv-space", "G2-batch-variance", "G3-queue-overflow", "G4-prefix-conflict")
# One name per kind of cause: "capacity" is fewer free blocks than needed, however it was read (a
# record, a hook step, vLLM's code, the pool's level); "kv-exhausted" is its old name for the pool's
# level, still accepted in a rules file and read as "capacity" (SUB_KIND_ALIASES).
SUB_KINDS = ("capacity", "fragmentation", "cache-reset")
SUB_KIND_ALIASES = {"kv-exhausted": "capacity"}
CONFIDENCE = ("high", "medium", "low")
TOP_FIELDS = {
    "version",
    "thresholds",
    "derived",
    "rule",
    "gates",
    "mechanism",
}  # mechanism: issue 15 (rules/mechanisms.py)
RULE_FIELDS = {
    "id",
    "gate",
    "sub_kind",
    "priority",
    "confidence",
    "description",
    "requires",
    "requires_any",
    "when",
    "cite",
    "assumption_sensitive",
    "upstream_note",
    "enabled",
    "only_when_fired",
    "guide_only",
    "upstream_when",
    "upstream_only",
    "sample",
}
SAMPLE_FIELDS = {"evidence", "expect"}
EXPECT = ("fired", "not-fired", "not-evaluable")
# Event columns a rule may read besides the evidence frame.
EVENT_NAMES = {"kind", "mode", "engine", "engine_kind", "request_id", "cumulative", "time_precision"}
# Bundle facts a rule may read: whether the bundle shows the guide's patched scheduler
# (debug-hook lines or PREEMPTED marker lines), set per event by rules.verdicts.
BUNDLE_NAMES = {"guide_model"}


class RulesError(UsageError):
    pass


@dataclass
class Threshold:
    name: str
    value: Any
    source: str
    origin: str = "default"  # default | rules file | --set


@dataclass
class Rule:
    id: str
    gate: str
    when: str
    priority: int = 100
    sub_kind: str | None = None
    confidence: str = "medium"
    description: str = ""
    requires: list[str] = field(default_factory=list)
    requires_any: list[str] = field(default_factory=list)
    cite: list[str] = field(default_factory=list)
    assumption_sensitive: list[str] = field(default_factory=list)
    upstream_note: str = ""
    enabled: bool = True
    only_when_fired: bool = False  # makes its gate "evaluable" only when it fires (a statement, not a test)
    guide_only: bool = False  # a mechanism of the guide's patched scheduler, not of upstream vLLM
    upstream_when: str = ""  # condition under which a guide_only rule also applies to upstream vLLM
    upstream_only: bool = False  # upstream vLLM's own code (engine_facts.py): never on the guide's model
    samples: list[dict[str, Any]] = field(default_factory=list)
    origin: str = "default.toml"
    order: int = 0


@dataclass
class RuleSet:
    rules: list[Rule]
    thresholds: dict[str, Threshold]
    derived: dict[str, str]
    gates_help: dict[str, str]
    files: list[str] = field(default_factory=list)
    mechanisms: list[Any] = field(default_factory=list)  # rules.mechanisms.MechanismRule

    @property
    def active(self) -> list[Rule]:
        return sorted((r for r in self.rules if r.enabled), key=lambda r: (r.priority, r.order))

    def threshold_values(self) -> dict[str, Any]:
        return {k: t.value for k, t in self.thresholds.items()}

    def describe(self) -> dict[str, Any]:
        return {
            "files": list(self.files),
            "thresholds": [
                {"name": t.name, "value": t.value, "origin": t.origin, "source": t.source}
                for t in self.thresholds.values()
            ],
            "derived": dict(self.derived),
            "rules": [
                {
                    "id": r.id,
                    "gate": r.gate,
                    "sub_kind": r.sub_kind,
                    "priority": r.priority,
                    "enabled": r.enabled,
                    "confidence": r.confidence,
                    "when": r.when,
                    "requires": r.requires,
                    "requires_any": r.requires_any,
                    "description": r.description,
                    "upstream_note": r.upstream_note,
                    "origin": r.origin,
                    "samples": len(r.samples),
                }
                for r in sorted(self.rules, key=lambda r: (r.priority, r.order))
            ],
            # the [[mechanism]] rules (rules/mechanisms.py)
            "mechanisms": [
                {
                    "id": m.id,
                    "mechanism": m.mechanism,
                    "priority": m.priority,
                    "enabled": m.enabled,
                    "confidence": m.confidence,
                    "when": m.when,
                    "requires": m.requires,
                    "requires_any": m.requires_any,
                    "description": m.description,
                    "origin": m.origin,
                    "samples": len(m.samples),
                }
                for m in sorted(self.mechanisms, key=lambda m: (m.priority, m.order))
            ],
        }


def known_names() -> set[str]:

    return set(VALUE_COLUMNS) | EVENT_NAMES | BUNDLE_NAMES


def _read(path: str | None) -> tuple[dict[str, Any], str]:
    if path is None:
        text = resources.files("preemptlog.rules").joinpath("default.toml").read_text("utf-8")
        return _parse_toml(text, "default.toml"), "default.toml"
    p = Path(path)
    try:
        text = p.read_text("utf-8")
    except OSError as exc:
        raise RulesError(f"--rules {path}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise RulesError(f"--rules {path}: not UTF-8 text") from None
    return _parse_toml(text, path), path


def _parse_toml(text: str, name: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RulesError(f"{name}: not valid TOML ({exc})") from None


def _check_keys(where: str, got: dict[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(got) - allowed)
    if unknown:
        raise RulesError(
            f"{where}: unknown field(s) {', '.join(map(repr, unknown))}", hint="allowed: " + ", ".join(sorted(allowed))
        )


def _str_list(where: str, value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RulesError(f"{where}: expected a list of strings")
    return list(value)


def _samples(where: str, doc: dict[str, Any]) -> list[dict[str, Any]]:
    """A rule's ``[[...sample]]`` tables, checked (gate and mechanism rules alike)."""
    samples = doc.get("sample", [])
    if not isinstance(samples, list):
        raise RulesError(f"{where}: sample must be an array of tables")
    for i, s in enumerate(samples):
        if not isinstance(s, dict):
            raise RulesError(f"{where}: sample #{i + 1} must be a table")
        _check_keys(f"{where} sample #{i + 1}", s, SAMPLE_FIELDS)
        if s.get("expect") not in EXPECT:
            raise RulesError(f"{where} sample #{i + 1}: expect must be one of {', '.join(EXPECT)}")
        if not isinstance(s.get("evidence", {}), dict):
            raise RulesError(f"{where} sample #{i + 1}: evidence must be a table")
    return samples


def _build_rule(doc: dict[str, Any], src: str, order: int) -> Rule:
    if not isinstance(doc, dict):
        raise RulesError(f"{src}: every [[rule]] must be a table")
    rid = doc.get("id")
    where = f"{src}: rule {rid!r}" if rid else f"{src}: rule #{order + 1}"
    _check_keys(where, doc, RULE_FIELDS)
    if not isinstance(rid, str) or not rid:
        raise RulesError(f"{where}: 'id' (a string) is required")
    gate = doc.get("gate")
    if gate not in GATES:
        raise RulesError(f"{where}: unknown gate {gate!r}", hint="one of " + ", ".join(GATES))
    when = doc.get("when")
    if not isinstance(when, str):
        raise RulesError(f"{where}: 'when' (a condition string) is required")
    sub = doc.get("sub_kind")
    sub = SUB_KIND_ALIASES.get(sub, sub) if isinstance(sub, str) else sub
    if sub is not None and sub not in SUB_KINDS:
        raise RulesError(f"{where}: unknown sub_kind {sub!r}", hint="one of " + ", ".join(SUB_KINDS))
    conf = doc.get("confidence", "medium")
    if conf not in CONFIDENCE:
        raise RulesError(f"{where}: confidence must be one of {', '.join(CONFIDENCE)}")
    prio = doc.get("priority", 100)
    if not isinstance(prio, int) or isinstance(prio, bool):
        raise RulesError(f"{where}: priority must be an integer")
    enabled = doc.get("enabled", True)
    if not isinstance(enabled, bool):
        raise RulesError(f"{where}: enabled must be true or false")
    owf = doc.get("only_when_fired", False)
    if not isinstance(owf, bool):
        raise RulesError(f"{where}: only_when_fired must be true or false")
    guide_only = doc.get("guide_only", False)
    if not isinstance(guide_only, bool):
        raise RulesError(f"{where}: guide_only must be true or false")
    upstream_when = doc.get("upstream_when", "")
    if not isinstance(upstream_when, str):
        raise RulesError(f"{where}: upstream_when must be a condition string")
    upstream_only = doc.get("upstream_only", False)
    if not isinstance(upstream_only, bool):
        raise RulesError(f"{where}: upstream_only must be true or false")
    if upstream_only and guide_only:
        raise RulesError(f"{where}: a rule cannot be both guide_only and upstream_only")
    samples = _samples(where, doc)
    for key in ("description", "upstream_note"):
        if key in doc and not isinstance(doc[key], str):
            raise RulesError(f"{where}: {key} must be a string")
    return Rule(
        id=rid,
        gate=gate,
        when=when,
        priority=prio,
        sub_kind=sub,
        confidence=conf,
        description=doc.get("description", ""),
        requires=_str_list(f"{where} requires", doc.get("requires", [])),
        requires_any=_str_list(f"{where} requires_any", doc.get("requires_any", [])),
        cite=_str_list(f"{where} cite", doc.get("cite", [])),
        assumption_sensitive=_str_list(f"{where} assumption_sensitive", doc.get("assumption_sensitive", [])),
        upstream_note=doc.get("upstream_note", ""),
        enabled=enabled,
        only_when_fired=owf,
        guide_only=guide_only,
        upstream_when=upstream_when,
        upstream_only=upstream_only,
        samples=samples,
        origin=src,
        order=order,
    )


def _merge(rs: RuleSet, doc: dict[str, Any], src: str) -> None:
    _check_keys(src, doc, TOP_FIELDS)
    version = doc.get("version", 1)
    if version != 1:
        raise RulesError(f"{src}: unsupported rules version {version!r} (this preemptlog reads version 1)")
    for name, t in (doc.get("thresholds") or {}).items():
        where = f"{src}: threshold {name!r}"
        if not isinstance(t, dict):
            raise RulesError(f"{where}: expected a table with value and source")
        _check_keys(where, t, {"value", "source"})
        if "value" not in t or not isinstance(t["value"], (int, float, str, bool)):
            raise RulesError(f"{where}: 'value' (a number, string or boolean) is required")
        origin = "default" if src == "default.toml" else "rules file"
        rs.thresholds[name] = Threshold(name, t["value"], t.get("source", f"set in {src}"), origin)
    for name, text in (doc.get("derived") or {}).items():
        if not isinstance(text, str):
            raise RulesError(f"{src}: derived {name!r} must be an expression string")
        rs.derived[name] = text
    for gate, g in (doc.get("gates") or {}).items():
        if gate not in GATES:
            raise RulesError(f"{src}: [gates] has unknown gate {gate!r}")
        if not isinstance(g, dict):
            raise RulesError(f"{src}: [gates.{gate}] must be a table")
        _check_keys(f"{src}: [gates.{gate}]", g, {"evidence"})
        rs.gates_help[gate] = str(g.get("evidence", ""))
    by_id = {r.id: i for i, r in enumerate(rs.rules)}
    rules = doc.get("rule", [])
    if not isinstance(rules, list):
        raise RulesError(f"{src}: 'rule' must be an array of tables ([[rule]])")
    for i, raw in enumerate(rules):
        rule = _build_rule(raw, src, len(rs.rules) + i)
        if rule.id in by_id:
            rule.order = rs.rules[by_id[rule.id]].order
            rs.rules[by_id[rule.id]] = rule
        else:
            by_id[rule.id] = len(rs.rules)
            rs.rules.append(rule)

    merge_mechanisms(rs, doc, src)
    rs.files.append(src)


def validate(rs: RuleSet) -> None:
    """Every expression parses, and names only known evidence, derived values and thresholds."""
    known = known_names()
    for name in rs.derived:
        if name in known:
            raise RulesError(f"derived {name!r} shadows an evidence column")
    names_ok = known | set(rs.derived)
    for name, text in rs.derived.items():
        _check_expr(f"derived {name!r}", text, names_ok, rs)
    for r in rs.rules:
        where = f"{r.origin}: rule {r.id!r}"
        _check_expr(f"{where} when", r.when, names_ok, rs)
        for c in r.cite:
            _check_expr(f"{where} cite {c!r}", c, names_ok, rs)
        if r.upstream_when:
            _check_expr(f"{where} upstream_when", r.upstream_when, names_ok, rs)
        for n in r.requires + r.requires_any + r.assumption_sensitive:
            if n not in names_ok:
                hint = f"renamed to {RENAMED_IN_2[n]!r} in output schema 2" if n in RENAMED_IN_2 else None
                raise RulesError(f"{where}: requires unknown evidence {n!r}", hint=hint)
        for i, s in enumerate(r.samples):
            for n in s.get("evidence", {}):
                if n not in known:
                    raise RulesError(f"{where} sample #{i + 1}: unknown evidence {n!r}")

    validate_mechanisms(rs)


def _check_expr(where: str, text: str, names_ok: set[str], rs: RuleSet) -> None:
    try:
        node = E.parse(text)
    except E.ExprError as exc:
        raise RulesError(f"{where}: {exc}") from None
    used, thr = E.names(node)
    bad = sorted(used - names_ok)
    if bad:
        renamed = [f"{b} is now {RENAMED_IN_2[b]}" for b in bad if b in RENAMED_IN_2]
        hint = (
            ("renamed in output schema 2 (evidence named by its source): " + ", ".join(renamed))
            if renamed
            else ("see `preemptlog rules --evidence`")
        )
        raise RulesError(f"{where}: unknown name(s) {', '.join(bad)}", hint=hint)
    bad_t = sorted(thr - set(rs.thresholds))
    if bad_t:
        raise RulesError(f"{where}: unknown threshold(s) {', '.join('$' + t for t in bad_t)}")


def apply_set(rs: RuleSet, items: list[str] | None) -> None:
    """``--set name=value`` (a threshold) or ``--set RULE_ID.enabled=true|false``."""
    for item in items or []:
        if "=" not in item:
            raise RulesError(f"--set expects name=value, got {item!r}")
        key, raw = item.split("=", 1)
        key = key.strip()
        if key.endswith(".enabled"):
            rid = key[: -len(".enabled")]
            rule = next((r for r in rs.rules if r.id == rid), None)
            if rule is None:  # a mechanism rule may be switched off the same way
                rule = next((m for m in rs.mechanisms if m.id == rid), None)
            if rule is None:
                raise RulesError(f"--set {item}: no rule {rid!r}")
            if raw.lower() not in ("true", "false"):
                raise RulesError(f"--set {item}: expected true or false")
            rule.enabled = raw.lower() == "true"
            continue
        if key not in rs.thresholds:
            raise RulesError(
                f"--set {item}: unknown threshold {key!r}", hint="known: " + ", ".join(sorted(rs.thresholds))
            )
        old = rs.thresholds[key].value
        value: Any
        try:
            value = type(old)(raw) if not isinstance(old, bool) else raw.lower() == "true"
            if isinstance(old, (int, float)) and not isinstance(old, bool):
                value = float(raw) if isinstance(old, float) else int(float(raw))
        except ValueError:
            raise RulesError(f"--set {item}: {raw!r} is not a {type(old).__name__}") from None
        rs.thresholds[key] = Threshold(key, value, rs.thresholds[key].source, "--set")


def load_rules(extra_files: list[str] | None = None, sets: list[str] | None = None) -> RuleSet:
    rs = RuleSet(rules=[], thresholds={}, derived={}, gates_help={})
    doc, name = _read(None)
    _merge(rs, doc, name)
    for path in extra_files or []:
        doc, name = _read(path)
        _merge(rs, doc, name)
    apply_set(rs, sets)
    validate(rs)
    return rs


# ---------------------------------------------------------------- the [[mechanism]] rule kind
# Which of vLLM's own mechanisms made a preemption: parsed and validated here with the gate
# rules (one home for the rules file's schema); evaluated by rules/mechanisms.py.


# Every registered engine's mechanisms (Engine.mechanisms: vLLM's kv-capacity, chunked-prefill-loop,
# priority-churn, prefix-cache-reset, spec-decode-lookahead; SGLang's ratio-over-admission, hybrid-pool,
# test-retraction), in registration order.
def mechanisms() -> tuple[str, ...]:
    return tuple(m for e in engines.registered() for m in e.mechanisms)


MECHANISMS: tuple[str, ...] = mechanisms()
UNKNOWN = "unknown"
MECH_FIELDS = {
    "id",
    "mechanism",
    "priority",
    "confidence",
    "description",
    "requires",
    "requires_any",
    "when",
    "cite",
    "enabled",
    "sample",
    "engine",  # the engine_kind it applies to (a registered engine's name); other engines' events skip it
}

# Per-event values only the mechanism rules read (name -> polars dtype name, one line of doc).
MECHANISM_EVIDENCE: dict[str, tuple[str, str]] = {
    "mech_alloc_failed": (
        "Boolean",
        "a recorded allocation failed for lack of free blocks (preempt record: blocks needed + watermark > free), or V0's 'not enough KV cache space' warning (and the events reconstructed from its counter)",
    ),
    "mech_no_failed_alloc": ("Boolean", "the preempt record saw no failed allocation (e.g. reset_prefix_cache)"),
    "mech_step_preempted": ("Int64", "preemptions recorded in the event's scheduler step (same engine)"),
    "mech_step_running": ("Int64", "running requests at the step, before its preemptions (preempt record 'running')"),
    "mech_request_preemptions": (
        "Int64",
        "times the victim was preempted in the bundle (only from complete sources: records, markers)",
    ),
    "mech_request_index": ("Int64", "this preemption's number for its request (1 = first)"),
    "mech_prompt_tokens": (
        "Int64",
        "the victim's prompt length (request record, or prompt_token_ids of its request line)",
    ),
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
    engine: str | None = None  # only events of this engine_kind (None: every engine's)


def _err(msg: str, hint: str | None = None) -> Exception:
    return RulesError(msg, hint=hint)


def build_mechanism(doc: Any, src: str, order: int) -> MechanismRule:
    if not isinstance(doc, dict):
        raise _err(f"{src}: every [[mechanism]] must be a table")
    rid = doc.get("id")
    where = f"{src}: mechanism rule {rid!r}" if rid else f"{src}: mechanism rule #{order + 1}"
    _check_keys(where, doc, MECH_FIELDS)
    if not isinstance(rid, str) or not rid:
        raise _err(f"{where}: 'id' (a string) is required")
    mech = doc.get("mechanism")
    known = mechanisms()
    if mech not in known:
        raise _err(f"{where}: unknown mechanism {mech!r}", hint="one of " + ", ".join(known))
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
    samples = _samples(where, doc)
    engine = doc.get("engine")
    if engine is not None and engine not in engines.names():
        raise _err(f"{where}: engine must be one of {', '.join(engines.names())}")
    return MechanismRule(
        engine=engine,
        id=rid,
        mechanism=mech,
        when=when,
        priority=prio,
        confidence=conf,
        description=doc.get("description", ""),
        requires=_str_list(f"{where} requires", doc.get("requires", [])),
        requires_any=_str_list(f"{where} requires_any", doc.get("requires_any", [])),
        cite=_str_list(f"{where} cite", doc.get("cite", [])),
        enabled=enabled,
        samples=samples,
        origin=src,
        order=order,
    )


def merge_mechanisms(rs: RuleSet, doc: dict[str, Any], src: str) -> None:
    """Add (or, by id, replace) the ``[[mechanism]]`` rules of one rules file."""
    raw = doc.get("mechanism", [])
    if not isinstance(raw, list):
        raise _err(f"{src}: 'mechanism' must be an array of tables ([[mechanism]])")
    by_id = {r.id: i for i, r in enumerate(rs.mechanisms)}
    for i, item in enumerate(raw):
        rule = build_mechanism(item, src, len(rs.mechanisms) + i)
        if rule.id in by_id:
            rule.order = rs.mechanisms[by_id[rule.id]].order
            rs.mechanisms[by_id[rule.id]] = rule
        else:
            by_id[rule.id] = len(rs.mechanisms)
            rs.mechanisms.append(rule)


def mechanism_known_names() -> set[str]:
    return known_names() | set(MECHANISM_EVIDENCE)


def validate_mechanisms(rs: RuleSet) -> None:
    known = mechanism_known_names()
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
