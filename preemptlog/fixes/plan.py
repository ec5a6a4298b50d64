"""The incident's fixes: one list of changes to make, one value per lever, read by every output.

A pipeline stage after the findings (pipeline.run): :func:`plan` asks every registered engine for
its part over its own events' verdicts (Engine.fixes; engines.split_verdicts). vLLM's
(engines/vllm/fixes.plan_part) puts together the field guide's formula fixes and the levers
computed from the KV pool and the peak demand (findings/capacity.py, the engine's capacity_fixes)
and keeps one suggestion per option: a lever computed from the incident's own pool and demand
supersedes the formula fix for the same option; a pool pinned by ``--num-gpu-blocks-override``
is moved by that option, so no ``--gpu-memory-utilization`` fix is offered then. Then the plan

- ranks only *changes*: a fix with a computed value that addresses some of the incident's
  events. A fix that cannot be computed, or asks for more evidence, is not a change: it becomes an
  item of ``to_know_more`` (what to add, and what it would settle);
- replays every change of the engine the what-if models (Engine.not_replayed is None; another
  engine's changes say why not) on the incident's workload (whatif/verify.py): a calibrated replay without
  gain drops it; a change whose replay is calibrated and gains is ``verified``, any other is
  ``not verified`` (uncalibrated model, no workload to replay, replay skipped) and never ranks
  above a verified one;
- labels each current value: ``seen (file:line)``, ``derived (...)`` or ``assumed (vLLM X.Y
  default)``.

:func:`attach` gives every event the changes that address its verdict (the per-event ``fixes`` and
``recommendations`` columns), so the summary, explain, the report and the JSON say the same.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import polars as pl

from .. import engines
from ..engines.common import G1_KEYS, verdict_key
from ..model.config import in_force
from ..rules.verdicts import fix_cell, fix_type, guide_model
from ..whatif.verify import setting_for, verify_fixes

if TYPE_CHECKING:
    from ..findings import Findings
    from ..model.result import AnalysisView


def plan(a: AnalysisView, findings: Findings | None) -> dict[str, Any]:
    """``{"changes": [...], "to_know_more": [...], "dropped": [...]}`` for the incident."""
    if a.ruleset is None:
        return {"changes": [], "to_know_more": [], "dropped": []}
    per = engines.split_verdicts(a.events, a.verdicts)  # each engine's events get its own changes
    judged = per.get(engines.DEFAULT)
    unjudged = set(per) == {engines.DEFAULT} and (judged is None or judged.height == 0)
    if unjudged:
        # no verdict (no event counted): the changes of each engine the bundle shows (an SGLang log's
        # pressure gets SGLang's flags, never vLLM's)
        per = {k: None for k in engines.engine_kinds(a.events, a.config, a.records)}
    changes: list[dict[str, Any]] = []
    know: list[dict[str, Any]] = []
    dropped: list[dict[str, str]] = []
    for eng in engines.registered():
        if eng.name not in per:
            continue
        v = per[eng.name]
        if eng.default and len(per) > 1 and not unjudged and (v is None or v.height == 0):
            continue  # only other engines' events: none of the default engine's changes
        own = engines.own_view(a, eng.name)  # its own configuration: never another engine's under the same key
        part = eng.fixes(own, findings, v)
        mine, mine_dropped = part.changes, list(part.dropped)
        if eng.not_replayed is not None:  # the what-if model is not this engine's scheduler
            for x in mine:
                x["replay"] = {"status": "not replayed", "why": eng.not_replayed}
        elif mine:  # nothing to replay: whatif is not even imported (start-up time)
            mine, no_gain = verify_fixes(own, mine)
            mine_dropped.extend(no_gain)
            for x in mine:
                _unreproduced(x)
        changes.extend(mine)
        know.extend(part.know)
        dropped.extend(mine_dropped)
    return _ranked(a, changes, know, dropped)


def _ranked(
    a: AnalysisView, changes: list[dict[str, Any]], know: list[dict[str, Any]], dropped: list[dict[str, str]]
) -> dict[str, Any]:
    """The changes labelled (status, where the current value comes from) and ranked, with the rest."""
    for x in changes:
        x["status"] = _status(x)
        x.setdefault(
            "current_from", current_label(engines.own_view(a, x.get("engine_kind")), x["option"], x.get("current"))
        )
    # A verified change first; a change that a replay, even an uncalibrated one, shows no gain for
    # ranks after the others (its own figures argue against it), as does a ``partial`` one (its engine's
    # estimate says it cannot hold the demand alone).
    ties = engines.tie_order()
    changes.sort(
        key=lambda x: (
            x["status"] != "verified",
            bool(x.get("partial")),
            (x.get("replay") or {}).get("gain") is False and x.get("verified") is not None,
            -x["events_addressed"],
            ties.index(x["id"]) if x["id"] in ties else len(ties),
        )
    )
    for i, x in enumerate(changes, 1):
        x["rank"] = i
    return {"changes": changes, "to_know_more": to_know_more(a, know, changes), "dropped": dropped}


def _unreproduced(x: dict[str, Any]) -> None:
    """A replay that does not reproduce the incident (uncalibrated) and shows no gain says nothing for or
    against the change (``0 -> 0`` of a model that saw none of the incident's preemptions): its figures
    are not the change's words (no fix is shown with a replay without gain); ``replay`` keeps them, and
    ``replay.why`` says why the change is not verified."""
    rp = x.get("replay") or {}
    if rp.get("status") != "uncalibrated" or rp.get("gain") is not False or not x.get("verified"):
        return
    said = f"; {x['verified']}"
    for k in ("expected_effect", "text"):
        if isinstance(x.get(k), str):
            x[k] = x[k].replace(said, "")
    cal = rp.get("calibration") or {}
    seen = cal.get("observed")
    rp["why"] = (
        f"the replay does not reproduce the incident (the model's {cal.get('replayed')} vs the incident's "
        f"{seen if seen is not None else 'unknown count of'} preemptions)"
    )
    x.pop("verified", None)


def _status(x: dict[str, Any]) -> str:
    rp = x.get("replay") or {}
    return "verified" if rp.get("status") == "calibrated" and rp.get("gain") else "not verified"


def current_label(a: AnalysisView, option: str, current: Any = None) -> str | None:
    """Where the current value of an option's setting comes from: seen, derived or assumed (``a``: the
    view of the change's own engine, engines.own_view). None where the change's ``current`` is not the
    setting's value in force (a change that worked its current value out itself says so in its own
    ``current_from``): a row's place never labels another value."""

    key = option.strip().split()[0].removeprefix("--").replace("-", "_") if option.startswith("--") else None
    if not key:
        return None
    row = in_force(a.config).get(key)
    if row is None or not _same_value(row.get("value"), current):
        return None
    if current is None and row["status"] == "default":  # the change did not take the assumed default
        return None
    if row["status"] == "seen":
        return f"seen ({row['source']}:{row['line']})"
    if row["status"] == "derived":
        return f"derived ({row.get('note') or 'from the bundle'}, {row['source']}:{row['line']})"
    note = str(row.get("note") or "")
    return note.split(" (")[0].replace("assumed: ", "assumed (") + ")" if note.startswith("assumed") else "assumed"


