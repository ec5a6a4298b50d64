"""Every rule tests itself: run each rule's sample inputs and compare with its expectation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from .engine import rule_flags
from .model import RuleSet

EVENT_TYPES = {"kind": "String", "mode": "String", "engine": "String", "request_id": "String",
               "cumulative": "Int64", "time_precision": "String"}


@dataclass
class SampleResult:
    rule: str
    index: int
    expect: str
    got: str

    @property
    def ok(self) -> bool:
        return self.expect == self.got


def sample_frame(evidence: dict[str, Any]) -> "pl.DataFrame":
    """A one-row frame with every evidence and event column (null unless given)."""
    from ..frames import PolarsType, polars_dtype
    from ..joiner import polars_schema

    schema: dict[str, PolarsType] = dict(polars_schema())
    for name, t in EVENT_TYPES.items():
        schema[name] = polars_dtype(t)
    schema["event_id"] = pl.String
    schema["source"] = pl.String
    schema["line"] = pl.UInt32
    row: dict[str, Any] = {k: None for k in schema}
    row.update({"event_id": "sample", "source": "sample", "line": 1})
    row.update(evidence)
    return pl.DataFrame([row], schema=schema)


def run_samples(rs: RuleSet) -> list[SampleResult]:
    results = []
    for rule in rs.rules:
        for i, sample in enumerate(rule.samples):
            frame = rule_flags(sample_frame(sample.get("evidence", {})), rs, [rule])
            ev = frame.get_column(f"evaluable__{rule.id}")[0]
            fired = frame.get_column(f"fired__{rule.id}")[0]
            got = "fired" if fired else ("not-fired" if ev else "not-evaluable")
            results.append(SampleResult(rule.id, i + 1, sample["expect"], got))
    from .mechanisms import run_samples as mechanism_samples  # issue 15: the mechanism rules' samples

    results += [SampleResult(rid, i, expect, got) for rid, i, expect, got in mechanism_samples(rs)]
    return results
