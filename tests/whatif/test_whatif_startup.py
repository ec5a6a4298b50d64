"""Configurations vLLM 0.32 would refuse to start with: said as refused, never replayed changed.

The checks are vLLM's own (vllm/v1/core/kv_cache_utils.py get_kv_cache_configs ->
_check_enough_kv_cache_memory; vllm/config/scheduler.py SchedulerConfig.verify_max_model_len),
applied by ``preemptlog.engines.vllm.config.startup_refusals``. Shapes: the check's boundary (one block
either side), the scheduler checks, a pool of one block; through the CLI a log bundle whose
configuration passes (asked ones refused and accepted side by side), a log bundle whose own
configuration fails (the check not evaluable), a records bundle without max_model_len (the
longest request is the length checked), and a fix vLLM would refuse (dropped).
"""

from __future__ import annotations

import json

import pytest

from preemptlog.engines.vllm.config import startup_refusals
from tests.whatif.test_whatif import _bundle, _cli, _log


def _check(**kw):
    base = {
        "num_gpu_blocks": 96,
        "block_size": 16,
        "max_model_len": 2032,
        "max_num_seqs": 16,
        "max_num_batched_tokens": 2048,
        "enable_chunked_prefill": True,
    }
    return startup_refusals(**{**base, **kw})


def test_the_pool_check_is_vllms_with_the_length_it_would_accept():
    # the case: 96 blocks of 16, max_model_len 2032 -> vLLM says 1520
    why = _check()
    assert len(why) == 1 and "the estimated maximum model length is 1520" in why[0]
    assert "needs 127 blocks" in why[0] and "the pool has 95" in why[0] and "kv_cache_utils.py" in why[0]
    # boundary: 127 usable blocks hold 2032 tokens exactly; one block fewer does not
    assert _check(num_gpu_blocks=128) == []
    one_less = _check(num_gpu_blocks=127)
    assert len(one_less) == 1 and "is 2016" in one_less[0]
    # a partial block counts whole: 2033 tokens need 128 blocks
    assert "is 2032" in _check(num_gpu_blocks=128, max_model_len=2033)[0]
    # another block size
    assert "is 1504" in _check(block_size=32, num_gpu_blocks=48)[0]
    # nothing left once the null block is taken
    assert "no available memory" in _check(num_gpu_blocks=1)[0]


def test_the_scheduler_checks():
    why = _check(num_gpu_blocks=4096, enable_chunked_prefill=False, max_num_batched_tokens=1024)
    assert len(why) == 1 and "max_num_batched_tokens (1024) is smaller than max_model_len (2032)" in why[0]
    assert _check(num_gpu_blocks=4096, enable_chunked_prefill=True, max_num_batched_tokens=1024) == []
    why = _check(num_gpu_blocks=4096, max_num_batched_tokens=8, max_num_seqs=16)
    assert any("greater than or equal to max_num_seqs (16)" in w for w in why)
    why = _check(num_gpu_blocks=4096, long_prefill_token_threshold=4096)
    assert any("long_prefill_token_threshold (4096)" in w and "scheduler.py" in w for w in why)
    # several at once: every reason is said
    assert len(_check(num_gpu_blocks=50, max_num_batched_tokens=8)) == 2


def _consistent_log() -> str:
    # 1,600 tokens = 100 blocks of 16; max_model_len 1024 needs 64 of the 99 usable
    return _log().replace("max_seq_len=4096", "max_seq_len=1024")


def test_whatif_says_refused_and_replays_the_rest(tmp_path):
    b = _bundle(tmp_path, "ok", _consistent_log())
    p = _cli(
        str(b),
        *("--config", "num_gpu_blocks=60"),  # 64 > 59: refused, 944 accepted
        *("--config", "num_gpu_blocks=65"),  # 64 <= 64: starts
        *("--config", "num_gpu_blocks=60,max_model_len=944"),  # the length vLLM said it accepts
        *("--config", "max_num_batched_tokens=4"),  # below max_num_seqs 8
        *("-f", "json", "--tz", "UTC"),
    )
    assert p.returncode == 0, p.stderr
    rows = {r["scenario"]: r for r in json.loads(p.stdout)["scenarios"]}
    assert rows["observed"]["status"] != "refused" and rows["observed"]["cfg_max_model_len"] == 1024
    bad = rows["num_gpu_blocks=60"]
    assert bad["status"] == "refused" and bad["preemptions"] is None and bad["latency_p95_s"] is None
    assert "vLLM would not start" in bad["notes"] and "estimated maximum model length is 944" in bad["notes"]
    assert bad["cfg_max_model_len"] == 1024  # not capped
    ok = rows["num_gpu_blocks=65"]
    assert ok["status"] != "refused" and ok["preemptions"] is not None and "would not start" not in ok["notes"]
    fitted = rows["num_gpu_blocks=60, max_model_len=944"]
    assert fitted["status"] != "refused" and fitted["preemptions"] is not None
    small = rows["max_num_batched_tokens=4"]
    assert small["status"] == "refused" and "max_num_seqs (8)" in small["notes"]
    # the terminal says it too
    t = _cli(str(b), "--config", "num_gpu_blocks=60", "--tz", "UTC")
    assert t.returncode == 0, t.stderr
    assert "num_gpu_blocks=60: vLLM would not start:" in t.stderr and "refused" in t.stdout


