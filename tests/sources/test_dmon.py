"""nvidia-smi dmon: header-driven parsing, clocks, corpus captures, property test."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from preemptlog.analysis import AnalyzeOptions, analyze
from preemptlog.pipeline.bundle import InputFile
from preemptlog.sources import TimeContext, dmon, sniff

from ..conftest import FIXTURES


def _file(path: Path, display: str = "dmon.txt") -> InputFile:
    return InputFile(0, path, display, "dmon", None, path.stat().st_size, None, None)


@pytest.mark.parametrize("i", range(len(dmon.SAMPLES)))
def test_samples(i, tmp_path):
    text, expected = dmon.SAMPLES[i]
    p = tmp_path / "d.txt"
    p.write_text(text)
    assert sniff(text)[0] == "dmon"
    df, facts = dmon.read_file(str(p), "d.txt")
    assert facts["bad_rows"] == 0
    rows = df.to_dicts()
    assert len(rows) == len(expected)
    for row, exp in zip(rows, expected):
        for k, v in exp.items():
            assert row[k] == v, (k, row)


CORPUS_EXPECT = {
    "dmon-fullbot-s-u-jpg-ofa.txt": (
        10,
        ["gpu", "sm_pct", "mem_pct", "enc_pct", "dec_pct", "jpg_pct", "ofa_pct"],
        {"sm_pct": 46.0, "mem_pct": 26.0, "dec_pct": 1.0},
    ),
    "dmon-kde-520-pucm-1gpu.txt": (
        6,
        [
            "gpu",
            "pwr_w",
            "gtemp_c",
            "mtemp_c",
            "sm_pct",
            "mem_pct",
            "enc_pct",
            "dec_pct",
            "mclk_mhz",
            "pclk_mhz",
            "fb_mb",
            "bar1_mb",
        ],
        {"pwr_w": 11.0, "mtemp_c": None, "mclk_mhz": 405.0, "fb_mb": 418.0},
    ),
    "dmon-kde-525-misaligned-header.txt": (
        5,
        [
            "gpu",
            "pwr_w",
            "gtemp_c",
            "mtemp_c",
            "sm_pct",
            "mem_pct",
            "enc_pct",
            "dec_pct",
            "mclk_mhz",
            "pclk_mhz",
            "fb_mb",
            "bar1_mb",
        ],
        {"pwr_w": 29.0, "gtemp_c": 49.0, "mclk_mhz": 4006.0, "pclk_mhz": 974.0, "fb_mb": 387.0, "bar1_mb": 16.0},
    ),
    "dmon-kde-530-jpg-ofa-ccpm.txt": (
        5,
        [
            "gpu",
            "pwr_w",
            "gtemp_c",
            "mtemp_c",
            "sm_pct",
            "mem_pct",
            "enc_pct",
            "dec_pct",
            "jpg_pct",
            "ofa_pct",
            "mclk_mhz",
            "pclk_mhz",
            "fb_mb",
            "bar1_mb",
            "ccpm_mb",
        ],
        {"fb_mb": 874.0, "ccpm_mb": 0.0, "mem_pct": 13.0},
    ),
    "dmon-notes-pucet-DT-ecc-pci.txt": (
        3,
        ["gpu", "pwr_w", "sbecc_errs", "dbecc_errs", "pci_errs", "rxpci_mbps", "txpci_mbps"],
        {"pwr_w": 37.0, "pclk_mhz": 582.0, "sbecc_errs": None, "txpci_mbps": 1.0},
    ),
}


@pytest.mark.parametrize("name", sorted(CORPUS_EXPECT))
def test_corpus_capture(name, corpus):
    path = corpus / name
    rows, cols, first = CORPUS_EXPECT[name]
    assert sniff(path.read_text())[0] == "dmon"
    out = dmon.DmonParsed([_file(path, name)]).resolve(TimeContext(tz="UTC"))
    df = out.frames["dmon"]
    assert df.height == rows
    for c in cols:
        assert c in df.columns
    row = df.row(0, named=True)
    for k, v in first.items():
        assert row[k] == v, k
    assert row["gpu"] == 0 and row["line"] == 3 and row["source"] == name
    assert not out.warnings


def test_corpus_dt_is_timed_and_an_anchor(corpus):
    path = corpus / "dmon-notes-pucet-DT-ecc-pci.txt"
    parsed = dmon.DmonParsed([_file(path)])
    anchors = parsed.anchors()
    assert anchors and anchors[0][0].year == 2021
    df = parsed.resolve(TimeContext(tz="Europe/Berlin")).frames["dmon"]
    assert df.get_column("time").to_list()[:2] == [
        datetime(2021, 1, 2, 18, 12, 31, tzinfo=UTC),
        datetime(2021, 1, 2, 18, 12, 33, tzinfo=UTC),
    ]
    assert set(df.get_column("time_precision")) == {"1s"}


def test_corpus_untimed_is_said(corpus):
    out = dmon.DmonParsed([_file(corpus / "dmon-kde-520-pucm-1gpu.txt")]).resolve(TimeContext(tz="UTC"))
    assert out.frames["dmon"].get_column("time").null_count() == 6
    assert any("untimed" in n for n in out.notes)


def test_time_only_crosses_midnight_and_takes_the_log_date():
    path = FIXTURES / "sources" / "dmon-T-2gpu-midnight.txt"
    ref = (datetime(2026, 11, 29, 23, 59, 55, tzinfo=UTC), datetime(2026, 11, 30, 0, 0, 1, tzinfo=UTC))
    out = dmon.DmonParsed([_file(path)]).resolve(TimeContext(tz="UTC", reference=ref))
    df = out.frames["dmon"]
    assert df.get_column("time").to_list() == [
        datetime(2026, 11, 29, 23, 59, 58, tzinfo=UTC),
        datetime(2026, 11, 29, 23, 59, 58, tzinfo=UTC),
        datetime(2026, 11, 29, 23, 59, 59, tzinfo=UTC),
        datetime(2026, 11, 29, 23, 59, 59, tzinfo=UTC),
        datetime(2026, 11, 30, 0, 0, 1, tzinfo=UTC),
        datetime(2026, 11, 30, 0, 0, 1, tzinfo=UTC),
    ]
    assert df.get_column("gpu").to_list() == [0, 1, 0, 1, 0, 1]
    (a,) = out.assumptions
    assert a.topic == "dmon date" and a.value.startswith("2026-11-29") and "midnight" in a.value


def test_time_only_without_anything_else_is_untimed():
    path = FIXTURES / "sources" / "dmon-T-2gpu-midnight.txt"
    out = dmon.DmonParsed([_file(path)]).resolve(TimeContext(tz="UTC"))
    assert out.frames["dmon"].get_column("time").null_count() == 6
    assert any("untimed" in n for n in out.notes)


def test_bundle_with_log_dates_time_only_dmon_and_offset(tmp_path):
    src = FIXTURES / "sources"
    a = analyze(
        [str(src / "midnight.log"), str(src / "dmon-T-2gpu-midnight.txt")],
        AnalyzeOptions(tz="UTC", year=2026, offsets={"dmon": -1.0}),
    )
    df = a.frames["dmon"]
    assert df.get_column("time")[0] == datetime(2026, 11, 29, 23, 59, 57, tzinfo=UTC)
    assert any(x.topic == "dmon date" for x in a.assumptions)
    assert any(x.topic == "offset" and x.scope == "dmon" for x in a.assumptions)


def test_bad_rows_are_counted_not_fatal(tmp_path):
    p = tmp_path / "d.txt"
    p.write_text("0 1 2\n# gpu sm fb\n# Idx % MB\n 0 5 100\n 0 5\n garbage row here and more\n 1 6 200\n")
    out = dmon.DmonParsed([_file(p)]).resolve(TimeContext(tz="UTC"))
    assert out.frames["dmon"].select("gpu", "sm_pct", "fb_mb").rows() == [(0, 5.0, 100.0), (1, 6.0, 200.0)]
    assert any("2 dmon row(s)" in w for w in out.warnings)
    assert any("before any dmon header" in w for w in out.warnings)


# ---- property test: any selection, order, GPU count, header repetition ----

METRICS = [
    ("pwr", "W", "pwr_w"),
    ("gtemp", "C", "gtemp_c"),
    ("sm", "%", "sm_pct"),
    ("mem", "%", "mem_pct"),
    ("enc", "%", "enc_pct"),
    ("jpg", "%", "jpg_pct"),
    ("mclk", "MHz", "mclk_mhz"),
    ("fb", "MB", "fb_mb"),
    ("bar1", "MB", "bar1_mb"),
    ("ccpm", "MB", "ccpm_mb"),
    ("rxpci", "MB/s", "rxpci_mbps"),
    ("sbecc", "errs", "sbecc_errs"),
]


@settings(max_examples=40, deadline=None)
@given(
    cols=st.lists(st.sampled_from(METRICS), min_size=1, max_size=8, unique=True),
    gpus=st.integers(1, 4),
    samples=st.integers(1, 6),
    repeat=st.integers(1, 4),
    date_cols=st.sampled_from(["", "D", "T", "DT"]),
    widths=st.integers(1, 4),
    data=st.data(),
)
def test_property_values_recovered(tmp_path_factory, cols, gpus, samples, repeat, date_cols, widths, data):
    names = (
        (["Date"] if "D" in date_cols else []) + (["Time"] if "T" in date_cols else []) + ["gpu"] + [c[0] for c in cols]
    )
    units = (
        (["YYYYMMDD"] if "D" in date_cols else [])
        + (["HH:MM:SS"] if "T" in date_cols else [])
        + ["Idx"]
        + [c[1] for c in cols]
    )
    pad = " " * widths
    header = "#" + pad.join(f"{n:>6}" for n in names) + " \n#" + pad.join(f"{u:>6}" for u in units) + "\n"
    lines, expected = [], []
    for s in range(samples):
        if s % repeat == 0:
            lines.append(header)
        for g in range(gpus):
            vals = [data.draw(st.one_of(st.none(), st.integers(0, 100000))) for _ in cols]
            stamp = (["20261130"] if "D" in date_cols else []) + ([f"05:10:{s:02d}"] if "T" in date_cols else [])
            toks = stamp + [str(g)] + ["-" if v is None else str(v) for v in vals]
            lines.append(" " + pad.join(f"{t:>6}" for t in toks) + data.draw(st.sampled_from(["", " ", "  "])) + "\n")
            expected.append({"gpu": g, **{c[2]: (None if v is None else float(v)) for c, v in zip(cols, vals)}})
    p = tmp_path_factory.mktemp("d") / "d.txt"
    p.write_text("".join(lines))
    out = dmon.DmonParsed([_file(p)]).resolve(TimeContext(tz="UTC"))
    df = out.frames["dmon"]
    assert not out.warnings
    got = df.select(["gpu"] + [c[2] for c in cols]).to_dicts()
    assert got == expected
    if date_cols == "DT":
        assert df.get_column("time").null_count() == 0
    else:
        assert df.get_column("time").null_count() == df.height


def test_frame_schema_fixed_columns(tmp_path):
    p = tmp_path / "d.txt"
    p.write_text(dmon.SAMPLES[0][0])
    df = dmon.DmonParsed([_file(p)]).resolve(TimeContext(tz="UTC")).frames["dmon"]
    assert df.columns[:3] == ["time", "time_precision", "gpu"] and df.columns[-2:] == ["source", "line"]
    assert df.schema["time"] == pl.Datetime("us", "UTC") and df.schema["line"] == pl.UInt32
