"""The time-window joiner: a bundle where every source meets, asserted value by value."""

from __future__ import annotations

import importlib.util

import polars as pl
import pytest

from preemptlog import joiner
from preemptlog.analysis import AnalyzeOptions, analyze
from preemptlog.engines import facts as engine_facts

from ..conftest import FIXTURES, ROOT

B = "joined/"
V, BT, KV, DM = B + "vllm.log:", B + "blocktable.jsonl:", B + "kvevents.jsonl:", B + "dmon.txt:"
_V1 = next(f for f in engine_facts.TABLE if f.id == "vllm-v1-alloc-failed")
_RESET = next(f for f in engine_facts.TABLE if f.id == "vllm-v1-reset-prefix-cache")
CODE_V1, CODE_V1_SRC = _V1.trigger, "vLLM source: " + _V1.source
CODE_RESET_SRC = "vLLM source: " + _RESET.source

# Event A: "Req-42 PREEMPTED" at 05:10:38; window [05:10:28, 05:10:40].
EXPECT_A = {
    "sched_step": (3, V + "13"),
    "sched_free_blocks": (9, V + "13"),
    "sched_pending": (2, V + "13"),
    "sched_running": (30, V + "13"),
    "sched_age_s": (2.0, V + "13"),  # line 13 is a bare print: inherits 05:10:36 from line 12
    "lookback_steps": (3, V + "13"),
    "lookback_min_free_blocks": (9, V + "13"),
    "pending_count": (2, V + "13"),
    "pending_max_blocks_needed": (40, V + "14"),
    "pending_min_blocks_needed": (2, V + "15"),
    "pending_over_free": (1, V + "13"),
    "batch_variance": (318.0, V + "16"),
    "batch_threshold": (256.0, V + "16"),
    "lookback_max_variance": (318.0, V + "16"),
    # Per-step look-back (issue 13 rule 2): the latest step whose own Req- lines need more
    # blocks than its own free blocks is step 3 (40 needed, 9 free); step 1 (40 of 40) is not.
    "lookback_compared_steps": (3, V + "13"),
    "lookback_short_step": (3, V + "13"),
    "lookback_short_free_blocks": (9, V + "13"),
    "lookback_short_blocks_needed": (40, V + "14"),
    "lookback_variance_step": (3, V + "13"),
    "lookback_variance_threshold": (256.0, V + "16"),
    "lookback_max_pending": (3, V + "7"),  # steps 1 and 2 both have 3 pending: the latest
    "lookback_max_pending_step": (2, V + "7"),
    "req_blocks_before": (8, BT + "4"),  # the record at 36.5 s is later than the text line at 36 s
    "req_blocks_after": (12, BT + "4"),
    "req_blocks_held": (12, BT + "3"),
    "req_num_tokens": (180, BT + "3"),
    "req_shared_blocks": (1, BT + "3"),
    "prefix_conflict_with": ("9", BT + "6"),
    "bt_preempt_offset_s": (-0.2, BT + "8"),
    "bt_preempt_blocks_before": (12, BT + "8"),
    "bt_preempt_blocks_needed": (None, None),  # the preempt record states no failed allocation
    "bt_preempt_free_blocks": (None, None),
    "bt_preempt_largest_free_run": (None, None),
    "bt_preempt_watermark_blocks": (None, None),
    "bt_preempt_waiting": (None, None),
    # Its records of running before the event: the text extend line, its table and its extend record.
    "req_run_records": (3, BT + "3"),
    "req_pending_step": (None, None),  # not among the pending requests of a look-back step
    "bt_batch_max_len": (40, BT + "5"),  # longest table of the nearest step (1202)
    "pool_free_blocks": (9, BT + "7"),
    "pool_largest_free_run": (4, BT + "7"),
    "pool_free_regions": (3, BT + "7"),
    "pool_block_size": (16, BT + "7"),
    "pool_total_blocks": (256, BT + "7"),
    "lookback_min_largest_free_run": (4, BT + "7"),
    # The snapshot of the decision: the latest at or before the preempt record's step 1203.
    "pool_step": (1202, BT + "7"),
    "pool_waiting": (None, None),
    # Steps 1201 (an extend of 4 with 12 free) and 1202 (of 1 with 9 free): no shortage at either.
    "pool_compared_steps": (2, BT + "7"),
    "pool_short_step": (None, None),
    "pool_short_free_blocks": (None, None),
    "pool_short_blocks_needed": (None, None),
    "kvev_stored_blocks": (3, KV + "1-2"),
    "kvev_removed_blocks": (3, KV + "1-2"),
    "kvev_cleared": (0, KV + "1-2"),
    # the KV events are a reset source: none at the event (0, no line to cite), so no count of its preemptions
    "reset_calls": (0, None),
    "reset_preempted": (None, None),
    "stats_kv_usage_max": (99.5, V + "18"),
    "stats_kv_usage_at": (95.0, V + "2"),
    "stats_waiting_at": (10, V + "2"),
    "stats_waiting_delta": (4, V + "18"),
    "stats_running_at": (31, V + "2"),
    "stats_running_delta": (-2, V + "18"),
    **{
        n: (None, None)
        for n in (
            "prom_kv_usage_max",
            "prom_kv_usage_at",
            "prom_waiting_at",
            "prom_waiting_delta",
            "prom_running_at",
            "prom_running_delta",
        )
    },  # no /metrics scrapes in the bundle
    **{e.name: (None, None) for e in joiner.DECLARED if e.name.startswith("sgl_")},  # no SGLang lines
    "dmon_fb_at_mb": (41000.0, DM + "10"),
    "dmon_fb_jump_mb": (6000.0, DM + "8"),
    "dmon_fb_jump_gpu": (1, DM + "8"),
    "dmon_sm_at_pct": (91.0, DM + "10"),
    "dmon_mem_at_pct": (61.0, DM + "10"),
    "cfg_block_size": (16, BT + "1", "seen"),
    "cfg_max_num_seqs": (64, V + "1", "seen"),
    "cfg_max_num_batched_tokens": (None, None, None),
    "cfg_max_model_len": (None, None, None),
    "cfg_num_gpu_blocks": (None, None, None),
    "cfg_gpu_memory_utilization": (0.9, None, "default"),
    "cfg_enable_prefix_caching": (True, V + "1", "seen"),
    "cfg_enable_chunked_prefill": (None, None, None),
    "cfg_speculative": (None, None, None),
    "cfg_scheduling_policy": ("fcfs", None, "default"),
    # vLLM's own code (joiner/code.py): the engine is V1 by its stats line format (line 2), no version
    "code_trigger": (CODE_V1, CODE_V1_SRC),
    "code_kv": (True, CODE_V1_SRC),
    "code_reset": (True, CODE_RESET_SRC),  # no version in the log: the 0.12+ reset cannot be ruled out
    "code_engine": ("vLLM V1 (fcfs)", V + "2"),
    "code_not_gates": ("G2-batch-variance,G3-queue-overflow,G4-prefix-conflict", CODE_V1_SRC),
    "code_priority_path": (None, None),  # no line names V0's _schedule_priority_preemption
    # the stats lines at 05:10:30 and 05:10:40 (KV 95 % and 99.5 % with requests waiting) bracket the event
    "up_pressure": ("05:10:30-05:10:40 UTC: peak KV 99.5%, up to 14 waiting, running 31->29", V + "2, " + V + "18"),
    "up_failed_allocs": (None, None),  # the preempt record states no failed allocation
    "up_kv_max_before": (99.5, V + "18"),
}
# Event B: "Req-7 PREEMPTED" at 05:11:31: only stats, KV events (quiet), config and the code facts reach it.
EXPECT_B = {name: (None, None) for name in joiner.VALUE_COLUMNS}
EXPECT_B.update(
    {
        "kvev_stored_blocks": (0, None),
        "kvev_removed_blocks": (0, None),
        "kvev_cleared": (0, None),
        "reset_calls": (0, None),
        "stats_kv_usage_max": (60.0, V + "19"),
        "stats_kv_usage_at": (60.0, V + "19"),
        "stats_waiting_at": (3, V + "19"),
        "stats_waiting_delta": (0, V + "19"),
        "stats_running_at": (30, V + "19"),
        "stats_running_delta": (0, V + "19"),
        **{k: v for k, v in EXPECT_A.items() if k.startswith(("cfg_", "code_"))},
        "up_kv_max_before": (99.5, V + "18"),  # the engine's pool was at 99.5 % before (line 18)
    }
)


