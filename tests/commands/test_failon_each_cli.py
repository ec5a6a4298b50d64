"""``--fail-on unknown`` on a bundle of several servers, ``--each``'s exit code and outputs, and the
option a bad file kind came with: through real processes (the exit code and stderr are the contract)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import polars as pl

from preemptlog.errors import ExitCode

from ..conftest import write_lines

PY = [sys.executable, "-m", "preemptlog"]

# A stock vLLM V1 server: it never prints a preemption count (not visible), KV cache at the ceiling.
STATS = (
    "(APIServer pid=1) INFO 03-14 10:00:{:02d} [loggers.py:318] Engine 000: Avg prompt throughput: 10.0 tokens/s, "
    "Avg generation throughput: 400.0 tokens/s, Running: {} reqs, Waiting: {} reqs, {}GPU KV cache usage: {}%, "
    "Prefix cache hit rate: 20.0%"
)
STOCK_V1 = [
    "(APIServer pid=1) INFO 03-14 09:59:50 [api_server.py:1] vLLM API server version 0.32.0",
    "(EngineCore_DP0 pid=2) INFO 03-14 09:59:51 [core.py:90] Initializing a V1 LLM engine (v0.32.0) with config: "
    "model='m'",
    STATS.format(0, 30, 0, "", "80.0"),
    STATS.format(10, 20, 12, "", "99.0"),
    STATS.format(20, 25, 6, "", "99.5"),
]
# A V1 server whose stats lines count its preemptions ('Preemptions: N').
COUNTING_V1 = [
    "(APIServer pid=9) INFO 03-14 09:59:30 [api_server.py:1] vLLM API server version 0.20.0",
    STATS.format(0, 30, 0, "", "80.0"),
    STATS.format(10, 28, 4, "Preemptions: 2, ", "99.0"),
    STATS.format(20, 27, 6, "Preemptions: 3, ", "99.5"),
]
V0_WARNING = (
    "WARNING 03-14 10:00:{:02d} scheduler.py:1481] Sequence group {} is preempted by PreemptionMode.RECOMPUTE "
    "mode because there is not enough KV cache space. This can affect the end-to-end performance. Increase "
    "gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
    "total_num_cumulative_preemption={}"
)
# A V0 server: its warnings count (1st, 51st, ...).
V0 = [
    "INFO 03-14 09:59:00 api_server.py:500] vLLM API server version 0.6.3",
    V0_WARNING.format(5, "a", 1),
    V0_WARNING.format(25, "b", 51),
]
DMON = ["# gpu    sm   mem", "# Idx     %     %", "    0    45    20", "    0    95    80"]


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, NO_COLOR="1", TZ="UTC")
    return subprocess.run(
        PY + args + ["--tz", "UTC", "--year", "2026"], capture_output=True, text=True, env=env, cwd=cwd, timeout=120
    )


def bundle(tmp_path: Path) -> Path:
    (tmp_path / "stock").mkdir()
    (tmp_path / "v0").mkdir()
    (tmp_path / "pair").mkdir()
    write_lines(tmp_path / "stock" / "vllm.log", STOCK_V1)
    write_lines(tmp_path / "v0" / "srvA.log", V0)
    write_lines(tmp_path / "pair" / "srvA.log", V0)
    write_lines(tmp_path / "pair" / "srvB.log", COUNTING_V1)
    (tmp_path / "cut.log").write_text("\n".join(V0))  # no line end after the last line: read, PARTIAL
    return tmp_path


def fail_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "--fail-on" in line]


def test_unknown_holds_when_one_server_of_the_bundle_is_not_visible(tmp_path):
    """Two servers, one counted, one a stock V1 log: the bundle's total is not known, so
    ``--fail-on unknown`` holds (6) and names the server; a count condition still wins (4)."""
    d = bundle(tmp_path)
    p = run(["analyze", "stock", "v0/srvA.log", "-q", "-f", "ndjson", "--fail-on", "unknown"], d)
    assert p.returncode == ExitCode.NOT_VISIBLE, p.stderr
    (line,) = fail_lines(p.stderr)
    assert "--fail-on unknown" in line and "stock/vllm.log" in line and "srvA" not in line, line
    # Without -q (the summary analyses each incident already): the same.
    p = run(["analyze", "stock", "v0/srvA.log", "-f", "json", "-o", "out.json", "--fail-on", "unknown"], d)
    assert p.returncode == ExitCode.NOT_VISIBLE, p.stderr
    # FAIL_ON wins over NOT_VISIBLE.
    p = run(["analyze", "stock", "v0/srvA.log", "-q", "-f", "ndjson", "--fail-on", "unknown", "--fail-on", "any"], d)
    assert p.returncode == ExitCode.FAIL_ON, p.stderr
    assert fail_lines(p.stderr) == ["preemptlog: --fail-on any: condition met"]
    # Every server counted (two servers, and a dmon file that meets neither in time): nothing unknown.
    write_lines(d / "pair" / "dmon.txt", DMON)
    p = run(["analyze", "pair", "-q", "-f", "ndjson", "--fail-on", "unknown"], d)
    assert p.returncode == ExitCode.OK, p.stderr
    assert fail_lines(p.stderr) == []


def test_each_combines_the_units_like_one_run(tmp_path):
    """--each: NOT_VISIBLE (6) when a unit's count is not visible, not FAIL_ON (4); one unit's
    FAIL_ON wins over another's NOT_VISIBLE, which wins over another's PARTIAL."""
    d = bundle(tmp_path)
    p = run(["analyze", "stock", "--each", "-q", "-f", "csv", "--fail-on", "unknown"], d)
    assert p.returncode == ExitCode.NOT_VISIBLE, p.stderr
    assert "condition met" not in p.stderr
    (line,) = fail_lines(p.stderr)
    assert "--fail-on unknown: the preemption count of stock is not visible" in line, line
    p = run(["analyze", "stock", "v0/srvA.log", "--each", "-q", "-f", "csv", "--fail-on", "unknown"], d)
    assert p.returncode == ExitCode.NOT_VISIBLE, p.stderr
    p = run(["analyze", "stock", "cut.log", "--each", "-q", "-f", "csv", "--fail-on", "unknown"], d)
    assert p.returncode == ExitCode.NOT_VISIBLE, p.stderr
    cmd = ["analyze", "stock", "v0/srvA.log", "--each", "-q", "-f", "csv", "--fail-on", "unknown", "--fail-on", "any"]
    p = run(cmd, d)
    assert p.returncode == ExitCode.FAIL_ON, p.stderr
    assert fail_lines(p.stderr) == ["preemptlog: --fail-on any: condition met (server v0/srvA.log)"]
    # A unit of several servers (one input) is judged as one run of it: one of them not visible.
    write_lines(d / "pair" / "stock.log", STOCK_V1)
    p = run(["analyze", "pair", "v0", "--each", "-q", "-f", "csv", "--fail-on", "unknown"], d)
    assert p.returncode == ExitCode.NOT_VISIBLE, p.stderr
    assert "stock.log" in fail_lines(p.stderr)[0]


def test_each_parquet_and_an_empty_result_have_one_schema(tmp_path):
    """--each -o x.parquet types its times as one run does (Datetime, not text), and a run without
    events writes every column of the same types (one schema for every file of a dataset)."""
    d = bundle(tmp_path)
    for args, out in (
        (["pair"], "one.parquet"),
        (["pair", "--each"], "each.parquet"),
        (["stock"], "empty.parquet"),
        (["stock", "--each"], "each-empty.parquet"),
    ):
        p = run(["analyze", *args, "-q", "-o", out], d)
        assert p.returncode == ExitCode.OK, p.stderr
    one, each = pl.read_parquet(d / "one.parquet"), pl.read_parquet(d / "each.parquet")
    empty, each_empty = pl.read_parquet(d / "empty.parquet"), pl.read_parquet(d / "each-empty.parquet")
    assert one.height > 0 and each.height == one.height and empty.height == 0 and each_empty.height == 0
    utc = pl.Datetime("us", "UTC")
    for col in ("time", "interval_start", "interval_end"):
        assert one.schema[col] == utc and each.schema[col] == utc, (col, each.schema[col])
    assert list(each.columns) == ["server", *one.columns]
    assert each.drop("server").schema == one.schema
    assert empty.schema == one.schema, set(one.columns) - set(empty.columns)
    assert each_empty.schema == each.schema
    pl.concat([one, empty])  # a dataset of both reads as one table
    # csv: the same header with and without events, --wide too; --each adds the server column first.
    for extra in ([], ["--wide"]):
        heads = {}
        for name, args in (("one", ["pair"]), ("empty", ["stock"]), ("each", ["stock", "--each"])):
            p = run(["analyze", *args, "-q", "-f", "csv", *extra], d)
            assert p.returncode == ExitCode.OK, p.stderr
            heads[name] = p.stdout.splitlines()[0]
        assert heads["empty"] == heads["one"] and heads["each"] == "server," + heads["one"], extra


def test_a_bad_file_kind_names_the_option_it_came_with(tmp_path):
    d = bundle(tmp_path)
    p = run(["analyze", "v0/srvA.log", "--file-kind", "srvA.log=nonsense"], d)
    err = p.stderr.strip().splitlines()
    assert p.returncode == ExitCode.USAGE and len(err) == 1, err
    assert err[0].startswith("preemptlog: error: --file-kind 'srvA.log=nonsense': unknown kind 'nonsense'"), err
    # --kind FILE=KIND, the old spelling, still works and its errors name it.
    p = run(["analyze", "v0/srvA.log", "--kind", "srvA.log=nonsense"], d)
    assert p.returncode == ExitCode.USAGE
    assert "preemptlog: error: --kind 'srvA.log=nonsense': unknown kind 'nonsense'" in p.stderr, p.stderr
    # The other commands take --file-kind from the same options.
    p = run(["whatif", "v0/srvA.log", "--file-kind", "srvA.log=nonsense"], d)
    assert p.returncode == ExitCode.USAGE and "error: --file-kind 'srvA.log=nonsense'" in p.stderr, p.stderr
