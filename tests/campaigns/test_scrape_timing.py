"""More evidence never coarsens the answer: a log whose own counts agree with its ``/metrics`` scrapes
keeps its timing (events/reconcile.py rule 1, events/agree.py).

The incidents of test_paths.py, hand-written: a vLLM 0.11.1 log whose stats lines carry
``Preemptions: N`` (kind ``interval``, ~10 s intervals) and a V0 0.6.3 log (two sampled warnings and
the 49 preemptions reconstructed between them), each alone and beside a series of scrapes of
``vllm:num_preemptions_total`` (every 30-40 s) in several shapes. When the log's counts and the
counter agree scrape interval by scrape interval, the answer with the scrapes is the log-alone answer
(its span, its events' times) with the counter's count; where they disagree (a lost stats line, a
clock offset) the counter stays authoritative and the disagreement is said. A DP=2 log beside per-engine
scrapes: each engine decided on its own. Driven through the CLI (``-f json``), as test_paths.py does.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest

from ..conftest import run_cli
from .test_paths import EPOCH, MODEL, T0, _hdr, bundle, metrics_shapes, v0_log, v1_log

# Stats line i of v1_log is at T0 + 30 + 10 i s: 12 preemptions counted in (50 s, 60 s], 18 in (60 s, 70 s].
PRE = {3: 12, 4: 18}
# The scrapes of test_paths.SCRAPES: the counter 0 at 25 s, 12 at 65 s, 30 at 95 s and 125 s. The log's
# (60 s, 70 s] straddles the scrape at 65 s: its 18 all fall after it, as the counter says.
V0_MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def full(path: Path) -> dict:
    """The CLI's answer on PATH (``-f json``, one run): test_paths.answer's keys (headline with paths as
    ``F:line``, count, quality, fixes, verdicts, exit) and the events' times, kinds and sources, the notes
    and the reconciliation's rule, disagreements, per-source entries and ``log_timing``."""
    out = run_cli("analyze", str(path), "--tz", "UTC", "-f", "json")
    assert out.stdout, out.stderr
    doc = json.loads(out.stdout)
    s = doc["summary"]
    rec = s["reconciliation"]
    events = doc["events"] or []
    return {
        "exit": out.returncode,
        "headline": re.sub(r"[^\s(),;]*[A-Za-z][^\s(),;]*:(\d+)", r"F:\1", s["headline"]),
        "total": rec["total"],
        "quality": rec["quality"],
        "fixes": [(f["option"], f["current"], f["suggested"], f["rank"]) for f in s.get("fixes") or []],
        "verdicts": Counter((e["gate"], e["sub_kind"], e["mechanism"], e["rule"]) for e in events),
        "times": sorted(e["time"] for e in events),
        "kinds": Counter(e["kind"] for e in events),
        "from": Counter((e["engine"], Path(e["source"]).name.split("-")[0]) for e in events),
        "first": s["first_event"],
        "last": s["last_event"],
        "rule": rec["rule"],
        "disagreements": rec["disagreements"],
        "sources": {x["source"]: x for x in rec["sources"]},
        "log_timing": rec.get("log_timing"),
        "notes": s["notes"],
    }


def _dated(root: Path) -> Path:
    """The log dated by its mtime (after the incident), as an on-call bundle's is: a year-less log takes
    its year from it, so the log alone and the log beside the scrapes share one calendar."""
    for f in root.iterdir():
        if f.name.endswith(".log"):
            os.utime(f, (EPOCH + 130, EPOCH + 130))
    return root


# ---------------------------------------------------------------- vLLM V1 0.11.1, Preemptions: N


def test_v1_fields_beside_scrapes_keep_the_logs_timing(tmp_path):
    """30 preemptions in 19 s alone; beside the scrapes (every shape) it was 30 in 67 s, the counter's
    40 s and 30 s intervals in place of the log's 10 s ones. The log's 12 + 18 fit the counter's +12
    and +18: the same 30, at the log's times, the count the counter's."""
    log = v1_log("0.11.1", preemptions=PRE)
    alone = full(_dated(bundle(tmp_path / "alone", {"vllm.log": log})))
    assert alone["headline"].startswith("30 preemptions in 19 s") and alone["total"] == 30
    for shape, metrics in metrics_shapes().items():
        both = full(_dated(bundle(tmp_path / shape, {"vllm.log": log, **metrics})))
        assert both["headline"] == alone["headline"], shape
        assert both["total"] == 30 and both["quality"] == "exact", shape
        assert both["times"] == alone["times"] and (both["first"], both["last"]) == (alone["first"], alone["last"])
        assert both["kinds"] == {"interval": 30} and set(both["from"]) == {("0", "vllm.log")}, shape
        assert both["verdicts"] == alone["verdicts"] and both["exit"] == alone["exit"], shape
        assert both["disagreements"] == []
        counter = both["sources"]["prometheus counter (vllm:num_preemptions_total)"]
        assert counter["count"] == 30 and counter["in_events"] == 0
        assert "the log's own counts agree with its 30" in counter["note"]
        fields = both["sources"]["log 'Preemptions: N' stats fields"]
        assert fields["count"] == 30 and fields["in_events"] == 30 and "they agree" in fields["note"]
        (t,) = both["log_timing"]
        assert (t["engine"], t["count"], t["kinds"], t["log_counts"], t["scrape_intervals"]) == (
            "0",
            30,
            {"interval": 30},
            2,
            3,
        )
        assert "the log's own events stand there" in both["rule"]
        assert any("the log's own counts agree with the counter: 30" in n for n in both["notes"])


