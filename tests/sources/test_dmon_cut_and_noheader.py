"""nvidia-smi dmon captures, written by hand: two defects.

- A capture that ends in the middle of its last row (copied while dmon was still writing, or
  truncated: no final line end) must not turn that row into a sample when it has fewer values than
  its header names or a value of no shape its column takes; one warning at its file:line says so. A
  last row without a final line end that has every value is still a sample (no warning, a note).
- ``nvidia-smi dmon --format csv,noheader`` (or ``--format noheader``) has no header rows, so its
  columns cannot be known: one warning names the capture to make instead (never silently "unknown").
  ``--format csv`` (with its header rows) is read.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from preemptlog import AnalyzeOptions, analyze
from preemptlog.pipeline.bundle import InputFile
from preemptlog.sources import TimeContext, dmon, sniff
from preemptlog.sources.sniffing import dmon_noheader_output

DT = "#Date       Time        gpu    fb   sm\n#YYYYMMDD   HH:MM:SS    Idx    MB    %\n"
DT_ROWS = " 20260501   10:00:00      0  1000    5\n 20260501   10:00:01      0  1100    6\n"
PLAIN = "# gpu    sm   mem\n# Idx     %     %\n    0    45    20\n    1    46    21\n"
CSV = "#gpu, pwr, sm, fb\n#Idx, W, %, MB\n 0, 30, 5, 800\n 1, 31, 6, 900\n"

VLLM = (
    "(APIServer pid=1) INFO 05-01 10:00:{s:02d} [loggers.py:118] Engine 000: Avg prompt throughput: 10.0 tokens/s, "
    "Avg generation throughput: 5.0 tokens/s, Running: 30 reqs, Waiting: 12 reqs, Preemptions: {p}, GPU KV cache "
    "usage: 99.5%, Prefix cache hit rate: 0.0%"
)


def _parsed(path: Path):
    f = InputFile(0, path, path.name, "dmon", None, path.stat().st_size, None, None)
    return dmon.DmonParsed([f]).resolve(TimeContext(tz="UTC"))


def _write(path: Path, text: str, *, crlf: bool = False, gz: bool = False) -> Path:
    data = (text.replace("\n", "\r\n") if crlf else text).encode()
    path.write_bytes(gzip.compress(data, mtime=0) if gz else data)
    return path


# (name, whole text, rows kept, line of the cut row)
CUT = [
    ("dt-number-cut", DT + DT_ROWS + " 20260501   10:00:02      0  11", 2, 5),
    ("dt-stamp-only", DT + DT_ROWS + " 20260501   10:00:0", 2, 5),
    ("plain-column-missing-trailing-spaces", PLAIN + "    0    45   ", 2, 5),
    ("plain-value-cut-short-of-its-shape", PLAIN + "    0    45    N/", 2, 5),
    ("second-gpu-row-cut", PLAIN + "    0    47    22\n    1    4", 3, 6),
    ("csv-trailing-comma", CSV + " 0, 32, 7,", 2, 5),
    ("csv-date-cut", "#Date, Time, gpu, fb\n20260501, 10:00:00, 0, 1000\n2026050", 1, 3),
]


@pytest.mark.parametrize("name, text, kept, line", CUT, ids=[c[0] for c in CUT])
@pytest.mark.parametrize("wrap", ["plain", "crlf", "gzip"])
def test_a_cut_last_row_is_no_sample_and_is_said_at_its_line(tmp_path, name, text, kept, line, wrap):
    suffix = ".txt.gz" if wrap == "gzip" else ".txt"
    p = _write(tmp_path / f"dmon{suffix}", text, crlf=wrap == "crlf", gz=wrap == "gzip")
    out = _parsed(p)
    df = out.frames["dmon"]
    assert df.height == kept, df
    assert line not in df.get_column("line").to_list()
    said = [w for w in out.warnings if f"{p.name}:{line}:" in w]
    assert len(said) == 1 and "cut" in said[0], out.warnings
    assert not any("do not match" in w for w in out.warnings)  # said once, as cut
    assert out.partial


WHOLE = [
    ("dt", DT + DT_ROWS + " 20260501   10:00:02      0  1200    7", 3),
    ("plain-trailing-spaces", PLAIN + "    0    47    22   ", 3),
    ("plain-null-value", PLAIN + "    0    47    -", 3),
    ("csv", CSV + " 0, 32, 7, 950", 3),
]


@pytest.mark.parametrize("name, text, rows", WHOLE, ids=[w[0] for w in WHOLE])
def test_a_whole_last_row_without_a_line_end_is_a_sample(tmp_path, name, text, rows):
    p = _write(tmp_path / "dmon.txt", text)
    out = _parsed(p)
    assert out.frames["dmon"].height == rows
    assert not out.warnings and not out.partial
    assert any(f"dmon.txt:{text.count(chr(10)) + 1}:" in n and "without a line end" in n for n in out.notes)


def test_a_last_row_with_more_values_than_its_header_stays_a_bad_row(tmp_path):
    out = _parsed(_write(tmp_path / "dmon.txt", PLAIN + "    0    47    22    9"))
    assert out.frames["dmon"].height == 2
    assert any("1 dmon row(s) do not match" in w for w in out.warnings)
    assert not any("line end" in n for n in out.notes) and not any("cut" in w for w in out.warnings)


def test_a_capture_ending_with_a_line_end_is_not_noted(tmp_path):
    out = _parsed(_write(tmp_path / "dmon.txt", DT + DT_ROWS))
    assert out.frames["dmon"].height == 2 and not out.warnings
    assert not any("line end" in n for n in out.notes)


def test_a_fenced_capture_ending_in_its_fence_reads_every_row(tmp_path):
    out = _parsed(_write(tmp_path / "dmon.txt", "```\n" + DT + DT_ROWS + "```"))
    assert out.frames["dmon"].height == 2 and not out.warnings


def _bundle(tmp_path: Path, name: str, text: str) -> Path:
    d = tmp_path / "bundle"
    d.mkdir(parents=True)
    (d / "vllm.log").write_text("\n".join(VLLM.format(s=s, p=0) for s in range(0, 60, 10)) + "\n")
    (d / name).write_text(text)
    return d


def test_in_a_bundle_a_cut_row_gives_one_warning_and_a_whole_row_none(tmp_path):
    cut = analyze(
        [str(_bundle(tmp_path / "a", "dmon.txt", DT + DT_ROWS + " 20260501   10:00:02      0  11"))],
        AnalyzeOptions(tz="UTC"),
    )
    mine = [w for w in cut.warnings if "dmon.txt" in w]
    assert len(mine) == 1 and "dmon.txt:5:" in mine[0], cut.warnings
    assert cut.partial
    whole = analyze(
        [str(_bundle(tmp_path / "b", "dmon.txt", DT + DT_ROWS + " 20260501   10:00:02      0  1200    7"))],
        AnalyzeOptions(tz="UTC"),
    )
    assert not [w for w in whole.warnings if "dmon.txt" in w], whole.warnings
    assert not whole.partial
    assert whole.frames["dmon"].height == 3


# ------------------------------------------------------------------ --format csv, csv,noheader


NOHEADER = [
    ("csv-noheader", " 0, 70, 37, -, 0, 0\n 1, 71, 38, -, 5, 3\n 0, 70, 37, -, 0, 0\n", "csv,noheader"),
    ("csv-noheader-DT", "20260501, 10:00:00, 0, 70, 1000\n20260501, 10:00:01, 0, 70, 1000\n", "csv,noheader"),
    ("csv-noheader-nounit-NA", "0, 1, N/A, 4\n0, 1, 2, 4\n", "csv,noheader"),
    (
        "noheader-spaces",
        "    0     69     13      -    100     30\n    1     69     13      -     99     31\n",
        "noheader",
    ),
]


@pytest.mark.parametrize("name, text, fmt", NOHEADER, ids=[n[0] for n in NOHEADER])
def test_a_headerless_dmon_capture_is_said_with_the_capture_to_make(tmp_path, name, text, fmt):
    assert sniff(text)[0] == "unknown"  # its columns cannot be known: not read
    assert dmon_noheader_output(text) == f"nvidia-smi dmon --format {fmt}"
    a = analyze([str(_bundle(tmp_path, "gpu.csv", text))], AnalyzeOptions(tz="UTC"))
    warn = [w for w in a.warnings if "gpu.csv" in w]
    assert len(warn) == 1 and f"nvidia-smi dmon --format {fmt} output is not read" in warn[0], a.warnings
    assert "--format csv`" in warn[0] and "-o DT" in warn[0]
    assert a.partial


@pytest.mark.parametrize(
    "text",
    [
        "1,2\n3,4\n",  # two columns: no GPU index and values
        "1700000000,0.5,3\n1700000001,0.5,3\n",  # an epoch is no GPU index
        "0, 70, 37\n",  # one row
        "0, 70, 37, 5\n0, 70, 37\n",  # rows of two widths
        "a,b,c\n1,2,3\n",
        "0, 70, 37\n0 70 37\n",  # two separators
    ],
)
def test_other_tables_are_not_taken_for_dmon(text):
    assert dmon_noheader_output(text) is None


@pytest.mark.parametrize(
    "text, expect",
    [
        (CSV, [{"gpu": 0, "pwr_w": 30.0, "fb_mb": 800.0}, {"gpu": 1, "sm_pct": 6.0}]),
        (
            "#Date, Time, gpu, sm, fb\n#YYYYMMDD, HH:MM:SS, Idx, %, MB\n20260501, 10:00:00, 0, 5, 1000\n",
            [{"gpu": 0, "sm_pct": 5.0, "fb_mb": 1000.0}],
        ),
        ("#gpu, sm, fb\n 0, 5, 1000\n 0, 6, 1100\n", [{"fb_mb": 1000.0}, {"fb_mb": 1100.0}]),  # csv,nounit
    ],
)
def test_dmon_format_csv_with_its_header_is_read(tmp_path, text, expect):
    assert sniff(text)[0] == "dmon"
    out = _parsed(_write(tmp_path / "d.csv", text))
    rows = out.frames["dmon"].to_dicts()
    assert len(rows) == len(expect) and not out.warnings
    for row, exp in zip(rows, expect):
        assert {k: row[k] for k in exp} == exp
