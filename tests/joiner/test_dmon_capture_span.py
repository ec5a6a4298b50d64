"""A dmon capture that stopped before a preemption says nothing about it: not evaluable, never stale.

The capture samples every second from 09:59:40 to 09:59:55 and stops. V0 warnings at 10:00:00
(total 1) and 10:00:04 (total 51): 49 preemptions are reconstructed in ``[10:00:00, 10:00:04]``.
Before: every event read the 09:59:55 sample (dmon.txt:18) "as of t", up to 9 s after the capture's
last sample, and the interval's events cited it although it was sampled before the interval began.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import polars as pl

from preemptlog import AnalyzeOptions, analyze

W = (
    "Sequence group {rid} is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache "
    "space. This can affect the end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size "
    "to provide more KV cache memory. total_num_cumulative_preemption={n}"
)
HEAD = "#Date       Time        gpu    sm   mem     fb\n#YYYYMMDD   HH:MM:SS    Idx     %     %     MB\n"


def _dmon(times: list[datetime]) -> str:
    return HEAD + "".join(f" {t:%Y%m%d   %H:%M:%S}      0    50    40  {30000 + i}\n" for i, t in enumerate(times))


def _evidence(tmp_path: Path, times: list[datetime], log: str) -> pl.DataFrame:
    (tmp_path / "vllm.log").write_text(log)
    (tmp_path / "dmon.txt").write_text(_dmon(times))
    a = analyze([str(tmp_path)], AnalyzeOptions(tz="UTC", year=2025, rules=False))
    return a.events.select("event_id", "kind").join(a.evidence, on="event_id")


T0 = datetime(2025, 5, 10, 9, 59, 40)
LOG = (
    f"WARNING 05-10 10:00:00 scheduler.py:1077] {W.format(rid='a', n=1)}\n"
    f"WARNING 05-10 10:00:04 scheduler.py:1077] {W.format(rid='b', n=51)}\n"
)


def test_a_capture_that_stopped_before_the_preemptions_is_not_evaluable(tmp_path: Path) -> None:
    ev = _evidence(tmp_path, [T0 + timedelta(seconds=i) for i in range(16)], LOG)  # to 09:59:55
    assert ev.height == 51
    for c in ("dmon_fb_at_mb", "dmon_sm_at_pct", "dmon_mem_at_pct"):
        assert ev.get_column(c).null_count() == ev.height, c
        assert ev.get_column(f"{c}_src").null_count() == ev.height, c


def test_a_capture_that_runs_on_still_reads_as_of_t_across_a_gap(tmp_path: Path) -> None:
    # one sample per second to 09:59:55, a gap (dmon stalled) to 10:00:03, then on to 10:00:10
    times = [T0 + timedelta(seconds=i) for i in range(16)] + [T0 + timedelta(seconds=23 + i) for i in range(8)]
    ev = _evidence(tmp_path, times, LOG)
    first = ev.filter(pl.col("event_id").str.ends_with("vllm.log:1")).row(0, named=True)
    # 10:00:00: the sample of 09:59:55 still holds (the next one is at 10:00:03)
    assert (first["dmon_fb_at_mb"], first["dmon_fb_at_mb_src"]) == (30015.0, f"{tmp_path.name}/dmon.txt:18")
    last = ev.filter(pl.col("event_id").str.ends_with("vllm.log:2")).row(0, named=True)
    assert (last["dmon_fb_at_mb"], last["dmon_fb_at_mb_src"]) == (30017.0, f"{tmp_path.name}/dmon.txt:20")


def test_the_last_sample_holds_for_one_sampling_step(tmp_path: Path) -> None:
    # every 5 s to 09:59:55 (dmon -d 5): 10:00:00 is past it, 09:59:58 would not be
    ev = _evidence(tmp_path, [T0 + timedelta(seconds=5 * i) for i in range(4)], LOG)
    assert ev.get_column("dmon_fb_at_mb").null_count() == ev.height
    log = f"WARNING 05-10 09:59:58 scheduler.py:1077] {W.format(rid='c', n=1)}\n"
    ev = _evidence(tmp_path, [T0 + timedelta(seconds=5 * i) for i in range(4)], log)
    assert ev.row(0, named=True)["dmon_fb_at_mb"] == 30003.0
