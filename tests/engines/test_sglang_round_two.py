"""SGLang, round two (issue 38, item 7): the same rules on the second engine.

- Copies of a retraction line written by each TP rank collapse per (step, DP rank), never across DP
  ranks, whatever the order of the TP lines, with second or ``SGLANG_LOG_MS`` millisecond stamps,
  behind the default prefix, docker timestamps or a JSON formatter.
- The recompute cost from ``sglang:num_retracted_{input,output}_tokens_total`` increases, from
  scrapes alone, the first scrape a baseline.
- A 0.1.x log (bare messages, uvicorn lines, vLLM's model-loading lines, ``Decode out of memory.
  This should nerver happen.`` [sic]) is an SGLang log and nothing else.

Every log here is written by hand from SGLang's format strings (sglang-facts.md 2.1-2.3).
"""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from preemptlog import AnalyzeOptions, analyze
from preemptlog.sources import sniff

T0 = datetime(2026, 1, 5, 10, 0, 0, 990000, tzinfo=UTC)
RETRACT = "KV cache pool is full. Retract requests. #retracted_reqs: {n}, #new_token_ratio: {r}"
# (DP rank, seconds after T0, #retracted_reqs, ratio part): DP0 retracts 6 requests in 5 lines, DP1 4 in 3;
# messages repeat, and two steps of DP0 are 1 s apart (their copies straddle a second boundary).
STEPS = [
    (0, 0.0, 1, "0.0980 -> 0.1919"),
    (0, 1.0, 1, "0.0980 -> 0.1919"),
    (1, 1.0, 2, "0.1000 -> 0.3000"),
    (0, 5.2, 2, "0.1200 -> 0.2500"),
    (0, 5.3, 1, "0.0980 -> 0.1919"),
    (1, 9.0, 1, "0.0980 -> 0.1919"),
    (0, 20.0, 1, "0.0980 -> 0.1919"),
    (1, 20.0, 1, "0.0980 -> 0.1919"),
]
TRUTH = {"0": 6, "1": 4}