def test_a_lost_stats_line_leaves_the_counter_authoritative(tmp_path):
    """The stats line at 60 s lost (a cut file, a dropped line): the log holds 18 in (50 s, 70 s], the
    counter rose by 30. They disagree: the counter's intervals are the events (30 in 67 s, as before),
    the disagreement is listed."""
    lines = v1_log("0.11.1", preemptions=PRE).splitlines(keepends=True)
    lost = "".join(ln for ln in lines if f"{_hdr(T0 + timedelta(seconds=60))} [loggers.py" not in ln)
    assert len(lost.splitlines()) == len(lines) - 1
    for shape in ("text-per-file", "openmetrics-per-file", "query-range-json"):
        both = full(_dated(bundle(tmp_path / shape, {"vllm.log": lost, **metrics_shapes()[shape]})))
        assert both["headline"].startswith("30 preemptions in 67 s") and both["total"] == 30, shape
        assert {k for k, _ in both["from"]} == {"0"} and all(src != "vllm.log" for _, src in both["from"]), shape
        (d,) = both["disagreements"]
        assert "engine 0" in d and "add up to 18" in d and "rose by 30" in d
        assert both["log_timing"] is None and "own events stand there" not in both["rule"]


def test_counts_that_add_up_but_do_not_fit_the_scrapes_leave_the_counter_authoritative(tmp_path):
    """The same 30 in all, but the counter says 5 by 65 s where the log had 12 by 60 s (a clock offset
    between the log and the scraper): the sums agree, the scrape intervals do not. The counter's
    intervals stand, and a note says why the log's were not kept."""
    scrapes = [(25, 0, 0.0, 0, 0), (65, 5, 0.99, 21, 58), (95, 30, 0.975, 9, 50), (125, 30, 0.0, 0, 0)]
    files = {"vllm.log": v1_log("0.11.1", preemptions=PRE), **metrics_shapes(scrapes)["text-per-file"]}
    both = full(_dated(bundle(tmp_path / "both", files)))
    assert both["total"] == 30 and set(both["from"]) == {("0", "metrics")}
    assert not both["headline"].startswith("30 preemptions in 19 s")  # the counter's 5 + 25 (40 s, 30 s)
    assert both["log_timing"] is None and both["disagreements"] == []
    (note,) = [n for n in both["notes"] if "do not fit its scrape intervals" in n]
    assert "add up to the counter's increase (30)" in note and "+5" in note


# ---------------------------------------------------------------- vLLM V0 0.6.3, sampled warnings


def v0_scrape(value: float) -> str:
    """A V0 server's page: no engine label, the model's name."""
    return (
        "# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.\n"
        "# TYPE vllm:num_preemptions_total counter\n"
        f'vllm:num_preemptions_total{{model_name="{V0_MODEL}"}} {float(value)}\n'
    )


@pytest.mark.parametrize(
    ("values", "agree"),
    [
        ({25: 0, 55: 20, 85: 51, 115: 51}, True),  # the warnings (47 s, 67 s) and the 49 between fit
        ({25: 0, 45: 0, 75: 51, 105: 51}, True),  # scrapes at other times: still the same 51
        ({25: 0, 55: 20, 85: 58, 115: 58}, False),  # 7 more after the 51st: the log's is a lower bound
    ],
)
def test_v0_reconstructed_counts_beside_scrapes(tmp_path, values, agree):
    """51 in 20 s alone (warnings 1 at 47 s and 51 at 67 s, 49 reconstructed between); beside scrapes
    counting the same 51 it was 51 in 58 s (the counter's 30 s intervals). The log's count is a lower
    bound: kept only when it is the counter's exactly, else the counter's increases stand (58 > 51)."""
    alone = full(_dated(bundle(tmp_path / "alone", {"vllm.log": v0_log()})))
    assert alone["headline"].startswith("at least 51 preemptions in 20 s") and alone["quality"] == "lower bound"
    pages = {f"metrics-{int(EPOCH + o)}.prom": v0_scrape(v) for o, v in values.items()}
    both = full(_dated(bundle(tmp_path / "both", {"vllm.log": v0_log(), **pages})))
    increase = max(values.values())
    assert both["total"] == increase and both["quality"] == "exact"
    assert both["kinds"]["logged"] == 2  # the warnings: always kept (rule 2)
    if agree:
        # the counter makes the same count exact: only the lower bound's "at least" goes
        assert both["headline"] == alone["headline"].removeprefix("at least ") and both["times"] == alone["times"]
        assert both["kinds"] == {"logged": 2, "reconstructed": 49}
        assert both["log_timing"][0]["kinds"] == {"logged": 2, "reconstructed": 49}
        v0 = both["sources"]["log V0 warnings (total_num_cumulative_preemption)"]
        assert v0["in_events"] == 51 and "they agree" in v0["note"]
    else:
        assert both["kinds"] == {"logged": 2, "interval": increase - 2} and both["log_timing"] is None
        assert not both["headline"].startswith("51 preemptions in 20 s")


