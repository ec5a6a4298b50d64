"""One file found twice in a bundle (a byte-for-byte copy under another name or folder, a hard link)
is read once and said so; its other names still date it. Identical bytes are one file only when they
would carry the same time (sources/copies.py): a /metrics page without sample timestamps is dated by
its name, and two such pages named by two times are two readings of an unchanged page.

Before: a copy of the vLLM log made the bundle "Not one incident: 2 servers"; the same scrapes under
``backup/`` counted every preemption twice (6 for 3), a record file saved twice gave 6 records for 3;
a hard link was read once, but by the name that sorts first: the scrape time in the other name was
lost (its mtime stood in) and the counter's readings went back, a restart: 5 for 3.
"""

from __future__ import annotations

import json
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from preemptlog import AnalyzeOptions, analyze

from ..conftest import run_cli
from ..support.stock_v1 import V1_LOG

T0 = datetime(2026, 12, 2, 10, 0, 0, tzinfo=UTC).timestamp()
LATER = T0 + 3600  # every file's mtime: an hour after the incident (a bundle copied later)


def _page(n: int) -> str:
    return (
        "# TYPE vllm:num_preemptions_total counter\n"
        f'vllm:num_preemptions_total{{engine="0",model_name="m"}} {float(n)}\n'
        "# TYPE vllm:num_requests_waiting gauge\n"
        'vllm:num_requests_waiting{engine="0",model_name="m"} 1.0\n'
    )


def _records() -> str:
    return "".join(
        json.dumps(
            {
                "type": "event",
                "ts": T0 + 15 + 10 * i,
                "step": 10 + i,
                "engine": "0",
                "request_id": f"r{i}",
                "action": "preempt",
                "blocks_before": 5,
                "blocks_after": 0,
                "blocks_needed": 4,
                "pool_free_blocks": 2,
            }
        )
        + "\n"
        for i in range(3)
    )


DMON = "#Date       Time        gpu     fb\n#YYYYMMDD   HH:MM:SS    Idx     MB\n" + "".join(
    f" 20261202   10:00:{s:02d}      0  {30000 + 100 * s}\n" for s in range(0, 50, 5)
)


def _bundle(root: Path, records: bool = False) -> Path:
    """vllm.log (stock V1: no count), four scrapes named by their time (0, 1, 2, 3), dmon; with
    ``records`` the plugin's preempt records of the three preemptions."""
    root.mkdir(parents=True)
    (root / "vllm.log").write_text(V1_LOG + "\n")
    for i in range(4):
        (root / f"metrics-{int(T0) + 10 * (i + 1)}.prom").write_text(_page(i))
    (root / "dmon.txt").write_text(DMON)
    if records:
        (root / "preempt-200.jsonl").write_text(_records())
    for p in root.rglob("*"):
        os.utime(p, (LATER, LATER))
    return root


def _run(paths):
    return analyze([str(p) for p in paths], AnalyzeOptions(tz="UTC", rules=True))


def _answer(r) -> tuple:
    s = r.summary()
    ev = r.events.select("time", "interval_start", "kind", "request_id").rows()
    gates = r.verdicts.get_column("gate").to_list()
    gpu = r.evidence.get_column("dmon_fb_at_mb").to_list()
    return s["events"], s["headline"].split(";")[0], ev, gates, gpu


def _copies(r) -> list[str]:
    return [w for w in r.warnings if "(the same bytes): read once" in w or "(the same file): read once" in w]


# (file copied, name of the copy relative to the bundle)
COPIES = [
    ("vllm.log", "vllm-copy.log"),  # sorts before the original: the copy's name is kept
    ("vllm.log", "logs/vllm.log"),
    ("metrics-1796205630.prom", "backup/metrics-1796205630.prom"),
    ("metrics-1796205630.prom", "a-scrape.prom"),  # untimed name sorting first: the original's name dates it
    ("dmon.txt", "gpu.txt"),
    ("preempt-200.jsonl", "blocktable.jsonl"),
]


