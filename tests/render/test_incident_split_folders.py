"""A bundle of two servers side by side (``a/`` and ``b/``, each a log and its /metrics scrapes, both
started at the same time): each server's scrapes go with its own log's incident (render/each.py
split_by_incident, the nearest folder among the incidents a file meets in time), so the one-line
answers are each server's own count, as ``--each`` gives them; the headline does not say the logs do
not meet in time when they are two servers."""

from __future__ import annotations

import json

from ..conftest import run_cli
from ..joiner.test_code_own_server import _bundle  # a/ at 99 % counting 6, b/ at 40 % counting 1, side by side


def test_each_server_s_scrapes_go_with_its_own_log(tmp_path):
    b = _bundle(tmp_path / "two")
    p = run_cli("analyze", str(b), "--tz", "UTC", "-f", "json")
    assert p.returncode == 0, p.stderr
    s = json.loads(p.stdout)["summary"]
    assert s["incidents"] and len(s["incidents"]) == 2
    assert "of different servers" in s["headline"]
    said = " ".join(p.stderr.split())
    assert "a/vllm.log: 6 preemptions" in said  # before: 7, b's scrape counted with a's
    assert "b/vllm.log: 1 preemption" in said  # before: count not visible


def test_scrapes_as_near_to_two_servers_are_neither_servers(tmp_path):
    """``metrics/`` beside ``a/`` and ``b/`` (one counter, no log of its own): as near to both servers'
    incidents, it is a unit of its own (before: it went with the server that started first, so a's
    answer counted scrapes that may be b's, and b's said nothing of them)."""
    b = _bundle(tmp_path / "two")
    (b / "metrics").mkdir()
    (b / "a" / "metrics.prom").rename(b / "metrics" / "metrics.prom")
    (b / "b" / "metrics.prom").unlink()
    p = run_cli("analyze", str(b), "--tz", "UTC", "-f", "json")
    assert p.returncode == 0, p.stderr
    s = json.loads(p.stdout)["summary"]
    assert s["incidents"] == ["two/a/vllm.log", "two/b/vllm.log", "(other sources)"]
    said = " ".join(p.stderr.split())
    assert "(other sources): 6 preemptions" in said
    assert "two/a/vllm.log: count not visible" in said
    # b's quiet line names it by as much of its path as tells it from a's (before: "vllm.log", both's name)
    assert "no sign of pressure in the others: b/vllm.log -v adds:" in said


def _v0_server(folder, max_num_seqs: int, usage: float, banner: bool = False) -> None:
    """A V0 server's log (without a start banner unless ``banner``): its args line, six stats lines at
    ``usage`` % with ``max_num_seqs`` running, and a preemption warning after each (10:01:00-10:01:53)."""
    folder.mkdir(parents=True)
    lines = ["INFO 08-28 10:00:00 api_server.py:712] vLLM API server version 0.6.3"] if banner else []
    lines += [
        f"INFO 08-28 10:00:00 api_server.py:585] args: Namespace(host=None, port=8000, model='m', "
        f"max_num_seqs={max_num_seqs}, max_model_len=8192, gpu_memory_utilization=0.9)"
    ]
    for i in range(6):
        lines.append(
            f"INFO 08-28 10:01:{i * 10:02d} metrics.py:351] Avg prompt throughput: 100.0 tokens/s, Avg generation "
            f"throughput: 200.0 tokens/s, Running: {max_num_seqs} reqs, Swapped: 0 reqs, Pending: {5 + i} reqs, "
            f"GPU KV cache usage: {usage}%, CPU KV cache usage: 0.0%."
        )
        lines.append(
            f"WARNING 08-28 10:01:{i * 10 + 3:02d} scheduler.py:1242] Sequence group chat-{folder.name}{i} is preempted "
            "by PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect the "
            "end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size to provide more KV "
            f"cache memory. total_num_cumulative_preemption={i + 1}"
        )
    (folder / "vllm.log").write_text("\n".join(lines) + "\n")


def test_logs_of_two_folders_without_a_start_are_two_servers(tmp_path):
    """``a/vllm.log`` and ``b/vllm.log``, neither with a server start, their lines in the same minute:
    each folder is its own server (as the joiner's ServerScope reads them), so each gets its own count
    and its own change. Before: one incident, "at least 12 preemptions", and one --max-num-seqs change
    sized on both servers' stats at once (b's 256 -> 51, below what a runs and above a's 32)."""
    _v0_server(tmp_path / "two" / "a", 32, 99.1)
    _v0_server(tmp_path / "two" / "b", 256, 97.5)
    p = run_cli("analyze", str(tmp_path / "two"), "--tz", "UTC", "--year", "2026", "-f", "json")
    assert p.returncode == 0, p.stderr
    s = json.loads(p.stdout)["summary"]
    assert s["incidents"] == ["two/a/vllm.log", "two/b/vllm.log"]
    said = " ".join(p.stderr.split())
    assert "a/vllm.log: at least 6 preemptions" in said
    assert "b/vllm.log: at least 6 preemptions" in said
    # each server's change names its own setting (the line it was read from) and is sized on its own stats
    assert "--max-num-seqs 32 (seen two/a/vllm.log:1) -> 28" in said
    assert "--max-num-seqs 256 (seen two/b/vllm.log:1) -> 217" in said
    assert "at least 12" not in said


def test_v_adds_no_warning_it_does_not_print(tmp_path):
    """Two servers with their starts: the "holds 2 vLLM servers" warning is the headline's "Not one
    incident" and -v does not print it again, so the default screen's "-v adds:" does not count it
    (before: "1 more warning" that -v never showed)."""
    _v0_server(tmp_path / "two" / "a", 32, 99.1, banner=True)
    _v0_server(tmp_path / "two" / "b", 256, 97.5, banner=True)
    args = ("analyze", str(tmp_path / "two"), "--tz", "UTC", "--year", "2026", "-f", "ndjson")
    short, verbose = run_cli(*args), run_cli(*args, "-v")
    assert short.returncode == verbose.returncode == 0, short.stderr
    assert "Not one incident" in short.stderr
    adds = next(ln for ln in short.stderr.splitlines() if "-v adds:" in ln)
    assert "assumption" in adds
    assert ("warning" in adds) == ("warning:" in verbose.stderr)
