"""What the event's engine can do by its own code, and what its engine and interval show of it.

vLLM's scheduler code is evidence like a log line (preemptlog/engine_facts.py, each fact citing the
upstream source file): for an event of an engine whose generation, version and scheduling policy
the bundle shows, ``code_trigger`` is what triggers a preemption in that code (V1: a failed
KV-block allocation for a running request), ``code_not_gates`` the field guide's gates that code
cannot produce, ``code_reset`` whether it has ``reset_prefix_cache(reset_running_requests=True)``.
Corroboration is the event's own engine and interval (a counted interval: its interval; a line:
its window): ``up_pressure`` a suspected pressure interval (pressure.py) of that engine overlapping
it; ``up_kv_max_before`` the largest KV cache usage the engine showed from the log's start up to
its end (a pool that never came near the ceiling contradicts a failed allocation).

The code facts are the bundle's configuration in force (vllm/config.py in_force): one value for
every event. Computed for every event, with or without a time (a count not placed in time still
has an engine and an interval).
"""

from __future__ import annotations

import polars as pl

from .. import engines
from ..model.containers import with_container
from .common import ServerScope, asof, engine_key, src_expr
from .declare import Evidence, cited
from .spans import failed_in_spans, pressure_in_spans
from .stats import MAX_DEPTH, _prefix, lanes

SOURCE = "engine code (engine_facts.py), vllm-log (config)"
EVIDENCE = [
    Evidence(
        "code_trigger",
        "String",
        SOURCE,
        "engine",
        "what triggers a preemption in the upstream code of the event's engine, generation, version and policy",
    ),
    Evidence("code_kv", "Boolean", SOURCE, "engine", "that trigger is a failed KV-block allocation (KV space)"),
    Evidence(
        "code_reset",
        "Boolean",
        SOURCE,
        "engine",
        "the engine's code also preempts every running request on reset_prefix_cache (vLLM V1 0.12+)",
    ),
    Evidence("code_engine", "String", SOURCE, "engine", "the engine as the code facts read it, e.g. vLLM V1 0.32.0"),
    Evidence(
        "code_not_gates",
        "String",
        SOURCE,
        "engine",
        "the field guide's gates the engine's upstream code cannot produce, comma-joined",
    ),
    Evidence(
        "up_pressure",
        "String",
        "vllm-log (stats), prometheus (pressure intervals)",
        "engine",
        "a suspected KV pressure interval of the event's engine overlapping its interval (or window)",
    ),
    Evidence(
        "up_failed_allocs",
        "Int64",
        "blocktable (preempt records)",
        "engine",
        "preempt records of the event's engine in its interval (or window) whose allocation failed: needed > free",
    ),
    Evidence(
        "code_priority_path",
        "Int64",
        "vllm-log (lines naming _schedule_priority_preemption)",
        "engine",
        "lines in the event's window (or interval) naming vLLM V0's priority preemption, _schedule_priority_preemption "
        "(a debug print or a traceback frame): which path preempted",
    ),
    Evidence(
        "up_kv_max_before",
        "Float64",
        "vllm-log (stats), prometheus",
        "engine",
        "largest KV cache usage of the event's engine from the first sample up to the end of its interval (or window)",
    ),
]


