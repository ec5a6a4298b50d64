"""A count over a window that spans a counter reset is a lower bound, whatever dates the reset.

Scrape 1 at T reads 10 (``_created`` C), scrape 2 at T+60 reads 30 (C), scrape 3 at T+120 reads 5
with ``_created`` T+100: the engine restarted. The new run's 5 count from T+100 (none placed in the
downtime), but what the old run counted between its last reading (T+60) and its end is in no
reading: 20 + 5 = 25 is a lower bound, as for a reset no ``_created`` dates (the value drops). It
was called "25 (exact)". A count from one run (no reset inside) stays exact. And a new ``_created``
whose value rose (10, then 40 since the restart) was said as "its counter fell from 10 ... to 40":
the words now say the counter started again, per ``_created``.

Hand-written scrapes: one engine, two engines (``engine="0"`` / ``"1"``), OpenMetrics with
``# EOF``; the library for the numbers, a real ``preemptlog`` process for the words.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from preemptlog import AnalyzeOptions, analyze

from ..conftest import ROOT
from ..support import scrapes

T = 1796181000  # 2026-12-02T03:10:00Z
C = 1796180700  # the first run's start (_created), 03:05:00
COUNTER = "prometheus counter (vllm:num_preemptions_total)"


def page(engines: dict[str, tuple[float, float | None]], openmetrics: bool = False) -> str:
    """One /metrics page: per engine label, (counter value, its _created or None), the waiting gauge beside."""
    return scrapes.page(engines, openmetrics, gauges=False)


Scrapes = list[tuple[int, dict[str, tuple[float, float | None]]]]


def folder(tmp_path: Path, scrapes: Scrapes, openmetrics: bool = False) -> Path:
    """One file per scrape, its time in its name (``metrics-<epoch>.prom``)."""
    d = tmp_path / "scrapes"
    d.mkdir()
    for t, engines in scrapes:
        (d / f"metrics-{t}.prom").write_text(page(engines, openmetrics))
    return d


def one_file(tmp_path: Path, scrapes: Scrapes, openmetrics: bool = True) -> Path:
    """Every scrape in one file, each after a ``# scrape <epoch>`` separator (OpenMetrics: each ends in ``# EOF``)."""
    f = tmp_path / "scrapes.prom"
    f.write_text("".join(f"# scrape {t}\n" + page(engines, openmetrics) for t, engines in scrapes))
    return f


def src(rec: dict, name: str) -> dict:
    return next(s for s in rec["sources"] if s["source"] == name)


# name -> (scrapes, events, quality): the window spans a reset (dated or not) -> lower bound; one run -> exact
CASES: dict[str, tuple[Scrapes, int, str]] = {
    "dated-restart-drop": (
        [(T, {"0": (10.0, C)}), (T + 60, {"0": (30.0, C)}), (T + 120, {"0": (5.0, T + 100)})],
        25,
        "lower bound",
    ),
    "dated-restart-rise": ([(T, {"0": (10.0, C)}), (T + 60, {"0": (40.0, T + 30)})], 40, "lower bound"),
    "undated-drop": (
        [(T, {"0": (10.0, None)}), (T + 60, {"0": (30.0, None)}), (T + 120, {"0": (5.0, None)})],
        25,
        "lower bound",
    ),
    "one-run": ([(T, {"0": (10.0, C)}), (T + 60, {"0": (30.0, C)}), (T + 120, {"0": (35.0, C)})], 25, "exact"),
    "two-engines-one-restarts": (
        [
            (T, {"0": (10.0, C), "1": (1.0, C)}),
            (T + 60, {"0": (30.0, C), "1": (4.0, C)}),
            (T + 120, {"0": (5.0, T + 100), "1": (9.0, C)}),
        ],
        25 + 8,
        "lower bound",
    ),
    "two-engines-one-run": (
        [
            (T, {"0": (10.0, C), "1": (1.0, C)}),
            (T + 60, {"0": (30.0, C), "1": (4.0, C)}),
            (T + 120, {"0": (31.0, C), "1": (9.0, C)}),
        ],
        21 + 8,
        "exact",
    ),
}


@pytest.mark.parametrize("layout", ["files", "openmetrics-files", "openmetrics-one-file"])
@pytest.mark.parametrize("case", list(CASES))
def test_a_count_across_a_reset_is_a_lower_bound_and_one_runs_is_exact(tmp_path, case, layout):
    scrapes, events, quality = CASES[case]
    if layout == "files":
        path = folder(tmp_path, scrapes)
    elif layout == "openmetrics-files":
        path = folder(tmp_path, scrapes, openmetrics=True)
    else:
        path = one_file(tmp_path, scrapes)
    a = analyze([str(path)], AnalyzeOptions(tz="UTC"))
    rec = a.summary()["reconciliation"]
    assert (rec["total"], a.events.height) == (events, events)
    assert rec["quality"] == quality, rec["rule"]
    counter = src(rec, COUNTER)
    assert counter["exact"] is (quality == "exact")
    if quality == "lower bound":
        assert "counter reset(s) (engine restarts)" in rec["rule"] and "lower bound" in rec["rule"]
        assert "not visible" in counter["note"] or "lost" in counter["note"]
    else:
        assert "reset" not in rec["rule"]


