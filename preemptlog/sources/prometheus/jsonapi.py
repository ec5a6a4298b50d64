"""Prometheus HTTP API answers (query_range matrix, query vector) and AIPerf metric records (phase 1)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import polars as pl

from ...inputs.textio import read_head
from .names import _FileData, _sample_schema, _ts_to_us, canonical_name, created, metrics
from .text import _read_text

if TYPE_CHECKING:
    from ...inputs.files import InputFile


# One [time, "value"] pair of a Prometheus API answer.
JSON_PAIR_RE = re.compile(r'\[\s*(-?[0-9][0-9.eE+-]*)\s*,\s*"([^"]*)"\s*\]')


def _parse_json(f: InputFile) -> _FileData:
    import json
    from bisect import bisect_right

    known, dated = metrics(), created()  # the registered engines' names, read once
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
            fd.warnings.append(
                f"Prometheus answered {d.get('status')}: {d.get('errorType', '')} {d.get('error', '')}".strip()
            )
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
            if (
                not isinstance(metric, dict)
                or not isinstance(values, list)
                or not all(isinstance(v, (list, tuple)) and len(v) >= 2 for v in values)
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
            if name not in known and name not in dated:
                continue
            labels = ",".join(f'{k}="{v!s}"' for k, v in sorted(metric.items()) if k != "__name__")
            positions = pairs[start:ordinal] if len(pairs) >= ordinal else []
            parts.append(
                {
                    "name": name,
                    "labels": labels,
                    **{
                        k: (None if metric.get(k) is None else str(metric.get(k)))  # labels are strings
                        for k in ("engine", "model_name", "instance", "reason", "le")
                    },
                    **(
                        {"instance": str(metric["pod"])}
                        if metric.get("instance") is None and metric.get("pod") is not None
                        else {}
                    ),
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
                *[
                    pl.lit(p[c], pl.String).alias(c)
                    for c in ("name", "labels", "engine", "model_name", "instance", "reason", "le")
                ]
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
    known, dated = metrics(), created()  # the registered engines' names, read once
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
                    if nm not in known and nm not in dated:
                        continue
                    inst = lab.get("instance") or lab.get("pod") or endpoint
                    text = ",".join(f'{a}="{b}"' for a, b in sorted(lab.items()))
                    part = series.get((nm, text, inst))
                    if part is None:
                        part = series[(nm, text, inst)] = {
                            "name": nm,
                            "labels": text,
                            **{
                                c: (None if lab.get(c) is None else str(lab.get(c)))
                                for c in ("engine", "model_name", "reason", "le")
                            },
                            "instance": None if inst is None else str(inst),
                            "t": [],
                            "v": [],
                            "n": [],
                            "col": [],
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


def _is_json(f: InputFile) -> bool:

    try:
        head = read_head(f.path, 4096).decode("utf-8", "replace").lstrip()
    except OSError:
        return False
    return head.startswith(("{", "["))
