"""Safe unpacking of bundle archives (.tar, .tar.gz/.tgz, .tar.bz2, .tar.xz, .tar.zst, .zip).

An archive is known by its content (:func:`content_kind`: a zip signature at the start; a tar
header, ``ustar`` at offset 257 with a valid checksum, directly or after gzip/bz2/xz/zstd
decompression), whatever its name and wherever it is found; a name alone (``.tar.gz``...) still
makes the walker try it. A gzip'd log is not an archive: only a compressed tar is.

Members are copied one by one into a private temporary folder (inside the
run's Workspace), never with ``extractall``, and nothing is ever written
outside that folder. Each copy keeps its member's modification time (a tar's, or a zip's: its
Unix extra field, else its local date and time, as ``unzip`` restores it), so a file reads the
same inside an archive as out of it (a scrape timed by its mtime, a year-less log's year). Refused with an error (exit code 3, the archive named):

- absolute member names, ``..`` components, drive letters;
- symbolic and hard links whose target leaves the archive (links inside it
  are skipped: bundle files are regular files, and a link is never created,
  so nothing can be written through one);
- more than ``max_members`` members, more than ``max_bytes`` unpacked, or an
  unpacked/packed ratio above ``max_ratio`` once more than ``RATIO_FLOOR_BYTES``
  are unpacked (a decompression bomb). Sizes are counted while copying, so a
  lying header cannot get past them; members that are skipped are charged
  their declared size (the decompressor still has to run over them).

Limits, from the environment (read for each outermost archive):

- ``PREEMPTLOG_ARCHIVE_MAX_MEMBERS`` (default 20000),
- ``PREEMPTLOG_ARCHIVE_MAX_BYTES`` (default 32 GiB; suffixes K, M, G, T),
- ``PREEMPTLOG_ARCHIVE_MAX_RATIO`` (default 200).

One :class:`Budget` covers an archive and every archive inside it (the walker unpacks nested
archives with the budget of the outermost one), so a nested bomb is refused like a flat one.

Devices, FIFOs and sockets are skipped. A damaged tar (truncated, corrupt) keeps the members
unpacked before the damage, with a warning (the run ends with PARTIAL); a zip is read member by
member from its central directory, so a damaged member is skipped with a warning and the others
are read. Damage before the first member (or in every member of a zip) raises
:class:`ArchiveUnreadable`. A file named like an archive that is not one raises
:class:`NotAnArchive` so the caller can read it as a plain file.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import posixpath
import re
import stat
import tarfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from ..errors import InputError, UsageError

if TYPE_CHECKING:
    from .workspace import Workspace

MAX_MEMBERS = 20_000
MAX_TOTAL_BYTES = 32 * 1024**3
MAX_RATIO = 200
RATIO_FLOOR_BYTES = 8 * 1024**2  # ratios are only judged past this many unpacked bytes
CHUNK = 1 << 20
# Members nested deeper than this are skipped with a warning: a bundle never nests so deep, and
# creating (and later removing) such a tree would recurse once per level.
MAX_MEMBER_DEPTH = 200

ENV_MEMBERS = "PREEMPTLOG_ARCHIVE_MAX_MEMBERS"
ENV_BYTES = "PREEMPTLOG_ARCHIVE_MAX_BYTES"
ENV_RATIO = "PREEMPTLOG_ARCHIVE_MAX_RATIO"


UNSAFE_HINT = "if you trust the archive, unpack it yourself and pass the folder"


class ArchiveRefused(InputError):
    def __init__(self, message: str, *, hint: str | None = UNSAFE_HINT) -> None:
        super().__init__(message, hint=hint)


class ArchiveUnreadable(InputError):
    """The archive is damaged before its first member, or unsupported: ``reason`` without its name."""

    def __init__(self, archive: str, reason: str, *, hint: str | None = None) -> None:
        super().__init__(f"{archive}: {reason}", hint=hint)
        self.reason = reason


class NotAnArchive(Exception):
    """The file is named like an archive but is not one (read it as a plain file)."""


@dataclass(frozen=True)
class Limits:
    max_members: int = MAX_MEMBERS
    max_bytes: int = MAX_TOTAL_BYTES
    max_ratio: float = MAX_RATIO


_SUFFIX = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


def _env_number(name: str, default: float, *, sizes: bool = False, whole: bool = False) -> float:
    """The limit set by ``$name`` (``default`` when unset): a positive number (``sizes``: with a K, M,
    G or T suffix; ``whole``: a count, so a whole number), never one that a count of members or
    bytes rounds down to 0 (``0.5`` members, ``0.1`` bytes), which would refuse every archive."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    number = r"(\d+)" if whole else r"(\d+(?:\.\d+)?)"
    pattern = number + (r"\s*([KMGT]?)(?:i?B)?" if sizes else r"()")
    m = re.fullmatch(pattern, raw, re.I)
    value = float(m.group(1)) * _SUFFIX[m.group(2).upper()] if m else 0.0
    if value <= 0 or ((whole or sizes) and value < 1):
        kind = "a positive whole number" if whole else "a positive number" if not sizes else "a positive size"
        raise UsageError(f"{name}={raw!r} is not {kind}", hint="e.g. 64G" if sizes else "e.g. 500")
    return value


