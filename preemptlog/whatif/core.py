"""``whatif``: the library core. Rebuild the workload, replay the observed configuration, then
each asked one, and report the figures side by side (see docs/whatif.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..engines import replayed
from ..errors import UsageError
from . import engine_model
from .engine_vllm import replay_vllm, replay_vllm_many, version_env
from .metrics import StepTime, calibration, figures, observed_count, step_time
from .workload import (
    VERSIONED,
    Observed,
    ReplayConfig,
    Workload,
    apply_settings,
    budget_given,
    build_workload,
    bundle_scheduler,
    length_limits,
    observed_config,
    parse_sets,
    scheduler_of,
    version_refusal,
    with_version_defaults,
)

if TYPE_CHECKING:
    from ..model.result import AnalysisView as Analysis

ENGINES = ("model", "vllm")
FIGURES = [
    "preemptions",
    "recomputed_tokens",
    "peak_running",
    "waiting_mean",
    "waiting_p95",
    "ttft_p50_s",
    "ttft_p95_s",
    "latency_p50_s",
    "latency_p95_s",
    "throughput_tok_s",
]


@dataclass
class Scenario:
    name: str  # "observed" or the settings, e.g. "max_num_seqs=32"
    sets: dict[str, Any]
    config: ReplayConfig
    notes: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    status: str = "calibrated"


@dataclass
class WhatIf:
    workload: Workload
    observed: Observed
    step: StepTime
    engine: str
    arrivals: str
    scenarios: list[Scenario]
    calibration: dict[str, Any]
    observed_source: str

    def rows(self) -> list[dict[str, Any]]:
        """One row per scenario: its name, status, figures, settings (every output format)."""
        out = []
        for s in self.scenarios:
            row: dict[str, Any] = {"scenario": s.name, "engine": self.engine, "status": s.status}
            row.update({k: s.figures.get(k) for k in FIGURES})
            row["unfinished"] = s.figures.get("unfinished")
            row.update({f"cfg_{k}": v for k, v in s.config.as_dict().items()})
            row["notes"] = "; ".join(s.notes)
            # the incident's own count beside the replay of its configuration (the replay is a model)
            row["incident_preemptions"] = self.calibration.get("observed") if s.name == "observed" else None
            out.append(row)
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "workload": {
                "source": self.workload.source,
                "files": self.workload.where,
                "requests": len(self.workload.requests),
                "assumptions": self.workload.assumptions,
            },
            "config_assumptions": self.observed.assumptions,
            "config_provenance": self.observed.provenance,
            "step_time": {
                "base_s": self.step.base_s,
                "per_token_s": self.step.per_token_s,
                "how": self.step.how,
                "latency_modelled": self.step.calibrated,
                "error": self.step.error,
            },
            "engine": self.engine,
            "arrivals": self.arrivals,
            "incident": {"preemptions": self.calibration.get("observed"), "from": self.observed_source},
            "calibration": {**self.calibration, "observed_from": self.observed_source},
            "scenarios": self.rows(),
        }

    def assumed(self) -> list[str]:
        return list(self.workload.assumptions) + list(self.observed.assumptions)  # the clock: its own line


def expand(sets: list[str], sweeps: list[str], configs: list[str] | None = None) -> list[dict[str, Any]]:
    """The asked configurations: the --set values, then one per --sweep value (a sweep of several
    keys is their product); each ``--config k=v,k=v`` is one more configuration (on top of --set)."""
    base = parse_sets(sets)
    if configs:
        return [{**base, **parse_sets([x for x in c.split(",") if x.strip()], "--config")} for c in configs]
    combos: list[dict[str, Any]] = [dict(base)]
    swept: set[str] = set()
    for sw in sweeps:
        if "=" not in sw:
            raise UsageError(f"--sweep expects NAME=V1,V2,..., got {sw!r}", hint="e.g. --sweep max_num_seqs=16,32,64")
        k, vs = sw.split("=", 1)
        vals = [v for v in vs.split(",") if v.strip()]
        if not vals:
            raise UsageError(f"--sweep {sw!r}: no values")
        if k.strip() in swept:  # two sweeps of one setting: the second would silently replace the first
            raise UsageError(
                f"--sweep {k.strip()} given twice", hint=f"give its values in one --sweep {k.strip()}=V1,V2"
            )
        swept.add(k.strip())
        parsed = [parse_sets([f"{k.strip()}={v}"], "--sweep") for v in vals]
        dup = next((v for i, (v, p) in enumerate(zip(vals, parsed, strict=True)) if p in parsed[:i]), None)
        if dup is not None:  # the same configuration replayed twice: two identical rows
            raise UsageError(f"--sweep {sw!r}: {dup.strip()} given twice", hint="give each value once")
        combos = [{**c, **p} for c in combos for p in parsed]
    return [c for c in combos if c] if (sets or sweeps) else []


def _name(sets: dict[str, Any]) -> str:
    return ", ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in sets.items())


def run_one(
    workload: Workload,
    cfg: ReplayConfig,
    st: StepTime,
    engine: str,
    arrivals: str,
    *,
    vllm_python: str | None = None,
    deadline_s: float | None = None,
    hash_block: int | None = None,
) -> engine_model.Trace:
    if engine == "model":
        return engine_model.replay(
            workload, cfg, st.clock(), arrivals=arrivals, deadline_s=deadline_s, hash_block=hash_block
        )

    return replay_vllm(workload, cfg, st, arrivals=arrivals, python=vllm_python, hash_block_size=hash_block)


def refusal(workload: Workload, cfg: ReplayConfig) -> str | None:
    """``vLLM would not start: ...`` when vLLM 0.32's own start-up checks refuse ``cfg``
    (vllm.config.startup_refusals), else None. Without a max_model_len the longest request of the
    workload is the length checked: a server that served it had at least that."""

    startup_refusals = replayed().startup_refusals  # the start-up checks of the engine the what-if models
    assert startup_refusals is not None
    if cfg.max_model_len:
        mml, how = int(cfg.max_model_len), "max_model_len"
    else:
        mml = max((r.prompt_tokens + r.output_tokens for r in workload.requests), default=1)
        how = "the longest request of the workload (max_model_len not in the bundle)"
    why = startup_refusals(
        num_gpu_blocks=cfg.num_gpu_blocks,
        block_size=cfg.block_size,
        max_model_len=mml,
        max_num_seqs=cfg.max_num_seqs,
        max_num_batched_tokens=cfg.max_num_batched_tokens,
        enable_chunked_prefill=cfg.enable_chunked_prefill,
        long_prefill_token_threshold=cfg.long_prefill_token_threshold,
        max_model_len_how=how,
    )
    return "vLLM would not start: " + "; ".join(why) if why else None


def prepare(analysis: Analysis) -> tuple[Workload, Observed, StepTime]:
    wl = build_workload(analysis)
    return wl, observed_config(analysis, wl), step_time(analysis)


def whatif(
    analysis: Analysis,
    configs: list[dict[str, Any]],
    *,
    engine: str = "model",
    arrivals: str | None = None,
    vllm_python: str | None = None,
    base_sets: dict[str, Any] | None = None,
) -> WhatIf:
    """Replay the observed configuration (with ``base_sets``: settings the bundle lacks, e.g.
    num_gpu_blocks) and each of ``configs``."""
    if engine not in ENGINES:
        raise UsageError(f"--engine {engine!r}: one of {', '.join(ENGINES)}")
    wl, obs, st = prepare_with(analysis, base_sets or {})
    arr = arrivals or ("step" if wl.has_steps else "time")
    if arr == "step" and not wl.has_steps:
        raise UsageError(
            "--arrivals step: the workload has no scheduler steps (log request lines)", hint="use --arrivals time"
        )
    seen, src = observed_count(analysis)
    why0 = refusal(wl, obs.config)
    asked = [(sets, *apply_settings(obs, sets)) for sets in configs]
    # The incident's vLLM started: when its configuration as read fails the check, the values read
    # are not the ones it ran with, and the check of the asked ones is not evaluable.
    # a setting the configuration's vLLM version does not have: refused in vLLM's own words
    refused = [version_refusal(obs, sets, c) or (None if why0 else refusal(wl, c)) for sets, c, _ in asked]
    notes0 = (
        [
            f"the observed configuration as read fails vLLM 0.32's start-up checks ({why0.split(': ', 1)[1]}): "
            "the bundle's values are not all the ones the incident's vLLM started with; the start-up checks "
            "of the asked configurations are not evaluable"
        ]
        if why0
        else []
    )
    cfgs = [obs.config] + [c for (_, c, _), why in zip(asked, refused, strict=True) if why is None]
    if engine == "vllm":
        traces = replay_vllm_many(wl, cfgs, st, arrivals=arr, python=vllm_python, hash_block_size=obs.config.block_size)
    else:
        hb = obs.config.block_size  # the block size the recorded block hashes were computed with
        traces = [engine_model.replay(wl, c, st.clock(), arrivals=arr, hash_block=hb) for c in cfgs]
    if traces[0].refused:
        raise UsageError(
            f"the observed configuration: vLLM refused to start: {traces[0].refused}",
            hint="a value of the bundle or of --base is wrong (the incident's vLLM did start)",
        )
    f0 = figures(traces[0], st)
    cal = calibration(seen, f0["preemptions"])
    status = "vllm" if engine == "vllm" else cal["status"]  # vLLM's own decisions: the count is exact
    if any(c.enable_prefix_caching for c in cfgs) and not wl.has_hashes:
        notes0 = [
            *notes0,
            "prefix caching: the workload has no block hashes (record with the preemptlog vLLM plugin), so no "
            "prompt is shared; a victim's own cached blocks are still hit when it resumes",
        ]
    if (lim := length_limits(wl, obs.config.max_model_len)) is not None:
        notes0 = [*notes0, lim]
    notes0 = [*notes0, *setting_notes(obs.config)]
    notes0 = [*notes0, *ran_on(traces[0], obs.config)]
    scen = [Scenario("observed", {}, obs.config, notes0, f0, status)]
    done = iter(traces[1:])
    for (sets, cfg, notes), why in zip(asked, refused, strict=True):
        if why is None and (lim := length_limits(wl, cfg.max_model_len)) is not None:
            notes = [*notes, lim]
        if why is None:
            notes = [*notes, *setting_notes(cfg)]
        if why is not None:  # never replayed under a silently changed configuration
            scen.append(Scenario(_name(sets), sets, cfg, [*notes, why], {}, "refused"))
        elif (tr := next(done)).refused:  # vLLM's own check refused what preemptlog's let through
            scen.append(
                Scenario(_name(sets), sets, cfg, [*notes, f"vLLM refused to start: {tr.refused}"], {}, "refused")
            )
        else:
            scen.append(Scenario(_name(sets), sets, cfg, [*notes, *ran_on(tr, cfg)], figures(tr, st), status))
    return WhatIf(wl, obs, st, engine, arr, scen, cal, src)


def prepare_with(analysis: Analysis, base_sets: dict[str, Any]) -> tuple[Workload, Observed, StepTime]:
    from dataclasses import replace

    wl = build_workload(analysis)
    # a KV pool the bundle does not size is the --base one; the rest is still the bundle's (and its defaults)
    pool = base_sets.get("num_gpu_blocks")
    obs = observed_config(analysis, wl, pool=int(pool) if pool is not None else None)
    if base_sets:
        kept = [a for a in obs.assumptions if not any(a.startswith(k + " ") for k in base_sets)]
        if "vllm_version" in base_sets:
            was = bundle_scheduler(analysis).caveat  # the bundle's version's, replaced by the --base one
            kept = [a for a in kept if not a.startswith("the vLLM version is not in the bundle") and a != was]
        cfg = replace(obs.config, **base_sets)  # the bundle's own values: nothing rescaled
        prov = {**obs.provenance, **{k: "given with --base" for k in base_sets}}
        if (budget := budget_given(analysis, obs, base_sets, wl)) is not None:  # V0's follows max_model_len
            cfg = replace(
                cfg,
                enable_chunked_prefill=budget.enable_chunked_prefill,
                max_num_batched_tokens=budget.max_num_batched_tokens,
            )
            kept = [a for a in kept if not a.startswith(("max_num_batched_tokens ", "enable_chunked_prefill "))]
            kept += budget.assumptions
        if "vllm_version" in base_sets:
            sv = scheduler_of(cfg, "given with --base")
            if sv.caveat is not None:  # a version newer than the model's
                kept.append(sv.caveat)
            stated = {
                k for k in VERSIONED if k in base_sets or not prov.get(k, "default").startswith(("default", "vLLM"))
            }
            cfg, dprov = with_version_defaults(cfg, sv, keep=stated)
            prov = {**prov, **dprov, "vllm_version": sv.how}
        if (why := version_refusal(obs, base_sets, cfg)) is not None:
            raise UsageError(f"--base: {why}", hint="the incident's vLLM started: a --base value is wrong")
        obs = Observed(cfg, prov, obs.memory, kept, obs.pinned)
    return wl, obs, step_time(analysis)


def ran_on(tr: engine_model.Trace, cfg: ReplayConfig) -> list[str]:
    """The vLLM engine: a note when the scheduler that ran is not the configuration's version (the
    python given, or the only venv set, has another vLLM)."""
    want = cfg.vllm_version or scheduler_of(cfg).replayed  # the venv of the version asked (engine_vllm.python_for)
    got = tr.scheduler_version
    if not got or got.split(".")[:2] == want.split(".")[:2]:
        return []
    return [
        f"replayed on vLLM {got}'s scheduler (the python given), not {want}'s: where their schedulers differ "
        f"(docs/whatif.md) the figures are {got}'s; set {version_env(want) or 'the venv of ' + want} for its own"
    ]


def setting_notes(cfg: ReplayConfig) -> list[str]:
    """What a configuration's settings do in a replay, where that is not what they say: vLLM 0.34's
    settings a replay cannot exercise (read from vllm/v1/core/sched/scheduler.py)."""
    out = []
    if cfg.max_num_inflight_kv_loads is not None:
        out.append(
            f"max_num_inflight_kv_loads {cfg.max_num_inflight_kv_loads}: caps the requests holding KV blocks for an "
            "async KV connector load (Scheduler._admits_inflight_kv_load); the replay has no KV connector, so it "
            "changes nothing here"
        )
    if cfg.cache_aware_admission_window and (cfg.scheduling_policy != "fcfs" or not cfg.enable_prefix_caching):
        out.append(
            f"cache_aware_admission_window {cfg.cache_aware_admission_window}: ignored, vLLM applies it only with "
            "prefix caching and the fcfs policy (Scheduler.__init__: cache_aware_window)"
        )
    return out
