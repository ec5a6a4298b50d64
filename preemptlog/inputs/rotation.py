"""Rotated sets (``vllm.log``, ``vllm.log.1``, ``vllm.log.2.gz``, ``vllm.log-20261129.gz``) of one kind
in one folder: one *stream*, read oldest first (moved from bundle.py)."""

from __future__ import annotations

import re
from pathlib import Path

from .files import UNRECOGNISED, InputFile

ROTATION_RE = re.compile(
    r"^(?P<base>.+?)(?:\.(?P<num>\d{1,4})|-(?P<date>\d{8}(?:\d{2}){0,3}))?(?P<comp>\.gz|\.zst|\.zstd)?$"
)


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
        if f.kind in UNRECOGNISED or f.kind == "ignore":
            continue
        if f.is_stdin:
            groups[("<stdin>", f.kind, str(f.file_id))] = [f]
            continue
        parent = str(Path(f.display).parent)
        base, _ = rotation_key(Path(f.display).name)
        groups.setdefault((parent, f.kind, base), []).append(f)
    for sid, (_key, members) in enumerate(sorted(groups.items(), key=lambda kv: min(m.file_id for m in kv[1]))):
        members.sort(key=lambda f: rotation_key(Path(f.display).name)[1])
        for order, f in enumerate(members):
            f.stream = sid
            f.order = order