@pytest.mark.parametrize(("src", "dst"), COPIES, ids=[d for _, d in COPIES])
@pytest.mark.parametrize("how", ["copy", "hardlink"])
def test_a_file_found_twice_is_read_once_and_said(tmp_path, src, dst, how):
    records = src.endswith(".jsonl")
    base = _bundle(tmp_path / "base", records=records)
    b = _bundle(tmp_path / "b", records=records)
    (b / dst).parent.mkdir(parents=True, exist_ok=True)
    if how == "copy":
        shutil.copy2(b / src, b / dst)
    else:
        os.link(b / src, b / dst)
    want, r = _answer(_run([base])), _run([b])
    assert _answer(r) == want
    assert want[0] == 3
    said = _copies(r)
    assert len(said) == 1 and src in said[0] and dst in said[0]
    assert not r.partial


def test_every_scrape_copied_into_a_subfolder_counts_once(tmp_path):
    base = _bundle(tmp_path / "base")
    b = _bundle(tmp_path / "b")
    (b / "backup").mkdir()
    for p in b.glob("metrics-*.prom"):
        shutil.copy2(p, b / "backup" / p.name)
    r = _run([b])
    assert _answer(r) == _answer(_run([base]))
    assert len(_copies(r)) == 4


def test_a_copy_made_later_dates_nothing_later(tmp_path):
    """A copy's own mtime (made later, without -p) does not move the scrape it holds: the earliest of the
    copies' mtimes is the file's (an untimed single scrape takes its time from the mtime)."""
    b = tmp_path / "b"
    b.mkdir()
    (b / "vllm.log").write_text(V1_LOG + "\n")
    (b / "now.prom").write_text(_page(3))
    os.utime(b / "now.prom", (T0 + 45, T0 + 45))
    want = _answer(_run([b]))
    shutil.copyfile(b / "now.prom", b / "a-copy.prom")  # sorts first; mtime: now
    r = _run([b])
    assert _answer(r) == want
    assert len(_copies(r)) == 1


def test_two_files_that_differ_by_a_byte_are_two_files(tmp_path):
    b = _bundle(tmp_path / "b")
    (b / "other.log").write_text(V1_LOG.replace("pid=100", "pid=101") + "\n")
    r = _run([b])
    assert not _copies(r)
    assert len([f for f in r.bundle.files if f.kind == "vllm-log"]) == 2


def test_cli_counts_a_copied_bundle_part_once(tmp_path):
    """The contract through the CLI: count, verdicts and exit code of the bundle without the copies."""
    base = _bundle(tmp_path / "base", records=True)
    b = _bundle(tmp_path / "b", records=True)
    shutil.copy2(b / "vllm.log", b / "vllm.log.bak")
    shutil.copy2(b / "preempt-200.jsonl", b / "records-copy.jsonl")
    (b / "old").mkdir()
    for p in b.glob("metrics-*.prom"):
        shutil.copy2(p, b / "old" / p.name)

    def cli(root: Path) -> tuple[int, dict]:
        p = run_cli("analyze", str(root), "-f", "json")
        assert "Traceback" not in p.stderr
        return p.returncode, json.loads(p.stdout)

    rc0, d0 = cli(base)
    rc, d = cli(b)
    assert rc == rc0 == 0
    assert d["summary"]["events"] == d0["summary"]["events"] == 3
    assert [(e["kind"], e["request_id"], e["gate"]) for e in d["events"]] == [
        (e["kind"], e["request_id"], e["gate"]) for e in d0["events"]
    ]
    said = [w for w in d["summary"]["warnings"] if "(the same bytes): read once" in w]
    assert len(said) == 6, said


# ---------------------------------------------------------------- through the CLI (a real process)


def _cli(root: Path) -> dict:
    p = run_cli("analyze", str(root), "--tz", "UTC", "-f", "json")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)["summary"]


def _said(s: dict) -> list[str]:
    return [w for w in s["warnings"] if "(the same bytes): read once" in w]


def _scrapes(s: dict) -> list[int]:
    """How many scrapes each counter series was read at."""
    return [r["samples"] for r in s["reconciliation"]["counter_readings"]]


def test_cli_scrapes_copied_into_backup_count_once(tmp_path):
    b = _bundle(tmp_path / "b")
    (b / "backup").mkdir()
    for p in sorted(b.glob("metrics-*.prom")):
        shutil.copy2(p, b / "backup" / p.name)
    s = _cli(b)
    assert s["events"] == 3 and _scrapes(s) == [4]
    t = int(T0) + 10
    assert f"b/metrics-{t}.prom: also found as b/backup/metrics-{t}.prom (the same bytes): read once" in _said(s)
    assert len(_said(s)) == 4


