"""Column-wise evaluation of a RuleSet over all events at once.

Input: one row per event with the event columns and the joiner's evidence
columns (``<name>`` and ``<name>_src``, config ``<name>_status``). Output
(``VERDICT_SCHEMA``): one row per event.

- ``gate`` / ``sub_kind`` / ``rule`` / ``confidence``: from the fired rule of
  lowest priority; ``undetermined`` (null sub_kind, rule, confidence "none")
  when no rule fired.
- ``gates_fired``: every gate with a fired rule (the guide: any one can trigger).
- ``not_evaluable``: every gate none of whose rules could be evaluated, with
  the evidence it lacked (``{gate, missing, needs}``).
- ``evidence``: the chosen rule's cited values ``{name, value, threshold, src}``
  (nulls dropped).
- ``notes``: the chosen rule's note on how upstream vLLM differs, and a note
  when a cited value is a default preemptlog assumed.

No Python runs per event: every rule becomes polars expressions over columns. The
verdict is found in two steps (:func:`first_true`, :func:`per_winner`): the index of the
first rule that counts, one small integer per event, and then the chosen rule's values for
the rules that won somewhere only (polars evaluates every branch of a when/then chain on
every row: the cited values of every rule cost ~60 ms on one event).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import polars as pl

from ..joiner import polars_schema
from ..model.frames import PolarsType, polars_dtype, provenance_expr
from . import expr as E
from .model import GATES, Rule, RuleSet

UNDETERMINED = "undetermined"
_DOWNGRADE = {"high": "medium", "medium": "low", "low": "low"}


class Compiler:
    """Names -> polars expressions (values and provenance) for one RuleSet."""

    def __init__(self, rs: RuleSet, columns: set[str]) -> None:
        self.rs = rs
        self.columns = columns
        self.thresholds = rs.threshold_values()
        self._derived: dict[str, pl.Expr] = {}
        self._derived_src: dict[str, pl.Expr] = {}

    def value(self, name: str) -> pl.Expr:
        if name in self.rs.derived:
            if name not in self._derived:
                node = E.parse(self.rs.derived[name])
                self._derived[name] = E.compile_expr(node, self.value, self.thresholds)
            return self._derived[name]
        if name in self.columns:
            return pl.col(name)
        return pl.lit(None)

    def src(self, name: str) -> pl.Expr:
        """Provenance of a name: its _src column, the event's file:line, or (derived) its inputs'."""
        if name in self.rs.derived:
            if name not in self._derived_src:
                self._derived_src[name] = self._src_of_node(E.parse(self.rs.derived[name]))
            return self._derived_src[name]
        if f"{name}_src" in self.columns:
            return pl.col(f"{name}_src")
        if name in self.columns and "source" in self.columns:
            return provenance_expr()
        return pl.lit(None, pl.String)

    def _src_of_node(self, node: E.Node) -> pl.Expr:
        # coalesce(a, b, ...): the provenance of the first value present.
        if isinstance(node, E.Call) and node.func == "coalesce":
            expr: Any = None  # a when/then chain
            for arg in node.args:
                v = E.compile_expr(arg, self.value, self.thresholds)
                s = self._src_of_node(arg)
                expr = pl.when(v.is_not_null()).then(s) if expr is None else expr.when(v.is_not_null()).then(s)
            return expr.otherwise(pl.lit(None, pl.String)) if expr is not None else pl.lit(None, pl.String)
        if isinstance(node, E.Name):
            return self.src(node.name)
        used, _ = E.names(node)
        parts = [self.src(n) for n in sorted(used)]
        if not parts:
            return pl.lit(None, pl.String)
        return (
            pl.concat_list(parts).list.drop_nulls().list.unique(maintain_order=True).list.join("; ").replace("", None)
        )

    def expr(self, text: str) -> pl.Expr:
        return E.compile_expr(E.parse(text), self.value, self.thresholds)

    def present(self, name: str) -> pl.Expr:
        return self.value(name).is_not_null()


def _cite_items(c: Compiler, items: Sequence[str]) -> list[pl.Expr]:
    """One struct ``{name, value, threshold, src}`` per item a rule cites (items it cannot cite are
    skipped: :func:`has_cites`)."""
    structs = []
    for item in items:
        node = E.parse(item)
        if not _citable(node):
            continue
        if isinstance(node, E.Binary):
            assert isinstance(node.left, E.Name)
            name = node.left.name
            right = E.compile_expr(node.right, c.value, c.thresholds)
            rtext = item.split(node.op, 1)[1].strip()
            is_lit = isinstance(node.right, (E.Num, E.Threshold))
            thr_val = _value_text(right)
            threshold = pl.concat_str(
                [pl.lit(node.op + " "), thr_val]
                + ([] if is_lit else [pl.lit(f" ({rtext})")])
                + ([pl.lit(f" (${node.right.name})")] if isinstance(node.right, E.Threshold) else [])
            )
            right_src = None if is_lit else _src_for(c, node.right)
        else:
            assert isinstance(node, E.Name)
            name = node.name
            threshold = pl.lit(None, pl.String)
            right_src = None
        value = _value_text(c.value(name))
        src = c.src(name)
        if right_src is not None:
            src = both_lines(src, right_src)
        structs.append(
            pl.struct(
                pl.lit(name).alias("name"),
                value.alias("value"),
                threshold.cast(pl.String).alias("threshold"),
                src.cast(pl.String).replace("", None).alias("src"),
            )
        )
    return structs


def both_lines(a: pl.Expr, b: pl.Expr) -> pl.Expr:
    """The lines of two values, each once, "; " between them; an empty text when neither has one
    (the list [a, b] without nulls, unique, joined: made without a list per row)."""
    a, b = a.cast(pl.String), b.cast(pl.String)
    return (
        pl.when(a.is_null() & b.is_null())
        .then(pl.lit(""))
        .when(a.is_null())
        .then(b)
        .when(b.is_null() | (a == b))
        .then(a)
        .otherwise(pl.concat_str([a, pl.lit("; "), b]))
    )


def _cite_structs(c: Compiler, items: list[str], frame_schema: dict[str, Any]) -> pl.Expr:
    """The cited values of one rule as a list per row, those with a value only (null: nothing citable)."""
    structs = _cite_items(c, items)
    if not structs:
        return pl.lit(None)
    lst = pl.concat_list(structs)
    return lst.list.eval(pl.element().filter(pl.element().struct.field("value").is_not_null()))


def cited_lists(
    df: pl.DataFrame,
    won: Sequence[int],
    items_of: Callable[[int], Sequence[str]],
    c: Compiler,
    dtype: Any,
    keep: Callable[[pl.Expr], pl.Expr] | None = None,
) -> pl.Series:
    """Per row of ``df``: :func:`_cite_structs` of the items of the rule that won it (``items_of``
    its :data:`WINNER` index), the structs ``keep`` accepts; null where no rule won or the winner
    cites nothing. ``dtype``: :data:`EVIDENCE_DTYPE`, or ``pl.Null`` when no candidate rule cites
    anything (the type the chain of every rule had). Made by :func:`lists_per_row` on the winners'
    own rows: a list of structs built and filtered per row costs ~10 us a row."""
    items, listed = [], []
    for i in won:
        structs = _cite_items(c, items_of(i))
        if structs:
            listed.append(i)
            items += [(pl.col(WINNER) == i, st) for st in structs]
    if not listed:
        return pl.Series("_v", [None] * df.height, dtype=dtype)

    def cited(v: pl.Expr) -> pl.Expr:  # a value to cite, and one ``keep`` accepts
        ok = v.struct.field("value").is_not_null()
        return ok if keep is None else ok & keep(v)

    lists = lists_per_row(df, items, EVIDENCE_DTYPE.inner, keep=cited)
    return df.select(pl.when(pl.col(WINNER).is_in(listed)).then(lists).alias("_v")).get_column("_v")


def _src_for(c: Compiler, node: E.Node) -> pl.Expr:
    return c._src_of_node(node)


def _value_text(v: pl.Expr) -> pl.Expr:
    """Render any scalar as text: integers without '.0', floats rounded to 3 places."""
    f = v.cast(pl.Float64, strict=False)
    num_text = (
        pl.when(f % 1 == 0).then(f.cast(pl.Int64, strict=False).cast(pl.String)).otherwise(f.round(3).cast(pl.String))
    )
    return (
        pl.when(f.is_not_null() & v.cast(pl.String, strict=False).str.contains(r"^-?[0-9.eE+]+$"))
        .then(num_text)
        .otherwise(v.cast(pl.String, strict=False))
    )


def used_names(rs: RuleSet, extra: Sequence[str] = ()) -> set[str]:
    """Every evidence/event name the active rules (and ``extra`` names) read, derived values expanded."""
    names: set[str] = set()
    todo: list[str] = list(extra)
    for r in rs.active:
        for text in [r.when, *r.cite] + ([r.upstream_when] if r.upstream_when else []):
            todo += sorted(E.names(E.parse(text))[0])
        todo += r.requires + r.requires_any + r.assumption_sensitive
    todo.append("guide_model")
    seen: set[str] = set()
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        if n in rs.derived:
            todo += sorted(E.names(E.parse(rs.derived[n]))[0])
        else:
            names.add(n)
    return names


def rule_flags(frame: pl.DataFrame, rs: RuleSet, rules: list[Rule] | None = None) -> pl.DataFrame:
    """Per rule: ``evaluable__<id>`` and ``fired__<id>`` boolean columns (nulls count as false)."""
    c = Compiler(rs, set(frame.columns))
    cols = []
    for r in rules if rules is not None else rs.active:
        ev = pl.lit(True)
        for n in r.requires:
            ev = ev & c.present(n)
        if r.requires_any:
            any_ = pl.lit(False)
            for n in r.requires_any:
                any_ = any_ | c.present(n)
            ev = ev & any_
        fired = ev & c.expr(r.when).fill_null(False)
        cols += [ev.fill_null(False).alias(f"evaluable__{r.id}"), fired.fill_null(False).alias(f"fired__{r.id}")]
        # guide_only: the guide's patched-scheduler mechanism; on an upstream log it only counts
        # where upstream_when holds (issue 13 rule 5).
        ok = _eligible(r, c)
        cols.append((fired & ok).fill_null(False).alias(f"counts__{r.id}"))
        cols.append((fired & ~ok).fill_null(False).alias(f"guide__{r.id}"))
    return frame.with_columns(cols)


def _eligible(r: Rule, c: Compiler) -> pl.Expr:
    if r.upstream_only:
        # upstream vLLM's own code: on a bundle of the guide's patched scheduler the guide's gates judge
        return ~pl.col("guide_model").fill_null(False) if "guide_model" in c.columns else pl.lit(True)
    if not r.guide_only:
        return pl.lit(True)
    gm = pl.col("guide_model").fill_null(True) if "guide_model" in c.columns else pl.lit(True)
    if r.upstream_when:
        gm = gm | c.expr(r.upstream_when).fill_null(False)
    return gm


def _assumed(r: Rule, columns: set[str] | list[str]) -> pl.Expr:
    """True where the rule read one of its assumption-sensitive values from preemptlog's defaults."""
    assumed = pl.lit(False)
    for n in r.assumption_sensitive:
        if f"{n}_status" in columns:
            assumed = assumed | (pl.col(f"{n}_status") == "default").fill_null(False)
    return assumed


