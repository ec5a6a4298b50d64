"""The ``model`` engine: a paged-KV scheduler configured as vLLM V1 (0.32), pure Python.

It follows ``Scheduler.schedule`` of vLLM 0.32 step for step (read from the released wheel,
``vllm/v1/core/sched/scheduler.py``):

1. running requests in order, while the token budget lasts: ``num_new_tokens = num_tokens -
   num_computed_tokens`` (a decode is 1, a chunked prefill the rest of the prompt), capped by
   ``long_prefill_token_threshold`` and the budget; ``allocate_slots`` needs
   ``ceil((computed + new) / block_size) - held`` blocks from the free ones. When they cannot be
   had the victim is ``running[-1]`` (fcfs) or the running request with the largest
   ``(priority, arrival)`` (priority; if it was already scheduled this step its tokens go back
   to the budget); the victim's blocks are freed, its computed tokens reset to 0 (RECOMPUTE) and
   it goes back to the head of the waiting queue. If the victim is the requester, or the
   allocation still fails, the running loop stops.
2. only when nothing was preempted: waiting requests (fcfs order; priority: by ``(priority,
   arrival)``) are admitted while ``running < max_num_seqs`` and budget remains; the prefill is
   chunked to the budget (without chunked prefill a prefill larger than the budget waits); the
   watermark (``watermark x num_gpu_blocks``) is kept free when something is already scheduled.
   A head request that does not fit blocks the queue.
3. execution: a request whose computed tokens reach its known tokens samples one token; a
   request with all its output tokens finishes and frees its blocks.
4. the empty step: ``EngineCore.step`` (vllm/v1/engine/core.py) steps while
   ``scheduler.has_requests()``, which is true while requests finished in the last step await
   flushing (``Scheduler.has_finished_requests``: ``finished_req_ids``, filled by
   ``_free_request`` and cleared by ``schedule()``). So after the last running request finishes
   the engine runs one more step scheduling 0 tokens (its step counter advances, and on the
   clock it takes the base step time) before it goes idle or the next request is admitted.

Block 0 of the pool is vLLM's null block: ``num_gpu_blocks - 1`` are usable. Prefix caching is
not replayed (the workload has no token identity), speculative decoding neither.

Output: a :class:`Trace` (per step: scheduled tokens, running, waiting, preemptions; per
request: arrival, first token and finish step), turned into times by :mod:`.metrics`.
"""

from __future__ import annotations

import heapq
import math
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from .workload import ReplayConfig, Workload


@dataclass
class Trace:
    """What a replay saw, engine-neutral (both engines fill it)."""

    step_tokens: list[int] = field(default_factory=list)  # tokens scheduled per step
    running: list[int] = field(default_factory=list)  # running after each step's scheduling
    waiting: list[int] = field(default_factory=list)
    preempted: list[list[str]] = field(default_factory=list)  # victims per step
    arrival_step: dict[str, int] = field(default_factory=dict)  # step before which it was added
    first_token_step: dict[str, int] = field(default_factory=dict)
    finish_step: dict[str, int] = field(default_factory=dict)
    recomputed_tokens: int = 0
    output_tokens: int = 0
    idle_before: dict[int, float] = field(default_factory=dict)  # step -> idle seconds before it (time arrivals)
    unfinished: int = 0
    wall_s: float = 0.0
    engine: str = "model"
    refused: str | None = None  # the vLLM engine: vLLM's own start-up refusal (nothing was replayed)

    @property
    def preemptions(self) -> int:
        return sum(len(p) for p in self.preempted)


class _Req:
    __slots__ = ("arrival", "computed", "held", "output", "preempted", "prio", "prompt", "rid", "seq", "target")

    def __init__(self, rid: str, prompt: int, target: int, prio: int, arrival: float, seq: int) -> None:
        self.rid, self.prompt, self.target, self.prio, self.arrival, self.seq = rid, prompt, target, prio, arrival, seq
        self.computed = 0
        self.output = 0
        self.held = 0
        self.preempted = False

    @property
    def num_tokens(self) -> int:
        return self.prompt + self.output


