"""The findings an analysis carries (cost, thrash, stall, mechanisms, capacity): the container and
its JSON form and headline words; findings/ computes them."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import polars as pl

from ..clock.timebase import iso
from . import kinds

FINDINGS_VERSION = 1
# Per-event columns the formatters add beside the verdict (render.event_rows).
EVENT_COLUMNS = [
    "mechanism",
    "mechanism_rule",
    "mechanism_confidence",
    "mechanism_evidence",
    "mechanism_missing",
    "recompute_tokens",
    "recompute_bound",
    "recompute_basis",
    "recompute_src",
    "preempted_s",
    "preempted_bound",
    "resumed_src",
]


@dataclass(frozen=True)
class Findings:
    per_event: pl.DataFrame  # event_id + EVENT_COLUMNS
    recompute: dict[str, Any]
    recompute_per_minute: pl.DataFrame
    thrash: dict[str, Any]
    thrash_table: pl.DataFrame
    stall: dict[str, Any]
    mechanisms: dict[str, int]
    capacity: dict[str, Any]
    notes: list[str] = field(default_factory=list)

    def top(self) -> str:
        """The headline's findings part: recompute cost, the top thrash, the stall."""
        return headline_part(self)


def _tokens(n: float) -> str:
    if n >= 1e6:
        return f"{n / 1e6:.1f} M"
    if n >= 1e4:
        return f"{n / 1e3:.0f} k"
    return f"{int(n)}"


def _pct(x: float) -> str:
    return f"{x:.0%}" if x >= 0.01 or x == 0 else f"{x:.2%}"


def recompute_words(rc: dict[str, Any]) -> str:
    """``N tokens recomputed (S of the tokens computed)``, ``at least`` where a victim's tokens are a
    lower bound. With prefix caching on and no resume records the tokens are what the preemptions
    lost, an upper bound of the recompute (part may have been re-served from the cache): ``up to``,
    and said; lost tokens that are only a lower bound then bound nothing recomputed."""
    n, share = _tokens(rc["tokens"]), rc.get("share_of_processed")
    pc = rc.get("prefix_caching") or {}
    why = ("prefix caching on by default" if pc.get("assumed") else "prefix caching was on") + ", no resume records"
    if rc.get("tokens_recomputed_at_most"):
        if rc.get("tokens_is_lower_bound"):
            return f"at least {n} tokens lost to preemption ({why}: how many recomputed is not known)"
        most = f", at most {_pct(share)} of the tokens computed" if share is not None else ""
        return f"up to {n} tokens recomputed (lost to preemption{most}: {why})"
    least = "at least " if rc.get("tokens_is_lower_bound") else ""
    return f"{least}{n} tokens recomputed" + (f" ({_pct(share)} of the tokens computed)" if share is not None else "")


def headline_part(f: Findings) -> str:
    parts = []
    rc = f.recompute
    # an engine's own token counters (SGLang's ``sglang_counters``): an upper bound
    own = next(((k, rc[f"{k.name}_counters"]) for k in kinds.declared() if rc.get(f"{k.name}_counters")), None)
    if rc.get("preemptions") and own and (not rc.get("tokens") or rc.get("tokens_is_upper_bound")):
        parts.append(f"at most {_tokens(own[1]['tokens_at_most'])} tokens recomputed ({own[0].display}'s counters)")
    elif rc.get("preemptions"):
        if rc.get("tokens") is None or (rc.get("tokens_is_lower_bound") and not rc.get("tokens")):
            parts.append("tokens recomputed unknown")
        elif (pc := rc.get("prefix_cache")) and pc["preemptions"]:  # the resumes were recorded: lost != recomputed
            rest = (
                f", {pc['preemptions_without_resume']} preemption(s) not resumed"
                if pc["preemptions_without_resume"]
                else ""
            )
            parts.append(
                f"{_tokens(pc['tokens_lost'])} tokens lost to preemption: {_tokens(pc['tokens_from_cache'])} re-served "
                f"from the prefix cache, {_tokens(pc['tokens_recomputed'])} recomputed{rest}"
            )
        else:
            parts.append(recompute_words(rc))
    th = f.thrash
    hist = th.get("histogram") or {}
    # The histogram's figures exist only where the scrape's own bucket bounds settle them
    # (findings/thrash.py): 5+ (bound 4), more than once (bound 1), else more than its first bound.
    more = hist.get("requests_preempted_more_than") or {}
    if not th.get("evaluable") and (hist.get("requests_preempted_more_than_once") or more.get("requests")):
        n5, n2 = hist.get("requests_preempted_5_or_more"), hist.get("requests_preempted_more_than_once")
        eng = kinds.kind(hist.get("engine_kind"))  # the histogram's engine, in its words
        verb, who = eng.verb, f"{eng.display}'s"
        if n5:
            parts.append(f"{n5} request{'s' if n5 != 1 else ''} {verb} 5+ times ({who} histogram)")
        elif n2:
            parts.append(f"{n2} request{'s' if n2 != 1 else ''} {verb} more than once ({who} histogram)")
        else:
            n, k = more["requests"], more["times"]
            parts.append(f"{n} request{'s' if n != 1 else ''} {verb} more than {k} times ({who} histogram)")
    if th.get("evaluable"):
        n5 = th.get("requests_preempted_5_or_more", 0)
        n2 = th.get("requests_preempted_more_than_once", 0)
        if n5:
            parts.append(f"{n5} request{'s' if n5 != 1 else ''} preempted 5+ times")
        elif n2:
            parts.append(
                f"{n2} request{'s' if n2 != 1 else ''} preempted more than once (max {th['max_preemptions_per_request']})"
            )
    sl = f.stall
    if sl.get("evaluable"):
        spans = sl.get("spans") or []
        if spans:
            longest = max(spans, key=lambda s: s["seconds"])
            parts.append(
                f"stall {longest['seconds']:.0f} s ({longest['first_line']})"
                + (f" and {len(spans) - 1} more" if len(spans) > 1 else "")
            )
        else:
            parts.append("no stall")
    nf = sl.get("never_fits") or {}
    if nf.get("found"):
        parts.append(f"{len(nf['items'])} request(s)/limit(s) can never fit the KV cache")
    return "; ".join(parts)


def _plain(v: Any, tz: str) -> Any:
    if isinstance(v, datetime):
        return iso(v, tz)
    if isinstance(v, dict):
        return {k: _plain(x, tz) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x, tz) for x in v]
    if isinstance(v, float) and math.isnan(v):
        return None
    return v


def as_dict(f: Findings, tz: str) -> dict[str, Any]:
    """The top-level ``findings`` object of the JSON document (docs/findings.md)."""
    out: dict[str, Any] = _plain(
        {
            "version": FINDINGS_VERSION,
            "recompute": {**f.recompute, "per_minute": f.recompute_per_minute.to_dicts()},
            "thrash": {**f.thrash, "ranking": f.thrash_table.to_dicts()},
            "stall": f.stall,
            "mechanisms": f.mechanisms,
            "capacity": f.capacity,
            "headline": f.top(),
        },
        tz,
    )
    return out
