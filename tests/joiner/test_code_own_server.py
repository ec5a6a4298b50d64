"""``up_pressure`` / ``up_kv_max_before`` (the corroboration of vLLM's code) stay in the event's own server.

Two vLLM V1 servers in one bundle, each in its own folder with its own log and its own /metrics
scrapes, both calling their engine "0". Server A ran its KV cache at 99 % with requests waiting;
server B never passed 40 %. B's one counted preemption must not be corroborated by A's pressure
interval or A's 99 % (before: both were looked up by the engine label alone, so B's preemption read
"KV at the ceiling" from A's lines and scrapes).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest

from preemptlog import AnalyzeOptions, analyze

CREATED = datetime(2026, 12, 1, 10, 0, 3, tzinfo=UTC).timestamp()


def _stats(ts: str, waiting: int, kv: float) -> str:
    return (
        f"INFO 12-01 {ts} [loggers.py:208] Engine 000: Avg prompt throughput: 10.0 tokens/s, Avg generation "
        f"throughput: 200.0 tokens/s, Running: 4 reqs, Waiting: {waiting} reqs, GPU KV cache usage: {kv}%, "
        "Prefix cache hit rate: 0.0%"
    )


def _scrape(sec: int, n: int, waiting: int, kv: float) -> str:
    return (
        f"# scrape 2026-12-01T10:00:{sec}+00:00\n"
        "# TYPE vllm:num_preemptions_total counter\n"
        f'vllm:num_preemptions_total{{engine="0",model_name="m"}} {n}\n'
        f'vllm:num_preemptions_created{{engine="0",model_name="m"}} {CREATED}\n'
        f'vllm:num_requests_running{{engine="0",model_name="m"}} 4\n'
        f'vllm:num_requests_waiting{{engine="0",model_name="m"}} {waiting}\n'
        f'vllm:kv_cache_usage_perc{{engine="0",model_name="m"}} {kv / 100}\n'
    )


def _bundle(tmp_path: Path, logs: str = "", scrapes: str = "") -> Path:
    for tag, kv, waiting, counts in (("a", 99.0, 5, (0, 3, 6)), ("b", 40.0, 0, (0, 0, 1))):
        d = tmp_path / tag
        (d / logs).mkdir(parents=True, exist_ok=True)
        (d / scrapes).mkdir(parents=True, exist_ok=True)
        lines = [
            "INFO 12-01 10:00:00 [api_server.py:1043] vLLM API server version 0.26.0",
            "INFO 12-01 10:00:02 [kv_cache_utils.py:864] GPU KV cache size: 1,024 tokens",
            *(_stats(t, waiting, kv) for t in ("10:00:10", "10:00:20", "10:00:30")),
        ]
        (d / logs / "vllm.log").write_text("\n".join(lines) + "\n")
        (d / scrapes / "metrics.prom").write_text(
            "".join(_scrape(s, n, waiting, kv) for s, n in zip((15, 25, 35), counts))
        )
    return tmp_path


@pytest.mark.parametrize("logs,scrapes", [("", ""), ("logs", "metrics")])
def test_a_servers_preemption_is_corroborated_by_its_own_server_only(tmp_path: Path, logs: str, scrapes: str) -> None:
    # each server's files in its folder, or in subfolders of it (a/logs/vllm.log, a/metrics/metrics.prom)
    a = analyze([str(_bundle(tmp_path, logs, scrapes))], AnalyzeOptions(tz="UTC"))
    ev = a.events.select("event_id", "source").join(a.evidence, on="event_id")
    b = ev.filter(pl.col("source").str.contains(r"(^|/)b/(.*/)?metrics\.prom$"))
    assert b.height == 1
    row = b.row(0, named=True)
    # B's own gauges and lines: 40 %, never A's 99 %
    # the KV gauge's own line (the third scrape's line 21), never the scrape's first sample (the counter, 17)
    assert row["prom_kv_usage_at"] == 40.0 and row["prom_kv_usage_at_src"].endswith("metrics.prom:21")
    assert row["prom_kv_usage_at_src"].startswith("b/") or "/b/" in row["prom_kv_usage_at_src"]
    assert row["stats_kv_usage_at"] == 40.0 and row["stats_kv_usage_at_src"].endswith("vllm.log:5")
    assert "/b/" in "/" + row["stats_kv_usage_at_src"]
    assert row["up_kv_max_before"] == 40.0 and "b/" in row["up_kv_max_before_src"]
    assert row["up_pressure"] is None  # B shows no pressure interval; A's is not B's
    own = ev.filter(pl.col("source").str.contains(r"(^|/)a/(.*/)?metrics\.prom$"))
    assert own.height == 6
    assert own.get_column("up_kv_max_before").to_list() == [99.0] * 6
    assert all("/a/" in "/" + s and "vllm.log" in s for s in own.get_column("up_pressure_src").to_list())
