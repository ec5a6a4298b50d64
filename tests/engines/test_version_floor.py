"""The vLLM version bounded from below by a line only some versions write, and the defaults it implies.

A log with no version line gets vLLM's defaults "assumed" for an unknown version (the oldest value,
its later changes named). The Rust frontend (``VLLM_USE_RUST_FRONTEND=1``) ships from vLLM 0.33.0,
so its stats line says the version is at least 0.33.0: the defaults are those of 0.33.0 on
(gpu_memory_utilization 0.92, not 0.9; block_size 16 with 64 from 0.34.0 named), each note citing the
line. And wherever the version is unknown on a V1 engine, the +0.05 on an assumed
gpu_memory_utilization says that on 0.34+ an unset value is 1.0 already (leave it unset): raising the
assumed value there would cut the KV cache. Hand-written logs in several shapes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from preemptlog.analysis import AnalyzeOptions, analyze
from preemptlog.engines.vllm import config as vcfg

OPTS = AnalyzeOptions(tz="UTC", year=2026)


def _rust_line(hms: str, running: int, waiting: int, kv: float, p: int | None = None) -> str:
    msg = f"Avg prompt tput: 10.0 toks/s, Avg generation tput: 20.0 toks/s, Reqs Running: {running}, Waiting: {waiting}"
    if p:
        msg += f", Preemptions: {p}"
    return f"(RustFrontend pid=9) INFO 12-01 {hms} [server/src/lib.rs:133] {msg}, GPU KV cache used: {kv:.1f}%, Prefix cache hit rate: 1.0%"


def _python_v1_line(hms: str, kv: float) -> str:
    return (
        f"(APIServer pid=1) INFO 12-01 {hms} [loggers.py:208] Engine 000: Avg prompt throughput: 1.0 tokens/s, Avg "
        f"generation throughput: 2.0 tokens/s, Running: 30 reqs, Waiting: 12 reqs, GPU KV cache usage: {kv:.1f}%, "
        "Prefix cache hit rate: 0.0%"
    )


RUST_BUSY = [
    _rust_line("10:00:10", 40, 3, 90.0),
    _rust_line("10:00:20", 44, 20, 99.5, 3),
    _rust_line("10:00:30", 44, 25, 99.8, 2),
    _rust_line("10:00:40", 30, 0, 60.0),
]


def _kv_room_words(s: dict) -> list[str]:
    """What vLLM's +0.05 gpu_memory_utilization step says: its text when offered, its reason when dropped
    (two engines' Rust lines size the levers per engine: the estimate may drop it)."""
    said = [f.get("text", "") for f in s["fixes"] if f["id"] == "kv_room"]
    return said + [f["why"] for f in s["fixes_dropped"] if f["id"] == "kv_room"]


def _run(tmp_path: Path, lines: list[str]):
    p = tmp_path / "vllm.log"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    a = analyze([str(p)], OPTS)
    return a, a.summary(), str(p)


def test_rust_frontend_line_sets_a_floor_and_the_defaults_of_0_33_on(tmp_path):
    a, s, path = _run(tmp_path, RUST_BUSY)
    cfg = s["config"]
    floor = cfg["vllm_version_floor"]
    assert floor["value"] == "0.33.0" and floor["status"] == "derived"
    assert floor["from"] == f"{path}:1"
    gmu = cfg["gpu_memory_utilization"]
    assert gmu["status"] == "default" and gmu["value"] == "0.92"  # 0.20.0-0.33.x, not the 0.9 of older versions
    assert "1.0 from 0.34.0" in gmu["note"] and "at least 0.33.0" in gmu["note"] and f"{path}:1" in gmu["note"]
    bs = cfg["block_size"]
    assert bs["value"] == "16" and "64 from 0.34.0" in bs["note"]
    assert "vllm_version" not in cfg
    fix = next(f for f in s["fixes"] if f["id"] == "kv_room")
    assert fix["current"] == 0.92 and fix["suggested"] == 0.95
    assert fix["current_from"] == "assumed (vLLM's default from 0.33.0 until 0.34.0)"
    assert "leave it unset" in fix["text"] and "1.0 under the extensible KV cache" in fix["text"]
    assert f"at least 0.33.0 ({path}:1)" in fix["text"]


def test_a_version_line_overrides_the_floor(tmp_path):
    head = ["INFO 12-01 09:59:30 [api_server.py:1] vLLM API server version 0.34.0"]
    _, s, _ = _run(tmp_path, head + RUST_BUSY)
    cfg = s["config"]
    assert "vllm_version_floor" not in cfg
    assert cfg["gpu_memory_utilization"]["value"] == "1.0"
    assert cfg["block_size"]["value"] == "64"
    # 1.0 in force: no +0.05, and no "may be 0.34" caveat on a version the log states
    assert all("may be 0.34.0 or later" not in f.get("text", "") for f in s["fixes"])
    assert all(f["id"] != "kv_room" or f["current"] != 1.0 or f["suggested"] != 0.95 for f in s["fixes"])


def test_an_older_stated_version_keeps_its_own_default_and_no_caveat(tmp_path):
    # two engines: the Rust line's sums size the levers per engine (findings/capacity.held_share); whether
    # vLLM's +0.05 step is offered or dropped against that estimate, it carries no 0.34 caveat
    head = [
        "INFO 12-01 09:59:30 [api_server.py:1] vLLM API server version 0.32.0",
        "INFO 12-01 09:59:30 [api_server.py:1] non-default args: {'data_parallel_size': 2}",
    ]
    _, s, _ = _run(tmp_path, head + RUST_BUSY)
    gmu = s["config"]["gpu_memory_utilization"]
    assert gmu["value"] == "0.92" and gmu["note"].startswith("assumed: vLLM 0.32.0 default")
    said = _kv_room_words(s)
    assert said and all("leave it unset" not in x and "may be 0.34" not in x for x in said), said


def test_a_python_frontend_log_without_version_gets_no_floor_but_the_0_34_caveat(tmp_path):
    lines = [_python_v1_line(f"10:00:{s}0", 99.0) for s in range(1, 6)]
    lines.insert(
        2, "(APIServer pid=1) DEBUG 12-01 10:00:25 [gpu_model_runner.py:1] Request r-1 status: RequestStatus.PREEMPTED"
    )
    _, s, _ = _run(tmp_path, lines)
    cfg = s["config"]
    assert "vllm_version_floor" not in cfg
    assert cfg["gpu_memory_utilization"]["value"] == "0.9"
    fix = next(f for f in s["fixes"] if f["id"] == "kv_room")
    assert fix["suggested"] == 0.95
    assert "leave it unset" in fix["text"] and "the vLLM version is not in the bundle: it may be 0.34.0" in fix["text"]


def test_a_stated_gpu_memory_utilization_gets_no_caveat(tmp_path):
    head = [
        "INFO 12-01 09:59:30 [api_server.py:1] non-default args: {'gpu_memory_utilization': 0.8, "
        "'data_parallel_size': 2}"
    ]
    _, s, _ = _run(tmp_path, head + RUST_BUSY)
    assert s["config"]["gpu_memory_utilization"]["status"] == "seen"
    said = _kv_room_words(s)
    assert said and all("leave it unset" not in x and "may be 0.34" not in x for x in said), said
    assert all(f["current"] == 0.8 for f in s["fixes"] if f["id"] == "kv_room")


def test_a_v0_log_gets_no_caveat(tmp_path):
    lines = [
        "WARNING 05-09 00:49:33 scheduler.py:1077] Sequence group 5 is preempted by PreemptionMode.RECOMPUTE mode "
        "because there is not enough KV cache space. This can affect the end-to-end performance. Increase "
        "gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
        "total_num_cumulative_preemption=1",
        "INFO 05-09 00:49:35 metrics.py:341] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 7.5 "
        "tokens/s, Running: 2 reqs, Swapped: 0 reqs, Pending: 9 reqs, GPU KV cache usage: 99.8%, CPU KV cache usage: 0.0%.",
    ]
    _, s, _ = _run(tmp_path, lines)
    assert s["config"]["engine"]["value"] == "V0"
    fix = next(f for f in s["fixes"] if f["id"] == "kv_room")
    assert "leave it unset" not in fix["text"]


@pytest.mark.parametrize(
    ("floor", "gmu", "bs"),
    [("0.20.0", "0.92", "16"), ("0.33.0", "0.92", "16"), ("0.34.0", "1.0", "64"), ("0.40.1", "1.0", "64")],
)
def test_default_rows_keep_the_versions_from_the_floor(floor, gmu, bs):
    rows = {k: (v, note) for k, v, note in vcfg.default_rows(None, floor, "a line (x.log:3)")}
    assert rows["gpu_memory_utilization"][0] == gmu
    assert rows["block_size"][0] == bs
    for _, note in rows.values():
        assert f"at least {floor}: a line (x.log:3)" in note
    # past the last change there is one value: "from X on", nothing newer named
    if floor >= "0.34.0":
        assert rows["gpu_memory_utilization"][1].startswith(f"assumed: vLLM's default from {floor} on (")


def test_a_stated_version_ignores_a_floor():
    assert vcfg.default_rows("0.32.0", "0.33.0", "x") == vcfg.default_rows("0.32.0")


@pytest.mark.parametrize("shape", ["vllm", "tracing", "ansi", "compose", "json", "json-flat"])
def test_the_floor_comes_from_the_line_whatever_its_prefix(tmp_path, shape):
    # the Rust frontend's line in every prefix its log can have (tests/engines/test_rust_frontend.py SHAPES)
    from tests.engines.test_rust_frontend import SHAPES, _rust

    fmt = SHAPES[shape]
    lines = [fmt(f"10:00:{s}0", _rust(40, 20, 99.5, p=2 if s == 2 else None)) for s in range(1, 5)]
    _, s, path = _run(tmp_path, lines)
    floor = s["config"]["vllm_version_floor"]
    assert (floor["value"], floor["from"]) == ("0.33.0", f"{path}:1")
    assert s["config"]["gpu_memory_utilization"]["value"] == "0.92"


KV_ONE_LINE = (
    "(EngineCore pid=11) INFO 12-01 09:59:50 [kv_cache_utils.py:1169] GPU KV cache size: 655,360 tokens, Maximum "
    "concurrency for 40,960 tokens per request: 16.00x"
)
KV_TWO_LINES = [
    "(EngineCore pid=11) INFO 12-01 09:59:50 [kv_cache_utils.py:1100] GPU KV cache size: 655,360 tokens",
    "(EngineCore pid=11) INFO 12-01 09:59:50 [kv_cache_utils.py:1101] Maximum concurrency for 40,960 tokens per "
    "request: 16.00x",
]
V1_BUSY = [_python_v1_line(f"10:00:{s:02d}", 99.0) for s in (10, 20, 30)]


@pytest.mark.parametrize("scanner", ["compiled", "polars"])
def test_the_kv_cache_size_on_one_line_bounds_the_version_at_0_28(tmp_path, monkeypatch, scanner):
    """vLLM 0.28.0 joined "GPU KV cache size: N tokens" and "Maximum concurrency ..." into one line
    (vllm/v1/core/kv_cache_utils.py): the one-line form is a 0.28+ server, whose default
    gpu_memory_utilization is 0.92 (0.20+), not the oldest 0.9."""
    if scanner == "polars":
        monkeypatch.setenv("PREEMPTLOG_SCANNER", "polars")
    _a, s, path = _run(tmp_path, [KV_ONE_LINE, *V1_BUSY])
    floor = s["config"]["vllm_version_floor"]
    assert (floor["value"], floor["from"]) == ("0.28.0", f"{path}:1")
    gmu = s["config"]["gpu_memory_utilization"]
    assert gmu["value"] == "0.92" and "from 0.28.0 until 0.34.0" in gmu["note"]


def test_the_two_line_kv_cache_size_bounds_nothing(tmp_path):
    _a, s, _path = _run(tmp_path, [*KV_TWO_LINES, *V1_BUSY])
    assert "vllm_version_floor" not in s["config"]


def test_the_highest_floor_wins_and_a_named_version_needs_none(tmp_path):
    _a, s, _path = _run(tmp_path, [KV_ONE_LINE, *RUST_BUSY])
    assert s["config"]["vllm_version_floor"]["value"] == "0.33.0"
    named = (
        "(EngineCore pid=11) INFO 12-01 09:59:40 [core.py:133] Initializing a V1 LLM engine (v0.30.1) with config: x=1"
    )
    _a, s2, _path = _run(tmp_path, [named, KV_ONE_LINE, *V1_BUSY])
    assert "vllm_version_floor" not in s2["config"] and s2["config"]["vllm_version"]["value"] == "0.30.1"
