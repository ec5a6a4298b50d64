"""Prometheus text exposition and OpenMetrics: scrapes, separators and samples of one file (phase 1)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from ...inputs import reflow
from ..dmon import ends_mid_line
from .names import (
    _canonical_expr,
    _FileData,
    _label,
    _sample_schema,
    _spellings,
    _ts_to_us,
    created,
    metrics,
    name_prefix_re,
    sample_starts,
)

if TYPE_CHECKING:
    from ...inputs.files import InputFile


# Line shapes of the text exposition (Rust regex, anchored).
_LABELS = r'(?:[^"}]|"(?:[^"\\]|\\.)*")*'


# The metric name's start is every registered engine's prefix (names.name_prefix_re).
_SAMPLE_REST = (
    r"[A-Za-z0-9_:]+)(?:\{(?P<labels>" + _LABELS + r")\})?[ \t]+(?P<value>[^\s#]+)"
    r"(?:[ \t]+(?P<ts>-?[0-9][0-9.eE+-]*))?[ \t]*(?:#.*)?$"
)


def sample_re() -> str:
    return r"^(?P<name>" + name_prefix_re() + _SAMPLE_REST


def meta_re() -> str:
    return r"^#[ \t]+(?:HELP|TYPE)[ \t]+(" + name_prefix_re() + r"[A-Za-z0-9_:]+)"


# Separators between concatenated scrapes.
# ``# Timestamp: <time>``: llm-d-benchmark's collect_metrics.sh header (before ``# Pod:``).
# ``# scraped at <time>`` / ``# scrape at <time>`` / ``# scraped: <time>``: the same, in words.
SCRAPE_SEP_RE = r"^#[ \t]*(?:scrape(?:[_ ]?time|d?[ \t]+at\b|d)?|[Tt]imestamp)[ \t]*[:=]?[ \t]*(?P<t>.*)$"


# ``preemptlog capture``'s own files (capture/scrape.py CAPTURE_MARK): the separator's time is the
# time the scraper recorded, not an assumption.
CAPTURE_MARK_RE = r"^#[ \t]*preemptlog capture\b"
# ... and how long the answer took (capture.scrape.mark): the page was made in that span before its time
ANSWER_RE = r"\(([0-9]+(?:\.[0-9]+)?) s after the request\)"


# The server a scrape came from, in a header line (llm-d-benchmark ``# Pod: <name>``).
POD_RE = r"^#[ \t]*(?:Pod|Instance|Host):[ \t]*(\S+)"


DASH_SEP_RE = r"^---+[ \t]*(?P<t>.*)$"


BARE_TIME_RE = (
    r"^(?:\d{4}-\d\d-\d\d[T ]\d\d:\d\d(?::\d\d(?:[.,]\d+)?)?(?:Z|[+-]\d\d:?\d\d)?"
    r"|\d{10}(?:\d{3})?(?:\.\d+)?"
    r"|(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) [A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d(?: [A-Z]{2,5})? \d{4})$"
)


def _parse_text(f: InputFile) -> _FileData:

    known = list(metrics()) + list(created())
    sample_re_, meta_re_ = sample_re(), meta_re()
    # Quoted, fenced or indented pastes read like plain scrapes (reflow.py).
    line = pl.col("line").str.strip_chars("\r \t")
    is_sample = pl.lit(False)
    for start in sample_starts():
        is_sample = is_sample | line.str.starts_with(start)
    is_meta = line.str.starts_with("#") & line.str.contains(meta_re_)
    is_eof = line == "# EOF"
    is_sep = line.str.contains(SCRAPE_SEP_RE) | line.str.starts_with("---") | line.str.contains(BARE_TIME_RE)
    is_pod = line.str.starts_with("#") & line.str.contains(POD_RE)
    is_cap = line.str.starts_with("#") & line.str.contains(CAPTURE_MARK_RE)
    lf = reflow.scan(f.path, join=False).with_columns(line=line)
    # Literal pre-filter first (most lines of a /metrics page are other metrics and
    # histogram buckets), regexes only on the survivors.
    cheap = (
        (is_sample & line.str.contains_any(_spellings(known)))
        | line.str.starts_with("#")
        | line.str.starts_with("---")
        | (line.str.len_bytes() < 48)
    )
    lf = lf.filter(cheap).filter(is_sample | is_meta | is_eof | is_sep | is_pod | is_cap)
    g = line.str.extract_groups(sample_re_)
    kind = (
        pl.when(is_sample)
        .then(pl.lit("sample"))
        .when(is_meta)
        .then(pl.lit("meta"))
        .when(is_eof)
        .then(pl.lit("eof"))
        .when(is_pod)
        .then(pl.lit("pod"))
        .when(is_cap)
        .then(pl.lit("cap"))
        .otherwise(pl.lit("sep"))
    )
    sep_time = pl.coalesce(
        line.str.extract(SCRAPE_SEP_RE, 1),
        line.str.extract(DASH_SEP_RE, 1),
        pl.when(line.str.contains(BARE_TIME_RE)).then(line),
    ).str.strip_chars()
    rows = (
        lf.select(
            pl.col("n"),
            kind.alias("kind"),
            g.alias("g"),
            pl.when(is_meta).then(line.str.extract(meta_re_, 1) + line.str.slice(2, 4)).alias("meta_key"),
            pl.when(~is_sample & ~is_meta & ~is_pod & ~is_cap).then(sep_time).alias("sep_time"),
            pl.when(is_pod).then(line.str.extract(POD_RE, 1)).alias("pod"),
            pl.when(is_cap).then(line.str.extract(ANSWER_RE, 1).cast(pl.Float64, strict=False)).alias("answer_s"),
        )
        .unnest("g")
        .with_columns(name=_canonical_expr(pl.col("name")))
        .filter((pl.col("kind") != "sample") | pl.col("name").is_in(known))
        # The label text as exposed identifies the series (prometheus_client always
        # writes a series' labels in the same order).
        .with_columns(labels=pl.col("labels").fill_null(""))
        .collect()
        .sort("n")
    )
    fd = _FileData(file=f, fmt="text", samples=pl.DataFrame(schema=_sample_schema()))
    if rows.height == 0:
        return fd
    caps = rows.filter(pl.col("kind") == "cap")
    fd.recorded = caps.height > 0
    took = caps.get_column("answer_s").drop_nulls()
    fd.answer_s = float(took.max()) if took.len() else None  # type: ignore[arg-type]  # a float or None
    rows = rows.filter(pl.col("kind") != "cap").drop("answer_s")
    # Scrape numbering: explicit separators (a time line, ``---``, ``# EOF``) open a block and decide:
    # a block opened by one is one scrape, whatever it repeats (``curl a >> f; curl b >> f`` after
    # one ``# scrape`` line repeats every HELP/TYPE: one scrape of two servers). Only in the block
    # before the first separator (block 0: files without separators) does a repeat open the next
    # scrape: the repeat of a HELP/TYPE line, or, in a block without them (``grep`` kept the
    # samples only), the repeat of a series; a series whose sample carries its own timestamp is
    # another reading at its repeat (OpenMetrics writes a series' points one after another). A page
    # with HELP/TYPE lines writes them again with every scrape (prometheus_client writes both for
    # every family), so there an untimed series read again without them is a duplicate line of the
    # same scrape (a copy-paste, two exporters' lines), never a scrape of its own (it made an
    # untimed scrape, read as a counter reset). A series read twice in one scrape (another server
    # with the same labels and a second scrape without its separator look alike):
    # counters._combine keeps its largest value, with a note.
    rows = rows.with_columns(
        blk=pl.col("kind").is_in(["sep", "eof"]).cast(pl.Int32).cum_sum(),
        key=pl.when(pl.col("kind") == "sample")
        .then(pl.concat_str([pl.col("name"), pl.lit("{"), pl.col("labels"), pl.lit("}")]))
        .when(pl.col("kind") == "meta")
        .then(pl.col("meta_key")),
    )
    rows = rows.with_columns(_pod=pl.col("pod").forward_fill())  # a "# Pod:" header names the scrapes below it
    has_meta = (pl.col("kind") == "meta").any().over("blk")
    rows = rows.with_columns(
        occ=pl.when(
            pl.col("key").is_not_null()
            & (pl.col("blk") == 0)
            & ((pl.col("kind") == "meta") | ~has_meta | pl.col("ts").is_not_null())
        )
        .then(pl.int_range(pl.len()).over("blk", "key"))
        .otherwise(0)
    ).with_columns(rep=pl.col("occ").cum_max().over("blk"))
    seps = (
        rows.filter(pl.col("kind") == "sep")
        .group_by("blk")
        .agg(pl.col("sep_time").last())
        .filter(pl.col("sep_time").is_not_null() & (pl.col("sep_time") != ""))
    )
    samples = rows.filter(pl.col("kind") == "sample").with_columns(
        _sk=pl.col("blk").cast(pl.Int64) * 1_000_000 + pl.col("rep").cast(pl.Int64)
    )
    samples = samples.with_columns(scrape=(pl.col("_sk").rank("dense") - 1).cast(pl.Int32))
    first_of_blk = samples.filter(pl.col("rep") == 0).group_by("blk").agg(pl.col("scrape").first())
    sep_times = {
        r["scrape"]: r["sep_time"] for r in first_of_blk.join(seps, on="blk", how="inner").iter_rows(named=True)
    }
    samples = _judge_last_line(f, fd, samples)
    value = pl.col("value").cast(pl.Float64, strict=False)
    bad = samples.filter(value.is_null()).height
    if bad:
        fd.warnings.append(f"{bad} sample line(s) with an unreadable value were skipped")
    out = samples.filter(value.is_not_null()).select(
        pl.lit(f.file_id, pl.UInt16).alias("file_id"),
        pl.col("n").cast(pl.UInt32),
        pl.lit(None, pl.UInt32).alias("col"),
        pl.col("scrape"),
        pl.col("name"),
        pl.col("labels"),
        _label("engine").alias("engine"),
        _label("model_name").alias("model_name"),
        pl.coalesce(_label("instance"), _label("pod"), pl.col("_pod")).alias("instance"),
        _label("reason").alias("reason"),
        _label("le").alias("le"),
        value.alias("value"),
        _ts_to_us(pl.col("ts")).alias("ts_us"),
    )
    fd.samples = out
    fd.sep_times = sep_times
    fd.n_scrapes = int(out.get_column("scrape").max()) + 1 if out.height else 0  # type: ignore[arg-type]  # polars scalars are typed as every literal
    return fd


CUT = "ends in the middle of a line (truncated, or still being written)"


def _judge_last_line(f: InputFile, fd: _FileData, samples: pl.DataFrame) -> pl.DataFrame:
    """A page writes each line whole with its line end: a last line without one was cut, and where is
    not known. Its sample's value (or timestamp, the last number on it) may have lost digits (``35``
    cut after its ``3`` reads ``3``, a counter reset that never was): no reading, unless more of the
    line follows that number (an exemplar, a space), which makes it whole. Said in one warning (the
    kind judges its last line: sniffing adds none)."""
    if not ends_mid_line(str(f.path)):
        return samples
    # (a slice of this scan trips polars' CSV schema check: the largest line number instead)
    last = reflow.scan(f.path, join=False).filter(pl.col("n") == pl.col("n").max()).collect()
    if last.height == 0:
        return samples
    n, raw = int(last.item(0, "n")), str(last.item(0, "line"))
    at = samples.filter(pl.col("n") == n)
    shown = raw.strip()[:80]
    if at.height == 0:
        fd.warnings.append(f"{CUT}: its last line (line {n}) holds no sample preemptlog reads")
        return samples
    r = at.row(0, named=True)
    tail, what = (r["ts"], "timestamp") if r["ts"] else (r["value"], "value")
    if not raw.rstrip("\r").endswith(str(tail)):
        fd.warnings.append(f"{CUT}: its last line (line {n}) was read: more of it follows its {what}, so it is whole")
        return samples
    fd.warnings.append(
        f"{CUT}: its last line (line {n}, {shown!r}) is skipped, no reading: it ends in its {what}, which may "
        "have lost digits where the line was cut (35 cut after its 3 reads 3), and nothing on it says whether it did"
    )
    return samples.filter(pl.col("n") != n)


def _read_text(f: InputFile) -> str:
    import gzip

    with open(f.path, "rb") as fh:
        data = fh.read()
    if f.compression == "gzip":
        data = gzip.decompress(data)
    elif f.compression == "zstd":
        import zstandard

        data = zstandard.ZstdDecompressor().stream_reader(data).read()
    return data.decode("utf-8", "replace")
