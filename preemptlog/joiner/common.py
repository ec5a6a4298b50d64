"""Helpers shared by the joiner's sections: provenance strings, sorted as-of joins,
rolling look-backs, window maxima and sums over merged timelines, the engine key.

Every lookup is a sorted as-of join, a rolling aggregate over a merged timeline, or a
cumulative-sum difference: no Python loop per event.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl

from ..model.frames import provenance_expr

DEFAULT_BEFORE = 10.0
DEFAULT_AFTER = 2.0
DEFAULT_LOOKBACK = 3
CONFLICT_S = 1.0  # G4: how close to the decision the other request's extension must be


def src_expr(source: str = "source", line: str = "line") -> pl.Expr:
    """``file:line`` of a row (frames.provenance_expr)."""
    return provenance_expr(source, line)


def us(seconds: float) -> int:
    return int(round(seconds * 1_000_000))


def frame_of(frames: dict[str, Any], name: str) -> pl.DataFrame | None:
    df = frames.get(name)
    if df is None or df.height == 0:
        return None
    if "time" in df.columns:
        df = df.filter(pl.col("time").is_not_null())
    return df if df.height else None


def asof(
    left: pl.DataFrame,
    right: pl.DataFrame,
    *,
    left_on: str,
    right_on: str,
    by: list[str] | None = None,
    strategy: str = "backward",
    tolerance: Any = None,
    allow_exact: bool = True,
) -> pl.DataFrame:
    """join_asof on explicitly sorted frames; keeps the left order and columns."""
    lsorted = left.sort(left_on, maintain_order=True)
    rsorted = right.sort(right_on, maintain_order=True)
    kw: dict[str, Any] = {}
    if by:
        kw["by_left"] = by
        kw["by_right"] = by
    return lsorted.join_asof(
        rsorted,
        left_on=left_on,
        right_on=right_on,
        strategy=strategy,  # type: ignore[arg-type]
        tolerance=tolerance,
        allow_exact_matches=allow_exact,
        check_sortedness=False,
        coalesce=False,
        **kw,
    )


def window_max(ev: pl.DataFrame, series: pl.DataFrame, key: str, width_us: int, by: str | None = None) -> pl.DataFrame:
    """Max of the Int64 ``key`` over series rows with time in [_hi - width, _hi], per event (_i, _max).

    A merged timeline: the events' window ends are inserted as rows with a
    null key, a time-based rolling max runs once over everything (per ``by``
    group when given: both frames carry that column).
    """
    g = [pl.col(by).alias("_g")] if by else [pl.lit(0, pl.Int8).alias("_g")]
    s = series.select(pl.col("time").alias("_t"), pl.col(key).alias("_k"), pl.lit(None, pl.UInt32).alias("_i"), *g)
    e = ev.select(pl.col("_hi").alias("_t"), pl.lit(None, pl.Int64).alias("_k"), pl.col("_i"), *g)
    if not s.get_column("_t").is_sorted():
        s = s.sort("_t", maintain_order=True)
    e = e.sort("_t", maintain_order=True)
    merged = s.merge_sorted(e, key="_t")
    roll = pl.col("_k").rolling_max_by("_t", window_size=f"{width_us}us", closed="both")
    merged = merged.with_columns(_max=roll.over("_g") if by else roll)
    return merged.filter(pl.col("_i").is_not_null()).select("_i", "_max")


def engine_key(col: str = "engine") -> pl.Expr:
    """The engine an event or evidence row belongs to: its label, "0" when none (one engine)."""
    return pl.col(col).cast(pl.String).fill_null("0")


def with_eng(df: pl.DataFrame) -> pl.DataFrame:
    return df.with_columns(_eng=engine_key("engine") if "engine" in df.columns else pl.lit("0"))


def window_sum(ev: pl.DataFrame, series: pl.DataFrame, cols: list[str]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Sums of ``cols`` over series rows with time in [_lo, _hi] (cumulative-sum differences).

    Returns (sums, the series sorted by time with its row number ``_r``): the sums frame has
    ``_i``, the sums and the _first/_last row numbers (``_r``) in the window, for provenance.
    """
    s = (
        series.sort("time")
        .with_row_index("_r")
        .with_columns([pl.col(c).fill_null(0).cum_sum().alias(f"_c_{c}") for c in cols])
    )
    keep = ["time", "_r"] + [f"_c_{c}" for c in cols]
    hi = asof(ev.select("_i", "_hi"), s.select(keep), left_on="_hi", right_on="time")
    lo = asof(ev.select("_i", "_lo"), s.select(keep), left_on="_lo", right_on="time", allow_exact=False)
    first = asof(ev.select("_i", "_lo"), s.select("time", "_r"), left_on="_lo", right_on="time", strategy="forward")
    out = hi.select("_i", pl.col("_r").alias("_last"), *[pl.col(f"_c_{c}").alias(f"_hi_{c}") for c in cols])
    out = out.join(lo.select("_i", *[pl.col(f"_c_{c}").alias(f"_lo_{c}") for c in cols]), on="_i", how="left").join(
        first.select("_i", pl.col("_r").alias("_first")), on="_i", how="left"
    )
    return out.with_columns(
        [(pl.col(f"_hi_{c}").fill_null(0) - pl.col(f"_lo_{c}").fill_null(0)).alias(c) for c in cols]
    ).with_columns(
        _first=pl.when(pl.col("_first") <= pl.col("_last")).then(pl.col("_first")),
        _last=pl.when(pl.col("_first") <= pl.col("_last")).then(pl.col("_last")),
    ), s