def section_code(
    events: pl.DataFrame,
    config: pl.DataFrame | None,
    frames: dict[str, pl.DataFrame],
    stats: pl.DataFrame | None,
    before_us: int,
    after_us: int,
    scope: ServerScope | None = None,
) -> pl.DataFrame | None:
    """``events`` needs _i, time, kind, time_precision, interval_start, interval_end, _eng (every event,
    timed or not); ``scope``: a server's event reads its own server's block-table records only."""
    # Each engine's code facts (Engine.bundle_facts: what its configuration in force settles), for its events.
    per_engine = [
        (e.name, e.bundle_facts(engines.config_of(config, e.name) if config is not None else None))
        for e in engines.registered()
        if e.bundle_facts is not None
    ]
    # A count (an interval, or events spread in one: time_precision "interval" or "unplaced") is
    # judged by its interval, every event of it alike; a line by the window around its time.
    counted = (pl.col("kind") == "interval") | (
        pl.col("time_precision").is_in(["interval", "unplaced"]) & pl.col("interval_end").is_not_null()
        if "time_precision" in events.columns
        else pl.lit(False)
    )
    point = pl.col("time").is_not_null() & ~counted
    containers = frames.get("log_containers")
    if containers is not None and containers.height:
        events = with_container(events, containers)
    span = events.select(
        "_i",
        "_eng",
        *[c for c in ("stream", "source", "_ct") if c in events.columns],
        pl.when(point)
        .then(pl.col("time") - pl.duration(microseconds=before_us))
        .otherwise(pl.col("interval_start"))
        .alias("_slo"),
        pl.when(point)
        .then(pl.col("time") + pl.duration(microseconds=after_us))
        .otherwise(pl.coalesce("interval_end", "time"))
        .alias("_shi"),
    )
    out = span.select("_i")
    per = [(kind, facts) for kind, facts in per_engine if facts is not None]
    if per:
        masked = "engine_kind" in events.columns  # an engine's code facts are for its events only
        if masked:
            out = out.join(events.select("_i", "engine_kind"), on="_i", how="left")
        cols: dict[str, list[pl.Expr]] = {}
        for kind, facts in per:
            src = pl.lit(facts["src"])
            esrc = pl.lit(facts["engine_src"], pl.String)
            mine = engines.events_of(kind) if masked else pl.lit(True)
            for x in (
                *cited("code_trigger", pl.lit(facts["trigger"]), src),
                *cited("code_kv", pl.lit(facts["kv"]), src),
                *cited("code_reset", pl.lit(facts["reset"]), pl.lit(facts["reset_src"])),
                *cited("code_engine", pl.lit(facts["label"]), esrc),
                *cited("code_not_gates", pl.lit(facts["not_gates"]), src),
            ):
                name = x.meta.output_name()
                cols.setdefault(name, []).append(pl.when(mine).then(x).alias(name) if masked else x)
        out = out.with_columns([xs[0] if len(xs) == 1 else pl.coalesce(xs).alias(n) for n, xs in cols.items()])
        if masked:
            out = out.drop("engine_kind")
    pressures, kv_befores = [], []
    logs = frames.get("log_streams")
    for part, st, piv in _per_log(span, stats, frames.get("pressure_intervals"), logs, containers):
        part = part.drop("_ct", strict=False)
        pressures.append(pressure_in_spans(*_own_server_pressure(part, piv, st, frames.get("prom_series"))))
        kv_befores.append(_kv_max_before(part, st, frames.get("prom_series")))
    pressure = _stacked(pressures)
    if pressure is not None:
        out = out.join(pressure, on="_i", how="left")
    if scope is None or "source" not in span.columns:
        failed = _failed_allocations(span, frames.get("bt_events"))
    else:
        failed = scope.each(span, "source", frames, lambda e, f: _failed_allocations(e, f.get("bt_events")))
    if failed is not None:
        out = out.join(failed, on="_i", how="left")
    kv_before = _stacked(kv_befores)
    if kv_before is not None:
        out = out.join(kv_before, on="_i", how="left")
    prio = _priority_path(span, frames.get("v0_priority_lines"))
    if prio is not None:
        out = out.join(prio, on="_i", how="left")
    return out if out.width > 1 else None


def _stacked(parts: list[pl.DataFrame | None]) -> pl.DataFrame | None:
    got = [p for p in parts if p is not None and p.height]
    if not got:
        return None
    return got[0] if len(got) == 1 else pl.concat(got, how="diagonal_relaxed")


