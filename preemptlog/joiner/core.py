"""Putting the sections together: the evidence frame, block-table preempt records as events, skew notes."""

from __future__ import annotations

from collections.abc import Callable

import polars as pl

from .. import engines
from ..model.containers import with_container
from .code import section_code
from .common import DEFAULT_AFTER, DEFAULT_BEFORE, DEFAULT_LOOKBACK, SERVER_FRAMES, Section, ServerScope, engine_key, us
from .config import section_config
from .dmon import section_dmon
from .kv import section_kv
from .pool import section_batch_len, section_pool
from .prom import section_prom
from .request import decision_steps, section_request
from .reset import section_reset
from .sched import section_sched
from .schema import polars_schema
from .stats import section_stats

# The events of one counted interval (a V1 ``Preemptions: N`` line, a V0 counter jump, a
# Prometheus increase) share one set of evidence: they differ only in their spread position.
INTERVAL_KEY = ["_eng", "kind", "interval_start", "interval_end", "stream", "seq"]


def compute(
    events: pl.DataFrame,
    frames: dict[str, pl.DataFrame],
    stats: pl.DataFrame | None = None,
    config: pl.DataFrame | None = None,
    *,
    before: float = DEFAULT_BEFORE,
    after: float = DEFAULT_AFTER,
    lookback_steps: int = DEFAULT_LOOKBACK,
) -> pl.DataFrame:
    """The evidence frame for ``events`` (needs event_id, time; uses request_id, stream, seq, kind).

    An event whose time is a spread position in a counted interval (``time_precision``
    ``interval``: kinds ``reconstructed`` and ``interval``) is joined by its interval, not by a
    window around that position: as of the interval's end, windows over ``[interval_start,
    interval_end]`` (the end's whole second when it is stamped to the second; ``before`` ahead of the
    end when the start is unknown). Every event of one interval gets the same evidence.
    ``frames["server_runs"]`` (vllm/runs.py) scopes the configuration to each event's server run.
    """
    schema = polars_schema()
    before_us, after_us = us(before), us(after)
    if before_us < 0 or after_us < 0 or lookback_steps < 0:
        raise ValueError("before, after and lookback_steps must not be negative")
    if events.height == 0:
        return pl.DataFrame(schema=schema)
    base = events.with_row_index("_i")
    for c, dt in (
        ("request_id", pl.String),
        ("source", pl.String),
        ("stream", pl.Int32),
        ("seq", pl.UInt32),
        ("kind", pl.String),
        ("engine", pl.String),
        ("time_precision", pl.String),
        ("interval_start", pl.Datetime("us", "UTC")),
        ("interval_end", pl.Datetime("us", "UTC")),
    ):
        if c not in base.columns:
            base = base.with_columns(pl.lit(None, dt).alias(c))
    # A bundle of servers in folders of their own: a server's event reads its own scheduler's records.
    scope = ServerScope.of(base, stats, frames.get("log_streams"))

    def scoped(section: Section) -> Callable[[pl.DataFrame], pl.DataFrame | None]:
        def run(e: pl.DataFrame) -> pl.DataFrame | None:
            return section(e, frames) if scope is None else scope.each(e, "_file", frames, section)

        return run

    ev, members = _joined_events(base, frames, before_us, after_us, scoped)
    out = base.select("_i", "event_id")
    if ev.height:
        sections = [
            scoped(lambda e, f: section_sched(e, f, lookback_steps, before_us))(ev),
            scoped(lambda e, f: section_pool(e, f, lookback_steps, before_us))(ev),
            scoped(lambda e, f: section_batch_len(e, f, before_us))(ev),
            scoped(lambda e, f: section_request(e, f, before_us, after_us))(ev),
            scoped(section_kv)(ev),
            section_stats(
                ev,
                stats,
                before_us,
                after_us,
                log_streams=frames.get("log_streams"),
                containers=frames.get("log_containers"),
            ),
            section_prom(ev, frames, before_us, after_us),
            section_dmon(ev, frames, before_us, after_us),
            _own_config(ev, base, config, frames.get("server_runs"), scope, frames.get("log_containers")),
        ]
        # A reset of the engine's prefix cache at the event (every path to it: log line, KV events, records).
        sections.append(scoped(lambda e, f: section_reset(e, members, base, f))(ev))
        for sec in sections:
            if sec is not None:
                out = out.join(sec, on="_i", how="left", maintain_order="left")
        out = _shared_by_interval(out, members)
    # What the engine's own code can do, for every event (timed or not: a count not placed in
    # time still has an engine and an interval).
    code = section_code(base.with_columns(_eng=engine_key("engine")), config, frames, stats, before_us, after_us, scope)
    if code is not None:
        out = out.join(code, on="_i", how="left", maintain_order="left")
    untimed = base.filter(pl.col("time").is_null()).select("_i")
    if untimed.height and config is not None and config.height:
        out = _bundle_config(out, untimed, base, config)
    # An engine's own evidence (SGLang's: the event's own line, not a time window): untimed events
    # (SGLang 0.1-0.2 print no time) get it too.
    # In a log of several containers' lines, each container's events read the configuration of its own lines.
    for eng in engines.registered():
        if eng.evidence is not None:
            own = engines.config_of(config, eng.name) if config is not None else None
            parts = _per_container(base.select("_i", "stream", "seq"), own, frames.get("log_containers"))
            secs = [s for s in (eng.evidence.section(part, frames, cfg) for part, cfg in parts) if s is not None]
            if secs:
                sec = secs[0] if len(secs) == 1 else pl.concat(secs, how="diagonal_relaxed")
                out = out.join(sec, on="_i", how="left", maintain_order="left")
    # lookback_min_free_blocks: hook steps first, else block-table steps.
    h = [c for c in ("_h_lbmin", "_b_lbmin") if c in out.columns]
    if h:
        out = out.with_columns(
            lookback_min_free_blocks=pl.coalesce(h),
            lookback_min_free_blocks_src=pl.coalesce([f"{c}_src" for c in h]),
        )
        if "lookback_steps" not in out.columns and "_b_lbn" in out.columns:
            out = out.with_columns(
                lookback_steps=pl.col("_b_lbn"),
                lookback_steps_src=pl.when(pl.col("_b_lbn").is_not_null()).then(pl.col("_b_lbmin_src")),
            )
    cols = []
    for name, dtype in schema.items():
        if name in out.columns:
            cols.append(pl.col(name).cast(dtype))
        else:
            cols.append(pl.lit(None, dtype).alias(name))
    return out.sort("_i").select(cols)


