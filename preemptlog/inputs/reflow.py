"""Text-level repair of captured and pasted logs, before any parse.

Real logs reach preemptlog damaged by the way they were captured: cut at a
terminal's width, reflowed by a Markdown or blog editor, quoted (``> ``),
indented (notebooks) or fenced (```` ``` ````). This module turns such text
back into the lines the program wrote, as a lazy polars stage that every text
source reads through (:func:`scan`); the parsers then see ordinary lines.

The repair is decided per file from a sample of its head (:data:`SAMPLE_BYTES`;
a capture is damaged the same way throughout), by :func:`plan`. A file that
shows no damage is read exactly as before, at no cost. Stages, in order:

0. **Partial records of the container runtime** (vLLM logs): containerd and CRI-O write a pod's
   output as ``<RFC 3339 time> <stdout|stderr> <P|F> <text>`` (``/var/log/pods/.../0.log``) and
   cut a line longer than 16 KiB into partial records (tag ``P``) ended by a full one (``F``): a
   V1 ``Request X details: ... prompt_token_ids: [...]`` line or a long traceback line. The
   chunks of one stream are joined back into one line (the first chunk's prefix and line
   number, then the text of the others, exactly), even when the other stream's lines come
   between them. Decided when the head holds such records and the file holds a partial one
   (a literal search of the whole file, :func:`_partials`): a file without one is read as is.
1. **Prefixes** (every source kind): Markdown blockquote markers ``> `` (nested
   too) are removed, fence lines (```` ``` ````, ``~~~``, with an info string)
   become empty lines (line numbers stay physical), and leading indentation is
   removed from lines that, once unindented, start a log record (a vLLM
   header, a process prefix, a date...), when most records are indented.
   Sources with their own notion of leading space (dmon, Prometheus) strip
   all of it themselves.
2. **Hard wraps** (vLLM logs): a file's wrap widths are line lengths (at least
   :data:`MIN_WIDTH`) followed by a line without a header at least
   :data:`MIN_SUPPORT` times: the widest such length that almost no line
   exceeds (:data:`MAX_LONGER`), and other lengths near it (:data:`NEAR_WIDEST`:
   a capture that wrapped first lines narrower than their continuations) seen
   about as often (:data:`SUPPORT_SHARE`), almost always (:data:`SECOND_RATIO`)
   a record's first line, and followed by a continuation; some line of these
   widths starts with a header. A continuation
   is never a sibling of the line above (same first :data:`SIBLING_CHARS`
   characters and another length: a repeated line, a progress bar). A width
   seen fewer times is accepted only when it is the longest line length of the
   file and a recognised record cut there is completed by the next line. A continuation line (no header, not empty,
   after a line of exactly a wrap width) is glued to the line before it,
   exactly (no separator), so a value cut in two is whole again; when (almost)
   every continuation starts with spaces (a padded capture), the smallest run
   of two or more that they commonly share is removed first. Known limit: when
   every continuation also starts with the text's own space, that space is
   read as padding.
3. **Reflowed records** (vLLM logs): a recognised record that lacks its
   closing part (:data:`RECORDS`: a V0 preemption warning without
   ``total_num_cumulative_preemption=``, a stats line without its KV cache
   usage, ``num_gpu_blocks is:`` without a number) is joined, with single
   spaces, to the following header-less lines up to the one that completes
   it, at most :data:`RECORD_JOIN_LINES` lines, never across a header or an
   empty line. Nothing is joined when no line completes it.

Limits: the head decides (damage that starts after :data:`SAMPLE_BYTES` is not
seen); a joined file is grouped in memory (captures are small); many small logs
read in one batch (analysis.py ``_scan_small_files``) get every repair but the
hard-wrap one, since the lengths of a concatenation say nothing about one file.

Joined lines keep the physical line number of their first line (``n``), so
every ``file:line`` still points into the input. Frame schema as
:func:`textio.scan_lines`: ``n`` (UInt32), ``line`` (String).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import polars as pl

from .textio import GZIP_MAGIC, ZSTD_MAGIC, file_size, read_head, scan_lines

SAMPLE_BYTES = 1 << 20  # the head that decides a file's repair
BARE_TAG_RE = r"^\[[A-Z][A-Z0-9_]{2,}\] "  # a bare record's own tag: never a continuation
MIN_WIDTH = 40  # narrower "wraps" are ordinary short lines
MIN_SUPPORT = 3  # different lines of one exact length followed by a continuation
MIN_RATIO = 0.4  # the longest length, seen fewer times: share of its lines followed by a continuation
MAX_LONGER = 0.01  # share of lines longer than the widest wrap width
NEAR_WIDEST = 0.8  # other wrap widths are at least this share of the widest (captures of a few widths)
SUPPORT_SHARE = 0.5  # ... seen at least this share as often as the widest
SECOND_RATIO = 0.75  # ... and almost always a record's first line followed by a continuation
SIBLING_CHARS = 32  # a line starting like the one before is its sibling, not its continuation
PADDED_SHARE = 0.8  # continuations are padded when this share of them starts with spaces
PAD_COMMON = 0.01  # ... and the padding is the smallest lead shared by more than this share of them
QUOTED_SHARE = 0.3  # blockquote markers are removed when this share of lines carries them (or a quoted record)
INDENTED_SHARE = 0.5  # indentation is removed when this share of the records is indented
RECORD_JOIN_LINES = 8  # a reflowed record spans at most this many more lines

# A record of the container runtime's log file (containerd, CRI-O): time, stream, tag (P: a partial
# record continued by the stream's next one; F: the last or only one), then the text.
CRI_RE = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:Z|[+-]\d\d:?\d\d) (stdout|stderr) ([PF]) "
CRI_SHARE = 0.5  # the head is a runtime's log when this share of its non-empty lines are its records
CRI_PARTIAL = (b" stdout P ", b" stderr P ")  # literals of a partial record (the whole-file check)

# The start of a log record: what a continuation line never starts with.
HEADER_START_RE = (
    r"^(?:\x1b\[[0-9;?]*[A-Za-z])*(?:"
    r"(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)(?:\s+\d\d-\d\d\s|:\s|\s*\x1b)"  # vLLM header, uvicorn, ANSI level
    r"|\([A-Za-z_][^()]*pid=\d+"  # (Name pid=N) process prefix
    r"|\[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d"  # ISO / RFC 3339 / [date] prefixes
    r"|\d{4}/\d\d/\d\d \d\d:\d\d"
    r"|[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d"  # syslog
    r"|\[[^\]\s]+/[^\]\s]+\]\s"  # kubectl --prefix [pod/name/container]
    r"|\[rank\d+\]:"  # torch.distributed rank prefix
    r"|\[?[IWEF]\d{4} \d\d:\d\d:\d\d"  # glog (NCCL, gloo, torch C++ warnings)
    r"|[A-Za-z0-9][\w.-]*\s+\|\s"  # docker compose "svc-1  | "
    r"|\{\"(?:asctime|levelname|time|message)"  # JSON log line
    r")"
)
QUOTE_RE = r"^(?:>[ \t]?)+"
FENCE_RE = r"^\s*(?:```+|~~~+)\s*[\w+.#-]*\s*$"
# A line a log, a scrape or a table holds, which prose never is: a record's start (HEADER_START_RE),
# a metric sample, a row of numbers. A document's log is in its code fences (or blockquotes) when
# such lines outside them are at most CONTAINER_OUTSIDE of those inside.
LOG_LINE_RE = (
    r"^(?:"
    + HEADER_START_RE[1:]
    + r"|[A-Za-z_:][\w:]*(?:\{[^}]*\})?[ \t]+[-+]?(?:\d[\d.]*(?:[eE][-+]?\d+)?|NaN|Inf)(?:[ \t]+\d+)?[ \t]*$"
    + r"|\d+(?:[ \t]+[-\d.]+){2,}[ \t]*$)"
)
CONTAINER_OUTSIDE = 0.25

# (literal marker of a record, regex its complete text matches)
RECORDS: list[tuple[str, str]] = [
    ("is preempted by", r"total_num_cumulative_preemption=\d"),
    ("Avg prompt throughput", r"KV cache usage: [\d.]+%"),
    ("Avg prompt tput", r"KV cache used: [\d.]+%"),  # vLLM's Rust frontend (0.33+)
    ("num_gpu_blocks is:", r"num_gpu_blocks is:\s*\d"),
]


@dataclass(frozen=True)
class Plan:
    """The repair one file needs (see the module docstring)."""

    quote: bool = False  # some lines carry blockquote markers
    fence: bool = False  # some lines are code fences
    indent: bool = False  # some records are indented
    widths: tuple[int, ...] = ()  # hard-wrap widths
    pad: int = 0  # spaces that start every continuation line
    records: bool = False  # incomplete records completed by the lines after them
    # A document holding a log (a GitHub issue saved as Markdown, a pasted reply): only the lines
    # inside its code fences ("fences") or blockquotes ("quotes") are read; the prose is blanked.
    only: str = ""
    spans: tuple[tuple[int, int], ...] = ()  # 1-based line ranges of the blocks holding log lines (the sample)
    partials: int = 0  # partial records of the container runtime (tag P) in the file, joined to the next
    driver: str = ""  # a log driver's records (JSON_DRIVERS' names, "syslog-5424", "syslog-3164"), unwrapped

    @property
    def needed(self) -> bool:
        return (
            self.quote
            or self.fence
            or self.indent
            or bool(self.widths)
            or self.records
            or bool(self.only)
            or self.partials > 0
            or bool(self.driver)
        )

    def where(self) -> str:
        """``the code fences of`` / ``the blockquotes of`` (the container the log was read from)."""
        return {"fences": "the code fences of", "quotes": "the blockquotes of"}.get(self.only, "")

    def lines(self) -> str:
        """``lines 12-18, 40-52`` (the blocks holding log lines), or empty."""
        if not self.spans:
            return ""
        parts = [f"{a}-{b}" if a != b else f"{a}" for a, b in self.spans]
        return ("line " if len(parts) == 1 and "-" not in parts[0] else "lines ") + ", ".join(parts)

    def partials_note(self) -> str:
        """``joined 12 partial lines of the container runtime's log (...)``, or empty."""
        if not self.partials:
            return ""
        n = self.partials
        return (
            f"joined {n} partial line{'s' if n != 1 else ''} of the container runtime's log "
            "(containerd/CRI-O cut lines at 16 KiB)"
        )

    def driver_note(self) -> str:
        """``read the log lines inside docker's json-file records``, or empty."""
        what = {
            "docker-json": "docker's json-file records",
            "journal-json": "journalctl -o json records",
            "syslog-5424": "an RFC 5424 syslog relay's records",
        }
        if self.driver == "syslog-3164":
            return (
                "read the log lines inside a BSD syslog relay's <PRI> records (RFC 3164): the relay's full date is "
                "a line's time, its year-less one where vLLM's own is absent"
            )
        return f"read the log lines inside {what[self.driver]}, at their own times" if self.driver else ""

    def describe(self) -> str:
        parts = []
        # (a document read for the log in its fences or quotes says so in a note of its own)
        if self.quote and self.only != "quotes":
            parts.append("blockquote markers removed")
        if self.fence and self.only != "fences":
            parts.append("code fences removed")
        if self.indent:
            parts.append("indentation removed")
        if self.widths:
            w = "/".join(str(x) for x in self.widths)
            parts.append(
                f"lines hard-wrapped at {w} columns rejoined" + (f" ({self.pad}-space padding)" if self.pad else "")
            )
        if self.records:
            parts.append("records reflowed over several lines joined")
        return ", ".join(parts)


