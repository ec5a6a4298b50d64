"""Stage timings (``PREEMPTLOG_PROFILE=1``) and the progress listener the CLI installs."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

# A progress listener (commands.runner.progress): stage(name), files(total_bytes), file_done(bytes, name); None when off.
PROGRESS: Any = None


class Profile:
    """Stage timings on stderr when ``PREEMPTLOG_PROFILE=1`` (see docs/performance.md).

    Each :meth:`mark` prints the wall and CPU seconds since the previous mark, and tells the
    progress listener (``PROGRESS``) that the stage is done.
    """

    def files(self, total_bytes: int) -> None:
        if PROGRESS is not None:
            PROGRESS.files(total_bytes)

    def file_done(self, size: int, name: str = "") -> None:
        if PROGRESS is not None:
            PROGRESS.file_done(size, name)

    def __init__(self) -> None:
        self.on = os.environ.get("PREEMPTLOG_PROFILE", "") not in ("", "0")
        self._wall = time.perf_counter()
        self._cpu = time.process_time()

    def mark(self, stage: str) -> None:
        if PROGRESS is not None:
            PROGRESS.stage(stage)
        if not self.on:
            return
        import resource

        wall, cpu = time.perf_counter(), time.process_time()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10
        try:
            with open("/proc/self/statm") as fh:
                now = int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") >> 20
        except (OSError, ValueError, IndexError):
            now = -1
        sys.stderr.write(
            f"preemptlog profile: {stage:<26} {wall - self._wall:7.3f} s wall {cpu - self._cpu:7.3f} s cpu"
            f"  rss {now} MB (peak {peak} MB)\n"
        )
        self._wall, self._cpu = wall, cpu
