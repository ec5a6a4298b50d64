"""preemptlog fleet run / fleet report: the dataset's layout and schema, its rows, resuming,
crash isolation, the readers (DuckDB, pyarrow.dataset, polars) and the report's answers."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest

from preemptlog.analysis import AnalyzeOptions
from preemptlog.fleet import dataset, schema
from preemptlog.fleet.inputs import bundle_name, expand

from ..conftest import ROOT
from ..support.fleet_shapes import make_fleet

ENV = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}


def cli(*args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "preemptlog", *args],
        capture_output=True,
        text=True,
        env={**ENV, **(env or {})},
        cwd=ROOT,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def rows(out: Path, table: str) -> pl.DataFrame:
    """A table's rows without the columns that differ between runs, in a stable order."""
    df = dataset.scan(out, table).collect().drop(schema.RUN_COLUMNS, strict=False)
    return df.sort(df.columns, nulls_last=True)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """The hand-made shapes and one `fleet run` over them (through the CLI, pipes)."""
    root = tmp_path_factory.mktemp("fleet")
    shapes = make_fleet(root / "bundles")
    out = root / "out"
    r = cli("fleet", "run", str(root / "bundles" / "*"), "--out", str(out), "--jobs", "2", "--tz", "UTC")
    return shapes, out, r


def test_run_exit_code_and_summary_say_what_failed(fleet):
    shapes, out, r = fleet
    assert r.returncode == 5, r.stderr  # a damaged and a failed bundle: exit 5, the run went on
    assert "10 bundle(s) analysed, 1 failed, 0 skipped" in r.stderr
    assert f"error: {shapes['junk']}: exit 3: nothing recognisable" in r.stderr
    assert f"partial: {shapes['damaged']}: exit 5:" in r.stderr
    assert "\x1b" not in r.stderr and "\r" not in r.stderr  # no progress bar in a pipe
    assert r.stdout == ""


def test_layout_partitions_parts_and_metadata(fleet):
    _, out, _ = fleet
    assert sorted(p.name for p in out.iterdir()) == sorted([*schema.TABLES, schema.MARKER])
    assert json.loads((out / schema.MARKER).read_text()) == schema.describe()
    ids = set(rows(out, "bundles").get_column("bundle_id"))
    for table in schema.TABLES:
        for day in (out / table).iterdir():
            assert day.name.startswith("day=") and len(day.name) == len("day=2026-11-29")  # day= only
            for f in day.iterdir():
                assert f.name.startswith("part-") and f.name.endswith(".parquet"), f
                assert f.name[5:-8] in ids  # named by the bundle's content digest
                s = pq.read_schema(f)
                assert schema.PARTITION not in s.names  # the key is in the folder name only
                assert s.names == list(schema.COLUMNS[table])
                meta = pq.read_metadata(f).metadata
                assert meta[b"preemptlog.schema_version"] == str(schema.SCHEMA_VERSION).encode()
                assert meta[b"preemptlog.table"] == table.encode()
                for field in s:
                    if str(field.type).startswith("timestamp"):
                        assert str(field.type) == "timestamp[us, tz=UTC]", (f, field)
                    assert "large" not in str(field.type) and "struct" not in str(field.type)
                    assert "list" not in str(field.type)


def test_every_time_column_is_microseconds_utc_as_declared():
    for table, cols in schema.COLUMNS.items():
        arrow = dataset.arrow_schema(table)
        for c, t in cols.items():
            if c in (
                "time",
                "interval_start",
                "interval_end",
                "log_first",
                "log_last",
                "first_event",
                "last_event",
                "analysed_at",
            ):
                assert t.startswith("Datetime"), (table, c)
            if t.startswith("Datetime"):
                assert str(arrow.field(c).type) == "timestamp[us, tz=UTC]", (table, c)


def test_schema_is_documented_in_docs_fleet_md():
    doc = (ROOT / "docs" / "fleet.md").read_text()
    block = doc.split("<!-- schema:", 1)[1].split("<!-- /schema -->", 1)[0]
    assert block.split("\n", 1)[1].strip() == schema.markdown().strip()
    assert f"schema_version {schema.SCHEMA_VERSION}" in doc


