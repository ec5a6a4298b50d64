"""The command-line contract under hostile values and destinations, through real processes:
every bad value or unwritable destination is one line on stderr and a documented exit code."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from preemptlog.errors import ExitCode

from ..conftest import ROOT, run_cli, write_lines

M = "INFO 05-04 05:25:{:02d} [scheduler.py:10] Req-r{} PREEMPTED"


def small_log(path: Path, n: int = 30) -> Path:
    return write_lines(path, [M.format(i % 60, i) for i in range(n)])


def run(*args: str, env: dict[str, str] | None = None, stdout=subprocess.PIPE, timeout: float = 120):
    """``preemptlog ARGS`` as a real process (text, no colour, TZ=UTC), with more environment."""
    return subprocess.run(
        [sys.executable, "-m", "preemptlog", *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, NO_COLOR="1", TZ="UTC", **(env or {})),
        timeout=timeout,
        check=False,
    )


def one_line_error(stderr: str, *words: str) -> None:
    assert "Traceback" not in stderr and "panicked" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("preemptlog: error:")]
    assert len(errors) == 1, stderr
    assert "internal error" not in errors[0], stderr
    for w in words:
        assert w in errors[0], stderr


# ---------------------------------------------------------------- a full disk


FULL = "/dev/full"
needs_full = pytest.mark.skipif(not os.path.exists(FULL), reason="no /dev/full on this system")


@needs_full
@pytest.mark.parametrize(
    "args",
    [
        ["analyze", "{log}", "-f", "json"],
        ["analyze", "{log}", "-f", "ndjson"],
        ["analyze", "{log}", "-f", "csv"],
        ["analyze", "{log}", "-f", "table"],
        ["analyze", "{log}", "-f", "parquet"],
        ["analyze", "{log}", "--each", "-f", "json"],
        ["explain", "{log}:1", "{log}", "-f", "json"],
        ["report", "{log}", "-o", "-"],
        ["rules", "-f", "json"],
        ["simulate", "--list"],
        ["--help"],
        ["--version"],
        ["analyze", "--help"],
    ],
    ids=lambda a: " ".join(a),
)
def test_standard_output_on_a_full_disk_is_an_output_error(tmp_path, args):
    """`preemptlog ... > /dev/full`: the destination cannot be written, as for -o on a full disk
    (errors.OutputError, exit 2), one line, no traceback; not "the input could not be read" (3)."""
    log = str(small_log(tmp_path / "vllm.log"))
    quiet = ["-q"] if args[0] in ("analyze", "explain", "report") and "--help" not in args else []
    with open(FULL, "w") as full:
        out = run(*[a.replace("{log}", log) for a in args], *quiet, stdout=full)
    assert out.returncode == ExitCode.USAGE, out.stderr
    one_line_error(out.stderr, "standard output", "cannot write")


@needs_full
@pytest.mark.parametrize("command", ["analyze", "report", "explain"])
def test_output_file_on_a_full_device_is_an_output_error(tmp_path, command):
    """`-o /dev/full` (a device: written in place) fails like a regular -o file on a full disk."""
    log = str(small_log(tmp_path / "vllm.log"))
    args = [command, f"{log}:1", log] if command == "explain" else [command, log]
    out = run(*args, "-q", "-o", FULL) if command != "analyze" else run(*args, "-q", "-f", "json", "-o", FULL)
    assert out.returncode == ExitCode.USAGE, out.stderr
    one_line_error(out.stderr, f"-o {FULL}", "cannot write")


# ---------------------------------------------------------------- time spans a timestamp cannot hold


@pytest.mark.parametrize(
    "option",
    [
        ["--after", "inf"],
        ["--before", "1e308"],
        ["--after", "1e15"],
        ["--offset", "vllm-log=10000000000000000s"],
        ["--offset", "vllm-log=-100000000000s"],
    ],
    ids=lambda a: " ".join(a),
)
@pytest.mark.parametrize("command", ["analyze", "explain"])
def test_windows_and_offsets_beyond_a_timestamp_are_usage_errors(tmp_path, command, option):
    """An evidence window or clock offset no timestamp can hold (inf, 1e15 s): a usage error naming
    the option, not an internal error (1) or a crash of polars with its stack."""
    log = str(small_log(tmp_path / "vllm.log"))
    args = [command, f"{log}:1", log] if command == "explain" else [command, log]
    out = run_cli(*args, *option, "-f", "json")
    assert out.returncode == ExitCode.USAGE, out.stderr
    one_line_error(out.stderr, option[0])


def test_long_windows_and_offsets_within_a_century_still_work(tmp_path):
    log = str(small_log(tmp_path / "vllm.log"))
    out = run_cli("analyze", log, "--before", "1e9", "--offset", "vllm-log=-3000000000s", "-f", "json", "-q")
    assert out.returncode == ExitCode.OK, out.stderr


@pytest.mark.parametrize(
    "option",
    [["--duration", "inf"], ["--duration", "nan"], ["--skew", "dmon=inf"], ["--skew", "dmon=nan"]],
    ids=lambda a: " ".join(a),
)
def test_simulate_refuses_values_that_are_not_finite(tmp_path, option):
    """`simulate --duration inf` ran for ever (nan: tens of GB of memory): a usage error at once."""
    out = run("simulate", "g1-capacity", "-o", str(tmp_path / "sim"), *option, "-q", timeout=60)
    assert out.returncode == ExitCode.USAGE, out.stderr
    one_line_error(out.stderr, option[0])
    assert not (tmp_path / "sim").exists() or not any((tmp_path / "sim").iterdir())


# ---------------------------------------------------------------- environment and contradictions


@pytest.mark.parametrize("value", ["JSON", "Json", " json "])
def test_preemptlog_format_is_read_as_format_is(tmp_path, value):
    """PREEMPTLOG_FORMAT=JSON is the format -f JSON gives (-f is case-insensitive), not a usage error."""
    log = str(small_log(tmp_path / "vllm.log"))
    by_option = run("analyze", log, "-q", "-f", "JSON")
    by_env = run("analyze", log, "-q", env={"PREEMPTLOG_FORMAT": value})
    assert by_option.returncode == by_env.returncode == ExitCode.OK, by_env.stderr
    assert by_env.stdout == by_option.stdout


def test_preemptlog_format_unknown_is_still_a_usage_error(tmp_path):
    out = run("analyze", str(small_log(tmp_path / "vllm.log")), "-q", env={"PREEMPTLOG_FORMAT": "xml"})
    assert out.returncode == ExitCode.USAGE
    one_line_error(out.stderr, "PREEMPTLOG_FORMAT")


def test_fleet_report_since_after_until_is_a_usage_error(tmp_path):
    """As in analyze: a window that ends before it starts shows nothing, so it is a contradiction."""
    bundle = tmp_path / "incident"
    bundle.mkdir()
    small_log(bundle / "vllm.log")
    ran = run("fleet", "run", str(bundle), "--out", str(tmp_path / "fleet"), "-q")
    assert ran.returncode == ExitCode.OK, ran.stderr
    out = run(
        "fleet", "report", str(tmp_path / "fleet"), "--since", "2030-01-01", "--until", "2020-01-01", "-f", "json"
    )
    assert out.returncode == ExitCode.USAGE, out.stderr
    one_line_error(out.stderr, "--since", "--until")
    same_day = run("fleet", "report", str(tmp_path / "fleet"), "--since", "2020-01-01", "--until", "2020-01-01")
    assert same_day.returncode == ExitCode.OK, same_day.stderr


def test_vllm_python_that_is_not_an_executable_is_a_usage_error(tmp_path):
    """--vllm-python naming a log or a folder is a bad command line (2), as a missing one is, not an
    input that could not be read (3)."""
    log = str(small_log(tmp_path / "vllm.log"))
    for py in (log, str(tmp_path)):
        out = run("whatif", log, "--engine", "vllm", "--vllm-python", py, "-q")
        assert out.returncode == ExitCode.USAGE, out.stderr
        one_line_error(out.stderr, "--vllm-python")


# ---------------------------------------------------------------- -o refused before any work


@pytest.mark.parametrize("command", ["analyze", "report", "explain", "whatif"])
def test_output_name_empty_or_in_a_missing_folder_is_refused_before_the_analysis(tmp_path, command):
    """``-o "$UNSET"`` is an empty name (not "is a folder": the current one), and a missing folder or a
    folder as -o is refused before the analysis: one line, exit 2, nothing on standard output."""
    log = str(small_log(tmp_path / "vllm.log"))
    args = [command, f"{log}:1", log] if command == "explain" else [command, log]
    for target, words in (
        ("", ["-o", "file name is empty"]),
        (str(tmp_path / "missing" / "out.json"), ["does not exist"]),
        (str(tmp_path), ["is a folder"]),
    ):
        out = run(*args, "-o", target)
        assert out.returncode == ExitCode.USAGE, out.stderr
        one_line_error(out.stderr, *words)
        assert out.stdout == ""
        # refused before the analysis: no headline was written
        assert "preemption" not in out.stderr.replace("preemptlog: error", "")


@pytest.mark.parametrize("zone", ["", "  "])
def test_an_empty_zone_is_a_usage_error(tmp_path, zone):
    """``--tz "$UNSET"`` names no zone: refused, not read as this machine's zone."""
    log = str(small_log(tmp_path / "vllm.log"))
    out = run("analyze", log, "--tz", zone, "-q")
    assert out.returncode == ExitCode.USAGE, out.stderr
    one_line_error(out.stderr, "--tz", "empty")
