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
whose line it is (``engine``: the warning names each server by it) and ``stands_in`` (the row stands
for a start the log does not show: SGLang's first line in a stream without ``server_args``).
"""

from __future__ import annotations

import bisect
from typing import Any

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
    "stands_in": "Boolean",
}


def starts(records: pl.DataFrame) -> pl.DataFrame:
    """Server starts in the records (see the module docstring): every engine says which of its
    records start a server, which name its version and what that version is (Engine.server_start)."""
    if records.height == 0 or "stream" not in records.columns:
        return empty_frame(START_SCHEMA)
    found = [(e, e.server_start(pl.col(f"_own{i}"))) for i, e in enumerate(engines.registered())]
    start, dated, stands_in = pl.lit(False), pl.lit(False), pl.lit(False)
    for _, st in found:
        start, dated = start | st.start, dated | st.dated
        if st.stands_in is not None:
            stands_in = stands_in | st.stands_in
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
        stands_in.fill_null(False).alias("stands_in"),
    )


def engine_named(name: str | None) -> str:
    """The engine a start names, the default engine's for a log without one (a vLLM log without its banner)."""
    return name or engines.default().display


def real_starts(records: pl.DataFrame) -> pl.DataFrame:
    """The starts the log shows (:func:`starts` without those that stand for a start it does not show):
    the ones that date an engine's start."""
    st = starts(records)
    return st.filter(~pl.col("stands_in"))


def servers(records: pl.DataFrame) -> pl.DataFrame:
    """One row per distinct server: stream, version, host (restarts in one stream are one server).

    A start that stands for one the log does not show (a stream cut after start-up) is a server only
    where its engine has no other: beside another start of its engine it is that server's continued
    or rotated file, as a vLLM log without its banner is."""
    s = starts(records)
    cut = pl.col("stands_in")
    shown = (~cut).any().over("engine")  # the engine has a start the log shows
    first_cut = cut & (cut.cast(pl.Int32).cum_sum().over("engine") == 1)
    s = s.filter(~cut | (~shown & first_cut))
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


V0_COUNTER_RE = r"total_num_cumulative_preemption=(\d+)"


def interleaved(records: pl.DataFrame) -> list[dict[str, Any]]:
    """The streams (one log, one container of a prefixed log) whose lines are several servers'
    interleaved with nothing on a line to say whose (``kubectl logs -l app=vllm`` without ``--prefix``,
    several pods' output merged as it arrives): one dict per such stream, ``source``, ``line`` (the
    first line that shows it) and ``why``.

    Seen two ways, neither of which a restart can show: the earlier server's process still writes
    after another server started (a start, :func:`starts`, whose process pid differs on the same
    host: a restart's old process is gone), or a V0 ``total_num_cumulative_preemption`` that goes
    back (or repeats) twice or more with no start between (one server's logged count only grows;
    a single step back with no start is a restart whose banner is not in the log)."""
    if records.height == 0 or not {"stream", "seq", "kind", "text", "proc"} <= set(records.columns):
        return []
    compose = pl.col("compose").fill_null("") if "compose" in records.columns else pl.lit("")
    st = starts(records).with_columns(pl.col("host").fill_null(""))
    rows = records.select("stream", "seq", "source", "n", _c=compose, _proc=pl.col("proc").fill_null(""))
    st = st.join(
        rows.select("stream", "source", pl.col("n").alias("line"), "seq", "_c").unique(["stream", "source", "line"]),
        on=["stream", "source", "line"],
        how="left",
    ).with_columns(_pid=pl.col("process").str.extract(r"pid=(\d+)", 1))
    found: dict[int, dict[str, Any]] = {}
    # 1. the process of an earlier start writes after a later start of another process (same host)
    if st.height > 1:
        st = st.sort("stream", "seq")
        for (sid, _c, _h), grp in st.group_by("stream", "_c", "host", maintain_order=True):
            if grp.height < 2 or grp.get_column("_pid").drop_nulls().n_unique() < 2:
                continue
            mine = rows.filter((pl.col("stream") == sid) & (pl.col("_c") == _c))
            for k in range(1, grp.height):
                later = grp.row(k, named=True)
                if later["_pid"] is None:
                    continue
                earlier = [p for p in grp.head(k).get_column("_pid").drop_nulls().unique() if p != later["_pid"]]
                if not earlier:
                    continue
                after = mine.filter(
                    (pl.col("seq") > later["seq"]) & pl.col("_proc").str.extract(r"pid=(\d+)", 1).is_in(earlier)
                ).head(1)
                if after.height and sid not in found:
                    a = after.row(0, named=True)
                    found[int(sid)] = {
                        "source": a["source"],
                        "line": a["n"],
                        "by": "pid",
                        "why": (
                            f"pid {a['_proc'].split('pid=')[-1]} of the server started before line {later['line']} "
                            f"still writes after it (line {a['n']}), beside pid {later['_pid']}"
                        ),
                    }
    # 2. a V0 cumulative counter that goes back twice or more with no start between
    v0 = records.filter(pl.col("kind") == "v0_preempt").select(
        "stream",
        "seq",
        "source",
        "n",
        _c=compose,
        _proc=pl.col("proc").fill_null(""),
        _v=pl.col("text").str.extract(V0_COUNTER_RE, 1).cast(pl.Int64, strict=False),
        _t=pl.col("text"),
    )
    v0 = v0.filter(pl.col("_v").is_not_null()).unique(["stream", "_c", "_proc", "_t"], keep="first").sort("seq")
    if v0.height > 2:
        key = ["stream", "_c", "_proc"]
        # one server's schedulers side by side (vLLM V0 with pipeline parallelism): each counter only grows
        chains = next((e.counter_chains for e in engines.registered() if e.counter_chains is not None), None)
        if chains is not None:
            v0 = v0.with_columns(_chain=chains(v0.with_columns(_compose="_c", cumulative="_v"), records, key))
            key = [*key, "_chain"]
        st_seq = st.get_column("seq").drop_nulls().sort() if st.height else pl.Series("seq", [], pl.UInt64)
        v0 = v0.with_columns(_pv=pl.col("_v").shift(1).over(key), _ps=pl.col("seq").shift(1).over(key))
        back = v0.filter(pl.col("_pv").is_not_null() & (pl.col("_v") <= pl.col("_pv")))
        if back.height:
            # a start between the two lines explains the step back (a restart)
            seqs = st_seq.to_list()

            def explained(lo: int, hi: int) -> bool:
                i = bisect.bisect_right(seqs, lo)
                return i < len(seqs) and seqs[i] < hi

            keep = [not explained(int(r["_ps"]), int(r["seq"])) for r in back.iter_rows(named=True)]
            back = back.filter(pl.Series(keep, dtype=pl.Boolean))
            for (sid,), grp in back.group_by("stream", maintain_order=True):
                if grp.height >= 2 and int(sid) not in found:
                    a = grp.row(0, named=True)
                    found[int(sid)] = {
                        "source": a["source"],
                        "line": a["n"],
                        "by": "counter",
                        "why": (
                            f"vLLM's total_num_cumulative_preemption goes back {grp.height} times with no server "
                            f"start between (first at line {a['n']}: {a['_pv']} then {a['_v']})"
                        ),
                    }
    return [found[k] for k in sorted(found)]


def interleaved_warning(found: list[dict[str, Any]]) -> str | None:
    """The warning of :func:`interleaved`'s streams, or None."""
    if not found:
        return None
    f = found[0]
    more = f" (and {len(found) - 1} more log(s) alike)" if len(found) > 1 else ""
    if f["by"] == "pid":
        what = "told apart only by their process ids"
        counts = "counts are kept per process and summed; the configuration, pressure and requests are theirs mixed"
    else:
        what = "with nothing on a line to tell whose"
        counts = (
            "its counts mix the servers' and are neither one server's nor their sum (the counters of a V0 server's "
            "pipeline-parallel schedulers interleave alike when the log does not state pipeline_parallel_size)"
        )
    return (
        f"{f['source']} holds the lines of two or more servers interleaved, {what} (kubectl logs -l ... without "
        f"--prefix?): {f['why']}{more}; {counts}: get each pod's log (kubectl logs POD, or kubectl logs --prefix) "
        "and analyse with --each"
    )
