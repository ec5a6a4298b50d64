"""The second real-log corpus (../shared/corpus2): every file against its truth.json.

truth.json is read at test time (never copied here); the test skips with a
reason when the corpus is absent. Checked per vLLM log: logged warning lines,
total events (logged + reconstructed), stats lines, the largest KV cache usage,
and every config value the file prints (seen, with that value; keys the file
does not print must not be reported as seen). Per dmon capture: data rows and
GPU indices.
"""

from __future__ import annotations

import json

import polars as pl
import pytest

from preemptlog import AnalyzeOptions, analyze

from ..conftest import corpus2_dir

CONFIG_KEYS = ("block_size", "max_num_seqs", "max_model_len", "num_gpu_blocks")


def _truth() -> dict:
    c = corpus2_dir()
    if c is None:
        return {}
    return json.loads((c / "truth.json").read_text())["files"]


TRUTH = _truth()


def test_truth_was_read(corpus2):
    assert len(TRUTH) >= 13


@pytest.mark.parametrize("name", sorted(TRUTH), ids=sorted(TRUTH))
def test_corpus2_file(name, corpus2):
    truth = TRUTH[name]
    path = corpus2 / name
    result = analyze([str(path)], AnalyzeOptions(tz="UTC", year=2025))
    kinds = {f.kind for f in result.bundle.files}
    assert kinds == {truth["kind"]}, kinds
    if truth["kind"] == "dmon":
        dmon = result.frames.get("dmon")
        assert dmon is not None
        assert dmon.height == truth["rows"]
        assert sorted(set(dmon.get_column("gpu").to_list())) == truth["gpus"]
        return
    ev = result.events
    assert ev.filter(pl.col("kind") == "logged").height == truth["logged_warnings"]
    assert ev.filter(pl.col("kind").is_in(["logged", "reconstructed"])).height == truth["total_events"]
    if truth["counter_runs_max"]:
        assert ev.get_column("cumulative").max() == max(truth["counter_runs_max"])
    assert result.stats.height == truth["stats_lines"]
    kv = result.stats.get_column("kv_usage").max() if result.stats.height else None
    assert kv == truth["max_kv_usage"]
    seen = result.config.filter(pl.col("status") == "seen")
    for key in CONFIG_KEYS:
        values = set(seen.filter(pl.col("key") == key).get_column("value").to_list())
        if key in truth["config"]:
            assert values == {str(truth["config"][key])}, (key, values)
        else:
            assert values == set(), (key, values)
