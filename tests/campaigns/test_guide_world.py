"""Guide-world verdicts (issue 25) on hand-written bundles, in several shapes each.

fixtures/guide-world/build.py writes each scenario in the header families it names (V0
``file.py:N]``, V1 ``[file.py:N]``, stream and formatter process prefixes, a Ray DP actor,
JSON lines, no log at all); truth.json holds what every event must get (bench/accuracy_guide_world.py
``check``: the verdict, the gates that must not fire, the mechanism, the deciding step and lines,
the factors, the engine, evidence values and their lines, the configuration and its status).
The other tests here pin the parts one by one: engines from process prefixes, hook steps per
engine, server runs, the V0 count read from a start banner.
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

from ..conftest import FIXTURES, ROOT

GW = FIXTURES / "guide-world"
TRUTH = json.loads((GW / "truth.json").read_text())
CASES = [(name, fam) for name, sc in TRUTH["scenarios"].items() for fam in sc["families"]]


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


B = _load(GW / "build.py", "gw_build")
SCORE = _load(ROOT / "bench" / "accuracy_guide_world.py", "gw_score")


def _run(path: Path | str):
    return analyze([str(path)], AnalyzeOptions(tz="UTC", year=2025))


def test_fixtures_are_current():
    for rel, text in B.files().items():
        assert (GW / rel).read_text() == text, f"{rel} is stale: run python fixtures/guide-world/build.py"


def test_every_item_has_three_shapes():
    """Each of issue 25's five rules holds on at least three shapes (families x scenarios)."""
    for item in range(1, 6):
        shapes = {(n, f) for n, sc in TRUTH["scenarios"].items() if sc["item"] == item for f in sc["families"]}
        assert len({f for _, f in shapes}) >= 3, item


@pytest.mark.parametrize("name,fam", CASES, ids=[f"{n}-{f}" for n, f in CASES])
def test_guide_world_expectations(name, fam):
    sc = TRUTH["scenarios"][name]
    a = _run(GW / name / fam)
    wrong = []
    for exp in sc["expect"]:
        verdict, other = SCORE.check(a, fam, exp)
        wrong += verdict + other
    for group in sc.get("same_evidence", []):
        wrong += SCORE.shared(a, fam, group)
    assert not wrong, "\n".join(wrong)


# --------------------------------------------------------------------------- 1. blocks held


def test_blocks_held_cite_what_they_were_derived_from():
    a = _run(GW / "held-pending-listed" / "json")
    (row,) = [r for r in a.verdicts.iter_rows(named=True) if r["event_id"].endswith(":6")]
    held = next(e for e in row["evidence"] if e["name"] == "held_blocks")
    assert held["value"] == "0" and held["src"] == "json/vllm.log:5"  # the pending Req- line
    a = _run(GW / "held-no-run-record" / "v1")
    ev = a.evidence.row(0, named=True)
    assert ev["req_run_records"] == 0 and ev["req_run_records_src"] == "v1/blocktable.jsonl:1-5"


def test_records_that_end_before_the_event_say_nothing(tmp_path):
    """Records of other requests that stop a minute before the event do not make its blocks 0."""
    (tmp_path / "vllm.log").write_text(
        "INFO 05-09 10:00:00 [utils.py:328] non-default args: {'model': 'm', 'max_num_seqs': 2}\n"
        "WARNING 05-09 10:01:30 [scheduler.py:10] Req-z PREEMPTED\n"
    )
    (tmp_path / "blocktable.jsonl").write_text(
        json.dumps(B.bt_event("10:00:20", 1, "a", "allocate", blocks_before=0, blocks_after=3))
        + "\n"
        + json.dumps(B.bt_step("10:00:20", 1, 5, waiting=9))
        + "\n"
    )
    a = _run(tmp_path)
    ev = a.evidence.row(0, named=True)
    assert ev["req_run_records"] is None
    assert a.verdicts.row(0, named=True)["gate"] == "undetermined"


# --------------------------------------------------------------------------- 2. engines


