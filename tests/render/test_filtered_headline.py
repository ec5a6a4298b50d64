"""A filtered view's headline (view.filtered_headline, human.headline_text) and the time window's
order (view.make_filters, view.apply_filters).

Under any filter the first line says how many events are shown of how many (``0 of 5 preemptions
shown (--min-confidence high)``), never a count quality that belongs to the whole bundle (``(exact)``,
a V0 log's ``can miss up to 49``); ``--since`` later than ``--until`` is a one-line usage error.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from preemptlog.errors import ExitCode, UsageError
from preemptlog.render.view import make_filters

# A V0 log with its start banner: 3 warnings (1st, 51st, 101st preemption) -> 101 events.
V0 = """\
INFO 03-14 09:59:00 api_server.py:500] vLLM API server version 0.6.3
INFO 03-14 09:59:01 llm_engine.py:237] Initializing an LLM engine (v0.6.3) with config: model='m', max_seq_len=4096, enable_prefix_caching=False
INFO 03-14 09:59:30 gpu_executor.py:122] # GPU blocks: 1000, # CPU blocks: 100
INFO 03-14 10:00:00 metrics.py:349] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 700.0 tokens/s, Running: 60 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 90.0%, CPU KV cache usage: 0.0%.
{w}10:00:05 scheduler.py:1481] Sequence group cmpl-a {t}=1
INFO 03-14 10:00:10 metrics.py:349] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 700.0 tokens/s, Running: 55 reqs, Swapped: 0 reqs, Pending: 10 reqs, GPU KV cache usage: 99.9%, CPU KV cache usage: 0.0%.
{w}10:00:25 scheduler.py:1481] Sequence group cmpl-b {t}=51
INFO 03-14 10:00:30 metrics.py:349] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 700.0 tokens/s, Running: 50 reqs, Swapped: 0 reqs, Pending: 20 reqs, GPU KV cache usage: 99.9%, CPU KV cache usage: 0.0%.
{w}10:00:45 scheduler.py:1481] Sequence group cmpl-c {t}=101
INFO 03-14 10:00:50 metrics.py:349] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 700.0 tokens/s, Running: 50 reqs, Swapped: 0 reqs, Pending: 20 reqs, GPU KV cache usage: 99.9%, CPU KV cache usage: 0.0%.
""".format(
    w="WARNING 03-14 ",
    t="is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can "
    "affect the end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size to provide more "
    "KV cache memory. total_num_cumulative_preemption",
)

# PREEMPTED lines and vLLM's counter in three scrapes: 5 events, an exact count, none of high confidence.
MARKERS = """\
(APIServer pid=1) INFO 03-14 09:59:50 [api_server.py:1] vLLM API server version 0.20.0
(APIServer pid=1) INFO 03-14 10:00:00 [loggers.py:318] Engine 000: Avg prompt throughput: 10.0 tokens/s, Avg generation throughput: 400.0 tokens/s, Running: 30 reqs, Waiting: 0 reqs, GPU KV cache usage: 80.0%, Prefix cache hit rate: 20.0%
(EngineCore_DP0 pid=2) WARNING 03-14 10:00:05 [scheduler.py:900] Req-r1 PREEMPTED
(EngineCore_DP0 pid=2) WARNING 03-14 10:00:06 [scheduler.py:900] Req-r2 PREEMPTED
(EngineCore_DP0 pid=2) WARNING 03-14 10:00:15 [scheduler.py:900] Req-r3 PREEMPTED
(APIServer pid=1) INFO 03-14 10:00:20 [loggers.py:318] Engine 000: Avg prompt throughput: 10.0 tokens/s, Avg generation throughput: 400.0 tokens/s, Running: 30 reqs, Waiting: 3 reqs, GPU KV cache usage: 99.0%, Prefix cache hit rate: 20.0%
"""
SCRAPE = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{engine="0",model_name="m"}} 30.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{engine="0",model_name="m"}} 0.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{{engine="0",model_name="m"}} 0.99
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{{engine="0",model_name="m"}} {n}.0
"""


