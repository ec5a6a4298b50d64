"""Salvage: what can be read of a damaged .gz/.zst input (the one home of it).

``damaged_compression`` tells why a compressed input cannot be fully decompressed;
``decompressed_copy`` writes what does decompress into a workspace file; ``salvage`` does both
for an input and points it at the copy (the readers then read the copy, and say so).
"""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import IO

from .files import InputFile
from .textio import GZIP_MAGIC, is_gzip_intact
from .workspace import Workspace


def damaged_compression(f: InputFile) -> str | None:
    """Why a compressed input cannot be fully decompressed (None when intact or not compressed)."""
    return _compression_damage(f.path, f.compression)


def _compression_damage(path: Path, compression: str | None) -> str | None:
    if compression == "gzip":
        return is_gzip_intact(path)
    if compression == "zstd":
        try:
            import zstandard  # noqa: F401
        except ImportError:
            return None
        return _zstd_frames(path, None)[1]
    return None


def salvage(f: InputFile, workspace: Workspace) -> str | None:
    """Decompress what can be decompressed of a damaged .gz/.zst input into a workspace copy.

    ``f.path`` then points at the copy (``f.compression`` becomes None) and the
    warning text is returned; None when the file is intact or not compressed.
    """
    problem = damaged_compression(f)
    if problem is None:
        return None
    comp = f.compression
    dest, written, err = decompressed_copy(f, workspace, Path(f.display).name + ".salvaged")
    f.path, f.compression = dest, None
    return f"damaged {comp} file: {err or problem}; read the first {written} bytes that decompressed"


def _salvage_zstd(path: Path, dest: Path) -> tuple[int, str]:
    with open(dest, "wb") as out:
        written, error = _zstd_frames(path, out)
    return written, error or "compressed stream ends early (truncated file)"


def _zstd_frames(path: Path, out: IO[bytes] | None) -> tuple[int, str | None]:
    """Decompress every zstd frame of ``path`` (into ``out`` when given): (bytes, error or None).

    zstandard's stream reader stops quietly at a truncated frame, so frames are
    walked one by one and a frame without its end is reported.
    """
    import zstandard

    written = 0
    with open(path, "rb") as raw:
        dobj = zstandard.ZstdDecompressor().decompressobj()
        pending = False  # inside a frame
        while True:
            chunk = raw.read(1 << 16)
            if not chunk:
                break
            while chunk:
                pending = True
                try:
                    data = dobj.decompress(chunk)
                except zstandard.ZstdError as exc:
                    return written, f"corrupt compressed data ({exc})"
                if out is not None and data:
                    out.write(data)
                written += len(data)
                if dobj.eof:
                    pending = False
                    chunk = dobj.unused_data
                    dobj = zstandard.ZstdDecompressor().decompressobj()
                else:
                    chunk = b""
        if pending:
            return written, "compressed stream ends early (truncated file)"
    return written, None


def decompressed_copy(f: InputFile, workspace: Workspace, name: str) -> tuple[Path, int, str | None]:
    """What decompresses of a .gz/.zst input, in a new workspace file: (path, bytes, error or None)."""
    dest = workspace.new_file(name)
    if f.compression == "gzip":
        written, err = salvage_gzip(f.path, dest)
    else:
        written, err = _salvage_zstd(f.path, dest)
    return dest, written, err


def salvage_gzip(path: Path, dest: Path) -> tuple[int, str | None]:
    """Decompress as much of a damaged gzip file as possible into ``dest``.

    Returns (bytes written, error text or None). Handles multi-member files.
    """
    written = 0
    error: str | None = None
    with open(path, "rb") as src:
        data = src.read()
    pos = 0
    with open(dest, "wb") as out:
        while pos < len(data):
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            try:
                chunk = d.decompress(data[pos:])
                out.write(chunk)
                written += len(chunk)
                if not d.eof:
                    error = "compressed stream ends early (truncated file)"
                    tail = d.flush()
                    out.write(tail)
                    written += len(tail)
                    break
                consumed = len(data) - pos - len(d.unused_data)
                pos += consumed
                if not d.unused_data.startswith(GZIP_MAGIC):
                    break
            except zlib.error as exc:
                error = f"corrupt compressed data ({exc})"
                break
    return written, error
