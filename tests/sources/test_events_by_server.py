"""A script groups a bundle's events by server from the machine output alone.

Two pods' logs read together say ``engine: "0"`` for both (the engine index is per server): the file
(``source``) tells two files apart, and ``container`` (the prefix of the event's line: ``kubectl logs
--prefix``'s pod, docker compose's service) tells the pods of one interleaved file apart; ``process``
(vLLM's ``Name pid=N`` prefix) the processes. Both are added keys: in ``-f json``, parquet and
``--wide`` rows, and by name with ``--columns``; the compact ndjson/csv row is unchanged.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from ..conftest import run_cli
from .test_interleaved_servers import _v0_pod


def _events(*args: str) -> list[dict]:
    out = run_cli("analyze", *args, "--tz", "UTC", "--year", "2026")
    assert out.returncode == 0, out.stderr
    return [json.loads(x) for x in out.stdout.splitlines() if x.strip()]


def test_kubectl_prefix_events_name_their_pod(tmp_path: Path) -> None:
    a, b = _v0_pod("a", 0, 5), _v0_pod("b", 3, 3)  # 201 and 101 preemptions
    rows = sorted([(t, f"[pod/vllm-a/vllm] {x}") for t, x in a] + [(t, f"[pod/vllm-b/vllm] {x}") for t, x in b])
    log = tmp_path / "kubectl.log"
    log.write_text("\n".join(x for _, x in rows) + "\n", encoding="utf-8")
    got = _events(str(log), "-f", "ndjson", "--columns", "event_id,engine,source,container,process")
    assert {e["engine"] for e in got} == {"0"}  # the engine index cannot tell the pods apart
    assert Counter(e["container"] for e in got) == {"vllm-a": 201, "vllm-b": 101}
    doc = json.loads(run_cli("analyze", str(log), "--tz", "UTC", "--year", "2026", "-f", "json").stdout)
    assert Counter(e["container"] for e in doc["events"]) == {"vllm-a": 201, "vllm-b": 101}
    # the compact row keeps its keys
    compact = _events(str(log), "-f", "ndjson")
    assert "container" not in compact[0] and "process" not in compact[0]


def test_two_files_events_by_source_and_process(tmp_path: Path) -> None:
    def pod(api: int, n: int, tput: float) -> list[str]:
        out = [f"(APIServer pid={api}) INFO 12-01 09:59:50 [api_server.py:1839] vLLM API server version 0.11.1"]
        for k in range(n):
            out.append(
                f"(APIServer pid={api}) INFO 12-01 10:00:{10 * k + 10:02d} [loggers.py:208] Engine 000: Avg prompt "
                f"throughput: {tput} tokens/s, Avg generation throughput: 2310.9 tokens/s, Running: 30 reqs, "
                f"Waiting: 3 reqs, Preemptions: {k + 1}, GPU KV cache usage: 97.0%, Prefix cache hit rate: 35.2%"
            )
        return out

    # two pods of one pid: their figures differ (a log that is all another's first bytes is an earlier copy of
    # it, read once: sources/copies.py)
    for name, api, n, tput in (("a", 100, 4, 812.4), ("b", 100, 3, 790.2)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "vllm.log").write_text("\n".join(pod(api, n, tput)) + "\n", encoding="utf-8")
    got = _events(str(tmp_path / "a"), str(tmp_path / "b"), "-f", "ndjson", "--wide")
    assert {e["engine"] for e in got} == {"0"}
    assert Counter((Path(e["source"]).parent.name, e["process"], e["container"]) for e in got) == {
        ("a", "APIServer pid=100", None): 10,
        ("b", "APIServer pid=100", None): 6,
    }
