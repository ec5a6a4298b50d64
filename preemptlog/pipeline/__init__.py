"""The analysis pipeline: stages that are functions returning frozen results.

    rules      load the rule set first (a bad rules file fails before any input is read)
    bundle     collect and sniff the inputs (bundle.py)
    sources    phase 1 of every non-log source (their full timestamps become year anchors),
               the vLLM logs (one pass per file), one clock for them (timebase.resolve, the
               --offset of the logs), the record families inside the logs and phase 2 of the
               other sources on the logs' clock -> :class:`SourceFrames`
    events     the event set, decided in one place: reconcile.event_set (combine, overlap
               merge, cross-source reconciliation, block-table records as events)
    pressure   suspected KV pressure intervals (pressure.find_intervals)
    evidence   the joiner's evidence frame and clock skew notes (joiner.evidence)
    verdicts   the rules over the evidence (rules.verdicts)
    [after verdicts: the place for further stages over the verdicts, see :func:`run`]
    Analysis   built once, at the end (result.Analysis, frozen)

Stages return their notes and warnings (:class:`Report`) instead of appending to a shared
object; :func:`run` puts them together in the order the outputs have always shown them.
The clock offsets (``--offset KIND_OR_FILE=SECONDS``) are applied here, once, to every source's
output (:func:`on_clock`): every time-typed column of every frame, per row by the file named in its
``source`` (``timebase.shift``). Each SOURCE is first put on the files of the bundle, before any is
read (:func:`clock_offsets`, ``timebase.resolve_offsets``: a kind names every file of that kind,
SGLang's log included, a name or path tail one file; one that names no file is a usage error; a
file's offset beats its kind's). The sources know nothing of offsets. The vLLM log records are moved before the record families
read them (their frames derive from the moved times and are not moved again) and before the
span the other sources date themselves by (``TimeContext.reference``) is taken. A source that
derives something across files (Prometheus: a counter series spans files) is placed per file,
moved, then combined (``sources.registry.CrossFile``). Not moved: the year anchors of phase 1
(they only choose a year) and text quoted from a file (a capture session's times).
"""

from __future__ import annotations

import dataclasses
import os
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

import polars as pl

from .. import engines
from ..clock.timebase import (
    Assumption,
    ClockOffsets,
    OffsetFile,
    StreamMeta,
    TimeOptions,
    check_zone,
    local_zone,
    resolve,
    resolve_offsets,
    shift,
)
from ..errors import InputError
from ..events import zonefit
from ..events.honesty import honesty_notes
from ..events.pressure import find_intervals
from ..events.reconcile import event_set, per_request_records
from ..events.servers import interleaved, interleaved_warning, mixed_warning
from ..events.servers import starts as server_starts
from ..findings import compute as compute_findings
from ..fixes.plan import attach as attach_fixes
from ..fixes.plan import plan as plan_fixes
from ..inputs import reflow
from ..inputs.files import Bundle, InputFile
from ..inputs.salvage import decompressed_copy, salvage
from ..inputs.workspace import Workspace
from ..joiner import evidence as joiner_evidence
from ..model import events as ev
from ..model.containers import log_containers
from ..model.frames import with_source
from ..model.requests import RequestStats
from ..model.result import Analysis, AnalyzeOptions
from ..rules import load_rules
from ..rules.model import RuleSet
from ..rules.verdicts import verdicts as rule_verdicts
from ..sources import (
    LOG_KINDS,
    CrossFile,
    DatesEngines,
    SourceKind,
    SourceOutput,
    TimeContext,
    families,
    kinds,
    linetimes,
    vllm_log,
)
from ..sources.sniffing import document_name
from . import profile as _profile
from .bundle import collect, keep_containers, parse_kind_overrides

Profile = _profile.Profile


@dataclass(frozen=True)
class Report:
    """What a stage has to say: warnings, notes, assumptions, and whether the run is partial."""

    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    assumptions: tuple[Assumption, ...] = ()
    partial: bool = False


@dataclass(frozen=True)
class Rules:
    ruleset: RuleSet | None
    kv_ceiling: float  # KV usage (%) at the ceiling
    lookback_steps: int


@dataclass(frozen=True)
class SourceFrames:
    """Every source's output on one clock (the ``sources`` stage)."""

    bundle: Bundle
    tz: str
    records: pl.DataFrame  # vllm_log.RECORD_SCHEMA, on the common clock, line-time rows dropped
    stats: pl.DataFrame
    config: pl.DataFrame
    requests: pl.DataFrame
    request_stats: RequestStats
    event_parts: tuple[pl.DataFrame, ...]  # partial event frames (events.conform), not yet one set
    frames: dict[str, pl.DataFrame]  # per-source frames: bt_*, prom_*, kv_events, dmon, hook_*
    counters: dict[str, Any]
    report: Report


