"""Preemption events from a vLLM log, with exact totals.

Three families (facts page section 0):

- **logged**: V0 ``Sequence group <id> is preempted by PreemptionMode.<MODE> mode
  ... total_num_cumulative_preemption=<n>`` (0.4.3-0.10.2). vLLM logs only the
  1st, 51st, 101st... preemption, so the unlogged ones are **reconstructed**
  from the deltas of the cumulative counter: ``delta - 1`` events without a
  request id, placed evenly in the interval between the previous logged line
  and this one (``time_precision = "interval"``; ``interval_start`` is null
  when the counter started before the log did). A counter that goes down is a
  restart; an identical line seen twice (overlapping rotated files) counts once;
  a warning whose counter was cut off, or is out of range (digits no 64-bit integer holds: a
  damaged value, reported as such), is the previous logged value + 50.
- **interval**: V1 stats ``Preemptions: <n>`` (0.11.1+ with the PR #38452 fix):
  n events in the interval since the previous stats line of the same engine (of the same
  process and server run: a restart, seen by its start banner, starts a new chain).
  The count lags: a preempted request is counted when it produces output again. The Rust
  frontend's line (0.33+, stats.py) counts the one tick of its logger before it (10 s by
  default), summed over every engine (engine ``all``).
- **interval, mode SWAP**: a V0 stats line's ``Swapped: N reqs`` rising in a server run whose log holds
  no V0 warning (:func:`swap_events`): at least the rise, a lower bound.
- **marker**: any other line carrying the whole word ``PREEMPTED`` (patched
  schedulers, debug hooks, ``RequestStatus.PREEMPTED``). The request id is
  taken from the first of these shapes: ``request <id> set to RequestStatus.PREEMPTED`` (and
  ``Request <id> status: RequestStatus.PREEMPTED``, any id), ``Req-<id>``, ``request_id=<id>``,
  ``req_id=<id>``, ``seq_group <id>``, ``request <id>`` (an id with a digit).

Schema: ``EVENTS_SCHEMA`` in events.py.
"""

from __future__ import annotations

import polars as pl

from ...model.events import CAPPED_SCHEMA, capped_count, capped_rows
from ...model.events import spread_interval as _between  # moved to events.py
from ...sources.vllm_log import engine_of_proc
from .stats import RUST_INTERVAL_S, V1_STATS_FAMILIES

RAW_LIMIT = 2000
# Events made from counts (V0 counter jumps, V1 "Preemptions: N", Prometheus increases) are capped,
# per count and in all per source: a damaged or hostile number (total_num_cumulative_preemption=
# 900000000000) must not allocate without bound (it took the process down). Analysis warns.


MARKER_ID_RES = [
    # vLLM V1's own status printed for a request (``request X set to RequestStatus.PREEMPTED``,
    # ``Request X status: RequestStatus.PREEMPTED``): the id is whatever stands there, digits or not
    r"\b[Rr]equest\s+['\"]?([^\s'\":,]+)['\"]?:?\s+(?:set to|status:?|is now|changed to)\s+RequestStatus\.PREEMPTED\b",
    r"\bReq-([A-Za-z0-9_.\-]*[A-Za-z0-9])",
    r"\brequest_id\s*[=:]\s*['\"]?([A-Za-z0-9_.\-]+)",
    r"\breq_id\s*[=:]\s*['\"]?([A-Za-z0-9_.\-]+)",
    r"\bseq_group\s*[=:]?\s*['\"]?([A-Za-z0-9_.\-]+)",
    r"\b[Rr]equest\s+['\"]?([A-Za-z0-9_.\-]*\d[A-Za-z0-9_.\-]*)",
]


# The V0 warning's counter written in digits (a line cut before them has none).
COUNTER_DIGITS_RE = r"total_num_cumulative_preemption=\d"

# A server (re)start: the API server's version banner, or an engine initialising. The banner is
# "vLLM API server version X" through 0.14, then "vLLM server version X, serving model M" with the
# logo off, else the start-up logo's row "█  version X" (log_version_and_model: 0.15+
# entrypoints/utils.py, 0.23-0.32 entrypoints/serve/utils/api_utils.py, 0.33+
# entrypoints/common/startup.py); the API server logs its "non-default args" after it, before the
# engine starts. A crash dump repeats "... LLM engine (vX) with config:" without "Initializing",
# so it is no start.
START_RE = r"vLLM (?:API )?server version |█\s+version |Initializing an? (?:V1 )?LLM engine"


