"""What the summary says about the engines: which one(s) the bundle holds, and SGLang's own words.

Every output names the engine: events carry ``engine_kind`` (events.py), the summary
``engine_kind`` (``vllm``, ``sglang``, or ``sglang+vllm`` for a bundle holding both) and, when
SGLang lines are in the bundle, an ``sglang`` section: the retraction lines, their version
family, the rate against SGLang's own "about once a minute is okay", how many happened with the
new-token ratio at its floor. The headline counts *retractions* in an SGLang bundle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import polars as pl

from ...model.events import SGLANG, VLLM
from . import knobs

if TYPE_CHECKING:
    from ...model.result import AnalysisView


def engine_kinds(a: AnalysisView) -> dict[str, int]:
    """Events per engine kind, with 0 for an engine the bundle shows without events."""
    out: dict[str, int] = {}
    ev = a.events
    if ev.height and "engine_kind" in ev.columns:
        for k, n in ev.group_by("engine_kind").len().iter_rows():
            out[str(k or VLLM)] = n
    cfg = a.config
    if cfg.height and cfg.filter((pl.col("key") == "engine_kind") & (pl.col("value") == SGLANG)).height:
        out.setdefault(SGLANG, 0)
    rec = a.records
    if rec.height and rec.filter(~pl.col("kind").str.starts_with("sgl_")).height:
        out.setdefault(VLLM, 0)
    if not out:
        out[VLLM] = 0
    return dict(sorted(out.items()))


def sglang_only_log(a: AnalysisView) -> bool:
    """Are the bundle's log lines SGLang's only (so the log can count every retraction, 0 included)?"""
    rec = a.records
    if rec.height == 0:
        return False
    kinds = rec.get_column("kind")
    sgl = kinds.str.starts_with("sgl_")
    return bool(sgl.any()) and bool((sgl | (kinds == "time_only")).all())


def engine_kind(kinds: dict[str, int]) -> str:
    return "+".join(sorted(kinds))


def noun(kinds: dict[str, int], n: int) -> str:
    """``retraction(s)`` for SGLang, ``preemption(s)`` for vLLM, both for a bundle holding both."""
    s = "" if n == 1 else "s"
    if set(kinds) == {SGLANG}:
        return f"retraction{s}"
    if SGLANG in kinds and VLLM in kinds:
        return f"preemption{s}/retraction{s}"
    return f"preemption{s}"


def section(a: AnalysisView, findings: Any) -> dict[str, Any] | None:
    """The summary's ``sglang`` object (None without SGLang lines)."""
    ret = a.frames.get("sgl_retractions")
    counters = a.counters.get("sglang")
    if ret is None and not counters:
        return None
    ret = ret if ret is not None else pl.DataFrame()
    ev = a.events.filter(pl.col("engine_kind") == SGLANG) if a.events.height else a.events
    timed = ev.filter(pl.col("time").is_not_null()) if ev.height else ev
    per_minute, span = None, None
    if timed.height > 1:
        span = float(timed.select((pl.col("time").max() - pl.col("time").min()).dt.total_microseconds()).item()) / 1e6
        per_minute = round(timed.height / max(span / 60.0, 1.0), 2)  # a burst under a minute: its count
    mech: dict[str, int] = {}
    pe = getattr(findings, "per_event", None)
    if pe is not None and pe.height and ev.height:
        j = ev.select("event_id").join(pe.select("event_id", "mechanism"), on="event_id", how="left")
        mech = {str(k): n for k, n in j.group_by("mechanism").len().sort("mechanism").iter_rows()}
    wordings = {str(k): n for k, n in ret.group_by("wording").len().sort("wording").iter_rows()} if ret.height else {}
    facts = counters or {}
    return {
        "retractions": ev.height,
        "retraction_lines": ret.height,
        "lines_from_other_tp_ranks": facts.get("collapsed", 0),
        "forced_by_test": facts.get("test", 0),
        "allocation_errors_not_counted": facts.get("alloc_errors", 0),
        "version_family": wordings,
        "per_minute": per_minute,
        "span_s": span,
        "docs_ok_per_minute": knobs.DOCS_OK_PER_MINUTE,
        "mechanisms": mech,
        "ratio_at_floor": mech.get("ratio-over-admission", 0),
    }


def headline_words(s: dict[str, Any]) -> str:
    """The headline's words in SGLang's terms (after the gates): what SGLang said, how often against its
    own 'about once a minute is okay', and how many came with the new-token ratio at its floor."""
    sg = s.get("sglang") or {}
    if not sg.get("retractions"):
        return ""
    fams = sg.get("version_family") or {}
    said = (
        "'decode out of memory happened'"
        if set(fams) == {"0.1-0.2"}
        else "'Decode out of memory happened'"
        if set(fams) <= {"0.1-0.2", "0.3.0-0.4.6"}
        else "'KV cache pool is full'"
    )
    parts = [f"SGLang: {said} on {sg['retraction_lines']} line(s)"]
    pm = sg.get("per_minute")
    if pm is not None:
        ok = "more often than" if pm > sg["docs_ok_per_minute"] else "within"
        rate = f"{sg['retractions']} within a minute" if (sg.get("span_s") or 0) < 60 else f"{pm:g} per minute"
        parts.append(f"{rate} ({ok} its docs' 'about once a minute is okay')")
    if sg.get("ratio_at_floor"):
        parts.append(f"the new-token ratio at its floor before {sg['ratio_at_floor']}")
    return "; " + ", ".join(parts)
