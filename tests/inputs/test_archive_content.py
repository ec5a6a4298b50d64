"""Archives known by their content, wherever they are (archive.content_kind, walk.expand_archives).

A tar (plain or gzip/bz2/xz/zstd compressed) or a zip is unpacked whatever its name: given on the
command line, piped to standard input, found in a folder or inside another archive (3 levels at
most, one budget for the whole tree). A gzip'd log stays a log. A zip's damaged member is skipped
with a warning and its other members are read (exit 5). Every archive here is built by hand.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from preemptlog import AnalyzeOptions, analyze
from preemptlog.errors import ExitCode
from preemptlog.inputs.archive import ArchiveRefused, content_kind

from ..conftest import FIXTURES

PY = [sys.executable, "-m", "preemptlog"]
MARK = "INFO 05-04 05:{:02d}:{:02d} [scheduler.py:10] Req-{} PREEMPTED"


def marks(tag: str, n: int) -> bytes:
    """n preemption marker lines (one event each), request ids unique to ``tag``."""
    return "".join(MARK.format(i // 60, i % 60, f"{tag}{i}") + "\n" for i in range(n)).encode()


def tar_bytes(members: dict[str, bytes], mode: str = "w:gz") -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode=mode) as tf:
        for name, data in members.items():
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
    return raw.getvalue()


def zip_bytes(members: dict[str, bytes], method: int = zipfile.ZIP_DEFLATED) -> bytes:
    raw = io.BytesIO()
    with zipfile.ZipFile(raw, "w", method) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return raw.getvalue()


def cli(args: list[str], cwd: Path, stdin: bytes | None = None) -> tuple[int, dict | None, str]:
    """``preemptlog analyze ARGS -f json`` as a real process: (exit code, summary or None, stderr)."""
    env = dict(os.environ, NO_COLOR="1", TMPDIR=str(cwd))
    p = subprocess.run(
        [*PY, "analyze", *args, "-f", "json", "--tz", "UTC", "--year", "2026"],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        env=env,
        timeout=120,
    )
    err = p.stderr.decode("utf-8", "replace")
    assert "Traceback" not in err, err
    summary = json.loads(p.stdout)["summary"] if p.stdout.strip() else None
    return p.returncode, summary, err


def inputs(summary: dict) -> dict[str, str]:
    return {f["file"]: f["kind"] for f in summary["inputs"]}


def no_leftovers(tmp: Path) -> None:
    assert not [p for p in tmp.iterdir() if p.name.startswith("preemptlog-")]  # the workspace went


# ---------------------------------------------------------------- by content, whatever the name


def test_renamed_tar_gz_on_the_command_line_and_on_stdin_is_unpacked(tmp_path):
    """A .tar.gz renamed incident.log was read as one gzip'd text (the tar stream, NULs and all)."""
    metrics = (FIXTURES / "prometheus" / "shapes" / "gauges-only-no-counter.prom").read_bytes()
    data = tar_bytes({"vllm.log": marks("a", 7), "metrics.prom": metrics})
    (tmp_path / "incident.log").write_bytes(data)
    rc, s, err = cli(["incident.log"], tmp_path)
    assert rc == ExitCode.OK, err
    # the only warning: the scrapes (another day's) do not meet the log in time (sources/meets.py)
    assert s["events"] == 7 and [w.split(":", 1)[0] for w in s["warnings"]] == ["incident.log!metrics.prom"]
    assert "do not meet the vLLM log in time" in s["warnings"][0]
    assert inputs(s) == {"incident.log!vllm.log": "vllm-log", "incident.log!metrics.prom": "prometheus"}
    rc, s, err = cli(["-"], tmp_path, stdin=data)
    assert rc == ExitCode.OK, err
    assert s["events"] == 7 and set(inputs(s)) == {"<stdin>!vllm.log", "<stdin>!metrics.prom"}
    no_leftovers(tmp_path)