@pytest.fixture(scope="module")
def v0(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("hl") / "v0"
    d.mkdir()
    (d / "vllm.log").write_text(V0)
    return d


@pytest.fixture(scope="module")
def markers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("hl") / "mk"
    d.mkdir()
    (d / "vllm.log").write_text(MARKERS)
    for stamp, n in ((1773482400, 0), (1773482410, 3), (1773482420, 5)):
        (d / f"metrics-{stamp}.prom").write_text(SCRAPE.format(n=n))
    return d


def _analyze(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, NO_COLOR="1", TZ="UTC")
    return subprocess.run(
        [sys.executable, "-m", "preemptlog", "analyze", *args, "--tz", "UTC", "-f", "ndjson"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def _headline(stderr: str) -> str:
    """The headline, its wrapped lines joined (it ends where the next part of the summary starts)."""
    out: list[str] = []
    for i, line in enumerate(stderr.splitlines()):
        if i and not line.startswith("  "):
            break
        out.append(line.strip())
    return " ".join(out)


def test_the_unfiltered_headlines_are_the_whole_bundle(v0, markers):
    assert _headline(_analyze(str(v0)).stderr).startswith("at least 101 preemptions")
    assert _headline(_analyze(str(markers)).stderr).startswith("5 preemptions")


def test_a_filter_that_keeps_none_says_0_of_5_not_exact(markers):
    p = _analyze(str(markers), "--min-confidence", "high")
    assert p.returncode == 0, p.stderr
    head = _headline(p.stderr)
    assert head == "0 of 5 preemptions shown (--min-confidence high)", head
    assert "(exact)" not in head


def test_a_v0_log_with_its_start_filtered_to_none_has_no_can_miss_words(v0):
    p = _analyze(str(v0), "--request", "nope")
    assert p.returncode == 0, p.stderr
    head = _headline(p.stderr)
    assert head == "0 of 101 preemptions shown (--request nope)", head
    assert "miss up to" not in head and "logged" not in head


def test_a_filter_that_keeps_some_says_how_many_of_how_many_first(v0):
    p = _analyze(str(v0), "--kind", "logged")
    assert p.returncode == 0, p.stderr
    assert _headline(p.stderr).startswith("3 of 101 preemptions shown (--kind logged)"), p.stderr


@pytest.mark.parametrize(
    "since,until",
    [
        ("10:00:40", "10:00:20"),  # both clock times: refused before the analysis
        ("-10s", "-30s"),  # both relative to the last line
        ("2026-03-14T10:00:40", "2026-03-14T10:00:20"),
        ("2026-03-14T10:00:40Z", "10:00:20"),  # mixed: refused once the bundle's clock is known
    ],
)
def test_since_after_until_is_a_one_line_usage_error(v0, since, until):
    p = _analyze(str(v0), "--since", since, "--until", until)
    assert p.returncode == ExitCode.USAGE, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"preemptlog: error: --since {since} is later than --until"), lines
    assert p.stdout == ""


@pytest.mark.parametrize(
    "since,until,bad",
    [
        ("10:00:40", "10:00:20", True),
        ("10:00:20", "10:00:40", False),
        ("10:00:20", "10:00:20", False),
        ("-10s", "-30s", True),
        ("-30m", "-10s", False),
        ("2026-03-14T10:00:40+02:00", "2026-03-14T08:00:20Z", True),  # 08:00:40Z after 08:00:20Z
        ("2026-03-14T10:00:40+02:00", "2026-03-14T09:00:20Z", False),
        ("2026-03-14T10:00:40+02:00", "2026-03-14T09:00:20", False),  # naive vs zoned: after the analysis
        ("10:00:40", None, False),
    ],
)
def test_make_filters_refuses_a_window_it_can_order(since, until, bad):
    if bad:
        with pytest.raises(UsageError, match="is later than --until"):
            make_filters(since=since, until=until)
    else:
        assert make_filters(since=since, until=until).since == since


def test_filtered_headline_words():
    from preemptlog.render.view import filtered_headline

    s = {
        "headline": "0 preemptions (exact); KV cache at the ceiling with requests waiting",
        "count_visible": True,
        "engine_kinds": {},
        "inputs": [{"kind": "sglang-log"}],
        "filters": {"text": "--gate G2-batch-variance", "kept": 0, "total": 6},
    }
    assert filtered_headline(s) == "0 of 6 retractions shown (--gate G2-batch-variance)"
    s |= {"headline": "1 preemption at 10:00:05: G1 KV space 1", "engine_kinds": {"vllm": 1}}
    s["filters"] = {"text": "--request a", "kept": 1, "total": 1}
    assert filtered_headline(s) == "1 of 1 preemption shown (--request a) at 10:00:05: G1 KV space 1"
    assert filtered_headline({**s, "filters": None}) == s["headline"]
    once = filtered_headline(s)
    assert filtered_headline({**s, "headline": once}) == once  # said once, whoever says it first
