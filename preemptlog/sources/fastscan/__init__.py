"""The compiled log pass (GitHub issue 36): the records of a plain vLLM/SGLang log at grep's pace.

``sources/vllm_log.py`` reads a log with one lazy polars query (the *polars pass*, the reference).
This package is a second implementation of the same query for plain (uncompressed, unrepaired)
files: a C extension (``_scan.c`` + ``scan_core.c``, built by setuptools at install, optional)
that reads the file a window at a time (cut after a line feed), splits each window into byte
ranges on line boundaries and scans them on every core without the GIL: lines split with memchr, the leftmost literal marker, and the record's fields
from the *same regex strings* as the polars pass (compiled by :mod:`.regex` into programs for a
small backtracking matcher). The columns reach polars through the Arrow C data interface
(``Batch.__arrow_c_array__``), no Python object per row.

Lines the C pass does not decide itself (a NUL byte; a marker line with 0x1F, an inner CR,
invalid UTF-8, JSON, or a character a Unicode class cannot tabulate) come back by position; they
are written to a small file and read by the polars pass's own query (``query`` below), so every
row is the reference's. What is data and what is code: ``scan_core.c``'s header comment.

``PREEMPTLOG_SCANNER=polars`` turns the compiled pass off (so does a missing extension: no
compiler at install). :func:`status` says which pass runs (``analyze -v``).
"""

from __future__ import annotations

import os
import queue
import struct
import tempfile
import threading
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import polars as pl
from polars.io.plugins import register_io_source

from ...inputs import reflow
from ...inputs.textio import compression_of, scan_lines
from .regex import Program, Unsupported, compile_regex
from .split import SplitContext as SplitContext
from .split import merged
from .split import read_split as read_split

try:
    from . import _scan  # type: ignore[attr-defined]
except ImportError:  # no compiler at install: the polars pass reads every log
    _scan = None

ENV = "PREEMPTLOG_SCANNER"
# bytes scanned per call (memory: the buffer, and the columns of the window the caller holds and of
# the one scanned ahead)
WINDOW_BYTES = 32 << 20
PREFETCH = 2  # windows scanned ahead while the caller works on one (0: no producer thread)

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
        wanted = fields.get((role, name))
        group_ids.append(-1 if wanted is None else progs[role].group(wanted))
    return _scan.Config(config_blob(spec, markers, progs, group_ids))


