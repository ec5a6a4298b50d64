"""Helpers shared by the findings: provenance text, the stats intervals, config values in force."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import polars as pl

if TYPE_CHECKING:
    from ..model.result import AnalysisView as Analysis


def src_expr(source: str = "source", line: str = "line") -> pl.Expr:
    """``file:line`` of a row (null when either is null)."""
    return pl.concat_str([pl.col(source), pl.lit(":"), pl.col(line).cast(pl.String)])


def frame(a: Analysis, name: str) -> pl.DataFrame | None:
    df = a.frames.get(name)
    return df if df is not None and df.height else None


@dataclass(frozen=True)
class Cfg:
    """A configuration value stated in (or derived from) the bundle; preemptlog's defaults are not evidence."""

    key: str
    value: float
    status: str
    src: str | None

    def cite(self) -> str:
        return f"{self.key}={_num(self.value)} ({self.status}, {self.src or 'no line'})"


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:g}"


def cfg_number(a: Analysis, key: str) -> Cfg | None:
    """The value in force when it is seen or derived (a default is an assumption: None)."""
    from ..engines.vllm.config import in_force

    row = in_force(a.config).get(key)
    if row is None or row.get("status") == "default":
        return None
    try:
        val = float(str(row["value"]).replace(",", "").rstrip("x"))
    except (TypeError, ValueError):
        return None
    src = f"{row['source']}:{row['line']}" if row.get("source") else None
    return Cfg(key, val, str(row["status"]), src)


def cfg_default(a: Analysis, key: str) -> Cfg | None:
    """vLLM's default for the bundle's own version (vllm/config.py VERSION_DEFAULTS), as an assumed
    value: None when the version is not in the bundle (then the default is not known)."""
    from ..engines.vllm.config import in_force

    cfg = in_force(a.config)
    row, ver = cfg.get(key), cfg.get("vllm_version")
    if row is None or row.get("status") != "default" or ver is None or ver.get("status") == "default":
        return None
    try:
        val = float(str(row["value"]))
    except (TypeError, ValueError):
        return None
    return Cfg(key, val, "assumed", f"vLLM {ver['value']} default")


def cfg_text(a: Analysis, key: str) -> tuple[str, str | None, str] | None:
    """(value, file:line, status) of a configuration key, defaults included (callers decide)."""
    from ..engines.vllm.config import in_force

    row = in_force(a.config).get(key)
    if row is None:
        return None
    src = f"{row['source']}:{row['line']}" if row.get("source") else None
    return str(row["value"]), src, str(row["status"])


def stats_intervals(a: Analysis) -> pl.DataFrame:
    """One row per stats line that closes a measured interval: ``t0`` (previous line of the same
    stream and engine), ``t1``, ``seconds``, ``prompt_tokens`` and ``gen_tokens`` (throughput x
    interval), ``src``. The first line of each series has no measured interval and is left out."""
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
        )
        .collect()
    )
    return out if out.height else empty


def jsonable(v: Any) -> Any:
    """Plain JSON values (datetimes become ISO text later, by the caller's zone)."""
    if isinstance(v, float) and math.isnan(v):  # NaN
        return None
    return v
