"""The what-if's copies of vLLM against the real vLLM 0.32 (the `vllm` engine's driver, fake executor).

- start-up checks: for hand-written configurations on both sides of each check, preemptlog's
  ``vLLM would not start`` (whatif.core.refusal) must agree with what the real EngineCore does
  (the driver returns vLLM's own ValueError), and the length it says vLLM would accept must be the
  one in vLLM's message;
- the model engine's steps against the real scheduler's on a workload that drains and refills
  (vLLM's 0-token step after the last running request finishes).

One driver process for each (vLLM imported once, ~20 s). A real vLLM run: slow; in CI a missing
venv is a failure, elsewhere a skip.
"""

from __future__ import annotations

import re

import pytest

from preemptlog.whatif.core import refusal
from preemptlog.whatif.engine_vllm import replay_vllm_many
from preemptlog.whatif.metrics import StepTime
from preemptlog.whatif.workload import ReplayConfig, Workload, WRequest

from ..capture.test_capture_vllm import PY, REAL_VLLM

pytestmark = REAL_VLLM
CLOCK = StepTime(0.01, 0.0, "test", True)


def _python() -> str:
    if PY is None:
        pytest.fail("no vLLM 0.32 venv in CI: .ci/run builds it with ci/vllm-venv")
    return str(PY)


def test_start_up_checks_agree_with_the_real_engine_core():
    wl = Workload([WRequest(f"req-{i}", 0.0, 100, 40, 40, arrival_step=i) for i in range(6)], "records", "test")
    base = ReplayConfig(num_gpu_blocks=200, max_model_len=2032, max_num_batched_tokens=2048, max_num_seqs=16)
    from dataclasses import replace

    cfgs = [
        base,
        replace(base, num_gpu_blocks=96),  # the issue's: 1520 accepted
        replace(base, num_gpu_blocks=128),  # 127 usable x 16 = 2032: starts
        replace(base, num_gpu_blocks=127),  # one block short: 2016
        replace(base, num_gpu_blocks=40, block_size=32, max_model_len=1300),  # 39 x 32 = 1248
        replace(base, enable_chunked_prefill=False, max_num_batched_tokens=1024),
        replace(base, max_num_batched_tokens=8),  # below max_num_seqs
        replace(base, max_model_len=120),  # every request stops at 120 tokens: 20 of its 40 outputs
        replace(base, max_model_len=100),  # every prompt is 100 tokens: refused at input, nothing runs
    ]
    traces = replay_vllm_many(wl, cfgs, CLOCK, arrivals="step", python=_python())
    from preemptlog.whatif.engine_model import StepClock, replay

    for cfg, tr in zip(cfgs, traces, strict=True):
        ours = refusal(wl, cfg)
        assert (ours is None) == (tr.refused is None), (cfg, ours, tr.refused)
        if ours is None:
            model = replay(wl, cfg, StepClock(0.01, 0.0), arrivals="step")
            assert tr.unfinished == 0 and model.unfinished == 0
            assert model.output_tokens == tr.output_tokens, cfg
            continue
        said = re.search(r"estimated maximum model length is (\d+)", tr.refused or "")
        mine = re.search(r"estimated maximum model length is (\d+)", ours)
        assert (said is None) == (mine is None), (ours, tr.refused)
        if said and mine:
            assert said.group(1) == mine.group(1), (ours, tr.refused)
    assert "is 1520" in (traces[1].refused or "")
    assert traces[0].output_tokens == 6 * 40 and traces[-2].output_tokens == 6 * 20 and traces[-1].output_tokens == 0


def _waves() -> Workload:
    """Four waves of ten requests under KV pressure; each wave drains before the next is due."""
    reqs = []
    for w in range(4):
        for j in range(10):
            i = w * 10 + j
            out = 150 + 3 * j
            reqs.append(WRequest(f"req-{i}", 0.0, 60 + 7 * j, out, out, arrival_step=600 * w + j))
    return Workload(reqs, "records", "test")