def test_archives_in_a_folder_are_unpacked_and_a_gzipped_log_stays_a_log(tmp_path):
    """In a folder: a .tar.gz (was read as text), a .zip (was skipped as binary), a tar.bz2 and a
    tar.xz with no archive name; a gzip'd rotated log is still a log."""
    b = tmp_path / "bundle"
    b.mkdir()
    (b / "a.tar.gz").write_bytes(tar_bytes({"x/vllm.log": marks("a", 3)}))
    (b / "b.zip").write_bytes(zip_bytes({"y/vllm.log": marks("b", 5)}))
    (b / "c.bin").write_bytes(tar_bytes({"vllm.log": marks("c", 2)}, "w:bz2"))
    (b / "d").write_bytes(tar_bytes({"vllm.log": marks("d", 4)}, "w:xz"))
    (b / "vllm.log.1.gz").write_bytes(gzip.compress(marks("e", 6)))
    rc, s, err = cli(["bundle"], tmp_path)
    assert rc == ExitCode.OK, err
    assert s["events"] == 3 + 5 + 2 + 4 + 6
    assert inputs(s) == {
        "bundle/a.tar.gz!x/vllm.log": "vllm-log",
        "bundle/b.zip!y/vllm.log": "vllm-log",
        "bundle/c.bin!vllm.log": "vllm-log",
        "bundle/d!vllm.log": "vllm-log",
        "bundle/vllm.log.1.gz": "vllm-log",
    }
    assert next(f for f in s["inputs"] if f["file"] == "bundle/vllm.log.1.gz")["compression"] == "gzip"


def test_archive_inside_an_archive_inside_an_archive(tmp_path):
    inner = tar_bytes({"x/vllm.log": marks("a", 4)})
    mid = zip_bytes({"deep/inner.tar.gz": inner, "vllm.log": marks("b", 2)}, zipfile.ZIP_STORED)
    (tmp_path / "outer.tgz").write_bytes(tar_bytes({"mid.zip": mid}))
    rc, s, err = cli(["outer.tgz"], tmp_path)
    assert rc == ExitCode.OK, err
    assert s["events"] == 6
    assert set(inputs(s)) == {"outer.tgz!mid.zip!deep/inner.tar.gz!x/vllm.log", "outer.tgz!mid.zip!vllm.log"}


def test_archives_nested_deeper_than_three_levels_are_skipped_with_a_warning(tmp_path):
    data = tar_bytes({"vllm.log": marks("a", 1)})
    for level in range(4):  # deep.tgz > l3.tgz > l2.tgz > l1.tgz > l0.tgz > vllm.log, a marker beside each
        data = tar_bytes({f"l{level}.tgz": data, f"l{level}.log": marks(f"l{level}-", 1)})
    (tmp_path / "deep.tgz").write_bytes(data)
    rc, s, err = cli(["deep.tgz"], tmp_path)
    assert rc == ExitCode.PARTIAL, err
    assert s["events"] == 3  # l3.log, l2.log, l1.log: three archives unpacked
    skipped = [f for f in s["inputs"] if f["kind"] == "unreadable"]
    assert [f["file"] for f in skipped] == ["deep.tgz!l3.tgz!l2.tgz!l1.tgz"]  # inside three archives
    assert "not unpacked" in skipped[0]["warnings"][0]


def test_the_same_archive_reached_twice_is_read_once(tmp_path):
    (tmp_path / "b.tgz").write_bytes(tar_bytes({"vllm.log": marks("a", 3)}))
    r = analyze([str(tmp_path / "b.tgz"), str(tmp_path / "b.tgz")], AnalyzeOptions(tz="UTC", year=2026, rules=False))
    assert r.events.height == 3 and len(r.bundle.files) == 1 and not r.partial


# ---------------------------------------------------------------- damage: one line, the file named


