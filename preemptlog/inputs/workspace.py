"""A private temporary folder for one run (spooled stdin, unpacked archives, salvaged files).

Moved out of bundle.py so that archive.py and the commands can use it without the walker.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Any

_LIVE_WORKSPACES: weakref.WeakSet[Workspace] = weakref.WeakSet()


@atexit.register
def _close_live_workspaces() -> None:
    for ws in list(_LIVE_WORKSPACES):
        ws.close()


class Workspace:
    """A private temporary folder (mode 0700, under TMPDIR), removed on close and at interpreter exit."""

    def __init__(self) -> None:
        self._dir: Path | None = None

    @property
    def path(self) -> Path:
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="preemptlog-"))
            os.chmod(self._dir, 0o700)
            _LIVE_WORKSPACES.add(self)
        return self._dir

    def new_file(self, name: str) -> Path:
        safe = re.sub(r"[^\w.-]", "_", name)[:80] or "file"
        fd, p = tempfile.mkstemp(prefix=safe + ".", dir=self.path)
        os.close(fd)
        return Path(p)

    def close(self) -> None:
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
            _LIVE_WORKSPACES.discard(self)

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
