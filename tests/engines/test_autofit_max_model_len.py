"""``--max-model-len auto``: the length vLLM fitted to the KV cache is the max_model_len in force.

With ``--max-model-len auto`` (-1) vLLM logs the model's own length first (``Using max model len
131072``), then fits it to the KV cache and says so (0.32 ``v1/core/kv_cache_utils.py``, 0.34
``v1/core/kv_cache_planning.py`` ``_auto_fit_max_model_len``): ``Auto-fit max_model_len: reduced from
X to Y ...`` (under 0.34's extensible KV cache a first, tentative fit, re-done after warmup),
``--max-model-len auto reduced max_model_len from X to Y (...)``, ``Auto-fit max_model_len: using
max_model_len=X, which fits ...``, ``Auto-fit max_model_len: full model context length X fits ...``.
Read before: only the model's length, so a stall was said to hold "a request of max_model_len
131072 that can never fit" the 40,960-token cache vLLM had fitted it to. Hand-written 0.32 and 0.34
start-ups, both scanners.
"""

from __future__ import annotations

import pytest

from preemptlog.analysis import AnalyzeOptions, analyze

OPTS = AnalyzeOptions(tz="UTC", year=2026)
HEAD = [
    "(APIServer pid=1) INFO 12-02 03:00:00 [startup.py:38] vLLM server version {v}, serving model m",
    "(APIServer pid=1) INFO 12-02 03:00:00 [utils.py:286] non-default args: {{'model': 'm', 'max_model_len': -1}}",
    "(APIServer pid=1) INFO 12-02 03:00:01 [model.py:2152] Using max model len 131072",
]
KV = "(EngineCore pid=2) INFO 12-02 03:00:21 [kv_cache_utils.py:1091] GPU KV cache size: 40,960 tokens"
FIT = {
    "reduced": "(EngineCore pid=2) INFO 12-02 03:00:20 [kv_cache_utils.py:2478] Auto-fit max_model_len: reduced from "
    "131072 to 40960 to fit in available KV cache memory (12.50 GiB on cuda:0)",
    "tentative-then-final": "(EngineCore pid=2) INFO 12-02 03:00:20 [kv_cache_planning.py:1479] Auto-fit "
    "max_model_len: reduced from 131072 to 40960 to fit in available KV cache memory (12.50 GiB on cuda:0); the "
    "final length is set after CUDA graph capture and warmup\n"
    "(EngineCore pid=2) INFO 12-02 03:00:40 [kv_cache_planning.py:1495] --max-model-len auto reduced max_model_len "
    "from 131072 to 38912 (12.10 GiB on cuda:0 left for the KV cache after CUDA graph capture and warmup).",
    "short-warning": "(EngineCore pid=2) WARNING 12-02 03:00:40 [kv_cache_planning.py:1506] --max-model-len auto "
    "reduced max_model_len from 131072 to 2048 (1.00 GiB on cuda:0 available for the KV cache). Requests longer "
    "than 2048 tokens will be rejected. Increase `gpu_memory_utilization` or set --max-model-len explicitly.",
    "fits": "(EngineCore pid=2) INFO 12-02 03:00:40 [kv_cache_planning.py:1459] Auto-fit max_model_len: using "
    "max_model_len=32768, which fits in the KV cache memory left after CUDA graph capture and warmup (12.10 GiB).",
    "full": "(EngineCore pid=2) INFO 12-02 03:00:20 [kv_cache_utils.py:2469] Auto-fit max_model_len: full model "
    "context length 32768 fits in available KV cache memory (12.50 GiB on cuda:0)",
}
WANT = {"reduced": 40960, "tentative-then-final": 38912, "short-warning": 2048, "fits": 32768, "full": 32768}


def _stall() -> list[str]:
    return [
        f"(APIServer pid=1) INFO 12-02 03:01:{k * 5:02d} [loggers.py:208] Engine 000: Avg prompt throughput: 0.0 "
        "tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 0 reqs, Waiting: 3 reqs, GPU KV cache usage: "
        "0.0%, Prefix cache hit rate: 0.0%"
        for k in range(12)
    ]


@pytest.mark.parametrize("scanner", ["compiled", "polars"])
@pytest.mark.parametrize("shape", list(FIT))
def test_the_fitted_length_is_the_max_model_len(tmp_path, monkeypatch, scanner, shape):
    if scanner == "polars":
        monkeypatch.setenv("PREEMPTLOG_SCANNER", "polars")
    version = "0.32.0" if "kv_cache_utils" in FIT[shape] else "0.34.0"
    lines = [h.format(v=version) for h in HEAD] + FIT[shape].split("\n") + [KV] + _stall()
    p = tmp_path / "vllm.log"
    p.write_text("\n".join(lines) + "\n")
    a = analyze([str(p)], OPTS)
    row = a.summary()["config"]["max_model_len"]
    assert int(row["value"]) == WANT[shape] and row["status"] == "seen"
    last_fit = 3 + len(FIT[shape].split("\n"))
    assert row["from"] == f"{p}:{last_fit}"
    # the fitted length fits the cache vLLM fitted it to: no "can never fit" request
    nf = a.findings.stall["never_fits"]
    assert not any("max_model_len" in i.get("what", "") for i in nf.get("items", [])), nf
