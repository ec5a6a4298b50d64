"""The library entry point: ``analyze(paths) -> Analysis``.

bundle -> sources -> timebase -> events -> (joiner -> rules) -> render.
The CLI only parses options, calls :func:`analyze` and renders the result.

Order of work (see sources/__init__.py for the two-phase source interface):

1. collect and sniff the bundle;
2. phase 1 of every non-log source (its full timestamps become year anchors);
3. the vLLM logs: one pass per file, then the timebase (year, zone, order);
4. record families inside the logs (debug hooks, text block_table lines);
5. phase 2 of every other source, on the clock of the logs;
6. events from every source combined into one frame.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .bundle import Bundle, Workspace, collect, parse_kind_overrides
from .errors import InputError
from .timebase import Assumption, StreamMeta, TimeOptions, resolve

if TYPE_CHECKING:
    import polars as pl


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


@dataclass
class Analysis:
    bundle: Bundle
    events: "pl.DataFrame"
    stats: "pl.DataFrame"
    config: "pl.DataFrame"
    requests: "pl.DataFrame"
    records: "pl.DataFrame"
    tz: str
    frames: dict[str, "pl.DataFrame"] = field(default_factory=dict)
    assumptions: list[Assumption] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    counters: dict[str, Any] = field(default_factory=dict)
    partial: bool = False
    options: AnalyzeOptions = field(default_factory=AnalyzeOptions)
    evidence: "pl.DataFrame | None" = None  # joiner.EVIDENCE_SCHEMA, one row per event
    verdicts: "pl.DataFrame | None" = None  # rules.verdicts.VERDICT_COLUMNS, one row per event
    ruleset: Any = None  # the rules.model.RuleSet used
    filters: dict | None = None  # view.apply_filters: what was filtered out after the analysis
    columns: list[str] | None = None  # view.with_columns: the event columns the formatters write

    def summary(self) -> dict:
        from .summary import summarize

        return summarize(self)


# A progress listener (cli.progress): stage(name), files(total_bytes), file_done(bytes, name); None when off.
PROGRESS: Any = None


class Profile:
    """Stage timings on stderr when ``PREEMPTLOG_PROFILE=1`` (see docs/performance.md).

    Each :meth:`mark` prints the wall and CPU seconds since the previous mark, and tells the
    progress listener (``PROGRESS``) that the stage is done.
    """

    def files(self, total_bytes: int) -> None:
        if PROGRESS is not None:
            PROGRESS.files(total_bytes)

    def file_done(self, size: int, name: str = "") -> None:
        if PROGRESS is not None:
            PROGRESS.file_done(size, name)

    def __init__(self) -> None:
        self.on = os.environ.get("PREEMPTLOG_PROFILE", "") not in ("", "0")
        self._wall = time.perf_counter()
        self._cpu = time.process_time()

    def mark(self, stage: str) -> None:
        if PROGRESS is not None:
            PROGRESS.stage(stage)
        if not self.on:
            return
        import resource

        wall, cpu = time.perf_counter(), time.process_time()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10
        try:
            with open("/proc/self/statm") as fh:
                now = int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") >> 20
        except (OSError, ValueError, IndexError):
            now = -1
        sys.stderr.write(
            f"preemptlog profile: {stage:<26} {wall - self._wall:7.3f} s wall {cpu - self._cpu:7.3f} s cpu"
            f"  rss {now} MB (peak {peak} MB)\n"
        )
        self._wall, self._cpu = wall, cpu


def analyze(
    paths: list[str],
    options: AnalyzeOptions | None = None,
    *,
    workspace: Workspace | None = None,
    stdin=None,
) -> Analysis:
    """Analyse an incident bundle. Raises PreemptlogError subclasses on bad input.

    The caller owns ``workspace`` (temporary files); when omitted, one is
    created and closed before returning.
    """
    options = options or AnalyzeOptions()
    own = workspace is None
    ws = workspace or Workspace()
    try:
        return _analyze(paths, options, ws, stdin)
    finally:
        if own:
            ws.close()


def _analyze(paths: list[str], options: AnalyzeOptions, ws: Workspace, stdin) -> Analysis:
    prof = Profile()
    import polars as pl

    from . import events as ev
    from . import sources
    from .frames import with_source
    from .sources import SourceOutput, TimeContext, linetimes, vllm_log
    from .timebase import check_zone, local_zone
    from .vllm import config as vconfig
    from .vllm import preemptions, requests as vrequests, stats as vstats

    tz = check_zone(options.tz) if options.tz else local_zone()
    # Rules are loaded first: a bad rules file fails before any input is read.
    ruleset = None
    if options.rules:
        from .rules import load_rules

        ruleset = load_rules(options.rules_files, options.sets)
    thresholds = ruleset.threshold_values() if ruleset is not None else {}
    kv_ceiling = options.kv_ceiling if options.kv_ceiling is not None else float(thresholds.get("kv_ceiling", 95.0))
    lookback = options.lookback_steps if options.lookback_steps is not None else int(thresholds.get("lookback_steps", 3))
    prof.mark("imports, rules")
    bundle = collect(paths, ws, parse_kind_overrides(options.kinds), stdin=stdin)
    prof.mark("bundle")
    warnings: list[str] = list(bundle.warnings)
    partial = bool(bundle.warnings)
    recognised = [f for f in bundle.files if f.stream >= 0]
    if not recognised:
        names = ", ".join(
            f"{f.display} ({f.kind}" + (f": {f.warnings[0]}" if f.kind == "unreadable" and f.warnings else "") + ")"
            for f in bundle.files[:5]
        )
        more = f" and {len(bundle.files) - 5} more" if len(bundle.files) > 5 else ""
        raise InputError(
            f"nothing recognisable in the input: {names}{more}" if bundle.files else "the input holds no files",
            hint="expected a vLLM server log, dmon output, block-table records or /metrics scrapes; "
            "--kind FILE=KIND forces a file's kind",
        )

    # Phase 1 of the other sources.
    registry = sources.kinds()
    parsed: list[tuple[str, Any]] = []
    for name, kind in registry.items():
        if name == vllm_log.KIND or kind.parse is None:
            continue
        files = bundle.of_kind(name)
        if files:
            p, damage = _parse_guarded(kind, files, ws, options.debug)
            parsed.append((name, p))
            if damage:
                warnings.extend(damage)
                partial = True
    other_anchors = [a for _, p in parsed for a in p.anchors()]
    prof.mark("other sources, phase 1")

    # The vLLM logs.
    frames = []
    # Many small plain logs (a folder of thousands) are read in one pass, not one query each.
    frames, log_files = _scan_small_files(bundle.of_kind(vllm_log.KIND), ws)
    batched = bool(frames)
    from . import reflow

    repaired: list[str] = []
    prof.files(sum(f.size or 0 for f in log_files))
    # issue 18: request lines as runs, except in rotated sets (their overlap check compares lines)
    hot: list[pl.DataFrame] = []
    rotated = {sid for sid, members in bundle.streams().items() if len(members) > 1}
    for f in log_files:
        df, problem = _scan_file(f, ws, options.debug, hot, runs=f.stream not in rotated)
        prof.file_done(f.size or 0, f.display)
        fix = reflow.plan(f.path)
        if fix.needed:
            repaired.append(f"{f.display}: read as a capture or paste: {fix.describe()} (reflow.py)")
        if problem:
            f.warnings.append(problem)
            partial = True
        if df is not None:
            frames.append(df)
    records = pl.concat([vllm_log.with_run_columns(x) for x in frames], how="vertical") if frames else vllm_log.scan_empty()  # issue 18: run columns
    if batched:
        records = records.sort("file_id", "n", "seg", maintain_order=True)
    records = _with_line_times(records, bundle.of_kind(vllm_log.KIND))
    prof.mark(f"vllm logs ({records.height} rec)")
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
        records, streams, file_stream, TimeOptions(year=options.year, tz=options.tz), bundle_anchors=other_anchors
    )
    records = with_source(records, names)
    records, overlap_dropped = _drop_rotation_overlap(records, file_stream)
    if overlap_dropped:
        warnings.append(
            f"{overlap_dropped} line(s) repeated across rotated files (an overlap, e.g. logrotate copytruncate) "
            "were read once"
        )
    prof.mark("timebase")
    from .servers import mixed_warning

    mixed = mixed_warning(records)
    if mixed:
        warnings.append(mixed)
    records = _apply_offsets(records, options.offsets, vllm_log.KIND)
    assumptions = list(tres.assumptions)
    warnings.extend(tres.warnings)
    if options.offsets:
        for key, sec in sorted(options.offsets.items()):
            assumptions.append(Assumption("offset", f"{sec:+g}s", f"--offset {key}", scope=key))

    timed = records.filter(pl.col("time").is_not_null()).get_column("time") if records.height else None
    reference = (timed.min(), timed.max()) if timed is not None and timed.len() else None
    ctx = TimeContext(
        tz=tz,
        year=options.year,
        anchors=other_anchors + [(t, "vllm log") for t in ([reference[0]] if reference else [])],
        reference=reference,
        offsets=dict(options.offsets),
    )

    outputs: list[SourceOutput] = []
    for fam in sources.families().values():
        outputs.append(fam.from_records(records, ctx))
    # Lines read only for their time (sources/linetimes.py) have served: drop them.
    records = records.filter(pl.col("kind") != linetimes.KIND)
    untimed_notes, untimed_counts = _untimed_report(records)
    for _name, p in parsed:
        outputs.append(p.resolve(ctx))
    prof.mark("families, phase 2")

    stats = vstats.parse(records)
    prof.mark("stats")
    extra_config = [o.config for o in outputs if o.config is not None and o.config.height]
    config = vconfig.parse(records, stats, extra=extra_config)
    prof.mark("config")
    reqs = vrequests.parse(records, hot)  # issue 18: request lines of runs
    prof.mark("requests")
    logged, recon, v0facts = preemptions.logged_and_reconstructed(records)
    interval = preemptions.interval_events(stats, records)
    v1_counted = stats.filter(pl.col("preemptions") > 0).get_column("preemptions").sum() or 0
    if v0facts.get("capped_counts") or v1_counted > interval.height:  # see preemptions.capped_count
        warnings.append(
            "preemption counts in the logs are implausibly large (a damaged counter?): at most "
            f"{preemptions.MAX_EVENTS_PER_COUNT} events made from one count, {preemptions.MAX_EVENTS_FROM_COUNTS} in all"
        )
        partial = True
    markers = preemptions.marker_events(records)
    events = ev.combine([logged, recon, interval, markers] + [e for o in outputs for e in o.events])
    prof.mark(f"events ({events.height})")

    extra_frames: dict[str, pl.DataFrame] = {}
    notes: list[str] = list(untimed_notes) + repaired
    counters: dict[str, Any] = {"v0": v0facts, "line_times": untimed_counts}
    for o in outputs:
        extra_frames.update(o.frames)
        assumptions.extend(o.assumptions)
        warnings.extend(o.warnings)
        notes.extend(o.notes)
        counters.update(o.counters)
        partial = partial or o.partial
    for f in bundle.files:
        for w in f.warnings:
            warnings.append(f"{f.display}: {w}")
        if f.kind == "unreadable":
            partial = True

    import dataclasses

    options = dataclasses.replace(options, kv_ceiling=kv_ceiling, lookback_steps=lookback)
    analysis = Analysis(
        bundle=bundle,
        events=events,
        stats=stats,
        config=config,
        requests=reqs,
        records=records,
        tz=tz,
        frames=extra_frames,
        assumptions=assumptions,
        warnings=warnings,
        counters=counters,
        partial=partial,
        options=options,
    )
    from .reconcile import apply as reconcile_counts
    from .summary import honesty_notes

    reconcile_counts(analysis, kv_ceiling)  # de-duplicated events, counts per source, pressure intervals
    prof.mark("reconcile")
    analysis.notes = honesty_notes(analysis) + notes + analysis.notes  # + what reconciliation noted
    from .joiner import finish

    finish(analysis, before=options.before, after=options.after, lookback_steps=lookback)
    prof.mark("joiner")
    if ruleset is not None:
        from .rules.verdicts import verdicts

        analysis.ruleset = ruleset
        analysis.verdicts = verdicts(analysis, ruleset)
        prof.mark("verdicts")
    return analysis


def _with_line_times(records: "pl.DataFrame", files: list) -> "pl.DataFrame":
    """Add ``time_only`` rows (sources/linetimes.py) for files that have untimed records."""
    import polars as pl

    from .sources import linetimes

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
    return pl.concat([records, *extra], how="diagonal").sort("file_id", "n", "seg", maintain_order=True)  # issue 18: run columns


def _untimed_report(records: "pl.DataFrame") -> tuple[list[str], dict[str, Any]]:
    """How record times were found for lines without a timestamp of their own (notes, counters)."""
    import polars as pl

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


def _drop_rotation_overlap(
    records: "pl.DataFrame", file_stream: dict[int, tuple[int, int]]
) -> tuple["pl.DataFrame", int]:
    """Records of a later rotated file that repeat a record of an earlier file of the same stream.

    Two rotated parts can overlap (copytruncate, a copy taken twice): a line seen in
    both is one line. Lines are the same when their text is (it carries the header's
    timestamp); request lines, which keep no text, when kind, request id, time and
    numbers are. Identical lines inside one file are all kept (each is a line).
    """
    import polars as pl

    if records.height == 0 or len({s for s, _ in file_stream.values()}) == len(file_stream):
        return records, 0
    order = pl.DataFrame(
        {"file_id": list(file_stream), "_ord": [o for _, o in file_stream.values()]},
        schema={"file_id": pl.UInt16, "_ord": pl.Int32},
    )
    hot_key = pl.concat_str(
        [pl.col(c).cast(pl.String).fill_null("") for c in
         ("kind", "req_id", "mo", "dd", "hh", "mi", "ss", "hfrac", "fdate", "ftime", "ffrac", "max_tokens",
          "prompt_tokens")],
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


def _apply_offsets(df: "pl.DataFrame", offsets: dict[str, float], kind: str) -> "pl.DataFrame":
    """Add a per-kind or per-file clock offset (seconds) to ``time``."""
    import polars as pl

    if not offsets or df.height == 0:
        return df
    by_file = {k: v for k, v in offsets.items() if k != kind}
    shift = pl.lit(offsets.get(kind, 0.0))
    if by_file and "source" in df.columns:
        shift = pl.col("source").replace_strict(by_file, default=offsets.get(kind, 0.0), return_dtype=pl.Float64)
    return df.with_columns(pl.col("time") + pl.duration(microseconds=(shift * 1e6).cast(pl.Int64)))


def _scan_file(
    f, ws: Workspace, debug: bool, hot: "list[pl.DataFrame] | None" = None, runs: bool = False
) -> tuple["pl.DataFrame | None", str | None]:
    """Collect one file's records; salvage a damaged gzip; never raise on bad data.

    issue 18: with ``runs``, request lines become runs (vllm_log.read_split) and their
    per-request rows are appended to ``hot``.
    """
    import polars as pl

    from .sources import vllm_log
    from .textio import salvage_gzip

    try:
        if runs and hot is not None:
            rec, rows = vllm_log.read_split(str(f.path), f.file_id)
            hot.extend(rows)
            return rec, None
        return vllm_log.read(str(f.path), f.file_id), None
    except (OSError, pl.exceptions.PolarsError) as exc:
        if debug and f.compression is None:
            raise
        if f.compression == "gzip":
            dest = ws.new_file("salvage")
            written, err = salvage_gzip(f.path, dest)
            try:
                df = vllm_log.read(str(dest), f.file_id)
            except (OSError, pl.exceptions.PolarsError) as exc2:
                return None, f"cannot read ({exc2})"
            return df, f"damaged gzip: {err or exc}; read the first {written} bytes that decompressed"
        if f.compression == "zstd":
            from .bundle import salvage

            problem = salvage(f, ws)
            if problem:
                try:
                    return vllm_log.read(str(f.path), f.file_id), problem
                except (OSError, pl.exceptions.PolarsError) as exc2:
                    return None, f"cannot read ({exc2})"
        return None, f"cannot read ({exc})"


def _parse_guarded(kind, files: list, ws: Workspace, debug: bool) -> tuple[Any, list[str]]:
    """Phase 1 of a source kind that survives damaged files: (Parsed, warnings).

    A damaged .gz/.zst file is read as far as it decompresses; a file that
    still cannot be read is dropped (kind "unreadable") and the others are
    read. Bugs show with --debug.
    """
    import polars as pl

    from .bundle import salvage

    import zlib

    errors: tuple = (OSError, EOFError, zlib.error, pl.exceptions.PolarsError)  # EOFError: gzip.decompress
    try:
        import zstandard

        errors += (zstandard.ZstdError,)
    except ImportError:
        pass
    damage: list[str] = []
    files = list(files)
    while True:
        try:
            return kind.parse(files), damage
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
                    kind.parse([f])
                except errors as exc1:
                    bad.append((f, exc1))
            if not bad:  # only fails together: give up on the kind
                bad = [(f, exc) for f in files]
            for f, e in bad:
                f.kind = "unreadable"
                f.stream = -1
                damage.append(f"{f.display}: cannot read ({str(e).splitlines()[0] if str(e) else type(e).__name__}): skipped")
                files.remove(f)
            if not files:
                return kind.parse([]), damage


SMALL_LOG_BYTES = 1 << 20  # plain logs up to this size are read together ...
SMALL_LOG_MIN_FILES = 16  # ... when there are at least this many of them
SMALL_BATCH_BYTES = 64 << 20


def _scan_small_files(files: list, ws: Workspace) -> tuple[list["pl.DataFrame"], list]:
    """Records of many small plain logs from one pass over their concatenation: (frames, files left).

    polars costs a few milliseconds per query, so 3000 one-line logs took 15 s one by one. The
    files are copied one after the other into a workspace file (each ending with a line end),
    read once, and every record gets its own file id and line number back. A batch that fails
    is left to the file-by-file path (which reports damage per file).
    """
    import polars as pl

    from .sources import vllm_log

    small = [f for f in files if f.compression is None and 0 < f.size <= SMALL_LOG_BYTES]
    if len(small) < SMALL_LOG_MIN_FILES:
        return [], files
    chosen = {id(f) for f in small}
    rest = [f for f in files if id(f) not in chosen]
    frames: list[pl.DataFrame] = []
    batches: list[list] = [[]]
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
