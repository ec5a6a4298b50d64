"""The headline's pressure words (render/summary.py ``cause``) are the pressure its events' own evidence
cites: never another DP engine's, another server's log's or another hour's. A bundle whose events see
their own pressure still says it."""

from __future__ import annotations

from pathlib import Path

from preemptlog import AnalyzeOptions, analyze


def _v1(t: str, eng: int, running: int, waiting: int, kv: float, pre: int | None = None) -> str:
    p = f", Preemptions: {pre}" if pre else ""
    return (
        f"(APIServer pid=1) INFO 12-01 {t} [loggers.py:208] Engine {eng:03d}: Avg prompt throughput: 10.0 tokens/s, "
        f"Avg generation throughput: 200.0 tokens/s, Running: {running} reqs, Waiting: {waiting} reqs{p}, "
        f"GPU KV cache usage: {kv:.1f}%, Prefix cache hit rate: 0.0%"
    )


HEAD = [
    "(APIServer pid=1) INFO 12-01 10:00:00 [api_server.py:1043] vLLM API server version 0.26.0",
    "(APIServer pid=1) INFO 12-01 10:00:00 [utils.py:328] non-default args: {'model': 'm', 'data_parallel_size': 2}",
]
TIMES = ["10:00:10", "10:00:20", "10:00:30", "10:00:40"]


def _summary(path: Path) -> dict:
    return analyze([str(path)], AnalyzeOptions(tz="UTC", year=2026)).summary()


def test_another_dp_engine_s_pressure_is_not_the_cause(tmp_path):
    lines = list(HEAD)
    for i, t in enumerate(TIMES):
        lines.append(_v1(t, 0, 4, 3 if i else 0, 99.0 if i else 50.0))  # engine 0 at the ceiling
        lines.append(_v1(t, 1, 2, 0, 30.0, pre=2 if i == 2 else None))  # engine 1 preempts at 30 %
    (tmp_path / "vllm.log").write_text("\n".join(lines) + "\n")
    s = _summary(tmp_path / "vllm.log")
    assert s["events"] == 2 and s["cause"]["engines"] == ["1"]
    assert s["cause"]["pressure"] is None  # before: engine 0's 99 %, 3 waiting
    assert "99" not in s["headline"] and "KV-block allocations failed" in s["headline"]


def test_an_engine_s_own_pressure_is_still_the_cause(tmp_path):
    lines = list(HEAD)
    for i, t in enumerate(TIMES):
        lines.append(_v1(t, 0, 4, 3 if i else 0, 99.0 if i else 50.0, pre=2 if i == 2 else None))
        lines.append(_v1(t, 1, 2, 0, 30.0))
    (tmp_path / "vllm.log").write_text("\n".join(lines) + "\n")
    s = _summary(tmp_path / "vllm.log")
    assert s["events"] == 2 and s["cause"]["engines"] == ["0"]
    assert s["cause"]["pressure"]["peak_kv_usage"] == 99.0 and s["cause"]["pressure"]["max_waiting"] == 3
    assert "usage 99 %, up to 3 waiting" in s["headline"]


def test_another_log_s_pressure_in_the_same_folder_is_not_the_cause(tmp_path):
    """Two servers' logs side by side in one folder (one of them without a start line), both engine 0:
    the V0 server preempted at 10 % usage, the V1 server's log was at the ceiling."""
    b = tmp_path / "b"
    b.mkdir()
    (b / "v1.log").write_text("\n".join([*HEAD, *(_v1(t, 0, 60, 25, 100.0) for t in TIMES)]) + "\n")
    v0 = [
        "INFO 12-01 10:00:05 metrics.py:345] Avg prompt throughput: 900.0 tokens/s, Avg generation throughput: "
        "300.0 tokens/s, Running: 3 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 10.0%, CPU KV "
        "cache usage: 0.0%.",
        "WARNING 12-01 10:00:25 scheduler.py:1057] Sequence group c1 is preempted by PreemptionMode.RECOMPUTE mode "
        "because there is not enough KV cache space. This can affect the end-to-end performance. Increase "
        "gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
        "total_num_cumulative_preemption=1",
        "INFO 12-01 10:00:45 metrics.py:345] Avg prompt throughput: 900.0 tokens/s, Avg generation throughput: "
        "300.0 tokens/s, Running: 3 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 10.0%, CPU KV "
        "cache usage: 0.0%.",
    ]
    (b / "v0.log").write_text("\n".join(v0) + "\n")
    s = _summary(b)
    assert s["events"] == 1
    assert s["cause"]["pressure"] is None  # before: the V1 log's 100 %, 25 waiting
    assert "usage 100" not in s["headline"]
    # the V1 log's interval holds none of the V0 log's events (before: 1, its time falls in it)
    [iv] = s["pressure_intervals"]
    assert iv["evidence"][0] == "b/v1.log:3" and iv["counted_events_in_interval"] == 0
