"""One file holding two servers, each line behind its container's prefix, is two servers.

docker compose prints ``svc  | `` before every line of a service, kubectl logs --prefix
``[pod/NAME/CONTAINER] `` (the sources read it as the line's container: vllm_log.COMPOSE_RE). --each
split a bundle by file only, so such a file stayed one unit whatever it held. Now a log stream whose
lines come from two or more containers is one part per container (render/each.py container_parts),
named ``FILE [CONTAINER]`` and analysed as if its lines were a file of their own, at the file's own line
numbers (pipeline/bundle.py keep_containers). Without --each the file is two servers already: the
summary lists one incident per container, and the events of each container are those of its own file.

Hand-written logs (tests/support/two_servers.py), in several shapes: docker compose, kubectl --prefix,
docker compose with its terminal colours, and one compose file of a vLLM and an SGLang container.
Every result is compared with the same lines written as separate files.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from preemptlog.analysis import AnalyzeOptions, analyze
from preemptlog.events.servers import servers
from preemptlog.inputs.workspace import Workspace
from preemptlog.render.each import run_each

from ..support.two_servers import SGLANG, VLLM_V0, VLLM_V1, interleaved, write_lines

OPTS = AnalyzeOptions(tz="UTC", year=2026)

# shape -> {container name: (its prefix, its lines)}
SHAPES = {
    "compose": {"vllm-a": ("vllm-a  | ", VLLM_V1), "vllm-b": ("vllm-b  | ", VLLM_V0)},
    "kubectl": {
        "vllm-a-5f7c9": ("[pod/vllm-a-5f7c9/vllm] ", VLLM_V1),
        "vllm-b-6d8e1": ("[pod/vllm-b-6d8e1/vllm] ", VLLM_V0),
    },
    "compose-colours": {
        "vllm-a": ("\x1b[36mvllm-a  |\x1b[0m ", VLLM_V1),
        "vllm-b": ("\x1b[33mvllm-b  |\x1b[0m ", VLLM_V0),
    },
    "compose-two-engines": {"vllm-1": ("vllm-1    | ", VLLM_V1), "sglang-1": ("sglang-1  | ", SGLANG)},
}
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _bundle(tmp_path: Path, shape: str) -> tuple[Path, dict[str, Path]]:
    """The one file of both containers, and each container's lines as a file of its own."""
    parts = SHAPES[shape]
    one = write_lines(tmp_path / "one" / "server.log", interleaved({p: lines for p, lines in parts.values()}))
    sep = {c: write_lines(tmp_path / "sep" / f"{c}.log", [p + x for x in lines]) for c, (p, lines) in parts.items()}
    return one, sep


def _container_of(path: Path, line: int, shape: str) -> str:
    text = ANSI.sub("", path.read_text().splitlines()[line - 1])
    return next(c for c, (p, _) in SHAPES[shape].items() if text.startswith(ANSI.sub("", p)))


EVENT_KEYS = ["time", "kind", "request_id", "engine", "engine_kind", "interval_start", "interval_end", "cumulative"]


def _events(a) -> list[tuple]:
    return sorted(tuple(str(x) for x in r) for r in a.events.select(EVENT_KEYS).iter_rows())


def _verdicts(a) -> list[tuple]:
    v = a.verdicts.join(a.events.select("event_id", *EVENT_KEYS), on="event_id")
    return sorted(tuple(str(x) for x in r) for r in v.select(*EVENT_KEYS, "gate", "sub_kind", "rule").iter_rows())


def _norm(obj) -> str:
    """``obj`` as JSON with every ``file:line`` citation one word (the unit cites the shared file's lines)."""
    return re.sub(r"[^\s\"(),]+\.log:\d+", "<line>", json.dumps(obj, sort_keys=True, default=str))


def _fixes(a) -> set[tuple]:
    return {(x["id"], str(x.get("current")), str(x.get("suggested"))) for x in a.fixes["changes"]}


