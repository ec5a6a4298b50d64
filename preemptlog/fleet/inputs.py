"""Which bundles a fleet run reads, what each is called, and its content digest.

- :func:`expand`: the command line's bundles and globs, in order, each once;
- :func:`digest`: the bundle's content digest (sha256 of every file's relative path, size and
  bytes; 32 hex digits), the id of its rows and the name of its part files: the same bytes give
  the same id wherever the bundle lies, a changed byte a new one;
- :func:`bundle_name`: the server's name. vLLM's own output does not name the host, so a
  bundle's folder or file name is often the only place the server is named
  (``srv-07.tar.gz`` -> ``srv-07``; ``gpu-node-12/vllm.log`` -> ``gpu-node-12``).
"""

from __future__ import annotations

import glob
import hashlib
import os
import stat
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path

from ..errors import InputError, UsageError

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar.zst", ".tzst", ".tar.bz2", ".tar.xz", ".tar", ".zip")
FILE_SUFFIXES = (".gz", ".zst", ".log", ".txt", ".jsonl", ".ndjson", ".json", ".prom", ".out")
# File or folder names that say nothing about the server: the name of the folder around them does.
GENERIC = {
    "vllm",
    "vllm-log",
    "vllm_log",
    "server",
    "log",
    "logs",
    "output",
    "stdout",
    "stderr",
    "console",
    "metrics",
    "bundle",
    "incident",
    "current",
    "latest",
}
_CHUNK = 1 << 20


@dataclass(frozen=True)
class BundleInfo:
    path: str
    bundle_id: str
    name: str
    bytes: int
    files: int
    day: date  # the UTC date of its newest file: the partition of rows without a time of their own


def expand(patterns: list[str]) -> list[str]:
    """Each argument is a bundle (file, folder, archive) or a glob of them; in order, each once."""
    out: list[str] = []
    seen: set[str] = set()
    for p in patterns:
        if os.path.lexists(p):
            matches = [p]
        elif glob.has_magic(p):
            matches = sorted(glob.glob(p, recursive=True))
            if not matches:
                raise InputError(f"{p}: no bundle matches this pattern")
        else:
            raise InputError(f"{p}: no such file or folder")
        for m in matches:
            key = os.path.realpath(m)
            if key not in seen:
                seen.add(key)
                out.append(m)
    return out


def outside(paths: list[str], out: str) -> tuple[list[str], list[str]]:
    """(the bundles, the arguments that are the dataset ``out`` or inside it: a glob such as ``'fl/*'``
    with ``--out fl/ds`` matches the dataset on a re-run, which is no bundle). A bundle folder that holds
    the dataset is refused: its digest would change with every run (its rows added again each time)."""

    root = os.path.realpath(out)
    kept: list[str] = []
    dropped: list[str] = []
    for p in paths:
        real = os.path.realpath(p)
        if real == root or real.startswith(root.rstrip(os.sep) + os.sep):
            dropped.append(p)
        elif os.path.isdir(p) and root.startswith(real.rstrip(os.sep) + os.sep):
            raise UsageError(
                f"--out {out} is inside the bundle {p}: the dataset would be read as part of it",
                hint="give --out a folder outside the bundles",
            )
        else:
            kept.append(p)
    return kept, dropped


def _files(path: str) -> list[tuple[str, str]]:
    """(relative name, path) of every regular file of the bundle, sorted; links to folders are not followed."""
    if not os.path.isdir(path):
        return [(os.path.basename(path), path)]
    out = []
    for root, dirs, names in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not os.path.islink(os.path.join(root, d)))
        for n in names:
            full = os.path.join(root, n)
            if os.path.isfile(full):
                out.append((os.path.relpath(full, path).replace(os.sep, "/"), full))
    return sorted(out)


def digest(path: str) -> BundleInfo:
    """The bundle's content digest and what it holds (see the module docstring)."""
    h = hashlib.sha256()
    total = 0
    newest = 0.0
    files = _files(path)
    for rel, full in files:
        try:
            st = os.stat(full)
            if not stat.S_ISREG(st.st_mode):  # a FIFO would block the worker for ever, a device never end
                raise InputError(f"{full}: not a regular file ({_file_type(st.st_mode)}): not read")
            with open(full, "rb") as fh:
                h.update(rel.encode("utf-8", "surrogateescape") + b"\0" + str(st.st_size).encode() + b"\0")
                while chunk := fh.read(_CHUNK):
                    h.update(chunk)
        except OSError as exc:
            raise InputError(f"{full}: cannot read ({exc.strerror or exc})") from None
        total += st.st_size
        newest = max(newest, st.st_mtime)
    if not files:
        h.update(b"(empty)")
        try:
            newest = os.stat(path).st_mtime
        except OSError:
            newest = 0.0
    day = datetime.fromtimestamp(newest, UTC).date()
    return BundleInfo(path, h.hexdigest()[:32], bundle_name(path), total, len(files), day)


def _file_type(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a file"


def _stem(name: str) -> str:
    low = name.lower()
    for suffix in ARCHIVE_SUFFIXES:
        if low.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    while True:
        low = name.lower()
        cut = next((s for s in FILE_SUFFIXES if low.endswith(s) and len(name) > len(s)), None)
        if cut is None:
            return name
        name = name[: -len(cut)]


def bundle_name(path: str) -> str:
    """The server's name from the bundle's path: its stem, or the folder around it when the stem
    is generic (``vllm.log``, ``logs/``), up to two folders up."""
    p = Path(os.path.abspath(path))
    candidates = [_stem(p.name), *(q.name for q in list(p.parents)[:2])]
    for c in candidates:
        if c and c.lower() not in GENERIC and not c.lower().startswith(("vllm.log", "vllm-log")):
            return c
    return candidates[0] or str(path)


def server_name(bundle: str, unit: str, units: int) -> str:
    """The name of one server of a bundle: the bundle's name, or ``bundle/unit`` when the bundle
    holds several (each.py's unit names, which start with the bundle's own folder name)."""
    if units <= 1:
        return bundle
    rest = unit.split("/", 1)[1] if "/" in unit else unit
    return f"{bundle}/{_stem(rest)}"
