"""A victim's tokens come from its own server's records: two servers side by side.

``node1/`` and ``node2/`` each hold a patched server's log (``Req-N PREEMPTED`` lines); ``node2/``
also holds block-table records, one of whose tables names ``n1z``: the request node1 preempted (two
servers may well reuse a request id: ``Req-1``, a client's own ids). Before, the recompute finding
matched tables by request id alone, so node1's preemption was given ``recompute_tokens 40`` from
``node2/blocktable.jsonl`` (and ``explain`` and ``--each`` said unknown). Now each server's events
read their own server's records (findings/common.py per_server, joiner ServerScope); the same
table in node1's own folder still gives node1's event its tokens.
"""

from __future__ import annotations

import json
from pathlib import Path

from preemptlog import AnalyzeOptions, analyze

OPTS = AnalyzeOptions(tz="UTC", year=2025)


def _log(port: int, free: int, rid: str) -> str:
    return (
        "\n".join(
            [
                "INFO 05-01 10:00:00 [api_server.py:1] vLLM API server version 0.8.5",
                f"INFO 05-01 10:00:00 [utils.py:328] non-default args: {{'max_num_seqs': 64, 'port': {port}}}",
                f"INFO 05-01 10:00:01 [scheduler_debug.py:9] [SCHEDULER] Available blocks: {free}, Pending reqs: 1, "
                "Running reqs: 8",
                "INFO 05-01 10:00:01 [scheduler_debug.py:9]   Req-x: prompt=100, max_out=100, blocks_needed=13",
                f"WARNING 05-01 10:00:02 [scheduler.py:10] Req-{rid} PREEMPTED",
            ]
        )
        + "\n"
    )


def _table(rid: str) -> str:
    rows = [
        {
            "type": "step",
            "time": "2025-05-01T10:00:01.500+00:00",
            "step": 1,
            "num_free_blocks": 2,
            "free_regions": [[3, 1], [9, 1]],
            "running": 8,
            "waiting": 1,
        },
        {
            "type": "table",
            "time": "2025-05-01T10:00:01.500+00:00",
            "step": 1,
            "request_id": rid,
            "block_ids": [4, 5, 6],
            "num_tokens": 40,
        },
    ]
    return "\n".join(json.dumps(r) for r in rows) + "\n"


def _bundle(root: Path, records_in: str) -> Path:
    for name, port, free, rid in (("node1", 8001, 500, "n1z"), ("node2", 8002, 2, "n2z")):
        (root / name).mkdir(parents=True)
        (root / name / "vllm.log").write_text(_log(port, free, rid))
    (root / records_in / "blocktable.jsonl").write_text(_table("n1z"))
    return root


def _recompute(root: Path) -> dict[str, tuple[object, object]]:
    a = analyze([str(root)], OPTS)
    assert a.findings is not None
    pe = a.findings.per_event.join(a.events.select("event_id", "source"), on="event_id")
    return {r["source"].split("/")[-2]: (r["recompute_tokens"], r["recompute_src"]) for r in pe.iter_rows(named=True)}


def test_another_server_s_table_gives_no_tokens(tmp_path):
    got = _recompute(_bundle(tmp_path / "two", "node2"))
    assert got["node1"] == (None, None)  # before: (40, "two/node2/blocktable.jsonl:2")
    assert got["node2"] == (None, None)  # node2's own table names another request


def test_own_server_s_table_gives_its_tokens(tmp_path):
    tokens, src = _recompute(_bundle(tmp_path / "two", "node1"))["node1"]
    assert tokens == 40
    assert src == "two/node1/blocktable.jsonl:2"
