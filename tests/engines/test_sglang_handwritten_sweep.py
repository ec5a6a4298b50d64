"""SGLang inputs written by hand (a sweep of log shapes), the defects it found:

- Every PP stage of a DP rank runs the scheduler step (scheduler_pp_mixin ``event_loop_pp`` calls
  ``get_next_batch_to_run`` on each stage) and prints the same retraction line: ``PP0 TP0`` and
  ``PP1 TP0`` are copies of one step, as ``TP0`` and ``TP1`` are. ``MOE_DP1`` in a scheduler's process
  name is no DP rank.
- A retraction line cut before its ``#retracted_reqs`` (a truncated or wrapped capture) is a retraction
  whose size is unknown: the count is a lower bound, said, never an exact count that dropped it.
- With ``--enable-dp-attention`` and dp_size D SGLang gives each DP rank ``max_running_requests // D``:
  the batch and start-up lines are one rank's, the flag to change is D times a rank's.

Every log is written from SGLang's format strings (sglang-facts.md 2.1-2.2; the prefix order of
scheduler.py ``run_scheduler_process``: DP PP ATTN_CP MOE_DP TP EP).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from preemptlog import AnalyzeOptions, analyze

M2 = "KV cache pool is full. Retract requests. #retracted_reqs: 2, #new_tokens_gained: 3000, #new_token_ratio: 0.0980 -> 0.3100"
M1 = "KV cache pool is full. Retract requests. #retracted_reqs: 1, #new_token_ratio: 0.0980 -> 0.2000"


def run(tmp_path: Path, name: str, lines: list[str]):
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return analyze([str(p)], AnalyzeOptions(tz="UTC"))


def per_engine(a) -> dict[str, int]:
    return {str(k): n for k, n in a.events.group_by("engine").len().iter_rows()}


def _json(t: str, proc: str, pid: int, msg: str) -> str:
    return json.dumps(
        {
            "asctime": t,
            "levelname": "WARNING",
            "name": "sglang.srt.managers.scheduler",
            "processName": proc,
            "process": pid,
            "message": msg,
        }
    )


# ------------------------------------------------------------------ PP stages are copies, DP ranks are not


@pytest.mark.parametrize(
    "ranks",
    [
        ["PP0 TP0", "PP0 TP1", "PP1 TP0", "PP1 TP1"],  # 0.5.10+ order
        ["PP1 TP1", "PP0 TP1", "PP1 TP0", "PP0 TP0"],  # any order the processes write in
        ["TP0 PP0", "TP1 PP0", "TP0 PP1", "TP1 PP1"],  # 0.4.10-0.5.5 order (DP TP EP PP)
        ["PP0", "PP1"],  # tp_size 1: no TP token
        ["PP0 TP0 EP0", "PP1 TP0 EP0", "PP0 TP1 EP1", "PP1 TP1 EP1"],
        ["PP0 MOE_DP0 TP0", "PP0 MOE_DP1 TP1", "PP1 MOE_DP0 TP0", "PP1 MOE_DP1 TP1"],
    ],
)
def test_pp_stages_print_copies_of_one_step(tmp_path, ranks):
    lines = ["[2026-03-01 10:00:00] server_args=ServerArgs(model_path='x', tp_size=2, pp_size=2)"]
    for dp in (0, 1):
        lines += [f"[2026-03-01 10:05:02.{10 + i:03d} DP{dp} {r}] {M2}" for i, r in enumerate(ranks)]
    lines += [f"[2026-03-01 10:05:40.{10 + i:03d} DP0 {r}] {M1}" for i, r in enumerate(ranks)]
    a = run(tmp_path, "pp.log", lines)
    assert per_engine(a) == {"0": 3, "1": 2}  # DP0: 2 + 1, DP1: 2; never merged across DP ranks
    ret = a.frames["sgl_retractions"]
    assert ret.height == 3 and set(ret.get_column("rank_lines")) == {len(ranks) - 1}
    # the kept line is the DP rank's lowest process
    assert all("PP0" in r for r in ret.get_column("ranks"))


def test_pp_stage_printing_twice_is_two_steps(tmp_path):
    lines = [
        f"[2026-03-01 10:05:02.100 PP0 TP0] {M1}",
        f"[2026-03-01 10:05:02.101 PP1 TP0] {M1}",
        f"[2026-03-01 10:05:02.600 PP0 TP0] {M1}",
        f"[2026-03-01 10:05:02.603 PP1 TP0] {M1}",
    ]
    assert run(tmp_path, "twice.log", lines).events.height == 2


def test_json_process_names_pp_and_moe_dp(tmp_path):
    """A JSON formatter: the scheduler's process name (setproctitle ``sglang::scheduler_DP0_PP1_TP0``)
    tells the copies; ``MOE_DP1`` is the MoE data-parallel rank, not the DP rank (engine)."""
    lines = [
        _json("2026-11-02 09:10:01,204", "sglang::scheduler_PP0_TP0", 201, M2),
        _json("2026-11-02 09:10:01,205", "sglang::scheduler_PP1_TP0", 202, M2),
        _json("2026-11-02 09:10:05,204", "sglang::scheduler_MOE_DP1_TP1", 203, M1),
        _json("2026-11-02 09:10:05,205", "sglang::scheduler_MOE_DP0_TP0", 204, M1),
        _json("2026-11-02 09:10:09,204", "sglang::scheduler_DP1_MOE_DP0_TP2", 205, M1),
        _json("2026-11-02 09:10:09,205", "sglang::scheduler_DP1_MOE_DP1_TP3", 206, M1),
    ]
    a = run(tmp_path, "j.log", lines)
    assert per_engine(a) == {"0": 3, "1": 1}


# ------------------------------------------------------------------ a retraction line cut before its count


def test_a_line_cut_before_its_count_makes_the_count_a_lower_bound(tmp_path):
    lines = [
        "[2026-03-01 10:00:00] server_args=ServerArgs(model_path='x', tp_size=1)",
        f"[2026-03-01 10:05:02] {M2}",
        "[2026-03-01 10:05:03] KV cache pool is full. Retract requests. #retra",
        "cted_reqs: 5, #new_tokens_gained: 3000, #new_token_ratio: 0.0980 -> 0.3100",
        "[2026-03-01 10:05:05] KV cache pool is full. Retract requests. #retracted_reqs: ",
        "[2026-03-01 10:05:06] Decode out of memory happened.",
        "[2026-03-01 10:05:07] If you see KV cache pool is full. Retract requests. occasionally, it is okay",
    ]
    a = run(tmp_path, "cut.log", lines)
    assert a.events.height == 2  # the whole line's 2; the cut ones' sizes are unknown
    s = a.summary()
    assert s["reconciliation"]["quality"] == "lower bound"
    assert s["sglang"]["lines_cut_before_count"] == 3
    assert "cut before their count" in s["headline"]
    assert any("cut before their #retracted_reqs (first: " in n and "cut.log:3" in n for n in a.notes)


def test_only_a_cut_line_is_no_exact_zero(tmp_path):
    a = run(tmp_path, "cut0.log", ["[2026-03-01 10:05:05] KV cache pool is full. Retract requests. #retracted_r"])
    assert a.events.height == 0
    assert a.summary()["reconciliation"]["quality"] != "exact"


def test_a_cut_copy_of_a_line_another_rank_printed_whole_loses_nothing(tmp_path):
    lines = [
        f"[2026-03-01 10:05:02.100 TP0] {M2}",
        "[2026-03-01 10:05:02.103 TP1] KV cache pool is full. Retract requests. #retra",
    ]
    a = run(tmp_path, "copy.log", lines)
    assert a.events.height == 2
    s = a.summary()
    assert s["reconciliation"]["quality"] == "exact"
    assert "lines_cut_before_count" not in s["sglang"]


# ------------------------------------------------------------------ --max-running-requests with DP attention

DPA_ARGS = (
    "[2026-03-01 10:00:00] server_args=ServerArgs(model_path='deepseek-ai/DeepSeek-V3', tp_size=4, dp_size=2, "
    "enable_dp_attention=True, {flag}schedule_conservativeness=1.0)"
)
DPA_START = (
    "[2026-03-01 10:00:31 DP{dp} TP{tp}] max_total_num_tokens=400000, chunked_prefill_size=8192, "
    "max_prefill_tokens=16384, max_running_requests=256, context_len=131072, available_gpu_mem=6.20 GB"
)


def _batch(t: str, dp: int, running: int, usage: float, queue: int) -> str:
    return (
        f"[2026-03-01 {t} DP{dp} TP{dp * 2}] Decode batch, #running-req: {running}, #token: {int(usage * 400000)}, "
        f"token usage: {usage:.2f}, cuda graph: True, gen throughput (token/s): 2400.10, #queue-req: {queue}"
    )


@pytest.mark.parametrize("flag", ["max_running_requests=512, ", ""], ids=["flag-given", "flag-from-start-up"])
def test_dp_attention_max_running_requests_is_all_dp_ranks(tmp_path, flag):
    lines = [
        DPA_ARGS.format(flag=flag),
        DPA_START.format(dp=0, tp=0),
        DPA_START.format(dp=1, tp=2),
        _batch("10:05:01", 0, 250, 0.99, 30),
        f"[2026-03-01 10:05:02 DP0 TP0] {M2}",
        f"[2026-03-01 10:05:02 DP0 TP1] {M2}",
        _batch("10:05:04", 0, 200, 0.95, 34),
    ]
    s = run(tmp_path, "dpa.log", lines).summary()
    assert s["config"]["dp_attention_size"]["value"] == "2"
    fix = {x["option"]: x for x in s["fixes"]}["--max-running-requests"]
    # 200 running per DP rank after the retraction: each rank gets flag // 2, so the flag is 400
    assert fix["suggested"] == "400"
    assert fix["current"] == "512"
    assert "200 x 2 = 400" in fix["expected_effect"]
    # where 512 comes from: the flag's own line, or one rank's start-up line x 2 (never "seen" at a line
    # that says 256)
    said = "seen (" if flag else "derived (256 per DP rank x dp_attention_size 2, "
    assert fix["current_from"].startswith(said), fix
    assert fix["current_from"].endswith("dpa.log:1)" if flag else "dpa.log:2)"), fix


def _limit(s: dict, option: str = "--max-running-requests") -> dict:
    return {x["option"]: x for x in s["fixes"]}[option]


def test_dp_attention_fix_speaks_only_of_the_dp_ranks_whose_lines_it_read(tmp_path):
    """Retraction and batch lines of DP0 alone (DP1 printed only its start-up line): before, the fix said
    '... (200) on each of the 2 DP ranks: 200 x 2 = 400', evidence for DP1 the log does not hold."""
    head = [
        DPA_ARGS.format(flag="max_running_requests=512, "),
        DPA_START.format(dp=0, tp=0),
        DPA_START.format(dp=1, tp=2),
    ]
    dp0 = [
        _batch("10:05:01", 0, 250, 0.99, 30),
        f"[2026-03-01 10:05:02 DP0 TP0] {M2}",
        _batch("10:05:04", 0, 200, 0.95, 34),
    ]
    fix = _limit(run(tmp_path, "dp0.log", head + dp0).summary())
    assert fix["suggested"] == "400"
    said = fix["expected_effect"]
    assert "each of the 2 DP ranks" not in said and "each of the 2 DP ranks" not in fix["text"]
    assert (
        "(200) on DP0 (the only DP rank whose retractions the log holds with a batch line after them; the log "
        "holds no retraction or batch line from DP1): 200 x 2 = 400 sets the same limit on DP1, assumed to need "
        "no more (SGLang divides the flag by dp_size)"
    ) in said, said
    # DP1's batch lines there, with no retraction: DP0's figures still say nothing of DP1
    quiet = [_batch("10:05:01", 1, 240, 0.80, 0), _batch("10:05:04", 1, 240, 0.80, 0)]
    said = _limit(run(tmp_path, "quiet.log", head + dp0 + quiet).summary())["expected_effect"]
    assert "each of the 2 DP ranks" not in said
    assert "on DP0 (the only DP rank whose retractions" in said
    assert (
        "; DP1's lines show no retraction with a batch line after it): 200 x 2 = 400 sets the same limit on DP1" in said
    )
    # both ranks retract, each with its batch after: the limit is said of each (sized from the lowest, DP1's)
    dp1 = [
        _batch("10:05:01", 1, 240, 0.99, 30),
        f"[2026-03-01 10:05:03 DP1 TP2] {M2}",
        _batch("10:05:05", 1, 180, 0.95, 30),
    ]
    fix = _limit(run(tmp_path, "both.log", head + dp0 + dp1).summary())
    assert fix["suggested"] == "360"
    assert (
        "(180) on each of the 2 DP ranks: 180 x 2 = 360 (SGLang divides the flag by dp_size)" in fix["expected_effect"]
    )
    assert "assumed" not in fix["expected_effect"]


def test_dp_attention_capacity_lever_speaks_only_of_the_dp_ranks_whose_lines_it_read(tmp_path):
    """No retraction, the pool full with requests waiting on DP0 alone: before, '... have room to grow on each
    of the 2 DP ranks'; with the lines of both ranks, it is said of each."""
    head = [DPA_ARGS.format(flag=""), DPA_START.format(dp=0, tp=0), DPA_START.format(dp=1, tp=2)]
    dp0 = [_batch(f"10:05:0{i}", 0, 200, 0.97 + i / 100, 30 + i) for i in range(1, 4)]
    fix = _limit(run(tmp_path, "held.log", head + dp0).summary())
    said = fix["expected_effect"]
    assert "each of the 2 DP ranks" not in said, said
    assert (
        "on DP0 (the only DP rank whose batch lines the log holds; the log holds no retraction or batch line from "
        "DP1): 173 x 2 sets the same limit on DP1, assumed alike (SGLang gives each max_running_requests // 2)"
    ) in said, said
    dp1 = [_batch(f"10:05:0{i}", 1, 200, 0.97 + i / 100, 30 + i) for i in range(1, 4)]
    said = _limit(run(tmp_path, "held2.log", head + dp0 + dp1).summary())["expected_effect"]
    assert "on each of the 2 DP ranks (SGLang gives each max_running_requests // 2: 173 x 2)" in said, said
    assert "assumed alike" not in said


