"""vLLM's block-size line is the block size seen.

vLLM 0.32-0.34 (vllm/platforms/interface.py ``update_block_size_for_backend``) logs ``Setting kv cache
block size to %d for %s backend(s).`` when the attention backend(s) pick a block size other than
``CacheConfig.DEFAULT_BLOCK_SIZE``, and only when --block-size was not given; it then sets
``cache_config.block_size`` to it. Before, the line was not read: a log with it got the version's
assumed default (64 in 0.34, 16 before) instead of the size the engine used. Now ``block_size`` is
seen with the line's value, cited at the line; the line is stronger than a ``block_size`` of the same
run's args line (which vLLM would not log beside it), whatever their order; another run keeps its own.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from preemptlog.analysis import AnalyzeOptions, analyze

OPTS = AnalyzeOptions(tz="UTC", year=2026)


def _backend(ts: str, size: int = 32, backend: str = "FLASH_ATTN") -> str:
    return (
        f"(EngineCore pid=42) INFO 12-01 {ts} [interface.py:787] Setting kv cache block size to {size} for "
        f"{backend} backend(s)."
    )


def _start(version: str, ts: str, args: str = "") -> list[str]:
    return [
        f"(APIServer pid=1) INFO 12-01 {ts} [api_server.py:1772] vLLM API server version {version}",
        f"(APIServer pid=1) INFO 12-01 {ts} [utils.py:253] non-default args: {{'model_tag': 'm', 'model': 'm'{args}}}",
    ]


def _stats(ts: str, preemptions: int = 0) -> str:
    pre = f", Preemptions: {preemptions}" if preemptions else ""
    return (
        f"(RustFrontend pid=4300) INFO 12-01 {ts} [llm/src/log_stats.rs:300] Avg prompt tput: 10.0 toks/s, Avg "
        f"generation tput: 900.0 toks/s, Reqs Running: 60, Waiting: 30{pre}, GPU KV cache used: 99.0%, Prefix "
        "cache hit rate: 3.0%"
    )


def _run(tmp_path: Path, lines: list[str]):
    p = tmp_path / "vllm.log"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    a = analyze([str(p)], OPTS)
    bs = dict(a.summary()["config"]["block_size"])
    bs["from"] = _name(bs["from"])
    return a, bs


def _name(src: str | None) -> str | None:
    """``vllm.log:N`` of a ``<folder>/vllm.log:N`` citation."""
    return None if src is None else src.rsplit("/", 1)[-1]


@pytest.mark.parametrize("version", ["0.32.0", "0.34.0"])
def test_the_backend_line_is_the_block_size_seen_at_its_line(tmp_path: Path, version: str) -> None:
    lines = [
        *_start(version, "09:59:30"),
        _backend("09:59:33"),
        _stats("10:00:00"),
        _stats("10:00:10", preemptions=4),
    ]
    a, bs = _run(tmp_path, lines)
    assert (bs["value"], bs["status"], bs["from"]) == ("32", "seen", "vllm.log:3"), bs
    assert "interface.py" in bs["note"]
    # the events read it too (joiner cfg_*), cited at the line, never the assumed default
    ev = a.evidence
    assert ev.height == 4
    assert set(ev.get_column("cfg_block_size").to_list()) == {32}
    assert {_name(x) for x in ev.get_column("cfg_block_size_src").to_list()} == {"vllm.log:3"}
    assert set(ev.get_column("cfg_block_size_status").to_list()) == {"seen"}


@pytest.mark.parametrize("args_after", [False, True])
def test_the_line_is_stronger_than_a_block_size_arg_of_the_same_run(tmp_path: Path, args_after: bool) -> None:
    # vLLM does not log the line when --block-size is given; a log that shows both (two servers' lines
    # in one file, lines out of order) reads the line's value, what the engine set, in either order
    start = _start("0.34.0", "09:59:30", ", 'block_size': 16")
    backend = _backend("09:59:33")
    if args_after:
        lines = [start[0], backend, start[1].replace("09:59:30", "09:59:34"), _stats("10:00:00")]
        at = "vllm.log:2"
    else:
        lines = [*start, backend, _stats("10:00:00")]
        at = "vllm.log:3"
    _, bs = _run(tmp_path, lines)
    assert (bs["value"], bs["status"], bs["from"]) == ("32", "seen", at), bs


def test_another_runs_explicit_block_size_stays_its_own(tmp_path: Path) -> None:
    # run 1: the backend chose 32; the server restarts with --block-size 16 (no line then): 16 is in force
    # for run 2 and its events, run 1's events keep 32
    lines = [
        *_start("0.34.0", "09:59:30"),
        _backend("09:59:33"),
        _stats("10:00:00"),
        _stats("10:00:10", preemptions=2),
        *_start("0.34.0", "10:05:00", ", 'block_size': 16"),
        _stats("10:06:00"),
        _stats("10:06:10", preemptions=3),
    ]
    a, bs = _run(tmp_path, lines)
    assert (bs["value"], bs["status"], bs["from"]) == ("16", "seen", "vllm.log:7"), bs
    ev = a.events.select("event_id", "line").join(a.evidence, on="event_id")
    got = {(r["line"], r["cfg_block_size"], _name(r["cfg_block_size_src"])) for r in ev.iter_rows(named=True)}
    assert got == {(5, 32, "vllm.log:3"), (9, 16, "vllm.log:7")}, got


def test_both_scanners_read_the_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = [*_start("0.34.0", "09:59:30"), _backend("09:59:33", 128, "FLASHINFER/TRITON_ATTN")]
    got = []
    for scanner in ("polars", None):  # None: the default, compiled pass when built
        if scanner:
            monkeypatch.setenv("PREEMPTLOG_SCANNER", scanner)
        else:
            monkeypatch.delenv("PREEMPTLOG_SCANNER", raising=False)
        a, bs = _run(tmp_path, lines)
        assert a.records.filter(a.records["kind"] == "cfg_block_size").height == 1
        got.append((bs["value"], bs["status"], bs["from"]))
    assert got == [("128", "seen", "vllm.log:3")] * 2