def server_runs(records: pl.DataFrame) -> pl.DataFrame:
    """Per record (``seq``): which server run of its stream and compose service it belongs to.

    Columns: seq, _srun (starts counted so far), _proc (process prefix, "" when none), _compose.
    A restart starts a new interval chain: no interval may span the downtime between two runs of a
    server (the first count after a restart has no interval start, like the first of a log).
    """
    keys = ["stream", "_compose"]
    start = pl.col("kind").is_in(["cfg_version", "cfg_engine"]) & pl.col("text").str.contains(START_RE)
    r = records.select(
        "seq",
        "stream",
        _compose=pl.col("compose").fill_null(""),
        _proc=pl.col("proc").fill_null(""),
        _start=start.fill_null(False),
    ).sort("seq")
    r = r.with_columns(_srun=pl.col("_start").cast(pl.Int32).cum_sum().over(keys))
    return r.select("seq", "_srun", "_proc", "_compose")


def _not_after(start: pl.Expr, end: pl.Expr) -> pl.Expr:
    """An interval start never after its end (a clock that went back): clipped to the end."""
    return pl.when(start > end).then(end).otherwise(start)


def _event_id(suffix: pl.Expr | None = None) -> pl.Expr:
    parts = [
        pl.col("source"),
        pl.lit(":"),
        pl.col("n").cast(pl.String),
        pl.when(pl.col("seg") > 0)
        .then(pl.concat_str([pl.lit("."), pl.col("seg").cast(pl.String)]))
        .otherwise(pl.lit("")),
    ]
    if suffix is not None:
        parts.append(suffix)
    return pl.concat_str(parts)


def _raw() -> pl.Expr:
    return pl.col("text").str.strip_chars().str.slice(0, RAW_LIMIT)


