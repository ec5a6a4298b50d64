"""``tail -F`` of one file, and the ring buffers the watch keeps what it read in.

:class:`Follower` reads what is appended to a file, line by line: a line is handed on only once its
newline is there (a partial line is held until it is complete, or until it is :data:`MAX_LINE` bytes
long: then its first part is handed on as a line of its own, so memory stays bounded); a rotated
file (the name now points to another inode: ``logrotate``, ``mv`` then a new file) is read to its end
(across as many polls as that takes: no line of it is lost) and then followed from the start of
the new file, which is opened as soon as it is seen (so is each file the name points to while a
rotated one is still being read: a name rotated twice before the reader got there loses nothing); a
truncated file (``copytruncate``, ``> file``)
from its new start; a missing file is waited for. Every change of state is said once through
``say``. A poll reads at most :data:`MAX_READ_PER_POLL` bytes and says in ``more`` that there is
more to read: the caller drains a backlog in small pieces, so what it holds at once is one piece
beside its rings, however far behind it was. Each line carries the time it was read: the watch's windows are cut on that clock (vLLM
writes its lines as they happen, so it is within a poll of the line's own stamp).

:class:`Ring` keeps the latest items up to a count and a byte budget: what the watch holds of the
past (the lines and scrapes before a storm) never grows with time.
"""

from __future__ import annotations

import glob
import os
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO, Generic, NamedTuple, TypeVar

MAX_LINE = 1 << 20  # a "line" longer than this without a newline is handed on in parts
READ_CHUNK = 1 << 20  # bytes read per read() call
MAX_READ_PER_POLL = 1 << 20  # a poll reads at most this much of one file (a backlog takes several: see ``more``)

T = TypeVar("T")


class Line(NamedTuple):
    """One complete line (with its newline) and the time it was read."""

    t: float
    data: bytes


class Ring(Generic[T]):
    """The latest items, at most ``max_items`` of them and ``max_bytes`` of their sizes."""

    def __init__(self, max_items: int, max_bytes: int, size: Callable[[T], int]) -> None:
        self.max_items, self.max_bytes, self.size = max_items, max_bytes, size
        self.items: deque[T] = deque()
        self.bytes = 0
        self.dropped = 0

    def append(self, item: T) -> None:
        self.items.append(item)
        self.bytes += self.size(item)
        while self.items and (len(self.items) > self.max_items or self.bytes > self.max_bytes):
            self.bytes -= self.size(self.items.popleft())
            self.dropped += 1

    def __iter__(self) -> Iterator[T]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def clear(self) -> None:
        self.items.clear()
        self.bytes = 0


def line_ring(max_lines: int = 50_000, max_bytes: int = 16 << 20) -> Ring[Line]:
    return Ring(max_lines, max_bytes, lambda ln: len(ln.data) + 64)