@pytest.fixture(scope="module")
def joined():
    return analyze([str(FIXTURES / "joined")], AnalyzeOptions(tz="UTC", year=2026))


def test_evidence_schema(joined):
    ev = joined.evidence
    assert {k: str(v) for k, v in ev.schema.items()} == joiner.EVIDENCE_SCHEMA
    for name in joiner.VALUE_COLUMNS:
        assert f"{name}_src" in joiner.EVIDENCE_SCHEMA
    assert ev.get_column("event_id").to_list() == [V + "17", V + "20"]


@pytest.mark.parametrize("event,expect", [(V + "17", EXPECT_A), (V + "20", EXPECT_B)])
def test_evidence_value_by_value(joined, event, expect):
    row = joined.evidence.filter(pl.col("event_id") == event).row(0, named=True)
    assert set(expect) == set(joiner.VALUE_COLUMNS)
    for name, exp in expect.items():
        assert row[name] == exp[0], name
        assert row[f"{name}_src"] == exp[1], f"{name}_src"
        if len(exp) == 3:
            assert row[f"{name}_status"] == exp[2], f"{name}_status"


def test_skew_estimate_is_a_note_not_applied(joined):
    # raw offset -0.2 s; the log line is stamped to the second, so it is taken as 0.5 s late
    assert any("clock skew estimate" in n and "-0.700 s" in n for n in joined.notes)


