"""A counter that stops before the log does counts only up to its last reading (reconcile.uncounted).

A stock V1 log counts nothing itself (vllm-facts §0): ``vllm:num_preemptions_total`` is the only
count. Its readings cover the log only up to the last one (and from the start the first one counts
from: since_start). Before, a reading at 10:00:25 or 10:00:30 beside a log that ran to 10:05:40 at
99 % KV with 23 requests waiting gave "7 preemptions ... (exact)" and exit 0 with ``--fail-on
unknown``; now the count is a lower bound (``reconciliation.quality``), the span is said
(``reconciliation.uncounted_spans``, the headline, a "to know more" item), and ``unknown`` holds
(exit 6). Pressure is claimed only where the log shows it. Through the CLI, a real subprocess.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

BANNER = "(APIServer pid=1) INFO 05-01 10:00:00 [api_server.py:1772] vLLM API server version 0.20.0"
STATS = (
    "(APIServer pid=1) INFO 05-01 {t} [loggers.py:123] Engine 000: Avg prompt throughput: 1.0 tokens/s, Avg "
    "generation throughput: 2.0 tokens/s, Running: 30 reqs, Waiting: {w} reqs, GPU KV cache usage: {kv}%, Prefix "
    "cache hit rate: 0.0%"
)
T0 = datetime(2026, 5, 1, 10, 0, 10, tzinfo=UTC)


def _log(*, banner: bool = True, calm_after: str | None = None) -> str:
    """Stats lines every 10 s, 10:00:10 to 10:05:40, at 99.2 % KV with 23 waiting (after ``calm_after``: 40 %
    and none waiting)."""
    lines = [BANNER] if banner else []
    t = T0
    while t <= T0.replace(minute=5, second=40):
        calm = calm_after is not None and f"{t:%H:%M:%S}" > calm_after
        lines.append(STATS.format(t=f"{t:%H:%M:%S}", w=0 if calm else 23, kv=40.0 if calm else 99.2))
        t += timedelta(seconds=10)
    return "\n".join(lines) + "\n"


def _bundle(tmp_path: Path, readings: list[tuple[str, int]], **kw) -> Path:
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "vllm.log").write_text(_log(**kw), encoding="utf-8")
    for hms, v in readings:
        t = int(datetime.fromisoformat(f"2026-05-01T{hms}").replace(tzinfo=UTC).timestamp())
        (inc / f"metrics-{t}.prom").write_text(
            f'# TYPE vllm:num_preemptions_total counter\nvllm:num_preemptions_total{{engine="0",model_name="m"}} {v}\n',
            encoding="utf-8",
        )
    return inc


def _run(inc: Path) -> tuple[int, dict, str]:
    r = subprocess.run(
        [sys.executable, "-m", "preemptlog", "analyze", str(inc), "--year", "2026", "--tz", "UTC", "-f", "json"]
        + ["--fail-on", "unknown"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode in (0, 6), r.stderr
    return r.returncode, json.loads(r.stdout)["summary"], r.stderr


PRESSED = "the log runs to 10:05:40 with the KV cache at the ceiling and requests waiting: not counted after"


@pytest.mark.parametrize(
    ("readings", "head"),
    [
        # one curl /metrics during the incident: since the engine's start (the banner), up to the reading
        (
            [("10:00:25", 7)],
            f"at least 7 preemptions since the engine started at 10:00:00 (counted by vLLM's counter up to "
            f"10:00:25; {PRESSED}) (engine 0): KV cache exhausted",
        ),
        # a scrape series that stopped early
        (
            [("10:00:00", 0), ("10:00:30", 7)],
            f"at least 7 preemptions (counted by vLLM's counter up to 10:00:30; {PRESSED}) (engine 0): "
            "KV cache exhausted",
        ),
    ],
)
def test_a_counter_that_stops_early_is_a_lower_bound(tmp_path, readings, head):
    code, s, err = _run(_bundle(tmp_path, readings))
    assert s["headline"].startswith(head), s["headline"]
    assert err.startswith("at least 7 preemptions")  # the first line a person reads
    assert s["count_visible"] is True and s["events"] == 7
    rec = s["reconciliation"]
    assert rec["quality"] == "lower bound" and "not counted" in rec["rule"]
    (gap,) = rec["uncounted_spans"]
    assert gap["side"] == "after" and gap["engine"] == "0" and gap["pressure"] is True
    assert gap["from"] == f"2026-05-01T{readings[-1][0]}+00:00" and gap["to"] == "2026-05-01T10:05:40+00:00"
    assert gap["log"].endswith("vllm.log:35") and gap["max_waiting"] == 23
    assert s["to_know_more"][0]["add"].startswith("a /metrics scrape taken after the log's last line (10:05:40")
    assert code == 6 and "--fail-on unknown: the preemption count is not visible after" in err


@pytest.mark.parametrize(
    "readings",
    [
        [("10:00:00", 0), ("10:05:45", 7)],  # a last scrape after the log's end
        [("10:00:00", 0), ("10:05:35", 7)],  # within one stats interval (10 s) of it
        [("10:05:50", 7)],  # one reading after the incident, since the engine's start
    ],
)
def test_a_counter_that_covers_the_log_stays_exact(tmp_path, readings):
    code, s, err = _run(_bundle(tmp_path, readings))
    rec = s["reconciliation"]
    assert rec["quality"] == "exact" and "uncounted_spans" not in rec
    assert s["headline"].startswith("7 preemptions") and "not counted" not in s["headline"]
    assert code == 0, err


def test_no_pressure_after_the_reading_is_not_claimed(tmp_path):
    code, s, err = _run(_bundle(tmp_path, [("10:00:00", 0), ("10:00:30", 7)], calm_after="10:00:30"))
    assert s["headline"].startswith(
        "at least 7 preemptions (counted by vLLM's counter up to 10:00:30; the log runs to 10:05:40: not counted after)"
    ), s["headline"]
    (gap,) = s["reconciliation"]["uncounted_spans"]
    assert gap["pressure"] is False and gap["pressure_lines"] == []
    assert s["reconciliation"]["quality"] == "lower bound"
    assert code == 6  # still not counted there: unknown holds


def test_a_counter_that_starts_after_the_log_is_a_lower_bound_too(tmp_path):
    # no banner, no _created: the first scrape is the baseline of the series' increases (since_start), so the
    # log's first two minutes are counted by nothing
    code, s, err = _run(_bundle(tmp_path, [("10:02:00", 3), ("10:05:45", 7)], banner=False))
    assert s["headline"].startswith(
        "at least 4 preemptions (counted by vLLM's counter from 10:02:00; the log begins at 10:00:10 with the KV "
        "cache at the ceiling and requests waiting: not counted before)"
    ), s["headline"]
    (gap,) = s["reconciliation"]["uncounted_spans"]
    assert gap["side"] == "before" and gap["to"] == "2026-05-01T10:02:00+00:00"
    assert code == 6 and "not visible before 10:02:00" in err


def test_a_first_reading_counted_from_the_banner_covers_the_start(tmp_path):
    # the log shows the engine's start: the first reading counts since it (since_start), nothing before it is missed
    code, s, _ = _run(_bundle(tmp_path, [("10:02:00", 3), ("10:05:45", 7)]))
    assert s["reconciliation"]["quality"] == "exact" and "uncounted_spans" not in s["reconciliation"]
    assert s["events"] == 7 and code == 0


V0_LOG = (
    "INFO 05-01 10:00:05 llm_engine.py:100] Initializing an LLM engine (v0.5.4) with config: model='m'\n"
    "WARNING 05-01 10:01:00 scheduler.py:1077] Sequence group 5 is preempted by PreemptionMode.RECOMPUTE mode "
    "because there is not enough KV cache space. This can affect the end-to-end performance. Increase "
    "gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
    "total_num_cumulative_preemption=1\n"
)
RUST_STATS = (
    "2026-05-01T10:{m:02d}:{s:02d}.000000Z  INFO vllm_rs::log_stats: Avg prompt tput: 1000.0 toks/s, Avg generation "
    "tput: 700.0 toks/s, Reqs Running: 30, Waiting: 23{p}, GPU KV cache used: 99.2%, Prefix cache hit rate: 0.0%"
)


def _two_servers(tmp_path: Path, other: str, readings: list[tuple[str, int]]) -> Path:
    """``inc/b``: the stock V1 log and its readings (as :func:`_bundle`); ``inc/a``: another server's log."""
    inc = _bundle(tmp_path, readings)
    (inc / "b").mkdir()
    for f in list(inc.iterdir()):
        if f.is_file():
            f.rename(inc / "b" / f.name)
    (inc / "a").mkdir()
    (inc / "a" / "vllm.log").write_text(other, encoding="utf-8")
    return inc


