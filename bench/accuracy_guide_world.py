"""Accuracy on the hand-written guide-world bundles (fixtures/guide-world, truth.json): a third table.

Each scenario is one of issue 25's rules (blocks held derived, engines from process prefixes,
restarts reset the configuration, a counted interval shares its evidence, block-table record
bundles), written by hand and rendered in the header families it names. Every expected event is
scored twice: its *verdict* (gate, sub-kind and rule; the gates that must not fire; the
mechanism) and *all* its expectations (also the deciding step and lines, the factors, the
engine, the evidence values and their lines, the configuration and its status). Prints a
markdown section; ``--append FILE`` adds it to FILE; ``--json`` prints the counts.
tests/campaigns/test_guide_world.py asserts the same expectations one by one (:func:`check`).

    python bench/accuracy_guide_world.py [--append docs/accuracy.md] [--json]
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GW = ROOT / "fixtures" / "guide-world"
FILES = {"bt": "blocktable.jsonl", "prom": "metrics.prom", "kv": "kvevents.jsonl"}


def ref(fam: str, r: Any) -> str:
    """A truth reference ("9", "2~i1", "bt:3", "prom:7~i1") as the event id or file:line it names."""
    kind, _, rest = str(r).rpartition(":")
    return f"{fam}/{FILES[kind]}:{rest}" if kind else f"{fam}/vllm.log:{rest}"


def load(name: str, fam: str) -> Any:
    from preemptlog import AnalyzeOptions, analyze

    truth = json.loads((GW / "truth.json").read_text())
    return analyze([str(GW / name / fam)], AnalyzeOptions(tz=truth["tz"], year=truth["year"]))


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and math.isclose(float(a), float(b), abs_tol=1e-6)
    return a == b


def check(a: Any, fam: str, exp: dict) -> tuple[list[str], list[str]]:
    """(what is wrong with the verdict, what else is wrong) for one expected event."""
    import polars as pl

    from preemptlog.rules.verdicts import decided_by

    eid = ref(fam, exp["event"])
    v = a.verdicts.join(
        a.events.select("event_id", "kind", "engine", "interval_start", "interval_end"), on="event_id"
    ).filter(pl.col("event_id") == eid)
    if v.height == 0:
        return [f"{eid}: no such event"], []
    row = v.row(0, named=True)
    verdict, other = [], []
    if exp["gate"] is not None:
        got = (row["gate"], row["sub_kind"], row["rule"])
        want = (exp["gate"], exp["sub_kind"], exp["rule"])
        if any(w != "*" and g != w for g, w in zip(got, want, strict=True)):
            verdict.append(f"{eid}: verdict {got}, expected {(exp['gate'], exp['sub_kind'], exp['rule'])}")
    for gate in exp.get("not_fired", []):
        if gate in row["gates_fired"]:
            verdict.append(f"{eid}: {gate} fired")
    if "mechanism" in exp:
        per = a.findings.per_event.filter(pl.col("event_id") == eid) if a.findings is not None else None
        got_m = per.get_column("mechanism")[0] if per is not None and per.height else None
        if got_m != exp["mechanism"]:
            verdict.append(f"{eid}: mechanism {got_m}, expected {exp['mechanism']}")
    if "engine" in exp and row["engine"] != exp["engine"]:
        other.append(f"{eid}: engine {row['engine']!r}, expected {exp['engine']!r}")
    factors = sorted(
        f"{f['factor']}:{f['detail'].split('-', 1)[0]}"
        for f in row["contributing_factors"]
        if f["factor"] == "delayed-preemption"
    )
    if factors != sorted(exp.get("factors", [])):
        other.append(f"{eid}: factors {factors}, expected {exp.get('factors', [])}")
    evid = a.evidence.filter(pl.col("event_id") == eid)
    erow = evid.row(0, named=True) if evid.height else {}
    for col, want in exp.get("evidence", {}).items():
        if not _same(erow.get(col), want) and not (want is None and erow.get(col) is None):
            other.append(f"{eid}: {col} = {erow.get(col)!r}, expected {want!r}")
    for col, line in exp.get("src", {}).items():
        if ref(fam, line) not in (erow.get(f"{col}_src") or "").split("; "):
            other.append(f"{eid}: {col}_src = {erow.get(f'{col}_src')!r}, expected to cite {ref(fam, line)}")
    for col, (want, status) in exp.get("cfg", {}).items():
        got_v, got_s = erow.get(col), erow.get(f"{col}_status")
        if want is not None and not _same(got_v, want):
            other.append(f"{eid}: {col} = {got_v!r}, expected {want!r}")
        ok_status = got_s not in ("seen", "derived", None) if status == "default" else got_s == status
        if not ok_status:
            other.append(f"{eid}: {col} status {got_s!r}, expected {status!r}")
    for col, never in exp.get("cfg_not", {}).items():
        if _same(erow.get(col), never):
            other.append(f"{eid}: {col} = {never!r}, another run's value")
    if exp["gate"] not in (None, "undetermined") and exp["rule"] != "*" and not verdict:
        event = {"kind": row["kind"], "interval_start": row["interval_start"], "interval_end": row["interval_end"]}
        dec = {d["rule"]: d for d in decided_by(a, eid, event)}
        d = dec.get(exp["rule"])
        if d is None:
            other.append(f"{eid}: {exp['rule']} not in decided_by")
        else:
            if exp.get("step") is not None and d["where"] != f"scheduler step {exp['step']}":
                other.append(f"{eid}: decided at {d['where']!r}, expected scheduler step {exp['step']}")
            for ln in exp.get("lines", []):
                if ref(fam, ln) not in d["lines"]:
                    other.append(f"{eid}: line {ref(fam, ln)} not among the deciding lines {d['lines']}")
    return verdict, other


def shared(a: Any, fam: str, group: list[str]) -> list[str]:
    """The events of one counted interval must have the same evidence, value by value."""
    import polars as pl

    from preemptlog.joiner import VALUE_COLUMNS

    ids = [ref(fam, e) for e in group]
    ev = a.evidence.filter(pl.col("event_id").is_in(ids))
    if ev.height != len(ids):
        return [f"{len(ids) - ev.height} of the interval's events have no evidence row"]
    cols = [c for c in VALUE_COLUMNS if c in ev.columns and c != "sched_age_s"]
    differ = [c for c in cols if ev.select(pl.col(c).n_unique()).item() > 1]
    return [f"the interval's events differ in {', '.join(differ)}"] if differ else []


def score() -> dict:
    truth = json.loads((GW / "truth.json").read_text())
    out: dict[str, Any] = {"scenarios": [], "total": {"events": 0, "verdict": 0, "all": 0, "groups": 0, "shared": 0}}
    for name, sc in truth["scenarios"].items():
        row = {"scenario": name, "item": sc["item"], "families": sc["families"], "events": 0, "verdict": 0, "all": 0}
        row["failures"] = []
        for fam in sc["families"]:
            a = load(name, fam)
            for exp in sc["expect"]:
                verdict, other = check(a, fam, exp)
                row["events"] += 1
                row["verdict"] += not verdict
                row["all"] += not verdict and not other
                row["failures"] += verdict + other
            for group in sc.get("same_evidence", []):
                out["total"]["groups"] += 1
                bad = shared(a, fam, group)
                out["total"]["shared"] += not bad
                row["failures"] += [f"{fam}: {b}" for b in bad]
        for k in ("events", "verdict", "all"):
            out["total"][k] += row[k]
        out["scenarios"].append(row)
    return out


def markdown(d: dict) -> str:
    t = d["total"]
    pct = lambda a, b: f"{100 * a / b:.1f}%" if b else "-"  # noqa: E731
    lines = [
        "## Guide-world bundles",
        "",
        "`python bench/accuracy_guide_world.py` (run by `bench/accuracy`): the bundles of fixtures/guide-world "
        "(issue 25: blocks held derived, engines from process prefixes, restarts, counted intervals, block-table "
        "record bundles), written by hand in the header families each names; fixtures/guide-world/truth.json "
        "holds every expectation.",
        "",
        f"**Verdicts right {pct(t['verdict'], t['events'])}** over {t['events']} expected events; every "
        f"expectation (step, lines, factors, engine, evidence, configuration) right for {pct(t['all'], t['events'])}; "
        f"{t['shared']} of {t['groups']} counted intervals share their evidence.",
        "",
        "| scenario | item | families | events | verdict right | all right |",
        "|---|---|---|---|---|---|",
    ]
    for s in d["scenarios"]:
        lines.append(
            f"| {s['scenario']} | {s['item']} | {', '.join(s['families'])} | {s['events']} | "
            f"{pct(s['verdict'], s['events'])} | {pct(s['all'], s['events'])} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    d = score()
    if "--json" in argv:
        print(
            json.dumps(
                {"total": d["total"], "failures": {s["scenario"]: s["failures"] for s in d["scenarios"]}}, indent=1
            )
        )
        return 0
    text = markdown(d)
    print(text)
    if len(argv) >= 2 and argv[0] == "--append":
        with open(argv[1], "a") as fh:
            fh.write("\n" + text)
    return 0


if __name__ == "__main__":
    sys.path.append(str(ROOT))
    raise SystemExit(main(sys.argv[1:]))