NOTHING = Plan()


def _sample(path: Path | str) -> list[str]:

    raw = read_head(Path(path), SAMPLE_BYTES)
    # NUL bytes are no text: the readers drop them (textio.scan_lines), so the decision does too
    text = raw.replace(b"\x00", b"").decode("utf-8", "replace")
    lines = text.split("\n")
    if len(raw) >= SAMPLE_BYTES or (file_size(Path(path)) > len(raw) and not raw.endswith(b"\n")):
        lines = lines[:-1]  # the last line of a cut sample is partial
    elif lines and lines[-1] == "":
        lines = lines[:-1]
    return [ln[:-1] if ln.endswith("\r") else ln for ln in lines]


def _strip(lf: pl.LazyFrame, plan: Plan) -> pl.LazyFrame:
    line = pl.col("line")
    if plan.only:
        # Only the container's lines are the log: the rest become empty lines (line numbers stay).
        lf = lf.with_columns(
            _q=line.str.contains(QUOTE_RE),
            _bare=line.str.replace(QUOTE_RE, "") if plan.quote else line,
        ).with_columns(_ne=pl.col("_bare").str.strip_chars() != "")
        lf = _keep_container(lf, plan.only).drop("_q", "_bare", "_ne")
    if plan.quote:
        line = line.str.replace(QUOTE_RE, "")
    if plan.fence:
        line = pl.when(line.str.contains(FENCE_RE)).then(pl.lit("")).otherwise(line)
    if plan.indent:
        bare = line.str.strip_chars_start(" \t")
        line = (
            pl.when(line.str.starts_with(" ") | line.str.starts_with("\t"))
            .then(pl.when(bare.str.head(160).str.contains(HEADER_START_RE)).then(bare).otherwise(line))
            .otherwise(line)
        )
    return lf.with_columns(line.alias("line"))


