"""A vLLM 0.34 Rust-frontend log and its /metrics readings, written by hand, and the CLI's ndjson events of
a bundle (tests/events: the Rust log's timing, its first reading, two servers' counts)."""

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


def rust_line(sec: int, running: int, waiting: int, kv: float, p: int = 0) -> str:
    """The Rust frontend's stats line at 10:00:``sec`` (llm/src/log_stats.rs), ``Preemptions: p`` when p."""
    pre = f", Preemptions: {p}" if p else ""
    return (
        f"(RustFrontend pid=4300) INFO 12-01 10:00:{sec:02d} [llm/src/log_stats.rs:300] Avg prompt tput: 10.0 "
        f"toks/s, Avg generation tput: 900.0 toks/s, Reqs Running: {running}, Waiting: {waiting}{pre}, GPU KV cache "
        f"used: {kv:.1f}%, Prefix cache hit rate: 3.0%"
    )


def counter_scrape(folder: Path, iso: str, values: dict[str, int]) -> None:
    """``metrics-<epoch>.prom`` in ``folder``: vllm:num_preemptions_total per engine at ``iso`` (UTC)."""
    t = int(datetime.fromisoformat(iso).replace(tzinfo=UTC).timestamp())
    body = "# TYPE vllm:num_preemptions_total counter\n" + "".join(
        f'vllm:num_preemptions_total{{engine="{e}",model_name="m"}} {v}.0\n' for e, v in values.items()
    )
    (folder / f"metrics-{t}.prom").write_text(body, encoding="utf-8")


def rust_incident(tmp_path: Path, scrapes: list[tuple[str, dict[str, int]]]) -> Path:
    """``incident/``: a Rust log of 11 preemptions (4 at 10:00:20, 7 at 10:00:30) and the readings given."""
    b = tmp_path / "incident"
    b.mkdir()
    lines = [*HEAD, rust_line(10, 60, 0, 70.0), rust_line(20, 64, 30, 99.0, p=4), rust_line(30, 58, 25, 98.7, p=7)]
    lines.append(rust_line(40, 40, 0, 60.0))
    (b / "vllm.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
    for iso, values in scrapes:
        counter_scrape(b, iso, values)
    return b


def ndjson_events(path: Path, *extra: str) -> list[dict]:
    """``preemptlog analyze PATH --year 2026 --tz UTC -f ndjson`` through a real subprocess: its events."""
    r = subprocess.run(
        [sys.executable, "-m", "preemptlog", "analyze", str(path), "--year", "2026", "--tz", "UTC", *extra]
        + ["-f", "ndjson"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    return [json.loads(x) for x in r.stdout.splitlines() if x.strip()]
