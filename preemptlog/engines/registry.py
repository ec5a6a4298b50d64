"""The engine registry: one :class:`Engine` record per serving engine, and the generic questions.

Each engine package (``engines/<name>/__init__.py``) builds its record and calls
:func:`register_engine` when it is imported; ``engines/__init__.py`` imports the built-in ones
(``BUILTIN_ENGINES``). Every stage outside ``engines/`` asks here (``engines.get(kind).noun``,
``engines.registered()``, ``engines.of_events(events)``...) and never names an engine.

Registering also fills the hooks of the layers below engines, which cannot import this module:
``model.kinds`` (an engine's name and words, and the default engine: ``engine_kind`` where a source
does not say) and ``sources.registry`` (the engine's Prometheus metric names). An engine's log
source kinds and record families register themselves into ``sources.registry`` as before.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

import polars as pl

from ..model import kinds as _kinds
from ..model.config import version_tuple
from ..model.schemas import CONFIG_OWNER
from ..sources import linetimes
from ..sources import registry as _sources

if TYPE_CHECKING:
    from ..model.evidence import Evidence
    from ..model.requests import RequestStats
    from ..model.result import AnalysisView
    from .common import FixPart, LogCapability
    from .facts import CodeFact

# The engine a source means when it does not say (every source but an engine's own log lines and
# metric names is this engine's): events' ``engine_kind`` is filled with it.
DEFAULT = "vllm"


@dataclass(frozen=True)
class LogEvents:
    """What an engine's log facts give the event set: partial event frames (events.conform), the
    counters they come with (``{"v0": ...}``) and warnings (``partial`` when one says the run is)."""

    parts: list[pl.DataFrame]
    counters: dict[str, Any]
    warnings: list[str]
    partial: bool = False
    capped: pl.DataFrame | None = None  # counts whose events were capped (model.events.CAPPED_SCHEMA)


@dataclass(frozen=True)
class LogFacts:
    """An engine's parsers of the single log pass's own records (sources/vllm_log.py), in the
    order the pipeline's sources stage calls them (the order outputs were always made in)."""

    stats: Callable[[pl.DataFrame], pl.DataFrame]  # records -> stats rows (STATS_SCHEMA)
    # records, stats, other sources' config rows -> the configuration frame (seen, derived, defaults)
    config: Callable[[pl.DataFrame, pl.DataFrame, list[pl.DataFrame]], pl.DataFrame]
    events: Callable[[pl.DataFrame, pl.DataFrame], LogEvents]  # records, stats -> events
    # records, per-request rows, the request ids the events name, config -> the requests frame and its counts
    requests: Callable[[pl.DataFrame, list[Any], list[str], pl.DataFrame], tuple[pl.DataFrame, RequestStats]]
    runs: Callable[[pl.DataFrame], pl.DataFrame]  # records -> the server runs table (frame server_runs)


@dataclass(frozen=True)
class ServerStart:
    """How a server start shows in the log pass's records (events/servers.py), as expressions over
    the records (columns ``kind``, ``text``)."""

    start: pl.Expr  # rows that are a start of a server
    dated: pl.Expr  # rows that name the server's version (a stream with one: its undated starts are not starts)
    version: pl.Expr  # the version a start row names
    # start rows that stand for a start the log does not show (a stream cut after start-up, told apart
    # from other engines' streams by them): never a start time, and never a second server of their engine
    stands_in: pl.Expr | None = None


@dataclass(frozen=True)
class EvidenceSection:
    """Evidence an engine adds to every one of its events (the joiner's sections): its declarations
    (appended to the evidence schema, in registration order) and the section, ``(events with _i,
    stream, seq; frames; config) -> rows keyed by _i`` (None: nothing to add)."""

    declared: tuple[Evidence, ...]
    section: Callable[[pl.DataFrame, dict[str, pl.DataFrame], pl.DataFrame | None], pl.DataFrame | None]


@dataclass(frozen=True)
class ReplaySetting:
    """A scheduler setting the what-if replays, as the replayed engine's versions have it."""

    name: str  # the replay setting's name (whatif.workload.SETTINGS)
    since: tuple[int, ...] | None  # the first version that has it (None: every version replayed)
    default: Any  # its default in the versions that have it
    absent: Any  # what a version without it does (the behaviour before it came)
    flag: str  # its command-line option ("--watermark")
    where: str  # where its default is set (the source file it was read from)

    def arg(self, value: Any) -> str:
        """The option as given on the command line: ``--flag value`` (a boolean: ``--flag`` / ``--no-flag``)."""
        if isinstance(value, bool):
            return self.flag if value else "--no-" + self.flag.removeprefix("--")
        return f"{self.flag} {value}"


