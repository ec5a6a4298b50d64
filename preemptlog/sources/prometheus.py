"""Prometheus ``/metrics`` scrapes and Prometheus HTTP API answers (docs/prometheus.md).

Why: on every stock vLLM V1 build from 0.11.1 to 0.33.0 the log never prints
a preemption count (facts page section 3b item 7); the Prometheus counter
``vllm:num_preemptions_total`` is the only exact count.

Accepted inputs (recognised by content, see :func:`_sniff`):

- Prometheus text exposition (``curl -s host:8000/metrics > metrics-<time>.prom``)
  and OpenMetrics (``# EOF``, ``_created`` series, exemplars after ``#``);
- several scrapes in one file, split by any of these *separators*:
  a line ``# scrape <time>`` (also ``# scrape: <time>``, ``# scrape_time=<time>``),
  a line ``---`` optionally followed by a time, a bare time line (ISO 8601 as
  ``date -Is`` writes it, epoch seconds as ``date +%s`` writes it, or the
  default ``date`` output), ``# EOF``, and with no separator at all: the repeat
  of a ``# HELP``/``# TYPE`` line or of a series already seen (the next scrape
  began). A time on a separator line applies to the scrape that follows it;
- the JSON of Prometheus's HTTP API ``/api/v1/query_range`` (``matrix``) and
  ``/api/v1/query`` (``vector``), one answer per file or one per line;
- AIPerf ``server_metrics_export.jsonl`` records (:func:`_aiperf_parts`) and
  llm-d-benchmark scrape logs (``# Timestamp:`` / ``# Pod:`` headers);
- every spelling of a name (:func:`canonical_name`: ``vllm_x``, ``ray_vllm:x``);
  series of one engine that differ by other labels (ranks) take the largest
  value per scrape, never the sum.

Scrape time, first that exists: the sample's own timestamp (ms epoch in the
text format; seconds in OpenMetrics and JSON; told apart by magnitude), the
separator line's time, a timestamp in the file name (epoch seconds or
ISO 8601; single-scrape files only), the file mtime (the last scrape of the
file only). Which one was used is an assumption in the output, per file.

Counters (``vllm:num_preemptions_total``, prefix-cache queries/hits, the
``vllm:request_num_preemptions`` histogram) become per-interval increases
between consecutive samples of the same series (scope, engine, model); a
value that drops, or a changed ``_created``, is a counter reset and the new
value is the increase since the reset. Preemption increases become
``interval`` events (ids ``<file>:<line>~i<k>``, JSON ``<file>:<line>:<col>~i<k>``,
the line of the later sample). A series read only once is a total without
timing: a counter fact (``counters["prometheus"]["counter_totals"]``), never
events.

Series scope: the folder of the file plus the ``instance`` label when present
(Prometheus API answers carry it), so single-scrape files of one server in one
folder form one series and scrapes of different hosts kept in different
folders do not mix.

Frames (schemas declared below): ``prom_samples`` (long), ``prom_series``
(wide, one row per scrape per engine), ``prom_preemptions`` (one row per pair
of consecutive counter samples, the basis of the events and of
reconcile.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

import polars as pl

from .registry import SourceKind, register, register_samples

if TYPE_CHECKING:
    from ..inputs import InputFile
    from ..frames import Schema
    from .registry import SourceOutput, TimeContext

KIND = "prometheus"
PLACED = "prom_placed"  # phase 2's per-file samples, between place and combine (sources.registry.CrossFile)

# --------------------------------------------------------------------------
# What is read. name -> (field, type, scale). Counters are exposed with
# ``_total`` (prometheus_client adds it); ``vllm:num_preemptions`` without it
# appears in some exposures. Fractions (0-1) are scaled to percent.
METRICS: dict[str, tuple[str, str, float]] = {
    "vllm:num_preemptions_total": ("preemptions", "counter", 1.0),
    "vllm:num_preemptions": ("preemptions", "counter", 1.0),
    "vllm:num_requests_running": ("running", "gauge", 1.0),
    "vllm:num_requests_waiting": ("waiting", "gauge", 1.0),
    "vllm:num_requests_swapped": ("swapped", "gauge", 1.0),
    "vllm:num_requests_waiting_by_reason": ("waiting_by_reason", "gauge", 1.0),
    "vllm:kv_cache_usage_perc": ("kv_usage", "gauge", 100.0),
    "vllm:gpu_cache_usage_perc": ("kv_usage", "gauge", 100.0),
    "vllm:cpu_cache_usage_perc": ("cpu_kv_usage", "gauge", 100.0),
    "vllm:gpu_prefix_cache_hit_rate": ("prefix_hit_rate_gauge", "gauge", 100.0),
    "vllm:prefix_cache_queries_total": ("prefix_queries", "counter", 1.0),
    "vllm:prefix_cache_hits_total": ("prefix_hits", "counter", 1.0),
    "vllm:gpu_prefix_cache_queries_total": ("prefix_queries", "counter", 1.0),
    "vllm:gpu_prefix_cache_hits_total": ("prefix_hits", "counter", 1.0),
    "vllm:request_num_preemptions_count": ("hist_count", "counter", 1.0),
    "vllm:request_num_preemptions_sum": ("hist_sum", "counter", 1.0),
    "vllm:request_num_preemptions_bucket": ("hist_bucket", "counter", 1.0),
    "vllm:cache_config_info": ("cache_config", "info", 1.0),
}
# ``<family>_created`` (prometheus_client's creation time of a counter) -> the
# counter fields it dates; a changed value between two samples is a reset.
CREATED: dict[str, list[str]] = {
    "vllm:num_preemptions_created": ["preemptions"],
    "vllm:prefix_cache_queries_created": ["prefix_queries"],
    "vllm:prefix_cache_hits_created": ["prefix_hits"],
    "vllm:gpu_prefix_cache_queries_created": ["prefix_queries"],
    "vllm:gpu_prefix_cache_hits_created": ["prefix_hits"],
    "vllm:request_num_preemptions_created": ["hist_count", "hist_sum", "hist_bucket"],
}
COUNTER_FIELDS = ("preemptions", "prefix_queries", "prefix_hits", "hist_count", "hist_sum", "hist_bucket")
# cache_config_info label -> config key (CONFIG_SCHEMA); other labels keep their name.
CONFIG_LABELS = {"cache_dtype": "kv_cache_dtype"}
CONFIG_SKIP_LABELS = {"engine", "model_name", "instance", "job", "pod", "__name__"}

# Spellings of one metric: vLLM's ``vllm:name``, the underscore form of exporters
# that do not allow ``:`` (``vllm_name``, OpenTelemetry, some relabelling), and
# Ray Serve's re-export (``ray_vllm:name``, ``ray_vllm_name``). All are read as
# ``vllm:name`` (:func:`canonical_name`).
NAME_PREFIX_RE = r"(?:ray_)?vllm[:_]"


def canonical_name(name: str) -> str:
    """``ray_vllm:x`` / ``vllm_x`` / ``ray_vllm_x`` -> ``vllm:x``."""
    if name.startswith("ray_"):
        name = name[4:]
    if name.startswith("vllm_"):
        name = "vllm:" + name[5:]
    return name


def _canonical_expr(col: "pl.Expr") -> "pl.Expr":
    return col.str.replace(r"^ray_", "").str.replace(r"^vllm_", "vllm:")


def _spellings(names: list[str]) -> list[str]:
    """Literal forms of the names for the pre-filter (``ray_`` forms contain them)."""
    return sorted({m for n in names for m in (n, "vllm_" + n[5:] if n.startswith("vllm:") else n)})

# --------------------------------------------------------------------------
# Line shapes of the text exposition (Rust regex, anchored).
_LABELS = r'(?:[^"}]|"(?:[^"\\]|\\.)*")*'
SAMPLE_RE = (
    r"^(?P<name>" + NAME_PREFIX_RE + r"[A-Za-z0-9_:]+)(?:\{(?P<labels>" + _LABELS + r")\})?[ \t]+(?P<value>[^\s#]+)"
    r"(?:[ \t]+(?P<ts>-?[0-9][0-9.eE+-]*))?[ \t]*(?:#.*)?$"
)
META_RE = r"^#[ \t]+(?:HELP|TYPE)[ \t]+(" + NAME_PREFIX_RE + r"[A-Za-z0-9_:]+)"
# Separators between concatenated scrapes.
# ``# Timestamp: <time>``: llm-d-benchmark's collect_metrics.sh header (before ``# Pod:``).
SCRAPE_SEP_RE = r"^#[ \t]*(?:scrape(?:[_ ]?time)?|[Tt]imestamp)[ \t]*[:=]?[ \t]*(?P<t>.*)$"
# The server a scrape came from, in a header line (llm-d-benchmark ``# Pod: <name>``).
POD_RE = r"^#[ \t]*(?:Pod|Instance|Host):[ \t]*(\S+)"
DASH_SEP_RE = r"^---+[ \t]*(?P<t>.*)$"
BARE_TIME_RE = (
    r"^(?:\d{4}-\d\d-\d\d[T ]\d\d:\d\d(?::\d\d(?:[.,]\d+)?)?(?:Z|[+-]\d\d:?\d\d)?"
    r"|\d{10}(?:\d{3})?(?:\.\d+)?"
    r"|(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) [A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d(?: [A-Z]{2,5})? \d{4})$"
)
# Time in a file name.
NAME_ISO_RE = re.compile(
    r"(?<!\d)(\d{4})-?(\d\d)-?(\d\d)[T_ -]?(\d\d)[:\-_.]?(\d\d)[:\-_.]?(\d\d)(?:[.,](\d{1,6}))?(Z|[+-]\d\d:?\d\d)?(?!\d)"
)
NAME_EPOCH_RE = re.compile(r"(?<!\d)(1\d{9})(?:\d{3})?(?:\.(\d+))?(?!\d)")
# One [time, "value"] pair of a Prometheus API answer.
JSON_PAIR_RE = re.compile(r'\[\s*(-?[0-9][0-9.eE+-]*)\s*,\s*"([^"]*)"\s*\]')

RAW_LIMIT = 500


# --------------------------------------------------------------------------
# Sniffing


def _sniff(head: str) -> int:
    """Beats the vllm-log kind (at most 50) on anything that looks like Prometheus data."""
    if re.search(r"^#[ \t]+(?:HELP|TYPE)[ \t]+" + NAME_PREFIX_RE, head, re.M):
        return 90
    stripped = head.lstrip()
    if stripped.startswith(("{", "[")) and '"resultType"' in head:
        return 90 if "vllm" in head else 60
    if stripped.startswith("{") and '"timestamp_ns"' in head and '"metrics"' in head:
        return 90 if "vllm" in head else 60  # AIPerf server_metrics_export.jsonl
    if re.search(r"^" + NAME_PREFIX_RE + r"[A-Za-z0-9_:]+(?:\{[^\n]*\})?[ \t]+[-+0-9.eENaIinf]+[ \t]*(?:[-0-9.eE+]+)?[ \t]*$", head, re.M):
        return 85
    if re.search(r"^# HELP [A-Za-z_:][\w:]* ", head, re.M) and re.search(r"^# TYPE [A-Za-z_:][\w:]* ", head, re.M):
        return 55  # a /metrics page whose vllm: part lies beyond the sniffed head
    return 0


# --------------------------------------------------------------------------
# Phase 1: read every file (no clock needed)


@dataclass
class _FileData:
    file: "InputFile"
    fmt: str  # "text" | "json"
    samples: "pl.DataFrame"  # see _SAMPLE_COLUMNS
    sep_times: dict[int, str] = field(default_factory=dict)  # scrape -> separator time text
    n_scrapes: int = 0
    warnings: list[str] = field(default_factory=list)


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


def _label(name: str) -> "pl.Expr":
    return pl.col("labels").str.extract(r'(?:^|,)\s*' + name + r'\s*=\s*"((?:[^"\\]|\\.)*)"', 1)


def _ts_to_us(col: "pl.Expr") -> "pl.Expr":
    """Epoch timestamp -> microseconds: ms when above 1e11 (Prometheus text), else seconds."""
    t = col.cast(pl.Float64, strict=False)
    us = pl.when(t.abs() > 1e11).then(t * 1000.0).otherwise(t * 1e6).round(0).cast(pl.Int64, strict=False)
    return pl.when(us.is_between(0, 7_258_118_400_000_000)).then(us)  # 1970-2200, else no time


def _parse_text(f: "InputFile") -> _FileData:
    from .. import reflow

    known = list(METRICS) + list(CREATED)
    # Quoted, fenced or indented pastes read like plain scrapes (reflow.py).
    line = pl.col("line").str.strip_chars("\r \t")
    is_sample = line.str.starts_with("vllm") | line.str.starts_with("ray_vllm")
    is_meta = line.str.starts_with("#") & line.str.contains(META_RE)
    is_eof = line == "# EOF"
    is_sep = line.str.contains(SCRAPE_SEP_RE) | line.str.starts_with("---") | line.str.contains(BARE_TIME_RE)
    is_pod = line.str.starts_with("#") & line.str.contains(POD_RE)
    lf = reflow.scan(f.path, join=False).with_columns(line=line)
    # Literal pre-filter first (most lines of a /metrics page are other metrics and
    # histogram buckets), regexes only on the survivors.
    cheap = (is_sample & line.str.contains_any(_spellings(known))) | line.str.starts_with("#") | line.str.starts_with("---") | (
        line.str.len_bytes() < 48
    )
    lf = lf.filter(cheap).filter(is_sample | is_meta | is_eof | is_sep | is_pod)
    g = line.str.extract_groups(SAMPLE_RE)
    kind = (
        pl.when(is_sample)
        .then(pl.lit("sample"))
        .when(is_meta)
        .then(pl.lit("meta"))
        .when(is_eof)
        .then(pl.lit("eof"))
        .when(is_pod)
        .then(pl.lit("pod"))
        .otherwise(pl.lit("sep"))
    )
    sep_time = pl.coalesce(
        line.str.extract(SCRAPE_SEP_RE, 1),
        line.str.extract(DASH_SEP_RE, 1),
        pl.when(line.str.contains(BARE_TIME_RE)).then(line),
    ).str.strip_chars()
    rows = (
        lf.select(
            pl.col("n"),
            kind.alias("kind"),
            g.alias("g"),
            pl.when(is_meta).then(line.str.extract(META_RE, 1) + line.str.slice(2, 4)).alias("meta_key"),
            pl.when(~is_sample & ~is_meta & ~is_pod).then(sep_time).alias("sep_time"),
            pl.when(is_pod).then(line.str.extract(POD_RE, 1)).alias("pod"),
        )
        .unnest("g")
        .with_columns(name=_canonical_expr(pl.col("name")))
        .filter((pl.col("kind") != "sample") | pl.col("name").is_in(known))
        # The label text as exposed identifies the series (prometheus_client always
        # writes a series' labels in the same order).
        .with_columns(labels=pl.col("labels").fill_null(""))
        .collect()
        .sort("n")
    )
    fd = _FileData(file=f, fmt="text", samples=pl.DataFrame(schema=_sample_schema()))
    if rows.height == 0:
        return fd
    # Scrape numbering: explicit separators open a block; inside a block, the
    # repeat of a HELP/TYPE line or of a series opens the next scrape.
    rows = rows.with_columns(
        blk=pl.col("kind").is_in(["sep", "eof"]).cast(pl.Int32).cum_sum(),
        key=pl.when(pl.col("kind") == "sample")
        .then(pl.concat_str([pl.col("name"), pl.lit("{"), pl.col("labels"), pl.lit("}")]))
        .when(pl.col("kind") == "meta")
        .then(pl.col("meta_key")),
    )
    rows = rows.with_columns(_pod=pl.col("pod").forward_fill())  # a "# Pod:" header names the scrapes below it
    rows = rows.with_columns(
        occ=pl.when(pl.col("key").is_not_null()).then(pl.int_range(pl.len()).over("blk", "key")).otherwise(0)
    ).with_columns(rep=pl.col("occ").cum_max().over("blk"))
    seps = (
        rows.filter(pl.col("kind") == "sep")
        .group_by("blk")
        .agg(pl.col("sep_time").last())
        .filter(pl.col("sep_time").is_not_null() & (pl.col("sep_time") != ""))
    )
    samples = rows.filter(pl.col("kind") == "sample").with_columns(
        _sk=pl.col("blk").cast(pl.Int64) * 1_000_000 + pl.col("rep").cast(pl.Int64)
    )
    samples = samples.with_columns(scrape=(pl.col("_sk").rank("dense") - 1).cast(pl.Int32))
    first_of_blk = samples.filter(pl.col("rep") == 0).group_by("blk").agg(pl.col("scrape").first())
    sep_times = {
        r["scrape"]: r["sep_time"]
        for r in first_of_blk.join(seps, on="blk", how="inner").iter_rows(named=True)
    }
    value = pl.col("value").cast(pl.Float64, strict=False)
    bad = samples.filter(value.is_null()).height
    if bad:
        fd.warnings.append(f"{bad} sample line(s) with an unreadable value were skipped")
    out = samples.filter(value.is_not_null()).select(
        pl.lit(f.file_id, pl.UInt16).alias("file_id"),
        pl.col("n").cast(pl.UInt32),
        pl.lit(None, pl.UInt32).alias("col"),
        pl.col("scrape"),
        pl.col("name"),
        pl.col("labels"),
        _label("engine").alias("engine"),
        _label("model_name").alias("model_name"),
        pl.coalesce(_label("instance"), _label("pod"), pl.col("_pod")).alias("instance"),
        _label("reason").alias("reason"),
        _label("le").alias("le"),
        value.alias("value"),
        _ts_to_us(pl.col("ts")).alias("ts_us"),
    )
    fd.samples = out
    fd.sep_times = sep_times
    fd.n_scrapes = int(out.get_column("scrape").max()) + 1 if out.height else 0  # type: ignore[arg-type]  # polars scalars are typed as every literal
    return fd


def _read_text(f: "InputFile") -> str:
    import gzip

    with open(f.path, "rb") as fh:
        data = fh.read()
    if f.compression == "gzip":
        data = gzip.decompress(data)
    elif f.compression == "zstd":
        import zstandard

        data = zstandard.ZstdDecompressor().stream_reader(data).read()
    return data.decode("utf-8", "replace")


def _parse_json(f: "InputFile") -> _FileData:
    import json
    from bisect import bisect_right

    fd = _FileData(file=f, fmt="json", samples=pl.DataFrame(schema=_sample_schema()))
    text = _read_text(f)
    docs: list[tuple[int, Any]] = []  # (line, document)
    try:
        docs = [(1, json.loads(text))]
    except (ValueError, RecursionError):  # ValueError: bad JSON, or an integer of 5000 digits
        for i, ln in enumerate(text.splitlines(), 1):
            if ln.strip():
                try:
                    docs.append((i, json.loads(ln)))
                except (ValueError, RecursionError) as exc:
                    fd.warnings.append(f"line {i}: not JSON ({getattr(exc, 'msg', type(exc).__name__)}); skipped")
    flat: list[Any] = []
    aiperf: list[tuple[int, dict[str, Any]]] = []
    for i, d in docs:
        for x in d if isinstance(d, list) else [d]:
            if isinstance(x, dict) and isinstance(x.get("metrics"), dict) and "timestamp_ns" in x:
                aiperf.append((i, x))  # AIPerf server_metrics_export.jsonl record
            else:
                flat.append(x)
    # Text positions of every [time, "value"] pair, in document order.
    newlines = [m.start() for m in re.finditer("\n", text)]
    pairs = []
    for m in JSON_PAIR_RE.finditer(text):
        k = bisect_right(newlines, m.start())
        pairs.append((k + 1, m.start() - (newlines[k - 1] if k else -1)))  # (line, column), 1-based
    parts: list[dict[str, Any]] = []
    ordinal = 0
    skipped_unnamed = 0
    malformed = 0  # series that are not {"metric": {...}, "values": [[t, "v"], ...]}
    for d in flat:
        if not isinstance(d, dict):
            continue
        if d.get("status") not in (None, "success"):
            fd.warnings.append(f"Prometheus answered {d.get('status')}: {d.get('errorType', '')} {d.get('error', '')}".strip())
        data = d.get("data") if isinstance(d.get("data"), dict) else d
        rtype = data.get("resultType")  # type: ignore[union-attr]  # polars scalars are typed as every literal
        result = data.get("result")  # type: ignore[union-attr]  # polars scalars are typed as every literal
        if not isinstance(result, list):
            result = []
        if rtype not in ("matrix", "vector"):
            if rtype is not None:
                fd.warnings.append(f"resultType {rtype!r} carries no series; skipped")
            continue
        for series in result or []:
            if not isinstance(series, dict):
                malformed += 1
                continue
            metric = series.get("metric") or {}
            values = series.get("values") if rtype == "matrix" else ([series["value"]] if "value" in series else [])
            values = values or []
            if not isinstance(metric, dict) or not isinstance(values, list) or not all(
                isinstance(v, (list, tuple)) and len(v) >= 2 for v in values
            ):
                malformed += 1
                continue
            start = ordinal
            ordinal += len(values)
            name = metric.get("__name__")
            name = None if name is None else canonical_name(str(name))
            if name is None:
                skipped_unnamed += 1
                continue
            if name not in METRICS and name not in CREATED:
                continue
            labels = ",".join(
                f'{k}="{v!s}"' for k, v in sorted(metric.items()) if k != "__name__"
            )
            positions = pairs[start:ordinal] if len(pairs) >= ordinal else []
            parts.append(
                {
                    "name": name,
                    "labels": labels,
                    **{k: (None if metric.get(k) is None else str(metric.get(k)))  # labels are strings
                       for k in ("engine", "model_name", "instance", "reason", "le")},
                    **({"instance": str(metric["pod"])} if metric.get("instance") is None and metric.get("pod") is not None else {}),
                    "t": [v[0] for v in values],
                    "v": [v[1] for v in values],
                    "n": [p[0] for p in positions] if positions else [None] * len(values),
                    "col": [p[1] for p in positions] if positions else [start + i + 1 for i in range(len(values))],
                }
            )
    if malformed:
        fd.warnings.append(f"{malformed} series not in the Prometheus API shape (metric, [time, value] pairs) skipped")
    if skipped_unnamed:
        fd.warnings.append(
            f"{skipped_unnamed} series without __name__ (a computed query such as rate() or increase()) skipped: "
            "query the raw counter, e.g. vllm:num_preemptions_total"
        )
    if len(pairs) != ordinal and ordinal:
        fd.warnings.append("could not locate every sample in the text: sample ordinals are used instead of line:column")
    parts.extend(_aiperf_parts(aiperf))
    if not parts:
        return fd
    frames = []
    for p in parts:
        k = len(p["t"])
        frames.append(
            pl.DataFrame(
                {
                    "n": p["n"],
                    "col": p["col"],
                    "t": [_float_or_none(x) for x in p["t"]],
                    "v": [str(x) for x in p["v"]],
                },
                schema={"n": pl.UInt32, "col": pl.UInt32, "t": pl.Float64, "v": pl.String},
            ).with_columns(
                *[pl.lit(p[c], pl.String).alias(c) for c in ("name", "labels", "engine", "model_name", "instance", "reason", "le")]
            )
            if k
            else None
        )
    df = pl.concat([x for x in frames if x is not None], how="vertical")
    ts_us = _ts_to_us(pl.col("t"))
    df = df.select(
        pl.lit(f.file_id, pl.UInt16).alias("file_id"),
        "n",
        "col",
        pl.lit(0, pl.Int32).alias("scrape"),
        "name",
        "labels",
        "engine",
        "model_name",
        "instance",
        "reason",
        "le",
        pl.col("v").cast(pl.Float64, strict=False).alias("value"),
        ts_us.alias("ts_us"),
    ).filter(pl.col("value").is_not_null())
    # JSON: each distinct time is one scrape.
    df = df.with_columns(scrape=(pl.col("ts_us").rank("dense") - 1).cast(pl.Int32))
    fd.samples = df
    fd.n_scrapes = int(df.get_column("scrape").max()) + 1 if df.height else 0  # type: ignore[arg-type]  # polars scalars are typed as every literal
    return fd


def _aiperf_parts(records: list[tuple[int, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Series of AIPerf ``server_metrics_export.jsonl`` records (see docs/prometheus.md).

    One record per line: ``{"endpoint_url", "timestamp_ns", "metrics": {name: [{"labels": {...},
    "value": v} | {"labels": ..., "histogram": {le: count}, "sum": s, "count": c}]}}``. The endpoint
    is the series' instance; the time is ``timestamp_ns``. AIPerf writes a record only when the
    endpoint's metrics changed (consecutive identical scrapes are deduplicated), so the interval
    between two records is not missing data: a counter's increase over it is exact.
    """
    series: dict[tuple[Any, ...], dict[str, Any]] = {}  # one part per series, its samples appended in file order
    for line, rec in records:
        t = _float_or_none(rec.get("timestamp_ns"))
        if t is None:
            continue
        endpoint = rec.get("endpoint_url")
        k = 0
        for raw_name, entries in rec["metrics"].items():
            name = canonical_name(str(raw_name))
            if not isinstance(entries, list):
                continue
            for e in entries:
                if not isinstance(e, dict):
                    continue
                k += 1
                labels = e.get("labels") if isinstance(e.get("labels"), dict) else {}
                rows: list[tuple[str, dict[str, Any], Any]] = []
                if "value" in e:
                    rows.append((name, labels, e["value"]))  # type: ignore[arg-type]  # polars scalars are typed as every literal
                if isinstance(e.get("histogram"), dict):
                    rows += [(name + "_bucket", {**labels, "le": le}, c) for le, c in e["histogram"].items()]  # type: ignore[dict-item]  # polars scalars are typed as every literal
                    rows += [(name + "_sum", labels, e.get("sum")), (name + "_count", labels, e.get("count"))]  # type: ignore[list-item]  # polars scalars are typed as every literal
                for nm, lab, v in rows:
                    if nm not in METRICS and nm not in CREATED:
                        continue
                    inst = lab.get("instance") or lab.get("pod") or endpoint
                    text = ",".join(f'{a}="{b}"' for a, b in sorted(lab.items()))
                    part = series.get((nm, text, inst))
                    if part is None:
                        part = series[(nm, text, inst)] = {
                            "name": nm,
                            "labels": text,
                            **{c: (None if lab.get(c) is None else str(lab.get(c))) for c in ("engine", "model_name", "reason", "le")},
                            "instance": None if inst is None else str(inst),
                            "t": [], "v": [], "n": [], "col": [],
                        }
                    part["t"].append(t / 1e9)
                    part["v"].append(v)
                    part["n"].append(line)
                    part["col"].append(k)
    return list(series.values())


