"""The model engine's decode stretches (issue 36, item 5) change no trace.

``whatif/engine_model.replay`` takes the steps in which every running request decodes one token
and nothing arrives, finishes, is admitted or preempted together (``_decode_stretch``). The trace
must be the one the step-by-step loop gives: random workloads and settings, both arrival modes,
compared field by field with the stretches turned off.
"""

from __future__ import annotations

import dataclasses
import random

import pytest

from preemptlog.whatif import engine_model as em
from preemptlog.whatif.workload import ReplayConfig, Workload, WRequest


def _trace(t: em.Trace) -> dict:
    return {f.name: getattr(t, f.name) for f in dataclasses.fields(t) if f.name != "wall_s"}


def _replay(wl: Workload, cfg: ReplayConfig, arrivals: str, stretches: bool, monkeypatch: pytest.MonkeyPatch) -> dict:
    with monkeypatch.context() as m:
        if not stretches:
            m.setattr(em, "_decode_stretch", lambda *a, **k: 0)
        return _trace(em.replay(wl, cfg, em.StepClock(0.01, 1e-4), arrivals=arrivals, max_steps=4000))


def _case(rng: random.Random) -> tuple[Workload, ReplayConfig]:
    reqs, t = [], 0.0
    for i in range(rng.randint(1, 24)):
        t += rng.expovariate(rng.choice([0.5, 5, 50]))
        out = rng.randint(1, 120)
        step = int(t * 10) if rng.random() < 0.9 else None
        reqs.append(WRequest(f"r{i}", t, rng.randint(1, 300), out, out, rng.randint(0, 3), arrival_step=step))
    bs = rng.choice([1, 4, 16])
    biggest = max(-(-(r.prompt_tokens + r.output_tokens) // bs) for r in reqs)
    cfg = ReplayConfig(
        num_gpu_blocks=biggest + rng.randint(2, 300),
        block_size=bs,
        max_num_seqs=rng.randint(1, 48),
        max_num_batched_tokens=rng.choice([16, 64, 512, 8192]),
        enable_chunked_prefill=rng.random() < 0.7,
        scheduling_policy=rng.choice(["fcfs", "priority"]),
        watermark=rng.choice([0.0, 0.01, 0.1]),
        long_prefill_token_threshold=rng.choice([0, 0, 32]),
        max_model_len=rng.choice([None, None, 500, 200]),
        reserve_full_isl=rng.random() < 0.5,
    )
    return Workload(reqs, "log", "test"), cfg


@pytest.mark.parametrize("seed", range(12))
def test_stretches_give_the_step_by_step_trace(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    for _ in range(6):
        wl, cfg = _case(rng)
        for arrivals in ("step", "time"):
            want = _replay(wl, cfg, arrivals, False, monkeypatch)
            got = _replay(wl, cfg, arrivals, True, monkeypatch)
            assert got == want, ([k for k in want if got[k] != want[k]], cfg, arrivals)


def test_stretches_are_taken() -> None:
    """A long decode with room to spare runs in a few loop turns (the point of the stretches)."""
    wl = Workload([WRequest("a", 0.0, 10, 500, 500, arrival_step=0)], "log", "test")
    calls = 0
    orig = em._decode_stretch

    def counting(*a, **k):
        nonlocal calls
        calls += 1
        return orig(*a, **k)

    em._decode_stretch = counting
    try:
        tr = em.replay(wl, ReplayConfig(num_gpu_blocks=1000), em.StepClock(0.01, 1e-4))
    finally:
        em._decode_stretch = orig
    assert tr.output_tokens == 500 and tr.finish_step["a"] == len(tr.step_tokens) - 1  # then one flush step
    assert calls < 10
