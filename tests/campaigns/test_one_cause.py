"""One cause in every evidence path (issue 38, items 2, 3 and 5), on hand-written bundles in several shapes.

- A prefix-cache reset is never a failed allocation: every evidence path (preempt records naming the
  reset or taking every running request in one step, the engine's ``Successfully reset prefix cache``
  line, the KV events' ``AllBlocksCleared``) reaches one verdict, G4 ``cache-reset``, mechanism
  ``prefix-cache-reset``, in vLLM's words (the call, how many running requests it preempted).
- The chunked-prefill loop: a request whose prompt is longer than ``max_num_batched_tokens`` (from the
  ``non-default args``), preempted again and again, is ``chunked-prefill-loop`` whatever shows its
  preemptions (records, vLLM's own status markers, counted intervals its own count places), and the
  code-fact and pool-pressure rules never shadow it (an ordering rule of the shipped rules).
- vLLM's code fact on every event of a V1 log: a ``request X set to RequestStatus.PREEMPTED`` marker
  gets the same code fact as the log's counted events; one sub-kind name, ``capacity``.

Header families come from fixtures/handwritten/build.py (the renderer the rules of evidence use);
bundles are single files, folders and .tar.gz archives written into the test's own folder.
"""

from __future__ import annotations

import importlib.util
import json
import tarfile
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest

from preemptlog import AnalyzeOptions, analyze
from preemptlog.rules import load_rules

from ..conftest import FIXTURES

_spec = importlib.util.spec_from_file_location("hw_build_one_cause", FIXTURES / "handwritten" / "build.py")
B = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(B)

FAMILIES = ["v08", "apiserver", "kubectl", "json"]
L = B.log


def T(t: str) -> str:
    return f"{B.YEAR}-{B.DAY}T{t}+00:00"


def epoch(t: str) -> float:
    return datetime.fromisoformat(T(t)).astimezone(UTC).timestamp()


def stats(t: str, running: int, waiting: int, kv: float, pre: int | None = None) -> dict:
    return L(t, "INFO", "loggers.py:248", B.v1_stats("000", running, waiting, kv, pre))


def banner(version: str = "0.32.0", t: str = "10:00:00") -> dict:
    return L(
        t,
        "INFO",
        "core.py:93",
        f"Initializing a V1 LLM engine (v{version}) with config: model='m', speculative_config=None, "
        "max_seq_len=32768, enable_prefix_caching=True, enable_chunked_prefill=True",
    )


def reading(t: str, value: int, running: int = 3, engine: str = "0", kv: float = 0.3) -> str:
    lab = f'{{engine="{engine}",model_name="m"}}'
    return (
        f"# scrape {T(t)}\n# TYPE vllm:num_preemptions_total counter\n"
        f"vllm:num_preemptions_total{lab} {value}.0\nvllm:kv_cache_usage_perc{lab} {kv}\n"
        f"vllm:num_requests_running{lab} {running}\n"
    )


