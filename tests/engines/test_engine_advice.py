"""Each engine's advice in its own terms, and its cause as the bundle shows it (sweep 3).

- An SGLang log with KV pressure and no retraction (an allocation error, the pool at its ceiling with
  requests waiting) gets SGLang's flag (``--max-running-requests``, computed from its batch lines as
  vLLM's ``--max-num-seqs`` is from vLLM's stats lines) and SGLang's request log as what to add,
  never vLLM's flags or vLLM's request logging.
- SGLang's ``Testing retraction.`` lines (forced by ``SGLANG_TEST_RETRACT``) are said as forced: never
  quoted as 'KV cache pool is full', never rated against the docs' 'about once a minute', never an
  input of a KV fix.
- A stock vLLM V1 log with 'Successfully reset prefix cache': a failed KV-block allocation is not the
  only trigger there (from 0.12.0, reset_prefix_cache(reset_running_requests=True) preempts every
  running request), cited to vLLM's scheduler.

Every log is written by hand from the engines' format strings (sglang-facts.md 2.1-2.2, vllm-facts.md).
"""

from __future__ import annotations

from pathlib import Path

from preemptlog import AnalyzeOptions, analyze, engines

ARGS = "[2026-03-14 09:59:00] server_args=ServerArgs(model_path='m', tp_size=1, retraction_policy='length')"
DECODE = (
    "[2026-03-14 10:00:{s:02d} TP0] Decode batch. #running-req: {run}, #token: {tok}, token usage: {use}, "
    "gen throughput (token/s): 1000.00, #queue-req: {q}"
)
ALLOC_ERROR = "[2026-03-14 10:00:{s:02d} TP0] Decode out of memory. Try to lower your batch size."
TESTING = "[2026-03-14 10:00:{s:02d} TP0] Testing retraction. #retracted_reqs: {n}, #new_tokens_gained: 128"
KV_FULL = (
    "[2026-03-14 10:00:{s:02d} TP0] KV cache pool is full. Retract requests. #retracted_reqs: {n}, "
    "#new_tokens_gained: 512, #new_token_ratio: 0.0980 -> 0.3000"
)
VLLM_FLAGS = ("--max-num-seqs", "--gpu-memory-utilization", "--num-gpu-blocks-override", "--enable-log-requests")


def _run(tmp_path: Path, name: str, lines: list[str]):
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n")
    return analyze([str(p)], AnalyzeOptions(tz="UTC"))


# ------------------------------------------------------------------ 1. SGLang's pressure, SGLang's flags


def _pressure_log() -> list[str]:
    return [
        ARGS,
        DECODE.format(s=0, run=50, tok=50000, use="1.00", q=3),
        ALLOC_ERROR.format(s=1),
        ALLOC_ERROR.format(s=2),
    ]


def test_sglang_pressure_without_retraction_gets_sglangs_flag_and_its_request_log(tmp_path):
    a = _run(tmp_path, "sglang.log", _pressure_log())
    s = a.summary()
    assert s["events"] == 0 and s["engine_kind"] == "sglang"
    fixes = s["fixes"]
    assert fixes, "the pool at its ceiling with requests waiting supports a change"
    assert {x["engine_kind"] for x in fixes} == {"sglang"}
    top = fixes[0]
    # 50 running at 100 % usage: 2.0 % of the pool each; floor(100 / (2.0 x 1.15)) = 43
    assert top["option"] == "--max-running-requests" and str(top["suggested"]) == "43"
    assert top["pressure"] is True and top["replay"]["status"] == "not replayed"
    words = str(s["fixes"]) + str(s["to_know_more"]) + str(s.get("to_know_more_line")) + str(s["headline"])
    for flag in VLLM_FLAGS:
        assert flag not in words, flag
    assert "vLLM 0.10.1" not in words and "prompt_token_ids" not in words
    know = " ".join(k["add"] for k in s["to_know_more"])
    assert "--log-requests" in know and "SGLang" in know
    # the capacity finding says its levers in SGLang's flags too (the report shows them)
    cap = a.findings.capacity
    assert [x["option"] for x in cap["fixes"]] == ["--max-running-requests"]


