"""Debug-hook lines inside vLLM logs (field guide 3.1) and text block_table lines (4.1).

Two record families, caught in the same single pass as the vLLM log (their
literal markers join ``vllm_log``'s; the leftmost marker in a line decides
its kind, so ``Req-7 PREEMPTED`` stays a preemption marker and a pending line
``  Req-7: prompt=..., blocks_needed=8`` never becomes one).

**hooks** (``scheduler_debug.py``, printed before each scheduling round)::

    [SCHEDULER] Available blocks: 128, Pending reqs: 17, Running reqs: 31
      Req-42: prompt=128, max_out=512, blocks_needed=40
    [BATCH] Current variance: 318.0 (threshold=256)

with or without anything in front (a vLLM header, an ISO or RFC 3339 prefix,
a docker compose prefix, a process prefix): the fields are found anywhere in
the line. Every ``[SCHEDULER]`` line starts a new scheduler step; ``step``
counts them per stream (a log file with its rotated siblings), from 1.
Pending and batch lines belong to the most recent step of their stream (0 if
none came before).

**block_table text lines** (executor logs; the guide greps
``block_table.*extend``): a line containing ``block_table`` and the word
``extend``, a request key ``req``, ``request_id``, ``req_id`` or ``seq_id``
(``=`` or ``:``), and the block counts as ``8->12`` (also ``8 -> 12``,
``8→12``) or ``old=8 new=12`` (also ``old_blocks=``/``new_blocks=``)::

    block_table extend req=req-42 8->12
    INFO 11-30 05:10:38 [executor.py:88] block_table extend request_id=req-42 old=8 new=12
    2026-11-30T05:10:38.120Z block_table.extend(seq_id=7, 8 -> 12)

A line of either family that also carries the whole word ``PREEMPTED`` is a
preemption marker event as well (same rule as ``vllm_log``'s markers), so no
preemption line is lost to a family.

Time: the vLLM pass parses any header the line has. Bare ``print()`` lines
have none: they take the time of the nearest preceding timestamped *record*
of the same stream (``time_precision = "inherited"``); ``time_upper`` is the
time of the next timestamped record, so the true time lies in
``[time, time_upper]``. Only lines that survive the literal pre-filter are
records, so the bound is as tight as the records around the hook lines
(stats lines every 5-10 s, request lines, other hook lines with headers).

Frames (schemas below): ``hook_steps``, ``hook_pending``, ``hook_batch``,
``bt_text`` (same columns as the block-table source's ``bt_events``, with
``action = "extend"``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import polars as pl

from ...model.frames import polars_schema as _polars_schema
from ...sources.blocktable import BT_TEXT_SCHEMA
from ...sources.registry import RecordFamily, SourceOutput, TimeContext, register_family, register_samples
from ...sources.vllm_log import engine_of_proc
from .preemptions import marker_events

if TYPE_CHECKING:
    from ...model.frames import Schema

SCHED_RE = r"\[SCHEDULER\] Available blocks:\s*(-?\d+),\s*Pending reqs:\s*(\d+),\s*Running reqs:\s*(\d+)"
PENDING_RE = (
    r"\bReq-(?P<rid>[^\s:,]+):\s*prompt=(?P<prompt>\d+),\s*max_out=(?P<max_out>\d+),\s*"
    r"blocks_needed=(?P<blocks_needed>\d+)"
)
BATCH_RE = (
    r"\[BATCH\] Current variance:\s*(?P<variance>-?[\d.]+(?:[eE][+-]?\d+)?)\s*\(threshold=(?P<threshold>-?[\d.]+)\)"
)
BT_KEY_RE = r"\b(?:request_id|req_id|seq_id|req)\s*[=:]\s*['\"]?(?P<rid>[A-Za-z0-9_.:\-]*[A-Za-z0-9_])"
BT_ARROW_RE = r"(?P<a>\d+)\s*(?:->|→)\s*(?P<b>\d+)"
BT_OLDNEW_RE = r"\bold(?:_blocks)?\s*[=:]\s*(?P<a>\d+)\b.*?\bnew(?:_blocks)?\s*[=:]\s*(?P<b>\d+)"
PREEMPTED_RE = r"\bPREEMPTED\b"

HOOK_MARKERS = [
    ("[SCHEDULER] Available blocks:", "hook_sched"),
    ("blocks_needed=", "hook_pending"),
    ("[BATCH] Current variance:", "hook_batch"),
]
BT_TEXT_MARKERS = [("block_table", "bt_text")]

HOOK_STEPS_SCHEMA = {
    "stream": "Int32",
    "seq": "UInt32",
    "step": "Int64",
    "time": "Datetime(time_unit='us', time_zone='UTC')",
    "time_precision": "String",
    "time_upper": "Datetime(time_unit='us', time_zone='UTC')",
    "free_blocks": "Int64",
    "pending": "Int64",
    "running": "Int64",
    "proc": "String",
    "engine": "String",
    "source": "String",
    "line": "UInt32",
}
HOOK_PENDING_SCHEMA = {
    "stream": "Int32",
    "seq": "UInt32",
    "step": "Int64",
    "time": "Datetime(time_unit='us', time_zone='UTC')",
    "time_precision": "String",
    "request_id": "String",
    "prompt": "Int64",
    "max_out": "Int64",
    "blocks_needed": "Int64",
    "engine": "String",
    "source": "String",
    "line": "UInt32",
}
HOOK_BATCH_SCHEMA = {
    "stream": "Int32",
    "seq": "UInt32",
    "step": "Int64",
    "time": "Datetime(time_unit='us', time_zone='UTC')",
    "time_precision": "String",
    "variance": "Float64",
    "threshold": "Float64",
    "engine": "String",
    "source": "String",
    "line": "UInt32",
}


def polars_schema(schema: dict[str, str]) -> Schema:

    return _polars_schema(schema)


def _with_time_upper(rows: pl.DataFrame) -> pl.DataFrame:
    timed = pl.when(~pl.col("time_precision").str.starts_with("inherited")).then(pl.col("time"))
    return rows.with_columns(
        time_upper=pl.when(pl.col("time_precision") == "inherited")
        .then(timed.backward_fill().over("stream"))
        .otherwise(pl.col("time"))
    )


def _marker_events(rows: pl.DataFrame) -> list[pl.DataFrame]:
    """Family lines that also carry the word PREEMPTED are marker events too."""

    pre = rows.filter(pl.col("text").str.contains(PREEMPTED_RE))
    if pre.height == 0:
        return []
    return [marker_events(pre.with_columns(kind=pl.lit("marker")))]


def _own_engine_rows(records: pl.DataFrame, rows: pl.DataFrame) -> tuple[pl.DataFrame, str | None]:
    """The hook lines whose engine is known, and a note on the others: in a log where two engines or
    more write behind their process prefixes (a data-parallel server's EngineCore_DP0, _DP1), a hook
    line without a prefix (a bare print()) could be any of them's scheduler step, so it is no one
    engine's evidence (before: engine 0's, by default). A log of one engine (or of none named) keeps
    every line, as that engine's."""
    if "proc" not in records.columns:
        return rows, None
    named = (
        records.select("stream", engine_of_proc(pl.col("proc")).alias("_e"))
        .drop_nulls("_e")
        .group_by("stream")
        .agg(pl.col("_e").unique().sort())
        .filter(pl.col("_e").list.len() > 1)
    )
    if named.height == 0:
        return rows, None
    lost = pl.col("engine").is_null() & pl.col("stream").is_in(named.get_column("stream").implode())
    gone = rows.filter(lost)
    if gone.height == 0:
        return rows, None
    first = gone.sort("stream", "seq").row(0, named=True)
    engines_of = named.filter(pl.col("stream") == first["stream"]).get_column("_e")[0].to_list()
    note = (
        f"{gone.height} debug-hook line(s) name no engine in a log of engines {', '.join(engines_of)} "
        f"(first {first['source']}:{first['n']}): which engine's scheduler printed them is not in the log, so "
        "they explain no engine's preemption (not evaluable); a hook line behind its engine's process prefix "
        "(EngineCore_DPn) is that engine's"
    )
    return rows.filter(~lost), note