@dataclass(frozen=True)
class Draft:
    """The analysis so far, as the stages after ``sources`` read it (result.AnalysisView)."""

    bundle: Bundle
    events: pl.DataFrame
    stats: pl.DataFrame
    config: pl.DataFrame
    requests: pl.DataFrame
    request_stats: RequestStats
    records: pl.DataFrame
    tz: str
    frames: dict[str, pl.DataFrame]
    counters: dict[str, Any]
    options: AnalyzeOptions
    evidence: pl.DataFrame | None = None
    verdicts: pl.DataFrame | None = None
    ruleset: Any = None


# ---------------------------------------------------------------------------------- stages


def rules_stage(options: AnalyzeOptions) -> Rules:
    ruleset = load_rules(options.rules_files, options.sets) if options.rules else None
    thresholds = ruleset.threshold_values() if ruleset is not None else {}
    kv_ceiling = options.kv_ceiling if options.kv_ceiling is not None else float(thresholds.get("kv_ceiling", 95.0))
    lookback = (
        options.lookback_steps if options.lookback_steps is not None else int(thresholds.get("lookback_steps", 3))
    )
    return Rules(ruleset, kv_ceiling, lookback)


def bundle_stage(paths: list[str], ws: Workspace, options: AnalyzeOptions, stdin: IO[bytes] | None) -> Bundle:
    """The sniffed bundle; InputError when nothing in it is recognisable."""
    bundle = collect(paths, ws, parse_kind_overrides(options.kinds), stdin=stdin, found=options.found)
    keep_containers(bundle, ws, options.containers)  # a file of several servers: the lines of the ones named
    recognised = [f for f in bundle.files if f.stream >= 0]
    if not recognised:
        names = ", ".join(
            f"{f.display} ({f.kind}" + (f": {f.warnings[0]}" if f.kind == "unreadable" and f.warnings else "") + ")"
            for f in bundle.files[:5]
        )
        more = f" and {len(bundle.files) - 5} more" if len(bundle.files) > 5 else ""
        raise InputError(
            f"nothing recognisable in the input: {names}{more}" if bundle.files else "the input holds no files",
            hint=f"expected a {' or '.join(e.display for e in engines.registered())} server log, dmon output, "
            "block-table records or /metrics scrapes; --file-kind FILE=KIND forces a file's kind",
        )
    return bundle


def parse_other_sources(bundle: Bundle, ws: Workspace, debug: bool) -> tuple[list[tuple[str, Any]], Report]:
    """Phase 1 of every source kind but the vLLM log: [(kind, Parsed)], damage warnings."""

    parsed: list[tuple[str, Any]] = []
    warnings: list[str] = []
    notes: list[str] = []
    for name, kind in kinds().items():
        if name in LOG_KINDS or kind.parse is None:
            continue
        files = bundle.of_kind(name)
        if files:
            p, damage = _parse_guarded(kind, files, ws, debug)
            parsed.append((name, p))
            warnings.extend(damage)
            for f in files:
                fix = reflow.plan(f.path, join=False) if f.compression is None else reflow.NOTHING
                if fix.only:
                    notes.append(container_note(f, fix))
    return parsed, Report(warnings=tuple(warnings), notes=tuple(notes), partial=bool(warnings))


def read_logs(
    bundle: Bundle, ws: Workspace, debug: bool, prof: Profile, keep_request_rows: bool = False
) -> tuple[pl.DataFrame, list[vllm_log.HotRows], Report]:
    """The records of every vLLM log (one pass per file; many small files in one pass), with
    the line-time rows for untimed records, and the per-request rows of files whose request
    lines were read as runs (sources/vllm_log.py ``read_split``; not in rotated sets, whose
    overlap check compares request lines one by one); unless ``keep_request_rows``, the rows of a
    file with many Received lines stay in its spill file in ``ws`` (folded: vllm/requests.py
    ``parse_with_stats``). A damaged file is read as far as it
    goes (the problem is added to its InputFile's warnings and the run is partial)."""
    frames, log_files = _scan_small_files(log_files_of(bundle), ws)
    batched = bool(frames)

    repaired: list[str] = []
    partial = False
    prof.files(sum(f.size or 0 for f in log_files))
    request_rows: list[vllm_log.HotRows] = []
    rotated = {sid for sid, members in bundle.streams().items() if len(members) > 1}
    spill_dir = None if keep_request_rows else str(ws.path)
    for f in log_files:
        df, problem = _scan_file(f, ws, debug, request_rows, runs=f.stream not in rotated, spill_dir=spill_dir)
        prof.file_done(f.size or 0, f.display)
        fix = reflow.plan(f.path)
        if fix.only:
            repaired.append(container_note(f, fix))
        elif document_name(f.display) and not f.forced_kind:
            repaired.append(container_note(f, None))
        if fix.needed and fix.describe():
            repaired.append(f"{f.display}: read as a capture or paste: {fix.describe()} (reflow.py)")
        if fix.partials:
            repaired.append(f"{f.display}: {fix.partials_note()} (reflow.py)")
        if fix.driver:
            repaired.append(f"{f.display}: {fix.driver_note()} (reflow.py)")
        if problem:
            f.warnings.append(problem)
            partial = True
        if df is not None:
            frames.append(df)
    records = (
        pl.concat([vllm_log.with_run_columns(x) for x in frames], how="vertical") if frames else vllm_log.scan_empty()
    )
    if batched:
        records = records.sort("file_id", "n", "seg", maintain_order=True)
    records = _with_line_times(records, log_files_of(bundle))
    return records, request_rows, Report(notes=tuple(repaired), partial=partial)


