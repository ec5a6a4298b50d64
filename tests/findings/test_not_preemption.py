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


def one_scrape(at_s: float, capacity: int = 26, deferred: int = 0, engine: str = "0", gauges: bool = False) -> str:
    """One /metrics reading at T0 + at_s (the usual bundle: a scrape taken during the incident), with the
    waiting reasons only (no running/waiting gauges: no scrape stall of its own) unless ``gauges``."""
    t = (T0 + timedelta(seconds=at_s)).isoformat().replace("+00:00", "Z")
    lab = f'engine="{engine}",model_name="m"'
    out = [
        f"# scrape {t}",
        "# TYPE vllm:num_preemptions_total counter",
        f"vllm:num_preemptions_total{{{lab}}} 0.0",
        f'vllm:num_requests_waiting_by_reason{{{lab},reason="capacity"}} {capacity}.0',
        f'vllm:num_requests_waiting_by_reason{{{lab},reason="deferred"}} {deferred}.0',
    ]
    if gauges:
        out += [f"vllm:num_requests_running{{{lab}}} 0.0", f"vllm:num_requests_waiting{{{lab}}} 14.0"]
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("at_s", [100.0, 290.0, 295.0])  # in the stall; 5 s past its last line (the log's end)
def test_one_scrape_during_a_log_stall_names_capacity_waiting(tmp_path, at_s):
    a = run(write(tmp_path, "one", stuck_v1(never_fits=False), "apiserver", one_scrape(at_s)))
    s = a.summary()
    (hold,) = s["not_a_preemption"]["holds"]
    assert hold["what"] == "capacity-wedge" and "#53130" in hold["text"]
    assert hold["evidence"][0] == 'vllm:num_requests_waiting_by_reason{reason="capacity"} 26 (one/metrics.prom:4)'
    assert hold["evidence"][1].startswith("GPU KV cache usage max 0 % over one/vllm.log:")
    assert (
        "held by: 14 request(s)" not in s["headline"] and "held by: 26 request(s) waiting for capacity" in s["headline"]
    )


@pytest.mark.parametrize("at_s", [-30.0, 10.0, 400.0])  # before it, while the server still ran, long after the log
def test_a_scrape_outside_the_stall_says_nothing_about_it(tmp_path, at_s):
    a = run(write(tmp_path, "out", stuck_v1(never_fits=False), "apiserver", one_scrape(at_s)))
    np_ = a.summary()["not_a_preemption"]
    assert np_["holds"] == [] and a.findings.stall["holds_not_evaluable"]


def test_another_engines_reading_says_nothing_about_it(tmp_path):
    a = run(write(tmp_path, "eng", stuck_v1(never_fits=False), "apiserver", one_scrape(100.0, engine="1")))
    assert a.summary()["not_a_preemption"]["holds"] == []


def test_another_servers_scrape_says_nothing_about_it(tmp_path):
    # server a stalls; server b, beside it in the bundle, has a scrape with requests waiting for capacity
    root = tmp_path / "bundle"
    root.mkdir()
    write(root, "a", stuck_v1(never_fits=False), "apiserver")
    write(
        root,
        "b",
        [B.log(hms(10 * i), "INFO", "loggers.py:266", v1(3, 0, 30.0, 50.0)) for i in range(30)],
        "apiserver",
        one_scrape(100.0),
    )
    a = run(root)
    stall = a.findings.stall
    assert stall["found"] and stall["holds"] == [] and stall["holds_not_evaluable"]


def test_one_scrape_of_deferred_requests(tmp_path):
    a = run(write(tmp_path, "def", stuck_v1(never_fits=False), "apiserver", one_scrape(100.0, capacity=0, deferred=9)))
    (hold,) = a.summary()["not_a_preemption"]["holds"]
    assert hold["what"] == "deferred"
    assert hold["evidence"] == ['vllm:num_requests_waiting_by_reason{reason="deferred"} 9 (def/metrics.prom:5)']
