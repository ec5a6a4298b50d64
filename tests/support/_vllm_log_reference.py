"""Frozen copy of the records scan before issue 18 (the reference of tests/sources/test_scan_equivalence.py).

Do not edit: the equivalence test asserts that ``preemptlog.sources.vllm_log.read``
returns the same records frame, column by column, as this copy of the
implementation it replaced. Delete it once the new scan has been released.
One edit since: the token list's tail is cut by ``vllm_log._cut_at`` (polars 2.2 made
``str.find`` count characters; the byte cut here read one token from an empty list).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from preemptlog.sources.vllm_log import _cut_at, all_markers, all_verify

if TYPE_CHECKING:
    import polars as pl


# Hot kinds: numerous (one per request). Their fields are extracted inside the
# query; no text is kept.
HOT_KINDS = ("req_received", "req_added", "req_finished", "req_aborted", "req_details")

ANSI_RE = r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"
HEAD_CHARS = 512

# vLLM header, unanchored so that VLLM_LOGGING_PREFIX / process prefixes may precede it.
VLLM_HEADER_RE = (
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+"
    r"(?:\([^()]*pid=\d+[^()]*\)\s+)?"
    r"(?P<mo>\d\d)-(?P<dd>\d\d) (?P<hh>\d\d):(?P<mi>\d\d):(?P<ss>\d\d)"
    r"(?:[.,](?P<hfrac>\d{1,9}))?\s+"
    r"\[?(?P<src>[^\s\[\]]+?):(?P<srcline>\d+)\]"
)
# Full date at the start of the line, after optional kubectl --prefix and compose "svc | ".
FULL_TS_RE = (
    r"^(?:\[[^\]]*\]\s*)?(?:[A-Za-z0-9][\w.-]*\s+\|\s*)?\[?"
    r"(?P<fdate>\d{4}-\d\d-\d\d)[T ](?P<ftime>\d\d:\d\d:\d\d)"
    r"(?:[.,](?P<ffrac>\d{1,9}))?(?P<fzone>Z|[+-]\d\d:?\d\d)?"
)
# Leading date shapes the fast path does not know: handed to python-dateutil.
FALLBACK_TS_RE = (
    r"^(?:[A-Za-z0-9][\w.-]*\s+\|\s*)?\W{0,3}"
    r"(?P<fb>(?:[A-Z][a-z]{2},?\s+\d{1,2}(?:,?\s+\d{4})?|\d{1,4}[/.]\d{1,2}[/.]\d{1,4}|\d{8})"
    r"[ T,]+\d{1,2}:\d\d(?::\d\d)?(?:[.,]\d{1,9})?(?:\s?(?:Z|[+-]\d\d:?\d\d|UTC))?)"
)
PROC_RE = r"\(([A-Za-z_][^()]*?pid=\d+(?:,\s*ip=[0-9A-Fa-f.:]+)?)\)"
COMPOSE_RE = r"^([A-Za-z0-9][\w.-]*)\s+\|\s"

# Hot-kind field extraction.
REQ_ID_RE = r"(?:(?:Received|Added|Finished|Aborted) request(?:\(s\))?|Request) ([^\s:,]+(?:,[^\s:,]+)*)"
MAX_TOKENS_RE = r"max_tokens=(\d+)"
PROMPT_IDS_START = ", prompt_token_ids: ["
# The list ends where the fixed tail of the line begins (every version's wording).
PROMPT_IDS_END_RE = r"\](?:, prompt_embeds shape: [^,]*)?(?:, lora_request: |\.$)"


# Record schema: column -> polars dtype name. Asserted by the tests.
RECORD_SCHEMA = {
    "file_id": "UInt16",
    "n": "UInt32",
    "seg": "UInt32",
    "kind": "String",
    "level": "String",
    "proc": "String",
    "compose": "String",
    "mo": "Int8",
    "dd": "Int8",
    "hh": "Int8",
    "mi": "Int8",
    "ss": "Int8",
    "hfrac": "String",
    "fdate": "String",
    "ftime": "String",
    "ffrac": "String",
    "fzone": "String",
    "fb": "String",
    "text": "String",
    "req_id": "String",
    "max_tokens": "Int64",
    "prompt_tokens": "Int64",
}


def marker_regex(literals: list[str]) -> str:
    import polars as pl

    return "(?-u)(" + "|".join(pl.escape_regex(m) for m in literals) + ")"


def scan(path: str, file_id: int) -> pl.LazyFrame:
    """Lazy records frame for one log file (see RECORD_SCHEMA).

    Measured on a 1 GB V0 log (148 k lines, 99 k kept; request lines of
    ~21 kB make up 99 % of the bytes), see docs/performance.md:

    - classifying with ``replace`` / ``replace_strict`` inside the query makes
      polars fall back to the in-memory engine for the whole pipeline (1.3 GB
      peak instead of 0.4 GB), so the query yields the leftmost marker as an
      ``Enum`` and :func:`finish` maps it to the record kind on the (small)
      collected frame;
    - the leftmost marker comes from one regex alternation (:func:`marker_regex`)
      that stops at the first match: ``extract_many`` found every match in the
      whole line, 12x slower on request lines (their prompts and token ids are
      scanned for nothing);
    - every expensive step on hot (request) rows is computed once, in its own
      ``with_columns``: inside one ``when/then`` chain polars evaluated the
      token-list search three times;
    - counting the prompt token ids (~90 M commas per GB) is the largest cost
      left after reading the file; ``(?-u),`` counts ~30 % faster than
      ``literal=True``.
    """
    import polars as pl

    from preemptlog.inputs.textio import split_cr

    markers = all_markers()
    literals = list(dict.fromkeys(m for m, _ in markers))
    kinds = {}
    for marker, kind in markers:
        kinds.setdefault(marker, kind)
    hot_markers = [m for m in literals if kinds[m] in HOT_KINDS]
    marker_enum = pl.Enum(literals)
    marker_rx = marker_regex(literals)

    # Literal pre-filter on the raw line (Teddy/SIMD prefilter of the regex crate).
    # The same line source as the scan under test: the text-level repair stage (reflow.py) runs
    # before the parse, and the parse is what this reference freezes.
    from preemptlog.inputs import reflow

    lf = reflow.scan(path).filter(pl.col("line").str.contains(marker_rx))
    lf = split_cr(lf)
    # Leftmost marker; ties go to the earlier marker in the list.
    first = pl.col("line").str.extract(marker_rx, 1)
    lf = lf.with_columns(marker=first.cast(marker_enum)).filter(pl.col("marker").is_not_null())

    head = pl.col("line").str.head(HEAD_CHARS).str.replace_all(ANSI_RE, "")  # head(): 2x faster than slice(0, n)
    lf = lf.with_columns(head=head, _hot=pl.col("marker").is_in(hot_markers))
    is_json = pl.col("head").str.starts_with("{")
    json_line = pl.when(is_json).then(pl.col("line"))
    lf = lf.with_columns(
        hdr=pl.col("head").str.extract_groups(VLLM_HEADER_RE),
        full=pl.col("head").str.extract_groups(FULL_TS_RE),
        fb=pl.col("head").str.extract(FALLBACK_TS_RE, 1),
        proc=pl.col("head").str.extract(PROC_RE, 1),
        compose=pl.col("head").str.extract(COMPOSE_RE, 1),
        j_asctime=json_line.str.json_path_match("$.asctime"),
        j_level=json_line.str.json_path_match("$.levelname"),
        j_msg=json_line.str.json_path_match("$.message"),
        j_proc=pl.concat_str(
            [
                json_line.str.json_path_match("$.processName"),
                pl.lit(" pid="),
                json_line.str.json_path_match("$.process"),
            ]
        ),
    ).unnest("hdr", "full")
    j = pl.col("j_asctime").str.extract_groups(
        r"^(?P<jdate>\d{4}-\d\d-\d\d)[T ](?P<jtime>\d\d:\d\d:\d\d)(?:[.,](?P<jfrac>\d+))?(?P<jzone>Z|[+-]\d\d:?\d\d)?"
    )
    lf = lf.with_columns(j=j).unnest("j")

    hot = pl.col("_hot")
    # Rare kinds keep their text: ANSI stripped, JSON decoded, and copied out of
    # the read buffer (concat_str) so the file's bytes are not kept alive.
    text_src = pl.when(is_json & pl.col("j_msg").is_not_null()).then(pl.col("j_msg")).otherwise(pl.col("line"))
    text = pl.when(~hot).then(text_src).str.replace_all(ANSI_RE, "")
    text = pl.concat_str([pl.lit("\x00"), text]).str.slice(1)

    hot_line = pl.when(hot).then(pl.col("line"))
    # Count prompt_token_ids: the commas of the line's tail after the list's
    # start, minus those after its end. Offsets from str.find are in bytes, so
    # the tail is cut with bin.slice (str.slice counts characters and went wrong
    # after a non-ASCII prompt). Measured on the 99 k survivors of a 1 GB log
    # (single thread, docs/performance.md): cutting the tail 314 ms, finding the
    # end 69 ms, counting its 94 M commas 706 ms -- the largest cost after
    # reading the file; cutting the list out again before counting: +205 ms.
    ids_at = hot_line.str.find(PROMPT_IDS_START, literal=True) + len(PROMPT_IDS_START)
    lf = lf.with_columns(_tail=_cut_at(hot_line, ids_at))
    lf = lf.with_columns(_ids_len=pl.col("_tail").str.find(PROMPT_IDS_END_RE))
    after = _cut_at(pl.col("_tail"), pl.col("_ids_len"))
    commas = pl.col("_tail").str.count_matches("(?-u),") - after.str.count_matches("(?-u),")
    ids_len = pl.col("_ids_len")
    prompt_tokens = pl.when(ids_len == 0).then(pl.lit(0, pl.Int64)).when(ids_len > 0).then(commas.cast(pl.Int64) + 1)

    def i8(c: str) -> pl.Expr:
        return pl.col(c).cast(pl.Int8, strict=False)

    return lf.select(
        pl.lit(file_id, pl.UInt16).alias("file_id"),
        pl.col("n"),
        pl.col("seg"),
        pl.col("marker"),
        pl.coalesce("level", "j_level").alias("level"),
        pl.coalesce("proc", "j_proc").alias("proc"),
        pl.col("compose"),
        i8("mo").alias("mo"),
        i8("dd").alias("dd"),
        i8("hh").alias("hh"),
        i8("mi").alias("mi"),
        i8("ss").alias("ss"),
        pl.col("hfrac"),
        pl.coalesce("fdate", "jdate").alias("fdate"),
        pl.coalesce("ftime", "jtime").alias("ftime"),
        pl.coalesce("ffrac", "jfrac").alias("ffrac"),
        pl.coalesce("fzone", "jzone").alias("fzone"),
        pl.col("fb"),
        text.alias("text"),
        hot_line.str.extract(REQ_ID_RE, 1).str.strip_chars_end(".:").alias("req_id"),
        hot_line.str.extract(MAX_TOKENS_RE, 1).cast(pl.Int64, strict=False).alias("max_tokens"),
        prompt_tokens.alias("prompt_tokens"),
    )


def finish(df: pl.DataFrame) -> pl.DataFrame:
    """Collected scan output -> records: marker -> kind, kinds confirmed by their regex."""
    import polars as pl

    kinds = {}
    for marker, kind in all_markers():
        kinds.setdefault(marker, kind)
    df = df.with_columns(
        kind=pl.col("marker").cast(pl.String).replace_strict(kinds, default=None, return_dtype=pl.String)
    ).drop("marker")
    verify = None
    for kind, rx in all_verify().items():
        cond = (pl.col("kind") != kind) | pl.col("text").str.contains(rx)
        verify = cond if verify is None else verify & cond
    if verify is not None:
        df = df.filter(verify.fill_null(True))
    df = df.select(list(RECORD_SCHEMA))
    return compact(df)


def compact(df: pl.DataFrame) -> pl.DataFrame:
    """One chunk per column, and all-null columns stored as a scalar.

    Memory: the streaming collect yields one chunk per morsel (3 000 at 4 GB),
    and an all-null string column still costs 16 bytes per row in every later
    gather (sort, filter, join); most logs leave 6-9 of the 13 string columns
    null (no JSON, no ISO prefix, no process prefix). Measured at 400 k records:
    the timebase went from +186 MB to +85 MB.
    """
    import polars as pl

    nulls = [name for name in df.columns if df.height and df.get_column(name).null_count() == df.height]
    if nulls:
        df = df.with_columns(pl.lit(None, df.schema[name]).alias(name) for name in nulls)
    return df.rechunk()


def read(path: str, file_id: int) -> pl.DataFrame:
    """Scan, collect and finish one log file."""
    return finish(collect(scan(path, file_id)))


def collect(lf: pl.LazyFrame) -> pl.DataFrame:
    """Collect a scan through a temporary Arrow IPC file (streaming sink).

    Memory: ``collect()`` gathers one small chunk per morsel, and those
    long-lived fragments sit between the freed read buffers, so the allocator
    cannot give the pages back (RSS after the scan of a 4 GB log: 388 MB
    against 278 MB through the sink; peak of the whole analysis 470-497 MB
    against 389-406 MB; same CPU time, the file is ~8 MB per GB of log). The
    sink keeps row order. If the spill file cannot be written, or the sink
    fails for any reason, the query is collected in memory: an error of the
    input itself is raised again from there.
    """
    import os
    import tempfile

    import polars as pl

    try:
        fd, tmp = tempfile.mkstemp(prefix="preemptlog-records.", suffix=".arrow")
        os.close(fd)
    except OSError:
        return lf.collect()
    try:
        try:
            lf.sink_ipc(tmp)
            df = pl.read_ipc(tmp)
        except Exception:
            return lf.collect()
        return df
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass


# vllm/requests.parse before issue 18
_REQUESTS_COLUMNS = [
    "time",
    "stream",
    "seq",
    "action",
    "request_id",
    "internal_id",
    "max_tokens",
    "prompt_tokens",
    "source",
    "line",
]
_ACTION = {
    "req_received": "received",
    "req_added": "added",
    "req_finished": "finished",
    "req_aborted": "aborted",
    "req_details": "details",  # 0.11.1+ DEBUG "Request X details: prompt: ..., prompt_token_ids: [...]"
}
_SUFFIX_RE = r"-[0-9A-Za-z]{8}$"


def requests_parse(records: pl.DataFrame) -> pl.DataFrame:
    import polars as pl

    # Narrow first: an eager filter copies every column of the records frame
    # (measured +80 MB at 400 k records), and request lines are most of them.
    narrow = records.select("time", "stream", "seq", "kind", "req_id", "max_tokens", "prompt_tokens", "source", "n")
    rows = (
        narrow.filter(pl.col("kind").is_in(list(_ACTION)))
        .select(
            "time",
            "stream",
            "seq",
            pl.col("kind").replace_strict(_ACTION, return_dtype=pl.String).alias("action"),
            pl.col("req_id").str.split(",").alias("request_id"),
            "max_tokens",
            "prompt_tokens",
            "source",
            pl.col("n").alias("line"),
        )
        .explode("request_id")
    )
    rows = rows.with_columns(pl.col("request_id").str.strip_chars(" .:"))
    received = rows.filter(pl.col("action") == "received").select(pl.col("request_id").alias("_base")).unique()
    base = pl.col("request_id").str.replace(_SUFFIX_RE, "")
    rows = rows.with_columns(_base=pl.when(pl.col("action") != "received").then(base))
    rows = rows.join(received.with_columns(_known=pl.lit(True)), on="_base", how="left")
    paired = pl.col("_known").fill_null(False) & (pl.col("_base") != pl.col("request_id"))
    rows = rows.with_columns(
        internal_id=pl.when(paired).then(pl.col("request_id")),
        request_id=pl.when(paired).then(pl.col("_base")).otherwise(pl.col("request_id")),
    )
    # 0.11.1+: the prompt token count is on the DEBUG details line; give it to the received row too.
    details = (
        rows.filter((pl.col("action") == "details") & pl.col("prompt_tokens").is_not_null())
        .group_by("request_id")
        .agg(pl.col("prompt_tokens").first().alias("_pt"))
    )
    if details.height:
        rows = rows.join(details, on="request_id", how="left").with_columns(
            prompt_tokens=pl.coalesce("prompt_tokens", "_pt")
        )
    return rows.select(list(_REQUESTS_COLUMNS)).sort("seq")
