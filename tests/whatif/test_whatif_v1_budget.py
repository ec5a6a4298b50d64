"""The what-if's token budget where a vLLM V1 log does not state it: vLLM's default on the GPU the bundle shows.

vLLM sets an unset max_num_batched_tokens in the branch of vllm/engine/arg_utils.py get_batch_defaults that
sets max_num_seqs (0.8+; 0.32-0.34 read): for the API server 2048 on a GPU below 70 GiB or an A100, 8192 on
one of >= 70 GiB, 16384 from 160 GiB; the LLM class 8192 / 16384 / 16384; on CPU 2048 (API server) or 4096
(LLM class) x world size. Before, whatif replayed every such V1 log with 8192, said as "8192 (vLLM V1 default
for serving)": an L4, A10 or A100 API server ran with 4x vLLM's budget in the replay. Now the configuration
stage's GPU evidence for max_num_seqs (vLLM's memory profiling line, nvidia-smi, the MoE config file's
device name, vLLM's CPU KV cache line, a stats line running more than 256) gives the tier, and the
configuration frame carries the default (a ``default`` row) the what-if takes.

Shapes (hand-written V1 0.10.0 API-server logs, through the CLI): a small GPU (its total_gpu_memory line;
an L4 nvidia-smi snapshot), an H100-class GPU (its name in the MoE config file's; an H200; a B200), an
A100-80GB, one with no GPU evidence, one that states max_num_batched_tokens, CPU with tensor parallel 2,
a stats line of 400 running, chunked prefill stated off, vLLM 0.7.3's V1.
"""

from __future__ import annotations

import json

import polars as pl
import pytest

from preemptlog import AnalyzeOptions, analyze
from tests.whatif.test_whatif import _bundle, _cli, _log

E = "(EngineCore_DP0 pid=2) {lvl} 08-01 10:00:0{s} [{f}] "
SRC = "vllm/engine/arg_utils.py get_batch_defaults"
HINT = "give --base max_num_batched_tokens=N"


def _v1(*extra: str, budget: int | None = None, engine_args: str = "") -> str:
    """test_whatif's V1 0.10.0 API-server log (its 'non-default args' and engine config lines) without a
    stated budget (``budget``: one in the args), ``extra`` lines after the engine config line."""
    text = _log().replace(", 'max_num_batched_tokens': 2048", f", 'max_num_batched_tokens': {budget}" if budget else "")
    text = text.replace("chunked_prefill_enabled=True, ", engine_args)
    head, rest = text.split("\n", 2)[:2], text.split("\n", 2)[2]
    return "\n".join([*head, *extra, rest])


def _memory(gib: float) -> str:
    # V1 0.8-0.10's memory profiling line (gpu_worker.py)
    return E.format(lvl="INFO", s=2, f="gpu_worker.py:227") + (
        f"Memory profiling takes 4.12 seconds. the current vLLM instance can use total_gpu_memory ({gib:.2f}GiB) x "
        f"gpu_memory_utilization (0.90) = {gib * 0.9:.2f}GiB"
    )


def _moe(device: str) -> str:
    # vLLM's fused-MoE config file name holds the GPU's name (fused_moe.py get_config_file_name)
    return E.format(lvl="WARNING", s=2, f="fused_moe.py:888") + (
        "Using default MoE config. Performance might be sub-optimal! Config file not found at "
        f"['/v/fused_moe/configs/E=128,N=384,device_name={device}.json']"
    )


def _run(tmp_path, name: str, text: str, *args: str, smi: str | None = None) -> dict:
    b = _bundle(tmp_path, name, text)
    if smi is not None:
        (b / "gpu.txt").write_text(smi)
    p = _cli(str(b), "-f", "json", "--tz", "UTC", *args)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def _budget(doc: dict) -> int:
    return doc["scenarios"][0]["cfg_max_num_batched_tokens"]


def _said(doc: dict) -> str:
    said = [a for a in doc["config_assumptions"] if a.startswith("max_num_batched_tokens not in the bundle")]
    assert len(said) == 1, doc["config_assumptions"]
    return said[0]


