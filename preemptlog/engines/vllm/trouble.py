"""What else a vLLM log says happened around a preemption (record families of the single log pass).

Two kinds of line that change the answer:

- **a crash**: a Python traceback (``Traceback (most recent call last)``, its ``File "...", line N,
  in f`` frames) ending in an exception line (``AssertionError``, ``RuntimeError: CUDA error: ...``),
  and V1's ``EngineCore encountered a fatal error.`` (vllm/v1/engine/core.py, 0.8+; its traceback
  follows). Frame ``engine_crashes`` (time, stream, what: the exception or the fatal line, where: the
  deepest frame in vLLM's own files, source, line) and one warning per crash: a preemption followed
  by a crash in the same second is not only a KV shortage (vllm-project/vllm#9342: V0's priority
  preemption, then ``assert len(running_scheduled.prefill_seq_groups) == 0`` in
  ``_schedule_default``; #10685: SWAP preemption, then an AssertionError);
- **V0's priority preemption named**: a line naming ``_schedule_priority_preemption``
  (vllm/core/scheduler.py 0.6.3-0.10.2, the non-chunked path under ``--scheduling-policy priority``:
  running groups of lower priority are preempted for the head waiting group): a debug print of a
  patched build or a traceback frame. vLLM's own V0 warning says "because there is not enough KV
  cache space" for every preemption, whatever preempted; this line says which path did. Frame
  ``v0_priority_lines`` (time, stream, source, line): the joiner's ``code_priority_path``.
"""

from __future__ import annotations

import re
from typing import Any

import polars as pl

from ...clock.timebase import iso
from ...model.frames import polars_schema
from ...sources.registry import RecordFamily, SourceOutput, TimeContext, register_family, register_samples
from ...sources.vllm_log import WRAPPER_PREFIX_RE

TRACEBACK, FRAME, EXCEPTION, FATAL, PRIORITY = (
    "tb_start",
    "tb_frame",
    "tb_exception",
    "engine_fatal",
    "v0_priority_path",
)
MARKERS = [
    ("Traceback (most recent call last)", TRACEBACK),
    ('", line ', FRAME),
    ("encountered a fatal error", FATAL),
    ("_schedule_priority_preemption", PRIORITY),
    ("Error", EXCEPTION),
    ("Exception", EXCEPTION),
]
# A line's message after the vLLM header (``file.py:N] `` / ``[file.py:N] ``), a ``[rank0]:`` prefix or a
# container's or service's prefix alone (a traceback's lines carry no vLLM header: ``docker logs -t``'s
# time, containerd's ``stdout F``, compose's ``svc | ``: sources/vllm_log.py WRAPPER_PREFIX_RE)
_EXC = (
    r"(?:[\]:)]\s+|" + WRAPPER_PREFIX_RE + r")"
    r"(?:[A-Za-z_][\w.]*\.)?([A-Z]\w*(?:Error|Exception))(?::\s+(.*?))?\s*$"
)
_FRAME = r'File "([^"]+)", line (\d+), in ([\w<>]+)'
VERIFY = {
    TRACEBACK: r"Traceback \(most recent call last\)",
    FRAME: _FRAME,
    FATAL: r"EngineCore encountered a fatal error",
    PRIORITY: r"\b_schedule_priority_preemption\b",
    EXCEPTION: _EXC,
}
CRASHES_SCHEMA = {
    "time": "Datetime(time_unit='us', time_zone='UTC')",
    "stream": "Int32",
    "what": "String",
    "where": "String",
    "source": "String",
    "line": "UInt32",
}
PRIORITY_SCHEMA = {
    "time": "Datetime(time_unit='us', time_zone='UTC')",
    "stream": "Int32",
    "source": "String",
    "line": "UInt32",
}
# A traceback's frames and its exception line come within this many lines of each other.
TB_SPAN = 400
# Exceptions that are not a crash of the engine (they are said elsewhere, or are a client's).
NOT_A_CRASH = {"EngineDeadError"}


def _vllm_file(path: str) -> str | None:
    """``vllm/core/scheduler.py`` of a frame's path inside vLLM's own package (the last ``vllm/``
    folder of the path: a source checkout is ``.../vllm/vllm/...``), else None."""
    at = [m.start() for m in re.finditer(r"(?:(?<=/)|^)vllm/", path)]
    return path[at[-1] :] if at and path.endswith(".py") else None


