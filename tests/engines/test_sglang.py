"""SGLang, the second engine (issue 29): its retraction lines per release, TP ranks, stats,
configuration, metrics, verdicts, mechanisms, fixes and the outputs that name the engine.

Inputs: the hand-written logs of fixtures/sglang (one per release line, in several wrappings;
its README says where each format comes from) and excerpts quoted in SGLang's issues, each cited
where it is used (sgl-project/sglang#4184, #6778, #11970, #14972, #26248).
"""

from __future__ import annotations

import json
import subprocess
import sys

import polars as pl
import pytest

from preemptlog.analysis import AnalyzeOptions, analyze
from preemptlog.engines import facts as F
from preemptlog.engines.sglang import knobs
from preemptlog.engines.sglang import source as sglang_log
from preemptlog.sources import sniff

from ..conftest import FIXTURES

SG = FIXTURES / "sglang"
OPTS = AnalyzeOptions(tz="UTC", year=2025)


def _run(path, **kw):
    return analyze([str(path)], AnalyzeOptions(tz="UTC", year=2025, **kw))


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
    return p


def _mech(a, event_id):
    pe = a.findings.per_event
    return pe.filter(pl.col("event_id") == event_id).get_column("mechanism")[0]


def _verdict(a, event_id):
    return a.verdicts.filter(pl.col("event_id") == event_id).row(0, named=True)


# ------------------------------------------------------------------ the line families


def test_0_1_to_0_2_bare_lines_count_without_a_time():
    a = _run(SG / "sglang-0.2-bare.log")
    assert [f.kind for f in a.bundle.files] == ["sglang-log"]
    ret = a.frames["sgl_retractions"]
    assert ret.select("wording", "retracted", "ratio_before", "ratio_after").rows() == [("0.1-0.2", 2, 0.2, 0.415)]
    assert a.events.height == 2 and a.events.get_column("time").null_count() == 2
    # 0.2.0's floor is min(0.2 c, 1): the ratio 0.2000 before the retraction is at it
    assert _mech(a, ret.get_column("source")[0] + ":5") == "ratio-over-admission"
    # "Decode out of memory. This should never happen." is an allocation error, not a retraction
    assert any("not retractions" in n for n in a.notes)
    st = a.stats.filter(pl.col("family") == "sglang")
    assert st.get_column("running").to_list() == [40, 38] and st.get_column("kv_usage").to_list() == [99.0, 95.0]


def test_0_3_to_0_4_6_tp_ranks_are_one_event_per_second_and_dp_rank():
    a = _run(SG / "sglang-0.4-tp.log")
    ret = a.frames["sgl_retractions"]
    # 4 TP ranks printed each line: 1 + 2 retracted requests, 3 events (not 12)
    assert ret.select("line", "tp", "retracted", "rank_lines", "wording").rows() == [
        (8, 0, 1, 3, "0.3.0-0.4.6"),
        (14, 0, 2, 3, "0.3.0-0.4.6"),  # TP2 printed first; the lowest rank's line is kept
    ]
    assert a.events.get_column("event_id").to_list() == [
        f"{ret.get_column('source')[0]}:8",
        f"{ret.get_column('source')[0]}:14",
        f"{ret.get_column('source')[0]}:14~q2",
    ]
    assert a.events.get_column("cumulative").to_list() == [1, 2, 3]
    assert set(a.events.get_column("engine_kind")) == {"sglang"}
    assert any("repeated by other TP ranks" in n for n in a.notes)
    # the allocation error line is read but not counted
    assert a.counters["sglang"]["alloc_errors"] == 1


def test_0_4_7_to_0_5_5_dp_ranks_are_engines_and_ms_times_are_kept():
    a = _run(SG / "sglang-0.5.5-dp.log")
    ev = a.events
    assert ev.height == 6  # 3 retracted on DP0 and 3 on DP1 at the same instant: two engines
    assert ev.group_by("engine").len().sort("engine").rows() == [("0", 3), ("1", 3)]
    assert set(ev.get_column("time_precision")) == {"ms"}
    assert str(ev.get_column("time")[0]) == "2025-11-03 14:05:10.512000+00:00"
    # conservativeness 1.3 seen in server_args: the floor is 0.7 x 1.3 x 0.14 = 0.1274, the line's old ratio
    e = a.evidence.filter(pl.col("event_id") == ev.get_column("event_id")[0]).row(0, named=True)
    assert e["sgl_ratio_floor"] == pytest.approx(0.1274) and e["sgl_ratio_floor_status"] == "seen"
    assert _mech(a, ev.get_column("event_id")[0]) == "ratio-over-admission"
    assert set(a.frames["sgl_retractions"].get_column("wording")) == {"0.4.7-0.5.5"}