def logged_and_reconstructed(
    records: pl.DataFrame,
) -> tuple[pl.DataFrame, pl.DataFrame, dict, pl.DataFrame]:
    """V0 warnings -> (logged events, reconstructed events, counter facts, the counts whose events were
    capped: events.CAPPED_SCHEMA, a jump's ``delta - 1`` unlogged preemptions)."""
    t = pl.col("text")
    v0 = (
        records.filter(pl.col("kind") == "v0_preempt")
        .with_columns(
            request_id=t.str.extract(r"Sequence group (\S+) is preempted by", 1),
            mode=t.str.extract(r"PreemptionMode\.(\w+)", 1),
            cumulative=t.str.extract(r"total_num_cumulative_preemption=(\d+)", 1).cast(pl.Int64, strict=False),
        )
        # A counter written in digits that no 64-bit integer holds (1 followed by 300 zeros) is no
        # count: a damaged value, read as a missing counter (below) and reported as out of range.
        .with_columns(_oor=pl.col("cumulative").is_null() & t.str.contains(COUNTER_DIGITS_RE))
        .sort("seq")
    )
    facts = {"logged_lines": v0.height, "duplicates": 0, "runs": 0, "last_totals": [], "without_counter": 0}
    if v0.height == 0:
        return v0, v0, facts, pl.DataFrame(schema=CAPPED_SCHEMA)
    # One counter per process of one server run (a restart begins a new one even when the counter
    # does not go down); compose services and process prefixes keep servers apart.
    v0 = v0.join(server_runs(records), on="seq", how="left", maintain_order="left").with_columns(
        _key=pl.concat_str([pl.col("_compose"), pl.lit("\x1f"), pl.col("_proc")])
    )
    # An identical warning (same time, counter and request) seen twice is one event; the same
    # counter and request at another time is a restarted server counting again (seq group 0, =1).
    has_total = pl.col("cumulative").is_not_null()
    same = ["stream", "_key", "_srun", "time", "cumulative", "request_id"]
    dup = has_total & pl.struct(same).is_duplicated() & (pl.int_range(pl.len()).over(same) > 0)
    before = v0.height
    v0 = v0.filter(~dup.fill_null(False))
    facts["duplicates"] = before - v0.height
    grp = ["stream", "_key", "_srun"]
    # V0 logs the 1st, 51st, 101st... preemption (``num_cumulative_preemption % 50 == 0``, printed + 1).
    # A counter below the one before it with no start between, and of no form vLLM prints, is a line cut
    # inside its digits ("=15" of 151): read as a missing counter, never as a restart to 15. (A rising
    # value of another form stands: a build that logs more often still counts up.)
    below = pl.col("cumulative") < pl.col("cumulative").forward_fill().shift(1).over(grp)
    v0 = v0.with_columns(_odd=(below & ((pl.col("cumulative") - 1) % 50 != 0)).fill_null(False))
    v0 = v0.with_columns(cumulative=pl.when(~pl.col("_odd")).then(pl.col("cumulative")))
    # A warning whose counter was cut is still a sampled one: V0 logs at 1, 51, 101...,
    # so it is the previous logged value + 50 per line since (checked against the next value).
    known = pl.col("cumulative")
    gid = known.is_not_null().cum_sum().over(grp)
    v0 = v0.with_columns(_gid=gid)
    k = pl.int_range(pl.len()).over(grp + ["_gid"])
    last_known = known.forward_fill().over(grp)
    next_known = known.backward_fill().over(grp)
    inferred = last_known + 50 * k
    ok = known.is_null() & last_known.is_not_null() & (next_known.is_null() | (inferred < next_known))
    v0 = v0.with_columns(
        _inferred=ok,
        cumulative=pl.when(ok).then(inferred).otherwise(known),
    )
    oor = pl.col("_oor")
    odd = pl.col("_odd")
    facts["counter_inferred"] = v0.filter(pl.col("_inferred") & ~oor & ~odd).height
    facts["without_counter"] = v0.filter(pl.col("cumulative").is_null() & ~oor & ~odd).height
    bad_form = v0.filter(odd).sort("stream", "seq")
    facts["counter_unsampled"] = bad_form.height
    if bad_form.height:
        first = bad_form.row(0, named=True)
        facts["counter_unsampled_first"] = f"{first['source']}:{first['n']}"
        facts["counter_unsampled_inferred"] = bad_form.filter(pl.col("_inferred")).height
    bad = v0.filter(oor).sort("stream", "seq")
    facts["counter_out_of_range"] = bad.height
    if bad.height:
        first = bad.row(0, named=True)
        facts["counter_out_of_range_first"] = f"{first['source']}:{first['n']}"
        facts["counter_out_of_range_inferred"] = bad.filter(pl.col("_inferred")).height

    # A V0 engine with pipeline parallelism has one Scheduler per virtual engine, each with its own
    # num_cumulative_preemption (vllm/engine/llm_engine.py: one Scheduler per pipeline stage): their
    # warnings interleave (1, 1, 51, 51) in one server's log. Each is a counter chain of its own.
    v0 = v0.with_columns(_chain=counter_chains(v0, records, grp))
    grp = [*grp, "_chain"]
    prev_known = pl.col("cumulative").forward_fill().shift(1).over(grp)
    v0 = v0.with_columns(_run=(pl.col("cumulative") < prev_known).fill_null(False).cast(pl.Int32).cum_sum().over(grp))
    run = grp + ["_run"]
    v0 = v0.with_columns(
        _prev=pl.col("cumulative").forward_fill().shift(1).over(run).fill_null(0),
        _prev_time=_not_after(pl.col("time").shift(1).over(run), pl.col("time")),
    )
    v0, facts["continued"] = _continued(v0, records, run)
    v0 = v0.with_columns(
        _delta=pl.when(has_total).then(pl.col("cumulative") - pl.col("_prev")),
    )
    last = v0.filter(has_total).group_by(run).agg(pl.col("cumulative").max().alias("t"))
    # a continued file's counter run is the one of the file it follows (_continued): one run, one end
    facts["runs"] = last.height - len(facts["continued"])
    facts["last_totals"] = sorted(last.get_column("t").to_list())

    logged = v0.with_columns(
        event_id=_event_id(),
        kind=pl.lit("logged"),
        interval_start=pl.lit(None, pl.Datetime("us", "UTC")),
        interval_end=pl.lit(None, pl.Datetime("us", "UTC")),
        engine=pl.lit("0"),
        raw=_raw(),
        _sub=pl.lit(0, pl.Int64),
    )
    recon = v0.filter(pl.col("_delta") > 1).with_columns(_n=capped_count(pl.col("_delta") - 1))
    capped = capped_rows(
        recon.with_columns(engine=pl.lit("0")), _event_id(), "reconstructed", pl.col("_delta") - 1, pl.col("_n")
    )
    facts["capped_counts"] = capped.height
    # Event k of the n made sits at k / (n + 1) of the interval (the warning itself at its end): a capped
    # count's events spread over the whole interval, as its count did, never over the cap's share of it.
    recon = recon.with_columns(_k=pl.int_ranges(1, pl.col("_n") + 1, dtype=pl.Int64)).explode("_k")
    # A log that begins inside a server run (no start before its first warning, no file it continues): the
    # warning before its first one (its counter - 50) was logged before the log began, so the preemptions
    # numbered up to it happened before the log: counted since the engine started, never placed in the
    # log's window (time_precision "unplaced", as a /metrics reading's count since the start). The up to 49
    # after it may fall on either side of the log's start: in the interval that ends at the warning.
    before_log = (
        pl.col("_prev_time").is_null()
        & (pl.col("_srun") == 0)
        & (pl.col("_run") == 0)
        & (pl.col("_prev") + pl.col("_k") <= pl.col("cumulative") - 50)
    )
    recon = recon.with_columns(
        event_id=_event_id(pl.concat_str([pl.lit("~r"), pl.col("_k").cast(pl.String)])),
        kind=pl.lit("reconstructed"),
        time=pl.when(~before_log).then(_between(pl.col("_prev_time"), pl.col("time"), pl.col("_k"), pl.col("_n") + 1)),
        time_precision=pl.when(before_log).then(pl.lit("unplaced")).otherwise(pl.lit("interval")),
        interval_start=pl.col("_prev_time"),
        interval_end=pl.col("time"),
        request_id=pl.lit(None, pl.String),
        mode=pl.lit(None, pl.String),
        cumulative=pl.col("_prev") + pl.col("_k"),
        engine=pl.lit("0"),
        raw=pl.lit(None, pl.String),
        _sub=pl.col("_k") - pl.col("_n") - 1,
    ).drop("_n")
    return logged, recon, facts, capped