def container_note(f: InputFile, fix: Any | None) -> str:
    """``read the vLLM log inside the code fences of issue-5123.md (lines 12-18)``: a document that
    holds a log (reflow.py ``Plan.only``) was read for that log alone, at the document's own line numbers."""
    eng = next((e for e in engines.registered() if f.kind in e.log_kinds), None)
    what = f"the {eng.display} log" if eng is not None else f"the {f.kind} data"
    if fix is None:  # named on the command line: a document by its name, read whole for its content
        return f"read {f.display} as {what} it holds (a document by its name, a log by its content)"
    where = f" ({fix.lines()})" if fix.lines() else ""
    return (
        f"read {what} inside {fix.where()} {f.display}{where}: the text around it is not the log "
        "(line numbers are the file's own)"
    )


def log_files_of(bundle: Bundle) -> list[InputFile]:
    """The files the single log pass reads: every file of a log kind (sources.LOG_KINDS), in bundle order."""
    return [f for f in bundle.files if f.kind in LOG_KINDS]


def clock_offsets(bundle: Bundle, options: AnalyzeOptions) -> ClockOffsets:
    """The ``--offset`` pairs put on the files of the bundle (``timebase.resolve_offsets``): a
    SOURCE that names no file is a UsageError here, before anything is read."""
    files = [
        OffsetFile(f.display, f.kind, None if f.is_stdin else str(f.path))
        for f in bundle.files
        if f.stream >= 0  # the files that are read
    ]
    return resolve_offsets(options.offsets, files, list(kinds()))


def one_clock(
    records: pl.DataFrame,
    bundle: Bundle,
    options: AnalyzeOptions,
    tz: str,
    anchors: list[tuple[Any, str]],
    offsets: ClockOffsets | None = None,
) -> tuple[pl.DataFrame, TimeContext, Report]:
    """The log records on one clock (year, zone, order: timebase.resolve; provenance; rotated
    overlap read once; the logs' --offset), and the time context the other sources resolve in."""
    names = {f.file_id: f.display for f in bundle.files}
    streams: dict[int, StreamMeta] = {}
    file_stream: dict[int, tuple[int, int]] = {}
    for sid, members in bundle.streams().items():
        newest = members[-1]
        streams[sid] = StreamMeta(
            stream=sid,
            name=bundle.stream_name(sid),
            mtime=newest.mtime,
            gzip_mtime=newest.gzip_mtime,
            is_stdin=newest.is_stdin,
        )
        for m in members:
            file_stream[m.file_id] = (sid, m.order)
    records, tres = resolve(
        records, streams, file_stream, TimeOptions(year=options.year, tz=options.tz), bundle_anchors=anchors
    )
    records = with_source(records, names)
    records, overlap_dropped = _drop_rotation_overlap(records, file_stream)
    warnings: list[str] = []
    if overlap_dropped:
        warnings.append(
            f"{overlap_dropped} line(s) repeated across rotated files (an overlap, e.g. logrotate copytruncate) "
            "were read once"
        )
    mixed = mixed_warning(records)
    if mixed:
        warnings.append(mixed)
    # several servers' lines merged in one stream with nothing to tell them apart: no count holds
    woven = interleaved_warning(interleaved(records))
    if woven:
        warnings.append(woven)
    if offsets is None:
        offsets = clock_offsets(bundle, options)
    records = on_clock(records, offsets, vllm_log.KIND)
    assumptions = list(tres.assumptions)
    warnings.extend(tres.warnings)
    assumptions.extend(sorted(offsets.assumptions, key=lambda a: str(a.source)))
    warnings.extend(offsets.warnings)
    timed = records.filter(pl.col("time").is_not_null()).get_column("time") if records.height else None
    reference = (timed.min(), timed.max()) if timed is not None and timed.len() else None
    spans: tuple[tuple[Any, Any], ...] = ()
    if reference is not None:
        per_file = (
            records.filter(pl.col("time").is_not_null())
            .group_by("source")
            .agg(pl.col("time").min().alias("lo"), pl.col("time").max().alias("hi"))
            .sort("lo", "source")
        )
        spans = tuple(zip(per_file.get_column("lo").to_list(), per_file.get_column("hi").to_list(), strict=True))
    ctx = TimeContext(
        tz=tz,
        year=options.year,
        anchors=anchors + [(t, "vllm log") for t in ([reference[0]] if reference else [])],
        reference=reference,  # type: ignore[arg-type]  # polars scalars are typed as every literal
        spans=spans,
        reference_wall=tres.wall,
    )
    return records, ctx, Report(warnings=tuple(warnings), assumptions=tuple(assumptions), partial=bool(woven))


