"""A restart of a vLLM 0.15+ server opens its run at the API server's banner, before its args.

A server run (engines/vllm/runs.py) owns what its start states: the API server's ``non-default
args`` line, the engine's config line, the block counts. The API server logs its version banner,
then its non-default args, then the engine starts. The banner was read only in its 0.4-0.14 form
(``vLLM API server version X``); from 0.15 vLLM writes ``vLLM server version X, serving model M``
(logo off) or, by default, the start-up logo whose second row ends ``version X``
(``log_version_and_model``). A 0.15+ run therefore opened at the engine's ``Initializing a V1 LLM
engine`` line, after the args: a restarted server's args went to the run before it, and the
preemptions after the restart were told vLLM's default (max_num_seqs 256) where the log said 8.
Hand-written logs: each banner form (the logo monochrome and coloured, the plain line, the
0.14 line), both scanners, a restart without an engine line, and an engine line alone.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from preemptlog.analysis import AnalyzeOptions, analyze
from preemptlog.engines.vllm import runs
from preemptlog.render import OutputFormat, write

from .test_logo_version import busy, logo

OPTS = AnalyzeOptions(tz="UTC", year=2026)
API = "(APIServer pid=30490) INFO 12-02 {t} [api_utils.py:{line}] "


def banner(form: str, t: str) -> list[str]:
    if form in ("logo", "logo-colour"):
        return logo("0.32.0", t=t, colour=form == "logo-colour")
    if form == "plain":
        return [API.format(t=t, line=327) + "vLLM server version 0.32.0, serving model /models/m"]
    assert form == "0.14"
    return [API.format(t=t, line=1400) + "vLLM API server version 0.14.0"]


def start(form: str, hh: str, seqs: int, engine: bool = True) -> list[str]:
    lines = [
        *banner(form, f"{hh}:00:00"),
        API.format(t=f"{hh}:00:00", line=286) + f"non-default args: {{'model': '/models/m', 'max_num_seqs': {seqs}}}",
    ]
    if engine:
        lines.append(
            f"(EngineCore pid=30600) INFO 12-02 {hh}:00:20 [core.py:133] Initializing a V1 LLM engine (v0.32.0) "
            "with config: model='/models/m', enable_prefix_caching=True"
        )
    return lines


def _analyze(tmp_path: Path, lines: list[str]):
    p = tmp_path / "vllm.log"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    a = analyze([str(p)], OPTS)
    buf = io.BytesIO()
    write(a, OutputFormat.json, buf)
    return a, json.loads(buf.getvalue()), p


def _seqs(events: list[dict]) -> list[tuple[str, object, object]]:
    """(time, max_num_seqs, its source) of each event: the configuration in force at it."""
    return [(e["time"][11:19], e["cfg_max_num_seqs"], e["cfg_max_num_seqs_src"]) for e in events]


@pytest.mark.parametrize("scanner", ["compiled", "polars"])
@pytest.mark.parametrize("form", ["logo", "logo-colour", "plain", "0.14"])
def test_the_restarted_servers_args_are_its_own(tmp_path, monkeypatch, scanner, form):
    if scanner == "polars":
        monkeypatch.setenv("PREEMPTLOG_SCANNER", "polars")
    lines = start(form, "03", 16) + busy("03") + start(form, "04", 8) + busy("04")
    a, doc, p = _analyze(tmp_path, lines)
    second_args = next(i for i, ln in enumerate(lines, 1) if "'max_num_seqs': 8" in ln)
    first_args = next(i for i, ln in enumerate(lines, 1) if "'max_num_seqs': 16" in ln)
    got = _seqs(doc["events"])
    assert got == [
        *[(f"03:10:{k * 10 + 5:02d}", 16, f"{p}:{first_args}") for k in range(3)],
        *[(f"04:10:{k * 10 + 5:02d}", 8, f"{p}:{second_args}") for k in range(3)],
    ]
    table = runs.runs_table(a.records)
    # two runs, each opened at its banner (the line naming the version, before the args), none at an engine line
    plain = [re.sub(r"\x1b\[[0-9;]*m", "", ln) for ln in lines]
    versions = [i for i, ln in enumerate(plain, 1) if "version 0.32.0" in ln or "version 0.14.0" in ln]
    assert table.get_column("stream_run").to_list() == [1, 2]
    assert table.get_column("line").to_list() == versions


def test_a_restart_the_log_cut_before_the_engine_line_still_opens_a_run(tmp_path):
    """An API server's banner and args with no engine line yet (the log ends in its start-up) is a run of its own."""
    lines = start("logo", "03", 16) + busy("03") + start("logo", "04", 8, engine=False)
    a, _doc, _p = _analyze(tmp_path, lines)
    cfg = a.config.filter((a.config["key"] == "max_num_seqs") & (a.config["status"] == "seen")).sort("line")
    assert cfg.select("value", "run").rows() == [("16", 0), ("8", 1)]


def test_an_engine_line_alone_still_opens_the_run(tmp_path):
    """Offline ``LLM(...)`` use: no API server banner in the stream, the engine's line is the start."""
    eng = (
        "INFO 12-02 {t} [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: model='/models/m', "
        "enable_prefix_caching=True"
    )
    lines = [eng.format(t="03:00:00"), *busy("03"), eng.format(t="04:00:00"), *busy("04")]
    a, _doc, _p = _analyze(tmp_path, lines)
    table = runs.runs_table(a.records)
    assert table.get_column("line").to_list() == [1, 8]
