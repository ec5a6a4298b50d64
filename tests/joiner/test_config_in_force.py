"""joiner/config.section_config reads every key in a few queries (one row per event and key, as-of
joins by key). Its oracle is the formulation it replaced: a query per key and step (kept here), on
generated configurations with and without server runs, whatever the size of the key groups."""

from __future__ import annotations

import datetime as dt
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from preemptlog.joiner import config as jc
from preemptlog.joiner.common import asof, src_expr
from preemptlog.model import schemas
from preemptlog.model.config import in_force
from preemptlog.model.evidence import cited
from preemptlog.model.frames import polars_schema

UTC = dt.UTC
T0 = dt.datetime(2026, 11, 20, 8, 0, 0, tzinfo=UTC)


def _old_lit_row(row: dict[str, Any] | None) -> tuple[pl.Expr, pl.Expr, pl.Expr]:
    val = row["value"] if row else None
    src = f"{row['source']}:{row['line']}" if row and row.get("source") else None
    status = row["status"] if row else None
    return pl.lit(val, pl.String), pl.lit(src, pl.String), pl.lit(status, pl.String)


def _old_values_for(evr, stated, fb, fb_free, key, cfg, scoped):  # type: ignore[no-untyped-def]
    fv, fs, fst = _old_lit_row(fb)
    free_v, free_s, free_st = _old_lit_row(fb_free)
    cols = ["time", "value", "status", "_csrc"]
    in_run = pl.col("_run").is_not_null()
    if stated.height == 0:
        return evr.select(
            "_i",
            pl.when(in_run).then(free_v).otherwise(fv).alias("_v"),
            pl.when(in_run).then(free_s).otherwise(fs).alias("_s"),
            pl.when(in_run).then(free_st).otherwise(fst).alias("_st"),
        )
    anyrun = asof(evr.select("_i", "_t"), stated.select(cols), left_on="_t", right_on="time")
    anyrun = anyrun.select(
        "_i",
        pl.when(pl.col("time").is_not_null()).then(pl.col("value")).otherwise(fv).alias("_v0"),
        pl.when(pl.col("time").is_not_null()).then(pl.col("_csrc")).otherwise(fs).alias("_s0"),
        pl.when(pl.col("time").is_not_null()).then(pl.col("status")).otherwise(fst).alias("_st0"),
    )
    out = evr.join(anyrun, on="_i", how="left")
    if not scoped:
        return out.select("_i", pl.col("_v0").alias("_v"), pl.col("_s0").alias("_s"), pl.col("_st0").alias("_st"))
    mine = stated.filter(pl.col("run").is_not_null()).rename({"run": "_run"})
    free = stated.filter(pl.col("run").is_null())
    r = asof(
        out.filter(in_run).select("_i", "_t", "_run"),
        mine.select("_run", *cols),
        left_on="_t",
        right_on="time",
        by=["_run"],
    ).select(
        "_i",
        pl.col("time").alias("_tr"),
        pl.col("value").alias("_vr"),
        pl.col("_csrc").alias("_sr"),
        pl.col("status").alias("_str"),
    )
    f = asof(out.filter(in_run).select("_i", "_t"), free.select(cols), left_on="_t", right_on="time").select(
        "_i",
        pl.col("time").alias("_tf"),
        pl.col("value").alias("_vf"),
        pl.col("_csrc").alias("_sf"),
        pl.col("status").alias("_stf"),
    )
    later = cfg.filter((pl.col("key") == key) & pl.col("run").is_not_null())
    run_forced = (
        jc._forced(later.rename({"run": "_run"}), ["_run"]).rename({"value": "_vl", "_csrc": "_sl", "status": "_stl"})
        if later.height
        else pl.DataFrame(schema={"_run": pl.Int32, "_vl": pl.String, "_sl": pl.String, "_stl": pl.String})
    )
    out = out.join(r, on="_i", how="left").join(f, on="_i", how="left").join(run_forced, on="_run", how="left")
    use_r = pl.col("_tr").is_not_null() & (pl.col("_tf").is_null() | (pl.col("_tr") >= pl.col("_tf")))
    use_f = pl.col("_tf").is_not_null()
    use_l = pl.col("_vl").is_not_null()

    def pick(a: str, b: str, c: str, d: pl.Expr, z: str) -> pl.Expr:
        return (
            pl.when(~in_run)
            .then(pl.col(z))
            .when(use_r)
            .then(pl.col(a))
            .when(use_f)
            .then(pl.col(b))
            .when(use_l)
            .then(pl.col(c))
            .otherwise(d)
        )

    return out.select(
        "_i",
        pick("_vr", "_vf", "_vl", free_v, "_v0").alias("_v"),
        pick("_sr", "_sf", "_sl", free_s, "_s0").alias("_s"),
        pick("_str", "_stf", "_stl", free_st, "_st0").alias("_st"),
    )


