"""Prometheus scrape times: sample timestamps, separator lines, file names, the file mtime; phase 2's
first step (each file's samples on its own clock, before the pipeline moves it: ``place``)."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

import polars as pl

from ...clock.timebase import Assumption, zone_info
from ..registry import SourceOutput
from .counters import _empty_frames, _facts
from .names import ANSWERS, PLACED, PromFiles, _ts_to_us, created
from .text import CUT

if TYPE_CHECKING:
    from ...inputs.files import InputFile
    from ..registry import SourceOutput, TimeContext


# Time in a file name.
NAME_ISO_RE = re.compile(
    r"(?<!\d)(\d{4})-?(\d\d)-?(\d\d)[T_ -]?(\d\d)[:\-_.]?(\d\d)[:\-_.]?(\d\d)(?:[.,](\d{1,6}))?(Z|[+-]\d\d:?\d\d)?(?!\d)"
)


# The scrape time of standard input's last untimed scrape (its assumption's words).
STDIN_READ = "no later than the moment preemptlog read standard input"
# The scrape time of a file's last untimed scrape when its name gives none (its assumption's words).
FILE_MTIME = "the file mtime"


NAME_EPOCH_RE = re.compile(r"(?<!\d)(1\d{9})(?:\d{3})?(?:\.(\d+))?(?!\d)")


def _parse_time_text(text: str) -> tuple[datetime | None, bool]:
    """(datetime, has_zone) from a separator or file-name time; naive means local time."""
    text = text.strip()
    if not text:
        return None, False
    m = re.fullmatch(r"(\d{10})(\d{3})?(?:\.(\d+))?", text)
    if m:
        sec = float(m.group(1) + (("." + m.group(3)) if m.group(3) and not m.group(2) else ""))
        if m.group(2):
            sec = int(m.group(1) + m.group(2)) / 1000.0
        return datetime.fromtimestamp(sec, UTC), True
    try:
        iso = text.replace(",", ".")
        if iso.endswith("Z"):
            iso = iso[:-1] + "+00:00"
        dt = datetime.fromisoformat(iso)
        return dt, dt.tzinfo is not None
    except ValueError:
        pass
    import warnings

    from dateutil import parser as dparser

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # unknown zone names (CEST...) -> local time in --tz
            dt = dparser.parse(text)
        return dt, dt.tzinfo is not None
    except (ValueError, OverflowError, ArithmeticError):  # dateutil: decimal.InvalidOperation on huge digit runs
        return None, False


def _name_time(name: str) -> tuple[datetime | None, bool, str | None]:
    base = PurePosixPath(name.replace("!", "/")).name
    m = NAME_ISO_RE.search(base)
    if m:
        y, mo, d, hh, mi, ss, frac, zone = m.groups()
        try:
            dt = datetime(int(y), int(mo), int(d), int(hh), int(mi), int(ss), int((frac or "0").ljust(6, "0")[:6]))
        except ValueError:
            dt = None
        if dt is not None and 1990 <= dt.year <= 2200:
            if zone:
                z = "+00:00" if zone == "Z" else zone if ":" in zone else zone[:3] + ":" + zone[3:]
                try:
                    dt = datetime.fromisoformat(dt.isoformat() + z)
                except ValueError:  # an impossible offset (+27:00): the name carries no usable zone
                    zone = None
            return dt, zone is not None, m.group(0)
    m = NAME_EPOCH_RE.search(base)
    if m:
        raw = m.group(0)
        digits = raw.split(".")[0]
        sec = int(digits) / 1000.0 if len(digits) == 13 else float(raw)
        return datetime.fromtimestamp(sec, UTC), True, raw
    return None, False, None


def file_name_time(f: InputFile) -> tuple[datetime | None, bool, str | None]:
    """The time in the file's name (:func:`_name_time`), else in another name it was found by (a hard
    link, a byte-for-byte copy read once: sources/copies.py): a name that carries a time wins over the
    file's mtime, whichever name sorts first."""
    return next((nt for name in f.names() if (nt := _name_time(name))[0] is not None), (None, False, None))


def _to_utc(dt: datetime, has_zone: bool, tz: str) -> datetime:

    if has_zone:
        return dt.astimezone(UTC)
    return dt.replace(tzinfo=zone_info(tz)).astimezone(UTC)


