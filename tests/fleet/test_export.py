"""preemptlog export grafana / openmetrics: from a bundle and from a fleet dataset; the Grafana
post against a real HTTP server on loopback; the OpenMetrics text loaded by promtool."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
from datetime import datetime
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import ClassVar

import polars as pl
import pytest

from ..support.fleet_shapes import make_fleet
from .test_fleet import cli, rows


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    root = tmp_path_factory.mktemp("export")
    shapes = make_fleet(root / "bundles", damaged=False)
    out = root / "out"
    r = cli("fleet", "run", *[str(p) for p in shapes.values()], "--out", str(out), "--tz", "UTC", "-j", "2")
    assert r.returncode == 0, r.stderr
    return shapes, out


def _ms(t: datetime) -> int:
    return int(t.timestamp() * 1000)


def test_grafana_from_a_bundle(fleet):
    shapes, out = fleet
    r = cli("export", "grafana", str(shapes["dp"]), "--tz", "UTC")
    assert r.returncode == 0, r.stderr
    items = json.loads(r.stdout)
    inc = rows(out, "incidents").filter(pl.col("server") == "srv-dp").sort("engine")
    assert len(items) == inc.height >= 2  # one region per engine
    for a, row in zip(sorted(items, key=lambda a: a["tags"][2]), inc.iter_rows(named=True)):
        assert a["time"] == _ms(row["first_event"]) and a["timeEnd"] == _ms(row["last_event"])
        assert a["time"] <= a["timeEnd"] and a["time"] > 10**12  # epoch milliseconds
        assert a["dashboardUID"] == "vllm-kv-cache" and a["panelId"] == 10
        assert "preemptlog" in a["tags"] and "server:srv-dp" in a["tags"] and f"engine:{row['engine']}" in a["tags"]
        assert f"cause:{row['top_cause']}" in a["tags"] and f"mechanism:{row['top_mechanism']}" in a["tags"]
        assert row["headline"] in a["text"] and a["text"].startswith(f"srv-dp: engine {row['engine']}:")


def test_grafana_from_a_dataset_and_options(fleet):
    _, out = fleet
    r = cli("export", "grafana", str(out), "--dashboard-uid", "", "-q")
    items = json.loads(r.stdout)
    inc = rows(out, "incidents")
    assert len(items) == inc.height
    assert all("dashboardUID" not in a and "panelId" not in a for a in items)  # org-wide
    stock = next(a for a in items if "server:srv-stock" in a["tags"])
    assert "count:not-visible" in stock["tags"] and "not visible" in stock["text"]
    r = cli("export", "grafana", str(out), "--panel-id", "3", "--dashboard-uid", "abc")
    assert {(a["dashboardUID"], a["panelId"]) for a in json.loads(r.stdout)} == {("abc", 3)}


class _Grafana(BaseHTTPRequestHandler):
    got: ClassVar[list] = []
    status = 200

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).got.append(
            (self.path, self.headers.get("Authorization"), self.headers.get("Content-Type"), json.loads(body))
        )
        self.send_response(type(self).status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        ok = type(self).status == 200
        self.wfile.write(
            json.dumps(
                {"id": len(type(self).got), "message": "Annotation added"} if ok else {"message": "invalid API key"}
            ).encode()
        )

    def log_message(self, *args):
        pass


@pytest.fixture
def grafana_server():
    _Grafana.got = []
    _Grafana.status = 200
    srv = HTTPServer(("127.0.0.1", 0), _Grafana)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", _Grafana
    srv.shutdown()
    srv.server_close()


def test_grafana_post_to_a_real_http_server(fleet, grafana_server):
    shapes, _ = fleet
    url, handler = grafana_server
    r = cli("export", "grafana", str(shapes["v0"]), "--tz", "UTC", "--url", url, env={"GRAFANA_TOKEN": "glsa_test"})
    assert r.returncode == 0, r.stderr
    assert r.stdout == "" and "posted 1 annotation(s)" in r.stderr and "(ids 1)" in r.stderr
    (path, auth, ctype, body) = handler.got[0]
    assert path == "/api/annotations" and auth == "Bearer glsa_test" and ctype == "application/json"
    assert body["dashboardUID"] == "vllm-kv-cache" and body["text"].startswith("srv-v0: ")
    handler.status = 401
    r = cli("export", "grafana", str(shapes["v0"]), "--url", url, env={"GRAFANA_TOKEN": "bad"})
    assert r.returncode == 2 and "Grafana answered 401" in r.stderr and "invalid API key" in r.stderr
    r = cli("export", "grafana", str(shapes["v0"]), "--url", url, env={"GRAFANA_TOKEN": ""})
    assert r.returncode == 2 and "$GRAFANA_TOKEN" in r.stderr


def test_export_of_a_bundle_that_fails_keeps_its_exit_code(tmp_path):
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "a.txt").write_text("nothing\n")
    r = cli("export", "openmetrics", str(tmp_path / "junk"))
    assert r.returncode == 3 and "nothing recognisable" in r.stderr and "Traceback" not in r.stderr


SAMPLE = re.compile(r"^(preemptlog_[a-z_]+)\{([^}]*)\} (\d+) (\d+(?:\.\d+)?)$")


def _parse(text: str) -> dict[tuple[str, str], list[tuple[float, int]]]:
    assert text.endswith("# EOF\n") and text.count("# EOF") == 1
    series: dict[tuple[str, str], list[tuple[float, int]]] = {}
    families: list[str] = []
    for line in text.splitlines()[:-1]:
        if line.startswith("# TYPE"):
            families.append(line.split()[2])
            continue
        if line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, line
        series.setdefault((m[1], m[2]), []).append((float(m[4]), int(m[3])))
    assert len(families) == len(set(families))  # each family once (contiguous)
    return series


def test_openmetrics_text(fleet):
    shapes, out = fleet
    r = cli("export", "openmetrics", str(out), "--label", "job=vllm")
    assert r.returncode == 0, r.stderr
    series = _parse(r.stdout)
    ev = rows(out, "events")
    totals = {}
    for (name, labels), points in series.items():
        ts = [t for t, _ in points]
        assert ts == sorted(ts) and len(set(ts)) == len(ts)  # time order, one sample per time
        assert all(1e9 < t < 1e10 for t in ts)  # Unix seconds, not ms
        assert 'job="vllm"' in labels and 'instance="' in labels and 'engine="' in labels
        if name.endswith("_total"):
            vals = [v for _, v in points]
            assert vals == sorted(vals) and vals[0] == 0  # a counter from 0
            totals[(name, labels)] = vals[-1]
    n = sum(v for (name, _), v in totals.items() if name == "preemptlog_preemptions_total")
    assert n == ev.filter(pl.col("time").is_not_null()).height
    dp = {lab for (name, lab) in totals if name == "preemptlog_preemptions_total" and 'instance="srv-dp"' in lab}
    assert any('engine="1"' in lab for lab in dp) and any('engine="0"' in lab for lab in dp)
    assert any('cause="G1-kv-space' in lab and 'mechanism="' in lab for (_, lab) in totals)
    vis = {lab: pts for (name, lab), pts in series.items() if name == "preemptlog_count_visible"}
    assert [v for _, v in vis[next(lab for lab in vis if 'instance="srv-stock"' in lab)]] == [0, 0]
    r = cli("export", "openmetrics", str(out), "--label", "bad-name=x")
    assert r.returncode == 2


def _promtool() -> str | None:
    p = shutil.which("promtool")
    if p is None and os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail("promtool is not installed in CI (.ci/run installs Debian's prometheus package)")
    return p


def test_promtool_loads_the_openmetrics_of_a_bundle_and_of_the_dataset(fleet, tmp_path):
    promtool = _promtool()
    if promtool is None:
        pytest.skip("promtool not installed (Debian package prometheus)")
    shapes, out = fleet
    for name, source in (("bundle", shapes["scrapes"]), ("dataset", out)):
        om = tmp_path / f"{name}.om"
        assert cli("export", "openmetrics", str(source), "--tz", "UTC", "-o", str(om)).returncode == 0
        data = tmp_path / f"tsdb-{name}"
        r = subprocess.run(
            [promtool, "tsdb", "create-blocks-from", "openmetrics", str(om), str(data)], capture_output=True, text=True
        )
        assert r.returncode == 0, r.stdout + r.stderr
        want = sum(len(p) for p in _parse(om.read_text()).values())
        listed = subprocess.run(
            [promtool, "tsdb", "list", str(data)], capture_output=True, text=True, check=True
        ).stdout
        samples = sum(int(line.split()[4]) for line in listed.splitlines()[1:] if line.strip())
        assert samples == want, listed
    (tmp_path / "tsdb-bundle" / "wal").mkdir(exist_ok=True)  # dump opens the database as Prometheus would
    dump = subprocess.run(
        [promtool, "tsdb", "dump", str(tmp_path / "tsdb-bundle")], capture_output=True, text=True, check=True
    ).stdout
    assert 'instance="srv-scrapes"' in dump
    # the counter's last sample: the bundle's 25 preemptions (the /metrics counter) at the bin's end, in ms
    assert re.search(r'__name__="preemptlog_preemptions_total".*\} 25 1773482580000$', dump, re.M), dump[:2000]


def test_grafana_says_which_incidents_it_cannot_place(tmp_path):
    # A bare V0 warning (a log pasted without its headers): 101 preemptions and no time anywhere.
    # Before, "0 annotation(s)" and nothing about the incident left out.
    (tmp_path / "paste.log").write_text(
        "Sequence group 221 is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache "
        "space. This can affect the end-to-end performance. total_num_cumulative_preemption=101\n"
    )
    r = cli("export", "grafana", str(tmp_path / "paste.log"))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == []
    assert r.stderr.strip() == (
        "0 annotation(s); 1 incident row(s) left out (paste): no time to place them at (neither their events "
        "nor their log lines carry one)"
    )
