"""The logs' zone found from a counter's ``_created`` (events/zonefit.py), on hand-written bundles.

A log has no zone; a /metrics scrape's ``_created`` and its reading times are exact. When the log
is read in the wrong zone (the analyst's machine is not the server's), the engine start the
counter dates falls outside the log's start-up and the count becomes a "baseline". These bundles
are written by hand in several shapes; each is analysed through the CLI (a subprocess, with the
machine's zone set by ``TZ``) and compared with the same bundle read in its true zone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

# The engine start (_created) and the scrape, exact instants.
CREATED = datetime(2025, 3, 4, 6, 9, 2, 400000, tzinfo=UTC)


def _v1_log(
    zone: timezone,
    *,
    start_line: bool = True,
    load_s: int = 27,
    serve_after_s: int = 8,
    restart_at: datetime | None = None,
) -> str:
    """A vLLM 0.10 V1 server's log written in ``zone``: its start, the engine start (``CREATED`` lies
    ``load_s`` seconds after the start line), serving with stats lines at a full KV cache."""

    def at(t: datetime) -> str:
        return t.astimezone(zone).strftime("%m-%d %H:%M:%S")

    t0 = CREATED - timedelta(seconds=load_s)
    lines = []
    if start_line:
        lines += [
            f"INFO {at(t0)} [api_server.py:1918] vLLM API server version 0.10.0",
            f"INFO {at(t0)} [utils.py:326] non-default args: {{'model': 'm', 'max_num_seqs': 64}}",
            f"INFO {at(t0 + timedelta(seconds=5))} [core.py:74] Initializing a V1 LLM engine (v0.10.0) with config: "
            "model='m', max_seq_len=4096, enable_prefix_caching=True",
            f"INFO {at(CREATED - timedelta(seconds=1))} [core.py:193] init engine (profile, create kv cache, warmup "
            "model) took 18.21 seconds",
        ]
    t = CREATED + timedelta(seconds=serve_after_s)
    for i in range(12):
        usage = 99.0 if 3 <= i <= 8 else 60.0
        waiting = 7 if 3 <= i <= 8 else 0
        lines.append(
            f"INFO {at(t)} [loggers.py:122] Engine 000: Avg prompt throughput: 900.0 tokens/s, Avg generation "
            f"throughput: 400.0 tokens/s, Running: 30 reqs, Waiting: {waiting} reqs, GPU KV cache usage: "
            f"{usage}%, Prefix cache hit rate: 0.0%"
        )
        t += timedelta(seconds=10)
    if restart_at is not None:
        lines += [
            f"INFO {at(restart_at)} [api_server.py:1918] vLLM API server version 0.10.0",
            f"INFO {at(restart_at + timedelta(seconds=20))} [core.py:74] Initializing a V1 LLM engine (v0.10.0) "
            "with config: model='m', max_seq_len=4096, enable_prefix_caching=True",
            f"INFO {at(restart_at + timedelta(seconds=40))} [loggers.py:122] Engine 000: Avg prompt throughput: "
            "10.0 tokens/s, Avg generation throughput: 4.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV "
            "cache usage: 1.0%, Prefix cache hit rate: 0.0%",
        ]
    return "\n".join(lines) + "\n"


def _scrape(value: int = 37, created: datetime = CREATED, sample_ts: datetime | None = None) -> str:
    ts = "" if sample_ts is None else f" {int(sample_ts.timestamp() * 1000)}"
    return (
        "# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.\n"
        "# TYPE vllm:num_preemptions_total counter\n"
        f'vllm:num_preemptions_total{{engine="0",model_name="m"}} {value}.0{ts}\n'
        "# HELP vllm:num_preemptions_created Cumulative number of preemption from the engine.\n"
        "# TYPE vllm:num_preemptions_created gauge\n"
        f'vllm:num_preemptions_created{{engine="0",model_name="m"}} {created.timestamp()}{ts}\n'
    )


def _bundle(root: Path, zone: timezone, *, read: datetime | None = None, by: str = "name", **log: object) -> Path:
    """A folder: the log written in ``zone`` and one scrape read at ``read``, dated ``by`` its file
    name (epoch seconds), its sample timestamps or its file's mtime."""
    root.mkdir(parents=True)
    (root / "vllm.log").write_text(_v1_log(zone, **log))  # type: ignore[arg-type]
    read = read or CREATED + timedelta(minutes=2)
    if by == "name":
        (root / f"metrics-{int(read.timestamp())}.prom").write_text(_scrape())
    elif by == "samples":
        (root / "metrics.prom").write_text(_scrape(sample_ts=read))
    else:
        (root / "metrics.prom").write_text(_scrape())
        os.utime(root / "metrics.prom", (read.timestamp(), read.timestamp()))
    return root


