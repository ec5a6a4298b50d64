"""A pressure interval of engine 'all' (vLLM's Rust frontend sums every engine on one stats line) counts
the events of every engine in it: a DP=2 server's per-engine /metrics counter events were '0 counted' in
the interval its Rust lines showed. Hand-written: a 0.34 Rust log and scrapes of engines 0 and 1."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from preemptlog import AnalyzeOptions, analyze

T0 = 1796119200  # 2026-12-01 10:00:00 UTC
RUST = (
    "(RustFrontend pid=300) INFO 12-01 10:01:{s:02d} [llm/src/log_stats.rs:300] Avg prompt tput: 100.0 toks/s, "
    "Avg generation tput: 900.0 toks/s, Reqs Running: {r}, Waiting: {w}, {p}GPU KV cache used: {kv}%, Prefix cache "
    "hit rate: 10.0%\n"
)


def test_an_all_engines_interval_counts_each_engine_s_events(tmp_path: Path) -> None:
    log = "(APIServer pid=100) INFO 12-01 10:00:01 [api_server.py:1896] vLLM API server version 0.34.0\n"
    log += RUST.format(s=0, r=80, w=0, p="", kv=70.0)
    log += RUST.format(s=10, r=100, w=10, p="Preemptions: 7, ", kv=98.5)
    log += RUST.format(s=20, r=96, w=14, p="Preemptions: 5, ", kv=99.0)
    (tmp_path / "vllm.log").write_text(log, encoding="utf-8")
    for off, e0, e1 in ((55, 0, 0), (65, 5, 2), (85, 8, 4)):
        page = "# TYPE vllm:num_preemptions_total counter\n"
        for e, v in (("0", e0), ("1", e1)):
            page += f'vllm:num_preemptions_total{{engine="{e}",model_name="m"}} {v}.0\n'
            page += f'vllm:num_preemptions_created{{engine="{e}",model_name="m"}} {T0 + 40}.0\n'
        (tmp_path / f"metrics-{T0 + off}.prom").write_text(page, encoding="utf-8")
    a = analyze([str(tmp_path)], AnalyzeOptions(tz="UTC"))
    s = a.summary()
    assert set(a.events.get_column("engine")) == {"0", "1"} and s["events"] == 12
    (iv,) = s["pressure_intervals"]
    assert iv["engine"] == "all"
    # the counter's events in (10:01:00, 10:01:20]: engine 0's 5 and 3, engine 1's 2 and 2, spread evenly
    lo, hi = datetime.fromisoformat(iv["since"]), datetime.fromisoformat(iv["end"])
    inside = a.events.filter((a.events["time"] > lo) & (a.events["time"] <= hi)).height
    assert inside > 0 and iv["counted_events_in_interval"] == inside
