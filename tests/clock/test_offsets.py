"""--offset KIND=SEC / FILE=SEC: applied once, by the pipeline, to every source's output.

For every source kind: an offset of +N s moves every time-typed column of that kind's output
(frames, event parts, config rows, the log records and what the record families make of them)
by exactly N s, and changes nothing else (no other column, no other kind's rows); a file's
offset beats its kind's. Prometheus derives counter intervals across files: its samples are
moved per file before the pairs are made.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pytest

from preemptlog import pipeline
from preemptlog.analysis import AnalyzeOptions
from preemptlog.inputs.workspace import Workspace

from ..conftest import FIXTURES

N = 3.25  # seconds: not a whole number, so rounding would show

PROM = (
    "# scrape 2026-11-30T05:10:20Z\n"
    "# TYPE vllm:num_preemptions_total counter\n"
    'vllm:num_preemptions_total{engine="0",model_name="m"} 10.0\n'
    'vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.90\n'
    "# scrape 2026-11-30T05:10:40Z\n"
    "# TYPE vllm:num_preemptions_total counter\n"
    'vllm:num_preemptions_total{engine="0",model_name="m"} 13.0\n'
    'vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.99\n'
)

# kind -> the bundle file (display name) of that kind
FILES = {
    "vllm-log": "b/vllm.log",
    "dmon": "b/dmon.txt",
    "blocktable": "b/blocktable.jsonl",
    "kvevents": "b/kvevents.jsonl",
    "prometheus": "b/metrics.prom",
}


@pytest.fixture(scope="module")
def bundle_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("offsets") / "b"
    shutil.copytree(FIXTURES / "joined", d)
    (d / "metrics.prom").write_text(PROM)
    return d


def _sources(path: Path, offsets: dict[str, float]) -> pipeline.SourceFrames:
    opts = AnalyzeOptions(tz="UTC", year=2026, offsets=offsets)
    with Workspace() as ws:
        bundle = pipeline.bundle_stage([str(path)], ws, opts, None)
        return pipeline.sources_stage(bundle, ws, opts, "UTC", pipeline.Profile())


def _outputs(src: pipeline.SourceFrames) -> dict[str, pl.DataFrame]:
    out = {f"frame {k}": v for k, v in src.frames.items()}
    out |= {f"event part {i}": e for i, e in enumerate(src.event_parts)}
    out |= {"records": src.records, "stats": src.stats, "config": src.config}
    return out


def _assert_moved(before: pl.DataFrame, after: pl.DataFrame, by_source: dict[str, float], what: str) -> int:
    """Every Datetime column moved by its row's source's seconds, every other column equal; the
    number of time values that moved."""
    assert before.columns == after.columns and before.height == after.height, what
    times = [c for c, t in before.schema.items() if isinstance(t, pl.Datetime)]
    rest = [c for c in before.columns if c not in times]
    assert before.select(rest).equals(after.select(rest)), f"{what}: a column other than a time changed"
    if not times or before.height == 0:
        return 0
    if "source" in before.columns:
        us = before.get_column("source").replace_strict(by_source, default=0.0, return_dtype=pl.Float64) * 1e6
    else:
        assert not any(by_source.values()), f"{what}: no source column to tell whose rows moved"
        us = pl.Series([0.0] * before.height)
    moved = 0
    for c in times:
        diff = (after.get_column(c) - before.get_column(c)).dt.total_microseconds()
        assert before.get_column(c).is_null().equals(after.get_column(c).is_null()), f"{what}.{c}: nulls changed"
        ok = diff.is_null() | (diff.cast(pl.Float64) == us.round(0))
        assert ok.all(), f"{what}.{c}: moved by {diff.filter(~ok).head(3).to_list()} us"
        moved += int(((us != 0) & diff.is_not_null()).sum())
    return moved


@pytest.fixture(scope="module")
def base(bundle_dir: Path) -> dict[str, pl.DataFrame]:
    return _outputs(_sources(bundle_dir, {}))


@pytest.mark.parametrize("kind", list(FILES))
def test_a_kind_offset_moves_that_kind_only_by_exactly_n(bundle_dir, base, kind):
    moved = _outputs(_sources(bundle_dir, {kind: N}))
    assert moved.keys() == base.keys()
    n = sum(_assert_moved(base[k], moved[k], {FILES[kind]: N}, k) for k in base)
    assert n > 0, f"no time of {kind} moved"


@pytest.mark.parametrize("kind", list(FILES))
def test_a_file_offset_beats_its_kind(bundle_dir, base, kind):
    moved = _outputs(_sources(bundle_dir, {kind: 100.0, FILES[kind]: N}))
    n = sum(_assert_moved(base[k], moved[k], {FILES[kind]: N}, k) for k in base)
    assert n > 0


def test_prometheus_series_across_files_is_made_on_the_moved_clocks(tmp_path):
    """A counter series spans two scrape files of one folder: the pair's start is the first
    file's (moved by its offset), its end the second's (moved by its own), the events between."""
    d = tmp_path / "p"
    d.mkdir()
    a, b = PROM.split("# scrape 2026-11-30T05:10:40Z\n")
    (d / "a.prom").write_text(a)
    (d / "b.prom").write_text("# scrape 2026-11-30T05:10:40Z\n" + b)
    (d / "vllm.log").write_text((FIXTURES / "joined" / "vllm.log").read_text())

    def pairs(offsets: dict[str, float]) -> pl.DataFrame:
        return _sources(d, offsets).frames["prom_preemptions"].filter(pl.col("increase").is_not_null())

    before, after = pairs({}), pairs({"p/a.prom": 2.0, "p/b.prom": -3.0})
    assert before.height == after.height == 1
    start = (after.item(0, "start") - before.item(0, "start")).total_seconds()
    end = (after.item(0, "end") - before.item(0, "end")).total_seconds()
    assert (start, end) == (2.0, -3.0)
    # a per-file offset that swaps the two scrapes makes the pair the other way round
    swapped = pairs({"p/a.prom": 30.0})
    assert swapped.item(0, "source") == "p/a.prom" and swapped.item(0, "reset")
