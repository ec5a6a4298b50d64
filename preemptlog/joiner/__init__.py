"""The time-window joiner: the evidence around every preemption event.

For each event at time ``t`` the window is ``[t - before, t + after]``
(defaults 10 s and 2 s), plus a look-back of K scheduler steps (default 3):
the field guide's delayed preemption prints ``PREEMPTED`` 1 to 3 steps after
the decision, so the scheduler and pool state of the K steps before the
nearest step count too. Every source's clock can be shifted first with
``--offset KIND_OR_FILE=±DURATION`` (applied once, by the pipeline: pipeline.on_clock).

Outputs:

- :func:`compute` -> the **evidence frame**, one row per event, keyed by
  ``event_id``, columns in :data:`EVIDENCE_SCHEMA`. Every value column
  ``<name>`` has ``<name>_src`` (``file:line`` of the row it came from, or
  ``file:a-b`` for a sum over lines a..b; null when there is no value), and
  configuration values also ``<name>_status`` (``seen`` | ``derived`` |
  ``default``). A column whose source is absent from the bundle is null, never
  guessed; a window count over a source that is present but quiet is 0.
- :func:`window_rows` -> for ``explain``: every row of every source inside one
  event's window, time-ordered (time, offset from the event, source kind,
  what, value, file:line).

Definitions (all per event; "as of t" = the last row at or before ``t`` and no
earlier than ``t - before``):

An event spread in a counted interval (``time_precision`` ``interval``: V1 ``Preemptions: N``,
V0 counter jumps, Prometheus increases) is read at the interval's end with the interval
``[interval_start, interval_end]`` as its window: every event of one interval gets the same
evidence. Every lookup stays in the event's engine (its label, from ``Engine NNN`` or the
process prefix; none: "0") and, for configuration and hook look-backs, its server run
(vllm/runs.py: a restart resets both).

- ``sched_*``: the nearest [SCHEDULER] step of the event's engine at or before the event. Rows are
  ordered by (time, stream, line), so a step printed after the PREEMPTED line
  in the same second of the same file does not count. Taken only when the step
  is within ``before`` seconds.
- ``lookback_*``: over that step and the K steps before it in the same stream
  (hook steps), or the nearest block-table step and the K steps before it
  (same engine). ``lookback_min_free_blocks`` prefers the hook steps.
- ``pending_*``: the ``Req-`` lines of the snapshot step; ``pending_over_free``
  counts those whose ``blocks_needed`` exceeds the step's free blocks.
- ``batch_*``: the [BATCH] line of the snapshot step (the last one if several);
  ``lookback_max_variance`` over the look-back steps.
- ``req_*``: the event's request (exact id match) in the block-table records
  and text ``block_table extend`` lines: the last ``extend`` in the window
  (``req_blocks_before`` -> ``req_blocks_after``), its latest table at or
  before ``t + after`` (blocks held, tokens, shared blocks with ref_count > 1),
  ``prefix_conflict_with``: another request whose table holds one of those
  shared blocks and which extended or allocated in the same scheduler step as
  the request's preempt record or the step before (when the record carries a
  step), else within ``CONFLICT_S`` (1 s) of the decision (gate G4), and
  ``bt_preempt_offset_s``: time of the request's block-table ``preempt``
  record nearest the event, minus the event's time (clock skew evidence).
- ``bt_preempt_*``: the request's block-table ``preempt`` record nearest the
  event: ``blocks_before`` (blocks it held), and when the record says so, what
  the failed allocation asked for (``blocks_needed``) and the pool at that
  moment (``free_blocks``, ``largest_free_run``, ``watermark_blocks``).
- ``bt_batch_max_len``: the longest running request (``num_tokens``) in the
  nearest block-table step at or before t (the guide's dynamic G2 threshold).
- ``pool_*``: the block-table step snapshot of the decision: the latest at or before the step of
  the request's preempt record, else as of t; ``pool_short_*`` the block-table look-back, each
  step's largest need (extend, allocate, preempt record) against its own free blocks.
- ``req_pending_step`` / ``req_run_records``: what says the request held no blocks (listed pending
  at a look-back step; no record of it running where the records cover the event).
- ``kvev_*_blocks`` / ``kvev_cleared``: sums over the window of the engine's KV cache events (``data_parallel_rank``).
- ``reset_calls`` / ``reset_preempted``: resets of the engine's prefix cache at the event, whatever shows
  them (its ``Successfully reset prefix cache`` line, an ``AllBlocksCleared``, preempt records of the
  reset), each seen once, and the running requests they preempted (joiner/reset.py).
- ``stats_kv_usage_max``: max GPU KV usage (stats lines) in the window;
  ``*_at`` as of t; ``*_delta`` = value as of ``t + after`` minus value as of
  ``t - before`` (or, when no stats line precedes the window, the first one in
  it).
- ``dmon_fb_at_mb`` / ``dmon_sm_at_pct`` / ``dmon_mem_at_pct``: the dmon sample as of t, the
  largest value over the GPUs of that sample, while it still holds at t (until its device's next
  sample; the last one of a capture for one sampling step: a capture that stopped before t says
  nothing about t); ``dmon_fb_jump_mb``: the largest rise
  of one GPU's frame-buffer use between two consecutive samples, for a rise
  sampled in the window (an event of a counted interval: in the interval, never before
  its start), with ``dmon_fb_jump_gpu``.
- ``cfg_*``: the last seen/derived value of the event's server run at or before t; when
  the run states it only later (or never), the run's value in force, else the bundle's
  (other sources), else preemptlog's default; never another run's. Events of a log
  without start banners read the whole bundle's.

Every lookup is a sorted as-of join, a rolling aggregate over a merged
timeline, or a cumulative-sum difference: no Python loop per event.
``bench/joiner_bench.py`` measures it (1 M events against 10 M dmon samples).
The package: one module per section (``sched`` scheduler steps, ``pool`` block pool,
``request`` the request's block table, ``kv`` KV cache events, ``stats`` stats lines, ``prom``
Prometheus gauges,
``dmon`` GPU samples, ``config`` configuration), each declaring its evidence once
(:class:`declare.Evidence`: name, dtype, source kind, what it belongs to, one line of
doc); ``core`` puts them together, ``explain`` gives one event's window. The evidence
schema and the evidence table of docs/sources.md come from the declarations.
"""

