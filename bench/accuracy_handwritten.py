"""Accuracy on the hand-written bundles (fixtures/handwritten, truth.json): a second table.

Each scenario is one rule of evidence (issue 13) written by hand in seven vLLM header
families; every event's expected gate and G1 sub-kind are in truth.json. Prints a
markdown section (per scenario, per family); ``--append FILE`` adds it to FILE.
tests/rules/test_evidence_rules.py asserts the same truth event by event.

    python bench/accuracy_handwritten.py [--append docs/accuracy.md]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HW = ROOT / "fixtures" / "handwritten"


FILES = {"bt": "blocktable.jsonl", "prom": "metrics.prom"}


def event_id(fam: str, ref) -> str:
    """A truth reference ("9", "2~i1", "bt:3", "prom:11~i1") as the event id it names."""
    kind, _, rest = str(ref).rpartition(":")
    return f"{fam}/{FILES[kind]}:{rest}" if kind else f"{fam}/vllm.log:{rest}"


def score() -> dict:
    import polars as pl

    from preemptlog import AnalyzeOptions, analyze

    truth = json.loads((HW / "truth.json").read_text())
    fams = truth["families"]
    out = {"families": fams, "scenarios": [], "total": {"events": 0, "gate": 0, "sub": 0}}
    for name, sc in truth["scenarios"].items():
        row = {"scenario": name, "rule": sc["rule"], "doc": sc["doc"], "per_family": {}}
        for fam in fams:
            a = analyze([str(HW / name / fam)], AnalyzeOptions(tz=truth["tz"], year=truth["year"]))
            v = {r["event_id"]: r for r in a.verdicts.select("event_id", "gate", "sub_kind").iter_rows(named=True)}
            n = ok = sub = 0
            for exp in sc["expect"]:
                eid = event_id(fam, exp["event"])
                n += 1
                got = v.get(eid)
                if got and got["gate"] == exp["gate"]:
                    ok += 1
                    sub += got["sub_kind"] == exp["sub_kind"]
            extra = len(set(v) - {event_id(fam, e["event"]) for e in sc["expect"]})
            row["per_family"][fam] = {"events": n, "gate": ok, "sub": sub, "extra_events": extra}
            out["total"]["events"] += n
            out["total"]["gate"] += ok
            out["total"]["sub"] += sub
        out["scenarios"].append(row)
    _ = pl
    return out


def markdown(d: dict) -> str:
    fams = d["families"]
    t = d["total"]
    pct = lambda a, b: f"{100 * a / b:.1f}%" if b else "-"  # noqa: E731
    lines = [
        "## Hand-written bundles",
        "",
        "`python bench/accuracy_handwritten.py` (run by `bench/accuracy`): the bundles of fixtures/handwritten, "
        "one rule of evidence each (issue 13), written by hand and rendered in seven vLLM header families; "
        "each event's expected gate is in fixtures/handwritten/truth.json.",
        "",
        f"**Gate accuracy {pct(t['gate'], t['events'])}** over {t['events']} events "
        f"({len(d['scenarios'])} scenarios x {len(fams)} families); gate and sub-kind "
        f"{pct(t['sub'], t['events'])}.",
        "",
        "| scenario | rule | events per family | " + " | ".join(fams) + " |",
        "|---|---|---|" + "---|" * len(fams),
    ]
    for s in d["scenarios"]:
        n = next(iter(s["per_family"].values()))["events"]
        cells = []
        for f in fams:
            r = s["per_family"][f]
            cell = pct(r["gate"], r["events"])
            if r["extra_events"]:
                cell += f" (+{r['extra_events']} events)"
            cells.append(cell)
        lines.append(f"| {s['scenario']} | {s['rule']} | {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    text = markdown(score())
    print(text)
    if len(argv) >= 2 and argv[0] == "--append":
        with open(argv[1], "a") as fh:
            fh.write("\n" + text)
    return 0


if __name__ == "__main__":
    sys.path.append(str(ROOT))
    raise SystemExit(main(sys.argv[1:]))
