"""Per-request lines: Received / Finished / Aborted (Added and details lines folded in).

Schema (``REQUESTS_SCHEMA``): one row per request id per ``Received``,
``Finished`` or ``Aborted`` line (the rows the analysis uses: arrivals, prompt
and output lengths, latencies). ``Added request`` lines carry nothing the
analysis uses and are left out (a third of the request lines of a V1 log);
the DEBUG ``Request X details`` lines give their prompt count to the rows of
their request. ``request_id`` is the external id (as received); an id
``<external>-<8 chars>`` (vLLM 0.14+ internal ids) is paired back to its
``Received request`` id when that id was seen (``internal_id`` keeps it).
``prompt_tokens`` counts ``prompt_token_ids`` (V0 and V1 up to 0.11.0 on the
Received line; 0.11.1+ on the DEBUG ``Request X details`` line; a
``--max-log-len`` cut makes it a lower bound); no vLLM version logs a prompt
length number.
"""

from __future__ import annotations

import polars as pl

REQUESTS_SCHEMA = {
    "time": "Datetime(time_unit='us', time_zone='UTC')",
    "stream": "Int32",
    "seq": "UInt32",
    "action": "Categorical",  # 4 bytes a row (a String cost 16); compares with strings as before
    "request_id": "String",
    "internal_id": "String",
    "max_tokens": "Int64",
    "prompt_tokens": "Int64",
    "source": "String",
    "line": "UInt32",
}

_ACTION = {
    "req_received": "received",
    "req_added": "added",
    "req_finished": "finished",
    "req_aborted": "aborted",
    "req_details": "details",  # 0.11.1+ DEBUG "Request X details: prompt: ..., prompt_token_ids: [...]"
}
_KEPT = ("received", "finished", "aborted")  # the actions with rows in the output
_SUFFIX_RE = r"-[0-9A-Za-z]{8}$"


_COLS = ["time", "stream", "seq", "kind", "req_id", "max_tokens", "prompt_tokens", "source", "n"]


