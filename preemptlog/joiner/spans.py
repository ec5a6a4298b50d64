"""Lookups of an event's span (``[_slo, _shi]``) over intervals and records, bounded by overlap.

The code section (joiner/code.py) judges every event by its span: the strongest suspected pressure
interval of its engine overlapping it (``up_pressure``) and the failed allocations recorded inside
it (``up_failed_allocs``). A cross join of the spans with the intervals or records grows with
events x rows (issue 36: 10 231 markers x one pressure interval citing its 19 361 stats lines took
1.1 GB and 24 s at 4 GB). Here:

- the spans are the distinct ``(_eng, _slo, _shi)`` of the events (the events of one counted
  interval share one);
- intervals overlapping a span are found with an inequality join (``join_where``: only the
  overlapping pairs are made), on narrow columns; the text of an interval is made once per
  interval that is chosen, never per event;
- records inside a span are counted by binary search over each engine's sorted times, and the
  first four cited are gathered by row number; only when the records are not in time order are
  the rows inside the spans listed (still no more than the spans hold).

The results are those of the cross joins they replace, row for row (tests/joiner/test_joiner_spans.py).
"""

from __future__ import annotations

import polars as pl

from ..clock.timebase import iso
from ..events.pressure import running_words

SPAN = ["_eng", "_slo", "_shi"]
_I64_MIN = -(1 << 63)
_I64_MAX = (1 << 63) - 1
CITED = 4  # records cited by up_failed_allocs before "(+N more)"


def _spans(span: pl.DataFrame) -> pl.DataFrame:
    """The distinct spans (and places ``_ek``, when given), each with its events (``_i`` list) and a
    number ``_sp``."""
    key = [*SPAN, "_ek"] if "_ek" in span.columns else SPAN
    return span.group_by(key, maintain_order=True).agg(pl.col("_i")).with_row_index("_sp")


def _us(col: str, fill: int) -> pl.Expr:
    """A datetime column as microseconds since the epoch, a null end made unbounded."""
    return pl.col(col).dt.epoch("us").fill_null(fill)


def pressure_in_spans(span: pl.DataFrame, piv: pl.DataFrame | None) -> pl.DataFrame | None:
    """The strongest pressure interval of the event's engine overlapping its span (``up_pressure``,
    ``up_pressure_src``: the interval's first three evidence lines, ``(+N more)``).

    ``span``: ``_i``, ``_eng``, ``_slo``, ``_shi`` (a null end is unbounded). ``piv``: the pressure
    intervals (events/pressure.py) of every engine. Overlap: the interval ends at or after ``_slo``
    and starts (``since``, else ``start``) at or before ``_shi``. Strongest: highest peak KV usage,
    then most waiting (nulls last), then the earlier interval in ``piv``. When both carry a place key
    ``_ek`` (code.py ``_own_server_pressure``: ``piv`` then holds one row per place, its own number
    ``_p``), a span reads only the intervals of its place.
    """
    if piv is None or piv.height == 0:
        return None
    placed = "_ek" in span.columns and "_ek" in piv.columns
    if "_p" not in piv.columns:
        piv = piv.with_row_index("_p")
    p = piv.select(
        "_p",
        pl.col("_ek").alias("_pek") if placed else pl.lit("*").alias("_pek"),
        pl.col("engine").cast(pl.String).fill_null("0").alias("_peng"),
        pl.col("end").dt.epoch("us").alias("_pend"),
        pl.coalesce("since", "start").dt.epoch("us").alias("_plo"),
        "peak_kv_usage",
        "max_waiting",
    )
    spans = _spans(span)
    s = spans.select(
        "_sp",
        "_eng",
        pl.col("_ek") if placed else pl.lit("*").alias("_ek"),
        _us("_slo", _I64_MIN).alias("_lo"),
        _us("_shi", _I64_MAX).alias("_hi"),
    )
    known = pl.col("_pend").is_not_null() & pl.col("_plo").is_not_null()
    # Only the overlapping pairs are made (an inequality join), never spans x intervals.
    pairs = s.join_where(p.filter(known), pl.col("_pend") >= pl.col("_lo"), pl.col("_plo") <= pl.col("_hi"))
    odd = p.filter(~known)
    if odd.height:
        # An interval without an end (start) overlaps only the spans without a start (end).
        more = s.join(odd, how="cross").filter(
            ((pl.col("_lo") == _I64_MIN) | (pl.col("_pend") >= pl.col("_lo"))).fill_null(False)
            & ((pl.col("_hi") == _I64_MAX) | (pl.col("_plo") <= pl.col("_hi"))).fill_null(False)
        )
        pairs = pl.concat([pairs, more.select(pairs.columns)], how="vertical")
    hits = (
        pairs.filter(
            ((pl.col("_peng") == pl.col("_eng")) | (pl.col("_peng") == "all") | (pl.col("_eng") == "all"))
            & (pl.col("_pek") == pl.col("_ek"))
        )
        .sort(
            ["peak_kv_usage", "max_waiting", "_p"], descending=[True, True, False], nulls_last=True, maintain_order=True
        )
        .unique("_sp", keep="first", maintain_order=True)
        .select("_sp", "_p")
    )
    if hits.height == 0:
        return None
    texts = _pressure_texts(
        piv.unique("_p", keep="first", maintain_order=True).join(hits.select("_p").unique(), on="_p", how="semi")
    )
    return (
        hits.join(spans.select("_sp", "_i"), on="_sp", how="left")
        .join(texts, on="_p", how="left")
        .explode("_i")
        .select(pl.col("_i").cast(pl.UInt32), "up_pressure", "up_pressure_src")
    )


