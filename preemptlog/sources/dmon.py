"""``nvidia-smi dmon`` captures, read through their header rows.

dmon prints a name row (``# gpu pwr gtemp ...``) and a units row (``# Idx W
C ...``), repeated every N samples, then one row per GPU per sample. Columns
depend on ``-s`` (p u c v m e t, newer drivers add jpg/ofa/ccpm) and ``-o``
(``D`` date ``YYYYMMDD``, ``T`` time ``HH:MM:SS``, ``DT`` both), and their
order follows the driver, not the order of the ``-s`` letters. So the parser
never uses fixed positions: every data row is split into tokens (whitespace,
or commas for ``--format csv``) and the i-th token belongs to the i-th name of
the most recent name row above it. This is also why driver 525's header,
whose columns are one character narrower than the values, reads correctly.

Accepted (see :data:`SAMPLES`): any column selection and order, any number of
GPUs per sample, headers repeated anywhere (even with a different selection:
each header governs the rows below it), a units row or none, ``-`` (or N/A)
for an unavailable value (null), leading and trailing spaces, CR LF, ``--format
csv`` and ``csv,nounit`` (the same rows, comma-separated). ``--format
csv,noheader`` has no header rows, so its columns cannot be known: such a file is
not read, and sniffing.py says which capture to make instead.
Rows whose token count differs from their header, and rows before any header,
are counted and skipped, never fatal.

A cut last row: a capture copied while dmon was still writing, or truncated, ends
without a line end in the middle of its last row. That row is no sample when it has
fewer values than its header names or a value of no shape its column takes (a
date, a time, a GPU index, a number, ``-``/N/A): a warning at its file:line says
so. A last row without a line end that has every value is a whole sample (dmon
was stopped between rows), said in a note. The source judges its own last line
(``judges_last_line``): sniffing adds no warning of its own about it. A .gz/.zst capture's end is
found by decompressing it a second time, streamed (no copy on disk: a capture can be gigabytes).

Unreadable values: in any row that has every value (not only the last), a token of no shape its
column takes (``12x4``, ``###``, ``1e999x``) is null, never a default, and the row's other values
are read; the file gets one warning that counts such values and their rows and cites the first
at its file:line with its column and its token (quoted, escaped, cut to 40 characters). A row
whose GPU index is unreadable is no sample (the same warning says how many); an unreadable
date/time is said once, as untimed (below); a cut last row is said as cut, not counted again.
``-``, N/A and a typographic dash (en dash U+2013 and kin) are unavailable (null), not unreadable.

Time: dmon writes local time (``--tz``), read as the logs' lines are: in the fall-back's
repeated hour, the rows after the clock went back take the later instant (timebase
``localize_in_order``). ``-o DT`` rows are exact to the second and are year anchors for the vLLM logs. ``-o T`` rows get their date
from the bundle: the date that puts the capture on a log's own UTC span (logs
of different days: the one it meets, never a day in the gap between them; without
logs, nearest the other sources' full timestamps); a time
that goes back by more than 12 hours is the next day (midnight crossing).
Without date columns and nothing to anchor them, and for ``-o D`` alone or no
``-o`` at all, samples are *untimed* (``time`` null): they are listed, but no
window can contain them. Every such choice is reported as an assumption.
Stamps are read by shape: a date ``YYYYMMDD`` (or ``YYYY-MM-DD``,
``YYYY/MM/DD``), a time ``HH:MM:SS`` (``.fff`` ignored) or ``HH:MM`` (timed to
the minute, ``time_precision`` ``1m``, and a note); a stamp of no such shape
leaves its row untimed, with a warning at its file:line.

MIG: columns whose unit is ``Idx`` besides ``gpu`` (``gi``, ``ci``) are read as
``<name>_idx``; with ``gpu`` they name the device a row is about.

Frame ``dmon`` (:data:`DMON_SCHEMA` lists the fixed columns; one Float64
column per metric present, named ``<metric>_<unit>``, e.g. ``fb_mb``,
``sm_pct``, ``mem_pct``, ``pwr_w``, ``gtemp_c``, ``mclk_mhz``, ``rxpci_mbps``).
"""

