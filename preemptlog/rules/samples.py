"""Every rule tests itself: run each rule's sample inputs and compare with its expectation."""

from __future__ import annotations

from dataclasses import dataclass

from .engine import rule_flags, sample_frame
from .mechanisms import run_samples as mechanism_samples
from .model import RuleSet


@dataclass
class SampleResult:
    rule: str
    index: int
    expect: str
    got: str

    @property
    def ok(self) -> bool:
        return self.expect == self.got


def run_samples(rs: RuleSet) -> list[SampleResult]:
    results = []
    for rule in rs.rules:
        for i, sample in enumerate(rule.samples):
            frame = rule_flags(sample_frame(sample.get("evidence", {})), rs, [rule])
            ev = frame.get_column(f"evaluable__{rule.id}")[0]
            fired = frame.get_column(f"fired__{rule.id}")[0]
            got = "fired" if fired else ("not-fired" if ev else "not-evaluable")
            results.append(SampleResult(rule.id, i + 1, sample["expect"], got))

    results += [SampleResult(rid, i, expect, got) for rid, i, expect, got in mechanism_samples(rs)]
    return results