def limits_from_env() -> Limits:
    return Limits(
        max_members=int(_env_number(ENV_MEMBERS, MAX_MEMBERS, whole=True)),
        max_bytes=int(_env_number(ENV_BYTES, MAX_TOTAL_BYTES, sizes=True)),
        max_ratio=_env_number(ENV_RATIO, MAX_RATIO),
    )


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def safe_name(archive: str, name: str) -> str | None:
    """The member's relative path inside the unpack folder; None for the archive root itself ("./").

    Raises ArchiveRefused for absolute names, drive letters and ``..`` components.
    """
    norm = name.replace("\\", "/")
    if norm.startswith("/") or (len(norm) > 1 and norm[1] == ":"):
        raise ArchiveRefused(f"{archive}: member {name!r} has an absolute path; archive refused")
    parts = [p for p in norm.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise ArchiveRefused(f"{archive}: member {name!r} climbs out of the archive (..); archive refused")
    if "\x00" in norm:
        raise ArchiveRefused(f"{archive}: member {name!r} has a NUL byte in its name; archive refused")
    if not parts:
        return None
    return "/".join(parts)


def link_escapes(member_name: str, target: str) -> bool:
    """True if a link stored at ``member_name`` pointing to ``target`` leaves the archive."""
    target = target.replace("\\", "/")
    if not target or target.startswith("/") or (len(target) > 1 and target[1] == ":"):
        return True
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(member_name), target))
    return joined == ".." or joined.startswith("../") or joined.startswith("/")


class Budget:
    """What an archive, with every archive inside it, may unpack: members and bytes are counted over
    the whole tree, and the unpacked/packed ratio against the outermost archive's size. It also
    holds what the archive being unpacked has given so far (for the damage warning)."""

    def __init__(self, archive: str, packed_size: int, limits: Limits) -> None:
        self.top = archive  # the outermost archive
        self.packed = max(packed_size, 1)
        self.limits = limits
        self.total = 0  # bytes unpacked in the whole tree
        self.members = 0  # members met in the whole tree
        self.archive = archive  # the archive being unpacked, and its progress:
        self.here_bytes = 0
        self.here_members = 0
        self.done = 0  # members copied completely
        self.begun = 0  # members whose copy began (one more than done while a copy is cut)

    @classmethod
    def for_archive(cls, path: Path, name: str | None = None) -> Budget:
        """A fresh budget for an outermost archive (limits read from the environment now)."""
        name = name or str(path)
        limits = limits_from_env()
        try:
            packed = path.stat().st_size
        except OSError as exc:
            raise ArchiveUnreadable(name, f"cannot read ({exc.strerror})") from None
        return cls(name, packed, limits)

    def begin(self, archive: str) -> None:
        self.archive = archive
        self.here_bytes = self.here_members = self.done = self.begun = 0

    @property
    def anything(self) -> bool:
        return self.here_bytes > 0 or self.done > 0

    def _around(self) -> str:
        return "" if self.archive == self.top else " (with the archives around it)"

    def member(self) -> None:
        self.members += 1
        self.here_members += 1
        if self.members > self.limits.max_members:
            raise ArchiveRefused(
                f"{self.archive}: more than {self.limits.max_members} members{self._around()}; archive refused",
                hint=f"raise {ENV_MEMBERS} if this archive is trusted",
            )

    def add(self, n: int) -> None:
        self.total += n
        self.here_bytes += n
        if self.total > self.limits.max_bytes:
            raise ArchiveRefused(
                f"{self.archive}: unpacks to more than {_human(self.limits.max_bytes)}{self._around()}; "
                "archive refused",
                hint=f"raise {ENV_BYTES} if this archive is trusted",
            )
        if self.total > RATIO_FLOOR_BYTES and self.total / self.packed > self.limits.max_ratio:
            size = "its size" if self.archive == self.top else f"the size of {self.top}"
            raise ArchiveRefused(
                f"{self.archive}: unpacks to more than {self.limits.max_ratio:g} times {size} "
                "(a decompression bomb?); archive refused",
                hint=f"raise {ENV_RATIO} if this archive is trusted",
            )


