"""How vLLM 0.32-0.34 sized the KV cache and set its scheduler, as its own start-up lines say.

Hand-written logs of a 0.32 or 0.34 server (the header, args and engine lines of vLLM's own format
strings), each with stats lines and PREEMPTED markers so that events carry the configuration in force:

- a config line's own keys only: a nested object's keys (``kv_transfer_config``'s
  ``kv_connector_extra_config: {'block_size': 64}``, the CPU offload's chunk; a speculative draft's
  ``max_model_len``; a ``compilation_config``) are not the server's settings;
- lines that change a setting after the config lines: ``Disabling chunked prefill: ...`` /
  ``Disabling prefix caching ...`` (v1/engine/core.py), ``Setting attention block size to N tokens``
  (a hybrid model's, platforms/interface.py, over --block-size too), DEBUG ``Defaulting
  max_num_batched_tokens to N`` (engine/arg_utils.py);
- 0.34's gpu_memory_utilization: unset is 1.0 only under the extensible KV cache, 0.92 without it
  (config/cache.py resolved_gpu_memory_utilization); it is off with ``--num-gpu-blocks-override``,
  ``--kv-cache-memory-bytes``, ``--no-enable-extensible-kv-cache``, vLLM's "Disabling the extensible KV
  cache" / "Extensible KV cache off" lines or a /metrics label (config/vllm.py
  _resolve_extensible_kv_cache, v1/executor/abstract.py);
- ``--kv-cache-memory-bytes`` sizes the KV cache: no gpu_memory_utilization lever, its own instead;
- ``performance_mode throughput`` doubles the max_num_seqs default (engine/arg_utils.py);
- data parallel: ``num_gpu_blocks is: N`` is the API server's sum over its engines
  (v1/engine/core_client.py), never one engine's pool.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from preemptlog.analysis import AnalyzeOptions, analyze
from preemptlog.render import OutputFormat, write

OPTS = AnalyzeOptions(tz="UTC", year=2026)
API = "(APIServer pid=7) INFO 12-02 03:00:{s:02d} [{f}] "
CORE = "(EngineCore pid=9) INFO 12-02 03:00:{s:02d} [{f}] "


def server(
    version: str, args: str, *, engine_extra: str = "", more: tuple[str, ...] = (), stats: bool = True
) -> list[str]:
    """A start of a vLLM ``version`` server with ``args`` (the repr of its non-default args), its engine
    line, ``more`` lines after it, then stats lines at the KV ceiling (unless not ``stats``) and three
    PREEMPTED markers."""
    lines = [
        API.format(s=0, f="api_utils.py:327") + f"vLLM server version {version}, serving model /models/m",
        API.format(s=0, f="api_utils.py:286") + f"non-default args: {args}",
        CORE.format(s=5, f="core.py:133")
        + f"Initializing a V1 LLM engine (v{version}) with config: model='/models/m', speculative_config=None, "
        f"max_seq_len=8192, tensor_parallel_size=1, enable_prefix_caching=True, chunked_prefill_enabled=True"
        f"{engine_extra}",
        *more,
    ]
    for k in range(3):
        if stats:
            lines.append(
                f"(APIServer pid=7) INFO 12-02 03:10:{k * 10:02d} [loggers.py:248] Engine 000: Avg prompt throughput: "
                "100.0 tokens/s, Avg generation throughput: 200.0 tokens/s, Running: 30 reqs, Waiting: 12 reqs, GPU "
                "KV cache usage: 99.0%, Prefix cache hit rate: 0.0%"
            )
        lines.append(
            f"(EngineCore pid=9) DEBUG 12-02 03:10:{k * 10 + 5:02d} [gpu_model_runner.py:1] Request r{k} status: "
            "RequestStatus.PREEMPTED"
        )
    return lines


def run(tmp_path: Path, lines: list[str], extra: dict[str, str] | None = None) -> dict:
    folder = tmp_path / "b"
    folder.mkdir(parents=True)
    (folder / "vllm.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
    for name, text in (extra or {}).items():
        (folder / name).write_text(text, encoding="utf-8")
    a = analyze([str(folder / "vllm.log") if not extra else str(folder)], OPTS)
    buf = io.BytesIO()
    write(a, OutputFormat.json, buf)
    return json.loads(buf.getvalue())


def last(doc: dict, key: str) -> dict | None:
    rows = [r for r in doc["config"] if r["key"] == key]
    return rows[-1] if rows else None


def in_force(doc: dict, key: str) -> set:
    """The value every event carries for ``key`` (cfg_<key>)."""
    return {e[f"cfg_{key}"] for e in doc["events"]}


@pytest.fixture(params=["compiled", "polars"])
def scanner(request, monkeypatch):
    if request.param == "polars":
        monkeypatch.setenv("PREEMPTLOG_SCANNER", "polars")
    return request.param


# ------------------------------------------------------------------ a config line's own keys only


def test_a_kv_connectors_block_size_is_not_the_servers(tmp_path, scanner):
    args = (
        "{'model': '/models/m', 'kv_transfer_config': {'kv_connector': 'OffloadingConnector', 'kv_role': "
        "'kv_both', 'kv_connector_extra_config': {'block_size': 64, 'num_cpu_blocks': 4000}}, 'max_num_seqs': 32}"
    )
    doc = run(tmp_path, server("0.32.0", args))
    assert last(doc, "block_size")["status"] == "default" and last(doc, "block_size")["value"] == "16"
    assert in_force(doc, "block_size") == {16}
    assert in_force(doc, "max_num_seqs") == {32}  # a top-level key after the nested one still read


def test_a_draft_models_max_model_len_is_not_the_servers(tmp_path):
    args = (
        "{'model': '/models/m', 'speculative_config': {'model': 'yuhuili/EAGLE', 'method': 'eagle', "
        "'num_speculative_tokens': 3, 'max_model_len': 2048}}"
    )
    doc = run(tmp_path, server("0.34.0", args))
    assert {r["value"] for r in doc["config"] if r["key"] == "max_model_len"} == {"8192"}
    spec = [r for r in doc["config"] if r["key"] == "speculative_config" and r["line"] == 2]
    assert spec and spec[0]["value"].startswith("{'model': 'yuhuili/EAGLE'") and spec[0]["value"].endswith("2048}")


def test_an_engine_lines_nested_config_is_not_read_for_its_keys(tmp_path):
    extra = ", compilation_config={'level': 0, 'max_seq_len': 99, 'sizes': [1, 2]}, kv_cache_dtype=fp8, seed=0"
    doc = run(tmp_path, server("0.32.0", "{'model': '/models/m'}", engine_extra=extra))
    assert {r["value"] for r in doc["config"] if r["key"] == "max_model_len"} == {"8192"}
    assert last(doc, "kv_cache_dtype")["value"] == "fp8"  # the key after the nested object


def test_a_namespace_dump_reads_its_own_keys(tmp_path):
    lines = server("0.32.0", "{'model': '/models/m'}")
    lines[1] = API.format(s=0, f="api_server.py:1") + (
        "args: Namespace(model='/models/m', kv_transfer_config={'kv_connector_extra_config': {'block_size': 64}}, "
        "block_size=32, max_num_seqs=48, chat_template='{% if x %}(')"
    )
    doc = run(tmp_path, lines)
    assert in_force(doc, "block_size") == {32} and in_force(doc, "max_num_seqs") == {48}


# ------------------------------------------------------------------ lines after the config lines


def test_vllm_turning_chunked_prefill_and_prefix_caching_off(tmp_path, scanner):
    more = (
        CORE.format(s=6, f="core.py:283") + "Disabling chunked prefill: model has non-causal attention layers.",
        CORE.format(s=6, f="core.py:288") + "Disabling prefix caching: model has non-causal attention layers.",
    )
    doc = run(tmp_path, server("0.34.0", "{'model': '/models/m'}", more=more))
    assert (last(doc, "enable_chunked_prefill")["value"], last(doc, "enable_chunked_prefill")["line"]) == ("False", 4)
    assert (last(doc, "enable_prefix_caching")["value"], last(doc, "enable_prefix_caching")["line"]) == ("False", 5)
    assert in_force(doc, "enable_prefix_caching") == {False}


def test_a_hybrid_models_attention_block_size_over_the_args(tmp_path, scanner):
    more = (
        CORE.format(s=6, f="interface.py:1097")
        + "Setting attention block size to 1088 tokens to ensure that attention page size is >= mamba page size.",
    )
    doc = run(tmp_path, server("0.34.0", "{'model': '/models/m', 'block_size': 16}", more=more))
    assert in_force(doc, "block_size") == {1088}


def test_the_defaulted_max_num_batched_tokens(tmp_path, scanner):
    more = (
        "(APIServer pid=7) DEBUG 12-02 03:00:00 [arg_utils.py:3173] Defaulting max_num_batched_tokens to 8192 for "
        "openai-api-server usage context.",
    )
    doc = run(tmp_path, server("0.32.0", "{'model': '/models/m'}", more=more))
    assert in_force(doc, "max_num_batched_tokens") == {8192}


# ------------------------------------------------------------------ 0.34's gpu_memory_utilization


GMU_ON_034 = {"1.0"}


@pytest.mark.parametrize(
    ("args", "more"),
    [
        ("{'model': '/models/m', 'num_gpu_blocks_override': 2048}", ()),
        ("{'model': '/models/m', 'kv_cache_memory_bytes': 8589934592}", ()),
        ("{'model': '/models/m', 'enable_extensible_kv_cache': False}", ()),
        (
            "{'model': '/models/m'}",
            (
                "(EngineCore pid=9) WARNING 12-02 03:00:07 [abstract.py:176] Disabling the extensible KV cache: "
                "elastic EP scale-up skips warmup. The KV cache will be sized from profiling estimates instead of "
                "measured memory.",
            ),
        ),
        (
            "{'model': '/models/m'}",
            (
                API.format(s=0, f="vllm.py:3256")
                + "Extensible KV cache off: without an IMEX channel, KV transfers within a host (e.g. NIXL) would "
                "lose NVLink and fall back to RDMA or TCP. If transfers only cross hosts, pass "
                "--enable-extensible-kv-cache.",
            ),
        ),
    ],
    ids=["override", "kv-bytes", "arg-false", "runtime-warning", "imex-line"],
)
def test_034_without_the_extensible_kv_cache_defaults_to_092(tmp_path, args, more):
    doc = run(tmp_path, server("0.34.0", args, more=more))
    gmu = last(doc, "gpu_memory_utilization")
    assert (gmu["value"], gmu["status"]) == ("0.92", "default")
    assert "extensible KV cache off" in gmu["note"]
    assert in_force(doc, "gpu_memory_utilization") == {0.92}


def test_034_with_the_extensible_kv_cache_defaults_to_1(tmp_path):
    doc = run(tmp_path, server("0.34.0", "{'model': '/models/m', 'max_num_seqs': 64}"))
    gmu = last(doc, "gpu_memory_utilization")
    assert (gmu["value"], gmu["status"]) == ("1.0", "default") and "extensible KV cache on" in gmu["note"]
    assert last(doc, "enable_extensible_kv_cache")["status"] == "default"


def test_032_is_untouched_by_the_extensible_kv_cache(tmp_path):
    doc = run(tmp_path, server("0.32.0", "{'model': '/models/m', 'num_gpu_blocks_override': 2048}"))
    assert last(doc, "gpu_memory_utilization")["value"] == "0.92"
    assert last(doc, "enable_extensible_kv_cache") is None


def test_a_scrapes_label_says_the_extensible_kv_cache_was_off(tmp_path):
    scrape = (
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
        "# TYPE vllm:cache_config_info gauge\n"
        'vllm:cache_config_info{block_size="64",enable_extensible_kv_cache="False",engine="0",'
        'gpu_memory_utilization="None",num_gpu_blocks="4096"} 1.0\n'
    )
    doc = run(tmp_path, server("0.34.0", "{'model': '/models/m'}"), {"metrics-1796180000.prom": scrape})
    assert last(doc, "gpu_memory_utilization")["value"] == "0.92"


def test_a_set_value_under_034_without_the_extensible_cache_is_not_told_to_go_unset(tmp_path):
    args = "{'model': '/models/m', 'gpu_memory_utilization': 0.85, 'enable_extensible_kv_cache': False}"
    doc = run(tmp_path, server("0.34.0", args, stats=False))  # no stats lines: the formula fix, not an estimate
    gmu = next(f for f in doc["summary"]["fixes"] if f["option"] == "--gpu-memory-utilization")
    assert (gmu["current"], gmu["suggested"]) == (0.85, 0.9)
    assert "unset" not in json.dumps(gmu)
    on = run(tmp_path / "on", server("0.34.0", "{'model': '/models/m', 'gpu_memory_utilization': 0.85}", stats=False))
    gmu_on = next(f for f in on["summary"]["fixes"] if f["option"] == "--gpu-memory-utilization")
    assert gmu_on["suggested"] == 1.0 and "leave gpu_memory_utilization unset" in json.dumps(gmu_on)


def test_kv_cache_memory_bytes_is_the_lever_not_gpu_memory_utilization(tmp_path):
    args = "{'model': '/models/m', 'gpu_memory_utilization': 0.8, 'kv_cache_memory_bytes': 4294967296}"
    doc = run(tmp_path, server("0.32.0", args))
    options = [f["option"] for f in doc["summary"]["fixes"]]
    assert "--gpu-memory-utilization" not in options
    assert "--kv-cache-memory-bytes" in options
    kv = next(f for f in doc["summary"]["fixes"] if f["option"] == "--kv-cache-memory-bytes")
    assert kv["current"] == 4294967296 and kv["suggested"] > 4294967296
    why = " ".join(d["why"] for d in doc["summary"]["fixes_dropped"])
    assert "kv-cache-memory-bytes" in why and "ignores" in why


def test_throughput_mode_doubles_the_max_num_seqs_default(tmp_path):
    doc = run(tmp_path, server("0.32.0", "{'model': '/models/m', 'performance_mode': 'throughput'}"))
    mns = last(doc, "max_num_seqs")
    assert (mns["value"], mns["status"]) == ("512", "default") and "performance_mode throughput" in mns["note"]
    plain = run(tmp_path / "p", server("0.32.0", "{'model': '/models/m'}"))
    assert last(plain, "max_num_seqs")["value"] == "256"


# ------------------------------------------------------------------ data parallel


def test_the_api_servers_block_count_under_data_parallel_is_the_engines_sum(tmp_path):
    more = (
        "(APIServer pid=7) DEBUG 12-02 03:00:09 [loggers.py:351] Engine 000: vllm cache_config_info with "
        "initialization after num_gpu_blocks is: 5120",
    )
    doc = run(tmp_path, server("0.34.0", "{'model': '/models/m', 'data_parallel_size': 2}", more=more))
    assert last(doc, "num_gpu_blocks") is None
    total = last(doc, "num_gpu_blocks_all_engines")
    assert total["value"] == "5120" and "sum over its 2 data-parallel engines" in total["note"]
    assert in_force(doc, "num_gpu_blocks") == {None}
    single = run(tmp_path / "one", server("0.34.0", "{'model': '/models/m'}", more=more))
    assert last(single, "num_gpu_blocks")["value"] == "5120"