from __future__ import annotations

import os
import re
import zlib
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import polars as pl

from ..clock.timebase import Assumption, localize_in_order, zone_info
from ..inputs import reflow
from ..inputs.textio import compression_of
from .meets import MeetsLog
from .registry import SourceKind, SourceOutput, TimeContext, register, register_samples

if TYPE_CHECKING:
    from ..clock.timebase import Assumption
    from ..inputs.files import InputFile

KIND = "dmon"

DMON_SCHEMA = {
    "time": "Datetime(time_unit='us', time_zone='UTC')",
    "time_precision": "String",
    "gpu": "Int32",
    # ... one Float64 column per metric present ...
    "source": "String",
    "line": "UInt32",
}

# dmon column name -> frame column name (unit in the name).
KNOWN_COLUMNS = {
    "gpu": "gpu",
    "gi": "gi_idx",  # MIG GPU instance (unit Idx): with gpu and ci, the device a row is about
    "ci": "ci_idx",  # MIG compute instance
    "pwr": "pwr_w",
    "gtemp": "gtemp_c",
    "mtemp": "mtemp_c",
    "temp": "temp_c",
    "sm": "sm_pct",
    "mem": "mem_pct",
    "enc": "enc_pct",
    "dec": "dec_pct",
    "jpg": "jpg_pct",
    "ofa": "ofa_pct",
    "mclk": "mclk_mhz",
    "pclk": "pclk_mhz",
    "pviol": "pviol_pct",
    "tviol": "tviol",
    "fb": "fb_mb",
    "bar1": "bar1_mb",
    "ccpm": "ccpm_mb",
    "sbecc": "sbecc_errs",
    "dbecc": "dbecc_errs",
    "pci": "pci_errs",
    "rxpci": "rxpci_mbps",
    "txpci": "txpci_mbps",
    "date": "_date",
    "time": "_time",
}
UNIT_SLUGS = {"%": "pct", "MB/s": "mbps", "KB/s": "kbps", "W": "w", "C": "c", "MHz": "mhz", "MB": "mb"}

NAME_ROW_RE = re.compile(r"^\s*#\s*(?:(?:Date|Time)[\s,]+){0,2}gpu\b", re.I)
UNITS_ROW_RE = re.compile(r"^\s*#\s*(?:(?:YYYYMMDD|HH:MM:SS)[\s,]+){0,2}Idx\b", re.I)
TOKEN_RE = r"[^\s,]+"
MIDNIGHT_BACKSTEP = 12 * 3600  # a time-of-day step back larger than this is the next day


def _sniff(head: str) -> int:
    lines = head.splitlines()[:200]
    names = sum(1 for ln in lines if NAME_ROW_RE.match(ln))
    units = sum(1 for ln in lines if UNITS_ROW_RE.match(ln))
    if names and units:
        return 90
    if names:
        return 70
    return 0


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_") or "col"


def column_names(names: list[str], units: list[str] | None) -> list[str]:
    """Frame column names for a dmon name row (and its units row, when present)."""
    out: list[str] = []
    seen: set[str] = set()
    next_k: dict[str, int] = {}
    for i, name in enumerate(names):
        key = name.lower()
        if key in KNOWN_COLUMNS:
            col = KNOWN_COLUMNS[key]
        else:
            unit = units[i] if units and i < len(units) else ""
            slug = UNIT_SLUGS.get(unit, _slug(unit) if unit and unit != "-" else "")
            col = f"{_slug(name)}_{slug}" if slug else _slug(name)
        base, k = col, next_k.get(col, 2)  # a repeated name: col_2, col_3, ... (linear in the header's length)
        while col in seen:
            col = f"{base}_{k}"
            k += 1
        next_k[base] = k
        seen.add(col)
        out.append(col)
    return out


def _tokens(row: str) -> list[str]:
    return re.findall(TOKEN_RE, row.lstrip().lstrip("#"))


