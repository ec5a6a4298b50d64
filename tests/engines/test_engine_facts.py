"""The engine code-facts table (preemptlog/engine_facts.py): its shape and its lookups."""

from __future__ import annotations

import re

from preemptlog.engines import facts as F
from preemptlog.rules.model import GATES


def test_every_row_cites_a_source_file_and_names_a_known_gate():
    ids = [f.id for f in F.TABLE]
    assert len(ids) == len(set(ids))
    for f in F.TABLE:
        assert f.engine in (F.VLLM, F.SGLANG)
        assert f.gate in GATES, f.id
        assert re.search(r"[\w/]+\.py", f.source), f"{f.id}: no source file cited"
        assert f.trigger and f.victim and f.shows_as
        if f.since and f.until:
            assert f.since <= f.until


def test_v1_default_trigger_is_a_failed_allocation_whatever_the_version():
    for v in [(0, 8, 3), (0, 11, 1), (0, 32, 0), None]:
        f = F.default_trigger(F.VLLM, "V1", v, "fcfs")
        assert f is not None and f.gate == "G1-kv-space" and f.sub_kind == "capacity"


def test_cache_reset_only_from_0_12():
    ids = lambda v: {f.id for f in F.applicable(F.VLLM, "V1", v, None)}  # noqa: E731
    assert "vllm-v1-reset-prefix-cache" not in ids((0, 11, 1))
    assert "vllm-v1-reset-prefix-cache" in ids((0, 12, 0))


def test_v0_priority_preemption_needs_the_priority_policy():
    assert "G3-queue-overflow" not in F.gates_settled(F.VLLM, "V0", (0, 9, 0), "fcfs")
    assert "G3-queue-overflow" in F.gates_settled(F.VLLM, "V0", (0, 9, 0), "priority")
    # 0.12+: the cache reset (G4 cache-reset); never the guide's G2 or G3
    assert F.gates_settled(F.VLLM, "V1", (0, 32, 0), "priority") == {"G1-kv-space", "G4-prefix-conflict"}
    assert F.gates_settled(F.VLLM, "V1", (0, 11, 1), "fcfs") == {"G1-kv-space"}


def test_the_readme_table_is_generated_from_the_facts():
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert F.markdown_table() in readme, "README table is stale: python -m preemptlog.engines.facts"