# The cited values of a rule (_cite_structs): a list of these structs per event.
EVIDENCE_DTYPE = pl.List(pl.Struct({"name": pl.String, "value": pl.String, "threshold": pl.String, "src": pl.String}))
WINNER = "_winner"  # the column of first_true's index (dropped from every output)


def first_true(conds: Sequence[pl.Expr]) -> pl.Expr:
    """The index of the first condition that holds on a row (a null condition does not hold),
    null where none does."""
    expr: Any = None  # a when/then chain of small integers
    for i, cond in enumerate(conds):
        lit = pl.lit(i, pl.Int32)
        expr = pl.when(cond).then(lit) if expr is None else expr.when(cond).then(lit)
    return pl.lit(None, pl.Int32) if expr is None else expr.otherwise(pl.lit(None, pl.Int32))


def winners(df: pl.DataFrame) -> list[int]:
    """The indexes in ``df``'s :data:`WINNER` column, each once, in order."""
    return sorted(int(i) for i in df.get_column(WINNER).drop_nulls().unique().to_list())


def per_winner(won: Sequence[int], value: Callable[[int], pl.Expr], default: pl.Expr) -> pl.Expr:
    """``value(i)`` on the rows whose :data:`WINNER` is ``i``, for the indexes in ``won`` (the
    ones :func:`winners` found), ``default`` elsewhere: the chain of every candidate in order,
    with only the branches that can be taken."""
    expr: Any = None
    for i in won:
        cond = pl.col(WINNER) == i
        expr = pl.when(cond).then(value(i)) if expr is None else expr.when(cond).then(value(i))
    return default if expr is None else expr.otherwise(default)