@dataclass
class _FileData:
    file: InputFile
    df: pl.DataFrame  # gpu, metrics, _date, _time, line
    has_date: bool
    has_time: bool
    bad_rows: int
    headerless_rows: int
    metrics: list[str] = field(default_factory=list)


TAIL_BYTES = 4096  # the end of the text read to see whether it ends with a line end


def _text_tail(path: str) -> bytes | None:
    """The last TAIL_BYTES bytes of the file's text (gzip and zstd decompressed), or None when they
    cannot be read (a damaged stream is said where the file is read)."""
    damaged: tuple[type[BaseException], ...] = (OSError, EOFError, ValueError, zlib.error)
    try:
        with open(path, "rb") as fh:
            comp = compression_of(fh.read(4))
            if comp is None:
                size = fh.seek(0, os.SEEK_END)
                fh.seek(max(0, size - TAIL_BYTES))
                return fh.read()
        if comp == "gzip":
            import gzip

            stream: Any = gzip.open(path, "rb")  # noqa: SIM115 - closed by the with below
        else:
            try:
                import zstandard
            except ImportError:
                return None
            damaged += (zstandard.ZstdError,)
            raw = open(path, "rb")  # noqa: SIM115 - the reader closes it
            stream = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True, closefd=True)
        last = b""
        with stream:
            while chunk := stream.read(1 << 16):
                last = (last + chunk)[-TAIL_BYTES:]
        return last
    except damaged:
        return None


def ends_mid_line(path: str) -> bool:
    """True when the file's text ends without a line end (its last line may be cut)."""
    tail = (_text_tail(path) or b"").replace(b"\x00", b"")
    return bool(tail) and not tail.endswith((b"\n", b"\r"))


def _value_read(col: str, tok: str) -> bool:
    """Whether a token has a shape its column takes (a date, a time, an index, a number, ``-``/N/A)."""
    if col == "_date":
        return re.match(DATE_RE, tok) is not None
    if col == "_time":
        return re.match(TIME_RE, tok) is not None
    if col == "gpu" or col.endswith("_idx"):
        return tok.isdigit()
    if tok.upper() in ("-", "N/A"):
        return True
    try:
        float(tok)
    except ValueError:
        return False
    return True


# An unavailable value: null by design, never an unreadable one. ``-``, N/A, and a typographic dash
# (U+2010-U+2015, U+2212: a capture that went through a typesetting editor, as on blog posts).
NULL_TOKEN_RE = "(?i)^(?:[-\u2010-\u2015\u2212]|n/a)$"
TOKEN_SHOWN = 40  # characters of an unreadable token a warning quotes


def _unread_flags(read: pl.DataFrame, cols: tuple[str, ...]) -> list[tuple[int, pl.Expr]]:
    """(column index, True where that column's token gave no value and is no ``-``/N/A) for every
    column read as a value (gpu, indices, metrics) that holds a null (a column without one holds no
    unreadable token: not looked at); dates and times are judged when timed."""
    out = []
    for i, c in enumerate(cols):
        if c in ("_date", "_time") or not read.get_column(c).null_count():
            continue  # (an unreadable stamp leaves its row untimed, said as such: _resolve)
        bad = pl.col(c).is_null()
        if c != "gpu":  # "-" is no GPU index: a row about no device
            bad = bad & ~pl.col("_tok").list.get(i).str.contains(NULL_TOKEN_RE)
        out.append((i, bad))
    return out