def test_without_dp_attention_the_flag_is_one_rank_s(tmp_path):
    lines = [
        DPA_ARGS.format(flag="max_running_requests=256, ").replace(
            "enable_dp_attention=True", "enable_dp_attention=False"
        ),
        DPA_START.format(dp=0, tp=0),
        _batch("10:05:01", 0, 250, 0.99, 30),
        f"[2026-03-01 10:05:02 DP0 TP0] {M2}",
        _batch("10:05:04", 0, 200, 0.95, 34),
    ]
    s = run(tmp_path, "dp.log", lines).summary()
    assert "dp_attention_size" not in s["config"]
    fix = {x["option"]: x for x in s["fixes"]}["--max-running-requests"]
    assert (fix["current"], fix["suggested"]) == ("256", "200")


def test_dp_attention_capacity_lever_without_a_retraction(tmp_path):
    """No retraction, the pool full with requests waiting: the estimated running limit per DP rank, as the flag."""
    lines = [DPA_ARGS.format(flag=""), DPA_START.format(dp=0, tp=0), DPA_START.format(dp=1, tp=2)]
    lines += [_batch(f"10:05:0{i}", 0, 200, 0.97 + i / 100, 30 + i) for i in range(1, 4)]
    s = run(tmp_path, "held.log", lines).summary()
    assert s["events"] == 0
    fix = {x["option"]: x for x in s["fixes"]}["--max-running-requests"]
    per_rank = int(fix["formula"].split(" = ")[0].split()[-1]) // 2
    assert per_rank < 200  # a rank's estimate below its batch
    assert fix["current"] == "512"  # the start-up line's 256 per rank x 2
    assert fix["suggested"] == str(per_rank * 2)
    assert "x 2 DP ranks" in fix["formula"]