def _same_value(value: Any, current: Any) -> bool:
    """The config row's value is the change's current value (numbers compared as numbers; no current: yes)."""
    if current is None:
        return True
    try:
        return float(str(value).replace(",", "")) == float(str(current).replace(",", ""))
    except (TypeError, ValueError):
        return str(value).strip() == str(current).strip()


# The field guide's evidence, by kind: the frames that hold it.
_GUIDE_EVIDENCE = (
    ("its scheduler debug-hook lines", ("hook_steps", "hook_pending", "hook_batch")),
    ("block-table records", ("bt_steps", "bt_tables", "bt_events", "bt_requests")),
    ("nvidia-smi dmon", ("dmon",)),
)


def _guide_evidence(a: AnalysisView) -> str:
    """The field guide's evidence to add: the kinds the bundle does not hold (a bundle of block-table
    records is not told to add block-table records); every kind held: more of it, at the events."""
    held = [any(a.frames.get(n) is not None and a.frames[n].height for n in names) for _, names in _GUIDE_EVIDENCE]
    missing = [what for (what, _), h in zip(_GUIDE_EVIDENCE, held, strict=True) if not h]
    if missing:
        return f"the field guide's evidence ({', '.join(missing)})"
    return "the field guide's evidence at the undetermined events' steps (the bundle's hook lines, records and dmon hold none there)"


