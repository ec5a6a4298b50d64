"""Finding 2: thrash ranking. Requests preempted more than once.

Counted only from sources that see every preemption with its request id: block-table preempt
records and the guide's PREEMPTED marker lines. V0's WARNING is sampled (only the 1st, 51st, ...
preemption is logged), V1 counts and /metrics have no request id: there the ranking is not
evaluable (a request seen twice in a 1-in-50 sample says nothing about how often it was hit).

Ranked by count, then tokens recomputed; with first/last preemption and whether the request
finished (a ``finish`` request record, or a ``Finished request`` / ``Aborted request`` line). The
distribution of preemptions per request (1, 2, 3-5, 6+) is shown beside the published reference
point: an instrumented vLLM run where 7.4 % of requests were preempted, 95 % of those once, at
most 4 times (quoted in issue 15).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .common import frame, src_expr

if TYPE_CHECKING:
    import polars as pl

    from ..analysis import Analysis

COMPLETE_KINDS = ("record", "marker")
BUCKETS = ("1", "2", "3-5", "6+")
REFERENCE = {
    "requests_preempted_share": 0.074,
    "preempted_once_share": 0.95,
    "max_preemptions_per_request": 4,
    "source": "a published instrumented vLLM run: 7.4 % of requests preempted, 95 % of those once, at most 4 times",
}
TOP = 50


def compute(a: Analysis, pe: pl.DataFrame) -> tuple[dict[str, Any], pl.DataFrame]:
    import polars as pl

    ev = a.events.select("event_id", "time", "kind", "request_id", pl.col("engine").fill_null("0"), "source", "line")
    ev = ev.join(pe.select("event_id", "recompute_tokens", "recompute_bound"), on="event_id", how="left")
    with_id = ev.filter(pl.col("request_id").is_not_null())
    complete = with_id.filter(pl.col("kind").is_in(COMPLETE_KINDS))
    schema: dict[str, Any] = {"request_id": pl.String, "preemptions": pl.UInt32, "tokens_recomputed": pl.Int64,
              "tokens_is_lower_bound": pl.Boolean, "first": pl.Datetime("us", "UTC"), "last": pl.Datetime("us", "UTC"),
              "finished": pl.String, "finished_src": pl.String, "first_src": pl.String}
    if complete.height == 0:
        why = "no preemption events" if ev.height == 0 else (
            "the events name no request, or come from sampled sources (V0 logs only every 50th preemption; V1 "
            "stats and /metrics have no request id): add block-table records (the vLLM plugin) to count per request"
        )
        return {"evaluable": False, "not_evaluable": why, "reference": REFERENCE}, pl.DataFrame(schema=schema)
    per = (
        complete.sort("time", nulls_last=True)
        .group_by("request_id")
        .agg(
            pl.len().alias("preemptions"),
            pl.when(pl.col("recompute_tokens").is_not_null().any()).then(pl.col("recompute_tokens").sum()).alias(
                "tokens_recomputed"),
            ((pl.col("recompute_bound") == "lower").any() | pl.col("recompute_tokens").is_null().any()).alias(
                "tokens_is_lower_bound"),
            pl.col("time").min().alias("first"),
            pl.col("time").max().alias("last"),
            src_expr().first().alias("first_src"),
        )
    )
    fin = _finished(a)
    per = per.join(fin, on="request_id", how="left").with_columns(
        finished=pl.when(pl.col("finished").is_not_null()).then(pl.col("finished")).otherwise(pl.lit("not seen"))
    )
    ranked = per.sort(["preemptions", "tokens_recomputed", "request_id"], descending=[True, True, False],
                      nulls_last=True)
    counts = per.get_column("preemptions")
    dist = {
        "1": int((counts == 1).sum()),
        "2": int((counts == 2).sum()),
        "3-5": int(((counts >= 3) & (counts <= 5)).sum()),
        "6+": int((counts >= 6).sum()),
    }
    preempted = per.height
    requests_known, req_basis = _request_count(a)
    repeated = ranked.filter(pl.col("preemptions") > 1)
    out = {
        "evaluable": True,
        "counted_from": sorted(set(complete.get_column("kind").to_list())),
        "requests_preempted": preempted,
        "requests_preempted_more_than_once": repeated.height,
        "requests_preempted_5_or_more": int((counts >= 5).sum()),
        "max_preemptions_per_request": int(_num(counts.max())),
        "distribution": dist,
        "preempted_once_share": dist["1"] / preempted if preempted else None,
        "requests_known": requests_known,
        "requests_known_basis": req_basis,
        "requests_preempted_share": (preempted / requests_known) if requests_known else None,
        "reference": REFERENCE,
        "events_without_request": ev.height - with_id.height,
        "events_from_sampled_sources": with_id.height - complete.height,
    }
    return out, repeated.head(TOP).select(list(schema))


def _num(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) else 0.0


def _finished(a: Analysis) -> pl.DataFrame:
    import polars as pl

    parts = []
    br = frame(a, "bt_requests")
    if br is not None:
        parts.append(br.filter(pl.col("phase") == "finish").select(
            "request_id",
            pl.concat_str([pl.lit("finished ("), pl.col("finish_reason").fill_null("?"), pl.lit(")")]).alias("finished"),
            src_expr().alias("finished_src"),
        ))
    rq = a.requests
    if rq.height:
        parts.append(rq.filter(pl.col("action").is_in(["finished", "aborted"])).select(
            "request_id", pl.col("action").alias("finished"), src_expr().alias("finished_src")))
    if not parts:
        return pl.DataFrame(schema={"request_id": pl.String, "finished": pl.String, "finished_src": pl.String})
    return pl.concat(parts, how="vertical_relaxed").unique("request_id", keep="first", maintain_order=True)


def _request_count(a: Analysis) -> tuple[int | None, str]:
    import polars as pl

    br = frame(a, "bt_requests")
    if br is not None:
        n = br.filter(pl.col("phase") == "arrival").get_column("request_id").n_unique()
        if n:
            return n, "arrival request records"
    rq = a.requests
    if rq.height:
        n = rq.filter(pl.col("action") == "received").select(pl.struct("stream", "request_id").n_unique()).item()
        if n:
            return int(n), "Received request lines"
    return None, "unknown: no request lines or request records in the bundle"
