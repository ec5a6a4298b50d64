"""Per-bundle functions for the process pool's tests (module level: the spawned workers import them)."""

from __future__ import annotations

import os
import signal
from pathlib import Path


def crash_on_marker(path, options, skip):
    """The real analysis, except that a bundle holding a file named CRASH kills its worker
    (as a segfault or the out-of-memory killer would)."""
    from preemptlog.fleet.work import analyse_bundle

    if Path(path).is_dir() and (Path(path) / "CRASH").exists():
        os.kill(os.getpid(), signal.SIGKILL)
    return analyse_bundle(path, options, skip)
