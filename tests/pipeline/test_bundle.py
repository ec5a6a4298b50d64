"""Bundles: folders, rotated sets in chronological order, compression, sniffing by content."""

from __future__ import annotations

import gzip
import io
import shutil

import polars as pl
import pytest

from preemptlog import AnalyzeOptions, analyze
from preemptlog.errors import InputError
from preemptlog.pipeline.bundle import rotation_key

from ..conftest import FIXTURES, write_lines


@pytest.mark.parametrize(
    "names,expected",
    [
        (
            ["vllm.log", "vllm.log.1", "vllm.log.2.gz", "vllm.log.10"],
            ["vllm.log.10", "vllm.log.2.gz", "vllm.log.1", "vllm.log"],
        ),
        (
            ["vllm.log", "vllm.log-20261129.gz", "vllm.log-20261128"],
            ["vllm.log-20261128", "vllm.log-20261129.gz", "vllm.log"],
        ),
    ],
)
def test_rotation_order(names, expected):
    assert sorted(names, key=lambda n: rotation_key(n)[1]) == expected
    assert len({rotation_key(n)[0] for n in names}) == 1


def _mixed_bundle(tmp_path):
    """The same V0 log cut in four parts, each stored differently."""
    src = (FIXTURES / "golden" / "v0-unbracketed-0.6.log").read_text().splitlines()
    parts = [src[0:5], src[5:10], src[10:13], src[13:]]
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    # oldest: gzip-compressed, rotated .3
    with gzip.open(bundle / "vllm.log.3.gz", "wt") as fh:
        fh.write("\n".join(parts[0]) + "\n")
    # docker compose prefix + ANSI colour on every line
    write_lines(bundle / "vllm.log.2", [f"vllm-1  | \x1b[1;36m(APIServer pid=1)\x1b[0;0m {ln}" for ln in parts[1]])
    # CRLF line endings
    write_lines(bundle / "vllm.log.1", parts[2], newline="\r\n")
    write_lines(bundle / "vllm.log", parts[3])
    write_lines(bundle / "notes.txt", ["this bundle was collected by on-call"])
    (bundle / "core.bin").write_bytes(bytes(range(256)) * 4)
    plain = write_lines(tmp_path / "plain.log", src)
    return bundle, plain


def test_mixed_bundle_equals_plain_concatenation(tmp_path):
    bundle, plain = _mixed_bundle(tmp_path)
    cols = ["time", "kind", "request_id", "mode", "cumulative"]
    a = analyze([str(plain)], AnalyzeOptions(tz="UTC", year=2025))
    b = analyze([str(bundle)], AnalyzeOptions(tz="UTC", year=2025))
    assert a.events.height == 101
    assert a.events.select(cols).equals(b.events.select(cols))
    assert a.stats.select("time", "running", "waiting", "kv_usage").equals(
        b.stats.select("time", "running", "waiting", "kv_usage")
    )
    kinds = {f.display.split("/")[-1]: f.kind for f in b.bundle.files}
    assert kinds["notes.txt"] == "document" and kinds["core.bin"] == "binary"  # a note, not a log
    assert kinds["vllm.log.3.gz"] == "vllm-log"
    orders = {f.display.split("/")[-1]: f.order for f in b.bundle.files if f.stream >= 0}
    assert orders == {"vllm.log.3.gz": 0, "vllm.log.2": 1, "vllm.log.1": 2, "vllm.log": 3}


def test_files_given_in_any_order_are_read_chronologically(tmp_path):
    bundle, plain = _mixed_bundle(tmp_path)
    names = ["vllm.log", "vllm.log.1", "vllm.log.3.gz", "vllm.log.2"]
    b = analyze([str(bundle / n) for n in names], AnalyzeOptions(tz="UTC", year=2025))
    assert b.events.height == 101
    assert b.events.filter(pl.col("kind") == "logged").get_column("cumulative").to_list() == [1, 51, 101]


def test_zstd(tmp_path):
    # fixtures/compressed/v0-unbracketed-0.6.log.zst is the golden V0 log compressed with zstd.
    p = FIXTURES / "compressed" / "v0-unbracketed-0.6.log.zst"
    r = analyze([str(p)], AnalyzeOptions(tz="UTC", year=2025))
    assert r.bundle.files[0].compression == "zstd" and r.bundle.files[0].kind == "vllm-log"
    assert r.events.height == 101


def test_truncated_gzip_is_read_partially(tmp_path):
    raw = (FIXTURES / "golden" / "v0-unbracketed-0.6.log").read_bytes()
    data = gzip.compress(raw)
    p = tmp_path / "vllm.log.gz"
    p.write_bytes(data[: len(data) * 2 // 3])
    r = analyze([str(p)], AnalyzeOptions(tz="UTC", year=2025))
    assert r.partial
    assert any("damaged gzip" in w for w in r.warnings)
    assert r.requests.height >= 1  # the part before the damage was read


def test_stdin(tmp_path):
    raw = (FIXTURES / "golden" / "v0-unbracketed-0.6.log").read_bytes()
    r = analyze(["-"], AnalyzeOptions(tz="UTC", year=2025), stdin=io.BytesIO(raw))
    assert r.events.height == 101
    assert r.events.get_column("source").unique().to_list() == ["<stdin>"]


def test_stdin_gzip(tmp_path):
    raw = gzip.compress((FIXTURES / "golden" / "v0-unbracketed-0.6.log").read_bytes())
    r = analyze(["-"], AnalyzeOptions(tz="UTC", year=2025), stdin=io.BytesIO(raw))
    assert r.events.height == 101


def test_nothing_recognisable(tmp_path):
    write_lines(tmp_path / "a.txt", ["hello", "world"])
    with pytest.raises(InputError, match="nothing recognisable"):
        analyze([str(tmp_path)])


def test_missing_file():
    with pytest.raises(InputError, match="no such file"):
        analyze(["/nonexistent/vllm.log"])


def test_kind_override(tmp_path):
    p = write_lines(tmp_path / "weird.txt", ["Req-1 PREEMPTED"])
    r = analyze([str(p)], AnalyzeOptions(tz="UTC", kinds=[f"{p}=vllm-log"]))
    assert r.events.height == 1


def test_input_is_never_written(tmp_path):
    bundle, _ = _mixed_bundle(tmp_path)
    before = {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in bundle.rglob("*")}
    analyze([str(bundle)], AnalyzeOptions(tz="UTC", year=2025))
    after = {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in bundle.rglob("*")}
    assert before == after
    shutil.rmtree(bundle)