def test_a_dated_restart_still_places_nothing_in_the_downtime(tmp_path):
    """The fix changes the label, not the events: the new run's 5 lie in (its _created, its reading]."""
    a = analyze([str(folder(tmp_path, CASES["dated-restart-drop"][0]))], AnalyzeOptions(tz="UTC"))
    p = a.frames["prom_preemptions"]
    last = p.filter(p["reset"]).row(0, named=True)
    assert last["restart_dated"] and last["increase"] == 5
    assert last["start"].timestamp() == T + 100 and last["end"].timestamp() == T + 120


def _words(path: Path) -> str:
    e = {k: v for k, v in os.environ.items() if not k.startswith("PREEMPTLOG_")}
    p = subprocess.run(
        [sys.executable, "-m", "preemptlog", "analyze", str(path), "--tz", "UTC", "-v"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=e | {"NO_COLOR": "1", "LANG": "C.UTF-8"},
        timeout=300,
        check=False,
    )
    assert p.returncode == 0, p.stderr
    return " ".join(p.stderr.split())


@pytest.mark.parametrize(
    ("case", "before", "after"),
    [("dated-restart-drop", "30", "5"), ("dated-restart-rise", "10", "40")],
)
def test_the_words_say_a_restart_per_created_and_a_lower_bound(tmp_path, case, before, after):
    said = _words(folder(tmp_path, CASES[case][0]))
    n = CASES[case][1]
    assert f"counted {n} (lower bound)" in said and f"reconciled count: {n} (lower bound)" in said
    assert "(exact)" not in said
    assert "its counter fell from" not in said  # 10 -> 40 did not fall: the new _created says it started again
    assert "restarted (a counter reset with a new _created: it changed from" in said
    assert f"the run before last read {before} at" in said and f"the new run read {after} at" in said
    assert "so a count across the restart is a lower bound" in said


def test_a_single_reading_since_created_stays_exact(tmp_path):
    """One run, one reading: its count since _created is exact (nothing of another run is missing)."""
    d = folder(tmp_path, [(T, {"0": (42.0, C), "1": (3.0, C)})])
    a = analyze([str(d)], AnalyzeOptions(tz="UTC"))
    rec = a.summary()["reconciliation"]
    assert (rec["total"], rec["quality"]) == (45, "exact")


def test_the_json_summary_through_the_cli(tmp_path):
    e = {k: v for k, v in os.environ.items() if not k.startswith("PREEMPTLOG_")}
    path = one_file(tmp_path, CASES["two-engines-one-restarts"][0])
    p = subprocess.run(
        [sys.executable, "-m", "preemptlog", "analyze", str(path), "--tz", "UTC", "-f", "json", "-q"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=e,
        timeout=300,
        check=False,
    )
    assert p.returncode == 0, p.stderr
    rec = json.loads(p.stdout)["summary"]["reconciliation"]
    assert (rec["total"], rec["quality"]) == (33, "lower bound")
    assert src(rec, COUNTER)["exact"] is False


def _same_mtime(tmp_path: Path, pages: dict[str, str], mtime: int) -> Path:
    folder = tmp_path / "tied"
    folder.mkdir()
    for name, text in pages.items():
        p = folder / name
        p.write_text(text, encoding="utf-8")
        os.utime(p, (mtime, mtime))
    return folder


def test_readings_at_one_time_are_ordered_as_a_counter_rises(tmp_path):
    """Two copied scrapes with one mtime and no time of their own: the file names' order (35, then
    10) made a drop with the same _created, read as a restart ("10 preemptions", "1 counter reset").
    A counter only rises within one run: tied readings go by run, then value."""
    folder = _same_mtime(
        tmp_path,
        {"scrape-a.prom": page({"0": (35.0, C)}), "scrape-b.prom": page({"0": (10.0, C)})},
        T + 7200,
    )
    a = analyze([str(folder)], AnalyzeOptions(tz="UTC"))
    pre = a.frames["prom_preemptions"]
    assert pre.get_column("reset").sum() == 0
    assert pre.get_column("increase").drop_nulls().to_list() == [25]


def test_tied_readings_of_two_runs_go_old_run_first(tmp_path):
    """At one time, the old run's 30 (_created C) and the new run's 5 (_created T+100): the old run's
    reading first, whatever the file names say, so the restart is the one dated by _created."""
    folder = _same_mtime(
        tmp_path,
        {"a-new.prom": page({"0": (5.0, T + 100)}), "b-old.prom": page({"0": (30.0, C)})},
        T + 7200,
    )
    a = analyze([str(folder)], AnalyzeOptions(tz="UTC"))
    pre = a.frames["prom_preemptions"].filter(pl.col("increase").is_not_null())
    assert pre.select("reset", "increase").rows() == [(True, 5)]


@pytest.mark.parametrize("openmetrics", [False, True])
def test_a_negative_counter_reading_is_no_reading(tmp_path, openmetrics):
    """A counter counts up from 0: -5 then 35 (one _created) was a count of 40 and "-5 preemption(s)
    before the first scrape". The negative reading is missing (warned); 35 since _created stays."""
    folder = tmp_path / "neg"
    folder.mkdir()
    for t, v in ((T, -5.0), (T + 60, 35.0)):
        (folder / f"metrics-{t}.prom").write_text(page({"0": (v, C)}, openmetrics), encoding="utf-8")
    a = analyze([str(folder)], AnalyzeOptions(tz="UTC"))
    assert a.events.height == 35
    said = [w for w in a.warnings if "counter sample(s) are no count (NaN, +Inf, -Inf or negative)" in w]
    assert said and "-5" in said[0] and "metrics-1796181000.prom" in said[0]


@pytest.mark.parametrize("openmetrics", [False, True])
def test_one_run_relabelled_between_scrapes_is_one_series(tmp_path, openmetrics):
    """The model_name label changed between two scrapes of one engine with one _created (a relabelling
    exporter, an edited page): one process serves one model, so it is one counter. 10 then 30 was two
    series, each reading counted from 0: "40 (exact)"; now 20 in the window, the 10 before it said."""
    d = tmp_path / "relabel"
    d.mkdir()
    (d / f"metrics-{T}.prom").write_text(page({"0": (10.0, C)}, openmetrics))
    (d / f"metrics-{T + 60}.prom").write_text(
        page({"0": (30.0, C)}, openmetrics).replace('model_name="m"', 'model_name="m2"')
    )
    a = analyze([str(d)], AnalyzeOptions(tz="UTC"))
    rec = a.summary()["reconciliation"]
    assert (rec["total"], rec["quality"]) == (20, "exact"), rec["rule"]
    assert a.counters["prometheus"]["series"] == 1
    said = [n for n in a.notes if "carry another model_name than their engine's run" in n]
    assert said and "'m', then 'm2' at" in said[0] and f"metrics-{T + 60}.prom:" in said[0], a.notes


def test_two_runs_with_one_engine_label_and_two_models_stay_two_series(tmp_path):
    """Two servers in one folder, both engine "0", each its own _created: two counters."""
    d = tmp_path / "two"
    d.mkdir()
    for t, (va, vb) in ((T, (10.0, 1.0)), (T + 60, (30.0, 4.0))):
        a_page = page({"0": (va, C)})
        b_page = page({"0": (vb, C + 30)}).replace('model_name="m"', 'model_name="b"')
        (d / f"metrics-{t}.prom").write_text(a_page + "# scrape " + str(t) + "\n" + b_page)
    a = analyze([str(d)], AnalyzeOptions(tz="UTC"))
    pre = a.frames["prom_preemptions"].filter(pl.col("increase").is_not_null())
    assert sorted(pre.select("model_name", "increase").rows()) == [("b", 3), ("m", 20)]
    assert not [n for n in a.notes if "carry another model_name" in n]


@pytest.mark.parametrize("readings", [1, 2])
def test_a_reading_dated_before_its_counters_created_is_warned(tmp_path, readings):
    """_created an hour after the scrape's time (the server's clock ahead of the scraper's): no warning
    said it, and the headline read "since the engine started at 04:10:00 (vLLM's counter at 03:10:00)"."""
    d = tmp_path / "skew"
    d.mkdir()
    for t, v in [(T, 10.0), (T + 60, 30.0)][:readings]:
        (d / f"metrics-{t}.prom").write_text(page({"0": (v, T + 3600)}))
    a = analyze([str(d)], AnalyzeOptions(tz="UTC"))
    said = [w for w in a.warnings if "dated before their counter's _created" in w]
    assert len(said) == 1, a.warnings
    assert f"{readings} reading(s)" in said[0] and "3600 s later" in said[0]
    assert f"metrics-{T}.prom:" in said[0] and "clock skew" in said[0]
    assert a.summary()["reconciliation"]["total"] == (10 if readings == 1 else 20)  # the count stands


def test_a_scrape_time_written_to_the_second_may_be_short_of_created(tmp_path):
    """A scrape within the second after the counter's creation, its time written to the second: no skew."""
    d = tmp_path / "second"
    d.mkdir()
    (d / f"metrics-{T}.prom").write_text(page({"0": (1.0, T + 0.6)}))
    a = analyze([str(d)], AnalyzeOptions(tz="UTC"))
    assert not [w for w in a.warnings if "dated before their counter's _created" in w]