def read_file(path: str, display: str) -> tuple[pl.DataFrame, dict[str, Any]]:
    """Parse one dmon capture (no clock yet): columns gpu, metrics..., _date, _time, line."""

    # Quoted (> ), fenced or indented captures read like plain ones (reflow.py);
    # an author's elision line (..., …) between samples is no sample.
    scanned = reflow.scan(path, join=False)
    lf = scanned.with_columns(s=pl.col("line").str.strip_chars())
    lf = lf.filter((pl.col("s") != "") & ~pl.col("s").str.contains(r"^(?:\.{3,}|…)$"))
    is_hash = pl.col("s").str.starts_with("#")
    is_name = is_hash & pl.col("s").str.contains(r"(?i)^#\s*(?:(?:Date|Time)[\s,]+){0,2}gpu\b")
    lf = lf.with_columns(_is_hash=is_hash, _is_name=is_name, _hdr=is_name.cast(pl.UInt32).cum_sum())
    # Header rows: name rows plus the units row that follows each (few distinct texts).
    hdr = (
        lf.filter(pl.col("_is_hash"))
        .select("_hdr", "_is_name", pl.concat_str([pl.lit("\x00"), pl.col("s")]).str.slice(1).alias("s"))
        .collect()
    )
    data = (
        lf.filter(~pl.col("_is_hash"))
        .select(pl.col("n").alias("line"), "_hdr", pl.col("s").str.extract_all(TOKEN_RE).alias("_tok"))
        .collect()
    )
    names_by_hdr: dict[int, list[str]] = {}
    units_by_hdr: dict[int, list[str]] = {}
    if hdr.height:
        first_rows = hdr.group_by("_hdr", "_is_name", maintain_order=True).agg(pl.col("s").first())
        for h, is_nm, s in first_rows.iter_rows():
            if h == 0:
                continue
            if is_nm:
                names_by_hdr[h] = _tokens(s)
            elif UNITS_ROW_RE.match(s) and h not in units_by_hdr:
                units_by_hdr[h] = _tokens(s)
    # A file that ends in the middle of its last line: that line, when it is a data row, is judged by
    # the columns its header promises (cut: skipped and said; whole: a sample, noted).
    cut_line = open_line = None
    if data.height and ends_mid_line(path):
        last_n = scanned.select(pl.col("n").max()).collect().item()
        last = data.filter(pl.col("line") == last_n)
        if last.height and (h := last.get_column("_hdr")[0]) in names_by_hdr:
            want = column_names(names_by_hdr[h], units_by_hdr.get(h))
            toks = last.get_column("_tok")[0].to_list()
            short = len(toks) < len(want)
            if short or (len(toks) == len(want) and not all(map(_value_read, want, toks))):
                cut_line = int(last_n)
                data = data.filter(pl.col("line") != last_n)
            elif len(toks) == len(want):
                open_line = int(last_n)  # (more values than its header: a bad row, counted below)
    # Group header ids by identical column layout.
    layouts: dict[tuple[str, ...], list[int]] = {}
    for h, names in names_by_hdr.items():
        cols = tuple(column_names(names, units_by_hdr.get(h)))
        layouts.setdefault(cols, []).append(h)
    parts = []
    unread = []  # per layout: the rows holding a token that gave no value (few; usually none)
    bad = 0
    headerless = data.filter(pl.col("_hdr") == 0).height
    for cols, ids in layouts.items():
        sub = data.filter(pl.col("_hdr").is_in(ids))
        ok = sub.filter(pl.col("_tok").list.len() == len(cols))
        bad += sub.height - ok.height
        if ok.height == 0:
            continue
        exprs = []
        for i, c in enumerate(cols):
            tok = pl.col("_tok").list.get(i)
            if c in ("_date", "_time"):
                exprs.append(tok.alias(c))
            elif c == "gpu":
                exprs.append(tok.cast(pl.Int32, strict=False).alias(c))
            else:
                exprs.append(pl.when(tok == "-").then(None).otherwise(tok).cast(pl.Float64, strict=False).alias(c))
        read = ok.select(pl.col("line"), pl.col("_tok"), *exprs)
        # A token of no shape its column takes (12x4, ###, 1e999x) is null, never a default, and said.
        if flags := _unread_flags(read, cols):
            names = names_by_hdr[ids[0]]
            found = (
                read.select(
                    "line",
                    "_tok",
                    _n=pl.sum_horizontal([f.cast(pl.UInt32) for _, f in flags]),
                    _gpu=pl.col("gpu").is_null(),  # (every name row names gpu)
                    _first=pl.coalesce([pl.when(f).then(pl.lit(i, pl.UInt32)) for i, f in flags]),
                )
                .filter(pl.col("_n") > 0)
                .sort("line")
            )
            if found.height:
                line, toks, _, _, i = found.row(0)
                unread.append(
                    (
                        int(found.get_column("_n").sum()),
                        found.height,
                        int(found.get_column("_gpu").sum()),
                        (int(line), names[i], str(toks[i])),
                    )
                )
        parts.append(read.drop("_tok"))
    if parts:
        df = pl.concat(parts, how="diagonal_relaxed").sort("line")
    else:
        df = pl.DataFrame(schema={"line": pl.UInt32, "gpu": pl.Int32})
    for c, dt in (("gpu", pl.Int32), ("_date", pl.String), ("_time", pl.String)):
        if c not in df.columns:
            df = df.with_columns(pl.lit(None, dt).alias(c))
    facts = {
        "file": display,
        "rows": df.height,
        "bad_rows": bad,
        "headerless_rows": headerless,
        "layouts": len(layouts),
        "cut_last_row": cut_line,  # the line of a last row cut mid-row (skipped), else None
        "unterminated_last_row": open_line,  # the line of a whole last row without a line end (read)
        # values whose token has no shape their column takes (null), the rows holding them, those of
        # them without a GPU index (no sample), and the first: (line, dmon column name, token)
        "unread_values": sum(u[0] for u in unread),
        "unread_rows": sum(u[1] for u in unread),
        "unread_gpu_rows": sum(u[2] for u in unread),
        "unread_first": min((u[3] for u in unread), default=None),
    }
    return df, facts


