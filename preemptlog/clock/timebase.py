"""Put every line on one clock.

vLLM's header time (``%m-%d %H:%M:%S``) has no year, no zone and 1 s
resolution. This module turns the time parts the parsers extracted into
``time`` (Datetime[us, UTC]) and ``time_precision``, and records every
assumption it made.

Year, per stream (a rotated set of files read as one):

1. ``--year`` (the year of the stream's first year-less line);
2. a full date seen in the same stream, else anywhere in the bundle (RFC 3339
   prefixes, ISO prefixes, JSON ``asctime``, dmon ``-o DT``, Prometheus
   timestamps): the year that puts the stream closest to it;
3. the gzip header MTIME (when non-zero) of the stream's newest file, anchored
   at the stream's last line;
4. the file mtime of the stream's newest file, anchored at its last line;
5. the current date (standard input has no file metadata).

Rollover: walking the year-less lines in file order, a step back of more than
one day is a new year (Dec -> Jan); a step forward of more than 365 days is a
line reordered back across New Year. Smaller steps back are reordering within
the year and keep the year. A 02-29 line forces a leap year: an inferred year
moves to the nearest year that makes every 02-29 valid (said in the output);
an explicit ``--year`` that cannot is an error.

Zone: full timestamps with an offset (RFC 3339, ``Z``) are exact; everything
else is local time in ``--tz`` (default: this machine's zone). Times that do
not exist in that zone (the spring-forward gap) are read as standard time;
ambiguous ones (fall-back) take the earlier instant until the stream's clock
goes back into the repeated hour, the later one after that (so line order,
and every interval between two lines, is kept).

Order: ``seq`` numbers every record in stream order (file order, line,
segment) so that sorting by (time, stream, seq) keeps line order within a
second.
"""

from __future__ import annotations

import calendar
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from pathlib import Path
from typing import Any, Literal

import polars as pl

from ..errors import UsageError

# Days before each month in a leap year (index 1..12).
_CUM_DAYS_LEAP = [0, 0, 31, 60, 91, 121, 152, 182, 213, 244, 274, 305, 335]
DAY = 86400
ROLLOVER_BACK = DAY
ROLLOVER_FORWARD = 365 * DAY


@dataclass
class Assumption:
    topic: str
    value: Any
    source: str
    scope: str = "bundle"

    def as_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "scope": self.scope, "value": self.value, "source": self.source}


@dataclass
class StreamMeta:
    """What the timebase needs to know about a stream (rotation group)."""

    stream: int
    name: str
    mtime: float | None = None  # of the newest file
    gzip_mtime: int | None = None  # of the newest file, when it is gzip
    is_stdin: bool = False


@dataclass
class TimeOptions:
    year: int | None = None
    tz: str | None = None
    now: datetime | None = None  # injectable for tests


@dataclass
class TimeResult:
    tz: str
    assumptions: list[Assumption] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # some record's time is a wall time without an offset, read in ``tz`` (--tz moves it); False when
    # every timed record states its offset (an ISO time with Z or +08:00, an epoch)
    wall: bool = False


# A full timestamp of another source dates a year-less log only when the two meet:
# placed in the anchor's year, the log comes within this many days of it. An anchor
# further away is another incident's (an unrelated dmon capture in the folder) and
# is not used (warning); the file metadata decides instead.
FOREIGN_ANCHOR_DAYS = 7


def local_zone() -> str:
    """This machine's IANA zone name (TZ, /etc/timezone, /etc/localtime), else a fixed offset."""
    tz = os.environ.get("TZ", "").lstrip(":")
    if tz and _valid_zone(tz):
        return tz
    try:
        target = os.path.realpath("/etc/localtime")
        marker = "zoneinfo/"
        if marker in target:
            name = target.split(marker, 1)[1]
            if name.startswith("posix/") or name.startswith("right/"):
                name = name.split("/", 1)[1]
            if _valid_zone(name):
                return name
    except OSError:
        pass
    try:
        name = Path("/etc/timezone").read_text().strip()
        if name and _valid_zone(name):
            return name
    except OSError:
        pass
    offset = datetime.now().astimezone().utcoffset() or timedelta(0)
    return offset_name(offset)


