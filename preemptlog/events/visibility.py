"""Can the bundle show how many preemptions happened at all (a stock V1 log never prints one)?

Read by the summary's headline and by the what-if replay's observed count.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import engines
from .pressure import log_capability
from .reconcile import PROM_COUNTER, PROM_SINGLE

if TYPE_CHECKING:
    from ..model.result import AnalysisView as Analysis


def count_visibility(a: Analysis) -> dict[str, Any]:
    """Can this bundle show how many preemptions happened? ``count_visible`` False (the events are
    not a count of zero) when the log is of a kind that never prints one (a stock V1 log) and no
    other source (markers, /metrics counter, block-table records) counted any; ``short`` (the
    headline's words) and ``reason`` say why, ``remedy`` what to add."""
    ev = a.events
    filters = getattr(a, "filters", None)  # a filtered view (view.apply_filters) counts what it hid
    if ev.height or (filters and filters.get("total")):
        return {"count_visible": True, "reason": None, "remedy": None}
    recon = a.counters.get("reconciliation") or {}
    # vLLM's own counter in the bundle (scrapes, or one reading since the engine start) counts, 0 included.
    counters = (PROM_COUNTER, PROM_SINGLE)
    if any(x.get("source") in counters for x in recon.get("sources", [])) or recon.get("quality") == "as recorded":
        return {"count_visible": True, "reason": None, "remedy": None}
    cap = log_capability(a)
    if cap.has_log and cap.counts == "none":
        log = (
            f"vLLM {cap.version} {cap.family or ''} log".replace("  ", " ")
            if cap.version
            else f"{cap.family or 'this'} log"
        )
        if cap.family == "V1" and "never print" in cap.reason:
            short = f"{log}: stock builds never print a preemption count"
        elif not cap.version and not cap.family:  # nothing tells which vLLM wrote it
            short = "this log: no preemption line or count, and no line naming its vLLM version or engine"
        else:
            short = f"{log}: this version logs no preemption count"
        return {"count_visible": False, "short": short, "reason": cap.reason, "remedy": cap.remedy}
    if not cap.has_log:
        # neither a log nor the counter: the bundle's engine (its /metrics names' prefix, else the default
        # engine) says why and what to add, in its words, and what its other signals show (Engine.not_visible)
        kinds = engines.engine_kinds(a.events, a.config, a.records)
        eng = (engines.find(next(iter(kinds))) if len(kinds) == 1 else None) or engines.default()
        said = eng.not_visible or engines.default().not_visible
        return {"count_visible": False, **(said(engines.own_view(a, eng.name)) if said else {})}
    return {"count_visible": True, "reason": None, "remedy": None}