def test_0_5_10_plus_gained_hybrid_pool_and_testing_retraction_behind_docker_timestamps():
    a = _run(SG / "sglang-0.5.23-hybrid.log")
    ret = a.frames["sgl_retractions"]
    assert ret.select("line", "retracted", "new_tokens_gained", "mamba_num_gained", "kv_full", "wording").rows() == [
        (6, 2, 2048, 2, True, "0.5.10+"),
        (8, 1, 990, 1, True, "0.5.10+"),
        (11, 1, 128, None, False, "0.5.10+"),
    ]
    src = ret.get_column("source")[0]
    # the docker RFC 3339 prefix gives the time (zone Z, sub-second)
    assert str(a.events.get_column("time")[0]) == "2026-11-02 08:15:31.204000+00:00"
    assert _mech(a, f"{src}:6") == "ratio-over-admission"  # 0.0980 at the default conservativeness 1.0
    assert _mech(a, f"{src}:8") == "hybrid-pool"  # ratio above the floor, a mamba pool
    assert _mech(a, f"{src}:11") == "test-retraction"
    assert _verdict(a, f"{src}:11")["gate"] == "undetermined"  # SGLANG_TEST_RETRACT: not KV pressure
    # recompute: #new_tokens_gained split over the line's requests
    pe = a.findings.per_event.sort("event_id")
    tok = dict(zip(pe.get_column("event_id"), pe.get_column("recompute_tokens"), strict=True))
    assert tok[f"{src}:6"] == 1024 and tok[f"{src}:6~q2"] == 1024 and tok[f"{src}:8"] == 990
    cfg = {r["key"]: r["value"] for r in a.config.iter_rows(named=True)}
    assert cfg["hybrid_pool"] == "mamba" and cfg["sglang_version"] == "0.5.10+"


def test_json_logging_config_lines_collapse_by_process():
    a = _run(SG / "sglang-json.log")
    assert [f.kind for f in a.bundle.files] == ["sglang-log"]
    ret = a.frames["sgl_retractions"]
    assert ret.height == 1 and ret.get_column("rank_lines").to_list() == [1]  # the TP1 process's copy
    assert a.events.height == 2
    assert a.frames["sgl_batches"].get_column("running").to_list() == [80, 77]


def test_iso_text_format_of_a_custom_logging_config():
    a = _run(SG / "sglang-iso-format.log")
    assert a.events.height == 1 and str(a.events.get_column("time")[0]).startswith("2026-11-02 09:10:01.204")


def test_not_retractions_are_not_counted(tmp_path):
    p = _write(
        tmp_path,
        "s.log",
        "[2025-08-01 09:58:00] server_args=ServerArgs(model_path='m', retraction_policy='length', "
        "schedule_conservativeness=1.0)\n"
        "[2025-08-01 10:00:02 TP0] Decode out of memory. Try to lower your batch size.\n"
        "[2025-08-01 10:00:03] If you see KV cache pool is full. Retract requests. occasionally, it is okay\n",
    )
    a = _run(p)
    assert a.events.height == 0
    assert a.summary()["headline"].startswith("0 retractions")
    assert a.summary()["count_visible"] is True  # SGLang logs every retraction: 0 is a count


def test_same_line_twice_on_one_rank_in_one_second_is_two_retractions(tmp_path):
    line = "[2026-01-01 00:00:01 TP{}] KV cache pool is full. Retract requests. #retracted_reqs: 1, #new_token_ratio: 0.5000 -> 0.6000\n"
    p = _write(tmp_path, "s.log", line.format(0) + line.format(1) + line.format(0) + line.format(1))
    a = _run(p)
    assert a.events.height == 2 and a.frames["sgl_retractions"].get_column("tp").to_list() == [0, 0]


