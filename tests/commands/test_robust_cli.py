"""The command line under hostile conditions (issue 7), through real processes where it matters:
closed pipes and streams, Ctrl-C and SIGTERM, output files, one-line errors."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from preemptlog.cli import app
from preemptlog.errors import ExitCode

from ..conftest import FIXTURES, write_lines

PY = [sys.executable, "-m", "preemptlog"]
M = "INFO 05-04 05:{:02d}:{:02d} [scheduler.py:10] Req-{} PREEMPTED"


def big_log(path: Path, n: int = 2000) -> Path:
    """n marker events: ndjson and table output beyond a pipe buffer (64 KiB)."""
    return write_lines(path, [M.format((i // 60) % 60, i % 60, f"r{i}") for i in range(n)])


def env(tmpdir: Path | None = None) -> dict:
    e = dict(os.environ, NO_COLOR="1")
    if tmpdir is not None:
        e["TMPDIR"] = str(tmpdir)
    return e


def no_trace(stderr: str) -> None:
    assert "Traceback" not in stderr and "Exception ignored" not in stderr and "BrokenPipe" not in stderr, stderr


# ---------------------------------------------------------------- pipes


@pytest.mark.parametrize("fmt", ["ndjson", "table", "csv", "json"])
def test_reader_goes_away_exit_141_quietly(tmp_path, fmt):
    """`preemptlog analyze big.log | head -1`: the data stops quietly, exit 141, no trace."""
    log = big_log(tmp_path / "big.log")
    p = subprocess.Popen(
        PY + ["analyze", str(log), "--tz", "UTC", "-f", fmt], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env()
    )
    p.stdout.readline()
    p.stdout.close()  # like head -1 exiting
    _, err = p.communicate(timeout=60)
    assert p.returncode == ExitCode.PIPE_CLOSED, err
    no_trace(err.decode())


def test_stdout_and_stderr_on_one_closed_pipe(tmp_path):
    """`preemptlog analyze big.log 2>&1 | head -1`: the summary path meets the closed pipe too."""
    log = big_log(tmp_path / "big.log")
    for fmt in ("table",):
        p = subprocess.Popen(
            PY + ["analyze", str(log), "--tz", "UTC", "-f", fmt],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env(),
        )
        p.stdout.readline()
        p.stdout.close()
        p.wait(timeout=60)
        assert p.returncode == ExitCode.PIPE_CLOSED


def test_stderr_reader_gone_keeps_the_data_and_the_exit_code(tmp_path):
    """The summary's reader goes away (2>&1 >out | head -0): the data is complete, exit code kept."""
    log = big_log(tmp_path / "big.log", 50)
    out = tmp_path / "out.ndjson"
    r, w = os.pipe()
    os.close(r)  # a pipe nobody reads
    with open(out, "wb") as fh:
        p = subprocess.run(PY + ["analyze", str(log), "--tz", "UTC", "-f", "ndjson"], stdout=fh, stderr=w, env=env())
    os.close(w)
    assert p.returncode == ExitCode.OK
    assert len(out.read_bytes().splitlines()) == 50


def test_closed_standard_streams(tmp_path):
    log = big_log(tmp_path / "x.log", 5)
    base = f"{sys.executable} -m preemptlog analyze {log} --tz UTC -f ndjson"
    # stdout closed (>&-): one line, exit 141; with -o the file is still written
    p = subprocess.run(["sh", "-c", f"exec {base} >&-"], capture_output=False, stderr=subprocess.PIPE, env=env())
    assert p.returncode == ExitCode.PIPE_CLOSED
    assert p.stderr.decode().strip().splitlines()[-1].startswith("preemptlog: error: standard output is closed")
    out = tmp_path / "o.ndjson"
    p = subprocess.run(["sh", "-c", f"exec {base} -q -o {out} >&-"], env=env())
    assert p.returncode == 0 and len(out.read_bytes().splitlines()) == 5
    # stderr closed (2>&-): data still complete
    p = subprocess.run(["sh", "-c", f"exec {base} 2>&-"], stdout=subprocess.PIPE, env=env())
    assert p.returncode == 0 and len(p.stdout.splitlines()) == 5
    # stdin closed / empty with -
    p = subprocess.run(
        ["sh", "-c", f"exec {sys.executable} -m preemptlog analyze - <&-"], capture_output=True, env=env()
    )
    assert p.returncode == ExitCode.INPUT and b"standard input is closed" in p.stderr
    p = subprocess.run(PY + ["analyze", "-"], stdin=subprocess.DEVNULL, capture_output=True, env=env())
    assert p.returncode == ExitCode.INPUT and b"<stdin> (empty)" in p.stderr
    no_trace(p.stderr.decode())


