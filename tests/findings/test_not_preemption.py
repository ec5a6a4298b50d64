"""Not a preemption, said as such (issue 38, item 6).

A V1 server stuck with ``Running: 0 reqs, Waiting: 14 reqs, GPU KV cache usage: 0.0%`` for minutes,
its counter flat, ``vllm:num_requests_waiting_by_reason{reason="capacity"}`` > 0 (vLLM #53130's
admission wedge, #39734's request that can never fit): the answer is ``0 preemptions`` (exact where
the counter shows it) and what holds the queue, with the evidence (lines, scrape values). Shapes:
log only, log + scrapes, scrapes only; 0.8+ (process prefixes, JSON lines) and 0.4-0.7 headers;
a folder and a tar.gz bundle.
"""

from __future__ import annotations

import importlib.util
import tarfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from preemptlog import AnalyzeOptions, analyze

from ..conftest import FIXTURES

_spec = importlib.util.spec_from_file_location("hw_build", FIXTURES / "handwritten" / "build.py")
B = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(B)

T0 = datetime(B.YEAR, 5, 1, 10, 0, 0, tzinfo=UTC)


def hms(s: float) -> str:
    return (T0 + timedelta(seconds=s)).strftime("%H:%M:%S")


def v1(running: int, waiting: int, kv: float, tput: float, deferred: int = 0) -> str:
    d = f"Deferred: {deferred} reqs, " if deferred else ""
    return (
        f"Engine 000: Avg prompt throughput: {tput:.1f} tokens/s, Avg generation throughput: {tput:.1f} tokens/s, "
        f"Running: {running} reqs, Waiting: {waiting} reqs, {d}GPU KV cache usage: {kv:.1f}%, "
        "Prefix cache hit rate: 0.0%"
    )


def stuck_v1(never_fits: bool = True, deferred: int = 0) -> list[dict]:
    rows = [B.log(hms(-60), "INFO", "api_server.py:1896", "vLLM API server version 0.27.0")]
    if never_fits:
        rows.append(
            B.log(
                hms(-30),
                "INFO",
                "kv_cache_utils.py:1091",
                "GPU KV cache size: 20,000 tokens, Maximum concurrency for 32,768 tokens per request: 0.61x",
            )
        )
    rows += [B.log(hms(10 * i), "INFO", "loggers.py:266", v1(3, 0, 30.0, 50.0)) for i in range(3)]
    rows += [B.log(hms(10 * i), "INFO", "loggers.py:266", v1(0, 14, 0.0, 0.0, deferred)) for i in range(3, 30)]
    return rows


def scrapes(counter: int = 0, capacity: int = 26, deferred: int = 0, last: int | None = None) -> str:
    out = []
    for i in range(0, 31, 3):
        t = (T0 + timedelta(seconds=10 * i)).isoformat().replace("+00:00", "Z")
        busy = i < 3
        lab = '{engine="0",model_name="m"}'
        value = counter if last is None or i < 15 else last
        out += [
            f"# scrape {t}",
            "# TYPE vllm:num_preemptions_total counter",
            f"vllm:num_preemptions_total{lab} {value}.0",
            f"vllm:num_requests_running{lab} {3 if busy else 0}.0",
            f"vllm:num_requests_waiting{lab} {0 if busy else capacity + deferred}.0",
            f'vllm:num_requests_waiting_by_reason{{engine="0",model_name="m",reason="capacity"}} '
            f"{0 if busy else capacity}.0",
            f'vllm:num_requests_waiting_by_reason{{engine="0",model_name="m",reason="deferred"}} '
            f"{0 if busy else deferred}.0",
            f"vllm:kv_cache_usage_perc{lab} {0.3 if busy else 0.0}",
        ]
    return "\n".join(out) + "\n"


def write(tmp: Path, name: str, rows: list[dict] | None, fam: str = "apiserver", prom: str | None = None) -> Path:
    d = tmp / name
    d.mkdir()
    if rows is not None:
        (d / "vllm.log").write_text("\n".join(B.render(fam, r) for r in rows) + "\n")
    if prom is not None:
        (d / "metrics.prom").write_text(prom)
    return d


def run(path: Path):
    return analyze([str(path)], AnalyzeOptions(tz="UTC", year=B.YEAR))