def hooks_from_records(records: pl.DataFrame, ctx: TimeContext) -> SourceOutput:
    out = SourceOutput()
    kinds = [k for _, k in HOOK_MARKERS]
    rows = records.filter(pl.col("kind").is_in(kinds)) if records.height else records
    if rows.height == 0:
        return out
    rows = rows.sort("stream", "seq")
    # Step numbers: every [SCHEDULER] line starts a step, per stream; the time bound
    # comes from every record of the stream (not only hook lines).
    allrec = _with_time_upper(records.select("stream", "seq", "time", "time_precision").sort("stream", "seq"))
    rows = rows.join(allrec.select("stream", "seq", "time_upper"), on=["stream", "seq"], how="left")
    # Each engine's scheduler prints its own steps (a data-parallel log interleaves them): the
    # engine comes from the line's process prefix (EngineCore_DPn...), steps count per engine.
    rows = rows.with_columns(engine=engine_of_proc(pl.col("proc")))
    marked = rows  # every family line, for the PREEMPTED markers among them
    rows, unowned = _own_engine_rows(records, rows)
    rows = rows.sort("stream", "seq").with_columns(
        step=(pl.col("kind") == "hook_sched").cast(pl.Int64).cum_sum().over("stream", pl.col("engine").fill_null("0"))
    )
    t = pl.col("text")
    sched = rows.filter(pl.col("kind") == "hook_sched").with_columns(
        free_blocks=t.str.extract(SCHED_RE, 1).cast(pl.Int64, strict=False),
        pending=t.str.extract(SCHED_RE, 2).cast(pl.Int64, strict=False),
        running=t.str.extract(SCHED_RE, 3).cast(pl.Int64, strict=False),
        line=pl.col("n"),
    )
    bad = sched.filter(pl.col("free_blocks").is_null()).height
    steps = sched.select(list(HOOK_STEPS_SCHEMA)).cast(polars_schema(HOOK_STEPS_SCHEMA))

    pend = (
        rows.filter(pl.col("kind") == "hook_pending")
        .with_columns(p=t.str.extract_groups(PENDING_RE), line=pl.col("n"))
        .unnest("p")
        .with_columns(
            request_id=pl.col("rid"),
            prompt=pl.col("prompt").cast(pl.Int64, strict=False),
            max_out=pl.col("max_out").cast(pl.Int64, strict=False),
            blocks_needed=pl.col("blocks_needed").cast(pl.Int64, strict=False),
        )
    )
    bad += pend.filter(pl.col("blocks_needed").is_null()).height
    pending = pend.filter(pl.col("blocks_needed").is_not_null()).select(list(HOOK_PENDING_SCHEMA))
    pending = pending.cast(polars_schema(HOOK_PENDING_SCHEMA))

    bat = (
        rows.filter(pl.col("kind") == "hook_batch")
        .with_columns(b=t.str.extract_groups(BATCH_RE), line=pl.col("n"))
        .unnest("b")
        .with_columns(
            variance=pl.col("variance").cast(pl.Float64, strict=False),
            threshold=pl.col("threshold").cast(pl.Float64, strict=False),
        )
    )
    bad += bat.filter(pl.col("variance").is_null()).height
    batch = bat.filter(pl.col("variance").is_not_null()).select(list(HOOK_BATCH_SCHEMA))
    batch = batch.cast(polars_schema(HOOK_BATCH_SCHEMA))

    out.frames.update(
        hook_steps=steps.filter(pl.col("free_blocks").is_not_null()), hook_pending=pending, hook_batch=batch
    )
    out.events.extend(_marker_events(marked))
    if unowned is not None:
        out.notes.append(unowned)
    inherited = rows.filter(pl.col("time_precision").str.starts_with("inherited")).height
    out.counters["hooks"] = {
        "steps": steps.height,
        "pending_lines": pending.height,
        "batch_lines": batch.height,
        "unparsed_lines": bad,
        "inherited_time_lines": inherited,
    }
    if inherited:
        out.notes.append(
            f"{inherited} debug-hook line(s) have no timestamp (bare print()): each takes the time of the nearest "
            "earlier line of its stream with any timestamp, so it may be early by up to the gap to the next one "
            "(time_upper); before the first such line, the nearest later one (time_precision inherited-later)."
        )
    if bad:
        out.warnings.append(f"{bad} debug-hook line(s) have the hook's marker but not its shape (skipped)")
    return out


