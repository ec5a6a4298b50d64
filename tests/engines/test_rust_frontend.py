"""vLLM's Rust frontend stats line (issue 37 item 3): a vLLM log family, read whatever its prefix.

``VLLM_USE_RUST_FRONTEND=1`` (0.33.0, 0.34.0; rust/src/llm/src/log_stats.rs) writes, every tick of
its logger (10 s by default), summed over every engine: ``Avg prompt tput: .. toks/s, Avg generation
tput: .. toks/s, Reqs Running: n, Waiting: m[, Deferred: d reqs][, Preemptions: p], GPU KV cache
used: k%, Prefix cache hit rate: h%[, External prefix cache hit rate: e%]``. Hand-written logs in
several shapes: vLLM's prefix, the tracing subscriber's default prefix (plain and with ANSI
colours), behind docker compose, beside Python-frontend lines; counts exact (0 included), engine
"all", intervals of one tick, G1 corroborated where the line shows the pool at the ceiling with
requests waiting.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from preemptlog import engines, sources
from preemptlog.analysis import AnalyzeOptions, analyze
from preemptlog.engines.vllm import stats as rust_stats
from preemptlog.sources import vllm_log

E = "\x1b"
OPTS = AnalyzeOptions(tz="UTC", year=2026)


def _rust(
    running: int,
    waiting: int,
    kv: float,
    p: int | None = None,
    deferred: int | None = None,
    external: float | None = None,
) -> str:
    """A Rust-frontend stats message as log_stats.rs formats it."""
    msg = (
        f"Avg prompt tput: 100.0 toks/s, Avg generation tput: 200.5 toks/s, Reqs Running: {running}, Waiting: {waiting}"
    )
    if deferred:
        msg += f", Deferred: {deferred} reqs"
    if p:
        msg += f", Preemptions: {p}"
    msg += f", GPU KV cache used: {kv:.1f}%, Prefix cache hit rate: 10.0%"
    if external is not None:
        msg += f", External prefix cache hit rate: {external:.1f}%"
    return msg


def vllm_prefix(hms: str, msg: str, level: str = "INFO") -> str:
    return f"(RustFrontend pid=4300) {level} 12-01 {hms} [llm/src/log_stats.rs:300] {msg}"


def tracing_prefix(hms: str, msg: str, level: str = "INFO", ansi: bool = False) -> str:
    ts, lvl, target = f"2026-12-01T{hms}.000250Z", f"{level:>5}", "vllm_llm::log_stats"
    if ansi:
        return f"{E}[2m{ts}{E}[0m {E}[32m{lvl}{E}[0m {E}[2m{target}{E}[0m{E}[2m:{E}[0m {msg}"
    return f"{ts} {lvl} {target}: {msg}"


def compose_prefix(hms: str, msg: str, level: str = "INFO") -> str:
    return "vllm-1  | " + tracing_prefix(hms, msg, level)


def tracing_json(hms: str, msg: str, level: str = "INFO", flat: bool = False) -> str:
    """The subscriber's JSON lines (``fmt().json()``): the message under ``fields``, or at the top
    (``flatten_event(true)``), keys in the order that formatter writes them."""
    ts, target = f"2026-12-01T{hms}.000250Z", "vllm_llm::log_stats"
    if flat:
        return json.dumps({"timestamp": ts, "level": level, "message": msg, "target": target, "threadName": "tokio-rt"})
    return json.dumps({"timestamp": ts, "level": level, "fields": {"message": msg}, "target": target})


SHAPES = {
    "vllm": vllm_prefix,
    "tracing": tracing_prefix,
    "ansi": lambda h, m, level="INFO": tracing_prefix(h, m, level, True),
    "compose": compose_prefix,
    "json": tracing_json,
    "json-flat": lambda h, m, level="INFO": tracing_json(h, m, level, True),
}

HEAD_034 = [
    "INFO 12-01 09:59:30 [startup.py:40] vLLM server version 0.34.0, serving model m",
    "(EngineCore_DP0 pid=42) INFO 12-01 09:59:35 [core.py:101] Initializing a V1 LLM engine (v0.34.0) with config: "
    "model='m', enable_prefix_caching=True",
]


def _write(tmp_path: Path, lines: list[str], name: str = "rust.log") -> Path:
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p


def _analyze(tmp_path: Path, lines: list[str], name: str = "rust.log"):
    return analyze([str(_write(tmp_path, lines, name))], OPTS)


# ---------------------------------------------------------------------------------------- samples


def test_the_family_is_registered_with_its_marker_and_samples():
    assert rust_stats.RUST_STATS in sources.families()
    assert (rust_stats.RUST_MARKER, "stats") in vllm_log.all_markers()
    assert rust_stats.RUST_FAMILY in engines.default().stats_families
    assert len([s for s in sources.samples(rust_stats.RUST_STATS) if s.good]) >= 4


@pytest.mark.parametrize("i", range(len(rust_stats.SAMPLES)))
def test_each_sample_gives_its_record_and_stats_row(i, tmp_path):
    text, expect = rust_stats.SAMPLES[i]
    a = _analyze(tmp_path, [text])
    assert [f.kind for f in a.bundle.files] == [vllm_log.KIND]
    rec = a.records.filter(pl.col("kind") == "stats")
    assert rec.height == 1
    row = rec.row(0, named=True)
    for k, v in expect.items():
        if not k.startswith("_"):
            assert row[k] == v, (k, row[k], v)
    st = a.stats.row(0, named=True)
    for k, v in expect["_stats"].items():
        assert st[k] == v, (k, st[k], v)


# ---------------------------------------------------------------------------------------- counts


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_counts_are_exact_in_every_prefix(shape, tmp_path):
    f = SHAPES[shape]
    lines = [
        f("10:00:10", _rust(90, 4, 71.3)),
        f("10:00:20", _rust(120, 31, 97.6, p=4)),
        f("10:00:30", _rust(101, 48, 99.1, p=7, deferred=3, external=6.5)),
        f("10:00:40", _rust(88, 12, 82.0)),
    ]
    a = _analyze(tmp_path, lines)
    assert a.events.height == 11
    assert set(a.events.get_column("kind")) == {"interval"}
    assert set(a.events.get_column("engine")) == {"all"}  # summed over every engine
    st = a.stats
    assert st.get_column("family").to_list() == [rust_stats.RUST_FAMILY] * 4
    assert st.get_column("preemptions").to_list() == [0, 4, 7, 0]  # no field: 0
    assert st.get_column("running").to_list() == [90, 120, 101, 88]
    assert st.get_column("waiting").to_list() == [4, 31, 48, 12]
    assert st.get_column("kv_usage").to_list() == [71.3, 97.6, 99.1, 82.0]
    assert st.get_column("deferred").to_list() == [None, None, 3, None]
    recon = a.summary()["reconciliation"]
    assert recon["total"] == 11 and recon["quality"] == "exact"
    assert "Rust frontend" in recon["rule"] and recon["log"]["counts"] == "exact"
    assert any("Rust frontend" in n and "engine 'all'" in n for n in a.notes)


def test_a_log_whose_lines_never_print_the_field_counts_zero_exactly(tmp_path):
    lines = HEAD_034 + [vllm_prefix(f"10:00:{s}0", _rust(10, 0, 40.0)) for s in range(1, 5)]
    a = _analyze(tmp_path, lines)
    s = a.summary()
    assert a.events.height == 0
    assert s["count_visible"] is True
    assert s["reconciliation"]["quality"] == "exact" and s["reconciliation"]["total"] == 0
    assert s["headline"].startswith("0 preemptions (exact)")


def test_a_stock_python_frontend_034_log_still_cannot_count(tmp_path):
    py = (
        "(APIServer pid=1) INFO 12-01 10:00:{s}0 [loggers.py:273] Engine 000: Avg prompt throughput: 1.0 tokens/s, "
        "Avg generation throughput: 2.0 tokens/s, Running: 5 reqs, Waiting: 3 reqs, GPU KV cache usage: 99.0%, "
        "Prefix cache hit rate: 0.0%"
    )
    a = _analyze(tmp_path, HEAD_034 + [py.format(s=s) for s in range(1, 5)])
    s = a.summary()
    assert s["count_visible"] is False
    assert "never print" in s["reconciliation"]["log"]["reason"]
    assert "VLLM_USE_RUST_FRONTEND=1" in s["reconciliation"]["log"]["remedy"]  # 0.33+: the Rust frontend counts


def test_python_frontend_lines_beside_rust_lines_are_said_not_counted(tmp_path):
    py = (
        "(APIServer pid=1) INFO 12-01 09:58:{s}0 [loggers.py:273] Engine 000: Avg prompt throughput: 1.0 tokens/s, "
        "Avg generation throughput: 2.0 tokens/s, Running: 5 reqs, Waiting: 3 reqs, GPU KV cache usage: 99.0%, "
        "Prefix cache hit rate: 0.0%"
    )
    lines = [py.format(s=s) for s in range(1, 4)] + [
        vllm_prefix("10:00:10", _rust(10, 2, 50.0)),
        vllm_prefix("10:00:20", _rust(12, 5, 96.0, p=2)),
    ]
    a = _analyze(tmp_path, HEAD_034 + lines)
    reason = a.summary()["reconciliation"]["log"]["reason"]
    assert a.events.height == 2
    assert "exact only over the Rust frontend's lines" in reason and "3 Python-frontend stats line(s)" in reason
    assert a.summary()["reconciliation"]["quality"] == "lower bound"


# ---------------------------------------------------------------------------------------- intervals


def _intervals(a) -> list[tuple[str, str]]:
    ev = a.events.sort("time").unique(["source", "line"], keep="first", maintain_order=True)
    return [
        (s.strftime("%H:%M:%S"), e.strftime("%H:%M:%S"))
        for s, e in ev.select("interval_start", "interval_end").iter_rows()
    ]


def test_an_interval_is_the_tick_before_the_line_not_the_gap_since_the_last_line_shown(tmp_path):
    # Idle ticks are DEBUG lines, absent from an INFO log: the line after the gap counts its own tick.
    lines = HEAD_034 + [
        vllm_prefix("10:00:10", _rust(50, 0, 60.0, p=1)),  # the first line: its tick too
        vllm_prefix("10:00:20", _rust(50, 2, 70.0, p=2)),
        vllm_prefix("10:00:30", _rust(10, 0, 20.0)),
        vllm_prefix("10:05:40", _rust(60, 5, 98.0, p=3)),
    ]
    a = _analyze(tmp_path, lines)
    assert _intervals(a) == [("10:00:00", "10:00:10"), ("10:00:10", "10:00:20"), ("10:05:30", "10:05:40")]


def test_another_logger_period_is_read_from_the_lines(tmp_path):
    # VLLM_LOG_STATS_INTERVAL=30: the lines' own period (seen at least twice) is the tick.
    lines = HEAD_034 + [
        tracing_prefix("10:00:30", _rust(50, 0, 60.0)),
        tracing_prefix("10:01:00", _rust(50, 2, 70.0, p=2)),
        tracing_prefix("10:01:30", _rust(50, 2, 70.0)),
        tracing_prefix("10:03:30", _rust(60, 5, 98.0, p=1)),
    ]
    a = _analyze(tmp_path, lines)
    assert _intervals(a) == [("10:00:30", "10:01:00"), ("10:03:00", "10:03:30")]


# ---------------------------------------------------------------------------------------- verdicts


def test_g1_corroborated_where_the_line_shows_the_pool_at_the_ceiling_with_requests_waiting(tmp_path):
    lines = HEAD_034 + [
        vllm_prefix("10:00:10", _rust(90, 4, 80.0)),
        vllm_prefix("10:00:20", _rust(120, 31, 98.5, p=2)),  # at the ceiling, requests waiting
        vllm_prefix("10:00:30", _rust(60, 0, 70.0)),
        vllm_prefix("10:00:40", _rust(61, 1, 72.0, p=1)),  # far below it
    ]
    a = _analyze(tmp_path, lines)
    v = a.events.join(a.verdicts, on="event_id").sort("time")
    rules = v.select("line", "rule", "confidence").unique().sort("line").rows()
    assert rules[0][1:] == ("G1-capacity-vllm-code-corroborated", "high")
    assert rules[-1][1] != "G1-capacity-vllm-code-corroborated"
    ev = a.evidence.join(a.events.select("event_id", "line"), on="event_id").filter(pl.col("line") == 4)
    row = ev.row(0, named=True)
    assert row["stats_kv_usage_max"] == 98.5 and row["stats_waiting_at"] == 31
    assert row["stats_kv_usage_max_src"].endswith(":4")


def test_the_engine_generation_comes_from_the_rust_line_when_nothing_else_says(tmp_path):
    a = _analyze(
        tmp_path, [tracing_prefix("10:00:10", _rust(5, 0, 10.0)), tracing_prefix("10:00:20", _rust(6, 9, 99.0, p=3))]
    )
    eng = a.config.filter(pl.col("key") == "engine").row(0, named=True)
    assert eng["value"] == "V1" and "Rust frontend" in eng["note"]
    assert a.summary()["reconciliation"]["log"]["family"] == "V1"


# ---------------------------------------------------------------------------------------- reading


def test_a_tracing_log_is_a_vllm_log_before_its_first_stats_line():
    head = (
        "2026-12-01T10:00:00.000512Z  INFO vllm_rs: starting the Rust frontend\n"
        f"{E}[2m2026-12-01T10:00:01.000001Z{E}[0m {E}[32m INFO{E}[0m {E}[2mvllm_server::lib{E}[0m{E}[2m:{E}[0m listening\n"
    )
    assert sources.sniff(head)[0] == vllm_log.KIND
    assert sources.sniff("2026-12-01T10:00:00Z  INFO hyper::server: listening\n")[0] != vllm_log.KIND


def test_tracing_json_lines_are_a_vllm_log_by_their_target():
    """The JSON formatter's lines: a vLLM log by a ``vllm_*`` target, whatever the key order; another
    program's tracing JSON is not."""
    line = tracing_json("10:00:00", "starting the Rust frontend")
    assert sources.sniff(line + "\n")[0] == vllm_log.KIND
    reordered = json.dumps({"target": "vllm_rs", "fields": {"message": "listening"}, "level": "WARN", "timestamp": "x"})
    assert sources.sniff(reordered + "\n")[0] == vllm_log.KIND
    other = json.dumps(
        {"timestamp": "2026-12-01T10:00:00Z", "level": "INFO", "fields": {"message": "m"}, "target": "hyper"}
    )
    assert sources.sniff(other + "\n")[0] != vllm_log.KIND