def has_cites(items: Sequence[str]) -> bool:
    """Whether :func:`_cite_structs` gives ``items`` a list (it skips items it cannot cite)."""
    return any(_citable(E.parse(item)) for item in items)


def _citable(node: E.Node) -> bool:
    return isinstance(node, E.Name) or (
        isinstance(node, E.Binary) and node.op in _COMPARE and isinstance(node.left, E.Name)
    )


_COMPARE = ("<", "<=", ">", ">=", "==", "!=")


def evaluate(frame: pl.DataFrame, rs: RuleSet) -> pl.DataFrame:
    """Verdicts for every row of ``frame`` (events joined with evidence)."""
    rules = rs.active
    df = rule_flags(frame, rs, rules)
    c = Compiler(rs, set(frame.columns))

    # Verdict order: every rule that fired on the bundle's own evidence, by priority; then
    # those that fired only because of an assumed default (they support, never overturn).
    order = [(r, pl.col(f"counts__{r.id}") & ~_assumed(r, df.columns)) for r in rules]
    order += [(r, pl.col(f"counts__{r.id}") & _assumed(r, df.columns)) for r in rules if r.assumption_sensitive]
    df = df.with_columns(first_true([cond for _, cond in order]).alias(WINNER))
    won = winners(df)

    def chain(values: Callable[[Rule], pl.Expr], default: pl.Expr) -> pl.Expr:
        return per_winner(won, lambda i: values(order[i][0]), default)

    # the cited values' type whichever rules won (the chain of every rule had it)
    cited = EVIDENCE_DTYPE if any(has_cites(r.cite) for r, _ in order) else pl.Null

    def downgraded(r: Rule) -> pl.Expr:
        return pl.when(_assumed(r, df.columns)).then(pl.lit(_DOWNGRADE[r.confidence])).otherwise(pl.lit(r.confidence))

    def assumed_note(r: Rule) -> pl.Expr:
        parts = []
        for n in r.assumption_sensitive:
            if f"{n}_status" in df.columns:
                parts.append(
                    pl.when(pl.col(f"{n}_status") == "default").then(
                        pl.lit(f"{n} is not stated in the bundle; the verdict used preemptlog's assumed default")
                    )
                )
        return pl.concat_list(parts) if parts else pl.lit([], pl.List(pl.String))

    out = df.select(
        "event_id",
        chain(lambda r: pl.lit(r.gate), pl.lit(UNDETERMINED)).alias("gate"),
        chain(lambda r: pl.lit(r.sub_kind, pl.String), pl.lit(None, pl.String)).alias("sub_kind"),
        chain(lambda r: pl.lit(r.id), pl.lit(None, pl.String)).alias("rule"),
        chain(downgraded, pl.lit("none")).alias("confidence"),
        _gates_fired(rules).alias("gates_fired"),
        _not_evaluable(rules, rs, c).alias("not_evaluable"),
        chain(
            lambda r: pl.concat_list(
                [pl.lit([r.upstream_note] if r.upstream_note else [], pl.List(pl.String)), assumed_note(r)]
            ),
            pl.lit([], pl.List(pl.String)),
        )
        .list.concat(_guide_notes(rules))
        .list.drop_nulls()
        .alias("notes"),
    )
    out = out.insert_column(out.columns.index("notes"), _not_in_upstream(df, rules, c).alias("not_in_upstream"))
    evidence = cited_lists(df, won, lambda i: order[i][0].cite, c, cited)
    return out.insert_column(out.columns.index("notes"), evidence.alias("evidence"))


