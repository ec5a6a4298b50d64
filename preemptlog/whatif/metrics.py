"""Step-time model, calibration and the replay's figures.

Step time (:func:`step_time`), in this order:

1. the block-table records' own step times: every record carries its time and scheduler step, so
   over consecutive records of one engine at distinct steps the time between them over the steps
   between them is the engine's own step time, fitted where the engine was busy: an idle gap (no
   request in flight by the request records, or a step record with empty queues before it) is left
   out, its seconds said (vLLM's empty step after the last finish puts the next arrival one step
   after it, the whole gap over that step). A constant step, with the spread of the per-interval
   times stated;
2. a fit over the periodic stats lines: in an interval with generation throughput G tokens/s and
   R running requests, each running request decodes one token per step, so a step lasts about
   R / G seconds and schedules (prompt throughput + G) x R / G tokens; a least-squares line
   through those (tokens, seconds) points gives ``base_s + per_token_s x tokens``. Used only over
   at least ``MIN_FIT_INTERVALS`` intervals and when its error (RMS of the residuals over the mean
   step) is at most ``MAX_FIT_ERROR``, and the error is stated: one interval, or a few, fit
   anything (one stats line gave 3.3 s per step where the engine stepped in milliseconds);
3. else ``latency not modelled``: TTFT, latency and throughput are not given (None), and for
   arrivals on the clock (``--arrivals time``) a constant 30 ms step is assumed and said.

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

from ..events.visibility import count_visibility
from .engine_model import StepClock, Trace

if TYPE_CHECKING:
    from ..model.result import AnalysisView as Analysis

DEFAULT_STEP_S = 0.03
# The observed configuration's replay is "calibrated" when its preemption count is within this
# fraction of the observed count (or within CALIBRATION_ABS preemptions, for small counts).
CALIBRATION_TOL = 0.15
CALIBRATION_ABS = 3


# The stats-line fit is used only over at least this many intervals and when its error (the RMS of
# its residuals over the mean step time) is at most MAX_FIT_ERROR; else latency is not modelled.
MIN_FIT_INTERVALS = 6
MAX_FIT_ERROR = 0.5


@dataclass(frozen=True)
class StepTime:
    base_s: float
    per_token_s: float
    how: str
    calibrated: bool  # False: latency is not modelled (TTFT, latency and throughput are not given)
    error: float | None = None  # the fit's relative error, where there is one

    def clock(self) -> StepClock:
        return StepClock(self.base_s, self.per_token_s)


def _engine_col(f: pl.DataFrame) -> pl.Expr:
    """The lane of a record: its engine within its server, the server told by the folder of its file
    (model/places.py: two servers' records both call their engine "0", and one server's steps never
    pair with the other's)."""
    engine = pl.col("engine").cast(pl.String).fill_null("0") if "engine" in f.columns else pl.lit("0")
    if "source" not in f.columns:
        return engine
    folder = pl.col("source").cast(pl.String).fill_null("").str.replace_all("!", "/", literal=True)
    return pl.concat_str([folder.str.replace(r"/?[^/]*$", ""), pl.lit("\x00"), engine])


def _in_flight(frames: dict[str, pl.DataFrame]) -> pl.DataFrame | None:
    """``engine, time, in_flight``: the requests in flight on each engine from each moment the count
    changes, from the request records (the vLLM plugin's lifecycle): a request is in flight from its
    first record (its arrival, or the first the capture saw of it) to its ``finish`` record; one
    without a finish record stays in flight to the end. None without request records."""
    req = frames.get("bt_requests")
    if req is None or not req.height or not {"time", "request_id", "phase"} <= set(req.columns):
        return None
    parts = []
    for f in (req, frames.get("bt_events")):
        if f is not None and f.height and {"time", "request_id"} <= set(f.columns):
            fin = pl.col("phase") == "finish" if "phase" in f.columns else pl.lit(False)
            parts.append(
                f.filter(pl.col("time").is_not_null() & pl.col("request_id").is_not_null()).select(
                    _engine_col(f).alias("engine"),
                    pl.col("request_id").cast(pl.String),
                    "time",
                    pl.when(fin).then(pl.col("time")).alias("_fin"),
                )
            )
    spans = (
        pl.concat(parts)
        .group_by("engine", "request_id")
        .agg(pl.col("time").min().alias("start"), pl.col("_fin").max().alias("end"))
    )
    deltas = pl.concat(
        [
            spans.select("engine", pl.col("start").alias("time"), pl.lit(1).alias("d")),
            spans.filter(pl.col("end").is_not_null()).select(
                "engine", pl.col("end").alias("time"), pl.lit(-1).alias("d")
            ),
        ]
    )
    return (
        deltas.group_by("engine", "time")
        .agg(pl.col("d").sum())
        .sort("engine", "time")
        .select("engine", "time", pl.col("d").cum_sum().over("engine").alias("in_flight"))
    )


def _records_clock(analysis: Analysis) -> StepTime | None:
    """The records' own step times: over consecutive block-table records (any type) of one engine at
    distinct steps, the time between them over the steps between them, where the engine was busy.

    An idle engine does not step (its step counter stands still), but the two records around an idle
    gap can still be a step apart: after its last request finishes vLLM runs one more (empty) step
    before it idles (``EngineCore.step`` while ``has_requests()``), so the next arrival is recorded a
    step later, the whole gap over one step. A pair that starts with no request in flight (the
    request records' lifecycle), or after a step record with empty queues (``running`` and
    ``waiting`` 0), is idle: left out, its seconds and steps said."""
    frames = analysis.frames
    parts = []
    for name in ("bt_requests", "bt_steps", "bt_events"):
        f = frames.get(name)
        if f is None or not f.height or not {"time", "step"} <= set(f.columns):
            continue
        empty = (
            (pl.col("running") == 0) & (pl.col("waiting") == 0)
            if name == "bt_steps" and {"running", "waiting"} <= set(f.columns)
            else pl.lit(None, pl.Boolean)
        )
        parts.append(
            f.select(
                pl.col("time"), pl.col("step").cast(pl.Int64), _engine_col(f).alias("engine"), empty.alias("empty")
            )
        )
    if not parts:
        return None
    recs = pl.concat(parts).drop_nulls(["time", "step"]).unique().sort("engine", "time", "step")
    flight = _in_flight(frames)
    if flight is not None:
        known = flight.get_column("engine").unique().to_list()
        recs = (
            recs.sort("time")
            .join_asof(flight.sort("time"), on="time", by="engine", strategy="backward", check_sortedness=False)
            .with_columns(in_flight=pl.when(pl.col("engine").is_in(known)).then(pl.col("in_flight").fill_null(0)))
        )
    else:
        recs = recs.with_columns(in_flight=pl.lit(None, pl.Int64))
    idle_after = pl.coalesce(pl.col("in_flight") == 0, pl.col("empty"), pl.lit(False))
    pairs = (
        recs.sort("engine", "time", "step")
        .with_columns(
            (pl.col("time").diff().dt.total_microseconds() / 1e6).over("engine").alias("dt"),
            pl.col("step").diff().over("engine").alias("dk"),
            idle_after.shift(1).over("engine").fill_null(False).alias("idle"),
        )
        .filter((pl.col("dk") > 0) & (pl.col("dt") >= 0))
    )
    idle = pairs.filter(pl.col("idle"))
    busy = pairs.filter(~pl.col("idle")).with_columns((pl.col("dt") / pl.col("dk")).alias("per"))
    secs, steps, n, p10, p90 = busy.select(
        pl.col("dt").sum().alias("secs"),
        pl.col("dk").sum().alias("steps"),
        pl.len().alias("n"),
        pl.col("per").quantile(0.1, "nearest").alias("p10"),
        pl.col("per").quantile(0.9, "nearest").alias("p90"),
    ).row(0)
    if not n or not steps or not secs or secs <= 0:
        return None
    sec = float(secs) / float(steps)
    src = ", ".join(sorted({str(x) for f in ("bt_requests", "bt_steps") for x in _sources(frames.get(f))})[:3])
    if idle.height:
        gaps = (
            f"; {idle.height} idle interval(s) left out ({float(idle.get_column('dt').sum()):.3f} s over "
            f"{int(idle.get_column('dk').sum())} step(s) with no request running or waiting)"
        )
    elif flight is None and recs.get_column("empty").drop_nulls().len() == 0:
        gaps = "; idle gaps cannot be told apart (no request records, no step records with their queues)"
    else:
        gaps = ""
    return StepTime(
        sec,
        0.0,
        f"the block-table records' own step times ({src}): {secs:.3f} s over {steps} busy steps in {n} interval(s) "
        f"= {sec * 1000:.3f} ms per step (constant; per-interval p10-p90 {p10 * 1000:.3f}-{p90 * 1000:.3f} ms){gaps}",
        True,
    )


def _sources(df: pl.DataFrame | None) -> list[str]:
    if df is None or "source" not in df.columns:
        return []
    return [str(x) for x in df.get_column("source").drop_nulls().unique().to_list()]


def _stats_clock(analysis: Analysis) -> StepTime | str:
    """The fit over the stats lines (see the module text), or why there is none."""
    st = analysis.stats
    if st is None or not st.height:
        return "no stats lines"
    pts = st.filter((pl.col("gen_tput") > 0) & (pl.col("running") > 0)).select(
        (pl.col("running") / pl.col("gen_tput")).alias("s"),
        ((pl.col("prompt_tput").fill_null(0.0) + pl.col("gen_tput")) * pl.col("running") / pl.col("gen_tput")).alias(
            "tok"
        ),
    )
    n = pts.height
    src = ", ".join(sorted(_sources(st))[:3])
    if n < MIN_FIT_INTERVALS:
        return (
            f"{n} stats interval(s) with generation ({src}), fewer than the {MIN_FIT_INTERVALS} a fit of the step "
            "time needs"
        )
    xs = pts.get_column("tok").to_list()
    ys = pts.get_column("s").to_list()
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx > 0 else 0.0
    a = my - b * mx
    if b < 0 or a <= 0:
        a, b = my, 0.0
    rms = math.sqrt(sum((y - a - b * x) ** 2 for x, y in zip(xs, ys, strict=True)) / n)
    err = rms / my if my > 0 else math.inf
    fit = f"step = {a * 1000:.2f} ms + {b * 1e6:.2f} us x scheduled tokens"
    if err > MAX_FIT_ERROR:
        return (
            f"the fit over {n} stats interval(s) of {src} ({fit}) is off by {err:.0%} RMS of the mean step, "
            f"more than {MAX_FIT_ERROR:.0%}"
        )
    return StepTime(
        a, b, f"fitted on {n} stats interval(s) of {src}: {fit}, error {err:.0%} RMS of the mean step", True, err
    )


def step_time(analysis: Analysis) -> StepTime:
    """The step clock: the records' own step times first; a fit over the stats lines only with
    enough intervals and a stated error; else latency is not modelled (and for arrivals on the
    clock a constant step is assumed, said)."""
    rec = _records_clock(analysis)
    if rec is not None:
        return rec
    fit = _stats_clock(analysis)
    if isinstance(fit, StepTime):
        return fit
    return StepTime(
        DEFAULT_STEP_S,
        0.0,
        f"latency not modelled: no timed block-table records, {fit}; arrivals on the clock use "
        f"{DEFAULT_STEP_S * 1000:g} ms per step, assumed",
        False,
    )


def _q(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    i = min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))
    return s[i]


def figures(tr: Trace, st: StepTime) -> dict[str, Any]:
    timed = st.calibrated  # latency not modelled: no times, rather than times on an assumed clock
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
        "ttft_p50_s": r3(_q(ttft, 0.5)) if timed else None,
        "ttft_p95_s": r3(_q(ttft, 0.95)) if timed else None,
        "latency_p50_s": r3(_q(lat, 0.5)) if timed else None,
        "latency_p95_s": r3(_q(lat, 0.95)) if timed else None,
        "throughput_tok_s": round(tr.output_tokens / span, 1) if span > 0 and timed else None,
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
