"""Block-table preempt records meet only their own server's counts. Two servers kept in folders of their
own both call their engine "0": a/vllm.log counts 3 + 1 preemptions ('Preemptions: N', V1 with the
PR #38452 fix), b/ holds b's log (no count) and b's plugin records of 2 preemptions.

Before: a's 'Preemptions: 3' was matched with b's 2 records (the records are the events where they
cover, every count a cross-check): 4 events in all, a's own count short by 2, '(exact)'. Now: 6 (a's 4
interval events, b's 2 records). Records beside the log of one server, or in a folder of their own next
to the logs' (logs/ + records/), are still matched with that log's counts (never counted twice)."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

STATS = (
    "(APIServer pid={pid}) INFO 11-30 {t} [loggers.py:266] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg "
    "generation throughput: 100.0 tokens/s, Running: 8 reqs, Waiting: 2 reqs, {pre}GPU KV cache usage: 99.0%, "
    "Prefix cache hit rate: 0.0%"
)
BANNER = "(APIServer pid={pid}) INFO 11-30 10:00:00 [api_server.py:1] vLLM API server version 0.30.0"
T0 = datetime(2026, 11, 30, 10, 0, 0, tzinfo=UTC).timestamp()


def _log(pid: int, counts: tuple[int, int] | None) -> str:
    pre = [f"Preemptions: {n}, " for n in counts] if counts else ["", ""]
    lines = [BANNER.format(pid=pid)]
    lines += [STATS.format(pid=pid, t=t, pre=p) for t, p in zip(("10:00:10", "10:00:20"), pre, strict=True)]
    return "\n".join(lines) + "\n"


def _records() -> str:
    rows = [
        {"type": "step", "ts": T0 + 1, "step": 1, "num_free_blocks": 0, "num_total_blocks": 100},
        {"type": "event", "ts": T0 + 5, "step": 5, "request_id": "b-1", "action": "preempt", "blocks_before": 12},
        {"type": "event", "ts": T0 + 6, "step": 6, "request_id": "b-2", "action": "preempt", "blocks_before": 12},
        {"type": "step", "ts": T0 + 25, "step": 25, "num_free_blocks": 10, "num_total_blocks": 100},
    ]
    return "\n".join(json.dumps(r) for r in rows) + "\n"


def _run(bundle: Path) -> tuple[dict, str]:
    p = subprocess.run(
        [sys.executable, "-m", "preemptlog", "analyze", str(bundle), "--tz", "UTC", "--year", "2026", "-f", "json"],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode in (0, 1), p.stderr
    return json.loads(p.stdout), " ".join(p.stderr.split())


def test_one_servers_records_never_take_the_other_servers_counts(tmp_path):
    b = tmp_path / "inc"
    (b / "a").mkdir(parents=True)
    (b / "b").mkdir()
    (b / "a" / "vllm.log").write_text(_log(1, (3, 1)))
    (b / "b" / "vllm.log").write_text(_log(9, None))
    (b / "b" / "blocktable.jsonl").write_text(_records())
    doc, _ = _run(b)
    ev = doc["events"]
    assert len(ev) == 6
    mine = [e for e in ev if e["source"].endswith("a/vllm.log")]
    assert sorted(e["event_id"].split("/")[-1] for e in mine) == [
        "vllm.log:2~i1",
        "vllm.log:2~i2",
        "vllm.log:2~i3",
        "vllm.log:3~i1",
    ]
    recs = [e for e in ev if e["kind"] == "record"]
    assert sorted(e["request_id"] for e in recs) == ["b-1", "b-2"] and all(e["engine"] == "0" for e in ev)


def test_one_servers_records_still_meet_its_own_counts(tmp_path):
    # beside the log: the records are the events, the count a cross-check (3 + 1 counted, 2 recorded:
    # 2 counter-only events beside the 2 records: 4, never 6)
    b = tmp_path / "one"
    b.mkdir()
    (b / "vllm.log").write_text(_log(1, (3, 1)))
    (b / "blocktable.jsonl").write_text(_records())
    doc, _ = _run(b)
    assert len(doc["events"]) == 4 and sum(e["kind"] == "record" for e in doc["events"]) == 2
    # one server, its files sorted by kind into folders: the same
    c = tmp_path / "split"
    (c / "logs").mkdir(parents=True)
    (c / "records").mkdir()
    (c / "logs" / "vllm.log").write_text(_log(1, (3, 1)))
    (c / "records" / "blocktable.jsonl").write_text(_records())
    doc, _ = _run(c)
    assert len(doc["events"]) == 4 and sum(e["kind"] == "record" for e in doc["events"]) == 2
