"""The pipeline's contract: stages return frozen results, Analysis is built once and frozen,
views are copies, the event set is decided by reconcile.event_set alone."""

from __future__ import annotations

import dataclasses

import polars as pl
import pytest

from preemptlog import pipeline
from preemptlog.analysis import Analysis, AnalyzeOptions, analyze
from preemptlog.errors import InputError
from preemptlog.events import reconcile
from preemptlog.inputs.workspace import Workspace
from preemptlog.render.view import Filters, apply_filters, with_columns

from ..conftest import FIXTURES, write_lines

DEMO = str(FIXTURES / "guide-demo")
OPTS = AnalyzeOptions(tz="UTC")

LOG = [
    "INFO 08-01 10:00:00 [loggers.py:1] Engine 000: Avg prompt throughput: 1.0 tokens/s, Avg generation "
    "throughput: 1.0 tokens/s, Running: 4 reqs, Waiting: 2 reqs, GPU KV cache usage: 99.0%, Prefix cache hit rate: "
    "0.0%",
    "WARNING 08-01 10:00:01 scheduler.py:1077] Sequence group cmpl-1 is preempted by PreemptionMode.RECOMPUTE mode "
    "because there is not enough KV cache space. This can affect the end-to-end performance. Increase "
    "gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
    "total_num_cumulative_preemption=1",
]


@pytest.fixture(scope="module")
def demo() -> Analysis:
    return analyze([DEMO], OPTS)


def test_analysis_is_frozen(demo):
    with pytest.raises(dataclasses.FrozenInstanceError):
        demo.events = demo.events.clear()  # type: ignore[misc]


def test_views_are_copies(demo):
    before = (demo.events.height, demo.filters, demo.columns)
    gate = demo.verdicts.get_column("gate").drop_nulls()[0]
    view = apply_filters(demo, Filters(gates=[gate]))
    cols = with_columns(demo, ["event_id", "time"])
    assert view is not demo and view.filters is not None and view.events.height < demo.events.height
    assert cols.columns == ["event_id", "time"]
    assert (demo.events.height, demo.filters, demo.columns) == before


def test_the_summary_is_made_once_and_handed_out_as_a_copy(demo, monkeypatch):
    from preemptlog.model import result

    fresh = analyze([DEMO], OPTS)
    first = fresh.summary()
    made = result.SUMMARIZER[0]
    calls = []
    monkeypatch.setattr(result, "SUMMARIZER", [lambda a: calls.append(a) or made(a)])
    nested = next(k for k, v in first.items() if isinstance(v, (dict, list)) and v)
    first[nested].clear()  # a caller changes its copy, deep inside
    first["events"] = "changed by a caller"
    again = fresh.summary()
    assert calls == [], "the second call reads the summary made by the first"
    assert again == demo.summary() and again["events"] != "changed by a caller" and again[nested]
    # a view is another analysis: its own summary
    view = apply_filters(fresh, Filters(gates=[fresh.verdicts.get_column("gate").drop_nulls()[0]]))
    assert view.summary() != again and any(c is view for c in calls)


def test_explain_does_not_touch_the_analysis(demo):
    from preemptlog.commands.explain import build

    evidence = demo.evidence
    build(demo, demo.events.get_column("event_id")[0], 10.0, 2.0)
    assert demo.evidence is evidence


def test_stages_return_frozen_results(tmp_path):
    p = write_lines(tmp_path / "vllm.log", LOG)
    opts = AnalyzeOptions(tz="UTC", year=2026)
    with Workspace() as ws:
        bundle = pipeline.bundle_stage([str(p)], ws, opts, None)
        src = pipeline.sources_stage(bundle, ws, opts, "UTC", pipeline.Profile())
    assert dataclasses.is_dataclass(src) and src.__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert src.records.height == 2 and src.stats.height == 1 and len(src.event_parts) >= 4
    assert isinstance(src.report, pipeline.Report) and not src.report.partial
    with pytest.raises(dataclasses.FrozenInstanceError):
        src.records = src.records.clear()  # type: ignore[misc]


def test_the_event_set_has_one_home(tmp_path, monkeypatch):
    calls = []
    real = reconcile.event_set

    def spy(a, parts):
        calls.append(len(parts))
        return real(a, parts)

    monkeypatch.setattr(pipeline, "event_set", spy)
    p = write_lines(tmp_path / "vllm.log", LOG)
    a = analyze([str(p)], AnalyzeOptions(tz="UTC", year=2026))
    assert len(calls) == 1 and a.events.height == 1
    assert list(a.counters)[-2:] == ["overlap", "reconciliation"]
    assert a.counters["reconciliation"]["total"] == 1


def test_a_stage_after_the_verdicts_sees_them(tmp_path, monkeypatch):
    seen = []

    def stage(draft: pipeline.Draft) -> dict:
        seen.append((draft.verdicts.height, draft.evidence.height))
        return {}

    monkeypatch.setattr(pipeline, "AFTER_VERDICTS", [stage])
    p = write_lines(tmp_path / "vllm.log", LOG)
    analyze([str(p)], AnalyzeOptions(tz="UTC", year=2026))
    assert seen == [(1, 1)]


def test_nothing_recognisable_fails_before_the_sources(tmp_path):
    (tmp_path / "x.bin").write_bytes(b"\x00\x01\x02" * 100)
    with Workspace() as ws, pytest.raises(InputError, match="nothing recognisable") as err:
        pipeline.bundle_stage([str(tmp_path)], ws, OPTS, None)
    # what it expected: every registered engine's server log by name
    assert "a vLLM or SGLang server log" in str(err.value.hint)


def test_rules_stage_takes_the_thresholds():
    r = pipeline.rules_stage(AnalyzeOptions())
    assert r.ruleset is not None and r.kv_ceiling == 95.0 and r.lookback_steps == 3
    r = pipeline.rules_stage(AnalyzeOptions(rules=False, kv_ceiling=90.0))
    assert r.ruleset is None and r.kv_ceiling == 90.0


def test_one_dtype_map():
    from preemptlog.model.frames import polars_schema

    s = polars_schema({"a": "Int64", "t": "Datetime(time_unit='us', time_zone='UTC')", "s": "String"})
    assert s == pl.Schema({"a": pl.Int64, "t": pl.Datetime("us", "UTC"), "s": pl.String})
