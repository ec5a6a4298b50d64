"""A counter series of another server beside a log (events/scopes.py, docs/prometheus.md "Another
server's counter"): a vLLM server process serves one model, so where the log states the model it
serves, a series of another ``model_name`` is another server's; and a counter of an engine kind no
log of the bundle is (an SGLang counter beside a vLLM log only) is another server's too. Neither is
added to the log's count nor judged on its evidence: the reconciliation names the series and its
file:line (``other_servers``). Where the log names no model, every series of its engine counts as
before."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from tests.conftest import run_cli
from tests.support.scrapes import reconciled

T0 = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)
QWEN = "Qwen/Qwen2.5-7B-Instruct"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
# (running, waiting, KV %) per 10 s from T0: the KV cache at 100 % with requests waiting in the middle
PROFILE = [(2, 0, 20.0), (30, 0, 70.0), (66, 24, 100.0), (40, 10, 100.0), (30, 5, 99.0), (20, 0, 60.0), (0, 0, 0.0)]


def _ts(t: datetime) -> str:
    return t.strftime("%m-%d %H:%M:%S")


def _log(model: str | None) -> str:
    """A stock vLLM V1 0.11.0 log: its start (naming ``model``) unless ``model`` is None, then stats lines."""
    a, c = "(APIServer pid=7) ", "(EngineCore_DP0 pid=8) "
    s = T0 - timedelta(seconds=40)
    out = []
    if model is not None:
        out += [
            a + f"INFO {_ts(s)} [api_server.py:1896] vLLM API server version 0.11.0",
            a + f"INFO {_ts(s)} [utils.py:328] non-default args: {{'model_tag': '{model}', 'model': '{model}'}}",
            c + f"INFO {_ts(s)} [core.py:76] Initializing a V1 LLM engine (v0.11.0) with config: model='{model}', "
            f"speculative_config=None, tokenizer='{model}', max_seq_len=8192, tensor_parallel_size=1, "
            f"served_model_name={model}, enable_prefix_caching=True, chunked_prefill_enabled=True",
        ]
    for i, (r, w, kv) in enumerate(PROFILE):
        out.append(
            a + f"INFO {_ts(T0 + timedelta(seconds=10 * i))} [loggers.py:127] Engine 000: Avg prompt throughput: "
            f"100.0 tokens/s, Avg generation throughput: 300.0 tokens/s, Running: {r} reqs, Waiting: {w} reqs, "
            f"GPU KV cache usage: {kv:.1f}%, Prefix cache hit rate: 50.0%"
        )
    return "\n".join(out) + "\n"


def _scrapes(series: dict[str, list[int]]) -> str:
    """Scrapes at T0-10 s, +20 s, +50 s, +80 s: each series (its sample line less the value) at its values."""
    out = []
    for k, sec in enumerate((-10, 20, 50, 80)):
        out.append(f"# scrape {(T0 + timedelta(seconds=sec)).strftime('%Y-%m-%dT%H:%M:%SZ')}")
        out += [f"{name} {float(values[k])}" for name, values in series.items()]
    return "\n".join(out) + "\n"


def _vllm(model: str) -> str:
    return f'vllm:num_preemptions_total{{engine="0",model_name="{model}"}}'


def _bundle(tmp_path, model: str | None, series: dict[str, list[int]]):
    b = tmp_path / "b"
    b.mkdir()
    (b / "vllm.log").write_text(_log(model), encoding="utf-8")
    (b / "metrics.prom").write_text(_scrapes(series), encoding="utf-8")
    return b


def test_another_models_counter_is_another_servers(tmp_path):
    b = _bundle(tmp_path, QWEN, {_vllm(QWEN): [0, 0, 10, 30], _vllm(LLAMA): [0, 0, 3, 7]})
    rec, events = reconciled(b)
    assert rec["total"] == 30 and rec["quality"] == "exact", rec
    other = rec["other_servers"]
    assert len(other) == 1, other
    o = other[0]
    assert o["series"] == _vllm(LLAMA) and o["count"] == 7 and o["engine_kind"] == "vllm"
    # cited by file:line: its first and last sample line
    assert o["from"] == ["b/metrics.prom:3", "b/metrics.prom:12"], o
    assert QWEN in o["why"] and "b/vllm.log:3" in o["why"], o  # the line that states the model served
    # none of its events, and the counter's own source entry counts this server's series only
    assert len(events) == 30 and not [e for e in events if e["line"] in (3, 6, 9, 12)], events
    counter = next(s for s in rec["sources"] if s["source"].startswith("prometheus counter"))
    assert counter["count"] == 30, counter
    out = run_cli("analyze", str(b), "--tz", "UTC", "-f", "json")
    summary = json.loads(out.stdout)["summary"]
    assert summary["headline"].startswith("30 preemptions"), summary["headline"]
    assert any(LLAMA in n and "another" in n and "b/metrics.prom:3" in n for n in summary["notes"]), summary["notes"]


def test_log_without_a_model_name_keeps_every_series(tmp_path):
    b = _bundle(tmp_path, None, {_vllm(QWEN): [0, 0, 10, 30], _vllm(LLAMA): [0, 0, 3, 7]})
    rec, events = reconciled(b)
    assert rec["total"] == 37 and "other_servers" not in rec, rec
    assert len(events) == 37


def test_the_logs_own_model_is_its_count(tmp_path):
    b = _bundle(tmp_path, QWEN, {_vllm(QWEN): [0, 0, 10, 30]})
    rec, events = reconciled(b)
    assert rec["total"] == 30 and rec["quality"] == "exact" and "other_servers" not in rec, rec
    assert len(events) == 30


SGLANG = 'sglang:num_retracted_requests_total{model_name="Qwen/Qwen3-8B",tp_rank="0",pp_rank="0"}'


def test_another_engines_counter_is_not_the_logs_count(tmp_path):
    b = _bundle(tmp_path, QWEN, {SGLANG: [0, 0, 5, 9]})
    rec, events = reconciled(b)
    assert rec["total"] == 0 and rec["quality"] == "unknown", rec
    assert not events
    o = rec["other_servers"][0]
    assert o["series"] == SGLANG and o["count"] == 9 and o["engine_kind"] == "sglang", o
    assert "SGLang" in o["why"] and "vLLM" in o["why"], o
    out = run_cli("analyze", str(b), "--tz", "UTC", "-f", "json")
    summary = json.loads(out.stdout)["summary"]
    assert summary["count_visible"] is False, summary["headline"]
    assert summary["engine_kind"] == "vllm", summary["engine_kind"]
    assert "schedule-conservativeness" not in json.dumps(summary["fixes"]), summary["fixes"]
    fail = run_cli("analyze", str(b), "--tz", "UTC", "--fail-on", "unknown")
    assert fail.returncode == 6, (fail.returncode, fail.stderr)


def test_an_engines_own_counter_beside_another_engines(tmp_path):
    """A vLLM log with its own counter and an SGLang counter: the vLLM server's count is its own counter's."""
    b = _bundle(tmp_path, QWEN, {_vllm(QWEN): [0, 0, 10, 30], SGLANG: [0, 0, 5, 9]})
    rec, events = reconciled(b)
    assert rec["total"] == 30 and rec["quality"] == "exact", rec
    assert [o["series"] for o in rec["other_servers"]] == [SGLANG]
    assert {e["engine_kind"] for e in events} == {"vllm"}


def test_a_served_name_only_in_the_args_line_is_the_servers_own(tmp_path):
    """--served-model-name qwen stated by the args line only (a list there; the engine config line cut away):
    the model_name label is "qwen", the server's own, never another server's."""
    b = _bundle(tmp_path, QWEN, {_vllm("qwen"): [0, 0, 10, 30], _vllm(LLAMA): [0, 0, 3, 7]})
    log = b / "vllm.log"
    lines = [x for x in log.read_text().splitlines() if "Initializing a V1 LLM engine" not in x]
    lines = [
        x.replace(f"'model': '{QWEN}'}}", f"'model': '{QWEN}', 'served_model_name': ['qwen', 'q2']}}") for x in lines
    ]
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    rec, _ = reconciled(b)
    assert rec["total"] == 30, rec
    assert [o["series"] for o in rec["other_servers"]] == [_vllm(LLAMA)]
