"""A copy is a copy of what is read, not only of the bytes on disk (sources/copies.py): ``vllm.log``
beside ``vllm.log.gz`` (or under ``backup/``, or inside a .tar.gz or a .zip as ``vllm.log.gz``), a
``.zst`` of it, a UTF-16 or byte-order-marked save of the same text, is one file found twice, read once.
And a copy that is not read says nothing of its own: its damage (a hole of NULs, a cut last line) is
the file read's, said once.

Before: the damage warnings came once per copy ("b/vllm.log: 20 NUL byte(s) skipped ..." and again
"b/backup/vllm.log: 20 NUL byte(s) skipped ..."); a gzip'd or re-encoded copy was a second server ("Not
one incident: 2 logs of different servers ...") or, beside the log in its folder, a rotated part whose
lines all repeat ("6 line(s) repeated across rotated files ... were read once").

The bundles are written here: stock V1 log lines (tests/support/stock_v1.py), and a real log of the
corpus (../shared/corpus, skipped when absent) read where it is.
"""

from __future__ import annotations

import gzip
import io
import json
import tarfile
import zipfile
from pathlib import Path

import pytest
import zstandard

from preemptlog import AnalyzeOptions, analyze
from preemptlog.sources import copies

from ..conftest import run_cli
from ..support.stock_v1 import V1_LOG
from .test_copies_read_once import _records

LOG = (V1_LOG + "\n").encode()


def _cli(root: Path, *more: str) -> tuple[int, dict]:
    p = run_cli("analyze", str(root), "--tz", "UTC", "-f", "json", *more)
    assert "Traceback" not in p.stderr, p.stderr
    return p.returncode, json.loads(p.stdout)["summary"]


def _said(s: dict) -> list[str]:
    return [w for w in s["warnings"] if "read once" in w and "also found as" in w]


def _logs(s: dict) -> list[str]:
    return [i["file"] for i in s["inputs"] if i["kind"] == "vllm-log"]


# ---------------------------------------------------------------- damage of a copy, said once


def _damaged() -> bytes:
    """The stock log with a hole of 20 NULs (logrotate copytruncate), bytes that are not UTF-8 in a
    line, and a last line cut in the middle."""
    lines = V1_LOG.split("\n")
    return (
        ("\n".join(lines[:3]) + "\n").encode()
        + b"\x00" * 20
        + b"(APIServer pid=100) INFO 12-02 10:00:15 [logger.py:40] odd \xff\xfe \xc3\x28 bytes\n"
        + ("\n".join(lines[3:]) + "\n").encode()
        + b"(APIServer pid=100) INFO 12-02 10:00:45 [loggers.py:208] Engine 000: Avg prompt thr"
    )


HOLE = "20 NUL byte(s) skipped (a hole, as logrotate copytruncate leaves); the text around them was read"
CUT = "ends in the middle of a line (truncated, or still being written): its last line was read as is"

# (where the copy is written, how: its bytes as they are, or gzip'd (the same content once decompressed))
DAMAGED_COPIES = [
    ("backup/vllm.log", "bytes"),
    ("vllm.log.bak", "bytes"),  # in the same folder, sorting after vllm.log
    ("backup/old/vllm.log", "bytes"),
    ("backup/vllm.log.gz", "gzip"),
]


@pytest.mark.parametrize(("copy", "how"), DAMAGED_COPIES, ids=[c for c, _ in DAMAGED_COPIES])
def test_cli_the_damage_of_a_copy_read_once_is_said_once_of_the_file_read(tmp_path, copy, how):
    b = tmp_path / "b"
    (b / copy).parent.mkdir(parents=True, exist_ok=True)
    (b / "vllm.log").write_bytes(_damaged())
    (b / copy).write_bytes(gzip.compress(_damaged()) if how == "gzip" else _damaged())
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "vllm.log").write_bytes(_damaged())
    rc0, s0 = _cli(alone)
    rc, s = _cli(b)
    assert rc == rc0 == 5  # the damage makes the run partial, once or twice alike
    assert s0["warnings"] == [f"alone/vllm.log: {CUT}", f"alone/vllm.log: {HOLE}"]
    damage = [w for w in s["warnings"] if w not in _said(s)]
    assert damage == [f"b/vllm.log: {CUT}", f"b/vllm.log: {HOLE}"], s["warnings"]
    assert len(_said(s)) == 1 and _said(s)[0].startswith(f"b/vllm.log: also found as b/{copy} ")
    assert _logs(s) == ["b/vllm.log"]
    assert s["headline"] == s0["headline"]


