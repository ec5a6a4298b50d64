"""An incident bundle: the files given on the command line, sniffed and ordered.

Inputs are files, folders (walked recursively), ``-`` for standard input
(spooled to a private temporary file) and archives (tar, plain or gzip/bz2/xz/zstd
compressed, and zip; unpacked safely by archive.py), known by their content
wherever they are found: on the command line, in a folder, inside another archive
(walk.expand_archives; a gzip'd log is a log). Every file is recognised by its content, not
its name (a sample of every line's start, so a 10 MB first line hides
nothing; the tail too when the head is not recognised); ``--kind FILE=KIND``
overrides.

Hostile inputs (see docs/robustness.md): inside folders, symbolic links are
followed only when they stay inside the folder (others are reported and
skipped), folder links are never descended (no loops); FIFOs, devices and
sockets are skipped without being opened (never blocks); the same file
reached twice (a link, or a copy of its content, decompressed and decoded, that
carries the same time: sources/copies.py) is read once, its damage said once; an input that cannot be read is a warning (the
run ends PARTIAL) unless nothing can be read; UTF-16/32 text (with a BOM, or
plainly UTF-16) is read through a UTF-8 copy, UTF-8 text behind a byte-order
mark through a copy without it; other encodings are read as UTF-8 with bad
bytes replaced; a plain file whose last line has no line end
(truncated, or still being written) is read and reported (PARTIAL).

Walking: walk.py; sniffing and encoding: sniffing.py; rotation: rotation.py; damaged
.gz/.zst: salvage.py. This module puts them together (:func:`collect`).

Rotated sets (``vllm.log``, ``vllm.log.1``, ``vllm.log.2.gz``, or
``vllm.log-20261129.gz``) of the same kind in the same folder form one
*stream*, read oldest first: date suffixes ascending, then numeric suffixes
descending, then the live file.

Nothing is ever written into the bundle: files are opened read-only and
temporary files live in a private folder that is removed on every exit path.

A file that holds several servers, each line behind its container's prefix (docker compose's
``svc  | ``, kubectl logs --prefix's ``[pod/NAME/CONTAINER] ``: the ``compose`` column of the log
records, sources/vllm_log.py ``COMPOSE_RE``), is read for some of its containers only when the
analysis names them (``AnalyzeOptions.containers``: an ``--each`` unit per server, render/each.py):
:func:`keep_containers` reads it through a private copy in which every other line is empty, so
each line keeps its number and its file's name (every ``file:line`` still points into the input).
"""

from __future__ import annotations

import stat
from pathlib import Path

import polars as pl

from .. import sources
from ..errors import InputError, UsageError
from ..inputs.files import Bundle, Found, InputFile

# Re-exported: the names other modules, the tests and bench/fuzz import from ``bundle``.
from ..inputs.rotation import _assign_streams, rotation_key
from ..inputs.textio import ANSI_RE, scan_lines
from ..inputs.walk import MAX_FILES, _Entry, _spool_stdin, _stat_problem, _walk, expand_archives
from ..inputs.workspace import Workspace
from ..sources.copies import read_copies_once
from ..sources.sniffing import _capped_lines, _describe, _is_text, _utf16_without_bom
from ..sources.vllm_log import COMPOSE_RE

__all__ = [
    "MAX_FILES",
    "InputFile",
    "Workspace",
    "_capped_lines",
    "_is_text",
    "_utf16_without_bom",
    "collect",
    "keep_containers",
    "line_container",
    "parse_kind_overrides",
    "rotation_key",
]


def parse_kind_overrides(items: list[str] | None) -> dict[str, str]:
    """``FILE=KIND`` pairs (FILE matches a path as given, its display name or its basename)."""
    out: dict[str, str] = {}
    known = set(sources.kinds()) | {"ignore"}
    for item in items or []:
        if "=" not in item:
            raise UsageError(f"--kind expects FILE=KIND, got {item!r}")
        name, kind = item.rsplit("=", 1)
        if kind not in known:
            raise UsageError(f"--kind {item!r}: unknown kind {kind!r}", hint="known: " + ", ".join(sorted(known)))
        out[name] = kind
    return out


def _check_count(entries: list[_Entry]) -> None:
    if len(entries) > MAX_FILES:
        raise InputError(
            f"too many files ({len(entries)}); the limit is {MAX_FILES}", hint="analyse the bundle in parts"
        )


