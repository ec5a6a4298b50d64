"""vLLM 0.33 / 0.34 logs written by hand: the defaults a silent log is given, by version.

vLLM 0.34.0 changed two defaults a preemption analysis leans on (read from the 0.33.0 and 0.34.0
wheels, vllm/config/cache.py): ``CacheConfig.DEFAULT_BLOCK_SIZE`` went from 16 to 64, and
``gpu_memory_utilization`` is unset, resolving to 1.0 under the extensible KV cache (on by default on
CUDA and ROCm: the cache is sized from the memory measured after warmup) and to 0.92 without it
(``resolved_gpu_memory_utilization``). A 0.34 log that does not state them must not be told to
"raise" gpu_memory_utilization to a value below the one in force, which would shrink the KV cache.
"""

from __future__ import annotations

from pathlib import Path

from preemptlog.analysis import AnalyzeOptions, analyze
from preemptlog.engines.vllm.config import default_rows

OPTS = AnalyzeOptions(tz="UTC", year=2026)


def _rust(running: int, waiting: int, kv: float, p: int = 0) -> str:
    pre = f", Preemptions: {p}" if p else ""
    return (
        f"(RustFrontend pid=4300) INFO 12-01 10:00:{running % 6}0 [llm/src/log_stats.rs:300] Avg prompt tput: 10.0 "
        f"toks/s, Avg generation tput: 900.0 toks/s, Reqs Running: {running}, Waiting: {waiting}{pre}, GPU KV cache "
        f"used: {kv:.1f}%, Prefix cache hit rate: 3.0%"
    )


def _log(tmp_path: Path, version: str, args: str = "") -> Path:
    lines = [
        f"(APIServer pid=1) INFO 12-01 09:59:30 [startup.py:40] vLLM server version {version}, serving model m",
        f"(APIServer pid=1) INFO 12-01 09:59:30 [startup.py:52] non-default args: {{'model_tag': 'm'{args}}}",
        f"(EngineCore pid=42) INFO 12-01 09:59:35 [core.py:101] Initializing a V1 LLM engine (v{version}) with config: "
        "model='m', max_seq_len=8192, enable_prefix_caching=True, enable_chunked_prefill=True",
        "(EngineCore pid=42) INFO 12-01 09:59:40 [kv_cache_utils.py:1170] GPU KV cache size: 90,000 tokens, "
        "Maximum concurrency for 8,192 tokens per request: 10.99x",
        _rust(60, 0, 70.0),
        _rust(61, 30, 99.0, p=5),
        _rust(62, 25, 98.7, p=3),
    ]
    p = tmp_path / f"vllm-{version}.log"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p


def _config(a) -> dict[str, dict]:
    return a.summary()["config"]


def test_a_034_log_silent_on_the_pool_settings_gets_034_defaults_and_no_fix_that_shrinks_the_cache(tmp_path):
    a = analyze([str(_log(tmp_path, "0.34.0"))], OPTS)
    s = a.summary()
    assert s["reconciliation"]["total"] == 8 and s["reconciliation"]["quality"] == "exact"
    cfg = _config(a)
    assert cfg["block_size"]["value"] == "64" and cfg["block_size"]["status"] == "default"
    gmu = cfg["gpu_memory_utilization"]
    assert gmu["value"] == "1.0" and gmu["status"] == "default" and "extensible KV cache" in gmu["note"]
    for fix in s["fixes"]:
        if fix["option"] == "--gpu-memory-utilization" and fix["suggested"] is not None:
            assert float(fix["suggested"]) > 1.0, fix  # never below the value in force
    assert any(d["id"] == "kv_room" and "already 1.0" in d["why"] for d in s["fixes_dropped"])


def test_a_034_log_stating_gpu_memory_utilization_keeps_its_value(tmp_path):
    a = analyze([str(_log(tmp_path, "0.34.0", ", 'gpu_memory_utilization': 0.8, 'block_size': 32"))], OPTS)
    cfg = _config(a)
    assert (cfg["gpu_memory_utilization"]["value"], cfg["gpu_memory_utilization"]["status"]) == ("0.8", "seen")
    assert (cfg["block_size"]["value"], cfg["block_size"]["status"]) == ("32", "seen")


def test_a_033_log_keeps_the_old_defaults(tmp_path):
    a = analyze([str(_log(tmp_path, "0.33.0"))], OPTS)
    cfg = _config(a)
    assert cfg["block_size"]["value"] == "16"
    assert cfg["gpu_memory_utilization"]["value"] == "0.92"