def _float_or_none(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError, OverflowError):
        return None
    return v if v == v and abs(v) != float("inf") else None


def _is_json(f: "InputFile") -> bool:
    from ..textio import read_head

    try:
        head = read_head(f.path, 4096).decode("utf-8", "replace").lstrip()
    except OSError:
        return False
    return head.startswith(("{", "["))


# --------------------------------------------------------------------------
# Time helpers (few values per file: plain Python)


def _parse_time_text(text: str) -> tuple[datetime | None, bool]:
    """(datetime, has_zone) from a separator or file-name time; naive means local time."""
    text = text.strip()
    if not text:
        return None, False
    m = re.fullmatch(r"(\d{10})(\d{3})?(?:\.(\d+))?", text)
    if m:
        sec = float(m.group(1) + (("." + m.group(3)) if m.group(3) and not m.group(2) else ""))
        if m.group(2):
            sec = int(m.group(1) + m.group(2)) / 1000.0
        return datetime.fromtimestamp(sec, timezone.utc), True
    try:
        iso = text.replace(",", ".")
        if iso.endswith("Z"):
            iso = iso[:-1] + "+00:00"
        dt = datetime.fromisoformat(iso)
        return dt, dt.tzinfo is not None
    except ValueError:
        pass
    import warnings

    from dateutil import parser as dparser

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # unknown zone names (CEST...) -> local time in --tz
            dt = dparser.parse(text)
        return dt, dt.tzinfo is not None
    except (ValueError, OverflowError, ArithmeticError):  # dateutil: decimal.InvalidOperation on huge digit runs
        return None, False