def test_the_model_engine_steps_as_the_real_scheduler_across_drains():
    from preemptlog.whatif.engine_model import StepClock, replay

    wl = _waves()
    cfg = ReplayConfig(num_gpu_blocks=48, block_size=16, max_num_seqs=8, max_num_batched_tokens=256)
    (real,) = replay_vllm_many(wl, [cfg], CLOCK, arrivals="step", python=_python())
    model = replay(wl, cfg, StepClock(0.01, 0.0), arrivals="step")
    assert real.unfinished == 0 and model.unfinished == 0
    assert real.preemptions > 10, real.preemptions
    # each drain is followed by vLLM's 0-token step: the next wave is added one step later
    drains = [i for i, t in enumerate(real.step_tokens) if t == 0]
    assert len(drains) >= 4, drains
    assert model.arrival_step == real.arrival_step
    assert len(model.step_tokens) == len(real.step_tokens)
    assert [i for i, t in enumerate(model.step_tokens) if t == 0] == drains
    # so the preemptions land on the same steps, the same victims
    assert model.preempted == real.preempted


def _shared_prefixes(n: int = 120) -> Workload:
    """Prompts that share one of four prefixes (0-8 blocks of 16 tokens), then unique blocks; the
    block hashes as the plugin records them (equal hash = equal prefix)."""
    import random

    rng = random.Random(3)
    prefixes = [[f"p{k}-{j}" for j in range(8)] for k in range(4)]
    reqs, step = [], 0
    for i in range(n):
        step += rng.choice((0, 1, 2, 3))
        k, shared = rng.randrange(4), rng.randint(0, 8)
        p = shared * 16 + rng.randint(1, 200)
        hs = tuple(prefixes[k][:shared] + [f"u{i}-{j}" for j in range(shared, p // 16)])
        o = rng.randint(4, 150)
        reqs.append(WRequest(f"req-{i}", 0.0, p, o, o, rng.randint(0, 2), arrival_step=step, block_hashes=hs))
    return Workload(reqs, "records", "test")


def test_the_model_engines_prefix_cache_is_the_real_one_step_by_step():
    """Item 6: with prefix caching and recorded block hashes the model engine's pool (hits, the free
    queue's eviction order, a victim's own blocks hit at resume) against the real scheduler fed
    the same prefix identity (the driver's tokens drawn from the hashes), at another block size
    too: every preemption at the same step, the same victims, the same lost tokens."""
    from dataclasses import replace

    from preemptlog.whatif.engine_model import StepClock, replay

    wl = _shared_prefixes()
    base = ReplayConfig(
        num_gpu_blocks=120,
        block_size=16,
        max_num_seqs=32,
        max_num_batched_tokens=1024,
        max_model_len=1904,
        enable_prefix_caching=True,
    )
    cfgs = [
        base,
        replace(base, num_gpu_blocks=90, max_model_len=1424, scheduling_policy="priority"),
        replace(base, watermark=0.05),
        replace(base, block_size=32, num_gpu_blocks=60, max_model_len=1888),  # hashes of 16-token blocks
    ]
    real = replay_vllm_many(wl, cfgs, CLOCK, arrivals="step", python=_python(), hash_block_size=16)
    off = replay(wl, replace(base, enable_prefix_caching=False), StepClock(0.01, 0.0), arrivals="step")
    for cfg, rt in zip(cfgs, real, strict=True):
        mt = replay(wl, cfg, StepClock(0.01, 0.0), arrivals="step", hash_block=16)
        assert rt.refused is None and rt.preemptions > 10, (cfg, rt.preemptions)
        assert mt.preempted == rt.preempted, cfg
        assert mt.recomputed_tokens == rt.recomputed_tokens and mt.step_tokens == rt.step_tokens, cfg
    assert off.preemptions != real[0].preemptions  # the cache changes the answer
