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
- a fixed offset Z (whole quarter hours, -12:00 to +14:00) puts an engine start in a start-up
  (one shorter than 15 minutes: it holds a start in one zone at most) when the logs' wall times
  are read in Z, and Z is the only zone that puts there every engine start some zone does (a
  restart on the hour puts a start in the next start-up too, an hour off; a nightly restart, a
  day off, which no zone is). Wall times, not the instants as read: the assumed zone's offset may
  change inside the logs (a DST change), the zone they were written in is one fixed offset;
- the scrapes of every such file were read at times the logs meet (within MEET_S) in Z and at
  none they meet as read (a count read while the logs ran is no zone mismatch); and no other
  scrape file was read, by its own exact times (sample timestamps, zoned separators or file
  name), while the logs ran as read and not while they ran in Z.

Only logs whose lines carry no zone of their own are moved (a line with an offset is exact). A log
file whose mtime (its last write, exact) is its last line's time as read, to the second, says the
assumed zone is right: no zone is then found (a copy's mtime says nothing either way).

What it cannot tell apart: a log of one run and a scrape taken after a restart the bundle does not
show (or before the run), whose engine start lies, by chance, whole quarter hours from the log's
start-up, with nothing else in the bundle read while the log ran. The chance is the start-up's
length over 15 minutes, so a long start-up (a large model, an idle server) is the weak case; the
zone assumption names the lines it went by.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import polars as pl

from ..clock.timebase import iso, local_wall, offset_name, zone_info
from ..sources.meets import MEET_S, QUARTER_S, duration_words
from .servers import real_starts

if TYPE_CHECKING:
    from ..sources.registry import EngineStarts

SLACK_S = 2  # a log time is cut to the second (and so is the start it names)
ZONE_MIN_S, ZONE_MAX_S = -12 * 3600, 14 * 3600
# A start-up: its start and end as read (instants), their file:line, and their wall times (naive).
_Window = tuple[datetime, datetime, str, str, datetime, datetime]


@dataclass(frozen=True)
class ZoneFit:
    zone: str  # a fixed offset, ``+08:00``
    shift_s: int  # how far the logs as read were from it (seconds: read - true)
    why: str  # the zone assumption's text


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
    st = real_starts(records).filter(pl.col("time").is_not_null())
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
        .select(
            "stream",
            "seq",
            pl.col("seq").alias("_aseq"),
            pl.col("time").alias("_t"),
            pl.concat_str("source", pl.lit(":"), "n").alias("_w"),
        )
        .sort("stream", "seq")
    )
    last = (
        timed.sort("seq")
        .group_by("stream")
        .agg(pl.col("time").last().alias("_lt"), pl.concat_str("source", pl.lit(":"), "n").last().alias("_lw"))
    )
    joined = at.join_asof(
        act, on="seq", by="stream", strategy="forward", allow_exact_matches=False, check_sortedness=False
    ).join(last, on="stream", how="left")
    # The engine's counters are made once its KV cache is: after the start-up's configuration lines
    # (the engine's config, its KV cache and block counts: cfg_* records). The start-up's last such
    # line before its first serving line narrows it (a model that loads for minutes lies before it).
    cfg = (
        timed.filter(pl.col("kind").str.starts_with("cfg_"))
        .select(
            "stream",
            pl.col("seq").alias("_cseq"),
            pl.col("time").alias("_ct"),
            pl.concat_str("source", pl.lit(":"), "n").alias("_cw"),
        )
        .sort("stream", "_cseq")
    )
    ends = joined.with_columns(_eseq=pl.coalesce(pl.col("_aseq").cast(pl.Int64), pl.lit(2**40, pl.Int64))).sort("_eseq")
    ends = ends.join_asof(
        cfg.with_columns(pl.col("_cseq").cast(pl.Int64)),
        left_on="_eseq",
        right_on="_cseq",
        by="stream",
        strategy="backward",
        allow_exact_matches=False,
        check_sortedness=False,
    )
    later = pl.col("_cseq").is_not_null() & (pl.col("_cseq") >= pl.col("seq")) & (pl.col("_ct") >= pl.col("time"))
    return ends.sort("stream", "seq").select(
        "stream",
        pl.when(later).then(pl.col("_ct")).otherwise(pl.col("time")).alias("start"),
        pl.coalesce("_t", "_lt").alias("end"),
        pl.when(later)
        .then(pl.col("_cw"))
        .otherwise(pl.concat_str("source", pl.lit(":"), pl.col("line").cast(pl.String)))
        .alias("where"),
        pl.coalesce("_w", "_lw").alias("end_where"),
    )


