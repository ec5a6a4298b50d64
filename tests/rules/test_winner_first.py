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