def _place(parsed: PromFiles, ctx: TimeContext) -> SourceOutput:
    """Each file's samples with their scrape times, on the file's own clock: frame ``prom_placed``
    (the pipeline moves its clock, per file, before :func:`_combine`)."""

    out = SourceOutput()
    frames = []
    answers: list[tuple[str, float]] = []
    dated = list(created())
    for fd in parsed.files:
        f = fd.file
        if fd.answer_s is not None and fd.n_scrapes == 1:  # a capture file: one scrape, stamped at its answer
            answers.append((f.display, fd.answer_s))
        out.warnings.extend(f"{f.display}: {w}" for w in fd.warnings)
        if any("skipped" in w or w.startswith(CUT) for w in fd.warnings):
            out.partial = True  # input that was there but could not be read (or was cut): exit 5, like every source
        s = fd.samples
        if s.height == 0:
            out.warnings.append(f"{f.display}: no vLLM metrics (vllm:...) found")
            continue
        # Scrape times from the separators, the file name, the file mtime.
        scrape_t: dict[int, datetime] = {}
        used: dict[str, int] = {}
        timed_scrapes = set(s.filter(pl.col("ts_us").is_not_null()).get_column("scrape").unique().to_list())
        if timed_scrapes:
            used["sample timestamps" if fd.fmt == "text" else "the times in the JSON answer"] = len(timed_scrapes)
        for sc, text in fd.sep_times.items():
            if sc in timed_scrapes:
                continue
            dt, zoned = _parse_time_text(text)
            if dt is not None:
                scrape_t[sc] = _to_utc(dt, zoned, ctx.tz)
                if not zoned and f.display not in out.wall:
                    out.wall.append(f.display)
                # preemptlog capture's own files: the time the scraper recorded, with its offset (a fact)
                how = "recorded" if fd.recorded and zoned else "separator lines"
                used[how] = used.get(how, 0) + 1
            elif any(ch.isdigit() for ch in text):  # a time meant, not read ("--- pod a ---" names none)
                out.warnings.append(
                    f"{f.display}: scrape {sc + 1}'s separator line names a time that is not read "
                    f"({text.strip()[:60]!r}): give it as date -Is or date +%s prints it"
                )
        untimed = [sc for sc in range(fd.n_scrapes) if sc not in timed_scrapes and sc not in scrape_t]
        detail = ""
        if untimed:
            last = fd.n_scrapes - 1
            ndt, nzoned, ntext = file_name_time(f)
            if fd.n_scrapes == 1 and ndt is not None:
                scrape_t[0] = _to_utc(ndt, nzoned, ctx.tz)
                if not nzoned and f.display not in out.wall:
                    out.wall.append(f.display)
                used["the file name"] = 1
                detail = f" ({ntext}{'' if nzoned else ', local time in ' + ctx.tz})"
            elif last in untimed and (written := f.written_at()) is not None:
                scrape_t[last] = datetime.fromtimestamp(written, UTC)
                used[FILE_MTIME] = 1
                detail = f" ({scrape_t[last].isoformat(timespec='seconds')})"
            elif last in untimed and (read := f.read_at()) is not None:
                # Standard input has no name and no mtime; a scrape piped in (`curl .../metrics |
                # preemptlog analyze -`) was taken no later than preemptlog read it: that moment is its
                # time, as a file's mtime is for a file (an assumption, said), to the second rounded up
                # (still no earlier than the scrape). Its reading then counts like a file's.
                scrape_t[last] = datetime.fromtimestamp(math.ceil(read), UTC)
                used[STDIN_READ] = 1
                detail = f" ({scrape_t[last].isoformat(timespec='seconds')}, used as its time)"
            still = [sc for sc in untimed if sc not in scrape_t]
            if still:
                out.warnings.append(
                    f"{f.display}: {len(still)} of {fd.n_scrapes} scrape(s) have no time (no sample timestamps, "
                    "no separator time): their counter increases are counted but not placed in time; "
                    "write '# scrape <ISO time>' before each scrape"
                )
        for what, k in used.items():
            if what == "recorded":
                continue
            extra = detail if what in ("the file name", FILE_MTIME, STDIN_READ) else ""
            out.assumptions.append(
                Assumption("scrape time", what + extra, f"{k} of {fd.n_scrapes} scrape(s)", scope=f.display)
            )
        st = pl.DataFrame(
            {"scrape": list(scrape_t), "_st": list(scrape_t.values())},
            schema={"scrape": pl.Int32, "_st": pl.Datetime("us", "UTC")},
        )
        folder = str(PurePosixPath(f.display.replace("!", "/")).parent)
        s = (
            s.join(st, on="scrape", how="left")
            .with_columns(
                time=pl.coalesce(
                    pl.from_epoch(pl.col("ts_us"), time_unit="us").dt.replace_time_zone("UTC"), pl.col("_st")
                ),
                source=pl.lit(f.display),
                stream=pl.lit(f.stream, pl.Int32),
                scope=pl.when(pl.col("instance").is_not_null())
                .then(pl.lit(folder + "|") + pl.col("instance"))
                .otherwise(pl.lit(folder)),
                scrape_id=pl.concat_str([pl.lit(f"{f.file_id}:"), pl.col("scrape").cast(pl.String)]),
                # A counter's ``_created`` (epoch seconds): a time, so the pipeline moves it with the file
                created_at=pl.when(pl.col("name").is_in(dated)).then(
                    pl.from_epoch(_ts_to_us(pl.col("value")), time_unit="us").dt.replace_time_zone("UTC")
                ),
            )
            .drop("_st")
        )
        frames.append(s)
    out.frames[ANSWERS] = pl.DataFrame(answers, schema={"source": pl.String, "answer_s": pl.Float64}, orient="row")
    if not frames:
        out.frames.update(_empty_frames())
        out.counters["prometheus"] = _facts(None, None, parsed)
        return out
    out.frames[PLACED] = pl.concat(frames, how="vertical")
    return out
