"""Values in vLLM log lines that cannot be what vLLM wrote (hand-written lines, the CLI in a subprocess).

- a KV cache usage, CPU KV cache usage or prefix cache hit rate that is not a finite number within
  [0, 100] % (vLLM computes them as shares of used blocks or hit tokens: ``inf%``, ``nan%``,
  ``250.0%``) is no reading: missing (null, not evaluable), never 0 and never a value behind a
  verdict; one warning gives the count and the first file:line;
- a V0 ``total_num_cumulative_preemption`` that no 64-bit counter holds (1 followed by 300 zeros)
  is out of range, not cut off: a note says so with the count and the first file:line, and it is
  counted as a missing counter is (the previous logged value + 50);
- a vLLM version is the longest prefix of a version's shape (PEP 440 with a local part): garbage
  after it is not part of it, and a text with no such prefix names no version.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from preemptlog.analysis import AnalyzeOptions, analyze

OPTS = AnalyzeOptions(tz="UTC", year=2026)

V1_HEAD = "INFO 05-09 10:00:00 [core.py:61] Initializing a V1 LLM engine (v0.8.5) with config: model='m'"
V0_HEAD = "INFO 05-09 09:59:59 llm_engine.py:237] Initializing an LLM engine (v0.6.3) with config: model='m'"


def v1_stats(ss: int, kv: str, hit: str = "0.0", waiting: int = 0) -> str:
    """A V1 stats line of the 0.6-0.11 shape, with the KV cache usage and hit rate as written."""
    return (
        f"INFO 05-09 10:00:{ss:02d} [loggers.py:116] Engine 000: Avg prompt throughput: 10.0 tokens/s, Avg "
        f"generation throughput: 20.0 tokens/s, Running: 5 reqs, Waiting: {waiting} reqs, GPU KV cache usage: {kv}%, "
        f"Prefix cache hit rate: {hit}%"
    )


def v0_stats(ss: int, gpu: str, cpu: str = "0.0") -> str:
    return (
        f"INFO 10-28 11:16:{ss:02d} metrics.py:349] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: "
        f"7220.5 tokens/s, Running: 2 reqs, Swapped: 0 reqs, Pending: 98 reqs, GPU KV cache usage: {gpu}%, CPU KV "
        f"cache usage: {cpu}%."
    )


def v0_warning(ss: int, group: int, total: str) -> str:
    return (
        f"WARNING 05-09 10:00:{ss:02d} scheduler.py:1057] Sequence group {group} is preempted by "
        "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect the end-to-end "
        "performance. Increase gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
        f"total_num_cumulative_preemption={total}"
    )


def rust_stats(ss: int, kv: str, hit: str = "10.0") -> str:
    return (
        f"(RustFrontend pid=4300) INFO 12-01 10:00:{ss:02d} [llm/src/log_stats.rs:300] Avg prompt tput: 100.0 toks/s, "
        f"Avg generation tput: 200.5 toks/s, Reqs Running: 9, Waiting: 3, GPU KV cache used: {kv}%, Prefix cache hit "
        f"rate: {hit}%"
    )


def _write(tmp_path: Path, name: str, lines: list[str]) -> Path:
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p


def _json(tmp_path: Path, name: str, lines: list[str], *more: str) -> dict:
    _write(tmp_path, name, lines)
    return _cli_json(tmp_path, name, *more)


def _cli_json(tmp_path: Path, name: str, *more: str) -> dict:
    """``preemptlog analyze NAME -f json`` in a subprocess, in tmp_path."""
    r = subprocess.run(
        [sys.executable, "-m", "preemptlog", "analyze", name, "-f", "json", "--tz", "UTC", "--year", "2026", *more],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _bad_percent_warnings(s: dict) -> list[str]:
    return [w for w in s["warnings"] if "not a percentage within 0-100" in w]


# ------------------------------------------------------------------ percentages that are no reading


def test_v1_inf_and_nan_usage_are_missing_and_said_once(tmp_path):
    cut = v1_stats(31, "99.1").rsplit("%, Prefix", 1)[0]  # "... GPU KV cache usage: 99.1", then the line ends
    lines = [V1_HEAD, v1_stats(1, "inf"), v1_stats(11, "nan"), v1_stats(21, "41.5"), cut]
    d = _json(tmp_path, "inf.log", lines)
    s = d["summary"]
    assert s["stats"]["lines"] == 4
    assert s["stats"]["max_kv_usage"] == 41.5  # the one reading; inf and nan are none
    [w] = _bad_percent_warnings(s)
    assert w.startswith("2 KV cache usage / prefix cache hit rate value(s) in 2 stats line(s)")
    assert "KV cache usage 'inf%' at inf.log:2" in w  # a line cut inside its value is a cut line, not counted
    assert "never as 0" in w


def test_v1_only_impossible_usage_leaves_no_maximum_and_says_so(tmp_path):
    d = _json(tmp_path, "nan.log", [V1_HEAD, v1_stats(1, "nan"), v1_stats(11, "-3.0")])
    s = d["summary"]
    assert s["stats"]["max_kv_usage"] is None
    [w] = _bad_percent_warnings(s)
    assert "2 KV cache usage" in w and "'nan%' at nan.log:2" in w
    r = subprocess.run(
        [sys.executable, "-m", "preemptlog", "analyze", "nan.log", "-v", "--tz", "UTC", "--year", "2026"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    out = " ".join((r.stdout + r.stderr).split())
    assert "no KV cache usage read" in out
    assert "None%" not in out and "usage 0.0%" not in out


def test_v0_inf_usage_is_not_read_from_the_cpu_field(tmp_path):
    # The device field is the first one: a bad GPU value is not replaced by the CPU one (0.0).
    d = _json(tmp_path, "v0.log", [v0_stats(34, "inf", "0.0")])
    s = d["summary"]
    assert s["stats"]["max_kv_usage"] is None
    [w] = _bad_percent_warnings(s)
    assert "'inf%' at v0.log:1" in w


def test_usage_above_100_drives_no_verdict(tmp_path):
    lines = [V1_HEAD, v1_stats(1, "250.0", waiting=3), v0_warning(2, 5, "1"), v1_stats(11, "250.0", waiting=3)]
    d = _json(tmp_path, "big.log", lines)
    s = d["summary"]
    assert s["stats"]["max_kv_usage"] is None
    assert s["pressure_intervals"] == []  # 250 % is no "KV cache at the ceiling"
    [ev] = d["events"]
    assert ev["stats_kv_usage_max"] is None and ev["stats_kv_usage_at"] is None
    assert "250" not in json.dumps(s["cause"])
    [w] = _bad_percent_warnings(s)
    assert w.startswith("2 KV cache usage") and "'250.0%' at big.log:2" in w


def test_rounding_above_100_is_still_a_reading(tmp_path):
    d = _json(tmp_path, "full.log", [V1_HEAD, v1_stats(1, "100.04", waiting=3), v1_stats(11, "250.0")])
    s = d["summary"]
    assert s["stats"]["max_kv_usage"] == pytest.approx(100.04)
    [w] = _bad_percent_warnings(s)
    assert w.startswith("1 KV cache usage") and "full.log:3" in w


def test_hit_rate_and_cpu_usage_follow_the_same_rule(tmp_path):
    lines = [
        v0_stats(30, "97.0", cpu="1e999"),
        "INFO 10-28 11:16:31 metrics.py:367] Prefix cache hit rate: GPU: 400.00%, CPU: 0.00%",
        V1_HEAD,
        v1_stats(40, "50.0", hit="nan"),
        v1_stats(50, "51.0", hit="35.2"),
    ]
    a = analyze([str(_write(tmp_path, "mix.log", lines))], OPTS)
    st = a.stats.sort("seq")
    assert st.get_column("kv_usage").to_list() == [97.0, 50.0, 51.0]
    assert st.get_column("cpu_kv_usage").to_list() == [None, None, None]
    assert st.get_column("prefix_hit").to_list() == [None, None, 35.2]
    [w] = [w for w in a.warnings if "not a percentage within 0-100" in w]
    assert w.startswith("3 KV cache usage / prefix cache hit rate value(s) in 3 stats line(s)")
    assert "(first: CPU KV cache usage '1e999%' at " in w and "mix.log:1)" in w  # the library names the path


def test_rust_frontend_line_with_impossible_usage(tmp_path):
    a = analyze([str(_write(tmp_path, "rust.log", [rust_stats(10, "inf"), rust_stats(20, "12.5", hit="101.0")]))], OPTS)
    st = a.stats.sort("seq")
    assert st.get_column("kv_usage").to_list() == [None, 12.5]
    assert st.get_column("prefix_hit").to_list() == [10.0, None]
    assert st.get_column("preemptions").to_list() == [0, 0]  # both lines are whole: no Preemptions field is 0
    [w] = [w for w in a.warnings if "not a percentage within 0-100" in w]
    assert w.startswith("2 KV cache usage") and "'inf%' at " in w and "rust.log:1)" in w


# ------------------------------------------------------------------ a V0 counter out of range


def test_v0_counter_out_of_range_is_said_so_not_cut_off(tmp_path):
    huge = "1" + "0" * 300
    lines = [V0_HEAD, v0_warning(1, 1, "1"), v0_warning(2, 2, huge), v0_warning(3, 3, "101")]
    d = _json(tmp_path, "oor.log", lines)
    s = d["summary"]
    assert not [n for n in s["notes"] if "cut off" in n]
    [n] = [n for n in s["notes"] if "out of range" in n]
    assert n.startswith("1 V0 warning(s) had a total_num_cumulative_preemption out of range")
    assert "first at oor.log:3" in n
    assert "1 inferred as the previous logged value + 50" in n
    # the counting rule of a missing counter: 1, (1 + 50 = 51), 101: exact up to 101
    assert s["events"] == 101 and s["reconciliation"]["total"] == 101
    assert sorted(e["cumulative"] for e in d["events"] if e["kind"] == "logged") == [1, 51, 101]


def test_v0_counter_out_of_range_with_nothing_before(tmp_path):
    huge = "9" * 40
    d = _json(tmp_path, "oor2.log", [V0_HEAD, v0_warning(2, 2, huge), v0_warning(3, 3, huge)])
    [n] = [n for n in d["summary"]["notes"] if "out of range" in n]
    assert n.startswith("2 V0 warning(s)") and "first at oor2.log:2" in n
    assert "left without one" in n and "(cut line)" not in " ".join(d["summary"]["notes"])


# ------------------------------------------------------------------ versions


@pytest.mark.parametrize(
    ("written", "version"),
    [
        ("0.6.3</title><script>alert(3)</script>", "0.6.3"),
        ("0.6.3.post1<b>", "0.6.3.post1"),
        ("0.11.1rc2.dev57+g1234abc</title>", "0.11.1rc2.dev57+g1234abc"),
        ("0.8.5+cu121<i>x", "0.8.5+cu121"),
        ("0.9.2rc2.dev15+g87798b0be.d20250707'; DROP", "0.9.2rc2.dev15+g87798b0be.d20250707"),
        ("0.10.1.1.", "0.10.1.1"),
        ("</title>", None),
    ],
)
def test_engine_line_version_is_the_longest_version_prefix(tmp_path, written, version):
    line = f"INFO 05-09 09:59:59 llm_engine.py:237] Initializing an LLM engine (v{written}) with config: model='m'"
    d = _json(tmp_path, "ver.log", [line, v0_warning(1, 1, "1")])
    s = d["summary"]
    got = s["config"].get("vllm_version", {})
    if version is None:
        assert got.get("status") != "seen"
        assert "</title>" not in json.dumps(d)
    else:
        assert got["value"] == version and got["status"] == "seen"
        assert s["reconciliation"]["log"]["version"] == version
    assert "<script>" not in json.dumps(s)


def test_server_version_line_keeps_only_the_version(tmp_path):
    lines = [
        "INFO 05-09 09:59:58 api_server.py:528] vLLM API server version 0.6.3</title><script>alert(3)</script>",
        'INFO 05-09 10:09:58 api_server.py:528] vLLM API server version 0.8.5+cu121"}',
    ]
    a = analyze([str(_write(tmp_path, "srv.log", lines))], OPTS)
    seen = a.config.filter((pl.col("key") == "vllm_version") & (pl.col("status") == "seen"))
    assert seen.get_column("value").to_list() == ["0.6.3", "0.8.5+cu121"]
    from preemptlog.events.servers import starts

    assert starts(a.records).get_column("version").to_list() == ["0.6.3", "0.8.5+cu121"]


@pytest.mark.parametrize(("written", "version"), [("0.34.0</title><script>", "0.34.0"), ("<b>x</b>", None)])
def test_block_table_header_version_follows_the_same_rule(tmp_path, written, version):
    # preemptlog's vLLM plugin writes vllm.__version__ in its records' header: a damaged one is read the same way
    d = tmp_path / "rec"
    d.mkdir()
    head = {"type": "step", "ts": 1796000000.0, "step": 0, "engine": "0", "block_size": 16, "v": 2}
    head |= {"num_total_blocks": 32, "num_free_blocks": 31, "vllm_version": written}
    (d / "records.jsonl").write_text(json.dumps(head) + "\n")
    got = _cli_json(tmp_path, "rec")["summary"]["config"].get("vllm_version", {})
    if version is None:
        assert got.get("status") != "seen"
    else:
        assert (got["value"], got["status"], got["from"]) == (version, "seen", "rec/records.jsonl:1")