def test_incident_rows_one_per_bundle_server_engine(fleet):
    _, out, _ = fleet
    inc = rows(out, "incidents")
    keys = inc.select("bundle_id", "server", "engine")
    assert keys.unique().height == inc.height
    by = {(r["server"], r["engine"]): r for r in inc.iter_rows(named=True)}
    assert {e for s, e in by if s == "srv-dp"} >= {"0", "1"}  # data parallel: a row per engine
    assert ("rack-3/node1", "0") in by and ("rack-3/node2", "0") in by  # one bundle, two servers
    assert ("gpu-node-7", "0") in by  # the folder names the server when the file name is generic
    layout = by[("srv-layout", "0")]  # logs/ and metrics/ subfolders: one server, counted by its scrapes
    assert layout["preemptions"] == 25 and layout["count_visible"]
    assert ("srv-archive", "0") in by and ("srv-json", "0") in by
    stock = by[("srv-stock", "0")]
    assert stock["count_visible"] is False and stock["preemptions"] is None  # never a 0 that means "cannot tell"
    assert "never print a preemption count" in stock["not_visible_reason"]
    assert "/metrics" in stock["remedy"]
    assert stock["vllm_version"] == "0.11.1" and stock["model"] == "mistralai/Mistral-7B-Instruct-v0.3"
    v0 = by[("srv-v0", "0")]
    assert v0["engine_kind"] == "vllm" and v0["generation"] == "V0" and v0["vllm_version"] == "0.6.3"
    assert v0["headline"].startswith(f"at least {v0['preemptions']} preemptions")  # V0: a lower bound
    assert v0["top_fix"] and v0["top_fix_option"].startswith("--") and v0["top_fix_events"]
    assert v0["cfg_block_size"] == "16"
    assert v0["g1_kv_space"] == v0["preemptions"] and v0["top_cause"].startswith("G1-kv-space")
    scrapes = inc.filter(pl.col("server") == "srv-scrapes").row(0, named=True)
    assert scrapes["preemptions"] == 25  # the /metrics counter
    assert scrapes["recompute_tokens"] is None  # no event's cost is known: unknown, never 0 tokens


def test_event_rows_match_analyze_per_bundle(fleet):
    shapes, out, _ = fleet
    ev = rows(out, "events")
    for shape in ("v0", "scrapes", "archive", "dp", "v1-json"):
        r = cli("analyze", str(shapes[shape]), "-f", "ndjson", "-q", "--tz", "UTC")
        want = sorted(json.loads(x)["event_id"] for x in r.stdout.splitlines())
        name = bundle_name(str(shapes[shape]))
        got = sorted(ev.filter(pl.col("server") == name).get_column("event_id").to_list())
        assert got == want and want, shape
    v0 = ev.filter(pl.col("server") == "srv-v0")
    assert v0.get_column("gate").null_count() == 0 and v0.get_column("mechanism").null_count() == 0
    assert (v0.get_column("day").cast(pl.String) == v0.get_column("time").dt.date().cast(pl.String)).all()


def test_errors_rows_carry_exit_code_and_one_line(fleet):
    shapes, out, _ = fleet
    err = {r["path"]: r for r in rows(out, "errors").iter_rows(named=True)}
    junk = err[str(shapes["junk"])]
    assert (junk["exit_code"], junk["error"]) == (3, "INPUT") and "\n" not in junk["message"]
    dmg = err[str(shapes["damaged"])]
    assert (dmg["exit_code"], dmg["error"]) == (5, "PARTIAL") and "truncated" in dmg["message"]
    b = {r["path"]: r for r in rows(out, "bundles").iter_rows(named=True)}
    assert b[str(shapes["junk"])]["outcome"] == "error" and b[str(shapes["damaged"])]["outcome"] == "partial"
    assert b[str(shapes["damaged"])]["events"] > 0  # what decompressed is analysed
    assert b[str(shapes["v0"])]["outcome"] == "ok" and b[str(shapes["v0"])]["schema_version"] == schema.SCHEMA_VERSION


def test_duckdb_and_pyarrow_dataset_read_it(fleet):
    import duckdb  # the dev extra installs it

    _, out, _ = fleet
    for table in ("events", "incidents", "findings", "errors", "bundles"):
        want = rows(out, table)
        con = duckdb.connect()
        q = f"SELECT * FROM read_parquet('{out}/{table}/**/*.parquet', hive_partitioning=true)"
        got = pl.from_arrow(con.sql(q).to_arrow_table())
        assert got.height == want.height, table
        assert "day" in got.columns and str(con.execute(f"DESCRIBE {q}").fetchall()[-1][1]) == "DATE"
        ds = pads.dataset(str(out / table), format="parquet", partitioning="hive")
        t = ds.to_table()
        assert t.num_rows == want.height and "day" in t.schema.names
    n = (
        duckdb.connect()
        .execute(
            f"SELECT server, count(*) FROM read_parquet('{out}/events/**/*.parquet', hive_partitioning=true) "
            "WHERE gate = 'G1-kv-space' GROUP BY server ORDER BY 2 DESC LIMIT 1"
        )
        .fetchall()
    )
    assert n and n[0][1] > 0