# dmon writes ``YYYYMMDD`` and ``HH:MM:SS``; a capture passed through other hands (a reformatted
# paste, another logger) may say ``YYYY-MM-DD``/``YYYY/MM/DD`` and ``HH:MM`` (no seconds) or
# ``HH:MM:SS.fff``. Each token is read by its own shape; one that fits none leaves its row untimed
# and counted (never silently).
DATE_RE = r"^(\d{4})[-/.]?(\d{2})[-/.]?(\d{2})$"
TIME_RE = r"^(\d{1,2}):(\d{2})(?::(\d{2})(?:[.,]\d+)?)?$"


def _day_expr() -> pl.Expr:
    """The ``_date`` token as ``YYYYMMDD`` (null when it has no date shape)."""
    return pl.col("_date").str.replace(DATE_RE, "${1}${2}${3}").str.to_date("%Y%m%d", strict=False)


def _secs_expr() -> pl.Expr:
    """Seconds since midnight of the ``_time`` token (null when it has no time-of-day shape)."""
    parts = [pl.col("_time").str.extract(TIME_RE, k).cast(pl.Int64, strict=False) for k in (1, 2, 3)]
    secs = parts[0] * 3600 + parts[1] * 60 + parts[2].fill_null(0)
    return pl.when((parts[0] < 24) & (parts[1] < 60) & (parts[2].fill_null(0) < 60)).then(secs)


def _precision_expr() -> pl.Expr:
    """``1s``, or ``1m`` for a time written without seconds (``HH:MM``)."""
    has_s = pl.col("_time").str.extract(TIME_RE, 3).is_not_null()
    return pl.when(has_s).then(pl.lit("1s")).otherwise(pl.lit("1m"))


def _naive_expr() -> pl.Expr:
    return _day_expr().cast(pl.Datetime("us")) + pl.duration(seconds=_secs_expr())


