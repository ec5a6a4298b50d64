"""Verdicts for an Analysis: events joined with evidence, evaluated column-wise.

``VERDICT_SCHEMA`` (one row per event, keyed by ``event_id``): gate, sub_kind,
rule, confidence, gates_fired, not_evaluable, evidence, notes,
contributing_factors, recommendations (prose), fixes (the same, as data: rank,
option, current, suggested, expected_effect, inputs, missing).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import polars as pl

from .. import engines
from ..model.frames import PolarsType
from ..model.requests import with_request_key
from .engine import ENGINE_COLUMNS, evaluate, fired_rules, used_names
from .factors import FACTOR_INPUTS, factors
from .model import RuleSet

if TYPE_CHECKING:
    from ..model.result import AnalysisView

VERDICT_COLUMNS = [*ENGINE_COLUMNS, "contributing_factors", "recommendations", "fixes"]


def _fix_fields() -> dict[str, PolarsType]:
    return {
        "rank": pl.Int64,
        "option": pl.String,
        "current": pl.String,
        "current_from": pl.String,
        "suggested": pl.String,
        "status": pl.String,
        "expected_effect": pl.String,
        "inputs": pl.List(pl.String),
        "missing": pl.String,
    }


def fix_type() -> pl.DataType:
    """The per-event ``fixes`` column's type: a list of fix structs."""
    return pl.List(pl.Struct(_fix_fields()))


def fix_cell(x: dict[str, Any]) -> dict[str, Any]:
    """One ranked change (fixes.plan) as a per-event struct; values as text."""
    return {
        "rank": x.get("rank"),
        "option": x["option"],
        "current": None if x["current"] is None else str(x["current"]),
        "current_from": x.get("current_from"),
        "suggested": None if x["suggested"] is None else str(x["suggested"]),
        "status": x.get("status"),
        "expected_effect": x["expected_effect"],
        "inputs": list(x["inputs"]),
        "missing": x.get("missing"),
    }


def event_frame(analysis: AnalysisView) -> pl.DataFrame:
    """Events with their evidence columns and per-request preemption counts."""
    ev = analysis.events.select(
        "event_id",
        "kind",
        "mode",
        "engine",
        "engine_kind",
        "request_id",
        "cumulative",
        "time_precision",
        "source",
        "line",
    )
    if analysis.evidence is not None and analysis.evidence.height:
        ev = ev.join(analysis.evidence, on="event_id", how="left")
    # A request is (server, id) (model.requests.with_request_key): a request id two servers reuse is two
    # requests, each preempted as often as its own server says.
    keys = with_request_key(
        analysis.events.select(
            "event_id", "request_id", "kind", "source", *[c for c in ("stream", "seq") if c in analysis.events.columns]
        ),
        analysis.records,
    ).select("event_id", "_rkey")
    counts = keys.filter(pl.col("_rkey").is_not_null()).group_by("_rkey").len().rename({"len": "_request_preemptions"})
    return ev.join(keys.join(counts, on="_rkey", how="left").drop("_rkey"), on="event_id", how="left").with_columns(
        guide_model=pl.lit(guide_model(analysis))
    )


def guide_model(analysis: AnalysisView) -> bool:
    """Does the bundle show the field guide's patched scheduler?

    True when it holds debug-hook lines ([SCHEDULER], Req-, [BATCH]) or PREEMPTED marker
    lines (which upstream vLLM never prints), or when its events are block-table preempt
    records (kind ``record``) not written by preemptlog's vLLM plugin (format 2 records come
    from upstream vLLM's scheduler; others from a scheduler instrumented as the guide's).
    A marker that prints the engine's own request status (``Engine.status_marker``: vLLM V1's
    ``RequestStatus.PREEMPTED``) shows upstream code's state, not a patched scheduler: it
    counts for neither. Otherwise the log is upstream vLLM's, and the guide-only gates
    (contiguity, batch variance, queue overflow, prefix conflict) cannot give the verdict
    (issue 13, rule 5).
    """
    for name in ("hook_steps", "hook_pending", "hook_batch"):
        df = analysis.frames.get(name)
        if df is not None and df.height:
            return True
    ev = analysis.events
    if not ev.height:
        return False
    markers = ev.filter(pl.col("kind") == "marker")
    own = [e.status_marker for e in engines.registered() if e.status_marker]
    if markers.height and own and "raw" in markers.columns:
        markers = markers.filter(~pl.col("raw").fill_null("").str.contains("|".join(f"(?:{r})" for r in own)))
    if markers.height:
        return True
    guide_files = [c["file"] for c in analysis.counters.get("blocktable") or [] if c.get("format", 1) != 2]
    return bool(guide_files and ev.filter((pl.col("kind") == "record") & pl.col("source").is_in(guide_files)).height)


