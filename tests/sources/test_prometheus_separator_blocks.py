"""Scrapes between separator lines (sources/prometheus/text.py): where a file has separators they
decide; a repeated HELP/TYPE line opens a new scrape only before the first separator."""

from __future__ import annotations

import os
from datetime import UTC, datetime

import polars as pl
import pytest

from preemptlog import AnalyzeOptions, analyze

from ..conftest import analyze_json, write_lines

E0 = 1773482400  # 2026-03-14T10:00:00Z
NAME = "vllm:num_preemptions_total"


def page(model: str, running: float, preemptions: float) -> list[str]:
    """One model's /metrics page, each family with its own HELP/TYPE (what ``curl`` appends)."""
    return [
        "# HELP vllm:num_requests_running Number of requests in model execution batches.",
        "# TYPE vllm:num_requests_running gauge",
        f'vllm:num_requests_running{{engine="0",model_name="{model}"}} {running}',
        "# HELP vllm:kv_cache_usage_perc KV-cache usage.",
        "# TYPE vllm:kv_cache_usage_perc gauge",
        f'vllm:kv_cache_usage_perc{{engine="0",model_name="{model}"}} 0.9',
        f"# HELP {NAME} Cumulative number of preemption from the engine.",
        f"# TYPE {NAME} counter",
        f'{NAME}{{engine="0",model_name="{model}"}} {preemptions}',
    ]


def utc(sec: float) -> datetime:
    return datetime.fromtimestamp(sec, UTC)


def two_models(tmp_path, sep=lambda k: f"# scrape 2026-03-14T10:00:{10 * k:02d}Z"):
    lines: list[str] = []
    for k, (a, b) in enumerate([(0, 1), (2, 1), (6, 4)]):
        lines += [sep(k), *page("A", 30, a), *page("B", 20, b)]
    p = write_lines(tmp_path / "twomodels.prom", lines)
    os.utime(p, (E0 + 86400 * 200, E0 + 86400 * 200))  # an mtime far from the scrapes
    return p


def series(a) -> dict[str, list[tuple[datetime, int]]]:
    p = a.frames["prom_preemptions"].filter(pl.col("increase").is_not_null()).sort("end")
    out: dict[str, list[tuple[datetime, int]]] = {}
    for r in p.iter_rows(named=True):
        out.setdefault(r["model_name"], []).append((r["end"], r["increase"]))
    return out


def test_two_models_appended_after_each_separator_are_one_scrape(tmp_path):
    a = analyze([str(two_models(tmp_path))], AnalyzeOptions(tz="UTC"))
    assert a.counters["prometheus"]["scrapes"] == 3
    assert series(a) == {
        "A": [(utc(E0 + 10), 2), (utc(E0 + 20), 4)],
        "B": [(utc(E0 + 10), 0), (utc(E0 + 20), 3)],
    }
    assert a.events.height == 9
    times = a.events.get_column("time")
    assert times.null_count() == 0 and times.min() >= utc(E0) and times.max() <= utc(E0 + 20)
    assert not any("have no time" in w for w in a.warnings)
    assert [(x.value, x.source) for x in a.assumptions if x.topic == "scrape time"] == [
        ("separator lines", "3 of 3 scrape(s)")
    ]


def test_the_same_with_dash_and_bare_time_separators(tmp_path):
    def sep(k):
        return f"--- 2026-03-14T10:00:{10 * k:02d}Z" if k % 2 else str(E0 + 10 * k)

    a = analyze([str(two_models(tmp_path, sep))], AnalyzeOptions(tz="UTC"))
    assert a.counters["prometheus"]["scrapes"] == 3
    assert a.events.height == 9 and a.events.get_column("time").max() <= utc(E0 + 20)


def test_one_family_once_per_scrape_reads_the_same(tmp_path):
    """The federate shape (one HELP/TYPE per family) and the curl-appended shape agree."""
    lines: list[str] = []
    for k, (a, b) in enumerate([(0, 1), (2, 1), (6, 4)]):
        lines += [
            f"# scrape 2026-03-14T10:00:{10 * k:02d}Z",
            f"# HELP {NAME} x",
            f"# TYPE {NAME} counter",
            f'{NAME}{{engine="0",model_name="A"}} {a}',
            f'{NAME}{{engine="0",model_name="B"}} {b}',
        ]
    fed = analyze([str(write_lines(tmp_path / "fed.prom", lines))], AnalyzeOptions(tz="UTC"))
    curl = analyze([str(two_models(tmp_path))], AnalyzeOptions(tz="UTC"))
    assert series(fed) == series(curl)


