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

import polars as pl

from .. import engines
from ..model.requests import incident_requests
from .common import frame, src_expr

if TYPE_CHECKING:
    from ..model.result import AnalysisView as Analysis

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
    ev = a.events.select("event_id", "time", "kind", "request_id", pl.col("engine").fill_null("0"), "source", "line")
    ev = ev.join(pe.select("event_id", "recompute_tokens", "recompute_bound"), on="event_id", how="left")
    with_id = ev.filter(pl.col("request_id").is_not_null())
    complete = with_id.filter(pl.col("kind").is_in(COMPLETE_KINDS))
    schema: dict[str, Any] = {
        "request_id": pl.String,
        "preemptions": pl.UInt32,
        "tokens_recomputed": pl.Int64,
        "tokens_is_lower_bound": pl.Boolean,
        "first": pl.Datetime("us", "UTC"),
        "last": pl.Datetime("us", "UTC"),
        "finished": pl.String,
        "finished_src": pl.String,
        "first_src": pl.String,
    }
    hist = histogram(a)
    if complete.height == 0:
        why = (
            "no preemption events"
            if ev.height == 0
            else (
                "the events name no request, or come from sampled sources (V0 logs only every 50th preemption; V1 "
                "stats and /metrics have no request id): add block-table records (the vLLM plugin) to count per request"
            )
        )
        return (
            {"evaluable": False, "not_evaluable": why, "reference": REFERENCE, "histogram": hist},
            pl.DataFrame(schema=schema),
        )
    per = (
        complete.sort("time", nulls_last=True)
        .group_by("request_id")
        .agg(
            pl.len().alias("preemptions"),
            pl.when(pl.col("recompute_tokens").is_not_null().any())
            .then(pl.col("recompute_tokens").sum())
            .alias("tokens_recomputed"),
            ((pl.col("recompute_bound") == "lower").any() | pl.col("recompute_tokens").is_null().any()).alias(
                "tokens_is_lower_bound"
            ),
            pl.col("time").min().alias("first"),
            pl.col("time").max().alias("last"),
            src_expr().first().alias("first_src"),
        )
    )
    fin = _finished(a)
    per = per.join(fin, on="request_id", how="left").with_columns(
        finished=pl.when(pl.col("finished").is_not_null()).then(pl.col("finished")).otherwise(pl.lit("not seen"))
    )
    ranked = per.sort(
        ["preemptions", "tokens_recomputed", "request_id"], descending=[True, True, False], nulls_last=True
    )
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
        "histogram": hist,
    }
    return out, repeated.head(TOP).select(list(schema))


def _num(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) else 0.0


def _finished(a: Analysis) -> pl.DataFrame:
    parts = []
    br = frame(a, "bt_requests")
    if br is not None:
        parts.append(
            br.filter(pl.col("phase") == "finish").select(
                "request_id",
                pl.concat_str([pl.lit("finished ("), pl.col("finish_reason").fill_null("?"), pl.lit(")")]).alias(
                    "finished"
                ),
                src_expr().alias("finished_src"),
            )
        )
    rq = a.requests
    if rq.height:
        parts.append(
            rq.filter(pl.col("action").is_in(["finished", "aborted"])).select(
                "request_id", pl.col("action").alias("finished"), src_expr().alias("finished_src")
            )
        )
    if not parts:
        return pl.DataFrame(schema={"request_id": pl.String, "finished": pl.String, "finished_src": pl.String})
    return pl.concat(parts, how="vertical_relaxed").unique("request_id", keep="first", maintain_order=True)


def _request_count(a: Analysis) -> tuple[int | None, str]:
    st = incident_requests(a)  # the arrival records when the bundle has them, else the request lines
    if st.distinct:
        return int(st.distinct), "arrival request records" if st.basis == "records" else "Received request lines"
    return None, "unknown: no request lines or request records in the bundle"