# (the copy, the name read: the first in walk order, a folder's files before its subfolders)
LOG_COPIES = [("vllm-copy.log", "vllm-copy.log"), ("logs/vllm.log", "vllm.log")]


@pytest.mark.parametrize(("copy", "read"), LOG_COPIES, ids=[c for c, _ in LOG_COPIES])
def test_cli_a_copied_log_is_one_server(tmp_path, copy, read):
    b = _bundle(tmp_path / "b")
    (b / copy).parent.mkdir(exist_ok=True)
    shutil.copyfile(b / "vllm.log", b / copy)
    s = _cli(b)
    assert s["events"] == 3 and not s["headline"].startswith("Not one incident"), s["headline"]
    assert [i["file"] for i in s["inputs"] if i["kind"] == "vllm-log"] == [f"b/{read}"]
    other = "vllm.log" if read == copy else copy
    assert _said(s) == [f"b/{read}: also found as b/{other} (the same bytes): read once"]


def test_cli_a_records_file_saved_twice_counts_its_records_once(tmp_path):
    b = _bundle(tmp_path / "b", records=True)
    shutil.copyfile(b / "preempt-200.jsonl", b / "blocktable.jsonl")
    s = _cli(b)
    assert s["events"] == 3
    assert s["by_kind"]["record"] == 3, s["by_kind"]
    assert _said(s) == ["b/blocktable.jsonl: also found as b/preempt-200.jsonl (the same bytes): read once"]


def test_cli_a_hard_link_is_dated_by_the_name_that_carries_a_time(tmp_path):
    """``a-scrape.prom`` sorts first and carries no time: the page is dated by its other name, not by the
    mtime (an hour later, where the counter's 2 would follow the 3 read at 40 s: a restart)."""
    b = _bundle(tmp_path / "b")
    os.link(b / f"metrics-{int(T0) + 30}.prom", b / "a-scrape.prom")
    s = _cli(b)
    assert s["events"] == 3 and _scrapes(s) == [4]
    assert [w for w in s["warnings"] if "(the same file): read once" in w] == [
        f"b/a-scrape.prom: also reached as b/metrics-{int(T0) + 30}.prom (the same file): read once"
    ]


def test_cli_an_unchanged_page_named_by_two_times_is_two_readings(tmp_path):
    """A wedged server's pages: the counter stays at 3, the page is byte for byte the same, and its two
    names give two times. Both are read (the span the counter stood still is theirs), none is a copy."""
    b = _bundle(tmp_path / "b")
    shutil.copyfile(b / f"metrics-{int(T0) + 40}.prom", b / f"metrics-{int(T0) + 50}.prom")
    os.utime(b / f"metrics-{int(T0) + 50}.prom", (LATER, LATER))
    s = _cli(b)
    assert s["events"] == 3 and _scrapes(s) == [5]
    assert not _said(s)


def _timed_page(n: int, ms: int) -> str:
    return (
        "# TYPE vllm:num_preemptions_total counter\n"
        f'vllm:num_preemptions_total{{engine="0",model_name="m"}} {float(n)} {ms}\n'
        "# TYPE vllm:num_requests_waiting gauge\n"
        f'vllm:num_requests_waiting{{engine="0",model_name="m"}} 1.0 {ms}\n'
    )


@pytest.mark.parametrize("where", ["backup", "."])
def test_cli_pages_whose_samples_carry_their_time_are_one_reading_whatever_their_names(tmp_path, where):
    """Sample timestamps date a page: the same page saved again under a name with another time (when it
    was saved) is the same reading, in the folder or under backup/."""
    b = tmp_path / "b"
    b.mkdir()
    (b / "vllm.log").write_text(V1_LOG + "\n")
    (b / where).mkdir(exist_ok=True)
    for i in range(4):
        t = int(T0) + 10 * (i + 1)
        (b / f"metrics-{t}.prom").write_text(_timed_page(i, t * 1000))
        shutil.copyfile(b / f"metrics-{t}.prom", b / where / f"saved-{t + 600}.prom")
    s = _cli(b)
    assert s["events"] == 3 and _scrapes(s) == [4]
    assert len(_said(s)) == 4
    sub = "" if where == "." else "backup/"
    assert f"b/metrics-{int(T0) + 10}.prom: also found as b/{sub}saved-{int(T0) + 610}.prom" in " ".join(_said(s))
