"""One bundle -> its rows of every fleet table: the per-bundle map of a fleet run.

:func:`analyse_bundle` is what a worker runs (the process pool's and Spark's alike): it never
raises for a bad bundle. A bundle that cannot be read, or one of its servers, becomes an
``errors`` row with its exit code (errors.ExitCode) and one-line message; a damaged bundle whose
analysis ran (exit 5, partial) keeps its rows and gets an ``errors`` row too.

A bundle holding several servers is split the way ``analyze --each`` splits one (each.py): by
subfolder, else by server start, each analysed on its own. The whole bundle is analysed first,
and only split when it holds more than one server (one analysis for the common case).
"""

from __future__ import annotations

import json
import os
import resource
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from ..analysis import analyze
from ..errors import ExitCode, PreemptlogError
from ..inputs.archive import content_kind
from ..inputs.workspace import Workspace
from ..model import VERSION as __version__
from ..render.each import split_by_server, units
from ..sources import vllm_log
from . import rows, schema
from .inputs import BundleInfo, bundle_name, digest, server_name

if TYPE_CHECKING:
    from ..model.result import Analysis, AnalyzeOptions


@dataclass(frozen=True)
class BundleResult:
    info: BundleInfo
    path: str
    tables: dict[str, pl.DataFrame] = field(default_factory=dict)  # table -> rows with ``day``
    outcome: str = "ok"  # ok | partial | error | skipped
    exit_code: int = 0
    message: str | None = None

    @property
    def bundle_id(self) -> str:
        return self.info.bundle_id


def _one_line(exc: BaseException) -> tuple[int, str]:
    if isinstance(exc, PreemptlogError):
        return int(exc.exit_code), exc.one_line()
    detail = str(exc).splitlines()[0] if str(exc) else ""
    return int(ExitCode.INTERNAL), f"internal error: {type(exc).__name__}: {detail}"


def _archive_root(path: str, first: Analysis) -> str | None:
    """The folder a bundle archive was unpacked into by the analysis (in its workspace), or None when
    the bundle is no archive. An archive is known by its bytes (inputs/archive.py ``content_kind``),
    as the analysis knows it, whatever its name (``srv-07.log``, ``srv-07``). An archive that holds one
    folder (``tar czf srv.tar.gz srv/``) is that folder: its root is the folder inside."""

    if os.path.isdir(path) or content_kind(Path(path)) is None:
        return None
    roots: set[str] = set()
    for f in first.bundle.of_kind(vllm_log.KIND):
        _, sep, member = f.display.partition("!")
        full = str(f.path)
        if not sep or "!" in member or not full.endswith(os.sep + member.replace("/", os.sep)):
            continue
        roots.add(full[: -len(member) - 1])
    if len(roots) != 1:
        return None
    root = roots.pop()
    inside = [e for e in os.listdir(root) if not e.startswith(".") and e != "__MACOSX"]  # macOS zip's resource forks
    if len(inside) == 1 and os.path.isdir(os.path.join(root, inside[0])):
        root = os.path.join(root, inside[0])
    return root


def _log_subfolders(root: str, first: Analysis) -> set[str]:
    """The bundle folder's subfolders that hold a vLLM log (by the analysis's own file kinds)."""

    if not os.path.isdir(root):
        return set()
    root = os.path.realpath(root)
    out: set[str] = set()
    for f in first.bundle.of_kind(vllm_log.KIND):
        try:
            rel = os.path.relpath(os.path.realpath(f.path), root)
        except ValueError:
            continue
        parts = rel.split(os.sep)
        if len(parts) > 1 and parts[0] not in (os.curdir, os.pardir):
            out.add(parts[0])
    return out


def _servers(path: str, options: AnalyzeOptions, ws: Any) -> list[tuple[str, Analysis | BaseException]]:
    """(unit name, Analysis or the error it raised) for every server of the bundle.

    The whole bundle is analysed first. It is split as ``analyze --each`` splits one: by
    subfolder when two or more subfolders hold a vLLM log (``node1/``, ``node2/``; a ``logs/``
    beside a ``metrics/`` folder is one server), else by server start (each.split_by_server);
    one server keeps the first analysis."""

    first = analyze([path], options, workspace=ws)
    root = _archive_root(path, first) or path  # an archive is split like the folder it holds
    if len(_log_subfolders(root, first)) >= 2:
        found = units([root], ws, options.kinds)
    else:
        found = split_by_server([path], first)
    if len(found) <= 1:
        return [(path, first)]
    out: list[tuple[str, Analysis | BaseException]] = []
    for u in found:
        try:
            out.append((u.name, analyze(u.paths, u.options(options), workspace=ws)))
        except PreemptlogError as exc:
            out.append((u.name, exc))
    return out


def _error_row(info: BundleInfo, path: str, server: str | None, code: int, message: str) -> dict[str, Any]:
    return {
        "bundle_id": info.bundle_id,
        "path": path,
        "server": server,
        "exit_code": code,
        "error": ExitCode(code).name if code in ExitCode._value2member_map_ else str(code),
        "message": " ".join(message.split()),
        schema.PARTITION: info.day,
    }


