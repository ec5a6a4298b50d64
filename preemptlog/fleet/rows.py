"""One analysed server -> the rows of the fleet tables (schema.py).

Everything the fleet tables say about a server comes from the public :class:`~preemptlog.model.result.Analysis`
and ``summary.summarize``'s dict, read here and nowhere else: :func:`incident_rows` builds the
``incidents`` rows (one per engine), :func:`event_rows` the ``events``, :func:`finding_rows` the
``findings``. When the summary's shape changes (the headline, the fix ranking, count
visibility), this is the one module to adapt. :func:`engine_kind` is the one place the engine's
kind is derived.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Any

import polars as pl

from ..engines import DEFAULT
from ..events.servers import servers
from ..model.events import public
from ..model.frames import UTC_TIME
from ..render.summary import fix_line
from . import schema

if TYPE_CHECKING:
    from ..model.result import Analysis

GATES = {
    "G1-kv-space": "g1_kv_space",
    "G2-batch-variance": "g2_batch_variance",
    "G3-queue-overflow": "g3_queue_overflow",
    "G4-prefix-conflict": "g4_prefix_conflict",
    "undetermined": "undetermined",
}
CONFIG = (
    "max_num_seqs",
    "max_num_batched_tokens",
    "gpu_memory_utilization",
    "block_size",
    "num_gpu_blocks",
    "max_model_len",
    "enable_prefix_caching",
    "enable_chunked_prefill",
    "tensor_parallel_size",
    "kv_cache_dtype",
)


def engine_kind(analysis: Analysis, summary: dict[str, Any]) -> str:
    """Which engine the server ran (``vllm`` | ``sglang``): the summary's (summary._engines, from the
    events' ``engine_kind`` and the bundle's log kinds), else the default engine (engines.DEFAULT)."""

    kind = summary.get("engine_kind")
    return str(kind) if kind else DEFAULT


def cause_of(gate: pl.Expr, sub_kind: pl.Expr) -> pl.Expr:
    """``gate/sub_kind`` (or the gate alone), the key of a cause."""
    return pl.when(sub_kind.is_null()).then(gate).otherwise(pl.concat_str([gate, pl.lit("/"), sub_kind]))


def _config(summary: dict[str, Any], name: str) -> str | None:
    row = (summary.get("config") or {}).get(name)
    return None if not row or row.get("value") is None else str(row["value"])


def _host(analysis: Analysis) -> str | None:

    srv = servers(analysis.records)
    hosts = [h for h in srv.get_column("host").to_list() if h] if srv.height else []
    return hosts[0] if hosts else None


def _scrape_labels(analysis: Analysis) -> tuple[str | None, str | None]:
    """(instance, model_name) of the /metrics scrapes in the bundle, when their series carry them."""
    samples = analysis.frames.get("prom_samples")
    if samples is None or not samples.height:
        return None, None
    got = samples.select(
        pl.col("labels").str.extract(r'(?:^|,)instance="([^"]*)"', 1).drop_nulls().first().alias("instance"),
        pl.col("model_name").replace("", None).drop_nulls().first().alias("model_name"),
    ).row(0)
    return got[0], got[1]


def _time(text: str | None) -> datetime | None:
    """An ISO time of the summary (in the output zone) as a UTC datetime."""
    return datetime.fromisoformat(text).astimezone(UTC) if text else None


def key_columns(bundle_id: str, server: str, analysis: Analysis, summary: dict[str, Any]) -> dict[str, Any]:
    """The key of every row of this server (schema.KEY, without the engine)."""
    return {
        "bundle_id": bundle_id,
        "server": server,
        "engine_kind": engine_kind(analysis, summary),
        "model": _config(summary, "model") or _scrape_labels(analysis)[1],
        "vllm_version": _config(summary, "vllm_version"),
    }


def _with_key(df: pl.DataFrame, key: dict[str, Any]) -> pl.DataFrame:
    return df.with_columns([pl.lit(v, pl.String).alias(k) for k, v in key.items()])


def _day(day: date) -> pl.Expr:
    return pl.col("time").dt.date().fill_null(pl.lit(day, pl.Date)).alias(schema.PARTITION)


def event_frame(analysis: Analysis) -> pl.DataFrame:
    """The events with their verdict and per-event findings (UTC times), engine "0" when unnamed."""

    ev = public(analysis.events).with_columns(pl.col("engine").fill_null("0"))
    v = analysis.verdicts
    if v is not None and v.height and ev.height:
        ev = ev.join(v.select("event_id", "gate", "sub_kind", "rule", "confidence"), on="event_id", how="left")
    f = analysis.findings
    if f is not None and f.per_event.height and ev.height:
        pe = f.per_event.select(
            "event_id", "mechanism", "mechanism_confidence", "recompute_tokens", "recompute_bound", "preempted_s"
        )
        ev = ev.join(pe, on="event_id", how="left")
    for c in ("gate", "sub_kind", "rule", "confidence", "mechanism", "mechanism_confidence", "recompute_bound"):
        if c not in ev.columns:
            ev = ev.with_columns(pl.lit(None, pl.String).alias(c))
    for c, t in (("recompute_tokens", pl.Int64), ("preempted_s", pl.Float64)):
        if c not in ev.columns:
            ev = ev.with_columns(pl.lit(None, t).alias(c))
    return ev


def event_rows(key: dict[str, Any], ev: pl.DataFrame, day: date, partial: bool = False) -> pl.DataFrame:
    """The events rows; ``partial``: the server's analysis read its bundle in part (a damaged input)."""
    return schema.conform("events", _with_key(ev, key).with_columns(_day(day), partial=pl.lit(partial)))