def test_tracing_json_levels_and_times_are_read(tmp_path):
    a = _analyze(
        tmp_path,
        [tracing_json("10:00:10", _rust(5, 0, 10.0), "WARN"), tracing_json("10:00:20", _rust(6, 9, 99.0, p=3))],
    )
    rec = a.records.filter(pl.col("kind") == "stats").sort("n")
    assert rec.get_column("level").to_list() == ["WARNING", "INFO"]
    assert [t.isoformat() for t in rec.get_column("time")] == [
        "2026-12-01T10:00:10.000250+00:00",
        "2026-12-01T10:00:20.000250+00:00",
    ]
    assert rec.get_column("text").to_list()[1].startswith("Avg prompt tput")


def test_an_engine_death_reads_the_rust_line_s_running_and_waiting(tmp_path):
    lines = HEAD_034 + [
        vllm_prefix("10:00:10", _rust(7, 3, 50.0)),
        "INFO 12-01 10:00:12 [utils.py:653] [shutdown] Process manager: force killing remaining process EngineCore pid 42",
    ]
    a = _analyze(tmp_path, lines)
    said = [w for w in a.warnings if "died mid-incident" in w]
    assert said and "7 running and 3 waiting" in said[0]


def test_a_line_cut_before_its_kv_field_counts_nothing_not_zero(tmp_path):
    line = vllm_prefix("10:00:20", _rust(120, 31, 97.6, p=4))
    cut = line[: line.index(", Preemptions")]
    a = _analyze(tmp_path, [*HEAD_034, vllm_prefix("10:00:10", _rust(5, 0, 10.0)), cut])
    assert a.stats.get_column("preemptions").to_list() == [0, None]


