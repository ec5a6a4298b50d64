"""Score preemptlog against simulated bundles (``preemptlog simulate`` writes truth.jsonl).

Per bundle:

- **event recall**: events found / preemptions the log can show
  (``visible_in_log`` in truth.jsonl: a warning, a marker, a V0 counter jump,
  or a printed V1 interval), and events found / all preemptions;
- **gate accuracy**: events are matched to the truth exactly by the vllm.log
  line that carries them (truth ``log_lines``), so it is measured on events that
  have a line of their own (logged V0 warnings, marker lines); the confusion
  matrix compares the truth gate with the verdict (``undetermined`` included);
- **G1 sub-kind accuracy** on events whose truth and verdict are both G1.

Precision of a gate = correct / predicted as that gate; recall = correct /
truly that gate (over matched events).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from ..analysis import AnalyzeOptions, analyze
from ..errors import InputError

GATES = ("G1-kv-space", "G2-batch-variance", "G3-queue-overflow", "G4-prefix-conflict")
PREDICTED = GATES + ("undetermined",)


@dataclass
class BundleScore:
    bundle: str
    scenario: str
    family: str
    truth_total: int
    truth_visible: int
    events: int
    matched: int
    correct: int
    sub_correct: int
    sub_total: int
    confusion: dict[str, dict[str, int]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def accuracy(self) -> float | None:
        return self.correct / self.matched if self.matched else None

    @property
    def recall_visible(self) -> float | None:
        return min(self.events, self.truth_visible) / self.truth_visible if self.truth_visible else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "bundle": self.bundle,
            "scenario": self.scenario,
            "family": self.family,
            "truth_preemptions": self.truth_total,
            "truth_visible_in_log": self.truth_visible,
            "events_found": self.events,
            "event_recall_visible": self.recall_visible,
            "events_over_visible": max(0, self.events - self.truth_visible),
            "matched_events": self.matched,
            "gate_correct": self.correct,
            "gate_accuracy": self.accuracy,
            "g1_sub_kind_correct": self.sub_correct,
            "g1_sub_kind_matched": self.sub_total,
            "confusion": self.confusion,
            "notes": self.notes,
        }


def score_bundle(path: str, *, rules_files: list[str] | None = None, sets: list[str] | None = None) -> BundleScore:

    root = Path(path)
    scen_path, truth_path = root / "scenario.json", root / "truth.jsonl"
    if not scen_path.is_file() or not truth_path.is_file():
        raise InputError(f"{path}: not a simulated bundle (needs scenario.json and truth.jsonl)")
    scenario = json.loads(scen_path.read_text())
    truth = pl.read_ndjson(truth_path, infer_schema_length=None) if truth_path.stat().st_size else pl.DataFrame()
    opts = AnalyzeOptions(tz=scenario.get("tz") or "UTC", rules_files=list(rules_files or []), sets=list(sets or []))
    result = analyze([str(root)], opts)
    ev = result.events
    if result.verdicts is not None and ev.height:
        ev = ev.join(result.verdicts.select("event_id", "gate", "sub_kind"), on="event_id", how="left")
    else:
        ev = ev.with_columns(gate=pl.lit("undetermined"), sub_kind=pl.lit(None, pl.String))
    total = truth.height
    visible = int(truth.get_column("visible_in_log").sum()) if total else 0
    confusion = {g: {p: 0 for p in PREDICTED} for g in GATES}
    matched = correct = sub_ok = sub_n = 0
    if total and ev.height:
        lines = (
            truth.with_row_index("_t")
            .select("_t", "gate", "sub_kind", "log_lines")
            .explode("log_lines")
            .filter(pl.col("log_lines").is_not_null())
            .rename({"gate": "true_gate", "sub_kind": "true_sub", "log_lines": "line"})
            .with_columns(pl.col("line").cast(pl.UInt32))
        )
        log_ev = ev.filter(pl.col("source").str.ends_with("vllm.log") & pl.col("kind").is_in(["logged", "marker"]))
        m = log_ev.join(lines, on="line", how="inner").unique(subset=["_t"], keep="first")
        matched = m.height
        for tg, pg, ts, ps in m.select("true_gate", "gate", "true_sub", "sub_kind").iter_rows():
            pg = pg if pg in PREDICTED else "undetermined"
            confusion[tg][pg] += 1
            if tg == pg:
                correct += 1
                if tg == "G1-kv-space":
                    sub_n += 1
                    sub_ok += int(ts == ps)
    notes = []
    if total and not matched:
        notes.append(
            "no event has a line of its own (reconstructed / interval counts only): gate accuracy not measurable"
        )
    return BundleScore(
        bundle=str(path),
        scenario=scenario.get("scenario", "?"),
        family=scenario.get("family", "?"),
        truth_total=total,
        truth_visible=visible,
        events=ev.height,
        matched=matched,
        correct=correct,
        sub_correct=sub_ok,
        sub_total=sub_n,
        confusion=confusion,
        notes=notes,
    )


def aggregate(scores: list[BundleScore]) -> dict[str, Any]:
    conf = {g: {p: 0 for p in PREDICTED} for g in GATES}
    for s in scores:
        for g in GATES:
            for p in PREDICTED:
                conf[g][p] += s.confusion[g][p]
    per_gate = {}
    for g in GATES:
        tp = conf[g][g]
        predicted = sum(conf[t][g] for t in GATES)
        actual = sum(conf[g].values())
        per_gate[g] = {
            "precision": tp / predicted if predicted else None,
            "recall": tp / actual if actual else None,
            "support": actual,
        }
    matched = sum(s.matched for s in scores)
    correct = sum(s.correct for s in scores)
    vis = sum(s.truth_visible for s in scores)
    found = sum(min(s.events, s.truth_visible) for s in scores)
    return {
        "bundles": len(scores),
        "matched_events": matched,
        "gate_accuracy": correct / matched if matched else None,
        "event_recall_visible": found / vis if vis else None,
        "g1_sub_kind_accuracy": (sum(s.sub_correct for s in scores) / sum(s.sub_total for s in scores))
        if sum(s.sub_total for s in scores)
        else None,
        "per_gate": per_gate,
        "confusion": conf,
    }
