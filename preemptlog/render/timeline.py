"""The terminal timeline: preemptions per time bucket by gate, and a KV-usage sparkline below.

Printed by ``preemptlog analyze`` on stderr after the summary, only when
stderr is a terminal (``console.is_terminal``; tests pass a console with
``force_terminal=True``) and without ``--quiet``. Time runs left to right,
one column per bucket (the narrowest of 1 s, 2 s, 5 s, ... 1 week that fits the
incident's span in the terminal); the sparkline rows share the columns of the histogram. Each gate
has its own glyph as well as its own colour, so the chart reads with
NO_COLOR too. Every string is printed as ``rich.text.Text`` (never markup).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import polars as pl

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
HEIGHT = 8  # rows of the histogram
GUTTER = 8  # label column width
MAX_COLUMNS = 120
MAX_ENGINES = 4  # sparkline rows; more engines share one row (their maximum)


def print_timeline(analysis: Analysis, console: Console) -> None:
    """Print the timeline, or nothing when the console is not a terminal or there is nothing to draw."""
    if not console.is_terminal:
        return
    from ..outputs.safe import unicode_ok

    plain = not unicode_ok()
    for line in timeline_lines(analysis, width=console.width):
        if plain:  # the C locale: ASCII glyphs (one for one, so the styles stay in place)
            from ..outputs.safe import ascii_text

            line.plain = ascii_text(line.plain)
        console.print(line, soft_wrap=True, highlight=False)


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


def timeline_lines(analysis: Analysis, *, width: int = 100) -> list:
    """The timeline as rich Text lines (empty when there is no timed event and no KV series)."""
    from rich.text import Text

    from ..clock.timebase import zone_info

    tz = analysis.tz
    ev = analysis.events.select("event_id", "time")
    if analysis.verdicts is not None and analysis.verdicts.height and ev.height:
        ev = ev.join(analysis.verdicts.select("event_id", "gate"), on="event_id", how="left")
    else:
        ev = ev.with_columns(gate=pl.lit(None, pl.String))
    ev = ev.with_columns(pl.col("gate").fill_null("undetermined"))
    untimed = ev.filter(pl.col("time").is_null()).height
    ev = ev.filter(pl.col("time").is_not_null())
    kv = _kv_frame(analysis)
    if ev.height == 0:
        return []
    t0 = ev.get_column("time").min()
    t1 = ev.get_column("time").max()
    # The columns cover the events' span (the KV sparkline shares them).
    columns = max(10, min(MAX_COLUMNS, width - GUTTER - 14))
    seconds = _bucket((t1 - t0).total_seconds() + 1, columns)
    every = f"{seconds}s"
    start_utc = pl.Series([t0]).dt.truncate(every).item()
    start = start_utc.astimezone(zone_info(tz))
    n = int((t1 - start_utc).total_seconds() // seconds) + 1
    col = ((pl.col("time") - pl.lit(start_utc)).dt.total_seconds() // seconds).cast(pl.Int64).alias("_c")
    counts = ev.with_columns(col).group_by("_c", "gate").len()
    grid: list[dict[str, int]] = [dict() for _ in range(n)]
    for c, gate, k in counts.iter_rows():
        if 0 <= c < n:
            grid[c][gate] = grid[c].get(gate, 0) + k
    totals = [sum(g.values()) for g in grid]
    peak = max(totals) if totals else 0
    order = [g for g in GATES] + sorted({g for cell in grid for g in cell} - set(GATES))

    lines = []
    unit = _unit(seconds)
    lines.append(Text(f"Timeline: preemptions per {unit} by gate (tallest column {peak})", style="bold"))
    # Cells of each column, bottom to top: gates stacked in GATES order, heights by cumulative rounding.
    stacks: list[list[str]] = []
    for cell, total in zip(grid, totals, strict=False):
        stack: list[str] = []
        if total:
            present = [(g, cell[g]) for g in order if cell.get(g)]
            # Every gate present in the column gets at least one cell (a rare gate stays visible).
            height = min(HEIGHT, max(len(present), round(HEIGHT * total / peak), 1))
            stack = _allocate(present, height)
        stacks.append(stack)
    cw = max(1, min(3, columns // n))  # characters per column: few columns are drawn wider
    for row in range(HEIGHT - 1, -1, -1):
        label = str(peak) if row == HEIGHT - 1 else ""
        line = _gutter(label)
        for stack in stacks:
            if row < len(stack):
                glyph, style = GLYPHS.get(stack[row], ("#", "white"))
                line.append(glyph * cw, style=style)
            else:
                line.append(" " * cw)
        lines.append(line)
    lines.append(Text(f"{'0':>{GUTTER - 2}} └" + "─" * (n * cw), style="dim"))

    # KV usage sparkline(s) on the same columns.
    ceiling = analysis.options.kv_ceiling if analysis.options.kv_ceiling is not None else 95.0
    for name, values in _spark_rows(kv, start_utc, seconds, n):
        line = _gutter(name)
        for v in values:
            if v is None:
                line.append(" " * cw)
            else:
                ch = SPARK[min(len(SPARK) - 1, max(0, int(v / 100 * len(SPARK))))]
                line.append(ch * cw, style="bold red" if v >= ceiling else "cyan")
        present = [v for v in values if v is not None]
        if present:
            line.append(f"  max {max(present):.1f}%", style="dim")
        lines.append(line)

    # Time axis: first and last column, and one in the middle when there is room.
    multi_day = start.date() != (start + timedelta(seconds=seconds * (n - 1))).date()
    first = _label(start, seconds, multi_day)
    last_t = start + timedelta(seconds=seconds * (n - 1))
    last = _label(last_t, seconds, multi_day)
    w = n * cw
    axis = [" "] * max(w, len(first))
    axis[: len(first)] = list(first)
    if w >= len(first) + len(last) + 2 and n > 1:
        at = (n - 1) * cw  # the last column's first character
        a = min(at, w - len(last))
        axis[a : a + len(last)] = list(last)
        mid = (n // 2) * cw
        mid_label = _label(start + timedelta(seconds=seconds * (n // 2)), seconds, multi_day)
        if mid > len(first) + 1 and mid + len(mid_label) < a - 1:
            axis[mid : mid + len(mid_label)] = list(mid_label)
    lines.append(Text(" " * GUTTER + "".join(axis).rstrip() + f"  ({tz})", style="dim"))

    # The legend: one entry per gate drawn, on as many lines as the width needs (never wider).
    by_gate = {g: sum(cell.get(g, 0) for cell in grid) for g in order}
    items: list[Text] = []
    for g in order:
        if by_gate.get(g):
            glyph, style = GLYPHS.get(g, ("#", "white"))
            item = Text(glyph, style=style)
            item.append(f" {g} {by_gate[g]}")
            items.append(item)
    if untimed:
        items.append(Text(f"({untimed} event(s) without a time not shown)", style="dim"))
    legend = Text(" " * GUTTER)
    for item in items:
        if len(legend) > GUTTER and len(legend) + 3 + len(item) > width:
            lines.append(legend)
            legend = Text(" " * GUTTER)
        if len(legend) > GUTTER:
            legend.append("   ")
        legend.append_text(item)
    lines.append(legend)
    return lines


def _allocate(present: list[tuple[str, int]], height: int) -> list[str]:
    """Cells (bottom to top) for the gates of one column: one each, the rest by largest remainder."""
    if len(present) > height:
        present = sorted(present, key=lambda gk: -gk[1])[:height]
        present = [gk for gk in sorted(present, key=lambda gk: GATES.index(gk[0]) if gk[0] in GATES else 99)]
    spare = height - len(present)
    total = sum(k for _, k in present)
    shares = [(spare * k / total) for _, k in present]
    cells = [1 + int(x) for x in shares]
    rest = height - sum(cells)
    for i in sorted(range(len(present)), key=lambda i: -(shares[i] - int(shares[i])))[:rest]:
        cells[i] += 1
    out: list[str] = []
    for (g, _), c in zip(present, cells, strict=False):
        out.extend([g] * c)
    return out


def _gutter(label: str) -> object:
    from rich.text import Text

    line = Text()
    line.append(f"{label:>{GUTTER - 2}} │", style="dim")
    return line


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
        name = "KV %" if len(engines) == 1 else f"KV e{eng}"[: GUTTER - 2]
        rows.append((name, values))
    return rows