def sources_stage(bundle: Bundle, ws: Workspace, options: AnalyzeOptions, tz: str, prof: Profile) -> SourceFrames:
    """Every source read and put on one clock: the frames the later stages work on."""
    offsets = clock_offsets(bundle, options)  # a SOURCE that names no file fails before any reading
    parsed, phase1 = parse_other_sources(bundle, ws, options.debug)
    other_anchors = [a for _, p in parsed for a in p.anchors()]
    prof.mark("other sources, phase 1")
    records, request_rows, logs = read_logs(bundle, ws, options.debug, prof, options.keep_request_rows)
    prof.mark(f"vllm logs ({records.height} rec)")
    read = records
    records, ctx, clock = one_clock(records, bundle, options, tz, other_anchors, offsets)
    # An --offset that moves a log or a scrape is the user's clock setting: the zone is left alone.
    moved = any(offsets.of(f.display, f.kind) for f in bundle.files if f.kind in (*LOG_KINDS, "prometheus"))
    if not options.tz and not moved:
        # The logs' zone, when the bundle's exact engine starts say it is not the assumed one.
        evidence = [e for _, p in parsed if isinstance(p, DatesEngines) for e in p.engine_starts()]
        written = {
            f.display: float(f.gzip_mtime) if f.compression == "gzip" and f.gzip_mtime else f.mtime
            for f in bundle.files
            if f.kind in LOG_KINDS and f.mtime is not None and f.compression in (None, "gzip")
        }
        zf = zonefit.fit(records, evidence, tz, {k: v for k, v in written.items() if v})
        if zf is not None:
            tz = zf.zone
            records, ctx, clock = one_clock(
                read, bundle, dataclasses.replace(options, tz=tz), tz, other_anchors, offsets
            )
            said = [
                Assumption("zone", tz, zf.why) if a.topic == "zone" and a.scope == "bundle" else a
                for a in clock.assumptions
            ]
            clock = dataclasses.replace(clock, assumptions=tuple(said))
    del read
    prof.mark("timebase")

    outputs: list[SourceOutput] = [fam.from_records(records, ctx) for fam in families().values()]
    # Lines read only for their time (sources/linetimes.py) have served: drop them.
    records = records.filter(pl.col("kind") != linetimes.KIND)
    untimed_notes, untimed_counts = _untimed_report(records)
    for name, p in parsed:
        outputs.append(resolve_on_clock(p, name, ctx, offsets))
    prof.mark("families, phase 2")

    # The log pass's own records are read by the engine whose parsers they are (engines.log_reader:
    # vLLM's); another engine's lines came as a record family's output above.
    facts = engines.log_reader()
    stats = facts.stats(records)
    more_stats = [o.stats for o in outputs if o.stats is not None and o.stats.height]  # SGLang's batch lines
    if more_stats:
        stats = pl.concat([stats, *more_stats], how="vertical_relaxed").sort("seq", maintain_order=True)
    prof.mark("stats")
    extra_config = [o.config for o in outputs if o.config is not None and o.config.height]
    config = facts.config(records, stats, extra_config)
    prof.mark("config")
    logged = facts.events(records, stats)
    warnings = list(phase1.warnings) + list(clock.warnings) + logged.warnings
    partial = phase1.partial or logs.partial or logged.partial or clock.partial
    parts = list(logged.parts) + [e for o in outputs for e in o.events]
    frames_so_far = {k: v for o in outputs for k, v in o.frames.items()}
    reqs, req_stats = facts.requests(records, request_rows, named_request_ids(parts, frames_so_far), config)
    del request_rows
    prof.mark("requests")

    frames: dict[str, pl.DataFrame] = {}
    notes: list[str] = list(untimed_notes) + list(logs.notes) + list(phase1.notes)
    counters: dict[str, Any] = {**logged.counters, "line_times": untimed_counts}
    assumptions = list(clock.assumptions)
    # Which server run each log line belongs to (a restart resets the configuration: vllm/runs.py).
    frames["server_runs"] = facts.runs(records)
    # The streams of the servers' logs: a log's event is its server's, and reads its own log's lines only.
    frames["log_streams"] = pl.DataFrame(
        {"stream": sorted({f.stream for f in bundle.files if f.kind in LOG_KINDS and f.stream >= 0})},
        schema={"stream": pl.Int32},
    )
    # A log of several servers' lines, each behind its container's prefix: the container of each line (a
    # container's events read its own lines only, as a log's do: joiner/common.py log_containers).
    frames["log_containers"] = log_containers(records)
    for o in outputs:
        frames.update(o.frames)
        assumptions.extend(o.assumptions)
        warnings.extend(o.warnings)
        notes.extend(o.notes)
        counters.update(o.counters)
        partial = partial or o.partial
    # Counts whose events were capped, from every maker of events from counts (model.events.CAPPED_SCHEMA):
    # events/reconcile.py says them whole.
    capped = [c for c in [logged.capped, *(o.capped for o in outputs)] if c is not None and c.height]
    if capped:
        frames["capped_counts"] = pl.concat(capped, how="vertical_relaxed")
    assumptions = zone_applies(assumptions, ctx.reference_wall, [w for o in outputs for w in o.wall])
    return SourceFrames(
        bundle=bundle,
        tz=tz,
        records=records,
        stats=stats,
        config=config,
        requests=reqs,
        request_stats=req_stats,
        event_parts=tuple(parts),
        frames=frames,
        counters=counters,
        report=Report(warnings=tuple(warnings), notes=tuple(notes), assumptions=tuple(assumptions), partial=partial),
    )