def old_section_config(ev, config, runs=None):  # type: ignore[no-untyped-def]
    """joiner/config.section_config before it read every key at once (a query per key and step)."""
    if config is None or config.height == 0:
        return None
    cfg = jc._config_rows(config).with_columns(_csrc=pl.when(pl.col("source").is_not_null()).then(src_expr()))
    if "run" not in cfg.columns:
        cfg = cfg.with_columns(run=pl.lit(None, pl.Int32))
    forced = in_force(cfg)
    forced_free = in_force(cfg.filter(pl.col("run").is_null()))
    evr = ev.select("_i", "_t").join(jc.event_runs(ev, runs), on="_i", how="left")
    scoped = evr.get_column("_run").is_not_null().any()
    out = ev.select("_i")
    dtypes = {e.name: e.dtype for e in jc.EVIDENCE}
    for col, key in jc.CONFIG_KEYS.items():
        stated = cfg.filter((pl.col("key") == key) & (pl.col("status") != "default") & pl.col("time").is_not_null())
        j = _old_values_for(evr, stated, forced.get(key), forced_free.get(key), key, cfg, scoped)
        j = j.select("_i", *cited(col, jc._cast_cfg(pl.col("_v"), dtypes[col]), pl.col("_s"), pl.col("_st")))
        out = out.join(j, on="_i", how="left")
    return out


KEYS = [*jc.CONFIG_KEYS.values(), "speculative_model", "num_speculative_tokens", "model"]
VALUES = ["16", "32", "1,024", "0.9", "True", "false", "None", "fcfs", "'priority'", "x", ""]
CONFIG_SCHEMA = polars_schema(schemas.CONFIG_SCHEMA)
EV_SCHEMA = {"_i": pl.UInt32, "_t": pl.Datetime("us", "UTC"), "stream": pl.Int32, "seq": pl.UInt32}
RUNS_SCHEMA = {
    "run": pl.Int32,
    "stream": pl.Int32,
    "stream_run": pl.Int32,
    "first_seq": pl.UInt32,
    "start": pl.Datetime("us", "UTC"),
}

secs = st.one_of(st.none(), st.integers(0, 40))
config_rows = st.lists(
    st.tuples(
        st.sampled_from(KEYS),
        st.one_of(st.none(), st.sampled_from(VALUES)),
        st.sampled_from(["seen", "derived", "default"]),
        secs,
        st.sampled_from([None, "a.log", "m.prom"]),
        st.one_of(st.none(), st.integers(1, 99)),
        st.one_of(st.none(), st.integers(0, 3)),
    ),
    min_size=1,
    max_size=40,
)
events = st.lists(
    st.tuples(secs, st.one_of(st.none(), st.integers(0, 1)), st.one_of(st.none(), st.integers(0, 60))),
    min_size=1,
    max_size=12,
)
runs_rows = st.one_of(
    st.none(),
    st.lists(st.tuples(st.integers(0, 1), st.integers(0, 60), secs), min_size=1, max_size=4),
)


def _t(s: int | None) -> dt.datetime | None:
    return None if s is None else T0 + dt.timedelta(seconds=s)