# ---------------------------------------------------------------- Ctrl-C, SIGTERM


@pytest.fixture(scope="module")
def long_log(tmp_path_factory) -> Path:
    """A log that takes a few seconds to analyse (about 60 MB)."""
    p = tmp_path_factory.mktemp("long") / "vllm.log"
    block = (FIXTURES / "golden" / "v0-unbracketed-0.6.log").read_bytes()
    filler = b"".join(
        b"INFO 05-09 00:49:%02d api_server.py:1] Received request cmpl-%d: prompt: 'x', params: "
        b"SamplingParams(max_tokens=16), prompt_token_ids: [1, 2, 3], lora_request: None.\n" % (i % 60, i)
        for i in range(4000)
    )
    with open(p, "wb") as fh:
        for _ in range(100):
            fh.write(filler)
        fh.write(block)
    return p


def _wait_until_reading(p: subprocess.Popen, path: Path, timeout: float = 30.0) -> None:
    """Until the process has the log open (past start-up and imports, however loaded the machine)."""
    fd_dir = Path(f"/proc/{p.pid}/fd")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and p.poll() is None:
        try:
            if any(os.path.realpath(fd) == str(path) for fd in fd_dir.iterdir()):
                time.sleep(0.3)
                return
        except OSError:
            pass
        time.sleep(0.05)
    if not fd_dir.parent.exists():
        time.sleep(1.5)  # no /proc: a fixed delay


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_exits_130_and_leaves_nothing(tmp_path, long_log, sig):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    out = tmp_path / "out" / "events.json"
    out.parent.mkdir()
    p = subprocess.Popen(
        PY + ["analyze", str(long_log), "--tz", "UTC", "-o", str(out)], stderr=subprocess.PIPE, env=env(tmpdir)
    )
    _wait_until_reading(p, long_log)
    assert p.poll() is None, "the run ended before it could be interrupted"
    p.send_signal(sig)
    _, err = p.communicate(timeout=60)
    assert p.returncode == ExitCode.INTERRUPTED, err
    assert err.decode().strip().splitlines() == ["preemptlog: interrupted"]
    assert list(out.parent.iterdir()) == []  # neither the file nor its .part
    assert list(tmpdir.iterdir()) == []  # the private workspace is gone


def test_interrupt_while_writing_removes_the_partial_file(tmp_path, monkeypatch):
    """Ctrl-C in the middle of writing -o: the temporary file is removed, the old file is kept."""
    import preemptlog.render as render

    log = big_log(tmp_path / "x.log", 20)
    out = tmp_path / "report.json"
    out.write_text("previous report\n")

    def half_then_interrupt(analysis, fmt, stream, **kw):
        stream.write(b'{"half": ')
        raise KeyboardInterrupt

    monkeypatch.setattr(render, "write", half_then_interrupt)
    res = CliRunner().invoke(app, ["analyze", str(log), "--tz", "UTC", "-q", "-o", str(out)])
    assert res.exit_code == ExitCode.INTERRUPTED
    assert out.read_text() == "previous report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json", "x.log"]


# ---------------------------------------------------------------- output files


def test_output_is_atomic_and_keeps_permissions(tmp_path):
    log = big_log(tmp_path / "x.log", 5)
    out = tmp_path / "o.ndjson"
    out.write_text("old")
    os.chmod(out, 0o640)
    res = CliRunner().invoke(app, ["analyze", str(log), "--tz", "UTC", "-q", "-o", str(out)])
    assert res.exit_code == 0
    assert len(out.read_bytes().splitlines()) == 5
    assert stat.S_IMODE(out.stat().st_mode) == 0o640
    # through a symlink: the target is replaced, the link stays a link
    (tmp_path / "link.ndjson").symlink_to(out)
    res = CliRunner().invoke(app, ["analyze", str(log), "--tz", "UTC", "-q", "-o", str(tmp_path / "link.ndjson")])
    assert res.exit_code == 0 and (tmp_path / "link.ndjson").is_symlink()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".part")]