def test_cli_records_with_a_hole_saved_twice_say_it_once(tmp_path):
    """Another kind: block-table records with a NUL hole, saved again under another name."""
    rows = [ln.encode() + b"\n" for ln in _records().splitlines()]  # 2026-12-02 10:00:15 ...
    data = rows[0] + b"\x00" * 8 + b"".join(rows[1:])
    b = tmp_path / "b"
    b.mkdir()
    (b / "vllm.log").write_text(V1_LOG + "\n")
    (b / "preempt-200.jsonl").write_bytes(data)
    (b / "saved.jsonl").write_bytes(data)
    _, s = _cli(b)
    holes = [w for w in s["warnings"] if "NUL byte(s) skipped" in w]
    assert len(holes) == 1 and holes[0].startswith("b/preempt-200.jsonl: 8 NUL byte(s)"), s["warnings"]
    assert _said(s) == ["b/preempt-200.jsonl: also found as b/saved.jsonl (the same bytes): read once"]


# ---------------------------------------------------------------- copies of what is read


def _zst(data: bytes) -> bytes:
    return zstandard.ZstdCompressor().compress(data)  # as `zstd FILE`: the frame holds its content size


def _tar_gz(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _zip(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return buf.getvalue()


# (the copy's name in the bundle, its bytes, the name its log is found as, the words of the warning)
AS_READ = [
    ("vllm.log.gz", gzip.compress(LOG), "b/vllm.log.gz", "the same bytes once decompressed"),
    ("backup/vllm.log.gz", gzip.compress(LOG), "b/backup/vllm.log.gz", "the same bytes once decompressed"),
    ("backup/vllm.log.zst", _zst(LOG), "b/backup/vllm.log.zst", "the same bytes once decompressed"),
    (
        "incident.tar.gz",
        _tar_gz({"logs/vllm.log.gz": gzip.compress(LOG)}),
        "b/incident.tar.gz!logs/vllm.log.gz",
        "the same bytes once decompressed",
    ),
    ("a.zip", _zip({"node/vllm.log.zst": _zst(LOG)}), "b/a.zip!node/vllm.log.zst", "the same bytes once decompressed"),
    (
        "vllm-utf16.log",
        b"\xff\xfe" + LOG.decode().encode("utf-16-le"),
        "b/vllm-utf16.log",
        "the same text once decoded",
    ),
    ("vllm-be.log", LOG.decode().encode("utf-16-be"), "b/vllm-be.log", "the same text once decoded"),  # no BOM
    ("notepad.log", b"\xef\xbb\xbf" + LOG, "b/notepad.log", "the same text once decoded"),
    (
        "backup/notepad.log.gz",
        gzip.compress(b"\xef\xbb\xbf" + LOG),
        "b/backup/notepad.log.gz",
        "the same text once decoded",
    ),
]


def _alone_and_with_copy(tmp_path: Path, log: bytes, name: str, copy: bytes) -> tuple[Path, Path]:
    """``alone/vllm.log``, and ``b/`` holding the same log and ``copy`` as ``b/NAME``."""
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "vllm.log").write_bytes(log)
    b = tmp_path / "b"
    (b / name).parent.mkdir(parents=True, exist_ok=True)
    (b / "vllm.log").write_bytes(log)
    (b / name).write_bytes(copy)
    return alone, b


@pytest.mark.parametrize(("name", "data", "found", "words"), AS_READ, ids=[a[0] for a in AS_READ])
def test_cli_a_compressed_or_reencoded_copy_of_the_log_is_read_once(tmp_path, name, data, found, words):
    alone, b = _alone_and_with_copy(tmp_path, LOG, name, data)
    rc0, s0 = _cli(alone)
    rc, s = _cli(b)
    assert rc == rc0
    assert not s["headline"].startswith("Not one incident"), s["headline"]
    assert s["headline"] == s0["headline"]
    assert s["events"] == s0["events"]
    # the plain file is the one read (the compiled pass; its last line and NULs judged whole)
    assert _logs(s) == ["b/vllm.log"]
    assert _said(s) == [f"b/vllm.log: also found as {found} ({words}): read once"]
    assert not [w for w in s["warnings"] if "repeated across rotated files" in w], s["warnings"]
    assert not [w for w in s["warnings"] if "read through" in w], s["warnings"]  # the copy's reading is not said


def test_cli_a_real_log_gzipped_into_backup_is_one_server(tmp_path, corpus):
    src = corpus / "vllm-v0110-l4-kvfull-waiting-ansi.log"
    if not src.is_file():
        pytest.skip(f"{src.name} not in the corpus")
    b = tmp_path / "b"
    (b / "backup").mkdir(parents=True)
    (b / "backup" / "vllm.log.gz").write_bytes(gzip.compress(src.read_bytes()))
    rc0, s0 = _cli(src)
    rc, s = _cli(src, b)  # the log read where it is, beside the bundle holding its gzip'd copy
    assert rc == rc0
    assert s["headline"] == s0["headline"]
    assert s["events"] == s0["events"]
    assert _logs(s) == [str(src)]
    assert _said(s) == [f"{src}: also found as b/backup/vllm.log.gz (the same bytes once decompressed): read once"]


def _stats_log(seconds: range, pid: int = 100) -> bytes:
    return "".join(
        f"(APIServer pid={pid}) INFO 12-02 10:{s // 60:02d}:{s % 60:02d} [loggers.py:208] Engine 000: Avg prompt "
        f"throughput: 100.0 tokens/s, Avg generation throughput: 300.0 tokens/s, Running: 6 reqs, Waiting: 1 reqs, "
        f"GPU KV cache usage: 95.0%, Prefix cache hit rate: 0.0%\n"
        for s in seconds
    ).encode()


def test_cli_rotated_parts_stay_parts_and_a_gzipped_copy_of_one_is_read_once(tmp_path):
    """vllm.log.2.gz, vllm.log.1 and vllm.log are one rotated stream (their overlap read once, as
    before); vllm.log.1 gzip'd again under backup/ is a copy of that part, not a second server."""
    b = tmp_path / "b"
    (b / "backup").mkdir(parents=True)
    start = V1_LOG.split("\n")[:2]
    (b / "vllm.log.2.gz").write_bytes(gzip.compress(("\n".join(start) + "\n").encode() + _stats_log(range(0, 60, 10))))
    part1 = _stats_log(range(50, 120, 10))  # 10:00:50 repeats the last line of .2.gz: the overlap
    (b / "vllm.log.1").write_bytes(part1)
    (b / "vllm.log").write_bytes(_stats_log(range(120, 180, 10)))
    (b / "backup" / "vllm.log.1.gz").write_bytes(gzip.compress(part1))
    _, s = _cli(b)
    assert sorted(_logs(s)) == ["b/vllm.log", "b/vllm.log.1", "b/vllm.log.2.gz"]
    assert len({i["stream"] for i in s["inputs"] if i["kind"] == "vllm-log"}) == 1
    assert (
        "1 line(s) repeated across rotated files (an overlap, e.g. logrotate copytruncate) were read once"
        in (s["warnings"])
    )
    assert _said(s) == [
        "b/vllm.log.1: also found as b/backup/vllm.log.1.gz (the same bytes once decompressed): read once"
    ]
    assert not s["headline"].startswith("Not one incident"), s["headline"]


def _analyze_hashing(b: Path, monkeypatch: pytest.MonkeyPatch) -> tuple:
    """The analysis of ``b`` and the files copies.py hashed whole to compare them."""
    hashed: list[str] = []
    real = copies._digest

    def spy(f):
        hashed.append(f.display)
        return real(f)

    monkeypatch.setattr(copies, "_digest", spy)
    return analyze([str(b)], AnalyzeOptions(tz="UTC")), hashed


def test_only_files_whose_content_sizes_match_are_decompressed(tmp_path, monkeypatch):
    """The sizes first (a plain file's, gzip's ISIZE trailer, a zstd frame's content size): a .gz whose
    content is another size than every other log's is never decompressed to be compared. A .gz cut
    short whose trailer claims the log's size is decompressed, and holds less: no copy, both read."""
    b = tmp_path / "b"
    for d in ("other", "cut"):
        (b / d).mkdir(parents=True)
    (b / "vllm.log").write_bytes(LOG)
    (b / "vllm.log.gz").write_bytes(gzip.compress(LOG))
    (b / "other" / "vllm.log.gz").write_bytes(gzip.compress(LOG.replace(b"pid=100", b"pid=1000")))
    z = gzip.compress(LOG.replace(b"pid=100", b"pid=101"))
    (b / "cut" / "vllm.log.gz").write_bytes(z[: len(z) // 2] + z[-4:])  # the trailer kept: the sizes match
    r, hashed = _analyze_hashing(b, monkeypatch)
    assert sorted(hashed) == ["b/cut/vllm.log.gz", "b/vllm.log", "b/vllm.log.gz"]
    assert [f.display for f in r.bundle.files if f.kind == "vllm-log"] == [
        "b/vllm.log",
        "b/cut/vllm.log.gz",
        "b/other/vllm.log.gz",
    ]
    assert [w for w in r.warnings if "also found as" in w] == [
        "b/vllm.log: also found as b/vllm.log.gz (the same bytes once decompressed): read once"
    ]


def test_cli_a_part_of_a_rotated_set_is_read_rather_than_its_copy_elsewhere(tmp_path):
    """node1/ holds a rotated set (vllm.log.1.gz, vllm.log); the older part is also in the bundle
    decompressed, as a-prev.log (sorting first, plain). The set's part is the one read: the set stays
    one stream, and the answer is the bundle's without the copy (before: a-prev.log was read, and
    node1/vllm.log a stream of its own, its pressure span cut in two)."""
    start = ("\n".join(V1_LOG.split("\n")[:2]) + "\n").encode()
    older = start + _stats_log(range(0, 60, 10))
    answers = []
    for name, copy in (("alone", False), ("b", True)):
        root = tmp_path / name
        (root / "node1").mkdir(parents=True)
        (root / "node1" / "vllm.log.1.gz").write_bytes(gzip.compress(older))
        (root / "node1" / "vllm.log").write_bytes(_stats_log(range(60, 120, 10)))
        if copy:
            (root / "a-prev.log").write_bytes(older)
        p = run_cli("analyze", str(root), "--tz", "UTC")
        answers.append([ln.replace(f"{name}/", "") for ln in p.stderr.splitlines() + p.stdout.splitlines()])
        if copy:
            _, s = _cli(root)
            assert _said(s) == [
                "b/node1/vllm.log.1.gz: also found as b/a-prev.log (the same bytes once decompressed): read once"
            ]
            assert len({i["stream"] for i in s["inputs"] if i["kind"] == "vllm-log"}) == 1
    alone, b = answers
    assert [ln for ln in b if "also found as" not in ln and "once decompressed" not in ln] == alone


# ---------------------------------------------------------------- copies whose size is not stated

from ..support.two_servers import VLLM_V0  # noqa: E402

V0 = ("\n".join(VLLM_V0) + "\n").encode()  # 5 preemptions (the cumulative counter), 3 warning lines


def _zst_piped(data: bytes) -> bytes:
    """``cat vllm.log | zstd``: a frame that states no content size."""
    out = io.BytesIO()
    with zstandard.ZstdCompressor().stream_writer(out, closefd=False) as w:
        w.write(data)
    return out.getvalue()


def _gz_members(data: bytes, parts: int) -> bytes:
    """``cat a.gz b.gz ...`` of the data cut in ``parts`` (bgzip writes such files): the trailer holds the
    last member's size only."""
    lines = data.splitlines(keepends=True)
    cut = [lines[len(lines) * i // parts : len(lines) * (i + 1) // parts] for i in range(parts)]
    return b"".join(gzip.compress(b"".join(c)) for c in cut)


UNSIZED = [
    ("old/server.log.zst", _zst_piped, "the same bytes once decompressed"),
    ("backup/vllm.log.gz", lambda d: _gz_members(d, 2), "the same bytes once decompressed"),
    ("vllm-bgzip.log.gz", lambda d: _gz_members(d, 5), "the same bytes once decompressed"),
    ("a.zip", lambda d: _zip({"node/vllm.log.zst": _zst_piped(d)}), "the same bytes once decompressed"),
]


@pytest.mark.parametrize(("name", "make", "words"), UNSIZED, ids=[u[0] for u in UNSIZED])
def test_cli_a_copy_whose_size_is_not_stated_is_read_once(tmp_path, name, make, words):
    """A zstd stream written through a pipe states no content size and a gzip file of several members
    keeps its last member's: their sizes match nothing, and before they were read beside the log: "Not
    one incident: 2 logs of different servers" and 10 events for 5 (a real V0 log and its piped .zst
    under old/: "8502 preemptions" for 4251). Now their first 64 KiB decompressed are compared, then
    the whole: one copy, the log's own answer."""
    assert zstandard.get_frame_parameters(_zst_piped(V0)).content_size == zstandard.CONTENTSIZE_UNKNOWN
    alone, b = _alone_and_with_copy(tmp_path, V0, name, make(V0))
    rc0, s0 = _cli(alone)
    rc, s = _cli(b)
    assert s0["headline"].startswith("at least 5 preemptions"), s0["headline"]
    assert (rc, s["headline"], s["events"]) == (rc0, s0["headline"], s0["events"])
    assert _logs(s) == ["b/vllm.log"]
    found = f"b/{name}!node/vllm.log.zst" if name.endswith(".zip") else f"b/{name}"
    assert _said(s) == [f"b/vllm.log: also found as {found} ({words}): read once"]


def test_a_compressed_file_whose_size_matches_nothing_is_read_whole_only_when_its_head_matches(tmp_path, monkeypatch):
    """The head comparison costs the first 64 KiB of each file of the kind; a rotated part and another
    server's log, gzip'd with sizes that match nothing, are compared by their heads and never hashed
    whole; a log that starts as the copy does but goes on (the same head, not the same content) is
    hashed, and both are read."""
    stats = [ln for ln in VLLM_V0 if "Avg prompt throughput" in ln][-1]
    big = V0 + (stats + "\n").encode() * (2 * copies.HEAD // len(stats))  # longer than the head
    b = tmp_path / "b"
    (b / "node2").mkdir(parents=True)
    (b / "vllm.log").write_bytes(big)
    (b / "vllm.log.1.gz").write_bytes(gzip.compress(V0[: len(V0) // 2]))
    (b / "node2" / "vllm.log.gz").write_bytes(_gz_members(big.replace(b"09:1", b"10:1"), 2))
    (b / "longer.log.zst").write_bytes(_zst_piped(big + (stats + "\n").encode()))
    r, hashed = _analyze_hashing(b, monkeypatch)
    assert sorted(hashed) == ["b/longer.log.zst", "b/vllm.log"]
    assert not [w for w in r.warnings if "also found as" in w]