def to_know_more(a: AnalysisView, know: list[dict[str, Any]], changes: list[dict[str, Any]]) -> list[dict[str, str]]:
    """What to add to the bundle, once each, with what it would settle (never ranked as a change)."""
    items: dict[str, list[str]] = {}

    def add(what: str, settles: str) -> None:
        items.setdefault(what, [])
        if settles not in items[what]:
            items[what].append(settles)

    for x in know:
        if x.get("id") == "add_evidence":
            add(_guide_evidence(a), "the gates that could not be evaluated for the undetermined events")
            continue
        for part in str(x.get("missing") or "an input").split("; "):
            what = part.split(": ", 1)[-1] if ": " in part else part
            add(what, f"{x['option']} ({x.get('expected_effect') or x.get('id')})")
    bt = a.frames.get("bt_events")
    upstream = a.events.height and not _guide_world(a)
    if upstream and (bt is None or bt.height == 0):
        present = {k for k, n in engines.engine_kinds(a.events, a.config, a.records).items() if n}
        for eng in engines.registered():  # the capture of each engine whose events the bundle holds
            if eng.records_hint is not None and eng.name in present:
                add(*eng.records_hint)
    unverified = [x for x in changes if x.get("status") != "verified" and not (x.get("replay") or {}).get("status")]
    if unverified and not (a.requests.height or (bt is not None and bt.height)):
        for eng in engines.registered():  # what the engine's replay needs: its request lines
            theirs = [
                x
                for x in unverified
                if x.get("engine_kind", engines.DEFAULT) == eng.name and setting_for(str(x.get("option") or ""))
            ]  # only options the what-if replays (a --kv-cache-memory-bytes is not a replay setting)
            if eng.replay_hint is not None and theirs:
                add(
                    eng.replay_hint,
                    "a replay of "
                    + ", ".join(sorted({x["option"] for x in theirs}))
                    + " on the incident's own workload (verified by replay)",
                )
    return [{"add": what, "settles": "; ".join(s)} for what, s in items.items()]


def _guide_world(a: AnalysisView) -> bool:

    return guide_model(a)


def attach(
    verdicts: pl.DataFrame | None, fixes: dict[str, Any], engine_kinds: pl.DataFrame | None = None
) -> pl.DataFrame | None:
    """Every event's ``fixes`` and ``recommendations``: the changes that address its verdict (its
    engine's: ``engine_kinds`` is event_id -> engine_kind, when the bundle has more than vLLM)."""

    if verdicts is None or verdicts.height == 0:
        return verdicts
    changes = fixes.get("changes") or []
    keys = G1_KEYS + ["G2-batch-variance", "G3-queue-overflow", "G4-prefix-conflict", "undetermined"]

    def mine(x: dict[str, Any], kind: str) -> bool:
        return bool(x.get("engine_kind", engines.DEFAULT) == kind)

    per = {k: [x for x in changes if k in x["addresses"] and mine(x, engines.DEFAULT)] for k in keys}
    # Another engine's events look their changes up under "<engine>:<key>" (SGLang's: "sglang:<key>")
    for eng in engines.others():
        per.update(
            {f"{eng.name}:" + k: [x for x in changes if k in x["addresses"] and mine(x, eng.name)] for k in keys}
        )
    lookup = pl.DataFrame(
        {
            "_key": list(per.keys()),
            "recommendations": [[x["text"] for x in fx] for fx in per.values()],
            "fixes": [[fix_cell(x) for x in fx] for fx in per.values()],
        },
        schema={"_key": pl.String, "recommendations": pl.List(pl.String), "fixes": fix_type()},
    )
    key = verdict_key()
    if engine_kinds is not None:
        verdicts = verdicts.join(engine_kinds, on="event_id", how="left")
        for eng in engines.others():
            key = pl.when(pl.col("engine_kind") == eng.name).then(pl.lit(f"{eng.name}:") + key).otherwise(key)
    cols = [c for c in verdicts.columns if c != "engine_kind" or engine_kinds is None]
    out = (
        verdicts.drop("recommendations", "fixes")
        .with_columns(_key=key)
        .join(lookup, on="_key", how="left", maintain_order="left")
        .drop("_key")
        .with_columns(
            recommendations=pl.col("recommendations").fill_null(pl.lit([], pl.List(pl.String))),
            fixes=pl.col("fixes").fill_null(pl.lit([], fix_type())),
        )
    )
    return out.select(cols)