def _guide_notes(rules: list[Rule]) -> pl.Expr:
    """Guide-only rules that fired on an upstream log: listed, never the verdict."""
    parts = [
        pl.when(pl.col(f"guide__{r.id}")).then(
            pl.lit(
                f"fired on the guide's model only: {r.gate} (rule {r.id}); this log shows no debug-hook or "
                "PREEMPTED marker lines of a patched scheduler, so the verdict follows upstream vLLM"
                + (f" ({r.upstream_note})" if r.upstream_note else "")
            )
        )
        for r in rules
        if r.guide_only
    ]
    return pl.concat_list(parts) if parts else pl.lit([], pl.List(pl.String))


def _gates_fired(rules: list[Rule]) -> pl.Expr:
    """Every gate with a rule that counts, each once, in gate order G1..G4 (sorted names: a
    per-row unique and sort of the list cost 14 us a row)."""
    gates = sorted({r.gate for r in rules})
    if not gates:
        return pl.lit([], pl.List(pl.String))
    parts = [
        pl.when(pl.any_horizontal(pl.col(f"counts__{r.id}") for r in rules if r.gate == g)).then(pl.lit(g))
        for g in gates
    ]
    return pl.concat_list(parts).list.drop_nulls()


def _upstream_excludes(gate: str, c: Compiler) -> pl.Expr:
    """True where the event is upstream vLLM's and its engine's code cannot produce ``gate``
    (joiner/code.py ``code_not_gates``): the gate is "not in upstream", never "not evaluable"."""
    if "code_not_gates" not in c.columns:
        return pl.lit(False)
    upstream = ~pl.col("guide_model").fill_null(False) if "guide_model" in c.columns else pl.lit(True)
    return (upstream & pl.col("code_not_gates").str.contains(gate, literal=True)).fill_null(False)


