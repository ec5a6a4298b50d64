"""Bundles that are not one incident: server detection (servers.py), foreign year anchors
(timebase.py) and ``analyze --each`` (each.py). Hand-written logs in several header families."""

from __future__ import annotations

import json

import polars as pl
from typer.testing import CliRunner

from preemptlog import AnalyzeOptions, analyze
from preemptlog.cli import app
from preemptlog.errors import ExitCode
from preemptlog.events.servers import servers

from ..conftest import write_lines

runner = CliRunner()


def write(path, lines):
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_lines(path, lines)


WARN = (
    "Sequence group {rid} is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache "
    "space. total_num_cumulative_preemption={n}"
)


def v06_log(pid_note: str = "", n: int = 51) -> list[str]:
    return [
        "INFO 08-20 10:00:00 api_server.py:585] vLLM API server version 0.6.3",
        "INFO 08-20 10:00:05 gpu_executor.py:122] # GPU blocks: 2987, # CPU blocks: 4096",
        "WARNING 08-20 10:18:39 scheduler.py:1141] " + WARN.format(rid="cmpl-a-0", n=n),
    ]


def v010_log(pid: int = 121, ip: str | None = None) -> list[str]:
    proc = f"(APIServer pid={pid}" + (f", ip={ip}" if ip else "") + ")"
    return [
        f"{proc} INFO 09-03 04:36:09 [api_server.py:1805] vLLM API server version 0.10.1.1",
        f"{proc} WARNING 09-03 04:40:00 [scheduler.py:1775] " + WARN.format(rid="cmpl-b-0", n=1),
    ]


def run(*paths, **kw):
    return analyze([str(p) for p in paths], AnalyzeOptions(tz="UTC", rules=False, **kw))


def test_two_servers_are_warned(tmp_path):
    a = write_lines(tmp_path / "old.log", v06_log())
    b = write_lines(tmp_path / "new.log", v010_log())
    res = run(a, b)
    srv = servers(res.records)
    assert srv.get_column("version").to_list() == ["0.6.3", "0.10.1.1"]
    warn = [w for w in res.warnings if "vLLM servers" in w]
    assert len(warn) == 1
    assert "vLLM 0.6.3 started at" in warn[0] and "old.log:1" in warn[0] and "(APIServer pid=121)" in warn[0]
    assert "--each" in warn[0]


def test_restart_of_one_server_is_not_mixed(tmp_path):
    lines = v06_log() + [ln.replace("08-20 10:", "08-20 11:") for ln in v06_log(n=101)]
    res = run(write_lines(tmp_path / "vllm.log", lines))
    assert servers(res.records).height == 1
    assert not any("vLLM servers" in w for w in res.warnings)


def test_one_server_with_other_sources_is_not_mixed(tmp_path):
    log = write_lines(tmp_path / "vllm.log", v010_log())
    dmon = write_lines(
        tmp_path / "dmon.txt",
        ["#Date       Time        gpu    fb", "#YYYYMMDD   HH:MM:SS    Idx    MB", " 20250903   04:40:00      0  1000"],
    )
    res = run(log, dmon)
    assert not any("vLLM servers" in w for w in res.warnings)
    assert {t.year for t in res.events.get_column("time").to_list()} == {2025}  # the dmon date meets the log


def test_two_hosts_of_one_version_are_two_servers(tmp_path):
    a = write_lines(tmp_path / "a.log", v010_log(7, "10.0.0.1"))
    b = write_lines(tmp_path / "b.log", v010_log(7, "10.0.0.2"))
    res = run(a, b)
    assert sorted(servers(res.records).get_column("host").to_list()) == ["10.0.0.1", "10.0.0.2"]


def test_unrelated_dmon_does_not_give_the_year(tmp_path):
    log = write_lines(tmp_path / "vllm.log", v010_log())
    dmon = write_lines(
        tmp_path / "dmon.txt",
        ["#Date       Time        gpu    fb", "#YYYYMMDD   HH:MM:SS    Idx    MB", " 20200305   19:12:31      0  1000"],
    )
    res = run(log, dmon)
    years = {t.year for t in res.events.get_column("time").to_list()}
    assert 2020 not in years
    assert any("no other source of the bundle meets this log in time" in w and "dmon" in w for w in res.warnings)