def histogram(a: Analysis) -> dict[str, Any] | None:
    """vLLM's own per-request histogram ``vllm:request_num_preemptions`` (0.30+, /metrics; SGLang's
    ``sglang:num_retractions``, 0.5.5-0.5.10, whose buckets start at 0, so "1" is separable): the
    distribution of preemptions per finished request, without request ids. The increase between the
    first and the last scrape of each engine (requests finished in the bundle's window); one scrape
    only: since engine start.

    Its buckets are cumulative, and their bounds are read from the scrape's own ``le`` labels, never
    assumed: vLLM's defaults are 1, 2, 3, 4, 5, 10, 20 (0.30-0.34), but from 0.33
    ``--custom-histogram-buckets`` sets them per deployment. ``bounds`` are the finite ``le`` values
    read; ``buckets`` the requests per range of whole preemption counts between consecutive bounds
    (``le`` 2, 8, 32: ``0-2``, ``3-8``, ``9-32``, ``33+``); each figure below is given only where the
    scrape's bounds settle it: ``distribution`` (``0-1``, ``2``, ``3-5``, ``6+``; vLLM's first default
    bucket ``le=1`` holds requests preempted 0 or 1 times, so they are ``0-1``) needs the bounds 1, 2
    and 5; ``requests_preempted_more_than_once`` the bound 1; ``requests_preempted_5_or_more`` the
    bound 4; ``requests_preempted_more_than`` is the same for the smallest bound of at least 1 (the
    first thing any bucket layout tells); ``max_preemptions_per_request_at_most`` the smallest bound
    whose bucket holds every request."""
    ps = frame(a, "prom_samples")
    if ps is None:
        return None
    h = ps.filter(pl.col("field").is_in(["hist_bucket", "hist_count", "hist_sum"]))
    if h.height == 0:
        return None
    h = h.with_columns(le=pl.col("labels").str.extract(r'le="([^"]+)"').fill_null(""), _src=src_expr())
    # One histogram read from two places (a final `curl /metrics` beside a scrapes/ folder) is one:
    # an engine's one-scrape scope is dropped when another scope of that engine has a series.
    n_scrapes = h.group_by("scope", "engine").agg(pl.col("time").n_unique().alias("_n"))
    multi = n_scrapes.filter(pl.col("_n") > 1).get_column("engine").unique()
    single = n_scrapes.filter((pl.col("_n") == 1) & pl.col("engine").is_in(multi.implode()))
    if single.height:
        h = h.join(single.select("scope", "engine"), on=["scope", "engine"], how="anti")
    keys = ["scope", "engine", "field", "le"]
    per = (
        h.sort("time")
        .group_by(keys, maintain_order=True)
        .agg(
            pl.col("value").first().alias("v0"),
            pl.col("value").last().alias("v1"),
            pl.len().alias("scrapes"),
            pl.col("_src").first().alias("first"),
            pl.col("_src").last().alias("last"),
        )
        .with_columns(
            inc=pl.when((pl.col("scrapes") > 1) & (pl.col("v1") >= pl.col("v0")))
            .then(pl.col("v1") - pl.col("v0"))
            .otherwise(pl.col("v1"))
        )
    )
    # Buckets by the bound's value ("1", "1.0" and "1e0" are one bound), summed over engines and scopes.
    per = per.with_columns(
        _b=pl.when(pl.col("field") == "hist_bucket").then(pl.col("le").cast(pl.Float64, strict=False))
    )
    cum_rows = per.filter(pl.col("_b").is_finite()).group_by("_b").agg(pl.col("inc").sum()).sort("_b")
    cum = {float(b): float(v) for b, v in cum_rows.iter_rows()}
    tot = per.filter(pl.col("field") != "hist_bucket").group_by("field").agg(pl.col("inc").sum())
    vals = {f: float(v) for f, v in tot.iter_rows()}
    count = vals.get("hist_count")
    total = vals.get("hist_sum")
    if count is None:
        return None
    bounds = sorted(cum)
    b0, b1, b2, b4, b5 = (cum.get(x) for x in (0.0, 1.0, 2.0, 4.0, 5.0))
    at_most = next((x for x in bounds if cum[x] >= count), None) if count else 0
    first_bound = next((x for x in bounds if x >= 1), None)
    window = bool((per.get_column("scrapes") > 1).all())
    # The engine whose histogram it is: one with its own metric prefix, else the default engine.
    eng = next(
        (e for e in engines.others() if bool(h.get_column("metric").str.starts_with(e.metrics.prefix + ":").any())),
        engines.default(),
    )
    dist: dict[str, int] | None = None
    if None not in (b1, b2, b5):
        dist = {
            "0-1": int(b1 or 0),
            "2": int((b2 or 0) - (b1 or 0)),
            "3-5": int((b5 or 0) - (b2 or 0)),
            "6+": int(count - (b5 or 0)),
        }
        if b0 is not None:  # SGLang's buckets start at 0: requests never retracted are told apart
            dist = {"0": int(b0), "1": int((b1 or 0) - b0), **{k: v for k, v in dist.items() if k != "0-1"}}
    return {
        # SGLang's own histogram of retractions per finished request (0.5.5-0.5.10), else vLLM's
        "metric": eng.histogram_metric,
        "engine_kind": eng.name,
        "window": "increase between the first and the last scrape" if window else "since engine start (one scrape)",
        "requests_finished": int(count),
        "preemptions": int(total) if total is not None else None,
        "bounds": [_bound_text(x) for x in bounds],
        "buckets": _ranges(cum, count),
        "distribution": dist,
        "requests_preempted_more_than_once": int(count - b1) if b1 is not None else None,
        "requests_preempted_5_or_more": int(count - b4) if b4 is not None else None,
        "requests_preempted_more_than": (
            {"times": int(first_bound), "requests": int(count - cum[first_bound])} if first_bound is not None else None
        ),
        "max_preemptions_per_request_at_most": int(at_most) if at_most is not None else None,
        "first_line": per.filter(pl.col("field") == "hist_count").get_column("first").first(),
        "last_line": per.filter(pl.col("field") == "hist_count").get_column("last").last(),
    }


def _bound_text(x: float) -> str:
    return str(int(x)) if x == int(x) else str(x)


def _ranges(cum: dict[float, float], count: float) -> dict[str, int]:
    """Requests per range of whole preemption counts between the scrape's consecutive bounds: a
    bucket ``le=b`` after ``le=a`` holds the requests preempted ``floor(a)+1`` to ``floor(b)``
    times; the last range is everything above the largest bound (``+Inf``)."""
    out: dict[str, int] = {}
    lo, below = 0, 0.0
    for b in sorted(cum):
        hi = int(b // 1)
        if hi < lo:  # a bound below 0, or a second fraction of the same whole number: no range of its own
            continue
        out[str(lo) if hi == lo else f"{lo}-{hi}"] = int(cum[b] - below)
        lo, below = hi + 1, cum[b]
    out[f"{lo}+"] = int(count - below)
    return out