def _per_container(
    ev: pl.DataFrame, config: pl.DataFrame | None, containers: pl.DataFrame | None
) -> list[tuple[pl.DataFrame, pl.DataFrame | None]]:
    """The events in groups by container (model/containers.py), each with the configuration rows it may
    read: none that another container's line states. One group, the configuration whole, where no log
    holds several containers' lines."""
    if containers is None or containers.height == 0 or ev.height == 0:
        return [(ev, config)]
    keyed = with_container(ev, containers)
    cfg = with_container(config, containers, by="line") if config is not None and "source" in config.columns else None
    out: list[tuple[pl.DataFrame, pl.DataFrame | None]] = []
    for ct in keyed.get_column("_ct").unique(maintain_order=True).to_list():
        part = keyed.filter(pl.col("_ct").eq_missing(pl.lit(ct, pl.String))).drop("_ct")
        if cfg is None:
            out.append((part, config))
            continue
        mine = cfg if ct is None else cfg.filter(pl.col("_ct").is_null() | (pl.col("_ct") == ct))
        out.append((part, mine.drop("_ct")))
    return out


def _own_config(
    ev: pl.DataFrame,
    base: pl.DataFrame,
    config: pl.DataFrame | None,
    runs: pl.DataFrame | None,
    scope: ServerScope | None,
    containers: pl.DataFrame | None = None,
) -> pl.DataFrame | None:
    """:func:`_config_section` per server (a bundle of servers in folders of their own, ServerScope): a
    server's event reads the configuration its own folder's files state, and that of files under no
    server's folder (the bundle's), never another server's. Likewise per container of a log of several
    containers' lines (``containers``, model/containers.py): a container's event never reads a value
    another container's line states (its server runs are its own too: vllm/runs.py)."""
    contained = containers is not None and containers.height > 0
    if (scope is None and not contained) or config is None or config.height == 0 or "source" not in config.columns:
        return _config_section(ev, base, config, runs)
    cfg = config.with_columns((scope.server("source") if scope else pl.lit("", pl.String)).alias("_srv"))
    cfg = with_container(cfg, containers if contained else None, by="line")
    ev = with_container(ev, containers if contained else None)
    keys = ev.select((scope.server("_file") if scope else pl.lit("", pl.String)).alias("_srv"), "_ct")
    parts = []
    for s, ct in keys.unique(maintain_order=True).iter_rows():
        mine = cfg if scope is None else cfg.filter(pl.col("source").is_null() | pl.col("_srv").is_in([s, ""]))
        if ct is not None:
            mine = mine.filter(pl.col("_ct").is_null() | (pl.col("_ct") == ct))
        which = (keys.get_column("_srv") == s) & keys.get_column("_ct").eq_missing(pl.lit(ct, pl.String))
        got = _config_section(ev.filter(which), base, mine.drop("_srv", "_ct"), runs)
        if got is not None:
            parts.append(got)
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else pl.concat(parts, how="diagonal_relaxed")