@dataclass(frozen=True)
class SchedulerVersion:
    """The version of the replayed engine's scheduler a replay follows, and what that version has."""

    display: str  # the engine, as prose names it ("vLLM")
    version: str | None  # the version asked or read from the bundle (None: not known)
    replayed: str  # the version whose scheduler is replayed (the reference one when ``version`` is None)
    how: str  # why that one (where the version came from)
    settings: tuple[ReplaySetting, ...]
    # behaviours that changed between versions (the model engine follows them)
    self_preempt_continues: bool  # priority: a request that preempted itself does not stop the running loop
    long_prefill_needs_chunked: bool  # long_prefill_token_threshold is ignored without chunked prefill
    unknown_words: str  # how the engine refuses an option it does not have, with ``{arg}``
    # why ``replayed`` is not ``version`` (a version newer than the newest modelled), said; None: it is
    caveat: str | None = None

    def setting(self, name: str) -> ReplaySetting | None:
        return next((s for s in self.settings if s.name == name), None)

    def has(self, name: str) -> bool:
        """Whether this version has the setting (a setting the table does not list: every version)."""
        s = self.setting(name)
        if s is None or s.since is None:
            return True
        vt = version_tuple(self.replayed)
        return vt is not None and vt >= s.since

    def refusal(self, name: str, value: Any) -> str | None:
        """The engine's own words refusing ``name=value`` when this version does not have it."""
        s = self.setting(name)
        if s is None or self.has(name):
            return None
        since = ".".join(str(x) for x in s.since or ())
        return f'"{self.unknown_words.format(arg=s.arg(value))}" ({s.flag} came in {self.display} {since})'


@dataclass(frozen=True)
class ReplayVersions:
    """The versions of the replayed engine's scheduler (the what-if): the one a bundle ran, and what
    each version has (its settings, their defaults, its behaviours)."""

    of_bundle: Callable[[pl.DataFrame], tuple[str | None, str]]  # configuration -> (version, where it was read)
    scheduler: Callable[[str | None, str], SchedulerVersion]  # (version or None, where) -> what it has
    # configuration -> what the replay cannot be of this bundle (a scheduler generation it does not model), said
    caveats: Callable[[pl.DataFrame], list[str]] = lambda _config: []
    # the scheduler budget where the bundle does not state it, by the engine generation the bundle ran:
    # (configuration, enable_chunked_prefill and max_num_batched_tokens as stated (None: not), max_model_len,
    # the workload's longest request in tokens) -> (enable_chunked_prefill, max_num_batched_tokens, an
    # assumption for each value taken); None: the engine has no such defaults
    budget: Callable[[pl.DataFrame, bool | None, int | None, int | None, int | None], Budget] | None = None


@dataclass(frozen=True)
class Budget:
    """The scheduler's token budget a replay takes (ReplayVersions.budget), and what was assumed."""

    enable_chunked_prefill: bool
    max_num_batched_tokens: int
    assumptions: tuple[str, ...] = ()


