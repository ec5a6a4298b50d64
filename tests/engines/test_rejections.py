"""Requests vLLM rejected at admission (engines/vllm/rejections.py): said, never counted as preemptions.

vLLM 0.32-0.34's AsyncLLM refuses a request before it runs and logs why: ``Request queue full -
rejecting request X (current=C, n=N, max=M).`` (--max-num-queued-reqs), ``Max queued tokens reached
- rejecting request X (current_tokens=C, max=M).`` (--max-num-queued-tokens), and 0.34's
fault-tolerance ``Engine S - rejecting request X.``. Hand-written logs, both scanners.
"""

from __future__ import annotations

import pytest

from preemptlog.analysis import AnalyzeOptions, analyze

OPTS = AnalyzeOptions(tz="UTC", year=2026)
STATS = (
    "(APIServer pid=1) INFO 12-02 03:01:{s:02d} [loggers.py:208] Engine 000: Avg prompt throughput: 100.0 tokens/s, "
    "Avg generation throughput: 200.0 tokens/s, Running: 40 reqs, Waiting: 64 reqs, GPU KV cache usage: 80.0%, "
    "Prefix cache hit rate: 0.0%"
)
QUEUE = (
    "(APIServer pid=1) DEBUG 12-02 03:01:{s:02d} [v1/engine/async_llm.py:374] Request queue full - rejecting request "
    "chatcmpl-{i} (current=104, n=1, max=104)."
)
TOKENS = (
    "(APIServer pid=1) DEBUG 12-02 03:01:{s:02d} [v1/engine/async_llm.py:389] Max queued tokens reached - rejecting "
    "request cmpl-{i}-0 (current_tokens=900000, max=800000)."
)
FAULT = "(APIServer pid=1) INFO 12-02 03:01:{s:02d} [v1/engine/async_llm.py:359] Engine unhealthy - rejecting request r-{i}."


def _run(tmp_path, lines):
    p = tmp_path / "vllm.log"
    p.write_text("\n".join(lines) + "\n")
    return analyze([str(p)], OPTS), str(p)


@pytest.mark.parametrize("scanner", ["compiled", "polars"])
def test_rejections_are_said_with_their_reason_and_never_counted(tmp_path, monkeypatch, scanner):
    if scanner == "polars":
        monkeypatch.setenv("PREEMPTLOG_SCANNER", "polars")
    lines = []
    for k in range(6):
        lines += [STATS.format(s=k * 5), QUEUE.format(s=k * 5 + 1, i=k)]
    lines += [TOKENS.format(s=40, i=7), FAULT.format(s=41, i=8), FAULT.format(s=42, i=9)]
    a, path = _run(tmp_path, lines)
    rej = a.frames["rejections"]
    assert rej.get_column("reason").to_list() == ["max_num_queued_reqs"] * 6 + [
        "max_num_queued_tokens",
        "engine unhealthy",
        "engine unhealthy",
    ]
    assert rej.get_column("limit").to_list() == [104] * 6 + [800000, None, None]
    assert rej.get_column("request_id").to_list()[:2] == ["chatcmpl-0", "chatcmpl-1"]
    assert rej.get_column("request_id").to_list()[-3:] == ["cmpl-7-0", "r-8", "r-9"]
    assert rej.get_column("line").to_list()[0] == 2
    notes = [n for n in a.summary()["notes"] if "rejected at admission" in n]
    assert notes == [
        f"{path}:2: 6 request(s) rejected at admission ('Request queue full': --max-num-queued-reqs 104): vLLM "
        "returned an error before they ran, so none was preempted (the field guide's queue overflow, G3, is this in "
        "upstream vLLM); not counted",
        f"{path}:13: 1 request(s) rejected at admission ('Max queued tokens reached': --max-num-queued-tokens "
        "800000): vLLM returned an error before they ran, so none was preempted (the field guide's queue overflow, "
        "G3, is this in upstream vLLM); not counted",
        f"{path}:14: 2 request(s) rejected at admission ('Engine unhealthy - rejecting request': the engine was not "
        "healthy (fault-tolerance mode)): vLLM returned an error before they ran, so none was preempted (the field "
        "guide's queue overflow, G3, is this in upstream vLLM); not counted",
    ]
    assert a.events.height == 0


def test_text_that_only_says_rejecting_is_no_rejection(tmp_path):
    a, _ = _run(
        tmp_path, [STATS.format(s=0), "(APIServer pid=1) INFO 12-02 03:01:03 [x.py:1] ok - rejecting request x"]
    )
    assert "rejections" not in a.frames or a.frames["rejections"].height == 0
    assert not [n for n in a.summary()["notes"] if "rejected at admission" in n]
