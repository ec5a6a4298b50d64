"""Bundles as archives (archive.py): what is read, what is refused, and that nothing leaks out.

Every hostile archive is refused with one clear error (exit code 3), nothing
is written outside the run's private temporary folder, and that folder is
removed on every exit path.
"""

from __future__ import annotations

import gzip
import io
import os
import tarfile
import zipfile
from pathlib import Path

import pytest

from preemptlog import AnalyzeOptions, analyze
from preemptlog.errors import ExitCode, InputError, UsageError
from preemptlog.inputs.archive import ArchiveRefused, link_escapes, safe_name, unpack
from preemptlog.pipeline.bundle import Workspace

from ..conftest import FIXTURES

LOG = (FIXTURES / "golden" / "v0-unbracketed-0.6.log").read_bytes()  # 101 events


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """TMPDIR for the run: the workspace lives here, so leftovers are visible."""
    t = tmp_path / "tmpdir"
    t.mkdir()
    monkeypatch.setenv("TMPDIR", str(t))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(t))
    return t


def _tar(path: Path, members: list[tarfile.TarInfo | tuple[str, bytes]], mode: str = "w:gz") -> Path:
    with tarfile.open(path, mode) as tf:
        for m in members:
            if isinstance(m, tarfile.TarInfo):
                tf.addfile(m)
            else:
                name, data = m
                ti = tarfile.TarInfo(name)
                ti.size = len(data)
                tf.addfile(ti, io.BytesIO(data))
    return path


def _link(name: str, target: str, hard: bool = False) -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.type = tarfile.LNKTYPE if hard else tarfile.SYMTYPE
    ti.linkname = target
    return ti


def _run(path: Path):
    return analyze([str(path)], AnalyzeOptions(tz="UTC", year=2025, rules=False))


# ---------------------------------------------------------------- accepted


@pytest.mark.parametrize(
    "mode,ext", [("w:gz", ".tar.gz"), ("w:gz", ".tgz"), ("w", ".tar"), ("w:bz2", ".tar.bz2"), ("w:xz", ".tar.xz")]
)
def test_tar_bundles_are_read(tmp_path, mode, ext, private_tmp):
    p = _tar(tmp_path / f"b{ext}", [("incident/vllm.log", LOG), ("incident/notes.txt", b"hello\n")], mode)
    r = _run(p)
    assert r.events.height == 101
    assert {f.display for f in r.bundle.files} == {f"{p}!incident/vllm.log", f"{p}!incident/notes.txt"}
    assert list(private_tmp.iterdir()) == []  # the workspace is gone


