"""A usage percentage that is no percentage, from /metrics and from SGLang's batch lines: the same
rule as vLLM's stats lines (tests/engines/test_vllm_bad_values.py, model.evidence.PERCENT_MAX).

A ``vllm:gpu_cache_usage_perc`` (or ``kv_cache_usage_perc``, ``sglang:token_usage``) gauge is a
fraction of the KV pool: NaN, Inf, a negative value or one beyond 1.0 (250 %) is no reading, null,
never the largest of an engine's ranks and never evidence; a warning gives the count and the first
file:line. SGLang's ``token usage: 2.50`` likewise, with a note. Hand-written inputs, the library.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from preemptlog.analysis import AnalyzeOptions, analyze

OPTS = AnalyzeOptions(tz="UTC", year=2026)


def scrapes(values: list[str], name: str = "vllm:gpu_cache_usage_perc", ranks: int = 1) -> str:
    out = []
    for i, v in enumerate(values):
        out.append(f"# scrape 2026-03-14T10:00:{10 * i:02d}Z")
        out.append("# TYPE vllm:num_preemptions_total counter")
        out.append(f'vllm:num_preemptions_total{{engine="0",model_name="m"}} {10 + 2 * i}')
        for r in range(ranks):
            value = v if r == 0 else "0.40"
            out.append(f'{name}{{engine="0",model_name="m",pid="{r}"}} {value}')
    return "\n".join(out) + "\n"


def kv_series(tmp_path: Path, text: str) -> tuple[list, list[str]]:
    p = tmp_path / "metrics.prom"
    p.write_text(text)
    a = analyze([str(p)], OPTS)
    series = a.frames["prom_series"].sort("time").get_column("kv_usage").to_list()
    return series, list(a.warnings)


def test_an_impossible_usage_gauge_is_no_reading(tmp_path):
    series, warnings = kv_series(tmp_path, scrapes(["2.5", "NaN", "+Inf", "-0.1", "0.5"]))
    assert series == [None, None, None, None, 50.0]
    bad = [w for w in warnings if "not a percentage within 0-100" in w]
    assert len(bad) == 1, warnings
    assert "4 usage / hit-rate gauge sample(s)" in bad[0]
    assert f"vllm:gpu_cache_usage_perc 2.5 at {tmp_path / 'metrics.prom'}:4" in bad[0]


def test_an_impossible_rank_never_wins_over_a_real_one(tmp_path):
    """Ranks of one engine: the largest value per scrape is used; a 250 % rank is no value, so the
    other rank's reading stands."""
    series, _ = kv_series(tmp_path, scrapes(["2.5", "0.9"], ranks=2))
    assert series == [40.0, 90.0]


def test_real_usage_gauges_are_untouched(tmp_path):
    series, warnings = kv_series(tmp_path, scrapes(["0.0", "1.0", "0.97"], name="vllm:kv_cache_usage_perc"))
    assert series == [0.0, 100.0, 97.0]
    assert not [w for w in warnings if "percentage" in w]


def test_sglang_token_usage_beyond_one_is_no_reading(tmp_path):
    lines = [
        "[2025-03-07 21:49:30 TP0] Decode batch. #running-req: 63, #token: 198800, token usage: 2.50, "
        "gen throughput (token/s): 1010.32, #queue-req: 14",
        "[2025-03-07 21:49:40 TP0] Decode batch. #running-req: 61, #token: 197900, token usage: 0.99, "
        "gen throughput (token/s): 980.10, #queue-req: 16",
    ]
    p = tmp_path / "sglang.log"
    p.write_text("\n".join(lines) + "\n")
    a = analyze([str(p)], OPTS)
    kv = a.stats.filter(pl.col("family") == "sglang").sort("time").get_column("kv_usage").to_list()
    assert kv == [None, 99.0]
    assert any(f"1 batch line(s) with a token usage beyond 1.0 (first: 2.5 at {p}:1)" in n for n in a.notes), a.notes
