"""A bundle of several incidents lists each in one line (render.human.unit_line): its headline up to the first
"; " outside parentheses. Before, the cut was at the first "; " anywhere, so a lower bound's own words lost
their end: "inc/b/vllm.log: at least 7 preemptions (counted by vLLM's counter up to 10:00:30; change: ..."."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from preemptlog.render.human import first_clause


@pytest.mark.parametrize(
    ("headline", "first"),
    [
        (
            "at least 7 preemptions (counted by vLLM's counter up to 10:00:30; the log runs to 10:05:40: not counted "
            "after) (engine 0): KV cache exhausted, usage 99.2 %; vLLM V1 preempts ...",
            "at least 7 preemptions (counted by vLLM's counter up to 10:00:30; the log runs to 10:05:40: not counted "
            "after) (engine 0): KV cache exhausted, usage 99.2 %",
        ),
        (
            "1 preemption at 10:01:00 (engine 0): KV-block allocations failed; vLLM V0 preempts",
            "1 preemption at 10:01:00 (engine 0): KV-block allocations failed",
        ),
        ("no clause break at all", "no clause break at all"),
        ("an unclosed (paren; still whole", "an unclosed (paren; still whole"),
        ("a stray) close; then more", "a stray) close"),
    ],
)
def test_first_clause(headline, first):
    assert first_clause(headline) == first


@given(st.text(alphabet="ab(); ", max_size=40))
def test_first_clause_is_a_prefix_with_balanced_cut(text):
    got = first_clause(text)
    assert text.startswith(got)
    if got != text:  # cut at a "; " with every parenthesis before it closed
        assert text[len(got) :].startswith("; ")
        depth = 0
        for ch in got:
            depth = depth + 1 if ch == "(" else max(0, depth - 1) if ch == ")" else depth
        assert depth == 0
