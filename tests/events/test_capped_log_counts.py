"""A log count larger than the events made of it (model.events.MAX_EVENTS_PER_COUNT per count,
MAX_EVENTS_FROM_COUNTS in all): the count the user reads is the one the log counted, never the cap, and
never "exact" (the /metrics counter's rule, tests/events/test_capped_counts.py, for every engine's log).

A V1 stats line's ``Preemptions: 250000`` read "100000 preemptions in 4 s", "100000 counted by the stats
lines' 'Preemptions: N' (exact)": the cap as the count, and the span the share of the interval the
capped events were spread over (40 us apart). A V0 counter jump and SGLang's ``#retracted_reqs: N`` the
same; the cap in all made later counts no event, and they were not counted at all.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from preemptlog import AnalyzeOptions, analyze
from preemptlog.model import events as ev_mod

from ..conftest import run_cli

CAP = 50  # the library tests' cap per count (100000): the same rule, fewer events
OPTS = AnalyzeOptions(tz="UTC", year=2026)

V1_HEAD = "INFO 12-01 10:00:00 [api_server.py:1000] vLLM API server version 0.10.1"
V0_HEAD = "INFO 05-09 10:00:00 api_server.py:500] vLLM API server version 0.6.3"


def v1_line(
    ss: int, n: int | None, running: int = 30, tput: str = "100.0 tokens/s, Avg generation throughput: 200.0"
) -> str:
    pre = f"Preemptions: {n}, " if n is not None else ""
    return (
        f"INFO 12-01 10:00:{ss:02d} [loggers.py:123] Engine 000: Avg prompt throughput: {tput} tokens/s, Running: "
        f"{running} reqs, Waiting: 12 reqs, {pre}GPU KV cache usage: 99.8%, Prefix cache hit rate: 10.0%"
    )


def v0_warning(ss: int, group: int, total: int) -> str:
    return (
        f"WARNING 05-09 10:00:{ss:02d} scheduler.py:1057] Sequence group {group} is preempted by "
        "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect the end-to-end "
        "performance. Increase gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
        f"total_num_cumulative_preemption={total}"
    )


def sglang_line(ss: int, n: int) -> str:
    return (
        f"[2026-03-14 10:00:{ss:02d} TP0] KV cache pool is full. Retract requests. #retracted_reqs: {n}, "
        "#new_token_ratio: 0.5000 -> 0.6000"
    )


def write(tmp_path: Path, name: str, lines: list[str]) -> Path:
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p


@pytest.fixture
def small_cap(monkeypatch):
    monkeypatch.setattr(ev_mod, "MAX_EVENTS_PER_COUNT", CAP)


# ------------------------------------------------------------------ the CLI: V1's Preemptions: N


def test_cli_v1_stats_count_beyond_the_cap_is_the_logged_count(tmp_path):
    p = write(tmp_path, "v1.log", [V1_HEAD, v1_line(10, None), v1_line(20, 250000)])
    # --kind logged writes none of the 100000 events (~25 s of JSON); the summary is of them all
    out = run_cli("analyze", str(p), "-f", "json", "--tz", "UTC", "--quiet", "--kind", "logged")
    assert out.returncode == 5, out.stderr  # the implausibly large count is a warning: damaged input
    s = json.loads(out.stdout)["summary"]
    rec = s["reconciliation"]
    assert (rec["total"], rec["events"], rec["quality"]) == (250000, 100000, "capped"), rec
    assert rec["capped"] == [{"from": f"{p}:3", "count": 250000, "events": 100000}]
    assert "the count is the log's (250000), its events capped" in rec["rule"]
    [src] = [x for x in rec["sources"] if x["source"] == "log 'Preemptions: N' stats fields"]
    assert (src["count"], src["exact"], src["in_events"]) == (250000, False, 100000)
    # the filtered view's headline: its events are part of the count, never "of 100000 preemptions" alone
    assert (
        s["headline"]
        == "0 of 100000 preemptions shown (--kind logged; 100000 of the 250000 counted are events, capped)"
    )
    cost = s["recompute"] if "recompute" in s else json.loads(out.stdout)["findings"]["recompute"]
    assert cost["preemptions"] == 250000 and cost["preemptions_events"] == 100000, cost

    table = run_cli("analyze", str(p), "-f", "table", "--tz", "UTC")
    text = " ".join((table.stdout + table.stderr).split())
    # the summary's first line; the span is the interval the count is of (10:00:10-10:00:20), never the
    # cap's share of it (the events were 40 us apart: "in 4 s")
    head = " ".join(table.stderr.split())
    assert head.startswith("250000 preemptions in 10 s (100000 of them as events, capped)"), head[:200]
    assert "100000 of 250000 in interval (capped)" in text, text
    assert "250000 counted by the stats lines' 'Preemptions: N' (capped: 100000 of them are events" in text
    assert "(exact)" not in text and "in 4 s" not in text


# ------------------------------------------------------------------ the library: each engine's counts


def test_v0_counter_jump_beyond_the_cap_is_counted_whole(tmp_path, small_cap):
    p = write(tmp_path, "v0.log", [V0_HEAD, v0_warning(10, 1, 1), v0_warning(20, 7, 1001)])
    a = analyze([str(p)], OPTS)
    rec = a.summary()["reconciliation"]
    # 2 logged warnings + the 999 preemptions between them (50 made into events)
    assert a.events.height == 2 + CAP
    assert (rec["total"], rec["events"], rec["quality"]) == (1001, 2 + CAP, "capped"), rec
    assert rec["capped"] == [{"from": f"{p}:3", "count": 999, "events": CAP}]
    assert rec["count_quality"] == "lower bound"  # V0 logs 1 in 50: the count is at least this
    [src] = [x for x in rec["sources"] if x["source"].startswith("log V0 warnings")]
    assert src["count"] == 1001
    # the reconstructed events spread over the whole interval between the two warnings
    r = a.events.filter(pl.col("kind") == "reconstructed").get_column("time")
    assert (r.max() - r.min()).total_seconds() > 9  # type: ignore[operator]
    assert a.summary()["headline"].startswith(
        f"at least 1001 preemptions in 10 s ({2 + CAP} of them as events, capped)"
    )


def test_sglang_retractions_beyond_the_cap_are_counted_whole(tmp_path, small_cap):
    p = write(tmp_path, "sgl.log", [sglang_line(10, 3), sglang_line(20, 500)])
    a = analyze([str(p)], OPTS)
    rec = a.summary()["reconciliation"]
    assert a.events.height == 3 + CAP
    assert (rec["total"], rec["events"], rec["quality"]) == (503, 3 + CAP, "capped"), rec
    assert rec["capped"] == [{"from": f"{p}:2", "count": 500, "events": CAP}]
    assert any("retraction counts in the logs are implausibly large" in w for w in a.warnings), a.warnings
    assert a.partial
    assert a.summary()["headline"].startswith(f"503 retractions in 10 s ({3 + CAP} of them as events, capped)")


def test_the_cap_in_all_leaves_later_counts_counted(tmp_path, monkeypatch):
    """Past MAX_EVENTS_FROM_COUNTS no count makes an event: each is still counted, listed as capped."""
    monkeypatch.setattr(ev_mod, "MAX_EVENTS_PER_COUNT", CAP)
    monkeypatch.setattr(ev_mod, "MAX_EVENTS_FROM_COUNTS", 100)
    lines = [V1_HEAD, v1_line(0, None)] + [v1_line(10 * i, 40) for i in range(1, 5)]
    p = write(tmp_path, "v1.log", lines)
    a = analyze([str(p)], OPTS)
    rec = a.summary()["reconciliation"]
    assert a.events.height == 100
    assert (rec["total"], rec["events"], rec["quality"]) == (160, 100, "capped"), rec
    assert rec["capped"] == [
        {"from": f"{p}:5", "count": 40, "events": 20},
        {"from": f"{p}:6", "count": 40, "events": 0},
    ]
    assert a.partial


def test_a_capped_log_count_stands_outside_the_scrape_window_and_is_the_counters_inside(tmp_path, small_cap):
    """Outside the counter's scrape window the log's count stands, whole; inside it the counter is
    authoritative: the log's capped count there is replaced, never added."""
    d = tmp_path / "b"
    d.mkdir()
    lines = [V1_HEAD, v1_line(12, None), v1_line(22, 500), v1_line(26, None), v1_line(40, 500)]
    write(d, "v1.log", lines)
    t0 = 1796119205  # 2026-12-01T10:00:05Z: scrapes at 10:00:05 and 10:00:25, the log's (12, 22] inside
    for i, v in enumerate((10, 410)):
        (d / f"metrics-{t0 + 20 * i}.prom").write_text(
            f'# TYPE vllm:num_preemptions_total counter\nvllm:num_preemptions_total{{engine="0",model_name="m"}} {v}\n'
        )
    a = analyze([str(d)], OPTS)
    rec = a.summary()["reconciliation"]
    # 10 since the engine's start, the counter's 400 (50 events), the log's 500 after the window (50 events)
    assert (rec["total"], rec["events"], rec["quality"]) == (910, 10 + 2 * CAP, "capped"), rec
    assert [(c["from"], c["count"], c["events"]) for c in rec["capped"]] == [
        ("b/v1.log:5", 500, CAP),
        (f"b/metrics-{t0 + 20}.prom:2", 400, CAP),
    ]


