"""The source registry: what a source kind and a record family are, and where they register.

The package (``sources/__init__.py``) imports every built-in source module once, in sniffing
order, so by the time anything calls :func:`kinds` or :func:`families` they are registered.
Source modules import from here (not from the package), so nothing imports upwards.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import polars as pl

from ..inputs.reflow import strip_text

if TYPE_CHECKING:
    from ..clock.timebase import Assumption
    from ..inputs.files import InputFile


@dataclass
class TimeContext:
    tz: str
    year: int | None = None
    anchors: list[tuple[datetime, str]] = field(default_factory=list)
    reference: tuple[datetime, datetime] | None = None  # UTC span of the vLLM logs (on the common clock)
    # the UTC span of each log file (on the common clock): ``reference`` is their hull, which can hold
    # days when no log ran (two servers' logs of September and November); a source dated by the logs
    # (dmon -o T) is put on a log's own span, never in a gap between them
    spans: tuple[tuple[datetime, datetime], ...] = ()
    # the logs' times are (some) wall times read in ``tz``, so --tz moves them (timebase.TimeResult.wall)
    reference_wall: bool = True
    now: datetime | None = None


@dataclass
class SourceOutput:
    """What a source contributes to an Analysis."""

    frames: dict[str, pl.DataFrame] = field(default_factory=dict)
    events: list[pl.DataFrame] = field(default_factory=list)  # partial event frames (events.conform)
    config: pl.DataFrame | None = None  # rows in vllm.config.CONFIG_SCHEMA
    stats: pl.DataFrame | None = None  # rows in vllm.stats.STATS_SCHEMA (another engine's stats lines: SGLang)
    assumptions: list[Assumption] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    counters: dict[str, Any] = field(default_factory=dict)
    partial: bool = False
    capped: pl.DataFrame | None = None  # counts whose events were capped (model.events.CAPPED_SCHEMA)
    # the files whose times are (some) wall times without an offset, read in ``ctx.tz`` (dmon's rows, a
    # scrape's separator or file name without an offset, block-table 'time's): the bundle's zone
    # assumption applies to them (pipeline sources_stage; a log's lines: timebase.TimeResult.wall)
    wall: list[str] = field(default_factory=list)
    # frame name -> the columns it is sorted by (time first): the pipeline sorts it again after
    # it moved the frame's clock (--offset), as a per-file offset can change the order.
    order: dict[str, tuple[str, ...]] = field(default_factory=dict)


class Parsed(Protocol):
    """Phase 1 of a source kind. Sources know nothing of ``--offset``: the pipeline moves every
    time-typed column of what ``resolve`` returns, per file (the file named in ``source``).

    A source that derives something *across files* from its times (Prometheus: a counter series
    spans files) also has :class:`CrossFile`'s two methods: the pipeline then calls ``place``
    (each file's rows on its own clock), moves the clocks, and calls ``combine``.
    """

    def anchors(self) -> list[tuple[datetime, str]]: ...

    def resolve(self, ctx: TimeContext) -> SourceOutput: ...


@dataclass(frozen=True)
class EngineStarts:
    """One file's engine starts that are exact instants (a counter's ``_created``: seconds since the
    epoch) and the exact instants it was read at (zoned or epoch times: never a local time read in
    the assumed zone). The pipeline's zone check (events/zonefit.py) lays them on the logs' start-ups."""

    display: str
    starts: tuple[tuple[datetime, str], ...]  # (instant, file:line)
    readings: tuple[datetime, ...]


@runtime_checkable
class DatesEngines(Protocol):
    """A phase 1 source that knows when engines started, exactly (Prometheus: ``_created``)."""

    def engine_starts(self) -> list[EngineStarts]: ...


@runtime_checkable
class CrossFile(Protocol):
    """``resolve(ctx)`` is ``combine(place(ctx))``; the pipeline moves the clocks in between."""

    def place(self, ctx: TimeContext) -> SourceOutput: ...

    def combine(self, placed: SourceOutput) -> SourceOutput: ...


@dataclass(frozen=True)
class SourceKind:
    name: str
    description: str
    sniff: Callable[[str], int]
    parse: Callable[[list[InputFile]], Parsed] | None = None
    log_pass: bool = False  # an engine's log: its files are read by the single log pass (vllm_log.scan)
    # Its reader judges a last line without a line end itself (dmon: by the columns its header promises)
    # and says what it did with it: sniffing then adds no "ends in the middle of a line" warning of its own.
    judges_last_line: bool = False
    # The time a file's name gives what it holds, for a kind whose content may leave its readings
    # undated (a /metrics page without sample timestamps: dated by its name, else its mtime). Called
    # with a file whose bytes another file of the bundle repeats (sources/copies.py): a hashable time
    # when the file's content leaves its time to its name and the name (or another of its names) holds
    # one, else None. Two such files whose names give different times are two readings of an unchanged
    # page, not one file found twice. None (the default): the content always dates itself (a log's
    # lines, records with times), and identical bytes are the same readings whatever the names.
    name_time: Callable[[InputFile], Hashable | None] | None = None
    # A file of this kind grows by lines appended to it (a log, dmon's output, records): a copy of it taken
    # earlier holds its first bytes and nothing else, and is read once with it (sources/copies.py).
    appends: bool = False


@dataclass(frozen=True)
class RecordFamily:
    """Line shapes inside vLLM logs, handled in the same pass as the log."""

    name: str
    markers: list[tuple[str, str]]  # (literal marker, record kind)
    from_records: Callable[[pl.DataFrame, TimeContext], SourceOutput]
    verify: dict[str, str] = field(default_factory=dict)  # record kind -> confirming regex


@dataclass(frozen=True)
class Sample:
    """An input a source kind or record family declares it reads, and what it must give.

    ``text`` is a line (a whole file for dmon); ``expect`` is what the module's own sample test
    checks (the fields of the row it makes: a dict; dmon: one dict per row). A sample marked
    ``_bad`` or ``_dropped`` is one the source must flag or skip. tests/sources/test_samples.py runs
    every registered sample; each module's tests check ``expect`` field by field.
    """

    kind: str  # the source kind or record family
    text: str
    expect: Any

    @property
    def good(self) -> bool:
        return not (isinstance(self.expect, dict) and (self.expect.get("_bad") or self.expect.get("_dropped")))


_SAMPLES: dict[str, list[Sample]] = {}


def register_samples(kind: str, samples: list[tuple[str, Any]]) -> None:
    """Declare a source kind's or record family's samples (``(text, expect)`` pairs)."""
    _SAMPLES.setdefault(kind, []).extend(Sample(kind, text, expect) for text, expect in samples)


def samples(kind: str) -> list[Sample]:
    """The samples a source kind or record family declared (every built-in declares some)."""
    return list(_SAMPLES.get(kind, []))


_REGISTRY: dict[str, SourceKind] = {}
_FAMILIES: dict[str, RecordFamily] = {}


# The source kinds whose files the single log pass reads (``log_pass``), in registration order:
# kept current by :func:`register` (``sources.LOG_KINDS`` is this list).
LOG_KINDS: list[str] = []


def register(kind: SourceKind) -> SourceKind:
    _REGISTRY[kind.name] = kind
    if kind.log_pass and kind.name not in LOG_KINDS:
        LOG_KINDS.append(kind.name)
    return kind


def register_family(family: RecordFamily) -> RecordFamily:
    _FAMILIES[family.name] = family
    return family


def kinds() -> dict[str, SourceKind]:
    """Every registered source kind, in registration order (sniffing ties go to the first)."""
    return dict(_REGISTRY)


def families() -> dict[str, RecordFamily]:
    """Every registered record family."""
    return dict(_FAMILIES)


def sniff(head: str) -> tuple[str, int]:
    """Best kind for a text head: (name, score); ("unknown", 0) when nothing matches.

    Blockquote markers and code fences are removed first (reflow.py), as every reader does.
    """
    head = strip_text(head)
    best, best_score = "unknown", 0
    for kind in kinds().values():
        score = kind.sniff(head)
        if score > best_score:
            best, best_score = kind.name, score
    return best, best_score


# ---------------------------------------------------------------------- engines' metric names


@dataclass(frozen=True)
class MetricTable:
    """One serving engine's Prometheus names, read by sources/prometheus (an engine's registry
    record holds it; ``engines.register_engine`` registers it here, as sources cannot import the
    engines).

    ``metrics``: canonical name (``<prefix>:x``) -> (field, type, scale); counters are exposed with
    ``_total`` (prometheus_client adds it). ``created``: ``<family>_created`` (prometheus_client's
    creation time of a counter) -> the counter fields it dates. Every name is also read in its
    underscore spelling (``<prefix>_x``) and, behind Ray Serve, with ``ray_`` before it.
    ``line_starts``: what a sample line of a text scrape may start with (the literal pre-filter).
    """

    engine: str  # the engine_kind of the events its counters make
    prefix: str
    metrics: dict[str, tuple[str, str, float]]
    created: dict[str, list[str]]
    line_starts: tuple[str, ...]


_METRICS: dict[str, MetricTable] = {}


def register_metrics(table: MetricTable) -> MetricTable:
    _METRICS[table.engine] = table
    return table


def unregister_metrics(engine: str) -> None:
    _METRICS.pop(engine, None)


def metric_tables() -> tuple[MetricTable, ...]:
    """Every engine's metric names, in registration order (the default engine's first)."""
    return tuple(_METRICS.values())
