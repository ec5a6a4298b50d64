"""One file found twice: a copy of an input elsewhere in the bundle (``cp vllm.log vllm-copy.log``,
the scrapes again under ``backup/``, a record file saved twice, an archive beside the folder it holds,
``vllm.log`` beside ``vllm.log.gz``, a UTF-16 save of the same text) is read once, never counted
twice (:func:`read_copies_once`, called by pipeline/bundle.py ``collect``; a hard link is found by its
inode when the file is sniffed).

A copy is a copy of what is read: the content once decompressed (gzip, zstd; an archive's member as
unpacked) and decoded (UTF-16/32 and a UTF-8 byte-order mark are read through a UTF-8 copy: sniffing.py).
Compared cheaply: only files of one kind whose contents have the same size, known without
decompressing (:func:`_content_size`), are hashed whole; a file cut short (a damaged .gz) holds less,
and is no copy of the whole. Some sizes cannot be known that way: a zstd stream written through a pipe
(``cat vllm.log | zstd``) states none, and a gzip file of several members (``cat a.gz b.gz``, bgzip)
keeps only its last member's. So a compressed file whose size matches no other file's is compared by
its first 64 KiB once decompressed (:func:`_head`) with the files of its kind, and hashed whole only
when those are the same as another's (before: such a copy of the log was read twice, and every
preemption counted twice).

An earlier copy is read once too (:func:`_earlier_copies`): a file of a kind that grows by appended lines
(a log, dmon's output, records) whose whole content read is another's first bytes (copied, or saved as a
.gz, while the server still wrote it; cut in the middle of a line) is a state of that file, not more
evidence: the longer one is read.

Identical content is not always a copy. Two files are one file found twice only when reading both could
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

A part of a rotated set is read rather than a copy elsewhere (``node1/vllm.log.1.gz`` beside
``node1/vllm.log``, not ``prev.log``: the set keeps its part), then a file read as it is (plain, not
decoded) rather than a compressed or re-encoded copy (the compiled log pass reads it; its last line and
NUL bytes are judged whole), else the first in walk order
(or the first whose name gives the time), each copy named in its warnings (``X: also found as Y (the
same bytes): read once``; ``(the same bytes once decompressed)``, ``(the same text once decoded)``) and
kept as one of its names (``InputFile.aliases``), its modification time the earliest of theirs (a copy
made later is no later evidence). A copy's own damage (``InputFile.damage``: the same bytes' NUL hole,
cut last line) is not said again (bundle.collect). Files of no kind read (empty, unknown, documents)
are left as they are."""

from __future__ import annotations

import hashlib
import os
import zlib
from collections.abc import Generator, Hashable, Iterator
from pathlib import Path
from typing import BinaryIO

from ..inputs.files import UNRECOGNISED, InputFile
from ..inputs.rotation import rotation_key
from ..inputs.textio import GZIP_MAGIC
from .registry import kinds

CHUNK = 1 << 20
SIZE_MOD = 1 << 32  # gzip's ISIZE: the uncompressed size modulo 2**32


def _content_size(f: InputFile) -> int | None:
    """The size of what is read of ``f`` (its decompressed content), known without decompressing it,
    modulo 2**32 (all gzip keeps): a plain file's size; gzip's ISIZE trailer (of its last member: a
    file of several members gives a size that matches nothing, and is left alone); the content size a
    zstd frame header holds (``zstd FILE`` writes it; a stream piped through zstd has none: left alone).
    None when unknown or empty (an empty file is no copy of anything)."""
    try:
        size: int | None
        if f.compression is None:
            size = os.stat(f.path).st_size
        elif f.compression == "gzip":
            with open(f.path, "rb") as fh:
                if fh.seek(0, os.SEEK_END) < 18:  # a header and a trailer
                    return None
                fh.seek(-4, os.SEEK_END)
                size = int.from_bytes(fh.read(4), "little")
        elif f.compression == "zstd":
            size = _zstd_content_size(f.path)
        else:
            return None
    except OSError:
        return None  # its reading reports it
    return None if size is None else size % SIZE_MOD or None


def _zstd_content_size(path: Path) -> int | None:
    import zstandard

    with open(path, "rb") as fh:
        try:
            size = zstandard.get_frame_parameters(fh.read(18)).content_size
        except zstandard.ZstdError:
            return None
    return None if size == zstandard.CONTENTSIZE_UNKNOWN else size


