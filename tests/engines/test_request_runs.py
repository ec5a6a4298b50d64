"""Request lines as runs (issue 18): the analysis is the same as with one records row per line.

Above ``PREEMPTLOG_REQUEST_RUNS_MIN`` request lines a file's request lines become runs
(sources/vllm_log.py). Every input here is analysed twice, with runs forced (minimum 0) and
with runs off (a minimum no file reaches), and everything a consumer reads must agree: the
events, the requests frame, the records' other rows (time, seq, time precision), the summary
and explain's window rows (re-read from the file).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from preemptlog.analysis import Analysis, AnalyzeOptions, analyze
from preemptlog.joiner import window_rows
from preemptlog.sources import vllm_log

ROOT = Path(__file__).resolve().parents[2]
OFF = "1000000000"


def _hdr(sec: int, frac: str = "") -> str:
    return f"05-01 10:{sec // 60:02d}:{sec % 60:02d}{frac}"


def _busy_log(n_sec: int = 40, per_sec: int = 5) -> list[str]:
    """V1 API-server lines: several requests a second, stats, markers, hooks, untimed lines."""
    out = []
    for s in range(n_sec):
        for k in range(per_sec):
            rid = f"chatcmpl-{s:03d}{k}"
            out.append(
                f"(APIServer pid=7) INFO {_hdr(s)} [logger.py:43] Received request {rid}: params: "
                f"SamplingParams(n=1, max_tokens={16 * (k + 1)}), lora_request: None."
            )
            if k % 2 == 0:
                out.append(
                    f"(APIServer pid=7) DEBUG {_hdr(s)} [entrypoints/logger.py:60] Request {rid} details: "
                    f"prompt: 'x', prompt_token_ids: [{', '.join(str(i) for i in range(k + 1))}], prompt_embeds shape: None."
                )
            out.append(f"(APIServer pid=7) INFO {_hdr(s)} [async_llm.py:366] Added request {rid}-0123abcd.")
            out.append(f'INFO:     127.0.0.1:5535{k} - "POST /v1/chat/completions HTTP/1.1" 200 OK')
        if s % 7 == 3:
            out.append(
                f"(EngineCore_DP0 pid=9) DEBUG {_hdr(s)} [core.py:1] Request chatcmpl-{s:03d}1 status: RequestStatus.PREEMPTED"
            )
            out.append(
                f"(APIServer pid=7) INFO {_hdr(s)} [async_llm.py:499] Aborted request chatcmpl-{s:03d}2-0123abcd."
            )
        if s % 10 == 9:
            out.append(
                f"(APIServer pid=7) INFO {_hdr(s)} [loggers.py:208] Engine 000: Avg prompt throughput: 1.0 tokens/s, "
                f"Avg generation throughput: 2.0 tokens/s, Running: 3 reqs, Waiting: 1 reqs, Preemptions: 1, "
                "GPU KV cache usage: 99.0%, Prefix cache hit rate: 0.0%"
            )
        if s % 9 == 5:
            out.append("[SCHEDULER] Available blocks: 3, Pending reqs: 2, Running reqs: 5")  # untimed hook line
            out.append("Added request untimed-" + str(s) + ".")  # an untimed request line
    return out


SHAPES = {
    "busy": _busy_log(),
    # Fractions make every line its own run; a lone CR splits one line into two records.
    "fractions": [
        f"INFO {_hdr(s, f'.{k}00')} [logger.py:1] Received request r{s}-{k}: params: SamplingParams(max_tokens=5)"
        for s in range(10)
        for k in range(3)
    ]
    + ["INFO 05-01 10:00:11 [a.py:1] Added request cr1.\rINFO 05-01 10:00:11 [a.py:1] Received request cr2: x"],
    # A V0 log: warnings with ids, request lines of several seconds, a marker repeating a warning.
    "v0": [
        line
        for s in range(12)
        for line in (
            (
                f"INFO {_hdr(s)} async_llm_engine.py:553] Received request cmpl-{s}a: prompt: 'hi', params: "
                "SamplingParams(n=1, max_tokens=9), prompt_token_ids: [1, 2, 3], lora_request: None."
            ),
            (
                f"INFO {_hdr(s)} async_llm_engine.py:553] Received request cmpl-{s}b: prompt: 'yo', params: "
                "SamplingParams(n=1, max_tokens=3), prompt_token_ids: [4], lora_request: None."
            ),
            (
                f"WARNING {_hdr(s)} scheduler.py:1077] Sequence group cmpl-{s}a is preempted by "
                f"PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. "
                f"total_num_cumulative_preemption={s + 1}"
            ),
            f"INFO {_hdr(s)} async_llm_engine.py:133] Finished request cmpl-{s}b.",
            f"DEBUG {_hdr(s)} [scheduler.py:10] Req cmpl-{s}a PREEMPTED",
        )
    ],
    # Full dates (docker --timestamps), no vLLM header.
    "rfc3339": [
        f"2024-05-01T10:00:{s:02d}.{k}00Z Received request k{s}{k}: params: SamplingParams(max_tokens=4)"
        for s in range(10)
        for k in range(4)
    ]
    + [
        (
            "2024-05-01T10:00:05.000Z Sequence group k51 is preempted by PreemptionMode.RECOMPUTE mode. "
            "total_num_cumulative_preemption=1"
        )
    ],
}


def _analyse(path: Path, runs: bool, monkeypatch: pytest.MonkeyPatch) -> Analysis:
    monkeypatch.setenv("PREEMPTLOG_REQUEST_RUNS_MIN", "0" if runs else OFF)
    return analyze([str(path)], AnalyzeOptions(tz="UTC"))


def _write(tmp_path: Path, name: str, lines: list[str]) -> Path:
    p = tmp_path / f"{name}.log"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_runs_change_nothing(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path, name, SHAPES[name])
    with_runs = _analyse(path, True, monkeypatch)
    without = _analyse(path, False, monkeypatch)
    runs = with_runs.records.get_column("rq_count")
    assert runs.null_count() < runs.len()  # runs were made
    assert_frame_equal(with_runs.events, without.events)
    assert_frame_equal(with_runs.requests, without.requests)
    if without.verdicts is not None:
        assert with_runs.verdicts is not None
        assert_frame_equal(with_runs.verdicts, without.verdicts)
    # Every record that is not a request line: same time, precision and seq.
    hot = pl.col("kind").is_in(list(vllm_log.HOT_KINDS))
    cols = ["file_id", "n", "seg", "kind", "stream", "seq", "time", "time_precision", "text"]
    assert_frame_equal(with_runs.records.filter(~hot).select(cols), without.records.filter(~hot).select(cols))
    assert with_runs.summary() == without.summary()
    # Request lines counted by their runs: as many as the rows they replaced.
    n_req = without.records.filter(hot).height
    kept = with_runs.records.filter(hot)
    assert int(kept.get_column("rq_count").fill_null(1).sum()) == n_req
    for event_id in without.events.get_column("event_id").to_list()[:5]:
        for before, after in ((10.0, 2.0), (3.0, 0.0)):
            assert_frame_equal(
                window_rows(with_runs, event_id, before, after), window_rows(without, event_id, before, after)
            )


def test_runs_only_above_the_minimum(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path, "busy", SHAPES["busy"])
    monkeypatch.setenv("PREEMPTLOG_REQUEST_RUNS_MIN", OFF)
    rec, rows = vllm_log.read_split(str(path), 0)
    assert rows == [] and rec.get_column("rq_count").null_count() == rec.height
    assert_frame_equal(rec.drop(list(vllm_log.RUN_KIND_COLUMNS)), vllm_log.read(str(path), 0))
    monkeypatch.setenv("PREEMPTLOG_REQUEST_RUNS_MIN", "0")
    rec, rows = vllm_log.read_split(str(path), 0)
    full = vllm_log.read(str(path), 0)
    hot = pl.col("kind").is_in(list(vllm_log.HOT_KINDS))
    assert rec.height < full.height
    assert int(rec.get_column("rq_count").fill_null(1).sum()) == full.height
    # The per-request frames: Received/Finished/Aborted lines, then details lines; Added lines only counted.
    frames = [r.rows.collect() for r in rows]
    assert not any(r.folded for r in rows)  # no spill_dir: in memory
    kinds = [set(f.get_column("kind").cast(pl.String)) for f in frames]
    assert kinds == [{"req_received", "req_aborted"}, {"req_details"}]
    assert [r.height for r in rows] == [f.height for f in frames]
    assert [r.details for r in rows] == [False, True]
    n_rows = sum(f.height for f in frames)
    want = full.filter(hot & (pl.col("kind") != "req_added")).height
    assert n_rows == want
    # Run rows keep no request fields.
    assert (
        rec.filter(pl.col("rq_count").is_not_null()).get_column("req_id").null_count()
        == rec.get_column("rq_count").is_not_null().sum()
    )


def test_rotated_sets_keep_request_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stream of several files keeps one row per request line (its overlap check compares them)."""
    lines = SHAPES["busy"]
    d = tmp_path / "rot"
    d.mkdir()
    half = len(lines) // 2
    (d / "vllm.log.1").write_text("\n".join(lines[: half + 10]) + "\n")  # 10 lines repeated (copytruncate)
    (d / "vllm.log").write_text("\n".join(lines[half:]) + "\n")
    monkeypatch.setenv("PREEMPTLOG_REQUEST_RUNS_MIN", "0")
    a = analyze([str(d)], AnalyzeOptions(tz="UTC"))
    monkeypatch.setenv("PREEMPTLOG_REQUEST_RUNS_MIN", OFF)
    b = analyze([str(d)], AnalyzeOptions(tz="UTC"))
    assert a.records.get_column("rq_count").null_count() == a.records.height
    assert_frame_equal(a.requests, b.requests)
    assert a.warnings == b.warnings


def _cli(args: list[str], runs: bool) -> bytes:
    env = dict(os.environ, PREEMPTLOG_REQUEST_RUNS_MIN="0" if runs else OFF, TZ="UTC")
    env.pop("PREEMPTLOG_FORMAT", None)
    return subprocess.run(
        [sys.executable, "-m", "preemptlog", *args], env=env, capture_output=True, check=True, cwd=ROOT
    ).stdout


def test_cli_outputs_byte_identical(tmp_path: Path) -> None:
    path = str(_write(tmp_path, "busy", SHAPES["busy"]))
    for fmt in ("json", "ndjson"):
        assert _cli(["analyze", path, "-f", fmt, "-q"], True) == _cli(["analyze", path, "-f", fmt, "-q"], False)
    first = _cli(["analyze", path, "-f", "ndjson", "-q"], False).splitlines()[0]
    import json

    event_id = json.loads(first)["event_id"]
    for extra in ([], ["--all"]):
        args = ["explain", event_id, path, "-f", "json", *extra]
        out = _cli(args, True)
        assert out == _cli(args, False)
        assert b"req_received" in out or extra == []