def _name_time(name: str) -> tuple[datetime | None, bool, str | None]:
    base = PurePosixPath(name.replace("!", "/")).name
    m = NAME_ISO_RE.search(base)
    if m:
        y, mo, d, hh, mi, ss, frac, zone = m.groups()
        try:
            dt = datetime(int(y), int(mo), int(d), int(hh), int(mi), int(ss), int((frac or "0").ljust(6, "0")[:6]))
        except ValueError:
            dt = None
        if dt is not None and 1990 <= dt.year <= 2200:
            if zone:
                z = "+00:00" if zone == "Z" else zone if ":" in zone else zone[:3] + ":" + zone[3:]
                try:
                    dt = datetime.fromisoformat(dt.isoformat() + z)
                except ValueError:  # an impossible offset (+27:00): the name carries no usable zone
                    zone = None
            return dt, zone is not None, m.group(0)
    m = NAME_EPOCH_RE.search(base)
    if m:
        raw = m.group(0)
        digits = raw.split(".")[0]
        sec = int(digits) / 1000.0 if len(digits) == 13 else float(raw)
        return datetime.fromtimestamp(sec, timezone.utc), True, raw
    return None, False, None


def _to_utc(dt: datetime, has_zone: bool, tz: str) -> datetime:
    from ..timebase import zone_info

    if has_zone:
        return dt.astimezone(timezone.utc)
    return dt.replace(tzinfo=zone_info(tz)).astimezone(timezone.utc)