def _zip_with_damaged_first_member(path: Path) -> Path:
    log = (FIXTURES / "golden" / "v0-unbracketed-0.6.log").read_bytes()
    dmon = (FIXTURES / "sources" / "dmon-T-2gpu-midnight.txt").read_bytes()
    metrics = (FIXTURES / "prometheus" / "shapes" / "gauges-only-no-counter.prom").read_bytes()
    path.write_bytes(
        zip_bytes({"vllm.log": log, "dmon.txt": dmon, "metrics.prom": metrics, "server2/vllm.log": marks("z", 3)})
    )
    with zipfile.ZipFile(path) as zf:
        first = zf.infolist()[0]
        assert first.header_offset + 30 + len(first.filename) < 200 and first.compress_size > 400
    data = bytearray(path.read_bytes())
    data[200:400] = b"A" * 200  # inside the first member's compressed data
    path.write_bytes(bytes(data))
    return path


def test_zip_with_a_damaged_first_member_keeps_the_others_exit_5(tmp_path):
    _zip_with_damaged_first_member(tmp_path / "b.zip")
    rc, s, err = cli(["b.zip"], tmp_path)
    assert rc == ExitCode.PARTIAL, err
    assert s["events"] == 3
    assert inputs(s) == {
        "b.zip!dmon.txt": "dmon",
        "b.zip!metrics.prom": "prometheus",
        "b.zip!server2/vllm.log": "vllm-log",
    }
    (w,) = [w for w in s["warnings"] if "damaged" in w]
    assert w.startswith("b.zip: member 'vllm.log' is damaged (") and "skipped" in w and "\n" not in w
    no_leftovers(tmp_path)


def test_damaged_archives_in_a_folder_are_skipped_one_line_each(tmp_path):
    b = tmp_path / "bundle"
    b.mkdir()
    (b / "vllm.log").write_bytes(marks("a", 2))
    (b / "cut.zip").write_bytes(zip_bytes({"vllm.log": marks("b", 50)})[:60])  # no central directory
    _zip_with_damaged_first_member(b / "part.zip")
    (b / "renamed.dat").write_bytes(tar_bytes({"vllm.log": marks("c", 200)})[:600])  # a .tar.gz cut short
    rc, s, err = cli(["bundle"], tmp_path)
    assert rc == ExitCode.PARTIAL, err
    kinds = inputs(s)
    assert kinds["bundle/vllm.log"] == "vllm-log" and kinds["bundle/cut.zip"] == "unreadable"
    assert kinds["bundle/part.zip!server2/vllm.log"] == "vllm-log"
    assert kinds["bundle/renamed.dat"] == "unreadable"  # was read as a gzip'd text
    why = {f["file"]: f["warnings"] for f in s["inputs"] if f["kind"] == "unreadable"}
    assert why["bundle/cut.zip"] == ["damaged zip archive (no central directory: truncated?): skipped"]
    assert why["bundle/renamed.dat"][0].startswith("damaged or unsupported archive (Compressed file ended")
    assert all("\n" not in w for w in s["warnings"])


def test_damaged_renamed_archive_on_the_command_line_is_one_line_exit_3(tmp_path):
    (tmp_path / "incident.log").write_bytes(zip_bytes({"vllm.log": marks("a", 50)})[:60])
    rc, s, err = cli(["incident.log"], tmp_path)
    assert rc == ExitCode.INPUT and s is None
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("preemptlog: error: incident.log: damaged zip archive"), err
    no_leftovers(tmp_path)


# ---------------------------------------------------------------- budgets over the whole tree


def _bomb_tgz(size: int) -> bytes:
    """A tar.gz of one member of zeros: about 1000:1."""
    raw = io.BytesIO()
    with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9) as gz, tarfile.open(fileobj=gz, mode="w") as tf:
        ti = tarfile.TarInfo("vllm.log")
        ti.size = size
        chunk = bytes(1 << 20)

        class Zeros(io.RawIOBase):
            left = size

            def readable(self):
                return True

            def readinto(self, b):
                n = min(len(b), self.left, len(chunk))
                b[:n] = chunk[:n]
                self.left -= n
                return n

        tf.addfile(ti, io.BufferedReader(Zeros()))
    return raw.getvalue()


