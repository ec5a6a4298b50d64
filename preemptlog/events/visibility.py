"""Can the bundle show how many preemptions happened at all (a stock V1 log never prints one)?

Read by the summary's headline and by the what-if replay's observed count.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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
        return {
            "count_visible": False,
            "short": "no vLLM log and no /metrics counter in the bundle",
            "reason": "no vLLM log and no /metrics counter in the bundle",
            "remedy": "add the vLLM server log or /metrics scrapes (vllm:num_preemptions_total)",
        }
    return {"count_visible": True, "reason": None, "remedy": None}
