"""The headline of a count of 0: an exact 0 under a full pool says none happened there (requests
waited), not that they "can have happened"; a 0 whose quality is unknown says so, and SGLang's lines
cut before their count are named (it retracted there), in each engine's noun."""

from __future__ import annotations

from pathlib import Path

from preemptlog import AnalyzeOptions, analyze
from preemptlog.render.summary import headline


def _head(path: Path) -> str:
    return headline(analyze([str(path)], AnalyzeOptions(tz="UTC", year=2026)).summary())


def _head_of(folder: Path, first: list[str], line: str) -> str:
    """The headline of a log of ``first`` then ``line`` every 10 s for a minute (``{s}``: the second)."""
    path = folder / "x.log"
    path.write_text("\n".join(first + [line.format(s=f"{s:02d}") for s in range(0, 60, 10)]) + "\n")
    return _head(path)


def test_exact_zero_under_a_full_pool(tmp_path: Path) -> None:
    h = _head_of(
        tmp_path,
        ["(APIServer pid=1) INFO 05-01 10:00:00 [api_server.py:1] vLLM API server version 0.10.0"],
        "(APIServer pid=1) INFO 05-01 10:00:{s} [loggers.py:118] Engine 000: Avg prompt throughput: 10.0 "
        "tokens/s, Avg generation throughput: 5.0 tokens/s, Running: 30 reqs, Waiting: 12 reqs, Preemptions: 0, "
        "GPU KV cache usage: 99.5%, Prefix cache hit rate: 0.0%",
    )
    assert h.startswith("0 preemptions (exact); KV cache at the ceiling with requests waiting"), h
    assert "none there" in h and "can have happened" not in h


def test_exact_zero_retractions_under_a_full_pool(tmp_path: Path) -> None:
    h = _head_of(
        tmp_path,
        ["[2026-03-01 10:00:00] server_args=ServerArgs(model_path='a', tp_size=1)"],
        "[2026-03-01 10:00:{s}] Decode batch, #running-req: 62, #token: 400000, token usage: 1.00, "
        "cuda graph: True, gen throughput (token/s): 1000.00, #queue-req: 40",
    )
    assert h.startswith("0 retractions (exact)"), h
    assert "preemptions" not in h and "can have happened" not in h


def test_lower_bound_zero_under_a_full_pool_leaves_room(tmp_path: Path) -> None:
    # V0 logs only the 1st, 51st, 101st... preemption: a 0 is a lower bound
    h = _head_of(
        tmp_path,
        [],
        "INFO 05-01 10:00:{s} metrics.py:351] Avg prompt throughput: 10.0 tokens/s, Avg generation throughput: "
        "5.0 tokens/s, Running: 8 reqs, Swapped: 0 reqs, Pending: 9 reqs, GPU KV cache usage: 99.0%, CPU KV cache "
        "usage: 0.0%.",
    )
    assert h.startswith("0 preemptions logged"), h
    assert "where preemptions can have happened" in h


def test_zero_of_unknown_quality_says_so(tmp_path: Path) -> None:
    (tmp_path / "c.log").write_text("[2026-03-01 10:05:05] KV cache pool is full. Retract requests. #retracted_r\n")
    h = _head(tmp_path / "c.log")
    assert h.startswith("0 retractions counted (not known to be all)"), h
    assert "1 retraction line(s) cut before their count" in h