NOT_IN_UPSTREAM_ITEM = pl.Struct({"gate": pl.String, "why": pl.String})


def _not_in_upstream(df: pl.DataFrame, rules: list[Rule], c: Compiler) -> pl.Series:
    """Per event: the gates its engine's upstream code cannot produce, each with why (``{gate, why}``)."""
    items = []
    for gate in GATES:
        note = next((r.upstream_note for r in rules if r.gate == gate and r.guide_only and r.upstream_note), "")
        engine = pl.col("code_engine") if "code_engine" in c.columns else pl.lit("upstream vLLM")
        why = pl.concat_str([pl.lit("not in "), engine.fill_null("upstream vLLM"), pl.lit(f": {note}" if note else "")])
        item = pl.struct(pl.lit(gate).alias("gate"), why.alias("why"))
        fired = pl.lit(False)
        for r in rules:
            if r.gate == gate:
                fired = fired | pl.col(f"counts__{r.id}")
        items.append((_upstream_excludes(gate, c) & ~fired, item))
    return lists_per_row(df, items, NOT_IN_UPSTREAM_ITEM)


def lists_per_row(
    df: pl.DataFrame,
    items: Sequence[tuple[pl.Expr, pl.Expr]],
    inner: Any,
    unique: bool = False,
    keep: Callable[[pl.Expr], pl.Expr] | None = None,
) -> pl.Series:
    """Per row of ``df``: the values of the ``(condition, value)`` items whose condition holds and
    that ``keep`` accepts, in item order (an empty list when none; ``unique``: each value once,
    where it first came). A value is computed on its condition's rows only. Made
    in long form, one row per value and then a list per row: ``concat_list`` per row and a list's
    ``unique`` cost ~5-14 us a row."""
    rows = df.lazy().with_row_index("_r")
    dtype = pl.List(inner)
    if not items:
        return pl.Series("_v", [[]] * df.height, dtype=dtype)
    parts = [
        rows.filter(cond.fill_null(False)).select("_r", pl.lit(k, pl.UInt16).alias("_k"), value.cast(inner).alias("_v"))
        for k, (cond, value) in enumerate(items)
    ]
    if keep is not None:
        parts = [p.filter(keep(pl.col("_v"))) for p in parts]
    long = pl.concat(parts, how="vertical").sort("_r", "_k")
    if unique:
        long = long.unique(subset=["_r", "_v"], keep="first", maintain_order=True)
    per_row = long.group_by("_r", maintain_order=True).agg(pl.col("_v"))
    out = rows.select("_r").join(per_row, on="_r", how="left", maintain_order="left")
    return out.select(pl.col("_v").fill_null(pl.lit([], dtype)).cast(dtype)).collect().get_column("_v")