def test_a_wrapped_rust_line_is_read_whole(tmp_path):
    line = vllm_prefix("10:00:20", _rust(120, 31, 97.6, p=4))
    cut = line.index("Preemptions")
    a = _analyze(tmp_path, HEAD_034 + [line[:cut], line[cut:]])
    assert a.stats.get_column("preemptions").to_list() == [4] and a.events.height == 4


# ---------------------------------------------------------------------------------------- the change to make


def _pressure(prefix=vllm_prefix) -> list[str]:
    return [
        prefix("10:00:10", _rust(64, 0, 80.2)),
        prefix("10:00:20", _rust(60, 12, 99.6, p=7)),
        prefix("10:00:30", _rust(52, 20, 100.0, p=4)),
        prefix("10:00:40", _rust(50, 2, 70.0)),
    ]


def _python_lines(engine: str) -> list[str]:
    """The pressure of :func:`_pressure` as the Python frontend's stats lines (``engine``: ``Engine 000:``,
    ``2 Engines Aggregated:``)."""
    return [
        f"(APIServer pid=10) INFO 12-01 {h} [loggers.py:236] {engine} Avg prompt throughput: 1.0 tokens/s, "
        f"Avg generation throughput: 1.0 tokens/s, Running: {r} reqs, Waiting: {w} reqs, "
        f"GPU KV cache usage: {kv}%, Prefix cache hit rate: 12.0%"
        for h, r, w, kv in (("10:00:10", 64, 0, 80.2), ("10:00:20", 60, 12, 99.6), ("10:00:30", 52, 20, 100.0))
    ]