def test_a_small_gpu_replays_2048_with_its_memory_line_and_a_stated_budget_is_kept(tmp_path):
    doc = _run(tmp_path, "l40s", _v1(_memory(44.42)))
    assert _budget(doc) == 2048  # before: 8192
    assert _said(doc) == (
        "max_num_batched_tokens not in the bundle: taken as 2048 (vLLM 0.10.0's API-server default on this GPU "
        f"(total_gpu_memory 44.42 GiB (l40s/vllm.log:3), below 70 GiB; {SRC}))"
    )
    assert not [a for a in doc["config_assumptions"] if "V1 default for serving" in a]
    # the same log stating its budget: the value stated, nothing assumed of it
    doc = _run(tmp_path, "stated", _v1(_memory(44.42), budget=4096))
    assert _budget(doc) == 4096
    assert not [a for a in doc["config_assumptions"] if a.startswith("max_num_batched_tokens")]


def test_an_l4_nvidia_smi_snapshot_beside_the_log_names_the_small_tier(tmp_path):
    doc = _run(tmp_path, "l4", _v1(), smi="name, memory.total [MiB]\nNVIDIA L4, 23034 MiB\n")
    assert _budget(doc) == 2048
    said = _said(doc)
    assert "taken as 2048 (vLLM 0.10.0's API-server default on this GPU (gpu_memory_total 22.49" in said
    assert "(l4/gpu.txt:2), below 70 GiB" in said and SRC in said and HINT not in said


@pytest.mark.parametrize(
    ("device", "budget", "why"),
    [
        (
            "NVIDIA_H100_80GB_HBM3",
            8192,
            "NVIDIA H100 80GB HBM3 (h/vllm.log:3), 80 GB in its name, at least 70 GiB and not an A100",
        ),
        ("NVIDIA_H200", 8192, "141 GB: every H200 has it, assumed from the maker's specification, at least 70 GiB"),
        ("NVIDIA_B200", 16384, "180 GB: every B200 has it, assumed from the maker's specification, at least 160 GiB"),
    ],
)
def test_an_h100_class_gpu_replays_its_tiers_budget_and_says_why(tmp_path, device, budget, why):
    doc = _run(tmp_path, "h", _v1(_moe(device)))
    assert _budget(doc) == budget
    said = _said(doc)
    # before: "taken as 8192 (vLLM V1 default for serving)", whatever the GPU
    assert said.startswith(f"max_num_batched_tokens not in the bundle: taken as {budget} (vLLM 0.10.0's API-server ")
    assert why in said and SRC in said and HINT not in said, said


def test_an_a100_80gb_keeps_the_small_gpus_2048(tmp_path):
    doc = _run(tmp_path, "a100", _v1(_moe("NVIDIA_A100-SXM4-80GB")))
    assert _budget(doc) == 2048  # before: 8192
    said = _said(doc)
    assert "NVIDIA A100-SXM4-80GB (a100/vllm.log:3) keeps the small GPUs' default whatever its memory" in said
    assert SRC in said and HINT not in said, said


def test_without_gpu_evidence_2048_is_said_to_be_assumed_with_the_other_tier(tmp_path):
    doc = _run(tmp_path, "none", _v1())
    assert _budget(doc) == 2048  # the small GPUs' default, as max_num_seqs 256 is
    assert _said(doc) == (
        "max_num_batched_tokens not in the bundle: taken as 2048, assumed (vLLM 0.10.0's API-server default on a "
        "GPU below 70 GiB or an A100 (the bundle shows neither the GPU nor its memory; 8192 on a GPU of >= 70 GiB "
        f"other than an A100, 16384 from 160 GiB; {HINT}; {SRC}))"
    )
    # --base gives the real one: nothing assumed of it
    doc = _run(tmp_path, "given", _v1(), "--base", "max_num_batched_tokens=8192")
    assert _budget(doc) == 8192
    assert not [a for a in doc["config_assumptions"] if a.startswith("max_num_batched_tokens")]


