"""Reading text inputs as lazy polars line frames.

Every text source goes through :func:`scan_lines`, which never fails on bad
bytes: invalid UTF-8 becomes U+FFFD, NUL bytes are dropped, a trailing ``\\r`` is stripped, gzip and
zstd are decompressed by polars' own decoder. Lone ``\\r`` inside a line is
left alone here; :func:`split_cr` turns it into separate logical lines after
the caller's literal pre-filter, so the cost is paid only by survivors.

Frame schema of :func:`scan_lines`: ``n`` (UInt32, 1-based physical line),
``line`` (String, never null).
"""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path

import polars as pl

# The CSV reader is the only polars line reader that tolerates invalid UTF-8
# (``encoding="utf8-lossy"``; ``scan_lines`` raises). A separator byte that
# never occurs in text is used; a second column catches a single stray 0x1F
# and glues the line back together.
_SEP = "\x1f"
ANSI_RE = r"\x1b\[[0-9;?]*[A-Za-z]"

CSV_CHUNK_ENV = "POLARS_CSV_CHUNK_SIZE"
CSV_CHUNK_BYTES = 4 << 20

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def compression_of(head: bytes) -> str | None:
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(ZSTD_MAGIC):
        return "zstd"
    return None


def gzip_header_mtime(path: Path) -> int | None:
    """The MTIME field of a gzip member header (0 means "not set")."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(10)
    except OSError:
        return None
    if len(head) < 10 or not head.startswith(GZIP_MAGIC):
        return None
    value = int.from_bytes(head[4:8], "little")
    return value or None


def read_head(path: Path, limit: int = 65536) -> bytes:
    """First ``limit`` decompressed bytes of a file (best effort, never raises on bad data)."""
    with open(path, "rb") as fh:
        raw = fh.read(limit)
    comp = compression_of(raw)
    if comp is None:
        return raw
    if comp == "gzip":
        with open(path, "rb") as fh:
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            out = b""
            try:
                while len(out) < limit:
                    chunk = fh.read(65536)
                    if not chunk:
                        break
                    out += d.decompress(chunk, limit - len(out))
            except zlib.error:
                pass
            return out[:limit]
    # zstd: polars decodes it natively; take the first lines through it.
    try:
        df = scan_lines(path).head(2000).collect()
    except Exception:
        return b""
    return "\n".join(df.get_column("line").to_list()).encode("utf-8")[:limit]


_ALIASES: dict[str, str] = {}


def polars_path(path: Path | str) -> str:
    """A path polars can open: the path itself, or (for a file name that is not valid UTF-8,
    which polars rejects) a symlink to it with an ASCII name in a private folder removed at exit."""
    s = str(path)
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        pass
    alias = _ALIASES.get(s)
    if alias is None:
        import atexit
        import shutil
        import tempfile

        folder = tempfile.mkdtemp(prefix="preemptlog-names-")
        atexit.register(shutil.rmtree, folder, True)
        suffix = "".join(c for c in "".join(Path(s).suffixes[-2:]) if c.isascii() and (c.isalnum() or c == "."))
        alias = os.path.join(folder, "input" + suffix)
        os.symlink(os.path.abspath(s), alias)
        _ALIASES[s] = alias
    return alias


def scan_lines(path: Path | str) -> pl.LazyFrame:
    """Lazy frame of (n, line) for a text file, plain, gzip or zstd."""
    # Bounded memory: the streaming CSV reader keeps a few chunks of raw lines
    # in flight, and its default chunk is large (peak RSS 445 MB on a 1 GB log).
    # 4 MB chunks: 225 MB, same CPU time (docs/performance.md). Read by polars
    # at collect time; a value set by the user wins.
    if not os.environ.get(CSV_CHUNK_ENV):
        os.environ[CSV_CHUNK_ENV] = str(CSV_CHUNK_BYTES)
    lf = pl.scan_csv(
        polars_path(path),
        has_header=False,
        separator=_SEP,
        quote_char=None,
        schema={"line": pl.String, "_tail": pl.String},
        encoding="utf8-lossy",
        truncate_ragged_lines=True,
        raise_if_empty=False,
        glob=False,  # a path is a path: "[red]x.log" is not a pattern
        missing_columns="insert",
        extra_columns="ignore",  # a first line with two or more 0x1F bytes must not fail the file
        row_index_name="n",
        row_index_offset=1,
    )
    line = pl.col("line").fill_null("")
    return lf.select(
        pl.col("n").cast(pl.UInt32),
        pl.when(pl.col("_tail").is_null())
        .then(line)
        .otherwise(pl.concat_str([line, pl.lit(_SEP), pl.col("_tail")]))
        # NUL bytes are not text: a hole of NULs (logrotate copytruncate) glued to the line
        # after it must not hide that line's header (the sniff counts and reports them).
        .str.replace_all("\x00", "", literal=True)
        .alias("line"),
    )


def split_cr(lf: pl.LazyFrame, col: str = "line") -> pl.LazyFrame:
    """Split lines on lone CR into logical lines; adds ``seg`` (0-based segment index).

    Only rows that contain a CR pay for the split (measured: same cost as no split).
    """
    c = pl.col(col)
    has_cr = c.str.contains("\r", literal=True)
    lf = lf.with_columns(pl.when(has_cr).then(c.str.split("\r")).otherwise(pl.concat_list(c)).alias(col))
    return lf.with_columns(seg=pl.int_ranges(pl.col(col).list.len(), dtype=pl.UInt32)).explode(col, "seg")


def file_size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def is_gzip_intact(path: Path) -> str | None:
    """Cheap integrity probe for gzip: returns an error text if the file cannot be fully read.

    Only called when polars' decoder has already failed.
    """
    try:
        with gzip.open(path, "rb") as fh:
            while fh.read(1 << 20):
                pass
    except (OSError, EOFError, zlib.error) as exc:
        return str(exc) or type(exc).__name__
    return None