def _per_log(
    span: pl.DataFrame,
    stats: pl.DataFrame | None,
    piv: pl.DataFrame | None,
    logs: pl.DataFrame | None,
    containers: pl.DataFrame | None = None,
) -> list[tuple[pl.DataFrame, pl.DataFrame | None, pl.DataFrame | None]]:
    """The spans in groups, each with the stats lines and pressure intervals it may read: a log's
    events (a group per log) never read another log's lines or intervals (another log beside theirs
    is another server's, even when theirs has none: stats off); other events (scrapes, records) read
    every one, by place (stats.py lanes). A log of several containers' lines (``containers``,
    model/containers.py; the spans' ``_ct``) is a group per container: a container's events read neither
    the other containers' lines nor the intervals those lines flag."""
    if (
        logs is None
        or logs.height == 0
        or "stream" not in span.columns
        or stats is None
        or "stream" not in stats.columns
    ):
        return [(span, stats, piv)]
    ids = logs.get_column("stream")
    of_log = pl.col("stream").cast(pl.Int32).is_in(ids.implode()).fill_null(False)
    out: list[tuple[pl.DataFrame, pl.DataFrame | None, pl.DataFrame | None]] = []
    rest = span.filter(~of_log)
    if rest.height:
        out.append((rest, stats, piv))
    files = stats.select(pl.col("stream").cast(pl.Int32), pl.col("source").cast(pl.String)).unique().drop_nulls()
    contained = containers is not None and containers.height > 0 and "_ct" in span.columns
    if contained:
        stats = with_container(stats, containers)
    mine = span.filter(of_log)
    if not contained:
        mine = mine.with_columns(_ct=pl.lit(None, pl.String))
    groups = mine.select(pl.col("stream").cast(pl.Int32), "_ct").unique().sort("stream", "_ct", nulls_last=True)
    for sid, ct in groups.iter_rows():
        others = ids.filter(ids != sid).implode()
        st = stats.filter(~pl.col("stream").cast(pl.Int32).is_in(others).fill_null(False))
        if ct is not None:  # the other containers of its own log are other servers too
            st = st.filter(~((pl.col("stream").cast(pl.Int32) == sid) & (pl.col("_ct") != ct)).fill_null(False))
        p = piv
        if piv is not None and piv.height and "evidence" in piv.columns:
            theirs = files.filter(pl.col("stream").is_in(others)).get_column("source").implode()
            first = pl.col("evidence").list.first()
            p = piv.filter(~first.str.replace(r":[0-9-]+$", "").is_in(theirs).fill_null(False))
            if ct is not None:
                # an interval is the container's whose lines flag it (pressure.py: a series per container)
                lines = stats.filter((pl.col("stream").cast(pl.Int32) == sid) & (pl.col("_ct") != ct))
                p = p.filter(~first.is_in(lines.select(src_expr()).to_series().implode()).fill_null(False))
        part = span.filter(pl.col("stream").cast(pl.Int32) == sid)
        if contained:
            part = part.filter(pl.col("_ct").eq_missing(ct))
        out.append((part, st.drop("_ct", strict=False), p))
    return out


def _priority_path(span: pl.DataFrame, lines: pl.DataFrame | None) -> pl.DataFrame | None:
    """Lines naming V0's ``_schedule_priority_preemption`` inside the event's span (V0 has one engine:
    the lines are every span's engine's)."""
    if lines is None or lines.height == 0:
        return None

    out = []
    for eng in span.get_column("_eng").unique(maintain_order=True).to_list():
        rec = lines.select("time", pl.lit(eng).alias("_reng"), src_expr().alias("_src"))
        j = failed_in_spans(span.filter(pl.col("_eng") == eng), rec)
        if j is not None:
            out.append(j)
    if not out:
        return None
    j = pl.concat(out)
    return j.select("_i", *cited("code_priority_path", pl.col("_n").cast(pl.Int64), pl.col("_srcs")))


