"""Recomputed only where it is known (issue 38, item 11).

A preemption throws away the victim's computed tokens; with prefix caching on, part of them can come
back from the cache when the victim runs again. Only the plugin's resume records say how much (the
split: lost, re-served, recomputed, each exact). Without them, under prefix caching, the lost tokens
are an upper bound of the recompute, and the headline says so; with prefix caching off they are the
recompute. Whether prefix caching was on: ``enable_prefix_caching`` seen (the engine config line),
vLLM's block hashes on the arrival records (vLLM hashes blocks only with prefix caching on), else
the engine generation's default (V1 on, V0 off), through the engine registry.

Shapes, on the hand-written v1-records fixture (four preemptions, 489 tokens lost): the engine config
line saying on (no resume records: "up to"; with resume records: the exact split, as before) and off
(the recompute); records only, with block hashes (on) and without anything saying (not known: the
tokens as before); the same records as a tar.gz bundle.
"""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

from preemptlog.analysis import AnalyzeOptions, analyze

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "findings" / "v1-records"
CONFIG = (
    "INFO 12-01 10:00:01 [core.py:61] Initializing a V1 LLM engine (v0.26.0) with config: model='m', "
    "speculative_config=None, max_seq_len=2048, enable_prefix_caching={apc}, chunked_prefill_enabled=True, seed=0\n"
)


def _bundle(tmp_path: Path, *, apc: bool | None = None, log: bool = True, hashes: bool = False, resumes=()) -> Path:
    d = tmp_path / "b"
    shutil.copytree(FIX, d)
    if not log:
        (d / "vllm.log").unlink()
    elif apc is not None:
        lines = (d / "vllm.log").read_text().splitlines(keepends=True)
        (d / "vllm.log").write_text(lines[0] + CONFIG.format(apc=apc) + "".join(lines[1:]))
    recs = [json.loads(x) for x in (d / "records.jsonl").read_text().splitlines() if x.strip()]
    if hashes:
        for r in recs:
            if r["type"] == "request" and r["phase"] == "arrival":
                r["block_hashes"] = [f"{r['request_id']}{k:014x}" for k in range(r["prompt_tokens"] // 16)]
    for step, rid, cached, t in resumes:
        recs.append(
            {"type": "request", "time": t, "step": step, "request_id": rid, "phase": "resume"}
            | {"num_computed_tokens": cached, "v": 2}
        )
    (d / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return d


def _run(path: Path):
    a = analyze([str(path)], AnalyzeOptions(tz="UTC", year=2026))
    return a.findings.recompute, a.summary()["findings_headline"]


def test_prefix_caching_seen_on_and_no_resume_records_is_an_upper_bound(tmp_path):
    rc, head = _run(_bundle(tmp_path, apc=True))
    assert rc["tokens"] == 489 and rc["tokens_recomputed_at_most"]
    assert rc["prefix_caching"]["on"] is True and not rc["prefix_caching"]["assumed"]
    assert rc["prefix_caching"]["basis"].startswith("enable_prefix_caching=True (seen, b/vllm.log:2)")
    assert head.startswith(
        "up to 489 tokens recomputed (lost to preemption, at most 33% of the tokens computed: prefix caching was "
        "on, no resume records)"
    ), head


def test_with_resume_records_the_three_parts_are_exact_as_before(tmp_path):
    resumes = [(50, "r1", 96, "2026-12-01T10:00:14Z"), (70, "r1", 112, "2026-12-01T10:00:19Z")]
    resumes += [(85, "r1", 200, "2026-12-01T10:00:24Z"), (90, "r2", 30, "2026-12-01T10:00:27Z")]
    rc, head = _run(_bundle(tmp_path, apc=True, resumes=resumes))
    assert not rc["tokens_recomputed_at_most"] and rc["prefix_cache"]["preemptions"] == 4
    assert head.startswith("489 tokens lost to preemption: 388 re-served from the prefix cache, 101 recomputed;"), head
    assert "up to" not in head


def test_prefix_caching_off_the_lost_tokens_are_the_recompute(tmp_path):
    rc, head = _run(_bundle(tmp_path, apc=False))
    assert rc["prefix_caching"]["on"] is False and not rc["tokens_recomputed_at_most"]
    assert head.startswith("489 tokens recomputed (33% of the tokens computed)"), head


def test_block_hashes_on_the_arrival_records_say_prefix_caching_was_on(tmp_path):
    rc, head = _run(_bundle(tmp_path, log=False, hashes=True))
    assert rc["prefix_caching"]["on"] is True and "block hashes on the arrival records" in rc["prefix_caching"]["basis"]
    assert head.startswith("up to 489 tokens recomputed (lost to preemption: prefix caching was on, no resume"), head


def test_records_that_say_nothing_leave_the_tokens_as_they_are(tmp_path):
    """No log, no hashes: nothing says whether prefix caching was on; the tokens are said as before and
    the JSON says it is not known."""
    rc, head = _run(_bundle(tmp_path, log=False))
    assert rc["prefix_caching"]["on"] is None and "not in the bundle" in rc["prefix_caching"]["basis"]
    assert not rc["tokens_recomputed_at_most"] and head.startswith("489 tokens recomputed"), head


def test_the_same_as_a_tar_gz_bundle(tmp_path):
    d = _bundle(tmp_path, apc=True)
    arc = tmp_path / "incident.tar.gz"
    with tarfile.open(arc, "w:gz") as tf:
        tf.add(d, arcname="incident")
    rc, head = _run(arc)
    assert rc["tokens_recomputed_at_most"] and head.startswith("up to 489 tokens recomputed"), head
