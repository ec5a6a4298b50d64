"""The what-if's step clock: the records' own step times first; a fit over stats lines only with
enough intervals and a stated error; else ``latency not modelled``.

Shapes: records with step times (and stats lines that would fit another clock: the records win);
records with an idle gap (the step counter stands still: the gap adds nothing); stats lines only,
few (one, five); stats lines only, many, on a known clock (the fit recovers it, error stated);
many but scattered (not modelled); and a verified fix without a clock (its text says so).
"""

from __future__ import annotations

import json

import pytest

from tests.whatif.test_whatif import _bundle, _cli, _log

T0 = 1796000000.0


def _stats_lines(points: list[tuple[float, float, int]]) -> str:
    """One stats line per (step seconds, tokens per step, running): G = R / s, P = tok x G / R - G."""
    h = "(APIServer pid=1) INFO 08-01 10:{m:02d}:{s:02d} [loggers.py:118] "
    out = []
    for k, (sec, tok, run) in enumerate(points):
        g = run / sec
        p = tok * g / run - g
        t = 60 + k * 10
        out.append(
            h.format(m=t // 60, s=t % 60) + f"Engine 000: Avg prompt throughput: {p:.1f} tokens/s, Avg generation "
            f"throughput: {g:.1f} tokens/s, Running: {run} reqs, Waiting: 3 reqs, GPU KV cache usage: 90.0%, "
            "Prefix cache hit rate: 0.0%"
        )
    return "\n".join(out) + "\n"


def _log_with(points: list[tuple[float, float, int]]) -> str:
    return _log(stats=False).replace("max_seq_len=4096", "max_seq_len=1024") + _stats_lines(points)


def _records(d, *, step_s: float, gap_s: float = 0.0, n: int = 12) -> None:
    """Request records on an engine stepping every ``step_s``; with ``gap_s``, the second half
    arrives after an idle gap (no steps) of that length."""
    lines = []
    t, step = T0, 0
    for i in range(n):
        if gap_s and i == n // 2:
            t += gap_s
        lines.append(
            {"type": "request", "ts": t, "step": step, "engine": "0", "request_id": f"r{i}", "phase": "arrival"}
            | {"prompt_tokens": 40, "max_tokens": 10, "v": 2}
        )
        for _ in range(10):  # ten steps, each recorded by a scheduled record of this request
            step += 1
            t += step_s
            lines.append(
                {"type": "request", "ts": t, "step": step, "engine": "0", "request_id": f"r{i}", "phase": "scheduled"}
                | {"v": 2}
            )
        lines.append(
            {"type": "request", "ts": t, "step": step, "engine": "0", "request_id": f"r{i}", "phase": "finish"}
            | {"output_tokens": 10, "v": 2}
        )
    lines.append(
        {"type": "step", "ts": T0 + 0.001, "step": 1, "engine": "0", "at": "periodic", "block_size": 16}
        | {"num_total_blocks": 200, "num_free_blocks": 150, "v": 2}
    )
    (d / "records.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")


def _doc(d, *extra: str) -> tuple[dict, str]:
    p = _cli(str(d), "-f", "json", "--tz", "UTC", *extra)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout), p.stderr


def test_records_step_times_come_first(tmp_path):
    # stats lines on a 1 s step (which alone would be fitted) and records stepping every 5 ms
    d = _bundle(tmp_path, "both", _log_with([(1.0, 100.0 + 50 * k, 8) for k in range(8)]))
    _records(d, step_s=0.005)
    doc, err = _doc(d)
    st = doc["step_time"]
    assert "the block-table records' own step times" in st["how"] and st["latency_modelled"] is True
    assert st["base_s"] == pytest.approx(0.005, rel=0.01) and st["per_token_s"] == 0.0
    # one request at a time, 10 steps from arrival to finish: 50 ms on the records' clock
    obs = doc["scenarios"][0]
    assert obs["latency_p95_s"] == pytest.approx(0.05, rel=0.05)
    assert "step clock: the block-table records' own step times" in err


def test_an_idle_gap_in_the_records_adds_no_step_time(tmp_path):
    d = tmp_path / "gap"
    d.mkdir()
    _records(d, step_s=0.004, gap_s=300.0)
    st = _doc(d)[0]["step_time"]
    # the span over the step span would be (300 + 120 x 0.004) / 120 = 2.5 s per step
    assert st["base_s"] == pytest.approx(0.004, rel=0.01), st["how"]


