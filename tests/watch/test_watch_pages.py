"""``preemptlog watch`` on hand-written /metrics pages: a counter or gauges that are not numbers,
and servers whose preemptions the watch cannot see (``--fail-on``).

Each server is a real http.server on loopback serving a page the test writes (the vLLM names, one
engine); the watch runs as a real subprocess, so the lines, the exit code and stderr are a user's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .test_watch import Scripted

ROOT = Path(__file__).resolve().parents[2]


def vllm_page(counter: str, kv: str = "0.5", created: str = "1700000000.0", waiting: str = "0") -> str:
    lab = 'engine="0",model_name="m"'
    return (
        "# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.\n"
        "# TYPE vllm:num_preemptions_total counter\n"
        f"vllm:num_preemptions_total{{{lab}}} {counter}\n"
        f"vllm:num_preemptions_created{{{lab}}} {created}\n"
        "# TYPE vllm:num_requests_running gauge\n"
        f"vllm:num_requests_running{{{lab}}} 4\n"
        "# TYPE vllm:num_requests_waiting gauge\n"
        f"vllm:num_requests_waiting{{{lab}}} {waiting}\n"
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        f"vllm:kv_cache_usage_perc{{{lab}}} {kv}\n"
    )


NO_COUNTER = "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 12.5\n"


class Page(Scripted):
    """A /metrics server on loopback serving ``self.text`` (set by the test), started at once."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.thread.start()

    def close(self) -> None:
        self.__exit__()


def after_scrapes(srv: Page, n: int, timeout: float = 60.0) -> None:
    """Wait until the watch has read ``srv``'s page ``n`` more times: a script paced by the watch's own
    scrapes, whatever its start-up took (a loaded runner took over 2.5 s to start it, and a page meant
    to be read first was never read)."""
    goal, t0 = srv.hits + n, time.time()
    while srv.hits < goal:
        if time.time() - t0 > timeout:
            raise AssertionError(f"the watch read {srv.url} {srv.hits} time(s) in {timeout} s, waited for {goal}")
        time.sleep(0.02)


def watch(tmp: Path, urls: list[str], *args: str, script=None, duration: str = "5") -> tuple[int, list[dict], str]:
    cmd = [sys.executable, "-m", "preemptlog", "watch", "-f", "ndjson", "--tz", "UTC", "--every", "1"]
    cmd += ["--quiet", "2", "--duration", duration, "-o", str(tmp / "out")]
    for u in urls:
        cmd += ["--metrics", u]
    p = subprocess.Popen(
        [*cmd, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ}, cwd=tmp
    )
    if script is not None:
        script()
    out, err = p.communicate(timeout=120)
    assert "Traceback" not in err, err[-3000:]

    def strict(c: str) -> float:
        raise AssertionError(f"not JSON: {c} in the watch's output")

    return p.returncode, [json.loads(line, parse_constant=strict) for line in out.splitlines()], err


def test_a_counter_or_gauges_that_are_not_numbers(tmp_path):
    """Before: a NaN counter crashed the watch (exit 1, "cannot convert float NaN to integer", no
    stop line, the storm lost) and a NaN gauge was written as a bare NaN (not JSON: jq fails). Now a
    page whose counter is not a number is not counted (said once), gauges that are not numbers are
    null, and the storm after it counts from the last readable counter, in its folder too."""
    srv = Page(vllm_page("0", kv="NaN"))

    def script():  # paced by the watch's scrapes, one a second (--every 1)
        after_scrapes(srv, 2)
        srv.text = vllm_page("5", kv="NaN", waiting="3")
        after_scrapes(srv, 2)
        srv.text = vllm_page("NaN", kv="NaN")  # longer than the ring of scrapes before a storm
        after_scrapes(srv, 5)
        srv.text = vllm_page("9")
        after_scrapes(srv, 3)
        srv.text = vllm_page("+Inf")

    try:
        code, events, err = watch(tmp_path, [srv.url], script=script, duration="18")
    finally:
        srv.close()
    assert code == 0, err
    assert events[-1]["event"] == "stop" and events[-1]["preemptions"] == 9 and events[-1]["not_visible"] == []
    status = [e for e in events if e["event"] == "status"][0]
    assert status["kv_usage"] is None and status["counter"] == 0.0
    ends = [e for e in events if e["event"] == "storm_end"]
    assert [e["preemptions"] for e in ends] == [5, 4]
    assert [e["analyzed"] for e in ends] == [5, 4]  # analyze of each folder gives the watch's count
    assert ends[0]["peak_kv_usage"] is None and ends[0]["max_waiting"] == 3.0
    assert ends[1]["counter_start"] == 5.0 and ends[1]["counter_end"] == 9.0
    assert not [e for e in events if e["event"] == "restart"]
    assert err.count("the preemption counter reads NaN") == 1


