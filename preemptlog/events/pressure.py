"""What the log can count, and where preemption pressure is visible when it cannot.

Two questions, answered separately from the counted events (docs/prometheus.md):

1. :func:`log_capability`: can this log count preemptions at all? V0 logs
   sample 1 in 50 (facts page section 2a); V1 logs before 0.11.1 have no
   preemption field; V1 0.11.1-0.34.0 (Python frontend) have a ``Preemptions: N`` field in the
   code that stock builds never print (facts page section 3b item 7). A
   ``Preemptions:`` field seen in the log means a build with the fix.

2. :func:`find_intervals`: *suspected pressure intervals* in a stats series
   (the log's stats lines, or the gauges of Prometheus scrapes). A sample is
   flagged when

   - ``kv``: the KV cache usage is at the ceiling (default 95 %) while
     requests wait (``waiting > 0``), or
   - ``shuffle``: running fell and waiting rose since the previous sample of
     the same engine while the KV usage of either sample was at the ceiling
     (what a V1 preemption looks like from outside: the victim goes back to
     the head of the waiting queue).

   Consecutive flagged samples of one engine form an interval; a single
   unflagged sample that still has waiting requests between two flagged ones
   is bridged; a silence longer than ``max_gap_s`` splits, and so does a server
   start in the log (``starts``: a restart's two runs). Waiting with low
   KV usage is queueing (max_num_seqs, admission), not KV pressure, and is
   never flagged. Intervals are evidence, never added to a count.

Frame schema of :func:`find_intervals`: ``PRESSURE_SCHEMA``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import polars as pl

from .. import engines
from ..clock.timebase import iso
from ..engines import LogCapability as LogCapability  # re-exported: moved to engines/common.py
from ..model.containers import stream_lane, with_container
from ..model.frames import PolarsType, provenance_expr
from ..model.places import folders, shared_depth

if TYPE_CHECKING:
    from ..model.result import AnalysisView

DEFAULT_CEILING = 95.0
MAX_GAP_S = 120.0

PRESSURE_SCHEMA = {
    "series": "String",  # "log" (stats lines) | "prometheus" (scraped gauges)
    "engine": "String",
    "start": "Datetime(time_unit='us', time_zone='UTC')",  # first flagged sample
    "end": "Datetime(time_unit='us', time_zone='UTC')",  # last flagged sample
    "since": "Datetime(time_unit='us', time_zone='UTC')",  # the sample before: pressure began after it
    "samples": "UInt32",  # samples inside the interval (flagged and bridged)
    "peak_kv_usage": "Float64",  # percent
    "max_waiting": "Int64",
    "min_running": "Int64",
    "max_running": "Int64",
    "signals": "List(String)",  # kv | shuffle
    "evidence": "List(String)",  # file:line of the flagged samples
}


# --------------------------------------------------------------------------
# 1. What the log can count: the engine whose lines the log holds answers (Engine.log_capability;
# vLLM's: engines/vllm/capability.py)


def log_capability(a: AnalysisView) -> LogCapability:
    has_log = bool(a.records.height)
    if not has_log:
        return LogCapability(has_log=False)
    own = engines.only_log(a.records)  # a log of another engine's lines only (SGLang's prints every retraction)
    eng = own or engines.default()
    return eng.log_capability(engines.own_view(a, eng.name))


# --------------------------------------------------------------------------
# 2. Suspected pressure intervals


def running_words(max_running: int | None, min_running: int | None) -> str:
    """``running 31->29``: an interval's running count, from its largest to its smallest; "" when no
    sample of it read one (scrapes without ``vllm:num_requests_running``: a KV gauge and a waiting
    gauge flag a sample on their own), never ``None->None``."""
    if max_running is None or min_running is None:
        return ""
    return f"running {max_running}->{min_running}"


def _schema() -> pl.Schema:
    dt = pl.Datetime("us", "UTC")
    cols: dict[str, PolarsType] = {
        "series": pl.String,
        "engine": pl.String,
        "start": dt,
        "end": dt,
        "since": dt,
        "samples": pl.UInt32,
        "peak_kv_usage": pl.Float64,
        "max_waiting": pl.Int64,
        "min_running": pl.Int64,
        "max_running": pl.Int64,
        "signals": pl.List(pl.String),
        "evidence": pl.List(pl.String),
    }
    return pl.Schema(cols)


def find_intervals(
    stats: pl.DataFrame | None,
    prom_series: pl.DataFrame | None = None,
    *,
    ceiling: float = DEFAULT_CEILING,
    max_gap_s: float = MAX_GAP_S,
    starts: pl.DataFrame | None = None,
    containers: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Suspected pressure intervals in the log's stats and in scraped gauges (``PRESSURE_SCHEMA``).

    ``stats`` needs time, engine, running, waiting, kv_usage, source, line
    (and stream, seq when present); ``prom_series`` the same minus stream/seq,
    plus scope. ``starts`` (servers.starts: stream, time): a log's server starts; the samples of
    one stream on either side of a start are two server runs, never one interval (nor compared).
    ``containers`` (joiner/common.py log_containers): in a log of several containers' lines, each
    container's samples are a series of their own, as another log's are (two servers both say engine "0").
    """
    parts = []
    if stats is not None and stats.height:
        stats = with_container(stats, containers)
        grp = (
            pl.concat_str([stream_lane(), pl.lit("|"), pl.col("engine")])
            if "stream" in stats.columns
            else pl.col("engine")
        )
        if starts is not None and starts.height and "stream" in stats.columns:
            runs = (
                starts.filter(pl.col("time").is_not_null())
                .select(pl.col("stream").cast(stats.schema["stream"]), "time")
                .sort("stream", "time")
                .with_columns(_srv=pl.int_range(pl.len()).over("stream"))
                .sort("time")
            )
            stats = (
                stats.filter(pl.col("time").is_not_null())
                .sort("time")
                .join_asof(runs, on="time", by="stream", strategy="backward", check_sortedness=False)
            )
            grp = pl.concat_str([grp, pl.lit("|"), pl.col("_srv").fill_null(-1).cast(pl.String)])
        order = "seq" if "seq" in stats.columns else "line"
        parts.append(
            stats.select(
                pl.lit("log").alias("series"),
                grp.alias("_grp"),
                "engine",
                "time",
                pl.col(order).cast(pl.Int64).alias("_order"),
                pl.col("running").cast(pl.Float64),
                pl.col("waiting").cast(pl.Float64),
                pl.col("kv_usage").cast(pl.Float64),
                "source",
                pl.col("line").cast(pl.UInt32),
            )
        )
    if prom_series is not None and prom_series.height:
        ps = prom_series.filter(pl.col("kv_usage").is_not_null() | pl.col("waiting").is_not_null())
        if ps.height:
            parts.append(
                ps.select(
                    pl.lit("prometheus").alias("series"),
                    pl.concat_str(
                        [pl.col("scope"), pl.lit("|"), pl.col("engine"), pl.lit("|"), pl.col("model_name")]
                    ).alias("_grp"),
                    "engine",
                    "time",
                    pl.col("line").cast(pl.Int64).alias("_order"),
                    pl.col("running").cast(pl.Float64),
                    pl.col("waiting").cast(pl.Float64),
                    pl.col("kv_usage").cast(pl.Float64),
                    "source",
                    # a scrape holds each gauge on its own line: cite the KV gauge that flags the sample
                    # (else the waiting gauge), never the scrape's first line (another metric's)
                    pl.coalesce([c for c in ("kv_usage_line", "waiting_line") if c in ps.columns] + ["line"])
                    .cast(pl.UInt32)
                    .alias("line"),
                )
            )
    if not parts:
        return pl.DataFrame(schema=_schema())
    s = pl.concat(parts, how="vertical").filter(pl.col("time").is_not_null())
    if s.height == 0:
        return pl.DataFrame(schema=_schema())
    g = ["series", "_grp"]
    s = s.sort([*g, "time", "_order"])

    def prev(c: str) -> pl.Expr:
        return pl.col(c).shift(1).over(g)

    waiting = pl.col("waiting").fill_null(0) > 0
    kv_hot = (pl.col("kv_usage") >= ceiling).fill_null(False)
    prev_hot = (prev("kv_usage") >= ceiling).fill_null(False)
    s = s.with_columns(
        _kv=kv_hot & waiting,
        _shuffle=(
            (pl.col("running") < prev("running")) & (pl.col("waiting") > prev("waiting")) & (kv_hot | prev_hot)
        ).fill_null(False),
        _gap=(pl.col("time") - prev("time")).dt.total_microseconds() / 1e6,
        _since=prev("time"),
    )
    s = s.with_columns(_flag=pl.col("_kv") | pl.col("_shuffle"))
    # Bridge one unflagged sample with waiting requests between two flagged ones.
    s = s.with_columns(
        _bridge=~pl.col("_flag")
        & waiting
        & pl.col("_flag").shift(1).over(g).fill_null(False)
        & pl.col("_flag").shift(-1).over(g).fill_null(False)
    )
    s = s.with_columns(_in=pl.col("_flag") | pl.col("_bridge"))
    new_run = pl.col("_in") & (
        ~pl.col("_in").shift(1).over(g).fill_null(False) | (pl.col("_gap") > max_gap_s).fill_null(False)
    )
    s = s.with_columns(_run=new_run.cast(pl.Int32).cum_sum().over(g))
    iv = s.filter(pl.col("_in"))
    if iv.height == 0:
        return pl.DataFrame(schema=_schema())
    where = provenance_expr()
    out = (
        iv.group_by([*g, "_run"], maintain_order=True)
        .agg(
            pl.col("engine").first(),
            pl.col("time").filter(pl.col("_flag")).min().alias("start"),
            pl.col("time").filter(pl.col("_flag")).max().alias("end"),
            pl.col("_since").first().alias("since"),
            pl.len().cast(pl.UInt32).alias("samples"),
            pl.col("kv_usage").max().alias("peak_kv_usage"),
            # strict=False: a +Inf / NaN gauge from a /metrics scrape is no count (null), not a crash
            pl.col("waiting").max().round(0).cast(pl.Int64, strict=False).alias("max_waiting"),
            pl.col("running").min().round(0).cast(pl.Int64, strict=False).alias("min_running"),
            pl.col("running").max().round(0).cast(pl.Int64, strict=False).alias("max_running"),
            pl.col("_kv").any().alias("_any_kv"),
            pl.col("_shuffle").any().alias("_any_shuffle"),
            where.filter(pl.col("_flag")).alias("evidence"),
        )
        .with_columns(
            signals=pl.concat_list(
                [
                    pl.when(pl.col("_any_kv")).then(pl.lit("kv")),
                    pl.when(pl.col("_any_shuffle")).then(pl.lit("shuffle")),
                ]
            ).list.drop_nulls()
        )
    )
    out = out.select(list(_schema())).cast(_schema())
    # Scraped gauges only add what the log's stats lines do not already show (same engine, overlapping
    # time, same server: not when the two lie in two folders side by side, two servers' files).
    log_iv = out.filter(pl.col("series") == "log")
    prom_iv = out.filter(pl.col("series") == "prometheus")
    if log_iv.height and prom_iv.height:
        out = out.with_columns(_br=_branches(out))
        log_iv = out.filter(pl.col("series") == "log")
        prom_iv = out.filter(pl.col("series") == "prometheus")
        lo = log_iv.select(
            "engine",
            pl.col("since").fill_null(pl.col("start")).alias("_a"),
            pl.col("end").alias("_b"),
            pl.col("_br").alias("_lbr"),
        )
        overlap = (
            prom_iv.with_row_index("_i")
            .join(lo, on="engine", how="inner")
            .filter(
                (pl.col("start") <= pl.col("_b"))
                & (pl.col("end") >= pl.col("_a"))
                & (pl.col("_br").is_null() | pl.col("_lbr").is_null() | (pl.col("_br") == pl.col("_lbr")))
            )
            .get_column("_i")
            .unique()
        )
        prom_iv = prom_iv.with_row_index("_i").filter(~pl.col("_i").is_in(overlap.implode())).drop("_i")
        out = pl.concat([log_iv, prom_iv]).drop("_br")
    return out.sort("start", "series", "engine")