def test_offset_moves_a_source(tmp_path):
    a = analyze([str(FIXTURES / "joined")], AnalyzeOptions(tz="UTC", year=2026, offsets={"blocktable": 0.2}))
    row = a.evidence.row(0, named=True)
    assert row["bt_preempt_offset_s"] == 0.0
    b = analyze([str(FIXTURES / "joined")], AnalyzeOptions(tz="UTC", year=2026, offsets={"joined/dmon.txt": -100}))
    assert b.evidence.row(0, named=True)["dmon_fb_at_mb"] is None


def test_windows_and_lookback_options():
    a = analyze([str(FIXTURES / "joined")], AnalyzeOptions(tz="UTC", year=2026, before=1, after=0, lookback_steps=0))
    row = a.evidence.row(0, named=True)
    assert row["sched_free_blocks"] is None  # the step is 2 s old
    assert (row["kvev_stored_blocks"], row["kvev_removed_blocks"], row["kvev_stored_blocks_src"]) == (1, 3, KV + "2-2")
    assert row["pool_free_blocks"] == 9 and row["lookback_min_largest_free_run"] == 4
    c = analyze([str(FIXTURES / "joined")], AnalyzeOptions(tz="UTC", year=2026, lookback_steps=0))
    r = c.evidence.row(0, named=True)
    assert (r["lookback_steps"], r["lookback_min_free_blocks"], r["lookback_max_variance"]) == (1, 9, 318.0)


def test_absent_sources_are_null(tmp_path):
    p = tmp_path / "v.log"
    p.write_text("WARNING 11-30 05:10:38 [scheduler.py:10] Req-42 PREEMPTED\n")
    a = analyze([str(p)], AnalyzeOptions(tz="UTC", year=2026))
    row = a.evidence.row(0, named=True)
    for name in joiner.VALUE_COLUMNS:
        if name.startswith("cfg_"):
            continue
        assert row[name] is None and row[f"{name}_src"] is None, name
    assert row["cfg_block_size_status"] == "default"


def test_machine_formats_carry_evidence_after_event_columns(joined, tmp_path):
    from preemptlog.model.events import EVENTS_SCHEMA
    from preemptlog.render import event_rows
    from preemptlog.rules.verdicts import VERDICT_COLUMNS

    df = event_rows(joined)
    n, m = len(EVENTS_SCHEMA), len(VERDICT_COLUMNS)
    assert df.columns[:n] == list(EVENTS_SCHEMA)
    assert df.columns[n : n + m] == VERDICT_COLUMNS
    from preemptlog.findings import EVENT_COLUMNS  # issue 15: the findings columns come last
    from preemptlog.render.rows import PREFIX_COLUMNS  # added keys come last: no column moves

    k = len(joiner.EVIDENCE_SCHEMA) - 1
    assert df.columns[n + m : n + m + k] == list(joiner.EVIDENCE_SCHEMA)[1:]
    assert df.columns[n + m + k :] == EVENT_COLUMNS + list(PREFIX_COLUMNS)


def test_compute_without_events_and_untimed_event():
    empty = joiner.compute(pl.DataFrame(schema={"event_id": pl.String, "time": pl.Datetime("us", "UTC")}), {})
    assert empty.height == 0 and list(empty.columns) == list(joiner.EVIDENCE_SCHEMA)
    one = joiner.compute(
        pl.DataFrame(
            {"event_id": ["x"], "time": [None]}, schema={"event_id": pl.String, "time": pl.Datetime("us", "UTC")}
        ),
        {},
    )
    assert one.row(0, named=True)["event_id"] == "x" and one.row(0, named=True)["sched_step"] is None


def test_benchmark_runs_small():
    spec = importlib.util.spec_from_file_location("joiner_bench", ROOT / "bench" / "joiner_bench.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    r = mod.run(2000, 16000, 8)
    assert r["evidence_rows"] == 2000 and r["with_fb_jump"] > 0 and r["with_sched"] > 0


def test_evidence_declared_once_and_docs_table_current():
    """Every evidence column is declared once by its section; docs/sources.md's table is generated from them."""
    from preemptlog.joiner import DECLARED, docs_table
    from preemptlog.joiner.declare import DOC_BEGIN, DOC_END

    names = [e.name for e in DECLARED]
    assert len(names) == len(set(names))
    assert names == joiner.VALUE_COLUMNS
    for e in DECLARED:
        assert e.source and e.scope and e.doc
        assert (f"{e.name}_status" in joiner.EVIDENCE_SCHEMA) == e.status
    text = (ROOT / "docs" / "sources.md").read_text()
    current = DOC_BEGIN + text.split(DOC_BEGIN, 1)[1].split(DOC_END, 1)[0] + DOC_END
    assert current == docs_table(DECLARED), (
        'docs/sources.md evidence table is stale: python -c "from preemptlog.joiner import write_docs; write_docs()"'
    )
