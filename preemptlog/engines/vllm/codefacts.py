"""The code facts vLLM's configuration in force settles (the joiner's ``code_*`` evidence, for vLLM's
events): the engine generation, version and scheduling policy the bundle shows pick the rows of the
code-facts table (engines/facts.py) that hold; their KV-pressure trigger is the event's cause in
vLLM's own code, the gates no row settles are not in upstream vLLM.

Registered as the engine's ``bundle_facts`` (joiner/code.py asks every engine for its own).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import polars as pl

from ...model.config import in_force
from ...model.config import version_tuple as _version_tuple
from .. import facts as F

if TYPE_CHECKING:
    from ...model.result import AnalysisView


def bundle_facts(config: pl.DataFrame | None) -> dict[str, Any] | None:
    """The code facts of the bundle's engine (None: not a vLLM log the facts can read)."""
    cfg = in_force(config) if config is not None and config.height else {}
    gen_row = cfg.get("engine")
    gen = gen_row["value"] if gen_row and gen_row["status"] != "default" else None
    ver_row = cfg.get("vllm_version")
    ver_text = ver_row["value"] if ver_row and ver_row["status"] != "default" else None
    ver = _version_tuple(ver_text) if ver_text else None
    pol_row = cfg.get("scheduling_policy")
    policy = str(pol_row["value"]).strip("'\"").lower() if pol_row else "fcfs"
    if gen is None and ver is None:
        return None  # nothing says this is a vLLM engine the facts cover

    facts = F.applicable(F.VLLM, gen, ver, policy)
    kv = [f for f in facts if f.kv_pressure]
    if not kv:
        return None
    if gen is None and len({f.generation for f in kv}) > 1:
        trigger = (
            "a running request could not get the KV blocks its next tokens need (V0 _can_append_slots and V1 "
            "allocate_slots alike; the log does not say which engine generation)"
        )
        code_src = " and ".join(f.source for f in kv)
    else:
        trigger = kv[0].trigger
        code_src = kv[0].source
    label = "vLLM" + (f" {gen}" if gen else "") + (f" {ver_text}" if ver_text else "") + f" ({policy})"
    # Where the engine, version and policy were read: the bundle's lines (file:line), one per line.
    lines = list(
        dict.fromkeys(f"{r['source']}:{r['line']}" for r in (gen_row, ver_row, pol_row) if r and r.get("source"))
    )
    engine_src = "; ".join(lines) or None
    settled = F.gates_settled(F.VLLM, gen, ver, policy)
    resets = [f for f in facts if f.mechanism == "prefix-cache-reset"]
    reset = bool(resets)
    # The guide's G4 (a shared-prefix conflict) is not the reset; the reset is its own trigger.
    not_gates = [g for g in F.GUIDE_GATES if g not in settled or g == "G4-prefix-conflict"]
    return {
        "trigger": trigger,
        "src": f"vLLM source: {code_src}",
        "engine_src": engine_src,
        "kv": True,
        "reset": reset,
        "reset_src": f"vLLM source: {resets[0].source}" if resets else f"vLLM source: {code_src}",
        "label": label,
        "not_gates": ",".join(not_gates),
    }


# The words of the code fact a V1 bundle's reset of the prefix cache points at (engines/facts.py).
RESET_FACT = "vllm-v1-reset-prefix-cache"
# The trigger every V1 version has (the headline's words for a stock V1 log, render/summary.py).
V1_ALLOCATION = "vLLM V1 preempts a running request when a KV-block allocation fails"


def _reset_fact() -> F.CodeFact:
    return next(f for f in F.rows_of(F.VLLM) if f.id == RESET_FACT)


def reset_words(config: pl.DataFrame | None, resets: pl.DataFrame | None) -> str | None:
    """What the resets of the prefix cache a V1 log shows (frame ``cache_resets``: its 'Successfully
    reset prefix cache' lines, resets.py) mean for its preemptions, by the version the bundle shows:
    from 0.12.0 ``reset_prefix_cache(reset_running_requests=True)`` preempts every running request
    (the code fact :data:`RESET_FACT`, its source cited); before, a reset with requests running fails
    (no preemption). None without a reset line, or for a V0 log (V0's reset never preempts)."""
    if resets is None or resets.height == 0:
        return None
    cfg = in_force(config) if config is not None and config.height else {}
    gen_row = cfg.get("engine")
    gen = gen_row["value"] if gen_row and gen_row["status"] != "default" else None
    if gen == "V0":
        return None
    ver_row = cfg.get("vllm_version")
    ver_text = ver_row["value"] if ver_row and ver_row["status"] != "default" else None
    ver = _version_tuple(ver_text) if ver_text else None
    fact = _reset_fact()
    since = ".".join(str(x) for x in fact.since or ())
    first = resets.sort("time", nulls_last=True).row(0, named=True)
    where = f"{first['source']}:{first['line']}" + (f" +{resets.height - 1} more" if resets.height > 1 else "")
    shown = f"the log shows {resets.height} reset(s) of the prefix cache ('Successfully reset prefix cache', {where})"
    call = "reset_prefix_cache(reset_running_requests=True)"
    if ver is not None and fact.since is not None and ver < fact.since:
        return (
            f"{shown}: in vLLM {ver_text} a reset does not preempt (reset_running_requests came in {since}: before, "
            "a reset with requests running fails)"
        )
    which = f"in vLLM {ver_text}" if ver is not None else "in V1"
    return (
        f"{shown}: {which} a reset can also preempt: from {since}, {call} preempts every running request "
        f"(vLLM source: {fact.source.split('; ')[0]}); the log does not say whether this one did"
    )


def cause_words(a: AnalysisView) -> str | None:
    """The summary's cause (``code``) of a V1 bundle whose log shows a reset of the prefix cache: a failed
    KV-block allocation is not the only trigger then (:func:`reset_words`). None otherwise (the words
    by generation stand)."""
    resets = a.frames.get("cache_resets")
    words = reset_words(a.config, resets)
    if not words or resets is None or " a reset does not preempt " in words:
        return None  # no reset, or a version whose reset never preempts: the words by generation stand
    # the headline's short form: the full words, with vLLM's source cited, are the capability's reason
    first = resets.sort("time", nulls_last=True).row(0, named=True)
    where = f"{first['source']}:{first['line']}" + (f" +{resets.height - 1} more" if resets.height > 1 else "")
    since = ".".join(str(x) for x in _reset_fact().since or ())
    return (
        f"{V1_ALLOCATION}, or (from {since}) when its prefix cache is reset with requests running "
        f"(reset_prefix_cache(reset_running_requests=True)): the log shows {resets.height} reset(s) ({where})"
    )
