"""Helpers shared by the findings: provenance text, the stats intervals, config values in force."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import polars as pl

from ..joiner.common import SERVER_FRAMES, ServerScope
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


def per_server(a: Analysis, each: Callable[[Analysis], pl.DataFrame]) -> pl.DataFrame:
    """``each(view)`` (a frame keyed by ``event_id``) per server of a bundle that keeps its servers in
    folders of their own (joiner/common.py ServerScope): each view holds one server's events with that
    server's own scheduler records (SERVER_FRAMES) and request lines, so a record of ``b/`` that names
    the same request id never gives ``a/``'s event its tokens. The results are stacked in the order of
    the analysis' events. One server (or none): ``each(a)``."""
    scope = ServerScope.of(a.events, a.stats, a.frames.get("log_streams")) if a.events.height else None
    if scope is None or "source" not in a.events.columns:
        return each(a)
    srv = a.events.select(scope.server("source")).to_series()

    def own(df: pl.DataFrame, s: str) -> pl.DataFrame:
        return df.filter(scope.server("source") == s) if df.height and "source" in df.columns else df

    parts = []
    for s in srv.unique(maintain_order=True).to_list():
        frames = {
            n: own(df, s) if n in SERVER_FRAMES and isinstance(df, pl.DataFrame) else df for n, df in a.frames.items()
        }
        view = dataclasses.replace(  # type: ignore[type-var]
            a, events=a.events.filter(srv == s), frames=frames, requests=own(a.requests, s)
        )
        parts.append(each(view))
    out = pl.concat(parts, how="diagonal_relaxed")
    return a.events.select("event_id").join(out, on="event_id", how="left", maintain_order="left")


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
