"""The watch: servers followed, storms told as they happen, each one saved and explained.

One :class:`Watch` runs the whole session. Per server: a scrape thread (scrape.py: one request in
flight, a timeout, backoff), a :class:`~.storms.StormTracker`, the followers of its log and its
records (follow.py) and three rings that hold the recent past (the last scrapes, log lines and
records: bounded by count and bytes, so memory stays flat however long the watch runs). The main
thread reads the files every :data:`POLL_S` seconds and the scrapes as they come, feeds the
trackers and writes what happens through an :class:`~.output.Output`:

- ``storm_start`` at the scrape that shows the first increase (so within one interval of the
  counter's move, and the request that took longest); the storm's folder (bundle.py) starts there
  with the scrapes and log lines of the last :attr:`WatchOptions.pre` seconds;
- while the storm is open every scrape, log line and record goes into its folder;
- ``storm_end`` once the storm is over and its folder is published: a second thread (one at a
  time: bounded memory) keeps the storm's records, runs the analysis on the folder, writes its
  README, renames it into ``--out`` and posts the Grafana annotation if asked; the main thread says
  the result;
- ``server_down`` / ``server_up`` / ``restart`` once per change of state, never a traceback;
- ``status`` per server every :attr:`WatchOptions.status_every` seconds (ndjson), or a live line
  per server (a terminal).

:meth:`Watch.stop` (SIGINT, SIGTERM: :meth:`Watch.handle_signals`) or ``duration`` ends the loop:
an open storm ends there, ``cut``, is saved and explained like the others, then the ``stop`` line.
"""

from __future__ import annotations

import os
import queue
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ..capture.scrape import TIMED_OUT, iso, scrape_once, timeout_for
from ..model import VERSION
from ..model.result import AnalyzeOptions
from .bundle import Incident, analyse, clean_leftovers
from .follow import Follower, GlobFollower, Line, Ring, line_ring
from .output import Output
from .scrape import Reading, Scrape, Scraper, parse
from .storms import Storm, StormTracker, Transition

POLL_S = 0.2
DRAIN_POLLS = 64  # pieces of a followed file read per pass of the loop (64 MB: the scrapes wait no longer)
STATUS_S = 60.0
LIVE_S = 1.0
PRE_MAX_S = 30.0
SCRAPE_RING_BYTES = 32 << 20


@dataclass(frozen=True)
class WatchOptions:
    servers: tuple[str, ...]
    logs: tuple[Path | None, ...] = ()
    records: tuple[str | None, ...] = ()
    every: float = 5.0
    quiet: float = 60.0
    out: Path = Path("preemptlog-incidents")
    duration: float | None = None
    analysis: AnalyzeOptions = field(default_factory=AnalyzeOptions)
    analyze_args: str = ""  # the analysis options given, repeated in the README's command
    debug: bool = False
    status_every: float = STATUS_S

    @property
    def pre(self) -> float:
        """Seconds of scrapes and log lines kept before a storm's first increase: at most half of
        ``quiet``, so the last storm's lines (a stats line that counts its last preemptions) stay out."""
        return min(PRE_MAX_S, self.quiet / 2)


@dataclass
class Server:
    url: str
    tracker: StormTracker
    scraper: Scraper
    log: Follower | None
    records: GlobFollower | None
    scrapes: Ring[tuple[float, bytes, float | None, float]]  # (answer time, page, counter total, answer took)
    lines: Ring[Line]
    recs: Ring[tuple[str, Line]]
    incident: Incident | None = None
    state: str = "starting"  # starting | up | down
    down_since: float | None = None
    # the time of a scrape that timed out while the server answered: held until the next attempt
    late: float | None = None
    error: str | None = None
    last: Reading | None = None
    last_ok: float | None = None
    status_at: float = 0.0
    ever_up: bool = False
    ever_counted: bool = False  # a page of it showed the preemption counter (its count is visible)
    said: set[str] = field(default_factory=set)  # the notes said once
    counted: tuple[float, bytes, float | None, float] | None = None  # the last scrape whose counter was read


@dataclass
class Outcome:
    storms: list[dict[str, Any]]
    reason: str
    servers_never_up: list[str]
    # answered, but no page showed a readable preemption counter: their preemptions were not seen
    servers_no_counter: list[str] = field(default_factory=list)

    @property
    def preemptions(self) -> int:
        return sum(int(s.get("preemptions") or 0) for s in self.storms)


