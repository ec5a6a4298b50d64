"""Safe unpacking of bundle archives (.tar, .tar.gz/.tgz, .tar.bz2, .tar.xz, .tar.zst, .zip).

Members are copied one by one into a private temporary folder (inside the
run's Workspace), never with ``extractall``, and nothing is ever written
outside that folder. Refused with an error (exit code 3, the archive named):

- absolute member names, ``..`` components, drive letters;
- symbolic and hard links whose target leaves the archive (links inside it
  are skipped: bundle files are regular files, and a link is never created,
  so nothing can be written through one);
- more than ``max_members`` members, more than ``max_bytes`` unpacked, or an
  unpacked/packed ratio above ``max_ratio`` once more than ``RATIO_FLOOR_BYTES``
  are unpacked (a decompression bomb). Sizes are counted while copying, so a
  lying header cannot get past them; members that are skipped are charged
  their declared size (the decompressor still has to run over them).

Limits, from the environment (read at each unpack):

- ``PREEMPTLOG_ARCHIVE_MAX_MEMBERS`` (default 20000),
- ``PREEMPTLOG_ARCHIVE_MAX_BYTES`` (default 32 GiB; suffixes K, M, G, T),
- ``PREEMPTLOG_ARCHIVE_MAX_RATIO`` (default 200).

Devices, FIFOs and sockets are skipped. A damaged archive (truncated,
corrupt) keeps the members unpacked before the damage, with a warning (the
run ends with PARTIAL); damage before the first member is an error. A file
named like an archive that is not one raises :class:`NotAnArchive` so the
caller can read it as a plain file.
"""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import re
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

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


class NotAnArchive(Exception):
    """The file is named like an archive but is not one (read it as a plain file)."""


@dataclass(frozen=True)
class Limits:
    max_members: int = MAX_MEMBERS
    max_bytes: int = MAX_TOTAL_BYTES
    max_ratio: float = MAX_RATIO


_SUFFIX = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


def _env_number(name: str, default: float, *, sizes: bool = False) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    pattern = r"(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?" if sizes else r"(\d+(?:\.\d+)?)()"
    m = re.fullmatch(pattern, raw, re.I)
    if not m or float(m.group(1)) <= 0:
        raise UsageError(f"{name}={raw!r} is not a positive number", hint="e.g. 64G" if sizes else "e.g. 500")
    return float(m.group(1)) * _SUFFIX[m.group(2).upper()]


