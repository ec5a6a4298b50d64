"""nvidia-smi dmon samples: the GPU as of t and frame-buffer jumps in the window."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import polars as pl

from ..model.places import folders, shared_depth
from .common import asof, frame_of, rows_in_ranges, window_max
from .declare import Evidence, cited

EVIDENCE = [
    Evidence(
        "dmon_fb_at_mb",
        "Float64",
        "dmon",
        "bundle",
        "frame-buffer use as of t, largest over the sample's GPUs (none when the capture had stopped by t)",
    ),
    Evidence(
        "dmon_fb_jump_mb",
        "Float64",
        "dmon",
        "bundle",
        "largest rise of one GPU's frame buffer between consecutive samples, in the window (a counted interval: "
        "in the interval)",
    ),
    Evidence("dmon_fb_jump_gpu", "Int64", "dmon", "bundle", "the GPU of that rise"),
    Evidence("dmon_sm_at_pct", "Float64", "dmon", "bundle", "SM use as of t, largest over the GPUs"),
    Evidence("dmon_mem_at_pct", "Float64", "dmon", "bundle", "memory-controller use as of t, largest over the GPUs"),
]


def section_dmon(ev: pl.DataFrame, frames: dict[str, Any], before_us: int, after_us: int) -> pl.DataFrame | None:
    dm = frame_of(frames, "dmon")
    if dm is None:
        return None
    have = [c for c in ("fb_mb", "sm_pct", "mem_pct") if c in dm.columns]
    if not have:
        return None
    # A device is its GPU index and, under MIG, its instance indices (columns whose unit is Idx, read
    # as ``<name>_idx``: gi, ci): GPU 0's instance rows are not one series.
    ids = [c for c in dm.columns if c.endswith("_idx")]
    dm = dm.select("time", "gpu", *ids, *have, "source", "line")
    if not dm.get_column("time").is_sorted():
        dm = dm.sort("time", maintain_order=True)
    if "fb_mb" in have:
        # A rise between consecutive samples of one device of one capture (two hosts' GPU 0 are two GPUs).
        dm = dm.with_columns(_rise=pl.col("fb_mb") - pl.col("fb_mb").shift(1).over("source", "gpu", *ids))
    # A sample holds until its device's next one; the last one of a capture for one sampling step (the
    # device's median step, else dmon's default 1 s): past that the capture had stopped, and what the
    # GPU did at t is not known (not evaluable), never the last sample's value however old.
    dev = ["source", "gpu", *ids]
    step = pl.col("time").diff().over(dev)
    held = pl.coalesce(step.median().over(dev), pl.lit(timedelta(seconds=1)))
    dm = dm.with_columns(_until=pl.coalesce(pl.col("time").shift(-1).over(dev), pl.col("time") + held))
    # An event reads the captures of its own host: a capture belongs to the event files nearest to it
    # in the folder tree (two servers side by side, a/ and b/: a/dmon.txt is a's, never b's, even when
    # b has no capture of its own; a capture above both folders is both servers').
    files = ev.get_column("_file").cast(pl.String) if "_file" in ev.columns else pl.Series([None] * ev.height)
    caps = [str(x) for x in dm.get_column("source").unique(maintain_order=True).to_list()]
    reads = _captures_read(files.unique(maintain_order=True).to_list(), caps)
    sets = {k: i for i, k in enumerate(dict.fromkeys(reads.values()))}
    key: list[str]
    if len(sets) == 1 and set(next(iter(sets))) == set(caps):
        # every event reads every capture (one host, or captures above every server): no lane to tell
        # apart, and no copy of the samples (a join copied every one: 10 M samples, +0.5 GB, +1.5 s)
        ev, key = ev.select("_i", "_t", "_lo", "_hi", "_iend"), []
    else:
        lane = pl.DataFrame(
            {"_file": list(reads), "_ek": [sets[v] for v in reads.values()]},
            schema={"_file": pl.String, "_ek": pl.Int64},
        )
        pairs = pl.DataFrame(
            [(c, i) for v, i in sets.items() for c in v], schema={"source": pl.String, "_ek": pl.Int64}, orient="row"
        )
        ev = (
            ev.select("_i", "_t", "_lo", "_hi", "_iend", files.alias("_file"))
            .join(lane, on="_file", how="left", nulls_equal=True)
            .select("_i", "_t", "_lo", "_hi", "_iend", "_ek")
        )
        dm = dm.join(pairs, on="source", how="inner").sort("time", maintain_order=True)
        key = ["_ek"]
    dm = dm.with_row_index("_row")
    big = 1 << 34
    row = pl.col("_row").cast(pl.Int64)
    # Values are encoded with their row (fixed point x10) so that max() also says where.
    dm = dm.with_columns(  # absurd values (inf, 1e300 in a damaged line) left out, not overflowed
        [
            (
                pl.when(pl.col(c).abs() < 1e7).then(pl.col(c) * 10).round().cast(pl.Int64, strict=False) * big + row
            ).alias(f"_e_{c}")
            for c in have
        ]
    )
    src_of = dm.select(pl.col("source"), pl.col("line").cast(pl.String), pl.col("gpu"))

    def decode(col: str) -> tuple[pl.Expr, pl.Expr]:
        v = pl.col(col).floordiv(big)
        return v, (pl.col(col) - v * big)

    def gather_src(df: pl.DataFrame, rowcol: str) -> pl.Series:
        rows = df.get_column(rowcol).fill_null(0).cast(pl.UInt32)
        return pl.select(
            pl.concat_str(
                [src_of.get_column("source").gather(rows), pl.lit(":"), src_of.get_column("line").gather(rows)]
            )
        ).to_series()

    # The sample as of t: the largest value over the GPUs of that timestamp.
    per_t = dm.group_by(*key, "time").agg(*[pl.col(f"_e_{c}").max() for c in have], pl.col("_until").max()).sort("time")
    at = asof(
        ev.select("_i", "_t", *key), per_t, left_on="_t", right_on="time", by=key or None, tolerance=f"{before_us}us"
    )
    # as of t only while the capture still ran at t (the sample still held)
    at = at.with_columns(
        [pl.when(pl.col("_t") < pl.col("_until")).then(pl.col(f"_e_{c}")).alias(f"_e_{c}") for c in have]
    )
    name = {"fb_mb": "dmon_fb_at_mb", "sm_pct": "dmon_sm_at_pct", "mem_pct": "dmon_mem_at_pct"}
    out = at.select("_i")
    for c in have:
        v, r = decode(f"_e_{c}")
        tmp = at.select(v.alias("_v"), r.alias("_r"))
        ok = tmp.get_column("_v").is_not_null()
        out = out.with_columns(
            *cited(name[c], pl.lit(tmp.get_column("_v") / 10.0), pl.when(ok).then(gather_src(tmp, "_r")))
        )
    if "fb_mb" in have:
        # Largest rise of one GPU's fb between consecutive samples, for a rise sampled in the window.
        jump = pl.col("_rise")
        jump = pl.when(jump.abs() < 1e8).then(jump).round().cast(pl.Int64, strict=False)
        g = dm.select("time", *key, (jump * big + row).alias("_enc"))
        mx = _jump_max(ev, g, key, before_us + after_us)
        v, r = decode("_max")
        mx = mx.with_columns(_jump=v.cast(pl.Float64), _jrow=r)
        rows = mx.get_column("_jrow").fill_null(0).cast(pl.UInt32)
        ok = mx.get_column("_max").is_not_null()
        mx = mx.with_columns(_jgpu=src_of.get_column("gpu").gather(rows).cast(pl.Int64), _jsrc=gather_src(mx, "_jrow"))
        out = out.join(
            mx.select(
                "_i",
                *cited("dmon_fb_jump_mb", pl.when(ok).then(pl.col("_jump")), pl.col("_jsrc")),
                *cited("dmon_fb_jump_gpu", pl.when(ok).then(pl.col("_jgpu")), pl.col("_jsrc")),
            ),
            on="_i",
            how="left",
        )
    return out


def _jump_max(ev: pl.DataFrame, g: pl.DataFrame, key: list[str], width_us: int) -> pl.DataFrame:
    """The largest encoded rise (``_enc``) per event (``_i``, ``_max``): over ``[_hi - width, _hi]``
    for an event at a point in time, over its own interval ``[_lo, _hi]`` for an event spread in a
    counted interval (``_iend``): a rise sampled before the interval began belongs to the
    preemptions before it (the logged one that opened it), never to this interval's."""
    spread = pl.col("_iend").is_not_null()
    point = ev.filter(~spread)
    mx = window_max(point, g, "_enc", width_us, by=key[0] if key else None)
    iv = ev.filter(spread)
    if iv.height == 0:
        return mx
    # The events of one interval share it: each distinct interval is read once (pairs grow with the
    # intervals' samples, not with events x samples: a stats line's 10,000 events are one interval).
    spans = iv.select(*key, "_lo", "_hi").unique(maintain_order=True).with_row_index("_s")
    pairs = rows_in_ranges(spans, g, key, "time", "_lo", "_hi")
    enc = g.get_column("_enc")
    got = (
        pairs.select(pl.col("_q").alias("_s"), enc.gather(pairs.get_column("_r")))
        .group_by("_s")
        .agg(pl.col("_enc").max().alias("_max"))
    )
    per_span = spans.join(got, on="_s", how="left").drop("_s")
    in_iv = iv.select("_i", *key, "_lo", "_hi").join(
        per_span, on=[*key, "_lo", "_hi"], how="left", nulls_equal=True, maintain_order="left"
    )
    return pl.concat([mx, in_iv.select("_i", "_max").cast(mx.schema)], how="vertical")


def _captures_read(event_files: list[str | None], captures: list[str]) -> dict[str | None, tuple[str, ...]]:
    """For each event file, the dmon captures its events read: a capture is read by the event files
    that share the longest leading folders with it (ties: each of them); an event without a file
    reads every capture. One pass per distinct file, not per event."""
    near: dict[str, int] = {}
    for c in captures:
        fc = folders(c)
        near[c] = max((shared_depth([folders(e), fc]) for e in event_files if e is not None), default=0)
    out: dict[str | None, tuple[str, ...]] = {}
    for e in event_files:
        if e is None:
            out[e] = tuple(captures)
        else:
            fe = folders(e)
            out[e] = tuple(c for c in captures if shared_depth([fe, folders(c)]) == near[c])
    return out