def test_output_to_a_fifo_is_written_in_place(tmp_path):
    """A non-regular destination (FIFO, /dev/null, /dev/stdout) is never renamed over."""
    log = big_log(tmp_path / "x.log", 5)
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    got = {}

    def reader():
        with open(fifo, "rb") as fh:
            got["data"] = fh.read()

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    p = subprocess.run(
        PY + ["analyze", str(log), "--tz", "UTC", "-q", "-f", "ndjson", "-o", str(fifo)], env=env(), timeout=60
    )
    t.join(10)
    assert p.returncode == 0
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # still a FIFO
    assert len(got["data"].splitlines()) == 5


def test_output_never_overwrites_an_input(tmp_path):
    log = big_log(tmp_path / "vllm.log", 5)
    before = log.read_bytes()
    for target in (log, tmp_path / "alias.log"):
        if target.name == "alias.log":
            target.symlink_to(log)
        res = CliRunner().invoke(app, ["analyze", str(tmp_path), "--tz", "UTC", "-q", "-o", str(target)])
        assert res.exit_code == ExitCode.USAGE
        assert "is one of the inputs" in res.stderr
    assert log.read_bytes() == before


def test_inputs_are_untouched(tmp_path):
    """Files and folders of the bundle keep their mtime and ctime (nothing written, nothing chmod-ed),
    and nothing is created inside the bundle."""
    import gzip
    import tarfile

    b = tmp_path / "bundle"
    (b / "sub").mkdir(parents=True)
    big_log(b / "vllm.log", 20)
    (b / "sub" / "vllm.log.1.gz").write_bytes(gzip.compress((b / "vllm.log").read_bytes()))
    (b / "notes.txt").write_text("hello\n")
    with tarfile.open(tmp_path / "b.tgz", "w:gz") as tf:
        tf.add(b, arcname="b")
    old = 1_600_000_000
    for p in [b, b / "sub", *b.rglob("*"), tmp_path / "b.tgz"]:
        os.utime(p, (old, old), follow_symlinks=False)

    def snap():
        return {
            str(p): (p.lstat().st_mtime_ns, p.lstat().st_ctime_ns, p.lstat().st_size)
            for p in [b, b / "sub", *b.rglob("*"), tmp_path / "b.tgz"]
        }

    before = snap()
    for target in (b, tmp_path / "b.tgz", b / "sub" / "vllm.log.1.gz"):
        res = CliRunner().invoke(app, ["analyze", str(target), "--tz", "UTC", "-q", "-f", "ndjson"])
        assert res.exit_code == 0, res.stderr
    assert snap() == before
    assert all(before[k][0] == old * 10**9 for k in before)


# ---------------------------------------------------------------- one line per error


@pytest.mark.parametrize(
    "args,code,what",
    [
        (["analyze", "/nonexistent/vllm.log"], ExitCode.INPUT, "/nonexistent/vllm.log: no such file or folder"),
        (["analyze", "{tmp}/empty.log"], ExitCode.INPUT, "nothing recognisable in the input"),
        (["analyze", "{tmp}/x.log", "--kind", "nope"], ExitCode.USAGE, "--kind expects FILE=KIND"),
        (["analyze", "{tmp}/x.log", "-o", "{tmp}/no/such/dir/o.json"], ExitCode.USAGE, "does not exist"),
        (["analyze", "{tmp}/x.log", "-o", "{tmp}"], ExitCode.USAGE, "is a folder"),
        (["analyze", "{tmp}/x.log", "--tz", "Mars/Olympus"], ExitCode.USAGE, "Mars/Olympus"),
        # a clock with no such hour or minute (an internal error "hour must be in 0..23" before)
        (["analyze", "{tmp}/x.log", "--since", "25:00"], ExitCode.USAGE, "--since '25:00' is not a time"),
        (["analyze", "{tmp}/x.log", "--until", "12:60:00"], ExitCode.USAGE, "--until '12:60:00' is not a time"),
    ],
)
def test_every_error_is_one_line_with_the_documented_code(tmp_path, args, code, what):
    write_lines(tmp_path / "x.log", [M.format(0, 0, 1)])
    (tmp_path / "empty.log").write_bytes(b"")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args]
    res = CliRunner().invoke(app, argv + ["-q"])
    assert res.exit_code == code, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("preemptlog: error: ") and what in lines[0]


