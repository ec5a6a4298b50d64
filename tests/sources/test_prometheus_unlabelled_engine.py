"""A /metrics reading without an engine label beside the same server's readings with engine="0"/"1" (an
older vLLM's page, or a relabelled / federated one that dropped the label). It was read as engine 0:
engine 0's series got a second source (10, 3 without the label, 14: a reset that never was, "at least
19" for 4 + 5). Now it is never engine 0's: within the labelled readings' span it is not counted, before
or after it it is another run, a series of its own (engine "unlabelled"), and the count across the two
runs is a lower bound (the server restarted between them); a note says which."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from preemptlog import AnalyzeOptions, analyze

from ..conftest import run_cli

T = 1773482400  # 2026-03-14T10:00:00Z
NAME = "vllm:num_preemptions_total"


def _line(engine: str | None, v: float) -> str:
    labels = (f'engine="{engine}",' if engine is not None else "") + 'model_name="m"'
    return f"{NAME}{{{labels}}} {v}"


def _write(tmp_path: Path, scrapes: list[tuple[int, dict[str | None, float]]], shape: str) -> Path:
    d = tmp_path / "b"
    d.mkdir()
    if shape == "epoch-named":
        for t, eng in scrapes:
            (d / f"metrics-{t}.prom").write_text(
                f"# HELP {NAME} Cumulative number of preemption from the engine.\n# TYPE {NAME} counter\n"
                + "".join(_line(e, v) + "\n" for e, v in eng.items())
            )
    elif shape == "timestamps":
        (d / "all.prom").write_text(
            "".join(_line(e, v) + f" {t * 1000}\n" for t, eng in scrapes for e, v in eng.items())
        )
    elif shape == "openmetrics":
        (d / "all.txt").write_text(
            "".join(
                f"# scrape {t}\n# TYPE vllm:num_preemptions counter\n"
                + "".join(_line(e, v) + "\n" for e, v in eng.items())
                + "# EOF\n"
                for t, eng in scrapes
            )
        )
    return d


def _rec(d: Path):
    a = analyze([str(d)], AnalyzeOptions(tz="UTC"))
    return a, a.summary()["reconciliation"]


SHAPES = ["epoch-named", "timestamps", "openmetrics"]


@pytest.mark.parametrize("shape", SHAPES)
def test_an_unlabelled_reading_among_labelled_ones_is_no_reading_of_engine_0(tmp_path, shape):
    d = _write(
        tmp_path,
        [(T, {"0": 10, "1": 20}), (T + 15, {None: 3}), (T + 30, {"0": 14, "1": 25})],
        shape,
    )
    a, rec = _rec(d)
    assert (rec["total"], rec["quality"]) == (9, "exact"), rec["rule"]  # 4 + 5: no reset, nothing twice
    assert a.frames["prom_preemptions"].get_column("reset").sum() == 0
    assert sorted(a.frames["prom_preemptions"].get_column("engine").unique().to_list()) == ["0", "1"]
    [n] = [n for n in a.notes if "carry no engine label" in n]
    assert n.startswith(f"Prometheus: 1 counter reading(s) carry no engine label (first: {NAME} at b/")
    assert "label their engine (0, 1)" in n and "not counted, never as engine 0's" in n


@pytest.mark.parametrize("shape", SHAPES)
def test_an_unlabelled_run_before_the_labelled_one_is_a_series_of_its_own(tmp_path, shape):
    """An older vLLM (no engine label) upgraded to V1: two runs, each counted by its own increases."""
    d = _write(
        tmp_path,
        [(T, {None: 3}), (T + 15, {None: 7}), (T + 60, {"0": 0}), (T + 75, {"0": 4})],
        shape,
    )
    a, rec = _rec(d)
    assert (rec["total"], rec["quality"]) == (8, "lower bound"), rec["rule"]
    got = {r["engine"]: r["value"] for r in rec["counter_readings"]}
    assert got == {"0": 4, "unlabelled": 7}
    [n] = [n for n in a.notes if "carry no engine label" in n]
    assert "2 counter reading(s)" in n and "a series of its own (engine 'unlabelled')" in n


def test_pages_without_any_engine_label_are_engine_0_as_before(tmp_path):
    d = _write(tmp_path, [(T, {None: 3}), (T + 15, {None: 7})], "epoch-named")
    a, rec = _rec(d)
    assert (rec["total"], rec["quality"]) == (4, "exact")
    assert [r["engine"] for r in rec["counter_readings"]] == ["0"]
    assert not [n for n in a.notes if "engine label" in n]


def test_the_cli_counts_each_engine_once(tmp_path):
    d = _write(
        tmp_path,
        [(T, {"0": 10, "1": 20}), (T + 15, {None: 3}), (T + 30, {"0": 14, "1": 25})],
        "epoch-named",
    )
    out = run_cli("analyze", str(d), "-f", "json", "--tz", "UTC")
    assert out.returncode == 0, out.stderr
    s = json.loads(out.stdout)["summary"]
    assert s["reconciliation"]["total"] == 9 and s["reconciliation"]["quality"] == "exact"
    assert any("carry no engine label" in n for n in s["notes"])
