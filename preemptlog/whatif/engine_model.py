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

Versions (the configuration's ``vllm_version``, the engine registry's SchedulerVersion): 0.32 is
the reference read above; from 0.33 a priority request that preempted itself does not stop the
running loop (``continue``: "The requests after it have higher priority and may still fit"); from
0.34 ``long_prefill_token_threshold`` needs chunked prefill, and with ``cache_aware_admission_window``
(fcfs, prefix caching) the waiting queue's head is reordered by cached prefix each step the waiting
queue is served, once the KV cache is ``cache_aware_admission_threshold`` used
(``_reorder_waiting_by_cached_prefix``).

Block 0 of the pool is vLLM's null block: ``num_gpu_blocks - 1`` are usable. With
``enable_prefix_caching`` the pool is vLLM's cached block pool (:class:`_Pool`): a waiting request
is admitted with its longest cached prefix computed (its recorded block hashes give prompt
identity; a victim's own blocks can be hit when it resumes), hit blocks leave the free queue,
full blocks are cached as they fill and evicted only when reused. Speculative decoding is not
replayed.

Output: a :class:`Trace` (per step: scheduled tokens, running, waiting, preemptions; per
request: arrival, first token and finish step), turned into times by :mod:`.metrics`.
"""

from __future__ import annotations

import heapq
import math
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

from .workload import ReplayConfig, Workload, scheduler_of


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
    scheduler_version: str | None = None  # the vLLM engine: the version of the scheduler that ran

    @property
    def preemptions(self) -> int:
        return sum(len(p) for p in self.preempted)


class _Req:
    __slots__ = (
        "arrival",
        "blocks",
        "computed",
        "hashes",
        "held",
        "ncached",
        "output",
        "preempted",
        "prio",
        "prompt",
        "rid",
        "seq",
        "target",
    )

    def __init__(self, rid: str, prompt: int, target: int, prio: int, arrival: float, seq: int) -> None:
        self.rid, self.prompt, self.target, self.prio, self.arrival, self.seq = rid, prompt, target, prio, arrival, seq
        self.computed = 0
        self.output = 0
        self.held = 0
        self.preempted = False
        self.blocks: list[int] = []  # prefix caching: the block ids held, in order
        self.ncached = 0  # prefix caching: blocks registered in the cache
        self.hashes: tuple[str, ...] | None = None

    @property
    def num_tokens(self) -> int:
        return self.prompt + self.output


class _Pool:
    """vLLM 0.32's block pool with prefix caching (vllm/v1/core/block_pool.py, kv_cache_utils.py
    FreeKVCacheBlockQueue, single_type_kv_cache_manager.py): a free queue (blocks 1..N-1, block 0
    the null block) popped at the head (evicting a cached block's hash); a request's blocks are
    freed in reverse order, and those reaching reference count 0 go to the head when they hold no
    hash (``free_blocks``: LIFO reuse) and to the tail when cached (LRU eviction); free blocks stay
    cached until reused; a hit touches its blocks (out of the queue,
    reference count + 1). A block's identity: the request's recorded block hash when it lies in
    the hashed prompt (``hash_block`` tokens per hash, chained), else the request itself and the
    block index (a victim's own blocks can still be hit when it resumes)."""

    def __init__(self, num_blocks: int, block_size: int, hash_block: int) -> None:
        self.bs, self.hbs = block_size, max(1, hash_block)
        self.queue: OrderedDict[int, None] = OrderedDict.fromkeys(range(1, num_blocks))  # head first
        self.ref = [0] * max(1, num_blocks)
        self.key_of: dict[int, Any] = {}
        self.cache: dict[Any, dict[int, None]] = {}

    def free(self) -> int:
        return len(self.queue)

    def key(self, r: _Req, i: int) -> Any:
        end = (i + 1) * self.bs
        hs = r.hashes
        if hs and end <= len(hs) * self.hbs:
            return hs[i] if self.hbs == self.bs else (hs[(end - 1) // self.hbs], end % self.hbs)
        return (r.seq, i)

    def lookup(self, r: _Req, num_tokens: int) -> list[int]:
        """The longest cached prefix, at most ``num_tokens - 1`` tokens (get_computed_blocks)."""
        out: list[int] = []
        for i in range((num_tokens - 1) // self.bs):
            got = self.cache.get(self.key(r, i))
            if not got:
                break
            out.append(next(iter(got)))
        return out

    def evictable(self, blocks: list[int]) -> int:
        return sum(1 for b in blocks if self.ref[b] == 0)

    def touch(self, blocks: list[int]) -> None:
        for b in blocks:
            if self.ref[b] == 0:
                del self.queue[b]
            self.ref[b] += 1

    def take(self, n: int) -> list[int]:
        out = []
        for _ in range(n):
            b = self.queue.popitem(last=False)[0]
            k = self.key_of.pop(b, None)
            if k is not None:
                d = self.cache[k]
                del d[b]
                if not d:
                    del self.cache[k]
            self.ref[b] = 1
            out.append(b)
        return out

    def register(self, r: _Req, tokens: int) -> None:
        """cache_full_blocks: the request's blocks full of computed tokens join the cache."""
        full = min(tokens // self.bs, len(r.blocks))
        for i in range(r.ncached, full):
            b = r.blocks[i]
            if b not in self.key_of:
                k = self.key(r, i)
                self.key_of[b] = k
                self.cache.setdefault(k, {})[b] = None
        r.ncached = max(r.ncached, full)

    def release(self, r: _Req) -> None:
        """BlockPool.free_blocks of the request's blocks in reverse order: those reaching reference
        count 0 without a hash go to the front of the queue (reused first, in that order), cached
        ones to the tail (evicted last)."""
        first: list[int] = []
        for b in reversed(r.blocks):
            self.ref[b] -= 1
            if self.ref[b] == 0:
                if b in self.key_of:
                    self.queue[b] = None
                else:
                    first.append(b)
        for b in reversed(first):
            self.queue[b] = None
            self.queue.move_to_end(b, last=False)
        r.blocks = []
        r.ncached = 0


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
    hash_block: int | None = None,
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
    mml = cfg.max_model_len or 0
    # vLLM refuses a prompt of max_model_len tokens or more (its input check) and stops a request
    # at max_model_len tokens (check_stop): see workload.length_limits
    wreqs = [r for r in workload.requests if not mml or r.prompt_tokens < mml]
    if arrivals == "step":
        keys = [float(r.arrival_step if r.arrival_step is not None else 0) for r in wreqs]
    else:
        keys = [r.arrival_s for r in wreqs]
    order = sorted(range(len(keys)), key=lambda i: (keys[i], i))
    rank = {i: k for k, i in enumerate(order)}  # arrival order: vLLM's arrival_time is the time it was added
    reqs = [
        _Req(
            r.request_id,
            r.prompt_tokens,
            max(1, min(r.output_tokens, mml - r.prompt_tokens) if mml else r.output_tokens),
            r.priority,
            float(rank[i]),
            i,
        )
        for i, r in enumerate(wreqs)
    ]
    pool = _Pool(cfg.num_gpu_blocks, bs, hash_block or bs) if cfg.enable_prefix_caching else None
    # the version's behaviours (engines' SchedulerVersion): from 0.33 a priority request that preempted
    # itself does not stop the running loop; from 0.34 long_prefill_token_threshold needs chunked
    # prefill, and cache-aware admission (fcfs with prefix caching only: Scheduler.__init__)
    sv = scheduler_of(cfg)
    self_continue = prio and sv.self_preempt_continues
    thr_on = cfg.enable_chunked_prefill or not sv.long_prefill_needs_chunked
    window = (
        cfg.cache_aware_admission_window
        if (pool is not None and not prio and sv.has("cache_aware_admission_window"))
        else 0
    )
    if pool is not None:
        for q, w in zip(reqs, wreqs, strict=True):
            q.hashes = w.block_hashes

    def free_now() -> int:
        return pool.free() if pool is not None else free

    def release(v: _Req) -> None:
        nonlocal free
        if pool is not None:
            pool.release(v)
        else:
            free += v.held
        v.held = 0

    pending = deque((keys[i], reqs[i]) for i in order)
    running: list[_Req] = []
    waiting_q: deque[_Req] = deque()  # fcfs
    waiting_h: list[tuple[int, float, int, _Req]] = []  # priority
    now = 0.0
    step = 0
    n_done = 0

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
        admitted = 0
        scheduled: dict[str, int] = {}
        sched_order: list[_Req] = []
        victims: list[str] = []
        idx = 0
        thr = cfg.long_prefill_token_threshold if thr_on and (len(running) + n_waiting()) > 1 else 0
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
            if need > 0 and need > free_now():
                ok = False
                itself = False
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
                    release(v)
                    v.computed = 0
                    v.preempted = True
                    victims.append(v.rid)
                    push_wait(v, True)
                    if v is r:
                        itself = True
                        break
                    if want - r.held <= free_now():
                        ok = True
                        break
                if not ok:
                    if itself and self_continue:
                        # 0.33+: "The requests after it have higher priority and may still fit"; it
                        # left the running list, so idx already points at the next one
                        continue
                    break
                need = want - r.held
            if need > 0:
                if pool is not None:
                    r.blocks += pool.take(need)
                else:
                    free -= need
                r.held = want
            if pool is not None and (c + n) // bs > r.ncached:  # a block filled up: it joins the cache
                pool.register(r, c + n)
            scheduled[r.rid] = n
            sched_order.append(r)
            budget -= n
            idx += 1
        if not victims:
            if window and len(waiting_q) >= 2 and pool is not None and usable:
                _reorder_by_cached_prefix(waiting_q, pool, window, 1.0 - pool.free() / usable, cfg)
            while budget > 0 and n_waiting():
                if len(running) >= cfg.max_num_seqs:
                    break
                r = peek()
                # prefix caching: the longest cached prefix (at most num_tokens - 1 tokens) is computed
                hits = pool.lookup(r, r.num_tokens) if pool is not None and r.computed == 0 else []
                comp = r.computed + len(hits) * bs
                n = r.num_tokens - comp
                if 0 < thr < n:
                    n = thr
                if not cfg.enable_chunked_prefill and n > budget:
                    break
                n = min(n, budget)
                # a hit block in the free queue leaves it: it counts against the free blocks
                ev = pool.evictable(hits) if hits and pool is not None else 0
                need = max(blocks_for(comp + n) - r.held - len(hits), 0) + ev
                mark = wm if running else 0  # has_scheduled_reqs=bool(self.running)
                if cfg.reserve_full_isl:  # the whole known sequence must fit before admission
                    full = max(blocks_for(min(r.num_tokens, mml) if mml else r.num_tokens) - r.held - len(hits), 0) + ev
                    if full + mark > free_now():
                        break
                if need + mark > free_now():
                    break
                pop_wait()
                if pool is not None:
                    pool.touch(hits)
                    r.blocks = hits + pool.take(need - ev)
                    r.held = len(r.blocks)
                    r.computed = comp
                    pool.register(r, min(comp + n, r.num_tokens))
                else:
                    free -= need
                    r.held += need
                running.append(r)
                admitted += 1
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
            release(r)
            tr.finish_step[r.rid] = step
            n_done += 1
        tr.running.append(len(running))  # after the step, as the vLLM driver reads it
        if (
            pool is None
            and running
            and not victims
            and not finished
            and not admitted
            and len(scheduled) == len(running) <= budget_full
            and all(v == 1 for v in scheduled.values())  # admission saw the stretch's budget
        ):
            k = _decode_stretch(running, bs, free, mml, max_steps - step)
            if arrivals == "step" and pending:
                k = min(k, max(0, math.ceil(pending[0][0] - step)))
            if k >= 2:
                # k steps in which every running request decodes one token and nothing arrives,
                # finishes, is admitted or preempted (a head refused now is refused again: free
                # blocks only shrink): the same trace as k turns of the loop, at a fraction of the
                # cost (issue 36: the replay of a verified fix).
                tok, n_run, n_wait = len(running), len(running), n_waiting()
                if arrivals == "time":
                    taken = 0
                    while taken < k and not (pending and pending[0][0] <= now):
                        now += clock.step(tok)
                        taken += 1
                    k = taken
                if k:
                    tr.preempted.extend([] for _ in range(k))
                    tr.step_tokens.extend([tok] * k)
                    tr.waiting.extend([n_wait] * k)
                    tr.running.extend([n_run] * k)
                    tr.output_tokens += tok * k
                    for r in running:
                        held = max(r.held, -(-(r.computed + k) // bs))
                        free -= held - r.held
                        r.held = held
                        r.computed += k
                        r.output += k
                    step += k
                    if deadline_s is not None and time.perf_counter() - t_start > deadline_s:
                        raise TimeoutError(f"replay passed {deadline_s:g} s at step {step}")
    tr.unfinished = len(reqs) - n_done
    tr.wall_s = time.perf_counter() - t_start
    _ = math
    return tr


def _decode_stretch(running: list[_Req], bs: int, free: int, mml: int, cap: int) -> int:
    """The steps (at most ``cap``) for which every running request keeps decoding one token a step
    without finishing, reaching max_model_len or needing more blocks than are free (0: not now)."""
    k = cap
    for r in running:
        if r.output < 1 or r.computed != r.prompt + r.output - 1:
            return 0  # a prefill, a recomputation or a request that was not scheduled
        k = min(k, r.target - r.output - 1)
        if mml:
            k = min(k, mml - r.computed)
    if k < 2:
        return 0

    def blocks(j: int) -> int:
        return sum(max(0, -(-(r.computed + j) // bs) - r.held) for r in running)

    if blocks(k) > free:
        lo, hi = 0, k  # blocks(lo) <= free < blocks(hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if blocks(mid) <= free:
                lo = mid
            else:
                hi = mid
        k = lo
    return k


def _reorder_by_cached_prefix(waiting: deque[_Req], pool: _Pool, window: int, usage: float, cfg: ReplayConfig) -> None:
    """vLLM 0.34's ``Scheduler._reorder_waiting_by_cached_prefix``: once the KV cache is at least
    ``cache_aware_admission_threshold`` used (``1 - free / (num_gpu_blocks - 1)``), the waiting
    requests among the first ``window`` that are merely waiting (never preempted, nothing computed)
    are put in their slots deepest cached prefix first (``get_num_cached_tokens``: the hit of
    ``num_tokens - 1`` tokens), arrival order breaking ties; the others keep their positions."""
    if usage < cfg.cache_aware_admission_threshold:
        return
    head = [waiting[i] for i in range(min(window, len(waiting)))]
    slots = [i for i, q in enumerate(head) if not q.preempted and q.computed == 0]
    if len(slots) < 2:
        return
    cached = {i: len(pool.lookup(head[i], head[i].num_tokens)) for i in slots}
    order = sorted(slots, key=lambda i: (-cached[i], i))
    if order == slots:
        return
    new = list(head)
    for slot, src in zip(slots, order, strict=True):
        new[slot] = head[src]
    for _ in head:
        waiting.popleft()
    waiting.extendleft(reversed(new))


def config_note(cfg: ReplayConfig) -> dict[str, Any]:
    return {"engine": "model", **cfg.as_dict()}
