"""Verified fixes: replay each recommended fix against the incident's own workload.

:func:`verify_fixes` is called by ``fixes.plan``, once per incident (so ``analyze``, ``report``
and ``explain`` show the same fixes). For every fix whose ``option`` names a replay setting
(``--max-num-seqs`` -> ``max_num_seqs``, ``--gpu-memory-utilization``, ``--block-size``,
``--max-num-batched-tokens``, ``--enable-chunked-prefill``, ``--num-gpu-blocks-override`` ->
``num_gpu_blocks``, ...: the option's own name, generically, not per fix id) and whose
``suggested`` value is a concrete value of that setting, the model engine replays the observed
configuration and the fix, each bounded in time (``REPLAY_BUDGET_S`` per replay, env
``PREEMPTLOG_REPLAY_BUDGET``, and ``TOTAL_BUDGET_FIXES`` budgets for all of them; past it the
fix is kept with a ``replay`` note "skipped"). The fix gets:

- ``replay``: the observed and the fixed figures, the calibration, the setting replayed;
- ``verified``: ``verified by replay: 422 -> 3 preemptions, p95 latency 41 s -> 12 s``, also
  appended to ``expected_effect`` (which every renderer prints).

A fix whose replay shows no gain (no fewer preemptions, and no p95 latency at least 5 % lower)
is dropped, into the dropped list with the replay's figures as the why, but only when the
replay of the observed configuration is calibrated (within metrics.CALIBRATION_TOL of the
incident's count): an uncalibrated model does not overrule a formula, its figures are attached
and marked "uncalibrated".
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import polars as pl

from ..errors import PreemptlogError
from ..model.requests import stats_of
from . import engine_model
from .core import refusal
from .metrics import calibration, figures, observed_count, step_time
from .workload import SETTINGS, apply_settings, build_workload, observed_config, parse_value, version_refusal

if TYPE_CHECKING:
    from ..model.result import AnalysisView as Analysis

REPLAY_BUDGET_S = 3.0
# The fix replays of analyze/report are bounded before any work: a workload above this many
# requests (the bound is "a few seconds per fix on a 10,000-request incident") is not
# rebuilt, and each fix says so. `preemptlog whatif` has no such bound.
REPLAY_MAX_REQUESTS = 20_000
TOTAL_BUDGET_FIXES = 4  # all fix replays of one incident: at most this many budgets
LATENCY_GAIN = 0.05
ALIASES = {"num_gpu_blocks_override": "num_gpu_blocks", "no_enable_chunked_prefill": "enable_chunked_prefill"}
_CACHE: dict[tuple[int, int], tuple[Any, Any, tuple[Any, ...] | None]] = {}
_FIX_CACHE: dict[tuple[int, int, str], Any] = {}  # (incident, setting) -> (figures, notes) or an error


def setting_for(option: str) -> str | None:
    """The replay setting a fix option names (``--max-num-seqs`` -> ``max_num_seqs``), or None."""
    name = option.strip().split()[0] if option.strip() else ""
    if not name.startswith("--"):
        return None
    key = name[2:].replace("-", "_")
    key = ALIASES.get(key, key)
    return key if key in SETTINGS else None


def _budget() -> float:
    try:
        return max(0.1, float(os.environ.get("PREEMPTLOG_REPLAY_BUDGET", REPLAY_BUDGET_S)))
    except ValueError:
        return REPLAY_BUDGET_S


def _fmt_s(x: float | None) -> str:
    if x is None:
        return "?"
    return f"{x:.0f} s" if x >= 10 else f"{x:.2g} s"


def _baseline(analysis: Analysis) -> tuple[Any, ...] | None:
    """(workload, observed, step time, arrivals, observed figures, calibration) or None."""
    key = _key(analysis)
    hit = _CACHE.get(key)
    if hit is not None and hit[0] is analysis.requests and hit[1] is analysis.config:
        return hit[2]

    try:
        wl = build_workload(analysis)
        obs = observed_config(analysis, wl)
    except PreemptlogError:
        return None
    st = step_time(analysis)
    arr = "step" if wl.has_steps else "time"
    try:
        tr = engine_model.replay(
            wl, obs.config, st.clock(), arrivals=arr, deadline_s=_budget(), hash_block=obs.config.block_size
        )
    except TimeoutError:
        out: tuple[Any, ...] = (wl, obs, st, arr, None, None)
    else:
        f0 = figures(tr, st)
        seen, src = observed_count(analysis)
        cal = {**calibration(seen, f0["preemptions"]), "observed_from": src}
        out = (wl, obs, st, arr, f0, cal)
    if len(_CACHE) > 8:
        _CACHE.clear()
        _FIX_CACHE.clear()
    # the frames are held, so their ids cannot be reused by another analysis while cached
    _CACHE[key] = (analysis.requests, analysis.config, out)
    return out


def _request_count(analysis: Analysis) -> int:
    """Requests the workload would hold (request records, or received request lines): counted, not built."""
    bt = analysis.frames.get("bt_requests")
    n_bt = bt.select(pl.col("request_id").n_unique()).item() if bt is not None and bt.height else 0
    n_log = stats_of(analysis).received
    return int(max(n_bt, n_log))


def _key(analysis: Analysis) -> tuple[int, int]:
    """The incident: its request and config frames (verdicts and the summary see the same ones)."""
    return (id(analysis.requests), id(analysis.config))


def verify_fixes(analysis: Analysis, fixes: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """(the fixes kept, with ``replay`` data; the ones the replay dropped, with why)."""
    replayable = [(x, setting_for(str(x.get("option") or ""))) for x in fixes]
    if not any(k is not None and x.get("suggested") is not None for x, k in replayable):
        return fixes, []
    n = _request_count(analysis)
    folded = stats_of(analysis).folded
    if n > REPLAY_MAX_REQUESTS or folded:
        why = (
            f"the incident has {n} requests, more than the {REPLAY_MAX_REQUESTS} that analyze replays "
            "(preemptlog whatif replays it without this bound)"
            if n > REPLAY_MAX_REQUESTS
            else "the request lines of this log were folded into counts (PREEMPTLOG_REQUEST_FOLD_MIN): "
            "preemptlog whatif replays it"
        )
        for x, key in replayable:
            if key is not None and x.get("suggested") is not None:
                x["replay"] = {"status": "skipped", "setting": f"{key}={x['suggested']}", "why": why}
        return fixes, []
    base = _baseline(analysis)
    if base is None:
        return fixes, []

    wl, obs, st, arr, f0, cal = base
    import time

    t_end = time.perf_counter() + TOTAL_BUDGET_FIXES * _budget()
    kept: list[dict[str, Any]] = []
    dropped: list[dict[str, str]] = []
    for x, key in replayable:
        if key is None or x.get("suggested") is None:
            kept.append(x)
            continue
        try:
            value = parse_value(
                key, str(x["suggested"]).lower() if isinstance(x["suggested"], bool) else str(x["suggested"])
            )
        except PreemptlogError:
            kept.append(x)  # e.g. "+120 tokens": not a value to replay
            continue
        if f0 is None:
            x["replay"] = {"status": "skipped", "why": f"the observed configuration's replay passed {_budget():g} s"}
            kept.append(x)
            continue
        if time.perf_counter() > t_end:
            x["replay"] = {
                "status": "skipped",
                "setting": f"{key}={value}",
                "why": f"the fix replays of this incident passed {TOTAL_BUDGET_FIXES * _budget():g} s",
            }
            kept.append(x)
            continue
        ck = (*_key(analysis), f"{key}={value}")
        try:
            if ck in _FIX_CACHE:  # verdicts and the summary both ask (rules.verdicts, summary)
                f1, notes = _FIX_CACHE[ck]
            else:
                cfg, notes = apply_settings(obs, {key: value})
                # a setting the incident's vLLM version does not have: refused in vLLM's own words; the
                # start-up check is evaluable only when the bundle's own configuration passes it (core.whatif)
                refused = version_refusal(obs, {key: value}, cfg) or (
                    None if refusal(wl, obs.config) else refusal(wl, cfg)
                )
                if refused is not None:
                    f1, notes = None, [refused]
                    _FIX_CACHE[ck] = (f1, notes)
                else:
                    tr = engine_model.replay(
                        wl, cfg, st.clock(), arrivals=arr, deadline_s=_budget(), hash_block=obs.config.block_size
                    )
                    f1 = figures(tr, st)
                    _FIX_CACHE[ck] = (f1, notes)
        except TimeoutError:
            x["replay"] = {
                "status": "skipped",
                "setting": f"{key}={value}",
                "why": f"the replay passed its {_budget():g} s budget",
            }
            kept.append(x)
            continue
        except PreemptlogError as exc:
            x["replay"] = {"status": "not replayed", "setting": f"{key}={value}", "why": exc.one_line()}
            kept.append(x)
            continue
        if f1 is None:  # vLLM would refuse to start with the fix: not a fix to apply
            x["replay"] = {"status": "refused", "setting": f"{key}={value}", "why": notes[0]}
            dropped.append({"id": str(x.get("id")), "why": f"{key}={value}: {notes[0]}"})
            continue
        status = cal["status"]
        text = f"{f0['preemptions']} -> {f1['preemptions']} preemptions, " + (
            f"p95 latency {_fmt_s(f0['latency_p95_s'])} -> {_fmt_s(f1['latency_p95_s'])}"
            if st.calibrated
            else "latency not modelled"
        )
        lat0, lat1 = f0.get("latency_p95_s"), f1.get("latency_p95_s")
        gain = f1["preemptions"] < f0["preemptions"] or (
            f1["preemptions"] == f0["preemptions"] and lat0 and lat1 is not None and lat1 <= lat0 * (1 - LATENCY_GAIN)
        )
        x["replay"] = {
            "status": status,
            "setting": f"{key}={value}",
            "engine": "model",
            "arrivals": arr,
            "observed": {k: f0[k] for k in ("preemptions", "latency_p95_s", "ttft_p95_s", "throughput_tok_s")},
            "fixed": {k: f1[k] for k in ("preemptions", "latency_p95_s", "ttft_p95_s", "throughput_tok_s")},
            "calibration": cal,
            "notes": notes,
            "workload": wl.source,
            "gain": bool(gain),
        }
        if status == "calibrated" and not gain:
            dropped.append(
                {
                    "id": str(x.get("id")),
                    "why": f"no gain in a replay of the incident's workload ({key}={value}): {text}",
                }
            )
            continue
        word = (
            "verified by replay"
            if status == "calibrated"
            else (
                f"uncalibrated replay (the model's {cal['replayed']} vs the incident's "
                f"{cal['observed'] if cal['observed'] is not None else 'unknown count of'} preemptions)"
            )
        )
        x["verified"] = f"{word}: {text}"
        x["expected_effect"] = f"{x.get('expected_effect')}; {x['verified']}"
        if x.get("text"):
            x["text"] = f"{x['text']}; {x['verified']}"
        kept.append(x)
    for i, x in enumerate(kept, 1):
        if "rank" in x:
            x["rank"] = i
    return kept, dropped
