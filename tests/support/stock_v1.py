"""A stock vLLM V1 0.11.1 log of four stats lines (10:00:10-10:00:40 on 12-02, KV usage 92-99.5 %, one
waiting): a server that counts nothing itself, beside the scrapes, captures and records a test adds."""

from __future__ import annotations

V1_LOG = "\n".join(
    [
        "(APIServer pid=100) INFO 12-02 09:59:50 [api_server.py:1839] vLLM API server version 0.11.1",
        "(EngineCore_DP0 pid=200) INFO 12-02 09:59:52 [core.py:93] Initializing a V1 LLM engine (v0.11.1) with "
        "config: model='m', speculative_config=None, enable_prefix_caching=False",
        *(
            f"(APIServer pid=100) INFO 12-02 10:00:{s:02d} [loggers.py:208] Engine 000: Avg prompt throughput: "
            f"100.0 tokens/s, Avg generation throughput: 300.0 tokens/s, Running: 6 reqs, Waiting: 1 reqs, "
            f"GPU KV cache usage: {kv}%, Prefix cache hit rate: 0.0%"
            for s, kv in ((10, 92.0), (20, 99.0), (30, 99.5), (40, 99.1))
        ),
    ]
)