def bt_text_from_records(records: pl.DataFrame, ctx: TimeContext) -> SourceOutput:
    out = SourceOutput()
    rows = records.filter(pl.col("kind") == "bt_text") if records.height else records
    if rows.height == 0:
        return out
    t = pl.col("text")
    arrow = t.str.extract_groups(BT_ARROW_RE)
    oldnew = t.str.extract_groups(BT_OLDNEW_RE)
    parsed = rows.with_columns(
        _is_extend=t.str.contains(r"block_table\b.*\bextend"),
        request_id=t.str.extract(BT_KEY_RE, 1),
        blocks_before=pl.coalesce(oldnew.struct.field("a"), arrow.struct.field("a")).cast(pl.Int64, strict=False),
        blocks_after=pl.coalesce(oldnew.struct.field("b"), arrow.struct.field("b")).cast(pl.Int64, strict=False),
    )
    ok = pl.col("_is_extend") & pl.col("blocks_after").is_not_null()
    good = parsed.filter(ok).with_columns(
        engine=engine_of_proc(pl.col("proc")),
        step=pl.lit(None, pl.Int64),
        action=pl.lit("extend"),
        blocks_needed=pl.lit(None, pl.Int64),
        reason=pl.lit(None, pl.String),
        line=pl.col("n"),
    )
    frame = good.select(list(BT_TEXT_SCHEMA)).cast(polars_schema(BT_TEXT_SCHEMA))
    out.frames["bt_text"] = frame
    out.events.extend(_marker_events(rows))
    skipped = parsed.filter(~ok & ~t.str.contains(PREEMPTED_RE)).height
    out.counters["bt_text"] = {"extend_lines": frame.height, "unparsed_lines": skipped}
    if skipped:
        out.notes.append(f"{skipped} block_table line(s) are not 'extend' lines with block counts (ignored)")
    return out


