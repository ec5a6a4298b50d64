"""The rules of evidence (issue 13) on hand-written bundles, in every vLLM header family.

fixtures/handwritten/build.py writes each scenario in seven header families; truth.json
holds the verdict every event must get: gate, sub-kind, rule, the scheduler step that
decided, the lines that decided it (as ``explain`` shows them) and the contributing
factors. Property tests then transform bundles in ways that must not change any
event's evidence values.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from preemptlog import AnalyzeOptions, analyze
from preemptlog.joiner import VALUE_COLUMNS
from preemptlog.rules.verdicts import decided_by

from ..conftest import FIXTURES

HW = FIXTURES / "handwritten"
TRUTH = json.loads((HW / "truth.json").read_text())
CASES = [(name, fam) for name in TRUTH["scenarios"] for fam in TRUTH["families"]]


def _build_module():
    spec = importlib.util.spec_from_file_location("hw_build", HW / "build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(path: Path | str):
    return analyze([str(path)], AnalyzeOptions(tz=TRUTH["tz"], year=TRUTH["year"]))


FILES = {"bt": "blocktable.jsonl", "prom": "metrics.prom"}


def _event_id(fam: str, ref) -> str:
    """A truth reference ("9", "2~i1", "bt:3", "prom:11~i1") as the event id or file:line it names."""
    kind, _, rest = str(ref).rpartition(":")
    return f"{fam}/{FILES[kind]}:{rest}" if kind else f"{fam}/vllm.log:{rest}"


_line = _event_id


def test_fixtures_are_current():
    for rel, text in _build_module().files().items():
        assert (HW / rel).read_text() == text, f"{rel} is stale: run python fixtures/handwritten/build.py"


@pytest.mark.parametrize("name,fam", CASES, ids=[f"{n}-{f}" for n, f in CASES])
def test_handwritten_verdicts(name, fam):
    sc = TRUTH["scenarios"][name]
    a = _run(HW / name / fam)
    v = a.verdicts.join(a.events.select("event_id", "kind", "interval_start", "interval_end"), on="event_id")
    ids = set(v.get_column("event_id").to_list())
    want = {_event_id(fam, e["event"]) for e in sc["expect"]}
    assert ids == want, f"events {sorted(ids)} != {sorted(want)}"
    for exp in sc["expect"]:
        eid = _event_id(fam, exp["event"])
        row = v.filter(pl.col("event_id") == eid).row(0, named=True)
        assert (row["gate"], row["sub_kind"], row["rule"]) == (exp["gate"], exp["sub_kind"], exp["rule"]), eid
        for gate in exp.get("not_fired", []):
            assert gate not in row["gates_fired"], (eid, gate)
        got_factors = sorted(
            f"{f['factor']}:{f['detail'].split('-', 1)[0]}" if f["factor"] == "delayed-preemption" else f["factor"]
            for f in row["contributing_factors"]
            if f["factor"] in ("delayed-preemption",)
        )
        assert got_factors == sorted(exp["factors"]), eid
        for frag in exp.get("notes", []):
            assert any(frag in n for n in row["notes"]), (eid, frag, row["notes"])
        if exp["gate"] == "undetermined":
            continue
        event = {"kind": row["kind"], "interval_start": row["interval_start"], "interval_end": row["interval_end"]}
        dec = {d["rule"]: d for d in decided_by(a, eid, event)}
        assert exp["rule"] in dec, eid
        d = dec[exp["rule"]]
        assert d["verdict_eligible"]
        if exp["step"] is not None:
            assert d["where"] == f"scheduler step {exp['step']}", (eid, d["where"])
        elif row["kind"] == "interval":
            assert d["where"].startswith("interval"), (eid, d["where"])
        for ln in exp["lines"]:
            assert _line(fam, ln) in d["lines"], (eid, ln, d["lines"])
    if sc.get("disagreement"):
        assert any(sc["disagreement"] in x for x in a.counters["reconciliation"]["disagreements"])


# --------------------------------------------------------------------------- properties

B = _build_module()
TIME_DERIVED = {"sched_age_s", "bt_preempt_offset_s"}  # depend on where a time comes from, by definition
# Configuration and the engine's code facts (joiner/code.py) come from the bundle's config lines, not from times.
VALUES = [c for c in VALUE_COLUMNS if c not in TIME_DERIVED and not c.startswith(("cfg_", "code_"))]


def _values(a) -> list[dict]:
    """Per event (in time order, keyed by kind and request id, not by line): its evidence values."""
    ev = a.events.select("event_id", "kind", "request_id", "engine", "time").join(a.evidence, on="event_id")
    ev = ev.sort("kind", "request_id", "engine", "time", nulls_last=True)
    return [{k: r[k] for k in ["kind", "request_id", "engine"] + VALUES} for r in ev.iter_rows(named=True)]


def _write(tmp: Path, lines: list[str], bt: list[dict] | None = None) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "vllm.log").write_text("\n".join(lines) + "\n")
    if bt:
        (tmp / "blocktable.jsonl").write_text("\n".join(json.dumps(r) for r in bt) + "\n")
    return tmp


HOOK_SCENARIOS = ["r2-decision-step-shortage", "r6-delayed-variance", "r6-delayed-queue", "r1-untimed-excerpt"]
SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _untime(row: dict) -> dict:
    """A timed hook log line printed bare instead (same text, no header)."""
    if "print" in row or "scheduler_debug" not in row["where"]:
        return row
    return B.pr(row["t"], row["msg"])


@SETTINGS
@given(
    name=st.sampled_from(HOOK_SCENARIOS),
    fam=st.sampled_from(["v04", "v08", "apiserver", "iso", "json"]),
    mask=st.lists(st.booleans(), min_size=12, max_size=12),
)
def test_which_lines_carry_timestamps_does_not_change_evidence(tmp_path_factory, name, fam, mask):
    sc = B.SCENARIOS[name]
    base = _run(_write(tmp_path_factory.mktemp("a"), [B.render(fam, r) for r in sc["lines"]], sc.get("blocktable")))
    rows = [_untime(r) if m else r for r, m in zip(sc["lines"], mask + [False] * len(sc["lines"]))]
    other = _run(_write(tmp_path_factory.mktemp("b"), [B.render(fam, r) for r in rows], sc.get("blocktable")))
    assert _values(other) == _values(base)


UNRELATED = [
    ("print", 'INFO:     10.0.0.9:40000 - "GET /metrics HTTP/1.1" 200 OK'),
    ("log", "INFO", "chat_utils.py:470", "Detected the chat template content format to be 'string'."),
    ("log", "DEBUG", "core.py:300", "EngineCore loop active."),
    ("print", "Loading safetensors checkpoint shards: 100% Completed | 4/4"),
]


@SETTINGS
@given(
    name=st.sampled_from(HOOK_SCENARIOS + ["r3-interval-reporting-line", "r5-v0-swap-upstream"]),
    fam=st.sampled_from(list(B.FAMILIES)),
    inserts=st.lists(st.tuples(st.integers(0, 20), st.integers(0, len(UNRELATED) - 1)), max_size=6),
)
def test_unrelated_lines_do_not_change_evidence(tmp_path_factory, name, fam, inserts):
    sc = B.SCENARIOS[name]
    base = _run(_write(tmp_path_factory.mktemp("a"), [B.render(fam, r) for r in sc["lines"]], sc.get("blocktable")))
    rows = list(sc["lines"])
    for pos, which in sorted(inserts, reverse=True):
        pos = min(pos, len(rows))
        t = rows[pos - 1]["t"] if pos else rows[0]["t"]  # the time of the line before: order is kept
        u = UNRELATED[which]
        rows.insert(pos, B.pr(t, u[1]) if u[0] == "print" else B.log(t.split(".")[0], u[1], u[2], u[3]))
    other = _run(_write(tmp_path_factory.mktemp("b"), [B.render(fam, r) for r in rows], sc.get("blocktable")))
    assert _values(other) == _values(base)


@SETTINGS
@given(
    name=st.sampled_from(["r3-interval-reporting-line", "r7-fewer-records", "r5-v0-swap-upstream"]),
    fam=st.sampled_from(list(B.FAMILIES)),
    kv=st.floats(0, 100),
    waiting=st.integers(0, 500),
    pre=st.integers(0, 3),
)
def test_a_second_engine_does_not_change_evidence(tmp_path_factory, name, fam, kv, waiting, pre):
    sc = B.SCENARIOS[name]
    base = _run(_write(tmp_path_factory.mktemp("a"), [B.render(fam, r) for r in sc["lines"]], sc.get("blocktable")))
    rows = []
    for r in sc["lines"]:
        rows.append(r)
        if "print" not in r:  # Engine 001 reports in the same second, after
            rows.append(B.log(r["t"], "INFO", "loggers.py:208", B.v1_stats("001", 3, waiting, kv, pre or None)))
    other = _run(_write(tmp_path_factory.mktemp("b"), [B.render(fam, r) for r in rows], sc.get("blocktable")))
    mine = [x for x in _values(other) if x["engine"] != "1"]
    assert mine == [x for x in _values(base)]


@pytest.mark.parametrize("name", list(TRUTH["scenarios"]))
def test_cited_lines_belong_to_the_events_engine_and_step(name):
    for fam in ("v08", "json"):
        a = _run(HW / name / fam)
        stats = {f"{s}:{ln}": e for s, ln, e in a.stats.select("source", "line", "engine").iter_rows()}
        steps = {}
        for frame in ("hook_steps", "hook_pending", "hook_batch"):
            df = a.frames.get(frame)
            if df is not None:
                steps.update({f"{s}:{ln}": st_ for s, ln, st_ in df.select("source", "line", "step").iter_rows()})
        ev = a.events.select("event_id", "engine").join(a.evidence, on="event_id")
        for r in ev.iter_rows(named=True):
            eng = r["engine"] or "0"
            for col in (
                "stats_kv_usage_max",
                "stats_kv_usage_at",
                "stats_waiting_at",
                "stats_waiting_delta",
                "stats_running_at",
                "stats_running_delta",
            ):
                for src in (r[f"{col}_src"] or "").split("; "):
                    if src:
                        assert stats[src] == eng, (r["event_id"], col, src)
            for col, step_col in (
                ("lookback_short_free_blocks", "lookback_short_step"),
                ("lookback_short_blocks_needed", "lookback_short_step"),
                ("lookback_variance_threshold", "lookback_variance_step"),
                ("lookback_max_pending", "lookback_max_pending_step"),
                ("sched_free_blocks", "sched_step"),
                ("batch_variance", "sched_step"),
            ):
                if r[f"{col}_src"]:
                    assert steps[r[f"{col}_src"]] == r[step_col], (r["event_id"], col)


# --------------------------------------------------------------------------- reconciliation


def test_interval_straddling_the_first_scrape_is_counted_once(tmp_path):
    """Issue 19 item 6: a log interval straddling the first /metrics scrape, counter 0 there."""
    log = [
        "INFO 05-01 09:00:19 [loggers.py:208] " + B.v1_stats("000", 10, 0, 50.0),
        "INFO 05-01 09:00:29 [loggers.py:208] " + B.v1_stats("000", 10, 4, 99.0, 12),
        "INFO 05-01 09:00:39 [loggers.py:208] " + B.v1_stats("000", 10, 4, 99.0, 2),
    ]
    (tmp_path / "vllm.log").write_text("\n".join(log) + "\n")

    def scrape(ts: int, value: int) -> str:
        return (
            f"# scrape at {ts}\n# TYPE vllm:num_preemptions counter\n"
            f'vllm:num_preemptions_total{{engine="0",model_name="m"}} {value} {ts}000\n'
        )

    t0 = 1746090020  # 2025-05-01T09:00:20Z
    (tmp_path / "metrics.prom").write_text(scrape(t0, 0) + scrape(t0 + 20, 14))
    a = _run(tmp_path)
    # The first log interval [09:00:19, 09:00:29] straddles the first scrape (09:00:20, counter 0):
    # its first event is placed at 09:00:19.83, outside the scrape window, yet the counter counts it.
    assert a.events.height == 14, a.events.select("event_id", "time", "source")
    assert a.counters["reconciliation"]["total"] == 14
    assert any("straddles the Prometheus scrape window" in n and "12 of its 12" in n for n in a.notes)


# --------------------------------------------------------------------------- rule 1 details


def test_untimed_lines_say_where_their_time_came_from(tmp_path):
    lines = [
        "[SCHEDULER] Available blocks: 2, Pending reqs: 1, Running reqs: 3",  # before any timestamp
        "INFO 05-01 10:00:01 [chat_utils.py:470] Detected the chat template content format to be 'string'.",
        "[SCHEDULER] Available blocks: 5, Pending reqs: 1, Running reqs: 3",  # after one
        'INFO:     10.0.0.5:51408 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
        "WARNING 05-01 10:00:02 [scheduler.py:10] Req-1 PREEMPTED",
    ]
    (tmp_path / "vllm.log").write_text("\n".join(lines) + "\n")
    a = _run(tmp_path)
    steps = a.frames["hook_steps"].sort("step")
    assert steps.get_column("time_precision").to_list() == ["inherited-later", "inherited"]
    assert [t.isoformat() for t in steps.get_column("time")] == ["2025-05-01T10:00:01+00:00"] * 2
    assert a.counters["line_times"] == {"inherited_earlier": 1, "inherited_later": 1, "without_time": 0}
    assert any("nearest later timestamped line" in n for n in a.notes)


def test_a_stream_without_any_timestamp_keeps_its_order_and_says_so(tmp_path):
    (tmp_path / "hooks.log").write_text(
        "[SCHEDULER] Available blocks: 2, Pending reqs: 1, Running reqs: 3\n"
        "  Req-9: prompt=10, max_out=10, blocks_needed=4\n"
        "[SCHEDULER] Available blocks: 1, Pending reqs: 1, Running reqs: 3\n"
    )
    a = _run(tmp_path)
    assert a.frames["hook_steps"].get_column("step").to_list() == [1, 2]  # step numbering unaffected
    assert a.counters["line_times"]["without_time"] == 3
    assert any("3 log line(s) have no time" in n for n in a.notes)


def test_explain_shows_the_deciding_step_and_lines_for_each_fired_gate():
    from typer.testing import CliRunner

    from preemptlog.cli import app

    path = HW / "r2-decision-step-shortage" / "v08"
    r = CliRunner().invoke(app, ["explain", "v08/vllm.log:7", str(path), "--year", "2025", "--tz", "UTC", "-f", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    (d,) = [x for x in doc["decided_by"] if x["rule"] == "G1-capacity"]
    assert d["where"] == "scheduler step 1"
    assert d["lines"][:2] == ["v08/vllm.log:1", "v08/vllm.log:2"]
    r = CliRunner().invoke(
        app,
        [
            "explain",
            "v08/vllm.log:2~i1",
            str(HW / "r3-interval-reporting-line" / "v08"),
            "--year",
            "2025",
            "--tz",
            "UTC",
            "-f",
            "json",
        ],
    )
    doc = json.loads(r.stdout)
    assert doc["verdict"]["rule"] == "G1-capacity-vllm-code-corroborated"
    (d,) = [x for x in doc["decided_by"] if x["rule"] == "G1-capacity-vllm-code-corroborated"]
    assert d["where"].startswith("interval 2025-05-01T10:00:00")
    # the interval's own two stats lines, and vLLM's scheduler source the verdict rests on
    assert [x for x in d["lines"] if x.startswith("v08/")] == ["v08/vllm.log:1", "v08/vllm.log:2"]
    assert any(x.startswith("vLLM source: vllm/v1/core/sched/scheduler.py") for x in d["lines"])