def _ndjson(out: str) -> list[dict]:
    return [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]


def test_each_subfolders(tmp_path):
    write(tmp_path / "inc" / "a" / "vllm.log", v06_log())
    write(tmp_path / "inc" / "b" / "vllm.log", v010_log())
    r = runner.invoke(app, ["analyze", str(tmp_path / "inc"), "--each", "--tz", "UTC", "-f", "ndjson", "-q"])
    assert r.exit_code == ExitCode.OK, r.output
    rows = _ndjson(r.stdout)
    assert list(rows[0])[0] == "server"
    count = {}
    for row in rows:
        count[row["server"]] = count.get(row["server"], 0) + 1
    assert count == {"inc/a": 51, "inc/b": 1}


def test_each_input_and_json_document(tmp_path):
    a = write_lines(tmp_path / "old.log", v06_log())
    b = write_lines(tmp_path / "new.log", v010_log())
    r = runner.invoke(app, ["analyze", str(a), str(b), "--each", "--tz", "UTC", "-f", "json", "-q"])
    assert r.exit_code == ExitCode.OK, r.output
    doc = json.loads(r.stdout)
    assert [s["server"] for s in doc["servers"]] == [str(a), str(b)]
    assert [s["summary"]["reconciliation"]["total"] for s in doc["servers"]] == [51, 1]
    assert {e["server"] for e in doc["events"]} == {str(a), str(b)}
    # Without --each the same inputs are one (warned) incident.
    r = runner.invoke(app, ["analyze", str(a), str(b), "--tz", "UTC", "-f", "json", "-q"])
    doc = json.loads(r.stdout)
    assert any("vLLM servers" in w for w in doc["summary"]["warnings"])


def test_each_splits_one_folder_by_server(tmp_path):
    write(tmp_path / "bundle" / "old.log", v06_log())
    write(tmp_path / "bundle" / "new.log", v010_log())
    write(tmp_path / "bundle" / "dmon.txt", ["# gpu    fb", "# Idx    MB", "    0  1000"])
    r = runner.invoke(app, ["analyze", str(tmp_path / "bundle"), "--each", "--tz", "UTC", "-f", "csv", "-q"])
    assert r.exit_code == ExitCode.OK, r.output
    df = pl.read_csv(r.stdout.encode())
    assert df.columns[0] == "server"
    per = dict(df.group_by("server").len().iter_rows())
    assert sorted(per.values()) == [1, 51]
    assert all(k.endswith(("old.log", "new.log")) for k in per)


def test_each_table_names_every_unit(tmp_path):
    write(tmp_path / "inc" / "a" / "vllm.log", v06_log())
    write(tmp_path / "inc" / "b" / "vllm.log", ["INFO 05-01 10:00:00 [x.py:1] nothing here"])
    out = tmp_path / "t.txt"
    r = runner.invoke(app, ["analyze", str(tmp_path / "inc"), "--each", "--tz", "UTC", "-f", "table", "-o", str(out)])
    assert r.exit_code == ExitCode.OK, r.output
    text = out.read_text()
    assert "inc/a" in text and "inc/b" in text and "51" in text
    assert "== server inc/a" in r.stderr


def test_each_reads_standard_input_once(tmp_path):
    text = "\n".join(v06_log()) + "\n"
    r = runner.invoke(app, ["analyze", "-", "--each", "--tz", "UTC", "-f", "ndjson", "-q"], input=text)
    assert r.exit_code == ExitCode.OK, r.output
    rows = _ndjson(r.stdout)
    assert len(rows) == 51 and {row["server"] for row in rows} == {"<stdin>"}


