"""A counter reading that is no count: NaN, +Inf, -Inf (the exposition format allows them) or a negative
value. It was dropped silently (NaN, +Inf) or said without marking the input damaged (-Inf, negative): now
each is skipped with one warning that cites the first one's file:line, and the run exits 5 (damaged input),
like a sample line whose value is unreadable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from preemptlog import AnalyzeOptions, analyze

from ..conftest import run_cli

T = 1773482400  # 2026-03-14T10:00:00Z
SAID = "counter sample(s) are no count (NaN, +Inf, -Inf or negative)"
LINE = 'vllm:num_preemptions_total{{engine="0",model_name="m"}} {v}'


def _text(values: list[str], tmp_path: Path, shape: str) -> Path:
    d = tmp_path / "b"
    d.mkdir()
    if shape == "epoch-named":  # HELP/TYPE, one page per file named by its epoch
        for i, v in enumerate(values):
            (d / f"metrics-{T + 15 * i}.prom").write_text(
                "# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.\n"
                "# TYPE vllm:num_preemptions_total counter\n" + LINE.format(v=v) + "\n"
            )
    elif shape == "timestamps":  # no HELP/TYPE, sample timestamps (ms), one file
        (d / "scrapes.prom").write_text(
            "".join(LINE.format(v=v) + f" {(T + 15 * i) * 1000}\n" for i, v in enumerate(values))
        )
    elif shape == "openmetrics":  # separators and # EOF
        (d / "scrapes.txt").write_text(
            "".join(
                f"# scrape {T + 15 * i}\n# TYPE vllm:num_preemptions counter\n" + LINE.format(v=v) + "\n# EOF\n"
                for i, v in enumerate(values)
            )
        )
    elif shape == "query_range":
        pts = ",".join(f'[{T + 15 * i},"{v}"]' for i, v in enumerate(values))
        (d / "range.json").write_text(
            '{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"__name__":'
            f'"vllm:num_preemptions_total","engine":"0","model_name":"m"}},"values":[{pts}]}}]}}}}\n'
        )
    return d


@pytest.mark.parametrize("shape", ["epoch-named", "timestamps", "openmetrics", "query_range"])
@pytest.mark.parametrize("bad", ["NaN", "+Inf", "-Inf", "-3"])
def test_a_reading_that_is_no_count_is_skipped_with_one_warning(tmp_path, shape, bad):
    d = _text(["5", bad, "9", bad, "12"], tmp_path, shape)
    a = analyze([str(d)], AnalyzeOptions(tz="UTC"))
    rec = a.summary()["reconciliation"]
    assert (rec["total"], rec["quality"]) == (7, "exact"), rec  # 5 -> 9 -> 12: no reset, no jump
    assert a.frames["prom_preemptions"].get_column("reset").sum() == 0
    [w] = [w for w in a.warnings if SAID in w]
    assert w.startswith(f"Prometheus: 2 {SAID} (first: vllm:num_preemptions_total ")
    where = {
        "epoch-named": f"b/metrics-{T + 15}.prom:3",
        "timestamps": "b/scrapes.prom:2",
        "openmetrics": "b/scrapes.txt:7",
    }
    assert where.get(shape, "b/range.json:1:") in w, w
    assert a.partial


def test_the_cli_exits_5_and_says_where(tmp_path):
    d = _text(["5", "NaN", "+Inf", "9"], tmp_path, "epoch-named")
    out = run_cli("analyze", str(d), "-f", "json", "--tz", "UTC")
    assert out.returncode == 5, out.stderr
    s = json.loads(out.stdout)["summary"]
    assert s["reconciliation"]["total"] == 4
    [w] = [w for w in s["warnings"] if SAID in w]
    assert f"b/metrics-{T + 15}.prom:3" in w and "nan" in w


GAUGE_SAID = "usage / hit-rate gauge sample(s) are not a percentage within 0-100"


@pytest.mark.parametrize("name", ["vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc"])
def test_a_usage_gauge_that_is_no_percentage_exits_5_like_a_counter(tmp_path, name):
    """A skipped unreadable usage gauge is damaged input, like a counter that is no count: exit 5, one
    warning citing file:line (it exited 0). vLLM's usage gauge is the KV pool's used fraction: never NaN."""
    d = tmp_path / "g"
    d.mkdir()
    for i, (count, usage) in enumerate((("3", "NaN"), ("5", "0.5"))):
        (d / f"metrics-{T + 15 * i}.prom").write_text(
            "# TYPE vllm:num_preemptions_total counter\n" + LINE.format(v=count) + "\n"
            f"# TYPE {name} gauge\n" + f'{name}{{engine="0",model_name="m"}} {usage}\n'
        )
    out = run_cli("analyze", str(d), "-f", "json", "--tz", "UTC")
    assert out.returncode == 5, out.stderr
    s = json.loads(out.stdout)["summary"]
    said = [w for w in s["warnings"] if GAUGE_SAID in w]
    assert len(said) == 1, s["warnings"]
    assert f"{name} nan at g/metrics-{T}.prom:4" in said[0]
    assert s["reconciliation"]["total"] == 2  # the counter still counts
