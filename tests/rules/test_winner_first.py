"""The verdict and the mechanism are found winner first (rules/engine.py ``first_true`` and
``per_winner``): the index of the first rule that counts, then the values of the rules that won
somewhere only. These tests hold it to the chain over every rule, which it replaced."""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from preemptlog.rules import engine, mechanisms
from preemptlog.rules.model import load_rules


def _frame(rs) -> pl.DataFrame:
    """One row per sample of every gate and mechanism rule, each also with every assumed value
    marked as preemptlog's default and with the guide's model on and off: rows that different
    rules win, rows none wins, rows won only on an assumption."""
    rows = []
    samples = [s.get("evidence", {}) for r in rs.rules for s in r.samples]
    samples += [s.get("evidence", {}) for r in rs.mechanisms for s in r.samples]
    assert len(samples) > 20
    for ev in samples:
        base = mechanisms.sample_frame(ev)
        rows.append(base)
        statuses = [c for c in base.columns if c.endswith("_status")]
        rows.append(base.with_columns(pl.lit("default").alias(c) for c in statuses))
        if "code_not_gates" in base.columns:  # an engine whose code cannot produce some gates
            gates = ",".join(engine.GATES[1:])
            rows.append(base.with_columns(pl.lit(gates).alias("code_not_gates")))
            if "code_engine" in base.columns:
                rows.append(
                    base.with_columns(
                        pl.lit(gates).alias("code_not_gates"), pl.lit("vLLM 0.34 V1").alias("code_engine")
                    )
                )
        if "guide_model" in base.columns:
            rows.append(base.with_columns(pl.lit(True).alias("guide_model")))
            rows.append(base.with_columns(pl.lit(False).alias("guide_model")))
    df = pl.concat(rows, how="vertical_relaxed")
    return df.with_columns(pl.format("e{}", pl.int_range(pl.len())).alias("event_id"))


def test_verdicts_equal_the_chain_over_every_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    rs = load_rules()
    frame = _frame(rs)
    got = engine.evaluate(frame, rs)
    won = got.get_column("rule").drop_nulls().n_unique()
    assert won >= 5, "the frame should let several rules win"
    assert got.get_column("rule").null_count() > 0, "and leave some events undetermined"
    monkeypatch.setattr(engine, "winners", lambda df: _all(df, _candidates(rs)))
    want = engine.evaluate(frame, rs)
    assert got.schema == want.schema
    assert got.equals(want)


def test_one_event_keeps_the_schema_of_every_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """An event no rule wins (no branch taken) has the evidence type the chain of every rule had."""
    rs = load_rules()
    frame = _frame(rs)
    got = engine.evaluate(frame.head(0), rs)
    monkeypatch.setattr(engine, "winners", lambda df: _all(df, _candidates(rs)))
    want = engine.evaluate(frame.head(0), rs)
    assert got.schema == want.schema
    assert got.schema["evidence"] == engine.EVIDENCE_DTYPE


def test_mechanisms_equal_the_chain_over_every_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    rs = load_rules()
    frame = _frame(rs)
    got = mechanisms.evaluate(frame, rs)
    assert got.get_column("mechanism_rule").drop_nulls().n_unique() >= 3
    monkeypatch.setattr(mechanisms, "winners", lambda df: _all(df, len(mechanisms.active(rs))))
    want = mechanisms.evaluate(frame, rs)
    assert got.schema == want.schema
    assert got.equals(want)
    assert mechanisms.evaluate(frame.head(0), rs).schema == want.schema


def _candidates(rs) -> int:
    """The verdict chain's length: every rule, then the assumption-sensitive ones again."""
    return len(rs.active) + sum(1 for r in rs.active if r.assumption_sensitive)


def _all(df: pl.DataFrame, n: int) -> list[int]:
    assert engine.WINNER in df.columns
    return list(range(n))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.sampled_from([True, False, None]), min_size=6, max_size=6), min_size=1, max_size=12))
def test_first_true_is_the_first_condition_that_holds(rows: list[list[bool | None]]) -> None:
    df = pl.DataFrame(rows, schema={f"c{i}": pl.Boolean for i in range(6)}, orient="row")
    got = df.select(engine.first_true([pl.col(f"c{i}") for i in range(6)]).alias("w")).get_column("w").to_list()
    want = [next((i for i, v in enumerate(r) if v is True), None) for r in rows]
    assert got == want
    none = df.with_columns(engine.first_true([]).alias("w")).get_column("w")
    assert none.to_list() == [None] * len(rows)