def _frames(cfg_rows, ev_rows, run_rows):  # type: ignore[no-untyped-def]
    config = pl.DataFrame(
        [
            {"key": k, "value": v, "status": st_, "time": _t(t), "source": src, "line": ln, "note": None, "run": run}
            for k, v, st_, t, src, ln, run in cfg_rows
        ],
        schema=CONFIG_SCHEMA,
    )
    ev = pl.DataFrame(
        [{"_i": 2 * i + 1, "_t": _t(t), "stream": s, "seq": q} for i, (t, s, q) in enumerate(ev_rows)],
        schema=EV_SCHEMA,
    )
    runs = None
    if run_rows is not None:
        rows = sorted(set((s, q) for s, q, _ in run_rows))
        starts = {(s, q): t for s, q, t in run_rows}
        per: dict[int, int] = {}
        out = []
        for n, (s, q) in enumerate(rows):
            per[s] = per.get(s, -1) + 1
            out.append({"run": n, "stream": s, "stream_run": per[s], "first_seq": q, "start": _t(starts[(s, q)])})
        runs = pl.DataFrame(out, schema=RUNS_SCHEMA)
    return ev, config, runs


def _same(ev, config, runs) -> None:  # type: ignore[no-untyped-def]
    want = old_section_config(ev, config, runs)
    got = jc.section_config(ev, config, runs)
    assert got is not None and want is not None
    assert got.columns == want.columns
    assert got.schema == want.schema
    assert got.sort("_i").equals(want.sort("_i")), (got.sort("_i"), want.sort("_i"))
    assert got.get_column("_i").to_list() == ev.get_column("_i").to_list()  # the events' order


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config_rows, events, runs_rows, st.sampled_from([1 << 20, 1, 7, 25]))
def test_every_key_at_once_equals_a_query_per_key(cfg_rows, ev_rows, run_rows, key_rows):  # type: ignore[no-untyped-def]
    ev, config, runs = _frames(cfg_rows, ev_rows, run_rows)
    old = jc.KEY_ROWS
    jc.KEY_ROWS = key_rows  # groups of keys: all, one, a few
    try:
        _same(ev, config, runs)
    finally:
        jc.KEY_ROWS = old


def test_a_run_reads_its_own_value_then_a_later_statement_then_the_bundles() -> None:
    # Two runs of one stream; block_size stated in run 1 at t=10, the bundle's metrics state 32 at
    # t=30; max_num_seqs stated in run 1 only after the event (the run's value in force).
    cfg_rows = [
        ("block_size", "16", "seen", 10, "a.log", 3, 1),
        ("block_size", "32", "seen", 30, "m.prom", 7, None),
        ("max_num_seqs", "64", "seen", 50, "a.log", 9, 1),
        ("max_num_seqs", "256", "default", None, None, None, None),
        ("gpu_memory_utilization", "0.9", "default", None, None, None, None),
    ]
    ev_rows = [(20, 0, 5), (40, 0, 6), (45, 0, 1), (None, 1, None)]
    ev, config, runs = _frames(cfg_rows, ev_rows, [(0, 0, 0), (0, 4, 5)])
    _same(ev, config, runs)
    got = jc.section_config(ev, config, runs)
    assert got is not None
    rows = got.select(
        "_i", "cfg_block_size", "cfg_block_size_src", "cfg_max_num_seqs", "cfg_max_num_seqs_status"
    ).rows()
    assert rows == [
        (1, 16, "a.log:3", 64, "seen"),  # run 1 at t=20: its own 16; 64 stated later in its run
        (3, 32, "m.prom:7", 64, "seen"),  # t=40: the bundle's 32 is later than the run's 16
        (5, 32, "m.prom:7", 256, "default"),  # run 0 (before the banner): the bundle's, never run 1's 64
        (7, 32, "m.prom:7", 64, "seen"),  # no time, no run: the whole bundle's value in force
    ]


@pytest.mark.parametrize("n", [0, 1, 300])
def test_many_events_take_the_keys_in_groups(n: int) -> None:
    cfg_rows = [(k, "8", "seen", i, "a.log", i + 1, None) for i, k in enumerate(jc.CONFIG_KEYS.values())]
    ev_rows = [(i % 40, 0, i) for i in range(n)] or [(None, None, None)]
    ev, config, _ = _frames(cfg_rows, ev_rows, None)
    old = jc.KEY_ROWS
    jc.KEY_ROWS = 2 * max(1, n)  # two keys per pass
    try:
        _same(ev, config, None)
    finally:
        jc.KEY_ROWS = old
