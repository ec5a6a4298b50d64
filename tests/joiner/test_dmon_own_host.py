"""dmon evidence stays with the event's own server, and a GPU's rise is measured within one capture.

Two servers side by side in one bundle (a/ and b/), each with its own log and its own
``nvidia-smi dmon -o DT`` capture of its GPU 0, flat at 10 000 MB (a) and 70 000 MB (b).
Before: an event of server a read b's capture (the largest value over every capture's GPUs at
that second: 70 000 MB) and, as both GPU 0 series were one series, a 60 000 MB "frame-buffer jump"
that no GPU made.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import polars as pl

from preemptlog import AnalyzeOptions, analyze

W = (
    "Sequence group {rid} is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache "
    "space. This can affect the end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size "
    "to provide more KV cache memory. total_num_cumulative_preemption=1"
)


def _log(tag: str) -> str:
    return (
        "\n".join(
            [
                "INFO 12-01 10:00:00 [api_server.py:1090] vLLM API server version 0.8.5",
                "INFO 12-01 10:00:00 [executor_base.py:112] # cuda blocks: 1280, # CPU blocks: 2048",
                "WARNING 12-01 10:00:06 [scheduler.py:1775] " + W.format(rid=f"{tag}-a"),
            ]
        )
        + "\n"
    )


def _dmon(fb: int) -> str:
    rows = [
        "#Date       Time        gpu    pwr     sm    mem     fb",
        "#YYYYMMDD   HH:MM:SS    Idx      W      %      %     MB",
    ]
    for i in range(12):
        t = datetime(2026, 12, 1, 9, 59, 58) + timedelta(seconds=i)
        rows.append(f" {t:%Y%m%d   %H:%M:%S}      0    250     90     80  {fb}")
    return "\n".join(rows) + "\n"


def test_each_servers_event_reads_its_own_gpu_capture(tmp_path: Path) -> None:
    for tag, fb in (("a", 10000), ("b", 70000)):
        d = tmp_path / tag
        d.mkdir()
        (d / "vllm.log").write_text(_log(tag))
        (d / "dmon.txt").write_text(_dmon(fb))
    a = analyze([str(tmp_path)], AnalyzeOptions(tz="UTC", year=2026, rules=False))
    ev = a.events.select("event_id", "request_id").join(a.evidence, on="event_id")
    for rid, tag, fb in (("a-a", "a", 10000.0), ("b-a", "b", 70000.0)):
        row = ev.filter(pl.col("request_id") == rid).row(0, named=True)
        # as of 10:00:06: the sample of line 11 of its own capture
        assert row["dmon_fb_at_mb"] == fb
        assert row["dmon_fb_at_mb_src"].endswith(f"{tag}/dmon.txt:11")
        assert row["dmon_fb_jump_mb"] == 0.0  # a flat GPU: no rise, never the other host's level
