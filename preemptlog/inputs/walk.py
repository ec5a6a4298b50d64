"""Walking the inputs: folders (links kept inside, no loops, FIFOs and devices never opened),
archives (known by their content wherever they are found, nested ones too: :func:`expand_archives`),
standard input spooled to the workspace (moved from bundle.py)."""

from __future__ import annotations

import errno
import os
import shutil
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from .archive import ArchiveRefused, ArchiveUnreadable, Budget, NotAnArchive, content_kind, unpack
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
    within: tuple[Path, ...] = ()  # the user's archive(s) it was unpacked from (outputs never written there)

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


MAX_ARCHIVE_NESTING = 3  # archives inside archives unpacked at most this many levels deep
# Zip files that are documents or packages, not bundles: kept whole (read as a binary file, "not
# recognised") rather than unpacked into a list of XML members.
ZIP_DOCUMENTS = (
    ".docx",
    ".xlsx",
    ".pptx",
    ".odt",
    ".ods",
    ".odp",
    ".epub",
    ".jar",
    ".war",
    ".whl",
    ".apk",
    ".ipynb.zip",
)


def expand_archives(
    entries: list[_Entry], workspace: Workspace, warnings: list[str], originals: list[Path]
) -> list[_Entry]:
    """Every entry that is an archive replaced, in place, by its members (``<archive>!<member>``).

    An archive is known by its content (archive.content_kind), whatever its name and wherever it is:
    named on the command line, piped to standard input, found in a folder or inside another
    archive (unpacked down to MAX_ARCHIVE_NESTING levels, with the outermost archive's budget, so
    a nested bomb is refused like a flat one). A name alone (``x.tar.gz``) makes it tried too: a
    file that is not one is read as a plain file. A refused archive is an error wherever it is; a
    damaged one found in a folder or an archive becomes an unreadable entry (the run is partial),
    one named on the command line is an error, as before. The same archive reached twice is read once.
    An archive that is the user's own file joins ``originals``.
    """
    done: set[tuple[int, int]] = set()
    expanded: dict[int, list[_Entry]] = {}
    count = 0
    # Archives reached through a symbolic link last: one reached twice keeps its own name.
    for i in sorted(range(len(entries)), key=lambda i: (entries[i].path.is_symlink(), i)):
        expanded[i] = _expand(entries[i], 0, None, workspace, warnings, originals, done)
        count += len(expanded[i])
        if count > MAX_FILES:
            break  # the caller refuses the bundle
    return [e for i, entry in enumerate(entries) for e in expanded.get(i, [entry])]


def _expand(
    e: _Entry,
    level: int,
    budget: Budget | None,
    workspace: Workspace,
    warnings: list[str],
    originals: list[Path],
    done: set[tuple[int, int]],
) -> list[_Entry]:
    if e.skip:
        return [e]
    try:
        st = os.stat(e.path)
    except OSError:
        return [e]  # described (and reported) as unreadable later
    if not stat.S_ISREG(st.st_mode):
        return [e]
    kind = content_kind(e.path) or _archive_kind(e.path)
    if not kind or (kind == "zip" and e.path.name.lower().endswith(ZIP_DOCUMENTS)):
        return [e]
    key = (st.st_dev, st.st_ino)
    if key in done:
        return []  # the same archive reached twice (given twice, a link to it): read once
    if level >= MAX_ARCHIVE_NESTING:
        e.skip = (
            f"an archive inside {level} archives: not unpacked "
            f"(archives are unpacked {MAX_ARCHIVE_NESTING} levels deep at most): skipped"
        )
        return [e]
    try:
        if budget is None:  # an outermost archive: its budget covers every archive inside it
            budget = Budget.for_archive(e.path, e.display)
        root = unpack(e.path, workspace, warnings, name=e.display, budget=budget)
    except NotAnArchive:
        return [e]  # named like an archive, holding something else: read by its content
    except ArchiveRefused:
        raise
    except ArchiveUnreadable as exc:
        if not e.in_bundle:
            raise  # named on the command line: the error it always was
        e.skip = f"{exc.reason}: skipped" + (f" ({exc.hint})" if exc.hint else "")
        return [e]
    done.add(key)
    if e.original:
        originals.append(e.path)
    out: list[_Entry] = []
    for member, display in _walk_unpacked(root, e.display):
        within = (*e.within, e.path) if e.original else e.within
        inner = _Entry(member, display, original=False, in_bundle=True, within=within)
        out.extend(_expand(inner, level + 1, budget, workspace, warnings, originals, done))
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
