"""The joiner's lookups bounded by what each event's window holds (issue 36), against the joins they
replace: same rows, whatever the shapes.

The references below are the code before issue 36: joiner/code.py's ``_pressure`` and
``_failed_allocations`` (a cross join of the events' spans with every pressure interval / failed
preempt record, then a filter) and joiner/request.py's G4 lookup (every table that ever held one
of the event's shared blocks, then a filter on the window): correct, but events x rows in memory.
The bounded versions (joiner/spans.py, joiner/common.rows_in_ranges, request._prefix_conflicts)
must give the same values and sources for every event; the ``bounded`` tests run shapes whose
joins made hundreds of millions of rows.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import polars as pl
import pytest

from preemptlog.joiner import spans as S
from preemptlog.joiner.common import rows_in_ranges, src_expr
from preemptlog.joiner.request import _prefix_conflicts

T0 = datetime(2026, 11, 20, 8, 0, 0, tzinfo=UTC)
DT = pl.Datetime("us", "UTC")


# --- the references (the cross joins of joiner/code.py before issue 36) ---------------------------


def ref_pressure(span: pl.DataFrame, piv: pl.DataFrame | None) -> pl.DataFrame | None:
    if piv is None or piv.height == 0:
        return None
    from preemptlog.clock.timebase import iso

    p = piv.with_row_index("_p").with_columns(
        _plo=pl.coalesce("since", "start"),
        _peng=pl.col("engine").cast(pl.String).fill_null("0"),
    )
    spans = span.group_by("_eng", "_slo", "_shi").agg(pl.col("_i"))
    hits = (
        spans.join(p, how="cross")
        .filter(
            ((pl.col("_peng") == pl.col("_eng")) | (pl.col("_peng") == "all") | (pl.col("_eng") == "all"))
            & (pl.col("_slo").is_null() | (pl.col("end") >= pl.col("_slo")))
            & (pl.col("_shi").is_null() | (pl.col("_plo") <= pl.col("_shi")))
        )
        # (the reference sorts stably with the interval's number last: the order the bounded
        # version documents; the old sort left ties to polars)
        .sort(
            "peak_kv_usage", "max_waiting", "_p", descending=[True, True, False], nulls_last=True, maintain_order=True
        )
        .unique(["_eng", "_slo", "_shi"], keep="first", maintain_order=True)
    )
    if hits.height == 0:
        return None
    rows = []
    for r in hits.iter_rows(named=True):
        text = (
            f"{(iso(r['start'], 'UTC') or '')[11:19]}-{(iso(r['end'], 'UTC') or '')[11:19]} UTC: peak KV {r['peak_kv_usage']:.1f}%, up "
            f"to {r['max_waiting']} waiting, running {r['max_running']}->{r['min_running']}"
        )
        ev = list(r["evidence"] or [])
        src = ", ".join(ev[:3]) + (f" (+{len(ev) - 3} more)" if len(ev) > 3 else "")
        for i in r["_i"]:
            rows.append({"_i": i, "up_pressure": text, "up_pressure_src": src or None})
    return pl.DataFrame(rows, schema={"_i": pl.UInt32, "up_pressure": pl.String, "up_pressure_src": pl.String})


def ref_failed(span: pl.DataFrame, rec: pl.DataFrame) -> pl.DataFrame | None:
    spans = span.filter(pl.col("_shi").is_not_null()).group_by("_eng", "_slo", "_shi").agg(pl.col("_i"))
    hits = (
        spans.join(rec, how="cross")
        .filter(
            ((pl.col("_reng") == pl.col("_eng")) | (pl.col("_eng") == "all"))
            & (pl.col("_slo").is_null() | (pl.col("time") >= pl.col("_slo")))
            & (pl.col("time") <= pl.col("_shi"))
        )
        .group_by("_eng", "_slo", "_shi")
        .agg(pl.len().alias("_n"), pl.col("_src").head(4).str.join("; ").alias("_srcs"))
    )
    if hits.height == 0:
        return None
    j = spans.join(hits, on=["_eng", "_slo", "_shi"], how="inner").explode("_i")
    return j.select(pl.col("_i").cast(pl.UInt32), "_n", "_srcs")


# --- shapes -------------------------------------------------------------------------------------


def _t(rng: random.Random, span_s: int) -> datetime:
    return T0 + timedelta(seconds=rng.randrange(span_s), microseconds=rng.choice([0, 0, 250_000, 999_999]))


def make_spans(rng: random.Random, n: int, span_s: int = 600) -> pl.DataFrame:
    rows = []
    for i in range(n):
        eng = rng.choice(["0", "0", "1", "all"])
        kind = rng.random()
        if kind < 0.6:  # a point: its window
            t = _t(rng, span_s)
            lo, hi = t - timedelta(seconds=10), t + timedelta(seconds=2)
        elif kind < 0.8:  # a counted interval, shared by several events
            lo = T0 + timedelta(seconds=10 * rng.randrange(span_s // 10))
            hi = lo + timedelta(seconds=10)
        elif kind < 0.9:  # no start
            lo, hi = None, _t(rng, span_s)
        else:  # no end, or neither
            lo, hi = (_t(rng, span_s) if rng.random() < 0.5 else None), None
        rows.append({"_i": i, "_eng": eng, "_slo": lo, "_shi": hi})
    return pl.DataFrame(rows, schema={"_i": pl.UInt32, "_eng": pl.String, "_slo": DT, "_shi": DT})


def make_intervals(rng: random.Random, n: int, span_s: int = 600) -> pl.DataFrame:
    rows = []
    for k in range(n):
        start = _t(rng, span_s)
        end = start + timedelta(seconds=rng.randrange(0, 120))
        since = start - timedelta(seconds=10) if rng.random() < 0.7 else None
        nev = rng.choice([0, 1, 3, 4, 50])
        rows.append(
            {
                "series": "log",
                "engine": rng.choice(["0", "1", "all", None]),
                "start": start,
                "end": end,
                "since": since,
                "peak_kv_usage": rng.choice([95.0, 99.5, 100.0, 97.25]),  # ties on purpose
                "max_waiting": rng.choice([None, 3, 14]),
                "min_running": rng.randrange(20),
                "max_running": 20 + rng.randrange(20),
                "signals": ["kv"],
                "evidence": None
                if nev == 0 and rng.random() < 0.5
                else [f"vllm.log:{k * 100 + j}" for j in range(nev)],
            }
        )
    schema = {
        "series": pl.String,
        "engine": pl.String,
        "start": DT,
        "end": DT,
        "since": DT,
        "peak_kv_usage": pl.Float64,
        "max_waiting": pl.Int64,
        "min_running": pl.Int64,
        "max_running": pl.Int64,
        "signals": pl.List(pl.String),
        "evidence": pl.List(pl.String),
    }
    return pl.DataFrame(rows, schema=schema)


def make_records(rng: random.Random, n: int, span_s: int = 600, ordered: bool = True) -> pl.DataFrame:
    times = [T0 + timedelta(seconds=rng.randrange(span_s)) for _ in range(n)]  # whole seconds: ties
    if ordered:
        times.sort()
    rows = [
        {"time": t, "_reng": rng.choice(["0", "0", "1"]), "_src": f"bt.jsonl:{k + 1}" if rng.random() < 0.95 else None}
        for k, t in enumerate(times)
    ]
    return pl.DataFrame(rows, schema={"time": DT, "_reng": pl.String, "_src": pl.String})


def same(got: pl.DataFrame | None, want: pl.DataFrame | None) -> None:
    if want is None or want.height == 0:
        assert got is None or got.height == 0
        return
    assert got is not None
    assert got.sort("_i").equals(want.sort("_i")), (got.sort("_i"), want.sort("_i"))


# --- tests --------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(40))
def test_pressure_matches_the_cross_join(seed: int) -> None:
    rng = random.Random(seed)
    span = make_spans(rng, rng.choice([1, 5, 40, 200]))
    piv = make_intervals(rng, rng.choice([1, 2, 8, 30]))
    same(S.pressure_in_spans(span, piv), ref_pressure(span, piv))


def test_pressure_without_intervals_or_overlap() -> None:
    rng = random.Random(1)
    span = make_spans(rng, 20)
    assert S.pressure_in_spans(span, None) is None
    assert S.pressure_in_spans(span, make_intervals(rng, 3).head(0)) is None
    far = make_intervals(rng, 3).with_columns(
        start=pl.col("start") + timedelta(days=30), end=pl.col("end") + timedelta(days=30), since=None
    )
    bounded = span.filter(pl.col("_shi").is_not_null())
    same(S.pressure_in_spans(bounded, far), ref_pressure(bounded, far))


def test_pressure_with_null_interval_ends() -> None:
    rng = random.Random(7)
    span = make_spans(rng, 100)
    piv = make_intervals(rng, 10).with_columns(
        end=pl.when(pl.int_range(pl.len()) % 3 == 0).then(None).otherwise(pl.col("end")),
        start=pl.when(pl.int_range(pl.len()) % 4 == 1).then(None).otherwise(pl.col("start")),
        since=pl.when(pl.int_range(pl.len()) % 4 == 1).then(None).otherwise(pl.col("since")),
    )
    same(S.pressure_in_spans(span, piv), ref_pressure(span, piv))


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("ordered", [True, False])
def test_failed_allocations_match_the_cross_join(seed: int, ordered: bool) -> None:
    rng = random.Random(seed)
    span = make_spans(rng, rng.choice([1, 5, 40, 200]))
    rec = make_records(rng, rng.choice([1, 3, 20, 300]), ordered=ordered)
    same(S.failed_in_spans(span, rec), ref_failed(span, rec))


def test_failed_allocations_empty() -> None:
    rng = random.Random(3)
    span = make_spans(rng, 10)
    assert S.failed_in_spans(span, make_records(rng, 5).head(0)) is None
    assert S.failed_in_spans(span.head(0), make_records(rng, 5)) is None


def test_bounded_whatever_the_number_of_events() -> None:
    """10 000 events against one interval citing 20 000 lines and 20 000 failed records: the
    cross joins made 200 M rows (issue 36: 1.1 GB and 24 s at 4 GB); this takes well under a
    second and the results are per event."""
    n, m = 10_000, 20_000
    t = pl.datetime_range(T0, T0 + timedelta(seconds=n - 1), "1s", eager=True, time_zone="UTC")
    span = pl.DataFrame(
        {
            "_i": pl.Series(range(n), dtype=pl.UInt32),
            "_eng": ["0"] * n,
            "_slo": t - timedelta(seconds=10),
            "_shi": t + timedelta(seconds=2),
        }
    )
    piv = make_intervals(random.Random(1), 1).with_columns(
        engine=pl.lit("0"),
        start=pl.lit(T0, DT),
        end=pl.lit(T0 + timedelta(seconds=n), DT),
        since=pl.lit(None, DT),
        evidence=pl.lit(pl.Series([[f"vllm.log:{j}" for j in range(m)]])),
    )
    got = S.pressure_in_spans(span, piv)
    assert got is not None and got.height == n
    assert got.get_column("up_pressure_src").unique().to_list() == [
        f"vllm.log:0, vllm.log:1, vllm.log:2 (+{m - 3} more)"
    ]
    rt = pl.datetime_range(
        T0, T0 + timedelta(seconds=n), interval=f"{n * 1_000_000 // m}us", eager=True, time_zone="UTC"
    )
    rec = pl.DataFrame({"time": rt, "_reng": "0", "_src": [f"bt.jsonl:{k}" for k in range(rt.len())]})
    got = S.failed_in_spans(span, rec)
    assert got is not None and got.height == n
    assert got.get_column("_n").max() <= 12 * m // n + 1


# --- rows_in_ranges: an equality join then a range filter, without the pairs outside the range -------


@pytest.mark.parametrize("seed", range(60))
def test_rows_in_ranges_is_the_join_and_filter(seed: int) -> None:
    rng = random.Random(seed)
    n, m = rng.randrange(0, 80), rng.randrange(0, 40)
    rows = pl.DataFrame(
        {
            "a": [rng.choice(["x", "y", None]) for _ in range(n)],
            "b": [rng.choice([1, 2, None]) for _ in range(n)],
            "t": [rng.choice([None, *range(10)]) for _ in range(n)],
        },
        schema={"a": pl.String, "b": pl.Int64, "t": pl.Int64},
    )
    q = pl.DataFrame(
        {
            "a": [rng.choice(["x", "y", None]) for _ in range(m)],
            "b": [rng.choice([1, 2, None]) for _ in range(m)],
            "lo": [rng.choice([None, *range(10)]) for _ in range(m)],
            "hi": [rng.choice([None, *range(12)]) for _ in range(m)],
        },
        schema={"a": pl.String, "b": pl.Int32, "lo": pl.Int32, "hi": pl.Int64},  # dtypes differ on purpose
    )
    got = rows_in_ranges(q, rows, ["a", "b"], "t", "lo", "hi").sort("_q", "_r")
    want = (
        q.cast({"b": pl.Int64})
        .with_row_index("_q")
        .join(rows.with_row_index("_r"), on=["a", "b"], how="inner")
        .filter(pl.col("t").is_between(pl.col("lo"), pl.col("hi")))
        .select("_q", "_r")
        .sort("_q", "_r")
    )
    assert got.equals(want)


def test_rows_in_ranges_on_times() -> None:
    t = pl.datetime_range(T0, T0 + timedelta(seconds=9), "1s", eager=True, time_zone="UTC")
    rows = pl.DataFrame({"k": ["a"] * 10, "t": t})
    q = pl.DataFrame({"k": ["a", "a", "b"], "lo": [t[2], t[9], t[0]], "hi": [t[4], t[9], t[9]]})
    got = rows_in_ranges(q, rows, ["k"], "t", "lo", "hi")
    assert got.rows() == [(0, 2), (0, 3), (0, 4), (1, 9)]


# --- G4: the other request holding a shared block in the event's window ------------------------------


def ref_prefix_conflicts(shared: pl.DataFrame, tb: pl.DataFrame, ext: pl.DataFrame) -> pl.DataFrame:
    tx = (
        tb.select(
            pl.col("request_id").alias("_other"), "_eng", pl.col("time").alias("_tt"), pl.col("block_ids").alias("_b")
        )
        .explode("_b")
        .join(shared.select("_b", "_eng").unique(), on=["_b", "_eng"], how="semi")
    )
    cand = (
        shared.join(tx, on=["_b", "_eng"], how="inner")
        .filter((pl.col("_other") != pl.col("request_id")) & pl.col("_tt").is_between(pl.col("_lo"), pl.col("_hi")))
        .select("_i", "_lo", "_hi", "_other", "_eng")
        .unique()
    )
    x = ext.select(
        pl.col("request_id").alias("_other"),
        "_eng",
        pl.col("time").alias("_xt"),
        pl.col("step").alias("_xs"),
        src_expr().alias("_xsrc"),
    )
    return (
        cand.join(shared.select("_i", "_ds").unique(), on="_i", how="left")
        .join(x, on=["_other", "_eng"], how="inner")
        .filter(
            pl.when(pl.col("_ds").is_not_null())
            .then(pl.col("_xs").is_between(pl.col("_ds") - 1, pl.col("_ds")).fill_null(False))
            .otherwise(pl.col("_xt").is_between(pl.col("_lo"), pl.col("_hi")))
        )
        .sort("_i", "_xt", "_other")
        .group_by("_i", maintain_order=True)
        .agg(
            pl.col("_other").first().alias("prefix_conflict_with"),
            pl.col("_xsrc").first().alias("prefix_conflict_with_src"),
        )
    )


def g4_frames(rng: random.Random, n_ev: int, n_tab: int, n_ext: int, span_s: int = 20):
    """Events' shared blocks, tables (request, engine, time, blocks) and extend/allocate records; every
    record of a request at its own time (the old sort left ties of one request and time to polars)."""
    reqs = [f"r{k}" for k in range(12)]
    rows = []
    for i in range(n_ev):
        t = T0 + timedelta(seconds=rng.randrange(span_s), microseconds=rng.choice([0, 500_000]))
        ds = rng.choice([None, rng.randrange(1, 12)])
        for b in rng.sample(range(4), rng.randrange(1, 4)):
            rows.append(
                {
                    "_i": i,
                    "_t": t,
                    "request_id": rng.choice(reqs),
                    "_eng": rng.choice(["0", "1"]),
                    "_b": b,
                    "_ds": ds,
                    "_lo": t - timedelta(seconds=1),
                    "_hi": t + timedelta(seconds=1),
                }
            )
    shared = pl.DataFrame(
        rows,
        schema={
            "_i": pl.UInt32,
            "_t": DT,
            "request_id": pl.String,
            "_eng": pl.String,
            "_b": pl.Int64,
            "_ds": pl.Int64,
            "_lo": DT,
            "_hi": DT,
        },
    )
    tb = pl.DataFrame(
        [
            {
                "request_id": rng.choice([*reqs, None]),
                "_eng": rng.choice(["0", "1"]),
                "time": T0 + timedelta(seconds=rng.randrange(span_s), microseconds=rng.choice([0, 500_000])),
                "block_ids": rng.sample(range(5), rng.randrange(0, 4)),
            }
            for _ in range(n_tab)
        ],
        schema={"request_id": pl.String, "_eng": pl.String, "time": DT, "block_ids": pl.List(pl.Int64)},
    )
    used: set = set()
    recs = []
    while len(recs) < n_ext:
        r, t = rng.choice(reqs), rng.randrange(span_s * 4)
        if (r, t) in used:
            continue
        used.add((r, t))
        recs.append(
            {
                "request_id": r,
                "_eng": rng.choice(["0", "1"]),
                "time": T0 + timedelta(microseconds=250_000 * t),
                "step": rng.choice([None, rng.randrange(0, 12)]),
                "source": "bt.jsonl",
                "line": len(recs) + 1,
            }
        )
    ext = pl.DataFrame(
        recs,
        schema={
            "request_id": pl.String,
            "_eng": pl.String,
            "time": DT,
            "step": pl.Int64,
            "source": pl.String,
            "line": pl.UInt32,
        },
    )
    return shared, tb, ext


@pytest.mark.parametrize("seed", range(40))
def test_prefix_conflicts_match_the_join(seed: int) -> None:
    rng = random.Random(seed)
    shared, tb, ext = g4_frames(rng, rng.choice([1, 10, 60]), rng.choice([1, 30, 300]), rng.choice([1, 40, 200]))
    got = _prefix_conflicts(shared, tb, ext).sort("_i")
    want = ref_prefix_conflicts(shared, tb, ext).sort("_i")
    assert got.equals(want), (got, want)


def test_prefix_conflicts_bounded() -> None:
    """2 000 events sharing a prefix block that 100 000 tables hold over 10 000 s: the join on the block
    made 200 M rows before its window filter; the windows hold ~20 tables each."""
    n_ev, n_tab = 2_000, 100_000
    t_ev = pl.datetime_range(T0, T0 + timedelta(seconds=n_ev * 5 - 5), "5s", eager=True, time_zone="UTC")
    shared = pl.DataFrame(
        {
            "_i": pl.Series(range(n_ev), dtype=pl.UInt32),
            "_t": t_ev,
            "request_id": [f"e{i}" for i in range(n_ev)],
            "_eng": "0",
            "_b": 0,
            "_ds": pl.Series([None] * n_ev, dtype=pl.Int64),
            "_lo": t_ev - timedelta(seconds=1),
            "_hi": t_ev + timedelta(seconds=1),
        }
    )
    t_tab = pl.datetime_range(T0, T0 + timedelta(seconds=10_000), "100ms", eager=True, time_zone="UTC")[:n_tab]
    k = pl.int_range(n_tab, eager=True)
    other = pl.concat_str([pl.lit("r"), (k % 500).cast(pl.String)])
    tb = pl.select(request_id=other, _eng=pl.lit("0"), time=t_tab, block_ids=pl.concat_list(pl.lit(0), pl.lit(1)))
    ext = pl.select(
        request_id=other,
        _eng=pl.lit("0"),
        time=t_tab,
        step=pl.lit(None, pl.Int64),
        source=pl.lit("bt.jsonl"),
        line=(k + 1).cast(pl.UInt32),
    )
    got = _prefix_conflicts(shared, tb, ext)
    assert got.height == n_ev
    assert got.get_column("prefix_conflict_with").null_count() == 0