def _continued(v0: pl.DataFrame, records: pl.DataFrame, run: list[str]) -> tuple[pl.DataFrame, list[str]]:
    """A log file cut from a server's log under a name of its own (server-part2.log beside
    server-part1.log: not a rotation the bundle joins into one stream) holds no start before its first
    warning: its counter is the one of the file of the same server it follows, never a count from 0
    (warnings 1..451 then 501, 551 were 1002 events: the second file's 501 counted again from 0).

    The first warning of such a stream (no start before it in its stream) takes as its previous count
    the last counter of the latest other stream that ends before this one begins, in the same folder and
    process, whose last counter is not above this warning's. Where that stream was another server, the
    count is lower, never higher: V0's count stays a lower bound. Returns the frame and the pairs said."""
    if v0.height == 0 or "source" not in records.columns:
        return v0, []
    first = v0.filter(
        (pl.int_range(pl.len()).over(run) == 0) & (pl.col("_srun") == 0) & pl.col("cumulative").is_not_null()
    )
    if first.height == 0 or v0.get_column("stream").n_unique() < 2:
        return v0, []
    spans = (
        records.filter(pl.col("time").is_not_null())
        .group_by("stream")
        .agg(pl.col("time").min().alias("_lo"), pl.col("time").max().alias("_hi"), pl.col("source").first())
    )
    span = {r["stream"]: r for r in spans.iter_rows(named=True)}
    lasts = (
        v0.filter(pl.col("cumulative").is_not_null())
        .group_by("stream", "_key", "_chain", maintain_order=True)
        .agg(pl.col("cumulative").last(), pl.col("time").last(), pl.col("source").last(), pl.col("n").last())
    )

    def folder(src: str) -> str:
        return src.rsplit("/", 1)[0] if "/" in src else ""

    fixes: list[tuple[int, int, object]] = []  # (seq of the first warning, previous count, its time)
    said: list[str] = []
    for r in first.iter_rows(named=True):
        me = span.get(r["stream"])
        if me is None or me["_lo"] is None:
            continue
        best = None
        for c in lasts.filter(
            (pl.col("stream") != r["stream"]) & (pl.col("_key") == r["_key"]) & (pl.col("_chain") == r["_chain"])
        ).iter_rows(named=True):
            other = span.get(c["stream"])
            if other is None or other["_hi"] is None or other["_hi"] > me["_lo"]:
                continue
            if folder(other["source"]) != folder(me["source"]) or c["cumulative"] > r["cumulative"]:
                continue
            if best is None or other["_hi"] > span[best["stream"]]["_hi"]:
                best = c
        if best is not None:
            fixes.append((r["seq"], best["cumulative"], best["time"]))
            said.append(f"{r['source']}:{r['n']} continues the counter of {best['source']}:{best['n']}")
    if not fixes:
        return v0, []
    fx = pl.DataFrame(
        {"seq": [f[0] for f in fixes], "_cprev": [f[1] for f in fixes], "_ctime": [f[2] for f in fixes]},
        schema={"seq": v0.schema["seq"], "_cprev": pl.Int64, "_ctime": v0.schema["time"]},
    )
    v0 = v0.join(fx, on="seq", how="left", maintain_order="left").with_columns(
        _prev=pl.coalesce("_cprev", "_prev"),
        _prev_time=pl.when(pl.col("_cprev").is_not_null())
        .then(_not_after(pl.col("_ctime"), pl.col("time")))
        .otherwise(pl.col("_prev_time")),
    )
    return v0.drop("_cprev", "_ctime"), said


