"""SGLang's 'Testing retraction.' lines (SGLANG_TEST_RETRACT forces a retraction every
SGLANG_TEST_RETRACT_INTERVAL steps, whatever the pool holds): the pool's level around one does not
make it G1 (rules/default.toml ``forced_retraction``), and the change to make is turning the switch off,
ranked by the events it addresses among SGLang's KV levers. Hand-written 0.5.10+ logs."""

from __future__ import annotations

import json
from pathlib import Path

from ..conftest import run_cli

BATCH = (
    "[2026-09-13 16:06:{s:02d}] Decode batch, #running-req: 60, #token: 640000, token usage: 0.96, cuda graph: True, "
    "gen throughput (token/s): 429.10, #queue-req: 13"
)
FORCED = "[2026-09-13 16:06:{s:02d}] Testing retraction. #retracted_reqs: 1, #new_tokens_gained: 646"
FULL = (
    "[2026-09-13 16:06:{s:02d}] KV cache pool is full. Retract requests. #retracted_reqs: 1, #new_tokens_gained: 646, "
    "#new_token_ratio: 0.3487 -> 0.4000"
)


def _write(tmp_path: Path, lines: list[str]) -> Path:
    p = tmp_path / "sglang.log"
    p.write_text("\n".join(lines) + "\n")
    return p


def _summary(path: Path) -> dict:
    out = run_cli("analyze", str(path), "--tz", "UTC", "-f", "json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_forced_retractions_at_a_full_pool_are_no_gate_and_the_switch_is_the_change(tmp_path: Path) -> None:
    p = _write(tmp_path, [BATCH.format(s=0), FORCED.format(s=7), FORCED.format(s=8)])
    doc = _summary(p)
    ev = sorted(doc["events"], key=lambda e: e["line"])
    # before: G1-kv-space from the batch line's 96 % with 13 queued (G1-kv-exhausted-pressure)
    assert [e["gate"] for e in ev] == ["undetermined", "undetermined"]
    assert [e["mechanism"] for e in ev] == ["test-retraction", "test-retraction"]
    fixes = doc["summary"]["fixes"]
    top = fixes[0]
    assert (top["option"], top["current"], top["suggested"]) == ("SGLANG_TEST_RETRACT", "on", "unset")
    assert top["events_addressed"] == 2 and top["rank"] == 1
    assert f"first {p}:2" in top["inputs"][0]


def test_forced_and_pressure_retractions_each_get_their_own(tmp_path: Path) -> None:
    lines = [BATCH.format(s=0), FULL.format(s=2), FULL.format(s=3), FULL.format(s=4), FORCED.format(s=5)]
    p = _write(tmp_path, lines)
    doc = _summary(p)
    by_line = {e["line"]: (e["gate"], e["mechanism"]) for e in doc["events"]}
    assert by_line[2][0] == by_line[3][0] == by_line[4][0] == "G1-kv-space"
    assert by_line[5] == ("undetermined", "test-retraction")
    fixes = doc["summary"]["fixes"]
    test = [f for f in fixes if f["option"] == "SGLANG_TEST_RETRACT"]
    assert len(test) == 1 and test[0]["events_addressed"] == 1
    # the KV levers address the three pressure retractions and rank first
    assert fixes[0]["option"] != "SGLANG_TEST_RETRACT" and fixes[0]["events_addressed"] == 3
    assert [f["rank"] for f in fixes] == list(range(1, len(fixes) + 1))


def test_no_forced_line_no_switch_fix(tmp_path: Path) -> None:
    p = _write(tmp_path, [BATCH.format(s=0), FULL.format(s=2), FULL.format(s=3)])
    fixes = _summary(p)["summary"]["fixes"]
    assert fixes and not [f for f in fixes if f["option"] == "SGLANG_TEST_RETRACT"]


def test_explain_says_the_mechanism(tmp_path: Path) -> None:
    p = _write(tmp_path, [BATCH.format(s=0), FORCED.format(s=7)])
    out = run_cli("explain", "sglang.log:2", str(p), "--tz", "UTC", "-f", "table")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    mech = [ln for ln in text.splitlines() if ln.startswith("mechanism: ")]
    assert mech and mech[0].startswith("mechanism: test-retraction (high; rule M-sglang-test-retraction)")
    assert "SGLANG_TEST_RETRACT" in text.split("mechanism: ", 1)[1]
    assert "the bundle has no the" not in text