def test_without_a_version_the_note_names_every_default_of_the_key():
    rows = {k: (v, note) for k, v, note in default_rows(None)}
    value, note = rows["gpu_memory_utilization"]
    assert value == "0.9"
    assert "0.9 before 0.20.0, 0.92 from 0.20.0, 1.0 from 0.34.0" in note
    value, note = rows["block_size"]
    assert value == "16" and "16 before 0.34.0, 64 from 0.34.0" in note


def _kv_room(s: dict) -> dict | None:
    return next((f for f in s["fixes"] if f["option"] == "--gpu-memory-utilization"), None)


def test_a_034_log_with_gpu_memory_utilization_below_1_is_told_to_leave_it_unset(tmp_path):
    """vLLM 0.34's CacheConfig: with the extensible KV cache (its default on CUDA and ROCm) leave it unset;
    a lower value takes memory away from the KV cache. Never "+0.05" (0.85 -> 0.9) there."""
    # two engines: the Rust line's sums size the levers per engine (findings/capacity.held_share)
    a = analyze([str(_log(tmp_path, "0.34.0", ", 'gpu_memory_utilization': 0.85, 'data_parallel_size': 2"))], OPTS)
    fix = _kv_room(a.summary())
    assert fix is not None and float(fix["current"]) == 0.85 and float(fix["suggested"]) == 1.0, fix
    assert any(i.startswith("vllm_version seen") and "vllm-0.34.0.log:" in i for i in fix["inputs"]), fix
    words = " ".join(map(str, a.summary()["fixes"]))
    assert "extensible KV cache" in words


def test_a_033_log_with_gpu_memory_utilization_below_the_cap_keeps_the_step(tmp_path):
    """0.33 has no extensible KV cache: vLLM's +0.05 step (0.85 -> 0.9), never 0.34's "leave it unset";
    offered, or dropped where the stats lines' estimate (per engine, from the two engines' summed Rust
    lines) says 0.98 cannot hold the demand."""
    s = analyze(
        [str(_log(tmp_path, "0.33.0", ", 'gpu_memory_utilization': 0.85, 'data_parallel_size': 2"))], OPTS
    ).summary()
    step = [f for f in s["fixes"] if f["id"] == "kv_room"]
    dropped = [d["why"] for d in s["fixes_dropped"] if d["id"] == "kv_room"]
    assert [float(f["suggested"]) for f in step] == [0.9] or (not step and "not reachable" in " ".join(dropped))
    assert all(float(f["suggested"]) < 1.0 for f in s["fixes"] if f["option"] == "--gpu-memory-utilization")


def test_one_engine_s_rust_lines_size_the_levers_as_python_lines_do(tmp_path):
    """On one engine (data_parallel_size unstated: its default 1, said) the Rust lines' running count
    is that engine's: the stats lines' estimate sizes --max-num-seqs, and says a +0.05 step cannot hold
    the demand, as for the Python frontend's lines."""
    s = analyze([str(_log(tmp_path, "0.33.0", ", 'gpu_memory_utilization': 0.85"))], OPTS).summary()
    seqs = next(f for f in s["fixes"] if f["option"] == "--max-num-seqs")
    assert seqs["suggested"] < 61 and "data_parallel_size 1 assumed" in " ".join(seqs["inputs"])
    assert any(d["id"] == "kv_room" and d["why"].startswith("the stats lines' estimate") for d in s["fixes_dropped"])


def test_a_034_value_below_1_is_still_told_to_go_back_to_1_when_the_estimate_says_it_is_not_enough(tmp_path):
    """One engine's stats lines say even 0.98 cannot hold the demand: the +0.05 step is dropped, but on
    0.34 "leave it unset (1.0)" is vLLM's own default and more room, so it stays, said to be partial and
    ranked after the change sized to hold the demand (--max-num-seqs)."""
    s = analyze([str(_log(tmp_path, "0.34.0", ", 'gpu_memory_utilization': 0.85"))], OPTS).summary()
    options = [f["option"] for f in s["fixes"]]
    assert options.index("--max-num-seqs") < options.index("--gpu-memory-utilization"), options
    fix = _kv_room(s)
    assert float(fix["current"]) == 0.85 and float(fix["suggested"]) == 1.0 and fix["partial"] is True, fix
    assert "not enough alone, the stats lines' estimate: " in fix["text"] and "not reachable" in fix["text"]
    assert not [d for d in s["fixes_dropped"] if d["id"] == "kv_room"]
    assert s["fixes"][0]["option"] == "--max-num-seqs"
