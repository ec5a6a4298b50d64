"""SGLang, written by hand: one retraction is not "frequent".

SGLang's docs (sglang-facts.md 2.4): frequent "KV cache pool is full. Retract requests." -> raise
--schedule-conservativeness to about 1.3; "occasionally but not frequently (~1 time per minute), it is
okay". The change is advised only when the rate the bundle shows is above that. A single retraction is
rated over its log's span (the first to the last timed line of its log): at most once a minute, so the
change is left out with the numbers (``fixes_dropped``), and the headline says the rate against the
docs' 'about once a minute is okay'. Two or more keep their own rate (a burst: its count).

Before: ``Top fix: --schedule-conservativeness 1.0 -> 1.3 (... SGLang's docs: frequent retractions ->
about 1.3)`` for one retraction in a 10-minute log at 40 % KV usage.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_cli

ARGS = (
    "[2026-11-02 08:14:50] server_args=ServerArgs(model_path='q', tp_size=1, dp_size=1, "
    "schedule_conservativeness=1.0, retraction_policy='length')"
)
DECODE = (
    "[2026-11-02 {t}] Decode batch, #running-req: 60, #token: 20000, token usage: 0.40, cuda graph: True, "
    "gen throughput (token/s): 900.00, #queue-req: 0"
)
KV = (
    "[2026-11-02 {t}] KV cache pool is full. Retract requests. #retracted_reqs: 1, #new_tokens_gained: 10, "
    "#new_token_ratio: 0.4000 -> 0.5000"
)


def run(tmp_path: Path, lines: list[str]) -> tuple[dict, str]:
    (tmp_path / "t2").mkdir()
    (tmp_path / "t2" / "server.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = run_cli("analyze", str(tmp_path / "t2"), "--tz", "UTC", "-f", "json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["summary"], " ".join(out.stderr.split())


def options(s: dict) -> list[str]:
    return [x["option"] for x in s["fixes"]]


def test_one_retraction_in_a_ten_minute_log_is_within_the_docs_okay_rate(tmp_path):
    s, text = run(tmp_path, [ARGS, DECODE.format(t="08:15:02"), KV.format(t="08:25:05"), DECODE.format(t="08:25:06")])
    assert "--schedule-conservativeness" not in options(s)
    assert "Top fix: --schedule-conservativeness" not in text
    why = next(x["why"] for x in s["fixes_dropped"] if x["id"] == "sglang_schedule_conservativeness")
    assert why.startswith(
        "1 retraction (t2/server.log:3) in the log's 10.3 min (2026-11-02T08:14:50+00:00 to 2026-11-02T08:25:06+00:00), "
        "0.10 per minute: within what SGLang's docs call okay"
    ), why
    assert (s["sglang"]["per_minute"], s["sglang"]["span_s"], s["sglang"]["rate_over"]) == (0.1, 616.0, "log")
    assert (
        "'KV cache pool is full' on 1 line(s), 1 in the log's 10.3 min, 0.1 per minute "
        "(within its docs' 'about once a minute is okay')"
    ) in s["headline"]


def test_one_retraction_in_a_short_log_is_at_most_once_a_minute(tmp_path):
    s, _ = run(tmp_path, [ARGS, DECODE.format(t="08:14:55"), KV.format(t="08:15:05")])
    assert "--schedule-conservativeness" not in options(s)
    why = next(x["why"] for x in s["fixes_dropped"] if x["id"] == "sglang_schedule_conservativeness")
    assert "in the log's 15 s" in why and "at most once a minute" in why, why
    assert "1 in the log's 15 s (within its docs' 'about once a minute is okay')" in s["headline"]


def test_three_retraction_lines_in_two_seconds_still_get_the_docs_change(tmp_path):
    lines = [ARGS, DECODE.format(t="08:15:02"), *(KV.format(t=f"08:25:0{i}") for i in (5, 6, 7))]
    s, text = run(tmp_path, lines)
    assert "--schedule-conservativeness" in options(s)
    assert "3 within a minute (more often than its docs' 'about once a minute is okay')" in s["headline"]
    assert "rate_over" not in s["sglang"]