# pipeline_parallel_size as vLLM prints it: the engine config line (pipeline_parallel_size=2) or
# the non-default args / Namespace dict ('pipeline_parallel_size': 2)
PP_RE = r"(?:'pipeline_parallel_size':\s*|\bpipeline_parallel_size=)(\d+)"


def pipeline_sizes(records: pl.DataFrame, rows: pl.DataFrame) -> pl.Series:
    """For each row of ``rows`` (stream, _compose, seq), the pipeline_parallel_size its log stated last
    before it (in its stream and compose service), 1 when none was stated."""
    said = (
        # the literal first: the regex only on the few lines that name it (every record's text otherwise)
        records.filter(pl.col("text").str.contains("pipeline_parallel_size", literal=True))
        .select(
            "seq",
            "stream",
            _compose=pl.col("compose").fill_null(""),
            _pp=pl.col("text").str.extract(PP_RE, 1).cast(pl.Int64, strict=False),
        )
        .filter(pl.col("_pp").is_not_null())
        .sort("seq")
    )
    if said.height == 0:
        return pl.Series("_pp", [1] * rows.height, dtype=pl.Int64)
    keyed = rows.select("seq", "stream", "_compose").with_row_index("_i").sort("seq")
    # both sorted by seq (the check cannot see it through the groups, and would warn on stderr)
    got = keyed.join_asof(said, on="seq", by=["stream", "_compose"], strategy="backward", check_sortedness=False)
    return got.sort("_i").get_column("_pp").fill_null(1).clip(lower_bound=1).alias("_pp")


def counter_chains(v0: pl.DataFrame, records: pl.DataFrame, grp: list[str]) -> pl.Series:
    """The counter chain (``_chain``, 0.. pp-1) of each V0 warning of ``v0`` (sorted by seq): within a
    group of ``grp`` whose log states pipeline_parallel_size P > 1, each warning joins the chain whose
    last counter is the largest one below its own (that scheduler's count grew to it); a counter no
    chain is below starts a new chain while fewer than P exist, else it is a step back (a restart) of
    the chain with the highest counter. Without pipeline parallelism every warning is chain 0."""
    if v0.height == 0:
        return pl.Series("_chain", [], dtype=pl.Int32)
    pp = pipeline_sizes(records, v0)
    if int(pp.max() or 1) <= 1:  # type: ignore[arg-type]
        return pl.Series("_chain", [0] * v0.height, dtype=pl.Int32)
    keys = v0.select(grp).rows()
    vals = v0.get_column("cumulative").to_list()
    out: list[int] = []
    lasts: dict[tuple, list[int]] = {}
    for key, v, p in zip(keys, vals, pp.to_list(), strict=True):
        chains = lasts.setdefault(key, [])
        if v is None:  # a counter not read: the chain of the warning before it
            out.append(out[-1] if out and chains else 0)
            continue
        below = [i for i, last in enumerate(chains) if last < v]
        if below:
            c = max(below, key=lambda i: chains[i])
        elif len(chains) < p:
            chains.append(v)
            c = len(chains) - 1
        else:
            c = max(range(len(chains)), key=lambda i: chains[i])
        chains[c] = v
        out.append(c)
    return pl.Series("_chain", out, dtype=pl.Int32)


