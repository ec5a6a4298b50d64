"""nvidia-smi dmon captures written by hand in shapes the corpus lacks: stamps in other date/time
shapes, a capture of one host beside two servers' logs, MIG instance rows.

Each test failed before its fix:
- a ``-o DT`` capture whose date read ``2026-12-01`` (or ``2026/12/01``) or whose time had no
  seconds was silently untimed (no note, no warning: "no GPU evidence"); an unreadable stamp is now
  a warning that names the file:line, and a ``-o T`` capture with unreadable times no longer says
  "nothing else in the bundle has a date" beside a dated log;
- server b's preemption read server a's capture (a/dmon.txt) when b had no capture of its own;
- a MIG capture (rows per GPU instance, ``gi``/``ci`` columns) gave a frame-buffer "jump" between two
  instances of GPU 0 that no device made.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from preemptlog import AnalyzeOptions, analyze
from preemptlog.pipeline.bundle import InputFile
from preemptlog.sources import TimeContext, dmon

W = (
    "Sequence group {rid} is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache "
    "space. This can affect the end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size "
    "to provide more KV cache memory. total_num_cumulative_preemption=1"
)
T0 = datetime(2026, 12, 1, 9, 59, 58)
REF = (datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC), datetime(2026, 12, 1, 10, 0, 6, tzinfo=UTC))


def _file(path: Path, display: str = "dmon.txt") -> InputFile:
    return InputFile(0, path, display, "dmon", None, path.stat().st_size, None, None)


def _log(tag: str) -> str:
    return (
        "INFO 12-01 10:00:00 [api_server.py:1090] vLLM API server version 0.8.5\n"
        "INFO 12-01 10:00:00 [executor_base.py:112] # cuda blocks: 1280, # CPU blocks: 2048\n"
        f"WARNING 12-01 10:00:06 [scheduler.py:1775] {W.format(rid=tag + '-a')}\n"
    )


def _capture(date_fmt: str | None, time_fmt: str, fb=lambda i, g: 1000 * (g + 1), gpus=(0, 1), n=12) -> str:
    names = (["Date"] if date_fmt else []) + ["Time", "gpu", "sm", "fb"]
    units = (["YYYYMMDD"] if date_fmt else []) + ["HH:MM:SS", "Idx", "%", "MB"]
    rows = ["#" + "   ".join(names), "#" + "   ".join(units)]
    for i in range(n):
        t = T0 + timedelta(seconds=i)
        for g in gpus:
            stamp = ([t.strftime(date_fmt)] if date_fmt else []) + [t.strftime(time_fmt)]
            rows.append(" " + "   ".join([*stamp, str(g), "50", str(fb(i, g))]))
    return "\n".join(rows) + "\n"


def _resolve(tmp_path: Path, text: str, ref=REF):
    p = tmp_path / "dmon.txt"
    p.write_text(text)
    return dmon.DmonParsed([_file(p)]).resolve(TimeContext(tz="UTC", reference=ref))


@pytest.mark.parametrize("date_fmt", ["%Y%m%d", "%Y-%m-%d", "%Y/%m/%d"])
def test_dt_capture_dates_in_other_shapes_are_timed(tmp_path, date_fmt):
    out = _resolve(tmp_path, _capture(date_fmt, "%H:%M:%S"))
    df = out.frames["dmon"]
    assert df.get_column("time").null_count() == 0
    assert df.get_column("time")[0] == datetime(2026, 12, 1, 9, 59, 58, tzinfo=UTC)
    assert set(df.get_column("time_precision")) == {"1s"}
    assert not out.warnings


@pytest.mark.parametrize("date_fmt", ["%Y%m%d", None])
def test_times_without_seconds_are_timed_to_the_minute_and_said(tmp_path, date_fmt):
    out = _resolve(tmp_path, _capture(date_fmt, "%H:%M"))
    df = out.frames["dmon"]
    assert df.get_column("time").null_count() == 0
    assert df.get_column("time")[0] == datetime(2026, 12, 1, 9, 59, tzinfo=UTC)
    assert set(df.get_column("time_precision")) == {"1m"}
    assert any("to the minute" in n for n in out.notes)


@pytest.mark.parametrize(
    ("date_fmt", "time_fmt", "first"),
    [("%m/%d/%Y", "%H:%M:%S", "12/01/2026 09:59:58"), (None, "%Hh%M", "09h59")],
)
def test_unreadable_stamps_are_warned_at_their_line_never_silently_untimed(tmp_path, date_fmt, time_fmt, first):
    out = _resolve(tmp_path, _capture(date_fmt, time_fmt))
    df = out.frames["dmon"]
    assert df.height == 24 and df.get_column("time").null_count() == 24
    (w,) = [w for w in out.warnings if "date/time" in w]
    assert w.startswith("dmon.txt:3: 24 dmon sample(s)") and repr(first) in w
    assert out.partial
    # the log has a date: never "nothing else in the bundle has a date"
    assert not any("nothing else" in n for n in out.notes)


def test_a_readable_stamp_keeps_its_time_beside_an_unreadable_one(tmp_path):
    text = _capture(None, "%H:%M:%S", n=3).replace(" 09:59:59", " 9h59m59", 1)
    out = _resolve(tmp_path, text)
    df = out.frames["dmon"].sort("line")
    assert df.get_column("line").to_list() == [3, 4, 5, 6, 7, 8]
    assert df.get_column("time").is_null().to_list() == [False, False, True, False, False, False]
    assert any(w.startswith("dmon.txt:5: 1 dmon sample(s)") for w in out.warnings)


def _evidence(a) -> dict[str, dict]:
    ev = a.events.select("event_id", "request_id").join(a.evidence, on="event_id")
    return {r["request_id"]: r for r in ev.iter_rows(named=True)}


def test_one_hosts_capture_is_not_evidence_for_the_other_server(tmp_path):
    # a/ has its log and its GPU capture; b/ (another server) has only its log.
    for tag in ("a", "b"):
        (tmp_path / tag).mkdir()
        (tmp_path / tag / "vllm.log").write_text(_log(tag))
    (tmp_path / "a" / "dmon.txt").write_text(_capture("%Y%m%d", "%H:%M:%S", gpus=(0,), fb=lambda i, g: 30000))
    rows = _evidence(analyze([str(tmp_path)], AnalyzeOptions(tz="UTC", year=2026, rules=False)))
    assert rows["a-a"]["dmon_fb_at_mb"] == 30000.0
    assert rows["a-a"]["dmon_fb_at_mb_src"].endswith("a/dmon.txt:11")
    for c in ("dmon_fb_at_mb", "dmon_fb_jump_mb", "dmon_sm_at_pct"):
        assert rows["b-a"][c] is None, c


def test_a_capture_above_every_servers_folder_is_read_by_each(tmp_path):
    for tag in ("a", "b"):
        (tmp_path / tag).mkdir()
        (tmp_path / tag / "vllm.log").write_text(_log(tag))
    (tmp_path / "dmon.txt").write_text(_capture("%Y%m%d", "%H:%M:%S", gpus=(0,), fb=lambda i, g: 30000))
    rows = _evidence(analyze([str(tmp_path)], AnalyzeOptions(tz="UTC", year=2026, rules=False)))
    assert rows["a-a"]["dmon_fb_at_mb"] == rows["b-a"]["dmon_fb_at_mb"] == 30000.0


@pytest.mark.parametrize("units", [True, False])  # False: --format csv,nounit-like, no units row
def test_mig_instances_of_one_gpu_are_separate_devices(tmp_path, units):
    # GPU 0 in MIG mode: the GPU row, then one row per GPU instance; every device is flat.
    rows = [
        "#Date       Time        gpu    gi    ci    sm    fb",
        "#YYYYMMDD   HH:MM:SS    Idx   Idx   Idx     %    MB",
    ]
    rows = rows if units else rows[:1]
    for i in range(12):
        t = T0 + timedelta(seconds=i)
        rows.append(f" {t:%Y%m%d   %H:%M:%S}      0     -     -     -  30000")
        for gi, fb in ((0, 5000), (1, 25000)):
            rows.append(f" {t:%Y%m%d   %H:%M:%S}      0     {gi}     0    50  {fb}")
    (tmp_path / "vllm.log").write_text(_log("m"))
    (tmp_path / "dmon.txt").write_text("\n".join(rows) + "\n")
    a = analyze([str(tmp_path)], AnalyzeOptions(tz="UTC", year=2026, rules=False))
    assert a.frames["dmon"].select("gi_idx").to_series().to_list()[:3] == [None, 0.0, 1.0]
    row = _evidence(a)["m-a"]
    assert row["dmon_fb_jump_mb"] == 0.0  # no rise: never instance 0 -> instance 1 (20 000 MB)
    assert row["dmon_fb_at_mb"] == 30000.0


def test_a_rise_is_measured_within_one_gpu_of_interleaved_rows(tmp_path):
    # GPU 0 flat at 40 000 MB, GPU 1 rises 1 000 -> 30 000 MB at 10:00:05 (line 18).
    fb = lambda i, g: 40000 if g == 0 else (1000 if i < 7 else 30000)  # noqa: E731
    (tmp_path / "vllm.log").write_text(_log("g"))
    (tmp_path / "dmon.txt").write_text(_capture("%Y%m%d", "%H:%M:%S", fb=fb))
    row = _evidence(analyze([str(tmp_path)], AnalyzeOptions(tz="UTC", year=2026, rules=False)))["g-a"]
    assert (row["dmon_fb_jump_mb"], row["dmon_fb_jump_gpu"]) == (29000.0, 1)
    assert row["dmon_fb_jump_mb_src"].endswith("dmon.txt:18")
    assert row["dmon_fb_at_mb"] == 40000.0 and row["dmon_fb_at_mb_src"].endswith("dmon.txt:19")
    assert pl.Series([row["dmon_sm_at_pct"]]).item() == 50.0
