"""One /metrics scrape piped on standard input (``curl -s host:8000/metrics | preemptlog analyze -``).

Standard input has no file name and no mtime, so its scrape had no time: the reading was left out
of the count ("0 preemptions counted", "engine 0: 42 at None") and ``--fail-on any`` exited 0. The
rule (sources/prometheus/scrapetime.py): a scrape read from standard input was taken no later than
the moment preemptlog read it; that moment is its time, said as an assumption, the way a file's
mtime is. vLLM's counter holds the preemptions since its ``_created`` whatever the reading time, so
the reading counts like the same scrape in a file whose name carries no time (``scrape.prom``: its
mtime). And a series' only reading whose scrape gets no time at all (several scrapes in one file,
only the last one timed) still counts: never a silent 0.

Every run here is a real ``preemptlog`` process with pipes (tests/render/test_terminal.py's
``in_pipes``), the scrape written to its standard input.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from ..conftest import ROOT
from ..support.scrapes import page

CREATED = 1796180700  # 2026-12-02T03:05:00Z: the engine's start (the counter's _created)
FILE_TIME = 1796181000  # 2026-12-02T03:10:00Z


def _env() -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("PREEMPTLOG_")}
    e.pop("LC_ALL", None)
    return e | {"LANG": "C.UTF-8", "NO_COLOR": "1", "TZ": "UTC", "PREEMPTLOG_PROGRESS_AFTER": "1000"}


def in_pipes(args: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "preemptlog", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=_env(),
        cwd=ROOT,
        timeout=300,
        check=False,
    )


def words(text: str) -> str:
    return " ".join(text.split())


# ---------------------------------------------------------------- hand-written scrapes


# name -> (the page, the count, its quality, per engine)
SHAPES: dict[str, tuple[str, int, str, dict[str, int]]] = {
    "one-engine-created": (page({"0": (42.0, CREATED)}), 42, "exact", {"0": 42}),
    "one-engine-no-created": (page({"0": (42.0, None)}), 42, "lower bound", {"0": 42}),
    "two-engines-created": (page({"0": (42.0, CREATED), "1": (7.0, CREATED + 5)}), 49, "exact", {"0": 42, "1": 7}),
    "openmetrics-eof": (page({"0": (42.0, CREATED)}, openmetrics=True), 42, "exact", {"0": 42}),
    "openmetrics-two-engines": (
        page({"0": (3.0, CREATED), "1": (11.0, CREATED)}, openmetrics=True),
        14,
        "exact",
        {"0": 3, "1": 11},
    ),
}


def _summary(p: subprocess.CompletedProcess[str]) -> dict:
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)["summary"]


def _per_engine(s: dict) -> dict[str, int]:
    return {r["engine"]: r["in_events"] for r in s["reconciliation"]["single_readings"]}


# ---------------------------------------------------------------- the tests


@pytest.mark.parametrize("shape", list(SHAPES))
def test_one_scrape_on_stdin_counts_since_the_engine_started(shape):
    text, total, quality, per_engine = SHAPES[shape]
    before = time.time()
    s = _summary(in_pipes(["analyze", "-", "--tz", "UTC", "-f", "json", "-q"], text))
    after = time.time()
    rec = s["reconciliation"]
    assert (s["events"], rec["total"], rec["quality"]) == (total, total, quality), rec["rule"]
    assert _per_engine(s) == per_engine
    # the reading's time: the moment preemptlog read standard input (rounded up to the second)
    for r in rec["single_readings"]:
        t = datetime.fromisoformat(r["time"]).timestamp()
        assert math.floor(before) <= t <= math.ceil(after), r
        assert r["from"].startswith("<stdin>:")
    if quality == "exact":
        assert all(str(r["engine_start"]).endswith("(_created)") for r in rec["single_readings"])
    # ... said as an assumption, like every other scrape time
    said = [a for a in s["assumptions"] if a["topic"] == "scrape time"]
    assert len(said) == 1 and said[0]["scope"] == "<stdin>", s["assumptions"]
    assert said[0]["value"].startswith("no later than the moment preemptlog read standard input ("), said
    assert "None" not in rec["rule"]


@pytest.mark.parametrize("shape", list(SHAPES))
def test_fail_on_any_fails_on_a_piped_scrape(shape):
    p = in_pipes(["analyze", "-", "--tz", "UTC", "--fail-on", "any", "-q"], SHAPES[shape][0])
    assert p.returncode == 4, (p.returncode, p.stderr)


def test_a_piped_reading_of_0_is_0_and_does_not_fail():
    text = page({"0": (0.0, CREATED)})
    s = _summary(in_pipes(["analyze", "-", "--tz", "UTC", "-f", "json", "-q"], text))
    assert (s["events"], s["reconciliation"]["quality"]) == (0, "exact")
    assert in_pipes(["analyze", "-", "--tz", "UTC", "--fail-on", "any", "-q"], text).returncode == 0


def test_the_words_say_the_count_and_the_assumed_time():
    p = in_pipes(["analyze", "-", "--tz", "UTC", "-v"], SHAPES["one-engine-created"][0])
    assert p.returncode == 0, p.stderr
    said = words(p.stderr)
    assert "0 preemptions counted" not in said and "at None" not in said
    assert "reconciled count: 42 (exact)" in said
    assert "assumed scrape time (<stdin>): no later than the moment preemptlog read standard input (" in said
    assert "since the engine's start at <stdin>:18 (_created)" in said


@pytest.mark.parametrize("shape", ["one-engine-created", "one-engine-no-created", "two-engines-created"])
def test_stdin_counts_what_a_scrape_file_without_a_time_in_its_name_counts(tmp_path, shape):
    """The same scrape as ``scrape.prom`` (no time in its name: its mtime is its time) and on stdin:
    the same count and quality; only the reading time and its assumption differ."""
    text, total, quality, per_engine = SHAPES[shape]
    f = tmp_path / "e2" / "scrape.prom"
    f.parent.mkdir()
    f.write_text(text)
    os.utime(f, (FILE_TIME, FILE_TIME))
    from_file = _summary(in_pipes(["analyze", str(f.parent), "--tz", "UTC", "-f", "json", "-q"]))
    piped = _summary(in_pipes(["analyze", "-", "--tz", "UTC", "-f", "json", "-q"], text))
    for s in (from_file, piped):
        assert (s["events"], s["reconciliation"]["quality"]) == (total, quality)
        assert _per_engine(s) == per_engine
    assert {r["time"] for r in from_file["reconciliation"]["single_readings"]} == {"2026-12-02T03:10:00+00:00"}
    file_said = [a["value"] for a in from_file["assumptions"] if a["topic"] == "scrape time"]
    assert file_said == ["the file mtime (2026-12-02T03:10:00+00:00)"]


def test_a_scrape_on_stdin_with_its_own_time_keeps_it():
    """A separator line's time is the scrape's own: the read time is used only when there is none."""
    text = "# scrape 2026-12-02T03:10:00Z\n" + page({"0": (42.0, CREATED)})
    s = _summary(in_pipes(["analyze", "-", "--tz", "UTC", "-f", "json", "-q"], text))
    assert s["events"] == 42 and s["reconciliation"]["quality"] == "exact"
    assert [r["time"] for r in s["reconciliation"]["single_readings"]] == ["2026-12-02T03:10:00+00:00"]
    assert not [a for a in s["assumptions"] if "standard input" in str(a["value"])]


@pytest.mark.parametrize("piped", [False, True])
def test_an_only_reading_without_any_time_still_counts(tmp_path, piped):
    """Two scrapes in one input, the first (engine 1's only reading) without a time, the second timed
    by its separator line: engine 1's 7 since its _created are counted, not placed in time, read at
    an unknown time (they were left out: "engine 1: 7 at None")."""
    text = page({"1": (7.0, CREATED)}) + "# scrape 2026-12-02T03:10:00Z\n" + page({"0": (5.0, CREATED)})
    if piped:
        p = in_pipes(["analyze", "-", "--tz", "UTC", "-f", "json", "-q"], text)
    else:
        f = tmp_path / "all.prom"
        f.write_text(text)
        p = in_pipes(["analyze", str(f), "--tz", "UTC", "-f", "json", "-q"])
    s = _summary(p)
    rec = s["reconciliation"]
    assert (s["events"], rec["quality"]) == (12, "exact"), rec["rule"]
    assert _per_engine(s) == {"0": 5, "1": 7}
    assert "engine 1: 7 at an unknown time" in rec["rule"] and "None" not in rec["rule"]
    v = in_pipes(
        ["analyze", "-" if piped else str(tmp_path / "all.prom"), "--tz", "UTC", "-v"], text if piped else None
    )
    assert "read at an unknown time" in words(v.stderr) and "at None" not in v.stderr


def test_an_only_reading_without_any_time_beside_the_logs_events_is_a_lower_bound(tmp_path):
    """Without a time the log's own events of that engine cannot be told before or after the reading:
    all are taken off (nothing counted twice) and the count is a lower bound."""
    from preemptlog import AnalyzeOptions, analyze

    stats = (
        "(APIServer pid=1) INFO 12-02 03:0{m}:00 [loggers.py:318] Engine 000: Avg prompt throughput: 10.0 tokens/s, "
        "Avg generation throughput: 400.0 tokens/s, Running: 28 reqs, Waiting: 4 reqs, Preemptions: {n}, GPU KV "
        "cache usage: 99.0%, Prefix cache hit rate: 20.0%"
    )
    (tmp_path / "vllm.log").write_text(stats.format(m=6, n=2) + "\n" + stats.format(m=7, n=1) + "\n")
    # engine 1 started after the log's first line (03:06): its reading counts since then (not a baseline)
    (tmp_path / "all.prom").write_text(
        page({"0": (7.0, CREATED)}) + "# scrape 2026-12-02T03:10:00Z\n" + page({"1": (5.0, CREATED + 120)})
    )
    a = analyze([str(tmp_path)], AnalyzeOptions(tz="UTC", year=2026))
    rec = a.summary()["reconciliation"]
    assert rec["total"] == a.events.height == 3 + 4 + 5, rec
    assert rec["quality"] == "lower bound"
    assert any("the log's 3 event(s) of that engine are taken off" in n for n in a.notes), a.notes


def test_the_read_time_is_that_of_standard_input_only(tmp_path):
    """A named file keeps its own mtime (its read time is not asked for)."""
    from preemptlog.inputs.files import InputFile

    f = tmp_path / "x.prom"
    f.write_text("x\n")
    named = InputFile(0, Path(f), "x.prom", "prometheus", None, 2, 1.0, None)
    piped = InputFile(0, Path(f), "<stdin>", "prometheus", None, 2, None, None, is_stdin=True)
    gone = InputFile(0, tmp_path / "gone", "<stdin>", "prometheus", None, 2, None, None, is_stdin=True)
    assert named.read_at() is None and gone.read_at() is None
    assert piped.read_at() == f.stat().st_mtime