def _engines(analysis: Analysis, ev: pl.DataFrame) -> list[str]:
    names: set[str] = set(ev.get_column("engine").to_list()) if ev.height else set()
    for frame in (analysis.stats, analysis.frames.get("prom_series")):
        if frame is not None and frame.height and "engine" in frame.columns:
            names |= {e for e in frame.get_column("engine").drop_nulls().unique().to_list() if e != ""}
    return sorted(names or {"0"}, key=lambda e: (len(e), e))


def _known_sum(col: str) -> pl.Expr:
    """The sum of the known values, null when none is known ("unknown", never 0 tokens)."""
    return pl.when(pl.col(col).is_not_null().any()).then(pl.col(col).sum())


def _counts_text(df: pl.DataFrame, col: str) -> pl.DataFrame:
    """Per engine: ``key n, key n`` (most first) and the top key, of the non-null values of ``col``."""
    if not df.height:
        return pl.DataFrame(schema={"engine": pl.String, "text": pl.String, "top": pl.String})
    return (
        df.filter(pl.col(col).is_not_null())
        .group_by("engine", col)
        .len()
        .sort(["engine", "len", col], descending=[False, True, False])
        .group_by("engine", maintain_order=True)
        .agg(
            pl.concat_str([pl.col(col), pl.lit(" "), pl.col("len").cast(pl.String)]).str.join(", ").alias("text"),
            pl.col(col).first().alias("top"),
        )
    )


