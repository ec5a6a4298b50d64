"""Whether the log's own counts and a Prometheus counter can be the same preemptions (reconcile rule 1).

Inside an engine's scrape window both can count the same preemptions: the counter by scrape
interval, the log by its own intervals (a ``Preemptions: N`` stats line: the ~10 s since the line
before; a V0 counter jump: the time between two warnings) and by its per-preemption lines (a V0
warning, a ``PREEMPTED`` marker: one preemption at a time). The two *agree* when the log's
preemptions can be placed, each inside its own interval, so that every scrape interval receives
exactly the counter's increase there: then the counter's count is the log's, scrape interval by
scrape interval, and the log's events (finer in time) can stand for it without changing the count.

That is a transportation problem on a line. A log interval (s, e] of n preemptions may give them
to any scrape interval it overlaps (a contiguous run of them); a per-preemption line at t to the
one scrape interval holding t. :func:`fits` decides it exactly with Glover's greedy (scrape
intervals in time order, each filled from the log intervals that reach it, the one that ends
first served first: it finds a largest placement of an interval-convex bipartite graph): the
counts agree when the totals are equal and every preemption of the log is placed. A sum that
matches over the window but not per scrape interval (a clock offset between the log and the
scrapes, one interval's count in the next) does not agree.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import pairwise


@dataclass(frozen=True)
class Item:
    """``n`` preemptions the log counted in (``start``, ``end``]; ``start == end``: at that instant."""

    start: datetime
    end: datetime
    n: int


def fits(bounds: Sequence[datetime], increases: Sequence[int], items: Sequence[Item]) -> int | None:
    """None when the log's ``items`` can be placed in the scrape intervals (``bounds[k-1]``,
    ``bounds[k]``], k = 1..m, each receiving exactly ``increases[k-1]``; else the index (1..m) of the
    scrape interval where it first fails.

    ``bounds`` strictly increasing, ``len(increases) == len(bounds) - 1``; every item inside
    (``bounds[0]``, ``bounds[-1]``] (an instant) or [``bounds[0]``, ``bounds[-1]``] with a positive
    length (an interval). An item that does not lie so fails at interval 1.
    """

    m = len(increases)
    if m == 0 or len(bounds) != m + 1 or any(b1 <= b0 for b0, b1 in pairwise(bounds)):
        return 1
    if sum(increases) != sum(it.n for it in items) or any(d < 0 for d in increases):
        return m
    # each item's run of scrape intervals, [first, last] (1-based)
    reach: list[tuple[int, int, int]] = []
    for it in items:
        if it.n <= 0:
            continue
        if it.start == it.end:  # an instant t: the interval with bounds[k-1] < t <= bounds[k]
            k = bisect_left(bounds, it.end)
            first = last = k
        else:  # (s, e]: every interval it overlaps with a positive length
            first, last = bisect_right(bounds, it.start), bisect_left(bounds, it.end)
        if it.start > it.end or not 1 <= first <= last <= m:
            return 1
        reach.append((first, last, it.n))
    reach.sort()
    open_: list[list[int]] = []  # heap of [last, units left]
    nxt = 0
    for k in range(1, m + 1):
        while nxt < len(reach) and reach[nxt][0] == k:
            heapq.heappush(open_, [reach[nxt][1], reach[nxt][2]])
            nxt += 1
        room = increases[k - 1]
        while room and open_:
            top = open_[0]
            if top[0] < k:
                return top[0]  # a log interval ended with preemptions no scrape interval could take
            take = min(room, top[1])
            top[1] -= take
            room -= take
            if top[1] == 0:
                heapq.heappop(open_)
        if open_ and open_[0][0] <= k:
            return k  # a log interval ending here still holds preemptions: more than the counter rose
        if room:
            return k  # the counter rose by more than the log intervals reaching this scrape interval hold
    return None