def test_rerun_skips_and_force_replaces_without_copies(fleet, tmp_path):
    shapes, out0, _ = fleet
    out = tmp_path / "out"
    shutil.copytree(out0, out)
    before = {t: rows(out, t) for t in schema.TABLES}
    files = sorted(p.relative_to(out) for p in out.rglob("*.parquet"))
    r = cli("fleet", "run", *[str(p) for p in shapes.values()], "--out", str(out), "--tz", "UTC")
    assert "0 bundle(s) analysed, 0 failed, 11 skipped (already in the dataset)" in r.stderr, r.stderr
    r = cli("fleet", "run", str(shapes["v0"]), str(shapes["dp"]), "--out", str(out), "--tz", "UTC", "--force")
    assert r.returncode == 0 and "2 bundle(s) analysed" in r.stderr, r.stderr
    assert sorted(p.relative_to(out) for p in out.rglob("*.parquet")) == files  # same names: replaced
    for t in schema.TABLES:
        assert rows(out, t).equals(before[t]), t


def test_a_folder_that_is_not_a_dataset_is_refused(tmp_path, fleet):
    shapes, _, _ = fleet
    (tmp_path / "mine.txt").write_text("keep")
    r = cli("fleet", "run", str(shapes["v0"]), "--out", str(tmp_path))
    assert r.returncode == 2 and "holds no fleet dataset" in r.stderr
    r = cli("fleet", "run", str(tmp_path / "nothing-*"), "--out", str(tmp_path / "o"))
    assert r.returncode == 3 and "no bundle matches" in r.stderr
    assert not (tmp_path / "o").exists()


def _copies(src: Path, root: Path, n: int) -> list[str]:
    """n bundles of distinct content (a V0 log with a line that differs)."""
    paths = []
    for i in range(n):
        d = root / f"srv-{i:02d}"
        d.mkdir(parents=True)
        text = (src / "vllm.log").read_text()
        (d / "vllm.log").write_text(text + f"INFO 12-31 23:59:{i:02d} api_server.py:1] copy {i}\n")
        paths.append(str(d))
    return paths


@pytest.mark.slow
def test_an_interrupted_run_resumes(fleet, tmp_path):
    shapes, _, _ = fleet
    paths = _copies(shapes["v0"], tmp_path / "b", 8)
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "preemptlog", "fleet", "run", *paths, "--out", str(out), "--tz", "UTC"],
        env=ENV,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and len(dataset.files(out, "bundles")) < 2 and proc.poll() is None:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the run and its workers, mid-way
    proc.wait()
    done = len(dataset.files(out, "bundles"))
    assert 2 <= done < 8, done
    r = cli("fleet", "run", *paths, "--out", str(out), "--tz", "UTC")
    assert r.returncode == 0, r.stderr
    assert f"{8 - done} bundle(s) analysed, 0 failed, {done} skipped" in r.stderr
    clean = tmp_path / "clean"
    assert cli("fleet", "run", *paths, "--out", str(clean), "--tz", "UTC", "-j", "2").returncode == 0
    for t in schema.TABLES:
        assert rows(out, t).equals(rows(clean, t)), t  # resumed == one clean run: nothing twice, nothing lost


@pytest.mark.slow
def test_a_bundle_that_kills_its_worker_becomes_an_errors_row(fleet, tmp_path):
    from preemptlog.fleet.pool import run

    from ..support.fleet_helpers import crash_on_marker

    shapes, _, _ = fleet
    paths = _copies(shapes["v0"], tmp_path / "b", 3)
    (Path(paths[1]) / "CRASH").write_text("")
    out = tmp_path / "out"
    stats = run(paths, str(out), jobs=2, options=AnalyzeOptions(tz="UTC"), work=crash_on_marker)
    got = {o.path: o for o in stats.outcomes}
    assert sorted(got) == sorted(paths)
    assert got[paths[1]].outcome == "error" and got[paths[1]].exit_code == 1
    assert "killed by signal 9 SIGKILL" in got[paths[1]].message
    assert got[paths[0]].outcome == got[paths[2]].outcome == "ok"
    err = rows(out, "errors")
    assert err.height == 1 and err.row(0, named=True)["path"] == paths[1]


def test_progress_bar_on_a_terminal_only(fleet, tmp_path):
    import pty

    shapes, _, _ = fleet
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "preemptlog",
            "fleet",
            "run",
            str(shapes["v0"]),
            str(shapes["dp"]),
            "--out",
            str(tmp_path / "o"),
        ],
        env={**ENV, "PREEMPTLOG_PROGRESS_AFTER": "0", "COLUMNS": "120"},
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=slave,
        stdin=subprocess.DEVNULL,
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=300)
    os.close(master)
    text = b"".join(chunks).decode("utf-8", "replace")
    assert "bundles (ok" in text and "/2" in text
    assert "2 bundle(s) analysed" in text


