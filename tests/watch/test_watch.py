"""``preemptlog watch`` against a scripted server on loopback (issue 35).

The server (http.server in a thread, 127.0.0.1 only) serves a real vLLM 0.32.0 ``/metrics`` page
(fixtures/capture/vllm-0.32.0-metrics.json.gz) with the counter, its ``_created`` and the gauges
set by the test: a counter that rises, stays flat, drops with a new ``_created`` (a restart);
HTTP 500s and hanging requests (a server down). A log file beside it grows with vLLM stats lines,
is rotated and truncated. The watch runs as a real subprocess (``python -m preemptlog watch``),
so SIGTERM, the exit code and the last line are the ones a user gets.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from preemptlog.watch.follow import Follower, Line, Ring
from preemptlog.watch.scrape import Reading, Scraper, parse
from preemptlog.watch.storms import StormTracker, increase

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "fixtures" / "capture" / "vllm-0.32.0-metrics.json.gz"
TEXTS = json.loads(gzip.open(FIX, "rt").read())["texts"]
PAGE = TEXTS[2]
CREATED_0 = 1796118475.047928


def page(counter: float, created: float = CREATED_0, running: int = 5, waiting: int = 0, kv: float = 0.5) -> str:
    """The real page with the counter, its _created and the gauges replaced."""
    text = re.sub(r"^(vllm:num_preemptions_total\{[^}]*\}) \S+$", rf"\g<1> {counter:.1f}", PAGE, flags=re.M)
    text = re.sub(r"^(vllm:num_preemptions_created\{[^}]*\}) \S+$", rf"\g<1> {created!r}", text, flags=re.M)
    text = re.sub(r"^(vllm:num_requests_running\{[^}]*\}) \S+$", rf"\g<1> {running:.1f}", text, flags=re.M)
    text = re.sub(r"^(vllm:num_requests_waiting\{[^}]*\}) \S+$", rf"\g<1> {waiting:.1f}", text, flags=re.M)
    return re.sub(r"^(vllm:kv_cache_usage_perc\{[^}]*\}) \S+$", rf"\g<1> {kv!r}", text, flags=re.M)


class Scripted:
    """A /metrics server whose page the test sets (``set``); ``mode`` 'ok', '500', 'hang' or 'hang-once'."""

    def __init__(self, text: str | None = None) -> None:
        self.counter, self.created, self.running, self.waiting, self.kv = 0.0, CREATED_0, 5, 0, 0.5
        self.text = text  # served as it is when given (a hand-written page), else the real page with the values
        self.mode = "ok"
        self.hits = 0
        self.lock = threading.Lock()
        outer = self

        class H(BaseHTTPRequestHandler):
            def do_GET(self):
                with outer.lock:
                    outer.hits += 1
                    mode = outer.mode
                    if mode == "hang-once":  # this request hangs, the next ones are answered
                        outer.mode = "ok"
                    text = outer.text
                    if text is None:
                        text = page(outer.counter, outer.created, outer.running, outer.waiting, outer.kv)
                    body = text.encode()
                if mode in ("hang", "hang-once"):
                    time.sleep(12)
                    return
                if mode == "500":
                    self.send_response(500)
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/metrics"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def set(self, **kw) -> None:
        with self.lock:
            for k, v in kw.items():
                setattr(self, k, v)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *a):
        self.httpd.shutdown()
        self.httpd.server_close()


def stats_line(t: float, running: int, waiting: int, kv: float) -> str:
    """A vLLM 0.32 stats line stamped ``t`` in UTC (the watch analyses with --tz UTC)."""
    d = datetime.fromtimestamp(t, UTC)
    return (
        f"(APIServer pid=4242) INFO {d:%m-%d %H:%M:%S} [loggers.py:335] Engine 000: Avg prompt throughput: 600.1 "
        f"tokens/s, Avg generation throughput: 502.7 tokens/s, Running: {running} reqs, Waiting: {waiting} reqs, "
        f"GPU KV cache usage: {kv:.1f}%, Prefix cache hit rate: 0.0%\n"
    )


class LogWriter(threading.Thread):
    """Writes a stats line every ``every`` seconds (and, with ``pad``, filler lines to make bytes)."""

    def __init__(self, path: Path, srv: Scripted, every: float = 0.5, pad: int = 0) -> None:
        super().__init__(daemon=True)
        self.path, self.srv, self.every, self.pad = path, srv, every, pad
        self.stopping = threading.Event()
        self.lines = 0

    def run(self) -> None:
        while not self.stopping.is_set():
            with self.srv.lock:
                r, w, kv = self.srv.running, self.srv.waiting, self.srv.kv * 100
            with open(self.path, "a") as fh:
                fh.write(stats_line(time.time(), r, w, kv))
                for i in range(self.pad):
                    fh.write(f"(APIServer pid=4242) INFO filler line {self.lines} {i} " + "x" * 80 + "\n")
                self.lines += 1
            self.stopping.wait(self.every)

    def stop(self) -> None:
        self.stopping.set()
        self.join()


def start_watch(*args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "preemptlog", "watch", "-f", "ndjson", "--tz", "UTC", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


class Lines:
    """The watch's stdout, read by a thread: the ndjson events as they come."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc, self.events, self.raw = proc, [], []
        self.arrived: list[float] = []  # when each line reached the test (test_watch_vllm reports it)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.raw.append(line)
            self.arrived.append(time.time())
            self.events.append(json.loads(line))

    def wait_for(self, pred, timeout: float = 60.0) -> dict:
        t0 = time.time()
        while time.time() - t0 < timeout:
            for e in list(self.events):
                if pred(e):
                    return e
            if self.proc.poll() is not None and not self.thread.is_alive():
                break
            time.sleep(0.05)
        err = self.proc.stderr.read() if self.proc.poll() is not None else ""
        raise AssertionError(f"no such event in {timeout} s: {self.events[-5:]}\n{err[-2000:]}")

    def of(self, kind: str) -> list[dict]:
        return [e for e in self.events if e["event"] == kind]


