"""Two servers in one bundle, each in its own folder: a counter of one never takes the place of the
other's counts (reconcile: ``_server_keys``, the window of engine ``all``, ``since_start``).

``inc/a`` is one server's log, ``inc/b`` another's stock V1 log with its own /metrics. The whole
bundle's events are both servers' (the headline's per-incident lines already were): before, a Rust
frontend log's events (engine ``all``) in ``a`` were dropped inside ``b``'s scrape window, and ``b``'s
single reading took ``a``'s own events (``all``, or a V0 log's engine 0) off its count. Through the
CLI, a real subprocess.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from ..support.rust_bundle import ndjson_events

RUST = [
    "INFO 12-01 09:59:30 [startup.py:40] vLLM server version 0.34.0, serving model m",
    "(EngineCore pid=42) INFO 12-01 09:59:35 [core.py:101] Initializing a V1 LLM engine (v0.34.0) with config: "
    "model='m', max_seq_len=8192, enable_prefix_caching=True, enable_chunked_prefill=True",
    *(
        f"(RustFrontend pid=4300) INFO 12-01 10:00:{sec} [llm/src/log_stats.rs:300] Avg prompt tput: 10.0 toks/s, "
        f"Avg generation tput: 900.0 toks/s, Reqs Running: 60, Waiting: 20{pre}, GPU KV cache used: 99.0%, Prefix "
        "cache hit rate: 3.0%"
        for sec, pre in (("10", ""), ("20", ", Preemptions: 4"), ("30", ", Preemptions: 7"), ("40", ""))
    ),
]

V0_WARN = (
    "WARNING 12-01 {t} scheduler.py:1077] Sequence group cmpl-{r}-0 is preempted by PreemptionMode.RECOMPUTE "
    "mode because there is not enough KV cache space. This can affect the end-to-end performance. Increase "
    "gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
    "total_num_cumulative_preemption={n}"
)
V0 = [
    "INFO 12-01 10:00:00 api_server.py:149] vLLM API server version 0.6.3",
    "INFO 12-01 10:00:33 metrics.py:349] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 500.0 "
    "tokens/s, Running: 30 reqs, Swapped: 0 reqs, Pending: 98 reqs, GPU KV cache usage: 99.8%, CPU KV cache "
    "usage: 0.0%.",
    V0_WARN.format(t="10:00:34", r="a", n=1),
    V0_WARN.format(t="10:00:50", r="b", n=51),
]

STOCK = [
    "(APIServer pid=1) INFO 12-01 09:50:00 [api_server.py:1000] vLLM API server version 0.20.0",
    "(EngineCore_DP0 pid=42) INFO 12-01 09:50:05 [core.py:101] Initializing a V1 LLM engine (v0.20.0) with "
    "config: model='m', max_seq_len=8192",
    *(
        f"(APIServer pid=1) INFO 12-01 10:00:{sec} [loggers.py:266] Engine 000: Avg prompt throughput: 0.0 "
        "tokens/s, Avg generation throughput: 1890.2 tokens/s, Running: 41 reqs, Waiting: 23 reqs, GPU KV cache "
        "usage: 99.2%, Prefix cache hit rate: 12.5%"
        for sec in ("10", "20", "30")
    ),
]


def _bundle(tmp_path: Path, a_lines: list[str], readings: list[tuple[str, int]]) -> Path:
    inc = tmp_path / "inc"
    (inc / "a").mkdir(parents=True)
    (inc / "b").mkdir()
    (inc / "a" / "vllm.log").write_text("\n".join(a_lines) + "\n", encoding="utf-8")
    (inc / "b" / "vllm.log").write_text("\n".join(STOCK) + "\n", encoding="utf-8")
    for hms, v in readings:
        t = int(datetime.fromisoformat(f"2026-12-01T{hms}").replace(tzinfo=UTC).timestamp())
        (inc / "b" / f"metrics-{t}.prom").write_text(
            f'# TYPE vllm:num_preemptions_total counter\nvllm:num_preemptions_total{{engine="0",model_name="m"}} {v}.0\n',
            encoding="utf-8",
        )
    return inc


def _events(inc: Path) -> list[dict]:
    return ndjson_events(inc, "-q")


def _by_server(ev: list[dict]) -> dict[str, int]:
    out: dict[str, int] = {}
    for e in ev:
        k = e["source"].split("/")[1]
        out[k] = out.get(k, 0) + 1
    return out


def test_a_rust_log_is_not_dropped_in_another_servers_scrape_window(tmp_path):
    ev = _events(_bundle(tmp_path, RUST, [("10:00:00", 0), ("10:01:00", 5)]))
    assert _by_server(ev) == {"a": 11, "b": 5}


def test_another_servers_single_reading_keeps_its_count_beside_a_rust_log(tmp_path):
    ev = _events(_bundle(tmp_path, RUST, [("10:01:00", 5)]))
    assert _by_server(ev) == {"a": 11, "b": 5}


def test_another_servers_single_reading_keeps_its_count_beside_a_v0_log(tmp_path):
    ev = _events(_bundle(tmp_path, V0, [("10:01:00", 5)]))
    assert _by_server(ev) == {"a": 51, "b": 5}