def test_expand_and_names(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b.tar.gz").write_bytes(b"")
    assert expand([str(tmp_path / "*"), str(tmp_path / "a")]) == [str(tmp_path / "a"), str(tmp_path / "b.tar.gz")]
    assert bundle_name("/x/srv-07.tar.gz") == "srv-07"
    assert bundle_name("/logs/gpu-node-12/vllm.log") == "gpu-node-12"
    assert bundle_name("/logs/gpu-node-12/logs/") == "gpu-node-12"
    assert bundle_name("/x/node3.log.gz") == "node3"


# ---------------------------------------------------------------- fleet report


def _report(out: Path, *args: str) -> dict:
    r = cli("fleet", "report", str(out), "-f", "json", *args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_report_answers_the_fleet_questions(fleet):
    _, out, _ = fleet
    doc = _report(out)
    srv = doc["servers"]
    counts = [s["preemptions"] for s in srv if s["preemptions"] is not None]
    assert counts == sorted(counts, reverse=True) and srv[0]["server"] == "rack-3/node1"
    inc = rows(out, "incidents")
    assert sum(counts) == inc.get_column("preemptions").sum()
    stock = next(s for s in srv if s["server"] == "srv-stock")
    assert stock["preemptions"] is None and stock["count_visible"] is False
    assert {x["model"] for x in doc["by"]} >= {"Qwen/Qwen2.5-7B-Instruct", "meta-llama/Llama-3.1-8B-Instruct"}
    assert all(x["causes"] for x in doc["by"])
    assert [d["day"] for d in doc["trend"]] == sorted(d["day"] for d in doc["trend"])
    assert sum(d["preemptions"] for d in doc["trend"]) == rows(out, "events").height
    fx = doc["fixes"]
    assert fx and fx[0]["events_addressed"] == max(f["events_addressed"] for f in fx)
    assert fx[0]["option"].startswith("--")
    nv = {x["server"]: x for x in doc["not_visible"]}
    assert "srv-stock" in nv and "/metrics" in nv["srv-stock"]["remedy"]
    assert {e["exit_code"] for e in doc["errors"]} == {3, 5}
    assert doc["totals"]["bundles"] == 11


def test_report_by_and_window(fleet):
    _, out, _ = fleet
    doc_v = _report(out, "--by", "version")
    assert doc_v["group_by"] == "version"  # the grouping is named beside its rows
    by_version = doc_v["by"]
    assert {x["vllm_version"] for x in by_version} >= {"0.6.3", "0.12.0"}
    by_cause = _report(out, "--by", "cause")["by"]
    assert by_cause[0]["preemptions"] == max(x["preemptions"] for x in by_cause) and by_cause[0]["servers"] >= 1
    one_day = _report(out, "--since", "2026-03-14", "--until", "2026-03-14")
    assert {d["day"] for d in one_day["trend"]} == {"2026-03-14"}
    assert {s["server"] for s in one_day["servers"]} == {"srv-scrapes", "srv-layout", "rack-3/node2"}
    r = cli("fleet", "report", str(out), "--since", "yesterday")
    assert r.returncode == 2 and "--since 'yesterday'" in r.stderr


def test_report_csv_table_and_html(fleet, tmp_path):
    _, out, _ = fleet
    r = cli("fleet", "report", str(out), "-f", "csv", "--by", "server")
    assert r.returncode == 0 and r.stdout.splitlines()[0].startswith("server,preemptions,servers")
    r = cli("fleet", "report", str(out), "-f", "table")
    assert r.returncode == 0 and "Servers ranked by preemptions" in r.stdout and "srv-stock" in r.stdout
    html = tmp_path / "fleet.html"
    r = cli("fleet", "report", str(out), "-f", "html", "-o", str(html))
    assert r.returncode == 0
    page = html.read_text()
    assert "Plotly.newPlot" in page and "Content-Security-Policy" in page and "fleet-plot" in page
    body = page.split("</head>", 1)[1]
    assert body.count("<script") == 1  # the figure's own call; plotly.js is inlined in the head
    assert "srv-stock" in page and "never print a preemption count" in page


def test_report_html_escapes_log_text():
    from preemptlog.fleet.html import _table

    cell = _table(pl.DataFrame({"server": ["<img src=x onerror=alert(1)>"], "n": [3]}))
    assert "<img" not in cell and "&lt;img src=x onerror=alert(1)&gt;" in cell and '<td class="num">3</td>' in cell


def test_report_on_something_else_is_a_clear_error(tmp_path):
    r = cli("fleet", "report", str(tmp_path))
    assert r.returncode == 3 and "not a fleet dataset" in r.stderr and "Traceback" not in r.stderr


def test_subcommand_help_names_placeholders_not_python_types():
    for args in (("fleet", "run"), ("fleet", "report"), ("export", "grafana"), ("export", "openmetrics")):
        r = cli(*args, "--help", env={"COLUMNS": "200"})
        assert r.returncode == 0 and "Examples:" in r.stdout, args
        assert not any(t in r.stdout for t in ("<list[", "<str>", "<int>", "<float>")), args