def _analyze(path: Path, machine_tz: str, *args: str) -> dict:
    env = {**os.environ, "TZ": machine_tz, "PREEMPTLOG_FORMAT": "json"}
    p = subprocess.run(
        [sys.executable, "-m", "preemptlog", "analyze", str(path), "-f", "json", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert p.returncode in (0, 1), p.stderr
    assert "Traceback" not in p.stderr
    return json.loads(p.stdout)["summary"]


def _zone(s: dict) -> dict:
    return next(a for a in s["assumptions"] if a["topic"] == "zone")


def _answer(s: dict) -> tuple:
    """What must not depend on the zone the log was read in: the count, its gates and confidence,
    the log's span as instants, the pressure seen."""
    span = s["log_span"]
    instants = tuple(datetime.fromisoformat(span[k]).astimezone(UTC) for k in ("start", "end") if span.get(k))
    return (s["events"], s["by_gate"], s["by_confidence"], instants, len(s["pressure_intervals"]))


SHANGHAI = timezone(timedelta(hours=8))
KOLKATA = timezone(timedelta(hours=5, minutes=30))


@pytest.mark.parametrize(
    ("written", "machine", "zone"),
    [
        (SHANGHAI, "UTC", "+08:00"),  # a server's local-time log read on a UTC runner
        (UTC, "Asia/Shanghai", "UTC"),  # a UTC container's log read on a laptop in Shanghai
        (KOLKATA, "America/New_York", "+05:30"),  # a half-hour zone, a machine west of UTC
    ],
)
def test_a_log_read_in_the_wrong_zone_is_read_in_the_zone_its_engine_start_gives(tmp_path, written, machine, zone):
    b = _bundle(tmp_path / "b", written)
    truth = _analyze(b, machine, "--tz", zone)
    got = _analyze(b, machine)
    assert got["timezone"] == zone
    z = _zone(got)
    assert z["value"] == zone
    assert "_created" in z["source"] and "metrics-" in z["source"] and "vllm.log:" in z["source"], z
    assert _answer(got) == _answer(truth)
    assert got["events"] == 37 and got["headline"].startswith("37 preemptions since the engine started")


@pytest.mark.parametrize("by", ["samples", "mtime"])
def test_sample_timestamps_and_the_mtime_are_reading_times_too(tmp_path, by):
    b = _bundle(tmp_path / "b", SHANGHAI, by=by)
    got = _analyze(b, "UTC")
    assert got["timezone"] == "+08:00"
    assert _answer(got) == _answer(_analyze(b, "UTC", "--tz", "+08:00"))


def test_a_copied_scrape_whose_mtime_is_days_later_dates_nothing(tmp_path):
    b = _bundle(tmp_path / "b", SHANGHAI, by="mtime", read=CREATED + timedelta(days=2, hours=1))
    got = _analyze(b, "UTC")
    assert "_created" not in _zone(got)["source"]


def test_the_assumed_zone_stays_when_it_already_holds_the_engine_start(tmp_path):
    b = _bundle(tmp_path / "b", SHANGHAI)
    got = _analyze(b, "Asia/Shanghai")
    assert got["timezone"] == "Asia/Shanghai"
    assert "this machine's local zone" in _zone(got)["source"]
    assert got["events"] == 37


def test_tz_and_offset_given_by_the_user_win(tmp_path):
    b = _bundle(tmp_path / "b", SHANGHAI)
    given = _analyze(b, "UTC", "--tz", "UTC")
    assert given["timezone"] == "UTC" and _zone(given)["source"].startswith("--tz")
    moved = _analyze(b, "UTC", "--offset", "prometheus=+8h")
    assert moved["timezone"] == "Etc/UTC" or moved["timezone"] == "UTC"
    assert "_created" not in _zone(moved)["source"]


def test_no_start_up_in_the_log_no_zone_found(tmp_path):
    """A log cut after its start: nothing dates the log against the counter; the mismatch is said
    (sources/meets.py), the zone is not changed."""
    b = _bundle(tmp_path / "b", SHANGHAI, start_line=False)
    got = _analyze(b, "UTC")
    assert "_created" not in _zone(got)["source"]
    assert any("zone mismatch" in w for w in got["warnings"]), got["warnings"]


@pytest.mark.parametrize("load_s", [470, 1000])
def test_a_start_up_longer_than_a_quarter_hour_dates_nothing(tmp_path, load_s):
    """A start-up of 15 minutes or more holds the engine start after more than one zone shift, or
    after one only by where in it the start lies: too weak to change the zone."""
    b = _bundle(tmp_path / "b", SHANGHAI, load_s=load_s, serve_after_s=480)
    got = _analyze(b, "UTC")
    assert "_created" not in _zone(got)["source"]


def test_a_scrape_read_while_the_log_ran_is_no_zone_mismatch(tmp_path):
    """The counter's engine started before the log (a baseline), and by chance a restart the log
    shows lies a whole number of hours after it; the scrape was read while the log ran, so the zone
    as read is kept."""
    restart = CREATED + timedelta(hours=3, seconds=-10)
    b = _bundle(tmp_path / "b", UTC, read=CREATED + timedelta(minutes=2), restart_at=restart, start_line=False)
    got = _analyze(b, "UTC")
    assert got["timezone"] in ("UTC", "Etc/UTC")
    assert "_created" not in _zone(got)["source"]


def test_a_scrape_read_long_after_the_log_dates_nothing(tmp_path):
    """The scrape meets the log neither as read nor moved: no zone is found from it."""
    b = _bundle(tmp_path / "b", SHANGHAI, read=CREATED + timedelta(days=3))
    got = _analyze(b, "UTC")
    assert "_created" not in _zone(got)["source"]


def test_a_log_with_zoned_lines_is_never_moved(tmp_path):
    """Lines that carry their own offset are read by it, whatever zone is assumed: a collector that
    stamps local wall time with a ``Z`` (8 h off the counter) is not fixed by a zone."""
    root = tmp_path / "b"
    _bundle(root, SHANGHAI)
    log = root / "vllm.log"
    stamped = []
    for line in log.read_text().splitlines():
        wall = datetime.strptime("2025-" + line.split(" [")[0].split(" ", 1)[1], "%Y-%m-%d %H:%M:%S")
        stamped.append(wall.strftime("%Y-%m-%dT%H:%M:%S.000000000Z ") + line)
    log.write_text("\n".join(stamped) + "\n")
    got = _analyze(root, "UTC")
    # every time read states its offset (the lines' Z, the scrape's epoch name): no zone is assumed at all
    assert [a for a in got["assumptions"] if a["topic"] == "zone"] == []


def test_an_sglang_log_and_its_counter(tmp_path):
    """SGLang's start is its ``server_args=`` line; its counters have ``_created`` too."""
    root = tmp_path / "b"
    root.mkdir()

    def at(t: datetime) -> str:
        return t.astimezone(SHANGHAI).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]

    t0 = CREATED - timedelta(seconds=40)
    lines = [f"[{at(t0)}] server_args=ServerArgs(model_path='q', tp_size=1, mem_fraction_static=0.88)"]
    for i in range(6):
        t = CREATED + timedelta(seconds=10 + 5 * i)
        lines.append(
            f"[{at(t)} TP0] Decode batch, #running-req: 250, #token: 299000, token usage: 0.99, "
            "gen throughput (token/s): 5120.44, #queue-req: 40"
        )
    t = CREATED + timedelta(seconds=41)
    lines.append(
        f"[{at(t)} TP0] KV cache pool is full. Retract requests. #retracted_reqs: 3, #new_token_ratio: 0.1 -> 0.2"
    )
    (root / "sglang.log").write_text("\n".join(lines) + "\n")
    read = CREATED + timedelta(minutes=3)
    (root / f"metrics-{int(read.timestamp())}.prom").write_text(
        "# TYPE sglang:num_retracted_requests counter\n"
        'sglang:num_retracted_requests_total{model_name="q"} 3.0\n'
        f'sglang:num_retracted_requests_created{{model_name="q"}} {CREATED.timestamp()}\n'
    )
    got = _analyze(root, "UTC")
    assert got["timezone"] == "+08:00", _zone(got)
    assert "sglang.log:1" in _zone(got)["source"]
    assert _answer(got) == _answer(_analyze(root, "UTC", "--tz", "+08:00"))


# ---- attacks: shapes the first version got wrong -------------------------------------------------


def _run(zone: timezone, created: datetime, *, stats: int = 6, load_s: int = 27) -> list[str]:
    """One server run of a V1 log written in ``zone``: its start ``load_s`` seconds before the engine
    start ``created``, then stats lines every 10 s from 8 s after it."""

    def at(t: datetime) -> str:
        return t.astimezone(zone).strftime("%m-%d %H:%M:%S")

    t0 = created - timedelta(seconds=load_s)
    lines = [
        f"INFO {at(t0)} [api_server.py:1918] vLLM API server version 0.10.0",
        f"INFO {at(t0)} [utils.py:326] non-default args: {{'model': 'm', 'max_num_seqs': 64}}",
        f"INFO {at(t0 + timedelta(seconds=5))} [core.py:74] Initializing a V1 LLM engine (v0.10.0) with config: "
        "model='m', max_seq_len=4096, enable_prefix_caching=True",
    ]
    for i in range(stats):
        t = created + timedelta(seconds=8 + 10 * i)
        lines.append(
            f"INFO {at(t)} [loggers.py:122] Engine 000: Avg prompt throughput: 900.0 tokens/s, Avg generation "
            f"throughput: 400.0 tokens/s, Running: 30 reqs, Waiting: {7 if i % 2 else 0} reqs, GPU KV cache usage: "
            f"{99.0 if i % 2 else 60.0}%, Prefix cache hit rate: 0.0%"
        )
    return lines


def _series(*readings: tuple[datetime, int, datetime | None]) -> str:
    """A scrape series in one file: ``# scrape <zoned time>`` separators, a counter and its ``_created``
    (None: a page without ``_created`` series)."""
    out = []
    for read, value, created in readings:
        out.append(f"# scrape {read.isoformat()}")
        out.append(f'vllm:num_preemptions_total{{engine="0",model_name="m"}} {value}.0')
        if created is not None:
            out.append(f'vllm:num_preemptions_created{{engine="0",model_name="m"}} {created.timestamp()}')
    return "\n".join(out) + "\n"


def test_a_log_across_the_machine_zones_dst_change_is_one_zone(tmp_path):
    """The machine's zone springs forward between two runs of a UTC log: read in it, the two start-ups
    are 5 h and 4 h off their engine starts, one zone (UTC) all the same."""
    c1 = datetime(2025, 3, 9, 1, 30, 2, 400000, tzinfo=UTC)  # 20:30 EST the day before
    c2 = datetime(2025, 3, 9, 4, 10, 7, 100000, tzinfo=UTC)  # 00:10 EDT
    root = tmp_path / "b"
    root.mkdir()
    (root / "vllm.log").write_text("\n".join(_run(UTC, c1, stats=12) + _run(UTC, c2, stats=12)) + "\n")
    (root / "metrics.prom").write_text(
        _series(
            (c1 + timedelta(minutes=1), 10, c1),
            (c1 + timedelta(minutes=2), 20, c1),
            (c2 + timedelta(minutes=1), 5, c2),
            (c2 + timedelta(minutes=2), 9, c2),
        )
    )
    got = _analyze(root, "America/New_York")
    assert got["timezone"] == "UTC", _zone(got)
    assert _answer(got) == _answer(_analyze(root, "America/New_York", "--tz", "UTC"))


def test_hourly_restarts_do_not_hide_the_zone(tmp_path):
    """A server restarted on the hour (cron): each engine start also lies in the next or previous
    start-up an hour off; the one zone that places every start is the logs' zone."""
    c1 = CREATED
    c2 = CREATED + timedelta(hours=1, seconds=1)
    root = tmp_path / "b"
    root.mkdir()
    (root / "vllm.log").write_text("\n".join(_run(SHANGHAI, c1) + _run(SHANGHAI, c2)) + "\n")
    (root / "metrics.prom").write_text(
        _series(
            (c1 + timedelta(minutes=1), 3, c1), (c2 + timedelta(minutes=1), 2, c2), (c2 + timedelta(minutes=2), 6, c2)
        )
    )
    got = _analyze(root, "UTC")
    assert got["timezone"] == "+08:00", _zone(got)
    assert _answer(got) == _answer(_analyze(root, "UTC", "--tz", "+08:00"))


def test_a_nightly_restart_a_day_later_does_not_hide_the_zone(tmp_path):
    """A restart at the same time the next day puts the engine start in that start-up too, a day (no
    zone) off: only shifts a zone can make count."""
    c2 = CREATED + timedelta(days=1, seconds=3)
    root = tmp_path / "b"
    root.mkdir()
    (root / "vllm.log").write_text("\n".join(_run(SHANGHAI, CREATED) + _run(SHANGHAI, c2)) + "\n")
    read = CREATED + timedelta(minutes=1)
    (root / f"metrics-{int(read.timestamp())}.prom").write_text(_scrape(value=4))
    got = _analyze(root, "UTC")
    assert got["timezone"] == "+08:00", _zone(got)


def test_a_scrape_read_while_the_log_ran_keeps_the_zone_whatever_another_scrape_says(tmp_path):
    """The truth is the assumed zone: the log is a run that ended before a restart it does not show;
    a scrape taken after that restart dates an engine start that, by chance, lies a whole number of
    hours after the log's start-up. Another scrape of the bundle (no ``_created``) was read while the
    log ran: the logs are read in the zone assumed."""
    root = tmp_path / "b"
    root.mkdir()
    (root / "vllm.log").write_text("\n".join(_run(UTC, CREATED, stats=60)) + "\n")
    later = CREATED + timedelta(hours=3, seconds=5)
    (root / "after").mkdir()
    read = later + timedelta(minutes=3)
    (root / "after" / f"metrics-{int(read.timestamp())}.prom").write_text(_scrape(value=4, created=later))
    (root / "during.prom").write_text(_series((CREATED + timedelta(minutes=5), 30, None)))
    got = _analyze(root, "UTC")
    assert got["timezone"] in ("UTC", "Etc/UTC"), _zone(got)
    assert "_created" not in _zone(got)["source"]


def test_no_library_warning_from_the_zone_check(tmp_path):
    """Worker processes (fleet run) do not silence library warnings: the zone check makes none."""
    b = _bundle(tmp_path / "b", SHANGHAI)
    env = {**os.environ, "TZ": "UTC"}
    p = subprocess.run(
        [sys.executable, "-m", "preemptlog", "analyze", str(b), "-f", "json", "--debug"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert "zonefit.py" not in p.stderr, p.stderr


def test_a_query_range_answer_around_the_log_counts_its_every_sample_time(tmp_path):
    """A Prometheus API answer over the hours around the log (its first and last sample far from the
    log, its others while the log ran) was read while the log ran as read: the zone assumed stays,
    whatever a stray scrape of a later restart lines up with."""
    root = tmp_path / "b"
    root.mkdir()
    (root / "vllm.log").write_text("\n".join(_run(UTC, CREATED, stats=60)) + "\n")
    later = CREATED + timedelta(hours=3, seconds=5)
    read = later + timedelta(minutes=3)
    (root / "after").mkdir()
    (root / "after" / f"metrics-{int(read.timestamp())}.prom").write_text(_scrape(value=4, created=later))
    t0 = int((CREATED - timedelta(hours=1)).timestamp())
    values = [[t0 + 60 * i, "30"] for i in range(121)]
    answer = {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [
                {
                    "metric": {"__name__": "vllm:num_requests_running", "engine": "0", "model_name": "m"},
                    "values": values,
                }
            ],
        },
    }
    (root / "running.json").write_text(json.dumps(answer) + "\n")
    got = _analyze(root, "UTC")
    assert got["timezone"] in ("UTC", "Etc/UTC"), _zone(got)


def test_walls_in_the_machine_zones_spring_forward_gap_give_no_wrong_zone(tmp_path):
    """A UTC log whose wall times fall in New York's spring-forward gap (02:00-03:00 on 2025-03-09),
    read in New York: a gap wall is read as standard time, the same instant as an hour later on the
    summer clock, so the instant no longer says which wall the line printed. The start-up then lies
    over the engine start in two zones an hour apart (UTC, the truth, and +01:00): no zone is taken
    from it."""
    c = datetime(2025, 3, 9, 2, 30, 2, 400000, tzinfo=UTC)
    root = tmp_path / "b"
    root.mkdir()
    (root / "vllm.log").write_text("\n".join(_run(UTC, c, stats=12)) + "\n")
    read = c + timedelta(minutes=2)
    (root / f"metrics-{int(read.timestamp())}.prom").write_text(_scrape(created=c))
    got = _analyze(root, "America/New_York")
    assert got["timezone"] in ("UTC", "America/New_York"), _zone(got)


def _run_log(start: datetime, kv_at: datetime, serve_at: datetime) -> str:
    """A UTC V1 log of one run: its start line, a model load, the KV cache line, then stats lines."""

    def at(t: datetime) -> str:
        return t.strftime("%m-%d %H:%M:%S")

    lines = [
        f"INFO {at(start)} [api_server.py:1918] vLLM API server version 0.10.0",
        f"INFO {at(start + timedelta(seconds=5))} [core.py:74] Initializing a V1 LLM engine (v0.10.0) with config: "
        "model='m', max_seq_len=4096",
        f"(EngineCore_0 pid=9) INFO {at(kv_at)} [kv_cache_utils.py:829] GPU KV cache size: 123,456 tokens",
    ]
    t = serve_at
    for _ in range(12):
        lines.append(
            f"INFO {at(t)} [loggers.py:122] Engine 000: Avg prompt throughput: 900.0 tokens/s, Avg generation "
            "throughput: 400.0 tokens/s, Running: 30 reqs, Waiting: 7 reqs, GPU KV cache usage: 99.0%, "
            "Prefix cache hit rate: 0.0%"
        )
        t += timedelta(seconds=10)
    return "\n".join(lines) + "\n"


def test_an_engine_start_during_the_model_load_is_no_start_of_its_engine(tmp_path):
    """The counters are made once the KV cache is: a start-up runs from its last configuration line
    (the KV cache size) to its first serving line, not from the start line. A scrape of another run
    (a restart 3 h later the log does not show) whose _created lies, 3 h off, in the model load of
    the log's start-up gives no zone."""
    start = datetime(2025, 3, 4, 6, 0, 0, tzinfo=UTC)
    root = tmp_path / "b"
    root.mkdir()
    (root / "vllm.log").write_text(_run_log(start, start + timedelta(seconds=540), start + timedelta(seconds=550)))
    other = start + timedelta(hours=3, minutes=4)  # 3 h after a wall time in the model load
    read = other + timedelta(minutes=2)
    (root / f"metrics-{int(read.timestamp())}.prom").write_text(_scrape(created=other))
    got = _analyze(root, "UTC")
    assert "_created" not in _zone(got)["source"], _zone(got)
    # the same scrape 3 h after the KV cache line: that is the log's zone off by 3 h
    moved = tmp_path / "m"
    moved.mkdir()
    (moved / "vllm.log").write_text((root / "vllm.log").read_text())
    mine = start + timedelta(hours=3, seconds=543)
    (moved / f"metrics-{int((mine + timedelta(minutes=1)).timestamp())}.prom").write_text(_scrape(created=mine))
    found = _analyze(moved, "UTC")
    assert found["timezone"] == "-03:00" and "vllm.log:3" in _zone(found)["source"], _zone(found)


def test_a_log_whose_mtime_is_its_last_line_keeps_the_assumed_zone(tmp_path):
    """A scrape of another run whose _created lies, by chance, whole hours from the log's start-up:
    the log file's own last write (its mtime, exact) is its last line's time as read, so the log is
    read in the right zone and no zone is found from the scrape."""
    start = datetime(2025, 3, 4, 6, 0, 0, tzinfo=UTC)
    root = tmp_path / "b"
    root.mkdir()
    log = root / "vllm.log"
    serve = start + timedelta(seconds=40)
    log.write_text(_run_log(start, start + timedelta(seconds=30), serve))
    other = start + timedelta(hours=3, seconds=33)  # in the start-up, 3 h off
    (root / f"metrics-{int((other + timedelta(minutes=1)).timestamp())}.prom").write_text(_scrape(created=other))
    copied = _analyze(root, "UTC")  # a copy's mtime says nothing: the coincidence is read as a zone
    assert copied["timezone"] == "-03:00"
    last = serve + timedelta(seconds=110)
    os.utime(log, (last.timestamp() + 0.4, last.timestamp() + 0.4))
    kept = _analyze(root, "UTC")
    assert kept["timezone"] in ("UTC", "Etc/UTC") and "_created" not in _zone(kept)["source"], _zone(kept)


def test_an_offset_of_a_source_the_bundle_does_not_hold_leaves_the_zone_check_on(tmp_path):
    """fleet gives one set of options to every bundle: an --offset for dmon on a bundle without a dmon
    capture moves nothing, so the zone is still found; one that moves the log or the scrape is the
    user's clock setting."""
    b = _bundle(tmp_path / "b", SHANGHAI)
    got = _analyze(b, "UTC", "--offset", "dmon=-2s")
    assert got["timezone"] == "+08:00"
    kept = _analyze(b, "UTC", "--offset", "vllm-log=+1s")
    assert "_created" not in _zone(kept)["source"]
