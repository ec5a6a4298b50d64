"""The what-if replays the incident's own vLLM version (issue 37, item 4).

vLLM 0.34's scheduler settings (``cache_aware_admission_window`` 0 = off,
``cache_aware_admission_threshold`` 0.5, ``max_num_inflight_kv_loads`` None) join ``watermark`` and
``scheduler_reserve_full_isl`` in both replay engines: read from ``non-default args``, else the
version's defaults (the engine registry's SchedulerVersion; a version without a setting behaves as
before it came); a setting the version does not have is refused in vLLM's own words (argparse:
``vllm serve: error: unrecognized arguments: ...``, checked on 0.32.0 and 0.33.0). The model engine
follows each version's priority loop: from 0.33 a lowest-priority request that preempts itself no
longer stops the running loop. The `vllm` engine picks the venv of the incident's version
(``PREEMPTLOG_VLLM_034_PYTHON``...). tests/whatif/test_whatif_vllm034.py holds both engines to the real
0.32 and 0.34 schedulers.

Shapes: the model on a priority workload where the loop matters (0.32 / 0.33 / 0.34); V1 logs of
0.18, 0.32 and 0.34 (defaults and refusals per version), a 0.34 log stating the new settings;
records with the plugin's header naming the version; --base and --set of the version; the venv
choice per version.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from preemptlog.whatif.engine_model import StepClock, replay
from preemptlog.whatif.engine_vllm import python_for, version_env
from preemptlog.whatif.workload import ReplayConfig, Workload, WRequest, parse_value
from tests.whatif.test_whatif import _bundle, _cli, _log

# tests/support/vllm_driver.py's pressure workload under priority (i % 3), 32 requests, prompts 40-76, outputs
# 40-60, one arrival every 2 steps, 32 blocks: the real schedulers preempt 23 times on 0.32.0 and 15
# on 0.34.0 (tests/whatif/test_whatif_vllm034.py)
PRIO = Workload(
    [
        WRequest(f"req-{i}", 0.0, 40 + (i % 5) * 9, 40 + (i % 3) * 10, 40 + (i % 3) * 10, i % 3, arrival_step=2 * i)
        for i in range(32)
    ],
    "records",
    "test",
)
PRIO_CFG = ReplayConfig(
    num_gpu_blocks=32,
    block_size=16,
    max_num_seqs=16,
    max_num_batched_tokens=512,
    max_model_len=496,
    scheduling_policy="priority",
)


def _model(version: str | None, **kw):
    return replay(PRIO, replace(PRIO_CFG, vllm_version=version, **kw), StepClock(0.03, 0.0), arrivals="step")


def test_the_priority_loop_follows_the_version():
    old, v33, new = _model("0.32.0"), _model("0.33.0"), _model("0.34.0")
    assert (old.preemptions, v33.preemptions, new.preemptions) == (23, 15, 15)
    assert v33.preempted == new.preempted
    # the first step they part: a request preempted itself; on 0.32 the loop stopped there, on 0.34 the
    # requests after it (higher priority) were scheduled in the same step
    k = next(i for i, (a, b) in enumerate(zip(old.step_tokens, new.step_tokens, strict=False)) if a != b)
    assert new.step_tokens[k] > old.step_tokens[k]
    assert old.preempted[k] == new.preempted[k] and old.preempted[k]
    # FCFS is the same in every version (the victim is the last running request: nothing comes after it)
    assert _model("0.32.0", scheduling_policy="fcfs").preempted == _model("0.34.0", scheduling_policy="fcfs").preempted
    # a bundle without a version replays the reference version (0.32)
    assert _model(None).preempted == old.preempted


def _v1_log(version: str, args: str = "") -> str:
    text = _log(n=12)
    return text.replace("(v0.10.0)", f"(v{version})").replace(
        "'max_num_batched_tokens': 2048}", f"'max_num_batched_tokens': 2048{args}}}"
    )


def _doc(b, *extra: str) -> dict:
    p = _cli(str(b), "-f", "json", "--tz", "UTC", *extra)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_the_new_settings_are_read_from_non_default_args(tmp_path):
    args = ", 'cache_aware_admission_window': 8, 'cache_aware_admission_threshold': 0.25, "
    args += "'max_num_inflight_kv_loads': 4, 'watermark': 0.02, 'scheduler_reserve_full_isl': False"
    doc = _doc(_bundle(tmp_path, "v34", _v1_log("0.34.0", args)))
    obs = doc["scenarios"][0]
    assert obs["cfg_vllm_version"] == "0.34.0"
    assert (obs["cfg_cache_aware_admission_window"], obs["cfg_cache_aware_admission_threshold"]) == (8, 0.25)
    assert (obs["cfg_max_num_inflight_kv_loads"], obs["cfg_watermark"], obs["cfg_reserve_full_isl"]) == (4, 0.02, False)
    prov = doc["config_provenance"]
    for k in ("cache_aware_admission_window", "watermark", "reserve_full_isl", "max_num_inflight_kv_loads"):
        assert prov[k].startswith("seen (v34/vllm.log:1)"), (k, prov[k])
    assert prov["vllm_version"].startswith("vLLM 0.34.0 (v34/vllm.log:2)")
    # what the replay cannot exercise is said: no KV connector; the window needs prefix caching (off here)
    assert "max_num_inflight_kv_loads 4: caps the requests holding KV blocks" in obs["notes"]
    assert "cache_aware_admission_window 8: ignored, vLLM applies it only with prefix caching" in obs["notes"]


@pytest.mark.parametrize(
    "version,isl,watermark_prov",
    [
        ("0.34.0", True, "default: vLLM 0.34.0 default"),
        ("0.32.0", True, "default: vLLM 0.32.0 default"),
        ("0.18.0", False, "vLLM 0.18.0 has no --watermark (from 0.24.0)"),
    ],
)
def test_defaults_per_version(tmp_path, version, isl, watermark_prov):
    doc = _doc(_bundle(tmp_path, "v", _v1_log(version)))
    obs, prov = doc["scenarios"][0], doc["config_provenance"]
    assert obs["cfg_vllm_version"] == version and obs["cfg_reserve_full_isl"] is isl
    assert prov["watermark"].startswith(watermark_prov), prov["watermark"]
    assert obs["cfg_cache_aware_admission_window"] == 0 and obs["cfg_cache_aware_admission_threshold"] == 0.5
    if version == "0.18.0":
        assert prov["reserve_full_isl"].startswith("vLLM 0.18.0 has no --scheduler-reserve-full-isl (from 0.19.0)")
    assert not [a for a in doc["config_assumptions"] if "vLLM version is not in the bundle" in a]


def test_a_setting_the_version_does_not_have_is_refused_in_vllms_words(tmp_path):
    b = _bundle(tmp_path, "v32", _v1_log("0.32.0"))
    doc = _doc(b, "--config", "cache_aware_admission_window=8", "--config", "max_num_seqs=4")
    rows = {r["scenario"]: r for r in doc["scenarios"]}
    bad = rows["cache_aware_admission_window=8"]
    assert bad["status"] == "refused" and bad["preemptions"] is None
    assert (
        'vLLM 0.32.0 would not start: "vllm serve: error: unrecognized arguments: --cache-aware-admission-window 8" '
        "(--cache-aware-admission-window came in vLLM 0.34.0)"
    ) in bad["notes"]
    assert rows["max_num_seqs=4"]["status"] != "refused"
    # the same on a 0.34 bundle is replayed
    doc34 = _doc(_bundle(tmp_path, "v34", _v1_log("0.34.0")), "--set", "cache_aware_admission_window=8")
    assert doc34["scenarios"][1]["status"] != "refused"
    # --base with a setting the bundle's version lacks: the bundle's values are wrong, one line, exit 2
    p = _cli(str(b), "--base", "max_num_inflight_kv_loads=4", "--tz", "UTC")
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "unrecognized arguments: --max-num-inflight-kv-loads 4" in p.stderr


def test_another_version_asked_refuses_what_the_bundle_states_and_takes_its_defaults(tmp_path):
    b = _bundle(tmp_path, "v34", _v1_log("0.34.0", ", 'cache_aware_admission_window': 8"))
    doc = _doc(b, "--config", "vllm_version=0.32.0", "--config", "vllm_version=0.32.0,cache_aware_admission_window=0")
    first, second = doc["scenarios"][1], doc["scenarios"][2]
    assert first["status"] == "refused" and "unrecognized arguments: --cache-aware-admission-window 8" in first["notes"]
    assert second["status"] != "refused" and second["cfg_vllm_version"] == "0.32.0"
    # the 0.18 defaults follow the version asked: reserve_full_isl (not stated) comes on with 0.32
    doc18 = _doc(_bundle(tmp_path, "v18", _v1_log("0.18.0")), "--set", "vllm_version=0.32.0")
    assert doc18["scenarios"][0]["cfg_reserve_full_isl"] is False
    assert doc18["scenarios"][1]["cfg_reserve_full_isl"] is True
    assert "replayed as vLLM 0.32.0's scheduler" in doc18["scenarios"][1]["notes"]


def test_the_records_header_names_the_version_and_base_can_give_it(tmp_path):
    d = tmp_path / "rec"
    d.mkdir()
    lines = [{"type": "step", "ts": 1796000000.0, "step": 0, "engine": "0", "block_size": 16, "v": 2}]
    lines[0] |= {"num_total_blocks": 32, "num_free_blocks": 31, "vllm_version": "0.34.0"}
    for r in PRIO.requests:
        lines.append(
            {"type": "request", "ts": 1796000000.0 + 0.01 * r.arrival_step, "step": r.arrival_step, "engine": "0"}
            | {"request_id": r.request_id, "phase": "arrival", "prompt_tokens": r.prompt_tokens, "v": 2}
            | {"max_tokens": r.max_tokens, "priority": r.priority}
        )
    (d / "records.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    base = ["--base", "max_num_seqs=16", "--base", "max_num_batched_tokens=512", "--base", "max_model_len=496"]
    base += ["--base", "scheduling_policy=priority"]
    doc = _doc(d, *base)
    assert doc["config_provenance"]["vllm_version"].startswith("vLLM 0.34.0 (rec/records.jsonl:1)")
    assert doc["scenarios"][0]["preemptions"] == 15  # 0.34's loop
    # without the header: 0.32, said; --base gives the version
    (d / "records.jsonl").write_text(
        "".join(json.dumps({k: v for k, v in x.items() if k != "vllm_version"}) + "\n" for x in lines)
    )
    doc = _doc(d, *base)
    assert doc["scenarios"][0]["preemptions"] == 23 and doc["scenarios"][0]["cfg_vllm_version"] is None
    assert any("the vLLM version is not in the bundle" in a for a in doc["config_assumptions"])
    doc = _doc(d, *base, "--base", "vllm_version=0.34.0")
    assert doc["scenarios"][0]["preemptions"] == 15
    assert not any("the vLLM version is not in the bundle" in a for a in doc["config_assumptions"])


def test_the_vllm_engine_picks_the_venv_of_the_version(monkeypatch):
    assert version_env("0.34.0") == "PREEMPTLOG_VLLM_034_PYTHON" and version_env("v1.2") == "PREEMPTLOG_VLLM_102_PYTHON"
    assert version_env(None) is None
    for k in ("PREEMPTLOG_VLLM_034_PYTHON", "PREEMPTLOG_VLLM_032_PYTHON", "PREEMPTLOG_VLLM_PYTHON"):
        monkeypatch.delenv(k, raising=False)
    assert python_for(None, "0.34.0") is None
    monkeypatch.setenv("PREEMPTLOG_VLLM_PYTHON", "/py32")
    assert python_for(None, "0.34.0") == "/py32"  # the reference venv, said in the row's notes when it ran 0.32
    monkeypatch.setenv("PREEMPTLOG_VLLM_034_PYTHON", "/py34")
    assert python_for(None, "0.34.0") == "/py34" and python_for(None, "0.32.0") == "/py32"
    assert python_for(None, None) == "/py32" and python_for("/given", "0.34.0") == "/given"


@pytest.mark.parametrize(
    "key,text,value",
    [
        ("cache_aware_admission_window", "0", 0),
        ("cache_aware_admission_window", "16", 16),
        ("cache_aware_admission_threshold", "0", 0.0),
        ("cache_aware_admission_threshold", "1", 1.0),
        ("max_num_inflight_kv_loads", "none", None),
        ("max_num_inflight_kv_loads", "4", 4),
        ("vllm_version", "v0.34.0", "0.34.0"),
    ],
)
def test_the_new_settings_parse(key, text, value):
    assert parse_value(key, text) == value


@pytest.mark.parametrize(
    "key,text",
    [
        ("cache_aware_admission_window", "-1"),
        ("cache_aware_admission_threshold", "1.5"),
        ("max_num_inflight_kv_loads", "0"),
        ("vllm_version", "latest"),
    ],
)
def test_bad_values_of_the_new_settings_are_usage_errors(key, text):
    from preemptlog.errors import UsageError

    with pytest.raises(UsageError):
        parse_value(key, text)


def test_a_fix_in_a_setting_the_version_lacks_is_dropped_in_vllms_words(tmp_path):
    """verify_fixes (analyze's fixes): ``--watermark`` on a 0.18 incident would not start that vLLM."""
    from preemptlog.analysis import AnalyzeOptions, analyze
    from preemptlog.pipeline.bundle import Workspace
    from preemptlog.whatif import verify_fixes

    fix = {"id": "w", "option": "--watermark", "current": 0.0, "suggested": 0.02, "rank": 1, "expected_effect": "e"}
    for version, gone in (("0.18.0", True), ("0.32.0", False)):
        b = _bundle(tmp_path, f"fix{version}", _v1_log(version))
        with Workspace() as ws:
            kept, dropped = verify_fixes(analyze([str(b)], AnalyzeOptions(tz="UTC"), workspace=ws), [dict(fix)])
        if gone:
            assert kept == [] and len(dropped) == 1, (kept, dropped)
            assert (
                'vLLM 0.18.0 would not start: "vllm serve: error: unrecognized arguments: --watermark 0.02"'
                in (dropped[0]["why"])
            )
        else:
            assert dropped == [] and kept[0]["replay"]["status"] in ("calibrated", "uncalibrated")