def test_servers_are_named_by_their_engine(tmp_path):
    """SGLang prints no version: its servers are named SGLang, never 'vLLM sglang'."""
    for name in ("a", "b"):
        write_lines(
            tmp_path / f"{name}.log",
            [
                f"[2026-03-01 10:00:00] server_args=ServerArgs(model_path='{name}', tp_size=1)",
                "[2026-03-01 10:00:05] KV cache pool is full. Retract requests. #retracted_reqs: 2, "
                "#new_token_ratio: 0.0980 -> 0.3100",
            ],
        )
    write_lines(
        tmp_path / "v.log",
        [
            "INFO 03-01 10:00:00 api_server.py:1] vLLM API server version 0.6.3",
            "WARNING 03-01 10:00:05 scheduler.py:1057] Sequence group c1 is preempted by PreemptionMode.RECOMPUTE "
            "mode because there is not enough KV cache space. total_num_cumulative_preemption=1",
        ],
    )
    res = analyze([str(tmp_path)], AnalyzeOptions(tz="UTC", year=2026))
    warn = [w for w in res.warnings if "servers, not one incident" in w]
    assert warn, res.warnings
    assert warn[0].startswith("the input holds 3 SGLang and vLLM servers")
    assert "SGLang started at" in warn[0] and "vLLM 0.6.3 started at" in warn[0]
    assert "vLLM sglang" not in warn[0]
    assert servers(res.records).get_column("engine").to_list() == ["SGLang", "SGLang", "vLLM"]


def _stats_line(prefix: str, t: int, running: int, kv: float, pre: int) -> str:
    return (
        f"{prefix}INFO 05-01 10:00:{t:02d} [loggers.py:118] Engine 000: Avg prompt throughput: 10.0 tokens/s, "
        f"Avg generation throughput: 5.0 tokens/s, Running: {running} reqs, Waiting: 5 reqs, Preemptions: {pre}, "
        f"GPU KV cache usage: {kv}%, Prefix cache hit rate: 0.0%"
    )


def test_two_pods_in_one_kubectl_prefix_file_are_two_servers(tmp_path):
    """``kubectl logs -l app=vllm --prefix``: each line starts ``[pod/NAME/CONTAINER] ``; two pods in one
    file are two servers (as docker compose's ``svc | ``), and the hint says how to part them (--each parts
    a file by its lines' container: tests/render/test_each_containers.py)."""
    lines = []
    for pod in ("vllm-a", "vllm-b"):
        lines.append(f"[pod/{pod}/vllm] INFO 05-01 09:59:59 [api_server.py:1] vLLM API server version 0.10.0")
    for t in range(0, 60, 10):
        lines.append(_stats_line("[pod/vllm-a/vllm] ", t, 30, 99.0, 2 if t == 30 else 0))
        lines.append(_stats_line("[pod/vllm-b/vllm] ", t, 3, 20.0, 0))
    write_lines(tmp_path / "pods.log", lines)
    res = analyze([str(tmp_path / "pods.log")], AnalyzeOptions(tz="UTC", year=2026))
    srv = servers(res.records)
    assert srv.get_column("host").to_list() == ["vllm-a", "vllm-b"]
    warn = [w for w in res.warnings if "servers, not one incident" in w]
    assert warn and "on vllm-a" in warn[0] and "on vllm-b" in warn[0]
    assert "container's prefix" in warn[0] and "preemptlog analyze --each" in warn[0]
    assert res.summary()["events"] == 2


def test_a_restart_as_another_version_in_one_file_points_at_since_until(tmp_path):
    lines = [
        "INFO 05-01 09:00:00 [api_server.py:1] vLLM API server version 0.9.2",
        _stats_line("", 10, 3, 20.0, 0),
        "INFO 05-01 10:00:00 [api_server.py:1] vLLM API server version 0.10.0",
        _stats_line("", 20, 30, 99.0, 2),
    ]
    write_lines(tmp_path / "vllm.log", lines)
    res = analyze([str(tmp_path / "vllm.log")], AnalyzeOptions(tz="UTC", year=2026))
    warn = [w for w in res.warnings if "servers, not one incident" in w]
    assert warn and "a restart as another version (at line 3)" in warn[0] and "--since" in warn[0]
