"""A Rust-frontend log beside a /metrics reading counted since the engine's start: nothing twice.

The Rust frontend's stats line (vLLM 0.33+) counts every engine's preemptions (engine ``all``);
``vllm:num_preemptions_total`` counts per engine since the engine started. The on-call shape: the log
and one ``curl /metrics`` taken after the incident. The reading's count less the log's own events is
what the log does not hold: the log's ``all`` events are some engine's own (before: they were nobody's,
and 11 preemptions were reported as 22, "exact"). A scrape series whose first reading falls inside a
log tick: that reading says how many of the tick's preemptions came before it. Through the CLI, a real
subprocess.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

HEAD = [
    "INFO 12-01 09:59:30 [startup.py:40] vLLM server version 0.34.0, serving model m",
    "(EngineCore pid=42) INFO 12-01 09:59:35 [core.py:101] Initializing a V1 LLM engine (v0.34.0) with config: "
    "model='m', max_seq_len=8192, enable_prefix_caching=True, enable_chunked_prefill=True",
]


def _rust(sec: int, running: int, waiting: int, kv: float, p: int = 0) -> str:
    pre = f", Preemptions: {p}" if p else ""
    return (
        f"(RustFrontend pid=4300) INFO 12-01 10:00:{sec:02d} [llm/src/log_stats.rs:300] Avg prompt tput: 10.0 "
        f"toks/s, Avg generation tput: 900.0 toks/s, Reqs Running: {running}, Waiting: {waiting}{pre}, GPU KV cache "
        f"used: {kv:.1f}%, Prefix cache hit rate: 3.0%"
    )


def _bundle(tmp_path: Path, scrapes: list[tuple[str, dict[str, int]]]) -> Path:
    b = tmp_path / "incident"
    b.mkdir()
    lines = [*HEAD, _rust(10, 60, 0, 70.0), _rust(20, 64, 30, 99.0, p=4), _rust(30, 58, 25, 98.7, p=7)]
    lines.append(_rust(40, 40, 0, 60.0))
    (b / "vllm.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
    for iso, values in scrapes:
        t = int(datetime.fromisoformat(iso).replace(tzinfo=UTC).timestamp())
        body = "# TYPE vllm:num_preemptions_total counter\n" + "".join(
            f'vllm:num_preemptions_total{{engine="{e}",model_name="m"}} {v}.0\n' for e, v in values.items()
        )
        (b / f"metrics-{t}.prom").write_text(body, encoding="utf-8")
    return b


def _summary(b: Path, tmp_path: Path) -> dict:
    out = tmp_path / "out.json"
    r = subprocess.run(
        [sys.executable, "-m", "preemptlog", "analyze", str(b), "--year", "2026", "--tz", "UTC", "-q"]
        + ["-f", "json", "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    return json.loads(out.read_text(encoding="utf-8"))


def test_one_reading_after_the_incident_holds_the_logs_own_preemptions(tmp_path):
    doc = _summary(_bundle(tmp_path, [("2026-12-01T10:01:00", {"0": 11})]), tmp_path)
    assert doc["summary"]["reconciliation"]["total"] == 11
    assert len(doc["events"]) == 11
    assert all(e["source"].endswith("vllm.log") for e in doc["events"])


def test_one_reading_of_two_engines_holds_the_logs_sum(tmp_path):
    """Two data-parallel engines, 5 + 6 by the reading: the log's 11 (every engine summed) are those."""
    doc = _summary(_bundle(tmp_path, [("2026-12-01T10:01:00", {"0": 5, "1": 6})]), tmp_path)
    assert doc["summary"]["reconciliation"]["total"] == 11


def test_a_scrape_series_starting_inside_a_tick_splits_it_by_its_first_reading(tmp_path):
    """The counter read 2 at 10:00:12, inside the tick (10:00:10, 10:00:20] of 4: 2 of them came before
    the scrapes, 2 after; then +9 to 10:01:00 (2 + 7). 11 in all (before: 12, the first reading's 2
    counted again beside the log's)."""
    doc = _summary(_bundle(tmp_path, [("2026-12-01T10:00:12", {"0": 2}), ("2026-12-01T10:01:00", {"0": 11})]), tmp_path)
    assert doc["summary"]["reconciliation"]["total"] == 11
    before = [e for e in doc["events"] if e["time"] and e["time"][11:19] <= "10:00:12"]
    assert len(before) == 2, before
