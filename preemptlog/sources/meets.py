"""Does a source meet the vLLM logs in time? A warning for each file that does not.

A dmon capture, a /metrics scrape file, block-table records or KV cache events taken on another
clock (a zone mismatch: ``nvidia-smi dmon -o DT`` in local time beside a log read in UTC), or from
another day, explain none of the log's preemptions: their rows fall in no event's window, and their
own counts (a counter's increases, preempt records) lie where the log has no line. Left unsaid,
that reads as "no GPU evidence" or as a count at a time the log cannot explain. So, after the
``--offset`` of every file is applied (the pipeline calls :meth:`MeetsLog.combine` on the moved
output), every file whose rows lie more than :data:`MEET_S` from the logs' span (the span of the
vLLM log lines on the common clock, ``TimeContext.reference``) gets a warning that names both spans
and, when a shift by whole quarter hours (a zone) puts it on the log, the ``--offset`` that would.

:data:`MEET_S` is the bundle's one definition of meeting in time (two logs more than 10 minutes
apart are not one incident: render/each.py ``MEET_S``, docs/inputs.md).
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import polars as pl

from ..clock.timebase import iso

if TYPE_CHECKING:
    from .registry import SourceOutput, TimeContext

MEET_S = 600.0
QUARTER_S = 900  # zones differ by whole quarter hours
ZONE_MAX_S = 14 * 3600  # the largest zone offset


def file_spans(out: SourceOutput) -> dict[str, tuple[datetime, datetime]]:
    """The first and last time each file states (``source``; every time-typed column of a source
    output's frames and event frames: a sample's time, a counter's ``_created``, an interval's ends),
    untimed rows left out. A counter's ``_created`` is its engine's start: a scrape taken an hour
    after the log ended still meets the log when the engine it counts started inside it."""
    parts = []
    for df in [*out.frames.values(), *out.events]:
        if df is None or df.height == 0 or "source" not in df.columns:
            continue
        for c, t in df.schema.items():
            if isinstance(t, pl.Datetime):
                parts.append(
                    df.select(pl.col("source").cast(pl.String), pl.col(c).dt.convert_time_zone("UTC").alias("time"))
                )
    if not parts:
        return {}
    rows = pl.concat(parts).filter(pl.col("time").is_not_null() & pl.col("source").is_not_null())
    agg = rows.group_by("source", maintain_order=True).agg(
        pl.col("time").min().alias("lo"), pl.col("time").max().alias("hi")
    )
    return {s: (lo, hi) for s, lo, hi in agg.iter_rows()}


def duration_words(seconds: float) -> str:
    """``2 h``, ``1 h 30 min``, ``45 min``, ``3 days``: how far apart, for a sentence."""
    s = abs(int(round(seconds)))
    if s >= 2 * 86400:
        return f"{s / 86400:.0f} days"
    h, m = divmod(s // 60, 60)
    if h and m:
        return f"{h} h {m} min"
    if h:
        return f"{h} h"
    return f"{max(m, 1)} min"


def _offset_text(seconds: int) -> str:
    """``-2h``, ``+90m``, ``-45m``: a value ``--offset`` reads."""
    sign = "-" if seconds < 0 else "+"
    s = abs(seconds)
    return f"{sign}{s // 3600}h" if s % 3600 == 0 else f"{sign}{s // 60}m"


def zone_shift(lo: datetime, hi: datetime, ref: tuple[datetime, datetime]) -> int | None:
    """The shift (seconds, a whole number of quarter hours, at most a zone's 14 h) that puts the span
    ``lo..hi`` on the logs' span: the file's start moved to the quarter hour nearest the logs' start,
    when the moved span then overlaps them. None when no such shift exists (another day, a clock off
    by something else than a zone)."""
    k = round((ref[0] - lo).total_seconds() / QUARTER_S) * QUARTER_S
    if k == 0 or abs(k) > ZONE_MAX_S:
        return None
    d = timedelta(seconds=k)
    return k if lo + d <= ref[1] and hi + d >= ref[0] else None


def _tz_words(source: str, source_wall: bool, ctx: TimeContext) -> str:
    """The ``--tz`` part of the hint: --tz moves every time read without an offset, so it puts a file on
    the log only when one side is such a wall time and the other is not (an epoch, a stated offset);
    two wall times move together, and the hint is ``--offset`` alone."""
    if ctx.reference_wall and not source_wall:
        return f" (or, if the log is the one read in the wrong zone, {ctx.tz} now, --tz with the log's zone)"
    if source_wall and not ctx.reference_wall:
        return (
            f" (or, since the log's times state their offset and {source}'s do not, {ctx.tz} now, --tz with "
            f"{source}'s zone)"
        )
    return ""


def not_meeting(
    out: SourceOutput, ctx: TimeContext | None, what: str, kind: str, why: str, wall: Collection[str] = ()
) -> list[str]:
    """A warning per file of ``out`` whose rows lie more than MEET_S from every vLLM log's span
    (``ctx.spans``, else ``ctx.reference``), said against the nearest one; none when the bundle has no timed log line. ``what`` names the rows (``dmon
    samples``), ``kind`` the source kind (for ``--offset``), ``why`` what follows for the analysis;
    ``wall`` the files whose times are wall times read in --tz (the hint names --tz where it helps)."""
    if ctx is None or ctx.reference is None:
        return []
    r0, r1 = ctx.reference
    if r0 is None or r1 is None:
        return []
    meet = timedelta(seconds=MEET_S)
    # each log's own span: the hull of logs that ran on different days holds days none of them ran on
    spans = [(a, b) for a, b in (ctx.spans or ((r0, r1),)) if a is not None and b is not None] or [(r0, r1)]
    out_warnings = []
    for source, (lo, hi) in file_spans(out).items():
        if any(hi >= a - meet and lo <= b + meet for a, b in spans):
            continue
        # said against the log nearest to it
        r0, r1 = min(spans, key=lambda s: (lo - s[1]) if lo > s[1] else (s[0] - hi))
        after = lo > r1
        gap = (lo - r1) if after else (r0 - hi)
        shift = zone_shift(lo, hi, (r0, r1))
        hint = (
            f"; if its clock is {duration_words(shift)} {'ahead' if shift < 0 else 'behind'} (a zone mismatch), "
            f"--offset {source}={_offset_text(shift)} puts it on the log{_tz_words(source, source in wall, ctx)}"
            if shift is not None
            else f"; if its clock is off, --offset {source}=DURATION (or --offset {kind}=DURATION) moves it"
        )
        out_warnings.append(
            f"{source}: its {what} ({iso(lo, ctx.tz)} to {iso(hi, ctx.tz)}) do not meet the vLLM log in time "
            f"({iso(r0, ctx.tz)} to {iso(r1, ctx.tz)}; {duration_words(gap.total_seconds())} "
            f"{'after' if after else 'before'} it): {why}{hint}"
        )
    return out_warnings


class MeetsLog:
    """A source kind whose output is checked against the logs' span once its clock is moved: its
    ``resolve`` becomes ``place`` (the same output) and ``combine`` (the check), which the pipeline
    calls around ``--offset`` (registry.CrossFile). Subclasses define ``_resolve``, ``MEETS_WHAT``
    (what the rows are), ``MEETS_KIND`` (the source kind) and ``MEETS_WHY`` (what follows)."""

    MEETS_WHAT = "rows"
    MEETS_KIND = ""
    MEETS_WHY = "they explain none of the log's preemptions"
    # every file's times are wall times read in --tz (dmon's); a kind whose files differ fills
    # ``_meets_wall`` in ``_resolve`` (block-table records: the files with a time without an offset)
    MEETS_WALL = False
    _meets_ctx: TimeContext | None = None
    _meets_wall: set[str] | None = None

    def _resolve(self, ctx: TimeContext) -> SourceOutput:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    def resolve(self, ctx: TimeContext) -> SourceOutput:
        return self.combine(self.place(ctx))

    def place(self, ctx: TimeContext) -> SourceOutput:
        self._meets_ctx = ctx
        return self._resolve(ctx)

    def combine(self, placed: SourceOutput) -> SourceOutput:
        wall: Collection[str] = self._meets_wall or ()
        if self.MEETS_WALL:
            wall = set(file_spans(placed))
        placed.warnings.extend(
            not_meeting(placed, self._meets_ctx, self.MEETS_WHAT, self.MEETS_KIND, self.MEETS_WHY, wall)
        )
        placed.wall.extend(sorted(set(wall) - set(placed.wall)))
        return placed
