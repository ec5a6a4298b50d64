"""The compiled log pass (GitHub issue 36): the records of a plain vLLM/SGLang log at grep's pace.

``sources/vllm_log.py`` reads a log with one lazy polars query (the *polars pass*, the reference).
This package is a second implementation of the same query for plain (uncompressed, unrepaired)
files: a C extension (``_scan.c`` + ``scan_core.c``, built by setuptools at install, optional)
that maps the file, splits it into byte ranges on line boundaries, and scans them on every core
without the GIL: lines split with memchr, the leftmost literal marker, and the record's fields
from the *same regex strings* as the polars pass (compiled by :mod:`.regex` into programs for a
small backtracking matcher). The columns reach polars through the Arrow C data interface
(``Batch.__arrow_c_array__``), no Python object per row.

Lines the C pass does not decide itself (a NUL byte; a marker line with ESC, 0x1F, an inner CR,
invalid UTF-8, JSON, or a character a Unicode class cannot tabulate) come back by position; they
are written to a small file and read by the polars pass's own query (``query`` below), so every
row is the reference's. What is data and what is code: ``scan_core.c``'s header comment.

``PREEMPTLOG_SCANNER=polars`` turns the compiled pass off (so does a missing extension: no
compiler at install). :func:`status` says which pass runs (``analyze -v``).
"""

from __future__ import annotations

import mmap
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass

import polars as pl

from ...inputs import reflow
from ...inputs.textio import compression_of, scan_lines
from .regex import Program, Unsupported, compile_regex

try:
    from . import _scan  # type: ignore[attr-defined]
except ImportError:  # no compiler at install: the polars pass reads every log
    _scan = None

ENV = "PREEMPTLOG_SCANNER"
WINDOW_BYTES = 128 << 20  # bytes scanned per call (memory: a window's columns are held at once)
SLOW_MAX_BYTES = 64 << 20  # more slow bytes than this in one window: the polars pass reads the file

# The batch columns, in _scan.c's order (scan_core.h C_*).
COLUMNS = (
    "n",
    "mk",
    "level",
    "proc",
    "compose",
    "mo",
    "dd",
    "hh",
    "mi",
    "ss",
    "hfrac",
    "fdate",
    "ftime",
    "ffrac",
    "fzone",
    "fb",
    "text",
    "req_id",
    "max_tokens",
    "prompt_tokens",
)
# The regexes by role, in scan_core.h P_* order, and the fields read from each (F_* order).
ROLES = ("header", "full", "fallback", "proc", "compose", "req_id", "max_tokens", "ids_end")
FIELDS = (
    ("header", "level"),
    ("header", "mo"),
    ("header", "dd"),
    ("header", "hh"),
    ("header", "mi"),
    ("header", "ss"),
    ("header", "hfrac"),
    ("full", "fdate"),
    ("full", "ftime"),
    ("full", "ffrac"),
    ("full", "fzone"),
    ("fallback", "fb"),
    ("proc", "proc"),
    ("compose", "compose"),
    ("req_id", "req_id"),
    ("max_tokens", "max_tokens"),
)


@dataclass(frozen=True)
class Spec:
    """What the polars pass does, as data (sources/vllm_log.py builds it: :func:`vllm_log.fast_spec`).

    ``regexes``: role -> (pattern, {field: group name or number}); ``literals`` the markers in
    the order of the polars pass's alternation (``marker`` Enum order); ``hot`` the request
    markers (fields extracted, no text); ``strip`` the characters stripped from a request id's
    end; ``ids_start`` the literal that opens the token id list (``ids_end`` ends it).
    """

    literals: tuple[str, ...]
    hot: frozenset[str]
    regexes: tuple[tuple[str, str, tuple[tuple[str, str | int], ...]], ...]
    ids_start: str
    strip: str
    head_chars: int


_CONFIGS: dict[Spec, object] = {}
_REFUSED: dict[Spec, str] = {}


