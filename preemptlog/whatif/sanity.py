"""Whether a replay's figures can be this incident's at all (``preemptlog whatif`` says so beside them).

A replay is only as good as its workload. From request lines alone the outputs are taken as
``max_tokens`` (an upper bound) and prompt lengths from the stats lines' throughput; when those
assumptions are far off, the replay's times are not a direction but nonsense: a p50 latency of
14,312 s replayed from a log that covers one minute. Calibration (whatif/core.py) compares the
preemption counts only; :func:`check` compares the replay's times with the time the incident
itself took, and names the assumption that most likely made them absurd.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..model.result import AnalysisView

# A replayed p50 latency this many times the span the bundle covers (and above ABSURD_MIN_S) cannot be
# the incident's: its requests were served within that span (or soon after it).
ABSURD_FACTOR = 5.0
ABSURD_MIN_S = 120.0


def incident_seconds(analysis: AnalysisView) -> float | None:
    """The time the bundle's logs cover (first to last timed line), in seconds, or None."""
    rec = analysis.records
    if rec.height == 0 or "time" not in rec.columns:
        return None
    t = rec.get_column("time").drop_nulls()
    if t.len() < 2:
        return None
    lo, hi = t.min(), t.max()
    return float((hi - lo).total_seconds())  # type: ignore[operator, union-attr]  # polars scalars are typed as every literal


def check(res: Any, analysis: AnalysisView) -> list[str]:
    """Warnings for replays whose figures cannot be the incident's (empty when they can)."""
    span = incident_seconds(analysis)
    if span is None or span <= 0:
        return []
    out: list[str] = []
    worst = None
    for s in res.scenarios:
        p50 = (s.figures or {}).get("latency_p50_s")
        if p50 is not None and p50 > max(ABSURD_MIN_S, ABSURD_FACTOR * span) and (worst is None or p50 > worst[1]):
            worst = (s.name, float(p50))
    if worst is None:
        return out
    why = next(
        (a for a in res.assumed() if "max_tokens" in a and "output" in a),
        next(iter(res.assumed()), "the workload's assumptions"),
    )
    out.append(
        f"absurd next to the incident: the replay '{worst[0]}' gives a p50 latency of {worst[1]:,.0f} s, and the "
        f"bundle covers {_dur(span)}: its requests were served within about that time. The replay's workload is "
        f"not what happened ({'its outputs are taken as max_tokens, an upper bound' if 'max_tokens' in why else why}): "
        "read its preemption counts as a direction and its times not at all"
    )
    return out


def _dur(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