def test_tar_zst_and_zip(tmp_path):
    zstandard = pytest.importorskip("zstandard")
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tf:
        ti = tarfile.TarInfo("vllm.log")
        ti.size = len(LOG)
        tf.addfile(ti, io.BytesIO(LOG))
    (tmp_path / "b.tar.zst").write_bytes(zstandard.ZstdCompressor().compress(raw.getvalue()))
    assert _run(tmp_path / "b.tar.zst").events.height == 101
    with zipfile.ZipFile(tmp_path / "b.zip", "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("x/vllm.log", LOG)
    assert _run(tmp_path / "b.zip").events.height == 101


def test_archive_made_with_dot_root_member(tmp_path):
    """`tar czf b.tgz -C dir .` stores a "./" folder member first: not an empty name to refuse."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "vllm.log").write_bytes(LOG)
    with tarfile.open(tmp_path / "b.tgz", "w:gz") as tf:
        tf.add(src, arcname=".")
    assert _run(tmp_path / "b.tgz").events.height == 101


def test_links_inside_the_archive_are_skipped_not_refused(tmp_path):
    p = _tar(
        tmp_path / "b.tgz",
        [("logs/vllm.log", LOG), _link("logs/current.log", "vllm.log"), _link("hard.log", "logs/vllm.log", hard=True)],
    )
    r = _run(p)
    assert r.events.height == 101
    assert [f.display.split("!")[1] for f in r.bundle.files] == ["logs/vllm.log"]


def test_file_named_like_an_archive_that_is_not_one_is_read_by_content(tmp_path):
    (tmp_path / "vllm.log.tar.gz").write_bytes(gzip.compress(LOG))  # a gzip of the log, misnamed
    (tmp_path / "plain.tar").write_bytes(LOG)
    assert _run(tmp_path / "vllm.log.tar.gz").events.height == 101
    assert _run(tmp_path / "plain.tar").events.height == 101


def test_truncated_archive_keeps_what_was_unpacked(tmp_path):
    big = b"INFO 05-09 00:49:33 api_server.py:1] filler\n" * 20000
    p = _tar(tmp_path / "b.tar", [("a/vllm.log", LOG), ("b/vllm.log", big)], mode="w")
    data = p.read_bytes()
    cut = tmp_path / "cut.tar"
    cut.write_bytes(data[: 1024 + len(LOG) + 512 + len(big) // 2])  # in the middle of the second member
    r = _run(cut)
    assert r.partial
    assert any("damaged" in w and "cut.tar" in w for w in r.warnings), r.warnings
    assert r.events.filter(r.events["source"] == f"{cut}!a/vllm.log").height == 101


def test_damaged_archive_before_any_member_is_an_error(tmp_path):
    (tmp_path / "b.zip").write_bytes(b"PK\x03\x04" + b"\x00" * 40)
    with pytest.raises(InputError, match="b.zip.*damaged"):
        _run(tmp_path / "b.zip")


# ---------------------------------------------------------------- refused


@pytest.mark.parametrize("name", ["../evil.log", "a/../../evil.log", "/etc/evil.log", "C:\\evil.log", "..\\evil.log"])
def test_member_paths_that_leave_the_folder_are_refused(tmp_path, name, private_tmp):
    p = _tar(tmp_path / "b.tgz", [("ok/vllm.log", LOG), (name, b"pwned\n")])
    with pytest.raises(ArchiveRefused, match=r"b\.tgz: member .* archive refused"):
        _run(p)
    assert not (tmp_path / "evil.log").exists() and not Path("/etc/evil.log").exists()
    assert list(private_tmp.iterdir()) == []


def test_dotdot_member_in_a_zip_is_refused(tmp_path, private_tmp):
    with zipfile.ZipFile(tmp_path / "b.zip", "w") as zf:
        zf.writestr("vllm.log", LOG)
        zf.writestr("../evil.log", b"pwned\n")
    with pytest.raises(ArchiveRefused, match="climbs out"):
        _run(tmp_path / "b.zip")
    assert not (tmp_path / "evil.log").exists()
    assert list(private_tmp.iterdir()) == []


@pytest.mark.parametrize("target", ["/etc", "/etc/passwd", "../../etc/passwd", "../outside"])
def test_symlink_leaving_the_archive_is_refused_and_never_followed(tmp_path, target, private_tmp):
    # A link to /etc followed by a member *through* it: the classic way to write outside.
    p = _tar(tmp_path / "b.tgz", [_link("etc", target), ("etc/passwd", b"pwned\n"), ("vllm.log", LOG)])
    before = Path("/etc/passwd").stat().st_mtime_ns
    with pytest.raises(ArchiveRefused, match=r"is a link to .* outside the archive; archive refused"):
        _run(p)
    assert Path("/etc/passwd").stat().st_mtime_ns == before
    assert list(private_tmp.iterdir()) == []


def test_hard_link_leaving_the_archive_is_refused(tmp_path):
    p = _tar(tmp_path / "b.tgz", [_link("passwd", "/etc/passwd", hard=True)])
    with pytest.raises(ArchiveRefused, match="outside the archive"):
        _run(p)


def test_symlink_in_a_zip_is_refused(tmp_path):
    info = zipfile.ZipInfo("etc")
    info.external_attr = 0o120777 << 16
    with zipfile.ZipFile(tmp_path / "b.zip", "w") as zf:
        zf.writestr(info, "/etc")
        zf.writestr("vllm.log", LOG)
    with pytest.raises(ArchiveRefused, match="link to '/etc'"):
        _run(tmp_path / "b.zip")


def _bomb_tgz(path: Path, size: int) -> Path:
    """A tar.gz of one member of zeros: about 1000:1."""
    with gzip.open(path, "wb", compresslevel=9) as gz:
        with tarfile.open(fileobj=gz, mode="w") as tf:
            ti = tarfile.TarInfo("vllm.log")
            ti.size = size

            class Zeros(io.RawIOBase):
                left = size

                def readable(self):
                    return True

                def readinto(self, b):
                    n = min(len(b), self.left)
                    b[:n] = bytes(n)
                    self.left -= n
                    return n

            tf.addfile(ti, io.BufferedReader(Zeros()))
    return path


def test_decompression_bomb_is_refused_while_copying(tmp_path, private_tmp):
    p = _bomb_tgz(tmp_path / "bomb.tar.gz", 256 * 1024**2)
    assert p.stat().st_size * 900 < 256 * 1024**2  # at least 900:1
    with pytest.raises(ArchiveRefused, match="decompression bomb"):
        _run(p)
    assert list(private_tmp.iterdir()) == []  # the partial copy went with the workspace


def test_zip_bomb_is_refused(tmp_path):
    with zipfile.ZipFile(tmp_path / "bomb.zip", "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("vllm.log", bytes(64 * 1024**2))
    with pytest.raises(ArchiveRefused, match="decompression bomb"):
        _run(tmp_path / "bomb.zip")


def test_limits_come_from_the_environment(tmp_path, monkeypatch):
    p = _tar(tmp_path / "b.tgz", [(f"f{i}.log", b"x\n") for i in range(12)] + [("vllm.log", LOG)])
    monkeypatch.setenv("PREEMPTLOG_ARCHIVE_MAX_MEMBERS", "10")
    with pytest.raises(ArchiveRefused, match="more than 10 members") as e:
        _run(p)
    assert "PREEMPTLOG_ARCHIVE_MAX_MEMBERS" in e.value.one_line()
    monkeypatch.setenv("PREEMPTLOG_ARCHIVE_MAX_MEMBERS", "100")
    monkeypatch.setenv("PREEMPTLOG_ARCHIVE_MAX_BYTES", "1K")
    with pytest.raises(ArchiveRefused, match="more than 1.0 KiB"):
        _run(p)
    monkeypatch.setenv("PREEMPTLOG_ARCHIVE_MAX_BYTES", "lots")
    with pytest.raises(UsageError, match="PREEMPTLOG_ARCHIVE_MAX_BYTES"):
        _run(p)
    monkeypatch.delenv("PREEMPTLOG_ARCHIVE_MAX_BYTES")
    b = _bomb_tgz(tmp_path / "bomb.tgz", 32 * 1024**2)
    monkeypatch.setenv("PREEMPTLOG_ARCHIVE_MAX_RATIO", "100000")
    with pytest.raises(InputError, match="nothing recognisable"):  # trusted: unpacked, then read (only NULs)
        _run(b)


def test_refusal_through_the_cli_is_one_line_exit_3(tmp_path):
    from typer.testing import CliRunner

    from preemptlog.cli import app

    p = _tar(tmp_path / "b.tgz", [_link("etc", "/etc"), ("vllm.log", LOG)])
    res = CliRunner().invoke(app, ["analyze", str(p)])
    assert res.exit_code == ExitCode.INPUT
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("preemptlog: error: ") and "archive refused" in lines[0]


# ---------------------------------------------------------------- the temporary folder


def test_workspace_removed_on_error_and_on_ctrl_c(tmp_path, private_tmp, monkeypatch):
    p = _tar(tmp_path / "b.tgz", [("vllm.log", LOG)])
    import preemptlog.pipeline as analysis_mod

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(analysis_mod, "resolve", boom)
    with pytest.raises(KeyboardInterrupt):
        _run(p)
    assert list(private_tmp.iterdir()) == []

    def fail(*a, **k):
        raise RuntimeError("bug")

    monkeypatch.setattr(analysis_mod, "resolve", fail)
    with pytest.raises(RuntimeError):
        _run(p)
    assert list(private_tmp.iterdir()) == []


def test_nothing_is_written_outside_the_unpack_folder(tmp_path):
    p = _tar(tmp_path / "b.tgz", [("a/b/c/vllm.log", LOG), ("a/x.txt", b"x")])
    before = sorted(os.listdir(tmp_path))
    with Workspace() as ws:
        root = unpack(p, ws)
        assert root.parent == ws.path
        files = sorted(str(q.relative_to(root)) for q in root.rglob("*") if q.is_file())
        assert files == ["a/b/c/vllm.log", "a/x.txt"]
        assert (os.stat(ws.path).st_mode & 0o777) == 0o700
    assert sorted(os.listdir(tmp_path)) == before


# ---------------------------------------------------------------- the name checks themselves


@pytest.mark.parametrize(
    "name,ok",
    [("a/b.log", "a/b.log"), ("./a//b.log", "a/b.log"), ("./", None), (".", None), ("a\\b.log", "a/b.log")],
)
def test_safe_name(name, ok):
    assert safe_name("x", name) == ok


@pytest.mark.parametrize("name", ["/a", "../a", "a/../../b", "C:/a", "a/..", "a\x00b"])
def test_safe_name_refuses(name):
    with pytest.raises(ArchiveRefused):
        safe_name("x", name)


@pytest.mark.parametrize(
    "member,target,escapes",
    [
        ("a/l", "b", False),
        ("a/l", "../b", False),
        ("a/l", "../../b", True),
        ("l", "/etc", True),
        ("l", "", True),
        ("a/b/l", "../../x", False),
        ("l", "C:\\x", True),
    ],
)
def test_link_escapes(member, target, escapes):
    assert link_escapes(member, target) is escapes
