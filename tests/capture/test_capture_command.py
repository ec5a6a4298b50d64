"""``preemptlog capture`` against a local HTTP server (127.0.0.1 only) serving real vLLM /metrics text.

The texts (fixtures/capture/vllm-0.32.0-metrics.json.gz) were produced by a real vLLM 0.32.0
engine's PrometheusStatLogger in tests/support/vllm_driver.py; the counter reads 0, 7 and 13.
"""

from __future__ import annotations

import gzip
import json
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from preemptlog.capture import scrape
from preemptlog.capture.scrape import CAPTURE_MARK

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "capture" / "vllm-0.32.0-metrics.json.gz"
TEXTS = json.loads(gzip.open(FIX, "rt").read())["texts"]


class Server:
    """Serves TEXTS in turn; the requests whose number is in ``fail`` get an HTTP 500."""

    def __init__(self, fail=(), slow: float = 0.0, hang: dict[int, float] | None = None):
        self.hits = 0
        self.hang = hang or {}  # request number -> seconds it takes to answer
        self.fail = set(fail)
        self.made: list[float] = []  # when each page was made (after ``slow`` seconds of waiting)
        outer = self

        class H(BaseHTTPRequestHandler):
            def do_GET(self):
                n = outer.hits
                outer.hits += 1
                time.sleep(outer.hang.get(n, slow))  # a loaded server: the page is made well after the request
                if n in outer.fail:
                    self.send_response(500)
                    self.end_headers()
                    return
                body = TEXTS[min(n - sum(1 for f in outer.fail if f < n), len(TEXTS) - 1)].encode()
                outer.made.append(time.time())
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):  # the scraper stopped waiting
                    pass

            def log_message(self, *a):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/metrics"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *a):
        self.httpd.shutdown()
        self.httpd.server_close()


def cli(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "preemptlog", *args], capture_output=True, text=True, timeout=timeout)


def manifest(d: Path) -> list[dict]:
    return [json.loads(x) for x in (d / "capture.jsonl").read_text().splitlines()]


def test_capture_scrapes_records_a_gap_and_analyze_reads_it(tmp_path):
    out = tmp_path / "incident"
    with Server(fail={1}) as srv:
        p = cli("capture", "--metrics", srv.url, "--every", "1s", "--for", "6.5s", "-o", str(out))
    assert p.returncode == 5, p.stderr  # PARTIAL: one scrape failed
    assert "Traceback" not in p.stderr
    # some scrapes failed but the bundle holds the others: the next step is still to analyze it
    assert p.stderr.strip().splitlines()[-1].endswith(f"byte(s) of log copied; next: preemptlog analyze {out}")
    fails = [ln for ln in p.stderr.splitlines() if "HTTP 500" in ln]
    assert len(fails) == 1 and "retrying in 2s" in fails[0]
    files = sorted(out.glob("metrics-*.prom"), key=lambda f: f.stat().st_mtime)
    assert len(files) >= 3  # t = 0, (1 fails, backs off 2 s), 3, 4, 5, 6
    for f, text in zip(files, TEXTS + [TEXTS[-1]] * len(files)):
        head, mark, body = f.read_text().split("\n", 2)
        assert head.startswith("# scrape 20") and body == text
        assert re.fullmatch(
            re.escape(CAPTURE_MARK) + r" when the answer arrived \(\d+\.\d{3} s after the request\)", mark
        )
    m = manifest(out)
    assert [r["type"] for r in m] == ["start", "gap", "stop"]
    assert m[1]["failures"] == 1 and m[1]["error"] == "HTTP 500 Internal Server Error"
    assert m[2]["scrapes"] == len(files) and m[2]["reason"] == "--for elapsed"

    a = cli("analyze", str(out), "-f", "json", "--tz", "UTC")
    assert a.returncode == 5, a.stderr  # the gap makes the analysis partial
    doc = json.loads(a.stdout)
    assert len(doc["events"]) == 13  # counter 0 -> 7 -> 13 across the scrapes
    said = " ".join(a.stderr.split())  # the summary is wrapped to the width at word boundaries
    assert "capture gap 1: no /metrics scrape of " + srv.url in said
    assert any("capture gap 1" in w and "HTTP 500" in w for w in doc["summary"]["warnings"])
    # the scrape times are the ones the scraper recorded: facts, not assumptions
    assert not [x for x in doc["summary"]["assumptions"] if x["topic"] == "scrape time"]