def _config_section(
    ev: pl.DataFrame, base: pl.DataFrame, config: pl.DataFrame | None, runs: pl.DataFrame | None = None
) -> pl.DataFrame | None:
    """The configuration section (config.section_config) of each engine's events from that engine's own
    configuration rows (engines.config_of): in a bundle of two engines an event never reads the other
    engine's value of a key both have (max_model_len, kv_cache_tokens...)."""
    if config is None or "engine_kind" not in base.columns:
        return section_config(ev, config, runs)
    kinds = base.select("_i", engines.kind_expr().alias("_ek"))
    ev = ev.drop("_ek", strict=False).join(kinds, on="_i", how="left", maintain_order="left")
    parts = []
    for name in ev.get_column("_ek").unique(maintain_order=True).to_list():
        sec = section_config(ev.filter(pl.col("_ek") == name).drop("_ek"), engines.config_of(config, name), runs)
        if sec is not None:
            parts.append(sec)
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else pl.concat(parts, how="diagonal_relaxed")


def _bundle_config(out: pl.DataFrame, untimed: pl.DataFrame, base: pl.DataFrame, config: pl.DataFrame) -> pl.DataFrame:
    """Events without a time take the configuration in force at the end of the bundle (their engine's)."""
    dt = pl.Datetime("us", "UTC")
    last = config.get_column("time").max() if "time" in config.columns else None
    sec = _config_section(untimed.with_columns(_t=pl.lit(last, dt)), base, config)
    if sec is None or sec.height == 0:
        return out
    cols = [c for c in sec.columns if c != "_i" and c in out.columns]
    if not cols:
        return out.join(sec, on="_i", how="left", maintain_order="left")
    return out.update(sec.select("_i", *cols), on="_i", how="left")