# ---------------------------------------------------------------- two engines (DP=2)


def dp_log(counts: dict[str, dict[int, int]], lost: tuple[str, int] | None = None) -> str:
    """A 0.11.1 DP=2 server: stats lines of ``Engine 000`` and ``Engine 001`` every 10 s from 30 s;
    ``counts``: engine -> {second: Preemptions}; ``lost``: (engine, second) of a stats line not in the file."""
    api = "(APIServer pid=4394) "
    out = [
        f"{api}INFO {_hdr(T0)} [api_server.py:1896] vLLM API server version 0.11.1",
        f"{api}INFO {_hdr(T0)} [utils.py:328] non-default args: {{'model': '{MODEL}', 'data_parallel_size': 2}}",
    ]
    for sec in range(30, 130, 10):
        for eng in ("0", "1"):
            if lost == (eng, sec):
                continue
            n = counts.get(eng, {}).get(sec)
            pre = f"Preemptions: {n}, " if n else ""
            kv = 99.5 if n else 40.0
            out.append(
                f"{api}INFO {_hdr(T0 + timedelta(seconds=sec))} [loggers.py:208] Engine 00{eng}: Avg prompt "
                f"throughput: 100.0 tokens/s, Avg generation throughput: 900.0 tokens/s, Running: 40 reqs, Waiting: "
                f"{12 if n else 0} reqs, {pre}GPU KV cache usage: {kv}%, Prefix cache hit rate: 10.0%"
            )
    return "\n".join(out) + "\n"


def dp_scrape(values: dict[str, float]) -> str:
    s = [
        "# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.",
        "# TYPE vllm:num_preemptions_total counter",
    ]
    s += [f'vllm:num_preemptions_total{{engine="{e}",model_name="{MODEL}"}} {float(v)}' for e, v in values.items()]
    return "\n".join(s) + "\n"


def test_two_engines_each_decided_on_its_own(tmp_path):
    """Engine 0's log counts (7 + 5) fit its counter; engine 1's log lost its line at 70 s (the 6 of
    it missing: 4 + 3 against the counter's 13). Engine 0 keeps the log's timing, engine 1 the counter's,
    with its disagreement; neither engine's evidence decides the other's."""
    counts = {"0": {60: 7, 70: 5}, "1": {60: 4, 70: 6, 80: 3}}
    scrapes = {25: {"0": 0, "1": 0}, 65: {"0": 7, "1": 4}, 95: {"0": 12, "1": 13}, 125: {"0": 12, "1": 13}}
    pages = {f"metrics-{int(EPOCH + o)}.prom": dp_scrape(v) for o, v in scrapes.items()}
    alone = full(_dated(bundle(tmp_path / "alone", {"vllm.log": dp_log(counts, lost=("1", 70))})))
    both = full(_dated(bundle(tmp_path / "both", {"vllm.log": dp_log(counts, lost=("1", 70)), **pages})))
    assert alone["total"] == 19 and both["total"] == 25  # 12 + 7 in the log; 12 + 13 counted
    assert both["from"] == {("0", "vllm.log"): 12, ("1", "metrics"): 13}
    (t,) = both["log_timing"]
    assert t["engine"] == "0" and t["count"] == 12
    (d,) = both["disagreements"]
    assert d.startswith("engine 1:") and "add up to 7" in d and "rose by 13" in d
    # engine 1 agreeing too (its line not lost): both keep the log's timing, the total unchanged
    whole = full(_dated(bundle(tmp_path / "whole", {"vllm.log": dp_log(counts), **pages})))
    assert whole["total"] == 25 and whole["from"] == {("0", "vllm.log"): 12, ("1", "vllm.log"): 13}
    assert [x["engine"] for x in whole["log_timing"]] == ["0", "1"] and whole["disagreements"] == []
    assert whole["headline"] == full(_dated(bundle(tmp_path / "whole-alone", {"vllm.log": dp_log(counts)})))["headline"]
