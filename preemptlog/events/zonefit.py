"""The logs' zone, found from an engine start the bundle dates exactly (a counter's ``_created``).

A vLLM (or SGLang) log line has no zone: it is read in ``--tz``, else in this machine's zone. An
engineer who analyses a server's log on a laptop in another zone (or a UTC CI runner analysing a
log written in local time) reads every log line hours off. The /metrics scrapes beside it are
exact instants (a counter's ``_created`` is seconds since the epoch; sample timestamps, zoned
scrape times), so the two then disagree by whole quarter hours: the counter's engine started
"before the log began" and its count becomes a baseline instead of the incident's count.

The counter is made while its engine starts: its ``_created`` lies in a start-up the log shows,
from the server's start line (events/servers.py) to the first line of its serving (a request or
stats line: the first record that is not configuration). :func:`fit` reads the logs in another
zone when all of this holds, and says so as the zone assumption:

- no ``--tz`` and no ``--offset`` were given (the user's clock settings win);
- no engine start lies in a start-up of the logs as read (within 2 s: 1 s resolution each side);
- every engine start that lies in a start-up after a shift by whole quarter hours does so after
  the same shift, and that shift is the only one for its start-up (a start-up shorter than
  15 minutes), giving a zone from -12:00 to +14:00;
- the scrapes of every such file were read at times the logs meet (within MEET_S) after that
  shift and at none they meet as read (a count read while the logs ran is no zone mismatch).

Only logs whose lines carry no zone of their own are moved (a line with an offset is exact).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import polars as pl

from ..clock.timebase import iso, zone_info
from ..sources.meets import MEET_S, QUARTER_S
from .servers import starts as server_starts

if TYPE_CHECKING:
    from ..sources.registry import EngineStarts

SLACK_S = 2  # a log time is cut to the second (and so is the start it names)
ZONE_MIN_S, ZONE_MAX_S = -12 * 3600, 14 * 3600


@dataclass(frozen=True)
class ZoneFit:
    zone: str  # a fixed offset, ``+08:00``
    shift_s: int  # how far the logs as read were from it (seconds: read - true)
    why: str  # the zone assumption's text


def _offset_name(seconds: int) -> str:
    if seconds == 0:
        return "UTC"
    sign = "-" if seconds < 0 else "+"
    h, m = divmod(abs(seconds) // 60, 60)
    return f"{sign}{h:02d}:{m:02d}"


def _duration(seconds: int) -> str:
    h, m = divmod(abs(seconds) // 60, 60)
    return f"{h} h {m} min" if h and m else (f"{h} h" if h else f"{m} min")


def startups(records: pl.DataFrame) -> pl.DataFrame:
    """Per server start of a log stream whose lines carry no zone: ``start`` (its time as read),
    ``end`` (the stream's first record after it that is not configuration, else its last record),
    ``where`` (file:line of the start), ``end_where``."""
    empty = pl.DataFrame(
        schema={
            "stream": pl.Int32,
            "start": pl.Datetime("us", "UTC"),
            "end": pl.Datetime("us", "UTC"),
            "where": pl.String,
            "end_where": pl.String,
        }
    )
    need = {"stream", "seq", "time", "kind", "source", "n", "fzone"}
    if records.height == 0 or not need <= set(records.columns):
        return empty
    st = server_starts(records).filter(pl.col("time").is_not_null())
    if st.height == 0:
        return empty
    zoned = records.filter(pl.col("fzone").is_not_null()).get_column("stream").unique()
    st = st.filter(~pl.col("stream").is_in(zoned.implode()))
    if st.height == 0:
        return empty
    timed = records.filter(pl.col("time").is_not_null()).select(
        pl.col("stream").cast(pl.Int32), "seq", "time", "kind", "source", "n"
    )
    at = st.join(
        timed.select("stream", "source", pl.col("n").alias("line"), "seq"),
        on=["stream", "source", "line"],
        how="inner",
    ).sort("stream", "seq")
    act = (
        timed.filter(~pl.col("kind").str.starts_with("cfg_") & (pl.col("kind") != "time_only"))
        .select("stream", "seq", pl.col("time").alias("_t"), pl.concat_str("source", pl.lit(":"), "n").alias("_w"))
        .sort("stream", "seq")
    )
    last = (
        timed.sort("seq")
        .group_by("stream")
        .agg(pl.col("time").last().alias("_lt"), pl.concat_str("source", pl.lit(":"), "n").last().alias("_lw"))
    )
    joined = at.join_asof(act, on="seq", by="stream", strategy="forward", allow_exact_matches=False).join(
        last, on="stream", how="left"
    )
    return joined.select(
        "stream",
        pl.col("time").alias("start"),
        pl.coalesce("_t", "_lt").alias("end"),
        pl.concat_str("source", pl.lit(":"), pl.col("line").cast(pl.String)).alias("where"),
        pl.coalesce("_w", "_lw").alias("end_where"),
    )


def fit(records: pl.DataFrame, evidence: list[EngineStarts], assumed: str) -> ZoneFit | None:
    """The zone the logs were written in, when the bundle's exact engine starts say so (module
    docstring), else None (the assumed zone stays)."""
    if not evidence:
        return None
    ups = startups(records)
    if ups.height == 0:
        return None
    naive = records.filter(
        pl.col("time").is_not_null()
        & pl.col("fzone").is_null()
        & pl.col("stream").is_in(ups.get_column("stream").implode())
    ).get_column("time")
    lo, hi = naive.min(), naive.max()
    if lo is None or hi is None:
        return None
    meet = timedelta(seconds=MEET_S)

    def meets(t: datetime, shift: int) -> bool:
        moved = t + timedelta(seconds=shift)
        return lo - meet <= moved <= hi + meet  # type: ignore[operator]

    windows = [
        (s, e, w, ew)
        for s, e, w, ew in ups.select("start", "end", "where", "end_where").iter_rows()
        if e is not None and (e - s).total_seconds() + 2 * SLACK_S < QUARTER_S
    ]
    shifts: set[int] = set()
    placed: list[tuple[EngineStarts, datetime, str, tuple[datetime, datetime, str, str], int]] = []
    for ev in evidence:
        for c, c_where in ev.starts:
            for s, e, w, ew in windows:
                first = (s - c).total_seconds() - SLACK_S
                final = (e - c).total_seconds() + SLACK_S
                k = -(-int(first) // QUARTER_S)  # the smallest whole quarter hour >= first
                while k * QUARTER_S <= final:
                    d = k * QUARTER_S
                    if d == 0:
                        return None  # the logs as read already hold this engine's start
                    shifts.add(d)
                    placed.append((ev, c, c_where, (s, e, w, ew), d))
                    k += 1
    if len(shifts) != 1:
        return None
    (d,) = shifts
    # The zone: the assumed zone's offset at the first start-up, moved by the shift.
    first_up = min(p[3][0] for p in placed)
    assumed_off = int((first_up.astimezone(zone_info(assumed)).utcoffset() or timedelta(0)).total_seconds())
    zone_s = assumed_off + d
    if not ZONE_MIN_S <= zone_s <= ZONE_MAX_S:
        return None
    files = {p[0].display: p[0] for p in placed}
    for ev in files.values():
        if not ev.readings or any(meets(r, 0) for r in ev.readings) or not any(meets(r, d) for r in ev.readings):
            return None
    _, c, c_where, (s, e, w, ew), _ = min(placed, key=lambda p: p[1])
    zone = _offset_name(zone_s)
    why = (
        f"the bundle: a counter's _created dates an engine start ({iso(c, zone)}, {c_where}) that lies in the "
        f"start-up the log shows ({w} to {ew}, {iso(s - timedelta(seconds=d), zone)} to "
        f"{iso(e - timedelta(seconds=d), zone)}) when the log is read in {zone}, and in none read in {assumed} "
        f"({_duration(d)} apart); its scrapes were read while the log ran only in {zone} (--tz sets the zone); "
        "applies to every timestamp without an offset"
    )
    return ZoneFit(zone=zone, shift_s=d, why=why)
