"""The report's plot data: every series reduced to what a browser can draw.

Nothing here plots every raw sample. A time series longer than
``MAX_POINTS`` is reduced to a min/max envelope per time bucket (peaks stay
visible: a KV cache at 100 % for one sample is still at 100 % in the plot);
more than ``MAX_MARKERS`` timed events become counts per time bin per gate.

Times are strings of the wall-clock time in the output zone
(``YYYY-MM-DD HH:MM:SS.fff``): plotly's date axes have no zone, so the axis
is labelled with it instead.

Frames returned here (one row per plotted point):

- :func:`envelope`: ``time`` (String), ``value`` (Float64);
- :func:`markers`: ``MARKER_COLUMNS``;
- :func:`binned`: ``time`` (String, bin start), ``gate`` (String),
  ``estimated`` (Boolean), ``count`` (UInt32).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import polars as pl

from ..clock.timebase import local_wall

if TYPE_CHECKING:
    from ..model.result import Analysis

MAX_POINTS = 2000  # per plotted series, after the envelope
MAX_MARKERS = 3000  # individual event markers; beyond, counts per bin
MAX_BINS = 1500  # bins of the event-count bars
MARKER_SLOTS = 150  # markers of one gate row that fit side by side across the plot without touching
# Bin widths tried in order (seconds) for the event-count bars.
BIN_WIDTHS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400)

UNDETERMINED = "undetermined"
# Kinds whose time is an estimate within an interval (drawn distinctly: open symbols, hatched bars).
ESTIMATED_KINDS = ("reconstructed", "interval")

MARKER_COLUMNS = [
    "event_id",
    "time",
    "kind",
    "gate",
    "sub_kind",
    "rule",
    "confidence",
    "request_id",
    "engine",
    "source",
    "line",
    "raw",
    "interval_start",
    "interval_end",
]


def wall(col: str, tz: str) -> pl.Expr:
    """A UTC datetime column as wall-clock text in ``tz`` (what the plot's x axis shows)."""

    return local_wall(pl.col(col), tz).dt.strftime("%Y-%m-%d %H:%M:%S%.3f").alias(col)


def events_with_verdicts(analysis: Analysis) -> pl.DataFrame:
    """Events with gate, sub_kind, rule and confidence (``undetermined`` when rules did not run)."""
    ev = analysis.events.select(
        "event_id",
        "time",
        "time_precision",
        "interval_start",
        "interval_end",
        "kind",
        "request_id",
        "engine",
        "source",
        "line",
        "raw",
    )
    v = analysis.verdicts
    if v is not None and v.height and ev.height:
        ev = ev.join(
            v.select("event_id", "gate", "sub_kind", "rule", "confidence"),
            on="event_id",
            how="left",
            maintain_order="left",
        )
    else:
        ev = ev.with_columns(pl.lit(None, pl.String).alias(c) for c in ("gate", "sub_kind", "rule", "confidence"))
    return ev.with_columns(pl.col("gate").fill_null(UNDETERMINED))


def envelope(df: pl.DataFrame, value: str, tz: str, max_points: int = MAX_POINTS) -> pl.DataFrame:
    """``time``/``value`` of one series, at most ``max_points`` rows (min and max per bucket)."""
    d = (
        df.select(pl.col("time"), pl.col(value).cast(pl.Float64).alias("value"))
        .filter(pl.col("time").is_not_null() & pl.col("value").is_not_null() & pl.col("value").is_finite())
        .sort("time", maintain_order=True)
    )
    if d.height > max_points:
        t0, t1 = d.get_column("time").min(), d.get_column("time").max()
        buckets = max(1, max_points // 2)
        span_us = int((t1 - t0).total_seconds() * 1e6)
        width = max(1, span_us // buckets + 1)
        b = (pl.col("time") - pl.lit(t0)).dt.total_microseconds() // width
        g = (
            d.with_columns(_b=b)
            .group_by("_b")
            .agg(
                pl.col("time").get(pl.col("value").arg_min()).alias("t_lo"),
                pl.col("value").min().alias("v_lo"),
                pl.col("time").get(pl.col("value").arg_max()).alias("t_hi"),
                pl.col("value").max().alias("v_hi"),
            )
        )
        d = (
            pl.concat(
                [
                    g.select(pl.col("t_lo").alias("time"), pl.col("v_lo").alias("value")),
                    g.select(pl.col("t_hi").alias("time"), pl.col("v_hi").alias("value")),
                ]
            )
            .unique(maintain_order=False)
            .sort("time", "value")
        )
    return d.with_columns(wall("time", tz))


@dataclass
class Series:
    """One line of one panel."""

    panel: str
    name: str  # legend entry (log text: escaped by the figure)
    group: str  # legend group
    points: pl.DataFrame  # time (String), value (Float64)
    dash: str = "solid"
    color: str | None = None


@dataclass
class PlotData:
    tz: str
    series: list[Series] = field(default_factory=list)
    markers: pl.DataFrame | None = None  # MARKER_COLUMNS, times as wall text
    bins: pl.DataFrame | None = None  # time, gate, estimated, count
    bin_seconds: int | None = None
    untimed: int = 0
    # Events counted over an interval and not placed in time (a counter between two readings, or since
    # the engine's start): one band per (start, end, gate), with its count; (start, end, gate, count).
    counted: list[tuple[str, str, str, int]] = field(default_factory=list)
    pressure: list[tuple[str, str, str]] = field(default_factory=list)  # (start, end, label)
    kv_ceiling: float | None = None
    events: int = 0

    def panels(self) -> list[str]:
        seen: list[str] = []
        for s in self.series:
            if s.panel not in seen:
                seen.append(s.panel)
        return seen


def _keyed(df: pl.DataFrame, keys: list[str]) -> list[tuple[tuple, pl.DataFrame]]:
    if df.height == 0:
        return []
    keys = [k for k in keys if k in df.columns]
    if not keys:
        return [((), df)]
    return sorted(
        ((tuple(k), part) for k, part in df.partition_by(keys, as_dict=True, maintain_order=True).items()),
        key=lambda kv: tuple("" if x is None else str(x) for x in kv[0]),
    )


def plot_data(
    analysis: Analysis, *, max_points: int = MAX_POINTS, max_markers: int = MAX_MARKERS, bin_overlaps: bool = True
) -> PlotData:
    tz = analysis.tz
    out = PlotData(tz=tz, kv_ceiling=analysis.options.kv_ceiling)

    # The log's stats lines, per stream and engine.
    stats = analysis.stats
    if stats.height:
        many_streams = stats.get_column("stream").n_unique() > 1
        for (stream, engine), part in _keyed(stats, ["stream", "engine"]):
            who = f"engine {engine if engine is not None else '?'}"
            if many_streams:
                who = f"{analysis.bundle.stream_name(stream)} {who}"
            for col, panel, label in (
                ("kv_usage", "kv", "KV cache"),
                ("running", "requests", "running"),
                ("waiting", "requests", "waiting"),
                ("swapped", "requests", "swapped"),
            ):
                if part.get_column(col).drop_nulls().len():
                    out.series.append(
                        Series(panel, f"{label} ({who})", f"log {who}", envelope(part, col, tz, max_points))
                    )

    # Prometheus gauges, dashed.
    prom = analysis.frames.get("prom_series")
    if prom is not None and prom.height:
        for (scope, engine), part in _keyed(prom, ["scope", "engine"]):
            who = f"{scope or 'metrics'} engine {engine if engine is not None else '?'}"
            for col, panel, label in (
                ("kv_usage", "kv", "KV cache"),
                ("running", "requests", "running"),
                ("waiting", "requests", "waiting"),
                ("swapped", "requests", "swapped"),
            ):
                if col in part.columns and part.get_column(col).drop_nulls().len():
                    out.series.append(
                        Series(
                            panel,
                            f"{label} (/metrics {who})",
                            f"metrics {who}",
                            envelope(part, col, tz, max_points),
                            dash="dash",
                        )
                    )

    # dmon, per GPU.
    dmon = analysis.frames.get("dmon")
    if dmon is not None and dmon.height:
        many = dmon.get_column("source").n_unique() > 1 if "source" in dmon.columns else False
        for (source, gpu), part in _keyed(dmon, ["source", "gpu"]):
            who = f"GPU {gpu}" + (f" ({source})" if many else "")
            if "fb_mb" in part.columns and part.get_column("fb_mb").drop_nulls().len():
                out.series.append(Series("gpu_mem", f"FB used ({who})", who, envelope(part, "fb_mb", tz, max_points)))
            if "sm_pct" in part.columns and part.get_column("sm_pct").drop_nulls().len():
                out.series.append(Series("gpu_sm", f"SM % ({who})", who, envelope(part, "sm_pct", tz, max_points)))

    # Block records: free blocks and the largest contiguous free run.
    steps = analysis.frames.get("bt_steps")
    if steps is not None and steps.height:
        for (engine,), part in _keyed(steps, ["engine"]):
            who = f"engine {engine if engine is not None else '?'}"
            for col, label, dash in (
                ("free_blocks", "free blocks", "solid"),
                ("largest_free_run", "largest free run", "dot"),
            ):
                if part.get_column(col).drop_nulls().len():
                    out.series.append(
                        Series(
                            "blocks",
                            f"{label} ({who})",
                            f"blocks {who}",
                            envelope(part, col, tz, max_points),
                            dash=dash,
                        )
                    )
    else:
        hooks = analysis.frames.get("hook_steps")
        if hooks is not None and hooks.height and hooks.get_column("free_blocks").drop_nulls().len():
            out.series.append(
                Series("blocks", "free blocks (hook lines)", "blocks", envelope(hooks, "free_blocks", tz, max_points))
            )

    # Pressure intervals (shaded on the KV panel).
    piv = analysis.frames.get("pressure_intervals")
    if piv is not None and piv.height:
        p = piv.head(200).with_columns(wall("start", tz), wall("end", tz))
        for r in p.iter_rows(named=True):
            if r["start"] and r["end"]:
                out.pressure.append((r["start"], r["end"], f"pressure interval, engine {r['engine']} ({r['series']})"))

    # Events: markers, or counts per bin when there are too many to draw one by one.
    ev = events_with_verdicts(analysis)
    out.events = ev.height
    timed = ev.filter(pl.col("time").is_not_null())
    out.untimed = ev.height - timed.height
    spans = (
        ev.filter(
            pl.col("time").is_null() & pl.col("interval_start").is_not_null() & pl.col("interval_end").is_not_null()
        )
        .group_by("interval_start", "interval_end", "gate")
        .agg(pl.len().alias("count"))
        .sort("interval_start", "interval_end", "gate")
        .head(200)
        .with_columns(wall("interval_start", tz), wall("interval_end", tz))
    )
    out.counted = [
        (r["interval_start"], r["interval_end"], r["gate"] or UNDETERMINED, int(r["count"]))
        for r in spans.iter_rows(named=True)
    ]
    if timed.height <= max_markers and not (bin_overlaps and _overplotted(timed)):
        out.markers = timed.select(MARKER_COLUMNS).with_columns(
            wall("time", tz), wall("interval_start", tz), wall("interval_end", tz)
        )
    else:
        t0, t1 = timed.get_column("time").min(), timed.get_column("time").max()
        span = max(1.0, (t1 - t0).total_seconds())
        width = next((w for w in BIN_WIDTHS if span / w <= MAX_BINS), BIN_WIDTHS[-1])
        out.bin_seconds = width
        out.bins = (
            timed.with_columns(
                pl.col("time").dt.truncate(f"{width}s").alias("time"),
                pl.col("kind").is_in(ESTIMATED_KINDS).alias("estimated"),
            )
            .group_by("time", "gate", "estimated")
            .agg(pl.len().alias("count"))
            .sort("time", "gate", "estimated")
            .with_columns(wall("time", tz))
        )
    return out


def _overplotted(timed: pl.DataFrame) -> bool:
    """Would two markers of one gate land on each other? The plot's width holds MARKER_SLOTS markers
    side by side; more than one event of a gate in one slot hides the others (160 events drawn as
    13 markers): then the events are counted per time bin instead."""
    if timed.height < 2:
        return False
    t0, t1 = timed.get_column("time").min(), timed.get_column("time").max()
    span = (t1 - t0).total_seconds()  # type: ignore[operator]  # polars scalars are typed as every literal
    slot_us = max(1, int(span * 1e6 / MARKER_SLOTS))
    most = (
        timed.select(
            pl.col("gate").fill_null("undetermined"),
            ((pl.col("time") - t0).dt.total_microseconds() // slot_us).alias("_slot"),
        )
        .group_by("gate", "_slot")
        .len()
        .get_column("len")
        .max()
    )
    return bool(most is not None and most > 1)  # type: ignore[operator]