def collect(
    paths: list[str],
    workspace: Workspace,
    kind_overrides: dict[str, str] | None = None,
    stdin=None,
    found: dict[str, Found] | None = None,
) -> Bundle:
    """Resolve command-line inputs into a sniffed, ordered Bundle.

    ``found``: a path given -> how an analysis of more found that file (an incident of a bundle of
    several analysed on its own: its files given by the paths read, render/each.py): it is read as
    found there, shown by the same name (``b.zip!vllm.log``, not its unpacked copy's path).

    An input that cannot be read (missing, permission denied, a symlink loop)
    is a warning when other inputs can be read (the run ends PARTIAL), an
    InputError when none can. The same file reached twice (given twice, through
    a symlink or a hard link), or a copy of its content (decompressed, decoded) that
    would carry the same time (sources/copies.py), is read once.
    """
    kind_overrides = kind_overrides or {}
    found = found or {}
    entries: list[_Entry] = []
    warnings: list[str] = []
    problems: list[str] = []
    originals: list[Path] = []
    if not paths:
        raise UsageError("no input given", hint="pass a log file, a bundle folder or archive, or - for standard input")
    stdin_used = False
    for p in paths:
        if p == "-":
            if stdin_used:
                raise UsageError("standard input (-) given twice")
            stdin_used = True
            entries.append(_Entry(_spool_stdin(workspace, stdin), "<stdin>", True, original=False))
            continue
        path = Path(p)
        try:
            st = path.stat()
        except OSError as exc:
            problems.append(_stat_problem(p, exc))
            continue
        known = found.get(p)
        if stat.S_ISDIR(st.st_mode):
            entries.extend(_walk(path, warnings))
        elif known is not None:  # as the analysis of more found it: its name, the user's files it is of
            entries.append(
                _Entry(
                    path,
                    known.display,
                    known.is_stdin,
                    original=False,
                    in_bundle=known.in_bundle,
                    within=known.originals,
                )
            )
            originals.extend(q for q in known.originals if q not in originals)
        else:
            entries.append(_Entry(path, p))
    if problems:
        if not entries:
            more = f" (and {len(problems) - 1} more input(s) that cannot be read)" if len(problems) > 1 else ""
            raise InputError(problems[0] + more)
        warnings.extend(f"{msg}: skipped" for msg in problems)
    _check_count(entries)  # before unpacking archives: no work for a bundle refused anyway
    entries = expand_archives(entries, workspace, warnings, originals)
    _check_count(entries)

    # Files reached through a symbolic link are described last, so that a file
    # reached twice keeps its own name rather than the link's.
    described: list[tuple[int, InputFile]] = []
    seen: dict[tuple[int, int], InputFile] = {}
    order = sorted(range(len(entries)), key=lambda i: (entries[i].path.is_symlink(), i))
    for i in order:
        e = entries[i]
        f = _describe(-1, e, kind_overrides, workspace, seen)
        if f is None:
            continue
        described.append((i, f))
        known = found.get(str(e.path)) if not e.original else None
        if known is not None:  # what the analysis of more said of it, and its other names there
            f.warnings[:0] = [w for w in known.warnings if w not in f.warnings]
            f.aliases[:0] = [x for x in known.aliases if x not in f.aliases and x != f.display]
        f.in_bundle = e.in_bundle
        f.read_out_of = (*e.within, e.path) if e.original else e.within
        if e.original and f.kind != "unreadable":
            originals.append(e.path)
    files = read_copies_once([(f, entries[i].path) for i, f in sorted(described, key=lambda t: t[0])])
    # The damage sniffing found, of the files read: a copy read once holds the same content, and its
    # damage is said once, of the file read (which names the copy: "also found as").
    read = {id(f) for f in files}
    warnings.extend(w for _, f in described if id(f) in read for w in f.damage)
    for file_id, f in enumerate(files):
        f.file_id = file_id
    _assign_streams(files)
    return Bundle(files=files, workdir=workspace, warnings=warnings, originals=originals)


def line_container(line: pl.Expr) -> pl.Expr:
    """The container a physical line is of: its own prefix (``COMPOSE_RE``, ANSI colours removed: docker
    compose colours it on a terminal), else the container of the line before it (a line a terminal wrapped,
    an unprefixed continuation); null before the first prefixed line."""
    own = line.str.replace_all(ANSI_RE, "").str.extract(COMPOSE_RE, 1)
    return own.forward_fill()


def keep_containers(bundle: Bundle, ws: Workspace, containers: dict[str, tuple[str, ...]]) -> None:
    """Read each file ``containers`` names (by its path as given, or its display name) for the lines of
    those containers only: the file is read through a plain copy in the workspace whose other lines are
    empty (:func:`line_container`), so the records keep the file's name and line numbers. Other files are
    read whole. A file that cannot be read is left as it is (its reading reports it)."""
    if not containers:
        return
    for f in bundle.files:
        keep = containers.get(str(f.path), containers.get(f.display))
        if keep is None or f.stream < 0:
            continue
        dest = ws.new_file(f"{Path(f.display).name}.containers")
        try:
            lf = scan_lines(f.path)
            lf = lf.select(
                pl.when(line_container(pl.col("line")).is_in(list(keep)).fill_null(False))
                .then(pl.col("line"))
                .otherwise(pl.lit(""))
                .alias("line")
            )
            lf.sink_csv(dest, include_header=False, quote_style="never", separator="\x1f")
        except (OSError, pl.exceptions.PolarsError):
            continue
        f.path = dest
        f.compression = None
        f.size = dest.stat().st_size