def verdicts(analysis: AnalysisView, rs: RuleSet) -> pl.DataFrame:
    frame = event_frame(analysis)
    if frame.height == 0:
        return pl.DataFrame(schema={"event_id": pl.String} | {c: pl.String for c in VERDICT_COLUMNS})
    # A verdict depends only on the event's inputs, not on its id: evaluate each distinct
    # combination once (200 k reconstructed events of one counter jump are one row), then
    # give every event its group's verdict. Exact: grouping compares values, not hashes.

    used = used_names(rs, FACTOR_INPUTS)
    inputs = [
        c
        for c in frame.columns
        if c != "event_id"
        and (
            c in used
            or c.removesuffix("_src") in used
            or c.removesuffix("_status") in used
            or c in ("source", "line", "_request_preemptions", "code_not_gates", "code_engine", "guide_model")
        )
    ]
    groups = (
        frame.select(["event_id"] + inputs).group_by(inputs, maintain_order=True).agg(pl.col("event_id").alias("_ids"))
    )
    groups = groups.with_row_index("_g").with_columns(event_id=pl.col("_g").cast(pl.String))
    unique = groups.drop("_ids")
    v = evaluate(unique, rs)
    v = v.with_columns(unique.select(factors(unique, rs).alias("contributing_factors")))
    v = v.drop("event_id").with_columns(groups.get_column("_ids")).explode("_ids").rename({"_ids": "event_id"})
    v = frame.select("event_id").join(v, on="event_id", how="left", maintain_order="left")
    # The changes to make come later, from the whole incident (fixes.plan, after the findings);
    # fixes.attach fills these two columns (SGLang's events get SGLang's changes).
    v = v.with_columns(recommendations=pl.lit([], pl.List(pl.String)), fixes=pl.lit([], fix_type()))
    return v.select(["event_id"] + VERDICT_COLUMNS)


DECIDING_STEPS = ("lookback_short_step", "pool_short_step", "lookback_variance_step", "lookback_max_pending_step")


def decided_by(analysis: AnalysisView, event_id: str, event: dict[str, Any]) -> list[dict[str, Any]]:
    """For each fired gate: the rule, the scheduler step(s) or the interval, and the lines that decided it."""

    if analysis.ruleset is None:
        return []
    frame = event_frame(analysis).filter(pl.col("event_id") == event_id)
    if frame.height == 0:
        return []
    out = []
    for item in fired_rules(frame, analysis.ruleset)[0]:
        cited = item["evidence"] or []
        # The step a look-back comparison crossed at decides; else the event's own snapshot step.
        by_name = {c["name"]: c["value"] for c in cited if c.get("value") is not None}
        steps = [by_name[n] for n in DECIDING_STEPS if n in by_name] or (
            [by_name[n] for n in ("sched_step", "pool_step") if n in by_name][:1]
        )
        steps = list(dict.fromkeys(steps))
        lines: list[str] = []
        for c in cited:
            for src in (c.get("src") or "").split("; "):
                if src and src not in lines:
                    lines.append(src)
        if event.get("kind") == "interval" and event.get("interval_end") is not None:
            where = f"interval {event.get('interval_start') or '?'} .. {event.get('interval_end')}"
        elif steps:
            where = "scheduler step " + ", ".join(steps)
        else:
            where = "at the event"
        out.append(
            {
                "gate": item["gate"],
                "sub_kind": item["sub_kind"],
                "rule": item["rule"],
                "verdict_eligible": item["counts"],
                "where": where,
                "lines": lines,
                "evidence": cited,
            }
        )
    return out
