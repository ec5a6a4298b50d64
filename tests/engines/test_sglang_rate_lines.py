"""SGLang's docs set 'about once a minute is okay' against its 'KV cache pool is full. Retract requests.'
message: the rate the headline and the fix quote is of retraction lines, a line's ``#retracted_reqs: N``
requests one retraction (engines/sglang/summary.py ``occurrences``). Before: 12 requests retracted on 3
lines over 2 minutes were "6 per minute"; the lines came 1.5 a minute.
Through the CLI, a real subprocess; the log is written by hand.
"""

from __future__ import annotations

import json

from tests.conftest import run_cli

ARGS = (
    "[2025-11-03 14:00:00.010] server_args=ServerArgs(model_path='m', tp_size=1, dp_size=1, "
    "max_running_requests=128, schedule_conservativeness=1.0, retraction_policy='length')"
)
RETRACT = (
    "[2025-11-03 14:{m:02d}:00.512] KV cache pool is full. Retract requests. #retracted_reqs: {n}, "
    "#new_token_ratio: 0.1274 -> 0.4410"
)


def _run(tmp_path, per_line: list[int], every_min: int = 1):
    p = tmp_path / "sglang.log"
    lines = [RETRACT.format(m=1 + every_min * i, n=n) for i, n in enumerate(per_line)]
    p.write_text("\n".join([ARGS, *lines]) + "\n")
    text = run_cli("analyze", str(p), "--tz", "UTC")
    doc = run_cli("analyze", str(p), "--tz", "UTC", "-f", "json")
    assert text.returncode == 0 and doc.returncode == 0, text.stderr
    return text.stderr, json.loads(doc.stdout)["summary"]


def test_the_rate_counts_lines_not_the_requests_they_retract(tmp_path):
    head, s = _run(tmp_path, [4, 4, 4])
    assert s["sglang"]["retractions"] == 12
    assert s["sglang"]["per_minute"] == 1.5
    assert "on 3 line(s), 1.5 per minute" in " ".join(head.split())


def test_lines_once_a_minute_are_within_the_docs_whatever_they_retract(tmp_path):
    # 3 lines 3 minutes apart: 0.5 a minute, within the docs, though they retract 27 requests (4.5 a minute)
    head, s = _run(tmp_path, [9, 9, 9], every_min=3)
    assert s["sglang"]["retractions"] == 27
    assert s["sglang"]["per_minute"] <= s["sglang"]["docs_ok_per_minute"]
    assert "within its docs'" in " ".join(head.split())