from __future__ import annotations

from ..events.recordmatch import record_events
from .common import CONFLICT_S, DEFAULT_AFTER, DEFAULT_BEFORE, DEFAULT_LOOKBACK, engine_key
from .config import CONFIG_KEYS
from .core import compute, evidence, skew_notes
from .declare import Evidence, docs_table
from .declare import write_docs as _write
from .explain import WINDOW_SCHEMA, window_rows
from .sched import LOOKBACK_STEP_COLUMNS
from .schema import DECLARED, EVIDENCE_SCHEMA, VALUE_COLUMNS, polars_schema

SOURCES_DOC = "docs/sources.md"
# Output schema 2 (render.SCHEMA_VERSION) names evidence by its source: old name -> new name.
RENAMED_IN_2: dict[str, str] = {
    "kv_usage_max": "stats_kv_usage_max",
    "kv_usage_at": "stats_kv_usage_at",
    "waiting_at": "stats_waiting_at",
    "waiting_delta": "stats_waiting_delta",
    "running_at": "stats_running_at",
    "running_delta": "stats_running_delta",
    "kv_stored_blocks": "kvev_stored_blocks",
    "kv_removed_blocks": "kvev_removed_blocks",
    "kv_cleared": "kvev_cleared",
    "fb_at_mb": "dmon_fb_at_mb",
    "fb_jump_mb": "dmon_fb_jump_mb",
    "fb_jump_gpu": "dmon_fb_jump_gpu",
    "sm_at_pct": "dmon_sm_at_pct",
    "mem_at_pct": "dmon_mem_at_pct",
    "batch_max_len": "bt_batch_max_len",
}


def write_docs(path: str = SOURCES_DOC) -> bool:
    """Regenerate the evidence table of docs/sources.md from the declarations."""

    return _write(DECLARED, path)


__all__ = [
    "CONFIG_KEYS",
    "CONFLICT_S",
    "DECLARED",
    "DEFAULT_AFTER",
    "DEFAULT_BEFORE",
    "DEFAULT_LOOKBACK",
    "EVIDENCE_SCHEMA",
    "LOOKBACK_STEP_COLUMNS",
    "RENAMED_IN_2",
    "VALUE_COLUMNS",
    "WINDOW_SCHEMA",
    "Evidence",
    "compute",
    "docs_table",
    "engine_key",
    "evidence",
    "polars_schema",
    "record_events",
    "skew_notes",
    "window_rows",
    "write_docs",
]