def _copy(src: BinaryIO, dest: Path, budget: Budget, *, salvage: Callable[[BinaryIO, int], None] | None = None) -> None:
    """Copy a member to ``dest``. ``salvage``: on a read that fails (the archive is cut inside this
    member), called with the open ``dest`` and the bytes copied so far to write what the archive
    still holds of it, before the error goes on to the caller (a tar has no checksum of its data:
    the bytes before the cut are the member's own)."""
    budget.begun += 1
    with open(dest, "xb") as out:
        copied = 0
        while True:
            try:
                chunk = src.read(CHUNK)
            except _decode_errors():
                if salvage is not None:
                    salvage(out, copied)
                raise
            if not chunk:
                break
            budget.add(len(chunk))
            out.write(chunk)
            copied += len(chunk)
    budget.done += 1


# ---------------------------------------------------------------------------------- what is an archive

ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")  # a local file header; the end record of an empty zip
TAR_BLOCK = 512
HEAD_INPUT_CAP = 4 << 20  # compressed bytes read at most to see the first tar block (a bz2 block is <= 900 KB)


def is_tar_header(block: bytes) -> bool:
    """A POSIX/GNU tar header: ``ustar`` at offset 257 and a checksum that adds up (so a text that
    happens to hold "ustar" there, a "mustard" at byte 257, is not taken for a tar)."""
    if len(block) < TAR_BLOCK or block[257:262] != b"ustar":
        return False
    field = block[148:156].replace(b"\x00", b" ").strip()
    try:
        stored = int(field, 8)
    except ValueError:
        return False
    rest = block[:148] + b" " * 8 + block[156:TAR_BLOCK]
    unsigned = sum(rest)
    signed = unsigned - 256 * sum(1 for b in rest if b > 127)
    return stored in (unsigned, signed)


def _decompressed_head(fh: BinaryIO, first: bytes) -> bytes:
    """The first tar block's worth of a gzip/bz2/xz/zstd stream (b"" when it is none, or cannot say)."""
    import bz2
    import lzma
    import zlib

    d: Any
    zlib_type = type(zlib.decompressobj())
    if first.startswith(b"\x1f\x8b"):
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    elif first.startswith(b"BZh"):
        d = bz2.BZ2Decompressor()
    elif first.startswith(b"\xfd7zXZ\x00"):
        d = lzma.LZMADecompressor()
    elif first.startswith(b"\x28\xb5\x2f\xfd"):
        try:
            import zstandard
        except ImportError:
            return b""
        fh.seek(0)
        try:
            with zstandard.ZstdDecompressor().stream_reader(fh, closefd=False) as r:
                return bytes(r.read(TAR_BLOCK))
        except zstandard.ZstdError:
            return b""
    else:
        return b""
    out = b""
    data = first
    read = len(first)
    try:
        for _ in range(1 << 12):  # bounded: each turn consumes input or gives output
            if len(out) >= TAR_BLOCK:
                break
            # max_length: a compressible stream never inflates in memory to see 512 bytes
            out += d.decompress(data, TAR_BLOCK - len(out))
            if d.eof:
                break
            if isinstance(d, zlib_type):
                data = d.unconsumed_tail
                if data:
                    continue
            else:
                data = b""
                if not d.needs_input:
                    continue
            if read >= HEAD_INPUT_CAP:
                break
            data = fh.read(1 << 16)
            if not data:
                break
            read += len(data)
    except (zlib.error, OSError, EOFError, lzma.LZMAError, ValueError):
        return out
    return out[:TAR_BLOCK]


_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)


