"""Debug-hook lines and text block_table lines inside vLLM logs."""

from __future__ import annotations

from datetime import UTC, datetime

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from preemptlog.analysis import AnalyzeOptions, analyze
from preemptlog.engines.vllm import hooks
from preemptlog.sources import vllm_log

from ..conftest import FIXTURES, write_lines

OPTS = AnalyzeOptions(tz="UTC", year=2026)
FRAME_OF = {
    "hook_sched": "hook_steps",
    "hook_pending": "hook_pending",
    "hook_batch": "hook_batch",
    "bt_text": "bt_text",
}


@pytest.mark.parametrize("i", range(len(hooks.SAMPLES)))
def test_samples(i, tmp_path):
    line, exp = hooks.SAMPLES[i]
    rec = vllm_log.scan(str(write_lines(tmp_path / "x.log", [line])), 0).collect()
    if hasattr(vllm_log, "finish"):  # marker -> kind on the collected frame
        rec = vllm_log.finish(rec)
    if exp.get("_dropped"):
        assert rec.height == 0
        return
    assert rec.get_column("kind").to_list() == [exp["kind"]]
    a = analyze([str(tmp_path / "x.log")], OPTS)
    if "event" in exp:
        assert a.events.get_column("kind").to_list() == ["marker"]
        assert a.events.get_column("request_id").to_list() == [exp["event"]]
        return
    assert a.events.height == 0  # a hook line is never a preemption
    df = a.frames[FRAME_OF[exp["kind"]]]
    assert df.height == 1
    row = df.row(0, named=True)
    for k, v in exp.items():
        if k != "kind":
            assert row[k] == v, k


def test_steps_pending_batch_and_inherited_time():
    a = analyze([str(FIXTURES / "sources" / "hooks-bare.log")], OPTS)
    steps, pend, batch = a.frames["hook_steps"], a.frames["hook_pending"], a.frames["hook_batch"]
    t30 = datetime(2026, 11, 30, 5, 10, 30, tzinfo=UTC)
    t33 = datetime(2026, 11, 30, 5, 10, 33, tzinfo=UTC)
    assert steps.select("step", "free_blocks", "pending", "running", "line").rows() == [(1, 128, 17, 31, 2)]
    assert steps.select("time", "time_precision", "time_upper").rows() == [(t30, "inherited", t33)]
    assert pend.select("step", "request_id", "prompt", "max_out", "blocks_needed", "line").rows() == [
        (1, "42", 128, 512, 40, 3)
    ]
    assert batch.select("step", "variance", "threshold", "line").rows() == [(1, 318.0, 256.0, 4)]
    assert a.counters["hooks"]["inherited_time_lines"] == 3
    assert any("bare print()" in n for n in a.notes)
    assert a.events.height == 0


def test_step_counter_is_per_stream(tmp_path):
    write_lines(tmp_path / "a.log", ["[SCHEDULER] Available blocks: 1, Pending reqs: 0, Running reqs: 1"] * 3)
    write_lines(tmp_path / "b.log", ["[SCHEDULER] Available blocks: 2, Pending reqs: 0, Running reqs: 1"] * 2)
    a = analyze([str(tmp_path / "a.log"), str(tmp_path / "b.log"), "--"][:2], OPTS)
    steps = a.frames["hook_steps"].sort("source", "line")
    assert steps.select("source", "step").rows() == [
        (str(tmp_path / "a.log"), 1),
        (str(tmp_path / "a.log"), 2),
        (str(tmp_path / "a.log"), 3),
        (str(tmp_path / "b.log"), 1),
        (str(tmp_path / "b.log"), 2),
    ]


def test_schemas(tmp_path):
    write_lines(tmp_path / "x.log", [s for s, e in hooks.SAMPLES if not e.get("_dropped")])
    a = analyze([str(tmp_path / "x.log")], OPTS)
    for name, schema in (
        ("hook_steps", hooks.HOOK_STEPS_SCHEMA),
        ("hook_pending", hooks.HOOK_PENDING_SCHEMA),
        ("hook_batch", hooks.HOOK_BATCH_SCHEMA),
        ("bt_text", hooks.BT_TEXT_SCHEMA),
    ):
        assert {k: str(v) for k, v in a.frames[name].schema.items()} == schema, name


@settings(max_examples=25, deadline=None)
@given(
    free=st.integers(0, 10**6),
    pending=st.integers(0, 5000),
    running=st.integers(0, 5000),
    rid=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,20}", fullmatch=True),
    prompt=st.integers(0, 10**6),
    max_out=st.integers(0, 10**6),
    needed=st.integers(0, 10**5),
    variance=st.floats(0, 1e6, allow_nan=False).map(lambda x: round(x, 1)),
    threshold=st.integers(0, 100000),
    prefix=st.sampled_from(
        [
            "",
            "INFO 11-30 05:10:38 [hook.py:1] ",
            "2026-11-30T05:10:38.120Z ",
            "vllm-1  | ",
            "(EngineCore_DP0 pid=7) INFO 11-30 05:10:38 [hook.py:3] ",
        ]
    ),
)
def test_property_hook_values_recovered(
    tmp_path_factory, free, pending, running, rid, prompt, max_out, needed, variance, threshold, prefix
):
    lines = [
        f"{prefix}[SCHEDULER] Available blocks: {free}, Pending reqs: {pending}, Running reqs: {running}",
        f"{prefix}  Req-{rid}: prompt={prompt}, max_out={max_out}, blocks_needed={needed}",
        f"{prefix}[BATCH] Current variance: {variance:.1f} (threshold={threshold})",
    ]
    p = write_lines(tmp_path_factory.mktemp("h") / "x.log", lines)
    a = analyze([str(p)], OPTS)
    assert a.events.height == 0
    assert a.frames["hook_steps"].select("free_blocks", "pending", "running").rows() == [(free, pending, running)]
    assert a.frames["hook_pending"].select("request_id", "prompt", "max_out", "blocks_needed").rows() == [
        (rid, prompt, max_out, needed)
    ]
    assert a.frames["hook_batch"].select("variance", "threshold").rows() == [(variance, float(threshold))]
    assert a.frames["hook_pending"].get_column("step").to_list() == [1]


def test_bt_text_frame_lines(tmp_path):
    p = write_lines(
        tmp_path / "x.log",
        [
            "INFO 11-30 05:10:38 [executor.py:88] block_table extend req=r-1 8->12",
            "block_table extend request_id=r-2 old=3 new=4",
            "block_table extend (no numbers)",
        ],
    )
    a = analyze([str(p)], OPTS)
    df = a.frames["bt_text"]
    assert df.select("request_id", "action", "blocks_before", "blocks_after", "line").rows() == [
        ("r-1", "extend", 8, 12, 1),
        ("r-2", "extend", 3, 4, 2),
    ]
    assert df.get_column("time_precision").to_list() == ["1s", "inherited"]
    assert a.counters["bt_text"]["unparsed_lines"] == 1
    assert pl.Series(df.get_column("time")).null_count() == 0
