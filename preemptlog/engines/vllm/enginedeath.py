"""An engine that died mid-incident, in the vLLM log (a record family of the single log pass).

``vllm serve`` on SIGINT (Ctrl-C, or a supervisor's stop) does not let EngineCore finish: the API
server's process manager sends SIGTERM and, when it lingers, SIGKILLs it at once
(``[shutdown] Process manager: force killing remaining process EngineCore pid N``,
vllm/v1/utils.py, 0.32); requests still open then fail with ``EngineDeadError`` tracebacks
(vllm/v1/engine/exceptions.py: "EngineCore encountered an issue"), and a crashed engine says
``Engine core process ... died unexpectedly`` / ``Engine core proc EngineCore_DP0 died
unexpectedly``. Nothing in EngineCore runs after that: its counters, its stats and the plugin's
records stop, while the API server may go on printing stats lines that only repeat what it last
heard (stale: ``Running``/``Waiting`` unchanged, no generation).

From these lines (literal markers, then a regex on the survivors): frame ``engine_deaths`` (time,
what, source, line, proc) and one warning per log stream: when the engine died, how, and how many
stats lines after it are stale; reconcile.py adds where the block-table records of that engine
stop. Evidence after the death is not evidence of the incident.

Busy or idle is the engine's last known state: the last stats line at its death and the first after
it (where the API server repeats what the engine last reported, with the tokens of its last
messages). Any request running or waiting, or any token served, in either makes it a death
mid-incident (a warning, as is a death with no stats line to tell). Only an engine idle in both gets
a note instead.
A stats line is an instant: a real `vllm serve` killed under load logged Running 0, Waiting 0 just
before the kill (1,310 prompt tokens/s in that interval), then 6 running and 25 waiting after it.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from ...clock.timebase import iso
from ...model.frames import polars_schema
from ...sources.registry import RecordFamily, SourceOutput, TimeContext, register_family, register_samples

KILLED, DEAD, DIED = "engine_killed", "engine_dead", "engine_died"
MARKERS = [
    ("force killing remaining process", KILLED),
    ("EngineDeadError", DEAD),
    ("died unexpectedly", DIED),
]
VERIFY = {
    KILLED: r"force killing remaining process(?:es)?\b.*\b(?:EngineCore|VLLM::EngineCore|engine)",
    DEAD: r"\bEngineDeadError\b",
    DIED: r"[Ee]ngine core (?:proc(?:ess)?)?\b.*\bdied unexpectedly",
}
WHAT = {
    KILLED: "the API server force-killed EngineCore (vLLM's shutdown on SIGINT/SIGTERM)",
    DEAD: "EngineDeadError (requests failed: the engine core is gone)",
    DIED: "the engine core process died unexpectedly",
}
DEATHS_SCHEMA = {
    "time": "Datetime(time_unit='us', time_zone='UTC')",
    "stream": "Int32",
    "what": "String",
    "proc": "String",
    "source": "String",
    "line": "UInt32",
}


def from_records(records: pl.DataFrame, ctx: TimeContext) -> SourceOutput:

    out = SourceOutput()
    kinds = [k for _, k in MARKERS]
    rows = records.filter(pl.col("kind").is_in(kinds)) if records.height else records
    if rows.height == 0:
        return out
    deaths = rows.select(
        "time",
        "stream",
        pl.col("kind").alias("what"),
        pl.col("proc") if "proc" in rows.columns else pl.lit(None, pl.String).alias("proc"),
        "source",
        pl.col("n").alias("line"),
    ).cast(polars_schema(DEATHS_SCHEMA))
    out.frames["engine_deaths"] = deaths
    stats = records.filter(pl.col("kind") == "stats") if records.height else records
    if stats.height:
        stats = stats.with_columns(
            # "Running: N reqs, Waiting: M reqs" (Python loggers), "Reqs Running: N, Waiting: M" (Rust frontend)
            _run=pl.col("text").str.extract(r"Running: (\d+)", 1).cast(pl.Int64, strict=False),
            _wait=pl.col("text").str.extract(r"Waiting: (\d+)", 1).cast(pl.Int64, strict=False),
            # "Avg prompt throughput: X tokens/s, Avg generation throughput: Y" / "Avg prompt tput: X toks/s, ..."
            _tput=pl.sum_horizontal(
                pl.col("text").str.extract(rf"Avg {w} (?:throughput|tput): ([0-9.]+)", 1).cast(pl.Float64, strict=False)
                for w in ("prompt", "generation")
            ),
        ).with_columns(_reqs=pl.col("_run").fill_null(0) + pl.col("_wait").fill_null(0))
    for (stream,), d in deaths.sort("time", "line", nulls_last=True).group_by("stream", maintain_order=True):
        first = d.row(0, named=True)
        t0 = first["time"]
        where = f"{first['source']}:{first['line']}"
        when = iso(t0, ctx.tz) if t0 is not None else "?"
        kinds_seen = list(dict.fromkeys(d.get_column("what").to_list()))
        how = "; ".join(f"{WHAT[k]} ({d.filter(pl.col('what') == k).height} line(s))" for k in kinds_seen)
        mine = stats.filter(pl.col("stream") == stream) if stats.height else stats
        before = mine.filter(pl.col("time") <= t0).tail(1) if t0 is not None and mine.height else mine.head(0)
        after = mine.filter(pl.col("time") > t0) if t0 is not None and mine.height else mine.head(0)
        stale = after.height
        # The engine's last known state: the last stats line at its death and the first after it (the API
        # server repeats there what the engine last reported, with the tokens of its last messages).
        last = [*before.iter_rows(named=True), *after.head(1).iter_rows(named=True)]
        busy = [r for r in last if r["_reqs"] > 0 or (r["_tput"] or 0) > 0]
        if last and not busy:
            # A stop of an idle server (vLLM force-kills EngineCore on every Ctrl-C): said, not a warning.
            cites = " and ".join(f"{r['source']}:{r['n']}" for r in last)
            out.notes.append(
                f"{where}: the engine was stopped at {when} ({how}); it was idle then (the stats lines around it, "
                f"{cites}, show no running or waiting request and no throughput)"
            )
            continue
        b = next((r for r in busy if r["_reqs"] > 0), busy[0] if busy else None)
        state = ""
        if b is not None:
            cite = f"{b['source']}:{b['n']}"
            if b["time"] is not None and t0 is not None and b["time"] > t0:
                cite += ", the engine's last report, repeated after its death"
            if b["_reqs"] > 0:
                state = f" with {b['_run']} running and {b['_wait']} waiting request(s) ({cite})"
            else:  # no request at the instant of the line, tokens in its interval
                state = f" while serving {b['_tput']:g} tokens/s ({cite})"
        out.warnings.append(
            f"{where}: the engine died mid-incident at {when}{state}: {how}; the engine's evidence stops there"
            + (
                f"; {stale} stats line(s) after it are stale (the API server repeats what it last heard from a dead "
                "engine): not evidence of the incident"
                if stale
                else ""
            )
        )
    out.counters["engine_deaths"] = {"lines": deaths.height}
    return out


register_family(RecordFamily(name="enginedeath", markers=MARKERS, from_records=from_records, verify=VERIFY))

SAMPLES: list[tuple[str, dict[str, Any]]] = [
    (
        "(APIServer pid=9991) WARNING 12-02 00:44:20 [utils.py:653] [shutdown] Process manager: force killing "
        "remaining process EngineCore pid 10146",
        {"kind": KILLED},
    ),
    (
        "(APIServer pid=9991) ERROR 12-02 00:44:21 [serving.py:412] vllm.v1.engine.exceptions.EngineDeadError: "
        "EngineCore encountered an issue. See stack trace (above) for the root cause.",
        {"kind": DEAD},
    ),
    (
        "ERROR 05-04 05:25:03 [core_client.py:564] Engine core proc EngineCore_DP0 died unexpectedly, shutting "
        "down client.",
        {"kind": DIED},
    ),
    ("INFO 05-04 05:25:03 [x.py:1] worker 3 died unexpectedly in the test suite", {"_dropped": True}),
]
register_samples("enginedeath", SAMPLES)
