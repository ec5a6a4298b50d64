"""The supported matrix (issue 37 item 6): docs/support.md, and the code-facts rows of 0.33 and 0.34.

From 0.33, under ``--scheduling-policy priority``, a lowest-priority request that preempts itself
no longer stops the running loop (vllm/v1/core/sched/scheduler.py of the 0.33.0 and 0.34.0 wheels;
0.32.0 breaks out of it). The facts table splits vLLM V1's priority row by release; a bundle that
does not show its version keeps the general row.
"""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest

from preemptlog.analysis import AnalyzeOptions, analyze
from preemptlog.engines import facts as F

from ..conftest import ROOT

DOCS = ROOT / "docs"


@pytest.mark.parametrize(
    ("version", "policy", "row"),
    [
        ((0, 34, 0), "priority", "vllm-v1-alloc-failed-priority-0.33"),
        ((0, 33, 0), "priority", "vllm-v1-alloc-failed-priority-0.33"),
        ((0, 32, 0), "priority", "vllm-v1-alloc-failed-priority-0.32"),
        ((0, 9, 2), "priority", "vllm-v1-alloc-failed-priority-0.32"),
        ((0, 9, 1), "priority", "vllm-v1-alloc-failed"),
        (None, "priority", "vllm-v1-alloc-failed"),  # the version not shown: the general row
        ((0, 34, 0), "fcfs", "vllm-v1-alloc-failed"),
        ((0, 33, 0), "fcfs", "vllm-v1-alloc-failed"),
    ],
)
def test_the_priority_loop_row_of_each_release(version, policy, row):
    f = F.default_trigger(F.VLLM, "V1", version, policy)
    assert f is not None and f.id == row
    assert (f.gate, f.sub_kind, f.mechanism) == ("G1-kv-space", "capacity", "kv-capacity")


def test_the_033_and_034_rows_cite_the_files_they_were_read_from():
    by_id = {f.id: f for f in F.TABLE}
    new = by_id["vllm-v1-alloc-failed-priority-0.33"]
    old = by_id["vllm-v1-alloc-failed-priority-0.32"]
    assert new.since == (0, 33, 0) and new.until is None and new.needs_version
    assert old.until == (0, 32, 0) and old.needs_version
    for f in (new, old):
        assert "vllm/v1/core/sched/scheduler.py" in f.source
    assert "0.33.0 lines" in new.source and "0.34.0 lines" in new.source and "0.32.0 lines" in old.source
    assert "goes on" in new.victim and "stops" in old.victim
    assert F.NEWEST_VLLM_READ == (0, 34, 0)
    # the gates a 0.34 scheduler can produce are those of 0.32
    assert F.gates_settled(F.VLLM, "V1", (0, 34, 0), "priority") == {"G1-kv-space", "G4-prefix-conflict"}
    # the generated tables carry the new rows
    table = F.markdown_table()
    assert "| vLLM V1 | 0.33.0+ | priority |" in table and "| vLLM V1 | 0.9.2-0.32.0 | priority |" in table


def test_a_034_priority_bundle_cites_the_034_lines(tmp_path: Path):
    lines = [
        "INFO 12-01 09:59:30 [startup.py:40] vLLM server version 0.34.0, serving model m",
        "INFO 12-01 09:59:30 [startup.py:96] non-default args: {'model_tag': 'm', 'scheduling_policy': 'priority'}",
        "(RustFrontend pid=3) INFO 12-01 10:00:10 [llm/src/log_stats.rs:300] Avg prompt tput: 1.0 toks/s, Avg "
        "generation tput: 2.0 toks/s, Reqs Running: 9, Waiting: 4, Preemptions: 2, GPU KV cache used: 99.0%, "
        "Prefix cache hit rate: 0.0%",
    ]
    p = tmp_path / "vllm.log"
    p.write_text("\n".join(lines) + "\n")
    a = analyze([str(p)], AnalyzeOptions(tz="UTC", year=2026))
    ev = a.evidence.select("code_engine", "code_trigger_src").unique()
    assert ev.height == 1
    row = ev.row(0, named=True)
    assert row["code_engine"] == "vLLM V1 0.34.0 (priority)"
    assert "0.34.0 lines 928-1010" in row["code_trigger_src"]
    assert set(a.verdicts.get_column("gate").drop_nulls()) == {"G1-kv-space"}
    assert a.events.filter(pl.col("engine") == "all").height == 2


def test_the_support_page_states_the_matrix_and_is_linked():
    page = (DOCS / "support.md").read_text()
    assert "](support.md)" in (DOCS / "index.md").read_text()
    for section in ("## vLLM log families", "## The capture plugin's hooks", "## What-if replay engines"):
        assert section in page
    # the log families, per version: the stock Python frontend still cannot count in 0.34; the Rust one can
    assert re.search(r"\| the same \| 0\.11\.1-0\.34\.0 \|.*never print", page)
    assert re.search(r"Rust frontend.*\| 0\.33\.0-0\.34\.0 \(opt-in\) \|.*exact, 0 included", page)
    # the plugin's hooks, per version, and what it verified
    assert "| 0.34 |" in page and "scheduled_new_reqs" in page and "0.11-0.34" in page
    # the replay engines, per version
    assert "`model`" in page and "`vllm`" in page and "from 0.33 a lowest-priority request" in page
