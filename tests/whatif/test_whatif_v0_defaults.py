"""The what-if's token budget where a vLLM V0 log does not state it: V0's defaults, not V1's.

vLLM V0 (vllm/engine/arg_utils.py EngineArgs.create_engine_config, vllm/config.py SchedulerConfig of
the 0.5-0.10 line) leaves chunked prefill off unless max_model_len is over 32K on a GPU, logs "Chunked
prefill is enabled with max_num_batched_tokens=N" whenever it is on, and without it sets
max_num_batched_tokens to max(max_model_len, 2048). Before, whatif replayed every such log with V1's
defaults (chunked prefill on, 8192), said as "the V1 default". Also: a vLLM version newer than the
newest modelled is said to be replayed as that one's scheduler.

Shapes (hand-written logs, through the CLI): V0 without a chunked line, with and without
max_model_len (under, at and over 32K; a request longer than 2048 tokens); V0 with the chunked line;
V0 whose engine line says chunked prefill is on but no budget line (0.6.3: 512, 0.8.5: 2048); a V0
log cut before its start with --base num_gpu_blocks; --base max_model_len and
enable_chunked_prefill moving V0's unstated budget; the same workload in a V1 log (V1's defaults: vLLM's
API-server default on a GPU the log does not show); --base / --set / a log naming vllm_version 99.0.
"""

from __future__ import annotations

import json

import pytest

from tests.whatif.test_whatif import _bundle, _cli, _log

H = "INFO 08-01 10:{m:02d}:{s:02d} {f}] "
PREEMPT = (
    "WARNING 08-01 10:00:31 scheduler.py:1560] Sequence group cmpl-0003 is preempted by PreemptionMode.RECOMPUTE "
    "mode because there is not enough KV cache space. This can affect the end-to-end performance. Increase "
    "gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. total_num_cumulative_preemption=1"
)


