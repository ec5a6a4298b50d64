"""The startup lines of a simulated vLLM server log, per family (server version, args, engine
config, KV size, routes): moved out of writers.py, the bundle sink (issue 12)."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from . import families as F

if TYPE_CHECKING:
    from .model import Params


class Startup:
    """The startup lines of a family (server version, args, engine config, KV size, routes)."""

    def __init__(self, fam: F.Family, hdr: F.Header, p: Params, rng: random.Random, ansi: bool = True) -> None:
        self.fam = fam
        self.hdr = hdr
        self.p = p
        self.rng = rng
        self.ansi = ansi

    def assign_pids(self, base_pid: int) -> None:
        p = self.p
        if self.fam.engine == "V1":
            self.hdr.pids.update({"APIServer": base_pid, "EngineCore_DP0": base_pid + 146})
            for k in range(p.tensor_parallel_size):
                self.hdr.pids[f"Worker_TP{k}"] = base_pid + 301 + k
        else:
            for k in range(1, p.tensor_parallel_size):
                self.hdr.pids[f"VllmWorkerProcess pid{k}"] = base_pid + 120 + k

    def _model_cfg_v0(self) -> str:
        p, fam = self.p, self.fam
        spec = (
            f"SpeculativeConfig(draft_model='{p.speculative_model}', num_spec_tokens={p.num_speculative_tokens})"
            if p.speculative
            else "None"
        )
        if fam.version.startswith("0.8"):
            return (
                f"Initializing a V0 LLM engine (v{fam.version}) with config: model='{p.model}', "
                f"speculative_config={spec}, tokenizer='{p.model}', skip_tokenizer_init=False, tokenizer_mode=auto, "
                f"revision=None, override_neuron_config=None, tokenizer_revision=None, trust_remote_code=False, "
                f"dtype=torch.bfloat16, max_seq_len={p.max_model_len}, download_dir=None, load_format=LoadFormat.AUTO, "
                f"tensor_parallel_size={p.tensor_parallel_size}, pipeline_parallel_size=1, "
                f"disable_custom_all_reduce=False, quantization=None, enforce_eager=False, kv_cache_dtype=auto,  "
                f"device_config=cuda, decoding_config=DecodingConfig(guided_decoding_backend='auto', "
                f"reasoning_backend=None), observability_config=ObservabilityConfig(show_hidden_metrics=False, "
                f"otlp_traces_endpoint=None, collect_model_forward_time=False, collect_model_execute_time=False), "
                f"seed=None, served_model_name={p.model}, num_scheduler_steps=1, multi_step_stream_outputs=True, "
                f"enable_prefix_caching={p.enable_prefix_caching}, chunked_prefill_enabled=False, "
                f"use_async_output_proc=True, disable_mm_preprocessor_cache=False, mm_processor_kwargs=None, "
                f'pooler_config=None, compilation_config={{"splitting_ops":[],"compile_sizes":[],'
                f'"cudagraph_capture_sizes":[256,248,240,232,224,216,208,200,192,184,176,168,160,152,144,136,128,'
                f'120,112,104,96,88,80,72,64,56,48,40,32,24,16,8,4,2,1],"max_capture_size":256}}, '
                f"use_cached_outputs=True, "
            )
        return (
            f"Initializing an LLM engine (v{fam.version}) with config: model='{p.model}', speculative_config={spec}, "
            f"tokenizer='{p.model}', skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, "
            f"override_neuron_config=None, rope_scaling=None, rope_theta=None, tokenizer_revision=None, "
            f"trust_remote_code=False, dtype=torch.bfloat16, max_seq_len={p.max_model_len}, download_dir=None, "
            f"load_format=LoadFormat.AUTO, tensor_parallel_size={p.tensor_parallel_size}, pipeline_parallel_size=1, "
            f"disable_custom_all_reduce=False, quantization=None, enforce_eager=False, kv_cache_dtype=auto, "
            f"quantization_param_path=None, device_config=cuda, "
            f"decoding_config=DecodingConfig(guided_decoding_backend='outlines'), "
            f"observability_config=ObservabilityConfig(otlp_traces_endpoint=None, collect_model_forward_time=False, "
            f"collect_model_execute_time=False), seed=0, served_model_name={p.model}, use_v2_block_manager=True, "
            f"num_scheduler_steps=1, chunked_prefill_enabled=False multi_step_stream_outputs=True, "
            f"enable_prefix_caching={p.enable_prefix_caching}, use_async_output_proc=True, use_cached_outputs=True, "
            f"mm_processor_kwargs=None)"
        )

    def _namespace(self) -> str:
        p = self.p
        args = {
            "allow_credentials": False,
            "allowed_headers": ["*"],
            "allowed_methods": ["*"],
            "allowed_origins": ["*"],
            "api_key": None,
            "block_size": p.block_size,
            "chat_template": None,
            "cpu_offload_gb": 0,
            "disable_log_requests": False,
            "disable_log_stats": False,
            "dtype": "auto",
            "enable_chunked_prefill": None,
            "enable_prefix_caching": p.enable_prefix_caching,
            "enforce_eager": False,
            "gpu_memory_utilization": p.gpu_memory_utilization,
            "host": None,
            "max_log_len": None,
            "max_model_len": p.max_model_len,
            "max_num_batched_tokens": p.max_num_batched_tokens,
            "max_num_seqs": p.max_num_seqs,
            "model": p.model,
            "num_gpu_blocks_override": None,
            "num_speculative_tokens": p.num_speculative_tokens if p.speculative else None,
            "pipeline_parallel_size": 1,
            "port": 8000,
            "preemption_mode": None,
            "scheduler_delay_factor": 0.0,
            "scheduling_policy": "fcfs",
            "seed": 0,
            "served_model_name": None,
            "speculative_model": p.speculative_model if p.speculative else None,
            "swap_space": 4,
            "tensor_parallel_size": p.tensor_parallel_size,
            "tokenizer": None,
            "trust_remote_code": False,
            "use_v2_block_manager": True,
        }
        return "Namespace(" + ", ".join(f"{k}={v!r}" for k, v in sorted(args.items())) + ")"

    def lines(self, base_pid: int) -> list[tuple[float, str]]:
        p, fam, h = self.p, self.fam, self.hdr
        r = self.rng
        out: list[tuple[float, str]] = []
        conc = p.num_gpu_blocks * p.block_size / p.max_model_len
        tmp = "".join(r.choice("abcdefghijklmnopqrstuvwxyz0123456789_") for _ in range(8))
        uuid = f"{r.getrandbits(128):032x}"
        if fam.engine == "V1":
            api, core = "APIServer", "EngineCore_DP0"
            nd = {"model_tag": p.model, "enable_log_requests": True, "model": p.model, "max_model_len": p.max_model_len}
            if p.tensor_parallel_size != 1:
                nd["tensor_parallel_size"] = p.tensor_parallel_size
            if p.block_size != 16:
                nd["block_size"] = p.block_size
            if p.gpu_memory_utilization != 0.9:
                nd["gpu_memory_utilization"] = p.gpu_memory_utilization
            if not p.enable_prefix_caching:
                nd["enable_prefix_caching"] = False
            nd["max_num_batched_tokens"] = p.max_num_batched_tokens
            nd["max_num_seqs"] = p.max_num_seqs
            if p.speculative:
                nd["speculative_config"] = {
                    "method": "eagle",
                    "model": p.speculative_model,
                    "num_speculative_tokens": p.num_speculative_tokens,
                }
            spec = (
                f"SpeculativeConfig(method='eagle', model='{p.speculative_model}', num_spec_tokens={p.num_speculative_tokens})"
                if p.speculative
                else "None"
            )
            cfg = (
                f"Initializing a V1 LLM engine (v{fam.version}) with config: model='{p.model}', speculative_config={spec}, "
                f"tokenizer='{p.model}', skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, "
                f"tokenizer_revision=None, trust_remote_code=False, dtype=torch.bfloat16, max_seq_len={p.max_model_len}, "
                f"download_dir=None, load_format=auto, tensor_parallel_size={p.tensor_parallel_size}, "
                f"pipeline_parallel_size=1, data_parallel_size=1, disable_custom_all_reduce=False, quantization=None, "
                f"enforce_eager=False, kv_cache_dtype=auto, device_config=cuda, "
                f"structured_outputs_config=StructuredOutputsConfig(backend='auto', disable_fallback=False, "
                f"disable_any_whitespace=False, disable_additional_properties=False, reasoning_parser=''), "
                f"observability_config=ObservabilityConfig(show_hidden_metrics_for_version=None, "
                f"otlp_traces_endpoint=None, collect_detailed_traces=None), seed=0, served_model_name={p.model}, "
                f"enable_prefix_caching={p.enable_prefix_caching}, enable_chunked_prefill=True, pooler_config=None, "
                f'compilation_config={{"level":3,"debug_dump_path":null,"cache_dir":"","backend":"","custom_ops":[],'
                f'"splitting_ops":["vllm.unified_attention","vllm.unified_attention_with_output"],"use_inductor":true,'
                f'"compile_sizes":[],"cudagraph_mode":[2,1],"use_cudagraph":true,"cudagraph_num_of_warmups":1,'
                f'"max_capture_size":512}}'
            )
            kv_gib = p.num_gpu_blocks * p.block_size * 57344 / p.tensor_parallel_size / (1 << 30)
            out += [
                (0.0, h("INFO", 0.0, "version", api) + f"vLLM API server version {fam.version}"),
                (0.0, h("INFO", 0.0, "args", api) + f"non-default args: {nd!r}"),
                (2.0, h("INFO", 2.0, "arch", api) + "Resolved architecture: Qwen2ForCausalLM"),
                (2.0, h("INFO", 2.0, "max_len", api) + f"Using max model len {p.max_model_len}"),
                (
                    2.0,
                    h("INFO", 2.0, "chunked", api)
                    + f"Chunked prefill is enabled with max_num_batched_tokens={p.max_num_batched_tokens}.",
                ),
                (3.0, h("INFO", 3.0, "engine_cfg", core) + cfg),
            ]
            for k in range(p.tensor_parallel_size):
                out.append(
                    (
                        6.0,
                        h("INFO", 6.0, "weights", f"Worker_TP{k}")
                        + "Model loading took 7.1335 GiB and 4.812345 seconds",
                    )
                )
            out += [
                (8.0, h("INFO", 8.0, "kv_memory", "Worker_TP0") + f"Available KV cache memory: {kv_gib:.2f} GiB"),
                (
                    8.0,
                    h("INFO", 8.0, "kv_size", core) + f"GPU KV cache size: {p.num_gpu_blocks * p.block_size:,} tokens",
                ),
                (
                    8.0,
                    h("INFO", 8.0, "concurrency", core)
                    + f"Maximum concurrency for {p.max_model_len:,} tokens per request: {conc:.2f}x",
                ),
                (
                    9.0,
                    h("INFO", 9.0, "init_took", core)
                    + "init engine (profile, create kv cache, warmup model) took 14.62 seconds",
                ),
                (10.0, h("INFO", 10.0, "routes", api) + "Available routes are:"),
            ]
            for route, methods in (
                ("/health", "GET"),
                ("/v1/models", "GET"),
                ("/v1/chat/completions", "POST"),
                ("/v1/completions", "POST"),
                ("/metrics", "GET"),
            ):
                out.append((10.0, h("INFO", 10.0, "route", api) + f"Route: {route}, Methods: {methods}"))
            pre = h.proc(api)
            out += [
                (10.0, pre + f"INFO:     Started server process [{base_pid}]"),
                (10.0, pre + "INFO:     Waiting for application startup."),
                (10.0, pre + "INFO:     Application startup complete."),
            ]
            return out
        # V0 (and the guide's world, which runs V0 0.6.3 under a custom logging config)
        blocks_word = "cuda" if fam.version.startswith("0.8") else "GPU"
        out += [
            (0.0, h("INFO", 0.0, "version") + f"vLLM API server version {fam.version}"),
            (0.0, h("INFO", 0.0, "args") + f"args: {self._namespace()}"),
            (
                0.1,
                h("INFO", 0.1, "ipc")
                + f"Multiprocessing frontend to use ipc:///tmp/{uuid[:8]}-{uuid[8:12]}-{uuid[12:16]}-{uuid[16:20]}-{uuid[20:]} for IPC Path.",
            ),
            (0.1, h("INFO", 0.1, "engine_pid") + f"Started engine process with PID {base_pid + 60}"),
            (3.0, h("INFO", 3.0, "engine_cfg") + self._model_cfg_v0()),
        ]
        workers = [f"VllmWorkerProcess pid{k}" for k in range(1, p.tensor_parallel_size)]
        for w in workers:
            pid = self.hdr.pids[w]
            out.append((4.0, self._worker_line(pid, "INFO", 4.0, "worker_ready", "Worker ready; awaiting tasks")))
        for w in workers:
            pid = self.hdr.pids[w]
            out.append((6.0, self._worker_line(pid, "INFO", 6.0, "weights", "Loading model weights took 7.1201 GB")))
        out += [
            (6.0, h("INFO", 6.0, "weights") + "Loading model weights took 7.1201 GB"),
            (
                8.0,
                h("INFO", 8.0, "blocks")
                + f"# {blocks_word} blocks: {p.num_gpu_blocks}, # CPU blocks: {p.num_cpu_blocks}",
            ),
            (
                8.0,
                h("INFO", 8.0, "concurrency")
                + f"Maximum concurrency for {p.max_model_len} tokens per request: {conc:.2f}x",
            ),
            (9.0, h("INFO", 9.0, "graphs") + "Graph capturing finished in 6 secs."),
            (10.0, h("INFO", 10.0, "prom") + f"vLLM to use /tmp/tmp{tmp} as PROMETHEUS_MULTIPROC_DIR"),
            (10.0, h("INFO", 10.0, "routes") + "Available routes are:"),
        ]
        for route, methods in (
            ("/health", "GET"),
            ("/v1/models", "GET"),
            ("/v1/chat/completions", "POST"),
            ("/v1/completions", "POST"),
        ):
            out.append((10.0, h("INFO", 10.0, "route") + f"Route: {route}, Methods: {methods}"))
        out += [
            (10.0, f"INFO:     Started server process [{base_pid}]"),
            (10.0, "INFO:     Waiting for application startup."),
            (10.0, "INFO:     Application startup complete."),
            (10.0, "INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)"),
        ]
        return out

    def _worker_line(self, pid: int, level: str, t: float, role: str, msg: str) -> str:
        name = f"(VllmWorkerProcess pid={pid})"
        pre = f"{F.CYAN}{name}{F.RESET} " if self.ansi else f"{name} "
        return pre + self.hdr(level, t, role) + msg