def _walls(times: pl.Series, zone: str) -> pl.Series:
    """Instants as the wall clock of ``zone`` shows them (naive): what a log line read in ``zone``
    printed, the same whatever zone it was written in."""
    return pl.DataFrame({"t": times}).select(local_wall(pl.col("t"), zone)).to_series()


def _walls_of(t: datetime, zone: str) -> tuple[datetime, ...]:
    """The wall times a line read in ``zone`` as the instant ``t`` can have printed: its wall in
    ``zone``, and, for an instant just after a spring-forward change, the wall in the gap before it
    (a gap wall is read as standard time: the same instant as an hour later on the summer clock)."""
    tz = zone_info(zone)
    wall = t.astimezone(tz).replace(tzinfo=None)
    before = (t - timedelta(hours=3)).astimezone(tz).utcoffset()
    if before is None or before == t.astimezone(tz).utcoffset():
        return (wall,)
    gap = (t + before).replace(tzinfo=None)
    if gap.replace(tzinfo=tz).astimezone(UTC).astimezone(tz).replace(tzinfo=None) == gap:
        return (wall,)  # a wall that exists: not a gap wall
    return (gap, wall)


def _written_as_read(records: pl.DataFrame, written: dict[str, float]) -> str | None:
    """A log file whose last write (its mtime: an exact instant) is its last line's time as read, to
    the second: the file itself says it is read in the right zone (file:line), else None. A copy's
    mtime, or a last line flushed late, says nothing and vetoes nothing."""
    if not written or records.height == 0:
        return None
    last = (
        records.filter(pl.col("time").is_not_null() & pl.col("fzone").is_null() & pl.col("source").is_not_null())
        .sort("n")
        .group_by("source")
        .agg(pl.col("time").last(), pl.col("n").last())
    )
    for source, t, n in last.iter_rows():
        m = written.get(source)
        if m is None or not isinstance(t, datetime):
            continue
        if -SLACK_S <= m - t.timestamp() <= SLACK_S + 1:
            return f"{source}:{n}"
    return None