def test_quoted_issue_4184_excerpt():
    """sgl-project/sglang#4184 (DeepSeek-R1, 0.4.x): TP8-TP15 of a node print each retraction."""
    a = _run(SG / "issue-4184.log")
    ret = a.frames["sgl_retractions"]
    assert ret.select("line", "tp", "rank_lines").rows() == [(3, 10, 2), (6, 8, 7)]
    assert a.events.height == 2
    src = ret.get_column("source")[0]
    assert _mech(a, f"{src}:6") == "ratio-over-admission"  # 0.0980: the floor at conservativeness 1.0
    assert _mech(a, f"{src}:3") == "kv-capacity"  # 0.1474: above it
    v = _verdict(a, f"{src}:6")
    assert (v["gate"], v["sub_kind"], v["rule"]) == ("G1-kv-space", "capacity", "G1-capacity-sglang-retraction")


def test_quoted_batch_lines_of_issues(tmp_path):
    """Decode batch lines quoted in sgl-project/sglang#6778 (0.4.x), #14972 (0.5.x, trailing comma),
    #26248 (hybrid SWA pool) and the weight-loading line of #11970."""
    text = (
        "[2025-05-30 17:15:07 TP0] Decode batch. #running-req: 36, #token: 958017, token usage: 0.96, "
        "gen throughput (token/s): 812.40, #queue-req: 12\n"
        "[2025-12-12 08:43:59 TP0] Decode batch, #running-req: 6, #token: 1920, token usage: 0.94, cuda graph: True, "
        "gen throughput (token/s): 446.45, #queue-req: 5,\n"
        "[2026-05-24 03:51:45 TP0] Decode batch, #running-req: 4, #full token: 2642688, full token usage: 1.00, "
        "#swa token: 14592, swa token usage: 0.06, cuda graph: True, gen throughput (token/s): 429.52, #queue-req: 3\n"
        "[2025-10-22 20:21:39] Load weight begin. avail mem=94.69 GB\n"
    )
    a = _run(_write(tmp_path, "q.log", text))
    b = a.frames["sgl_batches"]
    assert b.select("running", "queue", "token_usage", "swa_token_usage").rows() == [
        (36, 12, 0.96, None),
        (6, 5, 0.94, None),
        (4, 3, 1.0, 0.06),
    ]
    cfg = {r["key"]: r["value"] for r in a.config.iter_rows(named=True)}
    assert cfg["total_gpu_memory_gib"] == "94.69" and cfg["hybrid_pool"] == "swa"
    assert a.stats.filter(pl.col("family") == "sglang").get_column("kv_usage").to_list() == [96.0, 94.0, 100.0]


def test_ray_process_prefix_gives_the_time(tmp_path):
    """SGLang's own debug_utils/log_parser.py (0.5.10+) reads a Ray ``(Name pid=N, ip=A)`` prefix before the bracket."""
    p = _write(
        tmp_path,
        "r.log",
        "(SGLangEngine pid=4711, ip=10.0.0.7) [2026-11-02 08:15:31 DP0 TP0] KV cache pool is full. Retract requests. "
        "#retracted_reqs: 1, #new_tokens_gained: 300, #new_token_ratio: 0.0980 -> 0.2000",
    )
    a = _run(p)
    assert str(a.events.get_column("time")[0]) == "2026-11-02 08:15:31+00:00"


def test_sniffing_tells_sglang_from_vllm():
    assert sniff("[2025-03-07 21:49:45 TP9] Decode out of memory happened. #retracted_reqs: 1")[0] == "sglang-log"
    assert sniff("[2025-03-07 21:49:45 TP9] Load weight begin. avail mem=78.50 GB\n" * 2)[0] == "sglang-log"
    vllm = "INFO 05-09 00:49:33 scheduler.py:1077] Sequence group 1 is preempted by PreemptionMode.RECOMPUTE mode"
    assert sniff(vllm)[0] == "vllm-log"
    assert sglang_log._sniff("[2025-01-01 10:00:00] some other program") == 0


# ------------------------------------------------------------------ config, rules, fixes


def test_config_frame_from_start_up_and_server_args():
    a = _run(SG / "sglang-0.4-tp.log")
    cfg = {r["key"]: (r["value"], r["status"]) for r in a.config.iter_rows(named=True)}
    assert cfg["kv_cache_tokens"] == ("200000", "seen")
    assert cfg["max_running_requests"][0] == "1024"
    assert cfg["schedule_conservativeness"] == ("1.0", "seen")
    assert cfg["kv_cache_memory_gib"] == ("12.2", "seen")
    assert cfg["engine_kind"] == ("sglang", "derived")
    assert cfg["retraction_policy"] == ("length", "default")  # SGLang's default, said as default
    assert "block_size" not in cfg and "max_num_seqs" not in cfg  # vLLM's defaults are not an SGLang bundle's


