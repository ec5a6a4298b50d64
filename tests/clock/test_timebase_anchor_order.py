"""Year anchors are listed in stream order (issue 18 round two: they came in hash order, so the
year assumption of a bundle with several timestamped streams named a different file from run
to run)."""

from __future__ import annotations

from pathlib import Path

from preemptlog.analysis import AnalyzeOptions, analyze

ROOT = Path(__file__).resolve().parents[2]


def _year_sources(path: Path) -> list[str]:
    a = analyze([str(path)], AnalyzeOptions(tz="UTC", rules=False))
    return [x.source for x in a.assumptions if x.topic == "year"]


def test_year_anchor_is_the_same_every_run() -> None:
    case = ROOT / "fixtures" / "handwritten" / "r2-decision-step-shortage"
    runs = [_year_sources(case) for _ in range(6)]
    assert all(r == runs[0] for r in runs)
    anchored = [s for s in runs[0] if s.startswith("a full timestamp in ")]
    assert anchored, runs[0]
    # The first stream (bundle order) with a full timestamp is the one named.
    assert len({s.split(" (")[0] for s in anchored}) == 1