def stop(proc: subprocess.Popen, lines: Lines, sig=signal.SIGTERM, timeout: float = 120) -> tuple[int, str]:
    proc.send_signal(sig)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("the watch ignored the signal") from None
    lines.thread.join(10)
    return proc.returncode, proc.stderr.read()


def analyze_json(bundle: Path) -> tuple[dict, subprocess.CompletedProcess]:
    p = subprocess.run(
        [sys.executable, "-m", "preemptlog", "analyze", str(bundle), "-f", "json", "--tz", "UTC"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    return json.loads(p.stdout), p


# -- the pieces -------------------------------------------------------------------------------------


def test_parse_reads_the_counter_its_created_and_the_gauges():
    rs = [parse(t.encode(), 100.0 + i) for i, t in enumerate(TEXTS)]
    assert [r.total for r in rs] == [0.0, 7.0, 13.0]
    r = rs[2]
    assert len(r.counters) == 1 and list(r.created.values()) == [pytest.approx(1.796118475047928e09)]
    assert r.running == 5.0 and r.waiting == 0.0 and r.kv_usage == pytest.approx(74.6031746)
    assert parse(b"# nothing here\nfoo 1\n", 1.0).total is None
    # the underscore spelling and a second engine are read too, and summed
    two = 'vllm_num_preemptions_total{engine="0"} 3.0\nvllm_num_preemptions_total{engine="1"} 4.0\n'
    assert parse(two.encode(), 1.0).total == 7.0


def _r(t: float, v: float, created: float = 1.0, **kw) -> Reading:
    return Reading(t=t, counters={'engine="0"': v}, created={'engine="0"': created}, **kw)


def test_storms_open_on_the_first_increase_add_up_and_close_after_quiet():
    tr = StormTracker("s", quiet=10)
    assert tr.feed(_r(0, 5)) == []  # the baseline: what came before the watch is no storm
    assert tr.feed(_r(5, 5)) == []
    (start,) = tr.feed(_r(10, 8))
    assert start.kind == "storm_start" and start.storm.preemptions == 3 and start.storm.baseline_t == 5
    assert start.storm.counter_start == 5
    assert tr.feed(_r(15, 20)) == []
    assert tr.feed(_r(20, 20)) == [] and tr.tick(24.9) == []
    (end,) = tr.tick(25.0)  # 10 s after the last increase
    s = end.storm
    assert end.kind == "storm_end" and s.preemptions == 15 == s.counter_end - s.counter_start
    assert (s.start, s.last_increase, s.end, s.ended_by, s.cut) == (10, 15, 25.0, "quiet", False)
    (again,) = tr.feed(_r(30, 21))
    assert again.kind == "storm_start" and again.storm.preemptions == 1
    (cut,) = tr.cut(31)
    assert cut.storm.cut and cut.storm.ended_by == "stop" and tr.cut(32) == []
    assert tr.storms == 2 and tr.preemptions == 16


def test_a_restart_is_said_ends_the_storm_and_counts_from_zero():
    tr = StormTracker("s", quiet=10)
    tr.feed(_r(0, 100))
    tr.feed(_r(5, 110))  # a storm: 10
    out = tr.feed(_r(10, 4, created=2.0))  # new _created, 4 since the restart
    assert [t.kind for t in out] == ["restart", "storm_end", "storm_start"]
    assert out[0].detail["why"] == "the counter's _created changed"
    assert out[1].storm.preemptions == 10 and out[1].storm.ended_by == "restart"
    assert out[2].storm.preemptions == 4 and out[2].storm.at_restart and out[2].storm.counter_start == 0
    # a counter that drops (no _created on the page) is a restart too; a drop to 0 opens nothing
    tr2 = StormTracker("s", quiet=10)
    tr2.feed(Reading(t=0, counters={"": 50.0}))
    out = tr2.feed(Reading(t=5, counters={"": 0.0}))
    assert [t.kind for t in out] == ["restart"] and "dropped from 50 to 0" in out[0].detail["why"]
    # a page without the counter (a server still starting) is skipped, not a restart
    assert tr2.feed(Reading(t=6)) == [] and tr2.prev.t == 5
    assert increase(_r(0, 1), _r(1, 1)) == (0, None)


def test_the_rate_per_minute():
    tr = StormTracker("s", quiet=100)
    for i in range(13):
        tr.feed(_r(i * 5, i * 10))  # 10 every 5 s: 120 a minute
    assert tr.per_minute(60) == pytest.approx(120)


def test_follow_holds_partial_lines_and_survives_rotation_and_truncation(tmp_path):
    log = tmp_path / "vllm.log"
    said: list[str] = []
    f = Follower(log, said.append)  # missing at the start: waited for, said once
    assert f.poll() == [] and f.poll() == [] and len(said) == 1 and "waiting for it" in said[0]
    log.write_bytes(b"one\ntw")  # appears: read from its start; the partial line is held
    assert [ln.data for ln in f.poll()] == [b"one\n"]
    with open(log, "ab") as fh:
        fh.write(b"o\nthree\n")
    assert [ln.data for ln in f.poll()] == [b"two\n", b"three\n"]
    with open(log, "ab") as fh:
        fh.write(b"four\nfi")
    log.rename(tmp_path / "vllm.log.1")  # rotated: the old file's rest first, then the new file
    log.write_bytes(b"six\n")
    got = [ln.data for ln in f.poll()]
    assert got == [b"four\n", b"fi\n", b"six\n"] and f.rotations == 1
    with open(log, "ab") as fh:
        fh.write(b"seven\n")
    assert [ln.data for ln in f.poll()] == [b"seven\n"]
    log.write_bytes(b"8\n")  # truncated (copytruncate, > file): from its new start
    assert [ln.data for ln in f.poll()] == [b"8\n"] and f.truncations == 1
    assert any("rotated" in s for s in said) and any("truncated" in s for s in said)
    f.close()


def test_follow_bounds_a_line_without_newline_and_starts_at_the_end(tmp_path, monkeypatch):
    from preemptlog.watch import follow

    log = tmp_path / "x.log"
    log.write_bytes(b"old\n")
    monkeypatch.setattr(follow, "MAX_LINE", 10)
    f = Follower(log, lambda s: None)
    assert f.poll() == []  # what was there before the watch is not read
    with open(log, "ab") as fh:
        fh.write(b"a" * 25)
    got = f.poll()
    assert [ln.data for ln in got] == [b"a" * 10 + b"\n"] * 2 and f.pending == b"a" * 5


def test_the_storms_records_are_the_latest_its_counter_counted(tmp_path):
    """vLLM counts a preemption when the request is next reported: the storm's N preemptions are the
    N latest preempt records at or before the scrape of its last increase (one stamped before the
    baseline scrape at 10 s, none after 12 s); a preemption's step and table records go with it."""
    from preemptlog.watch.bundle import select_records

    def pre(ts, rid):
        return [
            {"type": "step", "ts": ts, "at": "preempt", "engine": 0},
            {"type": "table", "ts": ts, "at": "preempt", "request_id": rid},
            {"type": "event", "ts": ts, "action": "preempt", "request_id": rid},
        ]

    recs = [*pre(3.0, "old"), {"type": "request", "ts": 4.0, "event": "arrival", "request_id": "r0"}]
    recs += [*pre(9.8, "a"), {"type": "request", "ts": 10.2, "event": "arrival", "request_id": "r1"}]
    recs += [*pre(10.5, "b"), *pre(11.0, "c"), *pre(12.6, "late"), {"type": "request", "ts": 13, "event": "finish"}]
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "records-7.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs) + "not json\n")
    out = tmp_path / "out"
    out.mkdir()
    got = select_records({"records-7.jsonl": raw / "records-7.jsonl"}, out, 3, 12.0, 10.0, 14.0)
    kept = [json.loads(x) for x in (out / "records-7.jsonl").read_text().splitlines()]
    assert got == {"files": {"records-7.jsonl": 11}, "preemptions": 3, "skipped": 1}
    assert [r["request_id"] for r in kept if r.get("action") == "preempt"] == ["a", "b", "c"]
    assert {r["ts"] for r in kept if r.get("at") == "preempt"} == {9.8, 10.5, 11.0}
    assert [r["ts"] for r in kept if r["type"] == "request"] == [10.2, 13]  # the window's, from 9.8 on


def test_ring_keeps_the_latest_within_count_and_bytes():
    r: Ring[Line] = Ring(3, 100, lambda ln: len(ln.data))
    for i in range(10):
        r.append(Line(i, b"x" * 30))
    assert [ln.t for ln in r] == [7, 8, 9] and r.bytes == 90
    r.append(Line(10, b"y" * 80))
    assert [ln.t for ln in r] == [10] and r.dropped == 10


def test_scraper_backs_off_when_slow_or_failing_never_when_refused():
    import queue

    s = Scraper("http://x", 5.0, queue.Queue())
    assert s.next_delay(True, 0.1, False) == 5.0
    assert s.next_delay(True, 4.0, False) == 8.0  # slow: twice the time it took
    assert [s.next_delay(False, 10.0, True) for _ in range(4)] == [10.0, 20.0, 30.0, 30.0]
    assert s.next_delay(True, 0.1, False) == 5.0
    assert s.next_delay(False, 0.0, False) == 5.0  # refused: nothing listens, ask again at the interval


# -- the command, end to end -----------------------------------------------------------------------


def _iso(t: str) -> float:
    return datetime.fromisoformat(t).timestamp()


@pytest.mark.slow
def test_storms_are_told_saved_and_explained_and_sigterm_cuts_the_last(tmp_path):
    """Counter 0 -> 7 -> 20 -> 25, flat (storm 1, the log rotated then truncated in the middle of it);
    HTTP 500s (down, said once); back with a new _created and 3 (a restart: storm 2 from 0), 9;
    SIGTERM while storm 2 lasts."""
    log, out = tmp_path / "vllm.log", tmp_path / "incidents"
    log.write_text("")
    every = 1.0
    with Scripted() as srv:
        lw = LogWriter(log, srv, every=0.25)
        lw.start()
        p = start_watch("--metrics", srv.url, "--log", str(log), "--every", "1", "--quiet", "4", "-o", str(out))
        lines = Lines(p)
        lines.wait_for(lambda e: e["event"] == "status")
        t_set = time.time()
        srv.set(counter=7, running=16, waiting=30, kv=0.984)
        s1 = lines.wait_for(lambda e: e["event"] == "storm_start", 20)
        time.sleep(1.2)
        log.rename(tmp_path / "vllm.log.1")  # rotated mid-storm (the writer opens the name each time)
        srv.set(counter=20)
        time.sleep(1.2)
        with open(log, "w"):
            pass  # truncated mid-storm
        srv.set(counter=25, running=5, waiting=0, kv=0.5)
        e1 = lines.wait_for(lambda e: e["event"] == "storm_end", 120)
        srv.set(mode="500")
        lines.wait_for(lambda e: e["event"] == "server_down", 20)
        time.sleep(2.5)  # more failures: still one server_down
        srv.set(mode="ok", counter=3, created=CREATED_0 + 600)
        lines.wait_for(lambda e: e["event"] == "storm_start" and e["at_restart"], 60)
        time.sleep(1.5)
        srv.set(counter=9)
        time.sleep(1.5)
        rc, err = stop(p, lines)
        lw.stop()
    assert rc == 0, err[-3000:]
    assert "Traceback" not in err
    ev = lines.events
    assert lines.raw[-1].endswith("\n") and ev[-1]["event"] == "stop" and ev[-1]["reason"] == "SIGTERM"
    kinds = [e["event"] for e in ev if e["event"] != "status"]
    assert kinds == [
        "start", "storm_start", "storm_end", "server_down", "server_up", "restart", "storm_start", "storm_end", "stop",
    ]  # fmt: skip
    # storm 1: opened by the scrape after the counter moved, within two intervals by the watch's own
    # clock (when the line reached this test depends on the machine's load: not asserted); counted exactly
    assert _iso(s1["time"]) - t_set <= 2 * every and s1["preemptions"] == 7 and s1["kv_usage"] == 98.4
    assert e1["preemptions"] == 25 and e1["cut"] is False and e1["ended_by"] == "quiet"
    assert _iso(e1["time"]) - _iso(e1["last_preemption"]) >= 4.0
    assert "KV cache exhausted" in e1["cause"] and "vLLM V1 preempts" in e1["cause"]
    assert e1["fix"] and e1["fix_none_why"] is None
    down = [e for e in ev if e["event"] == "server_down"]
    assert len(down) == 1 and down[0]["error"] == "HTTP 500 Internal Server Error"
    (restart,) = [e for e in ev if e["event"] == "restart"]
    assert restart["why"] == "the counter's _created changed" and restart["counter_before"] == 25.0
    e2 = [e for e in ev if e["event"] == "storm_end"][1]
    assert e2["preemptions"] == 9 and e2["cut"] is True and e2["ended_by"] == "stop"
    assert ev[-1]["storms"] == 2 and ev[-1]["preemptions"] == 25 + 9  # every increase of the counter
    # the bundles: published whole, nothing half-written left; analyze says the same count and cause
    assert sorted(p.name for p in out.iterdir()) == sorted(Path(e["bundle"]).name for e in (e1, e2))
    for e in (e1, e2):
        b = Path(e["bundle"])
        names = {f.name for f in b.iterdir()}
        assert {"README.md", "capture.jsonl", "vllm.log"} <= names
        proms = sorted(b.glob("metrics-*.prom"))
        assert len(proms) == e["scrapes"] >= 3
        # capture's format: stamped when the answer arrived, the mark saying how long it took
        assert all(
            re.fullmatch(r"# preemptlog capture: .* when the answer arrived \(\d+\.\d{3} s after the request\)",
                         f.read_text().split("\n", 2)[1])
            for f in proms
        )  # fmt: skip
        doc, a = analyze_json(b)
        assert a.returncode == 0, a.stderr[-2000:]
        assert len(doc["events"]) == e["preemptions"] == e["analyzed"]
        assert doc["summary"]["headline"] == e["headline"] and doc["summary"]["headline"].endswith(e["cause"])
        readme = (b / "README.md").read_text()
        assert e["headline"] in readme and f"preemptlog analyze {b.name}" in readme
        stop_rec = json.loads((b / "capture.jsonl").read_text().splitlines()[-1])
        assert stop_rec["storm"]["preemptions"] == e["preemptions"]
    # the log of storm 1 holds the lines of both files: before the rotation, after it and after the cut
    text1 = (Path(e1["bundle"]) / "vllm.log").read_text()
    assert all(ln.startswith("(APIServer pid=4242) INFO") for ln in text1.splitlines())
    assert "Running: 16 reqs" in text1 and "Running: 5 reqs" in text1
    assert "rotated" in err and "truncated" in err  # said once each, on stderr (the notes of ndjson)


@pytest.mark.slow
def test_a_hanging_server_is_down_once_and_sigterm_still_stops_at_once(tmp_path):
    with Scripted() as srv:
        srv.set(mode="hang")
        p = start_watch("--metrics", srv.url, "--every", "1", "--quiet", "4", "-o", str(tmp_path / "o"))
        lines = Lines(p)
        down = lines.wait_for(lambda e: e["event"] == "server_down", 30)
        time.sleep(5)  # timeouts back off: no second line, no new request while one is in flight
        rc, err = stop(p, lines, timeout=60)
    assert rc == 0 and "Traceback" not in err, err[-2000:]
    assert down["error"] == "timed out"
    assert [e["event"] for e in lines.events] == ["start", "server_down", "stop"]
    assert lines.events[-1]["reason"] == "SIGTERM"
    assert srv.hits <= 4  # 2 s timeout, then 4 s, 8 s...: not one request a second


@pytest.mark.slow
def test_one_late_answer_of_a_busy_server_is_not_a_server_down(tmp_path):
    """A server busy with the load that preempts can answer one /metrics request late. One timeout of a
    server that answered is not 'server_down' (before: server_down, then server_up at the next scrape,
    both said in the middle of a storm); the next attempt decides. A server that keeps hanging is down,
    dated from its first timeout (test above)."""
    with Scripted() as srv:
        p = start_watch("--metrics", srv.url, "--every", "1", "--quiet", "4", "-o", str(tmp_path / "o"))
        lines = Lines(p)
        lines.wait_for(lambda e: e["event"] == "status", 30)
        srv.set(mode="hang-once")
        deadline = time.time() + 30
        while srv.hits < 4 and time.time() < deadline:  # the hung request, then answered ones
            time.sleep(0.2)
        time.sleep(1.5)
        rc, err = stop(p, lines, timeout=60)
    assert rc == 0 and "Traceback" not in err, err[-2000:]
    assert srv.hits >= 4
    kinds = [e["event"] for e in lines.events if e["event"] != "status"]
    assert kinds == ["start", "stop"], kinds


def test_stop_does_not_wait_for_a_request_that_never_returns(tmp_path):
    """The stop is structural, not a race against a clock: the scrape blocks until the test ends,
    and the watch still finishes (a timeout here would mean it joined the request)."""
    from preemptlog.watch import Watch, WatchOptions
    from preemptlog.watch.output import NdjsonOutput

    release, asked = threading.Event(), threading.Event()

    def never(url: str, timeout: float) -> bytes:
        asked.set()
        release.wait()
        raise TimeoutError("released")

    out, err = io.StringIO(), io.StringIO()
    opts = WatchOptions(servers=("http://127.0.0.1:9/metrics",), every=1.0, quiet=4.0, out=tmp_path / "o")
    w = Watch(opts, NdjsonOutput(out, err), fetch=never)
    done: list = []
    t = threading.Thread(target=lambda: done.append(w.run()), daemon=True)
    t.start()
    try:
        assert asked.wait(60), "the watch never asked the server"
        w.stop("SIGTERM")
        t.join(120)
        assert not t.is_alive(), "the watch waited for the request in flight"
        assert not release.is_set()  # the request was still in flight when the watch had finished
    finally:
        release.set()
    (outcome,) = done
    assert outcome.storms == []
    ev = [json.loads(x) for x in out.getvalue().splitlines()]
    assert [e["event"] for e in ev] == ["start", "stop"] and ev[-1]["reason"] == "SIGTERM"


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--every", "0.5"], "--every 0.5: at least 1 second"),
        (["--every", "soon"], "--every 'soon' is not a number of seconds"),
        (["--every", "5", "--quiet", "8"], "--quiet 8: at least twice --every (10 s)"),
        (["--duration", "0"], "--duration 0: must be positive"),
        (["--log", "a.log", "--log", "b.log"], "--log: 2 given for 1 --metrics"),
        (["--fail-on", "sometimes"], "--fail-on 'sometimes' is not a condition"),
        (["--grafana-url", "grafana:3000"], "not an http(s) URL"),
    ],
)
def test_bad_options_are_one_line_and_exit_2(tmp_path, args, words):
    p = subprocess.run(
        [sys.executable, "-m", "preemptlog", "watch", "--metrics", "http://127.0.0.1:9/metrics", *args,
         "-o", str(tmp_path / "o")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert p.returncode == 2, p.stderr
    assert p.stderr.count("\n") == 1 and words in p.stderr and p.stderr.startswith("preemptlog: error: "), p.stderr
    assert p.stdout == ""


@pytest.mark.slow
def test_duration_cuts_the_storm_fail_on_and_the_grafana_annotation(tmp_path):
    """--duration ends an open storm (cut); --fail-on any holds (exit 4); each storm is posted to
    Grafana as an annotation on vLLM's KV-cache panel (a fake Grafana on loopback)."""
    posted: list[dict] = []

    class G(BaseHTTPRequestHandler):
        def do_POST(self):
            posted.append({"path": self.path, "auth": self.headers.get("Authorization"),
                           "body": json.loads(self.rfile.read(int(self.headers["Content-Length"])))})  # fmt: skip
            body = json.dumps({"id": 41 + len(posted), "message": "Annotation added"}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    g = ThreadingHTTPServer(("127.0.0.1", 0), G)
    threading.Thread(target=g.serve_forever, daemon=True).start()
    try:
        with Scripted() as srv, Scripted() as other:  # two servers: the other one stays calm
            p = start_watch(
                "--metrics", srv.url, "--metrics", other.url, "--every", "1", "--quiet", "30", "--duration", "6",
                "-o", str(tmp_path / "o"), "--fail-on", "any", "--grafana-url",
                f"http://127.0.0.1:{g.server_address[1]}", env={"GRAFANA_TOKEN": "t0ken"},
            )  # fmt: skip
            lines = Lines(p)
            lines.wait_for(lambda e: e["event"] == "status" and e["server"] == srv.url, 30)
            srv.set(counter=4)
            p.wait(timeout=120)
            lines.thread.join(10)
            err = p.stderr.read()
    finally:
        g.shutdown()
        g.server_close()
    assert p.returncode == 4, err[-2000:]
    assert "--fail-on any: condition met" in err and "Traceback" not in err
    assert {e["server"] for e in lines.of("status")} == {srv.url, other.url}
    (end,) = lines.of("storm_end")
    assert (
        end["server"] == srv.url
        and end["cut"] is True
        and end["preemptions"] == 4
        and lines.events[-1]["reason"] == "--duration elapsed"
    )
    assert end["grafana"] == "42" and len(posted) == 1
    a = posted[0]
    assert a["path"] == "/api/annotations" and a["auth"] == "Bearer t0ken"
    body = a["body"]
    assert body["dashboardUID"] == "vllm-kv-cache" and body["panelId"] == 10
    assert body["time"] == int(_iso(end["start"]) * 1000) and body["timeEnd"] == int(_iso(end["time"]) * 1000)
    assert "preemptlog" in body["tags"] and f"server:{srv.url}" in body["tags"] and end["headline"] in body["text"]


@pytest.mark.slow
def test_on_a_terminal_a_live_status_line_per_server_and_a_line_per_storm(tmp_path):
    from ..support.ptyrun import run_on_pty

    with Scripted() as srv:

        def script():
            # once the watch has read the calm page three times (its start-up is seconds on a loaded machine:
            # a counter already at 12 on its first scrape would be where it started, not a storm)
            t0 = time.time()
            while srv.hits < 3 and time.time() - t0 < 60:
                time.sleep(0.1)
            srv.set(counter=12, running=16, waiting=30, kv=0.99)

        threading.Thread(target=script, daemon=True).start()
        text, rc = run_on_pty(
            ["watch", "--metrics", srv.url, "--every", "1", "--quiet", "2", "--duration", "9", "-o",
             str(tmp_path / "o"), "--tz", "UTC"],
            cols=160, rows=40, env={**os.environ, "NO_COLOR": "1"},
        )  # fmt: skip
    assert rc == 0, text[-2000:]
    assert "Traceback" not in text
    assert re.search(r"127\.0\.0\.1:\d+/metrics  quiet  running 5  waiting 0  KV 50 %", text), text[-3000:]
    assert "STORM  running 16  waiting 30  KV 99 %" in text
    assert re.search(r"\d\d:\d\d:\d\d http://127\.0\.0\.1:\d+/metrics: STORM: 12 preemption\(s\)", text)
    assert re.search(r"storm over: 12 preemption\(s\) .*KV cache exhausted", text)
    assert "\x1b[" in text  # the status lines are redrawn in place


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads RSS from /proc")
def test_soak_memory_stays_flat_while_the_log_grows_and_rotates(tmp_path):
    """About 24 s: the log grows by ~3 MB/s (40,000 lines a second) and is rotated every 3 s, the
    server is scraped every second; once the watch is stopped for 2 s (a host that starves it), so it
    finds a 6 MB backlog. The watch's rings are full after a few seconds (16 MB of lines): from then on
    its RSS does not grow with what it reads, nor with a backlog (read a piece at a time)."""
    log = tmp_path / "vllm.log"
    log.write_text("")
    written = [0, 0]  # bytes, rotations
    halt = threading.Event()

    def writer():
        line = "(APIServer pid=4242) INFO 12-04 23:11:05 [logger.py:1] " + "y" * 150 + "\n"
        last = time.time()
        while not halt.is_set():
            with open(log, "a") as fh:
                fh.write(line * 200)
            written[0] += len(line) * 200
            if time.time() - last > 3:
                os.replace(log, tmp_path / "vllm.log.1")  # the old one goes: disk stays bounded
                written[1] += 1
                last = time.time()
            time.sleep(0.01)

    with Scripted() as srv:
        p = start_watch(
            "--metrics", srv.url, "--log", str(log), "--every", "1", "--quiet", "2", "-o", str(tmp_path / "o")
        )
        lines = Lines(p)
        # the log starts moving once the watch follows it: a rotation during its start-up (imports take
        # seconds on a loaded machine) is one it never saw, and would not be said
        lines.wait_for(lambda e: e["event"] == "status", 60)
        w = threading.Thread(target=writer, daemon=True)
        w.start()
        t0, samples = time.time(), []
        while time.time() - t0 < 24:
            time.sleep(1)
            if 12 <= time.time() - t0 < 13:  # a watch starved of CPU for 2 s (a loaded host): a backlog
                os.kill(p.pid, signal.SIGSTOP)
                time.sleep(2)
                os.kill(p.pid, signal.SIGCONT)
            samples.append((time.time() - t0, _rss_kb(p.pid)))
        halt.set()  # the writer stops first, and the watch gets time to see its last rotation
        w.join()
        time.sleep(3)
        rc, err = stop(p, lines)
        hits = srv.hits
    assert rc == 0 and "Traceback" not in err, err[-2000:]
    early = [kb for t, kb in samples if 8 <= t < 10]
    late = [kb for t, kb in samples if t >= 16]
    growth_mb = (max(late) - max(early)) / 1024
    print(f"\nsoak: {written[0] / 1e6:.0f} MB of log, {written[1]} rotations, {hits} scrapes; RSS (MB) "
          f"{[round(kb / 1024, 1) for _, kb in samples]}; growth after the rings filled {growth_mb:.1f} MB")  # fmt: skip
    assert written[0] > 40e6 and written[1] >= 5 and hits >= 15
    assert err.count("rotated") == written[1]  # every rotation followed (and said once)
    assert growth_mb < 6, samples
    assert max(late) / 1024 < 200, samples


def test_follow_reads_a_backlog_in_pieces_and_a_rotated_file_to_its_end(tmp_path, monkeypatch):
    """A poll holds at most MAX_READ_PER_POLL bytes of lines (``more`` says the rest waits), and a
    rotated file with more than that left is read to its end before its successor: no line lost."""
    from preemptlog.watch import follow

    monkeypatch.setattr(follow, "MAX_READ_PER_POLL", 1000)
    monkeypatch.setattr(follow, "READ_CHUNK", 300)
    log = tmp_path / "vllm.log"
    log.write_bytes(b"")
    f = Follower(log, lambda s: None)
    old = [b"old %05d\n" % i for i in range(500)]  # 5,000 bytes behind the follower
    log.write_bytes(b"".join(old))
    log.rename(tmp_path / "vllm.log.1")
    new = [b"new %05d\n" % i for i in range(300)]
    log.write_bytes(b"".join(new))
    got: list[bytes] = []
    polls = 0
    while True:
        piece = [ln.data for ln in f.poll()]
        polls += 1
        assert sum(map(len, piece)) <= 1000 + 10  # one piece (and the line it completes)
        got += piece
        if not f.more:
            break
    assert got[:500] == old and f.rotations == 1  # the rotated file whole, then the new one
    got += [ln.data for ln in f.poll()]
    while f.more:
        got += [ln.data for ln in f.poll()]
    assert got == old + new and polls >= 5
    f.close()


def test_a_name_rotated_again_while_a_backlog_is_read_loses_no_file(tmp_path, monkeypatch):
    """Rotated twice before the reader got to the second file (a backlog read a piece a poll, a starved
    host): each file seen at the name is opened then and read in turn. Before, the second file was never
    opened (the name pointed past it when the first was done): its lines and its rotation were lost (the
    soak test's 'rotated' said 5 times for 6 rotations on a loaded machine)."""
    from preemptlog.watch import follow

    monkeypatch.setattr(follow, "MAX_READ_PER_POLL", 1000)
    monkeypatch.setattr(follow, "READ_CHUNK", 300)
    log = tmp_path / "vllm.log"
    log.write_bytes(b"")
    said: list[str] = []
    f = Follower(log, said.append)
    files = [[b"%s %05d\n" % (name, i) for i in range(300)] for name in (b"aaa", b"bbb", b"ccc")]
    log.write_bytes(b"".join(files[0]))
    os.replace(log, tmp_path / "vllm.log.1")
    log.write_bytes(b"".join(files[1]))
    got = [ln.data for ln in f.poll()]  # a piece of the first file; the second is seen (and held)
    assert f.more
    os.replace(log, tmp_path / "vllm.log.1")  # the second file rotated away before the reader got to it
    log.write_bytes(b"".join(files[2]))
    for _ in range(50):
        got += [ln.data for ln in f.poll()]
    assert got == files[0] + files[1] + files[2]
    assert f.rotations == 2 and sum("rotated" in x for x in said) == 2
    f.close()
