"""Stats-line evidence stays in the event's own server: two servers' logs in one bundle.

Two vLLM servers (two log files, each with its own start banner) both label their only engine "0".
An event of one server must read the stats lines of its own log, never the other server's line of
the same second (before: the as-of join keyed on the engine label alone picked whichever line sorted
last, so server A's preemption cited server B's KV usage).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from preemptlog import AnalyzeOptions, analyze

W = (
    "Sequence group {rid} is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache "
    "space. This can affect the end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size "
    "to provide more KV cache memory. total_num_cumulative_preemption={n}"
)


def _stats(ts: str, run: int, pend: int, kv: float) -> str:
    return (
        f"INFO 12-01 {ts} [metrics.py:486] Avg prompt throughput: 10.0 tokens/s, Avg generation throughput: "
        f"200.0 tokens/s, Running: {run} reqs, Swapped: 0 reqs, Pending: {pend} reqs, GPU KV cache usage: {kv}%, "
        "CPU KV cache usage: 0.0%."
    )


def _log(tag: str, kv: float, pend: int) -> str:
    lines = [
        "INFO 12-01 10:00:00 [api_server.py:1090] vLLM API server version 0.8.5",
        "INFO 12-01 10:00:00 [executor_base.py:112] # cuda blocks: 1280, # CPU blocks: 2048",
        _stats("10:00:05", 30, pend, kv),
        "WARNING 12-01 10:00:06 [scheduler.py:1775] " + W.format(rid=f"{tag}-a", n=1),
        _stats("10:00:10", 28, pend, kv),
    ]
    return "\n".join(lines) + "\n"


def _bundle(tmp_path: Path) -> Path:
    for tag, kv, pend in (("A", 99.5, 8), ("B", 60.0, 0)):
        d = tmp_path / tag.lower()
        d.mkdir()
        (d / "vllm.log").write_text(_log(tag, kv, pend))
    return tmp_path


def _evidence(tmp_path: Path) -> pl.DataFrame:
    a = analyze([str(_bundle(tmp_path))], AnalyzeOptions(tz="UTC", year=2026, rules=False))
    return a.events.select("event_id", "request_id", "source").join(a.evidence, on="event_id")


def test_each_servers_event_reads_its_own_stats_lines(tmp_path: Path) -> None:
    ev = _evidence(tmp_path)
    a = ev.filter(pl.col("request_id") == "A-a").row(0, named=True)
    b = ev.filter(pl.col("request_id") == "B-a").row(0, named=True)
    assert a["source"].endswith("a/vllm.log") and b["source"].endswith("b/vllm.log")
    # as of 10:00:06 each server's own 10:00:05 line (line 3 of its file)
    assert a["stats_kv_usage_at"] == 99.5
    assert a["stats_kv_usage_at_src"].endswith("a/vllm.log:3")
    assert a["stats_waiting_at"] == 8
    assert b["stats_kv_usage_at"] == 60.0
    assert b["stats_kv_usage_at_src"].endswith("b/vllm.log:3")
    assert b["stats_waiting_at"] == 0
    # the window maxima too: A never saw B's lines, B never saw A's 99.5 %
    assert a["stats_kv_usage_max"] == 99.5 and "b/vllm.log" not in a["stats_kv_usage_max_src"]
    assert b["stats_kv_usage_max"] == 60.0 and "a/vllm.log" not in b["stats_kv_usage_max_src"]


def _stats_off_bundle(tmp_path: Path, folders: bool) -> Path:
    """Server A logs its preemption with its stats lines off (--disable-log-stats); server B logs stats
    lines only. Side by side in one folder, or each in its own."""
    a = [
        "INFO 12-01 10:00:00 [api_server.py:1090] vLLM API server version 0.8.5",
        "WARNING 12-01 10:00:06 [scheduler.py:1775] " + W.format(rid="A-a", n=1),
    ]
    b = [
        "INFO 12-01 10:00:00 [api_server.py:1090] vLLM API server version 0.8.5",
        _stats("10:00:01", 7, 3, 98.0),
        _stats("10:00:05", 7, 3, 99.0),
        _stats("10:00:10", 7, 3, 99.0),
    ]
    for name, lines in (("a", a), ("b", b)):
        d = tmp_path / name if folders else tmp_path
        d.mkdir(exist_ok=True)
        (d / f"{name}.log").write_text("\n".join(lines) + "\n")
    return tmp_path


@pytest.mark.parametrize("folders", [False, True])
def test_a_log_without_stats_lines_never_reads_another_logs(tmp_path: Path, folders: bool) -> None:
    """A log's event is its own server's: with no stats line in its own log, its stats evidence is
    not evaluable, never the line of another log beside it (before: the folder's other log, another
    server, gave A's preemption B's 99 % and 7 running), and the recompute share's processed tokens
    are not B's either."""
    a = analyze([str(_stats_off_bundle(tmp_path, folders))], AnalyzeOptions(tz="UTC", year=2026))
    ev = a.events.select("event_id", "request_id").join(a.evidence, on="event_id")
    row = ev.filter(pl.col("request_id") == "A-a").row(0, named=True)
    for col in ("stats_kv_usage_at", "stats_running_at", "stats_waiting_at", "stats_kv_usage_max"):
        assert row[col] is None, (col, row[col])
    # (code_engine is the bundle's vLLM generation, a fact of the engine's configuration: not per server)
    mixed = {k: v for k, v in row.items() if k.endswith("_src") and not k.startswith("code_") and "b.log" in str(v)}
    assert not mixed, mixed
    assert row["up_pressure"] is None and row["up_kv_max_before"] is None
    rc = a.findings.recompute
    assert rc["processed_tokens"] is None and rc["processed_window"] is None
    cited = [e["src"] for row in a.findings.per_event.get_column("mechanism_evidence").to_list() for e in row or []]
    assert cited and not any("b.log" in str(c) for c in cited), cited
