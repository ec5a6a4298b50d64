"""Stats lines per engine, and counted intervals judged by their own lines."""

from __future__ import annotations

import polars as pl

from .common import asof, src_expr, window_max, with_eng
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


def section_stats(ev: pl.DataFrame, stats: pl.DataFrame | None, before_us: int, after_us: int) -> pl.DataFrame | None:
    """Stats-line evidence, per engine (rule 4 of issue 13).

    An event only reads stats lines of its own engine (``Engine NNN``; ``N Engines
    Aggregated`` lines are engine ``all``; a line or event without one is engine "0").
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
    st = with_eng(st).sort("time", "stream", "seq").with_row_index("_row").with_columns(_ssrc=src_expr())
    tol = f"{before_us}us"
    by = ["_eng"]
    at = asof(
        ev.select("_i", "_t", "_eng"),
        st.select("time", "_eng", "kv_usage", "waiting", "running", "_ssrc"),
        left_on="_t",
        right_on="time",
        by=by,
        tolerance=tol,
    )
    hi = asof(
        ev.select("_i", "_hi", "_eng"),
        st.select("time", "_eng", "waiting", "running", "_ssrc"),
        left_on="_hi",
        right_on="time",
        by=by,
        tolerance=tol,
    )
    lo = asof(
        ev.select("_i", "_lo", "_eng"),
        st.select("time", "_eng", "waiting", "running"),
        left_on="_lo",
        right_on="time",
        by=by,
        tolerance=tol,
    )
    # No stats line before the window: the change is counted from the first one inside it.
    first = asof(
        ev.select("_i", "_lo", "_eng"),
        st.select("time", "_eng", "waiting", "running"),
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
        "_eng",
        pl.when(pl.col("kv_usage").is_between(-1e6, 1e6))  # absurd values (1e22 %) would overflow the encoding
        .then((pl.col("kv_usage") * 1000).round().cast(pl.Int64) * big + pl.col("_row").cast(pl.Int64))
        .alias("_enc"),
    )
    mx = window_max(ev, enc, "_enc", before_us + after_us, by="_eng")
    mx_val = (pl.col("_max").floordiv(big)) / 1000.0
    mx_row = pl.col("_max") - pl.col("_max").floordiv(big) * big
    mx = mx.with_columns(stats_kv_usage_max=mx_val, _mrow=mx_row)
    srcs = st.get_column("_ssrc")
    mx = mx.with_columns(
        stats_kv_usage_max_src=pl.when(pl.col("_max").is_not_null()).then(
            srcs.gather(mx.get_column("_mrow").fill_null(0).cast(pl.UInt32))
        )
    )

    j = (
        ev.select("_i")
        .join(at.select("_i", "kv_usage", "waiting", "running", "_ssrc"), on="_i", how="left")
        .join(
            hi.select(
                "_i", pl.col("waiting").alias("_wh"), pl.col("running").alias("_rh"), pl.col("_ssrc").alias("_ssrc_h")
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
        *cited("stats_kv_usage_at", pl.col("kv_usage"), pl.col("_ssrc")),
        *cited("stats_waiting_at", pl.col("waiting"), pl.col("_ssrc")),
        *cited("stats_waiting_delta", wd, pl.col("_ssrc_h")),
        *cited("stats_running_at", pl.col("running"), pl.col("_ssrc")),
        *cited("stats_running_delta", rd, pl.col("_ssrc_h")),
    )
    iv = ev.filter(pl.col("_iend").is_not_null())
    if iv.height == 0:
        return window
    interval = _interval_lines(iv, st, before_us)
    interval = interval.select(window.columns).cast(window.schema)
    return pl.concat([window.join(interval.select("_i"), on="_i", how="anti"), interval], how="vertical")


def _interval_lines(iv: pl.DataFrame, st: pl.DataFrame, before_us: int) -> pl.DataFrame:
    """A counted interval judged by its own lines (rule 3 of issue 13): the engine's stats lines
    in ``[_lo, _iend]`` (for a ``Preemptions: N`` line, the previous line and the reporting one),
    else the reporting line alone (the last at or before the end, at most ``before`` ahead of the start). Maxima over
    them, ``*_at`` of the reporting line, ``*_delta`` reporting minus first; cited first and last."""
    lines = (
        st.sort("_eng", "time", "seq")
        .with_row_index("_r")
        .select("_r", "time", "_eng", "kv_usage", "waiting", "running", "_ssrc")
    )
    first = asof(
        iv.select("_i", "_lo", "_eng"),
        lines.select("time", "_eng", "_r"),
        left_on="_lo",
        right_on="time",
        by=["_eng"],
        strategy="forward",
    )
    last = asof(
        iv.select("_i", "_lo", "_iend", "_eng"),
        lines.select("time", "_eng", "_r"),
        left_on="_iend",
        right_on="time",
        by=["_eng"],
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
    both = pl.concat_str([pl.col("_ssrc").first(), pl.lit("; "), pl.col("_ssrc").last()])
    one = pl.len() == 1
    src2 = pl.when(one).then(pl.col("_ssrc").last()).otherwise(both)
    kv = pl.col("kv_usage")
    agg = rng.group_by("_i").agg(
        kv.max().alias("_kv_max"),
        pl.col("_ssrc").sort_by(kv.fill_null(-1.0), descending=True).first().alias("_kv_src"),
        kv.last().alias("_kv_at"),
        pl.col("waiting").max().alias("_w_max"),
        (pl.col("waiting").last() - pl.col("waiting").first()).alias("_w_d"),
        pl.col("running").last().alias("_r_at"),
        (pl.col("running").last() - pl.col("running").first()).alias("_r_d"),
        pl.col("_ssrc").last().alias("_last_src"),
        src2.alias("_both"),
    )
    out = iv.select("_i").join(agg, on="_i", how="left")
    return out.select(
        "_i",
        *cited("stats_kv_usage_max", pl.col("_kv_max"), pl.col("_both")),
        *cited("stats_kv_usage_at", pl.col("_kv_at"), pl.col("_last_src")),
        *cited("stats_waiting_at", pl.col("_w_max"), pl.col("_both")),
        *cited("stats_waiting_delta", pl.when(pl.len() > 0).then(pl.col("_w_d")), pl.col("_both")),
        *cited("stats_running_at", pl.col("_r_at"), pl.col("_last_src")),
        *cited("stats_running_delta", pl.col("_r_d"), pl.col("_both")),
    )