def crashes(records: pl.DataFrame) -> pl.DataFrame:
    """The crashes of the log (``CRASHES_SCHEMA``): each exception line that ends a traceback, and each
    fatal-error line without one, with the deepest vLLM frame before it."""

    kinds = [TRACEBACK, FRAME, EXCEPTION, FATAL]
    r = records.filter(pl.col("kind").is_in(kinds)) if records.height else records
    if r.height == 0:
        return pl.DataFrame(schema=polars_schema(CRASHES_SCHEMA))
    rows: list[dict[str, Any]] = []
    for (stream,), g in r.sort("seq").group_by("stream", maintain_order=True):
        frames: list[tuple[int, str]] = []  # (line, "vllm/x.py:N f") of the open traceback
        started: int | None = None
        fatal: dict[str, Any] | None = None
        for x in g.iter_rows(named=True):
            text, n = str(x["text"] or ""), int(x["n"])
            if x["kind"] == TRACEBACK:
                started, frames = n, []
            elif x["kind"] == FRAME:
                m = re.search(_FRAME, text)
                own = _vllm_file(m.group(1)) if m else None
                if m and own:
                    frames.append((n, f"{own}:{m.group(2)} {m.group(3)}"))
            elif x["kind"] == FATAL:
                fatal = {**x, "what": "EngineCore encountered a fatal error"}
                started, frames = n, []
            elif x["kind"] == EXCEPTION:
                m = re.search(_EXC, text)
                if not m or started is None or n - started > TB_SPAN or m.group(1) in NOT_A_CRASH:
                    continue
                msg = (m.group(2) or "").strip()
                what = m.group(1) + (f": {msg[:80]}" if msg else "")
                where = frames[-1][1] if frames else None
                base = fatal if fatal is not None and n - int(fatal["n"]) <= TB_SPAN else x
                rows.append(
                    {
                        "time": base["time"] if base["time"] is not None else x["time"],
                        "stream": stream,
                        "what": what if base is x else f"{fatal['what'] if fatal else ''}: {what}",
                        "where": where,
                        "source": x["source"],
                        "line": n,
                    }
                )
                started, frames, fatal = None, [], None
        if fatal is not None:  # a fatal error whose exception line is not in the log (an excerpt)
            rows.append(
                {
                    "time": fatal["time"],
                    "stream": stream,
                    "what": fatal["what"],
                    "where": frames[-1][1] if frames else None,
                    "source": fatal["source"],
                    "line": int(fatal["n"]),
                }
            )
        elif started is not None and frames:  # the log ends inside a traceback of vLLM's code (an excerpt)
            first = g.filter(pl.col("n") == started).row(0, named=True)
            rows.append(
                {
                    "time": first["time"],
                    "stream": stream,
                    "what": "a traceback (its exception line is not in the log)",
                    "where": frames[-1][1],
                    "source": first["source"],
                    "line": started,
                }
            )
    if not rows:
        return pl.DataFrame(schema=polars_schema(CRASHES_SCHEMA))
    return pl.DataFrame(rows).select(list(CRASHES_SCHEMA)).cast(polars_schema(CRASHES_SCHEMA))


def from_records(records: pl.DataFrame, ctx: TimeContext) -> SourceOutput:

    out = SourceOutput()
    if records.height == 0:
        return out
    # a traceback frame "in _schedule_priority_preemption" names the path too (one kind per line: FRAME)
    pr = records.filter(
        (pl.col("kind") == PRIORITY)
        | ((pl.col("kind") == FRAME) & pl.col("text").fill_null("").str.contains("_schedule_priority_preemption"))
    )
    if pr.height:
        out.frames["v0_priority_lines"] = pr.select("time", "stream", "source", pl.col("n").alias("line")).cast(
            polars_schema(PRIORITY_SCHEMA)
        )
    cr = crashes(records)
    if cr.height:
        out.frames["engine_crashes"] = cr
        for x in cr.iter_rows(named=True):
            when = iso(x["time"], ctx.tz) if x["time"] is not None else "an unknown time"
            inside = f" in {x['where']}" if x["where"] else ""
            out.warnings.append(f"{x['source']}:{x['line']}: {x['what']}{inside} at {when}")
        out.counters["engine_crashes"] = {"crashes": cr.height}
    return out


register_family(RecordFamily(name="trouble", markers=MARKERS, from_records=from_records, verify=VERIFY))

SAMPLES: list[tuple[str, dict[str, Any]]] = [
    ("ERROR 10-11 06:51:31 engine.py:135] Traceback (most recent call last):", {"kind": TRACEBACK}),
    (
        'ERROR 10-11 06:51:31 engine.py:135]   File "/usr/lib/python3/dist-packages/vllm/core/scheduler.py", line '
        "1027, in _schedule_default",
        {"kind": FRAME},
    ),
    ("ERROR 10-11 06:51:31 engine.py:135] AssertionError", {"kind": EXCEPTION}),
    ("[rank0]: RuntimeError: CUDA error: an illegal memory access was encountered", {"kind": EXCEPTION}),
    ("ERROR 07-11 15:21:48 [core.py:588] EngineCore encountered a fatal error.", {"kind": FATAL}),
    (
        "INFO 10-10 20:41:04 scheduler.py:805] tonyaw: _schedule_priority_preemption: waiting_queue is not None.",
        {"kind": PRIORITY},
    ),
    ("INFO 05-04 05:25:03 [x.py:1] the Error budget is fine", {"_dropped": True}),
]
register_samples("trouble", SAMPLES)
