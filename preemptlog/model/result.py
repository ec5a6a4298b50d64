"""What an analysis returns: :class:`Analysis` (frozen, built once by the pipeline), and the
options it was run with.

This module sits below every stage: the stages read the fields they need through
:class:`AnalysisView` (the pipeline's intermediate draft and the final Analysis both have
them), and nothing here imports a stage (``Analysis.summary`` loads summary.py on call).
"""

from __future__ import annotations

import copy
import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import polars as pl

if TYPE_CHECKING:
    from ..clock.timebase import Assumption
    from ..inputs.files import Bundle, Found
    from .findings import Findings


@dataclass
class AnalyzeOptions:
    year: int | None = None
    tz: str | None = None
    kinds: list[str] | None = None  # FILE=KIND overrides
    offsets: dict[str, float] = field(default_factory=dict)  # kind or file -> seconds added to its clock
    debug: bool = False
    before: float = 10.0  # joiner window: seconds before each event
    after: float = 2.0  # joiner window: seconds after each event
    lookback_steps: int | None = None  # joiner look-back in scheduler steps (default: rules threshold, 3)
    kv_ceiling: float | None = None  # KV usage (%) at the ceiling (default: rules threshold kv_ceiling, 95)
    rules_files: list[str] = field(default_factory=list)  # --rules overlays
    sets: list[str] = field(default_factory=list)  # --set name=value
    rules: bool = True  # evaluate the rules (verdicts)
    keep_request_rows: bool = False  # a row per request line even in large logs (whatif's workload)
    # file (a path as given) -> the containers whose lines are read of it: a file holding several servers told
    # apart by their container prefix (docker compose ``svc | ``, kubectl --prefix), one --each unit per server
    # (render/each.py); the other lines are read as empty, so every line keeps its number (pipeline/bundle.py)
    containers: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # file (a path as given) -> how an analysis of more found it (inputs/files.py Found): an incident of a
    # bundle of several analysed on its own (render/each.py) reads its files as the bundle's analysis found
    # them, cited by the same names (``b.zip!vllm.log``, never the folder the archive was unpacked into)
    found: dict[str, Found] = field(default_factory=dict)


class AnalysisView(Protocol):
    """The fields a stage reads from the analysis so far (read-only)."""

    @property
    def bundle(self) -> Bundle: ...
    @property
    def events(self) -> pl.DataFrame: ...
    @property
    def stats(self) -> pl.DataFrame: ...
    @property
    def config(self) -> pl.DataFrame: ...
    @property
    def requests(self) -> pl.DataFrame: ...
    @property
    def request_stats(self) -> Any: ...  # vllm.requests.RequestStats (see vllm.requests.stats_of)
    @property
    def records(self) -> pl.DataFrame: ...
    @property
    def tz(self) -> str: ...
    @property
    def frames(self) -> dict[str, pl.DataFrame]: ...
    @property
    def counters(self) -> dict[str, Any]: ...
    @property
    def options(self) -> AnalyzeOptions: ...
    @property
    def evidence(self) -> pl.DataFrame | None: ...
    @property
    def verdicts(self) -> pl.DataFrame | None: ...
    @property
    def ruleset(self) -> Any: ...


@dataclass(frozen=True)
class Analysis:
    """The result of :func:`preemptlog.analyze`. Frozen: a changed view is a
    ``dataclasses.replace`` copy (view.py, explain). The lists and dicts are the pipeline's
    and are not to be changed in place either."""

    bundle: Bundle
    events: pl.DataFrame
    stats: pl.DataFrame
    config: pl.DataFrame
    requests: pl.DataFrame
    records: pl.DataFrame
    tz: str
    frames: dict[str, pl.DataFrame] = field(default_factory=dict)
    assumptions: list[Assumption] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    counters: dict[str, Any] = field(default_factory=dict)
    partial: bool = False
    options: AnalyzeOptions = field(default_factory=AnalyzeOptions)
    evidence: pl.DataFrame | None = None  # joiner.EVIDENCE_SCHEMA, one row per event
    verdicts: pl.DataFrame | None = None  # rules.verdicts.VERDICT_COLUMNS, one row per event
    ruleset: Any = None  # the rules.model.RuleSet used
    filters: dict[str, Any] | None = None  # view.apply_filters: what was filtered out after the analysis
    columns: list[str] | None = None  # view.with_columns: the event columns the formatters write
    findings: Findings | None = None  # findings.compute: a pure function of the analysis up to the verdicts
    request_stats: Any = None  # vllm.requests.RequestStats: counts of every request line (None: made from requests)
    fixes: dict[str, Any] | None = None  # fixes.plan: the changes to make, what to add to know more, what was dropped

    def summary(self) -> dict[str, Any]:
        """The summary dict (render/summary.py ``summarize``, which registers itself here when it is
        imported: every command and ``preemptlog.analyze`` load it; a bare pipeline result loads it on
        first use)."""
        if not SUMMARIZER:
            importlib.import_module("preemptlog.render.summary")
        # Made once per analysis (a frozen record; a command asks for it up to three times, 10-20 ms
        # each) and handed out as a copy: a caller may change its own.
        cached = self.__dict__.get("_summary")
        if cached is None:
            cached = SUMMARIZER[0](self)
            object.__setattr__(self, "_summary", cached)
        return copy.deepcopy(cached)


# The function behind Analysis.summary(): render.summary.summarize, registered by that module on import
# (the summary is an output, above this container; the container names no module above it).
SUMMARIZER: list[Callable[[Analysis], dict[str, Any]]] = []
