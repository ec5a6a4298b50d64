"""Hostile inputs (issue 7): preemptlog never crashes, never loses an event it could read.

Each test names the input and what preemptlog does with it (README "Robustness").
"""

from __future__ import annotations

import gzip
import io
import os
import shutil
import threading

import polars as pl
import pytest

from preemptlog import AnalyzeOptions, analyze
from preemptlog.errors import InputError
from preemptlog.pipeline.bundle import Workspace, collect

from ..conftest import FIXTURES, write_lines

GOLDEN = FIXTURES / "golden" / "v0-unbracketed-0.6.log"  # 101 events, 3 logged
M = "INFO 05-04 05:25:03 [scheduler.py:10] Req-{} PREEMPTED"
STATS = (
    "INFO 05-04 05:25:{:02d} [loggers.py:1] Engine 000: Avg prompt throughput: 1.0 tokens/s, Avg generation "
    "throughput: 1.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, Preemptions: {}, GPU KV cache usage: 1.0%, "
    "Prefix cache hit rate: 0.0%"
)


def run(paths, **kw):
    kw.setdefault("tz", "UTC")
    kw.setdefault("year", 2026)
    kw.setdefault("rules", False)
    return analyze([str(p) for p in paths], AnalyzeOptions(**kw))


def marker_ids(r) -> list[str]:
    return r.events.filter(pl.col("kind") == "marker").get_column("request_id").to_list()


# ---------------------------------------------------------------- empty, binary, encodings


def test_empty_file_alone_is_an_input_error_and_beside_a_log_is_listed(tmp_path):
    (tmp_path / "empty.log").write_bytes(b"")
    with pytest.raises(InputError, match=r"empty\.log \(empty\)"):
        run([tmp_path / "empty.log"])
    write_lines(tmp_path / "vllm.log", [M.format(1)])
    r = run([tmp_path])
    assert marker_ids(r) == ["1"]
    assert {f.display.split("/")[-1]: f.kind for f in r.bundle.files}["empty.log"] == "empty"
    assert not r.partial


def test_binary_junk_is_skipped_not_fatal(tmp_path):
    (tmp_path / "core").write_bytes(os.urandom(200_000))
    write_lines(tmp_path / "vllm.log", [M.format(1)])
    r = run([tmp_path])
    assert marker_ids(r) == ["1"]
    assert {f.kind for f in r.bundle.files} == {"binary", "vllm-log"}


def test_invalid_utf8_and_nul_inside_good_lines_keep_the_event(tmp_path):
    p = tmp_path / "x.log"
    p.write_bytes(
        b"\xff\xfe\x00junk\n"
        + M.format(1).replace("Req", "\x00\xffReq").encode("utf-8", "surrogateescape").replace(b"\xc3\xbf", b"\xff")
        + b"\n"
        + M.format("2\xc3\x28x").encode("latin-1")
        + b"\n"
    )
    r = run([p])
    assert r.events.height == 2
    assert marker_ids(r)[0] == "1"
    assert "\ufffd" in r.events.get_column("raw")[1]


def test_latin1_file_is_read_with_replacement(tmp_path):
    p = tmp_path / "x.log"
    p.write_bytes((M.format("café") + "\n" + M.format("2") + "\n").encode("latin-1"))
    r = run([p])
    assert r.events.height == 2 and marker_ids(r)[1] == "2"


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-32"])
def test_utf16_and_utf32_are_read_through_a_utf8_copy(tmp_path, encoding):
    text = "\n".join(M.format(i) for i in range(3)) + "\n"
    p = tmp_path / "win.log"
    p.write_bytes(text.encode(encoding))  # "utf-16"/"utf-32" write a BOM; -le/-be none
    r = run([p])
    assert marker_ids(r) == ["0", "1", "2"]
    assert r.events.get_column("source").unique().to_list() == [str(p)]  # provenance is the original name
    assert any("read through a UTF-8 copy" in w for w in r.warnings)
    assert not r.partial


def test_crlf_and_lone_cr(tmp_path):
    lines = [M.format(i) for i in range(3)]
    (tmp_path / "crlf.log").write_bytes(("\r\n".join(lines) + "\r\n").encode())
    (tmp_path / "cr.log").write_bytes(("\r".join(lines) + "\r").encode())
    a = run([tmp_path / "crlf.log"])
    b = run([tmp_path / "cr.log"])
    assert marker_ids(a) == marker_ids(b) == ["0", "1", "2"]
    assert a.events.get_column("raw").to_list() == lines  # no stray CR in the text
    assert b.events.get_column("event_id").to_list() == [
        f"{tmp_path}/cr.log:1",
        f"{tmp_path}/cr.log:1.1",
        f"{tmp_path}/cr.log:1.2",
    ]


