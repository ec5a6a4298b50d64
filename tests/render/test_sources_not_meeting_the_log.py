"""Scrapes that do not meet the bundle's one log in time are another incident (docs/inputs.md, render/each.py
split_by_incident): the headline says "Not one incident" and counts none of them as the log's, as for two
logs that do not meet in time; ``--each`` gives the log its own answer (its count not visible from a stock V1
log: exit 6 under ``--fail-on unknown``) and the scrapes theirs, ``(other sources)``. Scrapes that meet the
log, or whose counter's ``_created`` (the engine's start) lies in it, stay the log's."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from tests.conftest import run_cli

T0 = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)
PROFILE = [(2, 0, 20.0), (30, 0, 70.0), (66, 24, 100.0), (40, 10, 100.0), (30, 5, 99.0), (20, 0, 60.0), (0, 0, 0.0)]
END = T0 + timedelta(seconds=10 * (len(PROFILE) - 1))


def _ts(t: datetime) -> str:
    return t.strftime("%m-%d %H:%M:%S")


def _log() -> str:
    a, c = "(APIServer pid=7) ", "(EngineCore_DP0 pid=8) "
    s = T0 - timedelta(seconds=40)
    out = [
        a + f"INFO {_ts(s)} [api_server.py:1896] vLLM API server version 0.11.0",
        c + f"INFO {_ts(s)} [core.py:76] Initializing a V1 LLM engine (v0.11.0) with config: model='m', "
        "max_seq_len=8192, served_model_name=m, enable_prefix_caching=True",
    ]
    for i, (r, w, kv) in enumerate(PROFILE):
        out.append(
            a + f"INFO {_ts(T0 + timedelta(seconds=10 * i))} [loggers.py:127] Engine 000: Avg prompt throughput: "
            f"100.0 tokens/s, Avg generation throughput: 300.0 tokens/s, Running: {r} reqs, Waiting: {w} reqs, "
            f"GPU KV cache usage: {kv:.1f}%, Prefix cache hit rate: 50.0%"
        )
    return "\n".join(out) + "\n"


def _bundle(tmp_path, first: datetime, values: list[int], created: datetime | None = None):
    b = tmp_path / "b"
    b.mkdir()
    (b / "vllm.log").write_text(_log(), encoding="utf-8")
    out = []
    for k, v in enumerate(values):
        out.append(f"# scrape {(first + timedelta(seconds=30 * k)).strftime('%Y-%m-%dT%H:%M:%SZ')}")
        out.append(f'vllm:num_preemptions_total{{engine="0",model_name="m"}} {float(v)}')
        if created is not None:
            out.append(f'vllm:num_preemptions_created{{engine="0",model_name="m"}} {created.timestamp()}')
    (b / "metrics.prom").write_text("\n".join(out) + "\n", encoding="utf-8")
    return b


def _summary(b) -> dict:
    out = run_cli("analyze", str(b), "--tz", "UTC", "-f", "json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["summary"]


def _each(b) -> dict[str, dict]:
    out = run_cli("analyze", str(b), "--tz", "UTC", "--each", "-f", "json")
    assert out.returncode == 0, out.stderr
    return {s["server"]: s["summary"] for s in json.loads(out.stdout)["servers"]}


def test_scrapes_of_the_day_before_are_another_incident(tmp_path):
    b = _bundle(tmp_path, T0 - timedelta(days=1), [100, 120, 130])
    s = _summary(b)
    assert s["headline"].startswith("Not one incident"), s["headline"]
    assert "30" not in s["headline"] and "at least" not in s["headline"], s["headline"]
    assert s["incidents"] == ["b/vllm.log", "(other sources)"], s["incidents"]
    each = _each(b)
    assert set(each) == {"b/vllm.log", "(other sources)"}, list(each)
    assert each["b/vllm.log"]["count_visible"] is False, each["b/vllm.log"]["headline"]
    assert each["(other sources)"]["reconciliation"]["total"] == 30
    fail = run_cli("analyze", str(b), "--tz", "UTC", "--fail-on", "unknown", "--each")
    assert fail.returncode == 6, (fail.returncode, fail.stderr)


def test_scrapes_an_hour_after_the_log_are_another_incident(tmp_path):
    b = _bundle(tmp_path, END + timedelta(hours=1), [0, 5, 9])
    s = _summary(b)
    assert s["headline"].startswith("Not one incident"), s["headline"]
    assert s["incidents"] == ["b/vllm.log", "(other sources)"], s["incidents"]


def test_scrapes_whose_engine_started_in_the_log_meet_it(tmp_path):
    """An hour after the log, but the counter's _created (the engine's start) lies in it: the log's engine."""
    b = _bundle(tmp_path, END + timedelta(hours=1), [9, 9, 9], created=T0 - timedelta(seconds=20))
    s = _summary(b)
    assert not s["headline"].startswith("Not one incident"), s["headline"]
    assert s["incidents"] is None


def test_scrapes_that_meet_the_log_are_its_own(tmp_path):
    b = _bundle(tmp_path, T0 - timedelta(seconds=10), [0, 10, 30])
    s = _summary(b)
    assert s["incidents"] is None and s["headline"].startswith("30 preemptions"), s["headline"]
