"""Requests vLLM rejected at admission, in the vLLM log (a record family of the single log pass).

The API server refuses a request before the engine sees it (``AsyncLLM`` admission check,
vllm/v1/engine/async_llm.py, 0.32 and 0.34) and logs it:

- ``Request queue full - rejecting request X (current=C, n=N, max=M).`` (DEBUG) when
  ``--max-num-queued-reqs M`` would be exceeded (``QueueOverflowError``);
- ``Max queued tokens reached - rejecting request X (current_tokens=C, max=M).`` (DEBUG) for
  ``--max-num-queued-tokens M`` (``MaxQueuedTokensError``);
- ``Engine S - rejecting request X.`` (INFO, 0.34 fault-tolerance mode) while the engine is not
  healthy (``EngineFaultedError``).

A rejected request never runs, so it is never preempted: this is the field guide's queue overflow
(G3) as upstream vLLM has it, an error returned to the client, not a preemption. The family says
how many were rejected and why, with the first line of each reason, as a note; nothing is counted
as a preemption.

Frame ``rejections``: time, engine (from the process prefix), reason (``max_num_queued_reqs``,
``max_num_queued_tokens``, ``engine <status>``), limit (M, null for the engine's), request_id, source,
line.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from ...model.frames import polars_schema
from ...sources.registry import RecordFamily, SourceOutput, TimeContext, register_family, register_samples
from ...sources.vllm_log import engine_of_proc

KIND = "req_rejected"
MARKERS = [("- rejecting request ", KIND)]
LINE_RE = r"(?:Request queue full|Max queued tokens reached|Engine (\S+)) - rejecting request (\S+?)\.?(?:\s|$)"
VERIFY = {KIND: r"(?:Request queue full|Max queued tokens reached|Engine \S+) - rejecting request \S"}
REJECTIONS_SCHEMA = {
    "time": "Datetime(time_unit='us', time_zone='UTC')",
    "engine": "String",
    "reason": "String",
    "limit": "Int64",
    "request_id": "String",
    "source": "String",
    "line": "UInt32",
}
# the setting each reason names, and vLLM's words for it
REASONS = {
    "max_num_queued_reqs": "'Request queue full': --max-num-queued-reqs",
    "max_num_queued_tokens": "'Max queued tokens reached': --max-num-queued-tokens",
}


def from_records(records: pl.DataFrame, ctx: TimeContext) -> SourceOutput:
    out = SourceOutput()
    rows = records.filter(pl.col("kind") == KIND) if records.height else records
    if rows.height == 0:
        return out
    t = pl.col("text")
    proc = pl.col("proc") if "proc" in rows.columns else pl.lit(None, pl.String)
    reason = (
        pl.when(t.str.contains("Request queue full - ", literal=True))
        .then(pl.lit("max_num_queued_reqs"))
        .when(t.str.contains("Max queued tokens reached - ", literal=True))
        .then(pl.lit("max_num_queued_tokens"))
        .otherwise(pl.concat_str([pl.lit("engine "), t.str.extract(LINE_RE, 1)]))
    )
    rej = rows.select(
        "time",
        engine_of_proc(proc).alias("engine"),
        reason.alias("reason"),
        t.str.extract(r"\bmax=(\d+)\)", 1).cast(pl.Int64, strict=False).alias("limit"),
        t.str.extract(LINE_RE, 2).alias("request_id"),
        "source",
        pl.col("n").alias("line"),
    ).cast(polars_schema(REJECTIONS_SCHEMA))
    out.frames["rejections"] = rej
    out.counters["rejections"] = {"lines": rej.height}
    for (why,), g in rej.group_by("reason", maintain_order=True):
        first = g.row(0, named=True)
        limits = sorted({int(x) for x in g.get_column("limit").drop_nulls().to_list()})
        said = REASONS.get(
            str(why),
            f"'Engine {str(why).removeprefix('engine ')} - rejecting request': the engine "
            "was not healthy (fault-tolerance mode)",
        )
        at = f" {'/'.join(str(x) for x in limits)}" if limits else ""
        out.notes.append(
            f"{first['source']}:{first['line']}: {g.height} request(s) rejected at admission ({said}{at}): vLLM "
            "returned an error before they ran, so none was preempted (the field guide's queue overflow, G3, is "
            "this in upstream vLLM); not counted"
        )
    return out


register_family(RecordFamily(name="rejections", markers=MARKERS, from_records=from_records, verify=VERIFY))

SAMPLES: list[tuple[str, dict[str, Any]]] = [
    (
        "(APIServer pid=1) DEBUG 12-02 10:00:01 [v1/engine/async_llm.py:374] Request queue full - rejecting request "
        "chatcmpl-7f3a (current=64, n=1, max=64).",
        {"kind": KIND, "proc": "APIServer pid=1"},
    ),
    (
        "(APIServer pid=1) DEBUG 12-02 10:00:01 [async_llm.py:389] Max queued tokens reached - rejecting request "
        "cmpl-1-0 (current_tokens=900000, max=800000).",
        {"kind": KIND},
    ),
    (
        "(APIServer pid=1) INFO 12-02 10:00:01 [async_llm.py:359] Engine degraded - rejecting request r-9.",
        {"kind": KIND},
    ),
    ("INFO 12-02 10:00:01 [x.py:1] user text - rejecting request quickly", {"_dropped": True}),
]
register_samples("rejections", SAMPLES)