@dataclass(frozen=True)
class Engine:
    """A serving engine: its words, its names in every input, and what it contributes to each stage.

    Optional contributions (``None``) are the ones an engine may not have; the rest every engine
    fills (tests/engines/test_engines_registry.py)."""

    name: str  # the ``engine_kind`` value
    display: str  # how prose names it ("vLLM")
    noun: str  # what it calls a preemption ("preemption"; plural: + "s")
    verb: str  # "preempted": a request <verb> 5+ times
    log_kinds: tuple[str, ...]  # its log source kinds (read by the single log pass)
    # the prefix of its record kinds in the single log pass ("sgl_"); None: the pass's own kinds
    # (the default engine's: every record no other engine's prefix claims)
    record_prefix: str | None
    metrics: _sources.MetricTable  # its Prometheus metric names (sources/prometheus reads them)
    histogram_metric: str  # its per-request preemption histogram family (findings/thrash.py)
    mechanisms: tuple[str, ...]  # its mechanism names (rules: [[mechanism]] vocabulary)
    code_facts: tuple[CodeFact, ...]  # its rows of the code-facts table (engines/facts.py)
    # (key, value, note) of its defaults, given the configuration rows seen (their version)
    defaults: Callable[[pl.DataFrame], list[tuple[str, str, str]]]
    stats_families: tuple[str, ...]  # its values of the stats frame's ``family`` column
    server_start: Callable[[pl.Expr], ServerStart]  # given "this row is the engine's": its server starts
    log_capability: Callable[[AnalysisView], LogCapability]  # how far its log counts its events
    fixes: Callable[[AnalysisView, Any, pl.DataFrame | None], FixPart]  # (analysis, findings, its verdicts)
    fix_tie_order: tuple[str, ...]  # its fix ids, most direct first (ties in the ranking)
    prom_counter_note: str  # "{n} event(s) come from <its counter>...": the honesty note of its scraped events
    # why the what-if does not replay its changes (None: the what-if model is this engine's scheduler)
    not_replayed: str | None
    # what the bundle needs so its changes are replayed on the incident's own workload (fixes/plan.py)
    replay_hint: str | None = None
    # the per-step records a capture of its own would add, and what they settle ((what, settles); the
    # "to know more" of a bundle of its events without them; None: no such capture)
    records_hint: tuple[str, str] | None = None
    log_facts: LogFacts | None = None  # parsers of the log pass's own records (None: a record family does)
    # the code facts its configuration in force settles, for its events (joiner/code.py)
    bundle_facts: Callable[[pl.DataFrame | None], dict[str, Any] | None] | None = None
    evidence: EvidenceSection | None = None  # evidence of its own beyond the joiner's sections
    summary_section: Callable[[AnalysisView, Any], dict[str, Any] | None] | None = None  # summary[name]
    headline_words: Callable[[dict[str, Any]], str] | None = None  # words the headline adds (the summary)
    tokens_unknown: str | None = None  # why an event's recomputed tokens are unknown, in its terms
    # its own recompute cost from its counters (findings' recompute ``<name>_counters``)
    recompute_counters: Callable[[dict[str, Any]], dict[str, Any] | None] | None = None
    # tokens its own log gives an event (findings/recompute.py): (analysis, the events' event_id, stream, seq and
    # _sub) -> rows (event_id, tokens, tokens_src) or None; and the words of that basis
    event_tokens: Callable[[AnalysisView, pl.DataFrame], pl.DataFrame | None] | None = None
    event_tokens_basis: str | None = None
    # the KV pool levers of the capacity finding (findings/capacity.py): inputs -> (fixes, dropped)
    capacity_fixes: Callable[[dict[str, Any]], tuple[list[dict[str, Any]], list[dict[str, str]]]] | None = None
    # the configuration keys its capacity levers read (the inputs' ``cfg``), and those of them whose default
    # for the bundle's version stands in, labelled assumed, when the log does not print them
    capacity_keys: tuple[str, ...] | None = None
    capacity_defaults: tuple[str, ...] | None = None
    startup_refusals: Callable[..., list[str]] | None = None  # why it would refuse to start (whatif)
    replay_versions: ReplayVersions | None = None  # its scheduler's versions, for the what-if's replays
    # whether prefix caching was on, and why: (configuration, frames) -> (on, basis); None: not known
    prefix_caching: Callable[[pl.DataFrame, Mapping[str, pl.DataFrame]], tuple[bool | None, str]] | None = None
    # a regex of the marker lines that print the engine's own request status (its upstream code's state,
    # e.g. vLLM V1's RequestStatus.PREEMPTED), not a patched scheduler's decision line: such markers do not
    # make a bundle the field guide's patched scheduler (rules/verdicts.py guide_model)
    status_marker: str | None = None
    # the call that preempts every running request at once, in the engine's words (vLLM V1 0.12+:
    # reset_prefix_cache(reset_running_requests=True)); the summary names it for the events it explains
    cache_reset_call: str | None = None
    # what its scheduler's code says of when it preempts, for the summary's cause (``code``) of a bundle
    # of its events alone (None: the default engine's words by generation, render/summary.py)
    cause_code: str | None = None
    # the same words given the bundle, where what it shows adds a trigger the static words leave out (vLLM
    # V1: a reset of the prefix cache in the log; SGLang: retractions SGLANG_TEST_RETRACT forced); None
    # from the call: the static words stand (``cause_code``, or the default engine's words by generation)
    cause_words: Callable[[AnalysisView], str | None] | None = None
    # a logged counter that several schedulers of one server write side by side (vLLM V0 under pipeline
    # parallelism: one num_cumulative_preemption per virtual engine): (its warning rows, sorted by seq,
    # with stream, _compose, seq, cumulative; the records; the group keys) -> each row's counter chain
    # (events/servers.py: a chain's counter only grows, so chains side by side are no interleaving)
    counter_chains: Callable[[pl.DataFrame, pl.DataFrame, list[str]], pl.Series] | None = None
    # why a bundle of its own signals, with neither its log nor its counter, cannot count its events, in its
    # words: (analysis) -> {"short", "reason", "remedy"}, and what its other signals show of them where they
    # show some (``seen``: SGLang's retraction gauge); events/visibility.py asks the bundle's engine
    not_visible: Callable[[AnalysisView], dict[str, Any]] | None = None

    @property
    def default(self) -> bool:
        return self.name == DEFAULT

    def plural(self, n: int) -> str:
        return self.noun if n == 1 else self.noun + "s"


