"""A tar cut short (inputs/archive.py): a member cut inside its data keeps the bytes before the cut
(a tar has no checksum of its data: they are the member's own), plain or compressed; a cut inside a
member's header is said as damage, not taken for the end of the archive; a whole tar, and one that
ends on a member's boundary without its end-of-archive blocks, are no damage."""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

import pytest

from preemptlog.errors import ExitCode
from preemptlog.inputs.archive import unpack
from preemptlog.inputs.workspace import Workspace

from .test_archive_content import cli, marks

A = marks("a", 40)  # ~2 kB each
B = marks("b", 3000)  # ~150 kB: more than one salvage piece of a compressed tar


def _tar(members: dict[str, bytes]) -> tuple[bytes, dict[str, tarfile.TarInfo]]:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tf:
        for name, data in members.items():
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
    data = raw.getvalue()
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        infos = {m.name: m for m in tf.getmembers()}
    return data, infos


def _unpacked(path: Path) -> tuple[dict[str, bytes], list[str]]:
    ws = Workspace()
    try:
        warnings: list[str] = []
        root = unpack(path, ws, warnings)
        files = {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}
        return files, warnings
    finally:
        ws.close()


@pytest.mark.parametrize("keep", [100, 2000, len(B) - 1])
def test_a_member_cut_in_its_data_keeps_the_bytes_before_the_cut(tmp_path, keep):
    data, infos = _tar({"x/a.log": A, "x/b.log": B})
    cut = tmp_path / "cut.tar"
    cut.write_bytes(data[: infos["x/b.log"].offset_data + keep])
    files, warnings = _unpacked(cut)
    assert files["x/a.log"] == A
    assert files["x/b.log"] == B[:keep]  # before: empty, the short read lost it whole
    assert (
        len(warnings) == 1
        and "read the 1 member(s) unpacked before the damage and the start of the next one" in (warnings[0])
    )


def test_a_compressed_member_cut_in_its_data_keeps_what_decompresses(tmp_path):
    data, infos = _tar({"x/a.log": A, "x/b.log": B})
    packed = gzip.compress(data)
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(packed[: int(len(packed) * 0.9)])
    files, warnings = _unpacked(cut)
    assert files["x/a.log"] == A
    got = files["x/b.log"]
    assert got and B.startswith(got) and len(got) < len(B)
    assert len(warnings) == 1 and "the start of the next one" in warnings[0]


def test_a_cut_inside_a_header_is_damage_not_the_end(tmp_path):
    data, infos = _tar({"x/a.log": A, "x/b.log": B})
    cut = tmp_path / "cut.tar"
    cut.write_bytes(data[: infos["x/b.log"].offset + 100])
    files, warnings = _unpacked(cut)
    assert files == {"x/a.log": A}
    assert len(warnings) == 1
    assert "a member header is cut or unreadable" in warnings[0] and "the start of the next one" not in warnings[0]


def test_whole_tars_are_no_damage(tmp_path):
    data, infos = _tar({"x/a.log": A, "x/b.log": B})
    whole = tmp_path / "whole.tar"
    whole.write_bytes(data)
    assert _unpacked(whole) == ({"x/a.log": A, "x/b.log": B}, [])
    # no end-of-archive blocks, ending on a member's boundary (some writers): read whole, no warning
    end = infos["x/b.log"].offset_data + (len(B) + 511) // 512 * 512
    lax = tmp_path / "lax.tar"
    lax.write_bytes(data[:end])
    assert _unpacked(lax) == ({"x/a.log": A, "x/b.log": B}, [])


def test_the_cli_counts_what_a_cut_tar_still_holds(tmp_path):
    data, infos = _tar({"x/a.log": A, "x/b.log": B})
    keep = len(B) // 2
    cut = tmp_path / "cut.tar"
    cut.write_bytes(data[: infos["x/b.log"].offset_data + keep])
    code, summary, err = cli([str(cut)], tmp_path)
    assert code == ExitCode.PARTIAL, err
    assert summary is not None
    whole_lines = B[:keep].count(b"\n")
    cut_line = B[:keep].rsplit(b"\n", 1)[1]  # read as is: an event when the cut left its marker whole
    assert summary["events"] == 40 + whole_lines + (b"PREEMPTED" in cut_line)
    assert "cut.tar is damaged (unexpected end of data)" in " ".join(err.split())
