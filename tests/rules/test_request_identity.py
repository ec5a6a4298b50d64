"""A request is (server, id) in every count of its preemptions (model.requests.with_request_key): the
summary's repeated requests, the verdicts' ``repeated-preemption`` factor and the mechanisms'
``mech_request_preemptions``. Two servers that reuse an id (``cmpl-a1`` preempted once on each) have no
request preempted twice; one server that preempts it twice has."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import polars as pl

from preemptlog import AnalyzeOptions, analyze
from preemptlog.model.requests import with_request_key
from preemptlog.rules.verdicts import event_frame

from ..conftest import FIXTURES

_spec = importlib.util.spec_from_file_location("hw_build_identity", FIXTURES / "handwritten" / "build.py")
assert _spec is not None and _spec.loader is not None
B = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(B)


def _v0_log(path: Path, warnings: list[tuple[str, str, int]], started: str = "10:00:00") -> None:
    rows = [B.log(started, "INFO", "api_server.py:585", "vLLM API server version 0.6.3")]
    rows += [
        B.log(t, "WARNING", "scheduler.py:1242", B.V0_WARN.format(rid=rid, mode="RECOMPUTE", n=n))
        for t, rid, n in warnings
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(B.render("v04", r) for r in rows) + "\n")


def _run(folder: Path):
    return analyze([str(folder)], AnalyzeOptions(tz="UTC", year=B.YEAR))


def test_an_id_two_servers_reuse_is_two_requests(tmp_path):
    # Two servers started apart (their logs differ: a byte-for-byte copy of one would be one file found
    # twice, read once)
    for name, started in (("a", "10:00:00"), ("b", "10:00:02")):
        _v0_log(tmp_path / "rp" / f"{name}.log", [("10:00:05", "cmpl-a1", 1)], started)
    a = _run(tmp_path / "rp")
    assert a.events.height == 2
    assert a.summary()["requests_preempted_more_than_once"] == []
    frame = event_frame(a)
    assert frame.get_column("_request_preemptions").to_list() == [1, 1]
    assert not any("preempted 2 times" in str(f) for f in a.verdicts.get_column("contributing_factors").to_list())


def test_one_server_preempting_an_id_twice_counts_two(tmp_path):
    _v0_log(tmp_path / "one" / "a.log", [("10:00:05", "cmpl-a1", 1), ("10:00:09", "cmpl-a1", 2)])
    a = _run(tmp_path / "one")
    assert [r["count"] for r in a.summary()["requests_preempted_more_than_once"]] == [2]
    assert event_frame(a).get_column("_request_preemptions").to_list() == [2, 2]
    assert any("preempted 2 times" in str(f) for f in a.verdicts.get_column("contributing_factors").to_list())


def test_the_key_tells_streams_sources_and_processes_apart():
    ev = pl.DataFrame(
        {
            "event_id": ["e1", "e2", "e3", "e4", "e5"],
            "request_id": ["r", "r", "r", "r", None],
            "kind": ["logged", "logged", "record", "record", "logged"],
            "source": ["a.log", "b.log", "x.jsonl", "y.jsonl", "a.log"],
            "stream": pl.Series([0, 1, None, None, 0], dtype=pl.Int32),
            "seq": pl.Series([1, 1, None, None, 2], dtype=pl.UInt32),
        }
    )
    records = pl.DataFrame(
        {"stream": pl.Series([0, 1], dtype=pl.Int32), "seq": pl.Series([1, 1], dtype=pl.UInt32), "proc": ["p1", "p1"]}
    )
    keys = with_request_key(ev, records).get_column("_rkey").to_list()
    assert keys[4] is None
    assert len(set(keys[:4])) == 4  # two streams, two record files: four requests
