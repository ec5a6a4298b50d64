"""The terminal timeline: one line per lane (each gate's preemptions, the KV cache usage, the waiting
requests) on one time axis.

Printed by ``preemptlog analyze`` after the summary, only on a terminal (``console.is_terminal``;
tests pass a console with ``force_terminal=True``) and without ``--quiet``; paged with the table
when together they are taller than the screen. Time runs left to right, one column per bucket (the
narrowest of 1 s, 2 s, 5 s, ... 1 week that fits the span of the events placed in time and of the
suspected pressure intervals); each lane's glyphs ``▁``..``█`` are scaled to its own busiest column,
and the lane's end says its total and peak (the KV lane its maximum, the headline's peak). Each gate
keeps its colour. Counts with no place in time are said, never drawn in one column. Every string is
printed as ``rich.text.Text`` (never markup).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import polars as pl

from ..clock.timebase import zone_info
from ..outputs.safe import ascii_text, unicode_ok

if TYPE_CHECKING:
    from rich.console import Console

    from ..model.result import Analysis

GATES = ("G1-kv-space", "G2-batch-variance", "G3-queue-overflow", "G4-prefix-conflict", "undetermined")
GLYPHS = {
    "G1-kv-space": ("█", "red"),
    "G2-batch-variance": ("▓", "yellow"),
    "G3-queue-overflow": ("▒", "magenta"),
    "G4-prefix-conflict": ("░", "blue"),
    "undetermined": ("╳", "white"),  # a glyph of its own: a grey '?' reads as an encoding failure
}
SPARK = "▁▂▃▄▅▆▇█"
# Bucket widths in seconds: the timeline bins to the incident's span (seconds for a 27 s burst).
BUCKET_SECONDS = (
    1,
    2,
    5,
    10,
    15,
    30,
    60,
    120,
    300,
    600,
    900,
    1800,
    3600,
    7200,
    10800,
    21600,
    43200,
    86400,
    172800,
    604800,
)
GUTTER = 8  # label column width of the KV lanes' names
MAX_COLUMNS = 120
MAX_ENGINES = 4  # sparkline rows; more engines share one row (their maximum)


def print_timeline(analysis: Analysis, console: Console) -> None:
    """Print the timeline, or nothing when the console is not a terminal or there is nothing to draw."""
    for line in terminal_lines(analysis, console):
        console.print(line, soft_wrap=True, highlight=False)


def terminal_lines(analysis: Analysis, console: Console) -> list:
    """The timeline's lines for ``console`` (ASCII glyphs under a locale without them), or none when
    the console is not a terminal."""
    if not console.is_terminal:
        return []

    plain = not unicode_ok()
    lines = timeline_lines(analysis, width=console.width)
    if plain:  # the C locale: ASCII glyphs (one for one, so the styles stay in place)
        for line in lines:
            line.plain = ascii_text(line.plain)
    return lines


def _bucket(span_s: float, columns: int) -> int:
    for b in BUCKET_SECONDS:
        if span_s / b < columns:
            return b
    return BUCKET_SECONDS[-1]


def _unit(seconds: int) -> str:
    if seconds % 86400 == 0:
        n, u = seconds // 86400, "day"
    elif seconds % 3600 == 0:
        n, u = seconds // 3600, "hour"
    elif seconds % 60 == 0:
        n, u = seconds // 60, "minute"
    else:
        n, u = seconds, "second"
    return u if n == 1 else f"{n} {u}s"


def _label(t: datetime, seconds: int, multi_day: bool) -> str:
    if multi_day:
        return t.strftime("%m-%d %H:%M")
    return t.strftime("%H:%M:%S" if seconds < 60 else "%H:%M")


LABEL = 13  # lane label column width ("undetermined" and a space)
MIN_SHOWN = 1  # a column with any event shows at least the lowest glyph


def timeline_lines(analysis: Analysis, *, width: int = 100) -> list:
    """The timeline as rich Text lines, one per lane (empty when nothing is placed in time and no KV
    series shows pressure).

    Lanes: one per gate of the events placed in time (each column's glyph ``▁``..``█`` scaled to the
    lane's own busiest column; a column with any event shows at least ``▁``), the KV cache usage (the
    maximum of each column, bold red at the ceiling) and, when requests waited, the waiting count.
    Columns cover the events placed in time and the suspected pressure intervals (so the KV lane's
    maximum is the headline's peak). Events counted without a place in time (a V0 warning's
    ``total_num_cumulative_preemption`` with no earlier line, one /metrics reading since the engine
    started) are not drawn at a time they did not happen: one line says how many."""
    from rich.text import Text

    tz = analysis.tz
    ev = analysis.events
    cols = [c for c in ("event_id", "time", "time_precision", "interval_start") if c in ev.columns]
    ev = ev.select(cols)
    if "time_precision" not in ev.columns:
        ev = ev.with_columns(time_precision=pl.lit(None, pl.String))
    if "interval_start" not in ev.columns:
        ev = ev.with_columns(interval_start=pl.lit(None, pl.Datetime("us", "UTC")))
    if analysis.verdicts is not None and analysis.verdicts.height and ev.height:
        ev = ev.join(analysis.verdicts.select("event_id", "gate"), on="event_id", how="left")
    else:
        ev = ev.with_columns(gate=pl.lit(None, pl.String))
    ev = ev.with_columns(pl.col("gate").fill_null("undetermined"))
    # placed: a time of its own, or spread over the interval its count covers; not placed: no time, or
    # a count whose interval has no start (all of them would be drawn in one second)
    unplaced_mask = pl.col("time").is_null() | (
        (pl.col("time_precision") == "interval") & pl.col("interval_start").is_null()
    ).fill_null(False)
    not_placed = ev.filter(unplaced_mask)
    ev = ev.filter(~unplaced_mask)
    kv = _kv_frame(analysis)
    waiting = _waiting_frame(analysis)
    piv = analysis.frames.get("pressure_intervals")
    bounds = []
    if ev.height:
        bounds += [ev.get_column("time").min(), ev.get_column("time").max()]
    if piv is not None and piv.height:
        near = piv
        if bounds:  # the pressure around the events (not a span days away that would squash them)
            lo, hi = bounds
            slack = max(timedelta(minutes=2), hi - lo)
            near = piv.filter((pl.col("end") >= lo - slack) & (pl.col("start") <= hi + slack))
        if near.height:
            bounds += [near.get_column("start").min(), near.get_column("end").max()]
    if not bounds:
        return []
    t0, t1 = min(bounds), max(bounds)  # type: ignore[type-var]  # datetimes (polars scalars are typed as every literal)
    columns = max(10, min(MAX_COLUMNS, width - LABEL - 24))
    seconds = _bucket((t1 - t0).total_seconds() + 1, columns)
    start_utc = pl.Series([t0]).dt.truncate(f"{seconds}s").item()
    start = start_utc.astimezone(zone_info(tz))
    n = int((t1 - start_utc).total_seconds() // seconds) + 1
    cw = max(1, min(3, columns // n))  # characters per column: few columns are drawn wider
    col = ((pl.col("time") - pl.lit(start_utc)).dt.total_seconds() // seconds).cast(pl.Int64).alias("_c")
    grid: dict[str, list[float]] = {}
    if ev.height:
        for c, gate, k in ev.with_columns(col).group_by("_c", "gate").len().iter_rows():
            if 0 <= c < n:
                grid.setdefault(gate, [0.0] * n)[c] += k
    order = [g for g in GATES if g in grid] + sorted(set(grid) - set(GATES))
    unit = _unit(seconds)
    lines = [Text(f"Timeline, one column per {unit} ({tz}); each lane scaled to its own peak", style="bold")]
    for g in order:
        values = grid[g]
        peak = max(values)
        glyph_style = GLYPHS.get(g, ("#", "white"))[1]
        line = _label_cell(_lane_name(g, width))
        for v in values:
            if not v:
                line.append(" " * cw)
                continue
            lvl = max(MIN_SHOWN, round(v / peak * (len(SPARK) - 1)))
            line.append(SPARK[lvl] * cw, style=glyph_style)
        line.append(f"  {int(sum(values))}, up to {int(peak)} per {unit}", style="dim")
        lines.append(line)
    ceiling = analysis.options.kv_ceiling if analysis.options.kv_ceiling is not None else 95.0
    for name, values in _spark_rows(kv, start_utc, seconds, n):
        line = _label_cell(name)
        for v in values:
            if v is None:
                line.append(" " * cw)
            else:
                ch = SPARK[min(len(SPARK) - 1, max(0, int(v / 100 * len(SPARK))))]
                line.append(ch * cw, style="bold red" if v >= ceiling else "cyan")
        present = [v for v in values if v is not None]
        if present:
            line.append(f"  max {max(present):g} %", style="dim")
        lines.append(line)
    wrow = _lane_values(waiting, start_utc, seconds, n)
    if wrow is not None and any(wrow):
        peak_w = max(v for v in wrow if v is not None)
        line = _label_cell("waiting")
        for v in wrow:
            if v is None or not v:
                line.append(" " * cw)
            else:
                line.append(SPARK[max(MIN_SHOWN, round(v / peak_w * (len(SPARK) - 1)))] * cw, style="magenta")
        line.append(f"  up to {int(peak_w)}", style="dim")
        lines.append(line)
    # Time axis: the first and last column, and one in the middle when there is room.
    multi_day = start.date() != (start + timedelta(seconds=seconds * (n - 1))).date()
    first = _label(start, seconds, multi_day)
    last = _label(start + timedelta(seconds=seconds * (n - 1)), seconds, multi_day)
    w = n * cw
    axis = [" "] * max(w, len(first))
    axis[: len(first)] = list(first)
    if w >= len(first) + len(last) + 2 and n > 1:
        a = min((n - 1) * cw, w - len(last))
        axis[a : a + len(last)] = list(last)
        mid = (n // 2) * cw
        mid_label = _label(start + timedelta(seconds=seconds * (n // 2)), seconds, multi_day)
        if mid > len(first) + 1 and mid + len(mid_label) < a - 1:
            axis[mid : mid + len(mid_label)] = list(mid_label)
    lines.append(Text(" " * LABEL + "".join(axis).rstrip(), style="dim"))
    if not_placed.height:
        lines.append(Text(" " * LABEL + _not_placed_words(not_placed, more=bool(ev.height)), style="dim"))
    return lines


def _lane_name(gate: str, width: int) -> str:
    """The gate's id, its first word only where the line would be too narrow (``G1-kv``)."""
    short = {
        "G1-kv-space": "G1-kv",
        "G2-batch-variance": "G2-batch",
        "G3-queue-overflow": "G3-queue",
        "G4-prefix-conflict": "G4-prefix",
    }
    name = gate if len(gate) < LABEL else short.get(gate, gate[: LABEL - 1])
    return name if width >= 60 else short.get(gate, name)