def pressure_src(evidence: list[str], n: int | None = None) -> str:
    """How an event cites a pressure interval (``up_pressure_src``): its first three evidence lines,
    ``(+N more)``; the summary finds the intervals the events cite by it."""
    n = len(evidence) if n is None else n
    return ", ".join(evidence[:3]) + (f" (+{n - 3} more)" if n > 3 else "")


def _pressure_texts(p: pl.DataFrame) -> pl.DataFrame:
    """One row per interval (``_p``): its ``up_pressure`` text and ``up_pressure_src``. A Python loop
    over the chosen intervals (never the events); the evidence list is cut to three lines first."""

    rows = []
    small = p.select(
        "_p",
        "start",
        "end",
        "peak_kv_usage",
        "max_waiting",
        "max_running",
        "min_running",
        pl.col("evidence").list.head(3).alias("_ev3"),
        pl.col("evidence").list.len().fill_null(0).alias("_evn"),
    )
    for r in small.iter_rows(named=True):
        running = running_words(r["max_running"], r["min_running"])
        text = (
            f"{(iso(r['start'], 'UTC') or '')[11:19]}-{(iso(r['end'], 'UTC') or '')[11:19]} UTC: peak KV {r['peak_kv_usage']:.1f}%, up "
            f"to {r['max_waiting']} waiting" + (f", {running}" if running else "")
        )
        src = pressure_src(list(r["_ev3"] or []), r["_evn"])
        rows.append({"_p": r["_p"], "up_pressure": text, "up_pressure_src": src or None})
    return pl.DataFrame(rows, schema={"_p": pl.UInt32, "up_pressure": pl.String, "up_pressure_src": pl.String})


def failed_in_spans(span: pl.DataFrame, rec: pl.DataFrame) -> pl.DataFrame | None:
    """Per event with both span ends: the records of its engine (every engine's for engine ``all``)
    with ``_slo <= time <= _shi``, counted (``_n``), the first :data:`CITED` of them in ``rec``
    order joined by ``; `` (``_srcs``); events without such records are left out.

    ``span``: ``_i``, ``_eng``, ``_slo``, ``_shi``; ``rec``: ``time``, ``_reng``, ``_src`` (the
    failed preempt records, in their frame order). A span without a start gets nothing, as in the
    cross join this replaces (its key join did not match a null ``_slo``)."""
    spans = _spans(span.filter(pl.col("_shi").is_not_null() & pl.col("_slo").is_not_null()))
    rec = rec.filter(pl.col("time").is_not_null())
    if spans.height == 0 or rec.height == 0:
        return None
    rec = rec.with_row_index("_r")
    found = []
    for eng in spans.get_column("_eng").unique(maintain_order=True).to_list():
        recs = rec if eng == "all" else rec.filter(pl.col("_reng") == eng)
        if recs.height:
            hit = _in_spans(spans.filter(pl.col("_eng") == eng), recs)
            if hit.height:
                found.append(hit)
    if not found:
        return None
    return (
        pl.concat(found, how="vertical")
        .join(spans.select("_sp", "_i"), on="_sp", how="left")
        .explode("_i")
        .select(pl.col("_i").cast(pl.UInt32), "_n", "_srcs")
    )


def _in_spans(spans: pl.DataFrame, recs: pl.DataFrame) -> pl.DataFrame:
    """``_sp``, ``_n``, ``_srcs`` of the spans with records of ``recs`` inside them: counted by
    binary search over the sorted times, the cited ones gathered by row."""
    srt = recs.sort("time", "_r")  # ties keep the frame order
    times = srt.get_column("time")
    a = times.search_sorted(spans.get_column("_slo"), side="left").cast(pl.Int64)
    b = times.search_sorted(spans.get_column("_shi"), side="right").cast(pl.Int64)
    rng = spans.select("_sp", a.alias("_a"), b.alias("_b")).filter(pl.col("_b") > pl.col("_a"))
    if rng.height == 0:
        return pl.DataFrame(schema={"_sp": pl.UInt32, "_n": pl.UInt32, "_srcs": pl.String})
    if recs.get_column("time").is_sorted():
        # Frame order is time order: the first cited are the first in the span.
        ends = pl.min_horizontal(pl.col("_a") + CITED, pl.col("_b"))
    else:
        # Frame order is not time order: the span's records are listed, the first in frame order cited.
        ends = pl.col("_b")
    idx = rng.select("_sp", pl.int_ranges("_a", ends).alias("_k")).explode("_k")
    k = idx.get_column("_k")
    cited = (
        idx.with_columns(_r=srt.get_column("_r").gather(k), _src=srt.get_column("_src").gather(k))
        .sort("_sp", "_r")
        .group_by("_sp", maintain_order=True)
        .agg(pl.col("_src").head(CITED).str.join("; ").alias("_srcs"))
    )
    n = (pl.col("_b") - pl.col("_a")).cast(pl.UInt32).alias("_n")
    return rng.select("_sp", n).join(cited, on="_sp", how="left", maintain_order="left")