def _headerless(line: pl.Expr) -> pl.Expr:
    return (line != "") & ~line.str.head(160).str.contains(HEADER_START_RE)


def _continues(line: pl.Expr, prev: pl.Expr) -> pl.Expr:
    """``line`` can continue ``prev``: no header, not empty, and not a sibling of it
    (a repeated line, the next step of a progress bar: same first characters)."""
    # Two full-width chunks of one long line may start alike (a list of "false, false, ...");
    # siblings are told apart by their lengths.
    sibling = (line.str.head(SIBLING_CHARS) == prev.str.head(SIBLING_CHARS)) & (
        line.str.len_chars() != prev.str.len_chars()
    )
    # A whole JSON object (a JSON log line) was not cut; a line of control bytes only (binary
    # junk between records) is no text that a wrap could have cut off.
    whole_json = prev.str.starts_with("{") & prev.str.ends_with("}")
    text = line.str.contains(r"[^\x00-\x20\x7f]")
    # A line that opens with a bracketed upper-case tag ("[BATCH] ...", "[SCHEDULER] ...") is a
    # record printed bare (a debug hook's print()), not the rest of a cut line: a short log of a
    # few equal-length headed lines, each followed by such a print, is no wrapped capture.
    tagged = line.str.contains(BARE_TAG_RE)
    return _headerless(line) & ~sibling.fill_null(False) & ~whole_json.fill_null(False) & text & ~tagged


def _incomplete(line: pl.Expr) -> pl.Expr:
    out = pl.lit(False)
    for marker, done in RECORDS:
        out = out | (line.str.contains(marker, literal=True) & ~line.str.contains(done))
    return out


def _completes(line: pl.Expr) -> pl.Expr:
    out = pl.lit(False)
    for _marker, done in RECORDS:
        out = out | line.str.contains(done)
    return out


