"""``--each --columns`` may name ``server``: the column --each puts on every row (docs/inputs.md's
``jq '[.server, ...]'``), in every format, where it is named; without --each it is a usage error that
says why (there is one incident, no server column).

Before: ``--each --columns server,event_id`` exited 2 with ``unknown column(s) server`` in ndjson, csv,
json and parquet, and the --each table ignored --columns altogether.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import polars as pl
import pytest

from tests.conftest import run_cli

V0_WARNING = (
    "WARNING 03-14 10:00:{:02d} scheduler.py:1481] Sequence group {} is preempted by PreemptionMode.RECOMPUTE "
    "mode because there is not enough KV cache space. This can affect the end-to-end performance. Increase "
    "gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
    "total_num_cumulative_preemption={}"
)


def bundle(tmp_path: Path) -> Path:
    """Two servers, a folder each, one V0 preemption warning each."""
    root = tmp_path / "incidents"
    for name, sec in (("a", 5), ("b", 25)):
        (root / name).mkdir(parents=True)
        (root / name / "vllm.log").write_text(
            "INFO 03-14 09:59:00 api_server.py:500] vLLM API server version 0.6.3\n"
            + V0_WARNING.format(sec, f"req-{name}", 1)
            + "\n",
            encoding="utf-8",
        )
    return root


def each(root: Path, fmt: str, columns: str, *more: str) -> str:
    out = run_cli(
        "analyze", str(root), "--each", "--tz", "UTC", "--year", "2026", "-q", "-f", fmt, "--columns", columns, *more
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


EXPECTED = [("incidents/a", "a/vllm.log:2"), ("incidents/b", "b/vllm.log:2")]


@pytest.mark.parametrize("fmt", ["ndjson", "csv", "json"])
def test_each_columns_accept_server_in_every_text_format(tmp_path, fmt):
    root = bundle(tmp_path)
    text = each(root, fmt, "server,event_id")
    if fmt == "ndjson":
        rows = [json.loads(line) for line in text.splitlines()]
    elif fmt == "csv":
        rows = list(csv.DictReader(io.StringIO(text)))
    else:
        rows = json.loads(text)["events"]
    assert [list(r) for r in rows] == [["server", "event_id"]] * 2
    assert sorted((r["server"], r["event_id"]) for r in rows) == EXPECTED


def test_each_columns_put_server_where_it_is_named(tmp_path):
    root = bundle(tmp_path)
    rows = [json.loads(line) for line in each(root, "ndjson", "event_id,server,kind").splitlines()]
    assert [list(r) for r in rows] == [["event_id", "server", "kind"]] * 2
    # unnamed, it comes first, as before
    rows = [json.loads(line) for line in each(root, "ndjson", "event_id").splitlines()]
    assert [list(r) for r in rows] == [["server", "event_id"]] * 2


def test_each_columns_server_in_parquet(tmp_path):
    root = bundle(tmp_path)
    out = tmp_path / "e.parquet"
    each(root, "parquet", "kind,server", "-o", str(out))
    df = pl.read_parquet(out)
    assert df.columns == ["kind", "server"]
    assert sorted(df.get_column("server").to_list()) == ["incidents/a", "incidents/b"]


def test_each_table_events_take_the_columns_with_server(tmp_path):
    root = bundle(tmp_path)
    lines = each(root, "table", "event_id,server").splitlines()
    head = next(line for line in lines if "event" in line and "server" in line and "engine" not in line)
    assert head.index("event") < head.index("server")
    assert any("a/vllm.log:2" in line and "incidents/a" in line for line in lines)
    assert not any("verdict" in line for line in lines)  # only the columns asked for


def test_server_without_each_says_why(tmp_path):
    out = run_cli(
        "analyze", str(bundle(tmp_path)), "--tz", "UTC", "--year", "2026", "-f", "csv", "--columns", "server,event_id"
    )
    assert out.returncode == 2
    assert "server is a column of --each only" in out.stderr
