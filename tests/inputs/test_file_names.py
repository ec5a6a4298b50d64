"""File names that are not valid UTF-8 (bytes kept by Python as surrogates): read, and cited
escaped as ``\\xNN`` (no output can encode a surrogate; polars cannot open such a path)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import FIXTURES, ROOT


def _odd(tmp_path: Path, name: bytes) -> Path:
    target = os.path.join(os.fsencode(tmp_path), name)
    try:
        with open(target, "wb"):
            pass
    except OSError as exc:  # a file system that refuses such names
        pytest.skip(f"cannot create a non-UTF-8 file name here: {exc}")
    os.unlink(target)
    return Path(os.fsdecode(target))


def _run(*args: str) -> subprocess.CompletedProcess[bytes]:
    env = dict(os.environ, TZ="UTC")
    env.pop("PREEMPTLOG_FORMAT", None)
    return subprocess.run([sys.executable, "-m", "preemptlog", *args], capture_output=True, env=env, cwd=ROOT)


def test_a_log_with_a_non_utf8_name(tmp_path: Path) -> None:
    log = _odd(tmp_path, b"v\xff.log")
    shutil.copyfile(FIXTURES / "golden" / "v0-bracketed-0.8.log", log)
    got = _run("analyze", str(log), "-f", "ndjson", "-q", "--tz", "UTC")
    assert got.returncode == 0, got.stderr
    rows = [json.loads(x) for x in got.stdout.splitlines()]
    assert rows and all(r["source"].endswith("v\\xff.log") for r in rows)
    same = _run("analyze", str(FIXTURES / "golden" / "v0-bracketed-0.8.log"), "-f", "ndjson", "-q", "--tz", "UTC")
    assert len(rows) == len(same.stdout.splitlines())


def test_a_bundle_folder_with_non_utf8_names(tmp_path: Path) -> None:
    folder = _odd(tmp_path, b"b\xfe")
    shutil.copytree(FIXTURES / "guide-demo", folder)
    os.rename(os.path.join(os.fsencode(folder), b"vllm.log"), os.path.join(os.fsencode(folder), b"vllm\xfd.log"))
    got = _run("analyze", str(folder), "-f", "json", "--tz", "UTC")
    assert got.returncode == 0, got.stderr
    doc = json.loads(got.stdout)
    assert doc["events"] and doc["events"][0]["source"] == "b\\xfe/vllm\\xfd.log"


def test_a_missing_non_utf8_path_is_a_clear_error(tmp_path: Path) -> None:
    missing = _odd(tmp_path, b"gone\xfe.log")
    got = _run("analyze", str(missing))
    assert got.returncode != 0 and b"Traceback" not in got.stderr
    assert b"gone\\xfe.log: no such file or folder" in got.stderr
