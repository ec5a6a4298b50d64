"""Stats lines per engine, and counted intervals judged by their own lines."""

from __future__ import annotations

import polars as pl

from ..model.containers import stream_lane, with_container
from ..model.places import folders, shared_depth
from .common import asof, folder_of, src_expr, window_max, with_eng
from .declare import Evidence, cited

EVIDENCE = [
    Evidence(
        "stats_kv_usage_max",
        "Float64",
        "vllm-log (stats)",
        "engine",
        "max KV cache usage of the engine's lines in the window; for a counted interval, of its lines in the interval "
        "(a `Preemptions: N` line and the line before)",
    ),
    Evidence(
        "stats_kv_usage_at",
        "Float64",
        "vllm-log (stats)",
        "engine",
        "KV cache usage as of t (counted interval: its reporting line)",
    ),
    Evidence(
        "stats_waiting_at",
        "Int64",
        "vllm-log (stats)",
        "engine",
        "waiting requests as of t (counted interval: the largest of its lines)",
    ),
    Evidence(
        "stats_waiting_delta",
        "Int64",
        "vllm-log (stats)",
        "engine",
        "change of waiting from t - before to t + after (counted interval: reporting minus first line)",
    ),
    Evidence(
        "stats_running_at",
        "Int64",
        "vllm-log (stats)",
        "engine",
        "running requests as of t (counted interval: its reporting line)",
    ),
    Evidence(
        "stats_running_delta", "Int64", "vllm-log (stats)", "engine", "change of running, as for stats_waiting_delta"
    ),
]