def test_sglang_pressure_lever_keeps_below_the_limit_in_force(tmp_path):
    args = ARGS.replace("tp_size=1,", "tp_size=1, max_running_requests=40,")
    a = _run(tmp_path, "sglang.log", [args, *_pressure_log()[1:]])
    s = a.summary()
    assert not [x for x in s["fixes"] if x["option"] in VLLM_FLAGS]
    assert not [x for x in s["fixes"] if x["option"] == "--max-running-requests"]
    dropped = {d["id"]: d["why"] for d in s["fixes_dropped"]}
    assert "max_running_requests" in str(dropped) or "--max-running-requests 43" in str(dropped)


def test_a_vllm_log_without_events_still_gets_vllms_pressure_lever(tmp_path):
    lines = [
        "INFO 03-14 09:59:50 [api_server.py:1] vLLM API server version 0.32.0",
        "INFO 03-14 09:59:51 [core.py:90] Initializing a V1 LLM engine (v0.32.0) with config: model='m'",
        "INFO 03-14 10:00:00 [loggers.py:318] Engine 000: Avg prompt throughput: 10.0 tokens/s, Avg generation "
        "throughput: 400.0 tokens/s, Running: 50 reqs, Waiting: 3 reqs, GPU KV cache usage: 100.0%, Prefix cache "
        "hit rate: 0.0%",
    ]
    a = analyze([str(_write(tmp_path, "vllm.log", lines))], AnalyzeOptions(tz="UTC", year=2026))
    opts = [x["option"] for x in a.summary()["fixes"]]
    assert "--max-num-seqs" in opts and "--max-running-requests" not in opts


def _write(tmp_path: Path, name: str, lines: list[str]) -> Path:
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n")
    return p


# ------------------------------------------------------------------ 2. forced retractions are not KV pressure


def test_forced_retractions_alone_are_said_as_forced_not_as_a_full_pool(tmp_path):
    lines = [
        DECODE.format(s=0, run=5, tok=500, use="0.10", q=0),
        TESTING.format(s=1, n=1),
        TESTING.format(s=2, n=1),
    ]
    a = _run(tmp_path, "sglang.log", lines)
    s = a.summary()
    head = s["headline"]
    assert s["events"] == 2
    assert "KV cache pool is full" not in head
    assert "within a minute" not in head and "per minute" not in head
    assert "2 'Testing retraction.' line(s) forced by SGLANG_TEST_RETRACT, not KV pressure" in head
    assert s["sglang"]["per_minute"] is None
    # no KV lever: the one change is the test switch itself (engines/sglang/fixes.py _test_retract)
    assert [(f["option"], f["suggested"], f["events_addressed"]) for f in s["fixes"]] == [
        ("SGLANG_TEST_RETRACT", "unset", 2)
    ]
    cause = engines.get("sglang").cause_words
    assert cause is not None
    words = cause(a)
    assert words is not None and "2 of these retraction(s) are forced" in words and "only when" not in words


def test_forced_lines_beside_kv_full_ones_are_neither_quoted_nor_rated(tmp_path):
    # two KV-pressure retractions 2 s apart, one forced retraction 70 s later
    lines = [
        ARGS,
        DECODE.format(s=0, run=60, tok=60000, use="1.00", q=5),
        KV_FULL.format(s=1, n=2),
        KV_FULL.format(s=3, n=1),
        "[2026-03-14 10:01:11 TP0] Testing retraction. #retracted_reqs: 1, #new_tokens_gained: 128",
    ]
    a = _run(tmp_path, "sglang.log", lines)
    s = a.summary()
    head = s["headline"]
    # the rate is of the two lines (3 requests retracted on them): SGLang's docs rate the message
    assert "'KV cache pool is full' on 2 line(s), 2 within a minute" in head
    assert "1 'Testing retraction.' line(s) forced by SGLANG_TEST_RETRACT" in head
    assert s["sglang"]["per_minute"] == 2.0 and s["sglang"]["span_s"] == 2.0
    cons = next(x for x in s["fixes"] if x["option"] == "--schedule-conservativeness")
    assert any(i.startswith("3 retraction(s)") for i in cons["inputs"]), cons["inputs"]
    assert engines.get("sglang").cause_words(a) is not None  # type: ignore[misc]


