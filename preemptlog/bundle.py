"""An incident bundle: the files given on the command line, sniffed and ordered.

Inputs are files, folders (walked recursively, symlinks not followed), ``-``
for standard input (spooled to a private temporary file) and archives
(``.tar``, ``.tar.gz``/``.tgz``, ``.zip``; see archive.py). Every file is
recognised by its content, not its name; ``--kind FILE=KIND`` overrides.

Rotated sets (``vllm.log``, ``vllm.log.1``, ``vllm.log.2.gz``, or
``vllm.log-20261129.gz``) of the same kind in the same folder form one
*stream*, read oldest first: date suffixes ascending, then numeric suffixes
descending, then the live file.

Nothing is ever written into the bundle: files are opened read-only and
temporary files live in a private folder that is removed on every exit path.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from . import sources
from .errors import InputError, UsageError
from .textio import compression_of, gzip_header_mtime, read_head

ROTATION_RE = re.compile(
    r"^(?P<base>.+?)(?:\.(?P<num>\d{1,4})|-(?P<date>\d{8}(?:\d{2}){0,3}))?(?P<comp>\.gz|\.zst|\.zstd)?$"
)
MAX_FILES = 100_000


@dataclass
class InputFile:
    file_id: int
    path: Path  # what is read (may be a private temporary copy)
    display: str  # provenance name shown in outputs
    kind: str
    compression: str | None
    size: int
    mtime: float | None
    gzip_mtime: int | None
    stream: int = -1
    order: int = 0
    is_stdin: bool = False
    sniff_score: int = 0
    forced_kind: bool = False
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "file": self.display,
            "kind": self.kind,
            "compression": self.compression,
            "size": self.size,
            "stream": self.stream,
            "order": self.order,
            "kind_forced": self.forced_kind,
            "warnings": list(self.warnings),
        }


@dataclass
class Bundle:
    files: list[InputFile]
    workdir: "Workspace"
    warnings: list[str] = field(default_factory=list)

    def of_kind(self, kind: str) -> list[InputFile]:
        return [f for f in self.files if f.kind == kind]

    @property
    def unrecognised(self) -> list[InputFile]:
        return [f for f in self.files if f.kind in ("unknown", "binary", "empty", "unreadable")]

    def streams(self) -> dict[int, list[InputFile]]:
        out: dict[int, list[InputFile]] = {}
        for f in sorted(self.files, key=lambda f: (f.stream, f.order)):
            if f.stream >= 0:
                out.setdefault(f.stream, []).append(f)
        return out

    def stream_name(self, stream: int) -> str:
        files = self.streams().get(stream, [])
        if not files:
            return f"stream {stream}"
        if len(files) == 1:
            return files[0].display
        return f"{files[-1].display} (+{len(files) - 1} rotated)"


class Workspace:
    """A private temporary folder, removed on close (and on interpreter exit)."""

    def __init__(self) -> None:
        self._dir: Path | None = None

    @property
    def path(self) -> Path:
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="preemptlog-"))
            os.chmod(self._dir, 0o700)
        return self._dir

    def new_file(self, name: str) -> Path:
        safe = re.sub(r"[^\w.-]", "_", name)[:80] or "file"
        fd, p = tempfile.mkstemp(prefix=safe + ".", dir=self.path)
        os.close(fd)
        return Path(p)

    def close(self) -> None:
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> "Workspace":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def parse_kind_overrides(items: list[str] | None) -> dict[str, str]:
    """``FILE=KIND`` pairs (FILE matches a path as given, its display name or its basename)."""
    out: dict[str, str] = {}
    known = set(sources.kinds()) | {"ignore"}
    for item in items or []:
        if "=" not in item:
            raise UsageError(f"--kind expects FILE=KIND, got {item!r}")
        name, kind = item.rsplit("=", 1)
        if kind not in known:
            raise UsageError(f"--kind {item!r}: unknown kind {kind!r}", hint="known: " + ", ".join(sorted(known)))
        out[name] = kind
    return out


def _is_text(head: bytes) -> bool:
    if not head:
        return True
    sample = head[:8192]
    if sample.count(b"\x00") > len(sample) // 100 + 1:
        return False
    control = sum(1 for b in sample if b < 9 or 13 < b < 27 or 27 < b < 32)
    return control <= len(sample) // 20 + 1


def collect(
    paths: list[str],
    workspace: Workspace,
    kind_overrides: dict[str, str] | None = None,
    stdin=None,
) -> Bundle:
    """Resolve command-line inputs into a sniffed, ordered Bundle."""
    kind_overrides = kind_overrides or {}
    raw: list[tuple[Path, str, bool]] = []  # (path, display, is_stdin)
    warnings: list[str] = []
    if not paths:
        raise UsageError("no input given", hint="pass a log file, a bundle folder or archive, or - for standard input")
    stdin_used = False
    for p in paths:
        if p == "-":
            if stdin_used:
                raise UsageError("standard input (-) given twice")
            stdin_used = True
            raw.append((_spool_stdin(workspace, stdin), "<stdin>", True))
            continue
        path = Path(p)
        try:
            st = path.stat()
        except FileNotFoundError:
            raise InputError(f"{p}: no such file or folder") from None
        except PermissionError:
            raise InputError(f"{p}: permission denied") from None
        except OSError as exc:
            raise InputError(f"{p}: cannot read ({exc.strerror or exc})") from None
        if stat.S_ISDIR(st.st_mode):
            raw.extend(_walk(path, warnings))
        elif _archive_kind(path):
            from .archive import unpack

            root = unpack(path, workspace)
            for member, display in _walk_unpacked(root, p):
                raw.append((member, display, False))
        else:
            raw.append((path, p, False))
    if len(raw) > MAX_FILES:
        raise InputError(f"too many files ({len(raw)}); the limit is {MAX_FILES}")

    files: list[InputFile] = []
    for path, display, is_stdin in raw:
        files.append(_describe(len(files), path, display, is_stdin, kind_overrides))
    _assign_streams(files)
    return Bundle(files=files, workdir=workspace, warnings=warnings)


def _archive_kind(path: Path) -> str | None:
    name = path.name.lower()
    for suffix, kind in ((".tar.gz", "tgz"), (".tgz", "tgz"), (".tar", "tar"), (".zip", "zip"), (".tar.zst", "tzst")):
        if name.endswith(suffix):
            return kind
    return None


def _walk(root: Path, warnings: list[str]) -> list[tuple[Path, str, bool]]:
    out: list[tuple[Path, str, bool]] = []

    def onerror(exc: OSError) -> None:
        warnings.append(f"{exc.filename}: cannot list folder ({exc.strerror})")

    for dirpath, dirnames, filenames in os.walk(root, onerror=onerror, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames):
            full = Path(dirpath) / name
            rel = full.relative_to(root)
            display = str(Path(root.name) / rel) if root.name else str(rel)
            out.append((full, display, False))
            if len(out) > MAX_FILES:
                return out
    return out


def _walk_unpacked(root: Path, archive_name: str) -> list[tuple[Path, str]]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames):
            full = Path(dirpath) / name
            out.append((full, f"{archive_name}!{full.relative_to(root)}"))
    return out


def _spool_stdin(workspace: Workspace, stdin) -> Path:
    src = stdin if stdin is not None else sys.stdin.buffer
    dest = workspace.new_file("stdin")
    try:
        with open(dest, "wb") as out:
            shutil.copyfileobj(src, out, 1 << 20)
    except (OSError, ValueError) as exc:
        raise InputError(f"<stdin>: cannot read standard input ({exc})") from None
    return dest


def _describe(file_id: int, path: Path, display: str, is_stdin: bool, overrides: dict[str, str]) -> InputFile:
    size, mtime = 0, None
    warnings: list[str] = []
    try:
        st = path.stat()
        size, mtime = st.st_size, st.st_mtime
        if not stat.S_ISREG(st.st_mode):
            kind = "unreadable"
            warnings.append("not a regular file (FIFO, device or socket): skipped")
            return InputFile(file_id, path, display, kind, None, size, None, None, warnings=warnings)
    except OSError as exc:
        return InputFile(
            file_id, path, display, "unreadable", None, 0, None, None, warnings=[f"cannot stat ({exc.strerror})"]
        )
    try:
        with open(path, "rb") as fh:
            magic = fh.read(4)
        head = read_head(path)
    except OSError as exc:
        return InputFile(
            file_id, path, display, "unreadable", None, size, mtime, None, warnings=[f"cannot read ({exc.strerror})"]
        )
    comp = compression_of(magic)
    gz_mtime = gzip_header_mtime(path) if comp == "gzip" else None
    forced = _override_for(path, display, overrides)
    score = 0
    if forced:
        kind = forced
    elif size == 0 or not head.strip():
        kind = "empty"
    elif not _is_text(head):
        kind = "binary"
    else:
        kind, score = sources.sniff(head.decode("utf-8", "replace"))
    return InputFile(
        file_id,
        path,
        display,
        kind,
        comp,
        size,
        None if is_stdin else mtime,
        gz_mtime,
        is_stdin=is_stdin,
        sniff_score=score,
        forced_kind=bool(forced),
        warnings=warnings,
    )


def _override_for(path: Path, display: str, overrides: dict[str, str]) -> str | None:
    for key in (display, str(path), path.name):
        if key in overrides:
            return overrides[key]
    return None


def rotation_key(name: str) -> tuple[str, tuple]:
    """(base name, sort key) for rotated-set ordering: oldest first."""
    m = ROTATION_RE.match(name)
    if not m:
        return name, (2, 0, "")
    base = m.group("base")
    if m.group("date"):
        return base, (0, 0, m.group("date"))
    if m.group("num"):
        return base, (1, -int(m.group("num")), "")
    return base, (2, 0, "")


def _assign_streams(files: list[InputFile]) -> None:
    groups: dict[tuple[str, str, str], list[InputFile]] = {}
    for f in files:
        if f.kind in ("unknown", "binary", "empty", "unreadable", "ignore"):
            continue
        if f.is_stdin:
            groups[("<stdin>", f.kind, str(f.file_id))] = [f]
            continue
        parent = str(Path(f.display).parent)
        base, _ = rotation_key(Path(f.display).name)
        groups.setdefault((parent, f.kind, base), []).append(f)
    for sid, (key, members) in enumerate(sorted(groups.items(), key=lambda kv: min(m.file_id for m in kv[1]))):
        members.sort(key=lambda f: rotation_key(Path(f.display).name)[1])
        for order, f in enumerate(members):
            f.stream = sid
            f.order = order
