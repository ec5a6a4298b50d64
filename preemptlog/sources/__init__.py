"""Source kinds: how a file is recognised by its content, and which parser reads it.

Each source module registers a :class:`SourceKind` with a ``sniff`` function
that looks at the first 64 KiB of decompressed text and returns a score
(0 = not this kind). The highest score wins; ties go to the kind registered
first. ``--kind FILE=KIND`` overrides sniffing.

Two-phase loading (so that every clock can help every other):

1. ``parse(files)`` reads all files of the kind (grouped in streams, oldest
   first) without knowing anything about the rest of the bundle, and returns
   a :class:`Parsed` whose ``anchors()`` are the full timestamps (with a
   year) it saw: they let year-less vLLM timestamps find their year.
2. After the vLLM logs are on the clock, ``resolve(ctx)`` turns the parsed
   rows into frames on the common clock. ``ctx.reference`` is the time span
   of the vLLM logs, for sources whose timestamps have no date (dmon ``-o T``).

*Record families* are line shapes found inside vLLM log files (debug hooks,
text block_table lines): they add literal markers to the single pass over the
log (``vllm_log.EXTRA_MARKERS``) and turn their records into frames.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable, Protocol

import polars as pl

if TYPE_CHECKING:
    from ..bundle import InputFile
    from ..timebase import Assumption


@dataclass
class TimeContext:
    tz: str
    year: int | None = None
    anchors: list[tuple[datetime, str]] = field(default_factory=list)
    reference: tuple[datetime, datetime] | None = None  # UTC span of the vLLM logs
    offsets: dict[str, float] = field(default_factory=dict)  # source kind or file -> seconds to add
    now: datetime | None = None


@dataclass
class SourceOutput:
    """What a source contributes to an Analysis."""

    frames: dict[str, "pl.DataFrame"] = field(default_factory=dict)
    events: list["pl.DataFrame"] = field(default_factory=list)  # partial event frames (events.conform)
    config: "pl.DataFrame | None" = None  # rows in vllm.config.CONFIG_SCHEMA
    assumptions: list["Assumption"] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    counters: dict[str, Any] = field(default_factory=dict)
    partial: bool = False


class Parsed(Protocol):
    def anchors(self) -> list[tuple[datetime, str]]: ...

    def resolve(self, ctx: TimeContext) -> SourceOutput: ...


@dataclass(frozen=True)
class SourceKind:
    name: str
    description: str
    sniff: Callable[[str], int]
    parse: Callable[[list["InputFile"]], Parsed] | None = None


@dataclass(frozen=True)
class RecordFamily:
    """Line shapes inside vLLM logs, handled in the same pass as the log."""

    name: str
    markers: list[tuple[str, str]]  # (literal marker, record kind)
    from_records: Callable[["pl.DataFrame", TimeContext], SourceOutput]
    verify: dict[str, str] = field(default_factory=dict)  # record kind -> confirming regex


_REGISTRY: dict[str, SourceKind] = {}
_FAMILIES: dict[str, RecordFamily] = {}


def register(kind: SourceKind) -> SourceKind:
    _REGISTRY[kind.name] = kind
    return kind


def register_family(family: RecordFamily) -> RecordFamily:
    _FAMILIES[family.name] = family
    return family


def kinds() -> dict[str, SourceKind]:
    _load_builtin()
    return dict(_REGISTRY)


def families() -> dict[str, RecordFamily]:
    _load_builtin()
    return dict(_FAMILIES)


def sniff(head: str) -> tuple[str, int]:
    """Best kind for a text head: (name, score); ("unknown", 0) when nothing matches.

    Blockquote markers and code fences are removed first (reflow.py), as every reader does.
    """
    from ..reflow import strip_text

    head = strip_text(head)
    best, best_score = "unknown", 0
    for kind in kinds().values():
        score = kind.sniff(head)
        if score > best_score:
            best, best_score = kind.name, score
    return best, best_score


# Modules that register kinds or families, imported once. Each is small and
# does not import polars at module level. Order matters for sniffing ties.
BUILTIN_MODULES: list[str] = ["vllm_log", "hooks", "blocktable", "kvevents", "dmon", "prometheus", "capture"]

_loaded = False


def _load_builtin() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    import importlib

    for name in BUILTIN_MODULES:
        importlib.import_module(f"{__name__}.{name}")
