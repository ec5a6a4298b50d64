"""``preemptlog watch``: a live server followed, its preemption storms told as they happen, each one
saved as an incident folder that ``preemptlog analyze`` reads, and explained in analyze's words.

- follow.py: ``tail -F`` of a log (rotation, truncation, partial lines) and the ring buffers;
- scrape.py: one server's scrape loop (capture's request; one in flight, timeout, backoff) and
  what is read of a page;
- storms.py: the state machine (a storm opens on the counter's first increase, closes after
  ``--quiet`` seconds without one; restarts);
- bundle.py: a storm's folder, written as it goes and published in one rename; its analysis;
- output.py: ndjson lines or text (a live status line per server on a terminal);
- loop.py: :class:`Watch`, the session.

docs/watch.md is the manual.
"""

from __future__ import annotations

from .loop import Outcome, Watch, WatchOptions

__all__ = ["Outcome", "Watch", "WatchOptions"]