# --------------------------------------------------------------------------


@dataclass
class PromParsed:
    files: list[_FileData]

    def anchors(self) -> list[tuple[datetime, str]]:
        """Full timestamps (with a year) that are exact without knowing the zone."""
        out: list[tuple[datetime, str]] = []
        for fd in self.files:
            s = fd.samples
            if s.height and s.get_column("ts_us").null_count() < s.height:
                us = int(s.get_column("ts_us").min())  # type: ignore[arg-type]  # polars scalars are typed as every literal
                out.append((datetime.fromtimestamp(us / 1e6, timezone.utc), f"a Prometheus sample time in {fd.file.display}"))
                continue
            for t in fd.sep_times.values():
                dt, zoned = _parse_time_text(t)
                if dt is not None and zoned:
                    out.append((dt.astimezone(timezone.utc), f"a scrape separator time in {fd.file.display}"))
                    break
            else:
                dt, zoned, _ = _name_time(fd.file.display)
                if dt is not None and zoned:
                    out.append((dt.astimezone(timezone.utc), f"the file name of {fd.file.display}"))
        return out

    def resolve(self, ctx: "TimeContext") -> "SourceOutput":
        return _combine(self, _place(self, ctx))

    def place(self, ctx: "TimeContext") -> "SourceOutput":
        return _place(self, ctx)

    def combine(self, placed: "SourceOutput") -> "SourceOutput":
        return _combine(self, placed)