def _v0(*head: str, version: str | None = "0.6.3", blocks: bool = True, long_prompt: int | None = None) -> str:
    """A V0 log: the server version line, ``head`` (config lines), '# GPU blocks', 24 request lines with
    prompt ids (the first one ``long_prompt`` tokens long, if given), V0 stats lines and a preemption warning."""
    out = [H.format(m=0, s=0, f="api_server.py:212") + f"vLLM API server version {version}"] if version else []
    out += list(head)
    if blocks:
        out.append(H.format(m=0, s=2, f="gpu_executor.py:122") + "# GPU blocks: 400, # CPU blocks: 512")
    for i in range(24):
        p = long_prompt if long_prompt and i == 0 else 150 + (i % 4) * 40
        ids = ", ".join(str(100 + j % 900) for j in range(p))
        out.append(
            H.format(m=0, s=10 + i // 2, f="logger.py:37") + f"Received request cmpl-{i:04d}: prompt: 'x', "
            f"params: SamplingParams(n=1, temperature=0.7, max_tokens={120 + (i % 3) * 30}, min_tokens=0), "
            f"prompt_token_ids: [{ids}], lora_request: None, prompt_adapter_request: None."
        )
    for k in range(6):
        s = 25 + k * 5
        out.append(
            H.format(m=s // 60, s=s % 60, f="metrics.py:349")
            + f"Avg prompt throughput: {800 - k * 100:.1f} tokens/s, Avg generation throughput: {200 + k * 10:.1f} "
            f"tokens/s, Running: 8 reqs, Swapped: 0 reqs, Pending: {12 - k} reqs, GPU KV cache usage: 97.0%, "
            "CPU KV cache usage: 0.0%."
        )
        if k == 1:
            out.append(PREEMPT)
    return "\n".join(out) + "\n"


def _args(max_model_len: int) -> str:
    return H.format(m=0, s=0, f="api_server.py:213") + (
        f"args: Namespace(host=None, port=8000, model='m', max_model_len={max_model_len}, block_size=16, "
        "max_num_batched_tokens=None, preemption_mode=None, disable_log_requests=False)"
    )


def _run(tmp_path, name: str, text: str, *args: str) -> dict:
    p = _cli(str(_bundle(tmp_path, name, text)), "-f", "json", "--tz", "UTC", *args)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def _budget(doc: dict) -> tuple[bool, int]:
    row = doc["scenarios"][0]
    return row["cfg_enable_chunked_prefill"], row["cfg_max_num_batched_tokens"]


def _said(doc: dict, key: str) -> str:
    said = [a for a in doc["config_assumptions"] if a.startswith(key + " not in the bundle")]
    assert len(said) == 1, doc["config_assumptions"]
    return said[0]


def test_a_v0_log_without_a_chunked_line_replays_chunked_prefill_off_and_the_longest_request_as_budget(tmp_path):
    # before: chunked prefill on and 8192, "the V1 default"; V0 had it off, and its budget max(max_model_len, 2048)
    doc = _run(tmp_path, "v0", _v0(long_prompt=2600))
    assert _budget(doc) == (False, 2600 + 120)
    chunked = _said(doc, "enable_chunked_prefill")
    assert chunked.startswith("enable_chunked_prefill not in the bundle: taken as off (the V0 default: ")
    assert "v0/vllm.log:" in chunked and "over 32K" in chunked and "vllm/engine/arg_utils.py" in chunked
    assert "'Chunked prefill is enabled with max_num_batched_tokens=N'" in chunked and "no max_model_len" in chunked
    mbt = _said(doc, "max_num_batched_tokens")
    assert mbt.startswith("max_num_batched_tokens not in the bundle: taken as 2720 (the V0 default without chunked ")
    assert "max(max_model_len, 2048)" in mbt and "vllm/config.py SchedulerConfig" in mbt
    assert "the workload's longest request, 2720 tokens" in mbt and "--base max_num_batched_tokens=N" in mbt
    assert not [a for a in doc["config_assumptions"] if "V1 default" in a]
    # the V0 caveat no longer says the defaults taken are V1's
    caveat = next(a for a in doc["config_assumptions"] if a.startswith("the incident ran vLLM's V0 engine"))
    assert "defaults it takes are V1's" not in caveat and "under V0's token budget" in caveat


def test_short_requests_take_v0s_floor_of_2048(tmp_path):
    doc = _run(tmp_path, "v0", _v0())
    assert _budget(doc) == (False, 2048)
    assert "taken as 2048 (the V0 default" in _said(doc, "max_num_batched_tokens")


@pytest.mark.parametrize(
    ("mml", "budget", "why"),
    [
        (4096, 4096, "max_model_len 4096 is not over 32K"),
        (1024, 2048, "max_model_len 1024 is not over 32K"),
        (40000, 40000, "max_model_len 40000 is over 32K: one of V0's exceptions held"),
    ],
)
def test_a_v0_log_with_max_model_len_replays_max_of_it_and_2048(tmp_path, mml, budget, why):
    doc = _run(tmp_path, "v0", _v0(_args(mml)))
    assert _budget(doc) == (False, budget)
    assert doc["scenarios"][0]["cfg_max_model_len"] == mml
    assert why in _said(doc, "enable_chunked_prefill")
    mbt = _said(doc, "max_num_batched_tokens")
    assert f"taken as {budget} (the V0 default without chunked prefill (V0: v0/vllm.log:" in mbt
    assert f"max(max_model_len {mml}, 2048)" in mbt
    assert not [a for a in doc["config_assumptions"] if "V1 default" in a]


def test_a_v0_log_with_the_chunked_line_keeps_its_values(tmp_path):
    line = H.format(m=0, s=1, f="config.py:1136") + "Chunked prefill is enabled with max_num_batched_tokens=512."
    doc = _run(tmp_path, "v0", _v0(_args(4096), line))
    assert _budget(doc) == (True, 512)
    assert not [a for a in doc["config_assumptions"] if "max_num_batched_tokens" in a or "chunked_prefill" in a]
    caveat = next(a for a in doc["config_assumptions"] if a.startswith("the incident ran vLLM's V0 engine"))
    assert "defaults it takes are V1's" not in caveat


@pytest.mark.parametrize(
    ("version", "line", "budget"),
    [
        ("0.6.3", "Initializing an LLM engine (v0.6.3) with config: model='m', max_seq_len=4096, ", 512),
        ("0.8.5", "Initializing a V0 LLM engine (v0.8.5) with config: model='m', max_seq_len=4096, ", 2048),
    ],
)
def test_chunked_prefill_stated_on_without_its_budget_takes_the_v0_default_of_the_version(
    tmp_path, version, line, budget
):
    # the engine line says chunked prefill is on, the 'Chunked prefill is enabled' line is not in the log
    engine = (
        H.format(m=0, s=1, f="llm_engine.py:237") + line + "chunked_prefill_enabled=True use_async_output_proc=True"
    )
    doc = _run(tmp_path, "v0", _v0(engine, version=version))
    assert _budget(doc) == (True, budget)
    mbt = _said(doc, "max_num_batched_tokens")
    assert f"taken as {budget} (the V0 default with chunked prefill in vLLM {version} (V0: v0/vllm.log:" in mbt
    assert "512 before 0.6.5, 2048 from it" in mbt
    assert not [a for a in doc["config_assumptions"] if a.startswith("enable_chunked_prefill")]


def test_a_v0_log_cut_before_its_start_with_the_pool_on_the_command_line(tmp_path):
    # no version, no '# GPU blocks': V0 is told by the stats lines and the preemption warning; the pool is
    # given with --base. Before: the replay took ReplayConfig's V1 defaults without a word
    doc = _run(tmp_path, "v0", _v0(version=None, blocks=False), "--base", "num_gpu_blocks=400")
    assert doc["scenarios"][0]["cfg_num_gpu_blocks"] == 400
    assert _budget(doc) == (False, 2048)
    assert _said(doc, "enable_chunked_prefill").startswith(
        "enable_chunked_prefill not in the bundle: taken as off (the V0 default"
    )
    assert "the KV pool size given on the command line" in doc["config_assumptions"]
    assert doc["config_provenance"]["num_gpu_blocks"] == "given with --base"


def test_base_max_model_len_or_chunked_prefill_moves_v0s_unstated_budget(tmp_path):
    text = _v0(long_prompt=2600)
    doc = _run(tmp_path, "a", text, "--base", "max_model_len=4096")
    assert _budget(doc) == (False, 4096)
    assert "max(max_model_len 4096, 2048)" in _said(doc, "max_num_batched_tokens")
    assert "max_model_len 4096 is not over 32K" in _said(doc, "enable_chunked_prefill")
    doc = _run(tmp_path, "b", text, "--base", "enable_chunked_prefill=true")
    assert _budget(doc) == (True, 512)  # vLLM 0.6.3's default with chunked prefill
    assert "taken as 512 (the V0 default with chunked prefill in vLLM 0.6.3" in _said(doc, "max_num_batched_tokens")
    assert not [a for a in doc["config_assumptions"] if a.startswith("enable_chunked_prefill")]
    doc = _run(tmp_path, "c", text, "--base", "max_model_len=4096", "--base", "max_num_batched_tokens=3000")
    assert _budget(doc) == (False, 3000)
    assert not [a for a in doc["config_assumptions"] if a.startswith("max_num_batched_tokens")]


def test_the_same_workload_in_a_v1_log_keeps_v1s_defaults(tmp_path):
    v1 = (
        _log()
        .replace(", 'max_num_batched_tokens': 2048", "")
        .replace("chunked_prefill_enabled=True, ", "")
        .replace("max_seq_len=4096, ", "")
    )
    v1_doc, v0_doc = _run(tmp_path, "v1", v1), _run(tmp_path, "v0", _v0())
    # V1's default on a GPU the log does not show (tests/whatif/test_whatif_v1_budget.py)
    assert _budget(v1_doc) == (True, 2048)
    assert _said(v1_doc, "max_num_batched_tokens").startswith(
        "max_num_batched_tokens not in the bundle: taken as 2048, assumed (vLLM 0.10.0's API-server default on a GPU "
        "below 70 GiB or an A100 (the bundle shows neither the GPU nor its memory; 8192 on a GPU of >= 70 GiB"
    )
    assert _said(v1_doc, "enable_chunked_prefill") == (
        "enable_chunked_prefill not in the bundle: taken as on (the V1 default)"
    )
    assert _budget(v0_doc) == (False, 2048)


NEWER = "is newer than the newest version modelled (0.34.0): replayed as vLLM 0.34.0's scheduler"


def test_a_version_newer_than_the_model_is_said_with_the_one_replayed(tmp_path):
    # before: 'vLLM 99.0 (given with --base)', nothing said of the scheduler that replays it
    b = _bundle(tmp_path, "v1", _log())
    base = _cli(str(b), "-f", "json", "--tz", "UTC", "--base", "vllm_version=99.0")
    assert base.returncode == 0, base.stderr
    doc = json.loads(base.stdout)
    said = [a for a in doc["config_assumptions"] if NEWER in a]
    assert said == [a for a in said if a.startswith("vLLM 99.0 (given with --base) ")] and len(said) == 1, said
    assert doc["config_provenance"]["vllm_version"].startswith("vLLM 0.34.0's scheduler (vLLM 99.0, given with --base")
    assert doc["scenarios"][0]["cfg_vllm_version"] == "99.0"
    asked = _cli(str(b), "-f", "json", "--tz", "UTC", "--set", "vllm_version=99.0")
    assert asked.returncode == 0, asked.stderr
    row = json.loads(asked.stdout)["scenarios"][1]
    assert row["scenario"] == "vllm_version=99.0" and f"vLLM 99.0 (asked) {NEWER}" in row["notes"]
    assert "the settings the bundle does not state take 0.34.0's defaults" in row["notes"]
    # a log naming a newer version: said once, with its line; --base of a modelled version drops it
    text = _log().replace("(v0.10.0)", "(v99.0.0)")
    doc = _run(tmp_path, "v99", text)
    said = [a for a in doc["config_assumptions"] if NEWER in a]
    assert len(said) == 1 and said[0].startswith("vLLM 99.0.0 (v99/vllm.log:2) "), doc["config_assumptions"]
    again = _cli(str(tmp_path / "v99"), "-f", "json", "--tz", "UTC", "--base", "vllm_version=0.34.0")
    assert again.returncode == 0, again.stderr
    assert not [a for a in json.loads(again.stdout)["config_assumptions"] if NEWER in a]