register_family(
    RecordFamily(
        name="hooks",
        markers=HOOK_MARKERS,
        from_records=hooks_from_records,
    )
)
register_family(
    RecordFamily(
        name="bt_text",
        markers=BT_TEXT_MARKERS,
        from_records=bt_text_from_records,
        verify={"bt_text": r"block_table\b.*\bextend|\bPREEMPTED\b"},
    )
)

# Accepted shapes: (line, expected). "kind" is the record kind the vLLM pass gives
# the line; the other keys are fields of the family frame row (or "event": the
# marker event's request id).
SAMPLES: list[tuple[str, dict[str, Any]]] = [
    (
        "[SCHEDULER] Available blocks: 128, Pending reqs: 17, Running reqs: 31",
        {"kind": "hook_sched", "free_blocks": 128, "pending": 17, "running": 31},
    ),
    (
        "INFO 11-30 05:10:38 [scheduler_debug.py:12] [SCHEDULER] Available blocks: 5, Pending reqs: 2, Running reqs: 4",
        {"kind": "hook_sched", "free_blocks": 5, "pending": 2, "running": 4},
    ),
    (
        "2026-11-30T05:10:38.120Z [SCHEDULER] Available blocks: 0, Pending reqs: 0, Running reqs: 1",
        {"kind": "hook_sched", "free_blocks": 0, "pending": 0, "running": 1},
    ),
    (
        "vllm-1  | [SCHEDULER] Available blocks: 64, Pending reqs: 3, Running reqs: 8",
        {"kind": "hook_sched", "free_blocks": 64},
    ),
    (
        "  Req-42: prompt=128, max_out=512, blocks_needed=40",
        {"kind": "hook_pending", "request_id": "42", "prompt": 128, "max_out": 512, "blocks_needed": 40},
    ),
    (
        "  Req-chatcmpl-a1b2: prompt=23, max_out=10, blocks_needed=3",
        {"kind": "hook_pending", "request_id": "chatcmpl-a1b2", "prompt": 23, "max_out": 10, "blocks_needed": 3},
    ),
    (
        "(EngineCore_DP0 pid=7) INFO 11-30 05:10:38 [hook.py:3]   Req-9: prompt=1024, max_out=64, blocks_needed=68",
        {"kind": "hook_pending", "request_id": "9", "blocks_needed": 68},
    ),
    # The engine of a data-parallel log's hook line: its process prefix (steps count per engine).
    (
        "(EngineCore_DP1 pid=11) [SCHEDULER] Available blocks: 870, Pending reqs: 1, Running reqs: 12",
        {"kind": "hook_sched", "free_blocks": 870, "engine": "1", "step": 1},
    ),
    (
        "(DPEngineCoreActor_DP2 pid=12) INFO 11-30 05:10:38 [hook.py:3]   Req-9: prompt=8, max_out=8, blocks_needed=1",
        {"kind": "hook_pending", "request_id": "9", "engine": "2"},
    ),
    ("[BATCH] Current variance: 318.0 (threshold=256)", {"kind": "hook_batch", "variance": 318.0, "threshold": 256.0}),
    (
        "WARNING 11-30 05:10:38 [hook.py:5] [BATCH] Current variance: 42.5 (threshold=256)",
        {"kind": "hook_batch", "variance": 42.5, "threshold": 256.0},
    ),
    (
        "block_table extend req=req-42 8->12",
        {"kind": "bt_text", "request_id": "req-42", "blocks_before": 8, "blocks_after": 12},
    ),
    (
        "INFO 11-30 05:10:38 [executor.py:88] block_table extend request_id=req-42 old=8 new=12",
        {"kind": "bt_text", "request_id": "req-42", "blocks_before": 8, "blocks_after": 12},
    ),
    (
        "2026-11-30T05:10:38.120Z block_table.extend(seq_id=7, 8 -> 12)",
        {"kind": "bt_text", "request_id": "7", "blocks_before": 8, "blocks_after": 12},
    ),
    (
        "(Worker_DP1_TP0 pid=21) INFO 11-30 05:10:38 [executor.py:88] block_table extend req=r7 8->12",
        {"kind": "bt_text", "request_id": "r7", "blocks_after": 12, "engine": "1"},
    ),
    (
        "DEBUG 11-30 05:10:38 [worker.py:1] block_table: extend req_id: cmpl-3 old_blocks=3 new_blocks=4",
        {"kind": "bt_text", "request_id": "cmpl-3", "blocks_before": 3, "blocks_after": 4},
    ),
    # Not hook shapes: stay what the vLLM pass says they are.
    ("  Req-77 PREEMPTED (blocks_needed=12)", {"kind": "marker", "event": "77"}),
    ("INFO 11-30 05:10:39 [scheduler.py:10] Req-77 PREEMPTED", {"kind": "marker", "event": "77"}),
    ("block_table free req_id=5 after PREEMPTED", {"kind": "bt_text", "event": "5"}),
    ("block_table allocate req=5 0->4", {"_dropped": True}),
]

register_samples("hooks", [s for s in SAMPLES if s[1].get("kind") != "bt_text"])
register_samples("bt_text", [s for s in SAMPLES if s[1].get("kind") == "bt_text"])
