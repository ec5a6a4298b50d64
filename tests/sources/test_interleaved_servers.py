"""Several servers' lines in one log with nothing to say whose: ``kubectl logs -l app=vllm
--all-containers`` without ``--prefix`` (with ``-f`` kubectl writes each pod's lines as they
arrive), or a shared file two servers append to. Counted as one server, V0's sampled counter
(``total_num_cumulative_preemption``, 1, 51, 101...) of two servers interleaves and reads as a
smaller count; the analysis says the log is not one server's and ends PARTIAL (exit 5), where two
files of the same lines (or ``kubectl logs --prefix``) are counted per server. Without ``-f``
kubectl writes one pod's log after the other: a restart, counted per run, as before.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..conftest import run_cli

WARN = (
    "WARNING 12-01 10:{m:02d}:{s:02d} scheduler.py:1481] Sequence group {g} is preempted by PreemptionMode.RECOMPUTE "
    "mode because there is not enough KV cache space. This can affect the end-to-end performance. Increase "
    "gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
    "total_num_cumulative_preemption={c}"
)


def _v0_pod(pod: str, off: int, n: int) -> list[tuple[int, str]]:
    """(second, line) of a vLLM 0.6.3 server: its start, then n logged preemptions (1, 51, 101, ...)."""
    out = [
        (off, f"INFO 12-01 09:59:{50 + off:02d} api_server.py:212] vLLM API server version 0.6.3"),
        (
            off + 1,
            f"INFO 12-01 09:59:{51 + off:02d} distributed_gpu_executor.py:57] # GPU blocks: 900, # CPU blocks: 2048",
        ),
    ]
    for k in range(n):
        s = 70 + k * 20 + off
        out.append((s, WARN.format(m=s // 60, s=s % 60, g=f"cmpl-{pod}{k}-0", c=1 + 50 * k)))
    return out


def _write(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _run(*paths: Path):
    out = run_cli("analyze", *map(str, paths), "--tz", "UTC", "--year", "2026", "-f", "json")
    return out.returncode, json.loads(out.stdout)["summary"]


def test_two_v0_servers_interleaved_are_not_one_count(tmp_path: Path) -> None:
    a, b = _v0_pod("a", 0, 5), _v0_pod("b", 3, 3)  # 201 and 101 preemptions
    rc, two = _run(_write(tmp_path / "a.log", [x for _, x in a]), _write(tmp_path / "b.log", [x for _, x in b]))
    assert two["events"] == 302 and rc == 0
    woven = _write(tmp_path / "kubectl.log", [x for _, x in sorted(a + b, key=lambda r: r[0])])
    rc, got = _run(woven)
    assert rc == 5, got["headline"]
    assert got["headline"].startswith(f"Not one server: {woven} interleaves two or more servers' lines")
    assert "neither one server's nor their sum" in got["headline"]
    assert any("total_num_cumulative_preemption goes back" in w and "--prefix" in w for w in got["warnings"])


def test_one_pod_after_another_is_a_restart_not_interleaved(tmp_path: Path) -> None:
    """kubectl logs -l without -f: each pod's log whole, one after the other; and one server that
    restarted: the counter goes back once, after a start. Counted per run, no warning."""
    a, b = _v0_pod("a", 0, 5), _v0_pod("b", 3, 3)
    rc, got = _run(_write(tmp_path / "kubectl.log", [x for _, x in a] + [x for _, x in b]))
    assert rc == 0 and got["events"] == 302
    assert not any("interleaved" in w for w in got["warnings"])
    assert not got["headline"].startswith("Not one server")


def test_two_v1_servers_interleaved_told_apart_by_pid(tmp_path: Path) -> None:
    """vLLM 0.11.1 (with PR #38452's Preemptions count): two pods whose processes' ids differ; the
    earlier server writes on after the other started: said, and each process's counts are summed."""

    def pod(api: int, core: int, off: int, n: int) -> list[tuple[int, str]]:
        out = [
            (
                off,
                f"(APIServer pid={api}) INFO 12-01 09:59:{50 + off:02d} [api_server.py:1839] vLLM API server "
                "version 0.11.1",
            ),
        ]
        for k in range(n):
            s = 70 + 10 * k + off
            out.append(
                (
                    s,
                    f"(APIServer pid={api}) INFO 12-01 10:{s // 60:02d}:{s % 60:02d} [loggers.py:208] Engine "
                    f"000: Avg prompt throughput: 812.4 tokens/s, Avg generation throughput: 2310.9 tokens/s, "
                    f"Running: 30 reqs, Waiting: 3 reqs, Preemptions: {k + 1}, GPU KV cache usage: 97.0%, "
                    "Prefix cache hit rate: 35.2%",
                )
            )
        return out

    a, b = pod(100, 200, 0, 4), pod(101, 201, 3, 3)  # 10 and 6 preemptions
    woven = _write(tmp_path / "kubectl.log", [x for _, x in sorted(a + b, key=lambda r: r[0])])
    rc, got = _run(woven)
    assert got["events"] == 16
    assert rc == 5
    assert got["headline"].startswith(f"Not one server: {woven} interleaves")
    assert "told apart only by their process ids" in got["headline"]
