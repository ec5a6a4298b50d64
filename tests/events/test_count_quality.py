"""The count's quality (summary.reconciliation.quality) says what the bundle can count, whatever
engine wrote it, and is never better than its weakest server: hand-written logs, the library.

- an SGLang log prints every retraction (engines/sglang/summary.py log_capability: "exact"): its
  count is exact, 0 included (it was "lower bound" / "unknown": no branch read the capability);
- a V0 server beside a counted one (a patched V1 build's ``Preemptions: N``): V0 shows 1 preemption
  in 50, so the bundle's total is a lower bound (it was "exact": the fields' branch alone).
"""

from __future__ import annotations

from pathlib import Path

from preemptlog.analysis import AnalyzeOptions, analyze

OPTS = AnalyzeOptions(tz="UTC", year=2026)

SGL_ARGS = (
    "[2026-03-14 09:59:00] server_args=ServerArgs(model_path='m', tp_size=1, dp_size=1, mem_fraction_static=0.88, "
    "schedule_conservativeness=1.0, retraction_policy='length')"
)
SGL_DECODE = (
    "[2026-03-14 10:00:{:02d}] Decode batch. #running-req: 10, #token: 5000, token usage: 0.30, gen throughput "
    "(token/s): 500.00, #queue-req: 0"
)
SGL_RETRACT = (
    "[2026-03-14 10:00:{:02d}] KV cache pool is full. Retract requests. #retracted_reqs: {}, #new_token_ratio: "
    "0.0980 -> 0.3000"
)
V1_STATS = (
    "(APIServer pid=1) INFO 03-14 10:00:{:02d} [loggers.py:318] Engine 000: Avg prompt throughput: 10.0 tokens/s, "
    "Avg generation throughput: 400.0 tokens/s, Running: 28 reqs, Waiting: 4 reqs, Preemptions: {}, GPU KV cache "
    "usage: 99.0%, Prefix cache hit rate: 20.0%"
)
V0_WARNING = (
    "WARNING 03-14 10:00:{:02d} scheduler.py:1481] Sequence group {} is preempted by PreemptionMode.RECOMPUTE mode "
    "because there is not enough KV cache space. This can affect the end-to-end performance. Increase "
    "gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
    "total_num_cumulative_preemption={}"
)


def _quality(paths: list[Path]) -> tuple[int, str, str]:
    a = analyze([str(p) for p in paths], OPTS)
    r = a.counters["reconciliation"]
    return a.events.height, r["quality"], r["rule"]


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def test_an_sglang_log_counts_exactly(tmp_path):
    log = _write(
        tmp_path / "sglang.log",
        [SGL_ARGS, SGL_DECODE.format(0), SGL_RETRACT.format(5, 2), SGL_DECODE.format(10), SGL_RETRACT.format(12, 1)],
    )
    n, quality, rule = _quality([log])
    assert (n, quality) == (3, "exact")
    assert "SGLang's scheduler logs every retraction" in rule


def test_an_sglang_log_without_retractions_is_an_exact_zero(tmp_path):
    log = _write(tmp_path / "sglang.log", [SGL_ARGS, SGL_DECODE.format(0), SGL_DECODE.format(10)])
    assert _quality([log])[:2] == (0, "exact")


def test_a_v0_server_beside_a_counted_one_makes_a_lower_bound(tmp_path):
    v1 = _write(
        tmp_path / "b.log",
        [
            "(APIServer pid=9) INFO 03-14 09:59:30 [api_server.py:1] vLLM API server version 0.20.0",
            V1_STATS.format(10, 2),
            V1_STATS.format(20, 3),
        ],
    )
    v0 = _write(
        tmp_path / "a.log",
        [
            "INFO 03-14 09:59:00 api_server.py:500] vLLM API server version 0.6.3",
            V0_WARNING.format(5, "a", 1),
            V0_WARNING.format(25, "b", 51),
        ],
    )
    assert _quality([v1])[1] == "exact"  # the patched build alone counts exactly
    n, quality, rule = _quality([v0, v1])
    assert n == 51 + 5 and quality == "lower bound"
    assert "V0 server's warnings" in rule