@pytest.mark.parametrize("n_lines", [1, 5])
def test_few_stats_lines_leave_latency_not_modelled(tmp_path, n_lines):
    b = _bundle(tmp_path, f"few{n_lines}", _log_with([(0.02 + 0.001 * k, 200.0 + 40 * k, 8) for k in range(n_lines)]))
    doc, err = _doc(b, "--set", "max_num_seqs=4")
    st = doc["step_time"]
    assert st["latency_modelled"] is False and st["how"].startswith("latency not modelled")
    assert f"{n_lines} stats interval(s)" in st["how"] and "fewer than the 6" in st["how"]
    for row in doc["scenarios"]:
        assert row["latency_p95_s"] is None and row["ttft_p95_s"] is None and row["throughput_tok_s"] is None
        assert row["preemptions"] is not None  # counts are still replayed
    assert "step clock: latency not modelled" in err


def test_many_stats_lines_fit_a_known_clock_with_its_error(tmp_path):
    # step = 10 ms + 50 us x tokens, sampled at 8 token counts, a little noise
    noise = [0.0, 0.0004, -0.0003, 0.0002, -0.0004, 0.0003, 0.0, -0.0002]
    pts = [(0.010 + 50e-6 * tok + noise[k], tok, 8) for k, tok in enumerate(range(100, 900, 100))]
    b = _bundle(tmp_path, "many", _log_with(pts))
    st = _doc(b)[0]["step_time"]
    assert st["latency_modelled"] is True and "fitted on 8 stats interval(s)" in st["how"]
    assert st["base_s"] == pytest.approx(0.010, rel=0.1) and st["per_token_s"] == pytest.approx(50e-6, rel=0.1)
    assert st["error"] is not None and 0 < st["error"] < 0.05 and "% RMS of the mean step" in st["how"]


def test_scattered_stats_lines_are_not_a_clock(tmp_path):
    secs = [0.01, 0.4, 0.02, 0.9, 0.015, 0.6, 0.03, 0.8]
    b = _bundle(tmp_path, "scatter", _log_with([(s, 300.0, 8) for s in secs]))
    st = _doc(b)[0]["step_time"]
    assert st["latency_modelled"] is False and "off by" in st["how"] and "more than 50%" in st["how"]


def test_a_verified_fix_without_a_clock_says_latency_not_modelled(tmp_path):
    from preemptlog.analysis import AnalyzeOptions, analyze
    from preemptlog.pipeline.bundle import Workspace
    from preemptlog.whatif import verify_fixes

    b = _bundle(tmp_path, "fix", _log_with([(0.02, 300.0, 8)]))
    fix = {"id": "more", "option": "--num-gpu-blocks-override", "suggested": 400, "rank": 1, "expected_effect": "e"}
    with Workspace() as ws:
        a = analyze([str(b)], AnalyzeOptions(tz="UTC"), workspace=ws)
        kept, _ = verify_fixes(a, [fix])
    rp = kept[0]["replay"]
    assert rp["observed"]["latency_p95_s"] is None and rp["fixed"]["latency_p95_s"] is None
    assert kept[0]["verified"].endswith("preemptions, latency not modelled")


def test_two_servers_records_never_pair_their_steps(tmp_path):
    # Two servers' records (folders a/ and b/), both engine "0", each stepping every 4 ms, their step
    # counters far apart and their records interleaved in time: each server's steps are its own
    # clock. Paired across servers (as one engine "0"), the step counter jumps between the servers'
    # counters and the times by a fraction of a step, giving no 4 ms clock.
    d = tmp_path / "two"
    d.mkdir()
    for name, offset, first_step in (("a", 0.0, 0), ("b", 0.002, 50_000)):
        sub = d / name
        sub.mkdir()
        _records(sub, step_s=0.004)
        rows = [json.loads(x) for x in (sub / "records.jsonl").read_text().splitlines()]
        for r in rows:
            r["ts"] += offset
            r["step"] += first_step
        (sub / "records.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    st = _doc(d)[0]["step_time"]
    assert "the block-table records' own step times" in st["how"]
    assert st["base_s"] == pytest.approx(0.004, rel=0.01), st["how"]
