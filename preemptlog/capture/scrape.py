"""``preemptlog capture``: scrape a live vLLM ``/metrics`` (and follow its log) into a bundle.

Each scrape goes to ``DIR/metrics-<epoch>.prom`` (written atomically through outio): the first line
is ``# scrape <ISO time>`` (the time the answer arrived, with its offset: every count on the page was
made by then, so a count never seems to lead the preemption it counts however slow the server was),
the second :data:`CAPTURE_MARK` and how long the answer took (:func:`mark`: this file is preemptlog's
own capture format: the Prometheus source takes that time as recorded, not assumed), then the body
exactly as served. ``--log FILE``: what is appended to FILE after the start is copied to
``DIR/<name of FILE>`` (a truncated or rotated file is followed from its new start). A session log
``DIR/capture.jsonl`` (source kind ``capture``, sources/capture.py) records the start, the stop and
every gap: a span in which scrapes failed, with the last error; ``preemptlog analyze DIR``
reports the gaps.

A scrape waits :func:`timeout_for` ``--every`` (2-10 s) for its answer. A busy server answers
/metrics late (a `vllm serve` in a preemption storm on 2 cores: 2-9 s), and a late page loses no count
(the counters are cumulative), so a scrape that times out outside a gap is asked again at once,
waiting :func:`late_timeout` (10-20 s); only when that fails too is it a failed scrape, and its gap
starts when the first request was sent. A failed scrape (connection refused, timeout, HTTP error) is
one line on stderr; the next attempt backs off (twice the delay each time, up to
``max(60 s, every)``) and a success ends the gap.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

MANIFEST = "capture.jsonl"
POLL_S = 0.2
# The second line of every scrape file begins so: the time on the first was recorded by the scraper
# when the answer arrived (sources/prometheus/text.py reads it: such files' scrape times are facts,
# not assumptions). A page is made between the request and its answer; under load that took 2-9 s
# (a `vllm serve` on a busy 2-core machine), and a page stamped when it was asked for held counts of
# preemptions recorded after that stamp.
CAPTURE_MARK = "# preemptlog capture: scrape time recorded by the scraper"


def mark(took: float | None = None) -> str:
    """The second line of a scrape file: :data:`CAPTURE_MARK` and how long the answer took."""
    after = f" ({took:.3f} s after the request)" if took is not None else ""
    return f"{CAPTURE_MARK} when the answer arrived{after}"


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")


@dataclass
class Stats:
    scrapes: int = 0
    failures: int = 0
    gaps: int = 0
    late: int = 0  # scrapes asked twice: the first answer did not come in time
    log_bytes: int = 0
    log_never_found: bool = False  # --log was not there at any poll of the capture
    files: list[str] = field(default_factory=list)


COPY_CHUNK = 1 << 20


class LogFollower:
    """Copies what is appended to ``src`` into ``dst`` (from the moment it starts)."""

    def __init__(self, src: Path, dst: Path, say: Callable[[str], None]) -> None:
        self.src, self.dst, self.say = src, dst, say
        self.fh = None
        self.ino = None
        self.pos = 0
        self.missing_said = False
        self.out = None
        self._open(at_end=True)

    def _open(self, at_end: bool) -> None:
        try:
            fh = open(self.src, "rb")  # noqa: SIM115
        except OSError as exc:
            if not self.missing_said:
                self.say(f"preemptlog: capture: --log {self.src}: {exc.strerror or exc}; waiting for it")
                self.missing_said = True
            return
        st = os.fstat(fh.fileno())
        self.fh, self.ino = fh, (st.st_dev, st.st_ino)
        self.pos = st.st_size if at_end else 0
        fh.seek(self.pos)

    def poll(self) -> int:
        if self.fh is None:
            self._open(at_end=not self.missing_said)
            if self.fh is None:
                return 0
        try:
            st = os.stat(self.src)
            if (st.st_dev, st.st_ino) != self.ino or st.st_size < self.pos:  # rotated or truncated
                rest = self._read()
                self.fh.close()
                self.fh = None
                self._open(at_end=False)
                return rest + (self.poll() if self.fh is not None else 0)
        except OSError:
            pass  # gone for now (rotation in progress): keep the old handle
        return self._read()

    def _read(self) -> int:
        """Copies what the file gained, 1 MB at a time (a backlog is never held whole)."""
        got = 0
        while True:
            try:
                data = self.fh.read(COPY_CHUNK)
            except OSError as exc:  # the followed log's (an input's): named, never taken for the output's
                if exc.filename is None:
                    exc.filename = str(self.src)
                raise
            if not data:
                break
            self.pos += len(data)
            if self.out is None:
                self.out = open(self.dst, "ab")  # noqa: SIM115
            self.out.write(data)
            got += len(data)
        if got:
            self.out.flush()
        return got

    def close(self) -> None:
        for f in (self.fh, self.out):
            if f is not None:
                try:
                    f.close()
                except OSError:
                    pass


def timeout_for(every: float) -> float:
    """How long one scrape waits for its answer: the interval, within 2-10 s (10 s is Prometheus'
    default ``scrape_timeout``)."""
    return min(10.0, max(2.0, every))


def late_timeout(every: float) -> float:
    """How long the second request of a scrape that timed out waits (capture asks once more)."""
    return max(10.0, 2 * timeout_for(every))


def scrape_once(url: str, timeout: float) -> bytes:
    import urllib.request

    req = urllib.request.Request(url, headers={"Accept": "text/plain;version=0.0.4", "User-Agent": "preemptlog"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return resp.read()


TIMED_OUT = "timed out"  # a request that got no answer in time, in describe_error's words


def describe_error(exc: BaseException) -> str:
    import socket
    import urllib.error

    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {exc.reason}"
    if isinstance(exc, urllib.error.URLError):
        r = exc.reason
        return getattr(r, "strerror", None) or str(r)
    if isinstance(exc, (TimeoutError, socket.timeout)):
        return TIMED_OUT
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


class Capture:
    def __init__(
        self,
        out_dir: Path,
        *,
        url: str | None,
        every: float,
        duration: float | None,
        log: Path | None,
        say: Callable[[str], None],
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        self.dir, self.url, self.every, self.duration = out_dir, url, every, duration
        self.stopping = threading.Event()
        self.stop_signal: str | None = None
        self.say, self.clock = say, clock
        self.sleep = sleep if sleep is not None else self._wait
        self.stats = Stats()
        self.follower = LogFollower(log, out_dir / log.name, say) if log is not None else None
        self.gap: dict | None = None
        self.delay = every

    def _wait(self, seconds: float) -> None:
        self.stopping.wait(seconds)  # returns at once when a signal asks to stop

    def stop(self, signum: int, _frame: object = None) -> None:
        """A signal handler: finish the current scrape, write the stop record, return."""
        self.stop_signal = signal.Signals(signum).name
        self.stopping.set()

    def handle_signals(self) -> Callable[[], None]:
        """Stop on SIGINT and SIGTERM, also when started with SIGINT ignored (a background job of
        a non-interactive shell inherits SIG_IGN, and Python then installs no Ctrl-C handler).
        Returns the function that puts the previous handlers back."""
        old = {}
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                old[sig] = signal.signal(sig, self.stop)
            except (ValueError, OSError):  # not the main thread: the caller stops it
                pass

        def restore() -> None:
            for sig, h in old.items():
                signal.signal(sig, h)

        return restore

    def _manifest(self, obj: dict) -> None:
        with open(self.dir / MANIFEST, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"preemptlog_capture": 1, **obj}) + "\n")

    def _scrape(self, now: float) -> bool:
        """One scrape sent at ``now``; its file is stamped with the time the answer arrived."""
        from ..outputs.outio import open_output

        try:
            body = self._ask()
            sent, now = now, max(now, self.clock())
        except Exception as exc:
            self.stats.failures += 1
            why = describe_error(exc)
            if self.gap is None:
                self.gap = {"start": now, "failures": 0}
                self.stats.gaps += 1
            self.gap["failures"] += 1
            self.gap["error"] = why
            self.delay = min(max(self.delay * 2, self.every), max(60.0, self.every))
            self.say(f"preemptlog: capture: {self.url}: {why}; retrying in {self.delay:g}s")
            return False
        name = f"metrics-{int(now)}.prom"
        if (self.dir / name).exists():
            name = f"metrics-{int(now)}-{self.stats.scrapes}.prom"
        with open_output(str(self.dir / name)) as fh:
            fh.write(f"# scrape {iso(now)}\n{mark(now - sent)}\n".encode())
            fh.write(body if body.endswith(b"\n") or not body else body + b"\n")
        self.stats.scrapes += 1
        self.stats.files.append(name)
        if self.gap is not None:
            self._close_gap(now)
        self.delay = self.every
        return True

    def _ask(self) -> bytes:
        """The page, asked once more with a longer wait when the answer was late outside a gap."""
        wait = timeout_for(self.every)
        try:
            return scrape_once(self.url, timeout=wait)
        except Exception as exc:
            if self.gap is not None or self.stopping.is_set() or describe_error(exc) != TIMED_OUT:
                raise
        late = late_timeout(self.every)
        self.stats.late += 1
        self.say(
            f"preemptlog: capture: {self.url}: no answer in {wait:g}s (a busy server answers late); "
            f"asking again, waiting up to {late:g}s"
        )
        return scrape_once(self.url, timeout=late)

    def _close_gap(self, end: float) -> None:
        g = self.gap
        self._manifest(
            {
                "type": "gap",
                "start": iso(g["start"]),
                "end": iso(end),
                "url": self.url,
                "failures": g["failures"],
                "error": g.get("error"),
            }
        )
        self.gap = None

    def run(self) -> Stats:
        t0 = self.clock()
        self._manifest(
            {
                "type": "start",
                "time": iso(t0),
                "url": self.url,
                "every_s": self.every,
                "log": str(self.follower.src) if self.follower else None,
            }
        )
        nxt = t0
        stop_reason = "--for elapsed"
        try:
            while not self.stopping.is_set():
                now = self.clock()
                if self.duration is not None and now - t0 >= self.duration:
                    break
                if self.url and now >= nxt:
                    ok = self._scrape(now)
                    nxt = now + (self.every if ok else self.delay)
                if self.follower is not None:
                    self.stats.log_bytes += self.follower.poll()
                now = self.clock()
                wait = POLL_S if self.follower is not None else float("inf")
                if self.url:
                    wait = min(wait, nxt - now)
                if self.duration is not None:
                    wait = min(wait, t0 + self.duration - now)
                self.sleep(max(wait, 0.0))
        except KeyboardInterrupt:
            stop_reason = "interrupted"
        if self.stopping.is_set():
            stop_reason = "interrupted"
        end = self.clock()
        if self.follower is not None:
            try:
                self.stats.log_bytes += self.follower.poll()
            finally:
                self.stats.log_never_found = self.follower.fh is None and not self.follower.ino
                self.follower.close()
        if self.gap is not None:
            self._close_gap(end)
        self._manifest(
            {
                "type": "stop",
                "time": iso(end),
                "reason": stop_reason,
                **({"signal": self.stop_signal} if self.stop_signal else {}),
                "scrapes": self.stats.scrapes,
                "failures": self.stats.failures,
                "gaps": self.stats.gaps,
                "late": self.stats.late,
                "log_bytes": self.stats.log_bytes,
            }
        )
        return self.stats