class Watch:
    def __init__(
        self,
        opts: WatchOptions,
        output: Output,
        *,
        post: Callable[[dict[str, Any]], str] | None = None,
        clock: Callable[[], float] = time.time,
        fetch: Callable[[str, float], bytes] = scrape_once,
    ) -> None:
        self.opts, self.output, self.post, self.clock = opts, output, post, clock
        self.stopping = threading.Event()
        self.reason = ""
        self.signals = 0
        self.scraped: queue.Queue[Scrape] = queue.Queue()
        self.jobs: queue.Queue[Incident | None] = queue.Queue()
        self.results: queue.Queue[dict[str, Any]] = queue.Queue()
        self.storms: list[dict[str, Any]] = []
        self.worker = threading.Thread(target=self._work, name="preemptlog watch: bundles", daemon=True)
        self.servers: dict[str, Server] = {}
        every = opts.every
        ring_n = max(2, int(opts.pre / every) + 2)
        for i, url in enumerate(opts.servers):
            log = opts.logs[i] if i < len(opts.logs) else None
            rec = opts.records[i] if i < len(opts.records) else None
            say = self._say_for(url)
            self.servers[url] = Server(
                url=url,
                tracker=StormTracker(url, opts.quiet),
                scraper=Scraper(url, every, self.scraped, fetch=fetch, clock=clock),
                log=Follower(log, say, clock=clock) if log is not None else None,
                records=GlobFollower(rec, say, clock=clock) if rec is not None else None,
                scrapes=Ring(ring_n, SCRAPE_RING_BYTES, lambda s: len(s[1]) + 64),
                lines=line_ring(),
                recs=Ring(20_000, 32 << 20, lambda r: len(r[1].data) + 64),
            )

    def _say_for(self, url: str) -> Callable[[str], None]:
        many = len(self.opts.servers) > 1

        def say(text: str) -> None:
            self.output.note(f"{url}: {text}" if many else text)

        return say

    # -- stopping ---------------------------------------------------------------------------------

    def stop(self, reason: str) -> None:
        if not self.stopping.is_set():
            self.reason = reason
        self.stopping.set()

    def _on_signal(self, signum: int, _frame: object = None) -> None:
        self.signals += 1
        if self.signals > 1:  # asked twice: stop now, without the cut storm's folder
            raise KeyboardInterrupt
        self.stop(signal.Signals(signum).name)

    def handle_signals(self) -> Callable[[], None]:
        """Stop on SIGINT and SIGTERM (also when SIGINT arrives ignored: a script's background job).
        Returns the function that puts the previous handlers back."""
        old: dict[int, Any] = {}
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                old[sig] = signal.signal(sig, self._on_signal)
            except (ValueError, OSError):  # not the main thread: the caller stops it
                pass

        def restore() -> None:
            for sig, h in old.items():
                signal.signal(sig, h)

        return restore

    # -- the loop ---------------------------------------------------------------------------------

    def run(self) -> Outcome:
        opts = self.opts
        opts.out.mkdir(parents=True, exist_ok=True)
        for p in clean_leftovers(opts.out):
            self.output.note(f"removed {p}: the unfinished folder of a watch that was stopped")
        t0 = self.clock()
        self.output.event(
            {
                "event": "start",
                "time": iso(t0),
                "servers": list(opts.servers),
                "every_s": opts.every,
                "quiet_s": opts.quiet,
                "out": str(opts.out),
                "version": VERSION,
            }
        )
        self.worker.start()
        for srv in self.servers.values():
            srv.scraper.start()
        live_at = 0.0
        try:
            while not self.stopping.is_set():
                now = self.clock()
                if opts.duration is not None and now - t0 >= opts.duration:
                    self.stop("--duration elapsed")
                    break
                self._follow()
                wait = POLL_S if opts.duration is None else max(0.0, min(POLL_S, t0 + opts.duration - now))
                try:
                    self._scrape(self.scraped.get(timeout=wait))
                except queue.Empty:
                    pass
                self._drain_scrapes()
                now = self.clock()
                for srv in self.servers.values():
                    for tr in srv.tracker.tick(now):
                        self._transition(srv, tr, None)
                    if srv.incident is not None:
                        srv.incident.flush()
                self._results()
                if now - live_at >= LIVE_S:
                    live_at = now
                    self.output.status(self._status_rows(now))
                self._status_events(now)
        finally:
            for srv in self.servers.values():
                srv.scraper.stop()
        return self._finish()

    def _finish(self) -> Outcome:
        self._follow()  # what was written up to the stop belongs to a storm cut now
        self._drain_scrapes()
        now = self.clock()
        for srv in self.servers.values():
            for tr in srv.tracker.cut(now):
                self._transition(srv, tr, None)
        self.jobs.put(None)
        while self.worker.is_alive():
            self.worker.join(0.2)
            self._results()
        self._results()
        for srv in self.servers.values():
            srv.scraper.join(0.5)
            if srv.log is not None:
                srv.log.close()
            if srv.records is not None:
                srv.records.close()
        never = [s.url for s in self.servers.values() if not s.ever_up]
        blind = [s.url for s in self.servers.values() if s.ever_up and not s.ever_counted]
        self.output.event(
            {
                "event": "stop",
                "time": iso(self.clock()),
                "reason": self.reason or "stopped",
                "storms": len(self.storms),
                "preemptions": sum(int(s.get("preemptions") or 0) for s in self.storms),
                # the servers whose preemptions were not seen (never answered, no readable counter):
                # when any, ``preemptions`` is a lower bound
                "not_visible": never + blind,
            }
        )
        self.output.close()
        return Outcome(self.storms, self.reason, never, blind)

    def _follow(self) -> None:
        """What the followed files gained, a piece (MAX_READ_PER_POLL) at a time into the rings:
        a backlog (a watch starved of CPU, a burst of lines) is never held whole beside them."""
        for srv in self.servers.values():
            if srv.log is not None:
                for _ in range(DRAIN_POLLS):
                    lines = srv.log.poll()
                    for ln in lines:
                        srv.lines.append(ln)
                    if lines and srv.incident is not None:
                        srv.incident.add_log(lines)
                    if not srv.log.more:
                        break
            if srv.records is not None:
                for _ in range(DRAIN_POLLS):
                    got = srv.records.poll()
                    for item in got:
                        srv.recs.append(item)
                    if got and srv.incident is not None:
                        by: dict[str, list[Line]] = {}
                        for name, ln in got:
                            by.setdefault(name, []).append(ln)
                        for name, part in by.items():
                            srv.incident.add_records(name, part)
                    if not srv.records.more:
                        break

    def _drain_scrapes(self) -> None:
        while True:
            try:
                s = self.scraped.get_nowait()
            except queue.Empty:
                return
            self._scrape(s)

    def _scrape(self, s: Scrape) -> None:
        srv = self.servers[s.server]
        if s.body is None:
            if srv.state == "up" and s.error == TIMED_OUT and srv.late is None:
                # One scrape that timed out while the server answered: a server busy with the very load
                # that preempts answers /metrics late. It is down when the next attempt fails too (dated
                # from this one); a refused connection or an HTTP error is down at once.
                srv.late = s.t
            elif srv.state != "down":
                since = srv.late if srv.late is not None else s.t
                self.output.event(
                    {
                        "event": "server_down",
                        "time": iso(since),
                        "server": srv.url,
                        "error": s.error,
                        "last_seen": iso(srv.last_ok) if srv.last_ok is not None else None,
                    }
                )
                srv.state, srv.down_since, srv.late = "down", since, None
            srv.error = s.error
            if srv.incident is not None:
                srv.incident.fail(s.t, s.error)
            return
        reading = parse(s.body, s.t)
        if srv.state == "down":
            self.output.event(
                {
                    "event": "server_up",
                    "time": iso(s.t),
                    "server": srv.url,
                    "down_s": round(s.t - (srv.down_since or s.t), 1),
                }
            )
        srv.state, srv.error, srv.last_ok, srv.ever_up, srv.late = "up", None, s.t, True, None
        self._visibility(srv, reading)
        added = False
        for tr in srv.tracker.feed(reading):
            added = self._transition(srv, tr, (s, reading)) or added
        if srv.incident is not None and not added:
            srv.incident.add_scrape(s.arrived, s.body, reading.total, s.took)
        srv.scrapes.append((s.arrived, s.body, reading.total, s.took))
        if reading.total is not None:
            srv.counted = (s.arrived, s.body, reading.total, s.took)
        srv.last = reading
        if srv.status_at == 0.0:
            self._status_event(srv, s.t)

    def _visibility(self, srv: Server, reading: Reading) -> None:
        """Say once when a server's page cannot show its preemptions (no counter, or one that is not
        a number); the count of such a server is not visible (``--fail-on unknown``)."""
        say = self._say_for(srv.url)
        if reading.counters:
            if "no counter" in srv.said and "counter found" not in srv.said:
                srv.said.add("counter found")
                say("the preemption counter is on its page now: its preemptions are counted from here")
            srv.ever_counted = True
        elif reading.unreadable is not None:
            if "unreadable" not in srv.said:
                srv.said.add("unreadable")
                say(
                    f"the preemption counter reads {reading.unreadable}: the scrapes that show it are not counted "
                    "(the count goes on from the next readable one)"
                )
        elif not srv.ever_counted and "no counter" not in srv.said:
            srv.said.add("no counter")
            say(
                "its /metrics page has no preemption counter (vllm:num_preemptions_total; SGLang: "
                "sglang:num_retracted_requests_total): its preemptions cannot be seen until it shows one"
            )

    def _transition(self, srv: Server, tr: Transition, scrape: tuple[Scrape, Reading] | None) -> bool:
        """Say one transition and act on the storm's folder; True when ``scrape`` went into it."""
        if tr.kind == "restart":
            self.output.event(
                {
                    "event": "restart",
                    "time": iso(tr.t),
                    "server": srv.url,
                    "why": tr.detail.get("why"),
                    "counter_before": tr.detail.get("counter_before"),
                    "counter_after": tr.detail.get("counter_after"),
                }
            )
            return False
        storm = tr.storm
        assert storm is not None
        if tr.kind == "storm_start":
            r = scrape[1] if scrape is not None else None
            # said first, then saved: the line does not wait for the storm's folder to be written
            self.output.event(
                {
                    "event": "storm_start",
                    "time": iso(storm.start),
                    "server": srv.url,
                    "preemptions": storm.first_increase,
                    "baseline": iso(storm.baseline_t) if storm.baseline_t is not None else None,
                    "counter": storm.counter_end,
                    "at_restart": storm.at_restart,
                    "running": r.running if r else None,
                    "waiting": r.waiting if r else None,
                    "kv_usage": r.kv_usage if r else None,
                }
            )
            inc = self._open(srv, storm)
            if scrape is not None:
                inc.add_scrape(scrape[0].arrived, scrape[0].body or b"", r.total if r else None, scrape[0].took)
            return scrape is not None
        # storm_end: the scrape that closed it after a quiet spell is the window's last
        added = False
        inc2 = srv.incident
        if inc2 is not None:
            if scrape is not None and storm.ended_by == "quiet":
                inc2.add_scrape(scrape[0].arrived, scrape[0].body or b"", scrape[1].total, scrape[0].took)
                added = True
            srv.incident = None
            self.jobs.put(inc2)
        return added

    def _open(self, srv: Server, storm: Storm) -> Incident:
        opts = self.opts
        inc = Incident(
            out=opts.out,
            server=srv.url,
            storm=storm,
            every=opts.every,
            quiet=opts.quiet,
            log=srv.log.path if srv.log is not None else None,
            records=srv.records.pattern if srv.records is not None else None,
        )
        past = list(srv.scrapes)
        keep = [p for p in past if p[0] >= storm.start - opts.pre]
        # the baseline is the last scrape whose counter was read (the tracker's last reading), kept even
        # when pages without a readable counter came after it (and pushed it out of the ring)
        base = srv.counted if srv.counted is not None else (past[-1] if past else None)
        if base is not None and base not in keep:
            keep.insert(0, base)
        for t, body, total, took in keep:
            inc.add_scrape(t, body, total, took)
        since = keep[0][0] if keep else storm.start - opts.pre
        inc.add_log([ln for ln in srv.lines if ln.t >= since])
        by: dict[str, list[Line]] = {}
        for name, ln in srv.recs:
            by.setdefault(name, []).append(ln)
        for name, lines in by.items():
            inc.add_records(name, lines)
        srv.incident = inc
        return inc

    # -- the second thread: keep, analyse, publish ------------------------------------------------

    def _how(self) -> str:
        o = self.opts
        return (
            f"`/metrics` scraped every {o.every:g} s (timeout {timeout_for(o.every):g} s, one request at a time); a "
            f"storm opens at the first scrape whose counter rose and closes after {o.quiet:g} s without an increase; "
            f"the scrapes and log lines of the {o.pre:g} s before it are kept with it."
        )

    def _work(self) -> None:
        # The analyses yield the CPU to the scrapes and the follow loop (and to the server beside it):
        # this thread, and the threads it starts, run at a lower priority (Linux: a thread is a task).
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
        except (AttributeError, OSError):
            pass
        while True:
            inc = self.jobs.get()
            if inc is None:
                return
            try:
                self.results.put(self._publish(inc))
            except Exception as exc:  # a folder that cannot be written is said, the watch goes on
                if self.opts.debug:
                    raise
                s = inc.storm
                self.results.put(
                    {
                        **self._end_fields(s),
                        "bundle": None,
                        "cause": None,
                        "fix": None,
                        "fix_none_why": None,
                        "bundle_error": f"{type(exc).__name__}: {exc}",
                    }
                )
                inc.discard()

    def _end_fields(self, s: Storm) -> dict[str, Any]:
        return {
            "event": "storm_end",
            "time": iso(s.end if s.end is not None else self.clock()),
            "start": iso(s.start),
            "server": s.server,
            "preemptions": s.preemptions,
            "cut": s.cut,
            "ended_by": s.ended_by,
            "last_preemption": iso(s.last_increase),
            "baseline": iso(s.baseline_t) if s.baseline_t is not None else None,
            "counter_start": s.counter_start,
            "counter_end": s.counter_end,
            "peak_kv_usage": s.peak_kv_usage,
            "max_waiting": s.max_waiting,
        }

    def _publish(self, inc: Incident) -> dict[str, Any]:
        facts = inc.finish()
        words = analyse(inc.dir, self.opts.analysis, debug=self.opts.debug)
        how = self._how()
        if self.opts.analyze_args:
            how += f" Analysed as `preemptlog analyze DIR{self.opts.analyze_args}`."
        path = inc.publish(facts, words, how)
        ev: dict[str, Any] = {
            **self._end_fields(inc.storm),
            "cause": words.get("cause"),
            "fix": words.get("fix"),
            "fix_none_why": words.get("fix_none_why"),
            "bundle": str(path),
            "headline": words.get("headline"),
            "analyzed": words.get("events"),
            "requests_received": words.get("requests_received"),
            "records_preemptions": (facts.get("records") or {}).get("preemptions"),
            "scrapes": facts["scrapes"],
            "log_lines": facts["log_lines"],
        }
        if words.get("error"):
            ev["analysis_error"] = words["error"]
        if self.post is not None:
            try:
                ev["grafana"] = self.post(annotation(ev))
            except Exception as exc:  # Grafana away is said on the line, the watch goes on
                ev["grafana_error"] = getattr(exc, "message", None) or str(exc)
        return ev

    def _results(self) -> None:
        while True:
            try:
                ev = self.results.get_nowait()
            except queue.Empty:
                return
            self.storms.append(ev)
            self.output.event(ev)

    # -- status -----------------------------------------------------------------------------------

    def _row(self, srv: Server, now: float) -> dict[str, Any]:
        r = srv.last
        state = srv.state
        if state == "up":
            state = "storm" if srv.tracker.storm is not None else "quiet"
        return {
            "event": "status",
            "time": iso(now),
            "server": srv.url,
            "state": state,
            "running": r.running if r else None,
            "waiting": r.waiting if r else None,
            "kv_usage": r.kv_usage if r else None,
            "counter": r.total if r else None,
            "preemptions_per_min": _round(srv.tracker.per_minute(now)),
            "storms": srv.tracker.storms,
            "down_since": iso(srv.down_since) if state == "down" and srv.down_since is not None else None,
            "error": srv.error if state == "down" else None,
        }

    def _status_rows(self, now: float) -> list[dict[str, Any]]:
        return [self._row(srv, now) for srv in self.servers.values()]

    def _status_event(self, srv: Server, now: float) -> None:
        srv.status_at = now
        self.output.event(self._row(srv, now))

    def _status_events(self, now: float) -> None:
        for srv in self.servers.values():
            if srv.status_at and now - srv.status_at >= self.opts.status_every:
                self._status_event(srv, now)


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 1)


def annotation(ev: dict[str, Any]) -> dict[str, Any]:
    """A storm as a Grafana annotation (fleet/export/grafana.py's shape: a region, tags, text); the
    poster adds the dashboard and panel."""

    def ms(t: str | None) -> int | None:
        return None if t is None else int(datetime.fromisoformat(t).timestamp() * 1000)

    text = f"{ev['server']}: {ev.get('headline') or str(ev['preemptions']) + ' preemption(s)'}"
    if ev.get("fix"):
        text += f"\nTop fix: {ev['fix']}"
    if ev.get("bundle"):
        text += f"\nBundle: {ev['bundle']}"
    tags = ["preemptlog", "storm", f"server:{ev['server']}"]
    if ev.get("cut"):
        tags.append("cut")
    return {"time": ms(ev["start"]), "timeEnd": ms(ev["time"]), "tags": tags, "text": text}