def _not_evaluable(rules: list[Rule], rs: RuleSet, c: Compiler) -> pl.Expr:
    items = []
    for gate in GATES:
        gr = [r for r in rules if r.gate == gate]
        any_eval = pl.lit(False)
        missing_names: list[str] = []
        for r in gr:
            flag = "fired" if r.only_when_fired else "evaluable"
            any_eval = any_eval | pl.col(f"{flag}__{r.id}")
            if r.only_when_fired:
                continue
            for n in r.requires + r.requires_any:
                if n not in missing_names:
                    missing_names.append(n)
        missing = (
            pl.concat_list([pl.when(~c.present(n)).then(pl.lit(n)) for n in missing_names])
            if missing_names
            else pl.lit([], pl.List(pl.String))
        )
        item = pl.struct(
            pl.lit(gate).alias("gate"),
            missing.list.drop_nulls().alias("missing"),
            pl.lit(rs.gates_help.get(gate, "")).alias("needs"),
        )
        items.append(pl.when(~any_eval & ~_upstream_excludes(gate, c)).then(item))
    return pl.concat_list(items).list.drop_nulls()


# The columns evaluate() decides; rules.verdicts.VERDICT_COLUMNS adds the factors and fixes.
ENGINE_COLUMNS = [
    "gate",
    "sub_kind",
    "rule",
    "confidence",
    "gates_fired",
    "not_evaluable",
    "not_in_upstream",
    "evidence",
    "notes",
]


def fired_rules(frame: pl.DataFrame, rs: RuleSet) -> list[list[dict[str, Any]]]:
    """Per row of ``frame``: every rule that fired, with its gate, the values it cited and their lines.

    Each item: ``{gate, sub_kind, rule, counts, evidence}``; ``counts`` is false for a
    guide-only rule on an upstream log (listed, never the verdict). For ``explain``: the
    step or interval and the lines that decided each fired gate.
    """
    rules = rs.active
    if frame.height == 0 or not rules:
        return [[] for _ in range(frame.height)]
    df = rule_flags(frame, rs, rules)
    c = Compiler(rs, set(frame.columns))
    parts = [
        pl.when(pl.col(f"fired__{r.id}")).then(
            pl.struct(
                pl.lit(r.gate).alias("gate"),
                pl.lit(r.sub_kind, pl.String).alias("sub_kind"),
                pl.lit(r.id).alias("rule"),
                pl.col(f"counts__{r.id}").alias("counts"),
                _cite_structs(c, r.cite, df.schema).alias("evidence"),
            )
        )
        for r in rules
    ]
    return df.select(pl.concat_list(parts).list.drop_nulls().alias("_f")).get_column("_f").to_list()


# The event columns a rule sample may give (rules/samples.py, rules/mechanisms.py).
EVENT_TYPES = {
    "kind": "String",
    "mode": "String",
    "engine": "String",
    "engine_kind": "String",
    "request_id": "String",
    "cumulative": "Int64",
    "time_precision": "String",
}


def sample_frame(evidence: dict[str, Any]) -> pl.DataFrame:
    """A one-row frame with every evidence and event column (null unless given)."""

    schema: dict[str, PolarsType] = dict(polars_schema())
    for name, t in EVENT_TYPES.items():
        schema[name] = polars_dtype(t)
    schema["event_id"] = pl.String
    schema["guide_model"] = pl.Boolean  # model.BUNDLE_NAMES
    schema["source"] = pl.String
    schema["line"] = pl.UInt32
    row: dict[str, Any] = {k: None for k in schema}
    row.update({"event_id": "sample", "source": "sample", "line": 1})
    row.update(evidence)
    return pl.DataFrame([row], schema=schema)
