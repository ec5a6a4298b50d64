"""Output destinations: ``-`` is standard output; a file is written atomically.

A regular file is written to a temporary name in the same folder and renamed
into place only when everything was written, so an error or Ctrl-C never
leaves a half-written file (the temporary file is removed on every exit path).
The destination is opened late, after the analysis succeeded, so a failing run
does not create an empty file either.

Special cases:

- a destination that exists and is not a regular file (``/dev/null``, a FIFO,
  ``/dev/stdout``, a terminal) is written in place: renaming over it would
  replace the device with a regular file;
- a symbolic link is followed: the file it points to is replaced, the link
  stays;
- an existing file keeps its permission bits;
- a destination that is one of the inputs (``protect``) is refused: preemptlog
  never writes into its input.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import tempfile
from pathlib import Path
from typing import BinaryIO, Iterable, Iterator

from .errors import UsageError


def _same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def check_not_input(target: str, protect: Iterable[os.PathLike | str]) -> None:
    """UsageError if ``target`` is (a link to) one of the ``protect`` files."""
    try:
        st = os.stat(target)
    except OSError:
        return
    for p in protect:
        try:
            if _same_file(st, os.stat(p)):
                raise UsageError(
                    f"-o {target}: is one of the inputs ({p}); preemptlog never writes into its input",
                    hint="choose another output file",
                )
        except OSError:
            continue


@contextlib.contextmanager
def open_output(target: str | None, *, protect: Iterable[os.PathLike | str] = ()) -> Iterator[BinaryIO]:
    if target in (None, "-"):
        yield sys.stdout.buffer
        sys.stdout.buffer.flush()
        return
    check_not_input(target, protect)
    dest = Path(target)
    try:
        st = os.stat(dest)  # follows links
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise UsageError(f"-o {target}: cannot use it ({exc.strerror or exc})") from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise UsageError(f"-o {target}: is a folder", hint="give a file name")
    if st is not None and not stat.S_ISREG(st.st_mode):
        # A device, FIFO or socket: write in place, never rename over it.
        with open(dest, "wb") as fh:
            yield fh
        return
    if dest.is_symlink():
        dest = Path(os.path.realpath(dest))
    folder = dest.parent if str(dest.parent) else Path(".")
    if not folder.is_dir():
        raise UsageError(f"-o {target}: folder {folder} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=folder)
    except OSError as exc:
        raise UsageError(f"-o {target}: cannot write in {folder} ({exc.strerror or exc})") from None
    ok = False
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        mode = stat.S_IMODE(st.st_mode) if st is not None else 0o666 & ~_umask()
        os.chmod(tmp, mode)
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
