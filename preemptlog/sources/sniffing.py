"""Sniffing and encoding: a sample of every line's start (and the tail), NUL holes, UTF-16/32 and
other encodings, a cut last line; what kind a file is (moved from bundle.py)."""

from __future__ import annotations

import os
import re
import stat
import zlib
from pathlib import Path

from ..inputs.files import UNRECOGNISED, InputFile
from ..inputs.salvage import _compression_damage
from ..inputs.textio import ANSI_RE, compression_of, read_head
from ..inputs.walk import _Entry, _stat_reason
from ..inputs.workspace import Workspace
from .registry import kinds, sniff


def _is_text(head: bytes) -> bool:
    """Text, judged on what remains once NUL bytes are removed (a hole of NULs, as logrotate
    copytruncate leaves, does not make a log binary; sniffing.NulStrip counts and reports them)."""
    sample = head[:8192].replace(b"\x00", b"")
    if not sample:
        return True
    control = sum(1 for b in sample if b < 9 or 13 < b < 27 or 27 < b < 32)
    return control <= len(sample) // 20 + 1


# Sniffing reads a sample of the file: every line's first LINE_CAP bytes, up to
# SAMPLE_BYTES in all, scanning at most SCAN_BYTES (so a 10 MB first line does
# not hide the lines after it). When the head is not recognised, the tail of a
# plain file is sniffed too.
SAMPLE_BYTES = 65536


LINE_CAP = 4096


SCAN_BYTES = 16 * 1024**2


BOMS = (
    (b"\xff\xfe\x00\x00", "utf-32-le"),
    (b"\x00\x00\xfe\xff", "utf-32-be"),
    (b"\xff\xfe", "utf-16-le"),
    (b"\xfe\xff", "utf-16-be"),
)


def _capped_lines(chunks, budget: int = SAMPLE_BYTES, line_cap: int = LINE_CAP, scan: int = SCAN_BYTES) -> bytes:
    out = bytearray()
    kept = 0  # bytes kept of the current line
    scanned = 0
    for chunk in chunks:
        if scanned == 0 and not _is_text(chunk[:8192]):
            return bytes(chunk[:budget])  # binary: no need to scan on
        scanned += len(chunk)
        pos = 0
        n = len(chunk)
        while pos < n:
            nl = chunk.find(b"\n", pos)
            end = n if nl < 0 else nl
            room = line_cap - kept
            if room > 0:
                piece = chunk[pos : min(end, pos + room)]
                out += piece
                kept += len(piece)
            if nl < 0:
                break
            out += b"\n"
            kept = 0
            pos = nl + 1
            if len(out) >= budget:
                return bytes(out[:budget])
        if scanned >= scan:
            break
    return bytes(out[:budget])