def content_kind(path: Path) -> str | None:
    """``"zip"`` or ``"tar"`` when the bytes of ``path`` say it is an archive (a tar maybe compressed),
    whatever its name; None otherwise, and for what is not a regular file or cannot be read (never
    opens a FIFO or a device for reading: it is checked before anything is read)."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                return None
            first = fh.read(TAR_BLOCK)
            if first[:4] in ZIP_MAGICS:
                return "zip"
            if is_tar_header(first):
                return "tar"
            return "tar" if is_tar_header(_decompressed_head(fh, first)) else None
    except OSError:
        return None


# ---------------------------------------------------------------------------------- unpacking


def unpack(
    path: Path,
    workspace: Workspace,
    warnings: list[str] | None = None,
    *,
    name: str | None = None,
    budget: Budget | None = None,
) -> Path:
    """Unpack an archive into a fresh folder inside the workspace; returns that folder.

    ``name`` is the archive's name in messages (its path by default); ``budget`` the budget of the
    outermost archive when this one was found inside another (a fresh one by default). Damage after
    at least one member was unpacked is appended to ``warnings`` (the members before it are kept; in
    a zip, the damaged member is skipped and the others read); damage before (or unsupported)
    raises ArchiveUnreadable, hostile content ArchiveRefused, a file that is no archive NotAnArchive.
    """
    name = name or str(path)
    warnings = warnings if warnings is not None else []
    if budget is None:
        budget = Budget.for_archive(path, name)
    budget.begin(name)
    root = Path(os.path.join(workspace.path, f"archive-{len(os.listdir(workspace.path))}"))
    root.mkdir()
    kind = content_kind(path)
    try:
        if kind is None and zipfile.is_zipfile(path):  # named .zip, its data after a prefix (self-extracting)
            kind = "zip"
        if kind == "zip":
            if not zipfile.is_zipfile(path):
                raise ArchiveUnreadable(name, "damaged zip archive (no central directory: truncated?)")
            _unpack_zip(path, name, root, budget, warnings)
        else:
            _unpack_tar(path, name, root, budget, warnings)
    except (ArchiveRefused, ArchiveUnreadable, NotAnArchive):
        raise
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise InputError(
                f"{name}: no space left to unpack it in {workspace.path.parent}",
                hint="free some space, or point TMPDIR at a bigger disk",
            ) from None
        if budget.anything:
            warnings.append(_damaged(name, budget, _detail(exc)))
            return root
        raise ArchiveUnreadable(name, f"damaged or unsupported archive ({_detail(exc)})") from None
    except _decode_errors() as exc:
        if budget.anything:
            warnings.append(_damaged(name, budget, _detail(exc)))
            return root
        raise ArchiveUnreadable(name, f"damaged or unsupported archive ({_detail(exc)})") from None
    return root


def _detail(exc: BaseException) -> str:
    """An exception's message on one line (its type when it has none)."""
    text = str(exc).strip()
    return " ".join(text.splitlines()[0].split()) if text else type(exc).__name__


def _decode_errors() -> tuple[type[BaseException], ...]:
    import lzma
    import zlib

    errors: list[type[BaseException]] = [
        tarfile.TarError,
        zipfile.BadZipFile,
        EOFError,
        ValueError,
        zlib.error,
        lzma.LZMAError,
        RuntimeError,
        NotImplementedError,  # zipfile: encrypted member, unknown compression method
    ]
    try:
        import zstandard

        errors.append(zstandard.ZstdError)
    except ImportError:
        pass
    return tuple(errors)


def _damaged(name: str, budget: Budget, detail: str) -> str:
    return f"archive {name} is damaged ({detail}): read the {budget.done} member(s) unpacked before the damage" + (
        " and the start of the next one" if budget.begun > budget.done else ""
    )


def _target(root: Path, safe: str, archive: str, warnings: list[str]) -> Path | None:
    """Where a member goes; None (with a warning) when its place is taken by a file or it is too deep."""
    parts = safe.split("/")
    if len(parts) > MAX_MEMBER_DEPTH:
        warnings.append(
            f"{archive}: member {parts[0]}/.../{parts[-1]} is nested {len(parts) - 1} folders deep "
            f"(more than {MAX_MEMBER_DEPTH}): skipped"
        )
        return None
    dest = root.joinpath(*parts)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        warnings.append(f"{archive}: member {safe!r} lies under a file of the same name: skipped")
        return None
    # Parents are folders created here; no link is ever created, so none can be followed.
    if dest.exists():
        if not dest.is_file():
            warnings.append(f"{archive}: member {safe!r} has the name of a folder: skipped")
        return None  # a repeated name: the first copy is kept
    return dest


