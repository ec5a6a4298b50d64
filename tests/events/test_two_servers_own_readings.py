"""Two servers, each in a folder of its own with its own single /metrics reading, both labelled
``engine="0",model_name="m"``: two servers' counters, never one series read twice (reconcile.since_start,
``_same_server``; the bundle's server folders are :func:`reconcile._server_keys`'s).

Before, the two readings met by their labels alone: ``b``'s 3 was "lower than 10 at a's: a restart or
another server's counter; not added" and ``a``'s was "taken before the scrapes of the same counter in
another folder": 0 events, the count not visible, ``--fail-on any`` exit 0, while ``--each`` gave 10 + 3.
A reading under no server's folder (a ``curl /metrics`` beside the servers' folders) is compared by its
labels as before. Through the CLI, a real subprocess.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from tests.conftest import run_cli


def _stock(version_sec: int) -> str:
    stats = "".join(
        f"(APIServer pid=1) INFO 11-20 09:14:{sec:02d} [loggers.py:236] Engine 000: Avg prompt throughput: 812.4 "
        f"tokens/s, Avg generation throughput: 2310.9 tokens/s, Running: 50 reqs, Waiting: {w} reqs, GPU KV cache "
        f"usage: {kv}%, Prefix cache hit rate: 35.2%\n"
        for sec, w, kv in ((0, 0, 80.0), (10, 17, 99.7), (20, 20, 100.0), (30, 5, 99.0))
    )
    return (
        f"(APIServer pid=1) INFO 11-20 09:13:{version_sec:02d} [api_server.py:1885] vLLM API server version 0.11.1\n"
        "(EngineCore_DP0 pid=2) INFO 11-20 09:13:54 [kv_cache_utils.py:1087] GPU KV cache size: 42,656 tokens\n" + stats
    )


def _epoch(hms: str) -> int:
    return int(datetime.fromisoformat(f"2026-11-20T{hms}").replace(tzinfo=UTC).timestamp())


def _reading(folder: Path, hms: str, value: int, created: str) -> None:
    (folder / f"metrics-{_epoch(hms)}.prom").write_text(
        "# TYPE vllm:num_preemptions_total counter\n"
        f'vllm:num_preemptions_total{{engine="0",model_name="m"}} {value}.0\n'
        f'vllm:num_preemptions_created{{engine="0",model_name="m"}} {_epoch(created)}.0\n',
        encoding="utf-8",
    )


def _two_servers(tmp_path: Path) -> Path:
    inc = tmp_path / "inc"
    for name, sec, hms, value, created in (("a", 50, "09:14:35", 10, "09:13:55"), ("b", 52, "09:14:40", 3, "09:13:57")):
        (inc / name).mkdir(parents=True)
        (inc / name / "vllm.log").write_text(_stock(sec), encoding="utf-8")
        _reading(inc / name, hms, value, created)
    return inc


def _summary(inc: Path) -> dict:
    out = run_cli("analyze", str(inc), "--tz", "UTC", "-f", "json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["summary"]


def test_each_servers_own_reading_counts(tmp_path):
    s = _summary(_two_servers(tmp_path))
    rec = s["reconciliation"]
    assert s["count_visible"] is True
    assert (rec["total"], rec["quality"]) == (13, "exact")
    assert rec["disagreements"] == [] and rec["repeated_readings"] == []
    by_source = {r["from"].split("/")[1]: r["in_events"] for r in rec["single_readings"]}
    assert by_source == {"a": 10, "b": 3}


def test_fail_on_any_sees_both_servers_counts(tmp_path):
    inc = _two_servers(tmp_path)
    nd = run_cli("analyze", str(inc), "--tz", "UTC", "-f", "ndjson")
    assert nd.returncode == 0, nd.stderr
    assert len([ln for ln in nd.stdout.splitlines() if ln.strip()]) == 13
    assert run_cli("analyze", str(inc), "--tz", "UTC", "-q", "--fail-on", "any").returncode == 4


def test_a_reading_under_no_servers_folder_is_still_compared_by_its_labels(tmp_path):
    # a server's scrape series and a final curl beside its folder that repeats its last reading: counted
    # once, as before (a passing guard, not the defect)
    inc = tmp_path / "inc"
    (inc / "a").mkdir(parents=True)
    (inc / "a" / "vllm.log").write_text(_stock(50), encoding="utf-8")
    _reading(inc / "a", "09:14:05", 0, "09:13:55")
    _reading(inc / "a", "09:14:35", 10, "09:13:55")
    _reading(inc, "09:14:45", 10, "09:13:55")
    rec = _summary(inc)["reconciliation"]
    assert rec["total"] == 10
    assert rec["repeated_readings"] == [f"inc/metrics-{_epoch('09:14:45')}.prom:2"]