OPTIONAL_FIELDS = tuple(f.name for f in fields(Engine) if f.default is None)

_ENGINES: dict[str, Engine] = {}


def register_engine(engine: Engine) -> Engine:
    """Register an engine (and fill the lower layers' hooks: model.kinds, sources.registry)."""
    _ENGINES[engine.name] = engine
    _kinds.declare(
        _kinds.EngineKind(engine.name, engine.display, engine.noun, engine.verb), default=engine.name == DEFAULT
    )
    _sources.register_metrics(engine.metrics)
    return engine


def unregister_engine(name: str) -> None:
    """Take an engine out again (a test's fake engine)."""
    _ENGINES.pop(name, None)
    _kinds.undeclare(name)
    _sources.unregister_metrics(name)


def registered() -> tuple[Engine, ...]:
    """Every registered engine, in registration order (the default engine first)."""
    return tuple(_ENGINES.values())


def names() -> tuple[str, ...]:
    return tuple(_ENGINES)


def get(name: str | None) -> Engine:
    """The engine named ``name`` (None or empty: the default engine); KeyError for an unknown name."""
    return _ENGINES[name or DEFAULT]


def find(name: str | None) -> Engine | None:
    """The engine named ``name``, or None (None or empty: the default engine)."""
    return _ENGINES.get(name or DEFAULT)


def default() -> Engine:
    return _ENGINES[DEFAULT]


def others() -> tuple[Engine, ...]:
    """The registered engines but the default one, in registration order."""
    return tuple(e for e in _ENGINES.values() if not e.default)


def kind_expr(col: str = "engine_kind") -> pl.Expr:
    """An event's engine: its ``engine_kind``, the default engine where it is null."""
    return pl.col(col).fill_null(DEFAULT)


def events_of(name: str, col: str = "engine_kind") -> pl.Expr:
    """Events of the engine ``name``: its ``engine_kind``; the default engine's are also the events
    of no other registered engine (null: the default)."""
    if name == DEFAULT:
        return ~kind_expr(col).is_in([e.name for e in others()])
    return kind_expr(col) == name


def stats_of(engine: Engine, col: str = "family") -> pl.Expr:
    """Rows of the stats frame that are ``engine``'s (its ``stats_families``); the default engine's are
    also the rows of no other registered engine's family."""
    fam = pl.col(col)
    if engine.default:
        theirs = [f for e in others() for f in e.stats_families]
        return ~fam.is_in(theirs).fill_null(False)
    return fam.is_in(list(engine.stats_families)).fill_null(False)


def owns(engine: Engine, kind: pl.Expr | None = None) -> pl.Expr:
    """Records of the single log pass that are ``engine``'s lines (by their record kind): its
    prefix, or (the pass's own kinds) every kind no other engine's prefix claims."""
    k = pl.col("kind") if kind is None else kind
    if engine.record_prefix is not None:
        return k.str.starts_with(engine.record_prefix)
    claimed = pl.lit(False)
    for e in registered():
        if e.record_prefix is not None:
            claimed = claimed | k.str.starts_with(e.record_prefix)
    return ~claimed


