"""nvidia-smi dmon captures, written by hand: a value of no shape its column takes in any row.

Failed before its fix: a data row that was not the last one, whose token for a metric column was
no number, ``-`` or N/A (``12x4``, ``###``, ``1e999x``), gave that sample a null metric and no
message at all (and a row whose GPU index was no index was dropped, unsaid). Now every such row
keeps its other values, the bad value stays null (never a default), and the file gets ONE warning
that counts the values and the rows and cites the first one at its file:line, with its column
and its token (quoted, escaped, cut to 40 characters). An unreadable date/time stays the
"untimed" warning it already was (never said twice for one row), and a cut last row keeps its
own warning (never counted again here).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from preemptlog import AnalyzeOptions, analyze
from preemptlog.pipeline.bundle import InputFile
from preemptlog.sources import TimeContext, dmon

UNREAD = "have no shape their column takes"  # the words of the warning this file is about

PLAIN = "# gpu    sm   mem    fb\n# Idx     %     %    MB\n"  # no -o
DT = "#Date       Time        gpu    fb   sm\n#YYYYMMDD   HH:MM:SS    Idx    MB    %\n"
T = "#Time        gpu    sm    fb\n#HH:MM:SS     Idx     %    MB\n"
CSV = "#gpu, pwr, sm, fb\n#Idx, W, %, MB\n"
CSV_DT = "#Date, Time, gpu, sm, mem, fb\n#YYYYMMDD, HH:MM:SS, Idx, %, %, MB\n"


def _plain_rows(fb5: str) -> str:  # two GPUs per sample; the 5th data row is GPU 0 of sample 3
    return (
        PLAIN
        + "    0    40    20  1000\n    1    41    21  2000\n"
        + "    0    42    22  1100\n    1    43    23  2100\n"
        + f"    0    44    24  {fb5}\n    1    45    25  2200\n"
    )


def _dt_rows(sm5: str) -> str:  # one GPU, header repeated after the 3rd sample
    rows = [f" 20260501   10:00:0{i}      0  {1000 + i}    {sm5 if i == 4 else 5 + i}" for i in range(6)]
    return DT + "\n".join(rows[:3]) + "\n" + DT + "\n".join(rows[3:]) + "\n"


def _t_rows(fb5: str) -> str:  # -o T, two GPUs
    return (
        T
        + " 10:00:00      0    50  1000\n 10:00:00      1    51  2000\n"
        + " 10:00:01      0    52  1100\n 10:00:01      1    53  2100\n"
        + f" 10:00:02      0    54  {fb5}\n 10:00:02      1    55  2200\n"
    )


def _csv_rows(fb5: str) -> str:  # --format csv, two GPUs
    return (
        CSV + " 0, 30, 5, 800\n 1, 31, 6, 900\n 0, 32, 7, 810\n 1, 33, 8, 910\n" + f" 0, 34, 9, {fb5}\n 1, 35, 9, 920\n"
    )


def _csv_dt_rows(fb5: str) -> str:  # --format csv -o DT, header repeated, two GPUs
    return (
        CSV_DT
        + "20260501, 10:00:00, 0, 5, 3, 1000\n20260501, 10:00:00, 1, 6, 4, 2000\n"
        + CSV_DT
        + f"20260501, 10:00:01, 0, 7, 5, {fb5}\n20260501, 10:00:01, 1, 8, 6, 2100\n"
        + "20260501, 10:00:02, 0, 9, 7, 1200\n"
    )


# (name, capture text, line of the bad row, column, token, frame column, the row's other values)
SHAPES = [
    ("plain-fb-12x4", _plain_rows("12x4"), 7, "fb", "12x4", "fb_mb", {"gpu": 0, "sm_pct": 44.0, "mem_pct": 24.0}),
    ("plain-fb-hashes", _plain_rows("###"), 7, "fb", "###", "fb_mb", {"gpu": 0, "sm_pct": 44.0}),
    ("plain-fb-1e999x", _plain_rows("1e999x"), 7, "fb", "1e999x", "fb_mb", {"gpu": 0, "mem_pct": 24.0}),
    ("dt-sm-12x4-repeated-header", _dt_rows("12x4"), 9, "sm", "12x4", "sm_pct", {"gpu": 0, "fb_mb": 1004.0}),
    ("t-fb-hashes-2gpu", _t_rows("###"), 7, "fb", "###", "fb_mb", {"gpu": 0, "sm_pct": 54.0}),
    ("csv-fb-1e999x", _csv_rows("1e999x"), 7, "fb", "1e999x", "fb_mb", {"gpu": 0, "pwr_w": 34.0, "sm_pct": 9.0}),
    ("csv-dt-fb-12x4", _csv_dt_rows("12x4"), 7, "fb", "12x4", "fb_mb", {"gpu": 0, "sm_pct": 7.0, "mem_pct": 5.0}),
]
REF = ((2026, 5, 1, 9, 59, 0), (2026, 5, 1, 10, 1, 0))


def _file(path: Path, display: str = "dmon.txt") -> InputFile:
    return InputFile(0, path, display, "dmon", None, path.stat().st_size, None, None)


def _resolve(tmp_path: Path, text: str, name: str = "dmon.txt"):
    from datetime import UTC, datetime

    p = tmp_path / name
    p.write_bytes(text.encode())
    ref = tuple(datetime(*x, tzinfo=UTC) for x in REF)
    return dmon.DmonParsed([_file(p, name)]).resolve(TimeContext(tz="UTC", reference=ref))


def _unread(out) -> list[str]:
    return [w for w in out.warnings if UNREAD in w]


@pytest.mark.parametrize("name, text, line, col, tok, fcol, others", SHAPES, ids=[s[0] for s in SHAPES])
def test_a_bad_value_before_the_last_row_is_null_and_said_at_its_line(
    tmp_path, name, text, line, col, tok, fcol, others
):
    out = _resolve(tmp_path, text)
    df = out.frames["dmon"]
    assert df.height == sum(not ln.startswith("#") for ln in text.splitlines()), df  # every row is a sample
    (row,) = df.filter(df.get_column("line") == line).to_dicts()
    assert row[fcol] is None  # never a default
    assert {k: row[k] for k in others} == others  # the row's other values are read
    (w,) = _unread(out)
    assert w.startswith(f"dmon.txt:{line}: 1 dmon value(s) in 1 row(s) {UNREAD}"), w
    assert f"(first: {col} {tok!r})" in w, w
    assert "\n" not in w
    assert out.partial
    # nothing else is said about this row
    assert not [x for x in out.warnings if x != w], out.warnings


def test_values_in_several_rows_are_counted_and_the_first_is_cited(tmp_path):
    text = (
        PLAIN
        + "    0    40    20  1000\n    1    41    21  2000\n"
        + "    0    4x    22  10.0.1\n    1    43    23  2100\n"  # line 5: two values
        + "    0    44    ~   1200\n    1    45    25  2200\n"  # line 7: one
    )
    out = _resolve(tmp_path, text)
    df = out.frames["dmon"]
    assert df.height == 6
    (w,) = _unread(out)
    assert w.startswith(f"dmon.txt:5: 3 dmon value(s) in 2 row(s) {UNREAD} (first: sm '4x')"), w
    rows = {r["line"]: r for r in df.to_dicts()}
    assert (rows[5]["sm_pct"], rows[5]["mem_pct"], rows[5]["fb_mb"]) == (None, 22.0, None)
    assert (rows[7]["sm_pct"], rows[7]["mem_pct"], rows[7]["fb_mb"]) == (44.0, None, 1200.0)


def test_the_first_is_by_line_across_headers_of_other_selections(tmp_path):
    text = (
        "# gpu    sm    fb\n# Idx     %    MB\n    0    40  1000\n    0    41  zz\n"  # line 4
        "# gpu   pwr    sm    fb\n# Idx     W     %    MB\n    0    30    4?  1100\n    0    31    42  1200\n"
    )
    out = _resolve(tmp_path, text)
    assert out.frames["dmon"].height == 4
    (w,) = _unread(out)
    assert w.startswith(f"dmon.txt:4: 2 dmon value(s) in 2 row(s) {UNREAD} (first: fb 'zz')"), w


@pytest.mark.parametrize(
    "tok, shown",
    [
        ("\x1b[31m9000", r"'\x1b[31m9000'"),  # a control character is escaped
        ("9" * 30 + "x" * 30, repr("9" * 30 + "x" * 10) + "…"),  # a long token is cut to 40 characters
        ("\u202e0001", r"'\u202e0001'"),  # a bidi override is escaped
    ],
    ids=["ansi", "long", "bidi"],
)
def test_the_token_is_quoted_escaped_and_cut(tmp_path, tok, shown):
    out = _resolve(tmp_path, _plain_rows(tok))
    (w,) = _unread(out)
    assert f"(first: fb {shown})" in w, w
    assert w.isprintable()  # one line, nothing a terminal would act on
    assert "\x1b" not in w and "\u202e" not in w and "\n" not in w


def test_a_bad_gpu_index_is_no_sample_and_is_said(tmp_path):
    text = _plain_rows("1200").replace("    1    43    23  2100\n", "   1x    43    23  2100\n")  # line 6
    out = _resolve(tmp_path, text)
    df = out.frames["dmon"]
    assert 6 not in df.get_column("line").to_list() and df.height == 5  # as before: no device, no sample
    (w,) = _unread(out)
    assert w.startswith(f"dmon.txt:6: 1 dmon value(s) in 1 row(s) {UNREAD} (first: gpu '1x')"), w
    assert "1 row(s) without a readable GPU index are no sample" in w


@pytest.mark.parametrize("stamp", ["10:0x:02", "1O:00:02"])
def test_an_unreadable_time_is_said_once_as_untimed(tmp_path, stamp):
    out = _resolve(tmp_path, _t_rows("1200").replace(" 10:00:02      0", f" {stamp}      0"))
    df = out.frames["dmon"]
    assert df.height == 6
    assert not _unread(out), out.warnings  # the same row, the same reason: never said twice
    (w,) = [w for w in out.warnings if "date/time" in w]
    assert w.startswith("dmon.txt:7: 1 dmon sample(s)")


def test_an_unreadable_date_is_said_once_as_untimed_and_a_bad_value_beside_it_too(tmp_path):
    text = _dt_rows("7").replace(" 20260501   10:00:04      0  1004", " 2026O501   10:00:04      0  1O04")
    out = _resolve(tmp_path, text)
    (u,) = [w for w in out.warnings if "date/time" in w]
    assert u.startswith("dmon.txt:9: 1 dmon sample(s)")
    (w,) = _unread(out)  # the frame-buffer value is another reason: said in its own warning
    assert w.startswith(f"dmon.txt:9: 1 dmon value(s) in 1 row(s) {UNREAD} (first: fb '1O04')"), w


def test_a_cut_last_row_keeps_its_own_warning_and_is_not_counted_again(tmp_path):
    text = _plain_rows("12x4") + "    0    46    26  1x"  # line 9: cut (no line end), a value of no shape
    out = _resolve(tmp_path, text)
    df = out.frames["dmon"]
    assert df.height == 6 and 9 not in df.get_column("line").to_list()
    (cut,) = [w for w in out.warnings if "dmon.txt:9:" in w]
    assert "cut" in cut
    (w,) = _unread(out)
    assert w.startswith(f"dmon.txt:7: 1 dmon value(s) in 1 row(s) {UNREAD} (first: fb '12x4')"), w
    assert len(out.warnings) == 2


def test_a_cut_last_row_alone_is_said_only_as_cut(tmp_path):
    out = _resolve(tmp_path, _plain_rows("1200") + "    0    46    26  1x")
    assert not _unread(out) and len(out.warnings) == 1 and "dmon.txt:9:" in out.warnings[0]


@pytest.mark.parametrize(
    "text",
    [
        _plain_rows("-"),
        _plain_rows("N/A"),
        _plain_rows("n/a"),
        _csv_rows("-"),
        # MIG: the GPU row has no instance (gi, ci "-")
        "# gpu    gi    ci    sm    fb\n# Idx   Idx   Idx     %    MB\n"
        "    0     -     -     -  30000\n    0     0     0    50   5000\n    0     1     0    50  25000\n",
        # --gpm-metrics typeset by a blog editor: "-" became an en dash
        "# gpu    sm  smutil  smocc\n# Idx     %   GPM:%  GPM:%\n    0    97      \u2013      \u2013\n"
        "    0    98      \u2013      \u2014\n    0    99      \u2212      \u2013\n",
    ],
    ids=["dash", "NA", "na", "csv-dash", "mig", "gpm-typographic-dash"],
)
def test_unavailable_values_are_null_and_not_warned(tmp_path, text):
    out = _resolve(tmp_path, text)
    assert not out.warnings, out.warnings


def test_the_warning_counts_in_read_file_facts(tmp_path):
    p = tmp_path / "d.txt"
    p.write_text(_csv_rows("1e999x"))
    df, facts = dmon.read_file(str(p), "d.txt")
    assert facts["bad_rows"] == 0 and df.height == 6
    assert (facts["unread_values"], facts["unread_rows"], facts["unread_gpu_rows"]) == (1, 1, 0)
    assert facts["unread_first"] == (7, "fb", "1e999x")


def test_many_rows_are_one_warning(tmp_path):
    rows = "".join(f"    {i % 2}    {i % 90}    20  {'bad' if i % 10 == 3 else 1000 + i}\n" for i in range(2000))
    out = _resolve(tmp_path, PLAIN + rows)
    assert out.frames["dmon"].height == 2000
    (w,) = _unread(out)
    assert w.startswith(f"dmon.txt:6: 200 dmon value(s) in 200 row(s) {UNREAD} (first: fb 'bad')"), w
    assert out.frames["dmon"].get_column("fb_mb").null_count() == 200


VLLM = (
    "(APIServer pid=1) INFO 05-01 10:00:{s:02d} [loggers.py:118] Engine 000: Avg prompt throughput: 10.0 tokens/s, "
    "Avg generation throughput: 5.0 tokens/s, Running: 30 reqs, Waiting: 12 reqs, Preemptions: 0, GPU KV cache "
    "usage: 99.5%, Prefix cache hit rate: 0.0%"
)


def test_in_a_bundle_the_bad_value_is_one_warning(tmp_path):
    d = tmp_path / "bundle"
    d.mkdir()
    (d / "vllm.log").write_text("\n".join(VLLM.format(s=s) for s in range(0, 60, 10)) + "\n")
    (d / "dmon.txt").write_text(_dt_rows("###"))
    a = analyze([str(d)], AnalyzeOptions(tz="UTC"))
    mine = [w for w in a.warnings if "dmon.txt" in w]
    assert len(mine) == 1 and re.search(r"dmon\.txt:9: 1 dmon value\(s\) in 1 row\(s\)", mine[0]), a.warnings
    assert "(first: sm '###')" in mine[0]
    assert a.partial
    assert a.frames["dmon"].height == 6
