"""A Rust-frontend log beside /metrics scrapes: where its counts agree with the counter, its timing stands.

The Rust frontend's stats line (vLLM 0.33+, ``VLLM_USE_RUST_FRONTEND=1``) counts every preemption of
its ~10 s tick, summed over the engines (engine ``all``). Against a counter of one engine that is the
same count as the counter's, and finer in time than a scrape a minute apart: reconcile rule 1 keeps
the log's events (its ``file:line`` and intervals) as it does for a Python ``Preemptions: N`` line.
With several data-parallel engines the counter's per-engine events stand (the log cannot say which
engine). Through the CLI, a real subprocess.
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


def _scrape(folder: Path, iso: str, values: dict[str, int]) -> None:
    t = int(datetime.fromisoformat(iso).replace(tzinfo=UTC).timestamp())
    body = "# TYPE vllm:num_preemptions_total counter\n" + "".join(
        f'vllm:num_preemptions_total{{engine="{e}",model_name="m"}} {v}.0\n' for e, v in values.items()
    )
    (folder / f"metrics-{t}.prom").write_text(body, encoding="utf-8")


def _bundle(tmp_path: Path, scrapes: list[tuple[str, dict[str, int]]]) -> Path:
    b = tmp_path / "incident"
    b.mkdir()
    lines = [*HEAD, _rust(10, 60, 0, 70.0), _rust(20, 64, 30, 99.0, p=4), _rust(30, 58, 25, 98.7, p=7)]
    lines.append(_rust(40, 40, 0, 60.0))
    (b / "vllm.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
    for iso, values in scrapes:
        _scrape(b, iso, values)
    return b


def _events(b: Path) -> list[dict]:
    r = subprocess.run(
        [sys.executable, "-m", "preemptlog", "analyze", str(b), "--year", "2026", "--tz", "UTC", "-f", "ndjson"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    return [json.loads(x) for x in r.stdout.splitlines() if x.strip()]


def test_one_engines_counter_agreeing_keeps_the_rust_lines_timing(tmp_path):
    """Scrapes a minute apart (0 -> 11) around 4 + 7 preemptions the log places in 10 s ticks: the 11
    events are the log's, at vllm.log:4 and vllm.log:5, inside (10:00:10, 10:00:20] and (10:00:20,
    10:00:30]; before, the counter's 11 were spread over the minute (one at 10:00:54)."""
    b = _bundle(tmp_path, [("2026-12-01T10:00:00", {"0": 0}), ("2026-12-01T10:01:00", {"0": 11})])
    ev = _events(b)
    assert len(ev) == 11
    by_line: dict[int, int] = {}
    for e in ev:
        assert e["source"].endswith("vllm.log"), e
        by_line[e["line"]] = by_line.get(e["line"], 0) + 1
        assert "10:00:10" < e["time"][11:19] <= "10:00:30"
    assert by_line == {4: 4, 5: 7}


def test_two_engines_counter_keeps_its_engines(tmp_path):
    """With two data-parallel engines the counter says which engine: its events stand (the log's line
    says only 'all')."""
    b = _bundle(tmp_path, [("2026-12-01T10:00:00", {"0": 0, "1": 0}), ("2026-12-01T10:01:00", {"0": 5, "1": 6})])
    ev = _events(b)
    assert len(ev) == 11
    assert sorted({e["engine"] for e in ev}) == ["0", "1"]
    assert all(e["source"].endswith(".prom") for e in ev)


def test_a_counter_that_disagrees_stands(tmp_path):
    """12 on the counter against the log's 11: not the same count, the counter's events stand."""
    b = _bundle(tmp_path, [("2026-12-01T10:00:00", {"0": 0}), ("2026-12-01T10:01:00", {"0": 12})])
    ev = _events(b)
    assert len(ev) == 12
    assert all(e["source"].endswith(".prom") for e in ev)
