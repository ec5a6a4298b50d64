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
  never writes into its input;
- text formats written to a terminal (standard output is a TTY) go through
  ``render.safe.TerminalWriter``: control characters from log text (ESC, OSC,
  C1, bidi overrides) are shown as escapes, never interpreted.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from ..errors import OutputError, PipeClosed, UsageError
from .safe import TerminalWriter


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


def check_not_given(target: str | None, paths: Iterable[str]) -> None:
    """Before any work: UsageError if ``-o target`` is (a link to) a file given on the command line
    (a file found inside a given folder or archive is refused by :func:`open_output` once the
    bundle is read)."""
    if target in (None, "-"):
        return
    check_name(target)
    check_not_input(target, [p for p in paths if p != "-"])
    # what open_output would refuse after the analysis, refused before it (no work thrown away)
    dest = Path(os.path.realpath(target))
    if dest.is_dir():
        raise UsageError(f"-o {target}: is a folder", hint="give a file name")
    if not dest.parent.is_dir():
        raise UsageError(f"-o {target}: folder {dest.parent} does not exist")


def check_name(target: str) -> None:
    """UsageError for an empty ``-o`` (``-o "$UNSET"``): no file name, not the current folder."""
    if not target.strip():
        raise UsageError("-o: the file name is empty", hint="give a file name, or - for standard output")


@contextlib.contextmanager
def open_output(
    target: str | None, *, protect: Iterable[os.PathLike | str] = (), terminal_text: bool = False
) -> Iterator[BinaryIO]:
    """Where the data goes. ``protect``: the input files (refused as a destination).
    ``terminal_text``: the format is text without styling of its own (json, ndjson, csv); when it
    goes to a terminal, control characters from the data are shown as escapes."""
    if target in (None, "-"):
        stream = getattr(sys.stdout, "buffer", None)
        if stream is None:
            raise PipeClosed("standard output is closed; nothing was written", hint="give -o FILE")
        full = CompleteWrites(stream)
        if terminal_text and _isatty(stream):
            writer = TerminalWriter(full)
            yield writer  # type: ignore[misc]
            writer.flush()
            return
        yield full  # type: ignore[misc]
        full.flush()
        return
    check_name(target)
    check_not_input(target, protect)
    dest = Path(target)
    try:
        st = os.stat(dest)  # follows links
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise OutputError(f"-o {target}: cannot use it ({exc.strerror or exc})") from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise UsageError(f"-o {target}: is a folder", hint="give a file name")
    if st is not None and not stat.S_ISREG(st.st_mode):
        # A device, FIFO or socket: write in place, never rename over it.
        try:
            fh = open(dest, "wb")  # noqa: SIM115 - closed by the caller (commit or discard)
        except OSError as exc:
            raise OutputError(f"-o {target}: cannot write ({exc.strerror or exc})") from None
        with fh:
            yield CompleteWrites(fh)  # type: ignore[misc]
        return
    if dest.is_symlink():
        dest = Path(os.path.realpath(dest))
    folder = dest.parent if str(dest.parent) else Path(".")
    if not folder.is_dir():
        raise UsageError(f"-o {target}: folder {folder} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=folder)
    except OSError as exc:
        raise OutputError(f"-o {target}: cannot write in {folder} ({exc.strerror or exc})") from None
    ok = False
    try:
        with os.fdopen(fd, "wb") as fh:
            try:
                yield fh
                fh.flush()
                os.fsync(fh.fileno())
            except OSError as exc:
                if exc.filename is None and exc.errno is not None:
                    raise OutputError(
                        f"-o {target}: cannot write ({exc.strerror or exc}); nothing was written"
                    ) from None
                raise
        mode = stat.S_IMODE(st.st_mode) if st is not None else 0o666 & ~_umask()
        os.chmod(tmp, mode)
        try:
            os.replace(tmp, dest)
        except OSError as exc:
            raise OutputError(f"-o {target}: cannot write ({exc.strerror or exc}); nothing was written") from None
        ok = True
    finally:
        if not ok:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


class CompleteWrites:
    """A binary stream whose ``write`` writes everything or raises.

    CPython's BufferedWriter returns a short count, without an error, when the
    reader of a pipe goes away in the middle of a large write (measured: 64 KiB
    of 4 MB written, no exception); writers that ignore the count (rich, json)
    would then end with exit 0 and lost data. Here the rest is written, so the
    broken pipe is raised (-> exit 141).
    """

    def __init__(self, raw) -> None:
        self._raw = raw

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        total, off = len(view), 0
        while off < total:
            n = self._raw.write(view[off:])
            if not n:
                raise BrokenPipeError(errno.EPIPE, "short write: the reader went away")
            off += n
        return total

    def flush(self) -> None:
        self._raw.flush()

    def isatty(self) -> bool:
        return _isatty(self._raw)

    def fileno(self) -> int:
        return self._raw.fileno()

    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return False

    def seekable(self) -> bool:
        return False

    def close(self) -> None:
        self.flush()

    @property
    def closed(self) -> bool:
        return bool(getattr(self._raw, "closed", False))


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (OSError, ValueError, AttributeError):
        return False


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
