"""``preemptlog fleet run`` over bundles of every kind: a folder of two servers and the same folder
as archives (a .tar.gz named ``.log``, a zip without suffix) split alike; two copies of one bundle.

The bundles are made from the project's fixtures (fixtures/demo: a stock vLLM 0.32 server, 242
preemptions counted by its /metrics; fixtures/handwritten r2 v08: one logged preemption).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from preemptlog.fleet import dataset

ROOT = Path(__file__).resolve().parents[2]
NODE2_LOG = ROOT / "fixtures" / "handwritten" / "r2-decision-step-shortage" / "v08" / "vllm.log"


def cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "preemptlog", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
        cwd=cwd,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )


def rack(where: Path) -> Path:
    """``rack/node1`` (the demo) and ``rack/node2`` (one logged preemption)."""
    r = where / "rack"
    shutil.copytree(ROOT / "fixtures" / "demo", r / "node1")
    (r / "node2").mkdir()
    shutil.copy(NODE2_LOG, r / "node2" / "vllm.log")
    return r


def test_an_archive_of_two_servers_is_split_like_its_folder_whatever_its_name(tmp_path):
    """Before: the folder was split into its two servers (by subfolder) but the same bundle as an
    archive was one server holding both (``servers`` 1, the two servers' events under one name),
    whatever the archive's name: the split looked for folders only."""
    src = rack(tmp_path / "src")
    b = tmp_path / "b"
    b.mkdir()
    shutil.copytree(src, b / "rack")
    with tarfile.open(b / "rack-t.log", "w:gz") as tf:  # a .tar.gz named like a log
        tf.add(src, arcname="rack")
    with zipfile.ZipFile(b / "rack-z", "w") as zf:  # a zip without suffix, no top folder
        for f in sorted(src.rglob("*")):
            if f.is_file():
                zf.write(f, f.relative_to(src).as_posix())
    r = cli(tmp_path, "fleet", "run", "b/*", "--out", "out", "--tz", "UTC")
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    bundles = dataset.scan(tmp_path / "out", "bundles").collect()
    assert dict(zip(bundles["name"], bundles["servers"], strict=True)) == {"rack": 2, "rack-t": 2, "rack-z": 2}
    ev = dataset.scan(tmp_path / "out", "events").collect()
    per = dict(ev.group_by("server").len().iter_rows())
    assert per == {
        "rack/node1": 242,
        "rack/node2": 1,
        "rack-t/node1": 242,
        "rack-t/node2": 1,
        "rack-z/node1": 242,
        "rack-z/node2": 1,
    }


def test_two_copies_of_one_bundle_are_analysed_once_and_said(tmp_path):
    """Before: two folders with the same bytes (srv-1/, srv-2/) were both "analysed" and counted
    ("2 bundle(s) analysed", "events 484 row(s)"), but their parts are named by the content digest,
    so the second replaced the first: the dataset held 242 events of one of them, and nothing said so."""
    b = tmp_path / "b"
    shutil.copytree(ROOT / "fixtures" / "demo", b / "srv-1")
    shutil.copytree(ROOT / "fixtures" / "demo", b / "srv-2")
    r = cli(tmp_path, "fleet", "run", "b/*", "--out", "out", "--tz", "UTC", "--jobs", "1")
    assert r.returncode == 0, r.stderr
    assert "1 bundle(s) analysed" in r.stderr
    assert "1 skipped (the same content as another bundle of this run)" in r.stderr
    assert "wrote out: events 242 row(s), incidents 1 row(s)" in r.stderr
    assert "preemptlog: duplicate: b/srv-2: the same content as b/srv-1 (analysed once, as b/srv-1)" in r.stderr
    bundles = dataset.scan(tmp_path / "out", "bundles").collect()
    assert bundles["name"].to_list() == ["srv-1"]
    assert dataset.scan(tmp_path / "out", "events").collect().height == 242
    again = cli(tmp_path, "fleet", "run", "b/*", "--out", "out", "--tz", "UTC")
    assert again.returncode == 0 and "2 skipped (already in the dataset)" in again.stderr


def test_a_fifo_among_the_bundles_is_an_error_row_not_a_hang(tmp_path):
    """Before: the bundle's digest opened the FIFO for reading and its worker waited for ever (the
    run never ended). Now it is an errors row (exit 3, one line) and the run goes on."""
    b = tmp_path / "b"
    b.mkdir()
    shutil.copy(NODE2_LOG, b / "srv-1.log")
    os.mkfifo(b / "srv-2.log")
    try:
        r = subprocess.run(
            [sys.executable, "-m", "preemptlog", "fleet", "run", "b/*", "--out", "out", "--tz", "UTC"],
            capture_output=True,
            text=True,
            env={**os.environ, "NO_COLOR": "1"},
            cwd=tmp_path,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError("fleet run hung on a FIFO") from exc
    assert r.returncode == 5, r.stderr
    assert "preemptlog: error: b/srv-2.log: exit 3: b/srv-2.log: not a regular file (a FIFO): not read" in r.stderr
    errors = dataset.scan(tmp_path / "out", "errors").collect()
    assert errors.select("path", "exit_code").rows() == [("b/srv-2.log", 3)]
    assert dataset.scan(tmp_path / "out", "events").collect().height == 1


def test_the_dataset_matched_by_the_glob_is_no_bundle(tmp_path):
    """Before: ``fleet run 'b/*' --out b/ds`` analysed the dataset itself on every re-run (an errors row
    "nothing recognisable", exit 5); a bundle folder holding the dataset was read with it (its digest new
    at every run: its rows added again)."""
    b = tmp_path / "b"
    shutil.copytree(ROOT / "fixtures" / "demo", b / "srv-1")
    first = cli(tmp_path, "fleet", "run", "b/*", "--out", "b/ds", "--tz", "UTC")
    assert first.returncode == 0, first.stderr
    again = cli(tmp_path, "fleet", "run", "b/*", "--out", "b/ds", "--tz", "UTC")
    assert again.returncode == 0, again.stderr
    assert "preemptlog: note: b/ds: the dataset itself (--out), not a bundle: skipped" in again.stderr
    assert "0 bundle(s) analysed, 0 failed, 1 skipped (already in the dataset)" in again.stderr
    assert dataset.scan(tmp_path / "b" / "ds", "errors").collect().height == 0
    inside = cli(tmp_path, "fleet", "run", "b", "--out", "b/ds", "--tz", "UTC")
    assert inside.returncode == 2
    assert inside.stderr.strip() == (
        "preemptlog: error: --out b/ds is inside the bundle b: the dataset would be read as part of it "
        "(give --out a folder outside the bundles)"
    )