def parse(files: list["InputFile"]) -> PromParsed:
    out = []
    for f in files:
        fd = _parse_json(f) if _is_json(f) else _parse_text(f)
        out.append(fd)
    return PromParsed(out)


# --------------------------------------------------------------------------
# Phase 2: on the common clock

PROM_SAMPLES_SCHEMA = {
    "time": "Datetime(time_unit='us', time_zone='UTC')",
    "scope": "String",
    "engine": "String",
    "model_name": "String",
    "metric": "String",
    "field": "String",
    "labels": "String",
    "value": "Float64",
    "source": "String",
    "line": "UInt32",
}
PROM_SERIES_SCHEMA = {
    "time": "Datetime(time_unit='us', time_zone='UTC')",
    "scope": "String",
    "engine": "String",
    "model_name": "String",
    "running": "Float64",
    "waiting": "Float64",
    "waiting_capacity": "Float64",
    "waiting_deferred": "Float64",
    "swapped": "Float64",
    "kv_usage": "Float64",  # percent
    "cpu_kv_usage": "Float64",  # percent
    "preemptions_total": "Float64",  # counter value (since engine start or last reset)
    "preemptions": "Int64",  # increase since the previous scrape of the series
    "prefix_hit_rate": "Float64",  # percent, hits/queries increase in the interval (V0: the gauge)
    "finished_requests": "Float64",  # vllm:request_num_preemptions_count increase
    "finished_preemptions": "Float64",  # vllm:request_num_preemptions_sum increase
    "finished_preempted_requests": "Float64",  # count increase - bucket{le="0"} increase: preempted at least once
    "source": "String",
    "line": "UInt32",
}
PROM_PREEMPTIONS_SCHEMA = {
    "scope": "String",
    "engine": "String",
    "model_name": "String",
    "start": "Datetime(time_unit='us', time_zone='UTC')",  # previous sample (null for the first)
    "end": "Datetime(time_unit='us', time_zone='UTC')",
    "prev_value": "Float64",
    "value": "Float64",
    "increase": "Int64",  # null for the first sample of a series
    "reset": "Boolean",
    "source": "String",
    "line": "UInt32",
    "col": "UInt32",
    "stream": "Int32",
    "raw": "String",
}


def _dtypes(schema: dict[str, str]) -> "Schema":
    from ..frames import polars_schema

    return polars_schema(schema)