def _frames(records: pl.DataFrame, hot: list[pl.DataFrame] | None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(Received / Finished / Aborted rows, details rows), columns ``_COLS``, each in line order.

    Files read with request-line runs (sources/vllm_log.py, issue 18) give their request lines
    in ``hot`` (vllm_log.HOT_ROWS frames, one of Received / Finished / Aborted lines and one of
    details lines per file): each line takes its run's time, stream and source, and the run's
    ``seq`` plus its rank in the run, i.e. the values its own records row had. Memory: the
    two kinds of rows never share a frame, so no filter copies the (large) first one.
    """
    from ..sources.vllm_log import HOT_KIND_ENUM

    main_kinds = [k for k, a in _ACTION.items() if a in _KEPT]
    det_kinds = [k for k, a in _ACTION.items() if a == "details"]
    own = records
    if hot and "rq_count" in records.columns:
        own = records.filter(pl.col("rq_count").is_null())
    narrow = own.select(_COLS)  # narrow first: an eager filter copies every column
    own_main = narrow.filter(pl.col("kind").is_in(main_kinds))
    own_det = narrow.filter(pl.col("kind").is_in(det_kinds))
    if not hot or "rq_run" not in records.columns:
        return own_main, own_det
    runs = records.filter(pl.col("rq_run").is_not_null()).select("file_id", "rq_run", "time", "stream", "seq", "source")
    mains: list[pl.DataFrame] = []
    dets: list[pl.DataFrame] = []
    while hot:  # consumed: each frame is freed once its rows are made
        h = hot.pop(0)
        if h.height == 0:
            continue
        fid = h.get_column("file_id")[0]
        rf = runs.filter(pl.col("file_id") == fid).sort("rq_run")
        # Every run of the file has its records row (finish() drops no request row): rq_run indexes them.
        assert rf.get_column("rq_run").equals(pl.int_range(rf.height, dtype=pl.UInt32, eager=True), check_names=False)
        at = h.get_column("rq_run")
        cols: dict[str, pl.Expr | pl.Series] = {}
        for name in ("time", "stream", "source"):
            src = rf.get_column(name)
            # A constant (one stream, one file) stays a scalar: 16 bytes a row saved for a name.
            cols[name] = pl.lit(src[0], src.dtype).alias(name) if src.n_unique() == 1 else src.gather(at).alias(name)
        seq = (rf.get_column("seq").gather(at) + h.get_column("rq_rank")).alias("seq")
        part = h.select(
            cols["time"], cols["stream"], seq, "kind", "req_id", "max_tokens", "prompt_tokens", cols["source"], "n"
        )
        del h
        (dets if part.get_column("kind")[0] in det_kinds else mains).append(part)

    def merged(own_part: pl.DataFrame, parts: list[pl.DataFrame]) -> pl.DataFrame:
        if own_part.height:
            parts = [own_part.with_columns(pl.col("kind").cast(HOT_KIND_ENUM())), *parts]
        if not parts:
            return own_part
        both = parts[0] if len(parts) == 1 else pl.concat(parts, how="vertical")
        order = both.select(pl.arg_sort_by(["stream", "seq"], maintain_order=True).alias("o")).get_column("o")
        if not order.equals(pl.int_range(both.height, dtype=pl.UInt32, eager=True).cast(order.dtype).alias("o")):
            both = both[order]
        return both

    return merged(own_main, mains), merged(own_det, dets)


def _constants(df: pl.DataFrame, names: tuple[str, ...]) -> pl.DataFrame:
    """Columns with one value on every row (or none) stored as a scalar (memory, issue 18)."""
    if df.height == 0:
        return df
    out = []
    for name in names:
        col = df.get_column(name)
        if col.null_count() == col.len():
            out.append(pl.lit(None, col.dtype).alias(name))
        elif col.null_count() == 0 and col.n_unique() == 1:
            out.append(pl.lit(col[0], col.dtype).alias(name))
    return df.with_columns(out) if out else df


def parse(records: pl.DataFrame, hot: list[pl.DataFrame] | None = None) -> pl.DataFrame:
    """Request rows, one per request id per line, in line order.

    Memory and time (issue 18; a request-heavy 1 GB V1 log has 1.75 M request
    lines): only lines that name several ids (``Aborted request(s) a,b``) are
    split and exploded (a list column for every row cost ~100 MB at 1 GB);
    ids are stripped only when one needs it; internal ids are looked up only
    for the rows that can carry one; the details lookup joins a single key
    column, keeping the left order (``maintain_order="left"``), instead of
    joins that gathered every column twice.
    """
    # Narrow first: an eager filter copies every column of the records frame
    # (measured +80 MB at 400 k records), and request lines are most of them.
    main, det = _frames(records, hot)

    def prepared(narrow: pl.DataFrame) -> pl.DataFrame:
        rows = narrow.select(
            "time",
            "stream",
            "seq",
            pl.col("kind").cast(pl.String).replace_strict(_ACTION, return_dtype=pl.String).alias("action"),
            pl.col("req_id").alias("request_id"),
            "max_tokens",
            "prompt_tokens",
            "source",
            pl.col("n").alias("line"),
        )
        multi = pl.col("request_id").str.contains(",", literal=True).fill_null(False)
        if rows.select(multi.any()).item():
            split = rows.filter(multi).with_columns(pl.col("request_id").str.split(",")).explode("request_id")
            rows = pl.concat([rows.filter(~multi), split]).sort("seq", maintain_order=True)
        # The scan keeps no space, colon or trailing dot in an id: strip only what a split left.
        edge = pl.col("request_id").str.contains(r"^[ .:]|[ .:]$").fill_null(False)
        if rows.select(edge.any()).item():
            rows = rows.with_columns(pl.col("request_id").str.strip_chars(" .:"))
        return rows

    main = prepared(main)
    det = prepared(det)
    # Internal ids (``<external>-<8 chars>``, 0.14+): only non-received rows whose id has that
    # suffix are candidates, and the received ids are probed against the (few) candidates'
    # bases, not the other way round: no hash set of every received id is built.
    cand = ((pl.col("action") != "received") & pl.col("request_id").str.contains(_SUFFIX_RE)).fill_null(False)
    base = pl.when(cand).then(pl.col("request_id").str.replace(_SUFFIX_RE, ""))
    bases: dict[str, pl.Series] = {}
    for name, rows in (("main", main), ("det", det)):
        if rows.height and rows.select(cand.any()).item():
            bases[name] = rows.select(base.alias("_base")).get_column("_base")
    if bases:
        wanted = pl.concat([b.drop_nulls() for b in bases.values()]).unique()
        recv = main.filter(pl.col("action") == "received").get_column("request_id")
        seen = recv.filter(recv.is_in(wanted.implode())).unique()

    def paired_ids(rows: pl.DataFrame, name: str) -> pl.DataFrame:
        b = bases.get(name)
        paired = (
            (b.is_in(seen.implode()) & (b != rows.get_column("request_id"))).fill_null(False) if b is not None else None
        )
        if paired is not None and paired.any():
            return rows.with_columns(
                internal_id=pl.when(paired).then(pl.col("request_id")),
                request_id=pl.when(paired).then(b).otherwise(pl.col("request_id")),
            )
        return rows.with_columns(internal_id=pl.lit(None, pl.String))

    rows = paired_ids(main, "main")
    det = paired_ids(det, "det")
    del main
    # 0.11.1+: the prompt token count is on the DEBUG details line; give it to the received row too.
    details = (
        det.filter(pl.col("prompt_tokens").is_not_null())
        .group_by("request_id", maintain_order=True)
        .agg(pl.col("prompt_tokens").first().alias("_pt"))
    )
    del det
    if details.height:
        pt = (
            rows.select("request_id")
            .join(details, on="request_id", how="left", maintain_order="left")
            .get_column("_pt")
        )
        rows = rows.with_columns(prompt_tokens=pl.coalesce(pl.col("prompt_tokens"), pt))
    rows = rows.select(list(REQUESTS_SCHEMA)).with_columns(pl.col("action").cast(pl.Categorical))
    return _constants(rows, ("stream", "internal_id", "source"))