class DmonParsed(MeetsLog):
    MEETS_WHAT, MEETS_KIND = "dmon samples", KIND
    MEETS_WALL = True  # dmon prints the machine's wall clock, no offset

    def __init__(self, files: list[InputFile]) -> None:
        self.items: list[tuple[InputFile, pl.DataFrame, dict[str, Any]]] = []
        for f in files:
            df, facts = read_file(str(f.path), f.display)
            self.items.append((f, df, facts))

    def anchors(self) -> list[tuple[datetime, str]]:
        out = []
        for f, df, _ in self.items:
            full = df.filter(pl.col("_date").is_not_null() & pl.col("_time").is_not_null())
            if full.height:
                t = full.select(_naive_expr().min()).item()
                if t is not None:
                    # Local time read as UTC: good to within a day, enough to choose a year.
                    out.append((t.replace(tzinfo=UTC), f"dmon -o DT date in {f.display}"))
        return out

    def _resolve(self, ctx: TimeContext) -> SourceOutput:
        out = SourceOutput()
        frames = []
        for f, df, facts in self.items:
            if facts["bad_rows"]:
                out.warnings.append(
                    f"{f.display}: {facts['bad_rows']} dmon row(s) do not match their header's columns (skipped)"
                )
                out.partial = True
            if facts["headerless_rows"]:
                out.warnings.append(f"{f.display}: {facts['headerless_rows']} row(s) before any dmon header (skipped)")
            if facts.get("cut_last_row"):
                out.warnings.append(
                    f"{f.display}:{facts['cut_last_row']}: the last dmon row is cut (the file ends in the middle of "
                    "it, without a line end: truncated, or still being written): fewer values than its header names "
                    "or a value cut short, not read as a sample"
                )
                out.partial = True
            elif facts.get("unterminated_last_row"):
                out.notes.append(
                    f"{f.display}:{facts['unterminated_last_row']}: the file ends without a line end; its last dmon "
                    "row has every value its header names and was read as a sample"
                )
            if facts.get("unread_values"):
                line, name, tok = facts["unread_first"]
                shown = repr(tok[:TOKEN_SHOWN]) + ("…" if len(tok) > TOKEN_SHOWN else "")
                gpu_rows = facts["unread_gpu_rows"]
                out.warnings.append(
                    f"{f.display}:{line}: {facts['unread_values']} dmon value(s) in {facts['unread_rows']} row(s) "
                    f"have no shape their column takes (first: {name} {shown}): read as missing (null), the rows' "
                    "other values kept"
                    + (f"; {gpu_rows} row(s) without a readable GPU index are no sample" if gpu_rows else "")
                )
                out.partial = True
            df = df.filter(pl.col("gpu").is_not_null() | pl.lit(df.height == 0))
            has_date = df.get_column("_date").is_not_null().any() if df.height else False
            has_time = df.get_column("_time").is_not_null().any() if df.height else False
            if has_time:
                # A stamp dmon's clock columns hold but no date/time shape fits: that row is untimed, said.
                stamp = _secs_expr().is_null() | (_day_expr().is_null() if has_date else pl.lit(False))
                unread = df.filter(pl.col("_time").is_not_null() & stamp)
                if unread.height:
                    first = unread.row(0, named=True)
                    shown = " ".join(x for x in (first["_date"], first["_time"]) if x is not None)
                    out.warnings.append(
                        f"{f.display}:{first['line']}: {unread.height} dmon sample(s) have a date/time that is not "
                        f"YYYYMMDD HH:MM[:SS] (first: {shown!r}): untimed, no event reads them"
                    )
                    out.partial = True
                if df.filter(pl.col("_time").is_not_null() & ~stamp).height and (
                    df.select((_precision_expr() == "1m") & ~stamp).to_series().any()
                ):
                    out.notes.append(
                        f"{f.display}: dmon times without seconds (HH:MM): its samples are timed to the minute"
                    )
            if has_date and has_time:
                df = localize_in_order(df, _naive_expr(), ctx.tz).with_columns(time_precision=_precision_expr())
            elif has_time:
                readable = bool(df.select(_secs_expr().is_not_null().any()).item())
                df, assumption = _date_for_time_only(df, ctx, f.display)
                if assumption is not None:
                    out.assumptions.append(assumption)
                elif readable:
                    out.notes.append(
                        f"{f.display}: dmon -o T gives the time of day but no date, and nothing else in the bundle "
                        "has a date: its samples are untimed"
                    )
            else:
                what = "only the date (-o D)" if has_date else "no date or time columns (run dmon with -o DT)"
                out.notes.append(f"{f.display}: dmon capture has {what}: its {df.height} samples are untimed")
                df = df.with_columns(time=pl.lit(None, pl.Datetime("us", "UTC")), time_precision=pl.lit("unknown"))
            metrics = [c for c in df.columns if c not in ("line", "gpu", "_date", "_time", "time", "time_precision")]
            frames.append(
                df.select(
                    pl.col("time").cast(pl.Datetime("us", "UTC")),
                    pl.col("time_precision").cast(pl.String),
                    "gpu",
                    *metrics,
                    pl.lit(f.display).alias("source"),
                    pl.col("line").cast(pl.UInt32),
                )
            )
        if frames:
            out.frames["dmon"] = pl.concat(frames, how="diagonal_relaxed")
        out.counters["dmon"] = [facts for _, _, facts in self.items]
        return out


