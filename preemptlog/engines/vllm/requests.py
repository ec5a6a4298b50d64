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

Large logs (issue 18): a file with many Received lines is *folded*
(:func:`parse_with_stats`): its request rows stay in its spill file, the counts the
analysis reads of every request line (:class:`RequestStats`: distinct requests, arrivals
per 10 s, the prompt-length and max_tokens distributions, the sources) are made in the
stream, and the frame holds only the rows the analysis names by id. Readers take the
counts from :func:`stats_of`, never from the frame's height.
"""

from __future__ import annotations

import math
import os
import tempfile
from typing import Any

import polars as pl

from ...model.requests import RequestStats
from ...model.requests import incident_requests as incident_requests  # re-exported (moved to model/)
from ...model.requests import stats_of as stats_of
from ...sources.vllm_log import HOT_KIND_ENUM, HotRows

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


def _run_parts(
    records: pl.DataFrame, hot: list[HotRows], kinds: list[str] | None = None
) -> list[tuple[HotRows, pl.LazyFrame]]:
    """Each file's per-request rows (read with runs) with the columns ``_COLS``: each line takes
    its run's time, stream and source, and the run's ``seq`` plus its rank in the run, i.e. the
    values its own records row had. Lazy: a folded file's rows stay in its spill file. ``kinds``:
    only the rows of those kinds (HotRows.of_kinds)."""
    if not hot or "rq_run" not in records.columns:
        return []
    runs = records.filter(pl.col("rq_run").is_not_null()).select("file_id", "rq_run", "time", "stream", "seq", "source")
    out = []
    for h in hot:
        if h.height == 0:
            continue
        rf = runs.filter(pl.col("file_id") == h.file_id).sort("rq_run")
        # Every run of the file has its records row (finish() drops no request row): rq_run indexes them.
        assert rf.get_column("rq_run").equals(pl.int_range(rf.height, dtype=pl.UInt32, eager=True), check_names=False)
        cols: dict[str, pl.Expr] = {}
        for name in ("time", "stream", "source"):
            src = rf.get_column(name)
            # A constant (one stream, one file) stays a scalar: 16 bytes a row saved for a name.
            cols[name] = (
                pl.lit(src[0], src.dtype).alias(name)
                if src.n_unique() == 1
                else pl.lit(src).gather(pl.col("rq_run")).alias(name)
            )
        seq = (pl.lit(rf.get_column("seq")).gather(pl.col("rq_run")) + pl.col("rq_rank")).alias("seq")
        out.append(
            (
                h,
                (h.rows if kinds is None else h.of_kinds(kinds)).select(
                    cols["time"],
                    cols["stream"],
                    seq,
                    "kind",
                    "req_id",
                    "max_tokens",
                    "prompt_tokens",
                    cols["source"],
                    "n",
                ),
            )
        )
    return out


def _own_rows(records: pl.DataFrame, hot: list[HotRows] | None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The request lines that are records rows of their own (files read without runs)."""
    main_kinds = [k for k, a in _ACTION.items() if a in _KEPT]
    det_kinds = [k for k, a in _ACTION.items() if a == "details"]
    own = records
    if hot and "rq_count" in records.columns:
        own = records.filter(pl.col("rq_count").is_null())
    narrow = own.select(_COLS)  # narrow first: an eager filter copies every column
    return narrow.filter(pl.col("kind").is_in(main_kinds)), narrow.filter(pl.col("kind").is_in(det_kinds))


