"""One file found twice: a byte-for-byte copy of an input elsewhere in the bundle (``cp vllm.log
vllm-copy.log``, the scrapes again under ``backup/``, a record file saved twice, an archive beside the
folder it holds) is read once, never counted twice (:func:`read_copies_once`, called by
pipeline/bundle.py ``collect``; a hard link is found by its inode when the file is sniffed).

Identical bytes are not always a copy. Two files are one file found twice only when reading both could
add nothing: when they would carry the same time.

- Content that dates itself (a log's timestamped lines, a /metrics page whose samples carry their
  timestamps, a Prometheus API answer, records with times, dmon with its date and time columns): the
  same bytes are the same readings at the same times, whatever the files are called. One copy.
- Content with no time of its own (a /metrics page without sample timestamps: its time is the one its
  name carries, else its mtime; ``SourceKind.name_time`` says which a file's name gives): one copy when
  the names give the same time (the same name in another folder, the same epoch, or no time in either:
  a copy's mtime is when it was copied, not a reading). Names that give different times
  (``metrics-1700000000.prom`` and ``metrics-1700000030.prom`` of a wedged server) are two readings
  of an unchanged page, and both are read. A copy whose name gives no time joins the first that does.

The first in walk order is read (or the first whose name gives the time), each copy named in its
warnings (``X: also found as Y (the same bytes): read once``) and kept as one of its names
(``InputFile.aliases``), its modification time the earliest of theirs (a copy made later is no later
evidence). Files of no kind read (empty, unknown, documents) are left as they are.
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable
from pathlib import Path

from ..inputs.files import UNRECOGNISED, InputFile
from .registry import kinds


def _digest(path: Path) -> bytes | None:
    h = hashlib.blake2b(digest_size=20)
    try:
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
    except OSError:
        return None  # its reading reports it
    return h.digest()


def _merge(kept: InputFile, copy: InputFile) -> None:
    kept.warnings.append(f"also found as {copy.display} (the same bytes): read once")
    kept.aliases.extend(copy.names())
    if copy.mtime is not None:
        kept.mtime = copy.mtime if kept.mtime is None else min(kept.mtime, copy.mtime)


def _read_once(same: list[InputFile]) -> set[int]:
    """Files of one kind holding the same bytes, in walk order: the ids of those that are copies (merged
    into the file read)."""
    name_time = getattr(kinds().get(same[0].kind), "name_time", None)
    times: list[Hashable | None] = [name_time(f) if name_time is not None else None for f in same]
    read: dict[Hashable, InputFile] = {}  # the time its name gives -> the file read at it
    for f, t in zip(same, times, strict=True):
        if t is not None and read.setdefault(t, f) is not f:
            _merge(read[t], f)
    timeless = [f for f, t in zip(same, times, strict=True) if t is None]
    into = next(iter(read.values()), None) or timeless[0]
    for f in timeless:
        if f is not into:
            _merge(into, f)
    kept = {id(f) for f in read.values()} | {id(into)}
    return {id(f) for f in same if id(f) not in kept}


def read_copies_once(files: list[tuple[InputFile, Path]]) -> list[InputFile]:
    """The files (each with the path of the bytes it was found as: the input, not a decoded copy) less
    the copies of others (module docstring), in their order."""
    by_size: dict[tuple[str, int], list[tuple[InputFile, Path]]] = {}
    for f, original in files:
        if f.kind in UNRECOGNISED or f.kind == "ignore":
            continue
        try:
            size = original.stat().st_size
        except OSError:
            continue
        if size:
            by_size.setdefault((f.kind, size), []).append((f, original))
    copies: set[int] = set()
    for group in by_size.values():
        if len(group) < 2:
            continue
        same: dict[bytes, list[InputFile]] = {}
        for f, original in group:
            d = _digest(original)
            if d is not None:
                same.setdefault(d, []).append(f)
        for found in same.values():
            if len(found) > 1:
                copies |= _read_once(found)
    return [f for f, _ in files if id(f) not in copies]