class Follower:
    """Follows one file by name (see the module docstring). ``from_start``: read what the file
    already holds (else only what is appended after the first look; a file that appears later is
    read from its start)."""

    def __init__(
        self,
        path: Path,
        say: Callable[[str], None],
        *,
        from_start: bool = False,
        clock: Callable[[], float] = time.time,
        label: str = "--log",
    ) -> None:
        self.path, self.say, self.clock, self.label = path, say, clock, label
        self._fh: BinaryIO | None = None
        self.ino: tuple[int, int] | None = None
        self.pos = 0
        self.pending = b""
        self.state = "new"  # new | open | missing
        self.bytes_read = 0
        self.more = False  # the last poll stopped at MAX_READ_PER_POLL, not at the file's end
        self.rotations = 0
        self.truncations = 0
        # the files found at the name while a rotated one is still being read, opened the moment they are
        # seen and read in turn: a name rotated again before the reader got to its file (a backlog, a
        # starved host) never loses that file
        self._next: deque[tuple[BinaryIO, tuple[int, int]]] = deque()
        self._open(at_end=not from_start)

    def _open(self, at_end: bool) -> bool:
        try:
            fh = open(self.path, "rb")  # noqa: SIM115 - held open across polls, closed in close()
        except OSError as exc:
            if self.state != "missing":
                self.say(f"{self.label} {self.path}: {exc.strerror or exc}; waiting for it")
                self.state = "missing"
            return False
        st = os.fstat(fh.fileno())
        if self.state == "missing":
            self.say(f"{self.label} {self.path}: there now; following it")
        self._fh, self.ino = fh, (st.st_dev, st.st_ino)
        self.pos = st.st_size if at_end else 0
        fh.seek(self.pos)
        self.state = "open"
        return True

    def poll(self) -> list[Line]:
        """The complete lines appended since the last poll (an empty list when none)."""
        out: list[Line] = []
        if self._fh is None and not self._open(at_end=False):  # appeared after the start: all of it is new
            return out
        try:
            st = os.stat(self.path)
            now_at = (st.st_dev, st.st_ino)
            shrunk = now_at == self.ino and not self._next and st.st_size < self.pos
        except OSError:
            now_at = None  # gone for now (between a rename and the new file): keep the old handle
            shrunk = False
        if now_at is not None and now_at != (self._next[-1][1] if self._next else self.ino):
            self._pin(now_at)  # a new file at the name: held from now on, read after the ones before it
        if self._next:
            self._read(out)  # the rest of the rotated file first, to its end
            if self.more:
                return out  # the rest of it on the next polls; the new file after that
            self._flush_pending(out)
            self._close_fh()
            self.rotations += 1
            self.say(f"{self.label} {self.path}: rotated; following the new file from its start")
            self._fh, self.ino = self._next.popleft()
            self.pos = 0
            self._read(out)
            return out
        if shrunk:
            self._flush_pending(out)
            self.truncations += 1
            self.say(f"{self.label} {self.path}: truncated; following it from its new start")
            assert self._fh is not None
            self._fh.seek(0)
            self.pos = 0
        self._read(out)
        return out

    def _pin(self, ino: tuple[int, int]) -> None:
        """Open the file now at the name (``ino`` by its stat) to read after the current one; a file
        rotated away again between the stat and the open is taken as the open finds it."""
        try:
            fh = open(self.path, "rb")  # noqa: SIM115 - held open across polls, closed in close()
        except OSError:
            return
        st = os.fstat(fh.fileno())
        got = (st.st_dev, st.st_ino)
        if got == self.ino or any(got == i for _, i in self._next):
            fh.close()
            return
        self._next.append((fh, got))

    def _read(self, out: list[Line]) -> None:
        fh = self._fh
        if fh is None:
            return
        got = 0
        now = self.clock()
        self.more = False
        while True:
            if got >= MAX_READ_PER_POLL:
                self.more = True
                break
            data = fh.read(min(READ_CHUNK, MAX_READ_PER_POLL - got))
            if not data:
                break
            got += len(data)
            self.pos += len(data)
            self._split(self.pending + data, now, out)
        self.bytes_read += got

    def _split(self, data: bytes, now: float, out: list[Line]) -> None:
        start = 0
        while True:
            nl = data.find(b"\n", start)
            if nl < 0:
                break
            out.append(Line(now, data[start : nl + 1]))
            start = nl + 1
        rest = data[start:]
        while len(rest) > MAX_LINE:  # no newline for MAX_LINE bytes: hand on a part, hold the rest
            out.append(Line(now, rest[:MAX_LINE] + b"\n"))
            rest = rest[MAX_LINE:]
        self.pending = rest

    def _flush_pending(self, out: list[Line]) -> None:
        """A partial line that can no longer be completed (its file was rotated away or cut)."""
        if self.pending:
            out.append(Line(self.clock(), self.pending + b"\n"))
            self.pending = b""

    def _close_fh(self) -> None:
        if self._fh is not None:
            try:
                self._fh.close()
            except OSError:
                pass
        self._fh = None

    def close(self) -> None:
        self._close_fh()
        while self._next:
            fh, _ = self._next.popleft()
            try:
                fh.close()
            except OSError:
                pass


class GlobFollower:
    """Follows every file a pattern names (the plugin's ``records-{pid}.jsonl``: a restarted engine
    writes a new file): the files there at the start from their end, the ones that appear later
    from their start. The pattern is looked at again every ``rescan_s`` seconds."""

    def __init__(
        self,
        pattern: str,
        say: Callable[[str], None],
        *,
        clock: Callable[[], float] = time.time,
        rescan_s: float = 2.0,
        label: str = "--records",
        max_files: int = 64,
    ) -> None:
        self.pattern, self.say, self.clock, self.rescan_s, self.label = pattern, say, clock, rescan_s, label
        self.max_files = max_files
        self.followers: dict[str, Follower] = {}
        self.last_scan = 0.0
        self.said_none = False
        self.is_glob = glob.has_magic(pattern)
        self.more = False  # a file's last poll stopped short of its end (see Follower.more)
        self._scan(first=True)

    def _scan(self, first: bool) -> None:
        self.last_scan = self.clock()
        paths = sorted(glob.glob(self.pattern)) if self.is_glob else [self.pattern]
        for p in paths:
            if p not in self.followers and (not self.is_glob or os.path.isfile(p)):
                self.followers[p] = Follower(
                    Path(p), self.say, from_start=not first, clock=self.clock, label=self.label
                )
        if self.is_glob and not paths and not self.said_none:
            self.say(f"{self.label} {self.pattern}: no file yet; waiting for one")
            self.said_none = True
        while len(self.followers) > self.max_files:  # the oldest names go (a restart loop must not grow this)
            oldest = min(self.followers, key=lambda k: _mtime(k))
            self.followers.pop(oldest).close()

    def poll(self) -> list[tuple[str, Line]]:
        if self.is_glob and self.clock() - self.last_scan >= self.rescan_s:
            self._scan(first=False)
        out: list[tuple[str, Line]] = []
        self.more = False
        for name, f in list(self.followers.items()):
            out.extend((name, ln) for ln in f.poll())
            self.more = self.more or f.more
        return out

    def close(self) -> None:
        for f in self.followers.values():
            f.close()


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0