def rolling_lookback(df: pl.DataFrame, group: list[str], value: str, k: int, how: str) -> pl.DataFrame:
    """Min/max of ``value`` over the current row and the k rows before it in ``group``,
    with the row index (``_row``) where it was reached: columns _lb_val, _lb_row, _lb_n."""
    big = 1 << 32
    v = pl.col(value).cast(pl.Int64, strict=False)
    v = pl.when(v.abs() < (1 << 30)).then(v)  # absurd values (a damaged line) would overflow the encoding
    if how == "min":
        enc = v * big + (big - 1 - pl.col("_row").cast(pl.Int64))  # ties -> the latest row
        agg = enc.rolling_min(k + 1, min_samples=1).over(group)
        val = agg.floordiv(big)
        row = (big - 1) - (agg - val * big)
    else:
        enc = v * big + pl.col("_row").cast(pl.Int64)
        agg = enc.rolling_max(k + 1, min_samples=1).over(group)
        val = agg.floordiv(big)
        row = agg - val * big
    n = pl.int_range(pl.len()).over(group).clip(upper_bound=k) + 1
    return df.with_columns(_lb_val=val, _lb_row=row, _lb_n=n.cast(pl.Int64))


def rows_in_ranges(q: pl.DataFrame, rows: pl.DataFrame, by: list[str], on: str, lo: str, hi: str) -> pl.DataFrame:
    """Every pair (``_q``: a row of ``q``, ``_r``: a row of ``rows``) with equal ``by`` keys and
    ``q.lo <= rows.on <= q.hi``: what an equality join on ``by`` then a filter on the range gives,
    without making the pairs outside the range (a join on a key many rows share grows with
    queries x rows; this grows with the pairs found).

    One merged timeline sorted by (``by``, value, mark): each range's two ends are inserted as marks
    (the start before the rows of its value, the end after them); the rows before a mark are
    counted, so each range is a run of positions in ``rows`` sorted by (``by``, ``on``). A null key,
    value or end matches nothing (as in the join and filter). Pairs in (``_q``, ``on``) order.
    """
    r = rows.select(*by, pl.col(on).alias("_x")).with_row_index("_r")
    r = r.filter(pl.all_horizontal(pl.col(c).is_not_null() for c in [*by, "_x"])).sort(*by, "_x")
    dt = r.schema["_x"]
    cast = {c: r.schema[c] for c in by}
    qq = (
        q.select(*by, pl.col(lo).cast(dt).alias("_lo"), pl.col(hi).cast(dt).alias("_hi"))
        .cast(cast)  # type: ignore[arg-type]
        .with_row_index("_q")
        .filter(pl.all_horizontal(pl.col(c).is_not_null() for c in [*by, "_lo", "_hi"]))
    )
    if r.height == 0 or qq.height == 0:
        return pl.DataFrame(schema={"_q": pl.UInt32, "_r": pl.UInt32})
    none = pl.lit(None, pl.UInt32).alias("_q")
    marks = (
        pl.concat(
            [
                r.select(*by, "_x", pl.lit(1, pl.Int8).alias("_m"), none),
                qq.select(*by, pl.col("_lo").alias("_x"), pl.lit(0, pl.Int8).alias("_m"), "_q"),
                qq.select(*by, pl.col("_hi").alias("_x"), pl.lit(2, pl.Int8).alias("_m"), "_q"),
            ]
        )
        .sort(*by, "_x", "_m")
        .with_columns(_n=(pl.col("_m") == 1).cum_sum().cast(pl.Int64))
        .filter(pl.col("_m") != 1)
        .select("_q", "_m", "_n")
    )
    ends = (
        marks.filter(pl.col("_m") == 0)
        .select("_q", pl.col("_n").alias("_a"))
        .join(marks.filter(pl.col("_m") == 2).select("_q", pl.col("_n").alias("_b")), on="_q")
        .filter(pl.col("_b") > pl.col("_a"))
        .sort("_q")
    )
    pos = ends.select("_q", pl.int_ranges("_a", "_b").alias("_k")).explode("_k")
    return pos.select("_q", r.get_column("_r").gather(pos.get_column("_k")).alias("_r"))


