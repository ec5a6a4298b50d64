"""Every metric spelling and benchmark capture format (fixtures/prometheus/shapes, docs/prometheus.md).

Hand-built in the shapes the tools write: vLLM's ``vllm:`` names and their
underscore / Ray Serve spellings, AIPerf's ``server_metrics_export.jsonl``,
llm-d-benchmark's gzipped ``<pod>_<epoch>_metrics.log`` scrape logs, and
Prometheus ``query_range`` answers with several series per metric.
"""

from __future__ import annotations

import polars as pl
import pytest

from preemptlog import AnalyzeOptions, analyze
from preemptlog.sources import prometheus as prom
from preemptlog.sources import sniff

from ..conftest import FIXTURES, write_lines

SHAPES = FIXTURES / "prometheus" / "shapes"


def run(*paths):
    return analyze([str(p) for p in paths], AnalyzeOptions(tz="UTC", rules=False))


def increases(a) -> dict[tuple[str, str], list[int]]:
    p = a.frames["prom_preemptions"].filter(pl.col("increase").is_not_null()).sort("end")
    out: dict[tuple[str, str], list[int]] = {}
    for r in p.iter_rows(named=True):
        out.setdefault((r["scope"].split("|")[-1], r["engine"]), []).append(r["increase"])
    return out


@pytest.mark.parametrize(
    "name,canonical",
    [
        ("vllm:num_preemptions_total", "vllm:num_preemptions_total"),
        ("vllm_num_preemptions_total", "vllm:num_preemptions_total"),
        ("ray_vllm:num_preemptions", "vllm:num_preemptions"),
        ("ray_vllm_num_preemptions_total", "vllm:num_preemptions_total"),
        ("vllm:num_preemptions_created", "vllm:num_preemptions_created"),
        ("vllm_kv_cache_usage_perc", "vllm:kv_cache_usage_perc"),
    ],
)
def test_canonical_names(name, canonical):
    assert prom.canonical_name(name) == canonical


@pytest.mark.parametrize(
    "path",
    [
        "underscore-spelling.prom",
        "ray-serve-no-total.prom",
        "tp-ranks-dp-engines.prom",
        "gauges-only-no-counter.prom",
        "query_range-several-series.json",
        "aiperf/server_metrics_export.jsonl",
    ],
)
def test_shapes_sniff_as_prometheus(path):
    kind, score = sniff((SHAPES / path).read_text()[:65536])
    assert kind == "prometheus" and score > 50


def test_underscore_spelling():
    a = run(SHAPES / "underscore-spelling.prom")
    assert list(increases(a).values()) == [[7, 2]]
    assert a.events.filter(pl.col("kind") == "interval").height == 9
    series = a.frames["prom_series"]
    assert series.get_column("kv_usage").max() == pytest.approx(99.0)


def test_ray_serve_spelling_without_total():
    a = run(SHAPES / "ray-serve-no-total.prom")
    assert [v for v in increases(a).values()] == [[4]]
    assert a.events.height == 4


def test_ranks_of_one_engine_are_never_summed():
    a = run(SHAPES / "tp-ranks-dp-engines.prom")
    inc = {eng: v for (_, eng), v in increases(a).items()}
    assert inc == {"0": [6], "1": [2]}  # engine 0: 4 -> 10 on both ranks, not 8 -> 20
    s = a.frames["prom_series"].filter(pl.col("engine") == "0").sort("time")
    assert s.get_column("kv_usage").to_list() == pytest.approx([82.0, 99.0])  # the larger rank, never 162 / 196
    assert s.get_column("running").to_list() == [30.0, 30.0]
    assert any("other ranks of the same engine" in n for n in a.notes)


def test_missing_counter_is_not_visible_never_zero():
    a = run(SHAPES / "gauges-only-no-counter.prom")
    assert a.events.height == 0
    s = a.frames["prom_series"]
    assert s.height == 2 and s.get_column("preemptions_total").null_count() == 2
    assert s.get_column("preemptions").null_count() == 2
    assert a.counters["prometheus"]["counter_totals"] == []
    rec = a.summary()["reconciliation"]
    assert rec["quality"] != "exact"


def test_aiperf_export_per_endpoint():
    a = run(SHAPES / "aiperf" / "server_metrics_export.jsonl")
    inc = {inst: v for (inst, _), v in increases(a).items()}
    assert inc == {"http://10.0.0.1:8000/metrics": [6, 1], "http://10.0.0.2:8000/metrics": [3]}
    assert a.events.height == 10
    # Endpoint B's two records are 60 s apart (AIPerf deduplicates identical scrapes): one interval, exact.
    b = a.frames["prom_preemptions"].filter(
        pl.col("scope").str.ends_with("10.0.0.2:8000/metrics") & pl.col("increase").is_not_null()
    )
    r = b.row(0, named=True)
    assert (r["end"] - r["start"]).total_seconds() == 60
    hist = a.counters["prometheus"]["histogram"]
    assert hist == {"finished_requests": 6.0, "preemptions_of_finished_requests": 9.0, "since_engine_start": False}


def test_llm_d_benchmark_gzipped_scrape_logs_per_pod():
    a = run(SHAPES / "llm-d")
    inc = {inst: v for (inst, _), v in increases(a).items()}
    assert inc == {"qwen-decode-7d9f-abc": [3, 7], "qwen-decode-7d9f-xyz": [0, 2]}
    times = sorted(set(a.frames["prom_preemptions"].get_column("end").to_list()))
    assert [t.isoformat() for t in times] == [
        "2026-03-14T10:00:00+00:00",
        "2026-03-14T10:00:15+00:00",
        "2026-03-14T10:00:30+00:00",
    ]


def test_query_range_several_series_per_metric():
    a = run(SHAPES / "query_range-several-series.json")
    inc = {inst: v for (inst, _), v in increases(a).items()}
    assert inc == {"10.0.0.1:8000": [3, 0, 5], "10.0.0.2:8000": [0, 1, 0]}
    assert a.events.height == 9


@pytest.mark.parametrize("spelling", ["vllm:", "vllm_", "ray_vllm:", "ray_vllm_"])
@pytest.mark.parametrize("suffix", ["_total", ""])
def test_every_spelling_counts(spelling, suffix, tmp_path):
    lines = []
    for i, v in enumerate([2, 9]):
        lines += [
            f"# scrape 2026-03-14T10:00:{15 * (i + 1):02d}Z",
            f'{spelling}num_preemptions{suffix}{{engine="0"}} {v}.0',
        ]
    p = write_lines(tmp_path / "m.prom", lines)
    a = run(p)
    assert a.events.filter(pl.col("kind") == "interval").height == 7