def write(tmp: Path, name: str, fam: str, rows: list[dict], *, records=None, scrapes=None, kv=None) -> Path:
    b = tmp / name / fam
    b.mkdir(parents=True, exist_ok=True)
    if rows:
        (b / "vllm.log").write_text("\n".join(B.render(fam, r) for r in rows) + "\n")
    if records:
        (b / "records.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    for i, text in enumerate(scrapes or []):
        (b / "metrics").mkdir(exist_ok=True)
        (b / "metrics" / f"{i:02d}.prom").write_text(text)
    if kv:
        (b / "kvevents.jsonl").write_text("\n".join(json.dumps(x) for x in kv) + "\n")
    return b


def targz(folder: Path) -> Path:
    out = folder.parent / (folder.name + ".tar.gz")
    with tarfile.open(out, "w:gz") as tf:
        tf.add(folder, arcname=folder.name)
    return out


def run(path: Path):
    return analyze([str(path)], AnalyzeOptions(tz="UTC", year=B.YEAR))


def rows(a) -> list[dict]:
    v = a.verdicts.join(a.events.select("event_id", "kind", "request_id", "engine"), on="event_id")
    if a.findings is not None and a.findings.per_event is not None:
        v = v.join(a.findings.per_event.select("event_id", "mechanism"), on="event_id", how="left")
    return v.sort("event_id").to_dicts()


# ------------------------------------------------------------------ 2. a prefix-cache reset
def pre(t: str, step: int, rid: str, **kw) -> dict:
    return {
        "type": "event",
        "time": T(t),
        "step": step,
        "engine": "0",
        "request_id": rid,
        "action": "preempt",
        "blocks_before": 8,
        "blocks_after": 0,
        "policy": "fcfs",
        "v": 2,
        **kw,
    }


def reset_records(reason: str | None) -> list[dict]:
    """Three running requests preempted in one step, no blocks needed, 300 free (the issue's shape)."""
    extra = {"reason": reason} if reason else {}
    return [
        pre("10:00:15", 500, rid, pool_free_blocks=300 + 8 * i, running=3 - i, waiting=i, **extra)
        for i, rid in enumerate(("a", "b", "c"))
    ]


QUIET = [stats("10:00:10", 3, 0, 40.0), stats("10:00:20", 3, 0, 30.0)]
# The same log at the ceiling with requests waiting: a pool at 100 % does not make a reset a failed allocation.
FULL = [stats("10:00:10", 3, 4, 100.0), stats("10:00:20", 3, 4, 100.0)]


def reset_paths(tmp: Path, fam: str) -> dict[str, Path]:
    """The same incident (3 running requests preempted by one reset at 10:00:15) by every evidence path."""
    line = L("10:00:15", "INFO", "block_pool.py:861", "Successfully reset prefix cache")
    return {
        "records-reason": write(tmp, "rec-reason", fam, [banner(), *FULL], records=reset_records("reset_prefix_cache")),
        "records-vllm-name": write(
            tmp, "rec-name", fam, [banner(), *QUIET], records=reset_records("prefix_cache_reset")
        ),
        "records-plugin": write(
            tmp,
            "rec-plugin",
            fam,
            [banner(), *QUIET],
            records=reset_records("preempted outside schedule() (e.g. reset_prefix_cache)"),
        ),
        "records-step": write(tmp, "rec-step", fam, [banner(), *QUIET], records=reset_records(None)),
        "kv-events+scrapes": write(
            tmp,
            "kv",
            fam,
            [banner(), *QUIET],
            scrapes=[reading("10:00:11", 0), reading("10:00:16", 3)],
            kv=[
                [epoch("10:00:12"), [["BlockStored", [1, 2], None, [1, 2, 3], 16, None]]],
                [epoch("10:00:15"), [["AllBlocksCleared"]]],
            ],
        ),
        "log-line+scrapes": write(
            tmp,
            "line",
            fam,
            [banner(), QUIET[0], line, QUIET[1]],
            scrapes=[reading("10:00:11", 0), reading("10:00:16", 3)],
        ),
        "log-line+stats-count": write(
            tmp, "line-stats", fam, [banner(), QUIET[0], line, stats("10:00:20", 3, 0, 30.0, 3)]
        ),
        "log-line+status-markers": write(
            tmp,
            "line-markers",
            fam,
            [banner(), QUIET[0], *[marker("10:00:15", f"r-{k}") for k in range(3)], line, QUIET[1]],
        ),
    }


@pytest.mark.parametrize("fam", FAMILIES)
def test_a_prefix_cache_reset_is_one_answer_in_every_path(tmp_path, fam):
    for path, bundle in reset_paths(tmp_path, fam).items():
        a = run(bundle)
        got = rows(a)
        assert len(got) == 3, (path, got)
        for r in got:
            assert (r["gate"], r["sub_kind"], r["rule"]) == ("G4-prefix-conflict", "cache-reset", "G4-cache-reset"), (
                path,
                r,
            )
            assert r["gates_fired"] == ["G4-prefix-conflict"], (path, r["gates_fired"])  # never G1
            assert r["mechanism"] == "prefix-cache-reset", (path, r)
            cited = {c["name"]: c for c in r["evidence"]}
            assert cited["reset_calls"]["value"] == "1" and cited["reset_calls"]["src"], (path, cited)
            assert cited["reset_preempted"]["value"] == "3" and cited["reset_preempted"]["src"], (path, cited)
        head = a.summary()["headline"]
        # PREEMPTED status markers alone are a lower bound (reconcile): that path's count says "at least"; every
        # other path counts the 3 exactly; the cause is the same on every path
        least = "at least " if path == "log-line+status-markers" else ""
        assert head.startswith(f"{least}3 preemptions"), (path, head)
        assert "reset_prefix_cache(reset_running_requests=True) preempted every running request" in head, (path, head)
        assert "3 preempted by 1 reset" in head, (path, head)
        assert "KV" not in head and "allocation" not in head, (path, head)  # nothing about KV space


def test_the_reset_cites_where_each_path_saw_it(tmp_path):
    paths = reset_paths(tmp_path, "v08")
    src = {}
    for path in ("records-reason", "kv-events+scrapes", "log-line+scrapes"):
        a = run(paths[path])
        ev = a.evidence.row(0, named=True)
        src[path] = (ev["reset_calls_src"], ev["reset_preempted_src"])
    assert src["records-reason"] == ("v08/records.jsonl:1; v08/records.jsonl:2; v08/records.jsonl:3",) * 2
    assert src["kv-events+scrapes"] == ("v08/kvevents.jsonl:2", "v08/metrics/01.prom:3")  # the counter's line
    assert src["log-line+scrapes"] == ("v08/vllm.log:3", "v08/metrics/01.prom:3")


def test_a_reset_seen_twice_is_one_reset_and_an_archive_reads_the_same(tmp_path):
    line = L("10:00:15", "INFO", "block_pool.py:861", "Successfully reset prefix cache")
    b = write(
        tmp_path,
        "both",
        "kubectl",
        [banner(), QUIET[0], line, QUIET[1]],
        records=reset_records("reset_prefix_cache"),
        kv=[[epoch("10:00:15.2"), [["AllBlocksCleared"]]]],
    )
    for bundle in (b, targz(b)):
        a = run(bundle)
        assert {(r["sub_kind"], r["mechanism"]) for r in rows(a)} == {("cache-reset", "prefix-cache-reset")}
        ev = a.evidence.row(0, named=True)
        assert ev["reset_calls"] == 1 and ev["reset_preempted"] == 3
        assert "records.jsonl:1" in ev["reset_calls_src"] and "vllm.log:3" in ev["reset_calls_src"]
        assert "kvevents.jsonl:1" in ev["reset_calls_src"]


def test_a_reset_is_its_own_engines_in_a_data_parallel_log(tmp_path):
    """DP2: engine 1 resets its cache (its EngineCore_DP1 line), engine 0 runs out of KV blocks at the same
    second; the reset explains engine 1's preemptions only."""
    lines = [
        "(APIServer pid=1) INFO 05-01 10:00:00 [api_server.py:1] vLLM API server version 0.32.0",
        "(EngineCore_DP0 pid=10) INFO 05-01 10:00:01 [core.py:93] Initializing a V1 LLM engine (v0.32.0) with config: "
        "model='m', enable_prefix_caching=True",
        "(EngineCore_DP1 pid=11) INFO 05-01 10:00:01 [core.py:93] Initializing a V1 LLM engine (v0.32.0) with config: "
        "model='m', enable_prefix_caching=True",
        "(EngineCore_DP1 pid=11) INFO 05-01 10:00:15 [block_pool.py:861] Successfully reset prefix cache",
    ]
    b = tmp_path / "dp"
    b.mkdir()
    (b / "vllm.log").write_text("\n".join(lines) + "\n")
    (b / "metrics").mkdir()
    for i, (t, v0, v1) in enumerate((("10:00:11", 0, 0), ("10:00:16", 2, 4))):
        (b / "metrics" / f"{i}.prom").write_text(
            f"# scrape {T(t)}\n# TYPE vllm:num_preemptions_total counter\n"
            f'vllm:num_preemptions_total{{engine="0",model_name="m"}} {v0}.0\n'
            f'vllm:num_preemptions_total{{engine="1",model_name="m"}} {v1}.0\n'
            f'vllm:kv_cache_usage_perc{{engine="0",model_name="m"}} 1.0\n'
            f'vllm:num_requests_waiting{{engine="0",model_name="m"}} 5\n'
        )
    a = run(b)
    by_engine = {}
    for r in rows(a):
        by_engine.setdefault(r["engine"], set()).add((r["gate"], r["sub_kind"], r["mechanism"]))
    assert by_engine["1"] == {("G4-prefix-conflict", "cache-reset", "prefix-cache-reset")}
    assert by_engine["0"] == {("G1-kv-space", "capacity", "kv-capacity")}
    ev = a.evidence.join(a.events.select("event_id", "engine"), on="event_id").filter(pl.col("engine") == "1")
    assert set(ev.get_column("reset_preempted").to_list()) == {4}  # engine 1's four, not engine 0's two


def test_before_0_12_a_reset_preempts_nothing(tmp_path):
    """vLLM 0.11 has no reset_running_requests: its reset line is no cause of a preemption."""
    line = L("10:00:15", "INFO", "block_pool.py:861", "Successfully reset prefix cache")
    b = write(
        tmp_path,
        "old",
        "v08",
        [banner("0.11.0"), *FULL[:1], line, FULL[1]],
        scrapes=[reading("10:00:11", 0), reading("10:00:16", 3)],
    )
    got = rows(run(b))
    assert {(r["gate"], r["sub_kind"]) for r in got} == {("G1-kv-space", "capacity")}
    assert {r["mechanism"] for r in got} == {"kv-capacity"}


def test_a_failed_allocation_beside_a_reset_is_still_a_failed_allocation(tmp_path):
    recs = reset_records("reset_prefix_cache") + [
        pre("10:00:15", 499, "x", blocks_needed=4, pool_free_blocks=1, running=4, waiting=2, reason="allocation failed")
    ]
    got = {r["request_id"]: r for r in rows(run(write(tmp_path, "mixed", "v08", [banner(), *FULL], records=recs)))}
    assert (got["x"]["gate"], got["x"]["sub_kind"], got["x"]["mechanism"]) == ("G1-kv-space", "capacity", "kv-capacity")
    assert all(got[k]["sub_kind"] == "cache-reset" for k in "abc")


def test_a_fix_for_the_guides_prefix_conflict_does_not_address_a_reset(tmp_path):
    a = run(reset_paths(tmp_path, "v08")["kv-events+scrapes"])
    assert not any(x["option"] == "client prefix ids" for x in a.summary()["fixes"] or [])
    assert all(r["fixes"] == [] for r in rows(a))


# ------------------------------------------------------------------ 5. the code fact on every event
def marker(t: str, rid: str) -> dict:
    return L(t, "DEBUG", "core/sched/scheduler.py:301", f"request {rid} set to RequestStatus.PREEMPTED")


V010 = [
    banner("0.10.0"),
    stats("10:00:10", 6, 0, 60.0),
    marker("10:00:14", "long"),
    marker("10:00:15", "req-2"),
    stats("10:00:20", 5, 7, 99.0),
]


@pytest.mark.parametrize("fam", FAMILIES)
def test_a_status_marker_of_a_v1_log_gets_vllms_code_fact(tmp_path, fam):
    b = write(tmp_path, "marker", fam, V010, scrapes=[reading("10:00:05", 0), reading("10:00:25", 2)])
    a = run(b)
    got = rows(a)
    markers = [r for r in got if r["kind"] == "marker"]
    assert sorted(r["request_id"] for r in markers) == ["long", "req-2"]  # an id without digits too
    for r in got:  # the markers and the counted events alike
        assert (r["gate"], r["sub_kind"]) == ("G1-kv-space", "capacity"), r
        assert r["rule"].startswith("G1-capacity-vllm-code"), r
        assert {x["gate"] for x in r["not_in_upstream"]} == {
            "G2-batch-variance",
            "G3-queue-overflow",
            "G4-prefix-conflict",
        }
        assert r["not_evaluable"] == [], r
    assert a.summary()["cause"]["upstream"] is True


def test_a_status_marker_in_a_single_file_and_an_archive(tmp_path):
    p = tmp_path / "one.log"
    p.write_text("\n".join(B.render("apiserver", r) for r in V010) + "\n")
    folder = write(tmp_path, "arch", "json", V010)
    for bundle in (p, targz(folder)):
        got = rows(run(bundle))
        assert {(r["kind"], r["gate"], r["sub_kind"]) for r in got} == {("marker", "G1-kv-space", "capacity")}


def test_the_guides_own_marker_still_shows_a_patched_scheduler(tmp_path):
    rows_ = [
        banner("0.10.0"),
        stats("10:00:10", 6, 0, 60.0),
        L("10:00:14", "WARNING", "scheduler.py:10", "Req-7 PREEMPTED"),
    ]
    got = rows(run(write(tmp_path, "guide", "v08", rows_)))
    assert [r["gate"] for r in got] == ["undetermined"]  # the guide's model: the code fact does not judge it
    assert got[0]["not_in_upstream"] == []


def test_one_sub_kind_for_fewer_free_blocks_than_needed(tmp_path):
    """The pool's level (KV at the ceiling with requests waiting) is ``capacity`` like every other reading of it;
    a rules file that still names ``kv-exhausted`` is read as ``capacity``."""
    rows_ = [
        banner("0.10.0"),
        stats("10:00:12", 5, 7, 99.0),
        L("10:00:14", "WARNING", "scheduler.py:10", "Req-7 PREEMPTED"),
    ]
    got = rows(run(write(tmp_path, "pool", "v08", rows_)))
    assert [(r["gate"], r["sub_kind"], r["rule"]) for r in got] == [
        ("G1-kv-space", "capacity", "G1-kv-exhausted-pressure")
    ]
    overlay = tmp_path / "old.toml"
    overlay.write_text(
        'version = 1\n[[rule]]\nid = "G1-kv-exhausted-pressure"\ngate = "G1-kv-space"\nsub_kind = "kv-exhausted"\n'
        'priority = 70\nrequires = ["kv_usage_peak", "waiting_now"]\nwhen = "kv_usage_peak >= $kv_ceiling"\n'
    )
    rs = load_rules([str(overlay)])
    assert next(r for r in rs.rules if r.id == "G1-kv-exhausted-pressure").sub_kind == "capacity"
    assert not any(r.sub_kind == "kv-exhausted" for r in rs.rules)


# ------------------------------------------------------------------ 3. the chunked-prefill loop
CHUNK_LOG = [
    L("10:00:00", "INFO", "api_server.py:1885", "vLLM API server version 0.11.0"),
    L(
        "10:00:00",
        "INFO",
        "utils.py:328",
        "non-default args: {'model': 'm', 'max_num_batched_tokens': 2048, 'enable_chunked_prefill': True}",
    ),
    L(
        "10:00:01",
        "INFO",
        "core.py:77",
        "Initializing a V1 LLM engine (v0.11.0) with config: model='m', max_seq_len=32768",
    ),
]
CHUNK_STATS = [stats("10:00:20", 4, 3, 99.0), stats("10:00:30", 4, 3, 99.0)]
VICTIMS = [("12", "long"), ("14", "s-1"), ("18", "long"), ("22", "s-2"), ("25", "long")]


def arrivals(prompt: int = 12000) -> list[dict]:
    return [
        {"type": "request", "time": T("10:00:02"), "step": 1, "engine": "0", "request_id": r, "phase": "arrival",
         "prompt_tokens": p, "max_tokens": 100, "v": 2}
        for r, p in (("long", prompt), ("s-1", 300), ("s-2", 300))
    ]  # fmt: skip


def chunk_shapes(tmp: Path, fam: str, prompt: int = 12000) -> dict[str, Path]:
    failed = {"blocks_needed": 8, "pool_free_blocks": 0, "running": 4, "waiting": 3}
    recs = [pre(f"10:00:{t}", 10 * i, r, **failed) for i, (t, r) in enumerate(VICTIMS)]
    resumes = [
        {"type": "request", "time": T(f"10:00:{t}"), "step": 70, "engine": "0", "request_id": "long", "phase": "resume",
         "num_computed_tokens": 0, "v": 2}
        for t in ("13", "19", "26")
    ]  # fmt: skip
    finish = [
        {"type": "request", "time": T("10:00:30"), "step": 90, "engine": "0", "request_id": "long", "phase": "finish",
         "output_tokens": 100, "finish_reason": "length", "num_preemptions": 3, "v": 2}
    ]  # fmt: skip
    scrapes3 = [reading("10:00:05", 0, kv=1.0), reading("10:00:16", 2, kv=1.0), reading("10:00:31", 5, kv=1.0)]
    return {
        "records": write(tmp, "c-rec", fam, CHUNK_LOG + CHUNK_STATS, records=arrivals(prompt) + recs),
        "markers": write(
            tmp, "c-mark", fam, CHUNK_LOG + [marker(f"10:00:{t}", r) for t, r in VICTIMS] + CHUNK_STATS,
            records=arrivals(prompt),
        ),
        "resumes+scrapes": write(tmp, "c-res", fam, CHUNK_LOG + CHUNK_STATS, records=arrivals(prompt) + resumes, scrapes=scrapes3),
        "finish+scrapes": write(
            tmp, "c-fin", fam, CHUNK_LOG + CHUNK_STATS, records=arrivals(prompt) + finish,
            scrapes=[reading("10:00:05", 0, kv=1.0), reading("10:00:31", 5, kv=1.0)],
        ),
    }  # fmt: skip


@pytest.mark.parametrize("fam", FAMILIES)
def test_the_chunked_prefill_loop_in_every_shape(tmp_path, fam):
    for shape, bundle in chunk_shapes(tmp_path, fam).items():
        a = run(bundle)
        got = rows(a)
        assert len(got) == 5, (shape, got)
        assert {(r["gate"], r["sub_kind"]) for r in got} == {("G1-kv-space", "capacity")}, shape
        mech = [r["mechanism"] for r in got]
        assert mech.count("chunked-prefill-loop") == 3 and mech.count("kv-capacity") == 2, (shape, mech)
        named = [r for r in got if r["request_id"] is not None]
        assert all((r["mechanism"] == "chunked-prefill-loop") == (r["request_id"] == "long") for r in named), shape
        assert a.findings.mechanisms == {"chunked-prefill-loop": 3, "kv-capacity": 2}, shape  # the finding's counts


def test_the_loop_reads_the_same_from_an_archive(tmp_path):
    got = rows(run(targz(chunk_shapes(tmp_path, "kubectl")["resumes+scrapes"])))
    assert [r["mechanism"] for r in got].count("chunked-prefill-loop") == 3


def test_a_prompt_that_fits_the_budget_is_no_loop(tmp_path):
    for shape, bundle in chunk_shapes(tmp_path, "v08", prompt=1000).items():
        assert {r["mechanism"] for r in rows(run(bundle))} == {"kv-capacity"}, shape


def test_fallback_mechanisms_come_after_every_rule_with_evidence_of_the_event():
    """The stock path (vLLM's code facts) and the pool's level are fallbacks: a mechanism rule that reads
    only them ranks after every rule that reads the event's own evidence (its request, its step, its
    record, its line), so they never shadow a mechanism that more specific evidence settles."""
    rs = load_rules([])
    fallback = ("code_", "kv_usage_peak", "waiting_now", "stats_", "prom_", "up_")

    def only_fallback(r) -> bool:
        names = r.requires + r.requires_any
        return bool(names) and all(n.startswith(fallback) for n in names)

    for engine in (None, "vllm", "sglang"):
        scope = [r for r in rs.mechanisms if r.enabled and r.engine in (None, engine)]
        late = [r for r in scope if only_fallback(r)]
        early = [r for r in scope if not only_fallback(r)]
        assert late and early
        assert max(r.priority for r in early) < min(r.priority for r in late), (
            engine,
            [(r.id, r.priority) for r in early],
            [(r.id, r.priority) for r in late],
        )
    # The same for the gates: vLLM's code and the pool's level judge only what no evidence of the event did.
    gates = {r.id: r.priority for r in rs.rules if r.enabled}
    code = [p for i, p in gates.items() if i.startswith("G1-capacity-vllm-code") or i == "G1-kv-exhausted-pressure"]
    assert min(code) > gates["G4-cache-reset"] and min(code) > gates["G1-capacity"]