def _label_cell(name: str) -> object:
    from rich.text import Text

    line = Text()
    line.append(f"{name[: LABEL - 1]:<{LABEL}}", style="dim")
    return line


def _not_placed_words(not_placed: pl.DataFrame, *, more: bool = True) -> str:
    return f"{not_placed.height}{' more' if more else ''} counted without a place in time (not drawn)"


def _waiting_frame(analysis: Analysis) -> pl.DataFrame:
    """time, engine, waiting of the log's stats lines (else the /metrics gauges)."""
    st = analysis.stats
    if st.height and "waiting" in st.columns and st.get_column("waiting").drop_nulls().len():
        return st.select("time", pl.col("engine").cast(pl.String), pl.col("waiting").cast(pl.Float64)).drop_nulls()
    prom = analysis.frames.get("prom_series")
    if prom is not None and prom.height and "waiting" in prom.columns and prom.get_column("waiting").drop_nulls().len():
        return prom.select("time", pl.col("engine").cast(pl.String), pl.col("waiting").cast(pl.Float64)).drop_nulls()
    return pl.DataFrame(schema={"time": pl.Datetime("us", "UTC"), "engine": pl.String, "waiting": pl.Float64})


def _lane_values(df: pl.DataFrame, start, seconds: int, n: int) -> list[float | None] | None:
    """The maximum of each column of a (time, engine, value) frame over every engine, or None."""
    if df.height == 0:
        return None
    val = next(c for c in df.columns if c not in ("time", "engine"))
    col = ((pl.col("time") - pl.lit(start)).dt.total_seconds() // seconds).cast(pl.Int64).alias("_c")
    agg = df.with_columns(col).filter((pl.col("_c") >= 0) & (pl.col("_c") < n)).group_by("_c").agg(pl.col(val).max())
    out: list[float | None] = [None] * n
    for c, v in agg.iter_rows():
        out[c] = v
    return out


def _kv_frame(analysis: Analysis) -> pl.DataFrame:
    """time, engine, kv_usage from the log's stats lines, else from /metrics gauges."""
    empty = pl.DataFrame(schema={"time": pl.Datetime("us", "UTC"), "engine": pl.String, "kv_usage": pl.Float64})
    st = analysis.stats
    if st.height and st.get_column("kv_usage").drop_nulls().len():
        return st.select("time", pl.col("engine").cast(pl.String), "kv_usage").drop_nulls(["time", "kv_usage"])
    prom = analysis.frames.get("prom_series")
    if prom is not None and prom.height and prom.get_column("kv_usage").drop_nulls().len():
        return prom.select("time", pl.col("engine").cast(pl.String), "kv_usage").drop_nulls(["time", "kv_usage"])
    return empty


def _spark_rows(kv: pl.DataFrame, start, seconds: int, n: int) -> list[tuple[str, list[float | None]]]:
    if kv.height == 0:
        return []
    engines = sorted({e for e in kv.get_column("engine").to_list()}, key=lambda e: (e is None, str(e)))
    if len(engines) > MAX_ENGINES:
        kv = kv.with_columns(engine=pl.lit("all"))
        engines = ["all"]
    col = ((pl.col("time") - pl.lit(start)).dt.total_seconds() // seconds).cast(pl.Int64).alias("_c")
    agg = (
        kv.with_columns(col)
        .filter((pl.col("_c") >= 0) & (pl.col("_c") < n))
        .group_by("engine", "_c")
        .agg(pl.col("kv_usage").max())
    )
    rows = []
    for eng in engines:
        values: list[float | None] = [None] * n
        for _, c, v in agg.filter(pl.col("engine").eq_missing(eng)).iter_rows():
            values[c] = v
        name = "KV %" if len(engines) == 1 else f"KV e{eng}"[: LABEL - 1]
        rows.append((name, values))
    return rows
