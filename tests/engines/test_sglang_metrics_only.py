"""SGLang, written by hand: a bundle of SGLang's /metrics scrapes alone, without its retraction counter.

The bundle's engine is known from the metric names' prefix (``sglang:``): it is told in SGLang's words,
never vLLM's. Its count is not visible (no log, no ``sglang:num_retracted_requests_total``): the reason
and the remedy name SGLang's log and its counter. The gauge ``sglang:num_retracted_reqs`` (0.5.5+: the
requests of the last retraction in a stats interval, zeroed at every stats line) above 0 shows that
SGLang retracted: at least as many requests as its samples above 0 that do not repeat the one before,
said as a lower bound with the samples' file:line (never a count, never events).

Before: "Preemptions: not visible (no vLLM log and no /metrics counter in the bundle)", remedy "add
the vLLM server log or /metrics scrapes (vllm:num_preemptions_total)", the summary's engine_kind vllm.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_cli

T0 = 1793607300  # 2026-11-02 08:15:00 UTC


def scrapes(folder: Path, retracted: list[int], *, prefix: str = "sglang") -> Path:
    """One scrape file per value of the retraction gauge, 15 s apart, the KV pool full and requests waiting."""
    folder.mkdir(parents=True, exist_ok=True)
    for i, n in enumerate(retracted):
        lines = []
        if prefix == "sglang":
            lines += [
                "# HELP sglang:num_retracted_reqs The number of retracted requests.",
                "# TYPE sglang:num_retracted_reqs gauge",
                f'sglang:num_retracted_reqs{{model_name="q",tp_rank="0"}} {n}',
                f'sglang:num_retracted_reqs{{model_name="q",tp_rank="1"}} {max(n - 1, 0)}',  # TP ranks: the largest
                'sglang:token_usage{model_name="q",tp_rank="0"} 0.99',
                'sglang:num_queue_reqs{model_name="q",tp_rank="0"} 7',
            ]
        else:
            lines += [
                'vllm:kv_cache_usage_perc{engine="0",model_name="q"} 0.99',
                'vllm:num_requests_waiting{engine="0",model_name="q"} 7',
                'vllm:num_requests_running{engine="0",model_name="q"} 30',
            ]
        (folder / f"metrics-{T0 + 15 * i}.prom").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def run(folder: Path) -> tuple[dict, str]:
    js = run_cli("analyze", str(folder), "--tz", "UTC", "-f", "json")
    assert js.returncode == 0, js.stderr
    human = run_cli("analyze", str(folder), "--tz", "UTC", "-v", "-f", "ndjson")
    assert human.returncode == 0, human.stderr
    return json.loads(js.stdout)["summary"], human.stderr


def test_sglang_gauge_bundle_is_told_in_sglang_words_with_the_gauge_as_a_lower_bound(tmp_path):
    s, text = run(scrapes(tmp_path / "p1", [3, 0, 2]))
    assert s["engine_kind"] == "sglang"
    assert s["count_visible"] is False and s["events"] is None  # never a count, never 0
    nv = s["not_visible"]
    assert "no SGLang log and no /metrics retraction counter" in nv["reason"]
    assert "SGLang server log" in nv["remedy"] and "sglang:num_retracted_requests_total" in nv["remedy"]
    # 3, then 0 (a stats line came), then 2: two retractions, at least 3 + 2 requests (the TP ranks' largest)
    seen = nv["seen"]
    assert seen["retracted_requests_at_least"] == 5
    assert seen["evidence"] == ["p1/metrics-1793607300.prom:3", "p1/metrics-1793607330.prom:3"]
    assert s["to_know_more"][0]["settles"] == "how many retractions happened (the count)"
    headline = " ".join(text.split())
    assert headline.startswith("Retractions: not visible (no SGLang log and no /metrics retraction counter")
    assert (
        "the gauge sglang:num_retracted_reqs shows at least 5 retracted requests "
        "(p1/metrics-1793607300.prom:3, p1/metrics-1793607330.prom:3)"
    ) in headline
    for vllm_words in ("vLLM", "vllm:", "Preemptions", "preemptions"):
        assert vllm_words not in headline, vllm_words


def test_a_repeated_gauge_value_is_counted_once_and_a_zero_gauge_shows_nothing(tmp_path):
    s, _ = run(scrapes(tmp_path / "same", [4, 4, 4]))
    assert s["not_visible"]["seen"]["retracted_requests_at_least"] == 4  # one stats interval read three times
    assert s["not_visible"]["seen"]["evidence"] == ["same/metrics-1793607300.prom:3"]
    s, text = run(scrapes(tmp_path / "zero", [0, 0, 0]))
    assert "seen" not in s["not_visible"]
    assert "no SGLang log" in s["not_visible"]["reason"] and "vllm:" not in s["not_visible"]["remedy"]
    assert " ".join(text.split()).startswith("Retractions: not visible (no SGLang log")


def test_a_vllm_gauge_bundle_keeps_vllm_s_words(tmp_path):
    s, text = run(scrapes(tmp_path / "v", [0, 0, 0], prefix="vllm"))
    assert s["engine_kind"] == "vllm"
    assert s["not_visible"]["remedy"] == "add the vLLM server log or /metrics scrapes (vllm:num_preemptions_total)"
    assert " ".join(text.split()).startswith("Preemptions: not visible (no vLLM log")