def _bundle_row(
    info: BundleInfo,
    tables: dict[str, pl.DataFrame],
    analyses: list[Analysis],
    servers: int,
    outcome: str,
    code: int,
    options: AnalyzeOptions,
    started: float,
) -> dict[str, Any]:
    ev = tables.get("events")
    inc = tables.get("incidents")
    times = ev.get_column("time").drop_nulls() if ev is not None and ev.height else None
    log_first = inc.get_column("log_first").drop_nulls() if inc is not None and inc.height else None
    log_last = inc.get_column("log_last").drop_nulls() if inc is not None and inc.height else None
    assumptions = sorted({f"{x.topic}={x.value} ({x.source})" for a in analyses for x in a.assumptions})
    first = times.min() if times is not None and times.len() else None
    lf = log_first.min() if log_first is not None and log_first.len() else None
    return {
        "bundle_id": info.bundle_id,
        "path": info.path,
        "name": info.name,
        "bytes": info.bytes,
        "files": info.files,
        "servers": servers,
        "outcome": outcome,
        "exit_code": code,
        "events": ev.height if ev is not None else 0,
        "first_event": first,
        "last_event": times.max() if times is not None and times.len() else None,
        "log_first": lf,
        "log_last": log_last.max() if log_last is not None and log_last.len() else None,
        "timezone": analyses[0].tz if analyses else options.tz,
        "assumptions": "; ".join(assumptions) or None,
        "options": json.dumps({"tz": options.tz, "year": options.year}, sort_keys=True),
        "preemptlog_version": __version__,
        "schema_version": schema.SCHEMA_VERSION,
        "analysed_at": datetime.now(UTC),
        "analysis_s": round(time.monotonic() - started, 3),
        "worker_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        schema.PARTITION: (first or lf).date() if (first or lf) is not None else info.day,  # type: ignore[union-attr]
    }


def _frame(table: str, rows_: list[dict[str, Any]]) -> pl.DataFrame:
    if not rows_:
        return schema.empty(table)
    return schema.conform(table, pl.DataFrame(rows_, schema={**schema.polars_schema(table), schema.PARTITION: pl.Date}))


def analyse_bundle(path: str, options: AnalyzeOptions, skip: frozenset[str] = frozenset()) -> BundleResult:
    """Analyse one bundle into its rows of every table (see the module docstring). A bundle whose
    digest is in ``skip`` is not analysed (outcome ``skipped``)."""

    started = time.monotonic()
    try:
        info = digest(path)
    except Exception as exc:
        code, msg = _one_line(exc)
        return _failed(unreadable(path), code, msg)
    if info.bundle_id in skip:
        return BundleResult(info, path, outcome="skipped")
    errors: list[dict[str, Any]] = []
    parts: dict[str, list[pl.DataFrame]] = {t: [] for t in ("events", "incidents", "findings")}
    analyses: list[Analysis] = []
    found: list[tuple[str, Analysis | BaseException]] = []
    try:
        with Workspace() as ws:
            found = _servers(path, options, ws)
            for unit, a in found:
                server = server_name(info.name, unit, len(found))
                if isinstance(a, BaseException):
                    code, msg = _one_line(a)
                    errors.append(_error_row(info, path, server, code, msg))
                    continue
                analyses.append(a)
                for table, df in rows.unit_tables(info.bundle_id, server, a, info.day).items():
                    parts[table].append(df)
                if a.partial:
                    w = a.warnings[0] if a.warnings else "some input was damaged or skipped"
                    more = f" (and {len(a.warnings) - 1} more warning(s))" if len(a.warnings) > 1 else ""
                    errors.append(_error_row(info, path, server, int(ExitCode.PARTIAL), w + more))
    except Exception as exc:  # the whole bundle: one errors row, the run goes on
        code, msg = _one_line(exc)
        errors = [_error_row(info, path, None, code, msg)]
        analyses, parts = [], {t: [] for t in parts}
    tables = {t: pl.concat(p, how="vertical") if p else schema.empty(t) for t, p in parts.items()}
    tables["errors"] = _frame("errors", errors)
    if not analyses:
        outcome, code = "error", max((e["exit_code"] for e in errors), default=int(ExitCode.INTERNAL))
    elif errors:
        outcome, code = "partial", max(e["exit_code"] for e in errors)
    else:
        outcome, code = "ok", 0
    row = _bundle_row(info, tables, analyses, len(found), outcome, code, options, started)
    tables["bundles"] = _frame("bundles", [row])
    message = errors[0]["message"] if errors else None
    return BundleResult(info, path, tables, outcome, code, message)


def unreadable(path: str) -> BundleInfo:
    """The info of a bundle that cannot be read for its digest: named by its path instead."""
    import hashlib

    pid = "p" + hashlib.sha256(os.path.abspath(path).encode("utf-8", "surrogateescape")).hexdigest()[:31]
    return BundleInfo(path, pid, bundle_name(path), 0, 0, datetime.now(UTC).date())


def _failed(info: BundleInfo, code: int, message: str) -> BundleResult:
    err = _frame("errors", [_error_row(info, info.path, None, code, message)])
    row = {
        "bundle_id": info.bundle_id,
        "path": info.path,
        "name": info.name,
        "bytes": info.bytes,
        "files": info.files,
        "servers": 0,
        "outcome": "error",
        "exit_code": code,
        "events": 0,
        "preemptlog_version": __version__,
        "schema_version": schema.SCHEMA_VERSION,
        "analysed_at": datetime.now(UTC),
        schema.PARTITION: info.day,
    }
    return BundleResult(info, info.path, {"errors": err, "bundles": _frame("bundles", [row])}, "error", code, message)


def crashed(path: str, code: int, message: str) -> BundleResult:
    """The rows of a bundle whose analysis process died (a crash, out of memory): an errors row."""
    try:
        info = digest(path)
    except Exception:
        info = unreadable(path)
    return _failed(info, code, message)