def _date_for_time_only(df: pl.DataFrame, ctx: TimeContext, display: str) -> tuple[pl.DataFrame, Assumption | None]:
    """Give a time-only capture its dates. Returns (frame with time, Assumption | None)."""

    df = df.with_columns(_secs=_secs_expr(), _prec=_precision_expr())
    untimed = df.filter(pl.col("_secs").is_null()).with_columns(
        time=pl.lit(None, pl.Datetime("us", "UTC")), time_precision=pl.lit("unknown")
    )
    df = df.filter(pl.col("_secs").is_not_null())
    if df.height == 0:
        return untimed.drop("_secs", "_prec"), None
    df = df.with_columns(_day=(pl.col("_secs").diff() < -MIDNIGHT_BACKSTEP).fill_null(False).cast(pl.Int32).cum_sum())
    zinfo = zone_info(ctx.tz)
    refs: tuple[tuple[datetime, datetime], ...]
    if ctx.reference is not None:
        # each log's own span: the hull of two logs far apart holds days no log ran on
        refs = ctx.spans or (ctx.reference,)
        basis = "the time span of the vLLM logs"
    else:
        full = [a for a, _ in ctx.anchors]
        if not full:
            timed = df.with_columns(time=pl.lit(None, pl.Datetime("us", "UTC")), time_precision=pl.lit("unknown"))
            return pl.concat([timed.drop("_day"), untimed]).sort("line").drop("_secs", "_prec"), None
        refs = ((min(full), max(full)),)
        basis = "the full timestamps of the other sources"
    first = df.row(0, named=True)
    last = df.row(df.height - 1, named=True)
    best = None
    for ref0, ref1 in refs:
        l0 = ref0.astimezone(zinfo).replace(tzinfo=None)
        l1 = ref1.astimezone(zinfo).replace(tzinfo=None)
        d = l0.date() - timedelta(days=1)
        while d <= l1.date() + timedelta(days=1):
            start = datetime(d.year, d.month, d.day) + timedelta(seconds=first["_secs"])
            end = datetime(d.year, d.month, d.day) + timedelta(days=last["_day"], seconds=last["_secs"])
            overlap = (min(end, l1) - max(start, l0)).total_seconds()
            dist = 0.0 if overlap >= 0 else -overlap
            key = (dist, -max(overlap, 0.0), d)  # ties: the earliest day
            if best is None or key < best[0]:
                best = (key, d)
            d += timedelta(days=1)
    assert best is not None
    day0 = best[1]
    naive = pl.datetime(day0.year, day0.month, day0.day, time_unit="us") + pl.duration(
        days=pl.col("_day"), seconds=pl.col("_secs")
    )
    df = localize_in_order(df, naive, ctx.tz).with_columns(time_precision=pl.col("_prec")).drop("_day")
    df = pl.concat([df, untimed]).sort("line").drop("_secs", "_prec")
    days = last["_day"]
    span = day0.isoformat() if not days else f"{day0.isoformat()} (+{days} day(s): crosses midnight)"
    return df, Assumption("dmon date", span, f"dmon -o T has no date; chose the day closest to {basis}", scope=display)


