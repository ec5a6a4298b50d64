"""--offset SOURCE=DURATION: what a SOURCE names (timebase.resolve_offsets, pipeline.clock_offsets).

A SOURCE is a source kind of the bundle (every kind --file-kind accepts, ``sglang-log`` too: an
SGLang log moves by its own kind, not by ``vllm-log``), or one file of the bundle by its display
name, a tail of it on ``/`` boundaries, its basename when that names one file, or its path. A
SOURCE that names nothing is a usage error (exit 2, one line); a basename of two files too; a kind
the bundle has no file of is a warning, and is never listed as applied.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from preemptlog.analysis import AnalyzeOptions, analyze
from preemptlog.errors import ExitCode, UsageError

SGLANG = """\
[2026-03-14 09:59:00] server_args=ServerArgs(model_path='m', tp_size=1, dp_size=1, schedule_conservativeness=1.0)
[2026-03-14 10:00:00] Decode batch. #running-req: 100, #token: 99000, token usage: 0.99, gen throughput (token/s): 2000.00, #queue-req: 5
[2026-03-14 10:00:05] KV cache pool is full. Retract requests. #retracted_reqs: 1, #new_token_ratio: 0.0980 -> 0.3000
[2026-03-14 10:00:12] KV cache pool is full. Retract requests. #retracted_reqs: 2, #new_token_ratio: 0.2900 -> 0.4100
[2026-03-14 10:00:40] Decode batch. #running-req: 94, #token: 90000, token usage: 0.90, gen throughput (token/s): 1900.00, #queue-req: 11
"""

VLLM = """\
(APIServer pid=1) INFO 03-14 09:59:50 [api_server.py:1] vLLM API server version 0.20.0
(EngineCore_DP0 pid=2) WARNING 03-14 10:00:05 [scheduler.py:900] Req-{p}1 PREEMPTED
(EngineCore_DP0 pid=2) WARNING 03-14 10:00:06 [scheduler.py:900] Req-{p}2 PREEMPTED
"""


@pytest.fixture(scope="module")
def sgl(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("off") / "b"
    d.mkdir()
    (d / "sglang.log").write_text(SGLANG)
    return d


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two vLLM logs of one basename in two folders."""
    d = tmp_path_factory.mktemp("off2") / "t"
    for node in ("node1", "node2"):
        (d / node).mkdir(parents=True)
        (d / node / "vllm.log").write_text(VLLM.format(p=node))
    return d


def _run(path: Path, offsets: dict[str, float]):
    return analyze([str(path)], AnalyzeOptions(tz="UTC", offsets=offsets))


def _times(a) -> list:
    return a.events.sort("time").get_column("time").to_list()


def _offsets_applied(a) -> list[tuple[str, str]]:
    return [(x.scope, x.value) for x in a.assumptions if x.topic == "offset"]


@pytest.fixture(scope="module")
def base(sgl: Path) -> list:
    return _times(_run(sgl, {}))


@pytest.mark.parametrize("name", ["sglang-log", "b/sglang.log", "sglang.log", "./b/sglang.log", "ABS"])
def test_an_sglang_log_moves_by_its_kind_its_name_or_its_path(sgl, base, name):
    key = str(sgl / "sglang.log") if name == "ABS" else name
    a = _run(sgl, {key: -30.0})
    assert len(base) == 3
    assert _times(a) == [t - timedelta(seconds=30) for t in base], name
    assert len(_offsets_applied(a)) == 1 and _offsets_applied(a)[0][1] == "-30s"


def test_the_vllm_kind_does_not_move_an_sglang_log_and_is_not_listed_as_applied(sgl, base):
    a = _run(sgl, {"vllm-log": -30.0})
    assert _times(a) == base
    assert _offsets_applied(a) == []
    assert any("--offset vllm-log=-30s not applied" in w and "sglang-log" in w for w in a.warnings), a.warnings


def test_a_file_offset_beats_its_kind(sgl, base):
    a = _run(sgl, {"sglang-log": 100.0, "sglang.log": -30.0})
    assert _times(a) == [t - timedelta(seconds=30) for t in base]


@pytest.mark.parametrize("name", ["nosuch", "ang.log", "other/sglang.log", "b/sglang"])
def test_a_source_that_names_nothing_is_a_usage_error(sgl, name):
    with pytest.raises(UsageError) as err:
        _run(sgl, {name: 5.0})
    text = str(err.value) + " " + str(getattr(err.value, "hint", ""))
    assert repr(name) in text and "sglang-log" in text and "b/sglang.log" in text, text


def test_a_basename_of_two_files_is_an_error_naming_both(two):
    with pytest.raises(UsageError) as err:
        _run(two, {"vllm.log": 5.0})
    assert "t/node1/vllm.log" in str(err.value) and "t/node2/vllm.log" in str(err.value)


def test_a_path_tail_names_one_of_two_files(two):
    before = _run(two, {})
    after = _run(two, {"node2/vllm.log": 5.0})

    def by_source(a):
        return {(s, t) for s, t in a.events.select("source", "time").iter_rows()}

    moved = {(s, t + timedelta(seconds=5) if s.endswith("node2/vllm.log") else t) for s, t in by_source(before)}
    assert by_source(after) == moved
    assert _offsets_applied(after) == [("t/node2/vllm.log", "+5s")]


def test_resolve_offsets_by_file_kind_and_archive_member():
    from preemptlog.clock.timebase import OffsetFile, resolve_offsets

    files = [
        OffsetFile("x/a.tar.gz!logs/vllm.log", "vllm-log"),
        OffsetFile("x/dmon.txt", "dmon"),
        OffsetFile("x/s.log", "sglang-log"),
    ]
    kinds = ["vllm-log", "sglang-log", "dmon", "prometheus"]
    r = resolve_offsets({"vllm.log": 1.0, "dmon": -2.0, "sglang-log": 3.0, "prometheus": 9.0}, files, kinds)
    assert r.by_file == {"x/a.tar.gz!logs/vllm.log": 1.0, "x/dmon.txt": -2.0, "x/s.log": 3.0}
    assert r.by_kind == {"dmon": -2.0, "sglang-log": 3.0}
    assert [a.scope for a in r.assumptions] == ["x/a.tar.gz!logs/vllm.log", "dmon", "sglang-log"]
    assert len(r.warnings) == 1 and "prometheus" in r.warnings[0]
    with pytest.raises(UsageError):
        resolve_offsets({"s.log": 1.0, "x/s.log": 2.0}, files, kinds)  # one file, two offsets


def test_the_cli_says_it_on_one_line_exit_2(sgl):
    env = dict(os.environ, NO_COLOR="1", TZ="UTC")
    p = subprocess.run(
        [sys.executable, "-m", "preemptlog", "analyze", str(sgl), "--tz", "UTC", "--offset", "nosuch=5s"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert p.returncode == ExitCode.USAGE, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("preemptlog: error: --offset nosuch=+5s"), p.stderr
    assert "sglang-log" in lines[0] and "b/sglang.log" in lines[0]
    assert p.stdout == ""


def test_an_offset_is_spelled_as_typed_in_its_errors():
    from preemptlog.clock.timebase import offset_words

    assert [offset_words(x) for x in (-7200, 5400, 90, 1.5, -0.25, 60)] == [
        "-2h",
        "+90m",
        "+90s",
        "+1.5s",
        "-0.25s",
        "+1m",
    ]
