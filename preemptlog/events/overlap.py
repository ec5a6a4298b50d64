"""Per-preemption lines and counters in the same log: count each preemption once.

A patched scheduler (or the field guide's hook) can print a ``PREEMPTED`` marker
line for every preemption while the same log also counts them: V0's sampled
warnings with ``total_num_cumulative_preemption``, or V1's ``Preemptions: N``.
Without care every marked preemption would be counted twice (a marker event and
a reconstructed / interval event).

Rule, per stream (a log and its rotated parts), in time order:

1. A marker with the same request id as a logged V0 warning of the stream, within
   ``DUP_S`` seconds of it, is the same preemption: the marker is dropped (the
   warning carries the counter).
2. Counter events fill only what the lines do not show. With ``C_i`` the counter
   at count line ``i`` (V0: its cumulative total within the counter run; V1: the
   running sum of ``Preemptions:``), ``L_i`` the logged V0 warnings so far and
   ``M_i`` the markers up to its time, the count events kept up to line ``i`` are
   ``K_i = cummax(max(0, C_i - L_i - M_i))``; line ``i`` keeps ``K_i - K_{i-1}`` of
   its reconstructed / interval events (the latest ids). So the events total is
   ``max(C, L + M)``: the counter's total when it saw more, the lines' when they did.
   V1 counts lag (a preemption is counted when the request runs again), which the
   cumulative form absorbs.

Markers after the last count line are kept: they are preemptions the counter has
not reported yet (V0 hides up to 49 after its last warning).
"""

from __future__ import annotations

from typing import Any

import polars as pl

DUP_S = 2.0


def merge(events: pl.DataFrame) -> tuple[pl.DataFrame, dict[str, Any]]:
    facts: dict[str, Any] = {"markers_duplicating_warnings": 0, "count_events_replaced_by_lines": 0}
    if events.height == 0:
        return events, facts
    kinds = set(events.get_column("kind").unique().to_list())
    if "marker" not in kinds or not ({"logged", "reconstructed", "interval"} & kinds):
        return events, facts
    ev = events.with_row_index("_row")
    markers = ev.filter((pl.col("kind") == "marker") & pl.col("time").is_not_null())
    logged = ev.filter((pl.col("kind") == "logged") & pl.col("time").is_not_null() & pl.col("request_id").is_not_null())

    # 1. markers that repeat a logged V0 warning
    drop: set[int] = set()
    if markers.height and logged.height:
        # One marker per warning: the nearest one (a request can be preempted twice in a few seconds).
        pairs = (
            markers.select("_row", "stream", "request_id", "time", "seq")
            .join(
                logged.select(
                    "stream",
                    "request_id",
                    pl.col("time").alias("_lt"),
                    pl.col("_row").alias("_lrow"),
                    pl.col("seq").alias("_lseq"),
                ),
                on=["stream", "request_id"],
            )
            .with_columns(
                _d=(pl.col("time") - pl.col("_lt")).abs(),
                # ties at one-second resolution go to the nearest line
                _dl=(pl.col("seq").cast(pl.Int64) - pl.col("_lseq").cast(pl.Int64)).abs(),
            )
            .filter(pl.col("_d") <= pl.duration(microseconds=int(DUP_S * 1e6)))
            .sort("_d", "_dl", "_row")
        )
        used_m: set[int] = set()
        used_l: set[int] = set()
        dup = []
        for m_row, l_row in pairs.select("_row", "_lrow").iter_rows():  # pairs of candidates only, not lines
            if m_row in used_m or l_row in used_l:
                continue
            used_m.add(m_row)
            used_l.add(l_row)
            dup.append(m_row)
        drop.update(dup)
        facts["markers_duplicating_warnings"] = len(dup)
    markers = markers.filter(~pl.col("_row").is_in(list(drop)))

    # 2. count events fill only what the lines do not show
    counted = ev.filter(pl.col("kind").is_in(["reconstructed", "interval"]))
    if counted.height and markers.height:
        drop.update(_trim_counts(ev, markers))
    facts["count_events_replaced_by_lines"] = len(drop) - facts["markers_duplicating_warnings"]
    if not drop:
        return events, facts
    return ev.filter(~pl.col("_row").is_in(list(drop))).drop("_row"), facts


def _trim_counts(ev: pl.DataFrame, markers: pl.DataFrame) -> list[int]:
    """Rows of reconstructed / interval events made redundant by marker lines."""
    out: list[int] = []
    for (stream,), grp in ev.filter(pl.col("stream").is_not_null()).group_by("stream"):
        mk = markers.filter(pl.col("stream") == stream).get_column("time").sort()
        if mk.len() == 0:
            continue
        # One row per count line: the line's own time and its count of events.
        lines = (
            grp.filter(pl.col("kind").is_in(["logged", "reconstructed", "interval"]))
            .with_columns(
                _line_t=pl.when(pl.col("kind") == "reconstructed")
                .then(pl.col("interval_end"))
                .otherwise(pl.when(pl.col("kind") == "interval").then(pl.col("interval_end")).otherwise(pl.col("time")))
            )
            .group_by("source", "line", maintain_order=True)
            .agg(
                pl.col("_line_t").max().alias("t"),
                (pl.col("kind") == "logged").sum().alias("logged"),
                pl.col("kind").is_in(["reconstructed", "interval"]).sum().alias("counts"),
                pl.col("cumulative").max().alias("cum"),
                pl.col("kind").is_in(["interval"]).any().alias("is_interval"),
            )
            .filter(pl.col("t").is_not_null())
            .sort("t", "line")
        )
        if lines.height == 0:
            continue
        # Counter value at each line: V0 = cumulative within its run (a restart resets it);
        # V1 = running sum of the interval counts. Markers are counted per run.
        run = (pl.col("cum") < pl.col("cum").shift(1).forward_fill()).fill_null(False).cast(pl.Int32).cum_sum()
        lines = lines.with_columns(
            _run=pl.when(pl.col("is_interval")).then(pl.lit(-1)).otherwise(run),
            _m=pl.Series(mk.search_sorted(lines.get_column("t"), side="right")).cast(pl.Int64),
        )
        res = []
        prev_m = 0
        for (_r,), part in lines.group_by("_run", maintain_order=True):
            part = part.sort("t", "line").with_columns(
                _c=pl.when(pl.col("is_interval")).then(pl.col("counts").cum_sum()).otherwise(pl.col("cum")),
                _l=pl.col("logged").cum_sum(),
                _mm=pl.col("_m") - prev_m,
            )
            prev_m = int(part.get_column("_m").max())
            part = part.with_columns(_k=(pl.col("_c") - pl.col("_l") - pl.col("_mm")).clip(lower_bound=0).cum_max())
            part = part.with_columns(keep=(pl.col("_k") - pl.col("_k").shift(1).fill_null(0)).clip(lower_bound=0))
            res.append(part.select("source", "line", "counts", "keep"))
        plan = pl.concat(res)
        rows = (
            grp.filter(pl.col("kind").is_in(["reconstructed", "interval"]))
            .join(plan, on=["source", "line"], how="inner")
            .sort("source", "line", "_sub")
            .with_columns(_rank=pl.int_range(pl.len()).over("source", "line"))
            # keep the latest ids: drop the first (counts - keep) of each line
            .filter(pl.col("_rank") < (pl.col("counts") - pl.col("keep")))
            .get_column("_row")
            .to_list()
        )
        out.extend(rows)
    return out
