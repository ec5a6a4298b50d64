"""nvidia-smi dmon captures compressed (.gz, .zst): read exactly as the plain text.

Every output (frame, warnings, notes) of a compressed capture is the plain file's, its cut last
row included, and a damaged stream is said as before. (Decompressing once through a plain copy on
disk was tried: no faster, and a disk copy the size of the capture; the end is found by a second,
streamed decompression.)
"""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest
import zstandard

from preemptlog import AnalyzeOptions, analyze
from preemptlog.pipeline.bundle import InputFile
from preemptlog.sources import TimeContext, dmon

DT = "#Date       Time        gpu    fb   sm\n#YYYYMMDD   HH:MM:SS    Idx    MB    %\n"
DT_ROWS = "".join(f" 20260501   10:00:{i:02d}      {g}  {1000 + i + g}    {5 + g}\n" for i in range(4) for g in (0, 1))
PLAIN = "# gpu    sm   mem\n# Idx     %     %\n    0    45    20\n    1    46    21\n"
CSV = "#gpu, pwr, sm, fb\n#Idx, W, %, MB\n 0, 30, 5, 800\n 1, 31, 6, 900\n"

# (name, capture text): cut last rows, whole last rows without a line end, a bad value, CR LF, fences
CAPTURES = [
    ("dt-cut", DT + DT_ROWS + " 20260501   10:00:04      0  11"),
    ("dt-cut-repeated-header", DT + DT_ROWS + DT + DT_ROWS.replace(":0", ":1") + " 20260501   10:00:1"),
    ("plain-cut-value", PLAIN + "    0    45    N/"),
    ("csv-cut-trailing-comma", CSV + " 0, 32, 7,"),
    ("dt-whole-no-line-end", DT + DT_ROWS + " 20260501   10:00:04      0  1200    7"),
    ("csv-whole-no-line-end", CSV + " 0, 32, 7, 950"),
    ("plain-ends-with-line-end", PLAIN + "    0    47    22\n"),
    ("plain-bad-value-and-cut", PLAIN + "    0    4x    22\n    1    47    23\n    0    4"),
    ("crlf-cut", (DT + DT_ROWS).replace("\n", "\r\n") + " 20260501   10:00:04      0  11"),
    ("crlf-whole", (CSV + " 0, 32, 7, 950").replace("\n", "\r\n")),
    ("fenced", "```\n" + DT + DT_ROWS + "```"),
]


def _file(path: Path, display: str) -> InputFile:
    return InputFile(0, path, display, "dmon", None, path.stat().st_size, None, None)


def _compress(data: bytes, how: str) -> bytes:
    if how == "gzip":
        return gzip.compress(data, mtime=0)
    if how == "zstd":
        return zstandard.ZstdCompressor().compress(data)
    return data


def _resolve(path: Path):
    # the same display name for every wrapping: the outputs must be the same, word for word
    return dmon.DmonParsed([_file(path, "dmon.txt")]).resolve(TimeContext(tz="UTC"))


def _same(out):
    return (out.frames["dmon"].to_dicts(), out.warnings, out.notes, out.partial, out.counters["dmon"])


@pytest.mark.parametrize("name, text", CAPTURES, ids=[c[0] for c in CAPTURES])
@pytest.mark.parametrize("how", ["gzip", "zstd"])
def test_a_compressed_capture_reads_exactly_as_the_plain_one(tmp_path, name, text, how):
    plain = tmp_path / "dmon.txt"
    plain.write_bytes(text.encode())
    packed = tmp_path / ("dmon.txt.gz" if how == "gzip" else "dmon.txt.zst")
    packed.write_bytes(_compress(text.encode(), how))
    assert _same(_resolve(packed)) == _same(_resolve(plain))


def test_a_gz_capture_whose_last_row_is_cut_gets_the_plain_files_warning(tmp_path):
    text = DT + DT_ROWS + " 20260501   10:00:04      0  11"
    plain = tmp_path / "plain" / "dmon.txt"
    packed = tmp_path / "gz" / "dmon.txt"  # the same name: the warnings must be equal
    for p, data in ((plain, text.encode()), (packed, gzip.compress(text.encode(), mtime=0))):
        p.parent.mkdir()
        p.write_bytes(data)
    a, b = _resolve(plain), _resolve(packed)
    (w,) = b.warnings
    assert w.startswith("dmon.txt:11: the last dmon row is cut") and b.warnings == a.warnings
    assert b.partial and b.frames["dmon"].height == a.frames["dmon"].height == 8


VLLM = (
    "(APIServer pid=1) INFO 05-01 10:00:{s:02d} [loggers.py:118] Engine 000: Avg prompt throughput: 10.0 tokens/s, "
    "Avg generation throughput: 5.0 tokens/s, Running: 30 reqs, Waiting: 12 reqs, Preemptions: 0, GPU KV cache "
    "usage: 99.5%, Prefix cache hit rate: 0.0%"
)
LONG = DT + "".join(f" 20260501   10:00:{i:02d}      0  {1000 + i}    5\n" for i in range(40))
_GZ = gzip.compress(LONG.encode(), mtime=0)


@pytest.mark.parametrize(
    "name, data, rows, said",
    [
        (
            "truncated.gz",
            _GZ[:-12],
            39,
            [
                "damaged gzip file: compressed stream ends early (truncated file); read the first 1618 bytes that "
                "decompressed",
                ":42: the last dmon row is cut",
            ],
        ),
        ("zero-padded.gz", _GZ + b"\0" * 8, None, ["cannot read (unexpected end of file): skipped"]),
        ("trailing-garbage.gz", _GZ + b"xyz", 40, ["damaged gzip file: Not a gzipped file (b'xy')"]),
        (
            "truncated.zst",
            zstandard.ZstdCompressor().compress(LONG.encode())[:-8],
            None,
            ["damaged zstd file (compressed stream ends early (truncated file)): nothing could be decompressed"],
        ),
        ("two-members.gz", _GZ + gzip.compress(b" 20260501   10:00:40      0  1040    5\n", mtime=0), 41, []),
    ],
    ids=["truncated-gz", "zero-padded-gz", "trailing-garbage-gz", "truncated-zst", "two-members-gz"],
)
def test_a_damaged_stream_is_said_as_before(tmp_path, name, data, rows, said):
    d = tmp_path / "bundle"
    d.mkdir()
    (d / "vllm.log").write_text("\n".join(VLLM.format(s=s) for s in range(0, 60, 10)) + "\n")
    suffix = ".gz" if name.endswith(".gz") else ".zst"
    (d / f"dmon.txt{suffix}").write_bytes(data)
    a = analyze([str(d)], AnalyzeOptions(tz="UTC"))
    mine = [w for w in a.warnings if "dmon.txt" in w]
    assert len(mine) == len(said) and all(s in w for s, w in zip(said, mine)), a.warnings
    assert (a.frames["dmon"].height if "dmon" in a.frames else None) == rows
    assert a.partial == bool(said)
    shutil.rmtree(d)
