"""Storms: when a server's preemption counter rises, and when it has been quiet long enough.

One :class:`StormTracker` per server reads that server's successive :class:`Reading` s (scrape.py):

- the first reading is the baseline (what happened before the watch is not a storm);
- a storm opens at the first reading whose counter (``vllm:num_preemptions_total`` summed over the
  server's series: engines, models) is above the one before it; its ``preemptions`` is the counter's
  exact increase, added up reading by reading while it lasts;
- it closes when ``quiet`` seconds have passed since the last reading that showed an increase
  (:meth:`StormTracker.tick`, called between readings too: a server that went down does not hold a
  storm open);
- a restart is a series whose counter dropped, whose ``_created`` changed, or that is gone: it is
  said (a ``restart`` transition); an open storm ends there (its count is the increase up to the
  last reading before the restart), and what the new counter holds at its first reading is an
  increase from 0 (a storm of its own, opened at once).

Nothing here reads a clock, a file or the network: readings and times come in, transitions go
out, so the machine is tested on its own (tests/watch/test_watch.py).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from .scrape import Reading


@dataclass
class Storm:
    """One storm of one server (mutable while it is open)."""

    server: str
    start: float  # the reading that showed the first increase
    baseline_t: float | None  # the reading before it: the first preemption happened in (baseline_t, start]
    counter_start: float  # the counter at the baseline (0 when the storm opened at a restart)
    counter_end: float
    preemptions: int  # the counter's exact increase over the storm
    last_increase: float  # the reading that showed the last increase
    readings: int = 1
    at_restart: bool = False  # opened by the first reading of a restarted server
    end: float | None = None
    ended_by: str | None = None  # quiet | restart | stop
    cut: bool = False
    first_increase: int = 0
    peak_kv_usage: float | None = None
    max_waiting: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Transition:
    kind: str  # storm_start | storm_end | restart
    t: float
    storm: Storm | None = None
    detail: dict[str, Any] = field(default_factory=dict)


def increase(prev: Reading, cur: Reading) -> tuple[int, str | None]:
    """(the counter's increase from ``prev`` to ``cur``, why this is a restart or None). A series
    that restarted counts from 0; one that appears is counted from 0 when the page had the counter
    before (a new engine or model), else it is the baseline."""
    why: str | None = None
    inc = 0.0
    if not prev.counters:
        return 0, None  # the page had no counter yet (a server still starting): this is the baseline
    for s, v in cur.counters.items():
        p = prev.counters.get(s)
        c0, c1 = prev.created.get(s), cur.created.get(s)
        if p is None:
            inc += v
        elif c0 is not None and c1 is not None and c1 != c0:
            why = why or "the counter's _created changed"
            inc += v
        elif v < p:
            why = why or f"the counter dropped from {p:g} to {v:g}"
            inc += v
        else:
            inc += v - p
    gone = [s for s in prev.counters if s not in cur.counters]
    if gone and why is None:
        why = "a counter series is gone" if cur.counters else "the counter is gone from the page"
    return int(round(inc)), why


class StormTracker:
    """The storms of one server (see the module docstring)."""

    def __init__(self, server: str, quiet: float, rate_window: float = 60.0, max_points: int = 512) -> None:
        self.server, self.quiet, self.rate_window = server, quiet, rate_window
        self.prev: Reading | None = None
        self.storm: Storm | None = None
        self.storms = 0
        self.preemptions = 0  # the counter's increase since the first reading (all storms)
        self.restarts = 0
        self.points: deque[tuple[float, int]] = deque(maxlen=max_points)  # (time, self.preemptions)

    def feed(self, r: Reading) -> list[Transition]:
        out: list[Transition] = []
        prev = self.prev
        if prev is None or (not r.counters and prev.counters):
            if prev is None:
                self.prev = r
                self.points.append((r.t, 0))
            return out  # the baseline; a page without the counter is skipped (the last reading stays)
        inc, why = increase(prev, r)
        self.prev = r
        if why is not None:
            self.restarts += 1
            out.append(
                Transition(
                    "restart",
                    r.t,
                    detail={"why": why, "counter_before": prev.total, "counter_after": r.total, "last_seen": prev.t},
                )
            )
            if self.storm is not None:
                out.append(self._close(r.t, "restart"))
        opened = False
        if inc > 0:
            self.preemptions += inc
            s = self.storm
            if s is None:
                opened = True
                s = self.storm = Storm(
                    server=self.server,
                    start=r.t,
                    baseline_t=prev.t,
                    counter_start=0.0 if why is not None else (prev.total or 0.0),
                    counter_end=r.total or 0.0,
                    preemptions=inc,
                    last_increase=r.t,
                    at_restart=why is not None,
                    first_increase=inc,
                )
                self.storms += 1
                out.append(Transition("storm_start", r.t, s))
            else:
                s.preemptions += inc
                s.last_increase = r.t
        if self.storm is not None:
            s = self.storm
            s.readings += 0 if opened else 1
            s.counter_end = r.total if r.total is not None else s.counter_end
            if r.kv_usage is not None:
                s.peak_kv_usage = max(s.peak_kv_usage or 0.0, r.kv_usage)
            if r.waiting is not None:
                s.max_waiting = max(s.max_waiting or 0.0, r.waiting)
        self.points.append((r.t, self.preemptions))
        out.extend(self.tick(r.t))
        return out

    def tick(self, now: float) -> list[Transition]:
        """Close the open storm when ``quiet`` seconds have passed since its last increase."""
        s = self.storm
        if s is not None and now - s.last_increase >= self.quiet:
            return [self._close(now, "quiet")]
        return []

    def cut(self, now: float) -> list[Transition]:
        """The watch stops: an open storm ends here, said to be cut."""
        if self.storm is None:
            return []
        return [self._close(now, "stop", cut=True)]

    def _close(self, now: float, why: str, cut: bool = False) -> Transition:
        s = self.storm
        assert s is not None
        s.end, s.ended_by, s.cut = now, why, cut
        self.storm = None
        return Transition("storm_end", now, s)

    def per_minute(self, now: float) -> float | None:
        """Preemptions per minute over the last ``rate_window`` seconds (None before two readings)."""
        if len(self.points) < 2:
            return None
        t1, n1 = self.points[-1]
        t0, n0 = self.points[0]
        for t, n in self.points:  # the oldest point inside the window (or the one just before it)
            if t >= now - self.rate_window:
                break
            t0, n0 = t, n
        span = t1 - t0
        return None if span <= 0 else (n1 - n0) * 60.0 / span
