"""Every line shape the vLLM log source claims to recognise, checked field by field (like lnav samples)."""

from __future__ import annotations

import pytest

from preemptlog.sources import vllm_log

from ..conftest import write_lines


@pytest.mark.parametrize("line,expected", vllm_log.SAMPLES, ids=[f"sample{i}" for i in range(len(vllm_log.SAMPLES))])
def test_sample(tmp_path, line, expected):
    path = write_lines(tmp_path / "x.log", [line])
    df = vllm_log.read(str(path), 0)
    if expected.get("_dropped"):
        assert df.height == 0, df
        return
    assert df.height == 1, df
    row = df.row(0, named=True)
    for key, value in expected.items():
        assert row[key] == value, (key, row[key], value)


def test_record_schema_is_declared(tmp_path):
    path = write_lines(tmp_path / "x.log", [line for line, _ in vllm_log.SAMPLES])
    df = vllm_log.read(str(path), 3)
    assert {k: str(v) for k, v in df.schema.items()} == vllm_log.RECORD_SCHEMA
    assert vllm_log.scan_empty().schema == df.schema


def test_samples_cover_every_marker_kind():
    covered = {exp.get("kind") for _, exp in vllm_log.SAMPLES}
    essential = {"v0_preempt", "marker", "stats", "req_received", "req_added", "req_finished", "req_aborted"}
    assert essential <= covered


def test_prompt_quoting_preempted_stays_a_request(tmp_path):
    line = (
        "INFO 08-01 10:00:00 [logger.py:41] Received request r1: prompt: 'why was my job PREEMPTED?', "
        "params: SamplingParams(max_tokens=5), prompt_token_ids: [1, 2], lora_request: None."
    )
    df = vllm_log.read(str(write_lines(tmp_path / "x.log", [line])), 0)
    assert df.get_column("kind").to_list() == ["req_received"]


def test_lone_cr_splits_logical_lines(tmp_path):
    raw = (
        b"Capturing CUDA graph shapes:  10%|# | 7/67\rCapturing 100%|###| 67/67\r"
        b"INFO 07-13 20:11:00 [loggers.py:1] Engine 000: Avg prompt throughput: 1.0 tokens/s, Avg generation "
        b"throughput: 1.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.0%, Prefix cache hit rate: 0.0%\n"
    )
    p = tmp_path / "x.log"
    p.write_bytes(raw)
    df = vllm_log.read(str(p), 0)
    assert df.select("n", "seg", "kind").rows() == [(1, 2, "stats")]


def test_invalid_utf8_and_nul_do_not_fail(tmp_path):
    p = tmp_path / "x.log"
    p.write_bytes(
        b"\xff\xfe garbage \x00 here\n"
        b"WARNING 05-02 14:03:11 [scheduler.py:1775] Sequence group \xc3\x28bad is preempted by "
        b"PreemptionMode.SWAP mode because there is not enough KV cache space. total_num_cumulative_preemption=1\n"
    )
    df = vllm_log.read(str(p), 0)
    assert df.get_column("kind").to_list() == ["v0_preempt"]
    assert "\ufffd" in df.get_column("text")[0]
