"""Write one simulated incident bundle: run the model, then the truth and the scenario record.

Files (all written into one folder):

==================  ===========================================================
``vllm.log``        the server log of the chosen family (families.py)
``executor.log``    ``block_table extend req=<id> 8->12`` lines
``blocktable.jsonl`` block-table records (preemptlog/data/blocktable.schema.json)
``dmon.txt``        ``nvidia-smi dmon`` output (dmon.py)
``truth.jsonl``     one row per preemption: the ground truth (TRUTH_FIELDS)
``scenario.json``   every parameter, the seed, the family, totals
==================  ===========================================================

Same arguments and seed => byte-identical files. File mtimes are set to the
simulated time of the last line (so a year-less vLLM log gets its year from
the file, as it would on the machine that wrote it).
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass, field
from pathlib import Path

from ..model import VERSION as __version__
from . import families as F
from .large import write_large
from .model import Params, Sim
from .options import DEFAULT_START, SimulateError, check_zone, coerce, parse_start
from .scenarios import SCENARIOS, Scenario
from .writers import BundleSink, Output

BUNDLE_FILES = ("vllm.log", "executor.log", "blocktable.jsonl", "dmon.txt", "truth.jsonl", "scenario.json")

# Fields of truth.jsonl, in order. (Not copied into scenario.json: its text
# would read like log lines to a content sniffer.)
TRUTH_FIELDS = {
    "n": "cumulative preemption number (1-based); V0 prints it as total_num_cumulative_preemption",
    "request_id": "the preempted request",
    "gate": "G1-kv-space | G2-batch-variance | G3-queue-overflow | G4-prefix-conflict",
    "sub_kind": "capacity | fragmentation for G1, else null",
    "decision_step": "scheduler step of the decision",
    "decision_time": "ISO 8601 time of the decision (log clock)",
    "logged_step": "step whose log lines carry it (decision_step + delay)",
    "logged_time": "ISO 8601 time of its log lines (null when it has none)",
    "delay_steps": "delayed preemption: steps between decision and log line",
    "log_warning": "a V0 'is preempted by' warning was written for it (1st, 51st, 101st...)",
    "log_marker": "a 'Req-<id> PREEMPTED' marker line was written for it",
    "log_lines": "vllm.log line numbers (1-based) of its lines",
    "visible_in_log": "a log-only analysis can count it (warning, marker, reconstructed from the V0 counter, or a printed V1 interval)",
    "stats_time": "V1: time of the stats line whose interval counts it (the count lags until the request resumes)",
    "stats_line": "V1 patched: vllm.log line of that stats line (null on a stock build)",
    "phase": "where the scheduler decided: extend (a running table grows), admission (placing a pending request), batch (G2 check), arrival (G3)",
    "requester_id": "the request whose need triggered it (G1: the growing/pending one; G4: the older twin)",
    "victim_is_requester": "the requester preempted itself (it was the newest)",
    "free_blocks": "free blocks at the decision (cached prefix blocks count as free)",
    "needed_blocks": "G1: blocks the requester needed now (extend: the growth chunk; admission: "
    "ceil((prompt + generated + 1 + lookahead) / block_size) minus prefix hits, not the hook's "
    "prompt+max_out figure); G3: the hook's blocks_needed",
    "largest_free_run": "longest contiguous free run at the decision",
    "free_regions": "number of contiguous free runs at the decision",
    "variance": "batch-length variance in blocks² at the decision",
    "variance_threshold": "the G2 threshold in force (fixed, or dynamic = 10% of the longest length)",
    "pending": "pending (waiting) requests at the decision",
    "running": "running requests at the decision (victim included)",
    "blocks_held": "blocks the victim held",
    "tokens": "tokens the victim held (prompt + generated)",
    "generated": "tokens the victim had generated",
    "prompt_len": "the victim's prompt length",
    "max_tokens": "the victim's max_tokens",
    "preemption_of_request": "this is the victim's k-th preemption",
    "mode": "RECOMPUTE",
    "prefix_id": "G4: the shared prefix",
    "shared_block": "G4: the shared prefix block both requests extend",
    "ref_count": "G4: its reference count",
}


@dataclass
class Options:
    """What the CLI passes in (one field per option)."""

    scenario: str
    out: Path
    seed: int = 0
    family: str | None = None
    duration: float | None = None
    size: int | None = None
    markers: bool = False
    stock: bool = False
    force: bool = False
    start: str = DEFAULT_START
    tz: str = "UTC"
    hooks: bool = True
    hook_headers: bool = False
    delayed: bool | None = None
    ansi: bool = True
    dmon_select: str = "pucm"
    dmon_dates: bool = True
    dmon_header_every: int = 20
    skews: dict = field(default_factory=dict)
    sets: dict = field(default_factory=dict)


def build_params(sc: Scenario, opts: Options) -> Params:
    p = Params()
    for k, v in sc.spec()["params"].items():
        setattr(p, k, v)
    if opts.duration is not None:
        if opts.duration <= 0:
            raise SimulateError("--duration must be positive")
        p.duration = float(opts.duration)
    if opts.delayed is not None:
        p.delayed = opts.delayed
    names = set(Params.names())
    for k, text in opts.sets.items():
        if k not in names:
            close = sorted(n for n in names if k.split("_")[0] in n)[:6]
            raise SimulateError(
                f"--set {k}: no such parameter" + (f" (did you mean {', '.join(close)}?)" if close else "")
            )
        setattr(p, k, coerce(k, text, getattr(p, k)))
    try:
        p.validate()
    except ValueError as exc:
        raise SimulateError(str(exc)) from None
    return p


def prepare_dir(out: Path, force: bool) -> None:
    if out.exists():
        if not out.is_dir():
            raise SimulateError(f"{out} exists and is not a folder")
        if any(out.iterdir()) and not force:
            raise SimulateError(f"{out} is not empty (use --force to write into it; bundle files are overwritten)")
    else:
        out.mkdir(parents=True)


def id_maker(fam: F.Family, seed: int):
    rng = random.Random(f"{seed}:ids")
    if not fam.id_prefix:
        return lambda i: str(i + 1)
    return lambda i: f"{fam.id_prefix}{rng.getrandbits(128):032x}"


def simulate(opts: Options) -> dict:
    """Write the bundle; return the scenario record (also written as scenario.json)."""
    try:
        sc = SCENARIOS[opts.scenario]
    except KeyError:
        raise SimulateError(
            f"unknown scenario {opts.scenario!r}",
        ) from None
    fam_name = opts.family or sc.family
    if fam_name not in F.FAMILIES:
        raise SimulateError(f"--family {fam_name!r}: one of {', '.join(F.FAMILIES)}")
    fam = F.FAMILIES[fam_name]
    if opts.stock and fam.engine != "V1":
        raise SimulateError("--stock applies to the V1 family (v1-0.11) only")
    start = parse_start(opts.start)
    check_zone(opts.tz)
    for k in opts.skews:
        if k not in ("dmon", "executor", "blocktable"):
            raise SimulateError(f"--skew {k}=...: sources are dmon, executor, blocktable")
    if sc.kind == "large":
        prepare_dir(opts.out, opts.force)
        return write_large(sc, opts, fam, start)
    p = build_params(sc, opts)
    spec_out = dict(sc.spec()["output"])
    skews = {**spec_out.pop("skews", {}), **opts.skews}
    prepare_dir(opts.out, opts.force)

    output = Output(
        family=fam,
        start=start,
        tz=opts.tz,
        stock=opts.stock,
        markers=opts.markers,
        hooks=opts.hooks,
        hook_headers=opts.hook_headers,
        ansi=opts.ansi,
        dmon_select=opts.dmon_select,
        dmon_dates=opts.dmon_dates,
        dmon_header_every=opts.dmon_header_every,
        skews=skews,
        **spec_out,
    )
    sink = BundleSink(opts.out, output, p, opts.seed)
    sim = Sim(p, opts.seed, sink, id_fn=id_maker(fam, opts.seed))
    try:
        sim.run()
    finally:
        sink.close()
    clock = sink.clock
    rows = _truth_rows(sim, sink, fam, opts)
    with open(opts.out / "truth.jsonl", "w", encoding="utf-8", newline="\n") as fh:
        fh.writelines(json.dumps(row) + "\n" for row in rows)
    record = _record(sc, opts, fam, p, sim, sink, rows, skews)
    with open(opts.out / "scenario.json", "w", encoding="utf-8", newline="\n") as fh:
        json.dump(record, fh, indent=2)
        fh.write("\n")
    ends = dict(sink.last_time)
    ends["truth.jsonl"] = sink.end_t
    ends["scenario.json"] = sink.end_t
    for name, t in ends.items():
        ts = clock.epoch(max(t, 0.0) + float(skews.get(_SKEW_OF.get(name, ""), 0.0)))
        os.utime(opts.out / name, (ts, ts))
    return record


_SKEW_OF = {"dmon.txt": "dmon", "executor.log": "executor", "blocktable.jsonl": "blocktable"}


def _truth_rows(sim: Sim, sink, fam: F.Family, opts: Options) -> list[dict]:
    clock = sink.clock
    last_warn = max(sink.logged_warnings) if sink.logged_warnings else 0
    out = []
    for row in sim.truth:
        visible = bool(row.get("log_marker"))
        if fam.v0_warnings and row["n"] <= last_warn:
            visible = True
        if fam.engine == "V1" and not opts.stock and row.get("stats_line"):
            visible = True
        rec = {
            "n": row["n"],
            "request_id": row["request_id"],
            "gate": row["gate"],
            "sub_kind": row["sub_kind"],
            "decision_step": row["decision_step"],
            "decision_time": clock.iso(row["decision_t"]),
            "logged_step": row["logged_step"] if row.get("log_lines") else None,
            "logged_time": clock.iso(row["logged_t"])
            if row.get("log_lines") and row.get("logged_t") is not None
            else None,
            "delay_steps": row["delay_steps"],
            "log_warning": bool(row.get("log_warning")),
            "log_marker": bool(row.get("log_marker")),
            "log_lines": row.get("log_lines", []),
            "visible_in_log": visible,
            "stats_time": clock.iso(row["stats_t"]) if row.get("stats_t") is not None else None,
            "stats_line": row.get("stats_line"),
        }
        for k in TRUTH_FIELDS:
            if k not in rec and k in row:
                rec[k] = row[k]
        out.append(rec)
    return out


def _record(
    sc: Scenario, opts: Options, fam: F.Family, p: Params, sim: Sim, sink, rows: list[dict], skews: dict
) -> dict:
    by_gate = {g: 0 for g in ("G1-kv-space", "G2-batch-variance", "G3-queue-overflow", "G4-prefix-conflict")}
    by_sub = {"capacity": 0, "fragmentation": 0}
    for r in rows:
        by_gate[r["gate"]] += 1
        if r["sub_kind"]:
            by_sub[r["sub_kind"]] += 1
    preempted = len({r["request_id"] for r in rows})
    n_req = len(sim.requests)
    truth = {
        "preemptions": len(rows),
        "by_gate": by_gate,
        "g1_by_sub_kind": by_sub,
        "requests": n_req,
        "requests_preempted": preempted,
        "preemption_rate": round(len(rows) / n_req, 4) if n_req else None,
        "requests_aborted": len(sim.aborted),
        "steps": sim.step,
        "v0_warnings_logged": len(sink.logged_warnings),
        "v0_logged_totals": list(sink.logged_warnings),
        "v0_last_logged_total": max(sink.logged_warnings) if sink.logged_warnings else None,
        "marker_lines": sink.marker_lines,
        "v1_stats_preemptions_sum": sink.stats_preemptions_total if fam.engine == "V1" else None,
        "visible_in_log": sum(1 for r in rows if r["visible_in_log"]),
        "stats_lines": sink.stats_lines,
        "vllm_log_lines": sink.log_lines,
        "executor_lines": sink.exec_lines,
    }
    return {
        "tool": "preemptlog simulate",
        "preemptlog_version": __version__,
        "scenario": sc.name,
        "description": sc.doc,
        "seed": opts.seed,
        "family": fam.name,
        "engine": fam.engine,
        "vllm_version": fam.version,
        "stock": opts.stock,
        "markers": bool(opts.markers or fam.always_markers),
        "start": opts.start,
        "tz": opts.tz,
        "end": sink.clock.iso(sink.end_t),
        "hooks": opts.hooks,
        "hook_headers": opts.hook_headers,
        "ansi": opts.ansi,
        "dmon": {
            "select": opts.dmon_select,
            "dates": opts.dmon_dates,
            "header_every": opts.dmon_header_every,
            "gpus": max(2, p.tensor_parallel_size),
            "gpus_running_vllm": p.tensor_parallel_size,
            "interval_s": 1,
        },
        "skews": {k: skews[k] for k in sorted(skews)},
        "variance_unit": "blocks^2 (population variance of prompt_len + max_tokens in tokens, / block_size^2)",
        "params": p.to_dict(),
        "files": list(BUNDLE_FILES),
        "truth": truth,
    }
