"""Which vLLM servers a bundle holds: one incident, or several mixed in one folder.

A server start is a version line (``vLLM API server version X``, ``vLLM server
version X``; SGLang's ``server_args=`` line, version ``sglang``: SGLang prints none),
or, in a stream without one, the engine's ``Initializing a V1
LLM engine (vX) with config`` line. Each start has a version, the process
(``APIServer pid=N``, any ``(Name pid=N[, ip=A])`` prefix) and a host (the
``ip=`` of the prefix, a docker compose service) when the line shows them.

Starts in one stream with the same version are restarts of one server. The
bundle is **mixed** when it holds more than one server: starts with different
versions or hosts, or starts in different streams (two logs of two servers).
Analysing a mixed bundle as one incident adds counts of unrelated servers
together, so the analysis warns and ``preemptlog analyze --each`` (each.py)
analyses every server separately.

Frame of :func:`starts` (``START_SCHEMA``): one row per start, with the display name of the engine
whose line it is (``engine``: the warning names each server by it).
"""

from __future__ import annotations

import polars as pl

from .. import engines
from ..model.frames import empty_frame

START_SCHEMA = {
    "stream": "Int32",
    "source": "String",
    "line": "UInt32",
    "time": "Datetime(time_unit='us', time_zone='UTC')",
    "version": "String",
    "process": "String",
    "host": "String",
    "engine": "String",
}


def starts(records: pl.DataFrame) -> pl.DataFrame:
    """Server starts in the records (see the module docstring): every engine says which of its
    records start a server, which name its version and what that version is (Engine.server_start)."""
    if records.height == 0 or "stream" not in records.columns:
        return empty_frame(START_SCHEMA)
    found = [(e, e.server_start(pl.col(f"_own{i}"))) for i, e in enumerate(engines.registered())]
    start, dated = pl.lit(False), pl.lit(False)
    for _, st in found:
        start, dated = start | st.start, dated | st.dated
    version = next((st.version for e, st in found if e.default), pl.lit(None, pl.String))
    engine = pl.lit(engines.default().display, pl.String)
    for i, (e, st) in reversed(list(enumerate(found))):
        if not e.default:
            version = pl.when(pl.col(f"_own{i}")).then(st.version).otherwise(version)
            engine = pl.when(pl.col(f"_own{i}")).then(pl.lit(e.display, pl.String)).otherwise(engine)
    r = records.sort("stream", "seq") if "seq" in records.columns else records
    r = r.with_columns([engines.owns(e).fill_null(False).alias(f"_own{i}") for i, (e, _) in enumerate(found)])
    rows = r.filter(start).with_columns(_ver=dated)
    # A stream's undated starts (vLLM's engine-init lines) are starts only when it has no dated one.
    rows = rows.filter(pl.col("_ver") | ~pl.col("_ver").any().over("stream"))
    return rows.select(
        pl.col("stream").cast(pl.Int32),
        pl.col("source"),
        pl.col("n").alias("line"),
        pl.col("time"),
        version.alias("version"),
        pl.col("proc").str.extract(r"^(.*?pid=\d+)", 1).alias("process"),
        pl.coalesce(pl.col("proc").str.extract(r"ip=([0-9A-Fa-f.:]+)", 1), pl.col("compose")).alias("host"),
        engine.alias("engine"),
    )


def servers(records: pl.DataFrame) -> pl.DataFrame:
    """One row per distinct server: stream, version, host (restarts in one stream are one server)."""
    s = starts(records)
    return (
        s.group_by("stream", pl.col("version").fill_null("?"), pl.col("host").fill_null(""), maintain_order=True)
        .agg(
            pl.col("source").first(),
            pl.col("line").first(),
            pl.col("time").first(),
            pl.len().alias("starts"),
            pl.col("process").drop_nulls().unique(maintain_order=True).alias("processes"),
            pl.col("engine").first(),
        )
        .sort("stream", "line")
    )


def mixed_warning(records: pl.DataFrame) -> str | None:
    """A warning when the records hold more than one server, naming each; None for one incident."""
    srv = servers(records)
    if srv.height <= 1:
        return None
    parts = []
    for r in srv.head(6).iter_rows(named=True):
        name = r["engine"] or engines.default().display
        # an engine that prints no version stands in its own name for one (SGLang's "sglang")
        named = r["version"] not in ("?", "") and r["version"].lower() != name.lower()
        what = f"{name} {r['version']}" if named else name
        if r["host"]:
            what += f" on {r['host']}"
        if r["processes"]:
            what += f" ({r['processes'][0]})"
        parts.append(f"{what} started at {r['source']}:{r['line']}")
    more = f" and {srv.height - 6} more" if srv.height > 6 else ""
    # servers sharing a file: --each parts a file by its lines' container prefix (docker compose, kubectl logs
    # --prefix: render/each.py); other hosts (a Ray process prefix's ip=) stay together there
    shared = srv.group_by("stream", maintain_order=True).agg(
        pl.col("stream").first().alias("_sid"),
        pl.col("host").n_unique().alias("hosts"),
        pl.col("source").first(),
        pl.col("line").get(1, null_on_oob=True).alias("second"),
    )
    by_host = shared.filter(pl.col("hosts") > 1)
    restarted = shared.filter((pl.col("hosts") == 1) & pl.col("second").is_not_null())
    if by_host.height:
        sid = by_host.get_column("_sid")[0]
        mine = (
            records.filter((pl.col("stream") == sid) & pl.col("compose").is_not_null())
            if "compose" in records.columns
            else None
        )
        if mine is not None and mine.get_column("compose").n_unique() > 1:
            how = (
                f"{by_host.get_column('source')[0]} holds the lines of several of them, each behind its container's "
                "prefix: preemptlog analyze --each analyses each container's lines on its own"
            )
        else:
            how = (
                f"{by_host.get_column('source')[0]} holds the lines of several of them (told apart by their "
                "process prefix): split it by that prefix and analyse each part"
            )
    elif restarted.height:
        r = restarted.row(0, named=True)
        how = (
            f"{r['source']} holds a restart as another version (at line {r['second']}): --since and --until keep "
            "the events of one run"
        )
    else:
        how = "preemptlog analyze --each analyses each server (or each subfolder) separately"
    return (
        f"the input holds {srv.height} {_kinds(srv)} servers, not one incident: {'; '.join(parts)}{more}; they are counted "
        f"together here: {how}"
    )


def _kinds(srv: pl.DataFrame) -> str:
    """``vLLM``, ``SGLang`` or ``vLLM and SGLang``: the engines of the servers, as their display names."""
    names = [str(n) for n in srv.get_column("engine").fill_null(engines.default().display).unique(maintain_order=True)]
    return " and ".join(names)
