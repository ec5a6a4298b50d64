"""Request lines as runs over the compiled pass's windows (vllm_log.read_split, without the spill).

``vllm_log.read_split`` sinks the polars pass into a Parquet spill file and finds the runs of
request lines in it (``_split_from``). Over the compiled pass the windows are already in
memory, so the same records and per-request rows are made window by window here: a run is a
maximal block of consecutive request rows with equal time parts (both timed), the records keep
the other rows and each run's first row (its request fields cleared, ``rq_count``, ``n_last``,
``rq_run``), and the per-request rows (Received / Finished / Aborted, details) carry their run
and rank. A file with enough Received lines to be folded writes only its request rows to the
spill file (marker, n, req_id, max_tokens, prompt_tokens: what ``HotRows`` scans), their
positions counted among the request rows (runs are contiguous there, so runs and ranks are
the same as among all rows). tests/sources/test_fastscan_equivalence.py compares every output with
``_split_from``'s.

The vllm_log functions it needs come in a :class:`SplitContext` (this package sits below
vllm_log and never imports it).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import polars as pl


@dataclass(frozen=True)
class SplitContext:
    """What vllm_log.read_split decides and builds, handed down (see vllm_log.fast_split_context)."""

    file_id: int
    kinds: dict[str, str]  # marker -> record kind
    hot_kinds: tuple[str, ...]  # request kinds (runs)
    kept_kinds: tuple[str, ...]  # request kinds with per-request rows (Added lines are only counted)
    time_parts: tuple[str, ...]
    runs: bool
    runs_min: int
    fold_min: int
    spill_dir: str | None
    finish: Callable[[pl.DataFrame], pl.DataFrame]
    compact: Callable[[pl.DataFrame], pl.DataFrame]
    with_run_columns: Callable[[pl.DataFrame], pl.DataFrame]
    hot_kind: Callable[[list[str]], pl.Expr]  # markers -> the HOT_KIND_ENUM expression on "marker"
    hot_query: Callable[[str, int, list[str], pl.Series], pl.LazyFrame]  # vllm_log._hot_query
    hot_rows: Callable[..., Any]  # vllm_log.HotRows
    hot_columns: tuple[str, ...]  # vllm_log.HOT_ROWS


_NARROW = ("marker", "n", "req_id", "max_tokens", "prompt_tokens")


def merged(a: pl.DataFrame, b: pl.DataFrame) -> pl.DataFrame:
    """Two frames of records, each in file order, as one in file order: by line number ``n``, then
    by segment ``seg`` (a line cut by an inner CR holds several records: a request row of its first
    segment and another record of its second are one line's, in segment order)."""
    if not b.height:
        return a
    if not a.height:
        return b
    if "seg" not in a.columns or "seg" not in b.columns:
        return a.merge_sorted(b, key="n")
    key = (pl.col("n").cast(pl.UInt64) * (1 << 32) + pl.col("seg").cast(pl.UInt64)).alias("_nseg")
    return a.with_columns(key).merge_sorted(b.with_columns(key), key="_nseg").drop("_nseg")


def _run_stats(hot: pl.DataFrame) -> pl.DataFrame:
    """Per run of a window's request rows: its rows ``c``, last line ``n_last`` and Received rows ``r``.
    ``_run`` never decreases along the rows (a cumulative count of run starts) and ``n`` neither
    (file order), so each run is one block of rows: its length, the line of its last row and the
    difference of the Received rows counted up to its end (a group_by hashed every row: 9 % of
    the split's time)."""
    blocks = hot.get_column("_run").rle().struct.unnest()
    ends = blocks.get_column("len").cum_sum() - 1
    recv = hot.get_column("_recv").cast(pl.UInt32).cum_sum().gather(ends)
    return pl.DataFrame(
        {
            "_run": blocks.get_column("value"),
            "c": blocks.get_column("len"),
            "n_last": hot.get_column("n").gather(ends),
            "r": recv - recv.shift(1, fill_value=0),
        }
    )


class _Spill:
    """The request rows of a folded file, written window by window: one Parquet part per window and
    group in a private folder, read back as one table per group by the glob :meth:`path` (polars
    scans the parts in name order). A group is the markers of one HotRows (Received / Finished /
    Aborted, or details); other request rows (Added) are only counted, so they are not written, and
    each row keeps its position among all the file's request rows as ``_row`` (runs and ranks are
    found from it: vllm_log.HotRows.locate). Each group's reads decode its own rows only.
    polars' own writer: no pyarrow import (0.26 s)."""

    def __init__(self, folder: str | None, groups: dict[str, list[str]]) -> None:
        self.folder = tempfile.mkdtemp(prefix="preemptlog-records.", dir=folder)
        self.groups = {name: markers for name, markers in groups.items() if markers}
        self.rows = dict.fromkeys(self.groups, 0)  # rows written per group
        self.parts = 0

    def path(self, group: str) -> str:
        return os.path.join(self.folder, f"{group}-*.parquet")

    def write(self, df: pl.DataFrame) -> None:
        if df.height == 0:
            return
        for name, markers in self.groups.items():
            part = df.filter(pl.col("marker").is_in(markers))
            if part.height == 0:
                continue
            # the marker stays an Enum (a dictionary page and a byte per row: a third less to encode
            # than strings; is_in on the markers' names reads it back alike)
            part.select(*_NARROW, "_row").write_parquet(
                os.path.join(self.folder, f"{name}-{self.parts:08d}.parquet"),
                compression="uncompressed",
                statistics=False,
            )
            self.rows[name] += part.height
        self.parts += 1

    def drop(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def read_split(
    pairs: Iterable[tuple[pl.DataFrame, pl.DataFrame]], schema: dict[str, pl.DataType], ctx: SplitContext
) -> tuple[pl.DataFrame, list[Any]]:
    """(records, per-request rows) as vllm_log.read_split gives them, from the compiled pass's windows
    (``Scan.pairs``: each window's other records and its request rows, apart)."""
    recv_markers = [m for m, k in ctx.kinds.items() if k == "req_received"]
    main_markers = [m for m, k in ctx.kinds.items() if k in ctx.kept_kinds and k != "req_details"]
    det_markers = [m for m, k in ctx.kinds.items() if k in ctx.kept_kinds and k == "req_details"]
    parts = ctx.time_parts
    held: list[tuple[pl.DataFrame, pl.DataFrame]] = []  # every window, until the file has enough request rows
    n_hot = 0
    runs_on = False
    # state of the runs mode
    prev: pl.DataFrame | None = None  # the previous window's last record when it was a request row
    carry_rank = 0  # rows of the run open at the previous window's end
    run_base = 0  # runs before this window
    hot_base = 0  # request rows before this window
    n_received = 0
    rec_parts: list[pl.DataFrame] = []
    stats: list[pl.DataFrame] = []
    hot_mem: list[pl.DataFrame] = []  # request rows in memory (a file not folded)
    start_rows: list[pl.Series] = []  # each run's first row among the request rows (``starts``)
    spill: _Spill | None = None
    clock = ("mo", "fdate", "fb")  # a row is timed when one of these is set
    flag_cols = list(dict.fromkeys(["_b", "marker", *clock, *parts]))

    def continues(ext: pl.DataFrame) -> pl.Expr:
        """A request row continues the run of the row before it when that row is a request row too
        (no other record between them: as many other records lie before both, ``_b``), both are
        timed and their time parts are equal. Only the columns this window sets are compared (a
        column null in every row compares equal everywhere), and a window whose rows all carry
        one clock column is timed throughout."""
        live = [c for c in parts if ext.get_column(c).null_count() < ext.height]
        cont = pl.col("_b").eq(pl.col("_b").shift(1)).fill_null(False)
        if not any(ext.get_column(c).null_count() == 0 for c in clock):
            timed = pl.any_horizontal(pl.col(c).is_not_null() for c in clock)
            cont = cont & timed & timed.shift(1).fill_null(False)
        for c in live:
            cont = cont & pl.col(c).eq_missing(pl.col(c).shift(1)).fill_null(False)
        return cont

    def split_window(main: pl.DataFrame, hot: pl.DataFrame) -> None:
        nonlocal prev, carry_rank, run_base, hot_base, n_received, spill
        last_hot = hot.height > 0 and (main.height == 0 or hot.get_column("n")[-1] > main.get_column("n")[-1])
        if hot.height:
            # other records before each request row (the window's first rows: 0, like the carried row)
            before = main.get_column("n").search_sorted(hot.get_column("n"), side="left").cast(pl.UInt32)
            ext = hot.with_columns(_b=before).select(flag_cols)
            if prev is not None:
                ext = pl.concat([prev.with_columns(_b=pl.lit(0, pl.UInt32)).select(flag_cols), ext], how="vertical")
            f = ext.select(_cont=continues(ext), _recv=pl.col("marker").is_in(recv_markers).fill_null(False))
            if prev is not None:
                f = f.slice(1)
            start = ~f.get_column("_cont")
            pos = pl.int_range(hot.height, dtype=pl.Int64, eager=True)
            start_pos = pl.when(start).then(pos).otherwise(None).forward_fill()
            run = (start.cast(pl.Int64).cum_sum() + run_base - 1).cast(pl.Int64)
            rank = pl.select(pl.when(start_pos.is_null()).then(pos + carry_rank).otherwise(pos - start_pos)).to_series()
            hot = hot.with_columns(_hot=pl.lit(True), _start=start, _recv=f.get_column("_recv"), _run=run, _rank=rank)
            stats.append(_run_stats(hot))
            n_received += int(hot.get_column("_recv").sum())
            carry_rank = int(rank[-1]) + 1 if last_hot else 0
            run_base += int(start.sum())
            starts = hot.filter(pl.col("_start"))
        else:
            carry_rank = 0
            starts = None
        prev = hot.tail(1) if last_hot else None
        kept = main.with_columns(
            _hot=pl.lit(False),
            _start=pl.lit(False),
            _recv=pl.lit(False),
            _run=pl.lit(None, pl.Int64),
            _rank=pl.lit(None, pl.Int64),
        )
        if starts is not None:
            kept = merged(kept, starts)
        # The kept rows' strings are copied out of the window's buffers (a filtered string keeps its
        # whole buffer alive: every window's request ids would stay in memory).
        strings = [c for c, t in kept.schema.items() if t == pl.String]
        rec_parts.append(
            kept.with_columns(pl.concat_str([pl.lit("\x00"), pl.col(c)]).str.slice(1).alias(c) for c in strings)
        )
        if not hot.height:
            return
        narrow = hot.select(*_NARROW, "_run", "_rank", "_start").with_columns(
            _row=pl.int_range(hot_base, hot_base + hot.height, dtype=pl.UInt32)
        )
        start_rows.append((hot.get_column("_start").arg_true() + hot_base).cast(pl.UInt32))
        hot_base += hot.height
        if spill is None and ctx.spill_dir is not None and n_received >= ctx.fold_min:
            spill = _Spill(ctx.spill_dir, {"main": main_markers, "details": det_markers})
            for h in hot_mem:
                spill.write(h)
            hot_mem.clear()
        if spill is not None:
            spill.write(narrow)
        else:
            hot_mem.append(narrow)

    try:
        for main, hot in pairs:
            if not runs_on:
                held.append((main, hot))
                n_hot += hot.height
                if ctx.runs and n_hot > 0 and n_hot >= ctx.runs_min:
                    runs_on = True
                    for m, h in held:
                        split_window(m, h)
                    held.clear()
                continue
            split_window(main, hot)
        if not runs_on:
            if not held:
                return ctx.with_run_columns(ctx.finish(ctx.compact(pl.DataFrame(schema=schema)))), []
            whole = merged(
                pl.concat([m for m, _ in held], how="vertical"), pl.concat([h for _, h in held], how="vertical")
            )
            return ctx.with_run_columns(ctx.finish(ctx.compact(whole))), []
        starts = pl.concat(start_rows) if start_rows else pl.Series([], dtype=pl.UInt32)
        return _assemble(ctx, rec_parts, stats, hot_mem, starts, spill, n_received, main_markers, det_markers)
    except BaseException:
        if spill is not None:
            spill.drop()
        raise


def _assemble(
    ctx: SplitContext,
    rec_parts: list[pl.DataFrame],
    stats: list[pl.DataFrame],
    hot_mem: list[pl.DataFrame],
    starts: pl.Series,
    spill: _Spill | None,
    n_received: int,
    main_markers: list[str],
    det_markers: list[str],
) -> tuple[pl.DataFrame, list[Any]]:
    runs = (
        pl.concat(stats, how="vertical")
        .group_by("_run")
        .agg(pl.col("c").sum(), pl.col("n_last").max(), pl.col("r").sum())
        .sort("_run")
    )
    raw = pl.concat(rec_parts, how="vertical")
    is_start = raw.get_column("_start")
    run_of = raw.get_column("_run")
    at = run_of.filter(is_start)
    height = raw.height
    pos = is_start.arg_true()

    def scatter(values: pl.Series, name: str) -> pl.Series:
        return pl.Series(name, [None] * height, dtype=pl.UInt32).scatter(pos, values.gather(at).cast(pl.UInt32))

    count = scatter(runs.get_column("c"), "rq_count")
    n_last = scatter(runs.get_column("n_last"), "n_last")
    run_no = pl.Series("rq_run", [None] * height, dtype=pl.UInt32).scatter(pos, at.cast(pl.UInt32))
    raw = ctx.compact(raw.drop("_hot", "_start", "_recv", "_run", "_rank")).with_columns(count, n_last, run_no)
    not_run = pl.col("rq_count").is_null()
    raw = raw.with_columns(pl.when(not_run).then(pl.col(c)).alias(c) for c in ("req_id", "max_tokens", "prompt_tokens"))
    rec = ctx.finish(raw)

    folded = spill is not None
    out: list[Any] = []
    hot: pl.DataFrame | None = None
    if folded:
        assert spill is not None
        runs_received = runs.get_column("r").cast(pl.UInt32).alias("rq_recv")
    elif hot_mem:
        hot = pl.concat(hot_mem, how="vertical")
    enum_of = ctx.hot_kind
    for group, is_det in ((main_markers, False), (det_markers, True)):
        if not group:
            continue
        received = 0 if is_det else n_received
        if spill is not None:
            name = "details" if is_det else "main"
            n_rows = spill.rows.get(name, 0)
            if n_rows == 0:
                continue
            lf = ctx.hot_query(spill.path(name), ctx.file_id, group, starts)
            out.append(
                ctx.hot_rows(
                    ctx.file_id,
                    is_det,
                    lf,
                    n_rows,
                    received,
                    True,
                    spill=spill.path(name),
                    starts=starts,
                    runs_received=None if is_det else runs_received,
                )
            )
            continue
        if hot is None:
            continue
        rows = hot.filter(pl.col("marker").is_in(group))
        if rows.height == 0:
            continue
        rows = rows.select(
            pl.lit(ctx.file_id, pl.UInt16).alias("file_id"),
            enum_of(group).alias("kind"),
            "n",
            pl.col("_run").cast(pl.UInt32).alias("rq_run"),
            pl.col("_rank").cast(pl.UInt32).alias("rq_rank"),
            "req_id",
            "max_tokens",
            "prompt_tokens",
        )
        nulls = [c for c in ("max_tokens", "prompt_tokens") if rows.get_column(c).null_count() == rows.height]
        rows = rows.with_columns(pl.lit(None, pl.Int64).alias(c) for c in nulls)
        out.append(
            ctx.hot_rows(ctx.file_id, is_det, rows.select(list(ctx.hot_columns)).lazy(), rows.height, received, False)
        )
    if folded and not any(getattr(h, "folded", False) for h in out):
        assert spill is not None
        spill.drop()
    return rec, out
