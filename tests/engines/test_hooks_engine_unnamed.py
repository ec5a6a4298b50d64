"""A debug-hook line with no process prefix, in a data-parallel log, is no one engine's evidence.

A V1 log of two engines (EngineCore_DP0 and EngineCore_DP1 each write behind their prefix) with a
bare ``[SCHEDULER] Available blocks: 2`` step (print(), no prefix) and each engine's PREEMPTED line
after it. Before, the bare step was engine 0's by default and decided DP0's preemption as G1 at high
confidence, with nothing said of the assumption. Now such lines explain neither engine's event and a
note says why (engines/vllm/hooks.py ``_own_engine_rows``); the same step behind DP0's prefix is
DP0's, and a log of one engine keeps its bare hook lines.
"""

from __future__ import annotations

from preemptlog import AnalyzeOptions, analyze

HEAD = [
    "(APIServer pid=1) INFO 05-09 10:00:00 [api_server.py:1] vLLM API server version 0.14.0",
    "(APIServer pid=1) INFO 05-09 10:00:00 [arg_utils.py:1] non-default args: {'model': 'm', 'data_parallel_size': 2}",
]
STEP = [
    "[SCHEDULER] Available blocks: 2, Pending reqs: 2, Running reqs: 30",
    "  Req-x0: prompt=400, max_out=112, blocks_needed=32",
]


def _gates(tmp_path, prefix: str, engines: tuple[str, ...]) -> tuple[dict[str, str], list[str]]:
    lines = list(HEAD)
    lines += [
        f"(EngineCore_DP{e} pid=1{e}) INFO 05-09 10:00:01 [core.py:1] Initializing a V1 LLM engine (v0.14.0)"
        for e in engines
    ]
    lines += [prefix + ln for ln in STEP]
    lines += [
        f"(EngineCore_DP{e} pid=1{e}) WARNING 05-09 10:00:03 [scheduler.py:10] Req-r{e} PREEMPTED" for e in engines
    ]
    (tmp_path / "vllm.log").write_text("\n".join(lines) + "\n")
    a = analyze([str(tmp_path / "vllm.log")], AnalyzeOptions(tz="UTC", year=2025))
    assert a.verdicts is not None
    v = a.events.select("event_id", "engine").join(a.verdicts.select("event_id", "gate"), on="event_id")
    return {r["engine"]: r["gate"] for r in v.iter_rows(named=True)}, a.notes


def test_bare_step_in_a_two_engine_log_is_no_one_s(tmp_path):
    gates, notes = _gates(tmp_path, "", ("0", "1"))
    assert gates == {"0": "undetermined", "1": "undetermined"}  # before: DP0 G1-kv-space (high)
    said = [n for n in notes if "name no engine" in n]
    assert len(said) == 1
    assert said[0].startswith("2 debug-hook line(s) name no engine in a log of engines 0, 1 (first ")
    assert "vllm.log:5)" in said[0]


def test_step_behind_dp0_s_prefix_is_dp0_s(tmp_path):
    gates, notes = _gates(tmp_path, "(EngineCore_DP0 pid=10) INFO 05-09 10:00:01 [scheduler.py:9] ", ("0", "1"))
    assert gates == {"0": "G1-kv-space", "1": "undetermined"}
    assert not [n for n in notes if "name no engine" in n]


def test_bare_step_in_a_one_engine_log_is_its_engine_s(tmp_path):
    gates, notes = _gates(tmp_path, "", ("0",))
    assert gates == {"0": "G1-kv-space"}
    assert not [n for n in notes if "name no engine" in n]