def _place(parsed: PromParsed, ctx: "TimeContext") -> "SourceOutput":
    """Each file's samples with their scrape times, on the file's own clock: frame ``prom_placed``
    (the pipeline moves its clock, per file, before :func:`_combine`)."""
    from ..timebase import Assumption
    from .registry import SourceOutput

    out = SourceOutput()
    frames = []
    for fd in parsed.files:
        f = fd.file
        out.warnings.extend(f"{f.display}: {w}" for w in fd.warnings)
        if any("skipped" in w for w in fd.warnings):
            out.partial = True  # input that was there but could not be read: exit 5, like every source
        s = fd.samples
        if s.height == 0:
            out.warnings.append(f"{f.display}: no vLLM metrics (vllm:...) found")
            continue
        # Scrape times from the separators, the file name, the file mtime.
        scrape_t: dict[int, datetime] = {}
        used: dict[str, int] = {}
        timed_scrapes = set(
            s.filter(pl.col("ts_us").is_not_null()).get_column("scrape").unique().to_list()
        )
        if timed_scrapes:
            used["sample timestamps" if fd.fmt == "text" else "the times in the JSON answer"] = len(timed_scrapes)
        for sc, text in fd.sep_times.items():
            if sc in timed_scrapes:
                continue
            dt, zoned = _parse_time_text(text)
            if dt is not None:
                scrape_t[sc] = _to_utc(dt, zoned, ctx.tz)
                used["separator lines"] = used.get("separator lines", 0) + 1
        untimed = [sc for sc in range(fd.n_scrapes) if sc not in timed_scrapes and sc not in scrape_t]
        detail = ""
        if untimed:
            last = fd.n_scrapes - 1
            ndt, nzoned, ntext = _name_time(f.display)
            if fd.n_scrapes == 1 and ndt is not None:
                scrape_t[0] = _to_utc(ndt, nzoned, ctx.tz)
                used["the file name"] = 1
                detail = f" ({ntext}{'' if nzoned else ', local time in ' + ctx.tz})"
            elif last in untimed and f.mtime is not None:
                scrape_t[last] = datetime.fromtimestamp(f.mtime, timezone.utc)
                used["the file mtime"] = 1
                detail = f" ({scrape_t[last].isoformat(timespec='seconds')})"
            still = [sc for sc in untimed if sc not in scrape_t]
            if still:
                out.warnings.append(
                    f"{f.display}: {len(still)} of {fd.n_scrapes} scrape(s) have no time (no sample timestamps, "
                    "no separator time): their counter increases are counted but not placed in time; "
                    "write '# scrape <ISO time>' before each scrape"
                )
        for what, k in used.items():
            extra = detail if what in ("the file name", "the file mtime") else ""
            out.assumptions.append(
                Assumption("scrape time", what + extra, f"{k} of {fd.n_scrapes} scrape(s)", scope=f.display)
            )
        st = pl.DataFrame(
            {"scrape": list(scrape_t), "_st": list(scrape_t.values())},
            schema={"scrape": pl.Int32, "_st": pl.Datetime("us", "UTC")},
        )
        folder = str(PurePosixPath(f.display.replace("!", "/")).parent)
        s = s.join(st, on="scrape", how="left").with_columns(
            time=pl.coalesce(
                pl.from_epoch(pl.col("ts_us"), time_unit="us").dt.replace_time_zone("UTC"), pl.col("_st")
            ),
            source=pl.lit(f.display),
            stream=pl.lit(f.stream, pl.Int32),
            scope=pl.when(pl.col("instance").is_not_null())
            .then(pl.lit(folder + "|") + pl.col("instance"))
            .otherwise(pl.lit(folder)),
            scrape_id=pl.concat_str(
                [pl.lit(f"{f.file_id}:"), pl.col("scrape").cast(pl.String)]
            ),
        ).drop("_st")
        frames.append(s)
    if not frames:
        out.frames.update(_empty_frames())
        out.counters["prometheus"] = _facts(None, None, parsed)
        return out
    out.frames[PLACED] = pl.concat(frames, how="vertical")
    return out


def _combine(parsed: PromParsed, out: "SourceOutput") -> "SourceOutput":
    """Across files, on the common clock: ranks of one engine, counter increases (a series spans
    files), events, series, config and the counter facts."""
    if PLACED not in out.frames:
        return out
    s = out.frames.pop(PLACED)
    s = s.with_columns(
        engine=pl.col("engine").fill_null("0"),
        model_name=pl.col("model_name").fill_null(""),
        field=pl.col("name").replace_strict(
            {k: v[0] for k, v in METRICS.items()} | {k: "created" for k in CREATED}, default=None, return_dtype=pl.String
        ),
        value=pl.col("value")
        * pl.col("name").replace_strict({k: v[2] for k, v in METRICS.items()}, default=1.0, return_dtype=pl.Float64),
    )
    # Ranks of one engine (TP/DP workers, API server processes, Ray replicas: series that
    # differ only by a pid / rank / replica label) are one engine: per scrape, a metric's value
    # is the largest of theirs, never their sum (gauges; and a counter counts per engine).
    ranks = ["scope", "scrape_id", "engine", "model_name", "name", "reason", "le"]
    before = s.height
    s = s.sort("value", descending=True, nulls_last=True).unique(ranks, keep="first").sort("file_id", "n", "col", nulls_last=True)
    if s.height < before:
        out.notes.append(
            f"Prometheus: {before - s.height} sample(s) of other ranks of the same engine (same metric, engine "
            "and scrape, other labels) were not added: the largest value of each is used"
        )
    samples = s.filter(pl.col("field") != "created")

    # ---- config from vllm:cache_config_info labels
    out.config = _config_rows(samples)

    # ---- counters: increases between consecutive samples of a series (a NaN or Inf counter
    # sample is no count: left out, as the facts and events need whole numbers)
    counters = _counter_pairs(
        s.filter(~pl.col("field").is_in(list(COUNTER_FIELDS)) | pl.col("value").is_finite().fill_null(False))
    )
    pre = counters.filter(pl.col("field") == "preemptions")
    prom_pre = pre.select(
        "scope",
        "engine",
        "model_name",
        pl.col("prev_time").alias("start"),
        pl.col("time").alias("end"),
        "prev_value",
        "value",
        "increase",
        "reset",
        "source",
        pl.col("n").alias("line"),
        "col",
        "stream",
        _raw_expr().alias("raw"),
    ).cast(_dtypes(PROM_PREEMPTIONS_SCHEMA))
    out.frames["prom_preemptions"] = prom_pre
    made = counter_events(prom_pre)
    out.events.append(made)
    counted = prom_pre.filter(pl.col("increase") > 0).get_column("increase").sum() or 0
    if counted > made.height:  # capped (vllm.preemptions.capped_count): implausible increases
        out.warnings.append(
            f"Prometheus counter increases add up to {counted} preemptions, implausibly many (a damaged value?): "
            f"{made.height} events made from them"
        )
        out.partial = True

    # ---- frames
    out.frames["prom_samples"] = samples.select(
        "time",
        "scope",
        "engine",
        "model_name",
        pl.col("name").alias("metric"),
        "field",
        "labels",
        "value",
        "source",
        pl.col("n").alias("line"),
    ).sort("scope", "engine", "time", "source", "line", nulls_last=False)
    out.frames["prom_series"] = _series(samples, counters)
    out.counters["prometheus"] = _facts(prom_pre, counters, parsed)
    resets = prom_pre.filter(pl.col("reset")).height
    if resets:
        out.notes.append(
            f"Prometheus: {resets} counter reset(s) of vllm:num_preemptions_total (engine restart): the increase "
            "after a reset is the value since the restart; preemptions between the last scrape before a restart "
            "and the restart are not visible."
        )
    return out