def stall_line(ss: int, n: int | None) -> str:
    """A stats line of a stall: nothing running or computed, requests waiting."""
    return v1_line(ss, n, running=0, tput="0.0 tokens/s, Avg generation throughput: 0.0")


def test_a_stall_span_counts_a_capped_count_whole(tmp_path, small_cap):
    """The stall finding's preemptions in a span are the log's count, not the events the cap let it make."""
    p = write(tmp_path, "v1.log", [V1_HEAD, stall_line(10, 0), stall_line(20, 500), stall_line(30, 0)])
    a = analyze([str(p)], OPTS)
    assert a.summary()["reconciliation"]["total"] == 500
    [span] = [s for s in a.findings.stall["spans"] if s["source"] == "log"]
    assert span["preemptions"] == 500, span


def test_a_counters_one_reading_is_compared_with_the_logs_count_not_its_capped_events(tmp_path, small_cap):
    """A single /metrics reading counts since the engine started (reconcile.since_start): what the log
    already counted by then is taken off. With a capped count that is the log's count (500), not its 50
    events: else 450 preemptions the log counted are counted twice."""
    d = tmp_path / "bundle"
    d.mkdir()
    write(d, "vllm.log", [V1_HEAD, v1_line(10, 0), v1_line(20, 500), v1_line(30, 0)])
    (d / "metrics-1796119235.prom").write_text(  # 2026-12-01 10:00:35 UTC
        '# TYPE vllm:num_preemptions_total counter\nvllm:num_preemptions_total{engine="0",model_name="m"} 530.0\n'
    )
    a = analyze([str(d)], OPTS)
    rec = a.summary()["reconciliation"]
    assert rec["total"] == 530, rec  # the log's 500 and the 30 more the counter read
