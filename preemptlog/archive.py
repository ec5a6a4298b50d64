"""Safe unpacking of bundle archives (.tar, .tar.gz/.tgz, .tar.zst, .zip).

Members are copied one by one into a private temporary folder, never with
``extractall``. Refused with an error (nothing is written outside the folder):

- absolute member names, ``..`` components, drive letters;
- symbolic and hard links whose target leaves the archive (links inside it
  are skipped: bundle files are regular files);
- more than ``MAX_MEMBERS`` members, more than ``MAX_TOTAL_BYTES`` unpacked,
  or an unpacked/packed ratio above ``MAX_RATIO`` (a decompression bomb),
  checked while copying, so a lying header cannot get past it.

Devices, FIFOs and sockets are skipped.
"""

from __future__ import annotations

import os
import posixpath
import tarfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from .errors import InputError

if TYPE_CHECKING:
    from .bundle import Workspace

MAX_MEMBERS = 20_000
MAX_TOTAL_BYTES = 32 * 1024**3
MAX_RATIO = 200
RATIO_FLOOR_BYTES = 8 * 1024**2  # ratios are only judged past this many unpacked bytes
CHUNK = 1 << 20


class ArchiveRefused(InputError):
    pass


def _safe_name(archive: str, name: str) -> str:
    norm = name.replace("\\", "/")
    if norm.startswith("/") or (len(norm) > 1 and norm[1] == ":"):
        raise ArchiveRefused(f"{archive}: member {name!r} has an absolute path; archive refused")
    parts = [p for p in norm.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise ArchiveRefused(f"{archive}: member {name!r} climbs out of the archive (..); archive refused")
    if not parts:
        raise ArchiveRefused(f"{archive}: member with an empty name; archive refused")
    return "/".join(parts)


def _link_escapes(member_name: str, target: str) -> bool:
    if target.startswith("/") or (len(target) > 1 and target[1] == ":"):
        return True
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(member_name), target))
    return joined == ".." or joined.startswith("../")


class _Budget:
    def __init__(self, archive: str, packed_size: int) -> None:
        self.archive = archive
        self.packed = max(packed_size, 1)
        self.total = 0
        self.members = 0

    def member(self) -> None:
        self.members += 1
        if self.members > MAX_MEMBERS:
            raise ArchiveRefused(f"{self.archive}: more than {MAX_MEMBERS} members; archive refused")

    def add(self, n: int) -> None:
        self.total += n
        if self.total > MAX_TOTAL_BYTES:
            raise ArchiveRefused(
                f"{self.archive}: unpacks to more than {MAX_TOTAL_BYTES // 1024**3} GiB; archive refused"
            )
        if self.total > RATIO_FLOOR_BYTES and self.total / self.packed > MAX_RATIO:
            raise ArchiveRefused(
                f"{self.archive}: unpacks to more than {MAX_RATIO}x its size (a decompression bomb?); archive refused"
            )


def _copy(src: BinaryIO, dest: Path, budget: _Budget) -> None:
    with open(dest, "xb") as out:
        while True:
            chunk = src.read(CHUNK)
            if not chunk:
                break
            budget.add(len(chunk))
            out.write(chunk)


def unpack(path: Path, workspace: "Workspace") -> Path:
    """Unpack an archive into a fresh folder inside the workspace; returns that folder."""
    name = str(path)
    try:
        packed = path.stat().st_size
    except OSError as exc:
        raise InputError(f"{name}: cannot read ({exc.strerror})") from None
    root = workspace.path / f"archive-{len(os.listdir(workspace.path))}"
    root.mkdir()
    budget = _Budget(name, packed)
    try:
        if zipfile.is_zipfile(path):
            _unpack_zip(path, root, budget)
        else:
            _unpack_tar(path, root, budget)
    except ArchiveRefused:
        raise
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError) as exc:
        raise InputError(f"{name}: damaged or unsupported archive ({exc})") from None
    return root


def _target(root: Path, safe: str) -> Path:
    dest = root.joinpath(*safe.split("/"))
    dest.parent.mkdir(parents=True, exist_ok=True)
    # Parents are folders we created; a pre-existing symlink cannot exist since links are never created.
    return dest


def _unpack_zip(path: Path, root: Path, budget: _Budget) -> None:
    with zipfile.ZipFile(path) as zf:
        for info in zf.infolist():
            budget.member()
            safe = _safe_name(str(path), info.filename)
            if info.is_dir():
                continue
            mode = (info.external_attr >> 16) & 0o170000
            if mode == 0o120000:  # symlink stored in a zip
                target = zf.read(info).decode("utf-8", "replace")
                if _link_escapes(safe, target):
                    raise ArchiveRefused(
                        f"{path}: member {info.filename!r} is a link to {target!r} outside the archive; archive refused"
                    )
                continue
            dest = _target(root, safe)
            if dest.exists():
                continue
            with zf.open(info) as src:
                _copy(src, dest, budget)


def _unpack_tar(path: Path, root: Path, budget: _Budget) -> None:
    mode = "r:*"
    fileobj = None
    with open(path, "rb") as fh:
        magic = fh.read(4)
    if magic == b"\x28\xb5\x2f\xfd":
        try:
            import zstandard
        except ImportError:
            raise InputError(f"{path}: .tar.zst needs the zstandard package") from None
        fileobj = zstandard.ZstdDecompressor().stream_reader(open(path, "rb"))
        mode = "r|"
    with tarfile.open(path if fileobj is None else None, mode, fileobj=fileobj) as tf:
        for member in tf:
            budget.member()
            safe = _safe_name(str(path), member.name)
            if member.issym() or member.islnk():
                if _link_escapes(safe, member.linkname) or (member.islnk() and member.linkname.startswith("/")):
                    raise ArchiveRefused(
                        f"{path}: member {member.name!r} is a link to {member.linkname!r} outside the archive; "
                        "archive refused"
                    )
                continue
            if member.isdir() or not member.isreg():
                continue
            dest = _target(root, safe)
            if dest.exists():
                continue
            src = tf.extractfile(member)
            if src is None:
                continue
            with src:
                _copy(src, dest, budget)