@pytest.mark.parametrize("fam", ["v08", "apiserver", "kubectl", "json"])
def test_log_only_stuck_v1_is_zero_in_the_stall_and_names_the_request_that_never_fits(tmp_path, fam):
    a = run(write(tmp_path, fam, stuck_v1(), fam))
    s = a.summary()
    head = s["headline"]
    assert head.startswith("0 preemptions in the stall (nothing ran"), head
    assert "not a preemption: 14 request(s) waiting, none running" in head
    assert "Maximum concurrency 0.61x < 1" in head and "vllm.log:2" in head  # the line that says it
    np_ = s["not_a_preemption"]
    assert np_["preemptions_in_stall"] == 0 and np_["nothing_ran"]
    assert [h["what"] for h in np_["holds"]] == ["never-fits"]
    sp = np_["longest"]
    assert (sp["stats_lines"], sp["seconds"]) == (27, 260.0)
    assert sp["first_line"].endswith("vllm.log:6") and sp["last_line"].endswith("vllm.log:32")
    # the log cannot count outside the stall: said, not a count of 0
    assert s["count_visible"] is False and "outside it: not visible" in head


def test_log_only_v0_header_family(tmp_path):
    def v0(running: int, pending: int, kv: float, tput: float) -> str:
        return (
            f"Avg prompt throughput: {tput:.1f} tokens/s, Avg generation throughput: {tput:.1f} tokens/s, "
            f"Running: {running} reqs, Swapped: 0 reqs, Pending: {pending} reqs, GPU KV cache usage: {kv:.1f}%, "
            "CPU KV cache usage: 0.0%"
        )

    rows = [B.log(hms(5 * i), "INFO", "metrics.py:334", v0(2, 0, 20.0, 80.0)) for i in range(2)]
    rows += [B.log(hms(5 * i), "INFO", "metrics.py:334", v0(0, 14, 0.0, 0.0)) for i in range(2, 20)]
    a = run(write(tmp_path, "v04", rows, "v04"))
    head = a.summary()["headline"]
    assert head.startswith("0 preemptions") and "not a preemption: 14 request(s) waiting, none running" in head
    assert "what holds the queue: not evaluable" in head  # nothing in this bundle says it
    assert a.findings.stall["holds_not_evaluable"]


@pytest.mark.parametrize("fam", ["apiserver", "json"])
def test_log_and_scrapes_flat_counter_is_exact_and_names_capacity_waiting(tmp_path, fam):
    d = write(tmp_path, fam, stuck_v1(never_fits=False), fam, scrapes())
    a = run(d)
    s = a.summary()
    head = s["headline"]
    assert head.startswith("0 preemptions (exact): not a preemption"), head
    assert 'vllm:num_requests_waiting_by_reason{reason="capacity"} 26 (' in head and "metrics.prom:" in head
    np_ = s["not_a_preemption"]
    assert np_["basis"].startswith("the preemption counter flat over it: 0 (")
    assert np_["spans"] == 1  # the log's and the scrapes' views of one stall
    hold = np_["holds"][0]
    assert hold["what"] == "capacity-wedge" and "#53130" in hold["text"]
    # every scrape span cites its lines
    spans = a.findings.stall["spans"]
    assert {x["source"] for x in spans} == {"log", "scrapes"}
    assert all(x["counter_increase"] == 0 for x in spans if x["source"] == "scrapes")


def test_scrapes_only_deferred(tmp_path):
    d = write(tmp_path, "scr", None, prom=scrapes(counter=7, capacity=0, deferred=9))  # read since before the scrapes
    a = run(d)
    head = a.summary()["headline"]
    assert a.summary()["not_a_preemption"]["basis"].startswith(
        "the preemption counter flat over it: 7 (scr/metrics.prom:"
    )
    assert head.startswith("0 preemptions (exact): not a preemption: 9 request(s) waiting"), head
    (hold,) = a.summary()["not_a_preemption"]["holds"]
    assert hold["what"] == "deferred"
    assert hold["evidence"][0].startswith('vllm:num_requests_waiting_by_reason{reason="deferred"} 9 (')


def test_log_deferred_field_0_20(tmp_path):
    a = run(write(tmp_path, "defer", stuck_v1(never_fits=False, deferred=14), "v08"))
    np_ = a.summary()["not_a_preemption"]
    (hold,) = np_["holds"]
    assert hold["what"] == "deferred" and hold["evidence"] == ["Deferred: 14 reqs (defer/vllm.log:5)"]


def test_preempted_during_the_stall_is_not_this_case(tmp_path):
    d = write(tmp_path, "pre", stuck_v1(never_fits=False), "apiserver", scrapes(counter=0, last=2))
    a = run(d)
    s = a.summary()
    assert "not_a_preemption" not in s
    assert s["headline"].startswith("2 preemptions")


def test_tar_gz_bundle(tmp_path):
    d = write(tmp_path, "incident", stuck_v1(), "kubectl", scrapes())
    tgz = tmp_path / "incident.tar.gz"
    with tarfile.open(tgz, "w:gz") as tf:
        tf.add(d, arcname="incident")
    s = run(tgz).summary()
    assert s["headline"].startswith("0 preemptions (exact): not a preemption")
    assert [h["what"] for h in s["not_a_preemption"]["holds"]] == ["never-fits", "capacity-wedge"]
