"""/metrics pages damaged on their way into a bundle (sources/prometheus/text.py): hand-written scrapes.

A series line written twice in one page (a copy-paste, two exporters' lines concatenated): a page with
HELP/TYPE lines writes them again with every scrape, so the repeat alone is a duplicate line of the
same scrape. It opened an untimed scrape of its own, sorted before the first reading: 10 then 30 with
one ``_created`` read as "1 counter reset(s)", "30 preemption(s) before the first scrape" and
"30 preemptions in 4 days" (a lower bound). A page without HELP/TYPE lines (``grep`` kept the samples)
still opens a scrape at the repeat of a series: that is the only mark of the next scrape it has.
"""

from __future__ import annotations

import os
from pathlib import Path

import polars as pl
import pytest

from preemptlog import AnalyzeOptions, analyze

from ..support.scrapes import page

T = 1796181000  # 2026-12-02T03:10:00Z
C = 1796180700  # the engine's start (_created), 03:05:00
LINE30 = 'vllm:num_preemptions_total{engine="0",model_name="m"} 30.0\n'


def _doubled(text: str, line: str) -> str:
    assert line in text
    return text.replace(line, line + line)


def _run(path: Path):
    a = analyze([str(path)], AnalyzeOptions(tz="UTC"))
    return a, a.summary()["reconciliation"]


@pytest.mark.parametrize("openmetrics", [False, True])
def test_a_series_line_written_twice_is_one_reading_not_a_restart(tmp_path, openmetrics):
    d = tmp_path / "scrapes"
    d.mkdir()
    (d / f"metrics-{T}.prom").write_text(page({"0": (10.0, C)}, openmetrics))
    (d / f"metrics-{T + 60}.prom").write_text(_doubled(page({"0": (30.0, C)}, openmetrics), LINE30))
    a, rec = _run(d)
    pre = a.frames["prom_preemptions"]
    assert pre.get_column("reset").sum() == 0
    assert pre.filter(pl.col("increase").is_not_null()).get_column("increase").to_list() == [20]
    assert a.counters["prometheus"]["scrapes"] == 2
    assert (rec["total"], rec["quality"]) == (20, "exact"), rec["rule"]
    assert not any("scrape(s) have no time" in w for w in a.warnings), a.warnings
    assert any("1 sample(s) repeat a series already read in the same scrape" in n for n in a.notes), a.notes


def test_a_duplicated_line_in_concatenated_pages_is_no_scrape(tmp_path):
    """Two pages appended without separators (their HELP/TYPE lines repeat: two scrapes), the second
    with a doubled counter line: two scrapes, 10 then 30, no reset."""
    f = tmp_path / "all.prom"
    f.write_text(page({"0": (10.0, C)}) + _doubled(page({"0": (30.0, C)}), LINE30))
    os.utime(f, (T + 60, T + 60))
    a, _ = _run(f)
    assert a.counters["prometheus"]["scrapes"] == 2
    pre = a.frames["prom_preemptions"]
    assert pre.get_column("reset").sum() == 0
    assert pre.get_column("value").to_list() == [10.0, 30.0]


def test_without_help_and_type_lines_a_repeated_series_still_opens_the_next_scrape(tmp_path):
    """``grep vllm: >> f`` each time: no HELP/TYPE line, the repeat of a series is the next scrape."""
    f = tmp_path / "grepped.prom"
    lines = [
        f'vllm:num_preemptions_total{{engine="0",model_name="m"}} {v}\nvllm:num_preemptions_created'
        f'{{engine="0",model_name="m"}} {C}\n'
        for v in (10.0, 30.0, 35.0)
    ]
    f.write_text("".join(lines))
    a, _ = _run(f)
    assert a.counters["prometheus"]["scrapes"] == 3
    assert a.frames["prom_preemptions"].get_column("value").to_list() == [10.0, 30.0, 35.0]


# ---------------------------------------------------------------- a page cut in its last line

COUNTER = 'vllm:num_preemptions_total{engine="0",model_name="m"}'


def _cut_folder(tmp_path: Path, last_line: str) -> Path:
    """10 at T (with _created), then a page whose last line (the counter) has no line end."""
    d = tmp_path / "cut"
    d.mkdir()
    (d / f"metrics-{T}.prom").write_text(page({"0": (10.0, C)}))
    second = page({"0": (0.0, None)}).replace(f"{COUNTER} 0.0\n", "")
    (d / f"metrics-{T + 60}.prom").write_text(second + last_line)
    return d


@pytest.mark.parametrize(
    "cut",
    [f"{COUNTER} 3", f"{COUNTER} 35 17961810"],  # 35 cut after its 3; a ms timestamp cut short
)
def test_a_value_that_may_be_cut_is_no_reading(tmp_path, cut):
    a, rec = _run(_cut_folder(tmp_path, cut))
    pre = a.frames["prom_preemptions"]
    assert pre.get_column("reset").sum() == 0 and pre.height == 1, pre
    assert (rec["total"], rec["quality"]) == (10, "exact"), rec["rule"]
    said = [w for w in a.warnings if "ends in the middle of a line" in w]
    assert len(said) == 1, a.warnings  # one warning: sniffing adds no "read as is" of its own
    assert "metrics-1796181060.prom" in said[0] and "(line 15," in said[0] and "is skipped, no reading" in said[0]
    assert "read as is" not in said[0]


def test_a_cut_line_whose_value_is_followed_by_more_is_whole(tmp_path):
    """Cut inside an exemplar: the value before it is whole (35), read, and said so."""
    a, rec = _run(_cut_folder(tmp_path, f'{COUNTER} 35 # {{trace_id="ab'))
    assert a.frames["prom_preemptions"].get_column("increase").drop_nulls().to_list() == [25]
    assert (rec["total"], rec["quality"]) == (25, "exact"), rec["rule"]
    said = [w for w in a.warnings if "ends in the middle of a line" in w]
    assert len(said) == 1 and "was read: more of it follows its value, so it is whole" in said[0], said


def test_a_cut_line_without_a_sample_is_said(tmp_path):
    a, rec = _run(_cut_folder(tmp_path, f"{COUNTER} 35\n# HELP vllm:num_requests_wai"))
    assert a.frames["prom_preemptions"].get_column("increase").drop_nulls().to_list() == [25]
    said = [w for w in a.warnings if "ends in the middle of a line" in w]
    assert len(said) == 1 and "holds no sample preemptlog reads" in said[0], said


def test_a_cut_page_is_partial_input_whatever_its_last_line(tmp_path):
    for last in (f"{COUNTER} 3", f'{COUNTER} 35 # {{trace_id="ab', f"{COUNTER} 35\n# HELP vllm:num_requests_wai"):
        d = tmp_path / str(len(last))
        d.mkdir()
        a = analyze([str(_cut_folder(d, last))], AnalyzeOptions(tz="UTC"))
        assert a.partial, last