def _chunks(f: InputFile) -> Generator[bytes, None, None]:
    """What is read of ``f``, decompressed, in chunks; raises ValueError when it does not decompress
    to its end (a damaged file is read as far as it goes, and that is no copy of a whole one)."""
    if f.compression is None:
        yield from _file_chunks(f.path)
        return
    with open(f.path, "rb") as fh:
        if f.compression == "gzip":
            yield from _gunzip(fh)
        else:
            import zstandard

            try:
                reader = zstandard.ZstdDecompressor().stream_reader(fh, read_across_frames=True)
                while chunk := reader.read(CHUNK):
                    yield chunk
            except zstandard.ZstdError as exc:
                raise ValueError(str(exc)) from exc


def _gunzip(fh: BinaryIO) -> Iterator[bytes]:
    """A gzip file's content, every member (``cat a.gz b.gz``), CHUNK bytes at most at a time (a
    small file of zeros can hold gigabytes); trailing bytes that start no member end it, as gzip does."""
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    buf = fh.read(CHUNK)
    while True:
        if not buf:
            buf = fh.read(CHUNK)
        if d.eof:
            if len(buf) < 2:
                buf += fh.read(CHUNK)
            if not buf.startswith(GZIP_MAGIC):
                return
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif not buf:  # the input ends: what zlib holds, then the member must have ended
            while out := d.decompress(b"", CHUNK):
                yield out
            if not d.eof:
                raise ValueError("compressed stream ends early")
            return
        try:
            yield d.decompress(buf, CHUNK)
        except zlib.error as exc:
            raise ValueError(str(exc)) from exc
        buf = d.unused_data if d.eof else d.unconsumed_tail