def detect(lines: list[str], join: bool = True, wraps: bool = True) -> Plan:
    """The repair a file needs, from a sample of its lines (see the module docstring).

    Cost: literal tests on every line of the sample; the regexes run only on the few
    lines that can matter (measured: 20 ms on 1 MB of an ordinary log).
    """
    if not lines:
        return NOTHING
    df = pl.DataFrame({"line": lines}, schema={"line": pl.String})
    line = pl.col("line")
    cheap = df.select(
        gt=line.str.starts_with(">").any(),
        fence=(line.str.contains("```", literal=True) | line.str.contains("~~~", literal=True)).any(),
        lead=(line.str.starts_with(" ") | line.str.starts_with("\t") | line.str.starts_with(">")).any(),
    ).row(0, named=True)
    quote = fence = indent = False
    if cheap["gt"]:
        quoted = line.str.contains(QUOTE_RE)
        quote = df.select(
            (quoted.mean() >= QUOTED_SHARE)
            | (quoted & line.str.replace(QUOTE_RE, "").str.head(160).str.contains(HEADER_START_RE)).any()
        ).item()
    bare = line.str.replace(QUOTE_RE, "") if quote else line
    if cheap["fence"]:
        fence = df.select(bare.str.contains(FENCE_RE).any()).item()
    if cheap["lead"]:
        # Indented records: most records are indented (a notebook cell, a Markdown code block),
        # not a few continuation lines that happen to start with a space and a prefix.
        heads = bare.str.strip_chars_start(" \t").str.head(160).str.contains(HEADER_START_RE)
        ind, hdr = df.select((bare.str.contains(r"^[ \t]") & heads).sum().alias("i"), heads.sum().alias("h")).row(0)
        indent = ind > 0 and ind >= INDENTED_SHARE * hdr
    only, spans = _container(df, quote, fence)
    plan = Plan(quote=quote, fence=fence, indent=indent, only=only, spans=spans)
    if not join:
        return plan
    if plan.needed:
        df = _strip(df.lazy(), plan).collect()
    widths, pad = _wrap_widths(df) if wraps else ((), 0)
    if widths:
        df = _join_wraps(
            df.lazy().with_columns(n=pl.int_range(pl.len(), dtype=pl.UInt32)),
            Plan(quote, fence, indent, widths, pad, only=only),
        ).collect()
    records = _any_record_join(df)
    return Plan(quote, fence, indent, widths, pad, records, only, spans)


def _inside(kind: str) -> tuple[pl.Expr, pl.Expr, pl.Expr]:
    """(a line inside the container, a line that is the container's own markup, its block) for
    ``fences`` (between an odd and an even fence line; a block per fenced block) or ``quotes`` (a
    paragraph that starts quoted: Markdown's lazy continuation keeps an unquoted line of it in the
    quote; a block per paragraph). Columns ``_bare`` (quote markers removed), ``_q`` (quoted), ``_ne``
    (not empty)."""
    if kind == "fences":
        fl = pl.col("_bare").str.contains(FENCE_RE)
        before = fl.cast(pl.UInt32).cum_sum() - fl.cast(pl.UInt32)
        return (before % 2 == 1) & ~fl, fl, before
    para = (~pl.col("_ne")).cum_sum()
    starts_quoted = pl.col("_q").filter(pl.col("_ne")).first().over(para)
    return pl.col("_ne") & starts_quoted.fill_null(False), pl.lit(False), para


def _keep_container(lf: pl.LazyFrame, kind: str) -> pl.LazyFrame:
    """Blank every line but the container's that are the log: those of its blocks that hold a log line
    (LOG_LINE_RE), or every block's when none does (a log of bare lines); a code snippet in another
    fence is no log. (The window's inputs are columns first: an expression inside ``over`` is
    evaluated per partition, where a running count would restart.)"""
    inside, _markup, block = _inside(kind)
    lf = lf.with_columns(_in=inside, _blk=block)
    lf = lf.with_columns(
        _hl=pl.col("_in") & pl.col("_bare").str.strip_chars_start(" \t").str.head(160).str.contains(LOG_LINE_RE)
    )
    keep = pl.col("_in") & (pl.col("_hl").any().over("_blk") | ~pl.col("_hl").any())
    return lf.with_columns(line=pl.when(keep).then(pl.col("line")).otherwise(pl.lit(""))).drop("_in", "_blk", "_hl")


def _container(df: pl.DataFrame, quote: bool, fence: bool) -> tuple[str, tuple[tuple[int, int], ...]]:
    """A document holding a log: the container whose lines are the log (``fences`` or ``quotes``)
    and the line ranges of its blocks that hold log lines; ``("", ())`` for a log.

    The container is the log's when the lines outside it hold prose (some non-empty line) and at
    most CONTAINER_OUTSIDE as many log lines (LOG_LINE_RE) as inside it: a log with a stray fence
    or a quoted line keeps every line. Quotes need a log line inside (a quoted remark is no log).
    """
    if not (quote or fence):
        return "", ()
    line = pl.col("line")
    d = df.with_columns(
        _n=pl.int_range(1, pl.len() + 1, dtype=pl.UInt32),
        _q=line.str.contains(QUOTE_RE),
        _bare=line.str.replace(QUOTE_RE, "") if quote else line,
    ).with_columns(
        _ne=pl.col("_bare").str.strip_chars() != "",
        _log=pl.col("_bare").str.strip_chars_start(" \t").str.head(160).str.contains(LOG_LINE_RE),
    )
    for kind, on in (("fences", fence), ("quotes", quote)):
        if not on:
            continue
        inside, markup, _block = _inside(kind)
        r = d.with_columns(_in=inside, _mk=markup)
        out = ~pl.col("_in") & ~pl.col("_mk")
        c = r.select(
            in_log=(pl.col("_in") & pl.col("_log")).sum(),
            in_ne=(pl.col("_in") & pl.col("_ne")).sum(),
            out_log=(out & pl.col("_log")).sum(),
            out_ne=(out & pl.col("_ne")).sum(),
        ).row(0, named=True)
        if not c["in_ne"] or not c["out_ne"] or c["out_log"] > CONTAINER_OUTSIDE * c["in_log"]:
            continue
        if kind == "quotes" and not c["in_log"]:
            continue
        # Blocks: runs of the container's lines (empty lines belong to the block before them).
        run = pl.when(pl.col("_ne") | pl.col("_mk")).then(pl.col("_in")).forward_fill().fill_null(False)
        blocks = (
            r.with_columns(_run=run)
            .with_columns(_blk=(pl.col("_run") != pl.col("_run").shift(1)).fill_null(True).cum_sum())
            .filter(pl.col("_run") & pl.col("_in") & pl.col("_ne"))
            .group_by("_blk", maintain_order=True)
            .agg(pl.col("_n").min().alias("lo"), pl.col("_n").max().alias("hi"), pl.col("_log").any().alias("log"))
        )
        logged = blocks.filter(pl.col("log"))
        chosen = logged if logged.height else blocks
        return kind, tuple((int(a), int(b)) for a, b in chosen.select("lo", "hi").iter_rows())
    return "", ()


