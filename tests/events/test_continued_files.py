"""A server's log cut into files under names of their own (server-part1.log, server-part2.log: not a rotation
the bundle joins into one stream), the later file without the server's start.

- V0: the later file's first warning counts on from the earlier file's counter (preemptions._continued).
  Before: warnings 1..451 then 501, 551 were "at least 1002" (the second file's 501 counted again from 0).
- SGLang: a file without ``server_args`` stands for a start only to tell it from other engines' logs
  (servers.starts ``stands_in``). Before: a continued SGLang file was a server of its own ("Not one
  incident"), and a cut log beside one /metrics reading said the engine "started at" its first line and
  called the count exact.
Through the CLI, a real subprocess; the logs are written by hand.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli

V0_WARN = (
    "WARNING 11-03 14:{m:02d}:{s:02d} scheduler.py:1077] Sequence group {r} is preempted by PreemptionMode.RECOMPUTE "
    "mode because there is not enough KV cache space. This can affect the end-to-end performance. Increase "
    "gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
    "total_num_cumulative_preemption={n}"
)
V0_BANNER = "INFO 11-03 14:00:00 api_server.py:528] vLLM API server version 0.6.3"

SG_ARGS = (
    "[2025-11-03 14:00:00.010] server_args=ServerArgs(model_path='Qwen/Qwen2.5-7B-Instruct', tp_size=1, "
    "dp_size=1, mem_fraction_static=0.88, max_running_requests=128, schedule_conservativeness=1.0, "
    "retraction_policy='length')"
)
SG_BATCH = (
    "[2025-11-03 14:{m:02d}:{s:02d}.331] Decode batch, #running-req: 120, #token: 99000, token usage: 0.99, "
    "cuda graph: True, gen throughput (token/s): 5120.44, #queue-req: 40"
)
SG_RETRACT = (
    "[2025-11-03 14:{m:02d}:{s:02d}.512] KV cache pool is full. Retract requests. #retracted_reqs: {n}, "
    "#new_token_ratio: 0.1274 -> 0.4410"
)


def _write(p: Path, lines: list[str]) -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p


def _json(target: Path) -> dict:
    out = run_cli("analyze", str(target), "--tz", "UTC", "-f", "json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["summary"]


def _v0_files(folder: Path, second: list[int], name2: str = "server-part2.log") -> None:
    _write(
        folder / "server-part1.log",
        [V0_BANNER, *(V0_WARN.format(m=5, s=5 * i, r=f"a{i}", n=1 + 50 * i) for i in range(10))],
    )
    _write(folder / name2, [V0_WARN.format(m=6, s=5 * i, r=f"b{i}", n=n) for i, n in enumerate(second)])


def test_a_v0_file_without_its_start_counts_on_from_the_file_it_follows(tmp_path):
    _v0_files(tmp_path, [501, 551])
    s = _json(tmp_path)
    rec = s["reconciliation"]
    assert (rec["total"], rec["quality"]) == (551, "lower bound")
    assert s["v0_counter"]["runs"] == 1  # one counter run, continued in the second file
    (src,) = [x for x in rec["sources"] if "V0 warnings" in x["source"]]
    assert "server-part2.log:1 continues the counter of" in src["note"]
    assert "server-part1.log:11" in src["note"]


def test_the_same_two_files_as_a_rotation_give_the_same_count(tmp_path):
    _write(
        tmp_path / "vllm.log.1",
        [V0_BANNER, *(V0_WARN.format(m=5, s=5 * i, r=f"a{i}", n=1 + 50 * i) for i in range(10))],
    )
    _write(tmp_path / "vllm.log", [V0_WARN.format(m=6, s=5 * i, r=f"b{i}", n=n) for i, n in enumerate([501, 551])])
    assert _json(tmp_path)["reconciliation"]["total"] == 551


def test_a_counter_below_the_earlier_files_is_a_run_of_its_own(tmp_path):
    # the later file's counter starts again (1, 51): a restart whose banner is not in it, counted from 0
    _v0_files(tmp_path, [1, 51])
    assert _json(tmp_path)["reconciliation"]["total"] == 451 + 51


def test_files_in_two_folders_are_two_servers_counters(tmp_path):
    # a/ and b/ are servers of their own: b's 501 is its own count since its engine started
    _v0_files(tmp_path / "a", [])
    (tmp_path / "a" / "server-part2.log").unlink()
    _write(
        tmp_path / "b" / "server-part2.log",
        [V0_WARN.format(m=6, s=5 * i, r=f"b{i}", n=n) for i, n in enumerate([501, 551])],
    )
    out = run_cli("analyze", str(tmp_path), "--tz", "UTC", "--each", "-f", "json")
    assert out.returncode == 0, out.stderr
    totals = sorted(x["summary"]["reconciliation"]["total"] for x in json.loads(out.stdout)["servers"])
    assert totals == [451, 551]


def test_overlapping_files_are_not_a_continuation(tmp_path):
    # the second file begins before the first ends: two servers' logs side by side, each counted on its own
    _write(
        tmp_path / "one.log", [V0_BANNER, *(V0_WARN.format(m=5, s=5 * i, r=f"a{i}", n=1 + 50 * i) for i in range(10))]
    )
    _write(tmp_path / "two.log", [V0_WARN.format(m=5, s=10 + 5 * i, r=f"b{i}", n=n) for i, n in enumerate([501, 551])])
    s = _json(tmp_path)
    assert s["reconciliation"]["total"] == 451 + 551


def _sg_files(folder: Path, name1: str, name2: str) -> None:
    _write(
        folder / name1,
        [SG_ARGS, *(SG_BATCH.format(m=5, s=10 + 2 * i) for i in range(5)), SG_RETRACT.format(m=5, s=20, n=2)],
    )
    _write(folder / name2, [*(SG_BATCH.format(m=5, s=30 + 2 * i) for i in range(5)), SG_RETRACT.format(m=5, s=40, n=3)])


@pytest.mark.parametrize("names", [("sglang.log.1", "sglang.log"), ("sglang-0.log", "sglang-1.log")])
def test_a_continued_sglang_file_is_the_same_server(tmp_path, names):
    _sg_files(tmp_path, *names)
    out = run_cli("analyze", str(tmp_path), "--tz", "UTC")
    assert out.returncode == 0, out.stderr
    first = out.stderr.splitlines()[0]
    assert first.startswith("5 retractions"), out.stderr
    assert "Not one incident" not in out.stderr
    s = _json(tmp_path)
    assert s["reconciliation"]["total"] == 5
    assert not any("servers, not one incident" in w for w in s["warnings"])


def test_an_sglang_log_and_a_vllm_log_stay_two_servers(tmp_path):
    # neither shows its start; they meet in time, but two engines' logs are never one server
    _write(
        tmp_path / "sglang.log",
        [*(SG_BATCH.format(m=5, s=30 + 2 * i) for i in range(5)), SG_RETRACT.format(m=5, s=40, n=3)],
    )
    _write(tmp_path / "vllm.log", [V0_WARN.format(m=5, s=35, r="a", n=51)])
    out = run_cli("analyze", str(tmp_path), "--tz", "UTC")
    assert out.returncode == 0, out.stderr
    assert out.stderr.startswith("Not one incident"), out.stderr


def test_a_cut_sglang_log_dates_no_engine_start(tmp_path):
    _write(
        tmp_path / "sglang.log",
        [*(SG_BATCH.format(m=5, s=30 + 2 * i) for i in range(5)), SG_RETRACT.format(m=5, s=40, n=3)],
    )
    _write(
        tmp_path / "metrics.prom",
        ["# scrape 2025-11-03T14:06:00Z", 'sglang:num_retracted_requests_total{model_name="q",tp_rank="0"} 40'],
    )
    s = _json(tmp_path)
    rec = s["reconciliation"]
    assert rec["total"] == 40
    assert rec["quality"] == "lower bound"
    assert "the log shows that start" not in rec["rule"]
    out = run_cli("analyze", str(tmp_path), "--tz", "UTC")
    assert "started at 14:05:30" not in out.stderr