# The frames of one scheduler's own records (its debug-hook steps, block-table records, KV events,
# prefix-cache resets): where the bundle keeps servers in folders of their own, a server's event reads
# only those of its own folder (ServerScope).
SERVER_FRAMES = (
    "hook_steps",
    "hook_pending",
    "hook_batch",
    "bt_steps",
    "bt_tables",
    "bt_events",
    "bt_requests",
    "bt_text",
    "kv_events",
    "cache_resets",
)


def folder_of(col: str = "source") -> pl.Expr:
    """The folder of a file's display name (``incident/a/vllm.log`` -> ``incident/a``; an archive member's
    ``x.tar.gz!a/vllm.log`` -> ``x.tar.gz/a``): where a bundle keeps one server's files; null for a file
    at the top."""
    return pl.col(col).cast(pl.String).str.replace_all("!", "/", literal=True).str.extract(r"^(.*)/[^/]*$", 1)


# A section of the joiner over (events, frames): one server's, under ServerScope.each.
Section = Callable[[pl.DataFrame, dict[str, Any]], "pl.DataFrame | None"]


class ServerScope:
    """The servers of a bundle that keeps them in folders of their own (``a/vllm.log`` beside
    ``b/vllm.log``): a *server log* is a log that holds preemption lines or stats lines, its folder is its
    server's, and every file is the server's whose folder is the deepest one above it (``""``: under no
    server's folder). One server's scheduler records (SERVER_FRAMES) never explain another server's
    event: two servers side by side both call their engine "0", and one's hook steps or block-table
    records said nothing of the other's pool. A file under no server's folder (``records/`` beside
    ``a/`` and ``b/``) cannot be told to be either's: it explains only the events of files under no
    server's folder (its own record events). One server folder (or none): no scope (:meth:`of` is None),
    and every record of the event's engine is read, wherever it lies (``logs/`` beside ``records/``)."""

    def __init__(self, folders: list[str]) -> None:
        self.folders = sorted(folders, key=lambda f: (-len(f), f))  # deepest first

    @classmethod
    def of(
        cls, events: pl.DataFrame, stats: pl.DataFrame | None, log_streams: pl.DataFrame | None
    ) -> ServerScope | None:
        """``log_streams``: the streams of the bundle's log files (a scrape's or a record file's events
        and samples are no server log)."""
        if log_streams is None or log_streams.height == 0:
            return None
        of_log = pl.col("stream").cast(pl.Int32).is_in(log_streams.get_column("stream").cast(pl.Int32).implode())
        logs: set[str] = set()
        for df in (events, stats):
            if df is not None and {"source", "stream"} <= set(df.columns):
                logs |= set(df.filter(of_log.fill_null(False)).get_column("source").drop_nulls().cast(pl.String))
        if not logs:
            return None
        folders = set(
            pl.Series(sorted(logs), dtype=pl.String).to_frame("f").select(folder_of("f").fill_null("")).to_series()
        )
        return cls(sorted(folders)) if len(folders) > 1 else None

    def server(self, col: str) -> pl.Expr:
        """The server folder of the file named in ``col`` (``""``: under none)."""
        folder = folder_of(col).fill_null("")
        out = pl.lit("", pl.String)
        for f in reversed(self.folders):  # the deepest match wins: it is applied last
            if f:
                out = pl.when((folder == f) | folder.str.starts_with(f + "/")).then(pl.lit(f)).otherwise(out)
        return out

    def each(
        self,
        ev: pl.DataFrame,
        file_col: str,
        frames: dict[str, Any],
        section: Section,
    ) -> pl.DataFrame | None:
        """``section(events, frames)`` run per server: its events (their file in ``file_col``) with the
        SERVER_FRAMES rows of its folder, the results stacked."""
        if ev.height == 0:
            return section(ev, frames)
        srv = ev.select(self.server(file_col)).to_series()
        keyed = {
            n: df.with_columns(self.server("source").alias("_srv"))
            for n, df in frames.items()
            if n in SERVER_FRAMES and isinstance(df, pl.DataFrame) and "source" in df.columns
        }
        parts = []
        for s in srv.unique(maintain_order=True).to_list():
            mine = ev.filter(srv == s)
            own = {**frames, **{n: df.filter(pl.col("_srv") == s).drop("_srv") for n, df in keyed.items()}}
            got = section(mine, own)
            if got is not None:
                parts.append(got)
        if not parts:
            return None
        return parts[0] if len(parts) == 1 else pl.concat(parts, how="diagonal_relaxed")