def test_fixes_are_sglang_flags_computed_from_the_incident():
    s = _run(SG / "sglang-0.4-tp.log").summary()
    fixes = {x["option"]: x for x in s["fixes"]}
    assert set(fixes) <= {
        "--schedule-conservativeness",
        "--max-running-requests",
        "--mem-fraction-static",
        "--chunked-prefill-size",
        "--retraction-policy",
    }
    c = fixes["--schedule-conservativeness"]
    assert (c["current"], c["suggested"]) == ("1.0", "1.3") and "0.0980 -> 0.1274" in c["expected_effect"]
    assert fixes["--max-running-requests"]["suggested"] == "58"  # the batch after the retractions
    # the prefill of 7800 new tokens (>= half the 8192 chunk) came 13 s before the first retraction, outside
    # the 10 s window: no chunked-prefill fix without that evidence, and the summary says why
    assert "--chunked-prefill-size" not in fixes
    assert "sglang_chunked_prefill_size" in {d["id"] for d in s["fixes_dropped"]}
    assert all(x.get("engine_kind") == "sglang" and x["replay"]["status"] == "not replayed" for x in s["fixes"])
    assert s["fixes"][0]["option"] == "--schedule-conservativeness"


def test_chunked_prefill_fix_after_a_large_prefill():
    s = _run(SG / "sglang-0.5.23-hybrid.log").summary()
    cp = {x["option"]: x for x in s["fixes"]}["--chunked-prefill-size"]
    assert (cp["current"], cp["suggested"]) == ("8192", "4096")  # 8192 new tokens 2 s before the retraction
    mf = {x["option"]: x for x in s["fixes"]}["--mem-fraction-static"]
    assert (mf["current"], mf["suggested"]) == ("0.85", "0.91")  # (14.20 - 8) GB of 94.69 GB: 6 steps


def test_mem_fraction_static_from_available_memory(tmp_path):
    text = (
        (SG / "sglang-0.4-tp.log")
        .read_text()
        .replace("context_len=163840", "context_len=163840, available_gpu_mem=16.35 GB")
    )
    s = _run(_write(tmp_path, "m.log", text)).summary()
    m = {x["option"]: x for x in s["fixes"]}["--mem-fraction-static"]
    # (16.35 - 8) GB over the 78.50 GB free before the weights: 10 steps of 0.01
    assert (m["current"], m["suggested"]) == ("0.85", "0.95")
    # 0.10 x 78.50 GB at (6.10 + 6.10) GB per 200000 tokens
    assert "about +128,688 KV tokens per rank" in m["expected_effect"]


def test_conservativeness_ceiling_and_the_docs_once_a_minute(tmp_path):
    base = "[2026-01-01 00:{m:02d}:00 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 1, #new_token_ratio: 0.1400 -> 0.3000\n"
    slow = "".join(base.format(m=m) for m in range(0, 10, 3))  # 4 retractions in 9 minutes
    s = _run(_write(tmp_path, "slow.log", slow)).summary()
    dropped = {d["id"]: d["why"] for d in s["fixes_dropped"]}
    assert "about once a" in dropped["sglang_schedule_conservativeness"]
    fast = "[2026-01-01 00:00:00] server_args=ServerArgs(schedule_conservativeness=1.5)\n" + "".join(
        base.format(m=0) for _ in range(3)
    )
    s = _run(_write(tmp_path, "fast.log", fast)).summary()
    dropped = {d["id"]: d["why"] for d in s["fixes_dropped"]}
    assert "highest new-token ratio" in dropped["sglang_schedule_conservativeness"]
    assert knobs.ratio_floor(1.5) == pytest.approx(0.14)


def test_retraction_policy_fix_needs_priority_scheduling(tmp_path):
    text = (
        "[2026-11-02 08:00:00] server_args={'schedule_conservativeness': 1.0, 'retraction_policy': 'length', "
        "'enable_priority_scheduling': True}\n"
        "[2026-11-02 08:15:31 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 1, "
        "#new_tokens_gained: 100, #new_token_ratio: 0.0980 -> 0.4210\n"
    )
    s = _run(_write(tmp_path, "p.log", text)).summary()
    rp = {x["option"]: x for x in s["fixes"]}["--retraction-policy"]
    assert (rp["current"], rp["suggested"]) == ("length", "priority")


