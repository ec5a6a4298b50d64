"""The vLLM version read from its start-up logo.

vLLM's API server names its version once, at start-up (``log_version_and_model``:
vllm/entrypoints/serve/utils/api_utils.py in 0.32, vllm/entrypoints/common/startup.py in 0.34):
as the plain line ``vLLM server version X, serving model M`` only when the logo is turned off
(``VLLM_DISABLE_LOG_LOGO``) or the logger has no formatter, and by default as a logo whose second
row ends ``version X`` (ANSI-coloured when the formatter is), each row behind the log header. A log
cut before the engine's ``Initializing a V1 LLM engine (vX)`` line (or a log of the API server
alone) named its version only there, and was read as "the version is not in the bundle": vLLM's
defaults for an unknown version (gpu_memory_utilization 0.9 instead of 0.34's 1.0). Hand-written
logs: the monochrome and coloured logo, both scanners, a start with the logo and the engine line (one
server), a restart (two logos), and lines that only look like it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from preemptlog.analysis import AnalyzeOptions, analyze
from preemptlog.events import servers

OPTS = AnalyzeOptions(tz="UTC", year=2026)
E = "\x1b"
HDR = "(APIServer pid=30490) INFO 12-02 {t} [startup.py:38] "


def logo(version: str, t: str = "03:08:14", colour: bool = False) -> list[str]:
    """The four logo rows as vLLM's formatter writes them (one header per row, the empty first row)."""
    if colour:
        w, o, b, r = f"{E}[1m", f"{E}[93m", f"{E}[94m", f"{E}[0m"
    else:
        w = o = b = r = ""
    rows = [
        "",
        f"       {w}█     █     █▄   ▄█{r}",
        f" {o}▄▄{r} {b}▄█{r} {w}█     █     █ ▀▄▀ █{r}  version {w}{version}{r}",
        f"  {o}█{r}{b}▄█▀{r} {w}█     █     █     █{r}  model   {w}/models/m{r}",
        f"   {b}▀▀{r}  {w}▀▀▀▀▀ ▀▀▀▀▀ ▀     ▀{r}",
    ]
    return [HDR.format(t=t) + row for row in rows]


def busy(hh: str = "03") -> list[str]:
    out = []
    for k in range(3):
        out.append(
            f"(APIServer pid=30490) INFO 12-02 {hh}:10:{k * 10:02d} [loggers.py:208] Engine 000: Avg prompt throughput: "
            "1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, Running: 30 reqs, Waiting: 12 reqs, GPU KV cache "
            "usage: 99.0%, Prefix cache hit rate: 0.0%"
        )
        out.append(
            f"(EngineCore pid=30600) DEBUG 12-02 {hh}:10:{k * 10 + 5:02d} [gpu_model_runner.py:1] Request r{hh}{k} "
            "status: RequestStatus.PREEMPTED"
        )
    return out


def _run(tmp_path: Path, lines: list[str]):
    p = tmp_path / "vllm.log"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return analyze([str(p)], OPTS), str(p)


@pytest.mark.parametrize("scanner", ["compiled", "polars"])
@pytest.mark.parametrize("colour", [False, True])
def test_the_logo_names_the_version(tmp_path, monkeypatch, scanner, colour):
    if scanner == "polars":
        monkeypatch.setenv("PREEMPTLOG_SCANNER", "polars")
    a, path = _run(tmp_path, logo("0.34.0", colour=colour) + busy())
    cfg = a.summary()["config"]
    assert cfg["vllm_version"] == {"value": "0.34.0", "status": "seen", "from": f"{path}:3", "note": None}
    # its defaults, not an unknown version's
    assert cfg["gpu_memory_utilization"]["value"] == "1.0"
    assert cfg["block_size"]["value"] == "64"
    assert "vllm_version_floor" not in cfg


def test_the_logo_and_the_engine_line_are_one_start(tmp_path):
    engine = (
        "(EngineCore pid=30600) INFO 12-02 03:08:35 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: "
        "model='/models/m', enable_prefix_caching=True"
    )
    a, path = _run(tmp_path, logo("0.32.0") + [engine] + busy())
    st = servers.starts(a.records)
    assert st.height == 1 and st.row(0, named=True)["line"] == 3 and st.row(0, named=True)["version"] == "0.32.0"
    assert servers.mixed_warning(a.records) is None


def test_a_restart_is_a_second_start_of_one_server(tmp_path):
    a, _ = _run(tmp_path, logo("0.34.0") + busy("03") + logo("0.34.0", t="04:00:00") + busy("04"))
    st = servers.starts(a.records)
    assert st.get_column("line").to_list() == [3, 14]
    assert servers.servers(a.records).height == 1


@pytest.mark.parametrize(
    "line",
    [
        "(APIServer pid=1) INFO 12-02 03:08:14 [x.py:1] pip  version 23.1 is installed",
        "(APIServer pid=1) INFO 12-02 03:08:14 [x.py:1] model   /models/m  version notes follow",
    ],
)
def test_a_line_that_only_looks_like_it_names_no_version(tmp_path, line):
    a, _ = _run(tmp_path, [line, *busy()])
    assert "vllm_version" not in a.summary()["config"]