def test_ten_megabyte_line_hides_nothing(tmp_path):
    """A 10 MB first line must not defeat sniffing (the head alone is only x's) nor the reader."""
    p = tmp_path / "x.log"
    with open(p, "wb") as fh:
        fh.write(b"x" * 10_000_000 + b"\n")
        fh.write((M.format("after") + "\n").encode())
        fh.write(b"y" * 10_000_000 + M.format("glued").encode() + b"\n")
    r = run([p])
    assert r.bundle.files[0].kind == "vllm-log"
    assert sorted(marker_ids(r)) == ["after", "glued"]
    # the same, compressed: the sample goes on decompressing past the long line
    gz = tmp_path / "x.log.gz"
    gz.write_bytes(gzip.compress(p.read_bytes(), compresslevel=1))
    r = run([gz])
    assert sorted(marker_ids(r)) == ["after", "glued"]


# ---------------------------------------------------------------- damage


def test_file_truncated_mid_line_is_read_and_reported(tmp_path):
    p = tmp_path / "vllm.log"
    p.write_bytes((M.format(1) + "\n" + M.format(2)[:-4]).encode())  # "...PREEMP"
    r = run([p])
    assert marker_ids(r) == ["1"]
    assert r.partial
    assert any("ends in the middle of a line" in w for w in r.warnings)


def test_complete_last_line_without_newline_is_not_damage(tmp_path):
    p = tmp_path / "bt.jsonl"
    p.write_bytes(b'{"type": "step", "ts": 1796015438.1, "step": 7, "num_free_blocks": 6, "free_block_ids": [1]}')
    write_lines(tmp_path / "vllm.log", [M.format(1)])
    r = run([tmp_path])
    assert not r.partial, r.warnings