def test_engine_facts_rows_for_sglang():
    f = F.default_trigger(F.SGLANG, None, (0, 4, 6), None)
    assert f is not None and f.id == "sglang-retract-decode-mem" and f.gate == "G1-kv-space"
    assert "scheduler.py update_running_batch" in f.source and "4459" in f.source
    assert F.default_trigger(F.SGLANG, None, (0, 5, 23), "priority").id == "sglang-retract-priority-policy"
    assert F.default_trigger(F.SGLANG, None, (0, 5, 15), "priority").id == "sglang-retract-decode-mem"
    assert F.gates_settled(F.SGLANG, None, None, None) == {"G1-kv-space"}


# ------------------------------------------------------------------ metrics


PROM = """# scrape 2026-11-02T08:15:00Z
sglang:num_retracted_requests_total{{model_name="q",tp_rank="0"}} {a}
sglang:num_retracted_requests_total{{model_name="q",tp_rank="1"}} {a}
sglang:num_retracted_input_tokens_total{{model_name="q",tp_rank="0"}} 4000
sglang:num_retracted_output_tokens_total{{model_name="q",tp_rank="0"}} 1000
sglang_token_usage{{model_name="q",tp_rank="0"}} 0.97
sglang:num_queue_reqs{{model_name="q",tp_rank="0"}} 3
sglang:num_retractions_bucket{{model_name="q",le="0.0"}} 90
sglang:num_retractions_bucket{{model_name="q",le="1.0"}} 97
sglang:num_retractions_bucket{{model_name="q",le="2.0"}} 99
sglang:num_retractions_bucket{{model_name="q",le="4.0"}} 100
sglang:num_retractions_bucket{{model_name="q",le="5.0"}} 100
sglang:num_retractions_count{{model_name="q"}} 100
sglang:num_retractions_sum{{model_name="q"}} 13
# scrape 2026-11-02T08:15:10Z
sglang:num_retracted_requests_total{{model_name="q",tp_rank="0"}} {b}
sglang:num_retracted_requests_total{{model_name="q",tp_rank="1"}} {b}
sglang:num_retracted_input_tokens_total{{model_name="q",tp_rank="0"}} 5600
sglang:num_retracted_output_tokens_total{{model_name="q",tp_rank="0"}} 1500
sglang_token_usage{{model_name="q",tp_rank="0"}} 0.99
sglang:num_queue_reqs{{model_name="q",tp_rank="0"}} 9
sglang:num_retractions_bucket{{model_name="q",le="0.0"}} 92
sglang:num_retractions_bucket{{model_name="q",le="1.0"}} 100
sglang:num_retractions_bucket{{model_name="q",le="2.0"}} 103
sglang:num_retractions_bucket{{model_name="q",le="4.0"}} 104
sglang:num_retractions_bucket{{model_name="q",le="5.0"}} 105
sglang:num_retractions_count{{model_name="q"}} 105
sglang:num_retractions_sum{{model_name="q"}} 20
"""


def test_metrics_counters_max_across_tp_ranks_recompute_and_histogram(tmp_path):
    a = _run(_write(tmp_path, "m.prom", PROM.format(a=10, b=14)))
    assert [f.kind for f in a.bundle.files] == ["prometheus"]
    assert a.events.height == 4  # 14 - 10 on each TP rank: the largest, never the sum
    assert set(a.events.get_column("engine_kind")) == {"sglang"}
    assert set(a.verdicts.get_column("rule")) == {"G1-capacity-sglang-counter"}
    rc = a.findings.recompute["sglang_counters"]
    assert (rc["input_tokens"], rc["output_tokens"], rc["tokens_at_most"]) == (1600, 500, 2100)
    h = a.findings.thrash["histogram"]
    assert h["metric"] == "sglang:num_retractions"
    assert h["distribution"] == {"0": 2, "1": 1, "2": 1, "3-5": 1, "6+": 0}
    s = a.summary()
    assert s["headline"].startswith("4 retractions")
    assert "at most 2100 tokens recomputed (SGLang's counters)" in s["findings_headline"]  # the cost line
    ps = a.frames["prom_series"]
    assert ps.get_column("kv_usage").to_list() == [97.0, 99.0]