def offset_name(offset: timedelta) -> str:
    """``+05:30``, ``-03:00``: a fixed offset as ISO 8601 writes it."""
    total = int(offset.total_seconds() // 60)
    sign = "+" if total >= 0 else "-"
    total = abs(total)
    return f"{sign}{total // 60:02d}:{total % 60:02d}"


def fixed_offset(name: str) -> int | None:
    """Seconds east of UTC for a fixed offset zone (``+05:30``, ``-03:30``), else None."""
    import re

    m = re.fullmatch(r"([+-])(\d\d):(\d\d)", name)
    if not m or int(m.group(3)) >= 60 or int(m.group(2)) >= 24:
        return None
    return (1 if m.group(1) == "+" else -1) * (int(m.group(2)) * 3600 + int(m.group(3)) * 60)


def local_wall(expr: pl.Expr, tz: str) -> pl.Expr:
    """A UTC datetime expression as naive wall-clock time in ``tz``.

    Fixed offsets are applied as arithmetic: polars knows no zone for offsets with minutes
    (``+05:30``, ``+05:45``, ``-03:30``), and the arithmetic is exact for every offset.
    """
    off = fixed_offset(tz)
    if off is not None:
        return expr.dt.convert_time_zone("UTC").dt.replace_time_zone(None) + pl.duration(seconds=off)
    return expr.dt.convert_time_zone(tz).dt.replace_time_zone(None)


def iso_text(expr: pl.Expr, tz: str) -> pl.Expr:
    """A UTC datetime expression as ISO 8601 text with ``tz``'s offset (``...T10:00:00+05:30``)."""
    off = fixed_offset(tz)
    if off is not None:
        return pl.concat_str(
            [local_wall(expr, tz).dt.to_string("%Y-%m-%dT%H:%M:%S%.f"), pl.lit(offset_name(timedelta(seconds=off)))]
        )
    return expr.dt.convert_time_zone(tz).dt.to_string("%Y-%m-%dT%H:%M:%S%.f%:z")


def typed_zone(tz: str) -> str:
    """The zone for typed datetime output (parquet): ``tz``, or UTC for a fixed offset polars has no
    zone for (the instants are the same)."""
    off = fixed_offset(tz)
    if off is not None and off % 3600:
        return "UTC"
    return tz


def _valid_zone(name: str) -> bool:
    if fixed_offset(name) is not None or name.upper() == "UTC":
        return True
    try:
        from zoneinfo import ZoneInfo

        ZoneInfo(name)
        return True
    except Exception:
        return False


def check_zone(name: str) -> str:
    if not _valid_zone(name):
        raise UsageError(
            f"unknown time zone {name!r}",
            hint="use an IANA name such as Europe/Berlin or UTC, or an offset such as +02:00",
        )
    return "UTC" if name.upper() == "UTC" else name


def zone_info(name: str) -> tzinfo:
    """A tzinfo for a zone name or fixed offset."""
    off = fixed_offset(name)
    if off is not None:
        return timezone(timedelta(seconds=off))
    if name.upper() == "UTC":
        return UTC
    from zoneinfo import ZoneInfo

    return ZoneInfo(name)


# --------------------------------------------------------------------------
# python-dateutil fallback for leading date shapes the fast path does not know


def parse_fallback(values: list[str]) -> pl.DataFrame:
    """Parse unique fallback timestamp strings with dateutil.

    Returns columns fb, fb_year (null when the string has no year), fb_mo,
    fb_dd, fb_hh, fb_mi, fb_ss, fb_us, fb_offset_s (null when no zone).
    Called once per *distinct* string, never per line.
    """
    import re

    from dateutil import parser as dparser

    rows = []
    sentinel = datetime(1904, 1, 1)  # a leap year, so Feb 29 without a year parses
    for value in values:
        try:
            dt = dparser.parse(value, default=sentinel, fuzzy=False)
        except (ValueError, OverflowError):
            continue
        has_year = bool(re.search(r"\d{4}", value)) or bool(re.search(r"\d{1,2}[/.]\d{1,2}[/.]\d{2}\b", value))
        off = dt.utcoffset()
        rows.append(
            {
                "fb": value,
                "fb_year": dt.year if has_year else None,
                "fb_mo": dt.month,
                "fb_dd": dt.day,
                "fb_hh": dt.hour,
                "fb_mi": dt.minute,
                "fb_ss": dt.second,
                "fb_us": dt.microsecond,
                "fb_offset_s": int(off.total_seconds()) if off is not None else None,
                "fb_frac": bool(re.search(r":\d\d[.,]\d", value)),
            }
        )
    schema = {
        "fb": pl.String,
        "fb_year": pl.Int32,
        "fb_mo": pl.Int8,
        "fb_dd": pl.Int8,
        "fb_hh": pl.Int8,
        "fb_mi": pl.Int8,
        "fb_ss": pl.Int8,
        "fb_us": pl.Int32,
        "fb_offset_s": pl.Int32,
        "fb_frac": pl.Boolean,
    }
    return pl.DataFrame(rows, schema=schema)


# --------------------------------------------------------------------------


def _leap_seconds_expr(mo: pl.Expr, dd: pl.Expr, hh: pl.Expr, mi: pl.Expr, ss: pl.Expr) -> pl.Expr:
    cum = mo.cast(pl.Int64).replace_strict(list(range(1, 13)), _CUM_DAYS_LEAP[1:], default=None, return_dtype=pl.Int64)
    return (cum + dd.cast(pl.Int64) - 1) * DAY + hh.cast(pl.Int64) * 3600 + mi.cast(pl.Int64) * 60 + ss.cast(pl.Int64)


def _frac_us(col: pl.Expr) -> pl.Expr:
    """Fraction digits ("123", "123456789") -> microseconds."""
    digits = col.str.slice(0, 6)
    return (digits.str.pad_end(6, "0")).cast(pl.Int64, strict=False).fill_null(0)


def _precision(col: pl.Expr) -> pl.Expr:
    n = col.str.len_chars()
    return (
        pl.when(n.is_null())
        .then(pl.lit("1s"))
        .when(n <= 3)
        .then(pl.lit("ms"))
        .when(n <= 6)
        .then(pl.lit("us"))
        .otherwise(pl.lit("ns"))
    )


Ambiguous = Literal["earliest", "latest", "raise", "null"]


def localize(naive: pl.Expr, tz: str, ambiguous: Ambiguous = "earliest") -> pl.Expr:
    """Naive local datetimes in ``tz`` -> UTC. Gap times read as standard time."""
    off = fixed_offset(tz)
    if off is not None:  # a fixed offset has no gap and no fold: arithmetic (polars has no zone for +05:30)
        return (naive - pl.duration(seconds=off)).dt.replace_time_zone("UTC")
    if tz.upper() in ("UTC", "ETC/UTC"):  # one conversion: the generic path below costs 0.65 s per 1.7 M records
        return naive.dt.replace_time_zone("UTC")
    loc = naive.dt.replace_time_zone(tz, ambiguous=ambiguous, non_existent="null")
    # A wall time inside the spring-forward gap, read as standard time, is the
    # same instant as one hour later on the summer clock.
    shifted = (naive + pl.duration(hours=1)).dt.replace_time_zone(tz, ambiguous=ambiguous, non_existent="null")
    return pl.coalesce(loc, shifted).dt.convert_time_zone("UTC")


_localize = localize  # the old private name (callers on other branches)


def offset_for(offsets: dict[str, float], display: str, kind: str) -> float:
    """The ``--offset`` (seconds) for a file of a source kind: the file's own, else its kind's, else 0."""
    return offsets.get(display, offsets.get(kind, 0.0))


# --------------------------------------------------------------------------
# --offset SOURCE=DURATION resolved against the bundle


@dataclass(frozen=True)
class OffsetFile:
    """A file of the bundle as ``--offset`` can name it."""

    display: str  # the name outputs show (``x04/sglang.log``, ``b.tar.gz!dir/vllm.log``)
    kind: str  # the source kind the sniffer (or --file-kind) gave it
    path: str | None = None  # the file on disk as read, for a SOURCE given as a path (None: stdin)


@dataclass(frozen=True)
class ClockOffsets:
    """The ``--offset`` of every file of a bundle (:func:`resolve_offsets`).

    ``by_file``: seconds per file (display name), every file of the bundle (0 for a file no offset
    names); a file's own offset beats its kind's. ``by_kind``: the offsets given by kind name, for
    rows that name no file. ``assumptions``: the offsets applied; ``warnings``: those that were not
    (a kind the bundle has no file of).
    """

    by_file: dict[str, float] = field(default_factory=dict)
    by_kind: dict[str, float] = field(default_factory=dict)
    assumptions: tuple[Assumption, ...] = ()
    warnings: tuple[str, ...] = ()

    def moves(self) -> bool:
        """Whether any clock moves."""
        return any(self.by_file.values()) or any(self.by_kind.values())

    def of(self, display: str | None, kind: str) -> float:
        """The seconds for a row of a source kind's frame naming ``display`` (None: no file)."""
        if display is not None and display in self.by_file:
            return self.by_file[display]
        return self.by_kind.get(kind, 0.0)


def offset_words(secs: float) -> str:
    """An offset as a user types it: ``-2h``, ``+90m``, ``+1.5s`` (whole hours or minutes when it is)."""
    if secs and secs == int(secs):
        whole = int(secs)
        if whole % 3600 == 0:
            return f"{whole // 3600:+d}h"
        if whole % 60 == 0:
            return f"{whole // 60:+d}m"
    return f"{secs:+g}s"


def _norm_path(name: str) -> str:
    parts = [p for p in name.replace("\\", "/").split("/") if p not in ("", ".")]
    return ("/" if name.startswith("/") else "") + "/".join(parts)


def _names_file(key: str, display: str) -> bool:
    """``key`` names the file shown as ``display``: the whole name, or a tail of it that starts
    after a ``/`` (or an archive's ``!``): ``sglang.log`` and ``x04/sglang.log`` name ``x04/sglang.log``."""
    d = _norm_path(display)
    return d == key or (d.endswith(key) and d[-len(key) - 1] in "/!")


def _same_file(key: str, path: str | None) -> bool:
    if path is None:
        return False
    try:
        return os.path.samefile(key, path)
    except (OSError, ValueError):
        return False


def _listed(names: list[str], limit: int = 6) -> str:
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def _one_per_kind_first(files: list[OffsetFile]) -> list[str]:
    """The files' names, the first of each kind first (a list cut short still shows every kind's)."""
    firsts = list({f.kind: f.display for f in reversed(files)}.values())[::-1]
    return firsts + [f.display for f in files if f.display not in firsts]


def resolve_offsets(given: dict[str, float], files: list[OffsetFile], kinds: list[str]) -> ClockOffsets:
    """``--offset SOURCE=SECONDS`` pairs put on the files of a bundle, before anything is read.

    A SOURCE is a source kind (``kinds``: every kind ``--file-kind`` accepts, ``sglang-log`` too),
    which applies to every file of that kind, or one file of the bundle: by its display name, by a
    tail of it on ``/`` boundaries (``node1/dmon.txt``), by its basename when that names one file,
    or by its path on disk. A file's own offset beats its kind's.

    UsageError: a SOURCE that is neither a kind nor a file of the bundle (naming what it could be),
    a name that fits two files (naming both), one file given two different offsets. A kind the
    bundle has no file of is a warning (the same options serve many bundles: fleet, watch) and is
    not listed as applied.
    """
    known = set(kinds)
    by_kind: dict[str, float] = {}
    of_kind: dict[str, float] = {}
    own: dict[str, tuple[str, float]] = {}  # display -> (SOURCE, seconds)
    assumptions: list[Assumption] = []
    warnings: list[str] = []
    for key, secs in given.items():
        spelled = f"--offset {key}={offset_words(secs)}"
        if key in known:
            matched = [f for f in files if f.kind == key]
            if not matched:
                present = sorted({f.kind for f in files if f.kind in known})
                warnings.append(
                    f"{spelled} not applied: the bundle has no {key} file"
                    + (f" (its kinds: {', '.join(present)})" if present else "")
                )
                continue
            by_kind[key] = secs
            for f in matched:
                of_kind[f.display] = secs
            assumptions.append(Assumption("offset", f"{secs:+g}s", f"--offset {key}", scope=key))
            continue
        name = _norm_path(key.strip())
        matched = [f for f in files if name and _names_file(name, f.display)]
        exact = [f for f in matched if _norm_path(f.display) == name]
        if exact:
            matched = exact
        if not matched:
            matched = [f for f in files if _same_file(key, f.path)]
        if len(matched) > 1:
            raise UsageError(
                f"{spelled}: {key!r} names {len(matched)} files: {_listed([f.display for f in matched])}",
                hint=f"give more of its path, e.g. {matched[0].display}",
            )
        if not matched:
            raise UsageError(
                f"{spelled}: {key!r} is neither a source kind nor a file of the bundle",
                hint=f"a kind ({', '.join(sorted(known))}) or a file ({_listed(_one_per_kind_first(files)) or 'none'})",
            )
        f = matched[0]
        if f.display in own and own[f.display][1] != secs:
            raise UsageError(
                f"{spelled}: {f.display} already has --offset {own[f.display][0]}={offset_words(own[f.display][1])}",
                hint="give one offset per file",
            )
        own[f.display] = (key, secs)
        assumptions.append(Assumption("offset", f"{secs:+g}s", f"--offset {key}", scope=f.display))
    by_file = {f.display: own[f.display][1] if f.display in own else of_kind.get(f.display, 0.0) for f in files}
    return ClockOffsets(by_file, by_kind, tuple(assumptions), tuple(warnings))


def shift(df: pl.DataFrame, seconds: float | pl.Expr, column: str = "time") -> pl.DataFrame:
    """``column`` moved by ``seconds`` (a number or a Float64 expression), to the nearest
    microsecond: a clock offset (``--offset``, applied by pipeline.on_clock)."""
    if isinstance(seconds, (int, float)):
        if seconds == 0 or column not in df.columns:
            return df
        secs: pl.Expr = pl.lit(float(seconds))
    else:
        secs = seconds
    return df.with_columns(pl.col(column) + pl.duration(microseconds=(secs * 1e6).round(0).cast(pl.Int64)))


FALL_BACK_STEP_S = 60  # a wall clock stepping back by more than this inside the repeated hour is the fall-back


def fall_back_windows(tz: str, y0: int, y1: int) -> list[tuple[datetime, datetime, timedelta]]:
    """The wall-clock spans ``tz`` repeats in years y0..y1: (first repeated wall time, end, shift).

    Found from the zone's offsets (a day scan, refined to 15 minutes), so a half-hour change
    (Australia/Lord_Howe) is found as well as the usual hour. Empty for UTC and fixed offsets.
    """
    if fixed_offset(tz) is not None or tz.upper() == "UTC" or y1 < y0 or y1 - y0 > 50:
        return []
    z = zone_info(tz)
    out = []
    t = datetime(max(y0, 1971) - 1, 12, 31, tzinfo=UTC)
    end = datetime(min(y1, 2200) + 1, 1, 2, tzinfo=UTC)
    prev = t.astimezone(z).utcoffset()
    day, quarter = timedelta(days=1), timedelta(minutes=15)
    while t < end:
        nxt = t + day
        off = nxt.astimezone(z).utcoffset()
        if off is not None and prev is not None and off < prev:
            u = t
            while (u + quarter).astimezone(z).utcoffset() == prev:
                u += quarter
            at = u + quarter  # first instant on the new (smaller) offset
            wall_end = (at + prev).replace(tzinfo=None)
            out.append((wall_end - (prev - off), wall_end, prev - off))
        prev = off
        t = nxt
    return out


def localize_in_order(df: pl.DataFrame, naive: pl.Expr, tz: str, time_col: str = "time") -> pl.DataFrame:
    """``time_col``: the naive local wall times ``naive`` of ``df``'s rows, in the order they were
    written (one clock: a dmon capture, a file of records), read in ``tz`` as the logs' lines are:
    a time in the spring-forward gap as standard time, a wall time the fall-back repeats as the
    earlier instant until the clock steps back into the repeated span, the later one after it
    (:func:`later_in_second_pass`). Every source whose rows are local wall times reads them so: the
    second pass of the repeated hour lands on the log's second pass, not an hour before it."""
    df = df.with_columns(_lio_naive=naive, _lio_clock=pl.lit(0, pl.Int8))
    df = df.with_columns(localize(pl.col("_lio_naive"), tz).alias(time_col))
    return later_in_second_pass(df, "_lio_naive", time_col, tz, over="_lio_clock").drop("_lio_naive", "_lio_clock")


def later_in_second_pass(
    df: pl.DataFrame, naive_col: str, time_col: str, tz: str, over: str = "stream"
) -> pl.DataFrame:
    """Give the later instant to fall-back wall times read after the clock went back.

    ``time_col`` holds _localize's earlier instant for ``naive_col``. A wall time the fall-back
    repeats keeps it until the stream's wall clock steps back (by more than FALL_BACK_STEP_S, so
    lines a few seconds out of order are not moved) into the repeated span; from then on, in that
    span, it takes the later instant. Taking the earlier instant for both passes put the second
    before the first: the interval from 01:59:59 (summer) to 01:00:09 (standard) was inverted.
    Costs nothing when no line falls in a repeated span.
    """
    years = df.select(pl.col(naive_col).dt.year().min().alias("a"), pl.col(naive_col).dt.year().max().alias("b"))
    y0, y1 = years.row(0)
    if y0 is None:
        return df
    windows = fall_back_windows(tz, y0, y1)
    if not windows:
        return df
    naive = pl.col(naive_col)
    shift = pl.lit(None, pl.Int64)
    for lo, hi, d in windows:
        shift = (
            pl.when(naive.is_between(pl.lit(lo), pl.lit(hi), closed="left"))
            .then(pl.lit(int(d.total_seconds() * 1e6)))
            .otherwise(shift)
        )
    df = df.with_columns(_fb_shift=shift)
    if df.get_column("_fb_shift").null_count() == df.height:
        return df.drop("_fb_shift")
    repeated = pl.col("_fb_shift").is_not_null()
    stepped_back = (naive.cum_max().shift(1).over(over) - naive) > pl.duration(seconds=FALL_BACK_STEP_S)
    second_pass = (repeated & stepped_back.fill_null(False)).cast(pl.Int32).cum_sum().over(
        [pl.col(over), naive.dt.date()]
    ) > 0
    return df.with_columns(
        pl.when(repeated & second_pass)
        .then(pl.col(time_col) + pl.duration(microseconds=pl.col("_fb_shift")))
        .otherwise(pl.col(time_col))
        .alias(time_col)
    ).drop("_fb_shift")


_later_in_second_pass = later_in_second_pass  # the old private name


def _is_leap_expr(y: pl.Expr) -> pl.Expr:
    return ((y % 4 == 0) & (y % 100 != 0)) | (y % 400 == 0)


def resolve(
    records: pl.DataFrame,
    streams: dict[int, StreamMeta],
    file_stream: dict[int, tuple[int, int]],
    opts: TimeOptions,
    bundle_anchors: list[tuple[datetime, str]] | None = None,
) -> tuple[pl.DataFrame, TimeResult]:
    """Add ``stream``, ``seq``, ``time`` (UTC) and ``time_precision`` to records.

    ``records`` needs: file_id, n, seg, mo, dd, hh, mi, ss, hfrac, fdate,
    ftime, ffrac, fzone, fb. ``file_stream`` maps file_id -> (stream, order).
    """
    tz = check_zone(opts.tz) if opts.tz else local_zone()
    result = TimeResult(tz=tz)
    tz_source = "--tz" if opts.tz else "this machine's local zone (use --tz to change)"
    result.assumptions.append(Assumption("zone", tz, f"{tz_source}; applies to every timestamp without an offset"))

    if records.height == 0:
        empty = records.with_columns(
            pl.lit(None, pl.Int32).alias("stream"),
            pl.lit(None, pl.UInt32).alias("seq"),
            pl.lit(None, pl.Datetime("us", "UTC")).alias("time"),
            pl.lit(None, pl.String).alias("time_precision"),
        )
        return empty, result

    file_ids = list(file_stream.keys())
    df = records.with_columns(
        stream=pl.col("file_id").replace_strict(
            file_ids, [v[0] for v in file_stream.values()], default=None, return_dtype=pl.Int32
        ),
        forder=pl.col("file_id").replace_strict(
            file_ids, [v[1] for v in file_stream.values()], default=None, return_dtype=pl.Int32
        ),
    )
    # Memory: sorting gathers every column, ~16 bytes per row and string
    # column (170 MB at 400 k records). The scan yields each file's lines in
    # order and the files come in stream order, so the sort is skipped when
    # it would not move a row (checked on the keys alone).
    keys = ["stream", "forder", "n", "seg"]
    order = df.select(pl.arg_sort_by(keys, maintain_order=True).alias("o")).get_column("o")
    if not order.equals(pl.int_range(df.height, dtype=pl.UInt32, eager=True).cast(order.dtype).alias("o")):
        df = df[order]
    if "rq_count" in df.columns and df.get_column("rq_count").null_count() < df.height:
        # Request-line runs (sources/vllm_log.py, issue 18): a run of k lines holds seq numbers
        # seq .. seq+k-1, so every other record keeps the number it had with one row per line.
        w = pl.col("rq_count").fill_null(1).cast(pl.UInt32)
        df = df.with_columns((w.cum_sum() - w).alias("seq")).drop("forder")
    else:
        df = df.with_columns(pl.int_range(pl.len(), dtype=pl.UInt32).alias("seq")).drop("forder")
    records = df
    # Memory (issue 18): the clock is computed on a narrow frame of the time
    # parts; its working columns and joins never gather the records' other
    # columns (text, ids), and only ``time`` and ``time_precision`` are added
    # to the records at the end.
    df = df.select("stream", "seq", "mo", "dd", "hh", "mi", "ss", "hfrac", "fdate", "ftime", "ffrac", "fzone", "fb")

    # Fallback (dateutil) for rows with no fast-path time.
    no_fast = pl.col("mo").is_null() & pl.col("fdate").is_null() & pl.col("fb").is_not_null()
    fb_values = df.select(pl.col("fb").filter(no_fast).unique()).get_column("fb").to_list()
    if fb_values:
        fb = parse_fallback(fb_values)
        df = df.join(fb, on="fb", how="left", maintain_order="left")  # row order is stream order (below)
    else:
        df = df.with_columns(
            pl.lit(None, pl.Int32).alias("fb_year"),
            pl.lit(None, pl.Int8).alias("fb_mo"),
            pl.lit(None, pl.Int8).alias("fb_dd"),
            pl.lit(None, pl.Int8).alias("fb_hh"),
            pl.lit(None, pl.Int8).alias("fb_mi"),
            pl.lit(None, pl.Int8).alias("fb_ss"),
            pl.lit(None, pl.Int32).alias("fb_us"),
            pl.lit(None, pl.Int32).alias("fb_offset_s"),
            pl.lit(None, pl.Boolean).alias("fb_frac"),
        )
    use_fb = pl.col("mo").is_null() & pl.col("fdate").is_null() & pl.col("fb_mo").is_not_null()
    # the time each row is given (below): its full date first, then a dated fallback, then year-less parts
    wall_row = (
        pl.when(pl.col("fdate").is_not_null())
        .then(pl.col("fzone").is_null())
        .when(use_fb & pl.col("fb_year").is_not_null())
        .then(pl.col("fb_offset_s").is_null())
        .otherwise(pl.col("mo").is_not_null() | use_fb)
    )
    result.wall = bool(df.select(wall_row.any()).item())

    # ---- full timestamps (year known) ----
    full_str = pl.concat_str([pl.col("fdate"), pl.lit(" "), pl.col("ftime")])
    full_naive = full_str.str.to_datetime("%Y-%m-%d %H:%M:%S", time_unit="us", strict=False) + pl.duration(
        microseconds=_frac_us(pl.col("ffrac"))
    )
    zone = pl.col("fzone")
    off_sign = pl.when(zone.str.starts_with("-")).then(-1).otherwise(1)
    off_h = zone.str.slice(1, 2).cast(pl.Int64, strict=False)
    off_m = zone.str.replace(":", "", literal=True).str.slice(3, 2).cast(pl.Int64, strict=False)
    off_s = pl.when(zone == "Z").then(0).otherwise(off_sign * (off_h * 3600 + off_m * 60))
    full_utc_aware = (full_naive - pl.duration(seconds=off_s)).dt.replace_time_zone("UTC")
    full_time = pl.when(zone.is_not_null()).then(full_utc_aware).otherwise(_localize(full_naive, tz))

    fb_year_known = use_fb & pl.col("fb_year").is_not_null()
    fb_naive = pl.datetime(
        pl.col("fb_year").fill_null(2000),
        pl.col("fb_mo").fill_null(1),
        pl.col("fb_dd").fill_null(1),
        pl.col("fb_hh").fill_null(0),
        pl.col("fb_mi").fill_null(0),
        pl.col("fb_ss").fill_null(0),
        pl.col("fb_us").fill_null(0),
        time_unit="us",
    )
    fb_aware = (fb_naive - pl.duration(seconds=pl.col("fb_offset_s").fill_null(0))).dt.replace_time_zone("UTC")
    fb_full_time = pl.when(pl.col("fb_offset_s").is_not_null()).then(fb_aware).otherwise(_localize(fb_naive, tz))

    df = df.with_columns(
        pl.when(pl.col("fdate").is_not_null()).then(full_time).when(fb_year_known).then(fb_full_time).alias("_tfull"),
        pl.when(pl.col("fdate").is_not_null())
        .then(_precision(pl.col("ffrac")))
        .when(fb_year_known)
        .then(pl.when(pl.col("fb_frac")).then(pl.lit("us")).otherwise(pl.lit("1s")))
        .alias("_pfull"),
    )

    # A full date outside 1970-2200 (year 0000 in a damaged line) is not a time.
    df = df.with_columns(_tfull=pl.when(pl.col("_tfull").dt.year().is_between(1970, 2200)).then(pl.col("_tfull")))
    df = df.with_columns(
        _fnaive=pl.when(pl.col("fdate").is_not_null() & zone.is_null() & pl.col("_tfull").is_not_null()).then(
            full_naive
        )
    )
    df = later_in_second_pass(df, "_fnaive", "_tfull", tz)

    # ---- year-less timestamps ----
    yl = pl.col("fdate").is_null() & (pl.col("mo").is_not_null() | (use_fb & pl.col("fb_year").is_null()))
    df = df.with_columns(
        _yl=yl & pl.col("_tfull").is_null(),
        _mo=pl.coalesce("mo", pl.when(use_fb).then(pl.col("fb_mo"))),
        _dd=pl.coalesce("dd", pl.when(use_fb).then(pl.col("fb_dd"))),
        _hh=pl.coalesce("hh", pl.when(use_fb).then(pl.col("fb_hh"))),
        _mi=pl.coalesce("mi", pl.when(use_fb).then(pl.col("fb_mi"))),
        _ss=pl.coalesce("ss", pl.when(use_fb).then(pl.col("fb_ss"))),
        _us=pl.when(pl.col("mo").is_not_null())
        .then(_frac_us(pl.col("hfrac")))
        .otherwise(pl.col("fb_us").cast(pl.Int64).fill_null(0)),
        _yl_prec=pl.when(pl.col("mo").is_not_null())
        .then(_precision(pl.col("hfrac")))
        .otherwise(pl.when(pl.col("fb_frac")).then(pl.lit("us")).otherwise(pl.lit("1s"))),
    )
    # Valid month/day only (garbage like 13-45 is not a time).
    valid_md = (
        pl.col("_mo").is_between(1, 12)
        & pl.col("_dd").is_between(1, 31)
        & pl.col("_hh").is_between(0, 23)
        & pl.col("_mi").is_between(0, 59)
        & pl.col("_ss").is_between(0, 60)
    )
    df = df.with_columns(_yl=pl.col("_yl") & valid_md.fill_null(False))

    yl_rows = df.filter(pl.col("_yl")).select(
        "seq",
        "stream",
        "_mo",
        "_dd",
        "_hh",
        "_mi",
        "_ss",
        _s=_leap_seconds_expr(pl.col("_mo"), pl.col("_dd"), pl.col("_hh"), pl.col("_mi"), pl.col("_ss")),
    )
    delta = pl.col("_s") - pl.col("_s").shift(1).over("stream")
    yl_rows = yl_rows.with_columns(
        _k=(
            (delta < -ROLLOVER_BACK).cast(pl.Int32).fill_null(0)
            - (delta > ROLLOVER_FORWARD).cast(pl.Int32).fill_null(0)
        )
        .cum_sum()
        .over("stream")
    )

    # Anchors: full timestamps in the bundle, grouped by stream.
    anchors_by_stream: dict[int, tuple[datetime, str]] = {}
    full_rows = (
        df.filter(pl.col("_tfull").is_not_null())
        .group_by("stream", maintain_order=True)
        .agg(  # deterministic anchor order
            pl.col("_tfull").first().alias("t"), pl.col("seq").first().alias("seq")
        )
    )
    for row in full_rows.iter_rows(named=True):
        anchors_by_stream[row["stream"]] = (row["t"], f"a full timestamp in {streams[row['stream']].name}")
    all_anchors = list(bundle_anchors or [])
    for t, desc in anchors_by_stream.values():
        all_anchors.append((t, desc))

    zinfo = zone_info(tz)
    base_years: dict[int, int] = {}
    for sid, grp in yl_rows.group_by("stream", maintain_order=True):
        sid = sid[0]
        meta = streams[sid]
        first = grp.row(0, named=True)
        last = grp.row(grp.height - 1, named=True)
        k_last = last["_k"]
        feb29_ks = sorted(set(grp.filter((pl.col("_mo") == 2) & (pl.col("_dd") == 29)).get_column("_k").to_list()))

        def fits(y0: int, ks: list[int] = feb29_ks) -> bool:
            return all(calendar.isleap(y0 + k) for k in ks)

        source: str
        if opts.year is not None:
            y0 = opts.year
            if not fits(y0):
                bad = [y0 + k for k in feb29_ks if not calendar.isleap(y0 + k)]
                raise UsageError(
                    f"--year {opts.year} puts a 02-29 line of {meta.name} in {bad[0]}, which has no 29 February",
                    hint="give the year the log starts in",
                )
            source = "--year"
        else:
            anchor = anchors_by_stream.get(sid)
            if anchor is None and all_anchors:
                anchor, far = _meeting_anchor(first, last, k_last, all_anchors, zinfo)
                if anchor is None:
                    result.warnings.append(
                        f"{meta.name}: no other source of the bundle meets this log in time (nearest: {far[1]}, "
                        f"{far[0].isoformat()}): its year is not taken from them (not one incident?)"
                    )
            if anchor is not None:
                a_local = anchor[0].astimezone(zinfo).replace(tzinfo=None)
                y0 = _closest_year(first, last, k_last, a_local)
                source = f"{anchor[1]} ({anchor[0].isoformat()})"
            else:
                if meta.gzip_mtime:
                    ref = datetime.fromtimestamp(meta.gzip_mtime, zinfo).replace(tzinfo=None)
                    what = "gzip header mtime"
                elif meta.mtime is not None and not meta.is_stdin:
                    ref = datetime.fromtimestamp(meta.mtime, zinfo).replace(tzinfo=None)
                    what = "file mtime"
                else:
                    now = opts.now or datetime.now(UTC)
                    ref = now.astimezone(zinfo).replace(tzinfo=None)
                    what = "the current date (no file metadata)"
                y_end = ref.year
                if _as_dt(y_end, last) > ref + timedelta(days=1):
                    y_end -= 1
                y0 = y_end - k_last
                source = (
                    f"{what} of {meta.name} ({ref.isoformat(sep=' ', timespec='seconds')}), anchored at its last line"
                )
            if not fits(y0):
                for step in range(1, 9):
                    cand = [y0 - step, y0 + step]
                    ok = [c for c in cand if fits(c)]
                    if ok:
                        source += f"; moved from {y0} to {ok[0]} because 02-29 occurs"
                        y0 = ok[0]
                        break
        base_years[sid] = y0
        span = f"{y0}" if k_last == 0 else f"{y0}-{y0 + k_last} (year rollover inside)"
        result.assumptions.append(Assumption("year", span, source, scope=meta.name))

    if yl_rows.height:
        by = pl.DataFrame(
            {"stream": list(base_years.keys()), "_y0": list(base_years.values())},
            schema={"stream": pl.Int32, "_y0": pl.Int32},
        )
        yl_rows = yl_rows.join(by, on="stream", how="left").with_columns(_year=pl.col("_y0") + pl.col("_k"))
        df = df.join(yl_rows.select("seq", "_year"), on="seq", how="left", maintain_order="left")
    else:
        df = df.with_columns(pl.lit(None, pl.Int32).alias("_year"))

    ok_date = ~((pl.col("_mo") == 2) & (pl.col("_dd") == 29) & ~_is_leap_expr(pl.col("_year"))) & (
        pl.col("_dd")
        <= pl.col("_mo")
        .cast(pl.Int64)
        .replace_strict(
            list(range(1, 13)), [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], default=31, return_dtype=pl.Int64
        )
    )
    yl_naive = pl.when(pl.col("_year").is_not_null() & ok_date).then(
        pl.datetime(
            pl.when(ok_date).then(pl.col("_year")).otherwise(2000),
            pl.when(ok_date).then(pl.col("_mo")).otherwise(1),
            pl.when(ok_date).then(pl.col("_dd")).otherwise(1),
            pl.col("_hh").clip(0, 23),
            pl.col("_mi"),
            pl.col("_ss").clip(0, 59),
            time_unit="us",
        )
        + pl.duration(microseconds=pl.col("_us"))
    )
    df = df.with_columns(_ylnaive=yl_naive).with_columns(_tyl=_localize(pl.col("_ylnaive"), tz))
    df = later_in_second_pass(df, "_ylnaive", "_tyl", tz)

    time = pl.coalesce("_tfull", "_tyl")
    prec = (
        pl.when(pl.col("_tfull").is_not_null())
        .then(pl.col("_pfull"))
        .when(pl.col("_tyl").is_not_null())
        .then(pl.col("_yl_prec"))
    )
    df = df.with_columns(time=time, time_precision=prec)
    result.warnings.extend(_steps_back(df, records, streams, file_stream, tz))
    # Lines without a timestamp take the time of the nearest preceding timed line of the stream
    # ("inherited"), else of the nearest following one ("inherited-later"), else none ("unknown").
    # The timed lines include those read only for their time (sources/linetimes.py).
    earlier = pl.col("time").forward_fill().over("stream")
    later = pl.col("time").backward_fill().over("stream")
    df = df.with_columns(
        time_precision=pl.when(pl.col("time").is_null() & earlier.is_not_null())
        .then(pl.lit("inherited"))
        .when(pl.col("time").is_null() & later.is_not_null())
        .then(pl.lit("inherited-later"))
        .when(pl.col("time").is_null())
        .then(pl.lit("unknown"))
        .otherwise(pl.col("time_precision")),
        time=pl.coalesce(earlier, later),
    )
    return records.with_columns(df.get_column("time"), df.get_column("time_precision")), result


CLOCK_BACK_S = 60  # a stream's clock going back by more than this is no reordering of lines


def _steps_back(
    df: pl.DataFrame,
    records: pl.DataFrame,
    streams: dict[int, StreamMeta],
    file_stream: dict[int, tuple[int, int]],
    tz: str,
) -> list[str]:
    """A warning per stream whose clock goes back by more than CLOCK_BACK_S (the first such line, and
    how many): a server restarted on another clock (a container started with another TZ), or two
    servers' output in one file. Lines a few seconds out of order (processes sharing stdout) and the
    fall-back hour (instants, not wall times, are compared) are no step back. The lines are placed as
    stamped, so what comes after the step sorts among, or before, what came before it: said.

    ``df`` holds ``stream`` and ``time`` (the line's own timestamp, not inherited) in the row order
    of ``records`` (``file_id``, ``n``)."""
    timed = df.select(
        pl.col("stream"),
        pl.col("time"),
        records.get_column("n").alias("_n") if "n" in records.columns else pl.lit(None, pl.UInt32).alias("_n"),
        records.get_column("file_id").alias("_f"),
    ).filter(pl.col("time").is_not_null())
    # against the line before (not the latest time so far: the lines after one step back are no more steps)
    before = pl.col("time").shift(1).over("stream")
    stepped = timed.with_columns(_before=before, _back=before - pl.col("time")).filter(
        pl.col("_back") > pl.duration(seconds=CLOCK_BACK_S)
    )
    if stepped.height == 0:
        return []
    files_of: dict[int, int] = {}
    for sid, _order in file_stream.values():
        files_of[sid] = files_of.get(sid, 0) + 1
    out = []
    for (sid,), grp in stepped.group_by("stream", maintain_order=True):
        r = grp.row(0, named=True)
        meta = streams.get(int(sid)) if sid is not None else None
        name = meta.name if meta is not None else "a log"
        where = (
            f"line {r['_n']}"
            if files_of.get(int(sid), 1) == 1
            else f"line {r['_n']} of its file {file_stream[r['_f']][1] + 1} (oldest first)"
        )
        secs = r["_back"].total_seconds()
        more = f"; {grp.height - 1} more step(s) back later" if grp.height > 1 else ""
        out.append(
            f"{name}: its clock goes back by {_back_words(secs)} at {where} ({iso(r['_before'], tz)} before it, "
            f"{iso(r['time'], tz)} there){more}: a restart on another clock (a zone?), two servers' output in one file or excerpts pasted out of "
            "order; lines are placed as stamped, so the lines after it sort before those it went back over"
        )
    return out


def _back_words(seconds: float) -> str:
    s = int(round(seconds))
    if s >= 86400:
        return f"{s / 86400:.1f} days"
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    return " ".join(p for p in (f"{h} h" if h else "", f"{m} min" if m else "", f"{sec} s" if sec else "") if p)


def _as_dt(year: int, row: dict[str, Any]) -> datetime:
    mo, dd = int(row["_mo"]), int(row["_dd"])
    if mo == 2 and dd == 29 and not calendar.isleap(year):
        dd = 28
    dd = min(dd, calendar.monthrange(year, mo)[1])  # 02-30, 04-31 in a damaged line: only picks a year here
    return datetime(year, mo, dd, int(row["_hh"]), int(row["_mi"]), min(int(row["_ss"]), 59))


def _meeting_anchor(
    first: dict[str, Any], last: dict[str, Any], k_last: int, anchors: list[Any], zinfo: tzinfo
) -> tuple[Any, Any]:
    """(nearest anchor the log meets within FOREIGN_ANCHOR_DAYS or None, nearest anchor)."""
    best = None
    for a in anchors:
        local = a[0].astimezone(zinfo).replace(tzinfo=None)
        y0 = _closest_year(first, last, k_last, local)
        t0, t1 = _as_dt(y0, first), _as_dt(y0 + k_last, last)
        dist = 0.0 if t0 <= local <= t1 else min(abs((local - t0).total_seconds()), abs((local - t1).total_seconds()))
        if best is None or dist < best[0]:
            best = (dist, a)
    assert best is not None
    return (best[1] if best[0] <= FOREIGN_ANCHOR_DAYS * 86400 else None), best[1]


def _closest_year(first: dict[str, Any], last: dict[str, Any], k_last: int, anchor: datetime) -> int:
    best = None
    for y0 in (anchor.year - 1, anchor.year, anchor.year + 1):
        t0 = _as_dt(y0, first)
        t1 = _as_dt(y0 + k_last, last)
        if t0 <= anchor <= t1:
            dist = 0.0
        else:
            dist = min(abs((anchor - t0).total_seconds()), abs((anchor - t1).total_seconds()))
        if best is None or dist < best[0]:
            best = (dist, y0)
    assert best is not None
    return best[1]


def iso(value: datetime | None, tz: str) -> str | None:
    """ISO 8601 with offset in the output zone; seconds unless sub-second data exists."""
    if value is None:
        return None
    local = value.astimezone(zone_info(tz))
    spec = "seconds" if local.microsecond == 0 else "milliseconds" if local.microsecond % 1000 == 0 else "microseconds"
    return local.isoformat(timespec=spec)
