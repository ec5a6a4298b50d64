"""Step-time model, calibration and the replay's figures.

Step time: ``base_s + per_token_s x tokens scheduled in the step``, fitted on the incident's own
periodic stats lines: in an interval with generation throughput G tokens/s and R running
requests, each running request decodes one token per step, so a step lasts about R / G seconds
and schedules (prompt throughput + G) x R / G tokens; a least-squares line through those
(tokens, seconds) points gives the two constants (one point, or no spread in tokens: a constant
step). Without stats lines, block-table records with timestamps and steps give a constant step
(their time span / their step span); without either, 30 ms is assumed and said.

Figures of one replay (:func:`figures`): preemptions, recomputed tokens (computed tokens the
victims lost), peak running, waiting mean and p95 (per step), TTFT and request latency p50 /
p95 (s, on the step clock; requests unfinished when the replay stopped are left out and
counted), throughput (output tokens / span from the first arrival to the last finish).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import accumulate
from typing import TYPE_CHECKING, Any

import polars as pl

from .engine_model import StepClock, Trace

if TYPE_CHECKING:
    from ..result import AnalysisView as Analysis

DEFAULT_STEP_S = 0.03
# The observed configuration's replay is "calibrated" when its preemption count is within this
# fraction of the observed count (or within CALIBRATION_ABS preemptions, for small counts).
CALIBRATION_TOL = 0.15
CALIBRATION_ABS = 3


@dataclass(frozen=True)
class StepTime:
    base_s: float
    per_token_s: float
    how: str
    calibrated: bool

    def clock(self) -> StepClock:
        return StepClock(self.base_s, self.per_token_s)


def step_time(analysis: Analysis) -> StepTime:
    st = analysis.stats
    if st is not None and st.height:
        pts = st.filter((pl.col("gen_tput") > 0) & (pl.col("running") > 0)).select(
            (pl.col("running") / pl.col("gen_tput")).alias("s"),
            (
                (pl.col("prompt_tput").fill_null(0.0) + pl.col("gen_tput")) * pl.col("running") / pl.col("gen_tput")
            ).alias("tok"),
        )
        if pts.height:
            xs = pts.get_column("tok").to_list()
            ys = pts.get_column("s").to_list()
            n = len(xs)
            mx, my = sum(xs) / n, sum(ys) / n
            sxx = sum((x - mx) ** 2 for x in xs)
            b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx > 0 else 0.0
            a = my - b * mx
            if b < 0 or a <= 0:
                a, b = my, 0.0
            src = ", ".join(sorted({str(s) for s in st.get_column("source").drop_nulls().unique().to_list()})[:3])
            return StepTime(
                a,
                b,
                f"fitted on {n} stats line(s) of {src}: step = {a * 1000:.2f} ms + {b * 1e6:.2f} us x scheduled tokens",
                True,
            )
    bt = analysis.frames.get("bt_requests")
    if bt is not None and bt.height >= 2:
        span = bt.filter(pl.col("time").is_not_null() & pl.col("step").is_not_null()).select(
            ((pl.col("time").max() - pl.col("time").min()).dt.total_microseconds() / 1e6).alias("s"),
            (pl.col("step").max() - pl.col("step").min()).alias("k"),
        )
        secs, ksteps = span.row(0) if span.height else (None, None)
        if secs and ksteps and secs > 0 and ksteps > 0:
            sec = float(secs) / float(ksteps)
            return StepTime(
                sec,
                0.0,
                f"block-table records: {secs:.3f} s over {ksteps} steps = {sec * 1000:.3f} ms per step (constant)",
                True,
            )
    return StepTime(
        DEFAULT_STEP_S, 0.0, f"no stats lines or timed records: {DEFAULT_STEP_S * 1000:g} ms per step assumed", False
    )


def _q(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    i = min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))
    return s[i]


def figures(tr: Trace, st: StepTime) -> dict[str, Any]:
    clock = st.clock()
    durs = [clock.step(t) + tr.idle_before.get(i + 1, 0.0) for i, t in enumerate(tr.step_tokens)]
    ends = list(accumulate(durs))

    def t_end(step: int) -> float:  # time at the end of step (1-based)
        return ends[step - 1] if 0 < step <= len(ends) else 0.0

    def t_start(step: int) -> float:  # time a request added before step `step+1` arrived (after any idle gap)
        return (ends[step - 1] if 0 < step <= len(ends) else 0.0) + tr.idle_before.get(step + 1, 0.0)

    ttft = [
        t_end(tr.first_token_step[r]) - t_start(tr.arrival_step[r]) for r in tr.first_token_step if r in tr.arrival_step
    ]
    lat = [t_end(tr.finish_step[r]) - t_start(tr.arrival_step[r]) for r in tr.finish_step if r in tr.arrival_step]
    span = (t_end(max(tr.finish_step.values())) - t_start(min(tr.arrival_step.values()))) if tr.finish_step else 0.0
    w = [float(x) for x in tr.waiting]

    def r3(x: float | None) -> float | None:
        return None if x is None else round(x, 3)

    return {
        "preemptions": tr.preemptions,
        "recomputed_tokens": tr.recomputed_tokens,
        "peak_running": max(tr.running) if tr.running else 0,
        "waiting_mean": round(sum(w) / len(w), 2) if w else 0.0,
        "waiting_p95": _q(w, 0.95) or 0.0,
        "ttft_p50_s": r3(_q(ttft, 0.5)),
        "ttft_p95_s": r3(_q(ttft, 0.95)),
        "latency_p50_s": r3(_q(lat, 0.5)),
        "latency_p95_s": r3(_q(lat, 0.95)),
        "throughput_tok_s": round(tr.output_tokens / span, 1) if span > 0 else None,
        "steps": len(tr.step_tokens),
        "unfinished": tr.unfinished,
        "replay_wall_s": round(tr.wall_s, 3),
    }


def observed_count(analysis: Analysis) -> tuple[int | None, str]:
    """The incident's own preemption count, and where it comes from (None: not visible)."""
    bt = analysis.frames.get("bt_events")
    if bt is not None and bt.height and "action" in bt.columns:
        n = bt.filter(pl.col("action") == "preempt").height
        if n:
            return n, "block-table preempt records"
    from ..visibility import count_visibility

    vis = count_visibility(analysis)
    if not vis["count_visible"]:
        return None, f"not visible: {vis.get('short') or vis.get('reason')}"
    return analysis.events.height, "preemption events of the analysis"


def calibration(observed: int | None, replayed: int) -> dict[str, Any]:
    if observed is None:
        return {
            "status": "uncalibrated",
            "observed": None,
            "replayed": replayed,
            "why": "the bundle does not show the incident's preemption count",
        }
    err = replayed - observed
    rel = abs(err) / observed if observed else (0.0 if replayed == 0 else math.inf)
    ok = abs(err) <= CALIBRATION_ABS or rel <= CALIBRATION_TOL
    return {
        "status": "calibrated" if ok else "uncalibrated",
        "observed": observed,
        "replayed": replayed,
        "error": err,
        "relative_error": None if math.isinf(rel) else round(rel, 3),
        "tolerance": f"{CALIBRATION_TOL:.0%} or {CALIBRATION_ABS} preemptions",
    }
