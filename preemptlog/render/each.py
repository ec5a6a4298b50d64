"""``preemptlog analyze --each``: every server (or every subfolder) analysed on its own.

A folder that mixes several servers is not one incident (servers.py). With
``--each`` the inputs are split into *units*, each analysed separately, and
one combined output names the unit of every row in a ``server`` column:

- several inputs on the command line: each input is a unit;
- one folder with subfolders: each subfolder is a unit (files directly in the
  folder form one more unit, named after the folder);
- otherwise (one folder of files, one file, one archive): each vLLM or SGLang log
  stream (a log and its rotated parts) holding a server start is a unit, the
  log streams without a start form one more, and the files of other kinds
  (dmon, /metrics, block-table records) one more: they cannot be told apart
  by server. A single server stays one unit.

Outputs: ``ndjson`` / ``csv`` / ``parquet`` rows are the events of every unit
with ``server`` first; ``json`` is ``{"servers": [{"server", "summary"}],
"events": [...]}``; the table lists one line per unit, then the events.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import polars as pl

if TYPE_CHECKING:
    from ..inputs.workspace import Workspace
    from ..model.result import Analysis, AnalyzeOptions
    from . import OutputFormat


@dataclass
class Unit:
    name: str
    paths: list[str] = field(default_factory=list)


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
    from ..analysis import AnalyzeOptions, analyze

    first = analyze(paths, AnalyzeOptions(kinds=kinds, rules=False), workspace=ws, stdin=stdin)
    return split_by_server(paths, first)


def split_by_server(paths: list[str], first: Analysis) -> list[Unit]:
    """The units of an analysis of ``paths`` made already (the fleet analyses the whole bundle
    first and splits only when it holds several servers): one unit when it holds one server."""
    from ..events.servers import servers
    from ..sources import LOG_KINDS

    bundle = first.bundle
    srv = servers(first.records)
    if srv.height <= 1:
        return [Unit(paths[0], list(paths))]
    streams = bundle.streams()
    out: list[Unit] = []
    started = set(srv.get_column("stream").to_list())
    for sid in srv.get_column("stream").unique(maintain_order=True).to_list():
        out.append(Unit(bundle.stream_name(sid), [str(f.path) for f in streams.get(sid, [])]))
    rest_logs = [str(f.path) for sid, fs in streams.items() if sid not in started for f in fs if f.kind in LOG_KINDS]
    if rest_logs:
        out.append(Unit("(logs without a server start)", rest_logs))
    others = [str(f.path) for fs in streams.values() for f in fs if f.kind not in LOG_KINDS]
    if others:
        out.append(Unit("(other sources)", others))
    return out


def run_each(paths: list[str], options: AnalyzeOptions, ws: Workspace, stdin=None) -> list[tuple[str, Analysis]]:
    """Analyse every unit on its own: [(unit name, Analysis)]."""
    from ..analysis import analyze

    out = []
    for u in units(paths, ws, options.kinds, stdin):
        out.append((u.name, analyze(u.paths, options, workspace=ws, stdin=stdin)))
    return out


def combined_rows(results: list[tuple[str, Analysis]]) -> pl.DataFrame:
    """Every unit's event rows (render.event_rows), ``server`` first."""
    from . import event_rows

    frames = [event_rows(a).select(pl.lit(name).alias("server"), pl.all()) for name, a in results]
    frames = [f for f in frames if f.height] or frames[:1]
    return pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame(schema={"server": pl.String})


def write_each(
    results: list[tuple[str, Analysis]], fmt: OutputFormat, out: BinaryIO, *, csv_safe: bool = False
) -> None:

    from . import OutputFormat

    if fmt is OutputFormat.table:
        _write_table(results, out)
        return
    df = combined_rows(results)
    if fmt is OutputFormat.ndjson:
        if df.height:
            df.write_ndjson(out)
    elif fmt is OutputFormat.json:
        from ..model import VERSION as __version__
        from . import SCHEMA_VERSION
        from .jsonfmt import frame_rows, write_document

        top = {
            "preemptlog": __version__,
            "schema_version": SCHEMA_VERSION,
            "servers": [{"server": name, "summary": a.summary()} for name, a in results],
        }
        write_document(top, frame_rows(df), out)
    elif fmt is OutputFormat.csv:
        from .csvfmt import write_csv_frame

        write_csv_frame(df, out, safe=csv_safe)
    else:
        df.write_parquet(out)


def _write_table(results: list[tuple[str, Analysis]], out: BinaryIO) -> None:
    from rich.table import Table

    from ..outputs.console import binary_console
    from ..outputs.safe import text
    from .table import display_rows

    with binary_console(out) as console:
        per = Table(header_style="bold", expand=False)
        for name in ("server", "engine", "preemptions", "quality", "events", "warnings"):
            per.add_column(name, overflow="fold")
        events = Table(header_style="bold", expand=False)
        for name in ("server", "time", "event", "kind", "n", "request", "verdict", "source:line"):
            events.add_column(name, no_wrap=name in ("time", "event"), overflow="fold")
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
                events.add_row(
                    text(name),
                    text(time),
                    text(r["event_id"]),
                    text(r["kind"]),
                    text(r["count"]),
                    text(r["request_id"] or "-"),
                    text(verdict),
                    text(f"{r['source']}:{r['line']}"),
                )
        console.print(per)
        if events.row_count:
            console.print(events)
