"""Recompute under prefix caching: lost, re-served from the cache, truly recomputed (issue 27, item 2).

Shapes, on the hand-written v1-records fixture (four preemptions, lost 119, 130, 150, 90): as it
is (no resume records: no split; vLLM 0.26's prefix caching is on by default, so the lost tokens are an
upper bound of the recompute, said); with resume records for r1's three
preemptions (cache hits 96, 112, and 200, more than the 150 lost: at most what was lost) and none
for r2's (said); a resume record before the preemption does not count for it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from preemptlog.analysis import AnalyzeOptions, analyze

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "findings" / "v1-records"


def _resume(step: int, rid: str, cached: int, t: str) -> str:
    return json.dumps(
        {"type": "request", "time": t, "step": step, "request_id": rid, "phase": "resume"}
        | {"num_computed_tokens": cached, "v": 2}
    )


def _bundle(tmp_path: Path, extra: list[str]) -> Path:
    d = tmp_path / "b"
    shutil.copytree(FIX, d)
    with (d / "records.jsonl").open("a") as fh:
        fh.write("".join(x + "\n" for x in extra))
    return d


def _run(d: Path):
    a = analyze([str(d)], AnalyzeOptions(tz="UTC", year=2026))
    return a.findings.recompute, a.summary()["findings_headline"]


def test_without_resume_records_there_is_no_split(tmp_path):
    rc, head = _run(_bundle(tmp_path, []))
    assert "prefix_cache" not in rc and rc["tokens"] == 489
    # vLLM 0.26 (V1) has prefix caching on by default: without resume records the 489 lost tokens are an
    # upper bound of the recompute (issue 38, item 11)
    assert rc["tokens_recomputed_at_most"] and rc["prefix_caching"]["on"] and rc["prefix_caching"]["assumed"]
    assert head.startswith("up to 489 tokens recomputed (lost to preemption, at most 33% of the tokens computed")


def test_resume_records_split_lost_cached_and_recomputed(tmp_path):
    extra = [
        _resume(50, "r1", 96, "2026-12-01T10:00:14Z"),
        _resume(70, "r1", 112, "2026-12-01T10:00:19Z"),
        _resume(85, "r1", 200, "2026-12-01T10:00:24Z"),
        _resume(30, "r2", 64, "2026-12-01T10:00:10Z"),  # before r2's preemption at step 81: not its resume
    ]
    rc, head = _run(_bundle(tmp_path, extra))
    pc = rc["prefix_cache"]
    assert pc["tokens_lost"] == 119 + 130 + 150 and pc["tokens_from_cache"] == 96 + 112 + 150
    assert pc["tokens_recomputed"] == 399 - 358 and pc["preemptions"] == 3
    assert pc["preemptions_without_resume"] == 1 and "records.jsonl:" in pc["basis"]
    assert rc["tokens"] == 489  # the lost tokens, as before
    assert head.startswith(
        "399 tokens lost to preemption: 358 re-served from the prefix cache, 41 recomputed, 1 preemption(s) not resumed"
    )