class NulStrip:
    """Wraps a chunk iterator: yields the chunks without NUL bytes and counts the NULs removed."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, chunks):
        for chunk in chunks:
            n = chunk.count(b"\x00")
            if n:
                self.count += n
                chunk = chunk.replace(b"\x00", b"")
            yield chunk


def _count_nuls(fh) -> int:
    """NUL bytes in a whole plain file (only called when the sniffed sample held some)."""
    fh.seek(0)
    total = 0
    while True:
        chunk = fh.read(1 << 20)
        if not chunk:
            return total
        total += chunk.count(b"\x00")


def _plain_chunks(fh, first: bytes):
    yield first
    while True:
        chunk = fh.read(1 << 20)
        if not chunk:
            return
        yield chunk


def _gzip_chunks(fh, first: bytes):
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    data = first
    while data:
        try:
            out = d.decompress(data)
        except zlib.error:
            return
        if out:
            yield out
        if d.eof:
            rest = d.unused_data
            if not rest.startswith(b"\x1f\x8b"):
                return
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            data = rest
            continue
        data = fh.read(1 << 16)


def _zstd_head(path: Path, nuls: NulStrip | None = None) -> bytes:
    try:
        import zstandard
    except ImportError:
        return read_head(path)
    try:
        with open(path, "rb") as raw, zstandard.ZstdDecompressor().stream_reader(raw) as r:

            def chunks():
                while True:
                    try:
                        c = r.read(1 << 16)
                    except zstandard.ZstdError:
                        return
                    if not c:
                        return
                    yield c

            return _capped_lines(nuls(chunks()) if nuls is not None else chunks())
    except (OSError, zstandard.ZstdError):
        return b""


def _utf16_without_bom(sample: bytes) -> str | None:
    s = sample[:4096]
    if len(s) < 64:
        return None
    even, odd = s[0::2], s[1::2]
    if odd.count(0) > 0.9 * len(odd) and even.count(0) < 0.1 * len(even):
        return "utf-16-le"
    if even.count(0) > 0.9 * len(even) and odd.count(0) < 0.1 * len(odd):
        return "utf-16-be"
    return None


def _mostly_ascii(sample: bytes, encoding: str) -> bool:
    """A BOM is only believed when the text behind it decodes to mostly printable ASCII (logs do);
    junk that happens to start with FF FE stays UTF-8 (lossy)."""
    unit = 4 if "32" in encoding else 2
    text = sample[: len(sample) - len(sample) % unit].decode(encoding, "replace")
    if not text:
        return True
    ok = sum(1 for c in text if " " <= c <= "~" or c in "\t\r\n")
    return ok >= 0.8 * len(text)


UTF8_BOM = b"\xef\xbb\xbf"


def _without_bom(path: Path, comp: str | None, workspace: Workspace, display: str) -> Path:
    """A copy of a UTF-8 text that starts with a byte-order mark (a Windows editor's, PowerShell's
    ``Out-File``), without it and decompressed: every reader sees the text from its first byte (a dmon
    header row, a JSON answer, a record behind the mark is read as it is without it). A compressed
    stream that breaks off is copied as far as it decompresses (its damage is judged on the input)."""
    dest = workspace.new_file(Path(display).name + ".nobom")
    with open(path, "rb") as src, open(dest, "wb") as out:
        if comp == "gzip":
            chunks = _gzip_chunks(src, src.read(1 << 16))
        elif comp is None:
            chunks = _plain_chunks(src, src.read(1 << 16))
        else:
            import zstandard

            reader = zstandard.ZstdDecompressor().stream_reader(src, read_across_frames=True)
            chunks = iter(lambda: reader.read(1 << 20), b"")
        skip = len(UTF8_BOM)
        for chunk in chunks:
            if skip:
                chunk = chunk[skip:]
                skip = 0
            out.write(chunk)
    return dest


def _transcode(path: Path, encoding: str, workspace: Workspace, display: str) -> Path:
    import codecs

    dest = workspace.new_file(Path(display).name + ".utf8")
    dec = codecs.getincrementaldecoder(encoding)("replace")
    with open(path, "rb") as src, open(dest, "wb") as out:
        if encoding in ("utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"):
            head = src.read(4)
            for bom, enc in BOMS:
                if enc == encoding and head.startswith(bom):
                    head = head[len(bom) :]
                    break
            out.write(dec.decode(head).encode("utf-8"))
        while True:
            chunk = src.read(1 << 20)
            if not chunk:
                break
            out.write(dec.decode(chunk).encode("utf-8"))
        out.write(dec.decode(b"", final=True).encode("utf-8"))
    return dest


CUT_TAIL_BYTES = 1 << 20  # the last line is judged whole when it fits in this many bytes


def _json_value(line: bytes) -> bool:
    import json

    if not line.startswith((b"{", b"[")):
        return False
    try:
        json.loads(line)
    except ValueError:
        return False
    return True


def _last_line_cut(fh, size: int) -> bool:
    """True if a plain file's last line has no line end and is not a whole line of the file's own kind.

    A text log writes a line end after every line, so a last line without one is cut, whatever it
    ends with (``[loggers.py:335]``, Ray's ``[repeated 2x across cluster]``). Only a file of JSON
    values (JSON lines, or one JSON document) may end without one: its last line is whole when it
    parses as JSON and the line before it, if any, is JSON too.
    """
    if size == 0:
        return False
    fh.seek(max(0, size - CUT_TAIL_BYTES))
    tail = fh.read().replace(b"\x00", b"")
    if tail.endswith((b"\n", b"\r")):
        return False
    lines = [ln.strip() for ln in tail.replace(b"\r", b"\n").split(b"\n")]
    last = lines[-1]
    if len(lines) == 1 and size > CUT_TAIL_BYTES:  # a last line longer than the tail read
        return not (last.endswith((b"}", b"]")) and tail.lstrip()[:1] in (b"{", b"["))
    if not _json_value(last):
        return True
    idx = next((i for i in range(len(lines) - 2, -1, -1) if lines[i]), None)
    if idx is None:  # the only line: one JSON document
        return False
    if idx == 0 and size > len(tail):  # the line before starts before the tail read
        return not lines[0].endswith((b"}", b"]"))
    return not _json_value(lines[idx])


# Documents in a bundle (README, NOTES, SOURCES, Markdown, prose): read by people, not logs.
DOC_SUFFIXES = (".md", ".markdown", ".mdown", ".rst", ".adoc", ".asciidoc", ".org", ".html", ".htm", ".pdf", ".docx")
DOC_NAMES = re.compile(
    r"(?i)^(?:readme|notes?|sources?|changelog|changes|license|licence|copying|todo|authors|contributing|summary|"
    r"postmortem|post-mortem|incident|report|timeline)(?:[._-][^/]*)?$"
)
# A line a log, a dump or a table can hold: a timestamp, a level, a bracketed or JSON opening, a
# metric sample, a dmon row, a key=value run.
_LOG_LIKE = re.compile(
    r"^\s*(?:\d{4}-\d\d-\d\d|\d\d-\d\d \d\d:|[A-Z][a-z]{2} +\d{1,2} \d\d:|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\b|"
    r"\[|\{|\(|#|[\w:]+(?:\{[^}]*\})? -?[\d.eE+]+(?: \d+)?$|\d+(?:\s+[-\d.]+){2,})"
)
_WORDS = re.compile(r"[A-Za-z][A-Za-z'’-]+")
_LOG_HEADER = re.compile(r"\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d\b")
_COMPOSE_PREFIX = re.compile(r"^[\w.-]+\s*\| ")
_LOG_SUFFIX = re.compile(r"(?i)\.log(?:[.-][^/]*)?$")


def _base_name(display: str) -> str:
    name = display.replace("\\", "/").rsplit("/", 1)[-1].rsplit("!", 1)[-1]
    for comp in (".gz", ".zst", ".bz2", ".xz"):
        name = name.removesuffix(comp)
    return name


def document_name(display: str) -> bool:
    """A document by its name (README, NOTES, SOURCES, *.md, ...)."""
    name = _base_name(display)
    return name.lower().endswith(DOC_SUFFIXES) or bool(DOC_NAMES.match(name))


# ``nvidia-smi --query-gpu=timestamp,index,memory.used,... --format=csv [-l 1]``: its header names the
# queried fields (``memory.used [MiB]``, ``utilization.gpu [%]``).
_GPU_QUERY_RE = re.compile(
    r"^\s*(?:timestamp|index|name|pci\.bus_id|uuid)\s*,.*\b(?:memory\.used|memory\.total|utilization\.gpu|"
    r"utilization\.memory|power\.draw)\b",
    re.IGNORECASE,
)


def gpu_query_output(head: str) -> str | None:
    """``nvidia-smi --query-gpu`` when the first line of ``head`` is that tool's CSV header, else None."""
    first = next((ln for ln in head.splitlines() if ln.strip()), "")
    return "nvidia-smi --query-gpu" if _GPU_QUERY_RE.match(first) else None


# ``nvidia-smi dmon --format csv,noheader`` (or ``noheader`` alone): dmon's rows without the name and
# units rows that say which column is which (the columns follow -s and the driver, so they cannot be
# guessed). A row: [date] [time] GPU index, then two or more values (a number, ``-`` or N/A), comma- or
# space-separated.
_DMON_ROW_RE = re.compile(
    r"^\s*(?:\d{8}(?:\s*,\s*|\s+))?(?:\d{1,2}:\d\d:\d\d(?:\s*,\s*|\s+))?\d{1,3}"
    r"(?:(?:\s*,\s*|\s+)(?:-?\d+(?:\.\d+)?|-|N/A)){2,}\s*,?\s*$",
    re.IGNORECASE,
)
DMON_NOHEADER_MIN_ROWS = 2


def dmon_noheader_output(head: str) -> str | None:
    """``nvidia-smi dmon --format csv,noheader`` (or ``--format noheader``) when every line of ``head``
    is a dmon data row, rows of one width (at least DMON_NOHEADER_MIN_ROWS), none of them a header
    row, else None."""
    lines = [ln for ln in head.splitlines()[:200] if ln.strip()]
    if len(lines) < DMON_NOHEADER_MIN_ROWS:
        return None
    widths = set()
    commas = set()
    for ln in lines:
        if not _DMON_ROW_RE.match(ln):
            return None
        widths.add(len(re.findall(r"[^\s,]+", ln)))
        commas.add("," in ln)
    if len(widths) != 1 or len(commas) != 1:
        return None
    return "nvidia-smi dmon --format csv,noheader" if commas == {True} else "nvidia-smi dmon --format noheader"


def _log_like(ln: str) -> bool:
    """A line a log or a table can hold: ``_LOG_LIKE`` at its start, or behind a wrapper's prefix (docker
    compose's ``svc-1  | ``, a VLLM_LOGGING_PREFIX text): vLLM's ``LEVEL MM-DD HH:MM:SS`` header in its head."""
    return bool(
        _LOG_LIKE.match(ln) or _LOG_HEADER.search(ln, 0, 200) or _LOG_LIKE.match(_COMPOSE_PREFIX.sub("", ln, 1))
    )


def is_document(display: str, head: str) -> bool:
    """A document, not a log: by its suffix (*.md, *.html, ...); by its name (README, NOTES, SOURCES,
    incident, report, ...) unless its lines are a log's (most of them for a ``.log``, nearly all for
    another name: ``incident.log`` as an on-call engineer names the server's log is that log, notes
    quoting an excerpt between their sentences are notes); or a *.txt that is mostly prose (most lines are sentences of
    words, few look like log or table lines). Colour codes are taken off first (vLLM 0.4.3-0.11.2 write
    them into the file): a coloured log is judged by its text."""
    name = _base_name(display)
    if name.lower().endswith(DOC_SUFFIXES):
        return True
    by_name = bool(DOC_NAMES.match(name))
    if not by_name and not name.lower().endswith(".txt"):
        return False
    if "\x1b" in head:
        head = re.sub(ANSI_RE, "", head)
    lines = [ln for ln in head.splitlines()[:200] if ln.strip() and not ln.lstrip().startswith("```")]
    if len(lines) < 3:
        return by_name
    log_like = sum(1 for ln in lines if _log_like(ln))
    if by_name:
        # a ``.log`` (``incident.log``, ``report.log.1.gz``) is read when most lines are a log's; another
        # name (``NOTES.txt``, ``report.txt``) only when nearly all are: notes quoting an excerpt between
        # their sentences stay a document (their copies of the log's lines would be counted twice)
        share = 0.5 if _LOG_SUFFIX.search(name) else 0.9
        return log_like < share * len(lines)
    prose = sum(1 for ln in lines if not _log_like(ln) and len(_WORDS.findall(ln)) >= 6)
    return prose >= 0.5 * len(lines) and log_like <= 0.25 * len(lines)


def _describe(
    file_id: int,
    e: _Entry,
    overrides: dict[str, str],
    workspace: Workspace,
    seen: dict[tuple[int, int], InputFile],
) -> InputFile | None:
    """Sniff one file. Returns None for a file already described (the same file reached twice).

    What it finds damaged in the file's bytes is left in ``InputFile.damage``: bundle.collect says it
    for the files read, not again for a copy read once (sources/copies.py)."""
    path, display, is_stdin = e.path, e.display, e.is_stdin

    def unreadable(reason: str, size: int = 0, mtime: float | None = None) -> InputFile:
        return InputFile(file_id, path, display, "unreadable", None, size, mtime, None, warnings=[reason])

    if e.skip:
        return unreadable(e.skip)
    try:
        st = path.stat()
    except OSError as exc:
        return unreadable(_stat_reason(str(path), exc) + ": skipped")
    size, mtime = st.st_size, st.st_mtime
    if not stat.S_ISREG(st.st_mode):
        return unreadable(
            "not a regular file (FIFO, device or socket): skipped; pipe it to standard input (-) to read it", size
        )
    key = (st.st_dev, st.st_ino)
    if key in seen:
        first = seen[key]
        first.warnings.append(f"also reached as {display} (the same file): read once")
        first.aliases.append(display)
        return None
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    warnings: list[str] = []
    damage: list[str] = []
    try:
        fd = os.open(path, flags)
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):  # replaced since the stat
                return unreadable("not a regular file (FIFO, device or socket): skipped", size)
            first = fh.read(SAMPLE_BYTES)
            comp = compression_of(first)
            gz_mtime = None
            encoding = None
            cut = False
            nuls = NulStrip()
            nul_total: int | None = None  # NUL bytes in the whole file (plain files)
            if comp == "gzip":
                gz_mtime = (int.from_bytes(first[4:8], "little") or None) if len(first) >= 10 else None
                head = _capped_lines(nuls(_gzip_chunks(fh, first)))
            elif comp == "zstd":
                head = _zstd_head(path, nuls)
            else:
                for bom, enc in BOMS:
                    if first.startswith(bom):
                        encoding = enc if _mostly_ascii(first[len(bom) : 8192], enc) else None
                        break
                encoding = encoding or _utf16_without_bom(first)
                if encoding:
                    head = b""
                else:
                    head = _capped_lines(nuls(_plain_chunks(fh, first)))
                    cut = _last_line_cut(fh, size)
            tail = b""
            if comp is None and not encoding and size > len(first):
                fh.seek(max(0, size - SAMPLE_BYTES))
                tail = fh.read(SAMPLE_BYTES)
                tail_nuls = tail.count(b"\x00")
                tail = _capped_lines([tail.split(b"\n", 1)[-1].replace(b"\x00", b"")])
                if tail_nuls:
                    nuls.count += tail_nuls
            if comp is None and not encoding and nuls.count:
                nul_total = _count_nuls(fh)
    except OSError as exc:
        return unreadable(f"cannot read ({exc.strerror or exc}): skipped", size, mtime)
    read_path = path
    if encoding:
        try:
            read_path = _transcode(path, encoding, workspace, display)
        except OSError as exc:
            return unreadable(f"cannot read ({exc.strerror or exc}): skipped", size, mtime)
        warnings.append(f"{encoding.upper()} text: read through a UTF-8 copy")
        with open(read_path, "rb") as fh:
            head = _capped_lines(_plain_chunks(fh, fh.read(SAMPLE_BYTES)))
            size_u8 = os.fstat(fh.fileno()).st_size
            cut = _last_line_cut(fh, size_u8)
    if not encoding and head.startswith(UTF8_BOM) and not (comp and _compression_damage(path, comp)):
        try:
            read_path = _without_bom(path, comp, workspace, display)
        except (OSError, ImportError) as exc:
            return unreadable(f"cannot read ({getattr(exc, 'strerror', None) or exc}): skipped", size, mtime)
        head = head[len(UTF8_BOM) :]
        warnings.append("UTF-8 text with a byte-order mark: read through a copy without it")
        if comp is None:  # the last line judged without the mark (a one-line JSON answer is whole)
            with open(read_path, "rb") as fh:
                cut = _last_line_cut(fh, os.fstat(fh.fileno()).st_size)
        comp = None
    forced = _override_for(path, display, overrides)
    score = 0
    if forced:
        kind = forced
    elif comp and size and not head.strip() and (problem := _compression_damage(path, comp)):
        # A truncated .gz/.zst whose first block is cut holds nothing readable: damage, not "empty".
        return unreadable(f"damaged {comp} file ({problem}): nothing could be decompressed: skipped", size, mtime)
    elif size == 0 or not (head.strip() or tail.strip()):
        kind = "empty"
    elif not _is_text(head if head.strip() else tail):
        kind = "binary"
    elif e.in_bundle and is_document(display, head.decode("utf-8", "replace")):
        kind = "document"  # a note about the incident, not a log: its quoted lines add no events
    else:
        # A file named on the command line is read for what it holds, a document too: sniff() reads
        # the log inside a document's code fences or blockquotes (reflow.strip_text).
        kind, score = sniff(head.decode("utf-8", "replace")) if head.strip() else ("unknown", 0)
        if kind == "unknown" and tail.strip() and _is_text(tail):
            kind, score = sniff(tail.decode("utf-8", "replace"))
        if kind == "unknown" and is_document(display, head.decode("utf-8", "replace")):
            kind = "document"  # named, read, and holding no log
        if kind == "unknown" and (tool := gpu_query_output(head.decode("utf-8", "replace"))):
            # meant as GPU evidence, in a shape no source reads: said, not left to -v's "not recognised"
            damage.append(
                f"{display}: {tool} output is not read (its columns are chosen per capture); capture GPU memory "
                "and utilisation with `nvidia-smi dmon -o DT -s um` beside the log"
            )
        elif kind == "unknown" and (tool := dmon_noheader_output(head.decode("utf-8", "replace"))):
            # dmon rows without the header rows that name their columns: GPU evidence nothing can read
            damage.append(
                f"{display}: {tool} output is not read (without dmon's header rows its columns are unknown: "
                "they follow -s and the driver); capture it with its header: `nvidia-smi dmon -o DT -s um "
                "--format csv` (or without --format)"
            )
    recognised = kind not in UNRECOGNISED and kind != "ignore"
    judged = getattr(kinds().get(kind), "judges_last_line", False)  # its reader says what its last line was
    if cut and recognised and not judged:
        damage.append(
            f"{display}: ends in the middle of a line (truncated, or still being written): its last line was read as is"
        )
    if nuls.count and recognised:
        what = f"{nul_total} NUL byte(s)" if nul_total is not None else f"{nuls.count} NUL byte(s) in the part sniffed"
        damage.append(
            f"{display}: {what} skipped (a hole, as logrotate copytruncate leaves); the text around them was read"
        )
    f = InputFile(
        file_id,
        read_path,
        display,
        kind,
        comp,
        size,
        None if is_stdin else mtime,
        gz_mtime,
        is_stdin=is_stdin,
        sniff_score=score,
        forced_kind=bool(forced),
        warnings=warnings,
        damage=damage,
    )
    seen[key] = f
    return f


def _override_for(path: Path, display: str, overrides: dict[str, str]) -> str | None:
    for key in (display, str(path), path.name):
        if key in overrides:
            return overrides[key]
    return None
