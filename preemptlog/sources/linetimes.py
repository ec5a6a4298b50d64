"""Times for untimed log records from the lines the literal pre-filter skipped (issue 13, rule 1).

A bare ``print()`` hook line (``[SCHEDULER]``, ``Req-``, ``[BATCH]``) has no
timestamp. It takes the time of the nearest earlier line of the same stream
that has *any* timestamp, whatever its kind (a ``chat_utils`` INFO line, a
DEBUG ``EngineCore loop active.`` line, an ISO-prefixed uvicorn line), else of
the nearest later one; only when the stream has no timestamp at all does it
stay without a time (its order is kept).

Most such lines are not records (the pre-filter drops them), so when a file
has untimed records a second pass reads it again and keeps, per gap between
two consecutive records, only the last timestamped line before an untimed
record and the first one after it: at most two lines per gap, so memory is
bounded by the records, not by the file. The pass runs only for files with
untimed records. Its rows are records of kind ``time_only`` (the header
fields only, no text); the timebase resolves them like any record, and they
are dropped once every record has its time.
"""

from __future__ import annotations

import polars as pl

from ..inputs.textio import scan_lines
from .vllm_log import ANSI_RE, FALLBACK_TS_RE, FULL_TS_RE, RECORD_SCHEMA, VLLM_HEADER_RE

KIND = "time_only"
HEAD = 200
# Cheap "has a timestamp" test on a line's head: a vLLM header date, an ISO / RFC 3339
# date-time (also JSON asctime), a syslog date, a slashed date.
HAS_TS_RE = (
    r"(?-u)(?:\d\d-\d\d \d\d:\d\d:\d\d|\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d|"
    r"\b[A-Z][a-z]{2},? +\d{1,2},? +(?:\d{4} +)?\d{1,2}:\d\d:\d\d|\d{1,4}/\d{1,2}/\d{1,4}[ T,]+\d{1,2}:\d\d)"
)


def untimed(records: pl.DataFrame) -> pl.Expr:
    """Records whose own line carries no timestamp the timebase could read."""
    return pl.col("mo").is_null() & pl.col("fdate").is_null() & pl.col("fb").is_null()


def time_lines(path: str, file_id: int, records: pl.DataFrame) -> pl.DataFrame | None:
    """Records of kind ``time_only`` for one file's untimed records (see the module doc).

    ``records`` are the file's records (columns n, mo, fdate, fb). Returns None
    when none of them is untimed.
    """

    per_line = records.group_by("n").agg(untimed(records).all().alias("_u"))
    if "n_last" in records.columns:
        # A request-line run (vllm_log.py, issue 18) stands for the records from its first line
        # to ``n_last``, all timed: its last line bounds a gap like its first.
        ends = records.filter(pl.col("n_last").is_not_null() & (pl.col("n_last") != pl.col("n")))
        if ends.height:
            per_line = (
                pl.concat([per_line, ends.select(pl.col("n_last").alias("n"), pl.lit(False).alias("_u"))])
                .group_by("n")
                .agg(pl.col("_u").all())
            )
    per_line = per_line.sort("n")
    if per_line.height == 0 or not per_line.get_column("_u").any():
        return None
    breaks = per_line.get_column("n").cast(pl.UInt32)
    flags = per_line.get_column("_u")
    # A line in gap g lies between record g-1 and record g. The last timed line of gap g
    # matters when record g is untimed; the first one when record g-1 is.
    want_last = pl.Series(flags.to_list() + [False], dtype=pl.Boolean)
    want_first = pl.Series([False] + flags.to_list(), dtype=pl.Boolean)
    lf = scan_lines(path).with_columns(head=pl.col("line").str.head(HEAD))
    lf = lf.filter(pl.col("head").str.contains(HAS_TS_RE))
    lf = lf.with_columns(_g=pl.lit(breaks).search_sorted(pl.col("n"), side="left"))
    lf = lf.filter(~pl.col("n").is_in(breaks.implode()))
    lf = lf.filter(pl.lit(want_last).gather(pl.col("_g")) | pl.lit(want_first).gather(pl.col("_g")))
    picked = (
        lf.group_by("_g")
        .agg(
            pl.col("n").first().alias("_n0"),
            pl.col("head").first().alias("_h0"),
            pl.col("n").last().alias("_n1"),
            pl.col("head").last().alias("_h1"),
        )
        .collect()
    )
    if picked.height == 0:
        return None
    g = picked.get_column("_g")
    firsts = picked.filter(want_first.gather(g)).select(pl.col("_n0").alias("n"), pl.col("_h0").alias("head"))
    lasts = picked.filter(want_last.gather(g)).select(pl.col("_n1").alias("n"), pl.col("_h1").alias("head"))
    rows = pl.concat([firsts, lasts]).unique("n").sort("n")
    head = pl.col("head").str.replace_all(ANSI_RE, "")
    is_json = head.str.starts_with("{")
    j = (
        pl.when(is_json)
        .then(head)
        .str.extract_groups(
            r"\"asctime\":\s*\"(?P<jdate>\d{4}-\d\d-\d\d)[T ](?P<jtime>\d\d:\d\d:\d\d)(?:[.,](?P<jfrac>\d+))?"
            r"(?P<jzone>Z|[+-]\d\d:?\d\d)?"
        )
    )
    out = (
        rows.with_columns(head=head)
        .with_columns(
            hdr=pl.col("head").str.extract_groups(VLLM_HEADER_RE),
            full=pl.col("head").str.extract_groups(FULL_TS_RE),
            j=j,
            fb=pl.col("head").str.extract(FALLBACK_TS_RE, 1),
        )
        .unnest("hdr", "full", "j")
    )
    i8 = {c: pl.col(c).cast(pl.Int8, strict=False) for c in ("mo", "dd", "hh", "mi", "ss")}
    out = out.select(
        pl.lit(file_id, pl.UInt16).alias("file_id"),
        pl.col("n").cast(pl.UInt32),
        pl.lit(0, pl.UInt32).alias("seg"),
        pl.lit(KIND).alias("kind"),
        *[v.alias(k) for k, v in i8.items()],
        "hfrac",
        pl.coalesce("fdate", "jdate").alias("fdate"),
        pl.coalesce("ftime", "jtime").alias("ftime"),
        pl.coalesce("ffrac", "jfrac").alias("ffrac"),
        pl.coalesce("fzone", "jzone").alias("fzone"),
        "fb",
    )
    cols = []
    for name, dtype in RECORD_SCHEMA.items():
        cols.append(
            pl.col(name).cast(getattr(pl, dtype))
            if name in out.columns
            else pl.lit(None, getattr(pl, dtype)).alias(name)
        )
    return out.select(cols)