def _file_chunks(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            yield chunk


def _hash(chunks: Iterator[bytes]) -> bytes | None:
    """A hash of the chunks: None when they cannot be read to their end."""
    h = hashlib.blake2b(digest_size=20)
    try:
        for chunk in chunks:
            h.update(chunk)
    except (OSError, ValueError, EOFError):
        return None  # its reading reports it
    return h.digest()


def _digest(f: InputFile) -> bytes | None:
    """A hash of what is read of ``f`` (decompressed, decoded): None when it cannot be read to its end."""
    return _hash(_chunks(f))


def _same(kept: InputFile, copy: InputFile, decoded: set[int]) -> str:
    """How the two hold the same content: byte for byte, or once decompressed or decoded (``decoded``:
    the ids of the files read through a decoded copy: UTF-16, a UTF-8 byte-order mark)."""
    unpacked = bool(kept.compression or copy.compression)
    recoded = bool({id(kept), id(copy)} & decoded)
    if unpacked and not recoded and kept.compression == copy.compression and _same_bytes(kept.path, copy.path):
        return "the same bytes"  # two copies of one .gz
    if recoded:
        return "the same text once decompressed and decoded" if unpacked else "the same text once decoded"
    return "the same bytes once decompressed" if unpacked else "the same bytes"


def _same_bytes(a: Path, b: Path) -> bool:
    try:
        if os.stat(a).st_size != os.stat(b).st_size:
            return False
    except OSError:
        return False
    return _hash(_file_chunks(a)) == _hash(_file_chunks(b))


def _merge(kept: InputFile, copy: InputFile, decoded: set[int]) -> None:
    kept.warnings.append(f"also found as {copy.display} ({_same(kept, copy, decoded)}): read once")
    kept.aliases.extend(copy.names())
    if copy.mtime is not None:
        kept.mtime = copy.mtime if kept.mtime is None else min(kept.mtime, copy.mtime)


def _read_once(same: list[InputFile], decoded: set[int]) -> set[int]:
    """Files of one kind holding the same content, the file to read first (below): the ids of those that
    are copies (merged into the file read)."""
    name_time = getattr(kinds().get(same[0].kind), "name_time", None)
    times: list[Hashable | None] = [name_time(f) if name_time is not None else None for f in same]
    read: dict[Hashable, InputFile] = {}  # the time its name gives -> the file read at it
    for f, t in zip(same, times, strict=True):
        if t is not None and read.setdefault(t, f) is not f:
            _merge(read[t], f, decoded)
    timeless = [f for f, t in zip(same, times, strict=True) if t is None]
    into = next(iter(read.values()), None) or timeless[0]
    for f in timeless:
        if f is not into:
            _merge(into, f, decoded)
    kept = {id(f) for f in read.values()} | {id(into)}
    return {id(f) for f in same if id(f) not in kept}


def _rotated_parts(files: list[InputFile]) -> set[int]:
    """The ids of the files that are parts of a rotated set (``vllm.log.1.gz`` beside ``vllm.log``:
    another file of its kind and rotation base in its folder, inputs/rotation.py)."""
    sets: dict[tuple[str, str, str], list[InputFile]] = {}
    for f in files:
        if f.kind not in UNRECOGNISED and f.kind != "ignore" and not f.is_stdin:
            name = Path(f.display)
            sets.setdefault((str(name.parent), f.kind, rotation_key(name.name)[0]), []).append(f)
    return {id(f) for parts in sets.values() if len(parts) > 1 for f in parts}


HEAD = 64 << 10  # the content compared first when the sizes cannot be (module docstring)


def _head(f: InputFile) -> bytes | None:
    """A hash of the first HEAD bytes of what is read of ``f`` (the whole when shorter): None when
    empty or unreadable there."""
    got = _first(f, HEAD, strict=True)
    return hashlib.blake2b(got, digest_size=20).digest() if got else None


def read_copies_once(files: list[tuple[InputFile, Path]]) -> list[InputFile]:
    """The files (each with the path of the bytes it was found as: the input, not a decoded copy) less
    the copies of others (module docstring), in their order.

    Cheap: only files of one kind whose contents have the same size (known without decompressing:
    :func:`_content_size`) are hashed, their content as read (decompressed, decoded); a compressed
    file whose size matches no other's is compared by its first 64 KiB (:func:`_head`) with the files
    of its kind first. A file whose size and head match no other's is never read whole here."""
    decoded = {id(f) for f, original in files if f.path != original}
    rotated = _rotated_parts([f for f, _ in files])
    eligible = [f for f, _ in files if f.kind not in UNRECOGNISED and f.kind != "ignore"]
    order = {id(f): i for i, f in enumerate(eligible)}
    parent = {id(f): id(f) for f in eligible}

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def join(a: InputFile, b: InputFile) -> None:
        ra, rb = root(id(a)), root(id(b))
        if ra != rb:
            parent[max(ra, rb, key=order.__getitem__)] = min(ra, rb, key=order.__getitem__)

    by_size: dict[tuple[str, int], list[InputFile]] = {}
    sizes: dict[int, int | None] = {}
    for f in eligible:
        sizes[id(f)] = size = _content_size(f)
        if size is not None:
            by_size.setdefault((f.kind, size), []).append(f)
    for group in by_size.values():
        for f in group[1:]:
            join(group[0], f)

    # A compressed file whose size could not be compared (none stated, or a gzip trailer's that may be
    # its last member's): by its head, with every file of its kind.
    def shares_size(f: InputFile) -> bool:
        size = sizes[id(f)]
        return size is not None and len(by_size[(f.kind, size)]) > 1

    lone = [f for f in eligible if f.compression is not None and not shares_size(f)]
    lone_ids, lone_kinds = {id(f) for f in lone}, {f.kind for f in lone}
    by_head: dict[tuple[str, bytes], list[InputFile]] = {}
    for f in eligible:
        if f.kind in lone_kinds and (h := _head(f)) is not None:
            by_head.setdefault((f.kind, h), []).append(f)
    for group in by_head.values():
        if any(id(f) in lone_ids for f in group):
            for f in group[1:]:
                join(group[0], f)
    components: dict[int, list[InputFile]] = {}
    for f in eligible:
        components.setdefault(root(id(f)), []).append(f)
    copies: set[int] = set()
    for group in components.values():
        if len(group) < 2:
            continue
        same: dict[bytes, list[InputFile]] = {}
        for f in group:
            d = _digest(f)
            if d is not None:
                same.setdefault(d, []).append(f)
        for found in same.values():
            if len(found) > 1:
                # A part of a rotated set first (read alone elsewhere, the set would lose it), then a
                # file read as it is (plain, not decoded: its last line and NUL bytes judged whole, the
                # compiled log pass); else the first in walk order.
                found.sort(key=lambda f: (id(f) not in rotated, bool(f.compression) or id(f) in decoded))
                copies |= _read_once(found, decoded)
    left = [f for f in eligible if id(f) not in copies and id(f) not in rotated]
    copies |= _earlier_copies(left)
    return [f for f, _ in files if id(f) not in copies]


KEY = 256  # the first bytes an earlier copy is looked for by (a shorter file is no copy of another here)


def _earlier_copies(files: list[InputFile]) -> set[int]:
    """The ids of the files that are an earlier copy of another of their kind (a kind whose files grow by
    appended lines: ``SourceKind.appends``): the whole of what is read of one is the first bytes of the
    other's (``cp vllm.log vllm.log.bak`` and the log went on; a .gz saved while it was written, cut where
    it was). Reading both would count each line of the copy twice: the longer one is read, the copy's
    lines are its lines at the same numbers. Not a part of a rotated set (its overlap is the set's).

    Cheap: files are grouped by their first KEY bytes; only files of a group compare their first 64 KiB,
    and only then is the shorter one read whole, with the other as far as it goes."""
    kinds_ = kinds()
    groups: dict[tuple[str, bytes], list[InputFile]] = {}
    for f in files:
        kind = kinds_.get(f.kind)
        if kind is None or not getattr(kind, "appends", False):
            continue
        key = _first(f, KEY)
        if key is not None and len(key) == KEY:
            groups.setdefault((f.kind, key), []).append(f)
    out: set[int] = set()
    for group in groups.values():
        if len(group) < 2:
            continue
        heads = {id(f): _first(f, HEAD) or b"" for f in group}
        # only a file whose head begins another's (or is begun by one) is measured (a compressed one is
        # decompressed to its end for that): logs of two servers started alike part within 64 KiB
        linked = [
            f
            for f in group
            if any(
                g is not f and (heads[id(g)].startswith(heads[id(f)]) or heads[id(f)].startswith(heads[id(g)]))
                for g in group
            )
        ]
        sizes = {id(f): _read_size(f) for f in linked}
        left = sorted(linked, key=lambda f: -(sizes[id(f)] or 0))
        while len(left) > 1:
            longest, rest = left[0], []
            for f in left[1:]:
                a, b = heads[id(f)], heads[id(longest)]
                n = sizes[id(f)]
                if n is not None and n < (sizes[id(longest)] or 0) and b.startswith(a) and _is_prefix(f, longest, n):
                    longest.warnings.append(
                        f"also found as {f.display} (an earlier copy: its {n} bytes are this file's first): read once"
                    )
                    longest.aliases.extend(f.names())
                    out.add(id(f))
                else:
                    rest.append(f)
            left = rest
    return out


def _first(f: InputFile, n: int, strict: bool = False) -> bytes | None:
    """The first ``n`` bytes of what is read of ``f`` (fewer when it is shorter, or damaged there; None
    when ``strict`` and it cannot be read that far); None when empty."""
    got = bytearray()
    chunks = _chunks(f)
    try:
        for chunk in chunks:
            got += chunk
            if len(got) >= n:
                break
    except (OSError, ValueError, EOFError):
        if strict:
            return None  # its reading reports it
    finally:
        chunks.close()
    return bytes(got[:n]) if got else None


def _read_size(f: InputFile) -> int | None:
    """How many bytes are read of ``f``: its size when plain, else its content counted (as far as it
    decompresses: a cut .gz is read that far); None when unreadable."""
    if f.compression is None:
        try:
            return os.stat(f.path).st_size
        except OSError:
            return None
    n = 0
    try:
        for chunk in _chunks(f):
            n += len(chunk)
    except (OSError, ValueError, EOFError):
        pass
    return n or None


def _is_prefix(short: InputFile, long: InputFile, n: int) -> bool:
    """The ``n`` bytes read of ``short`` (as far as it reads: a cut .gz) are the first ``n`` of ``long``'s."""
    a, b = _chunks(short), _chunks(long)
    pending = b""
    seen = 0
    try:
        while True:
            try:
                chunk = next(a, None)
            except (OSError, ValueError, EOFError):
                chunk = None  # the short one ends where it stops reading
            if chunk is None:
                return seen == n
            while len(pending) < len(chunk):
                try:
                    more = next(b, None)
                except (OSError, ValueError, EOFError):
                    return False
                if more is None:
                    return False
                pending += more
            if pending[: len(chunk)] != chunk:
                return False
            pending = pending[len(chunk) :]
            seen += len(chunk)
    finally:
        a.close()
        b.close()