def _joined_events(
    base: pl.DataFrame,
    frames: dict[str, pl.DataFrame],
    before_us: int,
    after_us: int,
    scoped: Callable[[Section], Callable[[pl.DataFrame], pl.DataFrame | None]],
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The timed events as the sections read them (``_t``, the window ``[_lo, _hi]``, ``_eng``,
    ``_iend``, the decision ``_dt``/``_ds`` of the request's preempt record), one representative per
    counted interval; and each event's representative (``_i``, ``_rep``)."""
    spread = (pl.col("time_precision") == "interval") & pl.col("interval_end").is_not_null()
    end = pl.col("interval_end")
    end_ceil = pl.when(end.dt.truncate("1s") == end).then(end + pl.duration(microseconds=999_999)).otherwise(end)
    t = pl.when(spread).then(end).otherwise(pl.col("time"))
    lo = pl.when(spread).then(pl.coalesce("interval_start", end - pl.duration(microseconds=before_us)))
    ev = (
        base.filter(pl.col("time").is_not_null())
        .select(
            "_i",
            t.alias("time"),
            "request_id",
            pl.col("source").alias("_file"),  # its file (stats.py lanes); not "source": sections join that name
            "stream",
            "seq",
            "kind",
            "interval_start",
            "interval_end",
            engine_key("engine").alias("_eng"),
            pl.when(spread).then(end).alias("_iend"),
            t.alias("_t"),
            lo.otherwise(pl.col("time") - pl.duration(microseconds=before_us)).alias("_lo"),
            pl.when(spread).then(end_ceil).otherwise(pl.col("time") + pl.duration(microseconds=after_us)).alias("_hi"),
        )
        .sort("_t")
    )
    rep = pl.when(pl.col("_iend").is_not_null()).then(pl.col("_i").first().over(INTERVAL_KEY))
    ev = ev.with_columns(_rep=pl.coalesce(rep, pl.col("_i")))
    members = ev.select("_i", "_rep")
    ev = ev.filter(pl.col("_rep") == pl.col("_i")).drop("_rep")
    dec = scoped(lambda e, f: decision_steps(e, f, before_us, after_us))(ev)
    if dec is None:
        return ev.with_columns(_dt=pl.lit(None, pl.Datetime("us", "UTC")), _ds=pl.lit(None, pl.Int64)), members
    return ev.join(dec, on="_i", how="left", maintain_order="left"), members


def _shared_by_interval(out: pl.DataFrame, members: pl.DataFrame) -> pl.DataFrame:
    """Every event of a counted interval gets its representative's evidence."""
    if members.filter(pl.col("_rep") != pl.col("_i")).height == 0:
        return out
    vals = out.drop("event_id").rename({"_i": "_rep"})
    shared = members.join(vals, on="_rep", how="inner").drop("_rep")
    return out.select("_i", "event_id").join(shared, on="_i", how="left", maintain_order="left")


def skew_notes(events: pl.DataFrame, evidence: pl.DataFrame) -> list[str]:
    """Clock skew estimates between sources that see the same moments (reported, never applied)."""
    notes = []
    if evidence.height and "bt_preempt_offset_s" in evidence.columns:
        pairs = evidence.join(events.select("event_id", "kind", "time_precision"), on="event_id", how="left").filter(
            pl.col("bt_preempt_offset_s").is_not_null() & pl.col("kind").is_in(["logged", "marker"])
        )
        if pairs.height:
            # A line stamped to the whole second happened on average 0.5 s after its stamp.
            corrected = pl.col("bt_preempt_offset_s") - pl.when(pl.col("time_precision") == "1s").then(0.5).otherwise(
                0.0
            )
            med = pairs.select(corrected.median()).item()
            if med is not None:
                notes.append(
                    f"clock skew estimate: block-table preempt records are {med:+.3f} s from the log's preemption "
                    f"lines for the same request (median of {pairs.height} pair(s)); not applied. If the block-table "
                    f"clock is off, add --offset blocktable={-med:+.3f}s (lines stamped to the second are taken as "
                    "0.5 s late; a PREEMPTED line printed 1-3 steps after the decision makes the estimate read low)."
                )
    return notes


def evidence(
    events: pl.DataFrame,
    frames: dict[str, pl.DataFrame],
    stats: pl.DataFrame | None,
    config: pl.DataFrame | None,
    *,
    before: float,
    after: float,
    lookback_steps: int,
) -> tuple[pl.DataFrame, list[str]]:
    """The evidence stage: (the evidence frame, clock skew notes).

    Which block-table ``preempt`` records are events (kind ``record``) and which are
    evidence was decided by reconcile.records_vs_counts; records that are evidence
    are matched to the log event of the same request (``bt_preempt_offset_s``).
    """
    frame = compute(events, frames, stats, config, before=before, after=after, lookback_steps=lookback_steps)
    return frame, skew_notes(events, frame) + scope_notes(events, frames, stats)


def scope_notes(events: pl.DataFrame, frames: dict[str, pl.DataFrame], stats: pl.DataFrame | None) -> list[str]:
    """Where the bundle keeps servers in folders of their own (ServerScope), the files of scheduler
    records (SERVER_FRAMES) under none of those folders: they explain no server's events."""
    scope = ServerScope.of(events, stats, frames.get("log_streams")) if events.height else None
    if scope is None or "" in scope.folders:  # a server log at the top: every other file is its server's
        return []
    loose: set[str] = set()
    for name in SERVER_FRAMES:
        df = frames.get(name)
        if isinstance(df, pl.DataFrame) and df.height and "source" in df.columns:
            files = df.select(pl.col("source").cast(pl.String)).unique().drop_nulls()
            loose |= set(files.filter(files.select(scope.server("source")).to_series() == "").to_series())
    if not loose:
        return []
    named = sorted(loose)
    shown = ", ".join(named[:3]) + (f" (+{len(named) - 3} more)" if len(named) > 3 else "")
    servers = sorted(f for f in scope.folders if f)
    where = ", ".join(servers[:4]) + (f" (+{len(servers) - 4} more)" if len(servers) > 4 else "")
    return [
        f"{shown}: scheduler records under none of the {len(scope.folders)} server folders ({where}): no one "
        "server's, so they explain no server's preemptions (one server's records say nothing of another's "
        "pool); put such a file beside its server's log"
    ]