@pytest.mark.parametrize(
    "proc,engine",
    [
        ("EngineCore_DP1 pid=11", "1"),
        ("EngineCore_DP0 pid=1133552", "0"),
        ("DPEngineCoreActor_DP3 pid=7", "3"),
        ("DP2 pid=9", "2"),
        ("Worker_DP1_TP0 pid=21", "1"),
        ("Worker_DP0_TP1_EP1 pid=22", "0"),
        ("EngineCore_2 pid=5", "2"),  # 0.8.5-0.10.1: EngineCore_{index}
        ("EngineCore pid=5", "0"),  # 0.18+, one engine
        ("Worker_TP1 pid=1908386", "0"),
        ("VllmWorkerProcess pid=2311", "0"),
        ("APIServer pid=4121", None),
        ("ApiServer_1 pid=4", None),
        ("RayWorkerWrapper pid=581, ip=10.225.128.18", None),
    ],
)
def test_engine_of_every_process_prefix(proc, engine):
    from preemptlog.sources.vllm_log import engine_of_proc

    got = pl.DataFrame({"p": [proc]}).select(engine_of_proc(pl.col("p"))).item()
    assert got == engine


def test_hook_steps_are_numbered_per_engine():
    a = _run(GW / "dp-delayed-own-steps" / "proc")
    steps = a.frames["hook_steps"].sort("line").select("line", "engine", "step").rows()
    assert steps == [(2, "1", 1), (4, "0", 1), (6, "0", 2), (8, "0", 3), (10, "1", 2)]
    assert a.events.row(0, named=True)["engine"] == "1"


def test_text_block_table_lines_take_the_workers_engine(tmp_path):
    (tmp_path / "executor.log").write_text(
        "(Worker_DP1_TP0 pid=21) INFO 05-09 10:00:01 [executor.py:88] block_table extend req=r7 8->12\n"
        "(Worker_TP0 pid=20) INFO 05-09 10:00:01 [executor.py:88] block_table extend req=r8 2->3\n"
    )
    a = _run(tmp_path)
    assert a.frames["bt_text"].sort("line").get_column("engine").to_list() == ["1", "0"]


SETTINGS = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@SETTINGS
@given(
    name=st.sampled_from(["held-pending-listed", "held-pending-delayed", "restart-dropped-arg"]),
    fam=st.sampled_from(["proc", "json"]),
    free=st.integers(0, 5),
    pending=st.integers(0, 400),
    at=st.lists(st.integers(0, 12), min_size=1, max_size=4),
)
def test_another_engines_lines_do_not_change_evidence(tmp_path_factory, name, fam, free, pending, at):
    """Engine 1's hook steps (a shortage, a deep queue) and marker-free lines inserted anywhere never
    change engine 0's evidence. In the json family engine 0's hook lines are bare print()s, which name
    no engine: once engine 1 writes in the log behind its own process name they could be either
    scheduler's steps, so they become no one's (engines/vllm/hooks.py ``_own_engine_rows``): engine 0's
    hook values turn null, a note says why, and every other value is unchanged (engine 1's lines still
    never give engine 0 a value)."""
    sc = B.SCENARIOS[name]

    def write(rows):
        d = tmp_path_factory.mktemp("b")
        (d / "vllm.log").write_text("\n".join(B.render(fam, r) for r in rows) + "\n")
        return _run(d)

    def values(a):
        ev = a.events.select("event_id", "request_id").join(a.evidence, on="event_id").sort("request_id")
        cols = [c for c in VALUE_COLUMNS if c not in ("sched_age_s", "sched_step", "lookback_max_pending_step")]
        cols = [c for c in cols if not c.endswith("_step")]
        return ev.select("request_id", *cols)

    base = write(sc["lines"])
    rows = list(sc["lines"])
    for pos in sorted(at, reverse=True):
        pos = min(pos, len(rows))
        t = rows[pos - 1]["t"] if pos else rows[0]["t"]
        rows[pos:pos] = [
            B.log(t.split(".")[0], "INFO", B.SD, B.sched(free, pending, 50), eng=1),
            B.log(t.split(".")[0], "INFO", B.SD, B.req("x1", 900, 900, 120), eng=1),
        ]
    after = write(rows)
    bare = fam == "json" and any("print" in r for r in sc["lines"])
    if not bare:
        assert values(after).rows() == values(base).rows()
        return
    assert any("name no engine" in n for n in after.notes)
    got, was = values(after), values(base)
    hook = [
        c for c in got.columns if c.startswith(("sched_", "pending_", "batch_", "lookback_")) or c == "req_pending_step"
    ]
    assert any(v is not None for row in was.select(hook).rows() for v in row)  # the bare lines were engine 0's
    assert got.select(hook).null_count().row(0) == (got.height,) * len(hook)
    assert got.drop(hook).rows() == was.drop(hook).rows()


# --------------------------------------------------------------------------- 3. restarts