def _any_record_join(df: pl.DataFrame) -> bool:
    line = pl.col("line")
    markers = [m for m, _ in RECORDS]
    if not df.height or not df.select(line.str.contains_any(markers).any()).item():
        return False
    if not df.filter(line.str.contains_any(markers)).select(_incomplete(line).any()).item():
        return False
    return bool(_record_joins(df.lazy()).select(pl.col("_join").any()).collect().item())


def _wrap_widths(df: pl.DataFrame) -> tuple[tuple[int, ...], int]:
    line = pl.col("line")
    d = df.with_columns(_len=line.str.len_chars(), _next=line.shift(-1), _prevline=line.shift(1))
    total = d.height
    lens = d.get_column("_len")
    # The widest wrap width has at most MAX_LONGER of the lines longer than itself, and
    # other widths are within NEAR_WIDEST of it: only lines at least that long can matter.
    k = int(MAX_LONGER * total)
    q = int(lens.sort(descending=True)[min(k, total - 1)])
    lo = max(MIN_WIDTH, int(NEAR_WIDEST * q))
    tall = d.filter(pl.col("_len") >= lo).with_columns(_next_cont=_continues(pl.col("_next"), line).fill_null(False))
    if tall.height == 0:
        return (), 0
    by_len = tall.group_by("_len").agg(
        pl.len().alias("count"),
        pl.col("_next_cont").sum().alias("followed"),
        # a line repeated word for word is one line's evidence (a loop printing the same line, each
        # time followed by other output, is no terminal's width)
        pl.col("line").filter(pl.col("_next_cont")).n_unique().alias("distinct"),
        (pl.col("_next_cont") & _incomplete(line)).any().alias("cut_record"),
        (~_headerless(line)).mean().alias("headed"),
        (~_headerless(line)).sum().alias("headed_n"),
    )
    strong = by_len.filter(pl.col("distinct") >= MIN_SUPPORT)
    widths: list[int] = []
    for w in sorted(strong.get_column("_len").to_list(), reverse=True):
        longer = int((lens > w).sum())
        if longer <= MAX_LONGER * total:
            top = strong.filter(pl.col("_len") == w).get_column("followed").item()
            others = strong.filter(
                (pl.col("_len") < w)
                & (pl.col("_len") >= NEAR_WIDEST * w)
                & (pl.col("followed") >= SUPPORT_SHARE * top)
                & (pl.col("followed") >= SECOND_RATIO * pl.col("count"))
                & (pl.col("headed") >= SECOND_RATIO)
            )
            widths = [w, *others.get_column("_len").to_list()]
            # Wrapped records start with a header: lines without any (bare print output,
            # a run of bare records of one length) are not told apart from their neighbours.
            if by_len.filter(pl.col("_len").is_in(widths)).get_column("headed_n").sum() == 0:
                widths = []
            break
    longest = int(lens.max() or 0)
    if not widths and longest >= MIN_WIDTH:
        row = by_len.filter(pl.col("_len") == longest).row(0, named=True)
        if row["followed"] >= MIN_RATIO * row["count"] and row["cut_record"]:
            widths = [longest]
    if not widths:
        return (), 0
    ws = sorted(set(widths))
    cont = d.with_columns(_prev=pl.col("_len").shift(1)).filter(pl.col("_prev").is_in(ws))
    cont = cont.filter(_continues(line, pl.col("_prevline")))
    # Padding: (almost) every continuation starts with spaces. One space at a cut is
    # the text's own as often as not (``num_gpu_blocks is:`` / `` 25809``; repeated
    # lines cut at the same place), so padding is two spaces or more.
    lead = line.str.len_chars() - line.str.strip_chars_start(" ").str.len_chars()
    leads = cont.select(lead).to_series()
    padded = leads.filter(leads >= 1)
    pad = 0
    if cont.height and padded.len() >= PADDED_SHARE * cont.height:
        # The run itself is the smallest lead (the text's own spaces only add to it), among
        # common leads: a few false continuations (an indented original line) must not decide it.
        counts = padded.value_counts()
        floor = PAD_COMMON * padded.len()
        common = (
            counts.filter(pl.col("count") > floor).get_column(padded.name) if padded.len() >= MIN_SUPPORT else padded
        )
        run = int((common if common.len() else padded).min())
        pad = run if run >= 2 else 0
    return tuple(ws), pad


def _join_wraps(lf: pl.LazyFrame, plan: Plan) -> pl.LazyFrame:
    line = pl.col("line")
    cont = pl.col("line").str.len_chars().shift(1).is_in(list(plan.widths)).fill_null(False) & _continues(
        line, line.shift(1)
    )
    lf = lf.with_columns(_cont=cont)
    if plan.pad:
        lf = lf.with_columns(
            line=pl.when(pl.col("_cont") & line.str.starts_with(" " * plan.pad))
            .then(line.str.slice(plan.pad))
            .otherwise(line)
        )
    return _glue(lf, "")


