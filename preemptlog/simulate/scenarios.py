"""Named scenarios for ``preemptlog simulate``.

Each scenario is a function whose docstring documents it (the first line is
what ``preemptlog simulate --list`` prints) and whose return value overrides
the model's ``Params`` (``params``) and the writers' options (``output``).
``--set KEY=VALUE`` overrides any parameter on top; ``--duration`` sets
``duration``. Preemption counts quoted below are for seed 0 at the default
duration; they are what this model produces, not the field guide's numbers.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Scenario:
    name: str
    family: str
    kind: str  # "model" | "large"
    build: Callable[[], dict]

    @property
    def doc(self) -> str:
        return inspect.cleandoc(self.build.__doc__ or "")

    @property
    def summary(self) -> str:
        return self.doc.splitlines()[0] if self.doc else ""

    def spec(self) -> dict:
        spec = self.build()
        spec.setdefault("params", {})
        spec.setdefault("output", {})
        return spec


SCENARIOS: dict[str, Scenario] = {}


def scenario(name: str, family: str = "v0-0.6", kind: str = "model"):
    def deco(fn: Callable[[], dict]) -> Callable[[], dict]:
        SCENARIOS[name] = Scenario(name=name, family=family, kind=kind, build=fn)
        return fn

    return deco


def get(name: str) -> Scenario:
    return SCENARIOS[name]


def chat(
    prompt=("lognormal", 500, 0.5, 32, 2000),
    output=("lognormal", 400, 0.5, 16, 1500),
    weight=1.0,
    prefix=0.0,
    name="chat",
) -> dict:
    return {"name": name, "weight": weight, "prompt": list(prompt), "output": list(output), "prefix": prefix}


ONLY_G1_CAPACITY = {
    "g1_capacity": True,
    "g1_fragmentation": False,
    "g1_admission": False,
    "g2_variance": "off",
    "g3_queue": False,
    "g4_prefix": False,
}
NO_GATES = {
    "g1_capacity": False,
    "g1_fragmentation": False,
    "g1_admission": False,
    "g2_variance": "off",
    "g3_queue": False,
    "g4_prefix": False,
}


# --------------------------------------------------------------------------- single gates


@scenario("g1-capacity")
def g1_capacity() -> dict:
    """G1 capacity alone: a small KV pool fills up; growing requests preempt the newest one.

    1024 blocks of 16 tokens (16K tokens) for chat traffic at 2 req/s with
    two bursts of 8 req/s (prompts ~500, outputs ~250 tokens). Only the G1
    capacity gate is on,
    as in upstream vLLM: when a running request needs a new block and none
    is free, the newest running request is preempted (RECOMPUTE).
    """
    return {
        "params": {
            **ONLY_G1_CAPACITY,
            "num_gpu_blocks": 1024,
            "rate": 2.0,
            "bursts": [[30, 60, 8.0], [90, 110, 8.0]],
            "duration": 150.0,
            "workload": [chat(output=("lognormal", 250, 0.5, 16, 1000))],
        }
    }


@scenario("g1-fragmentation")
def g1_fragmentation() -> dict:
    """G1 fragmentation alone: enough free blocks in total but no contiguous run long enough.

    The guide's model (not upstream vLLM): every allocation must be one
    contiguous run, block tables grow 4 blocks at a time (the guide's 8->12),
    and a pending request that cannot be placed preempts the newest running
    one. Short requests (1-3 blocks, quickly finished) riddle the pool with
    small holes; long ones then cannot grow. Capacity shortfalls only stall
    (the capacity gate is off), so every preemption is a fragmentation one.
    """
    return {
        "params": {
            **NO_GATES,
            "g1_fragmentation": True,
            "g1_admission": True,
            "extend_chunk": 4,
            "num_gpu_blocks": 1024,
            "rate": 5.0,
            "bursts": [[30, 60, 12.0]],
            "duration": 120.0,
            "workload": [
                chat(("uniform", 12, 40), ("uniform", 4, 20), weight=0.65, name="short"),
                chat(("uniform", 100, 400), ("uniform", 200, 700), weight=0.35, name="long"),
            ],
        }
    }


@scenario("g2-variance")
def g2_variance() -> dict:
    """G2 batch-length variance alone: short requests joining a batch of ~1K-token ones are preempted.

    Fixed threshold 256 blocks² (variance of prompt_len + max_tokens over the
    running batch, in blocks²). 70% of the traffic is ~1000-token prompts,
    30% short chats: a short request admitted next to long ones pushes the
    variance over the threshold (the guide's 3 x 1024 + 64 example) and, as
    the newest, is the victim. The KV pool is large, so G1 never fires.
    """
    return {
        "params": {
            **NO_GATES,
            "g1_capacity": True,
            "g2_variance": "fixed",
            "num_gpu_blocks": 4096,
            "rate": 3.0,
            "duration": 120.0,
            "workload": [
                chat(("uniform", 900, 1100), ("uniform", 100, 200), weight=0.7, name="long"),
                chat(("uniform", 40, 100), ("uniform", 20, 60), weight=0.3, name="short"),
            ],
        }
    }


@scenario("g3-queue")
def g3_queue() -> dict:
    """G3 queue overflow alone: arrivals outpace a max_num_seqs=16 engine; the 17th pending request is preempted.

    Pending queue capped at max_num_seqs (16); 2 req/s with a 20 s burst of
    10 req/s. Requests arriving at a full queue are preempted at once and
    re-submitted by the client 1-3 s later (doubling each time), so the same
    request can be preempted several times. KV is plentiful.
    """
    return {
        "params": {
            **NO_GATES,
            "g1_capacity": True,
            "g3_queue": True,
            "max_num_seqs": 16,
            "num_gpu_blocks": 4096,
            "rate": 2.0,
            "bursts": [[30, 50, 10.0]],
            "duration": 90.0,
            "workload": [chat(("uniform", 100, 400), ("uniform", 100, 300))],
        }
    }


@scenario("g4-prefix")
def g4_prefix() -> dict:
    """G4 prefix conflict alone: the same history submitted twice; the second copy is preempted.

    Prefix caching on, 6 shared prefixes (256-768 tokens), 80% of requests on
    a shared prefix and 35% submitted twice within 30 ms. Two requests
    admitted in the same round that extend the same shared prefix block
    (ref_count > 1) conflict: the newer one is preempted.
    """
    return {
        "params": {
            **NO_GATES,
            "g1_capacity": True,
            "g4_prefix": True,
            "enable_prefix_caching": True,
            "num_prefixes": 6,
            "prefix_len": ["uniform", 256, 768],
            "duplicate_prob": 0.35,
            "duplicate_gap": 0.03,
            "num_gpu_blocks": 4096,
            "rate": 4.0,
            "duration": 120.0,
            "workload": [chat(("uniform", 30, 300), ("uniform", 50, 300), prefix=0.8)],
        }
    }


# --------------------------------------------------------------------------- combinations


@scenario("mixed")
def mixed() -> dict:
    """All four gates armed, moderate pressure, delayed preemption: every gate fires.

    1280 blocks, capacity + fragmentation (admission too) with 4-block growth,
    the fixed variance threshold, a queue cap of 32, prefix caching with
    duplicate submissions, a 15 s burst; 5% of the requests are 2K-token
    outliers. Log lines appear 1-3 steps after the decision.
    """
    return {
        "params": {
            "g1_capacity": True,
            "g1_fragmentation": True,
            "g1_admission": True,
            "extend_chunk": 4,
            "g2_variance": "fixed",
            "g3_queue": True,
            "g4_prefix": True,
            "enable_prefix_caching": True,
            "duplicate_prob": 0.15,
            "duplicate_gap": 0.03,
            "num_prefixes": 8,
            "prefix_len": ["uniform", 200, 300],
            "delayed": True,
            "max_num_seqs": 32,
            "num_gpu_blocks": 1280,
            "rate": 3.0,
            "bursts": [[40, 55, 7.0]],
            "duration": 150.0,
            "workload": [
                chat(("uniform", 200, 500), ("uniform", 100, 300), weight=0.75, prefix=0.5),
                chat(("uniform", 12, 40), ("uniform", 4, 20), weight=0.2, name="short"),
                chat(("uniform", 1500, 2500), ("uniform", 100, 300), weight=0.05, name="long"),
            ],
        }
    }


@scenario("clean")
def clean() -> dict:
    """No preemption: every gate armed, but light, homogeneous traffic never trips one.

    A control: 1 req/s of similar-length requests (so the batch variance stays
    far below 256 blocks²), a large pool, no shared prefixes.
    """
    return {
        "params": {
            "g1_capacity": True,
            "g1_fragmentation": True,
            "g1_admission": True,
            "g2_variance": "fixed",
            "g3_queue": True,
            "g4_prefix": True,
            "num_gpu_blocks": 4096,
            "rate": 1.0,
            "duration": 90.0,
            "workload": [chat(("uniform", 200, 260), ("uniform", 100, 140))],
        }
    }


# --------------------------------------------------------------------------- the guide's scenarios


def _embedding(block_size: int) -> dict:
    return {
        "params": {
            **NO_GATES,
            "g1_capacity": True,
            "g1_fragmentation": True,
            "g1_admission": True,
            "model": "Qwen/Qwen3-0.6B",
            "tensor_parallel_size": 1,
            "block_size": block_size,
            "num_gpu_blocks": 2560 // block_size,
            "max_num_seqs": 256,
            "max_num_batched_tokens": 4096,
            "max_model_len": 2048,
            "rate": 150.0,
            "duration": 40.0,
            "workload": [chat(("lognormal", 36, 0.35, 4, 512), ("uniform", 4, 24), name="embed")],
        }
    }


@scenario("embedding-bs16", family="guide")
def embedding_bs16() -> dict:
    """Guide 3.2 #1, block_size 16: 150 req/s of short (95% <= 64-token) requests on Qwen3-0.6B.

    The same KV memory (2560 tokens) is cut into 16-, 32- or 64-token blocks
    (embedding-bs32, embedding-bs64); allocations must be contiguous (the
    guide's fragmentation model) and a pending request that cannot be placed
    preempts the newest running one. The guide reports preemption rates of
    12.3% / 3.7% / 0.9% for 16 / 32 / 64; this model does **not** reproduce
    that direction: bigger blocks waste more of the same memory on padding,
    so with seed 0 it gives about 30 / 80 / 160 preemptions for ~6000
    requests. The scenarios exist to produce the guide's kind of incident
    (G1 on short requests), not its numbers.
    """
    return _embedding(16)


@scenario("embedding-bs32", family="guide")
def embedding_bs32() -> dict:
    """Guide 3.2 #1, block_size 32: the embedding traffic of embedding-bs16 with 32-token blocks."""
    return _embedding(32)


@scenario("embedding-bs64", family="guide")
def embedding_bs64() -> dict:
    """Guide 3.2 #1, block_size 64: the embedding traffic with 64-token blocks (most requests fit one block)."""
    return _embedding(64)


@scenario("long-generation", family="guide")
def long_generation() -> dict:
    """Guide 3.2 #2: 8K-token summaries under the fixed variance threshold (256 blocks²).

    6000-8000-token requests (prompt + max_tokens) plus 10% short chats.
    The fixed threshold preempts long requests that merely differ by a few
    hundred tokens; ``--set g2_variance=dynamic`` applies the guide's fix
    (threshold = 10% of the longest running length) and only the short
    outliers are still preempted.
    """
    return {
        "params": {
            **NO_GATES,
            "g1_capacity": True,
            "g2_variance": "fixed",
            "model": "deepseek-ai/DeepSeek-V2-Lite-Chat",
            "max_model_len": 8192,
            "max_num_batched_tokens": 8192,
            "max_num_seqs": 32,
            "num_gpu_blocks": 8192,
            "rate": 0.3,
            "duration": 150.0,
            "max_drain": 240.0,
            "workload": [
                chat(("uniform", 5500, 6500), ("uniform", 1000, 1400), weight=0.9, name="summary"),
                chat(("uniform", 200, 800), ("uniform", 100, 300), weight=0.1, name="chat"),
            ],
        }
    }


@scenario("prefix-chatbot", family="guide")
def prefix_chatbot() -> dict:
    """Guide 3.2 #3: a multi-turn chatbot with prefix caching; repeated histories conflict (G4) and fill the pool (G1).

    12 shared histories of 512-1536 tokens, 85% of requests on one, 30%
    submitted twice. Prefix caching on; G4 and G1 capacity armed.
    """
    return {
        "params": {
            **NO_GATES,
            "g1_capacity": True,
            "g4_prefix": True,
            "enable_prefix_caching": True,
            "model": "THUDM/glm-4-9b-chat",
            "num_prefixes": 12,
            "prefix_len": ["uniform", 512, 1536],
            "duplicate_prob": 0.3,
            "num_gpu_blocks": 1024,
            "rate": 5.0,
            "duration": 120.0,
            "workload": [chat(("uniform", 30, 400), ("lognormal", 200, 0.5, 16, 800), prefix=0.85)],
        }
    }


@scenario("spec-decode", family="guide")
def spec_decode() -> dict:
    """Guide 3.2 #4: speculative decoding (4 draft tokens, 20% of the budget reserved) raises block demand.

    Every decode step reserves 4 lookahead slots, so block tables grow sooner,
    and the draft model's cache holds 20% of the blocks, so the pool runs out
    more often (G1 capacity). The guide's workaround, dropping the draft
    reservation, is ``--set draft_kv_reserve=0`` (about 25% fewer preemptions
    here). ``--set speculative=false`` also removes the speed-up, and this
    traffic then overloads the engine.
    """
    return {
        "params": {
            **ONLY_G1_CAPACITY,
            "speculative": True,
            "num_speculative_tokens": 4,
            "draft_reserve": 0.2,
            "num_gpu_blocks": 640,
            "rate": 3.5,
            "duration": 120.0,
            "workload": [chat()],
        }
    }


# --------------------------------------------------------------------------- log-focused


@scenario("v0-sampled", family="v0-0.6")
def v0_sampled() -> dict:
    """V0 with more than 100 preemptions: only the 1st, 51st, 101st... are logged (sampling matters).

    A tight pool (448 blocks) under 3.5 req/s: about 130 preemptions, of which
    3 are logged (totals 1, 51, 101). Use it to check that the total
    rebuilt from total_num_cumulative_preemption matches truth.jsonl up to
    the last logged warning.
    """
    return {
        "params": {
            **ONLY_G1_CAPACITY,
            "num_gpu_blocks": 448,
            "rate": 3.5,
            "duration": 150.0,
            "workload": [chat(("lognormal", 400, 0.5, 32, 2000), ("lognormal", 200, 0.5, 16, 1000))],
        }
    }


@scenario("skewed-clocks", family="v0-0.8")
def skewed_clocks() -> dict:
    """The mixed scenario with clocks that disagree: dmon +2 s, block table +0.5 s, executor log -0.75 s.

    Each evidence source runs on its own clock (scenario.json 'skews'); the
    vLLM log is the reference. Tests the joiner's look-back and offsets.
    """
    spec = mixed()
    spec["output"] = {"skews": {"dmon": 2.0, "blocktable": 0.5, "executor": -0.75}}
    return spec


@scenario("large", family="v0-0.8", kind="large")
def large() -> dict:
    """A big, realistic log streamed fast for benchmarks (--size 1G); no step model.

    Request lines with long prompts and prompt_token_ids (V0) or Received +
    DEBUG 'Request ... details' lines (V1), stats lines on the family's
    cadence, uvicorn access lines and rare preemptions (V0 sampled warnings;
    V1 'Preemptions: N' unless --stock). truth.jsonl lists every preemption
    line written and scenario.json the exact totals.
    """
    return {"params": {"rate": 20.0, "preempt_prob": 0.03}}
