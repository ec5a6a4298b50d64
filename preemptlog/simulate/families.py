"""How each vLLM family writes its lines (vllm-facts.md sections 1-5).

Families:

- ``v0-0.6``: vLLM 0.6.3.post1, V0 engine, OpenAI server with MQLLMEngine.
  Header ``LEVEL MM-DD HH:MM:SS file.py:N] `` (no brackets, no process prefix on
  the front-end and engine lines; TP workers carry the always-coloured
  ``ESC[1;36m(VllmWorkerProcess pid=N)ESC[0;0m`` stream prefix). Stats every
  5 s (``metrics.py``), idle intervals still logged (0.6.3). Preemption
  warnings sampled 1 in 50 (``scheduler.py:1560``).
- ``v0-0.8``: vLLM 0.8.5.post1 run with ``VLLM_USE_V1=0``. Header
  ``LEVEL MM-DD HH:MM:SS [file.py:N] ``, ``# cuda blocks``, the
  ``Initializing a V0 LLM engine`` config line; idle stats go to DEBUG (not
  shown) after two idle intervals.
- ``v1-0.11``: vLLM 0.11.1, V1 engine. Stream prefixes ``(APIServer pid=N)``,
  ``(EngineCore_DP0 pid=N)`` and ``(Worker_TPk pid=N)`` in cyan
  (``ESC[1;36m``...``ESC[0;0m``, always coloured up to 0.11.2, even into
  files). Stats every 10 s from ``loggers.py:208``; ``Preemptions: N`` is
  printed when N > 0 (a build with the PR #38452 fix) unless the build is
  *stock*, which never prints it. No per-preemption line.
- ``guide``: the field guide's world: a custom logging config whose lines
  start ``YYYY-MM-DD HH:MM:SS,mmm LEVEL file.py:N] `` (``asctime`` default
  format), V0 0.6.3 message texts, and a patched scheduler that writes
  ``Req-<id> PREEMPTED (mode=RECOMPUTE)`` for every preemption (no sampled
  V0 warning).

The debug hook (field-guide.md 3.1) is ``print()`` output: no header, but in
V1 the EngineCore's stream prefix still applies (it wraps ``sys.stdout``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

CYAN = "\x1b[1;36m"
RESET = "\x1b[0;0m"

V0_PREEMPT_MSG = (
    "Sequence group {rid} is preempted by PreemptionMode.{mode} mode because there is not enough KV cache "
    "space. This can affect the end-to-end performance. Increase gpu_memory_utilization or "
    "tensor_parallel_size to provide more KV cache memory. total_num_cumulative_preemption={total}"
)
MARKER_MSG = "Req-{rid} PREEMPTED (mode={mode})"


@dataclass(frozen=True)
class Family:
    name: str
    engine: str  # "V0" | "V1"
    version: str
    bracket: bool
    iso: bool
    stats_interval: float
    idle_debug: bool
    v0_warnings: bool  # the sampled V0 "is preempted by" warning
    always_markers: bool
    id_prefix: str
    where: dict = field(default_factory=dict)  # role -> (file, line)
    description: str = ""


FAMILIES: dict[str, Family] = {
    "v0-0.6": Family(
        name="v0-0.6",
        engine="V0",
        version="0.6.3.post1",
        bracket=False,
        iso=False,
        stats_interval=5.0,
        idle_debug=False,
        v0_warnings=True,
        always_markers=False,
        id_prefix="chat-",
        where={
            "preempt": ("scheduler.py", 1560),
            "marker": ("scheduler.py", 1561),
            "stats": ("metrics.py", 349),
            "stats_prefix": ("metrics.py", 367),
            "stats_spec": ("metrics.py", 389),
            "received": ("logger.py", 37),
            "added": ("engine.py", 290),
            "version": ("api_server.py", 528),
            "args": ("api_server.py", 529),
            "ipc": ("api_server.py", 166),
            "engine_pid": ("api_server.py", 179),
            "engine_cfg": ("llm_engine.py", 237),
            "blocks": ("distributed_gpu_executor.py", 57),
            "concurrency": ("distributed_gpu_executor.py", 61),
            "worker_ready": ("multiproc_worker_utils.py", 215),
            "weights": ("model_runner.py", 1067),
            "graphs": ("model_runner.py", 1523),
            "prom": ("api_server.py", 232),
            "routes": ("launcher.py", 19),
            "route": ("launcher.py", 27),
            "hook": ("scheduler.py", 1005),
            "executor": ("model_runner.py", 1532),
        },
        description="vLLM 0.6.3 V0: 'file.py:N]' headers, sampled preemption warnings, stats every 5 s",
    ),
    "v0-0.8": Family(
        name="v0-0.8",
        engine="V0",
        version="0.8.5.post1",
        bracket=True,
        iso=False,
        stats_interval=5.0,
        idle_debug=True,
        v0_warnings=True,
        always_markers=False,
        id_prefix="chatcmpl-",
        where={
            "preempt": ("scheduler.py", 1775),
            "marker": ("scheduler.py", 1776),
            "stats": ("metrics.py", 486),
            "stats_prefix": ("metrics.py", 502),
            "stats_spec": ("metrics.py", 519),
            "received": ("logger.py", 39),
            "added": ("engine.py", 310),
            "version": ("api_server.py", 1090),
            "args": ("api_server.py", 1091),
            "ipc": ("api_server.py", 246),
            "engine_pid": ("api_server.py", 265),
            "engine_cfg": ("llm_engine.py", 240),
            "blocks": ("executor_base.py", 112),
            "concurrency": ("executor_base.py", 117),
            "worker_ready": ("multiproc_worker_utils.py", 225),
            "weights": ("model_runner.py", 1110),
            "graphs": ("model_runner.py", 1592),
            "prom": ("api_server.py", 1024),
            "routes": ("launcher.py", 28),
            "route": ("launcher.py", 36),
            "hook": ("scheduler.py", 1230),
            "executor": ("model_runner.py", 1780),
        },
        description="vLLM 0.8.5 with VLLM_USE_V1=0: '[file.py:N]' headers, sampled warnings, stats every 5 s",
    ),
    "v1-0.11": Family(
        name="v1-0.11",
        engine="V1",
        version="0.11.1",
        bracket=True,
        iso=False,
        stats_interval=10.0,
        idle_debug=True,
        v0_warnings=False,
        always_markers=False,
        id_prefix="chatcmpl-",
        where={
            "marker": ("scheduler.py", 321),
            "stats": ("loggers.py", 208),
            "stats_spec": ("metrics.py", 96),
            "received": ("logger.py", 40),
            "added": ("async_llm.py", 333),
            "version": ("api_server.py", 1839),
            "args": ("utils.py", 233),
            "details": ("logger.py", 44),
            "arch": ("model.py", 547),
            "max_len": ("model.py", 1510),
            "chunked": ("scheduler.py", 205),
            "engine_cfg": ("core.py", 93),
            "kv_memory": ("gpu_worker.py", 298),
            "kv_size": ("kv_cache_utils.py", 1229),
            "concurrency": ("kv_cache_utils.py", 1234),
            "init_took": ("core.py", 250),
            "weights": ("gpu_model_runner.py", 2653),
            "routes": ("launcher.py", 42),
            "route": ("launcher.py", 50),
            "hook": ("scheduler.py", 240),
            "executor": ("gpu_model_runner.py", 2210),
        },
        description="vLLM 0.11.1 V1: process prefixes, stats every 10 s with 'Preemptions: N' (patched) or none (--stock)",
    ),
    "guide": Family(
        name="guide",
        engine="V0",
        version="0.6.3.post1",
        bracket=False,
        iso=True,
        stats_interval=5.0,
        idle_debug=False,
        v0_warnings=False,
        always_markers=True,
        id_prefix="",
        where={
            "marker": ("scheduler.py", 1234),
            "stats": ("metrics.py", 349),
            "stats_prefix": ("metrics.py", 367),
            "stats_spec": ("metrics.py", 389),
            "received": ("logger.py", 37),
            "added": ("engine.py", 290),
            "version": ("api_server.py", 528),
            "args": ("api_server.py", 529),
            "ipc": ("api_server.py", 166),
            "engine_pid": ("api_server.py", 179),
            "engine_cfg": ("llm_engine.py", 237),
            "blocks": ("distributed_gpu_executor.py", 57),
            "concurrency": ("distributed_gpu_executor.py", 61),
            "worker_ready": ("multiproc_worker_utils.py", 215),
            "weights": ("model_runner.py", 1067),
            "graphs": ("model_runner.py", 1523),
            "prom": ("api_server.py", 232),
            "routes": ("launcher.py", 19),
            "route": ("launcher.py", 27),
            "hook": ("scheduler.py", 1005),
            "executor": ("model_runner.py", 1532),
        },
        description="the field guide's world: ISO 'YYYY-MM-DD HH:MM:SS,mmm' lines, a PREEMPTED marker per preemption",
    ),
}


def family(name: str) -> Family:
    try:
        return FAMILIES[name]
    except KeyError:
        raise KeyError(name) from None


class Clock:
    """Seconds since the scenario start -> local wall-clock strings, cached per second.

    ``start`` is a naive local time in ``tz``; an instant is start (as UTC) +
    seconds, then shown in ``tz`` again, so a DST change is handled right.
    ``skew`` (seconds) is added for sources whose clock is off.
    """

    def __init__(self, start: datetime, tz: str, skew: float = 0.0) -> None:
        self.zone = UTC if tz.upper() == "UTC" else ZoneInfo(tz)
        self.start_utc = start.replace(tzinfo=self.zone).astimezone(UTC)
        self.skew = skew
        self._cache: dict[int, datetime] = {}

    def at_second(self, sec: int) -> datetime:
        """Local time of an integer second on this (skewed) clock."""
        dt = self._cache.get(sec)
        if dt is None:
            if len(self._cache) > 4096:
                self._cache.clear()
            dt = self._cache[sec] = (self.start_utc + timedelta(seconds=sec)).astimezone(self.zone)
        return dt

    def local(self, t: float) -> datetime:
        t = t + self.skew
        sec = math.floor(t)
        dt = self.at_second(sec)
        us = int((t - sec) * 1e6)
        return dt + timedelta(microseconds=us) if us else dt

    def iso(self, t: float) -> str:
        """ISO 8601 with offset, milliseconds."""
        return self.local(t).isoformat(timespec="milliseconds")

    def epoch(self, t: float) -> float:
        return (self.start_utc + timedelta(seconds=t + self.skew)).timestamp()


# With VLLM_LOGGING_LEVEL=DEBUG, 0.10.2+ prints a shortened relative path as
# the file name (vllm-facts.md 1a); these are the V1 modules of the roles.
V1_DEBUG_PATHS = {
    "loggers.py": "v1/metrics/loggers.py",
    "metrics.py": "v1/spec_decode/metrics.py",
    "logger.py": "entrypoints/logger.py",
    "async_llm.py": "v1/engine/async_llm.py",
    "api_server.py": "entrypoints/openai/api_server.py",
    "utils.py": "entrypoints/utils.py",
    "model.py": "config/model.py",
    "scheduler.py": "v1/core/sched/scheduler.py",
    "core.py": "v1/engine/core.py",
    "gpu_worker.py": "v1/worker/gpu_worker.py",
    "kv_cache_utils.py": "v1/core/kv_cache_utils.py",
    "gpu_model_runner.py": "v1/worker/gpu_model_runner.py",
    "launcher.py": "entrypoints/launcher.py",
}


class Header:
    """Renders ``LEVEL date file:line] `` prefixes for one family, cached per second."""

    def __init__(self, fam: Family, clock: Clock, ansi: bool = True, debug_paths: bool = False) -> None:
        self.fam = fam
        self.clock = clock
        self.ansi = ansi
        self.debug_paths = debug_paths and fam.engine == "V1"
        self._sec: dict[int, str] = {}
        self.pids: dict[str, int] = {}

    def when(self, t: float) -> str:
        sec = math.floor(t + self.clock.skew)
        s = self._sec.get(sec)
        if s is None:
            if len(self._sec) > 4096:
                self._sec.clear()
            d = self.clock.at_second(sec)
            s = self._sec[sec] = d.strftime("%Y-%m-%d %H:%M:%S") if self.fam.iso else d.strftime("%m-%d %H:%M:%S")
        if self.fam.iso:
            ms = int(((t + self.clock.skew) - sec) * 1000)
            return f"{s},{min(ms, 999):03d}"
        return s

    def proc(self, name: str | None) -> str:
        if not name:
            return ""
        pid = self.pids.get(name)
        if pid is None:
            return ""
        text = f"({name} pid={pid})"
        return f"{CYAN}{text}{RESET} " if self.ansi else f"{text} "

    def __call__(self, level: str, t: float, role: str, proc: str | None = None) -> str:
        file, line = self.fam.where[role]
        if self.debug_paths:
            file = V1_DEBUG_PATHS.get(file, file)
        when = self.when(t)
        if self.fam.iso:
            return f"{self.proc(proc)}{when} {level} {file}:{line}] "
        loc = f"[{file}:{line}]" if self.fam.bracket else f"{file}:{line}]"
        return f"{self.proc(proc)}{level} {when} {loc} "


# --------------------------------------------------------------------------- messages


def sampling_params(fam: Family, max_tokens: int, temperature: float = 0.7) -> str:
    if fam.engine == "V1":
        return (
            f"SamplingParams(n=1, presence_penalty=0.0, frequency_penalty=0.0, repetition_penalty=1.0, "
            f"temperature={temperature}, top_p=1.0, top_k=0, min_p=0.0, seed=None, stop=[], stop_token_ids=[], "
            f"bad_words=[], include_stop_str_in_output=False, ignore_eos=False, max_tokens={max_tokens}, "
            f"min_tokens=0, logprobs=None, prompt_logprobs=None, skip_special_tokens=True, "
            f"spaces_between_special_tokens=True, truncate_prompt_tokens=None, structured_outputs=None, "
            f"extra_args=None)"
        )
    if fam.version.startswith("0.8"):
        return (
            f"SamplingParams(n=1, presence_penalty=0.0, frequency_penalty=0.0, repetition_penalty=1.0, "
            f"temperature={temperature}, top_p=1.0, top_k=-1, min_p=0.0, seed=None, stop=[], stop_token_ids=[], "
            f"bad_words=[], include_stop_str_in_output=False, ignore_eos=False, max_tokens={max_tokens}, "
            f"min_tokens=0, logprobs=None, prompt_logprobs=None, skip_special_tokens=True, "
            f"spaces_between_special_tokens=True, truncate_prompt_tokens=None, guided_decoding=None, "
            f"extra_args=None)"
        )
    return (
        f"SamplingParams(n=1, best_of=1, presence_penalty=0.0, frequency_penalty=0.0, repetition_penalty=1.0, "
        f"temperature={temperature}, top_p=1.0, top_k=-1, min_p=0.0, seed=None, stop=[], stop_token_ids=[], "
        f"include_stop_str_in_output=False, ignore_eos=False, max_tokens={max_tokens}, min_tokens=0, "
        f"logprobs=None, prompt_logprobs=None, skip_special_tokens=True, spaces_between_special_tokens=True, "
        f"truncate_prompt_tokens=None), guided_decoding=None"
    )


def v0_stats(prompt_tput: float, gen_tput: float, running: int, swapped: int, pending: int, gpu: float) -> str:
    return (
        f"Avg prompt throughput: {prompt_tput:.1f} tokens/s, Avg generation throughput: {gen_tput:.1f} tokens/s, "
        f"Running: {running} reqs, Swapped: {swapped} reqs, Pending: {pending} reqs, "
        f"GPU KV cache usage: {gpu:.1f}%, CPU KV cache usage: 0.0%."
    )


def v1_stats(
    prompt_tput: float, gen_tput: float, running: int, waiting: int, preemptions: int, gpu: float, hit: float
) -> str:
    parts = [
        f"Avg prompt throughput: {prompt_tput:.1f} tokens/s",
        f"Avg generation throughput: {gen_tput:.1f} tokens/s",
        f"Running: {running} reqs",
        f"Waiting: {waiting} reqs",
    ]
    if preemptions > 0:
        parts.append(f"Preemptions: {preemptions}")
    parts.append(f"GPU KV cache usage: {gpu:.1f}%")
    parts.append(f"Prefix cache hit rate: {hit:.1f}%")
    return "Engine 000: " + ", ".join(parts)


def v0_spec_stats(acc: float, eff: float, k: int, accepted: int, drafted: int, emitted: int) -> str:
    return (
        f"Speculative metrics: Draft acceptance rate: {acc:.3f}, System efficiency: {eff:.3f}, "
        f"Number of speculative tokens: {k}, Number of accepted tokens: {accepted}, "
        f"Number of draft tokens: {drafted}, Number of emitted tokens: {emitted}."
    )


def v1_spec_stats(
    mean_len: float, acc_tput: float, draft_tput: float, accepted: int, drafted: int, per_pos: list[float]
) -> str:
    rate = (100.0 * accepted / drafted) if drafted else 0.0
    pp = ", ".join(f"{x:.3f}" for x in per_pos)
    return (
        f"SpecDecoding metrics: Mean acceptance length: {mean_len:.2f}, Accepted throughput: {acc_tput:.2f} tokens/s, "
        f"Drafted throughput: {draft_tput:.2f} tokens/s, Accepted: {accepted} tokens, Drafted: {drafted} tokens, "
        f"Per-position acceptance rate: {pp}, Avg Draft acceptance rate: {rate:.1f}%"
    )


def hook_lines(free: int, pending: list, running: int, block_size: int) -> list[str]:
    """The field guide's scheduler_debug.py output (field-guide.md 3.1), exactly: printed
    before each scheduling round. The ``[BATCH]`` line is printed where the variance gate
    judges the batch (:func:`batch_line`), so that its value is the one the gate used."""
    out = [f"[SCHEDULER] Available blocks: {free}, Pending reqs: {len(pending)}, Running reqs: {running}"]
    for r in pending:
        need = -(-(r.prompt_len + r.max_out) // block_size)
        out.append(f"  Req-{r.rid}: prompt={r.prompt_len}, max_out={r.max_out}, blocks_needed={need}")
    return out


def batch_line(variance: float, threshold: float) -> str:
    return f"[BATCH] Current variance: {variance:.1f} (threshold={round(threshold)})"


def py_repr_str(s: str) -> str:
    """repr() of a str, as vLLM's %r prints the prompt."""
    return repr(s)
