"""Metamorphic relations (issue 19): transformations of a log that must not change the answer.

Each relation runs on the real logs of ../shared/corpus and ../shared/corpus2 (read at test time,
skipped with a reason when absent; never copied here) and on hand-written logs in every header
family (0.4-0.7 ``file.py:12]``, 0.8+ ``[file.py:12]``, ``(APIServer pid=N)``, docker compose,
kubectl RFC 3339, ISO prefixes, 0.32+ JSON lines). README "Robustness" says what happens in each
case.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import tarfile
import zlib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from preemptlog import AnalyzeOptions, analyze
from preemptlog.errors import InputError

from ..conftest import FIXTURES, corpus2_dir, corpus_dir

zstandard = pytest.importorskip("zstandard")

UTC = UTC
T0 = datetime(2025, 5, 1, 9, 0, 0, tzinfo=UTC)
FAMILIES = ("v04", "v08", "apiserver", "compose", "kubectl", "iso", "json")
V1_STATS = (
    "Engine 000: Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, "
    "Running: 3 reqs, Waiting: 2 reqs, GPU KV cache usage: 97.0%, Prefix cache hit rate: 0.0%, Preemptions: {n}"
)
V0_STATS = (
    "Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, Running: 3 reqs, "
    "Swapped: 0 reqs, Pending: 2 reqs, GPU KV cache usage: 97.0%, CPU KV cache usage: 0.0%."
)
V0_WARN = (
    "Sequence group {rid} is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache "
    "space. This can affect the end-to-end performance. Increase gpu_memory_utilization or "
    "tensor_parallel_size to provide more KV cache memory. total_num_cumulative_preemption={n}"
)
RECEIVED = "Received request chatcmpl-{rid}: params: SamplingParams(n=1, max_tokens=16), lora_request: None."
BANNER = "vLLM API server version 0.11.1"
BANNER_LINE = f"(APIServer pid=4121) INFO 05-01 09:00:00 [api_server.py:1805] {BANNER}"


def line(family: str, t: datetime, level: str, src: str, msg: str, *, pid: int = 4121, tz=UTC) -> str:
    """One log line of ``family`` at instant ``t`` (the vLLM header shows it as wall time in ``tz``)."""
    w = t.astimezone(tz)
    hdr = w.strftime("%m-%d %H:%M:%S")
    if family == "v04":
        return f"{level} {hdr} {src}] {msg}"
    if family == "v08":
        return f"{level} {hdr} [{src}] {msg}"
    if family == "apiserver":
        return f"(APIServer pid={pid}) {level} {hdr} [{src}] {msg}"
    if family == "compose":
        return f"vllm-1  | {level} {hdr} [{src}] {msg}"
    if family == "kubectl":
        return f"{t.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%S.%f')}000Z {level} {hdr} [{src}] {msg}"
    if family == "iso":
        return f"{w.strftime('%Y-%m-%d %H:%M:%S')},{w.microsecond // 1000:03d} {level} {src}] {msg}"
    if family == "json":
        return json.dumps(
            {
                "asctime": f"{w.strftime('%Y-%m-%d %H:%M:%S')},000",
                "levelname": level,
                "name": "vllm.engine",
                "processName": "EngineCore",
                "process": pid,
                "message": msg,
            }
        )
    raise AssertionError(family)


def hand_log(
    family: str,
    engine: str = "v1",
    *,
    start: datetime = T0,
    steps: int = 18,
    pid: int = 4121,
    banner: bool = True,
    tz=UTC,
    first_id: int = 0,
) -> list[str]:
    """A scheduler-like log: a start banner, requests, stats every 10 s, preemptions.

    ``v1``: stats with ``Preemptions: N`` and ``Req-<id> PREEMPTED`` markers; ``v0``: V0 stats and
    sampled warnings with the cumulative counter (1, 51, 101, ...).
    """
    out = [line(family, start, "INFO", "api_server.py:1805", BANNER, pid=pid, tz=tz)] if banner else []
    k = 0
    for i in range(steps):
        t = start + timedelta(seconds=10 * (i + 1))
        rid = first_id + i
        out.append(line(family, t, "INFO", "logger.py:39", RECEIVED.format(rid=rid), pid=pid, tz=tz))
        if engine == "v1":
            if i % 4 == 1:
                out.append(line(family, t, "WARNING", "scheduler.py:990", f"Req-m{rid} PREEMPTED", pid=pid, tz=tz))
            out.append(line(family, t, "INFO", "loggers.py:123", V1_STATS.format(n=i % 3), pid=pid, tz=tz))
        else:
            if i % 3 == 2:
                out.append(
                    line(
                        family, t, "WARNING", "scheduler.py:1057", V0_WARN.format(rid=rid, n=1 + 50 * k), pid=pid, tz=tz
                    )
                )
                k += 1
            out.append(line(family, t, "INFO", "metrics.py:345", V0_STATS, pid=pid, tz=tz))
    return out


def text(lines: list[str]) -> bytes:
    return ("\n".join(lines) + "\n").encode("utf-8")


def run(paths, **kw):
    kw.setdefault("tz", "UTC")
    kw.setdefault("year", 2025)
    kw.setdefault("rules", False)
    return analyze([str(p) for p in paths], AnalyzeOptions(**kw))


EVENT_KEY = ["kind", "time", "interval_start", "interval_end", "request_id", "cumulative", "engine"]


def event_keys(r) -> list[tuple]:
    return sorted(r.events.select(EVENT_KEY).rows(), key=repr)


def signature(r) -> dict:
    s = r.summary()
    return {"events": event_keys(r), "stats": r.stats.height, "received": s["requests_received"]}


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def real_logs() -> list[Path]:
    out = []
    for d in (corpus_dir(), corpus2_dir()):
        if d is not None:
            out += sorted(d.glob("vllm-*.log"))
    return out


REAL = real_logs()
REAL_IDS = [p.name for p in REAL] or ["absent"]
HAND = [(f, e) for f in FAMILIES for e in ("v1", "v0")]


@pytest.fixture(params=range(len(REAL)) if REAL else [None], ids=REAL_IDS)
def real_log(request) -> Path:
    if request.param is None:
        pytest.skip("real-log corpora not found (../shared/corpus, ../shared/corpus2)")
    return REAL[request.param]


@pytest.fixture(params=HAND, ids=[f"{f}-{e}" for f, e in HAND])
def hand(request, tmp_path) -> Path:
    family, engine = request.param
    return write(tmp_path / f"{family}-{engine}.log", text(hand_log(family, engine)))


def test_hand_logs_are_read(hand):
    """The hand-written logs are what the relations below transform: they must be read whole."""
    r = run([hand])
    assert not r.partial, r.warnings
    assert r.stats.height == 18 and r.summary()["requests_received"] == 18
    assert r.events.height > 0


# ---------------------------------------------------------------- 1. NUL holes


def nul_variants(data: bytes) -> dict[str, bytes]:
    lines = data.split(b"\n")
    return {
        "hole at the start": b"\x00" * 100 + data,
        "4 KB hole after line 12": b"\n".join(lines[:12]) + b"\n" + b"\x00" * 4096 + b"\n".join(lines[12:]),
        "binary line before every record": b"".join(
            b"\x00" * 30 + b"\x01\x02\x00\x7f\n" + ln + b"\n" for ln in lines if ln
        ),
        "64 KB hole at the start": b"\x00" * 65536 + data,
    }


def check_nul_relation(src: Path, tmp_path: Path) -> None:
    base = run([src])
    data = src.read_bytes()
    for name, variant in nul_variants(data).items():
        p = write(tmp_path / f"holed-{src.name}", variant)
        r = run([p])
        assert signature(r) == signature(base), (src.name, name)
        assert r.partial, (src.name, name)
        assert any("NUL byte(s) skipped" in w for w in r.warnings), (name, r.warnings)
        # inside a bundle (a folder), beside another file: the same events, and the run is partial
        d = tmp_path / "bundle"
        d.mkdir(exist_ok=True)
        write(d / src.name, variant)
        write(d / "notes.txt", b"operator notes\n")
        rb = run([d])
        assert event_keys(rb) == event_keys(base), (src.name, name)
        assert rb.partial and {f.kind for f in rb.bundle.files if f.display.endswith(src.name)} == {"vllm-log"}


def test_nul_holes_change_nothing_real(real_log, tmp_path):
    check_nul_relation(real_log, tmp_path)


def test_nul_holes_change_nothing_hand(hand, tmp_path):
    check_nul_relation(hand, tmp_path)


def test_nul_only_file_is_still_empty(tmp_path):
    p = write(tmp_path / "zeros.log", b"\x00" * 10000)
    with pytest.raises(InputError, match="empty"):
        run([p])


# ---------------------------------------------------------------- 2. cuts at random bytes (plain, gz, zst)


CUT_SRC = text(hand_log("v08", "v0", steps=9) + hand_log("apiserver", "v1", steps=9, start=T0 + timedelta(hours=1)))


def _line_ends(data: bytes) -> list[int]:
    return [i + 1 for i, b in enumerate(data) if b == 0x0A]


def _ids(r) -> set[tuple[int, str]]:
    """Events by (line, what the id says after the file name): the same in a prefix of the file."""
    df = r.events.select("line", "event_id", "source")
    return {(ln, eid[len(src) + 1 :]) for ln, eid, src in df.rows()}


def _kept_ids(full, upto_line: int) -> set[tuple[int, str]]:
    return {k for k in _ids(full) if k[0] <= upto_line}


def _decompressed_prefix(comp: str, blob: bytes) -> int:
    if comp == "gz":
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            return len(d.decompress(blob))
        except zlib.error:
            return 0
    d = zstandard.ZstdDecompressor().decompressobj()
    try:
        return len(d.decompress(blob))
    except zstandard.ZstdError:
        return 0


@pytest.fixture(scope="module")
def cut_full(tmp_path_factory):
    p = write(tmp_path_factory.mktemp("cut") / "full.log", CUT_SRC)
    return run([p])


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(min_value=1, max_value=len(CUT_SRC) - 1), st.sampled_from(["plain", "gz", "zst"]))
def test_cut_keeps_every_earlier_event(tmp_path_factory, cut_full, at, comp):
    d = tmp_path_factory.mktemp("cuts")
    if comp == "plain":
        data, name = CUT_SRC[:at], "cut.log"
        prefix = at
    elif comp == "gz":
        blob = gzip.compress(CUT_SRC, mtime=0)
        data, name = blob[: max(1, at * len(blob) // len(CUT_SRC))], "cut.log.gz"
        prefix = _decompressed_prefix("gz", data)
    else:
        blob = zstandard.ZstdCompressor(level=3).compress(CUT_SRC)
        data, name = blob[: max(1, at * len(blob) // len(CUT_SRC))], "cut.log.zst"
        prefix = _decompressed_prefix("zst", data)
    p = write(d / name, data)
    whole_lines = sum(1 for e in _line_ends(CUT_SRC) if e <= prefix)
    try:
        r = run([p])
    except InputError:
        assert whole_lines == 0, "a cut file with whole lines must be read"
        return
    assert _kept_ids(cut_full, whole_lines) <= _ids(r), (comp, at)
    mid_line = prefix not in [0, *_line_ends(CUT_SRC)]
    if comp != "plain" or mid_line:
        assert r.partial, (comp, at, r.warnings)


@pytest.mark.parametrize("where", [0.3, 0.77])
def test_plain_cut_of_a_real_log_keeps_earlier_events(real_log, tmp_path, where):
    data = real_log.read_bytes()
    at = max(1, int(len(data) * where))
    r = run([write(tmp_path / real_log.name, data[:at])])
    whole = data[:at].count(b"\n")
    assert _kept_ids(run([real_log]), whole) <= _ids(r)
    if not data[:at].endswith(b"\n"):  # a line was cut: said, exit 5
        assert r.partial and any("ends in the middle of a line" in w for w in r.warnings)


@pytest.mark.parametrize("comp", ["gz", "zst"])
def test_truncated_compressed_real_log_is_salvaged(real_log, tmp_path, comp):
    data = real_log.read_bytes()
    blob = gzip.compress(data, mtime=0) if comp == "gz" else zstandard.ZstdCompressor(level=3).compress(data)
    cut = blob[: len(blob) * 3 // 4]
    p = write(tmp_path / f"{real_log.name}.{comp}", cut)
    prefix = _decompressed_prefix(comp, cut)
    try:
        r = run([p])
    except InputError as exc:  # nothing decompressed: said so, never "(empty)"
        assert prefix == 0 and "damaged" in str(exc) and "(empty)" not in str(exc)
        return
    assert r.partial and any("damaged" in w for w in r.warnings)
    full = run([real_log])
    whole = data[:prefix].count(b"\n")
    assert _kept_ids(full, whole) <= _ids(r)


def test_zst_cut_inside_its_first_block_is_damage_not_empty(tmp_path):
    blob = zstandard.ZstdCompressor(level=3).compress(CUT_SRC)
    with pytest.raises(InputError, match=r"damaged zstd file") as exc:
        run([write(tmp_path / "x.log.zst", blob[:20])])
    assert "(empty)" not in str(exc.value)
    d = tmp_path / "b"
    d.mkdir()
    write(d / "x.log.zst", blob[:20])
    write(d / "v.log", CUT_SRC)
    r = run([d])
    assert r.partial and any("damaged zstd file" in w for w in r.warnings)


# ---------------------------------------------------------------- 3. a cut last line ending in ] or }


@pytest.mark.parametrize("family", FAMILIES[:-1])
@pytest.mark.parametrize(
    "tail",
    [
        "INFO 05-01 10:00:00 [loggers.py:335]",
        "(RayWorkerWrapper pid=9) INFO 05-01 10:00:00 [loggers.py:335] x [repeated 2x across cluster]",
        "INFO 05-01 10:00:00 [x.py:1] args: {'a': 1}",
        "[1, 2]",
    ],
)
def test_cut_last_line_of_a_text_log_is_partial(tmp_path, family, tail):
    data = text(hand_log(family, "v1", steps=3)) + tail.encode()
    r = run([write(tmp_path / "v.log", data)])
    assert r.partial and any("ends in the middle of a line" in w for w in r.warnings), r.warnings


def test_cut_last_line_of_a_real_log_after_a_bracket_is_partial(real_log, tmp_path):
    """A real log cut right after its last ] or } (mostly "[file.py:N]" of a header)."""
    data = real_log.read_bytes().rstrip(b"\r\n")
    end = max(data.rfind(b"]"), data.rfind(b"}"))
    if end < 0:
        pytest.skip(f"{real_log.name}: no ] or }} in the file")
    r = run([write(tmp_path / real_log.name, data[: end + 1])])
    assert r.partial and any("ends in the middle of a line" in w for w in r.warnings)


def test_json_lines_without_a_final_line_end_are_whole(tmp_path):
    lines = hand_log("json", "v1", steps=3)
    r = run([write(tmp_path / "v.log", text(lines).rstrip(b"\n"))])
    assert not any("middle of a line" in w for w in r.warnings)
    cut = text(lines).rstrip(b"\n")
    cut = cut[: cut.rfind(b'"message"')] + b'"message": {"a": 1}'  # ends in } but is not whole JSON
    r = run([write(tmp_path / "w.log", cut)])
    assert any("middle of a line" in w for w in r.warnings)


# ---------------------------------------------------------------- 4. every fixed offset


OFFSETS = [m for m in range(-12 * 60, 14 * 60 + 1, 15)]


def _offset(minutes: int) -> str:
    sign = "+" if minutes >= 0 else "-"
    return f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


@pytest.fixture(scope="module")
def tz_logs(tmp_path_factory):
    d = tmp_path_factory.mktemp("tz")
    return {f: write(d / f"{f}.log", text(hand_log(f, "v1", steps=4))) for f in ("v08", "apiserver")}


@pytest.mark.parametrize("minutes", OFFSETS, ids=[_offset(m) for m in OFFSETS])
def test_every_quarter_hour_offset_shifts_times_exactly(tz_logs, minutes):
    """--tz +HH:MM reads year-less times as that offset: every time moves by exactly -offset."""
    shift = timedelta(minutes=minutes)
    for p in tz_logs.values():
        base = run([p], tz="UTC").events
        r = run([p], tz=_offset(minutes))
        assert r.tz == _offset(minutes)
        got = r.events.get_column("time").to_list()
        assert got == [t - shift for t in base.get_column("time").to_list()]
        from preemptlog.render import event_rows

        shown = event_rows(r).get_column("time").to_list()
        assert all(s.endswith(_offset(minutes)) for s in shown)
        first = base.get_column("time")[0]
        assert shown[0].startswith(first.strftime("%Y-%m-%dT%H:%M:%S"))  # the wall time as logged


def test_non_hour_offset_in_every_output_format(tmp_path, tz_logs):
    from typer.testing import CliRunner

    from preemptlog.cli import app

    p = tz_logs["v08"]
    for fmt in ("json", "ndjson", "csv", "table", "parquet"):
        out = tmp_path / f"o.{fmt}"
        res = CliRunner().invoke(
            app, ["analyze", "--year", "2025", "--tz", "+05:45", "-f", fmt, "-o", str(out), str(p)]
        )
        assert res.exit_code == 0, (fmt, res.output)
    res = CliRunner().invoke(
        app, ["report", "--year", "2025", "--tz", "-03:30", "-o", str(tmp_path / "r.html"), str(p)]
    )
    assert res.exit_code == 0, res.output


# ---------------------------------------------------------------- 5. two server runs in one log


def _runs(family: str, engine: str, *, pids: bool) -> tuple[list[str], list[str]]:
    a = hand_log(family, engine, steps=9, pid=100, first_id=0)
    b = hand_log(family, engine, steps=9, pid=200 if pids else 100, start=T0 + timedelta(hours=2), first_id=100)
    return a, b


def _per_minute(r) -> dict[str, dict]:
    return {row["minute"]: {k: v for k, v in row.items() if k != "minute"} for row in r.summary()["per_minute"]}


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("engine", ["v1", "v0"])
def test_two_runs_in_one_file_equal_each_run_alone(tmp_path, family, engine):
    a, b = _runs(family, engine, pids=family in ("apiserver", "json"))
    ra = run([write(tmp_path / "a.log", text(a))])
    rb = run([write(tmp_path / "b.log", text(b))])
    both = run([write(tmp_path / "v.log", text(a + b))])
    assert event_keys(both) == sorted(event_keys(ra) + event_keys(rb), key=repr)
    pm = _per_minute(ra)
    assert not set(pm) & set(_per_minute(rb))  # the runs are two hours apart
    assert _per_minute(both) == {**pm, **_per_minute(rb)}
    # no interval spans the downtime between the runs
    start_b = T0 + timedelta(hours=2)
    ev = both.events.filter(pl.col("interval_end") >= start_b)
    assert ev.filter(pl.col("interval_start") < start_b).height == 0


def test_restart_without_banner_but_new_pid_starts_a_new_chain(tmp_path):
    a = hand_log("apiserver", "v1", steps=5, pid=100)
    b = hand_log("apiserver", "v1", steps=5, pid=200, start=T0 + timedelta(hours=2), banner=False)
    r = run([write(tmp_path / "v.log", text(a + b))])
    start_b = T0 + timedelta(hours=2)
    late = r.events.filter((pl.col("kind") == "interval") & (pl.col("interval_end") > start_b))
    assert late.height and late.filter(pl.col("interval_start") < start_b).height == 0


def test_v0_restart_without_banner_is_seen_by_its_counter_reset(tmp_path):
    a = hand_log("v04", "v0", steps=9, banner=False)
    b = hand_log("v04", "v0", steps=9, banner=False, start=T0 + timedelta(hours=2))
    ra = run([write(tmp_path / "a.log", text(a))])
    rb = run([write(tmp_path / "b.log", text(b))])
    both = run([write(tmp_path / "v.log", text(a + b))])
    assert event_keys(both) == sorted(event_keys(ra) + event_keys(rb), key=repr)


def test_exit_codes_of_the_relations(tmp_path, hand):
    """What the CLI says for each transformed input (README "Robustness")."""
    from typer.testing import CliRunner

    from preemptlog.cli import app
    from preemptlog.errors import ExitCode

    def code(*paths):
        res = CliRunner().invoke(
            app, ["analyze", "--year", "2025", "--tz", "UTC", "-f", "ndjson", *[str(p) for p in paths]]
        )
        return res.exit_code

    data = hand.read_bytes()
    assert code(hand) == ExitCode.OK
    assert code(write(tmp_path / "hole.log", b"\x00" * 100 + data)) == ExitCode.PARTIAL
    assert code(write(tmp_path / "cut.log", data[:-2])) == ExitCode.PARTIAL  # a JSON line needs its } too
    big = text(hand_log("v08", "v1", steps=3000))  # several 128 KB zstd blocks: half of them decompress
    blob = zstandard.ZstdCompressor().compress(big)
    assert code(write(tmp_path / "cut.log.zst", blob[: len(blob) // 2])) == ExitCode.PARTIAL
    assert code(write(tmp_path / "tiny.log.zst", blob[:20])) == ExitCode.INPUT
    assert code(hand, "--tz", "+05:30") == ExitCode.OK


def test_v0_restart_with_equal_counter_is_a_new_run(tmp_path):
    """A restarted V0 server whose first counter value equals the last one of the previous run."""
    a = hand_log("v08", "v0", steps=3, first_id=0)  # one warning, counter 1
    b = hand_log("v08", "v0", steps=3, start=T0 + timedelta(hours=2), first_id=0)  # the same line again
    ra = run([write(tmp_path / "a.log", text(a))])
    both = run([write(tmp_path / "v.log", text(a + b))])
    assert both.events.height == 2 * ra.events.height
    assert both.counters["v0"]["runs"] == 2


def test_real_logs_twice_in_one_file(real_log, tmp_path):
    """A real log with its start banner, then the same run again: twice its events and stats."""
    data = real_log.read_bytes()
    if b"server version " not in data and b"LLM engine" not in data:
        pytest.skip(f"{real_log.name}: no start banner")
    base = run([real_log])
    sep = b"" if data.endswith(b"\n") else b"\n"
    both = run([write(tmp_path / "v.log", data + sep + data)])
    assert both.events.height == 2 * base.events.height
    assert both.stats.height == 2 * base.stats.height
    ev = both.events.filter(pl.col("interval_start").is_not_null())
    assert ev.filter(pl.col("interval_start") > pl.col("interval_end")).height == 0


# ---------------------------------------------------------------- 6. log interval straddling the first scrape


def test_log_plus_its_scrapes_equals_the_truth(tmp_path):
    """A V1 log with Preemptions: N plus /metrics scrapes of the same counter count the truth once.

    The log's first counted interval [09:00:19, 09:00:29] straddles the first scrape (09:00:20,
    counter 0): its event happened after the scrape, so the counter's increase already holds it.
    """
    counts = [0, 14, 3, 0, 2, 5, 1, 4]  # the first of the 14 is placed at 09:00:19.71, before the scrape
    stats_t = [T0 + timedelta(seconds=19 + 10 * i) for i in range(len(counts))]
    lines = [BANNER_LINE] + [
        line("apiserver", t, "INFO", "loggers.py:123", V1_STATS.format(n=n)) for t, n in zip(stats_t, counts)
    ]
    scrapes = []
    ts = T0 + timedelta(seconds=20)
    while ts <= stats_t[-1] + timedelta(seconds=15):
        seen = sum(n for t, n in zip(stats_t, counts) if t <= ts)  # events happen just before their stats line
        scrapes += [
            f"# scrape {ts.strftime('%Y-%m-%dT%H:%M:%SZ')}",
            "# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.",
            "# TYPE vllm:num_preemptions_total counter",
            f'vllm:num_preemptions_total{{engine="0",model_name="m"}} {float(seen)}',
        ]
        ts += timedelta(seconds=15)
    write(tmp_path / "vllm.log", text(lines))
    write(tmp_path / "metrics.prom", text(scrapes))
    r = run([tmp_path])
    assert {f.kind for f in r.bundle.files} == {"vllm-log", "prometheus"}
    assert r.summary()["events"] == sum(counts)


# ---------------------------------------------------------------- 7. json output streams


def test_json_stream_is_the_document_byte_for_byte(tmp_path, hand):
    from preemptlog.render import jsonfmt

    for p in [hand, *sorted((FIXTURES / "golden").glob("*.log"))]:
        r = run([p], year=None, rules=True)
        buf = io.BytesIO()
        jsonfmt.write_json(r, buf)
        expect = json.dumps(jsonfmt.document(r), indent=2, ensure_ascii=False, default=str) + "\n"
        assert buf.getvalue() == expect.encode("utf-8"), p.name


def test_json_writer_takes_any_rows(tmp_path):
    from preemptlog.render.jsonfmt import write_document

    rows = ({"i": i, "s": f"x{i}\n", "l": [i]} for i in range(5))
    buf = io.BytesIO()
    write_document({"a": 1, "b": {"c": []}}, rows, buf)
    expect = {"a": 1, "b": {"c": []}, "events": [{"i": i, "s": f"x{i}\n", "l": [i]} for i in range(5)]}
    assert buf.getvalue().decode() == json.dumps(expect, indent=2) + "\n"
    buf = io.BytesIO()
    write_document({"a": 1}, iter(()), buf)
    assert json.loads(buf.getvalue()) == {"a": 1, "events": []}


# ---------------------------------------------------------------- 8. deep trees


def _remove_tree_without_recursion(root: Path) -> None:
    """Remove a tree of any depth or path length (shutil.rmtree and pytest's own clean-up
    of old temporary folders recurse once per level, and fail past PATH_MAX)."""
    if not root.exists():
        return
    stack: list[tuple[int, str]] = [(os.open(root, os.O_RDONLY), "")]
    while stack:
        fd, _ = stack[-1]
        child = None
        for entry in os.scandir(fd):
            if entry.is_dir(follow_symlinks=False):
                child = entry.name
                break
            os.unlink(entry.name, dir_fd=fd)
        if child is not None:
            stack.append((os.open(child, os.O_RDONLY, dir_fd=fd), child))
            continue
        os.close(fd)
        _, name = stack.pop()
        if stack:
            os.rmdir(name, dir_fd=stack[-1][0])
    os.rmdir(root)


@pytest.fixture
def deep_root(tmp_path):
    root = tmp_path / "deep"
    root.mkdir()
    yield root
    _remove_tree_without_recursion(root)


def test_tree_removal_helper_removes_every_level(tmp_path):
    root = tmp_path / "r"
    cur = root
    for _ in range(50):
        cur = cur / "d"
        cur.mkdir(parents=True)
        write(cur / "f.log", b"x\n")
    _remove_tree_without_recursion(root)
    assert not root.exists()


def test_folder_1000_levels_deep_is_read(deep_root, hand):
    cur = deep_root
    for _ in range(1000):
        cur = cur / "d"
        os.mkdir(cur)
    write(cur / hand.name, hand.read_bytes())
    assert event_keys(run([deep_root])) == event_keys(run([hand]))


def test_folder_too_deep_to_open_is_a_warning(deep_root, hand):
    """Past PATH_MAX a folder cannot be listed by its path: a warning (exit 5), the rest is read."""
    root = deep_root
    write(root / hand.name, hand.read_bytes())
    fd = os.open(root, os.O_RDONLY)
    try:
        for _ in range(40):  # 40 x 201 bytes: past PATH_MAX (4096), made relative to each parent
            os.mkdir("d" * 200, dir_fd=fd)
            nxt = os.open("d" * 200, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = nxt
        with open(os.open("x.log", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "wb") as fh:
            fh.write(hand.read_bytes())
    finally:
        os.close(fd)
    r = run([root])
    assert event_keys(r) == event_keys(run([hand]))
    assert r.partial and any("cannot list folder" in w for w in r.warnings)


def test_archive_member_nested_too_deep_is_skipped_with_a_warning(tmp_path, hand):
    arc = tmp_path / "b.tar.gz"
    data = hand.read_bytes()
    with tarfile.open(arc, "w:gz") as tf:
        for name in (hand.name, "/".join(["d"] * 600) + "/x.log"):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    r = run([arc])
    assert r.partial and any("folders deep" in w for w in r.warnings)
    assert r.summary()["events"] == run([hand]).summary()["events"]


# ---------------------------------------------------------------- 9. request identity


# Two servers whose logs hold the same lines (ids reused), as two servers write them: b's from other
# processes (pid 5121, where the family prints one) and with a line of its own (it listens on another
# port; a real log: uvicorn's start line). A byte-for-byte copy is one file found twice, read once (below).


def other_server(family: str, engine: str) -> bytes:
    lines = hand_log(family, engine, pid=5121)
    own = line(family, T0, "INFO", "api_server.py:1806", "non-default args: {'port': 8001}", pid=5121)
    return text([lines[0], own, *lines[1:]])


def other_server_of(log: bytes) -> bytes:
    renumbered = re.sub(rb"pid=(\d+)", lambda m: b"pid=" + str(int(m.group(1)) + 1000).encode(), log)
    return b"INFO:     Started server process [5121]\n" + renumbered


def test_two_copies_of_a_log_double_requests_received(hand, tmp_path):
    base = run([hand]).summary()
    family, engine = hand.stem.rsplit("-", 1)
    for d, data in (("a", hand.read_bytes()), ("b", other_server(family, engine))):
        (tmp_path / d).mkdir()
        write(tmp_path / d / "vllm.log", data)
    s = run([tmp_path / "a", tmp_path / "b"]).summary()
    assert s["requests_received"] == 2 * base["requests_received"]
    assert s["events"] == 2 * base["events"]
    assert s["preemption_rate"] == base["preemption_rate"]
    assert s["requests_preempted_more_than_once"] == []


def test_two_copies_of_a_real_log_double_requests_received(real_log, tmp_path):
    base = run([real_log]).summary()
    for d, data in (("a", real_log.read_bytes()), ("b", other_server_of(real_log.read_bytes()))):
        (tmp_path / d).mkdir()
        write(tmp_path / d / real_log.name, data)
    s = run([tmp_path / "a", tmp_path / "b"]).summary()
    assert s["requests_received"] == 2 * base["requests_received"]
    assert s["count_visible"] == base["count_visible"]
    if base["count_visible"]:
        assert s["events"] == 2 * base["events"]
    else:  # a stock V1 log counts nothing: two copies of it still count nothing
        assert s["events"] is None


def test_a_byte_for_byte_copy_of_a_log_is_read_once(hand, tmp_path):
    base = run([hand])
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        write(tmp_path / d / "vllm.log", hand.read_bytes())
    r = run([tmp_path / "a", tmp_path / "b"])
    assert signature(r) == signature(base)
    said = [w for w in r.warnings if "the same bytes" in w]
    assert len(said) == 1 and said[0].endswith("a/vllm.log: also found as b/vllm.log (the same bytes): read once")


def test_same_sequence_group_on_two_ray_workers_is_two_requests(tmp_path):
    t = T0
    lines = [
        f"(RayWorkerWrapper pid={pid}) "
        + line(
            "v04", t + timedelta(seconds=i), "WARNING", "scheduler.py:1057", V0_WARN.format(rid=63, n=1 + 50 * (i // 2))
        )
        for i, pid in enumerate([11, 22, 11, 22])
    ]
    r = run([write(tmp_path / "v.log", text(lines))])
    rep = r.summary()["requests_preempted_more_than_once"]
    assert [(x["request_id"], x["process"]) for x in rep] == [
        ("63", "RayWorkerWrapper pid=11"),
        ("63", "RayWorkerWrapper pid=22"),
    ]
    one = run([write(tmp_path / "w.log", text(lines[:1] + lines[2:3]))]).summary()["requests_preempted_more_than_once"]
    assert one[0]["request_id"] == "63" and one[0]["count"] == 2


# ---------------------------------------------------------------- 10. DST: intervals never inverted


@pytest.mark.parametrize(
    "zone,start",
    [
        ("America/New_York", datetime(2025, 11, 2, 5, 0, tzinfo=UTC)),  # fall back at 06:00 UTC
        ("Europe/Berlin", datetime(2025, 10, 26, 0, 0, tzinfo=UTC)),  # fall back at 01:00 UTC
        ("America/New_York", datetime(2025, 3, 9, 6, 0, tzinfo=UTC)),  # spring forward at 07:00 UTC
        ("Europe/Berlin", datetime(2025, 3, 30, 0, 30, tzinfo=UTC)),  # spring forward at 01:00 UTC
        ("Australia/Lord_Howe", datetime(2025, 4, 5, 14, 0, tzinfo=UTC)),  # a half-hour fall back
    ],
)
@pytest.mark.parametrize("family", ["v08", "apiserver", "v04", "iso", "json"])
@pytest.mark.parametrize("engine", ["v1", "v0"])
def test_dst_local_log_reads_back_the_true_instants(tmp_path, zone, start, family, engine):
    """A log written in local time across a DST change reads back as the same log written in UTC."""
    z = ZoneInfo(zone)
    steps = 900  # 2.5 hours, one line set every 10 s: across the change and the whole repeated hour
    local = run([write(tmp_path / "l.log", text(hand_log(family, engine, start=start, steps=steps, tz=z)))], tz=zone)
    utc = run([write(tmp_path / "u.log", text(hand_log(family, engine, start=start, steps=steps)))], tz="UTC")
    assert event_keys(local) == event_keys(utc)
    ev = local.events.filter(pl.col("interval_start").is_not_null())
    assert ev.filter(pl.col("interval_start") > pl.col("interval_end")).height == 0


def test_clock_going_back_never_inverts_an_interval(tmp_path):
    a = hand_log("v08", "v1", steps=5)
    b = hand_log("v08", "v1", steps=5, start=T0 - timedelta(minutes=30), banner=False)
    r = run([write(tmp_path / "v.log", text(a + b))])
    ev = r.events.filter(pl.col("interval_start").is_not_null())
    assert ev.height and ev.filter(pl.col("interval_start") > pl.col("interval_end")).height == 0