def test_nested_bomb_is_refused_one_line_exit_3(tmp_path):
    """A bomb inside a zip (was read as one gzip'd text of NULs)."""
    (tmp_path / "b.zip").write_bytes(
        zip_bytes({"logs/vllm.log": marks("a", 2), "logs/old.tgz": _bomb_tgz(32 << 20)}, zipfile.ZIP_STORED)
    )
    rc, s, err = cli(["b.zip"], tmp_path)
    assert rc == ExitCode.INPUT and s is None
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "b.zip!logs/old.tgz: unpacks to more than 200 times the size of b.zip" in lines[0]
    assert "decompression bomb" in lines[0] and "archive refused" in lines[0]
    no_leftovers(tmp_path)


def test_one_member_budget_covers_the_archives_inside(tmp_path, monkeypatch):
    """Each inner archive alone is within the limit; the tree is not."""
    inner = {f"i{k}.tar": tar_bytes({f"f{j}.log": marks(f"{k}-{j}-", 1) for j in range(4)}, "w") for k in range(3)}
    (tmp_path / "b.tgz").write_bytes(tar_bytes(inner))
    monkeypatch.setenv("PREEMPTLOG_ARCHIVE_MAX_MEMBERS", "10")
    with pytest.raises(ArchiveRefused, match=r"b\.tgz!i\d\.tar: more than 10 members \(with the archives around it\)"):
        analyze([str(tmp_path / "b.tgz")], AnalyzeOptions(tz="UTC", year=2026, rules=False))
    monkeypatch.setenv("PREEMPTLOG_ARCHIVE_MAX_MEMBERS", "20")
    assert analyze([str(tmp_path / "b.tgz")], AnalyzeOptions(tz="UTC", year=2026, rules=False)).events.height == 12


# ---------------------------------------------------------------- what content says archive


def test_content_kind(tmp_path):
    zstandard = pytest.importorskip("zstandard")
    plain_tar = tar_bytes({"vllm.log": b"x\n"}, "w")
    cases = {
        "zip": zip_bytes({"a": b"x"}),
        "tar": plain_tar,
        "tgz": tar_bytes({"vllm.log": b"x\n"}),
        "tbz": tar_bytes({"vllm.log": b"x\n"}, "w:bz2"),
        "txz": tar_bytes({"vllm.log": b"x\n"}, "w:xz"),
        "tzst": zstandard.ZstdCompressor().compress(plain_tar),
        "log.gz": gzip.compress(marks("a", 20)),
        "log": marks("a", 20),
        # "ustar" at offset 257 of a text, its checksum not adding up: a log, not a tar
        "mustard": (b"x" * 256 + b"mustard and more text\n") * 3,
        "empty": b"",
    }
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
    got = {name: content_kind(tmp_path / name) for name in cases}
    assert got == {
        "zip": "zip",
        "tar": "tar",
        "tgz": "tar",
        "tbz": "tar",
        "txz": "tar",
        "tzst": "tar",
        "log.gz": None,
        "log": None,
        "mustard": None,
        "empty": None,
    }
    os.mkfifo(tmp_path / "fifo")
    assert content_kind(tmp_path / "fifo") is None  # not opened for reading: never blocks


def test_a_document_that_is_a_zip_is_kept_whole(tmp_path):
    """A .docx / .xlsx / .jar in a bundle folder is a zip inside, but a document, not a bundle: it
    stays one (unrecognised) file rather than a list of XML members; a .zip beside it is unpacked."""
    b = tmp_path / "incident"
    b.mkdir()
    (b / "vllm.log").write_bytes(marks("a", 3))
    doc = zip_bytes({"[Content_Types].xml": b"<Types/>", "word/document.xml": b"<w:document/>"})
    (b / "postmortem.docx").write_bytes(doc)
    (b / "notes.xlsx").write_bytes(doc)
    (b / "more.zip").write_bytes(zip_bytes({"vllm.log": marks("b", 2)}))
    code, summary, err = cli([str(b)], tmp_path)
    assert code == 0, err
    assert summary is not None and summary["events"] == 5
    names = inputs(summary)
    assert not any("postmortem.docx!" in n or "notes.xlsx!" in n for n in names), names
    assert any(n.endswith("more.zip!vllm.log") for n in names), names