def test_a_series_twice_between_two_separators_stays_one_scrape(tmp_path):
    """Another server with the same labels, or a second scrape without its separator: the block is one
    scrape, the series' largest value is used (as for ranks), and a note says so."""
    lines = [
        "# scrape 2026-03-14T10:00:00Z",
        f"# TYPE {NAME} counter",
        f'{NAME}{{engine="0",model_name="m"}} 1',
        f"# TYPE {NAME} counter",
        f'{NAME}{{engine="0",model_name="m"}} 3',
        "# scrape 2026-03-14T10:00:10Z",
        f"# TYPE {NAME} counter",
        f'{NAME}{{engine="0",model_name="m"}} 7',
    ]
    a = analyze([str(write_lines(tmp_path / "dup.prom", lines))], AnalyzeOptions(tz="UTC"))
    assert a.counters["prometheus"]["scrapes"] == 2
    p = a.frames["prom_preemptions"].sort("end")
    assert p.select("prev_value", "value", "increase").rows()[-1] == (3.0, 7.0, 4)
    assert p.get_column("end").to_list()[-1] == utc(E0 + 10)
    assert not any("have no time" in w for w in a.warnings)
    assert any("1 sample(s) repeat a series already read in the same scrape" in n for n in a.notes)


def test_without_separators_a_repeated_help_still_opens_the_next_scrape(tmp_path):
    lines: list[str] = []
    for v in (1, 4, 9):
        lines += [f"# HELP {NAME} x", f"# TYPE {NAME} counter", f'{NAME}{{engine="0"}} {v} {(E0 + 10 * v) * 1000}']
    a = analyze([str(write_lines(tmp_path / "nosep.prom", lines))], AnalyzeOptions(tz="UTC"))
    assert a.counters["prometheus"]["scrapes"] == 3
    assert [r[1] for r in series(a)[""]] == [3, 5]


def test_before_the_first_separator_the_repeat_rule_holds(tmp_path):
    """Scrapes without separators, then a timed block with two pages: 2 + 1 scrapes."""
    lines = [
        *page("A", 30, 0),
        *page("A", 30, 1),
        "# scrape 2026-03-14T10:00:30Z",
        *page("A", 30, 5),
        *page("B", 20, 2),
    ]
    a = analyze([str(write_lines(tmp_path / "mixed.prom", lines))], AnalyzeOptions(tz="UTC"))
    assert a.counters["prometheus"]["scrapes"] == 3
    assert [r[1] for r in series(a)["A"]] == [1, 4]


def test_cli_headline_spans_the_scrapes_not_the_mtime(tmp_path):
    p = two_models(tmp_path)
    s = analyze_json(str(p))
    assert s["events"] == 9 and s["events_without_time"] == 0
    assert s["last_event"] == "2026-03-14T10:00:20+00:00"
    assert s["headline"].startswith("9 preemptions in 15 s")
    assert not any("# scrape <ISO time>" in w for w in s["warnings"])


@pytest.mark.parametrize(
    "word",
    ["# scraped at {t}", "# scrape at {t}", "# scraped: {t}", "# scraped {t}", "# Timestamp: {t}", "# scrape {t}"],
)
def test_a_separator_naming_its_time_in_words(tmp_path, word):
    """``# scraped at <time>`` (a hand-written loop's words) dates the scrape after it: it was a
    separator whose time ("d at 2026-...") did not parse, so the file mtime stood in, silently."""
    a = analyze(
        [str(two_models(tmp_path, lambda k: word.format(t=f"2026-03-14T10:00:{10 * k:02d}Z")))],
        AnalyzeOptions(tz="UTC"),
    )
    assert a.counters["prometheus"]["scrapes"] == 3
    assert a.events.height == 9 and a.events.get_column("time").max() <= utc(E0 + 20)
    assert not any("not read" in w for w in a.warnings)


def test_a_separator_time_that_does_not_parse_is_warned(tmp_path):
    a = analyze([str(two_models(tmp_path, lambda k: f"# scrape 14.03.2026 at {k} past ten"))], AnalyzeOptions(tz="UTC"))
    said = [w for w in a.warnings if "separator line names a time that is not read" in w]
    assert said and "14.03.2026" in said[0] and "date -Is" in said[0]
    (tmp_path / "d").mkdir()
    dashes = analyze([str(two_models(tmp_path / "d", lambda k: "--- next page ---"))], AnalyzeOptions(tz="UTC"))
    assert not any("not read" in w for w in dashes.warnings)  # no time meant: nothing to warn