def incident_rows(bundle_id: str, server: str, analysis: Analysis, summary: dict[str, Any], day: date) -> pl.DataFrame:
    """One row per engine of this server: counts and their visibility, causes, mechanisms,
    recompute, thrash, the configuration as seen, the headline and the top fix.

    Per-engine columns are counted from the events of that engine; the ones marked server-level
    in schema.py (headline, fix, thrash, received requests) repeat on every engine row of the
    server: take them once per (bundle_id, server)."""
    key = key_columns(bundle_id, server, analysis, summary)
    ev = event_frame(analysis).with_columns(cause=cause_of(pl.col("gate"), pl.col("sub_kind")))
    visible = bool(summary.get("count_visible"))
    nv = summary.get("not_visible") or {}
    per = pl.DataFrame({"engine": _engines(analysis, ev)})
    if ev.height:
        agg = ev.group_by("engine").agg(
            pl.len().cast(pl.Int64).alias("preemptions"),
            pl.col("time").min().alias("first_event"),
            pl.col("time").max().alias("last_event"),
            *[(pl.col("gate") == g).sum().cast(pl.Int64).alias(c) for g, c in GATES.items()],
            _known_sum("recompute_tokens").cast(pl.Int64).alias("recompute_tokens"),
            ((pl.col("recompute_bound") == "lower").any() | pl.col("recompute_tokens").is_null().any()).alias(
                "recompute_lower_bound"
            ),
        )
        per = per.join(agg, on="engine", how="left")
        causes = _counts_text(ev, "cause").rename({"text": "causes", "top": "top_cause"})
        mechs = _counts_text(ev, "mechanism").rename({"text": "mechanisms", "top": "top_mechanism"})
        per = per.join(causes, on="engine", how="left").join(mechs, on="engine", how="left")
    if visible:  # an engine without events had none, when the count is visible: 0, as the summary says
        per = per.with_columns(
            [
                pl.col(c).fill_null(0) if c in per.columns else pl.lit(0, pl.Int64).alias(c)
                for c in ("preemptions", *GATES.values())
            ]
        )

    f = analysis.findings
    rc = f.recompute if f is not None else {}
    th = f.thrash if f is not None else {}
    hist = th.get("histogram") or {}
    stall = f.stall if f is not None else {}
    spans = stall.get("spans") or []
    fixes = summary.get("fixes") or []
    top = fixes[0] if fixes else None

    recon = summary.get("reconciliation") or {}
    span = summary.get("log_span") or {}
    server_level: dict[str, Any] = {
        "generation": _config(summary, "engine"),
        "host": _host(analysis),
        "instance": _scrape_labels(analysis)[0],
        "log_first": _time(span.get("first")),
        "log_last": _time(span.get("last")),
        "count_visible": visible,
        "count_quality": recon.get("quality"),
        "not_visible_reason": nv.get("short") or nv.get("reason"),
        "remedy": nv.get("remedy"),
        "requests_received": summary.get("requests_received"),
        "preemption_rate": summary.get("preemption_rate"),
        "recompute_share": rc.get("share_of_processed"),
        "thrash_requests": th.get("requests_preempted_more_than_once")
        if th.get("evaluable")
        else hist.get("requests_preempted_more_than_once"),
        "thrash_5_or_more": th.get("requests_preempted_5_or_more")
        if th.get("evaluable")
        else hist.get("requests_preempted_5_or_more"),
        "stall_s": max((s["seconds"] for s in spans), default=None) if stall.get("evaluable") else None,
        **{f"cfg_{c}": _config(summary, c) for c in CONFIG},
        "headline": summary.get("headline"),
        "top_fix": fix_line(top) if top else None,
        "top_fix_option": top.get("option") if top else None,
        "top_fix_suggested": None if not top or top.get("suggested") is None else str(top["suggested"]),
        "top_fix_events": top.get("events_addressed") if top else None,
        "top_fix_verified": top.get("status") if top else None,  # fixes.plan: verified / not verified
        "to_know_more": summary.get("to_know_more_line"),
        "warnings": len(summary.get("warnings") or []),
        "partial": bool(analysis.partial),
    }
    out = _with_key(per, key).with_columns(
        [pl.lit(v, schema.polars_schema("incidents")[k]).alias(k) for k, v in server_level.items()]
    )
    out = out.with_columns(
        pl.coalesce(
            pl.col("first_event") if "first_event" in out.columns else pl.lit(None, UTC_TIME),
            pl.col("log_first"),
        )
        .dt.date()
        .fill_null(pl.lit(day, pl.Date))
        .alias(schema.PARTITION)
    )
    return schema.conform("incidents", out)


