"""The model engine's prefix cache on hand-made workloads (issue 27, item 6; no vLLM needed).

Shapes: prompts sharing a 10-block prefix with recorded block hashes (computed once), the same
without hashes (nothing shared), at another block size (the 16-token hashes still name the shared
tokens); a tight pool without shared prompts (a victim hits its own cached blocks when it
resumes). tests/whatif/test_whatif_vllm_checks.py holds the pool to the real scheduler step by step.
"""

from __future__ import annotations

from preemptlog.whatif.engine_model import StepClock, replay
from preemptlog.whatif.workload import ReplayConfig, Workload, WRequest


def _shared(n: int, shared_blocks: int, hashes: bool) -> Workload:
    reqs = []
    for i in range(n):
        p = shared_blocks * 16 + 40
        hs = tuple(
            [f"common-{j}" for j in range(shared_blocks)] + [f"own{i}-{j}" for j in range(shared_blocks, p // 16)]
        )
        reqs.append(WRequest(f"r{i}", 0.0, p, 30, 30, arrival_step=3 * i, block_hashes=hs if hashes else None))
    return Workload(reqs, "records", "test")


def test_shared_prefixes_are_computed_once_and_need_the_hashes():
    cfg = ReplayConfig(num_gpu_blocks=400, block_size=16, max_num_seqs=16, enable_prefix_caching=True)
    clock = StepClock(0.01, 0.0)
    wl = _shared(20, 10, hashes=True)
    hit = replay(wl, cfg, clock, arrivals="step", hash_block=16)
    miss = replay(_shared(20, 10, hashes=False), cfg, clock, arrivals="step", hash_block=16)
    off = replay(wl, ReplayConfig(num_gpu_blocks=400, block_size=16, max_num_seqs=16), clock, arrivals="step")
    # the 160-token common prefix is prefilled once; the other 19 prompts compute only their 40 own tokens
    assert sum(miss.step_tokens) == sum(off.step_tokens) == 20 * (200 + 29)
    assert sum(hit.step_tokens) == 20 * (200 + 29) - 19 * 160
    # at another block size the hashes (of 16-token blocks) still say which tokens are shared
    big = replay(
        wl,
        ReplayConfig(num_gpu_blocks=200, block_size=32, max_num_seqs=16, enable_prefix_caching=True),
        clock,
        arrivals="step",
        hash_block=16,
    )
    assert sum(big.step_tokens) == 20 * (200 + 29) - 19 * 160


def test_a_victim_hits_its_own_cached_blocks_when_it_resumes():
    # no shared prompts; a tight pool preempts; freed blocks stay cached until reused
    reqs = [WRequest(f"r{i}", 0.0, 100, 120, 120, arrival_step=i) for i in range(6)]
    wl = Workload(reqs, "records", "test")
    tight = dict(num_gpu_blocks=30, block_size=16, max_num_seqs=8)
    on = replay(wl, ReplayConfig(**tight, enable_prefix_caching=True), StepClock(0.01, 0.0), arrivals="step")
    off = replay(wl, ReplayConfig(**tight), StepClock(0.01, 0.0), arrivals="step")
    assert off.preemptions > 0 and on.unfinished == 0 and off.unfinished == 0
    assert sum(on.step_tokens) < sum(off.step_tokens)  # some resumed prefill came from the cache
