"""Output destinations: ``-`` is standard output; a file is written atomically.

A file is written to a temporary name in the same folder and renamed into
place only when everything was written, so an error or Ctrl-C never leaves a
half-written file. The destination is opened late, after the analysis
succeeded, so a failing run does not create an empty file either.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from pathlib import Path
from typing import BinaryIO, Iterator

from .errors import UsageError


@contextlib.contextmanager
def open_output(target: str | None) -> Iterator[BinaryIO]:
    if target in (None, "-"):
        yield sys.stdout.buffer
        sys.stdout.buffer.flush()
        return
    dest = Path(target)
    folder = dest.parent if str(dest.parent) else Path(".")
    if not folder.is_dir():
        raise UsageError(f"-o {target}: folder {folder} does not exist")
    if dest.is_dir():
        raise UsageError(f"-o {target}: is a folder")
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=folder)
    ok = False
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, dest)
        ok = True
    finally:
        if not ok:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