def _raw_expr() -> "pl.Expr":
    return pl.concat_str(
        [pl.col("name"), pl.lit("{"), pl.col("labels"), pl.lit("} "), pl.col("value").cast(pl.String)]
    ).str.slice(0, RAW_LIMIT)


def _counter_pairs(s: "pl.DataFrame") -> "pl.DataFrame":
    """One row per counter sample, with the previous sample of its series and the increase."""
    created = (
        s.filter(pl.col("field") == "created")
        .with_columns(cfield=pl.col("name").replace_strict(CREATED, default=None, return_dtype=pl.List(pl.String)))
        .explode("cfield")
        .select(
            "scope",
            "scrape_id",
            "engine",
            "model_name",
            pl.col("cfield").alias("field"),
            pl.col("le").fill_null(""),
            pl.col("value").alias("created"),
        )
        .unique(["scope", "scrape_id", "engine", "model_name", "field", "le"], keep="first")
    )
    c = s.filter(pl.col("field").is_in(list(COUNTER_FIELDS))).with_columns(le=pl.col("le").fill_null(""))
    # The _created of a histogram family has no le: it dates every bucket.
    c = c.join(
        created.filter(pl.col("le") == "").drop("le"),
        on=["scope", "scrape_id", "engine", "model_name", "field"],
        how="left",
    )
    grp = ["scope", "field", "engine", "model_name", "le"]
    c = c.sort([*grp, "time", "file_id", "n"], nulls_last=False).unique(
        [*grp, "scrape_id"], keep="first", maintain_order=True
    )
    prev = pl.col("value").shift(1).over(grp)
    prev_created = pl.col("created").shift(1).over(grp)
    c = c.with_columns(
        prev_value=prev,
        prev_time=pl.col("time").shift(1).over(grp),
        reset=(
            (pl.col("value") < prev)
            | ((pl.col("created") - prev_created).abs() > 1e-3).fill_null(False)
        ).fill_null(False),
    )
    inc = (
        pl.when(pl.col("prev_value").is_null())
        .then(None)
        .when(pl.col("reset"))
        .then(pl.col("value"))
        .otherwise(pl.col("value") - pl.col("prev_value"))
    )
    return c.with_columns(inc_f=inc, increase=inc.round(0).cast(pl.Int64, strict=False))  # NaN, inf: null


def counter_events(pairs: "pl.DataFrame") -> "pl.DataFrame":
    """``increase`` interval events per row of a ``prom_preemptions`` frame, spread evenly in (start, end].

    Event k of n is at start + (end - start) * k / n (at ``end`` when the start
    is unknown); ids ``<source>:<line>~i<k>`` (``<source>:<line>:<col>~i<k>`` for
    JSON answers); ``cumulative`` is the counter value after the k-th one.
    """
    from ..events import spread_interval

    p = pairs.filter(pl.col("increase") > 0)
    if p.height == 0:
        return p
    from ..vllm.preemptions import capped_count

    p = p.with_columns(_k=pl.int_ranges(1, capped_count(pl.col("increase")) + 1, dtype=pl.Int64)).explode("_k")
    where = pl.concat_str(
        [
            pl.col("source"),
            pl.lit(":"),
            pl.col("line").cast(pl.String).fill_null("?"),
            pl.when(pl.col("col").is_not_null()).then(pl.lit(":") + pl.col("col").cast(pl.String)).otherwise(pl.lit("")),
        ]
    )
    base = (pl.col("value") - pl.col("increase")).round(0).cast(pl.Int64)
    return p.with_columns(
        event_id=pl.concat_str([where, pl.lit("~i"), pl.col("_k").cast(pl.String)]),
        kind=pl.lit("interval"),
        time=spread_interval(pl.col("start"), pl.col("end"), pl.col("_k"), pl.col("increase")),
        time_precision=pl.lit("interval"),
        interval_start=pl.col("start"),
        interval_end=pl.col("end"),
        request_id=pl.lit(None, pl.String),
        mode=pl.lit(None, pl.String),
        cumulative=base + pl.col("_k"),
        seq=pl.col("line"),
        _sub=pl.col("_k"),
    )


def _series(samples: "pl.DataFrame", counters: "pl.DataFrame") -> "pl.DataFrame":
    keys = ["scope", "scrape_id", "engine", "model_name"]

    def first(fld: str, extra: "pl.Expr | None" = None) -> "pl.Expr":
        cond = pl.col("field") == fld
        if extra is not None:
            cond = cond & extra
        return pl.col("value").filter(cond).first()

    g = samples.filter(pl.col("field") != "cache_config").group_by(keys).agg(
        pl.col("time").max(),
        pl.col("source").first(),
        pl.col("n").min().alias("line"),
        first("running").alias("running"),
        first("waiting").alias("waiting"),
        first("waiting_by_reason", pl.col("reason") == "capacity").alias("waiting_capacity"),
        first("waiting_by_reason", pl.col("reason") == "deferred").alias("waiting_deferred"),
        first("swapped").alias("swapped"),
        first("kv_usage").alias("kv_usage"),
        first("cpu_kv_usage").alias("cpu_kv_usage"),
        first("preemptions").alias("preemptions_total"),
        first("prefix_hit_rate_gauge").alias("_hit_gauge"),
    )
    le0 = pl.col("le").cast(pl.Float64, strict=False) == 0.0
    cin = counters.filter(
        pl.col("field").is_in(["preemptions", "prefix_queries", "prefix_hits", "hist_count", "hist_sum"])
        | ((pl.col("field") == "hist_bucket") & le0.fill_null(False))
    )
    ci = cin.group_by(keys).agg(
        pl.col("increase").filter(pl.col("field") == "preemptions").first().alias("preemptions"),
        pl.col("inc_f").filter(pl.col("field") == "prefix_queries").first().alias("_dq"),
        pl.col("inc_f").filter(pl.col("field") == "prefix_hits").first().alias("_dh"),
        pl.col("inc_f").filter(pl.col("field") == "hist_count").first().alias("finished_requests"),
        pl.col("inc_f").filter(pl.col("field") == "hist_sum").first().alias("finished_preemptions"),
        pl.col("inc_f").filter(pl.col("field") == "hist_bucket").first().alias("_d_le0"),
    ).with_columns(finished_preempted_requests=pl.col("finished_requests") - pl.col("_d_le0"))
    g = g.join(ci, on=keys, how="left").with_columns(
        prefix_hit_rate=pl.coalesce(
            pl.when(pl.col("_dq") > 0).then(pl.col("_dh") / pl.col("_dq") * 100.0), pl.col("_hit_gauge")
        )
    )
    return (
        g.select(list(PROM_SERIES_SCHEMA))
        .cast(_dtypes(PROM_SERIES_SCHEMA))
        .sort("scope", "engine", "time", "source", "line", nulls_last=False)
    )