def stamp(t: datetime, ms: bool) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S") + (f".{t.microsecond // 1000:03d}" if ms else "")


def dp_tp_log(seed: int, ms: bool, tp: int = 2, shape: str = "prefix", steps=STEPS) -> str:
    """Every TP rank of the step's DP rank prints the line, a few ms apart, in a shuffled order."""
    rnd = random.Random(seed)
    out = []
    for dp, off, n, ratio in steps:
        t = T0 + timedelta(seconds=off)
        copies = []
        for k in range(tp):
            tt = t + timedelta(milliseconds=rnd.randint(0, 15))
            msg = RETRACT.format(n=n, r=ratio)
            rank = dp * tp + k  # TP ranks numbered across DP groups, as with --enable-dp-attention
            if shape == "prefix":
                line = f"[{stamp(tt, ms)} DP{dp} TP{rank}] {msg}"
            elif shape == "docker":
                line = f"{tt.strftime('%Y-%m-%dT%H:%M:%S.%f')}000Z [{stamp(tt, ms)} DP{dp} TP{rank}] {msg}"
            else:  # a JSON formatter (SGLANG_LOGGING_CONFIG_PATH): the scheduler process names the ranks
                line = json.dumps(
                    {
                        "asctime": tt.strftime("%Y-%m-%d %H:%M:%S") + f",{tt.microsecond // 1000:03d}",
                        "levelname": "INFO",
                        "name": "sglang.srt.managers.scheduler",
                        "processName": f"sglang::scheduler_DP{dp}_TP{rank}",
                        "process": 200 + rank,
                        "message": msg,
                    }
                )
            copies.append(line)
        rnd.shuffle(copies)
        out += copies
    return "\n".join(out) + "\n"


def run(path: Path):
    return analyze([str(path)], AnalyzeOptions(tz="UTC"))


def per_engine(a) -> dict[str, int]:
    return {str(k): n for k, n in a.events.group_by("engine").len().iter_rows()}


# the JSON formatter's asctime always carries milliseconds: no JSON shape with second stamps
SHAPES = [("prefix", False), ("prefix", True), ("docker", False), ("docker", True), ("json", True)]


@pytest.mark.parametrize(("shape", "ms"), SHAPES, ids=[f"{s}-{'ms' if m else 'seconds'}" for s, m in SHAPES])
@pytest.mark.parametrize("seed", [1, 3, 7])
def test_dp2_tp2_copies_collapse_per_step_and_dp_rank(tmp_path, seed, ms, shape):
    p = tmp_path / "sglang.log"
    p.write_text(dp_tp_log(seed, ms, shape=shape))
    a = run(p)
    assert [f.kind for f in a.bundle.files] == ["sglang-log"]
    assert per_engine(a) == TRUTH
    assert set(a.events.get_column("engine_kind")) == {"sglang"}
    ret = a.frames["sgl_retractions"]
    assert ret.height == len(STEPS) and set(ret.get_column("rank_lines")) == {1}
    # the kept line is the DP rank's lowest TP rank
    assert sorted(set(ret.get_column("tp").to_list())) == [0, 2]


def test_tp2_ms_stamps_six_retractions(tmp_path):
    """TP copies a few ms apart across a second boundary are one step (the old per-second grouping gave 7)."""
    steps = [
        (0, 0.0, 1, "0.0980 -> 0.1919"),
        (0, 1.0, 2, "0.0980 -> 0.2000"),
        (0, 2.0, 1, "0.0980 -> 0.1919"),
        (0, 3.0, 1, "0.0980 -> 0.1919"),
        (0, 30.0, 1, "0.0980 -> 0.1919"),
    ]
    text = dp_tp_log(5, True, steps=steps).replace(" DP0", "")  # a TP-only server: no DP token
    p = tmp_path / "tp2.log"
    p.write_text(text)
    a = run(p)
    assert a.events.height == 6
    assert any("repeated by other TP ranks" in n for n in a.notes)


def test_a_rank_that_prints_twice_in_a_burst_printed_two_steps(tmp_path):
    m = RETRACT.format(n=1, r="0.0980 -> 0.1919")
    lines = [
        f"[2026-01-05 10:00:00.100 TP1] {m}",
        f"[2026-01-05 10:00:00.101 TP0] {m}",
        f"[2026-01-05 10:00:00.600 TP0] {m}",
        f"[2026-01-05 10:00:00.603 TP1] {m}",
    ]
    p = tmp_path / "twice.log"
    p.write_text("\n".join(lines) + "\n")
    assert run(p).events.height == 2


def test_never_across_dp_ranks(tmp_path):
    m = RETRACT.format(n=3, r="0.1274 -> 0.4410")
    lines = [
        f"[2025-11-03 14:05:10.51{i} DP{dp} TP{k}] {m}" for i, (dp, k) in enumerate([(0, 0), (1, 0), (0, 1), (1, 1)])
    ]
    p = tmp_path / "dp.log"
    p.write_text("\n".join(lines) + "\n")
    assert per_engine(run(p)) == {"0": 3, "1": 3}


# ---------------------------------------------------------------------------- 0.1.x and 0.2.x logs

SGL_01 = """\
Rank 0: load weight begin.
Rank 1: load weight begin.
INFO 03-05 10:00:01 weight_utils.py:163] Using model weights format ['*.safetensors']
INFO 03-05 10:00:01 weight_utils.py:163] Using model weights format ['*.safetensors']
Rank 0: load weight end.
Rank 1: load weight end.
INFO 03-05 10:00:09 pynccl_utils.py:45] vLLM is using nccl==2.18.1
INFO 03-05 10:00:09 pynccl_utils.py:45] vLLM is using nccl==2.18.1
Rank 0: max_total_num_token=42308, max_prefill_num_token=7051, context_len=4096, model_mode=[]
Rank 1: max_total_num_token=42308, max_prefill_num_token=7051, context_len=4096, model_mode=[]
INFO:     Started server process [12345]
INFO:     Waiting for application startup.
INFO:     Application startup complete.
INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)
INFO:     127.0.0.1:45140 - "GET /get_model_info HTTP/1.1" 200 OK
new fill batch. #seq: 1. #cached_token: 0. #new_token: 6. #remaining_req: 0. #running_req: 0. tree_cache_hit_rate: 0.00%.
#running-req: 40, #token: 41990, token usage: 0.99, #queue-req: 7
decode out of memory happened, #retracted_reqs: 2, #new_token_ratio: 0.2000 -> 0.2500
decode out of memory happened, #retracted_reqs: 2, #new_token_ratio: 0.2000 -> 0.2500
#running-req: 38, #token: 40100, token usage: 0.95, #queue-req: 9
decode out of memory happened, #retracted_reqs: 1, #new_token_ratio: 0.2500 -> 0.3000
decode out of memory happened, #retracted_reqs: 1, #new_token_ratio: 0.2500 -> 0.3000
Decode out of memory. This should nerver happen.
INFO:     127.0.0.1:45170 - "POST /generate HTTP/1.1" 200 OK
"""


def test_0_1_log_with_vllm_library_lines_is_an_sglang_log(tmp_path):
    assert sniff(SGL_01)[0] == "sglang-log"
    p = tmp_path / "server.log"
    p.write_text(SGL_01)
    a = run(p)
    assert [f.kind for f in a.bundle.files] == ["sglang-log"]
    s = a.summary()
    assert s["engine_kind"] == "sglang" and set(s["engine_kinds"]) == {"sglang"}
    assert s["cause"]["engine"] == "SGLang" and "vLLM" not in s["cause"]["code"]
    # TP2 (its "Rank 1:" lines): each bare retraction line printed twice is one step
    assert a.events.height == 3
    assert a.counters["sglang"]["alloc_errors"] == 1  # the [sic] "nerver" line: an allocation error, not counted
    cfg = {r["key"]: r["value"] for r in a.config.iter_rows(named=True)}
    assert cfg["kv_cache_tokens"] == "42308" and cfg["max_prefill_tokens"] == "7051"
    st = a.stats.filter(a.stats.get_column("family") == "sglang")
    assert st.get_column("running").to_list() == [40, 38]  # 0.1.x's stats line without "Decode batch"


def test_0_1_log_with_one_rank_keeps_every_line(tmp_path):
    text = "\n".join(ln for ln in SGL_01.splitlines() if not ln.startswith("Rank 1")) + "\n"
    p = tmp_path / "server.log"
    p.write_text(text)
    assert run(p).events.height == 6  # no second rank in the log: two lines are two steps


def test_0_2_gpu_id_prefix_and_server_args_tp_size(tmp_path):
    text = (
        "server_args=ServerArgs(model_path='meta-llama/Llama-2-7b-chat-hf', tp_size=2, mem_fraction_static=0.88)\n"
        "[gpu_id=0] max_total_num_tokens=42308, max_prefill_tokens=16384, max_running_requests=2047, context_len=4096\n"
        "[gpu_id=0] Decode batch. #running-req: 40, #token: 41990, token usage: 0.99, gen throughput (token/s): 1450.20, "
        "#queue-req: 7\n"
        "decode out of memory happened, #retracted_reqs: 2, #new_token_ratio: 0.2000 -> 0.4150\n"
        "decode out of memory happened, #retracted_reqs: 2, #new_token_ratio: 0.2000 -> 0.4150\n"
        "Decode out of memory. This should never happen.\n"
    )
    p = tmp_path / "s02.log"
    p.write_text(text)
    a = run(p)
    assert a.events.height == 2 and a.counters["sglang"]["alloc_errors"] == 1


# ---------------------------------------------------------------------------- recompute from counters


def prom(scrapes: list[tuple[str, int, int, int]]) -> str:
    out = []
    for t, req, inp, outp in scrapes:
        lab = '{model_name="q",engine_type="unified",tp_rank="0",pp_rank="0"}'
        out += [
            f"# scrape {t}",
            f"sglang:num_retracted_requests_total{lab} {req}.0",
            f"sglang:num_retracted_input_tokens_total{lab} {inp}.0",
            f"sglang:num_retracted_output_tokens_total{lab} {outp}.0",
        ]
    return "\n".join(out) + "\n"


def test_recompute_cost_from_token_counters_first_scrape_a_baseline(tmp_path):
    p = tmp_path / "m.prom"
    p.write_text(
        prom(
            [
                ("2026-11-02T08:15:00Z", 10, 4000, 1000),
                ("2026-11-02T08:15:10Z", 14, 5600, 1500),
                ("2026-11-02T08:15:20Z", 15, 6000, 1600),
            ]
        )
    )
    a = run(p)
    rc = a.findings.recompute
    assert a.events.height == 5
    assert rc["tokens"] == 2000 + 600 and rc["tokens_is_upper_bound"] and rc["evaluable"]
    assert "m.prom:" in rc["tokens_basis"]
    assert a.summary()["findings_headline"].startswith("at most 2600 tokens recomputed (SGLang's counters)")


def test_one_scrape_gives_no_cost(tmp_path):
    p = tmp_path / "m.prom"
    p.write_text(prom([("2026-11-02T08:15:00Z", 10, 4000, 1000)]))
    rc = run(p).findings.recompute
    assert rc["tokens"] is None and not rc.get("tokens_is_upper_bound")