def test_a_server_whose_page_has_no_counter_is_not_visible(tmp_path):
    """Before: a server that answered pages without the preemption counter counted as visible:
    ``--fail-on unknown`` exited 0, and nothing said its preemptions cannot be seen."""
    srv = Page(NO_COUNTER)
    try:
        code, events, err = watch(tmp_path, [srv.url], "--fail-on", "unknown", duration="3")
    finally:
        srv.close()
    assert code == 6, err
    assert "its /metrics page has no preemption counter (vllm:num_preemptions_total; SGLang: " in err
    assert (
        f"--fail-on unknown: no server's preemption count was seen ({srv.url}: its page never showed a readable" in err
    )
    assert events[-1]["event"] == "stop" and events[-1]["not_visible"] == [srv.url]


def test_several_servers_one_not_visible_the_total_is_a_lower_bound(tmp_path):
    """Two servers, one with a rising counter (3 preemptions), one whose page has no counter. Before:
    ``--fail-on unknown`` exited 0 and ``count>5`` exited 0 without a word (the total counts one
    server only). Now ``unknown`` holds (exit 6, naming the server), ``count>5`` warns that 3 is a
    lower bound, and ``any``, which holds on the server seen, still wins (exit 4)."""
    seen, blind = Page(vllm_page("0")), Page(NO_COUNTER)

    def rise():
        after_scrapes(seen, 2)  # the watch has read 0 (its baseline) before the counter moves
        seen.text = vllm_page("3")

    try:
        runs = {}
        for cond in ("unknown", "count>5", "any"):
            seen.text = vllm_page("0")
            runs[cond] = watch(tmp_path, [seen.url, blind.url], "--fail-on", cond, script=rise, duration="6")
    finally:
        seen.close()
        blind.close()
    code, events, err = runs["unknown"]
    assert events[-1]["preemptions"] == 3 and events[-1]["not_visible"] == [blind.url]
    assert code == 6, err
    assert (
        f"--fail-on unknown: the preemption count of {blind.url}: its page never showed a readable preemption counter"
        in err
    )
    assert "so the total is not known either" in err
    code, events, err = runs["count>5"]
    assert code == 0 and events[-1]["preemptions"] == 3, err
    assert "warning: --fail-on count>5: not met on the servers seen, but the total (3) is a lower bound" in err
    assert blind.url in err and "add --fail-on unknown" in err
    code, events, err = runs["any"]
    assert code == 4, err
    assert "--fail-on any: condition met" in err


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("http://[::1", "not a valid URL (Invalid IPv6 URL)"),
        ("http://h:99999/metrics", "not a valid URL (Port out of range 0-65535)"),
        ("http://h:abc/metrics", "not a valid URL (Port could not be cast to integer value as 'abc')"),
        ("http:///metrics", "no host in the URL"),
    ],
)
def test_a_url_no_request_can_be_sent_to_is_a_usage_error(tmp_path, url, words):
    """Before: accepted; the watch said ``server_down`` ("Invalid IPv6 URL") and ran until stopped,
    exit 0 (a CI smoke test passed against nothing)."""
    p = subprocess.run(
        [sys.executable, "-m", "preemptlog", "watch", "--metrics", url, "--duration", "3", "-o", "out"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert p.returncode == 2, p.stderr
    assert p.stdout == ""
    assert p.stderr.strip().splitlines() == [
        f"preemptlog: error: --metrics {url!r}: {words} (e.g. http://127.0.0.1:8000/metrics)"
    ]
