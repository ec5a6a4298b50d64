"""Walking the inputs: folders (links kept inside, no loops, FIFOs and devices never opened),
unpacked archives, standard input spooled to the workspace (moved from bundle.py)."""

from __future__ import annotations

import errno
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from .workspace import Workspace

MAX_FILES = 65_000  # file ids are UInt16 in the records frame


@dataclass
class _Entry:
    path: Path
    display: str
    is_stdin: bool = False
    skip: str | None = None  # why it is not read (it becomes an "unreadable" file with this warning)
    original: bool = True  # a file of the user's (not a temporary copy)
    in_bundle: bool = False  # found inside a folder or archive (not named on the command line)

    def __post_init__(self) -> None:
        self.display = printable_name(self.display)


def printable_name(name: str) -> str:
    """A file name for outputs: bytes that are not UTF-8 (kept by Python as surrogates, which no
    output can encode) shown as ``\\xNN``."""
    try:
        name.encode("utf-8")
        return name
    except UnicodeEncodeError:
        return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _stat_problem(p: str, exc: OSError) -> str:
    return f"{printable_name(p)}: {printable_name(_stat_reason(p, exc))}"


COMPRESSED = (".gz", ".zst", ".zstd", ".bz2", ".xz")


def siblings(p: str, limit: int = 3) -> list[str]:
    """Files beside a missing ``p`` that are what was meant: ``p`` compressed or rotated
    (``x.log.gz``, ``x.log.1``, ``x.log.2.gz``), or ``p`` without the compression suffix given."""
    folder, base = os.path.split(p)
    if not base:
        return []
    try:
        names = os.listdir(folder or ".")
    except OSError:
        return []
    stem = next((base[: -len(c)] for c in COMPRESSED if base.endswith(c)), None)
    near = sorted(n for n in names if n != base and (n.startswith(base + ".") or n == stem))
    near.sort(key=lambda n: (n != stem, len(n), n))
    return [printable_name(os.path.join(folder, n)) for n in near[:limit]]


def _stat_reason(p: str, exc: OSError) -> str:
    if isinstance(exc, FileNotFoundError):
        if os.path.islink(p):
            try:
                return f"symbolic link to a missing file ({os.readlink(p)})"
            except OSError:
                pass
        near = siblings(p)
        return "no such file or folder" + (f" (did you mean {', '.join(near)}?)" if near else "")
    if isinstance(exc, PermissionError):
        return "permission denied"
    if exc.errno == errno.ELOOP:
        return "symbolic link loop"
    return f"cannot read ({exc.strerror or exc})"


ARCHIVE_SUFFIXES = (
    (".tar.gz", "tgz"),
    (".tgz", "tgz"),
    (".tar", "tar"),
    (".zip", "zip"),
    (".tar.zst", "tzst"),
    (".tar.zstd", "tzst"),
    (".tzst", "tzst"),
    (".tar.bz2", "tbz2"),
    (".tbz2", "tbz2"),
    (".tar.xz", "txz"),
    (".txz", "txz"),
)


def _archive_kind(path: Path) -> str | None:
    name = path.name.lower()
    for suffix, kind in ARCHIVE_SUFFIXES:
        if name.endswith(suffix):
            return kind
    return None


def _inside(root_real: str, target_real: str) -> bool:
    return target_real == root_real or target_real.startswith(root_real.rstrip(os.sep) + os.sep)


def walk_tree(root, onerror=None):
    """``os.walk(root, followlinks=False)`` top-down, names sorted, without recursion.

    Python 3.11's os.walk recurses once per level, so a tree about 1000 folders deep raised
    RecursionError; this walks an explicit stack, so any depth the file system allows is read
    (a path too long to open is an OSError, reported through ``onerror``).
    """
    stack = [os.fspath(root)]
    while stack:
        top = stack.pop()
        dirs: list[str] = []
        files: list[str] = []
        try:
            with os.scandir(top) as it:
                for entry in it:
                    try:
                        is_dir = entry.is_dir(follow_symlinks=False)
                    except OSError:
                        is_dir = False
                    (dirs if is_dir else files).append(entry.name)
                    if not is_dir and entry.is_symlink():
                        try:  # a link to a folder is listed with the folders, as os.walk does
                            if entry.is_dir():
                                files.pop()
                                dirs.append(entry.name)
                        except OSError:
                            pass
        except OSError as exc:
            if onerror is not None:
                onerror(exc)
            continue
        dirs.sort()
        files.sort()
        yield top, dirs, files
        # Descend in sorted order (a stack pops the last pushed first); links are never descended.
        for name in reversed(dirs):
            full = os.path.join(top, name)
            if not os.path.islink(full):
                stack.append(full)


def _walk(root: Path, warnings: list[str]) -> list[_Entry]:
    """Every file under ``root``, sorted; symbolic links are followed only when they stay inside ``root``."""
    out: list[_Entry] = []
    root_real = os.path.realpath(root)

    def onerror(exc: OSError) -> None:
        warnings.append(f"{exc.filename}: cannot list folder ({exc.strerror}): skipped")

    def display_of(full: str) -> str:
        rel = os.path.relpath(full, root)
        return str(Path(root.name) / rel) if root.name else rel

    for dirpath, dirnames, filenames in walk_tree(root, onerror):
        for name in list(dirnames):
            full = os.path.join(dirpath, name)
            if os.path.islink(full):  # not descended into (no loops); outside targets are reported
                target = os.path.realpath(full)
                if not _inside(root_real, target):
                    out.append(
                        _Entry(
                            Path(full),
                            display_of(full),
                            skip=(
                                f"symbolic link to a folder outside the bundle ({target}): not followed; "
                                "give it on the command line to read it"
                            ),
                        )
                    )
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            entry = _Entry(Path(full), display_of(full), in_bundle=True)
            if os.path.islink(full):
                target = os.path.realpath(full)
                if not os.path.exists(full):
                    pass  # dangling or a loop: _describe reports it
                elif not _inside(root_real, target):
                    entry.skip = (
                        f"symbolic link to a file outside the bundle ({target}): not followed; "
                        "give it on the command line to read it"
                    )
            out.append(entry)
            if len(out) > MAX_FILES:
                return out
    return out


def _walk_unpacked(root: Path, archive_name: str) -> list[tuple[Path, str]]:
    out = []
    for dirpath, _dirnames, filenames in walk_tree(root):
        for name in filenames:
            full = Path(dirpath) / name
            out.append((full, f"{archive_name}!{full.relative_to(root)}"))
    return out


def _spool_stdin(workspace: Workspace, stdin) -> Path:
    if stdin is None:
        stream = sys.stdin
        if stream is None:
            raise InputError("<stdin>: standard input is closed", hint="pipe a log into preemptlog, or give a file")
        src = getattr(stream, "buffer", stream)
    else:
        src = stdin
    dest = workspace.new_file("stdin")
    try:
        with open(dest, "wb") as out:
            shutil.copyfileobj(src, out, 1 << 20)
    except (OSError, ValueError) as exc:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise InputError(
                f"<stdin>: no space left to keep standard input in {workspace.path.parent}",
                hint="point TMPDIR at a bigger disk",
            ) from None
        raise InputError(f"<stdin>: cannot read standard input ({exc})") from None
    return dest