def _glue(lf: pl.LazyFrame, sep: str) -> pl.LazyFrame:
    """Join every ``_cont`` row to the row before it."""
    return (
        lf.with_columns(_g=(~pl.col("_cont")).cum_sum())
        .group_by("_g", maintain_order=True)
        .agg(pl.col("n").first(), pl.col("line").str.join(sep))
        .select("n", "line")
    )


def _record_joins(lf: pl.LazyFrame) -> pl.LazyFrame:
    """Adds ``_cont`` (this row completes the record above it) and ``_join`` (a record is joined here)."""
    line = pl.col("line")
    lf = lf.with_columns(_inc=_incomplete(line), _hl=_headerless(line), _done=_completes(line))
    # Blocks: a record start (a header, an empty line, an incomplete record) opens one.
    lf = lf.with_columns(_b=(~pl.col("_hl") | pl.col("_inc")).cum_sum())
    lf = lf.with_columns(_pos=pl.int_range(pl.len(), dtype=pl.Int64).over("_b"))
    upto = (
        pl.when((pl.col("_pos") >= 1) & (pl.col("_pos") <= RECORD_JOIN_LINES) & pl.col("_done"))
        .then(pl.col("_pos"))
        .min()
        .over("_b")
    )
    joined = pl.col("_inc").first().over("_b") & upto.is_not_null()
    lf = lf.with_columns(_upto=upto, _joined=joined)
    return lf.with_columns(
        _cont=pl.col("_joined") & (pl.col("_pos") >= 1) & (pl.col("_pos") <= pl.col("_upto")),
        _join=pl.col("_joined") & (pl.col("_pos") == 0),
    )


def _join_records(lf: pl.LazyFrame) -> pl.LazyFrame:
    lf = _record_joins(lf)
    # Reflowed text: each piece loses its line-break spaces, one space joins them.
    lf = lf.with_columns(
        line=pl.when(pl.col("_cont") | pl.col("_join"))
        .then(pl.col("line").str.strip_chars(" \t"))
        .otherwise(pl.col("line"))
    )
    return _glue(lf, " ")


def _cri_head(lines: list[str]) -> bool:
    """The sample is a container runtime's log file (:data:`CRI_RE` records, :data:`CRI_SHARE`)."""
    if not lines or not any(" stdout " in ln[:48] or " stderr " in ln[:48] for ln in lines[:200]):
        return False
    df = pl.DataFrame({"line": lines}, schema={"line": pl.String}).filter(pl.col("line") != "")
    if not df.height:
        return False
    return bool(df.select(pl.col("line").str.contains(CRI_RE).mean()).item() >= CRI_SHARE)


def _partials(path: Path | str) -> int:
    """Partial records (tag P) in a container runtime's log file: a literal count over the whole
    file, 16 MB at a time (a compressed file: through polars' reader, an anchored regex)."""
    block = 16 << 20
    keep = max(len(x) for x in CRI_PARTIAL) - 1
    with open(path, "rb") as fh:
        head = fh.read(4)
        if head.startswith(GZIP_MAGIC) or head.startswith(ZSTD_MAGIC):
            rx = CRI_RE.replace("(stdout|stderr) ([PF]) ", "(?:stdout|stderr) P ")
            return int(scan_lines(path).select(pl.col("line").str.contains(rx).sum()).collect().item() or 0)
        fh.seek(0)
        count, tail = 0, b""
        while True:
            chunk = fh.read(block)
            if not chunk:
                break
            buf = tail + chunk
            count += sum(buf.count(x) for x in CRI_PARTIAL)
            # a match inside the carried tail was counted already: the tail is shorter than a literal
            tail = buf[-keep:]
        return count


def _join_partials(lf: pl.LazyFrame) -> pl.LazyFrame:
    """containerd's / CRI-O's partial records joined (:func:`_join_chunks`): the stream and tag of
    :data:`CRI_RE`; a continuing chunk adds its text without the prefix."""
    tags = pl.col("line").str.extract_groups(CRI_RE)
    lf = lf.with_columns(_s=tags.struct.field("1"), _p=tags.struct.field("2") == "P")
    return _join_chunks(lf.with_columns(_piece=pl.col("line").str.replace(CRI_RE, "")))


def _join_chunks(lf: pl.LazyFrame) -> pl.LazyFrame:
    """Join each run of a stream's partial records and the record that ends it into one line: the
    first chunk's ``line`` and number, then the others' ``_piece``. Columns: ``_s`` (the stream;
    null: a line of no stream, never joined), ``_p`` (a partial record). The other stream's records
    between them keep their place; only the chunks of joined lines are grouped."""
    # a chunk continues the stream's record before it when that one was partial
    prev_p = pl.col("_p").shift(1).over("_s").fill_null(False)
    lf = lf.with_columns(_cont=pl.col("_s").is_not_null() & prev_p)
    lf = lf.with_columns(_in=(pl.col("_p").fill_null(False) | pl.col("_cont")))
    # each stream's records numbered by their starts: the group of a chunk is (stream, starts so far)
    lf = lf.with_columns(_g=(~pl.col("_cont")).cast(pl.UInt32).cum_sum().over("_s"))
    plain = lf.filter(~pl.col("_in")).select("n", "line")
    joined = (
        lf.filter(pl.col("_in"))
        .with_columns(line=pl.when(pl.col("_cont")).then(pl.col("_piece")).otherwise(pl.col("line")))
        .group_by("_s", "_g", maintain_order=True)
        .agg(pl.col("n").first(), pl.col("line").str.join(""))
        .select("n", "line")
    )
    # both in line order (a group's place: its first chunk's): merged, not sorted
    return plain.merge_sorted(joined, key="n")