ZONE_NAMES_SHOWN = 3


def zone_applies(assumptions: list[Assumption], logs_wall: bool, wall: list[str]) -> list[Assumption]:
    """The bundle's zone assumption where it applies: to the logs' lines without an offset
    (``logs_wall``: timebase.TimeResult.wall) as it is; else to the other sources' times without an
    offset (``wall``: the files, SourceOutput.wall), named; else to nothing (every time read states its
    offset: an RFC 3339 prefix, an epoch), and it is not said."""
    if logs_wall:
        return assumptions
    out = []
    for a in assumptions:
        if a.topic == "zone" and a.scope == "bundle":
            if not wall:
                continue
            names = list(dict.fromkeys(wall))
            more = f" and {len(names) - ZONE_NAMES_SHOWN} more" if len(names) > ZONE_NAMES_SHOWN else ""
            a = dataclasses.replace(a, source=f"{a.source}: those of {', '.join(names[:ZONE_NAMES_SHOWN])}{more}")
        out.append(a)
    return out


def named_request_ids(parts: list[pl.DataFrame], frames: dict[str, pl.DataFrame]) -> list[str]:
    """The request ids the events can name: the partial event frames' and the preempt records'
    (reconcile.per_request_records: the events where they are the count)."""
    cols = [p.get_column("request_id") for p in parts if "request_id" in p.columns and p.height]
    cols += [df.get_column("request_id") for df in per_request_records(frames).values() if df.height]
    if not cols:
        return []
    return pl.concat([c.cast(pl.String) for c in cols]).drop_nulls().unique().to_list()


def bundle_report(bundle: Bundle) -> Report:
    """The bundle's own warnings (first) and every file's (after the sources': their damage)."""
    return Report(warnings=tuple(bundle.warnings), partial=bool(bundle.warnings))


def file_report(bundle: Bundle) -> Report:
    warnings = [f"{f.display}: {w}" for f in bundle.files for w in f.warnings]
    return Report(warnings=tuple(warnings), partial=any(f.kind == "unreadable" for f in bundle.files))


# A stage after the verdicts: (the analysis so far) -> fields of Analysis to set (e.g. {"findings": ...}).
ExtraStage = Callable[[Draft], dict[str, Any]]
AFTER_VERDICTS: list[ExtraStage] = []