def _config_rows(samples: "pl.DataFrame") -> "pl.DataFrame":
    from ..vllm.config import CONFIG_SCHEMA

    info = samples.filter(pl.col("field") == "cache_config").sort("time", "source", "n", nulls_last=True)
    rows = []
    seen: set[tuple[str, str]] = set()
    for r in info.unique("labels", keep="first", maintain_order=True).iter_rows(named=True):
        for m in re.finditer(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"', r["labels"]):
            key, value = m.group(1), m.group(2).replace('\\"', '"').replace("\\\\", "\\")
            if key in CONFIG_SKIP_LABELS or value in ("None", ""):
                continue
            key = CONFIG_LABELS.get(key, key)
            if (key, value) in seen:
                continue
            seen.add((key, value))
            rows.append(
                {
                    "key": key,
                    "value": value,
                    "status": "seen",
                    "time": r["time"],
                    "source": r["source"],
                    "line": r["n"],
                    "note": f"label of vllm:cache_config_info (engine {r['engine']})",
                }
            )
    return pl.DataFrame(rows, schema=_dtypes(CONFIG_SCHEMA))


def _empty_frames() -> dict[str, Any]:
    return {
        "prom_samples": pl.DataFrame(schema=_dtypes(PROM_SAMPLES_SCHEMA)),
        "prom_series": pl.DataFrame(schema=_dtypes(PROM_SERIES_SCHEMA)),
        "prom_preemptions": pl.DataFrame(schema=_dtypes(PROM_PREEMPTIONS_SCHEMA)),
    }


def _facts(pre: "pl.DataFrame | None", counters: "pl.DataFrame | None", parsed: PromParsed) -> dict[str, Any]:
    """Counter facts for reconcile.py and the summary (plain Python values)."""
    facts: dict[str, Any] = {
        "files": [fd.file.display for fd in parsed.files],
        "scrapes": sum(fd.n_scrapes for fd in parsed.files),
        "series": 0,
        "increase": 0,
        "resets": 0,
        "window": None,
        "counter_totals": [],
        "histogram": None,
    }
    if pre is None or pre.height == 0:
        return facts
    grp = ["scope", "engine", "model_name"]
    facts["series"] = pre.select(grp).unique().height
    facts["increase"] = int(pre.get_column("increase").fill_null(0).sum())
    facts["resets"] = pre.filter(pl.col("reset")).height
    placed = pre.filter(pl.col("increase").is_not_null())
    if placed.height:
        facts["window"] = [placed.get_column("start").min(), placed.get_column("end").max()]
    last = pre.group_by(grp, maintain_order=True).agg(
        pl.col("value").last(),
        pl.col("end").last().alias("time"),
        pl.col("source").last(),
        pl.col("line").last(),
        pl.col("col").last(),
        pl.len().alias("samples"),
        pl.col("value").first().alias("first_value"),
        pl.col("end").first().alias("first_time"),
        pl.col("increase").fill_null(0).sum().alias("increase"),
    )
    facts["counter_totals"] = [
        {
            "scope": r["scope"],
            "engine": r["engine"],
            "model_name": r["model_name"] or None,
            "value": int(round(r["value"])),
            "time": r["time"],
            "from": f"{r['source']}:{r['line']}" + (f":{r['col']}" if r["col"] is not None else ""),
            "samples": r["samples"],
            "first_value": int(round(r["first_value"])),
            "first_time": r["first_time"],
            "increase": int(r["increase"]),
        }
        for r in last.sort(grp).iter_rows(named=True)
    ]
    if counters is not None:
        h = counters.filter(pl.col("field").is_in(["hist_sum", "hist_count"]))
        if h.height:
            facts["histogram"] = {
                "finished_requests": float(h.filter(pl.col("field") == "hist_count").get_column("inc_f").fill_null(0).sum()),
                "preemptions_of_finished_requests": float(
                    h.filter(pl.col("field") == "hist_sum").get_column("inc_f").fill_null(0).sum()
                ),
            }
    return facts


register(
    SourceKind(
        name=KIND,
        description="Prometheus /metrics scrapes (text, OpenMetrics) or Prometheus API query JSON with vllm: metrics",
        sniff=_sniff,
        parse=parse,
    )
)


# Sample inputs (tests/test_samples.py): a whole scrape file each; ``expect`` names a frame and
# the fields of one of its rows, and the events the counter increases make.
SAMPLES: list[tuple[str, dict[str, Any]]] = [
    (
        "# scrape 2026-03-14T10:00:00Z\n"
        "# TYPE vllm:num_preemptions_total counter\n"
        'vllm:num_preemptions_total{engine="0",model_name="m"} 10.0\n'
        'vllm:num_requests_waiting{engine="0",model_name="m"} 3.0\n'
        'vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.97\n'
        "# scrape 2026-03-14T10:00:10Z\n"
        "# TYPE vllm:num_preemptions_total counter\n"
        'vllm:num_preemptions_total{engine="0",model_name="m"} 14.0\n'
        'vllm:num_requests_waiting{engine="0",model_name="m"} 5.0\n'
        'vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.99\n',
        {"frame": "prom_preemptions", "engine": "0", "increase": 4, "value": 14.0, "_events": 4},
    ),
    (
        "# scrape 2026-03-14T10:00:10Z\n"
        'vllm:num_requests_waiting{engine="0",model_name="m"} 5.0\n'
        'vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.99\n',
        {"frame": "prom_series", "engine": "0", "waiting": 5.0, "kv_usage": 99.0, "_events": 0},
    ),
    (
        '{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"__name__":'
        '"vllm:num_preemptions_total","engine":"0","model_name":"m"},"values":[[1773482400,"10"],'
        '[1773482410,"12"]]}]}}\n',
        {"frame": "prom_preemptions", "engine": "0", "increase": 2, "value": 12.0, "_events": 2},
    ),
    (
        '{"status":"success","data":{"resultType":"vector","result":[{"metric":{"__name__":'
        '"vllm:num_preemptions_total","engine":"0","model_name":"m"},"value":[1773483900.781,"422"]}]}}\n',
        {"frame": "prom_preemptions", "engine": "0", "value": 422.0, "_events": 0},
    ),
]

register_samples(KIND, SAMPLES)