def test_debug_shows_the_traceback(tmp_path):
    res = CliRunner().invoke(app, ["analyze", str(tmp_path / "nope.log"), "--debug"])
    assert res.exit_code != 0 and res.exception is not None  # raised, not mapped: the traceback is shown


def test_internal_error_is_one_line_exit_1(tmp_path, monkeypatch):
    import preemptlog.pipeline as pipeline

    log = big_log(tmp_path / "x.log", 3)

    def bug(*a, **k):
        raise ZeroDivisionError("division by zero\nsecond line")

    monkeypatch.setattr(pipeline, "resolve", bug)
    res = CliRunner().invoke(app, ["analyze", str(log), "-q"])
    assert res.exit_code == ExitCode.INTERNAL
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "internal error: ZeroDivisionError: division by zero" in lines[0]
    assert "--debug" in lines[0]


def test_usage_errors_are_one_line_too():
    """Bad command lines (typer/click) print one line, not the usage block; --help still works."""
    for args in (["analyze", "x.log", "--before", "abc"], ["analyze"], ["analyze", "--nope", "x"]):
        p = subprocess.run(PY + args, capture_output=True, env=env(), timeout=60)
        lines = p.stderr.decode().strip().splitlines()
        assert p.returncode == ExitCode.USAGE
        assert len(lines) == 1 and lines[0].startswith("preemptlog: error: ") and "--help" in lines[0], lines
    p = subprocess.run(PY + ["analyze", "--help"], capture_output=True, env=env(), timeout=60)
    assert p.returncode == 0 and b"Examples" in p.stdout


# ---------------------------------------------------------------- found by hand-written inputs

V0_WARNING = (
    "WARNING 05-09 10:00:{:02d} scheduler.py:1077] Sequence group {} is preempted by PreemptionMode.RECOMPUTE "
    "mode because there is not enough KV cache space. This can affect the end-to-end performance. Increase "
    "gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
    "total_num_cumulative_preemption={}"
)