class StepClock:
    """Seconds per step: ``base_s + per_token_s x scheduled tokens`` (metrics.StepTime)."""

    def __init__(self, base_s: float, per_token_s: float) -> None:
        self.base_s, self.per_token_s = base_s, per_token_s

    def step(self, tokens: int) -> float:
        return self.base_s + self.per_token_s * tokens


def replay(
    workload: Workload,
    cfg: ReplayConfig,
    clock: StepClock,
    *,
    arrivals: str = "step",
    max_steps: int = 2_000_000,
    deadline_s: float | None = None,
) -> Trace:
    """Run the workload through the V1 scheduler model. ``arrivals``: ``step`` (each request is
    added when the scheduler reaches its recorded arrival step) or ``time`` (its arrival time on
    the step clock). ``deadline_s``: wall-clock budget; TimeoutError past it."""
    t_start = time.perf_counter()
    tr = Trace()
    bs = cfg.block_size
    usable = max(0, cfg.num_gpu_blocks - 1)
    free = usable
    wm = int(cfg.watermark * cfg.num_gpu_blocks)
    budget_full = cfg.max_num_batched_tokens
    prio = cfg.scheduling_policy == "priority"
    if arrivals == "step":
        keys = [float(r.arrival_step if r.arrival_step is not None else 0) for r in workload.requests]
    else:
        keys = [r.arrival_s for r in workload.requests]
    order = sorted(range(len(keys)), key=lambda i: (keys[i], i))
    rank = {i: k for k, i in enumerate(order)}  # arrival order: vLLM's arrival_time is the time it was added
    reqs = [
        _Req(r.request_id, r.prompt_tokens, max(1, r.output_tokens), r.priority, float(rank[i]), i)
        for i, r in enumerate(workload.requests)
    ]
    pending = deque((keys[i], reqs[i]) for i in order)
    running: list[_Req] = []
    waiting_q: deque[_Req] = deque()  # fcfs
    waiting_h: list[tuple[int, float, int, _Req]] = []  # priority
    now = 0.0
    step = 0
    n_done = 0
    mml = cfg.max_model_len or 0

    def n_waiting() -> int:
        return len(waiting_h) if prio else len(waiting_q)

    def push_wait(r: _Req, front: bool) -> None:
        if prio:
            heapq.heappush(waiting_h, (r.prio, r.arrival, r.seq, r))
        elif front:
            waiting_q.appendleft(r)
        else:
            waiting_q.append(r)

    def peek() -> _Req:
        return waiting_h[0][3] if prio else waiting_q[0]

    def pop_wait() -> None:
        if prio:
            heapq.heappop(waiting_h)
        else:
            waiting_q.popleft()

    def blocks_for(tokens: int) -> int:
        return -(-tokens // bs)

    # Requests finished in the last step and not yet flushed: vLLM's ``has_requests()`` is true while
    # there are any, so the engine runs one more (0-token) step after the last running request
    # finishes before it goes idle (see the module text).
    flush = False
    while pending or running or n_waiting() or flush:
        # arrivals
        if arrivals == "step":
            while pending and pending[0][0] <= step:
                r = pending.popleft()[1]
                tr.arrival_step[r.rid] = step
                push_wait(r, False)
            if not running and not n_waiting() and not flush and pending:
                k = pending[0][0]
                while pending and pending[0][0] <= k:
                    r = pending.popleft()[1]
                    tr.arrival_step[r.rid] = step
                    push_wait(r, False)
        else:
            if not running and not n_waiting() and not flush and pending and pending[0][0] > now:
                tr.idle_before[step + 1] = tr.idle_before.get(step + 1, 0.0) + pending[0][0] - now
                now = pending[0][0]
            while pending and pending[0][0] <= now:
                r = pending.popleft()[1]
                tr.arrival_step[r.rid] = step
                push_wait(r, False)
        step += 1
        if step > max_steps:
            break
        if deadline_s is not None and (step & 1023) == 0 and time.perf_counter() - t_start > deadline_s:
            raise TimeoutError(f"replay passed {deadline_s:g} s at step {step}")
        budget = budget_full
        scheduled: dict[str, int] = {}
        sched_order: list[_Req] = []
        victims: list[str] = []
        idx = 0
        thr = cfg.long_prefill_token_threshold if (len(running) + n_waiting()) > 1 else 0
        while idx < len(running) and budget > 0:
            r = running[idx]
            c = r.computed
            n = r.prompt + r.output - c
            if 0 < thr < n:
                n = thr
            n = min(n, budget)
            if mml and n > mml - c:
                n = max(0, mml - c)
            if n <= 0:
                idx += 1
                continue
            want = -(-(c + n) // bs)
            need = want - r.held
            if need > free:
                ok = False
                while True:
                    if prio:
                        v = max(running, key=lambda x: (x.prio, x.arrival))
                        vi = running.index(v)
                        del running[vi]
                        if vi < idx:
                            idx -= 1
                        if v.rid in scheduled:
                            budget += scheduled.pop(v.rid)
                            sched_order.remove(v)
                    else:
                        v = running.pop()
                    tr.recomputed_tokens += v.computed
                    free += v.held
                    v.held = 0
                    v.computed = 0
                    v.preempted = True
                    victims.append(v.rid)
                    push_wait(v, True)
                    if v is r:
                        break
                    if want - r.held <= free:
                        ok = True
                        break
                if not ok:
                    break
                need = want - r.held
            if need > 0:
                free -= need
                r.held = want
            scheduled[r.rid] = n
            sched_order.append(r)
            budget -= n
            idx += 1
        if not victims:
            while budget > 0 and n_waiting():
                if len(running) >= cfg.max_num_seqs:
                    break
                r = peek()
                n = r.num_tokens - r.computed
                if 0 < thr < n:
                    n = thr
                if not cfg.enable_chunked_prefill and n > budget:
                    break
                n = min(n, budget)
                need = blocks_for(r.computed + n) - r.held
                mark = wm if running else 0  # has_scheduled_reqs=bool(self.running)
                if cfg.reserve_full_isl:  # the whole known sequence must fit before admission
                    full = blocks_for(min(r.prompt + r.output, mml) if mml else r.prompt + r.output) - r.held
                    if full + mark > free:
                        break
                if need + mark > free:
                    break
                pop_wait()
                free -= need
                r.held += need
                running.append(r)
                scheduled[r.rid] = n
                sched_order.append(r)
                budget -= n
        tr.preempted.append(victims)
        tok = sum(scheduled.values())
        tr.step_tokens.append(tok)
        tr.waiting.append(n_waiting())
        if arrivals == "time":
            now += clock.step(tok)
        # execute
        finished: list[_Req] = []
        for r in sched_order:
            r.computed += scheduled[r.rid]
            if r.computed >= r.prompt + r.output:
                r.output += 1
                tr.output_tokens += 1
                if r.rid not in tr.first_token_step:
                    tr.first_token_step[r.rid] = step
                if r.output >= r.target:
                    finished.append(r)
        if finished:
            gone = set(map(id, finished))
            running[:] = [x for x in running if id(x) not in gone]
        flush = bool(finished)  # schedule() hands them to the next step's output, then clears them
        for r in finished:
            free += r.held
            r.held = 0
            tr.finish_step[r.rid] = step
            n_done += 1
        tr.running.append(len(running))  # after the step, as the vLLM driver reads it
    tr.unfinished = len(reqs) - n_done
    tr.wall_s = time.perf_counter() - t_start
    _ = math
    return tr


def config_note(cfg: ReplayConfig) -> dict[str, Any]:
    return {"engine": "model", **cfg.as_dict()}