def interval_events(stats: pl.DataFrame, records: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """V1 ``Preemptions: N`` -> (N interval events per stats line, the counts whose events were capped:
    events.CAPPED_SCHEMA)."""
    # One interval chain per engine of one process of one server run (and line family): the first
    # stats line after a restart has no interval start (like the first of a log), never one across
    # the downtime.
    chain = ["stream", "_compose", "_proc", "_srun", "engine", "family"]
    s = stats.join(server_runs(records), on="seq", how="left").sort("seq")
    s = s.with_columns(_prev_time=_not_after(pl.col("time").shift(1).over(chain), pl.col("time")))
    s = _tick_interval_start(s, chain)
    s = s.filter(pl.col("preemptions") > 0)
    if s.height == 0:
        return s, pl.DataFrame(schema=CAPPED_SCHEMA)
    return _line_count_events(s, records, "preemptions", None)


def swap_events(stats: pl.DataFrame, records: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, dict]:
    """V0 stats lines' ``Swapped: N reqs`` rises -> (interval events of mode SWAP, the counts whose events
    were capped, facts).

    A request enters the swapped queue only by a SWAP-mode preemption (vllm/core/scheduler.py
    ``_preempt_by_swap``), so a rise of N between two stats lines of one engine is at least N
    preemptions in that interval: a lower bound (a request swapped out and in again between two lines
    is not seen, RECOMPUTE-mode preemptions not at all). Only where the server run's log holds no V0
    warning: the warnings' counter already counts every preemption, swapped ones included. A chain's
    first line counts from 0 only after a start banner (the server started with none swapped); in a log
    that begins mid-run its swapped requests were preempted before the log."""
    facts: dict = {"swap_rises": 0, "swap_lines": 0}
    if stats.height == 0 or "swapped" not in stats.columns:
        return stats.clear(), pl.DataFrame(schema=CAPPED_SCHEMA), facts
    chain = ["stream", "_compose", "_proc", "_srun", "engine", "family"]
    runs = server_runs(records)
    warned = (
        records.filter(pl.col("kind") == "v0_preempt")
        .select("seq", "stream")
        .join(runs, on="seq", how="left")
        .select("stream", "_compose", "_srun")
        .unique()
    )
    s = stats.filter((pl.col("family") == "v0") & pl.col("swapped").is_not_null())
    if s.height == 0:
        return stats.clear(), pl.DataFrame(schema=CAPPED_SCHEMA), facts
    s = s.join(runs, on="seq", how="left").sort("seq")
    s = s.join(warned, on=["stream", "_compose", "_srun"], how="anti", maintain_order="left")
    first_from = pl.when(pl.col("_srun") > 0).then(pl.lit(0, pl.Int64))
    s = s.with_columns(
        _prev_sw=pl.col("swapped").shift(1).over(chain).fill_null(first_from),
        _prev_time=_not_after(pl.col("time").shift(1).over(chain), pl.col("time")),
    )
    s = s.with_columns(_rise=(pl.col("swapped") - pl.col("_prev_sw")).clip(lower_bound=0)).filter(pl.col("_rise") > 0)
    if s.height == 0:
        return stats.clear(), pl.DataFrame(schema=CAPPED_SCHEMA), facts
    first = s.row(0, named=True)
    facts = {
        "swap_rises": int(s.get_column("_rise").sum()),
        "swap_lines": s.height,
        "swap_first": f"{first['source']}:{first['line']}",
        "swap_max": int(s.get_column("swapped").max()),  # type: ignore[arg-type]
    }
    out, capped = _line_count_events(s, records, "_rise", "SWAP")
    return out, capped, facts


def _line_count_events(
    s: pl.DataFrame, records: pl.DataFrame, count: str, mode: str | None
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """A stats line's count (column ``count``) -> that many interval events of the line (``~i<k>``) in
    (``_prev_time``, ``time``], and the counts whose events were capped. Event k of the n made sits at
    k / n of the interval: a capped count's events spread over the whole interval, as its count did,
    never over the cap's share of it (n is N when nothing was capped)."""
    seg = records.select("seq", "seg")
    s = s.join(seg, on="seq", how="left").with_columns(pl.col("line").alias("n"), _n=capped_count(pl.col(count)))
    capped = capped_rows(s, _event_id(), "interval", pl.col(count), pl.col("_n"))
    s = s.with_columns(_k=pl.int_ranges(1, pl.col("_n") + 1, dtype=pl.Int64)).explode("_k")
    out = s.with_columns(
        event_id=_event_id(pl.concat_str([pl.lit("~i"), pl.col("_k").cast(pl.String)])),
        kind=pl.lit("interval"),
        time=_between(pl.col("_prev_time"), pl.col("time"), pl.col("_k"), pl.col("_n")),
        time_precision=pl.lit("interval"),
        interval_start=pl.col("_prev_time"),
        interval_end=pl.col("time"),
        request_id=pl.lit(None, pl.String),
        mode=pl.lit(mode, pl.String),
        cumulative=pl.lit(None, pl.Int64),
        raw=pl.lit(None, pl.String),
        _sub=pl.col("_k"),
    ).drop("_n")
    return out, capped


def _tick_interval_start(s: pl.DataFrame, chain: list[str]) -> pl.DataFrame:
    """A V1 line's count covers one tick of its logger, not the time since the previous line shown:
    vLLM's Python logger zeroes its count at every tick (vllm/v1/metrics/loggers.py
    LoggingStatLogger.log -> _update_stats -> _reset, every VLLM_LOG_STATS_INTERVAL), idle ones
    included, and an idle tick's line is DEBUG, absent from an INFO log; the Rust frontend's likewise
    (stats.py). So after an idle stretch the count is of the last tick, never of the hours before it.
    Its interval starts at the later of the previous line and one tick before the line; the tick is
    the period the chain's lines show (their most common gap in whole seconds, seen at least twice: a
    VLLM_LOG_STATS_INTERVAL of its own), else the default 10 s. A first line has its tick too."""
    rust = pl.col("family").is_in(sorted(V1_STATS_FAMILIES))
    if s.height == 0 or not s.select(rust.any()).item():
        return s
    gap = (pl.col("time") - pl.col("time").shift(1)).over(chain).dt.total_seconds(fractional=True).round(0)
    s = s.with_columns(_gap=pl.when(rust).then(gap))
    seen = (
        s.filter(pl.col("_gap") > 0)
        .group_by([*chain, "_gap"])
        .len()
        .filter(pl.col("len") >= 2)
        .sort("len", "_gap", descending=True)
        .group_by(chain, maintain_order=True)
        .agg(pl.col("_gap").first().alias("_tick"))
    )
    s = s.join(seen, on=chain, how="left", nulls_equal=True).sort("seq")
    tick = pl.duration(seconds=pl.col("_tick").fill_null(RUST_INTERVAL_S).cast(pl.Int64))
    start = pl.max_horizontal(pl.col("_prev_time"), pl.col("time") - tick)
    return s.with_columns(_prev_time=pl.when(rust).then(start).otherwise(pl.col("_prev_time"))).drop("_gap", "_tick")


def marker_events(records: pl.DataFrame) -> pl.DataFrame:
    t = pl.col("text")
    rid = pl.coalesce([t.str.extract(rx, 1) for rx in MARKER_ID_RES])
    return records.filter(pl.col("kind") == "marker").with_columns(
        event_id=_event_id(),
        kind=pl.lit("marker"),
        interval_start=pl.lit(None, pl.Datetime("us", "UTC")),
        interval_end=pl.lit(None, pl.Datetime("us", "UTC")),
        request_id=rid,
        mode=t.str.extract(r"\b(RECOMPUTE|SWAP)\b", 1),
        # "Engine 00n" in the text, else the engine of the line's process prefix (EngineCore_DPn ...).
        engine=pl.coalesce(
            t.str.extract(r"Engine (\d+)", 1).cast(pl.Int64, strict=False).cast(pl.String),
            engine_of_proc(pl.col("proc")),
        ),
        cumulative=pl.lit(None, pl.Int64),
        raw=_raw(),
        _sub=pl.lit(0, pl.Int64),
    )