def _seqs_fix(a):
    return next((f for f in a.summary()["fixes"] if f["option"] == "--max-num-seqs"), None)


@pytest.mark.parametrize("shape", ["vllm", "tracing"])
def test_a_one_engine_rust_log_gets_the_max_num_seqs_change_its_python_twin_gets(shape, tmp_path):
    """The Rust line sums every engine; on a server of one engine (data_parallel_size 1, its default
    where the log states none) its running count is that engine's, so the stats lines size
    --max-num-seqs as the Python frontend's lines of the same workload do (before: no change at all)."""
    rust = _analyze(tmp_path, _pressure(SHAPES[shape]))
    py = analyze([str(_write(tmp_path, _python_lines("Engine 000:"), "py.log"))], OPTS)
    f, g = _seqs_fix(rust), _seqs_fix(py)
    assert f is not None and g is not None
    assert f["suggested"] == g["suggested"] == 48
    assert "data_parallel_size 1 assumed" in json.dumps(f)


def test_a_stated_single_engine_is_cited(tmp_path):
    head = [HEAD_034[0], HEAD_034[1] + ", data_parallel_size=1, disable_custom_all_reduce=False"]
    f = _seqs_fix(_analyze(tmp_path, head + _pressure()))
    assert f is not None and f["suggested"] == 48
    said = json.dumps(f)
    assert "one engine, data_parallel_size 1 (" in said and "rust.log:2)" in said and "assumed (vLLM's" not in said