def _parse(files: list[InputFile]) -> DmonParsed:
    return DmonParsed(files)


register(
    SourceKind(
        name=KIND,
        description="nvidia-smi dmon capture (any -s selection, -o D/T/DT, any GPU count)",
        sniff=_sniff,
        parse=_parse,
        judges_last_line=True,
        appends=True,
    )
)

# Accepted shapes: (capture text, expected rows as dicts of frame columns).
SAMPLES: list[tuple[str, list[dict[str, Any]]]] = [
    (
        "# gpu     sm    mem    enc    dec    jpg    ofa \n"
        "# Idx      %      %      %      %      %      % \n"
        "    0     46     26      0      1      0      0 \n",
        [{"gpu": 0, "sm_pct": 46.0, "mem_pct": 26.0, "jpg_pct": 0.0, "ofa_pct": 0.0}],
    ),
    (  # driver 525: values one character wider than the header
        "# gpu   pwr gtemp mtemp    sm   mem   enc   dec  mclk  pclk    fb  bar1\n"
        "# Idx     W     C     C     %     %     %     %   MHz   MHz    MB    MB\n"
        "    0     29     49      -     1      3      0      0   4006    974    387     16 \n",
        [{"gpu": 0, "pwr_w": 29.0, "mtemp_c": None, "mclk_mhz": 4006.0, "fb_mb": 387.0, "bar1_mb": 16.0}],
    ),
    (
        "#Date       Time        gpu   pwr gtemp mtemp    sm   mem   enc   dec  mclk  pclk sbecc dbecc   pci rxpci txpci\n"
        "#YYYYMMDD   HH:MM:SS    Idx     W     C     C     %     %     %     %   MHz   MHz  errs  errs  errs  MB/s  MB/s\n"
        " 20210102   19:12:31      0    37    19     -     0     0     0     0  4006   582     -     -     0     0     1\n",
        [{"gpu": 0, "pwr_w": 37.0, "sbecc_errs": None, "txpci_mbps": 1.0, "_date": "20210102", "_time": "19:12:31"}],
    ),
    (  # -o T, two GPUs, header repeated
        "#Time        gpu    fb  bar1\n#HH:MM:SS     Idx    MB    MB\n"
        " 23:59:59      0  1000    5\n 23:59:59      1  2000    5\n"
        "#Time        gpu    fb  bar1\n#HH:MM:SS     Idx    MB    MB\n"
        " 00:00:01      0  1100    5\n 00:00:01      1  2100    5\n",
        [
            {"gpu": 0, "fb_mb": 1000.0, "_time": "23:59:59"},
            {"gpu": 1, "fb_mb": 2000.0},
            {"gpu": 0, "fb_mb": 1100.0, "_time": "00:00:01"},
            {"gpu": 1, "fb_mb": 2100.0},
        ],
    ),
    (  # --format csv style
        "# gpu, pwr, sm, fb\n# Idx, W, %, MB\n 0, 30, 5, 800\n",
        [{"gpu": 0, "pwr_w": 30.0, "sm_pct": 5.0, "fb_mb": 800.0}],
    ),
    (  # -o DT --format csv: the header rows name the date and time columns too
        "#Date, Time, gpu, sm, mem, fb\n#YYYYMMDD, HH:MM:SS, Idx, %, %, MB\n20260501, 10:00:00, 0, 5, 3, 1000\n",
        [{"gpu": 0, "sm_pct": 5.0, "mem_pct": 3.0, "fb_mb": 1000.0, "_date": "20260501", "_time": "10:00:00"}],
    ),
    (  # --format csv,nounit: the name row alone
        "#gpu, sm, mem, fb\n 0, 5, 3, 1000\n 1, 6, -, 2000\n",
        [{"gpu": 0, "sm_pct": 5.0, "fb_mb": 1000.0}, {"gpu": 1, "mem_pct": None, "fb_mb": 2000.0}],
    ),
]

register_samples(KIND, SAMPLES)
