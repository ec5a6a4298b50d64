"""vLLM data parallel: each engine (``Engine 000:`` / ``Engine 001:`` stats lines, /metrics series
``engine="0"`` / ``engine="1"``) has its own KV pool and scheduler. The capacity figures behind a fix
(running, waiting, the share of the pool a running request holds) are those of the engine(s) whose
preemptions the fix addresses, each engine's computed on its own, and the fix says whose it used; the
headline's why names the engine whose evidence it cites. Evidence of one engine never explains
another's event."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from preemptlog import AnalyzeOptions, analyze

# 2026-12-02T03:10:00Z and 60 s later: the scrape times (the files' names)
T0 = 1796181000
CREATED = T0 - 300  # the engines started at 03:05:00

HEAD = [
    "(APIServer pid=30490) INFO 12-02 03:04:14 [api_utils.py:347]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.32.0",
    "(APIServer pid=30490) INFO 12-02 03:04:14 [api_utils.py:286] non-default args: {'model_tag': 'm', 'model': 'm', "
    "'max_model_len': 1024, 'block_size': 32, 'num_gpu_blocks_override': 64, 'max_num_batched_tokens': 1024, "
    "'max_num_seqs': 16, 'data_parallel_size': 2}",
    "(EngineCore_DP0 pid=31000) INFO 12-02 03:05:00 [kv_cache_utils.py:2619] Overriding num_gpu_blocks=32768 with "
    "num_gpu_blocks_override=64",
    "(EngineCore_DP0 pid=31000) INFO 12-02 03:05:00 [kv_cache_utils.py:2327] GPU KV cache size: 2,048 tokens, "
    "Maximum concurrency for 1,024 tokens per request: 2.00x",
]

# (running, waiting, KV %) of an engine: at rest, and in its hot window (03:10:30-03:10:50)
COOL = (3, 0, 40.0)


def _stats(engine: int, t: str, running: int, waiting: int, kv: float) -> str:
    return (
        f"(APIServer pid=30490) INFO 12-02 {t} [loggers.py:248] Engine {engine:03d}: Avg prompt throughput: 500.0 "
        f"tokens/s, Avg generation throughput: 400.0 tokens/s, Running: {running} reqs, Waiting: {waiting} reqs, "
        f"GPU KV cache usage: {kv:.1f}%, Prefix cache hit rate: 0.0%"
    )


def _log(hot: dict[int, tuple[int, int, float]], engines: tuple[int, ...] = (0, 1)) -> str:
    """Each engine's stats line every 10 s from 03:05:10 to 03:12:00; ``hot[e]`` in 03:10:30-03:10:50."""
    lines = list(HEAD)
    for s in range(310, 721, 10):
        t = f"03:{s // 60:02d}:{s % 60:02d}"
        for e in engines:
            r, w, kv = hot[e] if e in hot and 630 <= s <= 650 else COOL
            lines.append(_stats(e, t, r, w, kv))
    return "\n".join(lines) + "\n"


def _scrape(counts: dict[int, float], gauges: dict[int, tuple[int, int, float]]) -> str:
    """One /metrics page (the shape of fixtures/demo's), one series per engine index."""
    out = [
        "# HELP vllm:num_requests_running Number of requests in model execution batches.",
        "# TYPE vllm:num_requests_running gauge",
        *(f'vllm:num_requests_running{{engine="{e}",model_name="m"}} {g[0]:.1f}' for e, g in gauges.items()),
        "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
        "# TYPE vllm:num_requests_waiting gauge",
        *(f'vllm:num_requests_waiting{{engine="{e}",model_name="m"}} {g[1]:.1f}' for e, g in gauges.items()),
        "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.",
        "# TYPE vllm:kv_cache_usage_perc gauge",
        *(f'vllm:kv_cache_usage_perc{{engine="{e}",model_name="m"}} {g[2] / 100:.2f}' for e, g in gauges.items()),
        "# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.",
        "# TYPE vllm:num_preemptions_total counter",
        *(f'vllm:num_preemptions_total{{engine="{e}",model_name="m"}} {n:.1f}' for e, n in counts.items()),
        "# HELP vllm:num_preemptions_created Cumulative number of preemption from the engine.",
        "# TYPE vllm:num_preemptions_created gauge",
        *(f'vllm:num_preemptions_created{{engine="{e}",model_name="m"}} {CREATED}' for e in counts),
    ]
    return "\n".join(out) + "\n"