def _kv_max_before(span: pl.DataFrame, stats: pl.DataFrame | None, prom: pl.DataFrame | None) -> pl.DataFrame | None:
    """Running maximum of the engine's KV usage samples, as of the end of the event's span."""

    parts = []
    if stats is not None and stats.height:
        parts.append(
            stats.select(
                "time",
                _eng(stats),
                "kv_usage",
                src_expr().alias("_src"),
                (pl.col("stream") if "stream" in stats.columns else pl.lit(None)).cast(pl.Int32).alias("stream"),
                pl.col("source").cast(pl.String),
            )
        )
    if prom is not None and prom.height and "kv_usage" in prom.columns:
        parts.append(
            prom.select(
                "time",
                _eng(prom),
                "kv_usage",
                # the gauge's own sample, never the scrape's first line (another metric's)
                src_expr(line="kv_usage_line" if "kv_usage_line" in prom.columns else "line").alias("_src"),
                pl.lit(None, pl.Int32).alias("stream"),  # a scrape is no log stream
                pl.col("source").cast(pl.String),
            )
        )
    if not parts:
        return None
    s = pl.concat(parts).filter(pl.col("time").is_not_null() & pl.col("kv_usage").is_not_null())
    if s.height == 0:
        return None
    # The running max and the line it was reached at, per lane (engine and place).
    left = span.filter(pl.col("_shi").is_not_null())
    if left.height == 0:
        return None
    # Per lane (stats.py lanes): the samples of the event's folder (its server's log and scrapes),
    # else every sample of its engine.
    left, s = lanes(left, s, own_stream=False)
    s = s.sort("time")
    s = s.with_columns(_max=pl.col("kv_usage").cum_max().over("_ek"))
    s = s.with_columns(
        _msrc=pl.when(pl.col("kv_usage") == pl.col("_max")).then(pl.col("_src")).forward_fill().over("_ek")
    )
    j = asof(
        left.select("_i", "_ek", "_shi"),
        s.select("time", "_ek", "_max", "_msrc", pl.col("time").alias("_last")),
        left_on="_shi",
        right_on="time",
        by=["_ek"],
    )
    seen = _observed(left, s)
    j = j.join(seen, on="_i", how="left").with_columns(
        _max=pl.when(pl.col("_seen").fill_null(False)).then(pl.col("_max")),
        _msrc=pl.when(pl.col("_seen").fill_null(False)).then(pl.col("_msrc")),
    )
    return j.select("_i", *cited("up_kv_max_before", pl.col("_max"), pl.col("_msrc")))


# The KV usage samples observe an event's span when none of them is further than this from the next:
# a running engine prints its stats line every few seconds and is scraped every few seconds to a
# minute; a longer gap (a log that ended, a lone reading long after it) is time nobody saw.
OBSERVED_GAP_S = 600


def _observed(left: pl.DataFrame, s: pl.DataFrame) -> pl.DataFrame:
    """Per event (``_i``), ``_seen``: its lane's KV samples observe its whole span [``_slo``, ``_shi``]: a
    sample within OBSERVED_GAP_S of each end, and no instant inside further than that from every sample. A maximum "before the
    event" below the contradiction threshold says the pool was never full only where it was watched: an
    event counted since the engine's start, or placed an hour after the last stats line, is outside
    what the samples saw (its maximum is then not evaluable, never a contradiction)."""
    g = pl.duration(seconds=OBSERVED_GAP_S)
    st = s.select("_ek", "time").sort("_ek", "time")
    ends = st.group_by("_ek").agg(pl.col("time").min().alias("_first"), pl.col("time").max().alias("_lastt"))
    gaps = (
        st.with_columns(_prev=pl.col("time").shift(1).over("_ek"))
        .filter((pl.col("time") - pl.col("_prev")) > g)
        .select("_ek", pl.col("_prev").alias("_g0"), pl.col("time").alias("_g1"))
    )
    ev = left.select("_i", "_ek", pl.coalesce("_slo", "_shi").alias("_lo"), pl.col("_shi").alias("_hi"))
    ev = ev.join(ends, on="_ek", how="left").with_columns(
        _seen=(pl.col("_first") <= pl.col("_lo") + g) & (pl.col("_lastt") >= pl.col("_hi") - g)
    )
    if gaps.height:
        holed = (
            ev.select("_i", "_ek", "_lo", "_hi")
            .join(gaps, on="_ek", how="inner")
            # the unwatched part of a gap: further than OBSERVED_GAP_S from both its samples
            .filter((pl.col("_g1") - g > pl.col("_lo")) & (pl.col("_g0") + g < pl.col("_hi")))
            .select("_i")
            .unique()
        )
        ev = ev.with_columns(_seen=pl.col("_seen") & ~pl.col("_i").is_in(holed.get_column("_i").implode()))
    return ev.select("_i", "_seen")


