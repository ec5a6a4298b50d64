"""``preemptlog analyze --each``: every server (or every subfolder) analysed on its own.

A folder that mixes several servers is not one incident (servers.py). With
``--each`` the inputs are split into *units*, each analysed separately, and
one combined output names the unit of every row in a ``server`` column:

- several inputs on the command line: each input is a unit;
- one folder with subfolders: each subfolder is a unit (files directly in the
  folder form one more unit, named after the folder);
- otherwise (one folder of files, one file, one archive): each incident is a unit
  (:func:`split_by_incident`): the vLLM or SGLang log streams (a log and its
  rotated parts) grouped by server and by time (streams whose lines meet in
  time and are not two servers are one), the files of other kinds (dmon,
  /metrics, block-table records) with the incident they meet in time, else one
  more unit. A single incident stays one unit.

A log stream whose lines come from two or more containers (each line behind its container's
prefix: docker compose ``svc  | ``, kubectl logs --prefix ``[pod/NAME/CONTAINER] ``; the records'
``compose`` column) is one part per container (:func:`container_parts`), named
``FILE [CONTAINER]``: each is analysed as if its lines were a file of their own (the unit's
``containers``, AnalyzeOptions.containers: pipeline/bundle.py keep_containers), at the file's own
line numbers.

Outputs: ``ndjson`` / ``csv`` / ``parquet`` rows are the events of every unit
with ``server`` first; ``json`` is ``{"servers": [{"server", "summary"}],
"events": [...]}``; the table lists one line per unit, then the events. ``--columns`` may name
``server`` (:data:`SERVER`) among the event columns, in every format: it stands where it is named
(without it, first as always); without --each there is one incident and no such column.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import polars as pl

from ..analysis import analyze
from ..events.servers import engine_named, servers, starts
from ..model import VERSION as __version__
from ..model.places import folders, shared_depth
from ..model.result import AnalyzeOptions
from ..outputs.console import binary_console
from ..outputs.safe import text
from ..sources import LOG_KINDS
from . import SCHEMA_VERSION, OutputFormat, event_rows
from .csvfmt import write_csv_frame
from .jsonfmt import frame_rows, write_document
from .table import display_rows, resolve_columns

if TYPE_CHECKING:
    from ..inputs.files import Found, InputFile
    from ..inputs.workspace import Workspace
    from ..model.result import Analysis
    from . import OutputFormat


# The column --each puts first: the unit (server, folder, incident) of each event row; --columns may name it.
SERVER = "server"


def event_columns(columns: list[str] | None) -> list[str] | None:
    """The event columns (render.event_rows) of an --each ``--columns`` choice: the choice less
    :data:`SERVER`, which --each adds itself (``event_id`` alone when the choice is only the server)."""
    if not columns or SERVER not in columns:
        return columns
    return [c for c in columns if c != SERVER] or ["event_id"]


@dataclass
class Unit:
    name: str
    paths: list[str] = field(default_factory=list)
    # file (as in ``paths``) -> the containers whose lines are read of it (a file of several servers);
    # a file not named here is read whole
    containers: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # file (as in ``paths``: the path read) -> how the analysis it was split from found it: its files are
    # cited by the names that analysis gives them (``b.zip!vllm.log``, not the archive's unpacked copy)
    found: dict[str, Found] = field(default_factory=dict)
    # the user's files of the analysis it was split from (a folder's other files too): inputs all, never written
    originals: list[Path] = field(default_factory=list)

    def add(self, f: InputFile) -> None:
        """One more file of the analysis it is split from, read as that analysis found it."""
        self.paths.append(str(f.path))
        self.found[str(f.path)] = f.found()

    def options(self, options: AnalyzeOptions) -> AnalyzeOptions:
        """``options`` for this unit's analysis (its files' containers, and how they were found)."""
        if not (self.containers or self.found):
            return options
        return dataclasses.replace(options, containers=dict(self.containers), found=dict(self.found))


def _unit(name: str, files: list[InputFile], containers: dict[str, tuple[str, ...]] | None = None) -> Unit:
    """A unit of some of the files of an analysis made already (each read as that analysis found it)."""
    u = Unit(name, containers=dict(containers or {}))
    for f in files:
        u.add(f)
    return u


def container_parts(records: pl.DataFrame) -> dict[int, list[str]]:
    """Log stream -> its containers, in the order their lines first come, for the streams whose lines
    come from two or more (the records' ``compose``: a file of several servers told apart by their
    prefix). A stream of one container, or none, is one part and not listed."""
    if records.height == 0 or not {"compose", "stream"} <= set(records.columns):
        return {}
    if records.get_column("compose").drop_nulls().n_unique() < 2:  # one column: cheap on a large log
        return {}
    cols = ["stream", "compose", *(["seq"] if "seq" in records.columns else [])]
    named = records.select(cols).filter(pl.col("compose").is_not_null())
    per = named.sort("stream", "seq") if "seq" in named.columns else named
    per = per.group_by("stream", maintain_order=True).agg(pl.col("compose").unique(maintain_order=True))
    return {int(s): [str(c) for c in cs] for s, cs in per.iter_rows() if len(cs) >= 2}


def _part_name(bundle, sid: int, container: str | None) -> str:
    name = bundle.stream_name(sid)
    return name if container is None else f"{name} [{container}]"


def units(paths: list[str], ws: Workspace, kinds: list[str] | None = None, stdin=None) -> list[Unit]:
    """Split the command-line inputs into units (see the module docstring)."""
    if len(paths) > 1:
        return [Unit(p, [p]) for p in paths]
    root = paths[0]
    if root != "-" and os.path.isdir(root):
        entries = sorted(os.listdir(root))
        # Folder links are not followed (as in a bundle walk: bundle.py).
        subdirs = [
            e
            for e in entries
            if not e.startswith(".")
            and os.path.isdir(os.path.join(root, e))
            and not os.path.islink(os.path.join(root, e))
        ]
        if subdirs:
            out = [Unit(os.path.join(Path(root).name, d), [os.path.join(root, d)]) for d in subdirs]
            files = [os.path.join(root, e) for e in entries if os.path.isfile(os.path.join(root, e))]
            if files:
                out.append(Unit(Path(root).name or root, files))
            return out
    if root == "-":
        return [Unit("<stdin>", ["-"])]  # read once: standard input cannot be split and read again
    return _by_server(paths, ws, kinds, stdin)


def _by_server(paths: list[str], ws: Workspace, kinds: list[str] | None, stdin) -> list[Unit]:
    first = analyze(paths, AnalyzeOptions(kinds=kinds, rules=False), workspace=ws, stdin=stdin)
    out = split_by_incident(paths, first)
    for u in out:
        u.originals = list(first.bundle.originals)
    return out


def split_by_server(paths: list[str], first: Analysis) -> list[Unit]:
    """The units of an analysis of ``paths`` made already (the fleet analyses the whole bundle
    first and splits only when it holds several servers): one unit when it holds one server."""

    bundle = first.bundle
    srv = servers(first.records)
    if srv.height <= 1:
        return [Unit(paths[0], list(paths))]
    streams = bundle.streams()
    parts = container_parts(first.records)
    out: list[Unit] = []
    started = set(srv.get_column("stream").to_list())
    for sid in srv.get_column("stream").unique(maintain_order=True).to_list():
        files = streams.get(sid, [])
        for c in parts.get(sid, [None]):  # a file of several containers: one unit each
            keep = {str(f.path): (c,) for f in files} if c is not None else {}
            out.append(_unit(_part_name(bundle, sid, c), files, keep))
    rest_logs = [f for sid, fs in streams.items() if sid not in started for f in fs if f.kind in LOG_KINDS]
    if rest_logs:
        out.append(_unit("(logs without a server start)", rest_logs))
    others = [f for fs in streams.values() for f in fs if f.kind not in LOG_KINDS]
    if others:
        out.append(_unit("(other sources)", others))
    return out


# Two logs whose lines come within this many seconds of each other meet in time (one incident).
MEET_S = 600.0


def split_by_incident(paths: list[str], first: Analysis) -> list[Unit]:
    """The incidents of an analysis of ``paths`` (one unit when it is one): its log streams grouped
    by server and time. Two streams are one incident when their lines meet in time (their spans
    overlap, or come within :data:`MEET_S`) and they are not two servers (each holds a server start
    of its own: servers.py; or they lie in two folders of a bundle that keeps its logs in folders of
    their own, as the joiner's ServerScope reads it); a stream without a time of its own is one on its own. A stream of several
    containers (:func:`container_parts`) is a part per container, grouped the same way. The files of
    other kinds (dmon, /metrics, records) join the incident they meet in time, else form one more
    unit (``(other sources)``)."""

    bundle = first.bundle
    streams = bundle.streams()
    logs = {sid: fs for sid, fs in streams.items() if any(f.kind in LOG_KINDS for f in fs)}
    rec = first.records
    split = container_parts(rec) if logs else {}
    # a part: (stream, container), container None for a stream read whole
    keys: list[tuple[int, str | None]] = [(sid, c) for sid in logs for c in split.get(sid, [None])]
    if len(keys) <= 1:
        return _one_log(paths, first, streams, logs)
    spans: dict[tuple[int, str | None], tuple[Any, Any]] = {}
    started: set[tuple[int, str | None]] = set()
    engine_of: dict[tuple[int, str | None], str] = {}  # the engine whose start a part shows (none: the default's)
    if rec.height and "stream" in rec.columns:
        part = pl.col("compose") if split else pl.lit(None, pl.String)
        part = pl.when(pl.col("stream").is_in(list(split))).then(part).otherwise(pl.lit(None, pl.String))
        timed = rec.filter(pl.col("time").is_not_null()).with_columns(_part=part)
        if split:  # a container's spans from its own lines (request lines name none: sources/vllm_log.py)
            timed = timed.filter(pl.col("_part").is_not_null() | ~pl.col("stream").is_in(list(split)))
        agg = timed.group_by("stream", "_part").agg(
            pl.col("time").min().alias("_lo"), pl.col("time").max().alias("_hi")
        )
        for sid, c, lo, hi in agg.select("stream", "_part", "_lo", "_hi").iter_rows():
            spans[(int(sid), c)] = (lo, hi)
        st = starts(rec).select("stream", "source", "line", "engine", "stands_in")
        if split:  # the container of each start's own line
            at = rec.select("source", pl.col("n").alias("line"), "compose").unique(["source", "line"], keep="first")
            st = st.join(at, on=["source", "line"], how="left")
        part_col = pl.col("compose") if split else pl.lit(None, pl.String)
        for sid, c, eng, cut in st.select("stream", part_col, "engine", "stands_in").iter_rows():
            key = (int(sid), c if int(sid) in split else None)
            engine_of.setdefault(key, eng)
            if not cut:  # a start that stands for one the log does not show (a cut file) starts no server
                started.add(key)
    order = sorted(keys, key=lambda k: (spans.get(k, (None,))[0] is None, spans.get(k, (None,))[0] or 0, k[0]))
    # A bundle that keeps its logs in folders of their own (a/vllm.log beside b/vllm.log) keeps a
    # server per folder (the joiner's ServerScope): logs of two folders are two servers even where
    # neither holds a server start, and one incident would pool their stats and sizes.
    home_of = {sid: "/".join(folders(next(f for f in fs if f.kind in LOG_KINDS).display)) for sid, fs in logs.items()}
    by_folder = len(set(home_of.values())) > 1
    groups: list[dict[str, Any]] = []
    for k in order:
        span = spans.get(k)
        home = None
        if span is not None:
            for g in groups:
                if g["lo"] is None or (k in started and g["server"]):
                    continue
                if by_folder and any(home_of[s] != home_of[k[0]] for s in g["sids"]):
                    continue
                # two engines' logs are two servers
                if any(engine_named(engine_of.get(o)) != engine_named(engine_of.get(k)) for o in g["keys"]):
                    continue
                if (
                    span[0].timestamp() <= g["hi"].timestamp() + MEET_S
                    and g["lo"].timestamp() <= span[1].timestamp() + MEET_S
                ):
                    home = g
                    break
        if home is None:
            groups.append(
                {
                    "keys": [k],
                    "sids": [k[0]],
                    "lo": span[0] if span else None,
                    "hi": span[1] if span else None,
                    "server": k in started,
                }
            )
        else:
            home["keys"].append(k)
            if k[0] not in home["sids"]:
                home["sids"].append(k[0])
            home["lo"], home["hi"] = min(home["lo"], span[0]), max(home["hi"], span[1])  # type: ignore[index]
            home["server"] = home["server"] or k in started
    if len(groups) <= 1:
        return _one_log(paths, first, streams, logs)
    out: list[Unit] = []
    for g in groups:
        name = " + ".join(_part_name(bundle, sid, c) for sid, c in g["keys"][:3]) + (
            f" (+{len(g['keys']) - 3} more)" if len(g["keys"]) > 3 else ""
        )
        keep: dict[str, tuple[str, ...]] = {}
        for sid in g["sids"]:
            mine = tuple(c for s, c in g["keys"] if s == sid and c is not None)
            if mine and len(mine) < len(split.get(sid, [])):  # some of its containers: their lines only
                keep.update({str(f.path): mine for f in streams[sid]})
        out.append(_unit(name, [f for sid in g["sids"] for f in streams[sid]], keep))
    others = [f for sid, fs in streams.items() if sid not in logs for f in fs]
    by_source = _source_spans(first)
    rest = []
    for f in others:
        fspan = by_source.get(f.display)
        home = None
        if fspan is not None:
            meets = [
                (u, g)
                for u, g in zip(out, groups, strict=False)
                if g["lo"] is not None
                and fspan[0].timestamp() <= g["hi"].timestamp() + MEET_S
                and g["lo"].timestamp() <= fspan[1].timestamp() + MEET_S
            ]
            # of the incidents it meets in time, the one whose logs lie nearest it in the bundle's
            # folders (a/metrics.prom goes with a/vllm.log, not with b/vllm.log that started first)
            near = [
                (
                    max(
                        shared_depth([folders(f.display), folders(lf.display)])
                        for sid in g["sids"]
                        for lf in streams[sid]
                    ),
                    u,
                )
                for u, g in meets
            ]
            best = max((n for n, _ in near), default=0)
            nearest = [u for n, u in near if n == best]
            # as near to two incidents or more (metrics/ beside a/ and b/): no one of them is its own, and
            # the first to start would take another server's counts; it is a unit of its own
            home = nearest[0] if len(nearest) == 1 else None
        if home is None:
            rest.append(f)
        else:
            home.add(f)
    if rest:
        out.append(_unit("(other sources)", rest))
    return out


def _one_log(paths: list[str], first: Analysis, streams: dict[int, list[InputFile]], logs: dict) -> list[Unit]:
    """The units of a bundle whose logs are one incident: one unit, but for the files of other kinds whose
    times meet none of its logs' (more than :data:`MEET_S` apart: another day's scrapes): those are another
    incident, ``(other sources)``, as beside several incidents. A file without a time stays with the logs."""
    others = [f for sid, fs in streams.items() if sid not in logs for f in fs]
    spans = _source_spans(first)
    lo_hi = [spans[f.display] for sid in logs for f in streams[sid] if f.display in spans]
    if not others or not lo_hi:
        return [Unit(paths[0], list(paths))]
    lo, hi = min(s[0] for s in lo_hi).timestamp(), max(s[1] for s in lo_hi).timestamp()
    apart = [
        f
        for f in others
        if f.display in spans
        and not (spans[f.display][0].timestamp() <= hi + MEET_S and lo <= spans[f.display][1].timestamp() + MEET_S)
    ]
    if not apart:
        return [Unit(paths[0], list(paths))]
    name = " + ".join(_part_name(first.bundle, sid, None) for sid in list(logs)[:3]) + (
        f" (+{len(logs) - 3} more)" if len(logs) > 3 else ""
    )
    near = [f for sid, fs in streams.items() for f in fs if f not in apart]
    return [_unit(name, near), _unit("(other sources)", apart)]


def _source_spans(a: Analysis) -> dict[str, tuple[Any, Any]]:
    """(first, last) time of each source file's rows in the analysis's frames and records (every time a file
    states: a sample's, a counter's ``_created``, the engine start it counts from; sources/meets.py
    file_spans)."""
    frames = [*a.frames.values(), a.records]
    parts = [
        df.select(pl.col("source").cast(pl.String), pl.col(c).dt.convert_time_zone("UTC").alias("time"))
        for df in frames
        if df is not None and df.height and "source" in df.columns
        for c, t in df.schema.items()
        if isinstance(t, pl.Datetime) and t.time_zone is not None
    ]
    if not parts:
        return {}
    allr = pl.concat(parts).filter(pl.col("time").is_not_null())
    agg = allr.group_by("source").agg(pl.col("time").min().alias("_lo"), pl.col("time").max().alias("_hi"))
    return {str(s): (lo, hi) for s, lo, hi in agg.iter_rows()}


def run_each(paths: list[str], options: AnalyzeOptions, ws: Workspace, stdin=None) -> list[tuple[str, Analysis]]:
    """Analyse every unit on its own: [(unit name, Analysis)]."""

    out = []
    for u in units(paths, ws, options.kinds, stdin):
        a = analyze(u.paths, u.options(options), workspace=ws, stdin=stdin)
        more = [p for p in u.originals if p not in a.bundle.originals]
        if more:  # the files of the whole input, not only the unit's: an output never written into any
            a = dataclasses.replace(a, bundle=dataclasses.replace(a.bundle, originals=[*a.bundle.originals, *more]))
        out.append((u.name, a))
    return out


def combined_rows(
    results: list[tuple[str, Analysis]], *, text_times: bool = True, columns: list[str] | None = None
) -> pl.DataFrame:
    """Every unit's event rows (render.event_rows), ``server`` first; times as text, or typed
    (``text_times=False``: parquet, as a single run writes them). ``columns``: the --columns choice,
    when it names :data:`SERVER`: the rows hold those columns in that order (the units' own event
    columns are chosen by :func:`event_columns`)."""

    frames = [
        event_rows(a, text_times=text_times).select(pl.lit(name, pl.String).alias(SERVER), pl.all())
        for name, a in results
    ]
    frames = [f for f in frames if f.height] or frames[:1]
    df = pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame(schema={SERVER: pl.String})
    if columns and SERVER in columns and frames:
        df = df.select(columns)
    return df


def write_each(
    results: list[tuple[str, Analysis]],
    fmt: OutputFormat,
    out: BinaryIO,
    *,
    csv_safe: bool = False,
    columns: list[str] | None = None,
    wide: bool = False,
) -> None:
    """The combined output of the units. ``columns``: the --columns choice (it may name
    :data:`SERVER`), for the events table too; the units' own views hold its event columns already
    (:func:`event_columns`)."""

    if fmt is OutputFormat.table:
        _write_table(results, out, table_columns(columns, wide) if columns else None)
        return
    df = combined_rows(results, text_times=fmt is not OutputFormat.parquet, columns=columns)
    if fmt is OutputFormat.ndjson:
        if df.height:
            df.write_ndjson(out)
    elif fmt is OutputFormat.json:
        top = {
            "preemptlog": __version__,
            "schema_version": SCHEMA_VERSION,
            "servers": [{"server": name, "summary": a.summary()} for name, a in results],
        }
        write_document(top, frame_rows(df), out)
    elif fmt is OutputFormat.csv:
        write_csv_frame(df, out, safe=csv_safe)
    else:
        df.write_parquet(out)


# The events table's columns without --columns (render.table's names; ``where`` is headed ``source:line``).
EACH_TABLE_COLUMNS = (SERVER, "time", "event", "kind", "n", "request", "verdict", "where")


def table_columns(columns: list[str], wide: bool) -> list[str]:
    """The events table's columns of a --columns choice: render.table's names and aliases
    (resolve_columns: an unknown one is a usage error), and :data:`SERVER` where it is named, else
    first (as the machine formats have it)."""
    if columns == [SERVER]:
        return [SERVER]
    names = resolve_columns([c for c in columns if c != SERVER], wide)
    if SERVER not in columns:
        return [SERVER, *names]
    at = len(resolve_columns(columns[: columns.index(SERVER)], wide)) if columns.index(SERVER) else 0
    return [*names[:at], SERVER, *names[at:]]


def _write_table(results: list[tuple[str, Analysis]], out: BinaryIO, columns: list[str] | None = None) -> None:
    from rich.table import Table

    names = columns or list(EACH_TABLE_COLUMNS)
    with binary_console(out) as console:
        per = Table(header_style="bold", expand=False)
        for name in ("server", "engine", "preemptions", "quality", "events", "warnings"):
            per.add_column(name, overflow="fold")
        events = Table(header_style="bold", expand=False)
        for name in names:
            events.add_column(
                "source:line" if name == "where" else name, no_wrap=name in ("time", "event"), overflow="fold"
            )
        for name, a in results:
            summary = a.summary()
            rec = summary.get("reconciliation") or {}
            count = "not visible" if summary.get("count_visible") is False else rec.get("total", a.events.height)
            per.add_row(
                text(name),
                text(summary.get("engine_kind") or "vllm"),
                text(count),
                text(rec.get("quality") or "-"),
                text(a.events.height),
                text(len(a.warnings)),
            )
            for r in display_rows(a).iter_rows(named=True):
                time = r["time"] or "?"
                if r["count"] > 1 and r["until"] and r["until"] != r["time"]:
                    time = f"{time} .. {r['until']}"
                if r["verdicts"] > 1:  # the events of a fold do not share one verdict
                    verdict = f"{r['verdicts']} verdicts"
                else:
                    verdict = (r["gate"] or "-") + (f"/{r['sub_kind']}" if r["sub_kind"] else "")
                cells = {
                    SERVER: name,
                    "time": time,
                    "event": r["event_id"],
                    "kind": r["kind"],
                    "n": r["count"],
                    "request": r["request_id"] or "-",
                    "verdict": verdict,
                    "confidence": r["confidence"] if r["confidence"] not in (None, "none") else "-",
                    "mode": r["mode"] or "-",
                    "where": f"{r['source']}:{r['line']}",
                }
                events.add_row(*(text(cells[c]) for c in names))
        console.print(per)
        if events.row_count:
            console.print(events)