def test_a_rust_log_of_several_engines_sizes_one_engine_s_lever_from_the_mean_usage(tmp_path):
    """data_parallel_size 2 stated: the line adds the engines' running counts and gives their mean KV
    usage, so one engine's share of its pool per running request is 2 x usage / running (the replicas'
    pools are alike), half the one-engine server's: --max-num-seqs (each engine's) 24 where one engine
    at the same figures gets 48; the even load it assumes is said (before: no change at all, the drop
    reason asking for preempt records)."""
    head = [HEAD_034[0], HEAD_034[1] + ", data_parallel_size=2, disable_custom_all_reduce=False"]
    a = _analyze(tmp_path, head + _pressure())
    f = _seqs_fix(a)
    assert f is not None and f["suggested"] == 24, f
    said = json.dumps(f)
    assert "sum the 2 engines of data_parallel_size 2 (" in said and "share the load evenly" in said, said
    assert a.events.height == 11  # the count stands


def test_python_aggregated_lines_of_two_engines_size_nothing(tmp_path):
    a = analyze([str(_write(tmp_path, _python_lines("2 Engines Aggregated:"), "agg.log"))], OPTS)
    st = a.stats
    assert st.get_column("engines").to_list() == [2, 2, 2]
    assert _seqs_fix(a) is None
