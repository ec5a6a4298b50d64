"""The what-if's step clock is fitted where the engine was busy (issue 38, item 9).

vLLM runs one more (empty) step after its last request finishes before it idles (``EngineCore.step``
while ``has_requests()``), so the first arrival after an idle gap is recorded one step after the last
record before it: the whole gap between two records one step apart. Before, a capture with 30 s of
idle before a burst of 24 requests gave "51.846 ms per step (36.5 s over 704 steps)" where the busy
steps took 0.6-10.6 ms, and a replayed p95 latency of 32 s against the 4.7 s the client measured.

Hand-written records, shapes: one engine with a warm-up request, the empty step, 30 s of idle and a
burst (the request records' lifecycle tells the gap); two data-parallel engines, each with its own
step time and its own idle gap (pairs are taken per engine); step records only (no request
records), whose empty queues (running 0, waiting 0) tell the gap; the burst as a tar.gz bundle.
"""

from __future__ import annotations

import json
import math
import tarfile

import pytest

from tests.whatif.test_whatif import _cli

T0 = 1796000000.0


def _engine_records(engine: str, *, t0: float, step_s, gap_s: float, burst: int, outputs) -> tuple[list, dict]:
    """Records of one engine as the vLLM plugin writes them: a warm-up request (arrival, scheduled,
    finish), vLLM's empty step, ``gap_s`` of idle, then ``burst`` requests arriving together, all
    admitted at the next step (a large pool) and decoding one token a step. ``step_s(k)``: the
    duration of busy step k. Returns the records and the true latency of each burst request."""
    recs: list[dict] = []
    t, step = t0, 0

    def rec(kind: str, **kw):
        recs.append({"type": kind, "ts": round(t, 6), "step": step, "engine": engine, "v": 2} | kw)

    def advance():
        nonlocal t, step
        step += 1
        t += step_s(step)

    # warm-up: one request, 3 output tokens
    rec("request", request_id=f"{engine}-warm", phase="arrival", prompt_tokens=20, max_tokens=3)
    for k in range(3):
        advance()
        if k == 0:
            rec("request", request_id=f"{engine}-warm", phase="scheduled")
    rec("request", request_id=f"{engine}-warm", phase="finish", output_tokens=3, finish_reason="length")
    advance()  # vLLM's empty step: the finished request is flushed, nothing scheduled
    t += gap_s  # idle: the engine does not step
    arrive = t
    for i in range(burst):
        rec("request", request_id=f"{engine}-r{i}", phase="arrival", prompt_tokens=100, max_tokens=outputs(i))
    truth = {}
    left = {i: outputs(i) for i in range(burst)}
    first = True
    while left:
        advance()
        if first:
            for i in range(burst):
                rec("request", request_id=f"{engine}-r{i}", phase="scheduled")
            first = False
        for i in list(left):
            left[i] -= 1
            if left[i] == 0:
                rec("request", request_id=f"{engine}-r{i}", phase="finish", output_tokens=outputs(i))
                truth[f"{engine}-r{i}"] = t - arrive
                del left[i]
    rec("step", at="periodic", block_size=16, num_total_blocks=4096, num_free_blocks=4000)
    return recs, truth


def _busy_step(k: int) -> float:
    """0.6 ms to 10.6 ms, varying from step to step."""
    return 0.0006 + 0.010 * ((k * 37) % 11) / 10


def _write(d, recs: list[dict]) -> None:
    d.mkdir()
    recs = sorted(recs, key=lambda r: r["ts"])
    (d / "records.jsonl").write_text("\n".join(json.dumps(r) for r in recs) + "\n")


def _whatif(path, *extra: str) -> dict:
    p = _cli(str(path), "-f", "json", "--tz", "UTC", *extra)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def _p95(xs: list[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(0.95 * len(s)) - 1))]


def _burst(tmp_path, name="burst"):
    recs, truth = _engine_records(
        "0", t0=T0, step_s=_busy_step, gap_s=30.0, burst=24, outputs=lambda i: 40 + (i % 6) * 30
    )
    d = tmp_path / name
    _write(d, recs)
    busy = [r for r in recs if r["type"] == "request"]
    return d, truth, busy