def _config(spec: Spec) -> object | None:
    """The C configuration of a spec (compiled once), or None (and the reason in _REFUSED)."""
    if spec in _CONFIGS:
        return _CONFIGS[spec]
    if spec in _REFUSED or _scan is None:
        return None
    try:
        cfg = _build(spec)
    except (Unsupported, ValueError) as exc:
        _REFUSED[spec] = str(exc)
        return None
    _CONFIGS[spec] = cfg
    return cfg


def _build(spec: Spec) -> object:
    assert _scan is not None
    markers = []
    for m in spec.literals:
        b = m.encode("utf-8")
        if len(b) < 4 or not b.isascii() or any(c < 0x20 for c in b):
            raise Unsupported(f"marker {m!r}: the compiled pass takes ASCII markers of 4 bytes or more")
        markers.append(b)
    if len(markers) > 255:
        raise Unsupported("more than 255 markers")
    progs: dict[str, Program] = {}
    fields: dict[tuple[str, str], str | int] = {}
    for role, pattern, groups in spec.regexes:
        progs[role] = compile_regex(pattern)
        for name, g in groups:
            fields[(role, name)] = g
    if set(progs) != set(ROLES):
        raise Unsupported(f"regex roles {sorted(progs)}")
    group_ids = []
    for role, name in FIELDS:
        g = fields.get((role, name))
        group_ids.append(-1 if g is None else progs[role].group(g))
    hot = bytes(1 if m in spec.hot else 0 for m in spec.literals)
    return _scan.Config(
        markers,
        hot,
        [progs[r].pack() for r in ROLES],
        tuple(group_ids),
        spec.ids_start.encode("utf-8"),
        spec.strip.encode("utf-8"),
        spec.head_chars,
    )


def enabled() -> bool:
    """The compiled pass may run: the extension is built and PREEMPTLOG_SCANNER is not ``polars``."""
    return _scan is not None and os.environ.get(ENV, "").strip().lower() != "polars"


def status(spec: Spec | None = None) -> str:
    """Which pass reads the logs, in a few words (``analyze -v``)."""
    if _scan is None:
        return "polars pass (the compiled pass is not built: no C compiler at install)"
    if os.environ.get(ENV, "").strip().lower() == "polars":
        return f"polars pass ({ENV}=polars)"
    if spec is not None and _config(spec) is None:
        return f"polars pass (the compiled pass refused the markers or regexes: {_REFUSED.get(spec, '?')})"
    return "compiled pass (preemptlog.sources.fastscan; the polars pass for compressed or repaired files)"


def eligible(path: str, wraps: bool = True) -> bool:
    """A plain file that needs no repair (reflow.py): the compiled pass reads it as polars would."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
    except OSError:
        return False
    if compression_of(head) is not None:
        return False
    return not reflow.plan(path, wraps=wraps).needed


@dataclass
class Window:
    """One window's fast rows (scan columns) and its slow lines."""

    fast: pl.DataFrame
    slow: list[tuple[int, int, int]]  # (line number, byte offset, length)


Query = Callable[[pl.LazyFrame], pl.LazyFrame]


def threads() -> int:
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    return max(1, min(n, 8))


def windows(path: str, spec: Spec, window: int = WINDOW_BYTES) -> list[tuple[pl.DataFrame, list[tuple[int, int, int]], mmap.mmap | None]]:
    raise NotImplementedError