def _config(a) -> dict[str, tuple]:
    cfg = a.config.filter(pl.col("status") != "default")
    return {k: v for k, v in cfg.group_by("key", maintain_order=True).agg(pl.col("value").last()).iter_rows()}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_each_gives_every_container_of_a_file_its_own_analysis(tmp_path, shape):
    one, sep = _bundle(tmp_path, shape)
    with Workspace() as ws:
        results = run_each([str(one)], OPTS, ws)
    names = [name for name, _ in results]
    assert sorted(names) == sorted(f"{one} [{c}]" for c in SHAPES[shape])
    for name, a in results:
        c = name.rsplit("[", 1)[1].rstrip("]")
        alone = analyze([str(sep[c])], OPTS)
        assert a.events.height and _events(a) == _events(alone)
        assert _verdicts(a) == _verdicts(alone)
        assert _norm(a.summary()["reconciliation"]) == _norm(alone.summary()["reconciliation"])
        assert a.requests.height == alone.requests.height
        assert _fixes(a) == _fixes(alone)
        assert _config(a) == _config(alone)
        assert not a.summary().get("incidents")  # one server: one incident
        # every figure is cited at the file's own lines, each a line of the unit's container
        assert set(a.events.get_column("source")) == {str(one)}
        for line in a.events.get_column("line").to_list() + a.config.get_column("line").drop_nulls().to_list():
            assert _container_of(one, line, shape) == c


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_without_each_the_file_is_two_servers_counted_as_their_own_files(tmp_path, shape):
    one, sep = _bundle(tmp_path, shape)
    a = analyze([str(one)], OPTS)
    srv = servers(a.records)
    assert sorted(srv.get_column("host").to_list()) == sorted(SHAPES[shape])
    assert sorted(a.summary()["incidents"]) == sorted(f"{one} [{c}]" for c in SHAPES[shape])
    assert a.summary()["headline"].startswith("Not one incident")
    # the events of each container (by the line they cite) are the events of its own file
    ev = a.events.with_columns(
        _c=pl.col("line").map_elements(lambda n: _container_of(one, n, shape), return_dtype=pl.String)
    )
    for c, path in sep.items():
        alone = analyze([str(path)], OPTS)
        mine = ev.filter(pl.col("_c") == c)
        assert mine.height == alone.events.height > 0
        assert _events(_Frame(mine)) == _events(alone)


class _Frame:
    """An object with ``events`` (to read a part of an analysis's events like an analysis's)."""

    def __init__(self, events: pl.DataFrame):
        self.events = events


def test_each_on_the_command_line_names_each_container(tmp_path):
    one, _ = _bundle(tmp_path, "kubectl")
    r = subprocess.run(
        [sys.executable, "-m", "preemptlog", "analyze", str(one), "--each", "--tz", "UTC", "--year", "2026"]
        + ["-f", "ndjson"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    rows = [json.loads(x) for x in r.stdout.splitlines()]
    by = {}
    for row in rows:
        by[row["server"]] = by.get(row["server"], 0) + 1
    assert by == {f"{one} [vllm-a-5f7c9]": 9, f"{one} [vllm-b-6d8e1]": 5}  # 6 + 3 counted; 5 warned
    # the unit names print as they are (a container in brackets is not console markup)
    assert f"== server {one} [vllm-a-5f7c9]" in r.stderr and f"== server {one} [vllm-b-6d8e1]" in r.stderr


def test_explain_reads_the_configuration_of_the_events_own_container(tmp_path):
    """explain of an event in a file of two containers reads its own container's analysis: its configuration
    evidence cites that container's lines (never the other server's, as the whole file would)."""
    one, _ = _bundle(tmp_path, "compose")
    a = analyze([str(one)], OPTS)
    ev = a.events.filter(pl.col("kind") == "logged").row(0, named=True)  # a V0 warning: vllm-b's
    assert _container_of(one, ev["line"], "compose") == "vllm-b"
    r = subprocess.run(
        [sys.executable, "-m", "preemptlog", "explain", ev["event_id"], str(one), "--tz", "UTC", "--year", "2026"]
        + ["-f", "json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    cited = [e["src"] for e in doc["evidence"] if e["name"].startswith("cfg_") and e.get("src")]
    assert cited
    for src in cited:
        assert _container_of(one, int(src.rsplit(":", 1)[1]), "compose") == "vllm-b", src
    engine = next(e["value"] for e in doc["evidence"] if e["name"] == "code_engine")
    assert "V0 0.8.5" in engine


def test_a_container_copy_keeps_every_line_number(tmp_path):
    """The lines of the other containers are read as empty lines: the file's line count and numbers stay."""
    from preemptlog.inputs.files import Bundle
    from preemptlog.pipeline.bundle import collect, keep_containers

    one, _ = _bundle(tmp_path, "compose-colours")
    with Workspace() as ws:
        bundle: Bundle = collect([str(one)], ws)
        keep_containers(bundle, ws, {str(one): ("vllm-a",)})
        f = bundle.files[0]
        assert f.display == str(one) and f.path != one
        kept = f.path.read_text().splitlines()
    orig = one.read_text().splitlines()
    assert len(kept) == len(orig)
    for k, o in zip(kept, orig, strict=True):
        assert k == (o if ANSI.sub("", o).startswith("vllm-a") else "")