def run(paths: list[str], options: AnalyzeOptions, ws: Workspace, stdin: IO[bytes] | None = None) -> Analysis:
    """bundle -> sources -> events -> pressure -> evidence -> verdicts -> Analysis (built once)."""
    prof = Profile()
    tz = check_zone(options.tz) if options.tz else local_zone()
    rules = rules_stage(options)  # a bad rules file fails before any input is read
    prof.mark("imports, rules")
    bundle = bundle_stage(paths, ws, options, stdin)
    head = bundle_report(bundle)
    prof.mark("bundle")
    src = sources_stage(bundle, ws, options, tz, prof)
    tz = src.tz  # the zone the logs were read in (sources_stage may find it: events/zonefit.py)
    options = dataclasses.replace(options, kv_ceiling=rules.kv_ceiling, lookback_steps=rules.lookback_steps)
    draft = Draft(
        bundle=bundle,
        events=pl.DataFrame(schema=ev.polars_schema()),  # decided by the events stage
        stats=src.stats,
        config=src.config,
        requests=src.requests,
        request_stats=src.request_stats,
        records=src.records,
        tz=tz,
        frames=dict(src.frames),
        counters=dict(src.counters),
        options=options,
    )
    prof.mark("events (parts)")

    # The event set: one home (reconcile.event_set).
    es = event_set(draft, list(src.event_parts))
    prof.mark(f"events ({es.events.height})")
    # without other servers' counter series (events/scopes.py): their gauges are no evidence of this one's
    draft = dataclasses.replace(
        draft,
        frames=es.frames if es.frames is not None else draft.frames,
        counters=es.counters if es.counters is not None else draft.counters,
        config=es.config if es.config is not None else draft.config,
    )
    pressure = find_intervals(
        src.stats,
        draft.frames.get("prom_series"),
        ceiling=rules.kv_ceiling,
        starts=server_starts(src.records),
        containers=src.frames.get("log_containers"),
    )
    draft = dataclasses.replace(
        draft,
        events=es.events,
        counters={**draft.counters, "overlap": es.overlap, "reconciliation": es.reconciliation},
        frames={**draft.frames, "pressure_intervals": pressure},
    )
    prof.mark("reconcile")
    honesty = honesty_notes(draft)

    found, skew = joiner_evidence(
        draft.events,
        draft.frames,
        draft.stats,
        draft.config,
        before=options.before,
        after=options.after,
        lookback_steps=rules.lookback_steps,
    )
    draft = dataclasses.replace(draft, evidence=found)
    prof.mark("joiner")
    if rules.ruleset is not None:
        draft = dataclasses.replace(draft, ruleset=rules.ruleset)
        draft = dataclasses.replace(draft, verdicts=rule_verdicts(draft, rules.ruleset))
        prof.mark("verdicts")
    found_beyond = compute_findings(draft)  # the findings beyond the gates (findings/): read-only
    prof.mark("findings")
    fix_plan = plan_fixes(draft, found_beyond)  # the changes to make: one list for every output
    kinds = draft.events.select("event_id", "engine_kind") if "engine_kind" in draft.events.columns else None
    draft = dataclasses.replace(draft, verdicts=attach_fixes(draft.verdicts, fix_plan, kinds))
    prof.mark("fixes")
    extra: dict[str, Any] = {}
    for stage in AFTER_VERDICTS:  # further stages over the verdicts plug in here
        extra.update(stage(dataclasses.replace(draft)))

    files = file_report(bundle)
    return Analysis(
        bundle=bundle,
        events=draft.events,
        stats=draft.stats,
        config=draft.config,
        requests=draft.requests,
        request_stats=draft.request_stats,
        records=draft.records,
        tz=tz,
        frames=draft.frames,
        assumptions=list(src.report.assumptions),
        warnings=list(head.warnings) + list(src.report.warnings) + list(files.warnings),
        notes=honesty + list(src.report.notes) + list(es.notes) + skew,
        counters=draft.counters,
        partial=head.partial or src.report.partial or files.partial,
        options=options,
        evidence=draft.evidence,
        verdicts=draft.verdicts,
        ruleset=draft.ruleset,
        findings=found_beyond,
        fixes=fix_plan,
        **extra,
    )


# ------------------------------------------------------------------ helpers (from analysis.py)


def _with_line_times(records: pl.DataFrame, files: list[InputFile]) -> pl.DataFrame:
    """Add ``time_only`` rows (sources/linetimes.py) for files that have untimed records."""

    if records.height == 0:
        return records
    need = records.filter(linetimes.untimed(records)).get_column("file_id").unique().to_list()
    if not need:
        return records
    paths = {f.file_id: f.path for f in files}
    extra = []
    for fid in need:
        if fid not in paths:
            continue
        try:
            rows = linetimes.time_lines(str(paths[fid]), fid, records.filter(pl.col("file_id") == fid))
        except (OSError, pl.exceptions.PolarsError):
            continue  # a damaged file: its untimed lines keep the times of the records around them
        if rows is not None and rows.height:
            extra.append(rows)
    if not extra:
        return records
    return pl.concat([records, *extra], how="diagonal").sort("file_id", "n", "seg", maintain_order=True)


def _untimed_report(records: pl.DataFrame) -> tuple[list[str], dict[str, Any]]:
    """How record times were found for lines without a timestamp of their own (notes, counters)."""
    if records.height == 0 or "time_precision" not in records.columns:
        return [], {"inherited_earlier": 0, "inherited_later": 0, "without_time": 0}
    counts = dict(records.group_by("time_precision").len().iter_rows())
    out = {
        "inherited_earlier": counts.get("inherited", 0),
        "inherited_later": counts.get("inherited-later", 0),
        "without_time": records.filter(pl.col("time").is_null()).height,
    }
    notes = []
    if out["inherited_later"]:
        notes.append(
            f"{out['inherited_later']} log line(s) without a timestamp come before any timestamped line of their "
            "stream: each takes the time of the nearest later timestamped line (time_precision inherited-later), "
            "so it may be late"
        )
    if out["without_time"]:
        kinds = records.filter(pl.col("time").is_null()).group_by("kind").len().sort("kind")
        what = ", ".join(f"{n} {k}" for k, n in kinds.iter_rows())
        notes.append(
            f"{out['without_time']} log line(s) have no time ({what}): no line of their stream carries a "
            "timestamp; their order is kept, but they cannot be joined to events by time"
        )
    return notes, out


