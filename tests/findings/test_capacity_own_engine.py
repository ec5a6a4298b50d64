"""The capacity levers of one engine are sized from that engine's own stats lines: a vLLM log beside
an SGLang log (one bundle, not split) never sizes vLLM's --max-num-seqs from SGLang's batch lines."""

from __future__ import annotations

from pathlib import Path

from preemptlog import AnalyzeOptions, analyze
from preemptlog.engines import find, stats_of
from preemptlog.findings.capacity import held_share


def _bundle(tmp_path: Path) -> Path:
    v0 = ["INFO 03-01 10:00:00 api_server.py:1] vLLM API server version 0.6.3"]
    v0 += [
        f"WARNING 03-01 10:05:0{i} [scheduler.py:1481] Sequence group c{i} is preempted by PreemptionMode.RECOMPUTE "
        "mode because there is not enough KV cache space. This can affect the end-to-end performance. Increase "
        f"gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
        f"total_num_cumulative_preemption={1 + 50 * i}"
        for i in range(3)
    ]
    (tmp_path / "vllm.log").write_text("\n".join(v0) + "\n")
    sg = [
        "[2026-03-01 10:00:00] server_args=ServerArgs(model_path='a', tp_size=1)",
        "[2026-03-01 10:00:01] max_total_num_tokens=400000, chunked_prefill_size=8192, max_prefill_tokens=16384, "
        "max_running_requests=4096, context_len=131072",
    ]
    sg += [
        f"[2026-03-01 10:05:{s:02d}] Decode batch, #running-req: 108, #token: 400000, token usage: 1.00, "
        "cuda graph: True, gen throughput (token/s): 1000.00, #queue-req: 40"
        for s in range(0, 60, 10)
    ]
    (tmp_path / "sglang.log").write_text("\n".join(sg) + "\n")
    return tmp_path


def test_vllm_levers_never_read_sglang_batch_lines(tmp_path: Path) -> None:
    a = analyze([str(_bundle(tmp_path))], AnalyzeOptions(tz="UTC", year=2026))
    vllm, sglang = find("vllm"), find("sglang")
    assert vllm is not None and sglang is not None
    assert held_share(a, vllm) is None  # the vLLM log has no stats line with requests waiting
    own = held_share(a, sglang)
    assert own is not None and "sglang.log" in own["src"]
    fixes = a.summary().get("fixes") or []
    for f in fixes:
        if f["option"].startswith("--max-num-seqs") or f["option"].startswith("--gpu-memory"):
            assert not any("sglang.log" in i for i in f.get("inputs") or []), f
    # before: --max-num-seqs 256 -> 96 from "6 stats line(s) ... (sglang.log:3 ...): 108 running"
    assert not any(f["option"] == "--max-num-seqs" and f.get("suggested") == 96 for f in fixes)


def test_stats_of_splits_the_frame_by_engine(tmp_path: Path) -> None:
    a = analyze([str(_bundle(tmp_path))], AnalyzeOptions(tz="UTC", year=2026))
    vllm, sglang = find("vllm"), find("sglang")
    assert vllm is not None and sglang is not None
    mine = a.stats.filter(stats_of(sglang))
    assert mine.height == 6 and set(mine.get_column("source").to_list()) == {f"{tmp_path.name}/sglang.log"}
    assert a.stats.filter(stats_of(vllm)).height == 0
