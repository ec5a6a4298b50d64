"""`preemptlog whatif` and verified fixes on hand-written bundles (no vLLM needed).

Shapes: a V1 log with request lines and prompt_token_ids; the same without prompt ids (prompt
lengths from the stats lines' throughput); block-table request records; a log without request
lines (refused, exit 8); memory lines for the gpu_memory_utilization arithmetic. The CLI is run
through a subprocess.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from preemptlog.whatif.engine_model import StepClock, replay
from preemptlog.whatif.verify import setting_for
from preemptlog.whatif.workload import ReplayConfig, Workload, WRequest, parse_value


def _log(
    n: int = 40,
    prompt_ids: bool = True,
    memory: bool = True,
    stats: bool = True,
    requests: bool = True,
    preemptions: int = 0,
) -> str:
    h = "(APIServer pid=1) INFO 08-01 10:{m:02d}:{s:02d} [{f}] "
    e = "(EngineCore_DP0 pid=2) INFO 08-01 10:{m:02d}:{s:02d} [{f}] "
    out = [
        h.format(m=0, s=0, f="utils.py:328") + "non-default args: {'model': 'm', 'max_num_seqs': 8, 'block_size': 16, "
        "'gpu_memory_utilization': 0.9, 'max_num_batched_tokens': 2048}",
        e.format(m=0, s=1, f="core.py:61") + "Initializing a V1 LLM engine (v0.10.0) with config: model='m', "
        "max_seq_len=4096, enable_prefix_caching=False, chunked_prefill_enabled=True, speculative_config=None, seed=0",
    ]
    if memory:
        out.append(e.format(m=0, s=2, f="gpu_model_runner.py:1800") + "Model loading took 5.00 GiB and 3.2 seconds")
        out.append(e.format(m=0, s=3, f="gpu_worker.py:270") + "Available KV cache memory: 10.00 GiB")
    out.append(e.format(m=0, s=3, f="kv_cache_utils.py:864") + "GPU KV cache size: 1,600 tokens")
    t = 10
    for i in range(n if requests else 0):
        p = 150 + (i % 4) * 40
        ids = f", prompt_token_ids: [{', '.join(str(100 + j) for j in range(p))}]" if prompt_ids else ""
        out.append(
            h.format(m=t // 60, s=t % 60, f="logger.py:41") + f"Received request cmpl-{i:04d}: prompt: 'x', "
            f"params: SamplingParams(n=1, temperature=0.7, max_tokens={120 + (i % 3) * 30}, min_tokens=0){ids}, "
            "lora_request: None."
        )
        if i % 2:
            t += 1
    if stats:
        for k in range(6):
            s = 15 + k * 5
            out.append(
                h.format(m=s // 60, s=s % 60, f="loggers.py:118")
                + f"Engine 000: Avg prompt throughput: {800 - k * 100:.1f} tokens/s, Avg generation throughput: "
                f"{200 + k * 10:.1f} tokens/s, Running: 8 reqs, Waiting: {12 - k} reqs, "
                + (f"Preemptions: {preemptions}, " if preemptions else "")
                + "GPU KV cache usage: 97.0%, "
                "Prefix cache hit rate: 0.0%"
            )
    return "\n".join(out) + "\n"


def _bundle(tmp_path: Path, name: str, text: str) -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "vllm.log").write_text(text)
    return d


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "preemptlog", "whatif", *args], check=False, capture_output=True, text=True, timeout=300
    )


def test_log_only_bundle_replays_and_says_what_was_assumed(tmp_path):
    b = _bundle(tmp_path, "logonly", _log())
    p = _cli(str(b), "--set", "max_num_seqs=4", "-f", "json", "--tz", "UTC")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["workload"]["source"] == "log" and doc["workload"]["requests"] == 40
    assert any("taken as max_tokens" in a for a in doc["workload"]["assumptions"])
    assert "assumed: output lengths" in p.stderr
    rows = {r["scenario"]: r for r in doc["scenarios"]}
    assert rows["observed"]["cfg_num_gpu_blocks"] == 100  # 1,600 tokens / block_size 16
    assert rows["observed"]["cfg_max_num_seqs"] == 8 and rows["max_num_seqs=4"]["cfg_max_num_seqs"] == 4
    assert rows["max_num_seqs=4"]["peak_running"] <= 4
    assert doc["arrivals"] == "time"
    assert "fitted on 6 stats interval(s)" in doc["step_time"]["how"]
    # a stock V1 log shows no count: the calibration cannot be judged
    assert doc["calibration"]["status"] == "uncalibrated" and doc["calibration"]["observed"] is None


def test_prompt_lengths_from_the_stats_lines_when_no_ids_were_printed(tmp_path):
    b = _bundle(tmp_path, "noids", _log(prompt_ids=False))
    p = _cli(str(b), "-f", "json", "--tz", "UTC")
    assert p.returncode == 0, p.stderr
    a = json.loads(p.stdout)["workload"]["assumptions"]
    line = next(x for x in a if x.startswith("prompt length of every request"))
    # prompt throughput 800..300 tok/s x 5 s intervals (5 of them after the first line) / 40 requests
    total = sum((800 - k * 100) * 5 for k in range(1, 6))
    assert f"= {total} tokens / 40 requests = {round(total / 40)} tokens" in line


def test_no_request_lines_is_refused_with_exit_8(tmp_path):
    b = _bundle(tmp_path, "norequests", _log(requests=False))
    p = _cli(str(b), "--tz", "UTC")
    assert p.returncode == 8
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "no workload" in lines[0] and "Received request" in lines[0]


@pytest.mark.parametrize("with_scrape", [False, True])
def test_an_sglang_bundle_is_refused_in_its_engines_words(tmp_path, with_scrape):
    """The what-if model is vLLM's scheduler: an SGLang bundle (its log, with or without its counter) is
    not told to record requests with the vLLM plugin, but why nothing is replayed (exit 8, one line)."""
    log = (
        "[2026-11-02 08:15:30 TP0] Decode batch, #running-req: 60, #token: 199000, token usage: 1.00, "
        "gen throughput (token/s): 2100.00, #queue-req: 12\n"
        "[2026-11-02 08:15:31 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 2, "
        "#new_token_ratio: 0.0980 -> 0.4210\n"
    )
    b = tmp_path / "sg"
    b.mkdir()
    (b / "sglang.log").write_text(log)
    if with_scrape:
        (b / "m.prom").write_text(
            "# TYPE sglang:num_retracted_requests_total counter\n"
            'sglang:num_retracted_requests_total{tp_rank="0"} 2.0 1793607360000\n'
        )
    p = _cli(str(b), "--tz", "UTC")
    assert p.returncode == 8
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "nothing to replay: the bundle is SGLang's" in lines[0], lines
    assert "vLLM's scheduler, not SGLang's" in lines[0] and "PREEMPTLOG_RECORD" not in lines[0]


def test_no_prompt_lengths_anywhere_is_refused(tmp_path):
    b = _bundle(tmp_path, "nothing", _log(prompt_ids=False, stats=False))
    p = _cli(str(b), "--tz", "UTC")
    assert p.returncode == 8 and "prompt lengths are not in the bundle" in p.stderr


@pytest.mark.parametrize(
    "arg,msg",
    [
        ("bogus=1", "not a replay setting"),
        ("max_num_seqs=0", "not a positive integer"),
        ("max_num_seqs=lots", "not a positive integer"),
        ("gpu_memory_utilization=1.5", "not a number in (0, 1]"),
        ("scheduling_policy=lifo", "one of fcfs,priority"),
        ("enable_chunked_prefill=maybe", "true or false"),
        ("novalue", "expects NAME=VALUE"),
    ],
)
def test_bad_settings_are_one_line_usage_errors(tmp_path, arg, msg):
    b = _bundle(tmp_path, "bad", _log(n=4))
    p = _cli(str(b), "--set", arg, "--tz", "UTC")
    assert p.returncode == 2, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and msg in p.stderr and "Traceback" not in p.stderr


def test_gpu_memory_utilization_rescales_the_pool_with_the_arithmetic(tmp_path):
    b = _bundle(tmp_path, "mem", _log())
    p = _cli(str(b), "--set", "gpu_memory_utilization=0.95", "-f", "json", "--tz", "UTC")
    assert p.returncode == 0, p.stderr
    row = json.loads(p.stdout)["scenarios"][1]
    # total = (10 + 5) / 0.9 = 16.67 GiB; KV 10 + 0.05 x 16.67 = 10.83 GiB; floor(100 x 10.83 / 10) = 108
    assert row["cfg_num_gpu_blocks"] == 108
    assert "(KV 10 + weights 5 GiB" in row["notes"] and "= 108" in row["notes"]
    b2 = _bundle(tmp_path, "nomem", _log(memory=False))
    p2 = _cli(str(b2), "--set", "gpu_memory_utilization=0.95", "--tz", "UTC")
    assert p2.returncode == 8 and "Available KV cache memory" in p2.stderr and "num_gpu_blocks" in p2.stderr


def test_every_format_and_a_sweep(tmp_path):
    b = _bundle(tmp_path, "fmt", _log())
    args = [str(b), "--sweep", "num_gpu_blocks=60,200", "--tz", "UTC", "-q"]
    nd = _cli(*args, "-f", "ndjson")
    rows = [json.loads(x) for x in nd.stdout.splitlines()]
    assert [r["scenario"] for r in rows] == ["observed", "num_gpu_blocks=60", "num_gpu_blocks=200"]
    assert rows[2]["preemptions"] <= rows[0]["preemptions"] <= rows[1]["preemptions"]
    assert nd.stderr == ""
    csv = _cli(*args, "-f", "csv").stdout.splitlines()
    assert csv[0].startswith("scenario,engine,status,preemptions,recomputed_tokens,peak_running") and len(csv) == 4
    table = _cli(*args, "-f", "table").stdout
    for label in (
        "preemptions",
        "recomputed tokens",
        "TTFT p95 (s)",
        "latency p95 (s)",
        "throughput tok/s",
        "num_gpu_blocks=200",
    ):
        assert label in table
    assert all(len(ln) <= 80 for ln in table.splitlines())  # wrapped to 80 columns in a pipe (issue 39)
    out = tmp_path / "w.parquet"
    assert _cli(*args, "-o", str(out)).returncode == 0 and out.stat().st_size > 0


def test_records_bundle_uses_steps_and_recorded_outputs(tmp_path):
    d = tmp_path / "rec"
    d.mkdir()
    lines = []
    for i in range(12):
        lines.append(
            {
                "type": "request",
                "ts": 1796000000.0 + i * 0.01,
                "step": 3 * i,
                "engine": "0",
                "request_id": f"r{i}",
                "phase": "arrival",
                "prompt_tokens": 40 + i,
                "max_tokens": 50,
                "priority": i % 2,
                "v": 2,
            }
        )
        if i < 10:  # two requests without a finish record: max_tokens assumed
            lines.append(
                {
                    "type": "request",
                    "ts": 1796000001.0 + i * 0.01,
                    "step": 100 + i,
                    "engine": "0",
                    "request_id": f"r{i}",
                    "phase": "finish",
                    "output_tokens": 20 + i,
                    "finish_reason": "stop",
                    "num_preemptions": 0,
                    "v": 2,
                }
            )
    lines.append(
        {
            "type": "step",
            "ts": 1796000000.5,
            "step": 50,
            "engine": "0",
            "at": "periodic",
            "block_size": 16,
            "num_total_blocks": 30,
            "num_free_blocks": 3,
            "v": 2,
        }
    )
    (d / "records.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    p = _cli(str(d), "--set", "num_gpu_blocks=200", "-f", "json", "--tz", "UTC")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["workload"]["source"] == "records" and doc["arrivals"] == "step"
    assert any("2 of 12 request(s) not recorded" in a for a in doc["workload"]["assumptions"])
    assert "block-table records" in doc["step_time"]["how"]
    obs = doc["scenarios"][0]
    assert obs["cfg_num_gpu_blocks"] == 30 and obs["unfinished"] == 0


def test_model_engine_respects_the_limits():
    reqs = [WRequest(f"r{i}", i * 0.01, 100, 50, 50, arrival_step=i) for i in range(30)]
    wl = Workload(reqs, "records", "test")
    roomy = replay(wl, ReplayConfig(num_gpu_blocks=10_000, max_num_seqs=8), StepClock(0.01, 0.0))
    assert roomy.preemptions == 0 and max(roomy.running) <= 8 and roomy.unfinished == 0
    assert roomy.output_tokens == 30 * 50
    tight = replay(wl, ReplayConfig(num_gpu_blocks=40, max_num_seqs=64), StepClock(0.01, 0.0))
    assert tight.preemptions > 0 and tight.unfinished == 0 and tight.recomputed_tokens > 0
    # every victim was running and loses its computed tokens; every request still finishes
    assert len(tight.finish_step) == 30


def test_fix_options_map_to_replay_settings_generically():
    assert setting_for("--max-num-seqs") == "max_num_seqs"
    assert setting_for("--gpu-memory-utilization") == "gpu_memory_utilization"
    assert setting_for("--block-size") == "block_size"
    assert setting_for("--max-num-batched-tokens") == "max_num_batched_tokens"
    assert setting_for("--num-gpu-blocks-override") == "num_gpu_blocks"
    assert setting_for("--enable-chunked-prefill") == "enable_chunked_prefill"
    assert setting_for("--swap-space") is None and setting_for("client traffic") is None
    assert parse_value("enable_chunked_prefill", "True") is True


def test_verify_fixes_attaches_replays_and_drops_no_gain(tmp_path):
    from preemptlog.analysis import AnalyzeOptions, analyze
    from preemptlog.pipeline.bundle import Workspace
    from preemptlog.whatif import verify as v
    from preemptlog.whatif import verify_fixes

    b = _bundle(tmp_path, "fix", _log())
    with Workspace() as ws:
        a = analyze([str(b)], AnalyzeOptions(tz="UTC"), workspace=ws)
        fixes = [
            {
                "id": "more_blocks",
                "option": "--num-gpu-blocks-override",
                "current": 100,
                "suggested": 400,
                "expected_effect": "more KV",
                "rank": 1,
            },
            {
                "id": "same_seqs",
                "option": "--max-num-seqs",
                "current": 8,
                "suggested": 8,
                "expected_effect": "x",
                "rank": 2,
            },
            {
                "id": "traffic",
                "option": "client traffic",
                "current": None,
                "suggested": "split",
                "expected_effect": "y",
                "rank": 3,
            },
            {
                "id": "cannot",
                "option": "--max-num-batched-tokens",
                "current": None,
                "suggested": "+120 tokens",
                "expected_effect": "z",
                "rank": 4,
            },
        ]
        base = v._baseline(a)
        assert base is not None
        # pretend the model reproduced the incident: a calibrated replay may drop a fix
        v._CACHE[v._key(a)] = (a.requests, a.config, (*base[:5], {**base[5], "status": "calibrated"}))
        kept, dropped = verify_fixes(a, [dict(x) for x in fixes])
    ids = [x["id"] for x in kept]
    assert ids == ["more_blocks", "traffic", "cannot"] and [x["rank"] for x in kept] == [1, 2, 3]
    more = kept[0]
    assert more["replay"]["setting"] == "num_gpu_blocks=400" and more["replay"]["gain"] is True
    assert more["verified"].startswith("verified by replay: ") and " preemptions, p95 latency " in more["verified"]
    assert more["expected_effect"].endswith(more["verified"])
    assert "replay" not in kept[1] and "replay" not in kept[2]
    assert dropped and dropped[0]["id"] == "same_seqs" and "no gain" in dropped[0]["why"]


def test_analyze_output_carries_the_replay(tmp_path):
    b = _bundle(tmp_path, "an", _log(preemptions=2))  # a fixed-stats build: 'Preemptions: 2' per line
    p = subprocess.run(
        [sys.executable, "-m", "preemptlog", "analyze", str(b), "-f", "json", "--tz", "UTC"],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode in (0, 5), p.stderr
    s = json.loads(p.stdout)["summary"]
    assert s["events"] == 12
    replayed = [x for x in (s["fixes"] or []) if x.get("replay")] + [
        x for x in s["fixes_dropped"] if "replay" in x["why"]
    ]
    assert replayed, s["fixes"]
    for x in replayed:
        if "replay" in x and x["replay"]["status"] in ("calibrated", "uncalibrated"):
            if x["replay"]["status"] == "uncalibrated" and x["replay"]["gain"] is False:
                # a replay that does not reproduce the incident and shows no gain: not the change's words
                assert "verified" not in x and "does not reproduce" in x["replay"]["why"]
            else:
                assert x["verified"] in x["expected_effect"]


def test_idle_gaps_do_not_count_as_waiting_time():
    from preemptlog.whatif.metrics import StepTime, figures

    reqs = [WRequest("a", 0.0, 10, 5, 5), WRequest("b", 100.0, 10, 5, 5)]
    tr = replay(Workload(reqs, "log", "test"), ReplayConfig(num_gpu_blocks=100), StepClock(0.01, 0.0), arrivals="time")
    f = figures(tr, StepTime(0.01, 0.0, "test", True))
    assert tr.idle_before and f["latency_p95_s"] is not None and f["latency_p95_s"] < 0.1
    assert f["ttft_p95_s"] is not None and f["ttft_p95_s"] <= 0.011


@pytest.mark.parametrize(
    "args,msg",
    [
        (["--engine", "vllm"], "--engine vllm needs a python with vLLM"),
        (["--config", "max_num_seqs=4", "--sweep", "max_num_seqs=2,3"], "do not combine"),
        (["--arrivals", "step"], "no scheduler steps"),
        (["--vllm-python", "/nonexistent/python", "--engine", "vllm"], "no such file"),
        # a python without vLLM: the hint says so (not "check that it has vLLM 0.32" for every failure)
        (["--vllm-python", sys.executable, "--engine", "vllm"], "has no vLLM: build a venv with ci/vllm-venv"),
    ],
)
def test_engine_and_option_errors_are_usage_errors(tmp_path, monkeypatch, args, msg):
    monkeypatch.delenv("PREEMPTLOG_VLLM_PYTHON", raising=False)
    b = _bundle(tmp_path, "opts", _log(n=4))
    p = _cli(str(b), *args, "--tz", "UTC")
    assert p.returncode == 2, p.stderr
    assert msg in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_a_replay_past_its_budget_is_skipped_with_a_note(tmp_path, monkeypatch):
    from preemptlog.analysis import AnalyzeOptions, analyze
    from preemptlog.pipeline.bundle import Workspace
    from preemptlog.whatif import verify as v

    monkeypatch.setattr(v, "_budget", lambda: 0.0)  # past the budget at the first check (step 1024)
    b = _bundle(tmp_path, "slow", _log(n=160))
    with Workspace() as ws:
        a = analyze([str(b)], AnalyzeOptions(tz="UTC"), workspace=ws)
        fix = {"id": "f", "option": "--max-num-seqs", "current": 8, "suggested": 4, "expected_effect": "e"}
        kept, dropped = v.verify_fixes(a, [fix])
    assert dropped == [] and kept[0]["replay"]["status"] == "skipped" and "passed" in kept[0]["replay"]["why"]
    assert "verified" not in kept[0]


@pytest.mark.parametrize("source", ["log", "records"])
def test_analyze_does_not_replay_an_incident_above_the_request_bound(tmp_path, monkeypatch, source):
    """The fix replays of analyze are bounded before any work: above REPLAY_MAX_REQUESTS requests the
    workload is not built and each replayable fix says why (counted from request lines or records)."""
    from preemptlog.analysis import AnalyzeOptions, analyze
    from preemptlog.pipeline.bundle import Workspace
    from preemptlog.whatif import verify as v

    capture = Path(__file__).resolve().parents[2] / "fixtures" / "findings" / "capture-pressure"
    b = _bundle(tmp_path, "big", _log(n=40)) if source == "log" else capture
    built: list[object] = []
    with Workspace() as ws:
        a = analyze([str(b)], AnalyzeOptions(tz="UTC"), workspace=ws)
        n = v._request_count(a)
        assert n > 0
        monkeypatch.setattr(v, "_baseline", lambda a: built.append(a))
        monkeypatch.setattr(v, "REPLAY_MAX_REQUESTS", n - 1)
        fix = {"id": "f", "option": "--max-num-seqs", "current": 8, "suggested": 4, "expected_effect": "e"}
        kept, dropped = v.verify_fixes(a, [fix])
    assert built == [] and dropped == []
    assert kept[0]["replay"]["status"] == "skipped" and f"{n} requests" in kept[0]["replay"]["why"]


@pytest.mark.parametrize("preemptions", [0, 7])
def test_the_incident_column_is_the_measured_count_beside_the_replays(tmp_path, preemptions):
    """Issue 26 item 5: the table's `incident` column is what the bundle shows (its count, or 'not visible'),
    every other column is a replay; the JSON carries the same count on the observed row."""
    b = _bundle(tmp_path, f"inc{preemptions}", _log(preemptions=preemptions))
    t = _cli(str(b), "--set", "max_num_seqs=4", "-f", "table", "--tz", "UTC")
    assert t.returncode == 0, t.stderr
    header = next(ln for ln in t.stdout.splitlines() if "incident" in ln)
    assert header.index("incident") < header.index("replay: observed") < header.index("replay: max_num_seqs=4")
    first = next(ln for ln in t.stdout.splitlines() if "preemptions" in ln)
    cells = [c.strip() for c in first.strip("│┃| ").split("│")]
    doc = json.loads(_cli(str(b), "--set", "max_num_seqs=4", "-f", "json", "--tz", "UTC").stdout)
    rows = {r["scenario"]: r for r in doc["scenarios"]}
    seen = doc["calibration"]["observed"]
    assert doc["incident"]["preemptions"] == seen == rows["observed"]["incident_preemptions"]
    assert rows["max_num_seqs=4"]["incident_preemptions"] is None
    assert cells[1] == ("not visible" if seen is None else str(seen))
    assert cells[2] == str(rows["observed"]["preemptions"])  # the replay, not the incident


def test_each_assumption_says_which_way_it_errs(tmp_path):
    b = _bundle(tmp_path, "dirs", _log(prompt_ids=False))
    a = json.loads(_cli(str(b), "-f", "json", "--tz", "UTC").stdout)["workload"]["assumptions"]
    prompt = next(x for x in a if x.startswith("prompt length of every request"))
    output = next(x for x in a if x.startswith("output lengths"))
    assert "errs low where prefix caching" in prompt and "vllm/v1/metrics/loggers.py" in prompt
    assert "err high" in output


def _v0_log(n: int = 24) -> str:
    h = "INFO 08-01 10:{m:02d}:{s:02d} {f}] "
    out = [
        h.format(m=0, s=0, f="api_server.py:440") + "vLLM API server version 0.5.5",
        h.format(m=0, s=1, f="gpu_executor.py:102") + "# GPU blocks: 100, # CPU blocks: 512",
    ]
    for i in range(n):
        ids = ", ".join(str(100 + j) for j in range(150 + (i % 4) * 40))
        out.append(
            h.format(m=0, s=10 + i // 2, f="async_llm_engine.py:673") + f"Received request cmpl-{i:04d}: prompt: 'x', "
            f"params: SamplingParams(n=1, temperature=0.7, max_tokens={120 + (i % 3) * 30}, min_tokens=0), "
            f"prompt_token_ids: [{ids}], lora_request: None."
        )
    for k in range(6):
        s = 25 + k * 5
        out.append(
            h.format(m=s // 60, s=s % 60, f="metrics.py:351")
            + f"Avg prompt throughput: {800 - k * 100:.1f} tokens/s, Avg generation throughput: {200 + k * 10:.1f} "
            f"tokens/s, Running: 8 reqs, Swapped: 0 reqs, Pending: {12 - k} reqs, GPU KV cache usage: 97.0%, "
            "CPU KV cache usage: 0.0%."
        )
    return "\n".join(out) + "\n"


def test_a_v0_incident_is_said_to_be_replayed_by_the_v1_scheduler(tmp_path):
    # the model replays V1's scheduler only; a V0 engine's incident said nothing of it before
    p = _cli(str(_bundle(tmp_path, "v0", _v0_log())), "-f", "json", "--tz", "UTC")
    assert p.returncode == 0, p.stderr
    said = [a for a in json.loads(p.stdout)["config_assumptions"] if a.startswith("the incident ran vLLM's V0 engine")]
    assert len(said) == 1 and "v0/vllm.log:" in said[0] and "vllm/core/scheduler.py" in said[0], said
    assert "the replay is of the V1 scheduler" in said[0] and "not with the incident" in said[0]
    v1 = _cli(str(_bundle(tmp_path, "v1", _log())), "-f", "json", "--tz", "UTC")
    assert v1.returncode == 0, v1.stderr
    assert not [a for a in json.loads(v1.stdout)["config_assumptions"] if "V0 engine" in a]