def _drop_rotation_overlap(records: pl.DataFrame, file_stream: dict[int, tuple[int, int]]) -> tuple[pl.DataFrame, int]:
    """Records of a later rotated file that repeat a record of an earlier file of the same stream.

    Two rotated parts can overlap (copytruncate, a copy taken twice): a line seen in
    both is one line. Lines are the same when their text is (it carries the header's
    timestamp); request lines, which keep no text, when kind, request id, time and
    numbers are. Identical lines inside one file are all kept (each is a line).
    """
    if records.height == 0 or len({s for s, _ in file_stream.values()}) == len(file_stream):
        return records, 0
    order = pl.DataFrame(
        {"file_id": list(file_stream), "_ord": [o for _, o in file_stream.values()]},
        schema={"file_id": pl.UInt16, "_ord": pl.Int32},
    )
    hot_key = pl.concat_str(
        [
            pl.col(c).cast(pl.String).fill_null("")
            for c in (
                "kind",
                "req_id",
                "mo",
                "dd",
                "hh",
                "mi",
                "ss",
                "hfrac",
                "fdate",
                "ftime",
                "ffrac",
                "max_tokens",
                "prompt_tokens",
            )
        ],
        separator="\x1f",
    )
    df = records.join(order, on="file_id", how="left").with_columns(
        _key=pl.coalesce(pl.concat_str([pl.col("kind"), pl.lit("\x1f"), pl.col("text")]), hot_key)
    )
    first = pl.col("_ord").min().over("stream", "_key")
    keep = (pl.col("_ord") == first) | pl.col("_ord").is_null()
    kept = df.filter(keep)
    dropped = df.height - kept.height
    return (kept.drop("_ord", "_key") if dropped else records), dropped


def on_clock(df: pl.DataFrame, offsets: ClockOffsets, kind: str) -> pl.DataFrame:
    """Every time-typed (Datetime) column of a source kind's frame moved by its file's ``--offset``.

    The file is the row's ``source`` (rows without one take the offset given to ``kind`` by
    name): ``ClockOffsets.of`` per file, ``timebase.shift`` per column. The file decides, not
    ``kind``: the log records of every log kind come here as ``vllm-log``'s.
    """
    if not offsets.moves() or df.height == 0:
        return df
    cols = [c for c, t in df.schema.items() if isinstance(t, pl.Datetime)]
    if not cols:
        return df
    default = offsets.of(None, kind)
    secs: float | pl.Expr = default
    if "source" in df.columns:
        files = df.get_column("source").unique()
        per = {str(f): offsets.of(str(f), kind) for f in files.drop_nulls().to_list()}
        values = set(per.values()) | ({default} if files.null_count() else set())
        if len(values) > 1:
            secs = pl.col("source").replace_strict(per, default=default, return_dtype=pl.Float64)
        elif values:
            secs = values.pop()
    for c in cols:
        df = shift(df, secs, c)
    return df


def output_on_clock(out: SourceOutput, offsets: ClockOffsets, kind: str) -> SourceOutput:
    """A source's output with every frame, event frame and config row on the common clock (and
    the frames it keeps sorted sorted again)."""
    if not offsets.moves():
        return out
    frames = {}
    for name, df in out.frames.items():
        moved = on_clock(df, offsets, kind)
        if moved is not df and name in out.order:
            moved = moved.sort(*out.order[name], maintain_order=True)
        frames[name] = moved
    return dataclasses.replace(
        out,
        frames=frames,
        events=[on_clock(e, offsets, kind) for e in out.events],
        config=on_clock(out.config, offsets, kind) if out.config is not None else None,
        capped=on_clock(out.capped, offsets, kind) if out.capped is not None else None,
    )


def resolve_on_clock(parsed: Any, kind: str, ctx: TimeContext, offsets: ClockOffsets) -> SourceOutput:
    """Phase 2 of a source kind, its output moved by the ``--offset`` of its files (once)."""
    if isinstance(parsed, CrossFile):
        return parsed.combine(output_on_clock(parsed.place(ctx), offsets, kind))
    out: SourceOutput = parsed.resolve(ctx)
    return output_on_clock(out, offsets, kind)


