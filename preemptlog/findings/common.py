"""Helpers shared by the findings: provenance text, the stats intervals, config values in force."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import polars as pl

from ..model.config import Cfg, in_force
from ..model.config import cfg_number as cfg_number  # re-exported: the findings read config here
from ..model.config import cfg_text as cfg_text

if TYPE_CHECKING:
    from ..model.result import AnalysisView as Analysis


def src_expr(source: str = "source", line: str = "line") -> pl.Expr:
    """``file:line`` of a row (null when either is null)."""
    return pl.concat_str([pl.col(source), pl.lit(":"), pl.col(line).cast(pl.String)])


def frame(a: Analysis, name: str) -> pl.DataFrame | None:
    df = a.frames.get(name)
    return df if df is not None and df.height else None


def cfg_default(a: Analysis, key: str) -> Cfg | None:
    """vLLM's default for the bundle's own version (vllm/config.py VERSION_DEFAULTS), as an assumed
    value: None when the version is not in the bundle (then the default is not known)."""
    cfg = in_force(a.config)
    row, ver = cfg.get(key), cfg.get("vllm_version")
    if row is None or row.get("status") != "default" or ver is None or ver.get("status") == "default":
        return None
    try:
        val = float(str(row["value"]))
    except (TypeError, ValueError):
        return None
    return Cfg(key, val, "assumed", f"vLLM {ver['value']} default")


def stats_intervals(a: Analysis) -> pl.DataFrame:
    """One row per stats line that closes a measured interval: ``t0`` (previous line of the same
    stream and engine), ``t1``, ``seconds``, ``prompt_tokens`` and ``gen_tokens`` (throughput x
    interval), ``src``, ``engine``, ``stream`` (its log). The first line of each series has no measured
    interval and is left out."""
    st = a.stats
    empty = pl.DataFrame(
        schema={
            "t0": pl.Datetime("us", "UTC"),
            "t1": pl.Datetime("us", "UTC"),
            "seconds": pl.Float64,
            "prompt_tokens": pl.Float64,
            "gen_tokens": pl.Float64,
            "src": pl.String,
            "engine": pl.String,
            "stream": pl.Int32,
        }
    )
    if st.height == 0:
        return empty
    keys = ["stream", "engine"]
    out = (
        st.lazy()
        .filter(pl.col("time").is_not_null())
        .sort([*keys, "time"])
        .with_columns(t0=pl.col("time").shift(1).over(keys))
        .filter(pl.col("t0").is_not_null() & pl.col("prompt_tput").is_not_null() & pl.col("gen_tput").is_not_null())
        .with_columns(seconds=(pl.col("time") - pl.col("t0")).dt.total_microseconds() / 1e6)
        .filter(pl.col("seconds") > 0)
        .select(
            "t0",
            pl.col("time").alias("t1"),
            "seconds",
            (pl.col("prompt_tput") * pl.col("seconds")).alias("prompt_tokens"),
            (pl.col("gen_tput") * pl.col("seconds")).alias("gen_tokens"),
            src_expr().alias("src"),
            pl.col("engine").fill_null("0"),
            pl.col("stream").cast(pl.Int32),
        )
        .collect()
    )
    return out if out.height else empty


def jsonable(v: Any) -> Any:
    """Plain JSON values (datetimes become ISO text later, by the caller's zone)."""
    if isinstance(v, float) and math.isnan(v):  # NaN
        return None
    return v