def test_another_servers_counting_log_does_not_cover_this_servers_gap(tmp_path):
    # Server a's V0 log counts a's preemptions (its warning); server b's stock V1 log counts none, and b's counter
    # stops at 10:00:30 while b's log runs to 10:05:40 under pressure. Before: the bundle's logs "could count", so
    # b's span went unsaid: quality exact, no uncounted span, exit 0 with --fail-on unknown.
    code, s, err = _run(_two_servers(tmp_path, V0_LOG, [("10:00:00", 0), ("10:00:30", 7)]))
    rec = s["reconciliation"]
    assert rec["quality"] == "lower bound"
    (gap,) = rec["uncounted_spans"]
    assert gap["server"] == "inc/b" and gap["side"] == "after" and gap["engine"] == "0"
    assert gap["from"] == "2026-05-01T10:00:30+00:00" and gap["to"] == "2026-05-01T10:05:40+00:00"
    assert gap["log"].endswith("inc/b/vllm.log:35") and gap["pressure"] is True
    assert code == 6 and "engine 0 of inc/b" in err


def test_a_servers_own_counting_log_covers_its_gap(tmp_path):
    # The same two folders, but b's own log is a Rust frontend's: it prints 'Preemptions: N' in every stats line
    # whose interval had one (vllm-034.md), so its lines without one count 0 there, and b's counter stopping
    # early (flat at 0) leaves nothing uncounted. b's log made no event: its capability says it counts.
    inc = _two_servers(tmp_path, V0_LOG, [("10:00:00", 0), ("10:00:30", 0)])
    rust = ["2026-05-01T10:00:00.000000Z  INFO vllm_rs::server: vLLM API server version 0.34.0"]
    for k in range(1, 35):
        m, sec = divmod(10 * k, 60)
        rust.append(RUST_STATS.format(m=m, s=sec, p=""))
    (inc / "b" / "vllm.log").write_text("\n".join(rust) + "\n", encoding="utf-8")
    code, s, err = _run(inc)
    assert "uncounted_spans" not in s["reconciliation"], s["reconciliation"]
    assert "not visible after" not in err