# JSON records of a log driver, one per line: docker's json-file driver (``{"log": "text\n",
# "stream": "stdout", "time": "<RFC 3339>"}``; a line over 16 KiB is cut into records whose text
# lacks the final line feed) and ``journalctl -o json`` (``MESSAGE``, ``__REALTIME_TIMESTAMP`` in
# microseconds, ``_PID``; ``_LINE_BREAK: "line-max"`` on an entry journald cut at LineMax; a
# MESSAGE that is not printable UTF-8 is an array of bytes).
JSON_DRIVERS = {
    "docker-json": r'^\{\s*"log"\s*:\s*".*"time"\s*:\s*"',
    "journal-json": r'^\{.*"__REALTIME_TIMESTAMP"\s*:.*"MESSAGE"\s*:',
}
JSON_SHARE = 0.5  # the head is a driver's JSON when this share of its non-empty lines are its records
_BYTE_CHARS = ["" if i == 0 else chr(i) if i < 0x80 else "?" for i in range(256)]


# An RFC 5424 syslog relay's header: ``<PRI>1 TIME HOST APP-NAME PROCID MSGID STRUCTURED-DATA `` (TIME
# "-" when the relay had none). Its lines are read as ``<TIME> <text>`` (docker -t's shape) by the
# repair stage, so the hot path's regexes do not grow a branch every plain log would pay for.
SYSLOG_RE = r"^<\d{1,3}>1 (\S+) \S+ \S+ \S+ \S+ (?:-|(?:\[[^\]]*\])+) ?"


# A BSD (RFC 3164) relay's record as forwarders send it and some write it: ``<PRI>`` glued to the
# time (``<14>Dec  6 23:11:05 host tag[pid]: text``; rsyslog's RSYSLOG_ForwardFormat: ``<14>2026-12-06T
# 23:11:05.123456+00:00 host tag[pid]: text``). Without ``<PRI>`` (/var/log/syslog, /var/log/messages,
# RSYSLOG_FileFormat) the line is read as it is: its leading time is the line's (a BSD date has no year,
# read like any year-less time); the repair stage only removes ``<PRI>``, so that time leads the line.
SYSLOG_3164_RE = r"^<\d{1,3}>(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d |\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\S* )"
PRI_RE = r"^<\d{1,3}>"


def _syslog_head(lines: list[str]) -> str:
    """``syslog-5424`` when the sample is an RFC 5424 relay's (:data:`SYSLOG_RE`), ``syslog-3164`` when a
    BSD relay's with ``<PRI>`` (:data:`SYSLOG_3164_RE`): :data:`JSON_SHARE` of its non-empty lines."""
    if not lines or not any(ln.startswith("<") for ln in lines[:50]):
        return ""
    df = pl.DataFrame({"line": lines}, schema={"line": pl.String}).filter(pl.col("line") != "")
    for name, rx in (("syslog-5424", SYSLOG_RE), ("syslog-3164", SYSLOG_3164_RE)):
        if df.height and df.select(pl.col("line").str.contains(rx).mean()).item() >= JSON_SHARE:
            return name
    return ""


def _unwrap_pri(lf: pl.LazyFrame) -> pl.LazyFrame:
    """A BSD relay's lines without their ``<PRI>`` (:data:`SYSLOG_3164_RE`); other lines kept."""
    line = pl.col("line")
    return lf.with_columns(
        line=pl.when(line.str.contains(SYSLOG_3164_RE)).then(line.str.replace(PRI_RE, "")).otherwise(line)
    )


def _unwrap_syslog(lf: pl.LazyFrame) -> pl.LazyFrame:
    """An RFC 5424 relay's lines as ``<TIME> <text>`` (``<text>`` when its TIME is "-"); other lines kept."""
    line = pl.col("line")
    t = line.str.extract(SYSLOG_RE, 1)
    text = line.str.replace(SYSLOG_RE, "")
    return lf.with_columns(
        line=pl.when(t.is_null()).then(line).when(t == "-").then(text).otherwise(pl.concat_str(t, pl.lit(" "), text))
    )


def _json_head(lines: list[str]) -> str:
    """The log driver whose JSON records the sample holds (:data:`JSON_DRIVERS`), or empty."""
    if not lines or not any(ln.startswith("{") for ln in lines[:50]):
        return ""
    df = pl.DataFrame({"line": lines}, schema={"line": pl.String}).filter(pl.col("line") != "")
    for name, rx in JSON_DRIVERS.items():
        if df.height and df.select(pl.col("line").str.contains(rx).mean()).item() >= JSON_SHARE:
            return name
    return ""


