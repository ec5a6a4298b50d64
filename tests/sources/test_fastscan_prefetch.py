"""The compiled pass's producer thread (sources/fastscan ``Scan.frames``, issue 36).

The next window is read and scanned by a thread while the caller works on the current one. What
that must never change: the windows and their rows (the same frames as the pass without the
thread, in file order, in windows of every size), an error of the scan (raised in the caller's
thread, the same exception), and a caller that stops early (the thread ends; nothing keeps
reading the file).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from preemptlog.sources import fastscan, vllm_log

from ..conftest import ROOT

pytestmark = pytest.mark.skipif(fastscan._scan is None, reason="the compiled pass is not built (no C compiler)")


@pytest.fixture(scope="module")
def reqlog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("prefetch") / "req.log"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "reqlog.py"),
            str(out),
            "--size",
            "400K",
            "--preemptions-per-gb",
            "20000",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return out


def _scan(path: Path, window: int, prefetch: int) -> fastscan.Scan:
    scan = vllm_log.compiled(str(path), 1)
    assert scan is not None
    scan.window, scan.prefetch = window, prefetch
    return scan


def _producers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "preemptlog-fastscan"]


@pytest.mark.parametrize("window", [2048, 65536, 1 << 26])
def test_the_same_windows_with_and_without_the_thread(reqlog: Path, window: int) -> None:
    alone = list(_scan(reqlog, window, 0).frames())
    for prefetch in (1, 3):
        got = list(_scan(reqlog, window, prefetch).frames())
        assert [f.height for f in got] == [f.height for f in alone]
        for g, w in zip(got, alone, strict=True):
            assert_frame_equal(g, w)
    whole = pl.concat(alone)
    assert whole.get_column("n").is_sorted() and whole.height > 500
    if window == 2048:
        assert len(alone) > 50  # many windows: the queue was full and waited on


def _with_slow_lines(reqlog: Path, tmp: Path) -> Path:
    """The request-heavy log with lines the C pass hands to the polars pass (NUL, ESC, a stray CR)
    among its request lines and its other records, every 97th line."""
    out = tmp / "slow.log"
    lines = reqlog.read_bytes().split(b"\n")
    for i in range(3, len(lines), 97):
        k = (i // 97) % 3
        lines[i] = lines[i].replace(b"] ", b"] \x1b[0m", 1) if k == 0 else lines[i] + (b"\x00" if k == 1 else b"\rx")
    out.write_bytes(b"\n".join(lines))
    return out


@pytest.mark.parametrize("window", [2048, 65536, 1 << 26])
def test_pairs_are_the_windows_apart(reqlog: Path, window: int, tmp_path: Path) -> None:
    """``Scan.pairs`` (the run logic's input, fastscan/split.py): each window's request rows apart from
    its other records, written by the C pass to columns of their own. Merged on the line number they
    are the window of ``frames``, row for row; the request rows are exactly the rows of request
    markers, lines the polars pass reads (NUL, ESC, CR) included; every column is one chunk."""
    hot = sorted(vllm_log.fast_spec().hot)
    for path in (reqlog, _with_slow_lines(reqlog, tmp_path)):
        for prefetch in (0, 1):
            frames = list(_scan(path, window, prefetch).frames())
            pairs = list(_scan(path, window, prefetch).pairs())
            assert len(pairs) == len(frames)
            for (main, req), want in zip(pairs, frames, strict=True):
                assert req.height and main.get_column("n").is_sorted() and req.get_column("n").is_sorted()
                assert req.get_column("marker").is_in(hot).all()
                assert not main.get_column("marker").is_in(hot).any()
                assert set(req.n_chunks("all")) == {1}
                merged = main.merge_sorted(req, key="n") if main.height else req
                assert_frame_equal(merged, want)
    slow = pl.concat(list(_scan(_with_slow_lines(reqlog, tmp_path), 1 << 26, 0).frames()))
    fast = pl.concat(list(_scan(reqlog, 1 << 26, 0).frames()))
    assert slow.height == fast.height  # the altered lines are records still (read by the polars pass)


def test_an_error_of_the_scan_is_raised_in_the_callers_thread(reqlog: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scan = _scan(reqlog, 4096, 1)
    calls = {"n": 0}
    real = scan._fast

    def failing(batches: list[object]) -> pl.DataFrame:
        calls["n"] += 1
        if calls["n"] == 5:
            raise MemoryError("the fifth window")
        return real(batches)

    monkeypatch.setattr(scan, "_fast", failing)
    seen = 0
    with pytest.raises(MemoryError, match="the fifth window"):
        for _ in scan.frames():
            seen += 1
    assert seen == 4  # the four windows before it, in order, then the error
    assert not _producers()


def test_a_caller_that_stops_early_stops_the_thread(reqlog: Path) -> None:
    scan = _scan(reqlog, 2048, 1)
    frames = scan.frames()
    first = next(frames)
    assert first.height > 0
    time.sleep(0.2)  # the producer has filled the queue and waits on it
    assert len(_producers()) == 1
    frames.close()
    assert not _producers()
    # and a consumer that takes only a few rows through the LazyFrame source (head): the same rows
    got = _scan(reqlog, 2048, 1).lazy().head(7).collect()
    want = pl.concat(list(_scan(reqlog, 2048, 0).frames())).head(7)
    assert_frame_equal(got, want)
    assert not _producers()


@pytest.mark.parametrize("part", [997, 4096, 1 << 22])
def test_a_window_read_in_parts_is_the_file(reqlog: Path, part: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The window's parts are read by several threads at once: the same bytes, the same windows."""
    monkeypatch.setattr(fastscan, "READ_PART_BYTES", part)
    data = reqlog.read_bytes()
    with open(reqlog, "rb", buffering=0) as fh, ThreadPoolExecutor(3) as pool:
        for off, size in ((0, len(data) + 10), (1234, 50_000), (len(data) - 100, 4096), (len(data), 4096)):
            buf = bytearray(size)
            got = fastscan._read_at(fh.fileno(), buf, off, 4, pool)
            assert got == min(size, len(data) - off)  # short at the file's end: what is there
            assert bytes(buf[:got]) == data[off : off + got]
    for prefetch in (0, 1):
        alone = pl.concat(list(_scan(reqlog, 1 << 26, prefetch).frames()))
        small = pl.concat(list(_scan(reqlog, 65536, prefetch).frames()))
        assert_frame_equal(alone, small)


def test_a_file_that_grew_after_it_was_sized_is_read_whole(reqlog: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first window is sized by the file's size at open; a log still being written is longer when it
    is read: the first (full) window is scanned as read, the next ones in windows of the full size
    (before, the grown buffer replaced the one just read, and its window was scanned as zeros)."""
    want = pl.concat(list(_scan(reqlog, 1 << 26, 0).frames()))
    real = os.fstat

    class Smaller:
        def __init__(self, st: os.stat_result) -> None:
            self.st_size = st.st_size // 3

    monkeypatch.setattr(os, "fstat", lambda fd: Smaller(real(fd)))
    for prefetch in (0, 1):
        got = pl.concat(list(_scan(reqlog, 1 << 26, prefetch).frames()))
        assert_frame_equal(got, want)