def test_the_analysis_configuration_carries_vllms_default_but_the_evidence_does_not(tmp_path):
    # the configuration frame shows vLLM's default with its tier (summary, what-if); the rules and the changes
    # read only a budget the bundle states (a GPU the bundle may not show would move it 4x)
    p = tmp_path / "vllm.log"
    text = _log(preemptions=2).replace(", 'max_num_batched_tokens': 2048", "")
    first, rest = text.split("\n", 1)
    p.write_text("\n".join([first, _memory(44.42), rest]))
    a = analyze([str(p)], AnalyzeOptions(tz="UTC", year=2026))
    [row] = a.config.filter(pl.col("key") == "max_num_batched_tokens").to_dicts()
    assert (row["value"], row["status"]) == ("2048", "default"), row
    assert row["note"].startswith("assumed: vLLM 0.10.0's API-server default on this GPU (total_gpu_memory 44.42 GiB")
    assert a.evidence.height and a.evidence.get_column("cfg_max_num_batched_tokens").null_count() == a.evidence.height


def test_cpu_takes_2048_per_worker_for_the_api_server(tmp_path):
    kv = E.format(lvl="INFO", s=3, f="kv_cache_utils.py:2327") + (
        "CPU KV cache size: 2,048 tokens, Maximum concurrency for 1,024 tokens per request: 2.00x"
    )
    doc = _run(tmp_path, "cpu", _v1(kv, engine_args="tensor_parallel_size=2, "))
    assert _budget(doc) == 4096
    said = _said(doc)
    assert "taken as 4096 (vLLM 0.10.0's API-server default on CPU (CPU (cpu/vllm.log:3), 2048 x world size 2: " in said
    assert "tensor_parallel_size 2 (cpu/vllm.log:2)" in said and f"{SRC}, cpu specific default values" in said


def test_more_running_than_256_on_one_engine_is_a_large_gpus_8192(tmp_path):
    text = _v1().replace("Running: 8 reqs", "Running: 400 reqs", 1)
    assert "Running: 400 reqs" in text
    doc = _run(tmp_path, "busy", text)
    assert _budget(doc) == 8192
    said = _said(doc)
    assert (
        "taken as 8192, assumed (vLLM 0.10.0's API-server default on a GPU of >= 70 GiB other than an A100 (400 "
        in said
    )
    assert "16384 if it has 160 GiB or more" in said and HINT in said, said


def test_chunked_prefill_stated_off_raises_the_default_to_max_model_len(tmp_path):
    text = _v1(engine_args="chunked_prefill_enabled=False, ").replace("max_seq_len=4096", "max_seq_len=16384")
    doc = _run(tmp_path, "off", text)
    assert _budget(doc) == 16384
    said = _said(doc)
    assert said.startswith("max_num_batched_tokens not in the bundle: taken as 16384 (max_model_len 16384: with ")
    assert "_set_default_max_num_seqs_and_batched_tokens_args: max(max_model_len, 2048)" in said, said


def test_v1_before_0_8_takes_2048_for_the_api_server_and_says_so(tmp_path):
    doc = _run(tmp_path, "old", _v1(_memory(79.19)).replace("(v0.10.0)", "(v0.7.3)"))
    assert _budget(doc) == 2048
    said = _said(doc)
    assert said.startswith("max_num_batched_tokens not in the bundle: taken as 2048, assumed (vLLM 0.7.3's V1 ")
    assert "before 0.8.0" in said and "EngineArgs._override_v1_engine_args" in said and HINT in said, said


def test_the_openai_servers_request_lines_show_an_api_server_else_the_llm_class_is_said(tmp_path):
    # no server version line, no APIServer process prefix: the 'Received request' lines (the OpenAI server's
    # request logger; the LLM class logs none) make it the API server's 2048, not the LLM class's 8192
    def budget_row(name: str, text: str) -> dict:
        p = tmp_path / f"{name}.log"
        p.write_text(text.replace("(APIServer pid=1) ", ""))
        [row] = (
            analyze([str(p)], AnalyzeOptions(tz="UTC", year=2026))
            .config.filter(pl.col("key") == "max_num_batched_tokens")
            .to_dicts()
        )
        return row

    row = budget_row("served", _v1())
    assert row["value"] == "2048" and row["note"].startswith("assumed: vLLM 0.10.0's API-server default "), row
    row = budget_row("offline", _log(requests=False).replace(", 'max_num_batched_tokens': 2048", ""))
    assert row["value"] == "8192" and row["note"].startswith("assumed: vLLM 0.10.0's LLM-class default "), row
    assert "no API server line seen: 2048 for the API server" in row["note"], row