def test_one_start_with_several_banners_is_one_run():
    from preemptlog.engines.vllm.runs import runs_table

    a = _run(GW / "restart-dropped-arg" / "v0")
    runs = a.frames["server_runs"]
    assert runs.select("stream_run", "line").rows() == [(1, 1), (2, 7)]
    assert runs_table(a.records).equals(runs)
    cfg = a.config.filter(pl.col("key") == "max_num_seqs").select("value", "status", "run").rows()
    assert ("24", "seen", 0) in cfg and any(s == "default" for _, s, _ in cfg)  # run 2 assumes the default


def test_a_log_without_a_banner_is_not_scoped(tmp_path):
    (tmp_path / "vllm.log").write_text(
        "INFO 05-09 10:00:00 [utils.py:328] non-default args: {'model': 'm', 'max_num_seqs': 8}\n"
        "[SCHEDULER] Available blocks: 100, Pending reqs: 9, Running reqs: 8\n"
        "  Req-q: prompt=10, max_out=10, blocks_needed=2\n"
        "WARNING 05-09 10:00:02 [scheduler.py:10] Req-q PREEMPTED\n"
    )
    a = _run(tmp_path)
    assert a.frames["server_runs"].height == 0
    ev = a.evidence.row(0, named=True)
    assert (ev["cfg_max_num_seqs"], ev["cfg_max_num_seqs_status"]) == (8, "seen")
    assert a.verdicts.row(0, named=True)["gate"] == "G3-queue-overflow"


# --------------------------------------------------------------------------- 4. counted intervals


def test_interval_events_are_joined_by_their_interval_not_their_position():
    """The first of four events is placed at 32.5 s; the reset at 37.5 s is inside its interval."""
    a = _run(GW / "interval-kv-reset" / "v1")
    ev = a.events.filter(pl.col("kind") == "interval").sort("time")
    assert [t.second + t.microsecond / 1e6 for t in ev.get_column("time")] == [32.5, 35.0, 37.5, 40.0]
    got = a.evidence.join(ev.select("event_id"), on="event_id").get_column("kvev_cleared").to_list()
    assert got == [1, 1, 1, 1]


# --------------------------------------------------------------------------- V0 reconciliation quality


V0_START = [
    "INFO 05-09 10:00:00 {w}api_server.py:1{e} vLLM API server version 0.6.3",
    "INFO 05-09 10:00:01 {w}llm_engine.py:237{e} Initializing an LLM engine (v0.6.3) with config: model='m', "
    "speculative_config=None, max_seq_len=4096, enable_prefix_caching=False",
    "INFO 05-09 10:00:10 {w}metrics.py:341{e} " + B.v0_stats(2, 0, 40.2),
]


@pytest.mark.parametrize("w,e", [("", "]"), ("[", "]")], ids=["v0.4-0.7", "v0.8-0.10"])
@pytest.mark.parametrize("restart", [False, True])
def test_v0_log_from_its_start_without_a_warning_is_an_exact_zero(tmp_path, w, e, restart):
    from preemptlog.events.visibility import count_visibility

    lines = [x.format(w=w, e=e) for x in V0_START]
    if restart:
        lines += [x.format(w=w, e=e).replace("10:00:", "11:00:") for x in V0_START]
    (tmp_path / "vllm.log").write_text("\n".join(lines) + "\n")
    a = _run(tmp_path)
    rec = a.counters["reconciliation"]
    assert (rec["total"], rec["quality"]) == (0, "exact")
    assert "start banner" in rec["rule"]
    assert count_visibility(a)["count_visible"]


def test_v0_excerpt_without_a_warning_is_a_lower_bound(tmp_path):
    (tmp_path / "vllm.log").write_text("INFO 05-09 10:00:10 metrics.py:341] " + B.v0_stats(2, 0, 40.2) + "\n")
    rec = _run(tmp_path).counters["reconciliation"]
    assert (rec["total"], rec["quality"]) == (0, "lower bound")


def test_v0_log_with_a_warning_stays_a_lower_bound(tmp_path):
    lines = [x.format(w="", e="]") for x in V0_START]
    lines.append("WARNING 05-09 10:00:12 scheduler.py:1483] " + B.V0_WARN.format(rid="7", mode="SWAP", n=1))
    (tmp_path / "vllm.log").write_text("\n".join(lines) + "\n")
    rec = _run(tmp_path).counters["reconciliation"]
    assert (rec["total"], rec["quality"]) == (1, "lower bound")
