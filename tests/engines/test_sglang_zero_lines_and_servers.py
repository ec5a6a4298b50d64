"""SGLang, written by hand: two defects.

- A retraction line that retracted no request (``#retracted_reqs: 0``) is no retraction line: the
  headline's "'KV cache pool is full' on N line(s)" (summary ``retraction_lines``) counts the lines that
  retracted some; the others are said apart (``lines_retracting_none``), in every wording.
- Two servers' logs in one folder (analysed together, without --each) both have a DP rank 0: the batch
  lines of one server's log never explain the other's retraction (the fixes' "running after the
  retraction" and "prefill batch before it" are looked up in the event's own log, a log and its rotated
  parts, and DP rank).

Lines built from SGLang's format strings (sglang-facts.md 2.1-2.2).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from preemptlog import AnalyzeOptions, analyze

KV = "KV cache pool is full. Retract requests. #retracted_reqs: {n}, #new_tokens_gained: {g}, #new_token_ratio: 0.0980 -> 0.3100"
OLD = "Decode out of memory happened. #retracted_reqs: {n}, #new_token_ratio: 0.0980 -> 0.1919"
TEST = "Testing retraction. #retracted_reqs: {n}, #new_tokens_gained: 128"
ARGS = (
    "[2026-03-01 10:00:00] server_args=ServerArgs(model_path='m', tp_size=1, mem_fraction_static=0.88, "
    "max_running_requests=None, schedule_conservativeness=1.0, chunked_prefill_size=8192)"
)
START = (
    "[2026-03-01 10:00:30 {r}] max_total_num_tokens=665690, chunked_prefill_size=8192, max_prefill_tokens=16384, "
    "max_running_requests=4096, context_len=65536, available_gpu_mem=13.50 GB"
)


def decode(t: str, ranks: str, running: int, usage: float = 0.95) -> str:
    return (
        f"[2026-03-01 {t} {ranks}] Decode batch, #running-req: {running}, #token: 9000, token usage: {usage:.2f}, "
        "cuda graph: True, gen throughput (token/s): 400.00, #queue-req: 5,"
    )


def prefill(t: str, ranks: str, new: int) -> str:
    return (
        f"[2026-03-01 {t} {ranks}] Prefill batch, #new-seq: 2, #new-token: {new}, #cached-token: 0, token usage: "
        "0.91, #running-req: 40, #queue-req: 11, #pending-token: 4096, input throughput (token/s): 15321.30"
    )


def write(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def summary(*paths: Path) -> dict:
    return analyze([str(p) for p in paths], AnalyzeOptions(tz="UTC")).summary()


# ------------------------------------------------------------------ lines that retracted no request


@pytest.mark.parametrize(
    "template, said",
    [
        (KV, "'KV cache pool is full' on 1 line(s)"),
        (OLD, "'Decode out of memory happened' on 1 line(s)"),
    ],
    ids=["0.5.10+", "0.3-0.4.6"],
)
def test_lines_that_retract_none_are_not_retraction_lines(tmp_path, template, said):
    lines = [
        decode("10:05:00", "TP0", 40),
        f"[2026-03-01 10:05:01 TP0] {template.format(n=2, g=900)}",
        f"[2026-03-01 10:05:03 TP0] {template.format(n=0, g=0)}",
        f"[2026-03-01 10:05:05 TP0] {template.format(n=0, g=0)}",
    ]
    s = summary(write(tmp_path / "z.log", lines))
    sg = s["sglang"]
    assert (sg["retractions"], sg["retraction_lines"], sg["lines_retracting_none"]) == (2, 1, 2)
    assert said in s["headline"], s["headline"]


def test_tp_copies_of_a_zero_line_count_nothing(tmp_path):
    lines = [
        f"[2026-03-01 10:05:01.100 TP0] {KV.format(n=1, g=500)}",
        f"[2026-03-01 10:05:01.103 TP1] {KV.format(n=1, g=500)}",
        f"[2026-03-01 10:05:02.100 TP0] {KV.format(n=0, g=0)}",
        f"[2026-03-01 10:05:02.104 TP1] {KV.format(n=0, g=0)}",
    ]
    s = summary(write(tmp_path / "tp.log", lines))
    assert (s["sglang"]["retraction_lines"], s["sglang"]["lines_retracting_none"]) == (1, 1)
    assert "'KV cache pool is full' on 1 line(s)" in s["headline"]


def test_a_forced_line_that_retracts_none_is_neither_forced_nor_kv(tmp_path):
    lines = [
        f"[2026-03-01 10:05:01 TP0] {KV.format(n=1, g=500)}",
        f"[2026-03-01 10:05:02 TP0] {TEST.format(n=0)}",
    ]
    s = summary(write(tmp_path / "f.log", lines))
    sg = s["sglang"]
    assert (sg["retraction_lines"], sg["forced_by_test"], sg["lines_retracting_none"]) == (1, 0, 1)
    assert "'KV cache pool is full' on 1 line(s)" in s["headline"]
    assert "Testing retraction" not in s["headline"]


def test_only_zero_lines_quote_no_line(tmp_path):
    lines = [decode("10:05:00", "TP0", 40), f"[2026-03-01 10:05:01 TP0] {KV.format(n=0, g=0)}"]
    s = summary(write(tmp_path / "only0.log", lines))
    assert s["sglang"]["retraction_lines"] == 0 and s["sglang"]["lines_retracting_none"] == 1
    assert "KV cache pool is full" not in s["headline"]


def test_no_zero_line_adds_no_key(tmp_path):
    s = summary(write(tmp_path / "n.log", [f"[2026-03-01 10:05:01 TP0] {KV.format(n=3, g=900)}"]))
    assert s["sglang"]["retraction_lines"] == 1 and "lines_retracting_none" not in s["sglang"]


# ------------------------------------------------------------------ two servers' logs in one folder


def _fix(s: dict, option: str) -> dict | None:
    return {x["option"]: x for x in s["fixes"]}.get(option)


def _dropped(s: dict, fid: str) -> list[str]:
    return [d["why"] for d in s.get("fixes_dropped") or [] if d["id"] == fid]


def _server_a(ranks: str = "TP0", after: list[str] | None = None) -> list[str]:
    return [
        ARGS,
        START.format(r="TP0"),
        decode("10:05:00", ranks, 40, 0.99),
        f"[2026-03-01 10:05:10 {ranks}] {KV.format(n=2, g=900)}",
        *(after or []),
    ]


def _server_b(ranks: str = "TP0") -> list[str]:
    # another server: a big prefill before a's retraction, a small batch right after it
    return [ARGS, prefill("10:05:05", ranks, 8192), decode("10:05:11", ranks, 7, 0.20)]


@pytest.mark.parametrize("ranks", ["TP0", "DP0 TP0", "DP1 TP0"])
def test_another_server_s_batch_lines_never_explain_a_retraction(tmp_path, ranks):
    a = write(tmp_path / "bundle" / "server-a.log", _server_a(ranks))
    write(tmp_path / "bundle" / "server-b.log", _server_b(ranks))
    s = summary(a.parent)
    text = str(s["fixes"]) + str(s.get("fixes_dropped"))
    assert "server-b.log" not in text, text
    assert _fix(s, "--max-running-requests") is None  # a's log has no batch line after its retraction
    assert _fix(s, "--chunked-prefill-size") is None
    assert _dropped(s, "sglang_chunked_prefill_size")  # no prefill batch of its own before it


def test_the_own_log_s_line_is_used_even_when_another_server_s_is_nearer(tmp_path):
    a = write(
        tmp_path / "bundle" / "server-a.log",
        _server_a(after=[decode("10:05:30", "TP0", 30)]),
    )
    write(tmp_path / "bundle" / "server-b.log", _server_b())
    s = summary(a.parent)
    fix = _fix(s, "--max-running-requests")
    assert fix is not None and fix["suggested"] == "30"
    assert any("server-a.log:5" in x for x in fix["inputs"]), fix["inputs"]


def test_another_dp_rank_of_the_same_log_is_no_evidence_either(tmp_path):
    a = write(tmp_path / "one" / "server.log", _server_a("DP1 TP0", after=[decode("10:05:11", "DP0 TP0", 7)]))
    s = summary(a)
    assert _fix(s, "--max-running-requests") is None


def test_rotated_parts_of_one_server_s_log_are_one_log(tmp_path):
    d = tmp_path / "rot"
    write(d / "sglang.log.1", _server_a())
    write(d / "sglang.log", [decode("10:05:30", "TP0", 30)])
    s = summary(d)
    fix = _fix(s, "--max-running-requests")
    assert fix is not None and fix["suggested"] == "30"
    assert any("sglang.log:1" in x for x in fix["inputs"]), fix["inputs"]
