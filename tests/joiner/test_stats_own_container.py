"""Stats-line evidence stays in the event's own container: two servers' lines in one compose log.

docker compose writes every line of a service behind its ``svc  | `` prefix, so one file holds two servers'
lines interleaved; both call their only engine "0". The joiner's lanes kept a log's events on their own log
(stream), and the whole file is one stream: an event of container a read container b's stats line of the same
second (``stats_kv_usage_at 20.0`` of b's line for a preemption of a pool at 99.5 %), its running and waiting
changes were taken across the two servers (``stats_running_delta -40``: a's 60 running minus b's 20), and the
pressure interval a's lines flag was cited by b's event. ``explain`` and ``--each`` read each container alone
and said otherwise. Now the container is part of a log's lane exactly as the stream is (model/containers.py):
a container's events read only its own stats lines, pressure intervals and KV maxima, and the configuration its
own lines state (its server runs are its own: a value another container states is never its own).

Hand-written logs: a vLLM V1 0.14 pair (``Preemptions: N`` on the stats lines: counted intervals) and an SGLang
pair (retraction lines, decode batch lines), run through the real CLI.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import run_cli

V1_STATS = (
    "(APIServer pid={pid}) INFO 11-20 {t} [loggers.py:208] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
    "Avg generation throughput: 900.0 tokens/s, Running: {run} reqs, Waiting: {wait} reqs, {pre}"
    "GPU KV cache usage: {kv}%, Prefix cache hit rate: 10.0%"
)


def _v1(pid: int, seqs: int, block: int, rows: list[tuple[str, int, int, float, int | None]]) -> list[str]:
    lines = [
        f"(APIServer pid={pid}) INFO 11-20 09:13:50 [api_server.py:1800] vLLM API server version 0.14.0",
        f"(APIServer pid={pid}) INFO 11-20 09:13:50 [utils.py:233] non-default args: {{'model_tag': 'm', "
        f"'max_num_seqs': {seqs}, 'block_size': {block}}}",
        f"(EngineCore_DP0 pid={pid + 1}) INFO 11-20 09:13:55 [core.py:77] Initializing a V1 LLM engine (v0.14.0) "
        "with config: model='m', max_seq_len=8192, enable_prefix_caching=True, enable_chunked_prefill=True",
    ]
    for t, run, wait, kv, pre in rows:
        p = "" if pre is None else f"Preemptions: {pre}, "
        lines.append(V1_STATS.format(pid=pid, t=t, run=run, wait=wait, pre=p, kv=kv))
    return lines


# a: a full pool with requests waiting, 4 preemptions; b: a cold pool, 1 preemption (a counted interval each)
# (each states its own max_num_seqs and block_size)
V1_A = _v1(
    100, 64, 32, [("09:14:10", 60, 5, 97.0, None), ("09:14:20", 55, 9, 99.5, 4), ("09:14:30", 54, 9, 99.0, None)]
)
V1_B = _v1(
    200, 128, 16, [("09:14:10", 20, 0, 20.0, None), ("09:14:20", 21, 0, 21.0, 1), ("09:14:30", 22, 0, 22.0, None)]
)

SGL_A = [
    "[2026-11-20 09:13:50] server_args=ServerArgs(model_path='q', tp_size=1, dp_size=1, schedule_conservativeness=1.0)",
    "[2026-11-20 09:14:02 TP0] Decode batch. #running-req: 60, #token: 49800, token usage: 1.00, "
    "gen throughput (token/s): 900.00, #queue-req: 5",
    "[2026-11-20 09:14:04 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 1, "
    "#new_token_ratio: 0.0980 -> 0.3000",
    "[2026-11-20 09:14:06 TP0] Decode batch. #running-req: 59, #token: 49700, token usage: 0.99, "
    "gen throughput (token/s): 900.00, #queue-req: 6",
]
SGL_B = [
    "[2026-11-20 09:13:50] server_args=ServerArgs(model_path='q', tp_size=1, dp_size=1, schedule_conservativeness=1.3)",
    "[2026-11-20 09:14:02 TP0] Decode batch. #running-req: 20, #token: 10000, token usage: 0.20, "
    "gen throughput (token/s): 900.00, #queue-req: 0",
    "[2026-11-20 09:14:04 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 1, "
    "#new_token_ratio: 0.0980 -> 0.3000",
    "[2026-11-20 09:14:06 TP0] Decode batch. #running-req: 21, #token: 10500, token usage: 0.21, "
    "gen throughput (token/s): 900.00, #queue-req: 0",
]

PAIRS = {"vllm-v1": (("vllm-a-1", V1_A), ("vllm-b-1", V1_B)), "sglang": (("sglang-a-1", SGL_A), ("sglang-b-1", SGL_B))}

# What each container's own lines say at its preemption (the stats line as of it: its reporting line for V1).
OWN = {
    "vllm-a-1": {"stats_kv_usage_at": 99.5, "stats_running_at": 55, "cfg_max_num_seqs": 64, "cfg_block_size": 32},
    "vllm-b-1": {"stats_kv_usage_at": 21.0, "stats_running_at": 21, "cfg_max_num_seqs": 128, "cfg_block_size": 16},
    "sglang-a-1": {"stats_kv_usage_at": 100.0, "stats_running_at": 60, "stats_running_delta": -1},
    "sglang-b-1": {"stats_kv_usage_at": 20.0, "stats_running_at": 20, "stats_running_delta": 1},
}


def _compose_log(tmp_path: Path, pair: str) -> Path:
    """The two containers' lines one after the other, line by line (the same seconds), behind compose prefixes."""
    (a, la), (b, lb) = PAIRS[pair]
    lines = [x for xa, xb in zip(la, lb, strict=True) for x in (f"{a}  | {xa}", f"{b}  | {xb}")]
    path = tmp_path / pair / "compose.log"
    path.parent.mkdir(parents=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _container(path: Path, line: int) -> str:
    return path.read_text().splitlines()[line - 1].split("  | ", 1)[0]


def _cited(path: Path, src: str) -> set[str]:
    """The containers of the lines a ``file:line[-line]`` citation (or a list of them) names."""
    out = set()
    for m in re.finditer(r":(\d+)(?:-(\d+))?", src):
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        out |= {_container(path, n) for n in range(lo, hi + 1)}
    return out


def _rows(path: Path, fmt: str) -> list[dict]:
    args = ["analyze", str(path), "--tz", "UTC", "--year", "2026", "-q"]
    r = run_cli(*args, *(["-f", "json"] if fmt == "json" else ["-f", "ndjson", "--wide"]))
    assert r.returncode in (0, 1, 2), r.stderr
    if fmt == "json":
        return json.loads(r.stdout)["events"]
    return [json.loads(x) for x in r.stdout.splitlines() if x.strip()]


@pytest.mark.parametrize("fmt", ["json", "ndjson"])
@pytest.mark.parametrize("pair", sorted(PAIRS))
def test_each_containers_event_cites_only_its_own_stats_lines(tmp_path: Path, pair: str, fmt: str) -> None:
    path = _compose_log(tmp_path, pair)
    rows = _rows(path, fmt)
    by = {}
    for row in rows:
        by.setdefault(_container(path, int(row["line"])), []).append(row)
    assert sorted(by) == sorted(c for c, _ in PAIRS[pair])  # both containers preempted
    for container, events in by.items():
        for ev in events:
            assert ev["stats_kv_usage_at"] is not None, ev["event_id"]
            for name, value in ev.items():
                if not name.endswith("_src") or value is None:
                    continue
                if not (name.startswith("stats_") or name in ("up_pressure_src", "up_kv_max_before_src")):
                    continue
                assert _cited(path, value) == {container}, (ev["event_id"], name, value)
            # the configuration too: what the event's own server states (cfg_*, SGLang's ratio floor)
            own_cfg = [n for n, v in ev.items() if n.endswith("_src") and v and n.startswith(("cfg_", "sgl_"))]
            assert own_cfg, ev["event_id"]
            for name in own_cfg:
                assert _cited(path, ev[name]) == {container}, (ev["event_id"], name, ev[name])
            for name, want in OWN[container].items():
                assert ev[name] == want, (ev["event_id"], name, ev[name], want)
    # the full pool's pressure is container a's; b's pool never came near the ceiling
    hot, cold = (c for c, _ in PAIRS[pair])
    assert all(ev["up_pressure"] is not None for ev in by[hot])
    assert all(ev["up_pressure"] is None for ev in by[cold])
    assert all(ev["up_kv_max_before"] < 50 for ev in by[cold])