def _frames(records: pl.DataFrame, hot: list[HotRows] | None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(Received / Finished / Aborted rows, details rows), columns ``_COLS``, each in line order.

    Files read with request-line runs (sources/vllm_log.py, issue 18) give their request lines
    in ``hot`` (vllm_log.HotRows, one of Received / Finished / Aborted lines and one of details
    lines per file). Memory: the two kinds of rows never share a frame, so no filter copies
    the (large) first one; ``hot`` is consumed (each file's rows are freed once made).
    """
    own_main, own_det = _own_rows(records, hot)
    if not hot or "rq_run" not in records.columns:
        return own_main, own_det
    mains: list[pl.DataFrame] = []
    dets: list[pl.DataFrame] = []
    while hot:
        part = _run_parts(records, [hot.pop(0)])
        for h, lf in part:
            (dets if h.details else mains).append(lf.collect())
        del part
    return _merged(own_main, mains), _merged(own_det, dets)


def _merged(own_part: pl.DataFrame, parts: list[pl.DataFrame]) -> pl.DataFrame:
    if own_part.height:
        parts = [own_part.with_columns(pl.col("kind").cast(HOT_KIND_ENUM())), *parts]
    if not parts:
        return own_part
    both = parts[0] if len(parts) == 1 else pl.concat(parts, how="vertical")
    order = both.select(pl.arg_sort_by(["stream", "seq"], maintain_order=True).alias("o")).get_column("o")
    if not order.equals(pl.int_range(both.height, dtype=pl.UInt32, eager=True).cast(order.dtype).alias("o")):
        both = both[order]
    return both


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


def parse(records: pl.DataFrame, hot: list[HotRows] | None = None) -> pl.DataFrame:
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
    return _parse_frames(main, det)


def _parse_frames(main: pl.DataFrame, det: pl.DataFrame) -> pl.DataFrame:
    """Request rows from the Received / Finished / Aborted rows and the details rows (``_COLS``)."""

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


def parse_with_stats(
    records: pl.DataFrame,
    hot: list[HotRows] | None,
    needed_ids: list[str] | None = None,
    kv_min: float | None = None,
) -> tuple[pl.DataFrame, RequestStats]:
    """The requests frame and its counts.

    Without folded files (vllm_log.HotRows.folded) this is :func:`parse` and the counts of its
    frame. With folded files, the counts are made in the stream (:func:`_folded`) and the frame
    holds only the rows the analysis reads by id: every Finished / Aborted row, and the received
    rows (with their details lines) of the requests in ``needed_ids`` (the events' request ids),
    of the finished / aborted requests, and of prompts longer than ``kv_min`` tokens (the
    smallest KV cache size in the config: the never-fits finding). Each row is the row
    :func:`parse` gives it.
    """
    if not hot or not any(h.folded for h in hot):
        frame = parse(records, hot)
        return frame, RequestStats.of_frame(frame)
    return _folded(records, hot, needed_ids or [], kv_min)


_K1, _K2 = 0x9E3779B9, 0x7F4A7C15  # two seeds: ids are compared by a 128-bit key (see _folded)
PART_ROWS = 1_000_000  # received rows per partition of the keyed counts (memory: ~60 bytes a key)
_KEYS = {"_k1": pl.UInt64, "_k2": pl.UInt64}
# The columns of a pass over every file's request rows (_pass_rows): a folded file's rows carry
# their file and spill row (no time or seq: runs are looked up for the few rows read back),
# the others their time and seq. ``_ord`` orders a stream's rows (seq, or the spill row).
_PASS = {
    "file_id": pl.UInt16,
    "_row": pl.UInt32,
    "stream": pl.Int32,
    "source": pl.String,
    "time": pl.Datetime("us", "UTC"),
    "seq": pl.UInt32,
    "_ord": pl.Int64,
    "kind": None,  # HOT_KIND_ENUM
    "req_id": pl.String,
    "max_tokens": pl.Int64,
    "prompt_tokens": pl.Int64,
    "n": pl.UInt32,
}


def _keys(col: str, k1: str, k2: str) -> list[pl.Expr]:
    return [pl.col(col).hash(_K1).alias(k1), pl.col(col).hash(_K2).alias(k2)]


def _split_ids(lf: pl.LazyFrame) -> pl.LazyFrame:
    """One row per request id (``request_id``: split and stripped as :func:`_parse_frames` does),
    its key (``_k1``, ``_k2``), ``_sub`` (its place in its line) and ``_multi`` (a multi-id line)."""
    # A line cut right after its verb has no id: it stays one row with a null id (a null list
    # would explode to a row that ``_sub``'s one-element range does not match).
    no_id = pl.lit(pl.Series([[None]], dtype=pl.List(pl.String)))
    lf = lf.with_columns(pl.col("req_id").str.split(",").fill_null(no_id).alias("request_id"))
    n_ids = pl.col("request_id").list.len().clip(lower_bound=1)
    lf = lf.with_columns(_sub=pl.int_ranges(n_ids, dtype=pl.UInt32), _multi=n_ids > 1)
    lf = lf.explode("request_id", "_sub")
    lf = lf.with_columns(pl.col("request_id").str.strip_chars(" .:"))
    return lf.with_columns(_keys("request_id", "_k1", "_k2"))


class _SideFiles:
    """Narrow Parquet files beside the spill files (removed on exit)."""

    def __init__(self, folder: str | None) -> None:
        self.folder = folder
        self.paths: list[str] = []

    def new(self, name: str) -> str:
        fd, path = tempfile.mkstemp(prefix=f"preemptlog-{name}.", suffix=".parquet", dir=self.folder)
        os.close(fd)
        self.paths.append(path)
        return path

    def __enter__(self) -> _SideFiles:
        return self

    def __exit__(self, *exc: object) -> None:
        for p in self.paths:
            try:
                os.unlink(p)
            except OSError:
                pass


def _owned(lf: pl.LazyFrame) -> pl.DataFrame:
    """Collect a few rows of a streaming read with their strings copied into buffers of their
    own, inside the query: a filtered string keeps the decoded page of the spill file it came
    from alive, so a few rows spread over the file held every page (~100-200 MB at 4 GB)."""
    strings = [c for c, t in lf.collect_schema().items() if t == pl.String]
    return lf.with_columns(pl.concat_str([pl.lit("\x00"), pl.col(c)]).str.slice(1).alias(c) for c in strings).collect(
        engine="streaming"
    )


class _Passes:
    """Every file's request rows as lazy passes (columns _PASS), and the run lookups of the
    folded files' rows."""

    def __init__(self, records: pl.DataFrame, hot: list[HotRows]) -> None:
        self.enum = HOT_KIND_ENUM()
        own_main, own_det = _own_rows(records, hot)
        self.own = pl.concat([own_main, own_det]).with_columns(pl.col("kind").cast(self.enum))
        self.in_memory = _run_parts(records, [h for h in hot if not h.folded])
        self.folded = [h for h in hot if h.folded]
        runs = records.filter(pl.col("rq_run").is_not_null()).select(
            "file_id", "rq_run", "time", "stream", "seq", "source"
        )
        self.runs: dict[int, pl.DataFrame] = {}
        for h in self.folded:
            if h.file_id not in self.runs:
                rf = runs.filter(pl.col("file_id") == h.file_id).sort("rq_run")
                assert rf.get_column("rq_run").equals(
                    pl.int_range(rf.height, dtype=pl.UInt32, eager=True), check_names=False
                )
                # a file read with runs is its stream's only file (rotated sets have no runs)
                assert rf.get_column("stream").n_unique() <= 1 and rf.get_column("source").n_unique() <= 1
                self.runs[h.file_id] = rf

    def _schema(self) -> dict[str, Any]:
        return {k: (self.enum if v is None else v) for k, v in _PASS.items()}

    def rows_of(self, kinds: list[str], spill_rows: dict[int, pl.Series] | None = None) -> pl.LazyFrame:
        """Every file's rows of ``kinds``; with ``spill_rows``, only the folded files' rows listed
        there (file_id -> ``_row``) and the other files' rows."""
        details = kinds == ["req_details"]
        schema = self._schema()
        frames: list[pl.LazyFrame] = []

        def timed(lf: pl.LazyFrame) -> pl.LazyFrame:
            return lf.with_columns(
                pl.lit(None, pl.UInt16).alias("file_id"),
                pl.lit(None, pl.UInt32).alias("_row"),
                pl.col("seq").cast(pl.Int64).alias("_ord"),
            ).select([pl.col(c).cast(t) for c, t in schema.items()])

        mine = self.own.filter(pl.col("kind").is_in(kinds))
        if mine.height:
            frames.append(timed(mine.lazy()))
        for h, lf in self.in_memory:
            if h.details == details:
                frames.append(timed(lf.filter(pl.col("kind").is_in(kinds))))
        for h in self.folded:
            if h.details != details:
                continue
            rf = self.runs[h.file_id]
            only = None if spill_rows is None else spill_rows.get(h.file_id, pl.Series([], dtype=pl.UInt32))
            frames.append(
                h.of_kinds(kinds, only)
                .with_columns(
                    pl.lit(rf.get_column("stream")[0], pl.Int32).alias("stream"),
                    pl.lit(rf.get_column("source")[0], pl.String).alias("source"),
                    pl.lit(None, pl.Datetime("us", "UTC")).alias("time"),
                    pl.lit(None, pl.UInt32).alias("seq"),
                    pl.col("_row").cast(pl.Int64).alias("_ord"),
                )
                .select(list(schema))
            )
        if not frames:
            return pl.LazyFrame(schema=schema)
        return pl.concat(frames, how="vertical") if len(frames) > 1 else frames[0]

    def located(self, rows: pl.DataFrame) -> pl.DataFrame:
        """The folded files' rows among ``rows`` (read back by id) with their run's time and
        their seq (the run's plus the rank), as :func:`_run_parts` gives them."""
        done = rows.filter(pl.col("_row").is_null())
        parts = [done]
        for fid, rf in self.runs.items():
            mine = rows.filter((pl.col("file_id") == fid) & pl.col("_row").is_not_null())
            if mine.height == 0:
                continue
            h = next(x for x in self.folded if x.file_id == fid)
            mine = h.locate(mine)
            at = mine.get_column("rq_run")
            cols = [rf.get_column("time").gather(at).alias("time")]
            if "seq" in rows.columns:
                cols.append((rf.get_column("seq").gather(at) + mine.get_column("rq_rank")).alias("seq"))
            parts.append(mine.with_columns(cols).drop("rq_run", "rq_rank"))
        return pl.concat(parts, how="vertical")

    def arrivals(self, rk: pl.LazyFrame, extra: pl.DataFrame) -> tuple[pl.DataFrame, int]:
        """Received rows per 10 s (and how many have a time): the timed files' rows from ``rk``,
        the folded files' from their runs (each run's Received lines at its time) plus ``extra``
        (their further ids of multi-id lines, located)."""
        bucket = pl.col("time").dt.truncate("10s").alias("bucket")
        parts = [
            rk.filter(pl.col("time").is_not_null())
            .group_by(bucket)
            .agg(pl.len().cast(pl.Int64).alias("n"))
            .collect(engine="streaming")
        ]
        for h in self.folded:
            if h.details or h.runs_received is None:
                continue
            rf = self.runs[h.file_id].select("time").with_columns(n=h.runs_received.cast(pl.Int64))
            # a run of other request lines holds no Received line: no bucket of its own
            timed = rf.filter(pl.col("time").is_not_null() & (pl.col("n") > 0))
            parts.append(timed.group_by(bucket).agg(pl.col("n").sum()))
        if extra.height:
            parts.append(
                extra.filter(pl.col("time").is_not_null()).group_by(bucket).agg(pl.len().cast(pl.Int64).alias("n"))
            )
        both = pl.concat(parts, how="vertical").group_by("bucket").agg(pl.col("n").sum()).sort("bucket")
        return both, int(both.get_column("n").sum())


def _folded(
    records: pl.DataFrame, hot: list[HotRows], needed_ids: list[str], kv_min: float | None
) -> tuple[pl.DataFrame, RequestStats]:
    """Counts in the stream and the named rows (see :func:`parse_with_stats`).

    Ids are compared by a 128-bit key (two 64-bit hashes with different seeds): 16 bytes a
    request instead of its id (~41 characters plus a 16-byte view); two different ids share a
    key with probability ~n^2 / 2^129 (below 1e-20 at 100 M requests). What needs the key
    (distinct requests, each received row's prompt from its details line) is made per partition
    of the key space (PART_ROWS received rows each) from narrow side files: memory is bounded by
    a partition's hash tables, not by the number of requests. The rows read back are matched
    by key and checked again by id (:func:`_parse_frames` runs on them).
    """
    ps = _Passes(records, hot)
    recv = _split_ids(ps.rows_of(["req_received"]))
    done = _owned(_split_ids(ps.rows_of(["req_finished", "req_aborted"])))

    # Details: a 0.14+ internal id (<external>-<8 chars>) names its received request when that
    # id was received (the pairing of _parse_frames), by key.
    def det_ids(spill_rows: dict[int, pl.Series] | None = None) -> pl.LazyFrame:
        return (
            _split_ids(ps.rows_of(["req_details"], spill_rows))
            .with_columns(
                pl.when(pl.col("request_id").str.contains(_SUFFIX_RE))
                .then(pl.col("request_id").str.replace(_SUFFIX_RE, ""))
                .alias("_base")
            )
            .with_columns(_keys("_base", "_b1", "_b2"))
        )

    work = next((os.path.dirname(h.spill) for h in hot if h.spill), None)
    with _SideFiles(work) as side:
        # One pass over the received rows: their keys and what the counts read, to a narrow file.
        side_r = side.new("received")
        recv.select(
            "stream", "_k1", "_k2", "time", "prompt_tokens", "max_tokens", "source", "_multi", "_sub", "file_id", "_row"
        ).sink_parquet(side_r, compression="uncompressed", statistics=False)
        rk = pl.scan_parquet(side_r)
        # One pass over the details rows likewise (their ids split, stripped and keyed once): what
        # the pairing, the counts and the lookup of the named rows read.
        side_x = side.new("details-keys")
        det_ids().select(
            "_k1",
            "_k2",
            "_b1",
            "_b2",
            (pl.col("_base").is_not_null() & (pl.col("_base") != pl.col("request_id"))).fill_null(False).alias("_bd"),
            "prompt_tokens",
            "stream",
            "_ord",
            "_sub",
            "_multi",
            "file_id",
            "_row",
        ).sink_parquet(side_x, compression="uncompressed", statistics=False)
        dx = pl.scan_parquet(side_x)
        bases = dx.filter(pl.col("_bd")).select("_b1", "_b2").unique().collect(engine="streaming")
        if bases.height:
            seen = (
                rk.select("_k1", "_k2")
                .filter(pl.col("_k1").is_in(bases.get_column("_b1").implode()))
                .join(bases.lazy(), left_on=["_k1", "_k2"], right_on=["_b1", "_b2"], how="semi")
                .unique()
                .collect(engine="streaming")
                .with_columns(_seen=pl.lit(True))
            )
            det_keyed = dx.join(
                seen.lazy(), left_on=["_b1", "_b2"], right_on=["_k1", "_k2"], how="left", maintain_order="left"
            ).with_columns(
                _d1=pl.when(pl.col("_seen").fill_null(False)).then(pl.col("_b1")).otherwise(pl.col("_k1")),
                _d2=pl.when(pl.col("_seen").fill_null(False)).then(pl.col("_b2")).otherwise(pl.col("_k2")),
            )
        else:
            det_keyed = dx.with_columns(_d1=pl.col("_k1"), _d2=pl.col("_k2"))
        side_d = side.new("details")
        det_keyed.filter(pl.col("prompt_tokens").is_not_null()).select(
            "_d1", "_d2", "prompt_tokens", "stream", "_ord", "_sub"
        ).sink_parquet(side_d, compression="uncompressed", statistics=False)
        det_multi = bool(dx.select(pl.col("_multi").any()).collect(engine="streaming").item())
        # A folded file's further ids of multi-id Received lines (its runs count lines).
        extra = ps.located(
            rk.filter(pl.col("_row").is_not_null() & (pl.col("_sub") > 0))
            .select("file_id", "_row", "time")
            .collect(engine="streaming")
        )
        arrivals, timed = ps.arrivals(rk, extra)
        stats, big, n_multi_recv = _folded_counts(rk, pl.scan_parquet(side_d), done.height, kv_min, arrivals, timed)
        # The rows the analysis names: keys of the ids (and of their external id when one is internal).
        named = pl.concat(
            [
                pl.Series("request_id", list(needed_ids), dtype=pl.String),
                done.get_column("request_id").cast(pl.String).drop_nulls(),
            ]
        ).to_frame()
        named = pl.concat([named, named.select(pl.col("request_id").str.replace(_SUFFIX_RE, ""))]).unique()
        want = pl.concat([named.select(_keys("request_id", "_k1", "_k2")), big]).unique()
        k1s = want.get_column("_k1").implode()
        # Their received rows: found by key in the narrow file, the folded files' ones then read
        # back from their spill files by row (no id is decoded and hashed a second time there).
        hits = (
            rk.filter(pl.col("_k1").is_in(k1s) & pl.col("_row").is_not_null())
            .join(want.lazy(), on=["_k1", "_k2"], how="semi")
            .select("file_id", "_row")
            .unique()
            .collect(engine="streaming")
        )
        # The details rows whose id or external id may be named (the candidates, matched below).
        det_hits = (
            dx.filter((pl.col("_k1").is_in(k1s) | pl.col("_b1").is_in(k1s)) & pl.col("_row").is_not_null())
            .select("file_id", "_row")
            .unique()
            .collect(engine="streaming")
        )
    spill_rows = _by_file(hits)
    det_rows_read = _by_file(det_hits)
    recv_named = ps.located(
        _owned(
            _split_ids(ps.rows_of(["req_received"], spill_rows))
            .filter(pl.col("_k1").is_in(k1s))
            .join(want.lazy(), on=["_k1", "_k2"], how="semi")
        )
    )
    cand = _owned(det_ids(det_rows_read).filter(pl.col("_k1").is_in(k1s) | pl.col("_b1").is_in(k1s))).with_row_index(
        "_i"
    )
    det_named = ps.located(
        pl.concat(
            [
                cand.join(want, on=["_k1", "_k2"], how="semi"),
                cand.join(want, left_on=["_b1", "_b2"], right_on=["_k1", "_k2"], how="semi"),
            ]
        )
        .unique("_i")
        .sort("_i")
        .drop("_i")
    )
    done = ps.located(done)

    def rows(df: pl.DataFrame, multi: bool) -> pl.DataFrame:
        df = df.sort("stream", "seq", "_sub", maintain_order=True)
        if multi:  # _parse_frames puts the rows of multi-id lines after the others of their seq
            df = df.sort("seq", "_multi", maintain_order=True)
        return df.select([pl.col("request_id").alias("req_id") if c == "req_id" else pl.col(c) for c in _COLS])

    main_multi = n_multi_recv > 0 or bool(done.get_column("_multi").any())
    main_rows = rows(pl.concat([recv_named.select(done.columns), done], how="vertical"), main_multi)
    det_rows = rows(det_named.select(done.columns), det_multi)
    return _parse_frames(main_rows, det_rows), stats


def _by_file(hits: pl.DataFrame) -> dict[int, pl.Series]:
    """The spill rows to read back (``_row``, sorted) per folded file, from (file_id, _row) rows."""
    return {int(fid): g.get_column("_row").sort() for (fid,), g in hits.group_by("file_id") if fid is not None}


def _folded_counts(
    rk: pl.LazyFrame, dk: pl.LazyFrame, n_done: int, kv_min: float | None, arrivals: pl.DataFrame, timed: int
) -> tuple[RequestStats, pl.DataFrame, int]:
    """(the counts, keys of the prompts longer than ``kv_min``, received rows of multi-id lines)
    from the narrow files: ``rk`` one row per received id (stream, keys, own prompt, max_tokens,
    source), ``dk`` one row per details id with a prompt count (paired keys, order)."""
    base = rk.select(
        pl.len().alias("n"),
        pl.col("_multi").sum().alias("m"),
        pl.col("max_tokens").sum().alias("s"),
        pl.col("max_tokens").count().alias("c"),
    ).collect(engine="streaming")
    n_recv = int(base.get_column("n")[0])
    if n_recv == 0:
        return RequestStats.empty(n_done, folded=True), pl.DataFrame(schema=_KEYS), 0
    sources = rk.select(pl.col("source").unique().drop_nulls()).collect(engine="streaming")
    parts = max(1, math.ceil(n_recv / PART_ROWS))
    distinct = 0
    hists, bigs = [], []
    for p in range(parts):
        rp = rk.filter(pl.col("_k1") % parts == p) if parts > 1 else rk
        dp = dk.filter(pl.col("_d1") % parts == p) if parts > 1 else dk
        first = (
            dp.group_by("_d1", "_d2")
            .agg(pl.col("prompt_tokens").sort_by("stream", "_ord", "_sub").first().alias("_pt"))
            .collect(engine="streaming")
        )
        distinct += int(rp.select("stream", "_k1", "_k2").unique().select(pl.len()).collect(engine="streaming").item())
        prompt = pl.coalesce("prompt_tokens", "_pt").alias("prompt_tokens")
        joined = (
            rp.select("_k1", "_k2", "prompt_tokens")
            .join(first.lazy(), left_on=["_k1", "_k2"], right_on=["_d1", "_d2"], how="left")
            .select("_k1", "_k2", prompt)
        )
        hists.append(
            joined.filter(pl.col("prompt_tokens").is_not_null())
            .group_by("prompt_tokens")
            .agg(pl.len().cast(pl.Int64).alias("n"))
            .collect(engine="streaming")
        )
        if kv_min is not None:
            bigs.append(
                joined.filter(pl.col("prompt_tokens") > kv_min)
                .select("_k1", "_k2")
                .unique()
                .collect(engine="streaming")
            )
        del first
    hist = pl.concat(hists).group_by("prompt_tokens").agg(pl.col("n").sum()).sort("prompt_tokens")
    stats = RequestStats(
        rows=n_recv + n_done,
        received=n_recv,
        distinct=distinct,
        timed=timed,
        arrivals=arrivals,
        prompts=hist,
        max_tokens_sum=int(base.get_column("s")[0] or 0),
        max_tokens_n=int(base.get_column("c")[0]),
        sources=tuple(sorted(sources.get_column("source").to_list())),
        folded=True,
    )
    return stats, pl.concat(bigs) if bigs else pl.DataFrame(schema=_KEYS), int(base.get_column("m")[0])