MAX_MEMBER_WARNINGS = 10  # damaged zip members named one by one; the rest in one line


def _keep_mtime(dest: Path, mtime: float | None) -> None:
    """The member's modification time on its copy (the copy's own is the moment it was unpacked)."""
    if mtime is None or mtime <= 0:
        return
    with contextlib.suppress(OSError, OverflowError, ValueError):
        os.utime(dest, (mtime, mtime))


def _zip_mtime(info: zipfile.ZipInfo) -> float | None:
    """A zip member's modification time: the extended-timestamp extra field (0x5455, UTC seconds,
    written by Info-ZIP's zip on Unix), else its DOS date and time, local time of this machine."""
    extra, i = info.extra, 0
    while i + 4 <= len(extra):
        tag, size = int.from_bytes(extra[i : i + 2], "little"), int.from_bytes(extra[i + 2 : i + 4], "little")
        data = extra[i + 4 : i + 4 + size]
        if tag == 0x5455 and len(data) >= 5 and data[0] & 1:
            return float(int.from_bytes(data[1:5], "little", signed=True))
        i += 4 + size
    try:
        return time.mktime((*info.date_time, 0, 0, -1))
    except (OverflowError, ValueError):
        return None


def _unpack_zip(path: Path, name: str, root: Path, budget: Budget, warnings: list[str]) -> None:
    """Every member read on its own from the central directory: a damaged one is skipped (a warning
    names it and why), the others are read; every member damaged is ArchiveUnreadable."""
    damaged: list[tuple[str, str]] = []
    with zipfile.ZipFile(path) as zf:
        infos = zf.infolist()
        if budget.members + len(infos) > budget.limits.max_members:  # known from the central directory
            budget.members = budget.limits.max_members
            budget.member()
        for info in infos:
            budget.member()
            safe = safe_name(name, info.filename)
            if safe is None or info.is_dir():
                continue
            mode = (info.external_attr >> 16) & 0o170000
            if mode == 0o120000:  # a symlink stored in a zip: its data is the target
                try:
                    with zf.open(info) as src:
                        target = src.read(4096).decode("utf-8", "replace")
                except _decode_errors() as exc:
                    damaged.append((info.filename, _detail(exc)))
                    continue  # no link is ever created: an unreadable one is just not read
                if link_escapes(safe, target):
                    raise ArchiveRefused(
                        f"{name}: member {info.filename!r} is a link to {target!r} outside the archive; archive refused"
                    )
                continue
            if mode and mode != 0o100000:  # device, FIFO, socket
                continue
            dest = _target(root, safe, name, warnings)
            if dest is None:
                budget.add(info.file_size)
                continue
            try:
                with zf.open(info) as src:
                    _copy(src, dest, budget)
                _keep_mtime(dest, _zip_mtime(info))
            except _decode_errors() as exc:
                dest.unlink(missing_ok=True)  # what was copied of it is not trusted
                damaged.append((info.filename, _detail(exc)))
    if damaged and budget.done == 0:
        raise ArchiveUnreadable(name, f"damaged or unsupported archive ({damaged[0][1]})")
    for member, detail in damaged[:MAX_MEMBER_WARNINGS]:
        warnings.append(f"{name}: member {member!r} is damaged ({detail}): skipped, the other members read")
    if len(damaged) > MAX_MEMBER_WARNINGS:
        warnings.append(f"{name}: {len(damaged) - MAX_MEMBER_WARNINGS} more damaged member(s) skipped")