def _branches(iv: pl.DataFrame) -> pl.Series:
    """Per interval, the folder below the one all intervals' files share that its first evidence file
    lies in (``a`` for ``incident/a/logs/vllm.log:3`` when another lies in ``incident/b``); null for a
    file directly in the shared folder (no side to tell)."""
    files = iv.get_column("evidence").list.first().str.replace(r":[0-9-]+$", "")
    parts = [folders(f) for f in files.to_list()]
    root = shared_depth(parts)
    return pl.Series("_br", [p[root] if len(p) > root else None for p in parts], dtype=pl.String)


def describe(row: dict[str, Any], tz: str) -> str:
    """One human line for an interval row (times in ``tz``)."""

    sig = {"kv": "KV >= ceiling with waiting requests", "shuffle": "running fell while waiting rose at the ceiling"}
    what = "; ".join(sig[s] for s in row["signals"])
    ev = row["evidence"]
    lines = ", ".join(ev[:3]) + (f" (+{len(ev) - 3} more)" if len(ev) > 3 else "")
    return (
        f"engine {row['engine']} {iso(row['start'], tz)} to {iso(row['end'], tz)} ({row['series']}): "
        f"peak KV {row['peak_kv_usage']:.1f}%, up to {row['max_waiting']} waiting, running "
        f"{row['max_running']}->{row['min_running']}; {what}; {lines}"
    )
