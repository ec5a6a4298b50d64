"""Every /metrics value is cited at its own sample's line.

A scrape holds each gauge and counter on a line of its own. The series frame (``prom_series``, one
row per scrape and engine) kept one line per scrape, the smallest (often the preemption counter's),
and the stall finding, the joiner's ``prom_*`` evidence, ``up_kv_max_before`` and the pressure
intervals cited that line for every gauge: ``vllm:num_requests_waiting_by_reason{reason="capacity"}
26 (metrics-....prom:3)`` where line 3 is ``vllm:num_preemptions_total``. Now each value carries its
own sample's line (``<gauge>_line``), and a maximum is cited where it was read. The checks read the
cited line back and compare its metric with the one the figure names (hand-written inputs).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl

from preemptlog import AnalyzeOptions, analyze
from preemptlog.sources.prometheus import PROM_SERIES_SCHEMA
from preemptlog.sources.prometheus.names import canonical_name, metrics

YEAR = 2025
T0 = datetime(YEAR, 12, 1, 10, 0, 0, tzinfo=UTC)
LAB = '{engine="0",model_name="m"}'
SRC_RE = re.compile(r"([^\s;()]+\.prom):(\d+)")


def _stats(s: int, waiting: int = 26, deferred: int = 0) -> str:
    d = f"Deferred: {deferred} reqs, " if deferred else ""
    return (
        f"(APIServer pid=1) INFO {(T0 + timedelta(seconds=s)):%m-%d %H:%M:%S} [loggers.py:257] Engine 000: Avg "
        "prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 0 reqs, Waiting: "
        f"{waiting} reqs, {d}GPU KV cache usage: 0.0%, Prefix cache hit rate: 0.0%"
    )


def _log(d: Path, lines: list[str]) -> None:
    head = f"(APIServer pid=1) INFO {T0:%m-%d %H:%M:%S} [api_server.py:1772] vLLM API server version 0.34.0"
    (d / "vllm.log").write_text("\n".join([head, *lines]) + "\n")


def _reason(reason: str, value: float) -> str:
    return f'vllm:num_requests_waiting_by_reason{{engine="0",model_name="m",reason="{reason}"}} {value}'


def _wedge_scrape(capacity: float = 26.0) -> str:
    """The reported shape: the counter (line 3) first, the capacity gauge at line 7."""
    return "\n".join(
        [
            "# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.",
            "# TYPE vllm:num_preemptions_total counter",
            f"vllm:num_preemptions_total{LAB} 5.0",
            f"vllm:num_preemptions_created{LAB} {(T0 - timedelta(minutes=20)).timestamp()}",
            "# HELP vllm:num_requests_waiting_by_reason Number of requests waiting, by reason.",
            "# TYPE vllm:num_requests_waiting_by_reason gauge",
            _reason("capacity", capacity),
            _reason("deferred", 0.0),
            f"vllm:num_requests_running{LAB} 0.0",
            f"vllm:num_requests_waiting{LAB} {capacity}",
            f"vllm:kv_cache_usage_perc{LAB} 0.0",
        ]
    )


def _epoch_bundle(tmp_path: Path, capacities: list[float]) -> tuple[Path, list[str]]:
    """A 0.34 log of a wedged engine and ``metrics-<epoch>.prom`` scrapes within its span."""
    d = tmp_path / "wedge"
    d.mkdir()
    _log(d, [_stats(s) for s in range(10, 71, 10)])
    names = []
    for i, cap in enumerate(capacities):
        name = f"metrics-{int((T0 + timedelta(seconds=15 + 15 * i)).timestamp())}.prom"
        (d / name).write_text(_wedge_scrape(cap) + "\n")
        names.append(name)
    return d, names


def _run(d: Path):
    return analyze([str(d)], AnalyzeOptions(tz="UTC", year=YEAR))


def _line_of(d: Path, src: str) -> str:
    """The text of a cited ``<display>.prom:<n>`` (every file of these bundles lies in ``d``)."""
    m = SRC_RE.fullmatch(src)
    assert m, src
    return (d / Path(m.group(1)).name).read_text().splitlines()[int(m.group(2)) - 1]


def _metric(line: str) -> str:
    return canonical_name(line.split("{", 1)[0].split()[0])


def _cites(d: Path, src: str, metric: str, reason: str | None = None) -> bool:
    """Each ``file:line`` in ``src`` (``a; b``, ``a .. b``) is a sample of ``metric`` (and ``reason``)."""
    found = SRC_RE.findall(src)
    assert found, src
    for f, n in found:
        line = _line_of(d, f"{f}:{n}")
        if _metric(line) != metric or (reason is not None and f'reason="{reason}"' not in line):
            return False
    return True


def test_capacity_gauge_of_an_admission_wedge_is_cited_at_its_own_line(tmp_path: Path) -> None:
    d, names = _epoch_bundle(tmp_path, [26.0, 26.0])
    a = _run(d)
    stall = a.findings.stall
    cap = next(h for h in stall["holds"] if h["what"] == "capacity-wedge")
    first = names[0]
    assert cap["evidence"][0].endswith(f'reason="capacity"}} 26 (wedge/{first}:7)'), cap["evidence"]
    assert cap["evidence"][1].endswith(f"over wedge/{first}:11 .. wedge/{names[1]}:11"), cap["evidence"]
    # the summary and headline say the same
    np_ = a.summary()["not_a_preemption"]
    assert np_["holds"][0]["evidence"] == cap["evidence"]
    assert f"(wedge/{first}:7))" in a.summary()["headline"]
    # every citation of the scrape span reads back as the metric it cites
    (span,) = [s for s in stall["spans"] if s["source"] == "scrapes"]
    assert _cites(d, span["first_line"], "vllm:num_requests_waiting")
    assert _cites(d, span["last_line"], "vllm:num_requests_waiting")
    assert _cites(d, span["capacity_line"], "vllm:num_requests_waiting_by_reason", "capacity")
    assert _cites(d, f"{span['kv_first_line']} .. {span['kv_last_line']}", "vllm:kv_cache_usage_perc")
    for reading in span["counter_readings"]:
        assert _cites(d, reading, "vllm:num_preemptions_total")
    for hold in stall["holds"]:
        for ev in hold["evidence"]:
            metric = _metric(ev)
            reason = re.search(r'reason="(\w+)"', ev)
            assert _cites(d, ev, metric, reason.group(1) if reason else None), ev


def test_a_maximum_is_cited_where_it_was_read(tmp_path: Path) -> None:
    # capacity 3 then 26: the 26 reported is the second scrape's, not the first scrape above 0
    d, names = _epoch_bundle(tmp_path, [3.0, 26.0, 26.0])
    cap = next(h for h in _run(d).findings.stall["holds"] if h["what"] == "capacity-wedge")
    assert cap["evidence"][0].endswith(f'reason="capacity"}} 26 (wedge/{names[1]}:7)'), cap["evidence"]

    # the log's own ``Deferred: N reqs``: the largest, at its line (vllm.log:4), not the first above 0
    d2 = tmp_path / "deferred"
    d2.mkdir()
    _log(d2, [_stats(10, 5, 2), _stats(20, 9, 9), _stats(30, 9, 9), _stats(40, 9, 4)])
    stall = _run(d2).findings.stall
    (span,) = stall["spans"]
    assert (span["max_deferred"], span["deferred_line"]) == (9, "deferred/vllm.log:3")
    held = next(h for h in stall["holds"] if h["what"] == "deferred")
    assert held["evidence"] == ["Deferred: 9 reqs (deferred/vllm.log:3)"]


# prom_series column -> (metric field, reason label) of the sample it is read from
_FIELD = {
    "waiting_capacity": ("waiting_by_reason", "capacity"),
    "waiting_deferred": ("waiting_by_reason", "deferred"),
    "preemptions_total": ("preemptions", None),
}


def _scrapes_shuffled(t0: datetime, n: int, kv: list[float], waiting: list[int], counter: list[int]) -> str:
    """Scrapes whose samples come in a different order each time (the order of a real /metrics page
    is the registry's, not preemptlog's)."""
    out = []
    for i in range(n):
        rows = [
            f"vllm:num_preemptions_total{LAB} {counter[i]}.0",
            f"vllm:num_requests_running{LAB} {4 if i % 2 else 6}.0",
            f"vllm:num_requests_waiting{LAB} {waiting[i]}.0",
            f"vllm:num_requests_swapped{LAB} 0.0",
            _reason("capacity", float(waiting[i])),
            _reason("deferred", 1.0),
            f"vllm:gpu_cache_usage_perc{LAB} {kv[i] / 100}",
            f"vllm:cpu_cache_usage_perc{LAB} 0.0",
        ]
        k = i % len(rows)
        rows = rows[k:] + rows[:k]  # another order each scrape
        out += [f"# scrape {(t0 + timedelta(seconds=10 * i)).isoformat()}", "# TYPE vllm:num_preemptions_total counter"]
        out += rows
    return "\n".join(out) + "\n"


def test_each_series_value_carries_its_own_samples_line(tmp_path: Path) -> None:
    d = tmp_path / "scrapes"
    d.mkdir()
    n = 8
    (d / "metrics.prom").write_text(_scrapes_shuffled(T0, n, [50.0] * n, [0] * n, [0] * n))
    ps = _run(d).frames["prom_series"]
    assert ps.height == n
    known = metrics()
    cols = [c for c in PROM_SERIES_SCHEMA if c.endswith("_line") and c != "line"]
    assert len(cols) == 8
    lines = (d / "metrics.prom").read_text().splitlines()
    for row in ps.iter_rows(named=True):
        for col in cols:
            name = col.removesuffix("_line")
            field, reason = _FIELD.get(name, (name, None))
            text = lines[row[col] - 1]
            assert known[_metric(text)][0] == field, (col, row[col], text)
            assert reason is None or f'reason="{reason}"' in text, (col, text)


def test_event_evidence_and_pressure_cite_each_gauges_own_line(tmp_path: Path) -> None:
    # V0 (0.6): the log's preemption warnings (point events) and /metrics scrapes at the ceiling,
    # whose counter rises (interval events): both read the scraped gauges (joiner prom_*), and the
    # scrapes alone show the pressure (no stats lines)
    d = tmp_path / "v0"
    d.mkdir()
    warn = (
        "WARNING {t:%m-%d %H:%M:%S} scheduler.py:1560] Sequence group cmpl-{i} is preempted by "
        "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect the "
        "end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size to provide more "
        "KV cache memory. total_num_cumulative_preemption={i}"
    )
    (d / "vllm.log").write_text(
        "\n".join(
            [f"INFO {T0:%m-%d %H:%M:%S} api_server.py:706] vLLM API server version 0.6.3"]
            + [warn.format(t=T0 + timedelta(seconds=22 + 10 * i), i=i + 1) for i in range(3)]
        )
        + "\n"
    )
    n = 8
    (d / "metrics.prom").write_text(
        _scrapes_shuffled(
            T0, n, [96.0, 97.0, 99.0, 99.5, 99.0, 98.0, 97.0, 96.0], [3, 4, 5, 6, 5, 4, 3, 2], [0, 0, 1, 2, 3, 5, 5, 5]
        )
    )
    a = _run(d)
    ev = a.events.select("event_id").join(a.evidence, on="event_id")
    assert ev.height
    want = {
        "prom_kv_usage_max_src": "kv_usage",
        "prom_kv_usage_at_src": "kv_usage",
        "prom_waiting_at_src": "waiting",
        "prom_waiting_delta_src": "waiting",
        "prom_running_at_src": "running",
        "prom_running_delta_src": "running",
        "up_kv_max_before_src": "kv_usage",
    }
    known = metrics()
    checked = dict.fromkeys(want, 0)
    for row in ev.iter_rows(named=True):
        for col, field in want.items():
            src = row[col]
            if not src or ".prom:" not in src:
                continue
            for f, n_ in SRC_RE.findall(src):
                text = _line_of(d, f"{f}:{n_}")
                assert known[_metric(text)][0] == field, (row["event_id"], col, src, text)
            checked[col] += 1
    assert all(checked.values()), checked  # each column cited a scrape at least once

    piv = a.frames["pressure_intervals"].filter(pl.col("series") == "prometheus")
    assert piv.height
    for src in piv.get_column("evidence").explode().to_list():
        assert known[_metric(_line_of(d, src))][0] == "kv_usage", src  # the gauge that flags the scrape
