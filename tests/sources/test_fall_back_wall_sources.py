"""Local wall times of every source read as the log's: the fall-back's second pass is the later instant.

America/New_York, 2025-11-02: the wall clock runs 01:00-01:59 twice (EDT, then EST). A vLLM log's
lines after the clock went back are read in the second pass (timebase.later_in_second_pass); a dmon
capture and block-table records written on the same host, in the same wall time, were read in the
first pass for every row (``localize``, earliest): their 01:00:00-01:00:02 (EST) rows landed an hour
before the log's, so the preemption at 01:00:02 EST read the sample of 01:59:58 EDT as its "as of t".
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from preemptlog import AnalyzeOptions, analyze
from preemptlog.pipeline.bundle import InputFile
from preemptlog.sources import TimeContext, blocktable, dmon

from ..conftest import write_lines

NY = "America/New_York"
# 01:59:56 EDT .. 01:00:02 EST, in UTC
EXPECT = [datetime(2025, 11, 2, h, m, s, tzinfo=UTC) for h, m, s in ((5, 59, 56), (5, 59, 58), (6, 0, 0), (6, 0, 2))]


def _file(path: Path, kind: str) -> InputFile:
    return InputFile(0, path, path.name, kind, None, path.stat().st_size, None, None)


def test_dmon_with_dates_reads_the_second_pass_later(tmp_path: Path) -> None:
    p = write_lines(
        tmp_path / "dmon.txt",
        [
            "#Date       Time        gpu     fb",
            "#YYYYMMDD   HH:MM:SS    Idx     MB",
            " 20251102   01:59:56      0  30000",
            " 20251102   01:59:58      0  31000",
            " 20251102   01:00:00      0  33000",
            " 20251102   01:00:02      0  37000",
        ],
    )
    df = dmon.DmonParsed([_file(p, "dmon")]).resolve(TimeContext(tz=NY)).frames["dmon"]
    assert df.get_column("time").to_list() == EXPECT


def test_dmon_time_only_reads_the_second_pass_later(tmp_path: Path) -> None:
    p = write_lines(
        tmp_path / "dmon.txt",
        [
            "#Time        gpu     fb",
            "#HH:MM:SS    Idx     MB",
            " 01:59:56      0  30000",
            " 01:59:58      0  31000",
            " 01:00:00      0  33000",
            " 01:00:02      0  37000",
        ],
    )
    ref = (EXPECT[0], EXPECT[-1])
    df = dmon.DmonParsed([_file(p, "dmon")]).resolve(TimeContext(tz=NY, reference=ref)).frames["dmon"]
    assert df.get_column("time").to_list() == EXPECT


def test_block_table_local_times_read_the_second_pass_later(tmp_path: Path) -> None:
    rows = [
        f'{{"type": "step", "time": "2025-11-02 {t}", "step": {i}, "num_free_blocks": 3, "free_regions": [[0, 3]]}}'
        for i, t in enumerate(("01:59:56", "01:59:58", "01:00:00", "01:00:02"))
    ]
    p = write_lines(tmp_path / "bt.jsonl", rows)
    st = blocktable.BlockTableParsed([_file(p, "blocktable")]).resolve(TimeContext(tz=NY)).frames["bt_steps"]
    assert st.sort("step").get_column("time").to_list() == EXPECT


W = (
    "Sequence group {rid} is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache "
    "space. This can affect the end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size "
    "to provide more KV cache memory. total_num_cumulative_preemption={n}"
)


def test_the_preemption_after_the_fall_back_reads_its_own_sample(tmp_path: Path) -> None:
    (tmp_path / "vllm.log").write_text(
        f"WARNING 11-02 01:59:58 scheduler.py:1077] {W.format(rid='a', n=1)}\n"
        f"WARNING 11-02 01:00:02 scheduler.py:1077] {W.format(rid='b', n=1)}\n"
    )
    (tmp_path / "dmon.txt").write_text(
        "#Date       Time        gpu     fb\n#YYYYMMDD   HH:MM:SS    Idx     MB\n"
        " 20251102   01:59:56      0  30000\n 20251102   01:59:58      0  31000\n"
        " 20251102   01:00:00      0  33000\n 20251102   01:00:02      0  37000\n"
    )
    a = analyze([str(tmp_path)], AnalyzeOptions(tz=NY, rules=False))
    ev = a.events.select("event_id", "request_id", "time").join(a.evidence, on="event_id")
    b = ev.filter(pl.col("request_id") == "b").row(0, named=True)
    assert b["time"] == EXPECT[-1]
    assert (b["dmon_fb_at_mb"], b["dmon_fb_at_mb_src"]) == (37000.0, f"{tmp_path.name}/dmon.txt:6")