def _open_tar(path: Path, name: str, stack: contextlib.ExitStack) -> tarfile.TarFile:
    with open(path, "rb") as fh:
        magic = fh.read(262)
    if magic[:4] == b"\x28\xb5\x2f\xfd":
        try:
            import zstandard
        except ImportError:
            raise ArchiveUnreadable(
                name, "a .tar.zst needs the zstandard package", hint="pip install zstandard"
            ) from None
        with open(path, "rb") as raw, zstandard.ZstdDecompressor().stream_reader(raw) as peek:
            try:
                first = peek.read(512)
            except zstandard.ZstdError:
                first = b""
        if first[257:262] != b"ustar" and len(first) >= 262:
            raise NotAnArchive(name)
        raw = stack.enter_context(open(path, "rb"))  # noqa: SIM115 - closed by the ExitStack
        fileobj = stack.enter_context(zstandard.ZstdDecompressor().stream_reader(raw))
        return stack.enter_context(tarfile.open(fileobj=fileobj, mode="r|"))
    is_tar = magic[257:262] == b"ustar" if len(magic) >= 262 else False
    if magic[:4] == b"PK\x03\x04":
        raise ArchiveUnreadable(name, "damaged zip archive (no central directory: truncated?)")
    try:
        return stack.enter_context(tarfile.open(path, "r:*"))
    except tarfile.ReadError:
        if is_tar:
            raise
        # Not a tar at all, or a compressed file that holds no tar (a gzip of a log named .tar.gz):
        # the caller reads it as a plain file, recognised by its content.
        raise NotAnArchive(name) from None


def _unpack_tar(path: Path, name: str, root: Path, budget: Budget, warnings: list[str]) -> None:
    with contextlib.ExitStack() as stack:
        tf = _open_tar(path, name, stack)
        for member in tf:
            budget.member()
            safe = safe_name(name, member.name)
            if member.issym() or member.islnk():
                # A hard link's target is relative to the archive root, a symlink's to its folder.
                base = (safe or "") if member.issym() else ""
                if link_escapes(base, member.linkname):
                    raise ArchiveRefused(
                        f"{name}: member {member.name!r} is a link to {member.linkname!r} outside the archive; "
                        "archive refused"
                    )
                continue
            if safe is None or member.isdir() or not member.isreg():
                continue
            dest = _target(root, safe, name, warnings)
            if dest is None:
                budget.add(member.size)
                continue
            src = tf.extractfile(member)
            if src is None:
                continue
            with src:
                _copy(src, dest, budget, salvage=_tar_salvage(tf, member, budget))
            _keep_mtime(dest, member.mtime)
        _tar_end_check(tf, name, budget)


def _raw_tar(tf: tarfile.TarFile) -> BinaryIO | None:
    """The tar's own file when it is read uncompressed from a file (seeking in it is cheap), else None."""
    fh = tf.fileobj
    return fh if isinstance(fh, io.BufferedReader | io.FileIO) else None


SALVAGE_CHUNK = 64 << 10  # a compressed tar cut inside a member: read back in pieces this large


def _tar_salvage(tf: tarfile.TarFile, member: tarfile.TarInfo, budget: Budget) -> Callable[[BinaryIO, int], None]:
    """What a tar still holds of a member it is cut inside (``_copy``'s ``salvage``): its bytes from
    where the copy stopped to the cut. A read of the member fails whole when it comes short, so without
    this a member cut anywhere in its last chunk is unpacked empty. An uncompressed tar is read to its
    end; a compressed one (going back in it decompresses it again from its start, once) in pieces of
    ``SALVAGE_CHUNK`` until the piece that meets the cut; a stream read once (zstd) keeps what it had."""

    def salvage(out: BinaryIO, copied: int) -> None:
        if member.sparse is not None:
            return
        raw = _raw_tar(tf)
        fh = raw if raw is not None else tf.fileobj
        piece = CHUNK if raw is not None else SALVAGE_CHUNK
        try:
            fh.seek(member.offset_data + copied)
            left = member.size - copied
            while left > 0:
                got = fh.read(min(piece, left))
                if not got:
                    break
                budget.add(len(got))
                out.write(got)
                left -= len(got)
        except (OSError, *_decode_errors()):
            return  # the piece that meets the cut (or a stream that cannot go back): what was written stays

    return salvage


def _tar_end_check(tf: tarfile.TarFile, name: str, budget: Budget) -> None:
    """An uncompressed tar cut inside a member's header ends its member list without an error
    (tarfile takes a short header for the end of the archive): bytes other than the end-of-archive
    zero blocks where the next header would start are that cut header, said as damage."""
    raw = _raw_tar(tf)
    if raw is None:
        return
    raw.seek(tf.offset)
    head = raw.read(TAR_BLOCK)  # the end-of-archive marker is a zero block; anything else is a header
    if head.strip(b"\0"):
        raise tarfile.ReadError(f"a member header is cut or unreadable at byte {tf.offset}")
