"""preemptlog's vLLM general plugin: decision-time evidence of every preemption.

Installed by ``pip install preemptlog`` into the vLLM environment (entry point ``preemptlog`` in
the group ``vllm.general_plugins``). vLLM calls :func:`register` once in every process it starts
(API server / ``LLM``, engine core, workers). Without ``PREEMPTLOG_RECORD`` and
``PREEMPTLOG_FIX_STATS`` it returns at once: no import of vLLM, no patch, no file.

``PREEMPTLOG_RECORD=PATH`` (``{pid}`` and ``{engine}`` are replaced) wraps, at class level,
``Scheduler.schedule``, ``Scheduler.add_request``, ``Scheduler._free_request``,
``Scheduler._preempt_request`` (0.12+; in 0.11 the preemption is the ``KVCacheManager.free``
call made inside ``schedule()``), ``KVCacheManager.allocate_slots`` and
``KVCacheCoordinator.get_num_blocks_to_allocate`` (the blocks a failed allocation needed).
Verified on 0.11-0.34 (recorder.SUPPORTED); another version is recorded anyway where those hooks
exist, said once as a warning in vLLM's log and flagged in the records (``"unverified": true``
beside ``"vllm_version"`` in each file's first record), never silently nothing. The
scheduler is created after ``register()`` in the engine-core process, so the wrapped methods are
the ones that schedule; the file is opened on the first record, so other processes write nothing.
Per preemption it writes, in preemptlog's block-table format (``preemptlog/data/
blocktable.schema.json``, v2; docs/sources.md): a ``step`` snapshot of the pool before the
victim's blocks are freed, the victim's ``table`` and an ``event`` with ``action`` ``preempt``.
Request lifecycle records (``type`` ``request``: arrival, first scheduled, finish) let the
workload and the recomputed tokens be rebuilt. ``PREEMPTLOG_RECORD_EVENTS=1`` adds every
allocate / extend / free and the tables of the running requests sharing the victim's blocks;
``PREEMPTLOG_RECORD_STEPS=N`` a pool snapshot every N scheduler steps.

``PREEMPTLOG_FIX_STATS=1`` makes ``LoggingStatLogger.log()`` keep the interval's preemption
count until the line is written (vLLM PR #38452), so the stats line prints ``Preemptions: N``.

Safety: a wrapper reads scheduler state only, and never changes an argument, a return value or
an exception; the original method always runs. An exception inside a hook is caught, logged once
and disables that hook. A write error (full disk, unwritable path) logs one warning and turns the
recorder off. Times are the scheduler module's ``time.time()``, the clock of vLLM's log lines.
"""

from __future__ import annotations

import os

ENV_RECORD = "PREEMPTLOG_RECORD"
ENV_EVENTS = "PREEMPTLOG_RECORD_EVENTS"
ENV_STEPS = "PREEMPTLOG_RECORD_STEPS"
ENV_FIX_STATS = "PREEMPTLOG_FIX_STATS"

_DONE: dict[str, object] = {}


def register() -> None:
    """vLLM's entry point. Does nothing unless PREEMPTLOG_RECORD or PREEMPTLOG_FIX_STATS is set."""
    record = os.environ.get(ENV_RECORD, "").strip()
    fix_stats = os.environ.get(ENV_FIX_STATS, "").strip() not in ("", "0")
    if not record and not fix_stats:
        return
    if "register" in _DONE:  # vLLM may call the loader more than once per process
        return
    _DONE["register"] = True
    from . import recorder

    log = recorder.plugin_logger()
    version = recorder.vllm_version()
    # Each part on its own: a plugin must never stop vLLM from starting.
    if fix_stats:
        try:
            recorder.install_stats_fix(version, log=log)
        except Exception as exc:
            log.warning("preemptlog: PREEMPTLOG_FIX_STATS not applied (%s: %s)", type(exc).__name__, exc)
    if record:
        try:
            recorder.install_vllm(record, version, log=log, events=_flag(ENV_EVENTS), every=_int(ENV_STEPS, log))
        except Exception as exc:
            log.warning("preemptlog: recording not active (%s: %s)", type(exc).__name__, exc)


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


def _int(name: str, log) -> int:
    text = os.environ.get(name, "").strip()
    if not text:
        return 0
    try:
        n = int(text)
    except ValueError:
        log.warning("preemptlog: %s=%r is not a whole number; no periodic snapshots", name, text)
        return 0
    return max(n, 0)