def section_stats(
    ev: pl.DataFrame,
    stats: pl.DataFrame | None,
    before_us: int,
    after_us: int,
    *,
    own_stream: bool = True,
    log_streams: pl.DataFrame | None = None,
    containers: pl.DataFrame | None = None,
) -> pl.DataFrame | None:
    """Stats-line evidence, per engine (rule 4 of issue 13) and per log (``own_stream``).

    An event only reads stats lines of its own engine (``Engine NNN``; ``N Engines
    Aggregated`` lines are engine ``all``; a line or event without one is engine "0").
    Two servers' logs in one bundle both call their engine "0", and one server's line is no
    evidence for the other's preemption (:func:`lanes`): a log event whose stream (a log and its
    rotated parts; ``own_stream``) reads only those (none when its log has none: another log beside
    it is another server's; in a log of several containers' lines, ``containers``, its own container's
    lines only), an event of another source whose folder has lines of its engine (a
    /metrics scrape or a record beside its server's log) reads only those, else every line of its
    engine.
    An event spread in a counted interval (``_iend``: a ``Preemptions: N`` line, a V0 counter
    jump, a Prometheus increase) is judged by the interval itself (rule 3 of issue 13, issue 25):
    the engine's lines in ``[interval_start, interval_end]`` (for ``Preemptions: N``, the line
    that reports it and the engine's line before it), both ends cited (:func:`_interval_lines`).
    """
    if stats is None or stats.height == 0:
        return None
    st = stats.filter(pl.col("time").is_not_null())
    if st.height == 0:
        return None
    if containers is not None and containers.height:
        ev, st = with_container(ev, containers), with_container(st, containers)
    ev, st = lanes(ev.rename({"_file": "source"}, strict=False), with_eng(st), own_stream, log_streams)
    if st.height == 0:  # no event reads any line (each log event's own log has none)
        return None
    st = st.sort("time", "stream", "seq").with_row_index("_row").with_columns(_ssrc=src_expr())
    k, w, r = _value_srcs(st)
    st = st.with_columns(src_expr(line=f"{c}_line").alias(n) for c, n in _OWN.items() if n in (k, w, r))
    tol = f"{before_us}us"
    by = ["_ek"]
    at = asof(
        ev.select("_i", "_t", "_ek"),
        st.select("time", "_ek", "kv_usage", "waiting", "running", *_uniq(k, w, r)),
        left_on="_t",
        right_on="time",
        by=by,
        tolerance=tol,
    )
    hi = asof(
        ev.select("_i", "_hi", "_ek"),
        st.select("time", "_ek", "waiting", "running", *_uniq(w, r)),
        left_on="_hi",
        right_on="time",
        by=by,
        tolerance=tol,
    )
    lo = asof(
        ev.select("_i", "_lo", "_ek"),
        st.select("time", "_ek", "waiting", "running"),
        left_on="_lo",
        right_on="time",
        by=by,
        tolerance=tol,
    )
    # No stats line before the window: the change is counted from the first one inside it.
    first = asof(
        ev.select("_i", "_lo", "_ek"),
        st.select("time", "_ek", "waiting", "running"),
        left_on="_lo",
        right_on="time",
        by=by,
        strategy="forward",
        tolerance=f"{before_us + after_us}us",
    )
    lo = lo.join(
        first.select("_i", pl.col("waiting").alias("_wf"), pl.col("running").alias("_rf"), pl.col("time").alias("_tf")),
        on="_i",
        how="left",
    ).with_columns(
        waiting=pl.when(pl.col("time").is_not_null()).then(pl.col("waiting")).otherwise(pl.col("_wf")),
        running=pl.when(pl.col("time").is_not_null()).then(pl.col("running")).otherwise(pl.col("_rf")),
    )
    # Window max of kv_usage: fixed point x1000, encoded with the row for provenance.
    big = 1 << 32
    enc = st.select(
        "time",
        "_ek",
        pl.when(pl.col("kv_usage").is_between(-1e6, 1e6))  # absurd values (1e22 %) would overflow the encoding
        .then((pl.col("kv_usage") * 1000).round().cast(pl.Int64) * big + pl.col("_row").cast(pl.Int64))
        .alias("_enc"),
    )
    mx = window_max(ev, enc, "_enc", before_us + after_us, by="_ek")
    mx_val = ((pl.col("_max").floordiv(big)) / 1000.0).round(
        3
    )  # the x1000 fixed point back: 99.1, not 99.10000000000001
    mx_row = pl.col("_max") - pl.col("_max").floordiv(big) * big
    mx = mx.with_columns(stats_kv_usage_max=mx_val, _mrow=mx_row)
    srcs = st.get_column(k)
    mx = mx.with_columns(
        stats_kv_usage_max_src=pl.when(pl.col("_max").is_not_null()).then(
            srcs.gather(mx.get_column("_mrow").fill_null(0).cast(pl.UInt32))
        )
    )

    j = (
        ev.select("_i")
        .join(at.select("_i", "kv_usage", "waiting", "running", *_uniq(k, w, r)), on="_i", how="left")
        .join(
            hi.select(
                "_i",
                pl.col("waiting").alias("_wh"),
                pl.col("running").alias("_rh"),
                *(pl.col(c).alias(f"{c}_h") for c in _uniq(w, r)),
            ),
            on="_i",
            how="left",
        )
        .join(lo.select("_i", pl.col("waiting").alias("_wl"), pl.col("running").alias("_rl")), on="_i", how="left")
        .join(mx.select("_i", "stats_kv_usage_max", "stats_kv_usage_max_src"), on="_i", how="left")
    )
    wd = pl.col("_wh") - pl.col("_wl")
    rd = pl.col("_rh") - pl.col("_rl")
    window = j.select(
        "_i",
        *cited("stats_kv_usage_max", pl.col("stats_kv_usage_max"), pl.col("stats_kv_usage_max_src")),
        *cited("stats_kv_usage_at", pl.col("kv_usage"), pl.col(k)),
        *cited("stats_waiting_at", pl.col("waiting"), pl.col(w)),
        *cited("stats_waiting_delta", wd, pl.col(f"{w}_h")),
        *cited("stats_running_at", pl.col("running"), pl.col(r)),
        *cited("stats_running_delta", rd, pl.col(f"{r}_h")),
    )
    iv = ev.filter(pl.col("_iend").is_not_null())
    if iv.height == 0:
        return window
    interval = _interval_lines(iv, st, before_us, (k, w, r))
    interval = interval.select(window.columns).cast(window.schema)
    return pl.concat([window.join(interval.select("_i"), on="_i", how="anti"), interval], how="vertical")


# A /metrics scrape holds each gauge on its own line (prom_series ``<gauge>_line``): each value is cited by
# its own sample, never by the scrape's first line; a stats line holds all three (``_ssrc``).
_OWN = {"kv_usage": "_ksrc", "waiting": "_wsrc", "running": "_rsrc"}