def of_events(events: pl.DataFrame) -> dict[str, int]:
    """Events per engine kind (null: the default engine), in the frame's group order."""
    out: dict[str, int] = {}
    if events.height and "engine_kind" in events.columns:
        for k, n in events.group_by("engine_kind").len().iter_rows():
            out[str(k or DEFAULT)] = n
    return out


def shown(records: pl.DataFrame, config: pl.DataFrame) -> list[Engine]:
    """The engines a bundle's logs show, in registration order: an engine with its own record kinds
    when the configuration names it (``engine_kind``); the default engine unless only other engines'
    lines are in the logs."""
    named = set()
    if config.height:
        named = set(config.filter(pl.col("key") == "engine_kind").get_column("value").to_list())
    out = [e for e in others() if e.name in named]
    default_shown = not out or (records.height > 0 and records.filter(owns(default())).height > 0)
    return [e for e in registered() if (e.default and default_shown) or e in out]


def engine_kinds(events: pl.DataFrame, config: pl.DataFrame, records: pl.DataFrame) -> dict[str, int]:
    """Events per engine kind, with 0 for an engine the bundle shows without events (sorted by name)."""
    out = of_events(events)
    if config.height:
        for e in others():
            if config.filter((pl.col("key") == "engine_kind") & (pl.col("value") == e.name)).height:
                out.setdefault(e.name, 0)
    if records.height and records.filter(owns(default())).height:
        out.setdefault(DEFAULT, 0)
    if not out:
        out[DEFAULT] = 0
    return dict(sorted(out.items()))


def engine_kind(kinds: dict[str, int]) -> str:
    """The summary's ``engine_kind``: the engines, ``+``-joined (``sglang+vllm``)."""
    return "+".join(sorted(kinds))


def noun(kinds: dict[str, int], n: int) -> str:
    """What the engines of ``kinds`` call ``n`` events: one engine's noun, both for a bundle of two
    engines with two words (``preemptions/retractions``); the default engine's for none."""
    words = list(dict.fromkeys(e.plural(n) for e in registered() if e.name in kinds))
    if not words or (len(words) == 1 and set(kinds) - {e.name for e in registered()}):
        return default().plural(n)
    return "/".join(words)


def possessive(kinds: dict[str, int]) -> str:
    """Whose counter: ``vLLM's``, ``SGLang's``; ``the engines'`` for a bundle of several; the default
    engine's for none (the words of a count's source: render/human.py, render/summary.py)."""
    names = [e.display for e in registered() if e.name in kinds]
    if len(names) > 1:
        return "the engines'"
    return f"{(names[0] if names else default().display)}'s"


def metric_owners(names: list[str]) -> dict[str, int]:
    """The engines whose Prometheus prefix the canonical metric ``names`` carry (the default engine's for
    a name with no other engine's prefix), as ``engine_kinds``-like keys: whose counter a count read."""
    out: dict[str, int] = {}
    for name in names:
        eng = next((e for e in others() if name.startswith(e.metrics.prefix + ":")), default())
        out[eng.name] = 0
    return out


def only_log(records: pl.DataFrame) -> Engine | None:
    """The engine with record kinds of its own whose lines are every log line of the bundle (lines
    read only for their time aside), or None."""
    if records.height == 0:
        return None

    kinds = records.get_column("kind")
    for e in others():
        own = kinds.str.starts_with(e.record_prefix or "")
        if bool(own.any()) and bool((own | (kinds == linetimes.KIND)).all()):
            return e
    return None


# The configuration frame's column naming whose configuration a row is (an engine's ``name``): set where
# the frame is put together (the log reader's LogFacts.config, :func:`config_engines`) and read through
# :func:`config_of`. A bundle of two engines holds both configurations in one frame; their keys share one
# space (``max_model_len``, ``kv_cache_tokens``: each engine's own), so each engine's stages read its own rows.
CONFIG_ENGINE = next(iter(CONFIG_OWNER))  # "engine_kind" (model/schemas.py)