def test_connection_refused_is_reported_one_line_each_and_exits_3(tmp_path):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    out = tmp_path / "x"
    p = cli(
        "capture", "--metrics", f"http://127.0.0.1:{port}/metrics", "--every", "1s", "--for", "4.5s", "-o", str(out)
    )
    assert p.returncode == 3, p.stderr
    assert "Traceback" not in p.stderr
    lines = [ln for ln in p.stderr.splitlines() if "Connection refused" in ln and "retrying" in ln]
    assert len(lines) == 2  # t=0 and t=2 (backed off), not one per second
    said = p.stderr.strip().splitlines()
    assert said[-1].startswith("preemptlog: error: ")
    # nothing was captured: the counts, and no "next: preemptlog analyze" right before the error
    assert said[-2] == "preemptlog: capture: 0 scrape(s), 2 failed (1 gap(s)), 0 byte(s) of log copied"
    assert "next: preemptlog analyze" not in p.stderr
    m = manifest(out)
    assert [r["type"] for r in m] == ["start", "gap", "stop"] and m[1]["failures"] == 2


def test_backoff_doubles_up_to_a_minute(monkeypatch, tmp_path):
    now = [1000.0]
    attempts = []

    def fail(url, timeout):
        attempts.append(now[0] - 1000.0)
        raise urllib.error.URLError(ConnectionRefusedError(111, "Connection refused"))

    def sleep(s):
        now[0] += s

    monkeypatch.setattr(scrape, "scrape_once", fail)
    said = []
    cap = scrape.Capture(
        tmp_path,
        url="http://127.0.0.1:9/metrics",
        every=1.0,
        duration=200.0,
        log=None,
        say=said.append,
        clock=lambda: now[0],
        sleep=sleep,
    )
    st = cap.run()
    assert attempts == [0, 2, 6, 14, 30, 62, 122, 182]
    assert st.gaps == 1 and st.failures == 8 and len(said) == 8
    assert said[0] == "preemptlog: capture: http://127.0.0.1:9/metrics: Connection refused; retrying in 2s"