def config_blob(spec: Spec, markers: list[bytes], progs: dict[str, Program], group_ids: list[int]) -> bytes:
    """The C configuration (format: scan_core.c ``fs_config_load``; the fuzz target loads it too)."""
    out = bytearray(b"FSC1")
    out += struct.pack("<I", len(markers))
    for m, lit in zip(markers, spec.literals, strict=True):
        out += struct.pack("<I", len(m)) + m + bytes([1 if lit in spec.hot else 0])
    for role in ROLES:
        code, sets, nslots, anchored, first, lits = progs[role].pack()
        out += struct.pack("<I", len(code) // 12) + code
        out += struct.pack("<I", len(sets) // 17) + sets
        out += struct.pack("<III", nslots, anchored, len(first)) + first
        out += struct.pack("<I", len(lits)) + lits
    out += struct.pack(f"<{len(group_ids)}i", *group_ids)
    ids = spec.ids_start.encode("utf-8")
    strip = spec.strip.encode("utf-8")
    out += struct.pack("<I", len(ids)) + ids + struct.pack("<I", len(strip)) + strip
    out += struct.pack("<I", spec.head_chars)
    return bytes(out)


def blob_of(spec: Spec) -> bytes:
    """The configuration blob of a spec (the fuzz target's config file)."""
    markers = [m.encode("utf-8") for m in spec.literals]
    progs = {role: compile_regex(pattern) for role, pattern, _ in spec.regexes}
    fields = {(role, name): g for role, _, groups in spec.regexes for name, g in groups}
    group_ids = [-1 if fields.get(f) is None else progs[f[0]].group(fields[f]) for f in FIELDS]
    return config_blob(spec, markers, progs, group_ids)


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


Query = Callable[[pl.LazyFrame], pl.LazyFrame]

# The scan columns (vllm_log.scan's output) as the batches hold them (mk: the marker's index).
_BATCH_SCHEMA: dict[str, pl.DataType] = {
    "n": pl.UInt32(),
    "mk": pl.UInt8(),
    **{c: pl.String() for c in ("level", "proc", "compose")},
    **{c: pl.Int8() for c in ("mo", "dd", "hh", "mi", "ss")},
    **{c: pl.String() for c in ("hfrac", "fdate", "ftime", "ffrac", "fzone", "fb", "text", "req_id")},
    "max_tokens": pl.Int64(),
    "prompt_tokens": pl.Int64(),
}


def threads() -> int:
    """Threads of the compiled pass: the cores this process may use (at most 8)."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    return max(1, min(n, 8))


class Scan:
    """The compiled pass over one file: its records frame in windows (:meth:`frames`), whole
    (:meth:`frame`) or as a LazyFrame that streams the windows (:meth:`lazy`, an IO source: the
    spill and run logic of vllm_log.read_split read it as they read the polars query)."""

    def __init__(self, path: str, file_id: int, spec: Spec, query: Query, config: object) -> None:
        self.path, self.file_id, self.spec, self.query, self.config = path, file_id, spec, query, config
        enum = pl.Enum(list(spec.literals))
        self.schema: dict[str, pl.DataType] = {
            "file_id": pl.UInt16(),
            "n": pl.UInt32(),
            "seg": pl.UInt32(),
            "marker": enum,
            **{c: t for c, t in _BATCH_SCHEMA.items() if c not in ("n", "mk")},
        }
        self.window = WINDOW_BYTES
        self.prefetch = PREFETCH

    def frames(self) -> Iterator[pl.DataFrame]:
        """Each window's records (the polars pass's scan columns), in file order.

        The next window is read and scanned by a producer thread while the caller works on this one
        (the C scan runs without the GIL: the split and run logic in polars and the scan of the next
        window share the cores); ``prefetch`` windows at most are scanned ahead. Errors of the
        producer are raised here; a caller that stops early stops it."""
        yield from self._produce(False)

    def pairs(self) -> Iterator[tuple[pl.DataFrame, pl.DataFrame]]:
        """Each window's records as two frames, (the records of other kinds, the request rows:
        markers of ``spec.hot``), each in file order (``n``): the window of :meth:`frames` is
        their merge on ``n``. The C pass writes the request rows to columns of their own, so the
        run logic (fastscan/split.py) reads them without filtering the window (two filters of
        every row cost more than the scan of the request rows' fields)."""
        yield from self._produce(True)

    def _produce(self, split: bool) -> Iterator[Any]:
        """The windows of :meth:`frames` or :meth:`pairs`, scanned ahead by a producer thread."""
        if self.prefetch <= 0:
            yield from self._windows(threading.Event(), split)
            return
        out: queue.Queue[tuple[str, object]] = queue.Queue()
        halt = threading.Event()
        # windows held at once: the caller's and the ones scanned ahead (a slot is freed when the
        # caller asks for the next window)
        room = threading.Semaphore(self.prefetch + 1)

        def produce() -> None:
            it = self._windows(halt, split)
            try:
                while True:
                    while not room.acquire(timeout=0.1):
                        if halt.is_set():
                            return
                    if halt.is_set():
                        return
                    df = next(it, None)
                    if df is None:
                        break
                    out.put(("frame", df))
                item: tuple[str, object] = ("end", None)
            except BaseException as e:  # handed to the caller's thread, raised there
                item = ("error", e)
            finally:
                it.close()
            out.put(item)

        worker = threading.Thread(target=produce, name="preemptlog-fastscan", daemon=True)
        worker.start()
        try:
            while True:
                kind, val = out.get()
                if kind == "frame":
                    yield val
                    del val
                    room.release()
                elif kind == "error":
                    assert isinstance(val, BaseException)
                    raise val
                else:
                    return
        finally:
            halt.set()
            worker.join()

    def _windows(self, halt: threading.Event, split: bool = False) -> Generator[Any, None, None]:
        """The windows, read and scanned in this thread (see :meth:`frames`; ``split``: as the
        pairs of :meth:`pairs`).

        The file is read (not mapped) a window at a time, cut after its last line feed (the next
        window starts there): a file truncated while it is read (copytruncate) ends early instead
        of faulting a mapping."""
        assert _scan is not None
        nthreads = threads()
        lines = 0
        off = 0
        with open(self.path, "rb", buffering=0) as fh, ThreadPoolExecutor(max(1, nthreads - 1)) as pool:
            # one buffer for every window (a fresh allocation per window cost page faults)
            fd = fh.fileno()
            size = os.fstat(fd).st_size
            buf = bytearray(max(1, min(self.window, size + 1)))
            while not halt.is_set():
                while True:  # a window ends after its last line feed (a longer line: a longer buffer)
                    got = _read_at(fd, buf, off, nthreads, pool)
                    eof = got < len(buf)
                    cut = got if eof else buf.rfind(b"\n", 0, got) + 1
                    if cut or eof:
                        break
                    buf = bytearray(2 * len(buf))  # a full buffer without a line feed
                if cut == 0:
                    return
                view = memoryview(buf)[:cut]
                got = _scan.scan(self.config, view, 0, cut, lines, nthreads, off == 0, split)
                batches, slow, _nxt, n_lines = got[:4]
                fast = self._fast(batches, True) if split else self._fast(batches)
                hot = self._fast(got[4], True) if split else None
                del batches, got
                if slow:
                    rows = self._slow(view, slow)
                    if hot is not None:
                        is_hot = rows.get_column("marker").is_in(list(self.spec.hot)).fill_null(False)
                        hot = merged(hot, rows.filter(is_hot)).rechunk()
                        rows = rows.filter(~is_hot)
                    fast = merged(fast, rows)
                    if hot is not None:
                        fast = fast.rechunk()
                view.release()
                if hot is not None:
                    if fast.height or hot.height:
                        yield fast, hot
                elif fast.height:
                    yield fast
                lines += n_lines
                off += cut
                if eof:
                    return
                if len(buf) < self.window:  # the file grew past its size at open: full windows from here
                    buf = bytearray(self.window)

    def frame(self) -> pl.DataFrame:
        """The whole file's records (scan columns)."""
        parts = list(self.frames())
        if not parts:
            return pl.DataFrame(schema=self.schema)
        return pl.concat(parts, how="vertical") if len(parts) > 1 else parts[0]

    def lazy(self) -> pl.LazyFrame:
        """The records as a LazyFrame over the windows (polars' IO source plugin)."""

        def source(
            with_columns: list[str] | None, predicate: pl.Expr | None, n_rows: int | None, _batch: int | None
        ) -> Iterator[pl.DataFrame]:
            left = n_rows
            for df in self.frames():
                if predicate is not None:
                    df = df.filter(predicate)
                if with_columns is not None:
                    df = df.select(with_columns)
                if left is not None:
                    df = df.head(left)
                    left -= df.height
                yield df
                if left is not None and left <= 0:
                    return

        return register_io_source(source, schema=self.schema, explain_name="preemptlog fastscan")

    def _fast(self, batches: list[object], rechunk: bool = False) -> pl.DataFrame:
        """The records of a window's batches (one per thread's range) as one frame; ``rechunk``: in
        one chunk per column (the run logic adds computed columns to the request rows, and a frame
        whose columns are chunked differently is copied into one chunk by every select and filter)."""
        enum = self.schema["marker"]
        names = pl.Series("marker", list(self.spec.literals), dtype=enum)
        parts = [pl.DataFrame(b) for b in batches]  # type: ignore[arg-type]  # Arrow PyCapsule objects
        if not parts:
            df = pl.DataFrame(schema=_BATCH_SCHEMA)
        else:
            df = pl.concat(parts, how="vertical", rechunk=rechunk) if len(parts) > 1 else parts[0]
        return df.select(
            pl.lit(self.file_id, pl.UInt16).alias("file_id"),
            "n",
            pl.lit(0, pl.UInt32).alias("seg"),
            names.gather(df.get_column("mk")).alias("marker"),
            *[c for c in _BATCH_SCHEMA if c not in ("n", "mk")],
        )

    def _slow(self, buf: memoryview, slow: list[tuple[int, int, int]]) -> pl.DataFrame:
        """The slow lines read by the polars pass's own query, with their line numbers back."""
        fd, tmp = tempfile.mkstemp(prefix="preemptlog-slow.", suffix=".log")
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(b"\n")  # line 1 stays empty: a BOM on a slow line is no file's first bytes
                for _n, off, length in slow:
                    out.write(buf[off : off + length])
                    out.write(b"\n")
            got = self.query(scan_lines(tmp)).collect()
        finally:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        lines = pl.Series([n for n, _, _ in slow], dtype=pl.UInt32)
        got = got.with_columns(n=lines.gather(got.get_column("n").cast(pl.Int64) - 2))
        return got.select(list(self.schema)).cast(dict(self.schema.items()))


READ_PART_BYTES = 4 << 20  # a window is read in parts of at least this size, one per core


def _read_at(fd: int, buf: bytearray, off: int, nthreads: int, pool: ThreadPoolExecutor) -> int:
    """Fill ``buf`` from the file's byte ``off``: the window's parts read at once by ``nthreads``
    threads (the kernel's copy out of the page cache is a fifth of the scan's time on one core);
    the bytes read, counted up to the first part that came short (the file's end, or a file
    truncated while it is read: what follows a short part is never used)."""
    n = len(buf)
    k = max(1, min(nthreads, n // READ_PART_BYTES))
    bounds = [n * i // k for i in range(k + 1)]
    view = memoryview(buf)

    def part(i: int) -> int:
        a, b = bounds[i], bounds[i + 1]
        got = 0
        while got < b - a:
            r = os.preadv(fd, [view[a + got : b]], off + a + got)
            if r <= 0:
                break
            got += r
        return got

    futures = [pool.submit(part, i) for i in range(1, k)]
    sizes = [part(0), *(f.result() for f in futures)]
    total = 0
    for i, got in enumerate(sizes):
        total += got
        if got < bounds[i + 1] - bounds[i]:
            break
    view.release()
    return total


def open_scan(path: str, file_id: int, spec: Spec, query: Query) -> Scan | None:
    """The compiled pass over ``path`` (see :class:`Scan`), or None when it refuses the spec
    (a marker or regex it does not run: :func:`status` says why)."""
    cfg = _config(spec)
    if cfg is None:
        return None
    return Scan(path, file_id, spec, query, cfg)