def config_engines(rows: pl.DataFrame, records: pl.DataFrame) -> pl.DataFrame:
    """``rows`` (configuration rows) with :data:`CONFIG_ENGINE`: a row's own engine where it names one;
    else, for a row read from a log line, the engine whose line it is (the record of the log pass at its
    ``source:line``, :func:`owns`: an SGLang line's value is SGLang's, also in a file that holds both
    engines' lines); any other row (another source's: /metrics, block-table records) the default engine's."""
    if CONFIG_ENGINE not in rows.columns:
        rows = rows.with_columns(pl.lit(None, pl.String).alias(CONFIG_ENGINE))
    if rows.height == 0:
        return rows
    by_line = pl.lit(DEFAULT, pl.String)
    if records.height and {"source", "n", "kind"} <= set(records.columns):
        at = rows.filter(
            pl.col(CONFIG_ENGINE).is_null() & pl.col("source").is_not_null() & pl.col("line").is_not_null()
        )
        lines = (
            records.filter(
                pl.col("source").is_in(at.get_column("source").unique().implode())
                & pl.col("n").is_in(at.get_column("line").unique().implode())
            )
            .select("source", pl.col("n").cast(pl.UInt32).alias("line"), pl.col("kind").alias("_rec_kind"))
            .unique(["source", "line"], keep="first", maintain_order=True)
        )
        rows = rows.with_columns(pl.col("line").cast(pl.UInt32)).join(
            lines, on=["source", "line"], how="left", maintain_order="left"
        )
        for e in reversed(others()):
            by_line = pl.when(owns(e, pl.col("_rec_kind")).fill_null(False)).then(pl.lit(e.name)).otherwise(by_line)
        return rows.with_columns(pl.coalesce(pl.col(CONFIG_ENGINE), by_line).alias(CONFIG_ENGINE)).drop("_rec_kind")
    return rows.with_columns(pl.coalesce(pl.col(CONFIG_ENGINE), by_line).alias(CONFIG_ENGINE))


def config_of(config: pl.DataFrame, name: str | None) -> pl.DataFrame:
    """The configuration rows of the engine ``name`` (None: the default engine): its :data:`CONFIG_ENGINE`
    (a row without one is the default engine's); the whole frame when it does not say (one made by hand)."""
    if CONFIG_ENGINE not in config.columns or config.height == 0:
        return config
    return config.filter(kind_expr(CONFIG_ENGINE) == (name or DEFAULT))


def own_view(a: Any, name: str | None) -> Any:
    """The analysis ``a`` (a frozen record: Draft, Analysis) as the engine ``name``'s stages read it: its
    configuration is that engine's own rows (:func:`config_of`), never another engine's values under the
    same key. Nothing else changes."""
    own = config_of(a.config, name)
    if own is a.config or not dataclasses.is_dataclass(a) or isinstance(a, type):
        return a
    return dataclasses.replace(a, config=own)


def split_verdicts(events: pl.DataFrame, verdicts: pl.DataFrame | None) -> dict[str, pl.DataFrame | None]:
    """Verdict rows per engine (each engine's events get its own changes): ``{DEFAULT: verdicts}``
    when no other engine's events have verdicts; else the default engine's rows (every row no
    other engine claims) and each other engine's."""
    if verdicts is None or verdicts.height == 0:
        return {DEFAULT: verdicts}
    v = verdicts
    if "engine_kind" not in v.columns:
        if events.height == 0 or "engine_kind" not in events.columns:
            return {DEFAULT: verdicts}
        v = v.join(events.select("event_id", "engine_kind"), on="event_id", how="left")
    out: dict[str, pl.DataFrame | None] = {}
    for e in others():
        part = v.filter(events_of(e.name))
        if part.height:
            out[e.name] = part
    if not out:
        return {DEFAULT: verdicts}
    return {DEFAULT: v.filter(events_of(DEFAULT)), **out}


def log_reader() -> LogFacts:
    """The parsers of the single log pass's own records: the one engine that has them (the pass is
    its log reader; other engines reach the pass through record families)."""
    got = [e.log_facts for e in registered() if e.log_facts is not None]
    if len(got) != 1:
        raise LookupError(f"{len(got)} registered engines read the log pass's own records (one must)")
    return got[0]


def replayed() -> Engine:
    """The engine whose scheduler the what-if model replays (its ``not_replayed`` is None)."""
    return next(e for e in registered() if e.not_replayed is None)


def tie_order() -> tuple[str, ...]:
    """Every engine's fix ids, most direct first (the incident's ranking breaks ties with them)."""
    return tuple(i for e in registered() for i in e.fix_tie_order)