def _unwrap_json(lf: pl.LazyFrame, driver: str) -> pl.LazyFrame:
    """A driver's JSON records as ``<RFC 3339 time> <text>`` lines (``docker logs -t``'s shape, read
    as such), partial records joined per stream; a line that is not the driver's record is kept."""
    line = pl.col("line")
    if driver == "docker-json":
        text = line.str.json_path_match("$.log")
        lf = lf.with_columns(
            _t=line.str.json_path_match("$.time"),
            _s=pl.when(text.is_not_null()).then(pl.coalesce(line.str.json_path_match("$.stream"), pl.lit(""))),
            _p=text.is_not_null() & ~text.str.ends_with("\n"),
            _piece=text.str.strip_suffix("\n").str.strip_suffix("\r"),
        )
    else:
        msg = line.str.json_path_match("$.MESSAGE")
        is_bytes = line.str.contains(r'"MESSAGE"\s*:\s*\[')
        as_bytes = (
            pl.when(is_bytes)
            .then(msg)
            .str.json_decode(pl.List(pl.Int64))
            .list.eval(pl.element().replace_strict(list(range(256)), _BYTE_CHARS, default="?"))
            .list.join("")
        )
        usec = line.str.json_path_match("$.__REALTIME_TIMESTAMP").cast(pl.Int64, strict=False)
        lf = lf.with_columns(
            _t=pl.from_epoch(usec, time_unit="us").dt.strftime("%Y-%m-%dT%H:%M:%S%.6fZ"),
            _s=pl.when(msg.is_not_null()).then(pl.coalesce(line.str.json_path_match("$._PID"), pl.lit(""))),
            _p=line.str.json_path_match("$._LINE_BREAK") == "line-max",
            _piece=pl.when(is_bytes).then(as_bytes).otherwise(msg),
        )
    whole = pl.when(pl.col("_t").is_not_null()).then(pl.concat_str(pl.col("_t"), pl.lit(" "), pl.col("_piece")))
    lf = lf.with_columns(
        line=pl.when(pl.col("_piece").is_not_null()).then(whole.otherwise(pl.col("_piece"))).otherwise(line)
    )
    lf = lf.with_columns(_p=pl.col("_p").fill_null(False))
    return _join_chunks(lf)


def unwrap_lines(lines: list[str], driver: str) -> list[str]:
    """:func:`unwrap` on a list of lines (a sample, a sniffed head)."""
    lf = pl.DataFrame({"line": lines}, schema={"line": pl.String}).lazy()
    lf = lf.with_columns(n=pl.int_range(1, pl.len() + 1, dtype=pl.UInt32))
    return unwrap(lf, driver).collect().get_column("line").to_list()


def unwrap(lf: pl.LazyFrame, driver: str) -> pl.LazyFrame:
    """The log lines inside a driver's records (:func:`driver_of`)."""
    if driver == "syslog-5424":
        return _unwrap_syslog(lf)
    if driver == "syslog-3164":
        return _unwrap_pri(lf)
    return _unwrap_json(lf, driver)


def driver_of(lines: list[str]) -> str:
    """The log driver or relay whose records the sample holds: JSON records, an RFC 5424 relay, or empty."""
    return _json_head(lines) or _syslog_head(lines)


def apply(lf: pl.LazyFrame, plan: Plan) -> pl.LazyFrame:
    """The repair stage on an (n, line) frame."""
    if not plan.needed:
        return lf
    if plan.driver:
        lf = unwrap(lf, plan.driver)
    if plan.partials:
        lf = _join_partials(lf)
    lf = _strip(lf, plan)
    if plan.widths:
        lf = _join_wraps(lf, plan)
    if plan.records:
        lf = _join_records(lf)
    return lf


def plan(path: Path | str, join: bool = True, wraps: bool = True) -> Plan:
    """Decide a file's repair from its head (best effort: unreadable means no repair).

    Remembered per file version (path, size, mtime), so the analysis can say what was repaired
    without deciding twice.
    """
    import os

    try:
        st = os.stat(path)
    except OSError:
        return NOTHING
    key = (str(path), st.st_size, st.st_mtime_ns, join, wraps)
    if key not in _PLANS:
        try:
            lines = _sample(path)
        except OSError:
            return NOTHING
        if len(_PLANS) > 4096:
            _PLANS.clear()
        driver = driver_of(lines)  # every source kind: the records hold its lines
        if driver:  # the repair the log inside the records needs, decided on that log
            p = replace(detect(unwrap_lines(lines, driver), join=join, wraps=wraps), driver=driver)
        else:
            p = detect(lines, join=join, wraps=wraps)
        if not driver and join and _cri_head(lines):
            try:
                p = replace(p, partials=_partials(path))
            except (OSError, pl.exceptions.PolarsError):
                pass
        _PLANS[key] = p
    return _PLANS[key]


_PLANS: dict[tuple, Plan] = {}


def scan(path: Path | str, join: bool = True, wraps: bool = True) -> pl.LazyFrame:
    """Lazy (n, line) frame of a text file, repaired as its head says (see the module docstring).

    ``join=False``: prefixes only (sources whose records are single lines). ``wraps=False``:
    no hard-wrap detection (a concatenation of many files, whose line lengths say nothing
    about any one of them).
    """

    return apply(scan_lines(path), plan(path, join=join, wraps=wraps))


def strip_text(text: str) -> str:
    """The prefix stage on a plain string (sniffing reads heads as text); a document holding a log
    in its code fences or blockquotes (:func:`_container`) is reduced to those lines first, so it is
    sniffed for the log it holds, not for its prose."""
    import re

    if text.startswith(("{", "<")) and (driver := driver_of(text.split("\n")[:200])):
        text = "\n".join(unwrap_lines(text.split("\n"), driver))
    if ">" not in text and "```" not in text and "~~~" not in text:
        return text
    if re.search(r"(?m)^[ \t]*(?:>|```|~~~)", text):
        lines = text.split("\n")
        p = detect(lines, join=False)
        if p.only:
            kept = _strip(
                pl.DataFrame({"line": lines}, schema={"line": pl.String}).lazy(), Plan(quote=p.quote, only=p.only)
            )
            text = "\n".join(kept.collect().get_column("line").to_list())
    text = re.sub("(?m)" + QUOTE_RE, "", text)
    return re.sub("(?m)" + FENCE_RE, "", text)