def finding_rows(bundle_id: str, server: str, analysis: Analysis, summary: dict[str, Any], day: date) -> pl.DataFrame:
    """Long rows, one per finding: the causes and mechanisms per engine (counts), the fixes, and
    the server-level recompute, thrash, stall and never-fits findings (engine null)."""
    key = key_columns(bundle_id, server, analysis, summary)
    ev = event_frame(analysis).with_columns(cause=cause_of(pl.col("gate"), pl.col("sub_kind")))
    parts: list[pl.DataFrame] = []
    event_day = ev.group_by("engine").agg(pl.col("time").min().dt.date().alias(schema.PARTITION)) if ev.height else None
    for finding, col in (("cause", "cause"), ("mechanism", "mechanism")):
        if not ev.height:
            continue
        g = (
            ev.filter(pl.col(col).is_not_null())
            .group_by("engine", col)
            .agg(
                pl.len().cast(pl.Int64).alias("count"),
                _known_sum("recompute_tokens").cast(pl.Float64).alias("value"),
                (pl.col("source") + ":" + pl.col("line").cast(pl.String)).first().alias("evidence"),
            )
            .sort("engine", col)
            .select(
                "engine",
                pl.lit(finding).alias("finding"),
                pl.col(col).alias("key"),
                "count",
                "value",
                pl.lit(None, pl.String).alias("text"),
                "evidence",
            )
        )
        parts.append(g)
    rows: list[dict[str, Any]] = []

    for x in summary.get("fixes") or []:
        rows.append(
            {
                "finding": "fix",
                "key": x.get("option"),
                "count": x.get("events_addressed"),
                "value": float(x["rank"]) if x.get("rank") is not None else None,
                "text": fix_line(x),
                "evidence": "; ".join(str(i) for i in x.get("inputs") or []) or None,
            }
        )
    f = analysis.findings
    if f is not None:
        rc = f.recompute
        if rc.get("preemptions"):
            rows.append(
                {
                    "finding": "recompute",
                    "key": "lower_bound" if rc.get("tokens_is_lower_bound") else "tokens",
                    "count": rc.get("preemptions"),
                    "value": None if rc.get("tokens") is None else float(rc["tokens"]),
                    "text": rc.get("not_evaluable") or rc.get("processed_basis"),
                    "evidence": None,
                }
            )
        th = f.thrash
        if th.get("evaluable") and th.get("requests_preempted_more_than_once"):
            rows.append(
                {
                    "finding": "thrash",
                    "key": "requests_preempted_more_than_once",
                    "count": th.get("requests_preempted_more_than_once"),
                    "value": None
                    if th.get("max_preemptions_per_request") is None
                    else float(th["max_preemptions_per_request"]),
                    "text": None,
                    "evidence": None,
                }
            )
        for s in (f.stall.get("spans") or []) if f.stall.get("evaluable") else []:
            rows.append(
                {
                    "finding": "stall",
                    "key": "stall",
                    "count": None,
                    "value": float(s["seconds"]),
                    "text": None,
                    "evidence": s.get("first_line"),
                }
            )
        nf = f.stall.get("never_fits") or {}
        for item in nf.get("items") or [] if nf.get("found") else []:
            rows.append(
                {
                    "finding": "never_fits",
                    "key": str(item.get("what") or item.get("request_id") or "request"),
                    "count": None,
                    "value": None,
                    "text": str(item.get("text") or item),
                    "evidence": item.get("src") if isinstance(item.get("src"), str) else None,
                }
            )
    if rows:
        parts.append(
            pl.DataFrame(rows, schema={**{c: schema.polars_schema("findings")[c] for c in rows[0]}}).with_columns(
                pl.lit(None, pl.String).alias("engine")
            )
        )
    if not parts:
        return schema.empty("findings")
    df = pl.concat([p.select(sorted(p.columns)) for p in parts], how="diagonal_relaxed")
    first = summary.get("first_event") or (summary.get("log_span") or {}).get("first")
    server_day = _time(first).date() if first else day  # type: ignore[union-attr]
    if event_day is not None:
        df = df.join(event_day, on="engine", how="left")
    else:
        df = df.with_columns(pl.lit(None, pl.Date).alias(schema.PARTITION))
    df = df.with_columns(pl.col(schema.PARTITION).fill_null(pl.lit(server_day, pl.Date)))
    return schema.conform("findings", _with_key(df, key))


def unit_tables(bundle_id: str, server: str, analysis: Analysis, day: date) -> dict[str, pl.DataFrame]:
    """The events, incidents and findings rows of one analysed server."""
    summary = analysis.summary()
    key = key_columns(bundle_id, server, analysis, summary)
    return {
        "events": event_rows(key, event_frame(analysis), day, partial=bool(analysis.partial)),
        "incidents": incident_rows(bundle_id, server, analysis, summary, day),
        "findings": finding_rows(bundle_id, server, analysis, summary, day),
    }