def _scan_file(
    f: InputFile,
    ws: Workspace,
    debug: bool,
    request_rows: list[vllm_log.HotRows] | None = None,
    runs: bool = False,
    spill_dir: str | None = None,
) -> tuple[pl.DataFrame | None, str | None]:
    """Collect one file's records; salvage a damaged gzip; never raise on bad data.

    With ``runs``, request lines become runs (vllm_log.read_split) and their per-request rows
    are appended to ``request_rows``.
    """

    try:
        if runs and request_rows is not None:
            rec, rows = vllm_log.read_split(str(f.path), f.file_id, spill_dir=spill_dir)
            request_rows.extend(rows)
            return rec, None
        return vllm_log.read(str(f.path), f.file_id), None
    except (OSError, pl.exceptions.PolarsError) as exc:
        if debug and f.compression is None:
            raise
        if f.compression == "gzip":
            dest, written, err = decompressed_copy(f, ws, "salvage")
            try:
                df = vllm_log.read(str(dest), f.file_id)
            except (OSError, pl.exceptions.PolarsError) as exc2:
                return None, f"cannot read ({exc2})"
            return df, f"damaged gzip: {err or exc}; read the first {written} bytes that decompressed"
        if f.compression == "zstd":
            problem = salvage(f, ws)
            if problem:
                try:
                    return vllm_log.read(str(f.path), f.file_id), problem
                except (OSError, pl.exceptions.PolarsError) as exc2:
                    return None, f"cannot read ({exc2})"
        return None, f"cannot read ({exc})"


def _parse_guarded(kind: SourceKind, files: list[InputFile], ws: Workspace, debug: bool) -> tuple[Any, list[str]]:
    """Phase 1 of a source kind that survives damaged files: (Parsed, warnings).

    A damaged .gz/.zst file is read as far as it decompresses; a file that
    still cannot be read is dropped (kind "unreadable") and the others are
    read. Bugs show with --debug.
    """

    errors: tuple[type[BaseException], ...] = (
        OSError,
        EOFError,
        zlib.error,
        pl.exceptions.PolarsError,
    )  # EOFError: gzip.decompress
    try:
        import zstandard

        errors += (zstandard.ZstdError,)
    except ImportError:
        pass
    parse = kind.parse
    assert parse is not None  # only kinds with a phase 1 are given
    damage: list[str] = []
    files = list(files)
    while True:
        try:
            return parse(files), damage
        except errors as exc:
            if debug:
                raise
            fixed = False
            for f in files:
                problem = salvage(f, ws)
                if problem:
                    damage.append(f"{f.display}: {problem}")
                    fixed = True
            if fixed:
                continue
            bad = []
            for f in files:
                try:
                    parse([f])
                except errors as exc1:
                    bad.append((f, exc1))
            if not bad:  # only fails together: give up on the kind
                bad = [(f, exc) for f in files]
            for f, e in bad:
                f.kind = "unreadable"
                f.stream = -1
                damage.append(
                    f"{f.display}: cannot read ({str(e).splitlines()[0] if str(e) else type(e).__name__}): skipped"
                )
                files.remove(f)
            if not files:
                return parse([]), damage


SMALL_LOG_BYTES = 1 << 20  # plain logs up to this size are read together ...
SMALL_LOG_MIN_FILES = 16  # ... when there are at least this many of them
SMALL_BATCH_BYTES = 64 << 20


def _scan_small_files(files: list[InputFile], ws: Workspace) -> tuple[list[pl.DataFrame], list[InputFile]]:
    """Records of many small plain logs from one pass over their concatenation: (frames, files left).

    polars costs a few milliseconds per query, so 3000 one-line logs took 15 s one by one. The
    files are copied one after the other into a workspace file (each ending with a line end),
    read once, and every record gets its own file id and line number back. A batch that fails
    is left to the file-by-file path (which reports damage per file).
    """

    small = [f for f in files if f.compression is None and 0 < f.size <= SMALL_LOG_BYTES]
    if len(small) < SMALL_LOG_MIN_FILES:
        return [], files
    chosen = {id(f) for f in small}
    rest = [f for f in files if id(f) not in chosen]
    frames: list[pl.DataFrame] = []
    batches: list[list[InputFile]] = [[]]
    size = 0
    for f in small:
        if size + f.size > SMALL_BATCH_BYTES and batches[-1]:
            batches.append([])
            size = 0
        batches[-1].append(f)
        size += f.size
    for batch in batches:
        dest = ws.new_file("small-logs")
        starts: list[int] = []
        line = 0
        try:
            with open(dest, "wb") as out:
                for f in batch:
                    with open(f.path, "rb") as fh:
                        data = fh.read()
                    if data and not data.endswith(b"\n"):
                        data += b"\n"
                    starts.append(line)
                    line += data.count(b"\n")
                    out.write(data)
            df = vllm_log.read(str(dest), 0, wraps=False)  # a concatenation: no one file's wrap width
        except (OSError, pl.exceptions.PolarsError):
            rest.extend(batch)
            continue
        finally:
            try:
                os.unlink(dest)
            except OSError:
                pass
        k = (pl.Series(starts, dtype=pl.UInt32).search_sorted(df.get_column("n") - 1, side="right") - 1).cast(pl.Int64)
        ids = pl.Series([f.file_id for f in batch], dtype=pl.UInt16)
        frames.append(
            df.with_columns(
                file_id=ids.gather(k),
                n=(df.get_column("n").cast(pl.Int64) - pl.Series(starts, dtype=pl.Int64).gather(k)).cast(pl.UInt32),
            )
        )
    return frames, rest