def limits_from_env() -> Limits:
    return Limits(
        max_members=int(_env_number(ENV_MEMBERS, MAX_MEMBERS)),
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


class _Budget:
    def __init__(self, archive: str, packed_size: int, limits: Limits) -> None:
        self.archive = archive
        self.packed = max(packed_size, 1)
        self.limits = limits
        self.total = 0
        self.members = 0
        self.done = 0  # members copied completely

    @property
    def anything(self) -> bool:
        return self.total > 0 or self.done > 0

    def member(self) -> None:
        self.members += 1
        if self.members > self.limits.max_members:
            raise ArchiveRefused(
                f"{self.archive}: more than {self.limits.max_members} members; archive refused",
                hint=f"raise {ENV_MEMBERS} if this archive is trusted",
            )

    def add(self, n: int) -> None:
        self.total += n
        if self.total > self.limits.max_bytes:
            raise ArchiveRefused(
                f"{self.archive}: unpacks to more than {_human(self.limits.max_bytes)}; archive refused",
                hint=f"raise {ENV_BYTES} if this archive is trusted",
            )
        if self.total > RATIO_FLOOR_BYTES and self.total / self.packed > self.limits.max_ratio:
            raise ArchiveRefused(
                f"{self.archive}: unpacks to more than {self.limits.max_ratio:g} times its size "
                "(a decompression bomb?); archive refused",
                hint=f"raise {ENV_RATIO} if this archive is trusted",
            )


def _copy(src: BinaryIO, dest: Path, budget: _Budget) -> None:
    with open(dest, "xb") as out:
        while True:
            chunk = src.read(CHUNK)
            if not chunk:
                break
            budget.add(len(chunk))
            out.write(chunk)
    budget.done += 1


def unpack(path: Path, workspace: Workspace, warnings: list[str] | None = None) -> Path:
    """Unpack an archive into a fresh folder inside the workspace; returns that folder.

    Damage after at least one member was unpacked is appended to ``warnings``
    (the members before it are kept); other damage raises InputError.
    """
    name = str(path)
    warnings = warnings if warnings is not None else []
    limits = limits_from_env()
    try:
        packed = path.stat().st_size
    except OSError as exc:
        raise InputError(f"{name}: cannot read ({exc.strerror})") from None
    root = Path(os.path.join(workspace.path, f"archive-{len(os.listdir(workspace.path))}"))
    root.mkdir()
    budget = _Budget(name, packed, limits)
    try:
        if zipfile.is_zipfile(path):
            _unpack_zip(path, root, budget, warnings)
        else:
            _unpack_tar(path, root, budget, warnings)
    except (ArchiveRefused, NotAnArchive):
        raise
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise InputError(
                f"{name}: no space left to unpack it in {workspace.path.parent}",
                hint="free some space, or point TMPDIR at a bigger disk",
            ) from None
        if budget.anything:
            warnings.append(_damaged(name, budget, str(exc)))
            return root
        raise InputError(f"{name}: damaged or unsupported archive ({exc})") from None
    except _decode_errors() as exc:
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if budget.anything:
            warnings.append(_damaged(name, budget, detail))
            return root
        raise InputError(f"{name}: damaged or unsupported archive ({detail})") from None
    return root


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


def _damaged(name: str, budget: _Budget, detail: str) -> str:
    return f"archive {name} is damaged ({detail}): read the {budget.done} member(s) unpacked before the damage" + (
        " and the start of the next one" if budget.members > budget.done else ""
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


def _unpack_zip(path: Path, root: Path, budget: _Budget, warnings: list[str]) -> None:
    with zipfile.ZipFile(path) as zf:
        infos = zf.infolist()
        if len(infos) > budget.limits.max_members:  # known from the central directory: refuse early
            budget.members = budget.limits.max_members
            budget.member()
        for info in infos:
            budget.member()
            safe = safe_name(str(path), info.filename)
            if safe is None or info.is_dir():
                continue
            mode = (info.external_attr >> 16) & 0o170000
            if mode == 0o120000:  # a symlink stored in a zip: its data is the target
                with zf.open(info) as src:
                    target = src.read(4096).decode("utf-8", "replace")
                if link_escapes(safe, target):
                    raise ArchiveRefused(
                        f"{path}: member {info.filename!r} is a link to {target!r} outside the archive; archive refused"
                    )
                continue
            if mode and mode != 0o100000:  # device, FIFO, socket
                continue
            dest = _target(root, safe, str(path), warnings)
            if dest is None:
                budget.add(info.file_size)
                continue
            with zf.open(info) as src:
                _copy(src, dest, budget)


def _open_tar(path: Path, stack: contextlib.ExitStack) -> tarfile.TarFile:
    with open(path, "rb") as fh:
        magic = fh.read(262)
    if magic[:4] == b"\x28\xb5\x2f\xfd":
        try:
            import zstandard
        except ImportError:
            raise InputError(f"{path}: .tar.zst needs the zstandard package (pip install zstandard)") from None
        with open(path, "rb") as raw, zstandard.ZstdDecompressor().stream_reader(raw) as peek:
            try:
                first = peek.read(512)
            except zstandard.ZstdError:
                first = b""
        if first[257:262] != b"ustar" and len(first) >= 262:
            raise NotAnArchive(str(path))
        raw = stack.enter_context(open(path, "rb"))  # noqa: SIM115 - closed by the ExitStack
        fileobj = stack.enter_context(zstandard.ZstdDecompressor().stream_reader(raw))
        return stack.enter_context(tarfile.open(fileobj=fileobj, mode="r|"))
    is_tar = magic[257:262] == b"ustar" if len(magic) >= 262 else False
    if magic[:4] == b"PK\x03\x04":
        raise InputError(f"{path}: damaged zip archive (no central directory: truncated?)")
    try:
        return stack.enter_context(tarfile.open(path, "r:*"))
    except tarfile.ReadError:
        if is_tar:
            raise
        # Not a tar at all, or a compressed file that holds no tar (a gzip of a log named .tar.gz):
        # the caller reads it as a plain file, recognised by its content.
        raise NotAnArchive(str(path)) from None


def _unpack_tar(path: Path, root: Path, budget: _Budget, warnings: list[str]) -> None:
    with contextlib.ExitStack() as stack:
        tf = _open_tar(path, stack)
        for member in tf:
            budget.member()
            safe = safe_name(str(path), member.name)
            if member.issym() or member.islnk():
                # A hard link's target is relative to the archive root, a symlink's to its folder.
                base = (safe or "") if member.issym() else ""
                if link_escapes(base, member.linkname):
                    raise ArchiveRefused(
                        f"{path}: member {member.name!r} is a link to {member.linkname!r} outside the archive; "
                        "archive refused"
                    )
                continue
            if safe is None or member.isdir() or not member.isreg():
                continue
            dest = _target(root, safe, str(path), warnings)
            if dest is None:
                budget.add(member.size)
                continue
            src = tf.extractfile(member)
            if src is None:
                continue
            with src:
                _copy(src, dest, budget)