def test_evidence_equals_the_lists_made_per_row() -> None:
    """The long-form cited values (rules/engine.py ``cited_lists``) against the lists built and
    filtered per row over every candidate rule, the formulation they replaced."""
    rs = load_rules()
    frame = _frame(rs)
    got = engine.evaluate(frame, rs).get_column("evidence")
    df = engine.rule_flags(frame, rs, rs.active)
    c = engine.Compiler(rs, set(frame.columns))
    order = [(r, pl.col(f"counts__{r.id}") & ~engine._assumed(r, df.columns)) for r in rs.active]
    order += [
        (r, pl.col(f"counts__{r.id}") & engine._assumed(r, df.columns)) for r in rs.active if r.assumption_sensitive
    ]
    df = df.with_columns(engine.first_true([cond for _, cond in order]).alias(engine.WINNER))
    every = list(range(len(order)))
    want = df.select(
        engine.per_winner(every, lambda i: engine._cite_structs(c, order[i][0].cite, df.schema), pl.lit(None))
        .cast(engine.EVIDENCE_DTYPE)
        .alias("evidence")
    ).get_column("evidence")
    assert got.null_count() < got.len() and got.list.len().max() > 1
    assert got.equals(want)

    mrules = mechanisms.active(rs)
    mdf = mechanisms.flags(frame, rs, mrules)
    mdf = mdf.with_columns(engine.first_true([pl.col(f"mfired__{r.id}") for r in mrules]).alias(engine.WINNER))
    mwant = mdf.select(
        engine.per_winner(
            list(range(len(mrules))), lambda i: engine._cite_structs(c, mrules[i].cite, mdf.schema), pl.lit(None)
        )
        .cast(engine.EVIDENCE_DTYPE)
        .list.eval(pl.element().filter(pl.element().struct.field("src").is_not_null()))
        .alias("e")
    ).get_column("e")
    mout = mechanisms.evaluate(frame, rs)
    mgot = mout.get_column("mechanism_evidence")
    assert mgot.null_count() < mgot.len()
    assert mgot.equals(mwant)
    # what the unevaluable mechanism rules lacked, as the lists built per row gave it
    any_fired = pl.any_horizontal([pl.col(f"mfired__{r.id}") for r in mrules])
    parts = [
        pl.when(~c.present(n) & mechanisms._applies(r, frame)).then(pl.lit(f"{r.mechanism}: {n}"))
        for r in mrules
        for n in r.requires + r.requires_any
    ]
    missing = pl.concat_list(parts).list.drop_nulls().list.unique(maintain_order=True)
    old = mdf.select(pl.when(any_fired).then(pl.lit([], pl.List(pl.String))).otherwise(missing).alias("m"))
    assert mout.get_column("mechanism_missing").list.len().max() > 1
    assert mout.get_column("mechanism_missing").to_list() == old.get_column("m").to_list()


_TEXT = st.one_of(st.none(), st.sampled_from(["", "a.log:1", "b.log:2", "a.log:1; b.log:2", "x"]))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_TEXT, _TEXT), min_size=1, max_size=20))
def test_both_lines_is_the_unique_join_of_the_two(pairs: list[tuple[str | None, str | None]]) -> None:
    df = pl.DataFrame(pairs, schema={"a": pl.String, "b": pl.String}, orient="row")
    got = df.select(engine.both_lines(pl.col("a"), pl.col("b")).alias("s")).get_column("s").to_list()
    want = ["; ".join(dict.fromkeys(v for v in (a, b) if v is not None)) for a, b in pairs]
    assert got == want


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.sampled_from([True, False, None]), min_size=4, max_size=4), min_size=0, max_size=15))
def test_lists_per_row_equal_the_lists_built_per_row(rows: list[list[bool | None]]) -> None:
    """``lists_per_row`` (long form) against ``concat_list`` of when/then items without nulls."""
    df = pl.DataFrame(rows, schema={f"c{i}": pl.Boolean for i in range(4)}, orient="row").with_columns(
        w=pl.format("w{}", pl.int_range(pl.len()))
    )
    inner = pl.Struct({"gate": pl.String, "why": pl.String})
    items = [
        (
            pl.col(f"c{i}"),
            pl.struct(pl.lit(f"G{i}").alias("gate"), pl.concat_str([pl.lit("x"), pl.col("w")]).alias("why")),
        )
        for i in range(4)
    ]
    got = engine.lists_per_row(df, items, inner)
    want = df.select(pl.concat_list([pl.when(c).then(v) for c, v in items]).list.drop_nulls().alias("_v")).get_column(
        "_v"
    )
    assert got.dtype == pl.List(inner) and got.len() == df.height
    assert got.to_list() == want.to_list()
    # each value once, where it first came (two items say the same text)
    texts = [(pl.col(f"c{i}"), pl.lit(f"t{i % 2}")) for i in range(4)]
    got = engine.lists_per_row(df, texts, pl.String, unique=True)
    want = df.select(
        pl.concat_list([pl.when(c).then(v) for c, v in texts]).list.drop_nulls().list.unique(maintain_order=True)
    ).to_series()
    assert got.to_list() == want.to_list()


def test_the_verdict_columns_keep_their_order() -> None:
    rs = load_rules()
    got = engine.evaluate(_frame(rs), rs)
    assert got.columns == ["event_id", *engine.ENGINE_COLUMNS]
    assert got.get_column("not_in_upstream").list.len().max() > 0