def test_thirty_seconds_of_idle_before_a_burst_adds_no_step_time(tmp_path):
    d, truth, _ = _burst(tmp_path)
    doc = _whatif(d)
    st = doc["step_time"]
    # the busy steps' mean: every step the engine ran except the empty one before the gap
    steps = list(range(1, 4)) + list(range(5, 5 + 190))
    mean = sum(_busy_step(k) for k in steps) / len(steps)
    assert st["base_s"] == pytest.approx(mean, rel=0.05), st["how"]
    assert st["base_s"] < 0.011  # the busy steps take 0.6-10.6 ms; 30 s over one step would make it ~ 0.16 s
    assert "1 idle interval(s) left out (30.0" in st["how"] and "no request running or waiting" in st["how"]
    assert "busy steps" in st["how"]
    # the replayed latencies are the client's, within a few steps
    real = _p95(list(truth.values()))
    got = doc["scenarios"][0]["latency_p95_s"]
    assert got == pytest.approx(real, rel=0.1), (got, real)


def test_data_parallel_engines_each_keep_their_own_clock(tmp_path):
    a, _ = _engine_records("0", t0=T0, step_s=lambda k: 0.004, gap_s=30.0, burst=8, outputs=lambda i: 50)
    b, _ = _engine_records("1", t0=T0 + 0.0013, step_s=lambda k: 0.008, gap_s=12.0, burst=8, outputs=lambda i: 50)
    d = tmp_path / "dp"
    _write(d, a + b)
    st = _whatif(d)["step_time"]
    # 3 + 50 busy steps on each engine (the empty steps are inside the idle pairs), interleaved in time
    assert st["base_s"] == pytest.approx((0.004 + 0.008) / 2, rel=0.02), st["how"]
    assert "2 idle interval(s) left out (42.0" in st["how"]


def test_step_records_with_empty_queues_tell_the_gap_without_request_records(tmp_path):
    """No request records (a workload from the log's request lines): the plugin's periodic step records
    say the queues; the one written at the empty step (running 0, waiting 0) starts the idle gap."""
    recs = []
    t, step = T0, 0
    for burst in range(2):
        for _ in range(20):
            step += 1
            t += 0.005
            recs.append(
                {"type": "step", "ts": round(t, 6), "step": step, "engine": "0", "at": "periodic", "block_size": 16}
                | {"num_total_blocks": 512, "num_free_blocks": 300, "running": 4, "waiting": 0, "v": 2}
            )
        step += 1
        t += 0.001
        recs.append(
            {"type": "step", "ts": round(t, 6), "step": step, "engine": "0", "at": "periodic", "block_size": 16}
            | {"num_total_blocks": 512, "num_free_blocks": 511, "running": 0, "waiting": 0, "v": 2}
        )
        t += 60.0
    d = tmp_path / "steps"
    _write(d, recs)
    from preemptlog.analysis import AnalyzeOptions, analyze
    from preemptlog.pipeline.bundle import Workspace
    from preemptlog.whatif.metrics import step_time

    with Workspace() as ws:
        st = step_time(analyze([str(d)], AnalyzeOptions(tz="UTC"), workspace=ws))
    # from the first record on: 38 steps of 5 ms and 2 empty steps of 1 ms; the minute after the first
    # empty step (with the first step of the second burst) is left out
    assert st.base_s == pytest.approx((38 * 0.005 + 2 * 0.001) / 40, rel=0.01), st.how
    assert "1 idle interval(s) left out (60.005 s over 1 step(s)" in st.how


def test_the_burst_as_a_tar_gz_bundle(tmp_path):
    d, _, _ = _burst(tmp_path, "inner")
    arc = tmp_path / "incident.tar.gz"
    with tarfile.open(arc, "w:gz") as tf:
        tf.add(d, arcname="incident")
    st = _whatif(arc)["step_time"]
    assert st["base_s"] < 0.011 and "1 idle interval(s) left out" in st["how"], st["how"]


def test_without_any_state_the_clock_says_it_cannot_tell_idle_from_busy(tmp_path):
    """Preempt records only (a format-1 instrumented scheduler): nothing says whether the engine was
    idle between two of them; the clock says so (and the workload comes from the log, here none:
    the clock alone is checked)."""
    from preemptlog.analysis import AnalyzeOptions, analyze
    from preemptlog.pipeline.bundle import Workspace
    from preemptlog.whatif.metrics import step_time

    recs = [
        {"type": "event", "ts": T0 + 0.01 * k, "step": 2 * k, "engine": "0", "request_id": f"r{k}"}
        | {"action": "preempt", "blocks_before": 4, "blocks_after": 0}
        for k in range(1, 6)
    ]
    d = tmp_path / "events"
    _write(d, recs)
    with Workspace() as ws:
        st = step_time(analyze([str(d)], AnalyzeOptions(tz="UTC"), workspace=ws))
    assert st.base_s == pytest.approx(0.005, rel=0.01)
    assert "idle gaps cannot be told apart" in st.how