def _wait_for(pred, timeout=30.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return False


def test_log_following_copies_only_what_is_appended_and_survives_truncation(tmp_path):
    src = tmp_path / "vllm.log"
    src.write_text("old line before the capture\n")
    out = tmp_path / "b"
    copy = out / "vllm.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "preemptlog", "capture", "--log", str(src), "--for", "120s", "-o", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert _wait_for(lambda: (out / "capture.jsonl").exists())  # the follower is at the end of the file
        with src.open("a") as fh:
            fh.write("INFO 12-01 10:00:01 [loggers.py:335] Engine 000: Running: 3 reqs\n")
        assert _wait_for(lambda: copy.exists() and "Running: 3" in copy.read_text())
        src.write_text("after truncation\n")  # logrotate copytruncate
        assert _wait_for(lambda: "after truncation" in copy.read_text())
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert copy.read_text() == "INFO 12-01 10:00:01 [loggers.py:335] Engine 000: Running: 3 reqs\nafter truncation\n"


def test_ctrl_c_stops_cleanly(tmp_path):
    out = tmp_path / "c"
    with Server() as srv:
        proc = subprocess.Popen(
            [sys.executable, "-m", "preemptlog", "capture", "--metrics", srv.url, "--every", "1s", "-o", str(out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.time() + 30
        while time.time() < deadline and not list(out.glob("metrics-*.prom")):
            time.sleep(0.1)
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    m = manifest(out)
    assert m[-1]["type"] == "stop" and m[-1]["reason"] == "interrupted" and m[-1]["scrapes"] >= 1
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporary file left


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_background_capture_stops_on_sigint_and_sigterm(tmp_path, sig):
    """Started the way a non-interactive shell starts `preemptlog capture ... &`: SIGINT ignored
    (inherited SIG_IGN; Python then installs no Ctrl-C handler of its own). It must still stop on
    SIGINT (kill -INT, or the script's trap) and on SIGTERM, and write its stop record."""
    out = tmp_path / "bg"
    with Server() as srv:
        proc = subprocess.Popen(
            [sys.executable, "-m", "preemptlog", "capture", "--metrics", srv.url, "--every", "1s", "-o", str(out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
        )
        try:
            assert _wait_for(lambda: bool(list(out.glob("metrics-*.prom"))))
            time.sleep(0.3)
            proc.send_signal(sig)
            _, err = proc.communicate(timeout=20)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    m = manifest(out)
    assert m[-1]["type"] == "stop" and m[-1]["reason"] == "interrupted" and m[-1]["signal"] == sig.name


@pytest.mark.parametrize(
    "args,msg",
    [
        (["-o", "{d}"], "nothing to capture"),
        (["--metrics", "ftp://x/metrics", "-o", "{d}"], "not an http(s) URL"),
        (["--metrics", "http://127.0.0.1:9/m", "--every", "0.5s", "-o", "{d}"], "at least 1s"),
        (["--metrics", "http://127.0.0.1:9/m", "--every", "soon", "-o", "{d}"], "is not a duration"),
        (["--metrics", "http://127.0.0.1:9/m", "--for", "-1s", "-o", "{d}"], "must be positive"),
    ],
)
def test_bad_arguments_are_one_line_exit_2(tmp_path, args, msg):
    p = cli("capture", *[a.replace("{d}", str(tmp_path / "o")) for a in args])
    assert p.returncode == 2, p.stderr
    assert msg in p.stderr and "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_capture_source_sniffs_and_reports(tmp_path):
    from preemptlog.pipeline.bundle import InputFile
    from preemptlog.sources import TimeContext, capture, sniff

    lines = [s for s, _ in capture.SAMPLES]
    assert sniff("\n".join(lines))[0] == "capture"
    p = tmp_path / "capture.jsonl"
    p.write_text("\n".join(lines) + "\n")
    out = capture.CaptureParsed([InputFile(0, p, p.name, "capture", None, p.stat().st_size, None, None)]).resolve(
        TimeContext(tz="UTC")
    )
    assert out.partial and len(out.warnings) == 1 and "2026-12-01T10:00:10" in out.warnings[0]
    assert len(out.notes) == 1 and "every 10.0 s" in out.notes[0]


def test_a_slow_servers_page_is_stamped_when_it_arrived_not_when_it_was_asked(tmp_path):
    """Counts on a page were made while the request waited: the file's time is the answer's, so a
    count is never stamped before the preemptions it counts (a `vllm serve` on a loaded machine
    answered 2-9 s late and its counts seemed to lead their records)."""
    from datetime import datetime

    out = tmp_path / "slow"
    with Server(slow=0.6) as srv:
        p = cli("capture", "--metrics", srv.url, "--every", "2s", "--for", "5s", "-o", str(out))
        made = list(srv.made)
    assert p.returncode == 0, p.stderr
    files = sorted(out.glob("metrics-*.prom"))
    assert len(files) == len(made) >= 2
    for f, t_made in zip(files, made, strict=True):
        head, mark, _ = f.read_text().split("\n", 2)
        stamped = datetime.fromisoformat(head.removeprefix("# scrape ")).timestamp()
        took = float(re.search(r"\((\d+\.\d+) s after the request\)", mark).group(1))
        assert stamped >= t_made - 0.002, (stamped, t_made)  # ms rounding of the stamp
        assert took >= 0.6


def test_one_late_answer_is_asked_again_not_a_gap(tmp_path):
    """A busy server answers /metrics late; the counters are cumulative, so the page asked again at
    once loses nothing: no gap, exit 0, one stderr line, the stop record counts it (a real
    `vllm serve` in a storm on 2 cores answered 2-9 s late and CI read a gap)."""
    out = tmp_path / "late"
    with Server(hang={1: 3.0}) as srv:  # --every 1s waits 2 s; the second request answers at once
        p = cli("capture", "--metrics", srv.url, "--every", "1s", "--for", "5.5s", "-o", str(out))
        hits = srv.hits
    assert p.returncode == 0, p.stderr
    late = [ln for ln in p.stderr.splitlines() if "no answer in" in ln]
    assert late == [
        f"preemptlog: capture: {srv.url}: no answer in 2s (a busy server answers late); asking again, waiting up to 10s"
    ]
    m = manifest(out)
    assert [r["type"] for r in m] == ["start", "stop"]
    assert m[-1]["late"] == 1 and m[-1]["failures"] == 0
    assert m[-1]["scrapes"] == len(list(out.glob("metrics-*.prom"))) == hits - 1  # the hung one wrote nothing
    a = cli("analyze", str(out), "-f", "json", "--tz", "UTC")
    assert a.returncode == 0, a.stderr
    assert not [w for w in json.loads(a.stdout)["summary"]["warnings"] if "capture gap" in w]


def test_a_scrape_late_twice_is_a_gap_from_its_first_request(tmp_path):
    out = tmp_path / "hung"
    t0 = time.time()
    with Server(hang={1: 12.5, 2: 12.5}) as srv:  # both requests of scrape 1 outlast their waits
        p = cli("capture", "--metrics", srv.url, "--every", "1s", "--for", "14s", "-o", str(out))
    assert p.returncode == 5, p.stderr
    assert sum("no answer in 2s" in ln for ln in p.stderr.splitlines()) == 1
    assert sum("timed out; retrying in 2s" in ln for ln in p.stderr.splitlines()) == 1
    m = manifest(out)
    assert [r["type"] for r in m] == ["start", "gap", "stop"]
    gap = m[1]
    assert gap["failures"] == 1 and gap["error"] == "timed out"
    from datetime import datetime

    start = datetime.fromisoformat(gap["start"]).timestamp()
    end = datetime.fromisoformat(gap["end"]).timestamp()
    assert start - t0 < 3.0  # dated from the first request (sent ~1 s in), not from the second's end
    assert end - start >= 12.0  # 2 s + 10 s of waiting, then a 2 s backoff before the next success
    assert m[-1]["late"] == 1 and m[-1]["failures"] == 1


def test_the_log_copy_reads_a_backlog_in_pieces_and_a_rotated_file_to_its_end(tmp_path, monkeypatch):
    """capture's copy of --log: a backlog copied a piece at a time, byte for byte; a rotated file's
    rest before the new file's start; a truncated file from its new start."""
    from preemptlog.capture import scrape

    monkeypatch.setattr(scrape, "COPY_CHUNK", 7)
    src, dst = tmp_path / "vllm.log", tmp_path / "copy.log"
    src.write_bytes(b"before the capture\n")
    f = scrape.LogFollower(src, dst, lambda s: None)
    with open(src, "ab") as fh:
        fh.write(b"".join(b"line %03d\n" % i for i in range(40)))
    assert f.poll() == 360
    with open(src, "ab") as fh:
        fh.write(b"rest of the old file\n")
    src.rename(tmp_path / "vllm.log.1")
    src.write_bytes(b"the new file\n")
    assert f.poll() == 21 + 13
    src.write_bytes(b"cut\n")  # truncated (shorter than what was read)
    assert f.poll() == 4
    f.close()
    want = b"".join(b"line %03d\n" % i for i in range(40)) + b"rest of the old file\nthe new file\ncut\n"
    assert dst.read_bytes() == want


def test_a_log_that_is_never_there_is_exit_3(tmp_path):
    # exit 0 and an empty bundle before ("0 byte(s) of log copied")
    p = cli("capture", "-o", str(tmp_path / "cap"), "--log", str(tmp_path / "nowhere.log"), "--for", "1s")
    assert p.returncode == 3, p.stderr
    said = p.stderr.strip().splitlines()
    assert said[-1].startswith(
        f"preemptlog: error: --log {tmp_path / 'nowhere.log'}: not there at any time during the capture"
    )
    # before: "...0 byte(s) of log copied; next: preemptlog analyze DIR", then the error that nothing was
    # captured; now the counts alone, and no advice to analyze an empty bundle
    assert said[-2] == "preemptlog: capture: 0 scrape(s), 0 failed (0 gap(s)), 0 byte(s) of log copied"
    assert "next: preemptlog analyze" not in p.stderr
    # a log that is there but gains nothing is no error (an idle server)
    (tmp_path / "idle.log").write_text("INFO 05-01 10:00:00 [api_server.py:1] vLLM API server version 0.8.5\n")
    p = cli("capture", "-o", str(tmp_path / "cap2"), "--log", str(tmp_path / "idle.log"), "--for", "1s")
    assert p.returncode == 0, p.stderr
    assert f"next: preemptlog analyze {tmp_path / 'cap2'}" in p.stderr