@pytest.mark.parametrize("name", ["vllm.log.gz", "vllm.log.zst"])
def test_truncated_compressed_log_reads_what_is_there(tmp_path, name):
    # the log, then incompressible filler, so the damage falls after the log's first blocks
    raw = GOLDEN.read_bytes() + b"".join(b"INFO filler %s\n" % os.urandom(24).hex().encode() for _ in range(6000))
    if name.endswith(".gz"):
        data = gzip.compress(raw)
    else:
        zstandard = pytest.importorskip("zstandard")
        data = zstandard.ZstdCompressor().compress(raw)
    p = tmp_path / name
    p.write_bytes(data[: len(data) * 2 // 3])
    r = run([p])
    assert r.partial
    assert any("damaged" in w for w in r.warnings), r.warnings
    assert r.requests.height >= 1  # the part before the damage was read


@pytest.mark.parametrize(
    "name,src",
    [("dmon.txt.gz", "dmon.txt"), ("blocktable.jsonl.gz", "blocktable.jsonl"), ("kvevents.jsonl.gz", "kvevents.jsonl")],
)
def test_truncated_gzip_of_another_source_does_not_sink_the_analysis(tmp_path, name, src):
    data = gzip.compress((FIXTURES / "joined" / src).read_bytes() * 50)
    (tmp_path / name).write_bytes(data[: len(data) // 2])
    shutil.copy(FIXTURES / "joined" / "vllm.log", tmp_path / "vllm.log")
    r = run([tmp_path / "vllm.log", tmp_path / name])
    assert r.events.height > 0  # the log's events survive
    assert r.partial
    assert any(name in w and "damaged gzip" in w for w in r.warnings), r.warnings


# ---------------------------------------------------------------- unreadable things


def test_missing_input_beside_a_good_one_is_a_warning(tmp_path):
    write_lines(tmp_path / "vllm.log", [M.format(1)])
    r = run([tmp_path / "vllm.log", tmp_path / "nope.log"])
    assert marker_ids(r) == ["1"] and r.partial
    assert any("nope.log: no such file or folder" in w for w in r.warnings)
    with pytest.raises(InputError, match="no such file"):
        run([tmp_path / "nope.log"])


def test_permission_denied_file_is_skipped_others_read(tmp_path, monkeypatch):
    """Tests run as root, so the denial is simulated where the file is opened."""
    import preemptlog.sources.sniffing as bmod  # where inputs are opened (moved from bundle.py)

    write_lines(tmp_path / "a.log", [M.format("a")])
    write_lines(tmp_path / "b.log", [M.format("b")])
    real_open = os.open

    def deny(path, flags, *a, **k):
        if str(path).endswith("b.log"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *a, **k)

    monkeypatch.setattr(bmod.os, "open", deny)
    r = run([tmp_path])
    assert marker_ids(r) == ["a"]
    assert r.partial
    assert any("b.log: cannot read (Permission denied)" in w for w in r.warnings), r.warnings


def test_folder_that_cannot_be_listed_is_a_warning(tmp_path, monkeypatch):
    import preemptlog.sources.sniffing as bmod  # where inputs are opened (moved from bundle.py)

    (tmp_path / "locked").mkdir()
    write_lines(tmp_path / "locked" / "x.log", [M.format("hidden")])
    write_lines(tmp_path / "vllm.log", [M.format(1)])
    real = os.scandir

    def scandir(path="."):
        if str(path).endswith("locked"):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    r = run([tmp_path])
    assert marker_ids(r) == ["1"] and r.partial
    assert any("locked: cannot list folder (Permission denied)" in w for w in r.warnings)
    _ = bmod


def test_dangling_symlink_symlink_loop_and_folder_named_like_a_file(tmp_path):
    b = tmp_path / "bundle"
    b.mkdir()
    write_lines(b / "vllm.log", [M.format(1)])
    (b / "dangling.log").symlink_to(b / "nowhere")
    (b / "loop1").symlink_to(b / "loop2")
    (b / "loop2").symlink_to(b / "loop1")
    (b / "vllm.log.1").mkdir()  # a folder named like a rotated log
    write_lines(b / "vllm.log.1" / "inner.log", [M.format(2)])
    r = run([b])
    assert sorted(marker_ids(r)) == ["1", "2"]
    kinds = {f.display.split("bundle/")[1]: f.kind for f in r.bundle.files}
    assert kinds["dangling.log"] == kinds["loop1"] == kinds["loop2"] == "unreadable"
    assert r.partial
    with pytest.raises(InputError, match="symbolic link loop"):
        run([b / "loop1"])
    with pytest.raises(InputError, match="symbolic link to a missing file"):
        run([b / "dangling.log"])


def test_symlinks_outside_the_folder_are_not_followed_and_duplicates_are_read_once(tmp_path):
    outside = tmp_path / "secret.log"
    write_lines(outside, [M.format("secret")])
    b = tmp_path / "bundle"
    b.mkdir()
    write_lines(b / "vllm.log", [M.format(1)])
    (b / "current.log").symlink_to("vllm.log")  # the same file again
    os.link(b / "vllm.log", b / "hard.log")  # and again
    (b / "leak.log").symlink_to(outside)
    (b / "up").symlink_to(tmp_path, target_is_directory=True)  # a folder link out (and a loop)
    r = run([b])
    assert marker_ids(r) == ["1"]  # not 3 times, not the secret
    names = {f.display.split("bundle/")[1]: f for f in r.bundle.files}
    assert names["leak.log"].kind == "unreadable" and names["up"].kind == "unreadable"
    assert ("current.log" not in names and "hard.log" not in names) or "vllm.log" not in names
    assert any("outside the bundle" in w for w in r.warnings)
    # a link given on the command line is the user's choice: followed
    assert marker_ids(run([b / "leak.log"])) == ["secret"]


def test_fifo_never_blocks(tmp_path):
    b = tmp_path / "bundle"
    b.mkdir()
    write_lines(b / "vllm.log", [M.format(1)])
    os.mkfifo(b / "pipe.log")  # no writer: opening it for reading would block forever
    box: dict = {}

    def go():
        try:
            box["r"] = run([b])
            box["e"] = None
            try:
                run([b / "pipe.log"])
            except InputError as exc:
                box["e"] = exc
        except BaseException as exc:
            box["err"] = exc

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(30)
    if t.is_alive():
        # unblock the reader so the test process can end, then fail
        fd = os.open(b / "pipe.log", os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        pytest.fail("reading a folder with a FIFO blocked")
    assert "err" not in box, box.get("err")
    assert marker_ids(box["r"]) == ["1"]
    assert "not a regular file" in str(box["e"]) or "unreadable" in str(box["e"])


def test_stdin_closed_or_empty(monkeypatch):
    import sys

    monkeypatch.setattr(sys, "stdin", None)
    with pytest.raises(InputError, match="standard input is closed"):
        run(["-"])
    with pytest.raises(InputError, match=r"<stdin> \(empty\)"):
        analyze(["-"], AnalyzeOptions(tz="UTC"), stdin=io.BytesIO(b""))


# ---------------------------------------------------------------- many files


def test_three_thousand_small_files(tmp_path):
    """3000 small logs: every file collected, named and read (how long it takes is bench/run's
    "folder of 3000 small logs" row: tests never time)."""
    b = tmp_path / "many"
    b.mkdir()
    for i in range(3000):
        (b / f"node{i:04d}.log").write_text(M.format(i) + "\n" + (f"some text {i}\n" * (i % 3)))
    with Workspace() as ws:
        bundle = collect([str(b)], ws)
        names = [bundle.stream_name(s) for s in bundle.streams()]
    assert len(bundle.files) == 3000 and len(set(names)) == 3000
    r = run([b])
    assert sorted(int(x) for x in marker_ids(r)) == list(range(3000))
    assert r.events.get_column("line").unique().to_list() == [1]


# ---------------------------------------------------------------- time going wrong


def test_timestamps_going_backwards_keep_every_event(tmp_path):
    lines = [
        "INFO 05-04 05:25:10 [scheduler.py:10] Req-a PREEMPTED",
        "INFO 05-04 05:25:03 [scheduler.py:10] Req-b PREEMPTED",  # 7 s back: a clock step
        "INFO 05-04 04:00:00 [scheduler.py:10] Req-c PREEMPTED",  # an hour back
    ]
    r = run([write_lines(tmp_path / "x.log", lines)])
    assert sorted(marker_ids(r)) == ["a", "b", "c"]
    assert r.events.get_column("time").null_count() == 0
    assert r.events.get_column("time").dt.year().unique().to_list() == [2026]  # no false new year
    # more than a day back: vLLM timestamps have no year, so it is read as the next year, and said
    lines.append("INFO 05-01 05:25:03 [scheduler.py:10] Req-d PREEMPTED")
    r = run([write_lines(tmp_path / "y.log", lines)])
    assert sorted(marker_ids(r)) == ["a", "b", "c", "d"]
    assert any(a.topic == "year" and "rollover" in str(a.value) for a in r.assumptions)


def test_duplicated_lines(tmp_path):
    """An identical V0 warning counts once (it is the same counter value); identical marker lines
    are separate lines of the log and count as many times as they appear."""
    v0 = (
        "WARNING 05-02 14:03:11 [scheduler.py:1775] Sequence group 7 is preempted by PreemptionMode.SWAP mode "
        "because there is not enough KV cache space. total_num_cumulative_preemption=1"
    )
    r = run([write_lines(tmp_path / "x.log", [v0, v0, M.format(9), M.format(9)])])
    kinds = r.events.get_column("kind").to_list()
    assert kinds.count("logged") == 1
    assert kinds.count("marker") == 2


def test_rotated_files_overlapping_in_time(tmp_path):
    """vllm.log.1 ends with lines that vllm.log repeats (copytruncate overlap): V0 warnings are
    de-duplicated by their counter, so the V0 events are those of the unrotated log."""
    src = GOLDEN.read_text().splitlines()
    cut = len(src) // 2
    write_lines(tmp_path / "vllm.log.1", src[: cut + 4])
    write_lines(tmp_path / "vllm.log", src[cut:])  # 4 lines in both files
    whole = run([GOLDEN])
    rot = run([tmp_path])
    cols = ["kind", "cumulative", "request_id"]
    assert (
        rot.events.filter(pl.col("kind") != "marker")
        .select(cols)
        .equals(whole.events.filter(pl.col("kind") != "marker").select(cols))
    )


def test_small_logs_read_together_give_the_records_of_each_file(tmp_path):
    """Thousands of small logs are read in one pass (analysis._scan_small_files); every record
    keeps its own file and line, exactly as read one by one."""
    from preemptlog.analysis import SMALL_LOG_MIN_FILES, _scan_small_files
    from preemptlog.sources import vllm_log

    sources = sorted((FIXTURES / "golden").glob("*.log")) + sorted((FIXTURES / "sources").glob("*.log"))
    variants = []
    for i, src in enumerate(sources * 3):
        data = src.read_bytes()
        if i % 4 == 1:
            data = data.rstrip(b"\n")  # no final line end
        elif i % 4 == 2:
            data = data.replace(b"\n", b"\r\n")
        elif i % 4 == 3:
            data = data.replace(b"\n", b"\r", 3) + b"\n\n\n"  # lone CRs, empty lines
        p = tmp_path / f"f{i:02d}.log"
        p.write_bytes(data)
        variants.append(p)
    assert len(variants) >= SMALL_LOG_MIN_FILES
    with Workspace() as ws:
        b = collect([str(tmp_path)], ws, {str(p): "vllm-log" for p in variants})
        files = b.of_kind("vllm-log")
        frames, rest = _scan_small_files(files, ws)
        assert rest == [] and frames
        together = pl.concat(frames).sort("file_id", "n", "seg", maintain_order=True)
        one_by_one = pl.concat([vllm_log.read(str(f.path), f.file_id) for f in files])
    assert together.equals(one_by_one)


@pytest.mark.parametrize("name", ["v1-patched-0.14.log", "guide-iso-markers.log"])
def test_rotation_overlap_of_stats_and_markers(tmp_path, name):
    src = (FIXTURES / "golden" / name).read_text().splitlines()
    cut = len(src) // 2
    write_lines(tmp_path / "vllm.log.1", src[: cut + 6])
    write_lines(tmp_path / "vllm.log", src[cut:])
    overlapped = run([tmp_path])
    assert overlapped.events.height == run([FIXTURES / "golden" / name]).events.height
    assert any("repeated across rotated files" in w for w in overlapped.warnings)


def test_absurd_numbers_and_dates_found_by_the_fuzzer(tmp_path):
    """Values bench/fuzz found crashing (or, for the counter, exhausting memory): each is now
    a bad line, a null, or a bounded and reported count."""
    v0 = (
        "WARNING 05-02 14:03:{:02d} [scheduler.py:1775] Sequence group {} is preempted by PreemptionMode.SWAP "
        "mode because there is not enough KV cache space. total_num_cumulative_preemption={}"
    )
    write_lines(
        tmp_path / "vllm.log",
        [
            v0.format(11, "a", 1),
            v0.format(12, "b", 900_000_000_000),  # counter jump: was 9e11 events (killed by the OOM killer)
            "INFO 02-30 00:00:00 [scheduler.py:10] Req-feb30 PREEMPTED",  # no 30 February
            "0000-01-01T00:00:00Z block_table.extend(seq_id=7, 8 -> 12)",  # year 0
            "WARNING 05-02 14:03:13 [hook.py:5] [BATCH] Current variance: 1e400 (threshold=256)",  # inf
            "INFO 05-02 14:03:13 [loggers.py:1] Engine 000: Avg prompt throughput: 1.0 tokens/s, Avg generation "
            "throughput: 1.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 18446744073709551616.0%, "
            "Prefix cache hit rate: 0.0%",
            "INFO 05-02 14:03:14 [scheduler.py:10] Req-" + "\x1f" * 3 + "x PREEMPTED",
        ],
    )
    (tmp_path / "vllm.log").write_bytes(b"a\x1fb\x1fc\n" + (tmp_path / "vllm.log").read_bytes())  # 0x1F x2 in line 1
    write_lines(
        tmp_path / "kv.jsonl",
        ['[1e300, [["BlockStored", [1], null, [1], 16, null]]]', '[1796015438.1, [["BlockRemoved", [77], "GPU"]], 0]'],
    )
    write_lines(
        tmp_path / "bt.jsonl",
        [
            '{"type": "step", "ts": 1796015438.1, "step": 7, "num_free_blocks": 18446744073709551616}',
            '{"type": "step", "time": "0000-01-01T00:00:00Z", "step": 8, "num_free_blocks": 1}',
            '{"type": "step", "ts": 1e300, "step": 9, "num_free_blocks": 1}',
            '{"type": "step", "ts": 1796015438.2, "step": 10, "num_free_blocks": 3}',
        ],
    )
    write_lines(
        tmp_path / "metrics-1796015438.prom",
        [
            "# TYPE vllm:num_preemptions_total counter",
            'vllm:num_preemptions_total{engine="0"} NaN 1796015400000',
            'vllm:num_preemptions_total{engine="0"} 3 1796015410000',
            'vllm:num_preemptions_total{engine="0"} 1e300 1796015420000',
        ],
    )
    write_lines(
        tmp_path / "dmon.txt",
        [
            "#Date Time gpu fb sm",
            "#YYYYMMDD HH:MM:SS Idx MB %",
            "20260502 14:03:12 0 1e309 -1e300",
            "20260502 14:03:13 0 1000 50",
        ],
    )
    (tmp_path / "metrics-2026-05-02T14:03:15+27:00.prom").write_text('vllm:num_requests_running{engine="0"} 1\n')
    r = run([tmp_path], rules=True)
    kinds = r.events.get_column("kind").to_list()
    assert kinds.count("reconstructed") == 100_000  # bounded, and said
    assert any("implausibly large" in w for w in r.warnings), r.warnings
    assert r.partial
    assert r.frames["kv_events"].height == 1
    assert r.frames["bt_steps"].get_column("step").to_list() == [10]
    assert "feb30" in r.events.get_column("request_id").to_list()