def _own_server_pressure(
    span: pl.DataFrame, piv: pl.DataFrame | None, stats: pl.DataFrame | None, prom: pl.DataFrame | None
) -> tuple[pl.DataFrame, pl.DataFrame | None]:
    """The spans and pressure intervals keyed by place (``_ek``): a log event whose log has stats lines
    reads that log's intervals, else an event reads the intervals under its server's folder (below),
    else every interval (stats.py lanes, over the place only:
    pressure_in_spans matches the engine). Two servers' logs and scrapes both call their engine "0":
    one server's pressure does not corroborate the other's preemption, and a server whose samples
    show no pressure has none."""
    if piv is None or piv.height == 0 or "source" not in span.columns:
        return span, piv
    # The place of an event's server: the deepest folder above its file that holds log stats lines
    # (a server with a log has its pressure intervals there: scraped intervals that overlap them are
    # dropped, events/pressure.py), else scrapes (a server known by its scrapes alone).
    sp = span.with_columns(_eng0=pl.col("_eng"), _eng=pl.lit("x"), _ek=pl.lit("x|*"))
    # A log event whose own log (stream) has stats lines reads that log's intervals only: two servers'
    # logs in one folder (no folder tells them apart) are two streams.
    by_stream = None
    if stats is not None and stats.height and {"stream", "source"} <= set(stats.columns) and "stream" in sp.columns:
        by_stream = (
            stats.select(pl.col("source").cast(pl.String), pl.col("stream").cast(pl.Int32)).unique().drop_nulls()
        )
        own = by_stream.get_column("stream").unique().implode()
        sp = sp.with_columns(
            _ek=pl.when(pl.col("stream").cast(pl.Int32).is_in(own))
            .then(pl.concat_str([pl.lit("x|s:"), pl.col("stream").cast(pl.String)]))
            .otherwise(pl.col("_ek"))
        )
    sp = sp.drop("stream", strict=False)
    for df in (stats, prom):
        if df is None or df.height == 0 or "source" not in df.columns:
            continue
        samples = df.select(pl.col("source").cast(pl.String)).unique().with_columns(_eng=pl.lit("x"))
        todo = sp.filter(pl.col("_ek") == "x|*")
        if todo.height == 0:
            break
        placed, _ = lanes(todo.drop("_ek"), samples, own_stream=False)
        sp = sp.update(placed.select("_i", "_ek"), on="_i", how="left")
    file = pl.col("evidence").list.first().str.replace(r":[0-9-]+$", "")  # file:line -> file
    p = piv.with_row_index("_p").with_columns(_file=file)
    # each interval under every folder above its file (the key an event of that folder chose), and "*"
    p = (
        pl.concat(
            [
                *(
                    p.with_columns(_ek=pl.concat_str([pl.lit(f"x|d{k}:"), _prefix(k, "_file")]))
                    for k in range(1, MAX_DEPTH + 1)
                ),
                p.with_columns(_ek=pl.lit("x|*")),
                *(
                    [
                        p.join(by_stream, left_on="_file", right_on="source", how="inner")
                        .with_columns(_ek=pl.concat_str([pl.lit("x|s:"), pl.col("stream").cast(pl.String)]))
                        .drop("stream")
                    ]
                    if by_stream is not None
                    else []
                ),
            ],
            how="vertical",
        )
        .filter(pl.col("_ek").is_not_null())
        .drop("_file")
    )
    return sp.with_columns(_eng=pl.col("_eng0")).drop("_eng0"), p


def _eng(df: pl.DataFrame) -> pl.Expr:

    return (engine_key("engine") if "engine" in df.columns else pl.lit("0")).alias("_eng")


def _failed_allocations(span: pl.DataFrame, bt: pl.DataFrame | None) -> pl.DataFrame | None:
    """Preempt records of the event's engine inside its span that show a failed allocation."""
    if bt is None or bt.height == 0 or not {"action", "blocks_needed", "pool_free_blocks"} <= set(bt.columns):
        return None

    rec = bt.filter(
        (pl.col("action") == "preempt")
        & pl.col("time").is_not_null()
        & (
            pl.col("blocks_needed")
            + (pl.col("watermark_blocks").fill_null(0) if "watermark_blocks" in bt.columns else pl.lit(0))
            > pl.col("pool_free_blocks")
        ).fill_null(False)
    ).select("time", _eng(bt).alias("_reng"), src_expr().alias("_src"))
    if rec.height == 0:
        return None
    # Counted per span by binary search, never a cross join of spans and records (issue 36).
    j = failed_in_spans(span, rec)
    if j is None:
        return None
    src = (
        pl.when(pl.col("_n") > 4)
        .then(pl.concat_str([pl.col("_srcs"), pl.lit(" (+"), (pl.col("_n") - 4).cast(pl.String), pl.lit(" more)")]))
        .otherwise(pl.col("_srcs"))
    )
    return j.select("_i", *cited("up_failed_allocs", pl.col("_n").cast(pl.Int64), src))
