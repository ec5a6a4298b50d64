"""dmon evidence of an event spread in a counted interval comes from that interval.

A V0 log: warnings at 10:00:00 (total 1) and 10:00:04 (total 51), so 49 preemptions are
reconstructed in ``[10:00:00, 10:00:04]``. The dmon capture's only big frame-buffer rise (9 000 MB)
is sampled at 09:59:53, before the interval began: it belongs to the window of the logged
preemption at 10:00:00, never to the interval's. Before: every reconstructed event cited it
(``dmon_fb_jump_mb`` 9000.0 from dmon.txt:4), as its window was a fixed 12 s back from the
interval's end.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from preemptlog import AnalyzeOptions, analyze

W = (
    "Sequence group {rid} is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache "
    "space. This can affect the end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size "
    "to provide more KV cache memory. total_num_cumulative_preemption={n}"
)
LOG = (
    f"WARNING 05-10 10:00:00 scheduler.py:1077] {W.format(rid='a', n=1)}\n"
    f"WARNING 05-10 10:00:04 scheduler.py:1077] {W.format(rid='b', n=51)}\n"
)
DMON = (
    "#Date       Time        gpu    sm   mem     fb\n"
    "#YYYYMMDD   HH:MM:SS    Idx     %     %     MB\n"
    " 20250510   09:59:52      0    50    40  30000\n"
    " 20250510   09:59:53      0    60    40  39000\n"  # line 4: the rise before the interval
    " 20250510   09:59:59      0    60    40  39000\n"
    " 20250510   10:00:01      0    60    40  39100\n"  # line 6: +100 in the interval
    " 20250510   10:00:03      0    60    40  39150\n"  # line 7: +50 in the interval
    " 20250510   10:00:05      0    60    40  39300\n"
)


def _evidence(tmp_path: Path) -> pl.DataFrame:
    (tmp_path / "vllm.log").write_text(LOG)
    (tmp_path / "dmon.txt").write_text(DMON)
    a = analyze([str(tmp_path)], AnalyzeOptions(tz="UTC", year=2025, rules=False))
    return a.events.select("event_id", "kind").join(a.evidence, on="event_id")


def test_interval_events_read_the_rises_of_their_interval(tmp_path: Path) -> None:
    ev = _evidence(tmp_path)
    recon = ev.filter(pl.col("kind") == "reconstructed")
    assert recon.height == 49
    assert set(recon.get_column("dmon_fb_jump_mb").to_list()) == {100.0}
    assert set(recon.get_column("dmon_fb_jump_mb_src").to_list()) == {f"{tmp_path.name}/dmon.txt:6"}


def test_the_logged_event_keeps_its_own_window(tmp_path: Path) -> None:
    ev = _evidence(tmp_path)
    first = ev.filter(pl.col("event_id").str.ends_with("vllm.log:1")).row(0, named=True)
    assert first["dmon_fb_jump_mb"] == 9000.0
    assert first["dmon_fb_jump_mb_src"] == f"{tmp_path.name}/dmon.txt:4"