def _bundle(
    root: Path,
    hot: dict[int, tuple[int, int, float]],
    before: dict[int, float],
    after: dict[int, float],
    engines: tuple[int, ...] = (0, 1),
) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "vllm.log").write_text(_log(hot, engines))
    cool = {e: COOL for e in engines}
    (root / f"metrics-{T0}.prom").write_text(_scrape(before, cool))
    (root / f"metrics-{T0 + 60}.prom").write_text(_scrape(after, cool))
    return root


def _run(root: Path) -> tuple[Any, dict[str, Any]]:
    a = analyze([str(root)], AnalyzeOptions(tz="UTC"))
    return a, a.summary()


def _fix(s: dict[str, Any], option: str) -> dict[str, Any] | None:
    return next((f for f in s.get("fixes") or [] if f["option"] == option), None)


def _events(a: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for e in a.events.get_column("engine").fill_null("0").to_list():
        out[e] = out.get(e, 0) + 1
    return out


# Engine 1 hot (5 running + 6 waiting at 100 %: 20 % of the pool each); engine 0 at 40 %, nothing waiting.
ENGINE1_HOT = {1: (5, 6, 100.0)}


def test_only_engine0_preempts_engine1s_peak_sizes_nothing(tmp_path: Path) -> None:
    """Engine 0's counter rises 10 -> 35, engine 1's stays 0; only engine 1 was hot. Before: "Top fix:
    --num-gpu-blocks-override 64 -> 162 (... holds the 11 requests in the engine at the peak)" and
    --max-num-seqs 16 -> 4 (20 % of the pool each): engine 1's 5 running + 6 waiting sized engine 0's fix."""
    a, s = _run(_bundle(tmp_path / "b", ENGINE1_HOT, {0: 10, 1: 0}, {0: 35, 1: 0}))
    assert set(_events(a)) == {"0"}
    assert _fix(s, "--num-gpu-blocks-override") is None
    assert _fix(s, "--max-num-seqs") is None or _fix(s, "--max-num-seqs")["suggested"] != 4  # type: ignore[index]
    for f in s.get("fixes") or []:  # nothing of engine 1's lines: its 11 in the engine, its 20 % each
        assert "11 requests" not in str(f) and "20.0 %" not in str(f) and "engine 1" not in str(f), f
    cap = a.findings.capacity
    assert cap["held"] is None  # engine 0's stats lines show no request waiting at the ceiling
    assert cap["by_engine"]["1"]["held"]["in_engine"] == 11 and not cap["by_engine"]["1"]["addressed"]
    assert cap["by_engine"]["0"]["addressed"]
    why = {d["id"]: d["why"] for d in cap["dropped"]}
    assert "only engine 1's figures give it" in why["capacity_num_gpu_blocks_override"]
    assert "engine 0's" in why["capacity_num_gpu_blocks_override"]


def test_raising_engine1s_peak_never_moves_engine0s_fixes(tmp_path: Path) -> None:
    """The same bundle with engine 1 hotter (9 running + 20 waiting): engine 0's fixes do not change (before,
    --num-gpu-blocks-override went 162 -> 131 with engine 1's peak alone)."""
    a1, s1 = _run(_bundle(tmp_path / "b1", ENGINE1_HOT, {0: 10, 1: 0}, {0: 35, 1: 0}))
    a2, s2 = _run(_bundle(tmp_path / "b2", {1: (9, 20, 100.0)}, {0: 10, 1: 0}, {0: 35, 1: 0}))
    assert [(f["option"], f["suggested"]) for f in s1.get("fixes") or []] == [
        (f["option"], f["suggested"]) for f in s2.get("fixes") or []
    ]
    assert a1.findings.capacity["fixes"] == a2.findings.capacity["fixes"]


def test_only_engine1_preempts_its_own_figures_size_the_fix(tmp_path: Path) -> None:
    """Engine 1 preempts (0 -> 20) and is hot; engine 0 also waits at 90 % (over the 85 % of the held share,
    below the 95 % pressure ceiling) with another share but never preempts. The fix is engine 1's figures
    alone (20 % each, 11 in the engine: 64 -> 162, max_num_seqs 4) and says so; before, engine 0's lines
    were pooled into the share (64 -> 129)."""
    hot = {0: (10, 2, 90.0), 1: (5, 6, 100.0)}
    a, s = _run(_bundle(tmp_path / "b", hot, {0: 0, 1: 0}, {0: 0, 1: 20}))
    assert set(_events(a)) == {"1"}
    nbo = _fix(s, "--num-gpu-blocks-override")
    assert nbo is not None and nbo["suggested"] == 162 and nbo.get("engine") == "1", nbo
    assert nbo["expected_effect"].startswith("engine 1's figures"), nbo["expected_effect"]
    assert "engine 0" not in nbo["expected_effect"]
    mns = _fix(s, "--max-num-seqs")
    assert mns is not None and mns["suggested"] == 4 and mns.get("engine") == "1", mns
    held = a.findings.capacity["held"]
    assert held["share"] == 20.0 and held["in_engine"] == 11 and "of engine 1" in held["text"]
    # the held lines are engine 1's only: every line it cites is an Engine 001 line
    log = (tmp_path / "b" / "vllm.log").read_text().splitlines()
    for ref in held["src"].replace(" (+1 more)", "").split(", "):
        assert "Engine 001:" in log[int(ref.rsplit(":", 1)[1]) - 1]


# Both engines hot, with different figures: engine 0 4 running + 3 waiting (25 % each), engine 1 5 + 6 (20 %).
BOTH_HOT = {0: (4, 3, 100.0), 1: (5, 6, 100.0)}


def test_both_preempt_each_engines_figures_on_their_own(tmp_path: Path) -> None:
    """Both engines preempt and both were hot with their own figures. Each engine's own: engine 0 needs
    max_num_seqs 3 (25 % each), engine 1 a pool of 162 blocks (11 x 20 % x 1.15): each lever keeps the
    engine needing the most and names it. Before, the share was the mean over both engines' lines and the
    requests in the engine the larger engine's count: neither engine's figures (64 -> 183)."""
    a, s = _run(_bundle(tmp_path / "b", BOTH_HOT, {0: 10, 1: 0}, {0: 35, 1: 20}))
    assert set(_events(a)) == {"0", "1"}
    nbo = _fix(s, "--num-gpu-blocks-override")
    assert nbo is not None and nbo["suggested"] == 162 and nbo["engine"] == "1", nbo
    assert nbo["expected_effect"].startswith("engine 1's figures (it needs the most of engines 0, 1)")
    mns = _fix(s, "--max-num-seqs")
    assert mns is not None and mns["suggested"] == 3 and mns["engine"] == "0", mns
    assert mns["expected_effect"].startswith("engine 0's figures (it needs the most of engines 0, 1)")
    by = a.findings.capacity["by_engine"]
    assert by["0"]["held"]["share"] == 25.0 and by["0"]["held"]["in_engine"] == 7
    assert by["1"]["held"]["share"] == 20.0 and by["1"]["held"]["in_engine"] == 11


def test_both_preempt_headline_names_each_engines_why(tmp_path: Path) -> None:
    """Each engine's why from its own pressure (engine 0 up to 3 waiting, engine 1 up to 6), named; before,
    one pooled "KV cache exhausted, usage 100 %, up to 6 waiting" for both."""
    _, s = _run(_bundle(tmp_path / "b", BOTH_HOT, {0: 10, 1: 0}, {0: 35, 1: 20}))
    h = s["headline"]
    assert "(engines 0, 1): engine 0: KV cache exhausted, usage 100 %, up to 3 waiting" in h, h
    assert "; engine 1: KV cache exhausted, usage 100 %, up to 6 waiting" in h, h
    assert set(s["cause"]["by_engine"]) == {"0", "1"}
    assert s["cause"]["by_engine"]["0"]["pressure"]["max_waiting"] == 3


def _scrapes_only(root: Path) -> Path:
    """Engines 0 and 1 both preempt (10 -> 35, 100 -> 110); only engine 1 is hot in the second scrape
    (100 %, 8 running, 12 waiting), engine 0 at 30 %: no log, so no version and no code to judge by."""
    root.mkdir(parents=True, exist_ok=True)
    (root / f"metrics-{T0}.prom").write_text(_scrape({0: 10, 1: 100}, {0: (4, 0, 30.0), 1: (4, 0, 60.0)}))
    (root / f"metrics-{T0 + 60}.prom").write_text(_scrape({0: 35, 1: 110}, {0: (4, 0, 30.0), 1: (8, 12, 100.0)}))
    return root


def test_headline_never_gives_one_engines_pressure_as_anothers_why(tmp_path: Path) -> None:
    """Engine 0's 25 events are undetermined (KV 30 %); engine 1's 10 are KV space at 100 % with 12 waiting.
    Before: "35 preemptions ... (engines 0, 1): KV cache exhausted, usage 100 %, up to 12 waiting" for all."""
    a, s = _run(_scrapes_only(tmp_path / "c"))
    assert _events(a) == {"0": 25, "1": 10}
    h = s["headline"]
    assert "(engines 0, 1): engine 1: KV cache exhausted, usage 100 %, up to 12 waiting" in h, h
    assert "; engine 0: 25 undetermined" in h, h
    by = s["cause"]["by_engine"]
    assert by["0"]["pressure"] is None and by["0"]["undetermined"] == 25
    assert by["1"]["pressure"]["peak_kv_usage"] == 100.0 and by["1"]["g1"] == 10


def test_not_visible_pressure_words_per_engine(tmp_path: Path) -> None:
    """A stock V1 log of two engines, no scrape (the count is not visible): the pressure of each engine said
    on its own, never engine 0's peak beside engine 1's queue."""
    root = tmp_path / "nv"
    root.mkdir()
    (root / "vllm.log").write_text(_log({0: (4, 3, 97.0), 1: (5, 6, 100.0)}))
    _, s = _run(root)
    assert not s["count_visible"]
    h = s["headline"]
    assert "engine 0: usage 97 %, up to 3 waiting" in h and "engine 1: usage 100 %, up to 6 waiting" in h, h
    fixes = s.get("fixes") or []
    assert fixes and all(f.get("engine") in {"0", "1"} for f in fixes if f.get("estimated") == "stats lines"), fixes


@pytest.mark.parametrize("engine", [0, 1])
def test_one_engine_log_is_said_as_before(tmp_path: Path, engine: int) -> None:
    """A log of one engine (no data parallelism, or one rank's): no engine named in the fix or the why,
    the figures those of its lines, as they always were."""
    root = _bundle(tmp_path / f"one{engine}", {engine: (5, 6, 100.0)}, {engine: 10}, {engine: 35}, engines=(engine,))
    a, s = _run(root)
    assert set(_events(a)) == {str(engine)}
    nbo = _fix(s, "--num-gpu-blocks-override")
    assert nbo is not None and nbo["suggested"] == 162 and "engine" not in nbo, nbo
    assert nbo["expected_effect"].startswith("a KV pool of 162 blocks holds the 11 requests in the engine")
    cap = a.findings.capacity
    assert "by_engine" not in cap and "engine" not in cap
    assert cap["held"]["text"].startswith("3 stats line(s) with requests waiting")
    assert "by_engine" not in s["cause"] and "pressure_by_engine" not in s["cause"]
    assert f"(engine {engine}): KV cache exhausted, usage 100 %, up to 6 waiting, 03:10:30-03:10:50;" in s["headline"]