def test_a_bundle_whose_own_configuration_fails_the_check_is_not_evaluable(tmp_path):
    # max_model_len 4096 against a 1,600-token pool: not what a running vLLM started with
    b = _bundle(tmp_path, "odd", _log())
    p = _cli(str(b), "--config", "num_gpu_blocks=60", "-f", "json", "--tz", "UTC")
    assert p.returncode == 0, p.stderr
    obs, asked = json.loads(p.stdout)["scenarios"]
    assert "fails vLLM 0.32's start-up checks" in obs["notes"] and "not evaluable" in obs["notes"]
    assert asked["status"] != "refused" and asked["preemptions"] is not None


def _records(d, longest_prompt: int) -> None:
    lines = []
    for i in range(6):
        lines.append(
            {
                "type": "request",
                "ts": 1796000000.0 + i * 0.01,
                "step": i,
                "engine": "0",
                "request_id": f"r{i}",
                "phase": "arrival",
                "prompt_tokens": longest_prompt - 10 * i,
                "max_tokens": 100,
                "v": 2,
            }
        )
    lines.append(
        {
            "type": "step",
            "ts": 1796000000.5,
            "step": 5,
            "engine": "0",
            "at": "periodic",
            "block_size": 16,
            "num_total_blocks": 200,
            "num_free_blocks": 3,
            "v": 2,
        }
    )
    d.mkdir()
    (d / "records.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")


@pytest.mark.parametrize(("blocks", "refused"), [(20, True), (26, False)])
def test_without_max_model_len_the_longest_request_is_checked(tmp_path, blocks, refused):
    d = tmp_path / "rec"
    _records(d, 300)  # longest: 300 + 100 = 400 tokens = 25 blocks
    p = _cli(str(d), "--config", f"num_gpu_blocks={blocks}", "-f", "json", "--tz", "UTC")
    assert p.returncode == 0, p.stderr
    row = json.loads(p.stdout)["scenarios"][1]
    assert (row["status"] == "refused") is refused, row
    if refused:
        assert "the longest request of the workload" in row["notes"] and "is 304" in row["notes"]


def test_a_fix_vllm_would_refuse_is_dropped(tmp_path):
    from preemptlog.analysis import AnalyzeOptions, analyze
    from preemptlog.pipeline.bundle import Workspace
    from preemptlog.whatif import verify_fixes

    b = _bundle(tmp_path, "fix", _consistent_log())
    fixes = [
        {"id": "tiny", "option": "--num-gpu-blocks-override", "current": 100, "suggested": 40, "rank": 1},
        {"id": "more", "option": "--num-gpu-blocks-override", "current": 100, "suggested": 400, "rank": 2},
    ]
    with Workspace() as ws:
        a = analyze([str(b)], AnalyzeOptions(tz="UTC"), workspace=ws)
        kept, dropped = verify_fixes(a, [dict(x, expected_effect="e") for x in fixes])
    assert [x["id"] for x in kept] == ["more"] and kept[0]["replay"]["status"] != "refused"
    assert [x["id"] for x in dropped] == ["tiny"]
    assert "num_gpu_blocks=40: vLLM would not start" in dropped[0]["why"] and "is 624" in dropped[0]["why"]


def test_requests_longer_than_max_model_len_are_refused_or_stopped(tmp_path):
    d = tmp_path / "rec"
    _records(d, 300)  # prompts 300, 290, ..., 250; outputs 100 (max_tokens)
    p = _cli(str(d), "--config", "max_model_len=280,num_gpu_blocks=200", "-f", "json", "--tz", "UTC")
    assert p.returncode == 0, p.stderr
    obs, row = json.loads(p.stdout)["scenarios"]
    assert "max_model_len" not in obs["notes"]  # the observed one has none: nothing changes
    assert row["status"] != "refused" and row["unfinished"] == 0
    assert "3 request(s) with a prompt of 280 tokens or more are refused" in row["notes"]
    assert "3 request(s) stop at 280 tokens" in row["notes"] and "check_stop" in row["notes"]
