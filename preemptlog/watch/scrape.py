"""The scrape loop of one server, and what the watch reads of a ``/metrics`` page.

:class:`Scraper` is one thread per server: it sends one request at a time (never a second while
one is in flight), with a timeout, on a fixed schedule of ``--every`` seconds; a server that is
slow (a scrape that took more than half the interval) or failing (a timeout, an HTTP error) gets
the next request later (twice the time it took, or twice the last delay, up to :func:`max_delay`);
a refused connection (nothing listens: a server restarting) is tried again at the interval. The
request and the error's words are capture's own (capture/scrape.py ``scrape_once``,
``describe_error``). Every attempt goes on a queue as a :class:`Scrape`; the watch's main thread
reads them.

:func:`parse` reads the few series the watch needs, under every registered engine's names
(sources.prometheus.names: ``vllm:num_preemptions_total``, SGLang's retractions, every spelling):
the preemption counter per series and each series' ``_created`` (a changed one is a restart), the
running and waiting requests and the KV-cache usage. It reads the text line by line with the
standard library (a page every few seconds, for days): no data frame.
"""

from __future__ import annotations

import math
import queue
import re
import socket
import threading
import time
import urllib.error
from collections.abc import Callable
from dataclasses import dataclass, field

from .. import engines  # noqa: F401 - registers every engine's metric names (sources.registry)
from ..capture.scrape import describe_error, scrape_once, timeout_for
from ..sources.prometheus.names import canonical_name, created, metrics, sample_starts

FIELDS = ("preemptions", "running", "waiting", "kv_usage")
_LABELS = r'(?:[^"}]|"(?:[^"\\]|\\.)*")*'
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(" + _LABELS + r")\})?[ \t]+(\S+)")


@dataclass(frozen=True)
class Scrape:
    """One attempt: the time it was sent, how long it took, the page or the error."""

    server: str
    t: float
    took: float
    body: bytes | None
    error: str | None = None

    @property
    def arrived(self) -> float:
        """When the answer arrived: the time a saved scrape file is stamped with (its page was made
        by then; capture.scrape.mark). The watch's own events keep the time the scrape was sent."""
        return self.t + self.took


@dataclass(frozen=True)
class Reading:
    """What the watch reads of one page (see the module docstring)."""

    t: float
    counters: dict[str, float] = field(default_factory=dict)  # series (its labels as exposed) -> value
    created: dict[str, float] = field(default_factory=dict)  # series -> its counter's _created
    running: float | None = None
    waiting: float | None = None
    kv_usage: float | None = None  # percent: the fullest engine's
    # the page has the counter but a sample of it is not a number (NaN, +Inf): not counted (``counters`` empty)
    unreadable: str | None = None

    @property
    def total(self) -> float | None:
        return sum(self.counters.values()) if self.counters else None


def _names() -> tuple[dict[str, tuple[str, float, int]], dict[str, int], tuple[str, ...]]:
    """canonical metric name -> (field, scale, preference); ``_created`` name -> preference; the
    prefixes a sample line of interest starts with."""
    wanted: dict[str, tuple[str, float, int]] = {}
    for i, (name, (fld, _type, scale)) in enumerate(metrics().items()):
        if fld in FIELDS:
            wanted[name] = (fld, scale, i)
    made = {name: i for i, (name, fields) in enumerate(created().items()) if "preemptions" in fields}
    return wanted, made, tuple(sample_starts())


def parse(body: bytes, t: float) -> Reading:
    """The :class:`Reading` of one page (text exposition or OpenMetrics)."""
    wanted, made, starts = _names()
    found: dict[str, dict[str, list[float]]] = {}  # field -> {name: values}
    by_name: dict[str, dict[str, float]] = {}  # counter name -> series -> value
    created_by: dict[str, dict[str, float]] = {}
    for raw in body.decode("utf-8", "replace").splitlines():
        if not raw.startswith(starts):
            continue
        m = _SAMPLE.match(raw)
        if m is None:
            continue
        name = canonical_name(m.group(1))
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        labels = m.group(2) or ""
        if name in made:
            if math.isfinite(value):  # a NaN _created would differ from itself: a restart at every scrape
                created_by.setdefault(name, {})[labels] = value
            continue
        w = wanted.get(name)
        if w is None:
            continue
        fld, scale, _ = w
        if fld == "preemptions":
            by_name.setdefault(name, {})[labels] = value
        elif math.isfinite(value):  # a NaN or infinite gauge says nothing (and is no JSON number)
            found.setdefault(fld, {}).setdefault(name, []).append(value * scale)
    counters: dict[str, float] = {}
    unreadable: str | None = None
    if by_name:  # one name of the counter (the first in the engines' order that the page has)
        counters = by_name[min(by_name, key=lambda n: wanted[n][2])]
        bad = sorted({repr(v) for v in counters.values() if not math.isfinite(v)})
        if bad:  # a counter that is not a number cannot be counted: the page is read as one without it
            counters, unreadable = {}, ", ".join(b.replace("nan", "NaN").replace("inf", "Inf") for b in bad)
    series_created: dict[str, float] = {}
    if created_by:
        series_created = created_by[min(created_by, key=lambda n: made[n])]

    def pick(fld: str) -> list[float] | None:
        names = found.get(fld)
        if not names:
            return None
        return names[min(names, key=lambda n: wanted[n][2])]

    running, waiting, kv = pick("running"), pick("waiting"), pick("kv_usage")
    return Reading(
        t=t,
        counters=counters,
        created=series_created,
        running=sum(running) if running else None,
        waiting=sum(waiting) if waiting else None,
        kv_usage=max(kv) if kv else None,
        unreadable=unreadable,
    )


def max_delay(every: float) -> float:
    return max(every, 30.0)


def refused(exc: BaseException) -> bool:
    """Nothing listens (a server stopped or restarting): cheap to ask again, no backoff."""
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    return isinstance(reason, (ConnectionRefusedError, ConnectionResetError, socket.gaierror))


class Scraper:
    """One server's scrape loop (see the module docstring)."""

    def __init__(
        self,
        url: str,
        every: float,
        results: queue.Queue[Scrape],
        *,
        fetch: Callable[[str, float], bytes] = scrape_once,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.url, self.every, self.results, self.fetch, self.clock = url, every, results, fetch, clock
        self.timeout = timeout_for(every)
        self.delay = every
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"preemptlog watch: scrape {url}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()

    def join(self, timeout: float) -> None:
        self.thread.join(timeout)

    def next_delay(self, ok: bool, took: float, slow_error: bool) -> float:
        """The time from this attempt's start to the next one's."""
        cap = max_delay(self.every)
        if not ok:
            self.delay = min(max(self.delay * 2, self.every), cap) if slow_error else self.every
            return self.delay
        self.delay = self.every
        if took > self.every / 2:  # a slow server: ask less often until it is fast again
            return min(max(self.every, 2 * took), cap)
        return self.every

    def _run(self) -> None:
        nxt = self.clock()
        while not self.stopping.is_set():
            wait = nxt - self.clock()
            if wait > 0 and self.stopping.wait(wait):
                break
            t0 = self.clock()
            try:
                body: bytes | None = self.fetch(self.url, self.timeout)
                error, slow = None, False
            except Exception as exc:  # every failure is one state change, never a traceback
                body, error, slow = None, describe_error(exc), not refused(exc)
            took = self.clock() - t0
            self.results.put(Scrape(self.url, t0, took, body, error))
            nxt = max(t0 + self.next_delay(error is None, took, slow), self.clock())