def _fast_frame(batches: list[object], spec: Spec, file_id: int) -> pl.DataFrame:
    """The batches as the polars pass's scan columns (before ``finish``)."""
    enum = pl.Enum(list(spec.literals))
    names = pl.Series("marker", list(spec.literals), dtype=enum)
    if batches:
        parts = [pl.DataFrame(b) for b in batches]
        df = pl.concat(parts, how="vertical", rechunk=False) if len(parts) > 1 else parts[0]
    else:
        df = pl.DataFrame(schema={c: pl.UInt32 for c in COLUMNS})
        df = df.with_columns(
            pl.col(c).cast(t)
            for c, t in {
                "mk": pl.UInt8,
                "level": pl.String,
                "proc": pl.String,
                "compose": pl.String,
                "mo": pl.Int8,
                "dd": pl.Int8,
                "hh": pl.Int8,
                "mi": pl.Int8,
                "ss": pl.Int8,
                "hfrac": pl.String,
                "fdate": pl.String,
                "ftime": pl.String,
                "ffrac": pl.String,
                "fzone": pl.String,
                "fb": pl.String,
                "text": pl.String,
                "req_id": pl.String,
                "max_tokens": pl.Int64,
                "prompt_tokens": pl.Int64,
            }.items()
        )
    marker = names.gather(df.get_column("mk"))
    return df.select(
        pl.lit(file_id, pl.UInt16).alias("file_id"),
        "n",
        pl.lit(0, pl.UInt32).alias("seg"),
        marker.alias("marker"),
        *COLUMNS[2:],
    )


def _slow_frame(
    mm: mmap.mmap, slow: list[tuple[int, int, int]], query: Query, tmpdir: str | None
) -> pl.DataFrame:
    """The slow lines read by the polars pass's query (their own line numbers back)."""
    fd, tmp = tempfile.mkstemp(prefix="preemptlog-slow.", suffix=".log", dir=tmpdir)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(b"\n")  # line 1: empty (a BOM of the first slow line is not the file's)
            for _n, off, length in slow:
                out.write(mm[off : off + length])
                out.write(b"\n")
        got = query(scan_lines(tmp)).collect()
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass
    lines = pl.Series([n for n, _, _ in slow], dtype=pl.UInt32)
    return got.with_columns(n=lines.gather(got.get_column("n").cast(pl.Int64) - 2))


class Refused(Exception):
    """The compiled pass does not read this file (the caller runs the polars pass)."""


def scan_file(
    path: str,
    file_id: int,
    spec: Spec,
    query: Query,
    window: int = WINDOW_BYTES,
    tmpdir: str | None = None,
) -> list[pl.DataFrame]:
    """Every window's records frame (the polars pass's scan columns, rows in file order).

    ``query`` is the polars pass's per-line query (vllm_log.scan_frame with the file id): it reads
    the slow lines. Raises :class:`Refused` when the compiled pass cannot read the file.
    """
    return list(iter_file(path, file_id, spec, query, window, tmpdir))


def iter_file(
    path: str,
    file_id: int,
    spec: Spec,
    query: Query,
    window: int = WINDOW_BYTES,
    tmpdir: str | None = None,
):  # type: ignore[no-untyped-def]
    cfg = _config(spec)
    if cfg is None or _scan is None:
        raise Refused(_REFUSED.get(spec, "not built"))
    try:
        fh = open(path, "rb")
    except OSError as exc:
        raise Refused(str(exc)) from exc
    with fh:
        size = os.fstat(fh.fileno()).st_size
        if size == 0:
            yield _fast_frame([], spec, file_id)
            return
        try:
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as exc:
            raise Refused(str(exc)) from exc
        with mm:
            start, lines = 0, 0
            nthreads = threads()
            page = mmap.PAGESIZE
            while start < size:
                batches, slow, nxt, got = _scan.scan(cfg, mm, start, window, lines, nthreads)
                fast = _fast_frame(batches, spec, file_id)
                del batches
                if slow:
                    if sum(length for _, _, length in slow) > SLOW_MAX_BYTES and start == 0 and nxt >= size:
                        pass
                    rows = _slow_frame(mm, slow, query, tmpdir)
                    fast = fast.merge_sorted(rows.select(fast.columns).cast(fast.schema), key="n") if fast.height else rows.select(fast.columns).cast(fast.schema)
                yield fast
                # The window's pages leave this process's memory (they stay in the page cache).
                lo = (start // page) * page
                hi = (nxt // page) * page
                if hi > lo and hasattr(mm, "madvise"):
                    try:
                        mm.madvise(mmap.MADV_DONTNEED, lo, hi - lo)
                    except (OSError, ValueError):
                        pass
                start, lines = nxt, lines + got