def _run(args: list[str], stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(PY + args, capture_output=True, env=env(), timeout=120, input=stdin)


def test_explain_reads_an_event_of_a_very_long_request_id(tmp_path):
    """A 400 000 character request id (a damaged log): explain used a literal regex of the id to
    keep the request's window rows, which polars refused (compiled regex size limit: exit 1)."""
    rid = "cmpl-" + "A" * 400_000
    log = write_lines(tmp_path / "long.log", [V0_WARNING.format(1, rid, 1)])
    p = _run(["explain", "long.log:1", str(log), "--tz", "UTC", "-f", "json", "--no-pager"])
    assert p.returncode == 0, p.stderr.decode()[:500]
    doc = json.loads(p.stdout)
    assert doc["event"]["request_id"] == rid
    assert [r["src"] for r in doc["window"]] == [f"{log}:1"]  # its own line (the value cut to a preview)


@pytest.mark.parametrize("command", ["analyze", "explain", "report", "whatif"])
def test_output_over_a_given_input_is_refused_before_any_work(tmp_path, command):
    """-o naming a file given on the command line: refused first (one line, exit 2), not after the
    analysis (analyze printed its whole summary before refusing)."""
    log = write_lines(tmp_path / "vllm.log", [V0_WARNING.format(i, f"r{i}", i) for i in range(1, 4)])
    before = log.read_bytes()
    args = {
        "explain": ["explain", "vllm.log:1", str(log), "--tz", "UTC"],
        "whatif": ["whatif", str(log), "--set", "max_num_seqs=8"],
    }.get(command, [command, str(log), "--tz", "UTC"]) + ["-o", str(log)]
    p = _run(args)
    err = p.stderr.decode().strip().splitlines()
    assert p.returncode == ExitCode.USAGE, err
    assert len(err) == 1 and "is one of the inputs" in err[0], err
    assert log.read_bytes() == before


def test_fail_on_rate_without_a_request_count_says_it_cannot_hold(tmp_path):
    """rate>X on a bundle that logs no received request: it cannot hold; the run says so (even with
    -q) instead of passing silently, as any / count do when the count is not visible."""
    log = write_lines(tmp_path / "vllm.log", [V0_WARNING.format(i, f"r{i}", i) for i in range(1, 4)])
    p = _run(["analyze", str(log), "--tz", "UTC", "-q", "-f", "ndjson", "--fail-on", "rate>5%"])
    assert p.returncode == 0
    assert "--fail-on rate>5% cannot hold: the bundle logs no received requests" in p.stderr.decode()
    q = _run(["analyze", str(log), "--tz", "UTC", "-q", "-f", "ndjson", "--fail-on", "count>1"])
    assert q.returncode == ExitCode.FAIL_ON and "cannot hold" not in q.stderr.decode()


def test_whatif_names_the_option_a_bad_value_came_with(tmp_path):
    log = write_lines(tmp_path / "vllm.log", [V0_WARNING.format(1, "r1", 1)])
    for opt, item in (("--base", "num_gpu_blocks=0"), ("--set", "max_num_seqs=0"), ("--sweep", "max_num_seqs=4,0")):
        p = _run(["whatif", str(log), opt, item])
        err = p.stderr.decode().strip().splitlines()
        assert p.returncode == ExitCode.USAGE and len(err) == 1, err
        assert f"error: {opt} " in err[0] and "not a positive integer" in err[0], err


def test_explain_of_a_missing_path_says_so(tmp_path):
    """`explain PATH` alone, PATH missing or a broken link: the path's problem (exit 3), not "give the
    bundle the event 'PATH' comes from"; an event id alone still asks for its bundle."""
    (tmp_path / "gone.log").symlink_to(tmp_path / "nowhere.log")
    p = _run(["explain", str(tmp_path / "gone.log"), "--no-pager"])
    assert p.returncode == ExitCode.INPUT and "symbolic link to a missing file" in p.stderr.decode()
    p = _run(["explain", str(tmp_path / "missing.log"), "--no-pager"])
    assert p.returncode == ExitCode.INPUT and "no such file or folder" in p.stderr.decode()
    p = _run(["explain", "vllm.log:12", "--no-pager"])
    assert p.returncode == ExitCode.USAGE and "give the bundle or log PATH" in p.stderr.decode()


def test_a_log_naming_no_version_is_not_said_to_be_of_a_version(tmp_path):
    """A log holding only a traceback: nothing names its vLLM version or engine, so the headline
    does not say "this version logs no preemption count"."""
    log = write_lines(
        tmp_path / "tb.log",
        [
            "Traceback (most recent call last):",
            '  File "/usr/lib/python3.10/site-packages/vllm/engine/async_llm_engine.py", line 700, in run_engine_loop',
            '    raise RuntimeError("CUDA out of memory")',
            "RuntimeError: CUDA out of memory",
        ],
    )
    p = _run(["analyze", str(log), "--tz", "UTC", "-f", "json"])
    assert p.returncode == 0, p.stderr.decode()
    head = " ".join(p.stderr.decode().split())
    assert "not visible (this log: no preemption line or count, and no line naming its vLLM version" in head, head
    assert "this version" not in head


@pytest.mark.parametrize(
    "window", [["--since", "-99999999d"], ["--since", "10:00:00.9999999"], ["--until", "23:59:59.9999999"]]
)
def test_extreme_but_valid_windows_are_read(tmp_path, window):
    # internal errors before: "date value out of range", "microsecond must be in 0..999999"
    log = write_lines(tmp_path / "x.log", [V0_WARNING.format(5, "a1", 1)])
    p = _run(["analyze", str(log), "--tz", "UTC", "-f", "ndjson", *window])
    assert p.returncode == 0, p.stderr
    assert p.stdout.decode().count('"event_id"') == 1
