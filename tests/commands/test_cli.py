"""The command line, through typer's runner and through real subprocesses with pipes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from preemptlog.cli import app
from preemptlog.errors import ExitCode

from ..conftest import FIXTURES, ROOT, write_lines

V0 = str(FIXTURES / "golden" / "v0-unbracketed-0.6.log")
runner = CliRunner()


def invoke(*args, input=None):
    return runner.invoke(app, list(args), input=input)


def test_help_lists_commands():
    r = invoke("--help")
    assert r.exit_code == 0
    assert "analyze" in r.stdout


def test_analyze_help_teaches():
    r = invoke("analyze", "--help")
    assert r.exit_code == 0
    for word in ("Examples", "--fail-on", "--year", "--tz", "reconstructed"):
        assert word in r.stdout


def test_ndjson_to_stdout_summary_to_stderr():
    r = invoke("analyze", V0, "--year", "2025", "--tz", "UTC", "-f", "ndjson")
    assert r.exit_code == 0, r.stderr
    rows = [json.loads(ln) for ln in r.stdout.splitlines()]
    assert len(rows) == 101
    assert rows[-1]["kind"] == "logged" and rows[-1]["cumulative"] == 101
    assert "101 preemption event(s)" in r.stderr
    assert r.stderr.startswith(
        "at least 101 preemptions in "
    )  # V0 warnings: a lower bound  # the headline first, off a terminal too
    assert "preemption event" not in r.stdout


def test_default_format_off_terminal_is_ndjson():
    r = invoke("analyze", V0, "--year", "2025", "--tz", "UTC", "-q")
    assert r.exit_code == 0
    assert json.loads(r.stdout.splitlines()[0])["event_id"].endswith(":11~r1") or json.loads(r.stdout.splitlines()[0])
    assert r.stderr == ""


def test_json_document():
    r = invoke("analyze", V0, "--year", "2025", "--tz", "UTC", "-f", "json", "-q")
    doc = json.loads(r.stdout)
    assert doc["schema_version"] == 2
    assert doc["summary"]["events"] == len(doc["events"]) == 101
    assert doc["summary"]["by_kind"]["reconstructed"] == 98
    keys = {c["key"] for c in doc["config"]}
    assert {"num_gpu_blocks", "max_num_seqs", "block_size"} <= keys


def test_csv_and_safe_csv(tmp_path):
    p = write_lines(tmp_path / "v.log", ['INFO 05-02 10:00:00 [x.py:1] =HYPERLINK("http://x") Req-1 PREEMPTED'])
    plain = invoke("analyze", str(p), "--year", "2025", "-f", "csv", "-q", "--columns", "event_id,time,raw")
    safe = invoke("analyze", str(p), "--year", "2025", "-f", "csv", "-q", "--csv-safe", "--wide")
    assert plain.stdout.splitlines()[0].startswith("event_id,time,")
    raw_plain = list(pl.read_csv(plain.stdout.encode()).get_column("raw"))[0]
    raw_safe = list(pl.read_csv(safe.stdout.encode()).get_column("raw"))[0]
    assert raw_plain.startswith("INFO") and raw_safe.startswith("INFO")
    hostile = write_lines(tmp_path / "h.log", ["=cmd|' /C calc'!A0 Req-2 PREEMPTED"])
    safe2 = invoke("analyze", str(hostile), "--year", "2025", "-f", "csv", "-q", "--csv-safe", "--wide")
    assert list(pl.read_csv(safe2.stdout.encode()).get_column("raw"))[0].startswith("'=")


def test_parquet_to_file(tmp_path):
    out = tmp_path / "events.parquet"
    r = invoke("analyze", V0, "--year", "2025", "--tz", "UTC", "-o", str(out), "-q")
    assert r.exit_code == 0, r.stderr
    df = pl.read_parquet(out)
    assert df.height == 101
    assert df.schema["time"] == pl.Datetime("us", "UTC")
    assert not list(tmp_path.glob(".*.part"))


def test_output_not_created_on_failure(tmp_path):
    out = tmp_path / "events.ndjson"
    r = invoke("analyze", str(tmp_path / "missing.log"), "-o", str(out))
    assert r.exit_code == ExitCode.INPUT
    assert not out.exists()


def test_missing_input_is_one_line():
    r = invoke("analyze", "/nonexistent/vllm.log")
    assert r.exit_code == ExitCode.INPUT
    assert r.stderr.strip().count("\n") == 0
    assert "no such file" in r.stderr and "Traceback" not in r.stderr


def test_usage_errors_exit_2(tmp_path):
    assert invoke("analyze", V0, "--format", "xml").exit_code == ExitCode.USAGE
    assert invoke("analyze", V0, "--tz", "Mars/Base").exit_code == ExitCode.USAGE
    assert invoke("analyze", V0, "--fail-on", "bogus").exit_code == ExitCode.USAGE
    assert invoke("analyze").exit_code == ExitCode.USAGE


@pytest.mark.parametrize(
    "cond,code",
    [
        ("any", ExitCode.FAIL_ON),
        ("count>100", ExitCode.FAIL_ON),
        ("count>101", ExitCode.OK),
        ("count>=101", ExitCode.FAIL_ON),
        ("rate>50%", ExitCode.FAIL_ON),
        ("rate>60", ExitCode.OK),
    ],
)
def test_fail_on(cond, code):
    r = invoke("analyze", V0, "--year", "2025", "-q", "--fail-on", cond, "-f", "ndjson")
    assert r.exit_code == code, r.stderr


def test_nothing_recognisable_exit_3(tmp_path):
    p = write_lines(tmp_path / "a.txt", ["just text"])
    r = invoke("analyze", str(p))
    assert r.exit_code == ExitCode.INPUT and "nothing recognisable" in r.stderr


def test_partial_input_exit_5(tmp_path):
    import gzip

    data = gzip.compress(Path(V0).read_bytes() * 50)
    p = tmp_path / "vllm.log.gz"
    p.write_bytes(data[: len(data) // 2])
    r = invoke("analyze", str(p), "--year", "2025", "-f", "ndjson")
    assert r.exit_code == ExitCode.PARTIAL
    assert "damaged gzip" in r.stderr


def test_log_text_is_inert_in_the_table(tmp_path):
    p = write_lines(
        tmp_path / "[red]x.log",
        ["INFO 05-02 10:00:00 [x.py:1] Req-[bold]1[/bold]\x1b]0;pwned\x07\x1b[2J PREEMPTED"],
    )
    r = invoke("analyze", str(p), "--year", "2025", "-f", "table")
    assert r.exit_code == 0, r.stderr
    assert "[red]x.log" in r.stdout.replace("\n", "")
    assert "\x1b" not in r.stdout and "\x07" not in r.stdout
    assert "\x1b" not in r.stderr


# ---- real subprocesses with pipes ----


def _env():
    env = dict(os.environ)
    env.pop("PREEMPTLOG_FORMAT", None)
    env["NO_COLOR"] = "1"
    return env


def test_subprocess_pipe_from_stdin():
    cmd = (
        f"cat {V0} | {sys.executable} -m preemptlog analyze - --year 2025 --format ndjson | "
        f"{sys.executable} -c \"import sys,json; rows=[json.loads(l) for l in sys.stdin]; print(len(rows), rows[-1]['cumulative'])\""
    )
    out = subprocess.run(cmd, shell=True, capture_output=True, text=True, cwd=ROOT, env=_env())
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["101", "101"]


def test_subprocess_closed_pipe_is_quiet(tmp_path):
    big = tmp_path / "big.log"
    big.write_text(Path(V0).read_text() * 200)
    cmd = f"{sys.executable} -m preemptlog analyze {big} --year 2025 -f ndjson -q | head -1"
    out = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True, env=_env())
    assert out.stdout.count("\n") == 1
    assert "Traceback" not in out.stderr and "Exception" not in out.stderr
    assert out.returncode in (0, ExitCode.PIPE_CLOSED)


def test_subprocess_error_exit_code():
    out = subprocess.run(
        [sys.executable, "-m", "preemptlog", "analyze", "/nope"], capture_output=True, text=True, env=_env()
    )
    assert out.returncode == ExitCode.INPUT
    assert out.stderr.startswith("preemptlog: error:")
    assert out.stdout == ""


def test_console_script_version():
    out = subprocess.run([sys.executable, "-m", "preemptlog", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("preemptlog ")
