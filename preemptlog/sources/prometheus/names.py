"""Prometheus: what is read (metric names and their spellings, counter fields) and the shape of
phase 1's per-file data, shared by the text and the JSON readers."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import polars as pl

from ...model.kinds import default as default_kind
from ..registry import metric_tables

if TYPE_CHECKING:
    from ...inputs.files import InputFile


KIND = "prometheus"


PLACED = "prom_placed"  # phase 2's per-file samples, between place and combine (sources.registry.CrossFile)
# capture files: source -> how long its one scrape's answer took (its time is the answer's; events/recordmatch.py)
ANSWERS = "prom_answers"


# What is read: every registered engine's metric names (sources.registry.MetricTable; each
# engine's table is in its own package, engines/<name>/metrics.py), merged in registration order.
def metrics() -> dict[str, tuple[str, str, float]]:
    """Canonical name -> (field, type, scale) of every registered engine's metrics."""
    out: dict[str, tuple[str, str, float]] = {}
    for t in metric_tables():
        out.update(t.metrics)
    return out


def created() -> dict[str, list[str]]:
    """``<family>_created`` -> the counter fields it dates (a changed value between two samples is
    a reset), of every registered engine."""
    out: dict[str, list[str]] = {}
    for t in metric_tables():
        out.update(t.created)
    return out


COUNTER_FIELDS = (
    "preemptions",
    "prefix_queries",
    "prefix_hits",
    "hist_count",
    "hist_sum",
    "hist_bucket",
    "retracted_input_tokens",
    "retracted_output_tokens",
)


def engine_kind_expr(name: pl.Expr) -> pl.Expr:
    """The serving engine a canonical metric name belongs to: the engine whose prefix it has, else the
    default engine (model.kinds)."""
    out: pl.Expr = pl.lit(default_kind())
    for t in reversed(metric_tables()):
        if t.engine != default_kind():
            out = pl.when(name.str.starts_with(t.prefix + ":")).then(pl.lit(t.engine)).otherwise(out)
    return out


# cache_config_info label -> config key (CONFIG_SCHEMA); other labels keep their name.
CONFIG_LABELS = {"cache_dtype": "kv_cache_dtype"}


CONFIG_SKIP_LABELS = {"engine", "model_name", "instance", "job", "pod", "__name__"}


# Spellings of one metric: the engine's ``vllm:name``, the underscore form of exporters
# that do not allow ``:`` (``vllm_name``, OpenTelemetry, some relabelling), and
# Ray Serve's re-export (``ray_vllm:name``, ``ray_vllm_name``). All are read as
# ``vllm:name`` (:func:`canonical_name`); every engine's prefix alike.
def name_prefix_re() -> str:
    """The regex of a metric name's start, any engine's prefix in any spelling."""
    prefixes = "|".join(re.escape(t.prefix) for t in metric_tables()) or "(?!)"  # none registered: no name
    return r"(?:ray_)?(?:" + prefixes + r")[:_]"


def canonical_name(name: str) -> str:
    """``ray_vllm:x`` / ``vllm_x`` / ``ray_vllm_x`` -> ``vllm:x`` (every engine's prefix alike)."""
    if name.startswith("ray_"):
        name = name[4:]
    for t in metric_tables():
        if name.startswith(t.prefix + "_"):
            name = t.prefix + ":" + name[len(t.prefix) + 1 :]
    return name


def _canonical_expr(col: pl.Expr) -> pl.Expr:
    out = col.str.replace(r"^ray_", "")
    for t in metric_tables():
        out = out.str.replace("^" + re.escape(t.prefix) + "_", t.prefix + ":")
    return out


def _spellings(names: list[str]) -> list[str]:
    """Literal forms of the names for the pre-filter (``ray_`` forms contain them)."""
    out = set()
    prefixes = [t.prefix for t in metric_tables()]
    for n in names:
        out.add(n)
        for pre in prefixes:
            if n.startswith(pre + ":"):
                out.add(pre + "_" + n[len(pre) + 1 :])
    return sorted(out)


def sample_starts() -> list[str]:
    """What a sample line of a text scrape may start with (every engine's ``line_starts``)."""
    return [s for t in metric_tables() for s in t.line_starts]


def mentions_engine(head: str) -> bool:
    """Does the text name an engine's metric prefix (sniffing JSON exports)?"""
    return any(t.prefix in head for t in metric_tables())


RAW_LIMIT = 500


@dataclass
class _FileData:
    file: InputFile
    fmt: str  # "text" | "json"
    samples: pl.DataFrame  # see _SAMPLE_COLUMNS
    sep_times: dict[int, str] = field(default_factory=dict)  # scrape -> separator time text
    n_scrapes: int = 0
    warnings: list[str] = field(default_factory=list)
    recorded: bool = False  # preemptlog capture's own file: the separator time was recorded, not assumed
    answer_s: float | None = None  # its mark line: how long the scrape's answer took (its time: the answer's)


def _sample_schema() -> dict[str, Any]:
    return {
        "file_id": pl.UInt16,
        "n": pl.UInt32,
        "col": pl.UInt32,
        "scrape": pl.Int32,
        "name": pl.String,
        "labels": pl.String,
        "engine": pl.String,
        "model_name": pl.String,
        "instance": pl.String,
        "reason": pl.String,
        "le": pl.String,
        "value": pl.Float64,
        "ts_us": pl.Int64,
    }


def _label(name: str) -> pl.Expr:
    return pl.col("labels").str.extract(r"(?:^|,)\s*" + name + r'\s*=\s*"((?:[^"\\]|\\.)*)"', 1)


def _ts_to_us(col: pl.Expr) -> pl.Expr:
    """Epoch timestamp -> microseconds: ms when above 1e11 (Prometheus text), else seconds."""
    t = col.cast(pl.Float64, strict=False)
    us = pl.when(t.abs() > 1e11).then(t * 1000.0).otherwise(t * 1e6).round(0).cast(pl.Int64, strict=False)
    return pl.when(us.is_between(0, 7_258_118_400_000_000)).then(us)  # 1970-2200, else no time


class PromFiles(Protocol):
    """What the counters and the scrape clock read of a parsed Prometheus source (``PromParsed``)."""

    @property
    def files(self) -> list[_FileData]: ...