def test_metrics_0_4_10_running_total_gauge_is_the_count(tmp_path):
    text = (
        '# scrape 2026-01-01T00:00:00Z\nsglang:total_retracted_reqs{model_name="q"} 7\n'
        '# scrape 2026-01-01T00:00:10Z\nsglang:total_retracted_reqs{model_name="q"} 9\n'
    )
    a = _run(_write(tmp_path, "g.prom", text))
    assert a.events.height == 2 and set(a.events.get_column("engine_kind")) == {"sglang"}


# ------------------------------------------------------------------ outputs name the engine


def _cli(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "preemptlog", *args], capture_output=True, text=True, cwd=cwd, timeout=300
    )


@pytest.fixture
def mixed(tmp_path):
    d = tmp_path / "mixed"
    d.mkdir()
    (d / "sglang.log").write_text((SG / "sglang-0.5.23-hybrid.log").read_text())
    (d / "vllm.log").write_text((FIXTURES / "golden" / "v1-patched-0.14.log").read_text())
    return d


def test_mixed_bundle_each_names_the_engine_of_every_server(mixed):
    r = _cli("analyze", str(mixed), "--each", "--tz", "UTC", "--year", "2026", "-f", "ndjson")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(x) for x in r.stdout.splitlines()]
    by = {(x["server"], x["engine_kind"]) for x in rows}
    assert by == {("mixed/sglang.log", "sglang"), ("mixed/vllm.log", "vllm")}
    r = _cli("analyze", str(mixed), "--each", "--tz", "UTC", "--year", "2026", "-f", "json")
    doc = json.loads(r.stdout)
    kinds = {s["server"]: s["summary"]["engine_kind"] for s in doc["servers"]}
    assert kinds == {"mixed/sglang.log": "sglang", "mixed/vllm.log": "vllm"}
    heads = {s["server"]: s["summary"]["headline"] for s in doc["servers"]}
    assert "retractions" in heads["mixed/sglang.log"] and "preemptions" in heads["mixed/vllm.log"]


def test_mixed_bundle_without_each_warns_and_counts_both(mixed):
    a = analyze([str(mixed)], AnalyzeOptions(tz="UTC", year=2026))
    s = a.summary()
    assert s["engine_kind"] == "sglang+vllm" and set(s["engine_kinds"]) == {"sglang", "vllm"}
    # two servers are not one incident: the headline says so, never one mixed sentence (issue 39 item 3)
    assert s["headline"].startswith("Not one incident: 2 logs") and "preemptions/retractions" not in s["headline"]
    assert sorted(s["incidents"]) == ["mixed/sglang.log", "mixed/vllm.log"]
    assert any("server" in w for w in a.warnings)  # two servers in one bundle
    fixes = {x["option"]: x.get("engine_kind", "vllm") for x in s["fixes"]}
    assert fixes.get("--schedule-conservativeness") == "sglang"


def test_analyze_table_explain_and_report_carry_the_engine(tmp_path):
    log = SG / "sglang-0.4-tp.log"
    r = _cli("analyze", str(log), "--tz", "UTC", "-f", "csv")
    assert r.returncode == 0, r.stderr
    head, first = r.stdout.splitlines()[:2]
    assert "engine_kind" in head.split(",") and ",sglang," in first
    assert r.stderr.splitlines()[0].startswith("3 retractions")
    r = _cli("analyze", str(log), "--tz", "UTC", "-f", "table")
    assert r.returncode == 0 and "3 event(s) (SGLang retractions)" in r.stdout.splitlines()[0]
    ev = f"{log}:8"
    r = _cli("explain", ev, str(log), "--tz", "UTC", "-f", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["event"]["engine_kind"] == "sglang" and doc["verdict"]["rule"] == "G1-capacity-sglang-retraction"
    # the window's log rows are SGLang's log, never labelled vLLM's
    kinds = {w["kind"] for w in doc["window"]}
    assert kinds == {"sglang-log"}, kinds
    out = tmp_path / "r.html"
    r = _cli("report", str(log), "--tz", "UTC", "-o", str(out))
    assert r.returncode == 0, r.stderr
    html = out.read_text()
    assert "SGLang" in html and "retraction event(s)" in html