def test_no_forced_retraction_keeps_sglangs_static_cause(tmp_path):
    a = _run(tmp_path, "sglang.log", [ARGS, KV_FULL.format(s=1, n=1)])
    assert engines.get("sglang").cause_words(a) is None  # type: ignore[misc]
    assert "Testing" not in a.summary()["headline"]


# ------------------------------------------------------------------ 3. a reset of the prefix cache can preempt


def _reset_log(version: str) -> list[str]:
    stats = (
        "(APIServer pid=1) INFO 03-14 10:00:{s:02d} [loggers.py:318] Engine 000: Avg prompt throughput: 10.0 "
        "tokens/s, Avg generation throughput: 400.0 tokens/s, Running: 4 reqs, Waiting: 0 reqs, GPU KV cache "
        "usage: {u}%, Prefix cache hit rate: 20.0%"
    )
    return [
        f"(APIServer pid=1) INFO 03-14 09:59:50 [api_server.py:1] vLLM API server version {version}",
        f"(EngineCore_DP0 pid=2) INFO 03-14 09:59:51 [core.py:90] Initializing a V1 LLM engine (v{version}) with "
        "config: model='m', enable_prefix_caching=True",
        stats.format(s=0, u="30.0"),
        stats.format(s=10, u="31.0"),
        "(EngineCore_DP0 pid=2) INFO 03-14 10:00:15 [block_pool.py:861] Successfully reset prefix cache",
        stats.format(s=20, u="5.0"),
    ]


def test_a_stock_v1_log_with_a_reset_says_a_reset_can_preempt(tmp_path):
    a = analyze([str(_write(tmp_path, "vllm.log", _reset_log("0.32.0")))], AnalyzeOptions(tz="UTC", year=2026))
    s = a.summary()
    reason = s["not_visible"]["reason"]
    assert "reset_prefix_cache(reset_running_requests=True) preempts every running request" in reason
    assert "vllm/v1/core/sched/scheduler.py reset_prefix_cache" in reason and "from 0.12.0" in reason
    assert "vllm.log:5" in reason
    cause = engines.default().cause_words
    assert cause is not None
    words = cause(a)
    assert words is not None and "only when" not in words
    assert words.startswith("vLLM V1 preempts a running request when a KV-block allocation fails, or (from 0.12.0)")
    assert "the log shows 1 reset(s) (" in words and "vllm.log:5)" in words


def test_a_reset_before_0_12_does_not_preempt(tmp_path):
    a = analyze([str(_write(tmp_path, "vllm.log", _reset_log("0.11.0")))], AnalyzeOptions(tz="UTC", year=2026))
    reason = a.summary()["not_visible"]["reason"]
    assert "in vLLM 0.11.0 a reset does not preempt" in reason
    assert engines.default().cause_words(a) is None  # type: ignore[misc]  # the headline's words stand


def test_a_stock_v1_log_without_a_reset_keeps_its_words(tmp_path):
    lines = [x for x in _reset_log("0.32.0") if "Successfully reset" not in x]
    a = analyze([str(_write(tmp_path, "vllm.log", lines))], AnalyzeOptions(tz="UTC", year=2026))
    assert "prefix cache" not in a.summary()["not_visible"]["reason"]
    assert engines.default().cause_words(a) is None  # type: ignore[misc]


def test_the_headline_of_a_stock_v1_log_with_a_reset_does_not_say_only_allocations_preempt(tmp_path):
    a = analyze([str(_write(tmp_path, "vllm.log", _reset_log("0.32.0")))], AnalyzeOptions(tz="UTC", year=2026))
    s = a.summary()
    assert "only when a KV-block allocation fails" not in s["headline"]
    assert "reset_prefix_cache(reset_running_requests=True)" in s["cause"]["code"]
