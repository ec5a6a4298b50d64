"""A vLLM log as the platform stored it reads like the log itself.

On-call engineers have what their platform kept: containerd's / CRI-O's pod log file
(``/var/log/pods/.../0.log``: ``<RFC 3339 time> <stdout|stderr> <P|F> <text>``, lines over 16 KiB
cut into partial ``P`` records ended by an ``F`` one), ``docker logs -t``, ``kubectl logs
--prefix --timestamps``, journald's ``short-iso`` export, an RFC 5424 syslog relay. Each test
writes the same hand-written vLLM lines bare and wrapped (tmp_path) and compares what the reader
and the CLI make of both: the same records (request ids, prompt token counts), the same
preemptions, the same crash; the wrapper's full time (year, zone, sub-second) where it has one.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from preemptlog.sources import vllm_log

from ..conftest import run_cli

CHUNK = 16384  # containerd's and CRI-O's partial-record size


def _ids(n: int, seed: int) -> str:
    return ", ".join(str(100 + (seed * 7919 + i * 104729) % 127000) for i in range(n))


def _v1_lines() -> list[str]:
    """vLLM 0.11.1 V1 with --enable-log-requests at DEBUG: details lines of 20-5000 token ids
    (up to ~33 KiB), and stats lines that count preemptions (a build with PR #38452)."""
    out = [
        "(APIServer pid=100) INFO 12-01 09:59:50 [api_server.py:1839] vLLM API server version 0.11.1",
        "(APIServer pid=100) INFO 12-01 09:59:50 [utils.py:233] non-default args: {'model_tag': 'm', "
        "'max_num_seqs': 32, 'block_size': 16, 'gpu_memory_utilization': 0.8, 'enable_log_requests': True}",
        "(EngineCore_DP0 pid=200) INFO 12-01 09:59:52 [core.py:93] Initializing a V1 LLM engine (v0.11.1) with "
        "config: model='m', speculative_config=None, max_seq_len=16384, enable_prefix_caching=True",
        "(EngineCore_DP0 pid=200) INFO 12-01 09:59:58 [kv_cache_utils.py:1087] GPU KV cache size: 60,000 tokens",
    ]
    rid = 0
    for step in range(6):
        t = f"10:00:{step * 10:02d}"
        for k, n in enumerate((20, 3500, 5000)):
            rid += 1
            out += [
                f"(APIServer pid=100) INFO 12-01 {t} [logger.py:43] Received request chatcmpl-{rid:05d}: params: "
                f"SamplingParams(n=1, temperature=0.7, max_tokens={512 * (k + 1)}, min_tokens=0), lora_request: None.",
                f"(APIServer pid=100) DEBUG 12-01 {t} [logger.py:60] Request chatcmpl-{rid:05d} details: prompt: "
                f"'q {rid}', prompt_token_ids: [{_ids(n, rid)}], prompt_embeds shape: None.",
                f"(APIServer pid=100) INFO 12-01 {t} [async_llm.py:382] Added request chatcmpl-{rid:05d}.",
            ]
        out.append(
            f"(APIServer pid=100) INFO 12-01 {t} [loggers.py:208] Engine 000: Avg prompt throughput: 812.4 tokens/s, "
            f"Avg generation throughput: 2310.9 tokens/s, Running: {30 - step} reqs, Waiting: {step} reqs, "
            f"Preemptions: {step % 3}, GPU KV cache usage: {93 + step}.0%, Prefix cache hit rate: 35.2%"
        )
    return out


def _v0_crash_lines() -> list[str]:
    """vLLM 0.6.3 V0: preemption warnings, then a traceback whose lines carry no vLLM header."""
    warn = (
        "WARNING 12-01 10:00:{s:02d} scheduler.py:1481] Sequence group {g} is preempted by PreemptionMode.RECOMPUTE "
        "mode because there is not enough KV cache space. This can affect the end-to-end performance. Increase "
        "gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
        "total_num_cumulative_preemption={c}"
    )
    return [
        "INFO 12-01 09:59:50 api_server.py:212] vLLM API server version 0.6.3",
        "INFO 12-01 10:00:01 distributed_gpu_executor.py:57] # GPU blocks: 900, # CPU blocks: 2048",
        warn.format(s=10, g="cmpl-a-0", c=1),
        warn.format(s=20, g="cmpl-b-0", c=51),
        "ERROR 12-01 10:00:21 engine.py:160] Error in model execution: CUDA out of memory.",
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3/dist-packages/vllm/engine/async_llm_engine.py", line 58, in _log_task_completion',
        "    return_value = task.result()",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
    ]


def _times(lines: list[str], start: datetime) -> list[datetime]:
    """The wrapper's clock: each line's vLLM header time (a traceback line: the last one), plus a fraction."""
    out, last = [], start
    for i, line in enumerate(lines):
        if " 12-01 " in line[:60]:
            hms = line.split(" 12-01 ", 1)[1][:8]
            last = start.replace(hour=int(hms[:2]), minute=int(hms[3:5]), second=int(hms[6:8]))
        out.append(last + timedelta(microseconds=(i * 7919) % 999_983))
    return out


def _rfc3339(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%f") + "123Z"


def _cri(lines: list[str], year: int = 2026, interleave: bool = True) -> list[str]:
    """containerd's pod log: lines cut into 16 KiB partial records; a traceback (no vLLM header)
    on stderr; with ``interleave``, a stderr line written between the chunks of each cut line."""
    out = []
    for line, t in zip(lines, _times(lines, datetime(year, 12, 1, tzinfo=UTC))):
        stream = "stdout" if " 12-01 " in line[:60] else "stderr"
        raw = line.encode()
        chunks = [raw[i : i + CHUNK] for i in range(0, len(raw), CHUNK)] or [b""]
        for j, chunk in enumerate(chunks):
            tag = "F" if j == len(chunks) - 1 else "P"
            out.append(f"{_rfc3339(t)} {stream} {tag} {chunk.decode('utf-8', 'replace')}")
            if interleave and tag == "P" and j == 0:
                out.append(f"{_rfc3339(t)} stderr F [W1201 torch] a warning on the other stream")
    return out


def _write(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _request_rows(path: Path) -> list[tuple]:
    df = vllm_log.read(str(path), 0)
    return df.filter(pl.col("req_id").is_not_null()).select("kind", "req_id", "max_tokens", "prompt_tokens").rows()


def _summary(path: Path) -> dict:
    out = run_cli("analyze", str(path), "--tz", "UTC", "-f", "json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["summary"]


@pytest.mark.parametrize("interleave", [False, True], ids=["one-stream", "stderr-between-chunks"])
def test_cri_partial_lines_are_joined(tmp_path: Path, interleave: bool) -> None:
    lines = _v1_lines()
    assert max(len(x) for x in lines) > 2 * CHUNK  # lines of three chunks too
    bare = _write(tmp_path / "bare" / "vllm.log", lines)
    wrapped = _write(tmp_path / "pod" / "0.log", _cri(lines, interleave=interleave))
    rows = _request_rows(bare)
    assert {r[3] for r in rows if r[0] == "req_details"} == {20, 3500, 5000}
    assert _request_rows(wrapped) == rows


def test_cri_log_analysed_like_the_bare_log(tmp_path: Path) -> None:
    lines = _v1_lines()
    bare = _summary(_write(tmp_path / "bare" / "vllm.log", lines))
    pod = _write(tmp_path / "pod" / "0.log", _cri(lines))
    got = _summary(pod)
    for key in ("events", "by_kind", "by_gate", "requests_received", "stats", "count_visible"):
        assert got[key] == bare[key], key
    assert [f["option"] for f in got["fixes"]] == [f["option"] for f in bare["fixes"]]
    assert [(f["current"], f["suggested"]) for f in got["fixes"]] == [
        (f["current"], f["suggested"]) for f in bare["fixes"]
    ]
    parts = sum(1 for x in _cri(lines) if " stdout P " in x)
    assert f"{pod}: joined {parts} partial lines of the container runtime's log" in " ".join(got["notes"])


@pytest.mark.parametrize(
    "shape",
    ["cri", "docker-t", "kubectl-prefix-timestamps", "compose", "syslog-5424"],
)
def test_traceback_behind_a_wrapper_keeps_its_exception(tmp_path: Path, shape: str) -> None:
    lines = _v0_crash_lines()
    times = _times(lines, datetime(2026, 12, 1, tzinfo=UTC))
    wrap = {
        "cri": lambda: _cri(lines, interleave=False),
        "docker-t": lambda: [f"{_rfc3339(t)} {x}" for x, t in zip(lines, times)],
        "kubectl-prefix-timestamps": lambda: [f"[pod/vllm-0/vllm] {_rfc3339(t)} {x}" for x, t in zip(lines, times)],
        "compose": lambda: [f"vllm-1  | {x}" for x in lines],
        "syslog-5424": lambda: [
            f"<134>1 {t.isoformat(timespec='microseconds')} gpu-host vllm 1234 - - {x}" for x, t in zip(lines, times)
        ],
    }[shape]()
    bare = _summary(_write(tmp_path / "bare" / "vllm.log", lines))
    got = _summary(_write(tmp_path / "w" / "vllm.log", wrap))
    assert [c["what"] for c in bare["crashes"]] == ["OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."]
    assert [(c["what"], c["where"]) for c in got["crashes"]] == [(c["what"], c["where"]) for c in bare["crashes"]]
    assert got["events"] == bare["events"] == 51


def _docker_json(lines: list[str]) -> list[str]:
    """docker's json-file driver: one JSON record per line, a line over 16 KiB cut into records
    whose text lacks the final line feed; the traceback on stderr."""
    out = []
    for line, t in zip(lines, _times(lines, datetime(2026, 12, 1, tzinfo=UTC))):
        stream = "stdout" if " 12-01 " in line[:60] else "stderr"
        raw = line.encode()
        chunks = [raw[i : i + CHUNK] for i in range(0, len(raw), CHUNK)] or [b""]
        for j, chunk in enumerate(chunks):
            text = chunk.decode("utf-8", "replace") + ("\n" if j == len(chunks) - 1 else "")
            out.append(json.dumps({"log": text, "stream": stream, "time": _rfc3339(t)}, separators=(",", ":")))
    return out


def _journal_json(lines: list[str], line_max: int = 0) -> list[str]:
    """``journalctl -o json``: MESSAGE, __REALTIME_TIMESTAMP (us), _PID; a coloured line's MESSAGE is
    an array of bytes; with ``line_max``, longer lines are cut into entries marked _LINE_BREAK."""
    out = []
    for line, t in zip(lines, _times(lines, datetime(2026, 12, 1, tzinfo=UTC))):
        raw = line.encode()
        size = line_max or len(raw) or 1
        chunks = [raw[i : i + size] for i in range(0, len(raw), size)] or [b""]
        for j, chunk in enumerate(chunks):
            rec: dict = {
                "__CURSOR": f"s=1;i={len(out)}",
                "__REALTIME_TIMESTAMP": str(int(t.timestamp() * 1_000_000)),
                "_PID": "1234",
                "SYSLOG_IDENTIFIER": "vllm",
                "MESSAGE": list(chunk) if b"\x1b" in chunk else chunk.decode("utf-8", "replace"),
            }
            if j < len(chunks) - 1:
                rec["_LINE_BREAK"] = "line-max"
            out.append(json.dumps(rec))
    return out


@pytest.mark.parametrize("shape", ["docker-json", "journal-json", "journal-json-line-max"])
def test_json_log_driver_records_read_like_the_bare_log(tmp_path: Path, shape: str) -> None:
    lines = _v1_lines()
    lines[0] = "\x1b[32mINFO\x1b[0m 12-01 09:59:50 [api_server.py:1839] vLLM API server version 0.11.1"
    wrap = {
        "docker-json": lambda: _docker_json(lines),
        "journal-json": lambda: _journal_json(lines),
        "journal-json-line-max": lambda: _journal_json(lines, line_max=12000),
    }[shape]()
    bare = _write(tmp_path / "bare" / "vllm.log", lines)
    wrapped = _write(tmp_path / "w" / "vllm.json", wrap)
    assert _request_rows(wrapped) == _request_rows(bare)
    got, want = _summary(wrapped), _summary(bare)
    for key in ("events", "by_kind", "requests_received", "stats", "count_visible"):
        assert got[key] == want[key], key
    assert got["config"]["vllm_version"]["value"] == want["config"]["vllm_version"]["value"] == "0.11.1"
    assert [f["option"] for f in got["fixes"]] == [f["option"] for f in want["fixes"]]
    assert got["log_span"]["first"] == want["log_span"]["first"] == "2026-12-01T09:59:50+00:00"
    assert got["log_span"]["last"].startswith("2026-12-01T10:00:50.")  # the driver's sub-second time


def test_json_log_driver_traceback(tmp_path: Path) -> None:
    lines = _v0_crash_lines()
    want = _summary(_write(tmp_path / "bare" / "vllm.log", lines))
    for name, wrap in (("docker.json", _docker_json(lines)), ("journal.json", _journal_json(lines))):
        got = _summary(_write(tmp_path / "w" / name, wrap))
        assert [(c["what"], c["where"]) for c in got["crashes"]] == [(c["what"], c["where"]) for c in want["crashes"]]
        assert got["events"] == want["events"] == 51


@pytest.mark.parametrize("scanner", ["compiled", "polars"])
def test_syslog_5424_relay_time_is_the_line_time(tmp_path: Path, scanner: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """An RFC 5424 relay's full time (year, zone, sub-second) is the line's time, as docker -t's is:
    vLLM's year-less header (here the container's local time, two hours ahead) does not win. Both
    passes read it: the repair stage makes its lines ``<TIME> <text>`` (inputs/reflow.py), whichever
    pass is asked for; a note says so."""
    if scanner == "polars":
        monkeypatch.setenv("PREEMPTLOG_SCANNER", "polars")
    lines = _v0_crash_lines()[:4]
    local = [x.replace(" 12-01 10:", " 12-01 12:").replace(" 12-01 09:", " 12-01 11:") for x in lines]
    times = _times(lines, datetime(2025, 12, 1, tzinfo=UTC))
    wrapped = [
        f"<132>1 {t.isoformat(timespec='microseconds')} gpu-host vllm 1234 - - {x}" for x, t in zip(local, times)
    ]
    path = _write(tmp_path / "syslog.log", wrapped)
    got = _summary(path)
    assert got["log_span"]["first"] == "2025-12-01T09:59:50+00:00"
    assert got["log_span"]["last"].startswith("2025-12-01T10:00:20.")
    assert got["events"] == 51
    rows = vllm_log.read(str(path), 0).select("fdate", "ftime", "fzone").rows()
    assert rows[0] == ("2025-12-01", "09:59:50", "+00:00")
    assert any("an RFC 5424 syslog relay's records" in n for n in got.get("notes", [])), got.get("notes")


MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
VLLM_STAMP_RE = r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d \[?[^\s\[\]]+?:\d+\] "


def _bsd(t: datetime) -> str:
    """RFC 3164's time: ``Dec  6 23:11:05`` (the day padded with a space, no year)."""
    return f"{MONTHS[t.month - 1]} {t.day:>2} {t:%H:%M:%S}"


def _relay_3164(lines: list[str], shape: str, own_stamp: bool = True) -> list[str]:
    """A BSD syslog relay's lines as rsyslog writes or forwards them (``vllm[1234]:`` the tag); with
    ``own_stamp`` False, vLLM's own ``LEVEL MM-DD HH:MM:SS [file:line]`` is absent (a formatter
    without it, as under systemd): the relay's time is all the line has."""
    import re

    times = _times(lines, datetime(2026, 12, 1, tzinfo=UTC))
    head = {
        "var-log-syslog": lambda t: f"{_bsd(t)} gpu-node-3 vllm[1234]: ",
        "pri-forwarded": lambda t: f"<14>{_bsd(t)} gpu-node-3 vllm[1234]: ",
        "rsyslog-file-format": lambda t: f"{t.isoformat(timespec='microseconds')} gpu-node-3 vllm[1234]: ",
        "rsyslog-forward-format": lambda t: f"<14>{t.isoformat(timespec='microseconds')} gpu-node-3 vllm[1234]: ",
    }[shape]
    return [head(t) + (x if own_stamp else re.sub(VLLM_STAMP_RE, "", x, count=1)) for x, t in zip(lines, times)]


RELAY_3164 = ["var-log-syslog", "pri-forwarded", "rsyslog-file-format", "rsyslog-forward-format"]


@pytest.mark.parametrize("own_stamp", [True, False], ids=["vllm-stamp", "no-vllm-stamp"])
@pytest.mark.parametrize("shape", RELAY_3164)
def test_bsd_syslog_relay_read_like_the_bare_log(tmp_path: Path, shape: str, own_stamp: bool) -> None:
    """A vLLM log in /var/log/syslog (or relayed with ``<PRI>``): the same count, cause, fixes, crash
    and times as the bare log, with or without vLLM's own time on each line (the relay's then)."""
    for lines in (_v1_lines(), _v0_crash_lines()):
        want = _summary(_write(tmp_path / "bare" / "vllm.log", lines))
        got = _summary(_write(tmp_path / shape / "syslog", _relay_3164(lines, shape, own_stamp)))
        for key in ("events", "by_kind", "by_gate", "requests_received", "count_visible", "headline"):
            assert got[key] == want[key], key
        assert got["first_event"][:19] == want["first_event"][:19]  # the relay's sub-second time, when it has one
        assert [(f["option"], f["suggested"]) for f in got["fixes"]] == [
            (f["option"], f["suggested"]) for f in want["fixes"]
        ]
        assert [c["what"] for c in got["crashes"]] == [c["what"] for c in want["crashes"]]
        assert got["log_span"]["first"] == want["log_span"]["first"]
        assert got["log_span"]["last"][:19] == want["log_span"]["last"][:19]


def test_bsd_syslog_relay_which_time_is_used(tmp_path: Path) -> None:
    """vLLM's own stamp and the relay's disagree (here by two hours): a year-less BSD time yields to
    vLLM's own where a line has it; a full RFC 3339 time (RSYSLOG_ForwardFormat) is the line's time, as
    docker -t's is. Without a year, the year is inferred and said as an assumption."""
    lines = _v0_crash_lines()[:4]
    local = [x.replace(" 12-01 10:", " 12-01 12:").replace(" 12-01 09:", " 12-01 11:") for x in lines]
    times = _times(lines, datetime(2025, 12, 1, tzinfo=UTC))
    bsd = [f"<14>{_bsd(t)} gpu-node-3 vllm[1234]: {x}" for x, t in zip(local, times)]
    full = [f"<14>{t.isoformat(timespec='microseconds')} gpu-node-3 vllm[1234]: {x}" for x, t in zip(local, times)]
    got_bsd = _summary(_write(tmp_path / "a" / "syslog", bsd))
    got_full = _summary(_write(tmp_path / "b" / "syslog", full))
    assert got_bsd["log_span"]["first"][10:] == "T11:59:50+00:00"  # vLLM's own stamp, the year inferred
    assert any(a["topic"] == "year" for a in got_bsd["assumptions"]), got_bsd["assumptions"]
    assert got_full["log_span"]["first"] == "2025-12-01T09:59:50+00:00"  # the relay's full time
    assert got_full["events"] == got_bsd["events"] == 51
    assert any("BSD syslog relay's <PRI> records" in n for n in got_full["notes"]), got_full["notes"]
