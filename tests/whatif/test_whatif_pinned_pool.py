"""A KV pool pinned by --num-gpu-blocks-override or --kv-cache-memory-bytes: vLLM sizes it from that
option and ignores gpu_memory_utilization (kv_cache_utils: num_blocks = num_gpu_blocks_override;
--kv-cache-memory-bytes "ignores gpu_memory_utilization"). So `whatif --set
gpu_memory_utilization=X` replays the same pool, and says why, instead of rescaling it from the
memory lines as an unpinned pool is."""

from __future__ import annotations

import json

from tests.whatif.test_whatif import _bundle, _cli, _log


def _pinned(text: str, pin: str) -> str:
    first, rest = text.split("\n", 1)
    assert first.endswith("'max_num_batched_tokens': 2048}")
    return first[:-1] + f", {pin}}}\n" + rest


def test_a_pool_pinned_by_the_override_does_not_move_with_gpu_memory_utilization(tmp_path):
    # 100 blocks from 'GPU KV cache size: 1,600 tokens'; the override (seen in non-default args) pins 100
    b = _bundle(tmp_path, "pinned", _pinned(_log(), "'num_gpu_blocks_override': 100"))
    p = _cli(str(b), "--set", "gpu_memory_utilization=0.95", "-f", "json", "--tz", "UTC")
    assert p.returncode == 0, p.stderr
    rows = {r["scenario"]: r for r in json.loads(p.stdout)["scenarios"]}
    asked = rows["gpu_memory_utilization=0.95"]
    # before: floor(100 x 10.83 / 10) = 108 blocks, as if the pool followed the memory profile
    assert asked["cfg_num_gpu_blocks"] == rows["observed"]["cfg_num_gpu_blocks"] == 100
    assert asked["preemptions"] == rows["observed"]["preemptions"]
    assert "pinned by --num-gpu-blocks-override 100 (pinned/vllm.log:1)" in asked["notes"]
    assert "does not change it (100 blocks)" in asked["notes"]


def test_a_pool_pinned_by_kv_cache_memory_bytes_does_not_move_either(tmp_path):
    b = _bundle(tmp_path, "bytes", _pinned(_log(), "'kv_cache_memory_bytes': 10737418240"))
    p = _cli(str(b), "--set", "gpu_memory_utilization=0.95", "-f", "json", "--tz", "UTC")
    assert p.returncode == 0, p.stderr
    asked = json.loads(p.stdout)["scenarios"][1]
    assert asked["cfg_num_gpu_blocks"] == 100
    assert "pinned by --kv-cache-memory-bytes 10737418240 (bytes/vllm.log:1)" in asked["notes"]


def test_an_unpinned_pool_still_rescales(tmp_path):
    b = _bundle(tmp_path, "free", _log())
    p = _cli(str(b), "--set", "gpu_memory_utilization=0.95", "-f", "json", "--tz", "UTC")
    assert p.returncode == 0, p.stderr
    asked = json.loads(p.stdout)["scenarios"][1]
    assert asked["cfg_num_gpu_blocks"] == 108 and "pinned" not in asked["notes"]