def fit(
    records: pl.DataFrame, evidence: list[EngineStarts], assumed: str, written: dict[str, float] | None = None
) -> ZoneFit | None:
    """The zone the logs were written in, when the bundle's exact engine starts say so (module
    docstring), else None (the assumed zone stays). ``written``: each log file's last write (its
    mtime, seconds since the epoch, by display name): a file whose last line was written when it
    reads as written keeps the assumed zone."""
    if not evidence:
        return None
    ups = startups(records)
    if ups.height == 0:
        return None
    if _written_as_read(records, written or {}) is not None:
        return None
    naive = records.filter(
        pl.col("time").is_not_null()
        & pl.col("fzone").is_null()
        & pl.col("stream").is_in(ups.get_column("stream").implode())
    ).get_column("time")
    lo, hi = naive.min(), naive.max()
    if not isinstance(lo, datetime) or not isinstance(hi, datetime):
        return None
    slack = timedelta(seconds=SLACK_S)
    windows: list[_Window] = []
    for s, e, w, ew in ups.select("start", "end", "where", "end_where").iter_rows():
        if e is None:
            continue
        # Both walls when the assumed zone's spring-forward gap makes one instant two walls: the start
        # then lies in the start-up in two zones an hour apart, and no zone is found from it alone.
        for ws in _walls_of(s, assumed):
            for we in _walls_of(e, assumed):
                if timedelta(0) <= we - ws and (we - ws).total_seconds() + 2 * SLACK_S < QUARTER_S:
                    windows.append((s, e, w, ew, ws, we))
    # Every zone (seconds east of UTC, whole quarter hours, -12:00 to +14:00) in which an engine start
    # lies in a start-up: (file, start, its file:line, the start-up, the zone).
    placed: list[tuple[EngineStarts, datetime, str, _Window, int]] = []
    for ev in evidence:
        for c, c_where in ev.starts:
            naive_c = c.replace(tzinfo=None)
            for win in windows:
                s, e, _, _, ws, we = win
                if s - slack <= c <= e + slack:
                    return None  # the logs as read already hold this engine's start
                first = (ws - naive_c).total_seconds() - SLACK_S
                final = (we - naive_c).total_seconds() + SLACK_S
                k = -(-int(first) // QUARTER_S)  # the smallest whole quarter hour >= first
                while k * QUARTER_S <= final:
                    zone_s = k * QUARTER_S
                    if ZONE_MIN_S <= zone_s <= ZONE_MAX_S:
                        placed.append((ev, c, c_where, win, zone_s))
                    k += 1
    if not placed:
        return None
    # The zone: the one that places every engine start some zone places (a restart on the hour puts
    # a start in its neighbour's start-up too, an hour off; only the true zone places them all).
    dated = {(id(p[0]), p[1]) for p in placed}
    zones = {p[4] for p in placed}
    fits = [z for z in zones if {(id(p[0]), p[1]) for p in placed if p[4] == z} == dated]
    if len(fits) != 1:
        return None
    (zone_s,) = fits
    # The logs' span as their lines print it: read in a fixed offset Z, a wall time w is w - Z (the
    # assumed zone's offset may change inside the logs: a DST change; walls do not).
    walls = _walls(naive, assumed)
    wall_lo, wall_hi = min(walls.min(), *_walls_of(lo, assumed)), walls.max()  # type: ignore[type-var]
    meet = timedelta(seconds=MEET_S)

    def meets_as_read(t: datetime) -> bool:
        return lo - meet <= t <= hi + meet

    def meets_in(t: datetime) -> bool:
        wall = t.replace(tzinfo=None) + timedelta(seconds=zone_s)
        return wall_lo - meet <= wall <= wall_hi + meet  # type: ignore[operator]

    mine = [p for p in placed if p[4] == zone_s]
    files = {id(p[0]): p[0] for p in mine}
    for ev in files.values():
        if not ev.readings or any(meets_as_read(r) for r in ev.readings):
            return None
        if not any(meets_in(r) for r in ev.readings):
            return None
    # A scrape read while the logs ran as read, and not in that zone, says the logs are read right.
    for ev in evidence:
        if id(ev) in files:
            continue
        if any(meets_as_read(r) for r in ev.readings) and not any(meets_in(r) for r in ev.readings):
            return None
    _, c, c_where, (s, e, w, ew, ws, we), _ = min(mine, key=lambda p: p[1])
    d = zone_s - int((s.astimezone(zone_info(assumed)).utcoffset() or timedelta(0)).total_seconds())
    zone = "UTC" if zone_s == 0 else offset_name(timedelta(seconds=zone_s))

    def true(wall: datetime) -> datetime:
        return (wall - timedelta(seconds=zone_s)).replace(tzinfo=UTC)

    why = (
        f"the bundle: a counter's _created dates an engine start ({iso(c, zone)}, {c_where}) that lies in the "
        f"start-up the log shows ({w} to {ew}, {iso(true(ws), zone)} to {iso(true(we), zone)}) when the log is "
        f"read in {zone}, and in none read in {assumed} "
        f"({duration_words(d)} apart); its scrapes were read while the log ran only in {zone} (--tz sets the zone); "
        "applies to every timestamp without an offset"
    )
    return ZoneFit(zone=zone, shift_s=d, why=why)
