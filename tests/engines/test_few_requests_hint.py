"""What to add when the log has some request lines, too few for a number: more of them, never a
logging setting the log already shows on.

The block-size fix needs 20 prompt lengths for a p95, the token-budget fix 2 timed arrivals for a
rate. A log with request logging on and a handful of Received lines (with their prompt_token_ids)
was told to turn on DEBUG logging / --enable-log-requests, which it had. Hand-written logs: a few
requests with prompts, none, and request lines without prompts (vLLM 0.11.1+ at INFO).
"""

from __future__ import annotations

from pathlib import Path

from preemptlog.analysis import AnalyzeOptions, analyze

OPTS = AnalyzeOptions(tz="UTC", year=2026)
STATS = (
    "(APIServer pid=1) INFO 12-01 10:00:{s:02d} [loggers.py:208] Engine 000: Avg prompt throughput: 1.0 tokens/s, "
    "Avg generation throughput: 2.0 tokens/s, Running: 30 reqs, Waiting: 12 reqs, GPU KV cache usage: 99.0%, "
    "Prefix cache hit rate: 0.0%"
)
MARKER = (
    "(EngineCore pid=2) DEBUG 12-01 10:00:{s:02d} [gpu_model_runner.py:1] Request r{i} status: RequestStatus.PREEMPTED"
)
WITH_IDS = (
    "(APIServer pid=1) INFO 12-01 10:00:{s:02d} [logger.py:41] Received request r{i}: prompt: 'hi', params: "
    "SamplingParams(n=1, max_tokens=64), prompt_token_ids: [1, 2, 3], lora_request: None."
)
NO_IDS = (
    "(APIServer pid=1) INFO 12-01 10:00:{s:02d} [logger.py:49] Received request r{i}: params: "
    "SamplingParams(n=1, max_tokens=64), lora_request: None."
)


def _summary(tmp_path: Path, requests: list[str]) -> dict:
    lines = [STATS.format(s=1), *requests, MARKER.format(s=20, i=0), STATS.format(s=21)]
    p = tmp_path / "vllm.log"
    p.write_text("\n".join(lines) + "\n")
    return analyze([str(p)], OPTS).summary()


def _adds(s: dict) -> list[str]:
    return [x["add"] for x in s["to_know_more"]]


def test_a_few_prompts_ask_for_more_of_them_not_for_logging_already_on(tmp_path):
    s = _summary(tmp_path, [WITH_IDS.format(s=2 + k, i=k) for k in range(3)])
    adds = _adds(s)
    assert "the request lines of a longer stretch of the log, or the plugin's request records" in adds
    assert not any("DEBUG logging" in a or "--enable-log-requests" in a for a in adds), adds
    more = next(x for x in s["to_know_more"] if x["add"].startswith("the request lines of a longer stretch"))
    assert "--block-size" in more["settles"]


def test_one_request_line_asks_for_more_timed_ones(tmp_path):
    s = _summary(tmp_path, [WITH_IDS.format(s=2, i=0)])
    adds = _adds(s)
    assert not any("--enable-log-requests" in a for a in adds), adds
    more = next(x for x in s["to_know_more"] if x["add"].startswith("the request lines of a longer stretch"))
    # the rate (max_num_batched_tokens' buffer) and the prompt p95 (block size) ask for the same thing, once
    assert "--max-num-batched-tokens" in more["settles"] and "--block-size" in more["settles"]


def test_request_lines_without_prompts_still_ask_for_debug_logging(tmp_path):
    s = _summary(tmp_path, [NO_IDS.format(s=2 + k, i=k) for k in range(3)])
    assert any(a.startswith("DEBUG logging (VLLM_LOGGING_LEVEL=DEBUG") for a in _adds(s)), _adds(s)


def test_no_request_lines_ask_for_request_logging(tmp_path):
    s = _summary(tmp_path, [])
    assert any(a.startswith("log requests (--enable-log-requests") for a in _adds(s)), _adds(s)


def test_the_measured_inputs_say_how_many_there_are(tmp_path):
    from preemptlog.engines.vllm import fixes

    lines = [STATS.format(s=1), *[WITH_IDS.format(s=2 + k, i=k) for k in range(3)], MARKER.format(s=20, i=0)]
    p = tmp_path / "vllm.log"
    p.write_text("\n".join(lines) + "\n")
    a = analyze([str(p)], OPTS)
    m = fixes.measure(a)
    assert m["prompt_p95"].value is None
    assert (
        m["prompt_p95"].how.startswith("only 3 prompt length(s) in the bundle (") and "20 needed" in m["prompt_p95"].how
    )
    assert m["peak_rps"].value is not None  # 3 timed arrivals: a rate
