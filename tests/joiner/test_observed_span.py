"""A maximum of KV usage "before the event" contradicts a KV-capacity preemption only where the samples
watched the event's span (joiner/code.py ``_observed``); a counter's ``_created`` dates a year-less log
whose server start it meets (sources/prometheus ``anchors``).

The bundle: a stock V1 log of a wedged server (26 waiting, none running, KV 0 %) for 50 s, and one
/metrics reading written 19 months later (its only time is the file's mtime) whose counter says 12
preemptions since the engine's start, the log's first line to the second."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

from preemptlog import AnalyzeOptions, analyze

START = datetime(2025, 5, 1, 10, 0, 0, tzinfo=UTC)
READ = datetime(2026, 12, 5, 22, 0, 0, tzinfo=UTC)


def _stats(t: str, running: int, waiting: int, kv: float) -> str:
    return (
        f"(APIServer pid=1) INFO 05-01 {t} [loggers.py:259] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
        f"Avg generation throughput: 0.0 tokens/s, Running: {running} reqs, Waiting: {waiting} reqs, GPU KV cache "
        f"usage: {kv:.1f}%, Prefix cache hit rate: 0.0%"
    )


def _bundle(root: Path, times: list[str], kv: float = 0.0) -> Path:
    root.mkdir(parents=True)
    lines = [
        "(APIServer pid=1) INFO 05-01 10:00:00 [api_server.py:1900] vLLM API server version 0.27.0",
        "(EngineCore pid=7) INFO 05-01 10:00:30 [kv_cache_utils.py:1087] GPU KV cache size: 120,000 tokens",
        *(_stats(t, 0, 26, kv) for t in times),
    ]
    log = root / "vllm.log"
    log.write_text("\n".join(lines) + "\n")
    prom = root / "metrics.prom"
    prom.write_text(
        "# TYPE vllm:num_preemptions_total counter\n"
        'vllm:num_preemptions_total{engine="0",model_name="m"} 12.0\n'
        f'vllm:num_preemptions_created{{engine="0",model_name="m"}} {START.timestamp()}\n'
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        f'vllm:kv_cache_usage_perc{{engine="0",model_name="m"}} {kv / 100}\n'
    )
    for f in (log, prom):
        os.utime(f, (READ.timestamp(), READ.timestamp()))
    return root


def test_a_counter_s_engine_start_dates_the_log(tmp_path):
    a = analyze([str(_bundle(tmp_path / "b", ["10:01:00", "10:01:10"]))], AnalyzeOptions(tz="UTC"))
    year = [x for x in a.summary()["assumptions"] if x["topic"] == "year"]
    assert [x["value"] for x in year] == ["2025"]  # before: 2026, from the file's mtime
    assert "_created" in year[0]["source"]
    assert a.summary()["events"] == 12


def test_samples_that_did_not_watch_the_span_contradict_nothing(tmp_path):
    times = [f"10:01:{s:02d}" for s in range(0, 60, 10)]
    a = analyze([str(_bundle(tmp_path / "b", times))], AnalyzeOptions(tz="UTC"))
    ev = a.evidence.join(a.events.select("event_id"), on="event_id")
    assert ev.height == 12
    # 50 s of samples and one reading 19 months later: the maximum before is not evaluable
    assert ev.get_column("up_kv_max_before").null_count() == 12
    rules = set(a.verdicts.get_column("rule").to_list())
    assert not any(r.endswith("-contradicted") for r in rules), rules  # before: all 12 contradicted, low


def test_samples_that_watched_the_span_still_contradict(tmp_path):
    """Control: the same server watched from its start to the reading (a stats line every 5 minutes),
    never above 0 %: the KV-capacity cause is contradicted, as before."""
    b = tmp_path / "b"
    b.mkdir()
    start, end = START, datetime(2025, 5, 1, 12, 0, 0, tzinfo=UTC)
    lines = ["(APIServer pid=1) INFO 05-01 10:00:00 [api_server.py:1900] vLLM API server version 0.27.0"]
    t = start.timestamp() + 60
    while t <= end.timestamp():
        lines.append(_stats(datetime.fromtimestamp(t, UTC).strftime("%H:%M:%S"), 0, 26, 0.0))
        t += 300
    (b / "vllm.log").write_text("\n".join(lines) + "\n")
    (b / "metrics.prom").write_text(
        f"# scrape {end.isoformat()}\n# TYPE vllm:num_preemptions_total counter\n"
        'vllm:num_preemptions_total{engine="0",model_name="m"} 12.0\n'
        f'vllm:num_preemptions_created{{engine="0",model_name="m"}} {start.timestamp()}\n'
    )
    a = analyze([str(b)], AnalyzeOptions(tz="UTC", year=2025))
    rules = set(a.verdicts.get_column("rule").to_list())
    assert rules == {"G1-capacity-vllm-code-contradicted"}, rules