def _value_srcs(st: pl.DataFrame) -> tuple[str, str, str]:
    """The ``file:line`` columns that cite kv_usage, waiting and running of ``st``'s rows."""
    k, w, r = (n if f"{c}_line" in st.columns else "_ssrc" for c, n in _OWN.items())
    return k, w, r


def _uniq(*cols: str) -> list[str]:
    return list(dict.fromkeys(cols))


_folder = folder_of  # the folder of a file's display name (common.folder_of)


MAX_DEPTH = 12  # folder levels a lane looks up through


def _prefix(k: int, col: str = "source") -> pl.Expr:
    """The first ``k`` folders of a file's folder (``x/a/logs/vllm.log``, k=2 -> ``x/a``), null when
    it has fewer."""
    return _folder(col).str.extract(r"^/?((?:[^/]+/){" + str(k - 1) + r"}[^/]+)", 1)


def lanes(
    ev: pl.DataFrame, st: pl.DataFrame, own_stream: bool, log_streams: pl.DataFrame | None = None
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The lookup key ``_ek`` of events and stats lines, the nearest place first: ``engine|s:stream``
    for a log event (own_stream: its stream's lines, or none when its log has none: another log is
    another server's; ``engine|s:stream/container`` where both carry a container ``_ct``, a log of several
    containers' lines: model/containers.py), else ``engine|dK:folder`` for
    the deepest folder above the event's file that holds lines of its engine (its own folder, else the
    one above it: a bundle keeps one server's files under one folder, ``a/logs/vllm.log`` and
    ``a/metrics/01.prom``; two servers side by side are two folders), else ``engine|*``: the engine's
    lines of every stream and folder. The lines are copied under each key some event uses (a few
    stats lines or scrapes per event window)."""
    star = pl.concat_str([pl.col("_eng"), pl.lit("|*")])
    levels: list[tuple[str, pl.Expr]] = []
    contained = "_ct" in st.columns and "_ct" in ev.columns
    stream = stream_lane() if contained else pl.col("stream").cast(pl.String)
    if own_stream and "stream" in st.columns and "stream" in ev.columns:
        levels.append(("s", stream))
    if "source" in st.columns and "source" in ev.columns:
        depth = ev.select(_folder().str.count_matches("/").max()).item()
        # Only folders below the one every file shares (the bundle's own folder holds every server:
        # looking up to it is looking everywhere, the "*" lane).
        names = pl.concat([df.select(pl.col("source").cast(pl.String)) for df in (ev, st)]).get_column("source")
        root = shared_depth(folders(x) for x in names.unique().to_list())
        for k in range(min(int(depth or 0) + 1, MAX_DEPTH), root, -1):
            levels.append((f"d{k}", _prefix(k)))
    ev = ev.with_columns(_ek=star)
    copies = []
    chosen = pl.lit(None, pl.String)
    keys = []
    for tag, place in levels:
        lane = pl.concat_str([pl.col("_eng"), pl.lit(f"|{tag}:"), place])
        rows = st.with_columns(_ek=lane).filter(pl.col("_ek").is_not_null())
        have = rows.get_column("_ek").unique().implode()
        keys.append((rows, tag))
        chosen = pl.coalesce(chosen, pl.when(lane.is_in(have)).then(lane))
    picked = pl.coalesce(chosen, star)
    if levels and levels[0][0] == "s" and log_streams is not None and log_streams.height:
        # A log event is its log's server's: it reads its own stream's lines or none. Another log
        # beside it is another server's (two servers' logs in one folder) or at best unknown: its
        # lines never explain this event, not even when the event's own log has none (stats off).
        own = pl.concat_str([pl.col("_eng"), pl.lit("|s:"), stream])
        have_own = keys[0][0].get_column("_ek").unique().implode()
        of_log = pl.col("stream").cast(pl.Int32).is_in(log_streams.get_column("stream").implode()).fill_null(False)
        picked = (
            pl.when(~of_log)
            .then(picked)
            .when(own.is_in(have_own))
            .then(own)
            .otherwise(pl.concat_str([pl.col("_eng"), pl.lit("|none")]))
        )
    ev = ev.with_columns(_ek=picked)
    used = set(ev.get_column("_ek").unique().to_list())
    for rows, tag in keys:
        if any(k.split("|", 1)[1].startswith(f"{tag}:") for k in used if "|" in k):
            copies.append(rows.filter(pl.col("_ek").is_in(list(used))))
    if any(k.endswith("|*") for k in used):
        copies.append(st.with_columns(_ek=star))
    st = pl.concat(copies, how="vertical") if copies else st.with_columns(_ek=star).clear()
    return ev, st


def _interval_lines(iv: pl.DataFrame, st: pl.DataFrame, before_us: int, srcs: tuple[str, str, str]) -> pl.DataFrame:
    """A counted interval judged by its own lines (rule 3 of issue 13): the engine's stats lines
    in ``[_lo, _iend]`` (for a ``Preemptions: N`` line, the previous line and the reporting one),
    else the reporting line alone (the last at or before the end, at most ``before`` ahead of the start). Maxima over
    them, ``*_at`` of the reporting line, ``*_delta`` reporting minus first; cited first and last, each
    value by its own line (``srcs``: the kv_usage, waiting and running ``file:line`` columns)."""
    k, w, r = srcs
    lines = (
        st.sort("_ek", "time", "seq")
        .with_row_index("_r")
        .select("_r", "time", "_ek", "kv_usage", "waiting", "running", *_uniq(k, w, r))
    )
    first = asof(
        iv.select("_i", "_lo", "_ek"),
        lines.select("time", "_ek", "_r"),
        left_on="_lo",
        right_on="time",
        by=["_ek"],
        strategy="forward",
    )
    last = asof(
        iv.select("_i", "_lo", "_iend", "_ek"),
        lines.select("time", "_ek", "_r"),
        left_on="_iend",
        right_on="time",
        by=["_ek"],
    )
    # The reporting line is in the interval, or at most `before` ahead of its start.
    last = last.filter(pl.col("time") >= pl.col("_lo") - pl.duration(microseconds=before_us))
    rng = (
        last.select("_i", pl.col("_r").alias("_b"))
        .join(first.select("_i", pl.col("_r").alias("_a")), on="_i", how="left")
        .filter(pl.col("_b").is_not_null())
        .with_columns(_a=pl.min_horizontal(pl.col("_a").fill_null(pl.col("_b")), pl.col("_b")))
        .with_columns(_r=pl.int_ranges("_a", pl.col("_b") + 1, dtype=pl.UInt32))
        .explode("_r")
        .join(lines, on="_r", how="left")
        .sort("_i", "_r")
    )

    def ends(c: str) -> pl.Expr:  # the first and last lines with the value ("a; b"), one when alone
        got = pl.col(c).drop_nulls()
        return (
            pl.when(got.len() <= 1).then(got.last()).otherwise(pl.concat_str([got.first(), pl.lit("; "), got.last()]))
        )

    kv = pl.col("kv_usage")
    agg = rng.group_by("_i").agg(
        kv.max().alias("_kv_max"),
        kv.last().alias("_kv_at"),
        pl.col("waiting").max().alias("_w_max"),
        (pl.col("waiting").last() - pl.col("waiting").first()).alias("_w_d"),
        pl.col("running").last().alias("_r_at"),
        (pl.col("running").last() - pl.col("running").first()).alias("_r_d"),
        pl.col(k).last().alias("_k_last"),
        pl.col(r).last().alias("_r_last"),
        ends(k).alias("_k_both"),
        ends(w).alias("_w_both"),
        ends(r).alias("_r_both"),
    )
    out = iv.select("_i").join(agg, on="_i", how="left")
    return out.select(
        "_i",
        *cited("stats_kv_usage_max", pl.col("_kv_max"), pl.col("_k_both")),
        *cited("stats_kv_usage_at", pl.col("_kv_at"), pl.col("_k_last")),
        *cited("stats_waiting_at", pl.col("_w_max"), pl.col("_w_both")),
        *cited("stats_waiting_delta", pl.when(pl.len() > 0).then(pl.col("_w_d")), pl.col("_w_both")),
        *cited("stats_running_at", pl.col("_r_at"), pl.col("_r_last")),
        *cited("stats_running_delta", pl.col("_r_d"), pl.col("_r_both")),
    )
