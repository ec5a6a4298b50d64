"""``simulate`` and ``capture`` write into an ``-o DIR`` folder: a folder that cannot be created or
written is the output's fault, exit 2 (ExitCode.USAGE, OutputError) in one line naming ``-o``, never
exit 3 (an input that cannot be read), never a traceback."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from preemptlog.errors import ExitCode

from ..conftest import run_cli


def _unmakeable(tmp_path: Path, shape: str) -> Path:
    """An -o folder that cannot be created, in several shapes."""
    afile = tmp_path / "afile"
    afile.write_text("x\n")
    if shape == "under-a-file":
        return afile / "out"  # NotADirectoryError on the folder itself
    if shape == "two-below-a-file":
        return afile / "a" / "b"  # the error names a folder on the way to it
    if shape == "proc":
        return Path("/proc/preemptlog-no-such/out")  # /proc refuses new entries
    raise AssertionError(shape)


SHAPES = ["under-a-file", "two-below-a-file"] + (["proc"] if sys.platform.startswith("linux") else [])


def _one_output_error(p, out: Path) -> None:
    assert p.returncode == ExitCode.USAGE, (p.returncode, p.stderr)
    err = p.stderr.strip().splitlines()
    assert "Traceback" not in p.stderr
    assert err[-1].startswith(f"preemptlog: error: -o {out}"), err


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("scenario", ["clean", "large"])
def test_simulate_into_a_folder_that_cannot_be_created_is_an_output_error(tmp_path, shape, scenario):
    out = _unmakeable(tmp_path, shape)
    size = ["--size", "1M"] if scenario == "large" else ["--duration", "5"]
    p = run_cli("simulate", scenario, "-o", str(out), *size)
    _one_output_error(p, out)
    assert len(p.stderr.strip().splitlines()) == 1


def test_simulate_a_bundle_file_taken_by_a_folder_is_an_output_error(tmp_path):
    out = tmp_path / "b"
    (out / "vllm.log").mkdir(parents=True)  # --force writes into it; the file's name is a folder
    p = run_cli("simulate", "clean", "-o", str(out), "--duration", "5", "--force")
    _one_output_error(p, out)
    assert "vllm.log" in p.stderr


@pytest.mark.parametrize("shape", SHAPES)
def test_capture_into_a_folder_that_cannot_be_created_is_an_output_error(tmp_path, shape):
    out = _unmakeable(tmp_path, shape)
    log = tmp_path / "src.log"
    log.write_text("a line\n")
    p = run_cli("capture", "-o", str(out), "--log", str(log), "--for", "1s")
    _one_output_error(p, out)


def test_capture_whose_manifest_cannot_be_written_is_an_output_error(tmp_path):
    out = tmp_path / "cap"
    (out / "capture.jsonl").mkdir(parents=True)  # the folder exists; its manifest's name is a folder
    log = tmp_path / "src.log"
    log.write_text("a line\n")
    p = run_cli("capture", "-o", str(out), "--log", str(log), "--for", "1s", "-q")
    _one_output_error(p, out)
    assert "capture.jsonl" in p.stderr
