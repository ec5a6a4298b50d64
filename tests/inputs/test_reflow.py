"""Wrapped, reflowed, quoted and indented captures (preemptlog/reflow.py).

The property: a real log (../shared/corpus and corpus2, read at test time)
hard-wrapped at any width from 60 to 200 columns, with or without padded
continuation lines, gives the same events, stats and config as the log itself.
Hand-written lines in several header families check each repair on its own.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from preemptlog import AnalyzeOptions, analyze
from preemptlog.inputs import reflow

from ..conftest import corpus2_dir, corpus_dir, write_lines


def hard_wrap(lines: list[str], width: int, pad: int = 0) -> list[str]:
    """What a terminal capture does: cut every line at ``width`` characters (continuations padded with ``pad`` spaces)."""
    out = []
    for ln in lines:
        if len(ln) <= width:
            out.append(ln)
            continue
        out.append(ln[:width])
        rest = ln[width:]
        while rest:
            out.append(" " * pad + rest[: width - pad])
            rest = rest[width - pad :]
    return out


def _real_logs() -> list[Path]:
    out = []
    for c in (corpus_dir(), corpus2_dir()):
        if c is not None:
            out += [p for p in sorted(c.glob("*.log")) if "wrapped" not in p.name]
    return out


REAL_LOGS = _real_logs()


def fingerprint(a) -> dict:
    ev = a.events.select("kind", "request_id", "mode", "cumulative", "time").sort(pl.all(), nulls_last=True)
    stats = a.stats.drop("seq", "line", "source").sort(pl.all(), nulls_last=True)
    cfg = a.config.filter(pl.col("status") != "default").select("key", "value", "status").unique().sort(pl.all())
    return {"events": ev.rows(), "stats": stats.rows(), "config": cfg.rows()}


def _lines(path: Path) -> list[str]:
    text = path.read_bytes().decode("utf-8", "replace")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def _analyze_lines(tmp_path: Path, name: str, lines: list[str]):
    p = write_lines(tmp_path / name, lines)
    return analyze([str(p)], AnalyzeOptions(tz="UTC", year=2025, rules=False))


_BASE: dict[str, dict] = {}


def _baseline(path: Path, tmp_path: Path) -> dict:
    if path.name not in _BASE:
        _BASE[path.name] = fingerprint(analyze([str(path)], AnalyzeOptions(tz="UTC", year=2025, rules=False)))
    return _BASE[path.name]


def _check_wrapped(path: Path, width: int, pad: int, tmp_path: Path) -> None:
    base = _baseline(path, tmp_path)
    wrapped = hard_wrap(_lines(path), width, pad)
    got = fingerprint(_analyze_lines(tmp_path, f"w{width}p{pad}-{path.name}", wrapped))
    assert got == base, (path.name, width, pad)


@pytest.mark.parametrize("width", [60, 80, 120, 135, 200])
@pytest.mark.parametrize("path", REAL_LOGS, ids=[p.name for p in REAL_LOGS])
def test_real_log_wrapped_gives_the_same_analysis(path, width, tmp_path):
    _check_wrapped(path, width, 0, tmp_path)


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_real_log_wrapped_at_any_width_property(data, tmp_path):
    if not REAL_LOGS:
        pytest.skip("real-log corpora not found")
    path = data.draw(st.sampled_from(REAL_LOGS), label="log")
    width = data.draw(st.integers(60, 200), label="width")
    pad = data.draw(st.sampled_from([0, 0, 2, 4]), label="pad")
    _check_wrapped(path, width, pad, tmp_path)


# --------------------------------------------------------------------------- hand-written lines

V0_WARN = (
    "Sequence group {rid} is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache "
    "space. This can affect the end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size "
    "to provide more KV cache memory. total_num_cumulative_preemption={n}"
)
V0_STATS = (
    "Avg prompt throughput: 15135.6 tokens/s, Avg generation throughput: 40.4 tokens/s, Running: {r} reqs, "
    "Swapped: 0 reqs, Pending: {p} reqs, GPU KV cache usage: {kv}%, CPU KV cache usage: 0.0%."
)
V1_STATS = (
    "Engine 000: Avg prompt throughput: 812.4 tokens/s, Avg generation throughput: 2310.9 tokens/s, "
    "Running: {r} reqs, Waiting: {p} reqs, GPU KV cache usage: {kv}%, Prefix cache hit rate: 35.2%"
)


def _family_lines(family: str) -> list[str]:
    """A small log in one header family: config, stats and V0 warnings (long lines)."""
    heads = {
        "v0-unbracketed": lambda lvl, s, f: f"{lvl} 05-01 10:00:{s:02d} {f}]",
        "v08-bracketed": lambda lvl, s, f: f"{lvl} 05-01 10:00:{s:02d} [{f}]",
        "apiserver": lambda lvl, s, f: f"(APIServer pid=4121) {lvl} 05-01 10:00:{s:02d} [{f}]",
        "compose": lambda lvl, s, f: f"vllm-1  | {lvl} 05-01 10:00:{s:02d} [{f}]",
        "kubectl": lambda lvl, s, f: f"2025-05-01T10:00:{s:02d}.250000000Z {lvl} 05-01 10:00:{s:02d} [{f}]",
        "iso": lambda lvl, s, f: f"2025-05-01 10:00:{s:02d},123 - vllm.{f.split('.')[0]} - {lvl} -",
    }
    h = heads[family]
    out = [
        h("INFO", 0, "api_server.py:585") + " vLLM API server version 0.6.3",
        h("INFO", 1, "api_server.py:586") + " args: Namespace(host=None, port=8000, model='Qwen/Qwen2.5-7B-Instruct', "
        "max_model_len=16384, block_size=16, max_num_seqs=128, gpu_memory_utilization=0.9, swap_space=4)",
        h("INFO", 2, "gpu_executor.py:122") + " # GPU blocks: 25809, # CPU blocks: 4681",
    ]
    for i in range(5):
        out.append(
            h("INFO", 10 + 2 * i, "metrics.py:351") + " " + V0_STATS.format(r=30 + i, p=900 - 100 * i, kv=90 + i)
        )
        out.append(
            h("WARNING", 11 + 2 * i, "scheduler.py:1077")
            + " "
            + V0_WARN.format(rid=f"cmpl-{i:04x}ab12-0", n=1 + 50 * i)
        )
    return out


FAMILIES = ["v0-unbracketed", "v08-bracketed", "apiserver", "compose", "kubectl", "iso"]


@pytest.mark.parametrize("pad", [0, 3])
@pytest.mark.parametrize("width", [64, 80, 101, 133])
@pytest.mark.parametrize("family", FAMILIES)
def test_hand_written_family_wrapped(family, width, pad, tmp_path):
    lines = _family_lines(family)
    base = _analyze_lines(tmp_path, "orig.log", lines)
    assert base.stats.height == 5 and base.events.height == 201
    got = _analyze_lines(tmp_path, "wrapped.log", hard_wrap(lines, width, pad))
    assert fingerprint(got) == fingerprint(base)
    assert set(got.stats.get_column("family").to_list()) == {"v0"}
    assert got.stats.get_column("waiting").to_list() == [900, 800, 700, 600, 500]


def test_v1_stats_wrapped_keep_engine_and_family(tmp_path):
    lines = [
        f"(APIServer pid=7) INFO 09-03 04:4{i}:00 [loggers.py:123] " + V1_STATS.format(r=i, p=40 + i, kv=98.5)
        for i in range(6)
    ]
    got = _analyze_lines(tmp_path, "w.log", hard_wrap(lines, 90))
    assert got.stats.get_column("waiting").to_list() == [40, 41, 42, 43, 44, 45]
    assert set(got.stats.get_column("family").to_list()) == {"v1"}
    assert got.stats.get_column("kv_usage").max() == 98.5


def test_value_alone_on_the_continuation_line_is_read(tmp_path):
    # The Ray capture of corpus2: "... num_gpu_blocks is:" / " 25809" (the value alone on the next line).
    lines = []
    for i in range(4):
        lines.append(
            f"(EngineCore_0 pid=1257) INFO 09-03 04:36:4{i} [core.py:74] " + "x" * 90 + f" filler {i} " + "y" * 60
        )
    cut = (
        "(APIServer pid=121) INFO 09-03 04:42:59 [loggers.py:142] Engine 000: vllm cache_config_info with "
        "initialization after num_gpu_blocks is:"
    )
    lines.append(cut + " 25809")
    wrapped = hard_wrap(lines, len(cut))
    assert wrapped[-1] == " 25809"
    got = _analyze_lines(tmp_path, "w.log", wrapped)
    seen = got.config.filter(pl.col("status") == "seen")
    assert seen.filter(pl.col("key") == "num_gpu_blocks").get_column("value").to_list() == ["25809"]


def test_value_cut_by_an_undetected_wrap_is_never_seen(tmp_path):
    # One wrapped line only: the width cannot be told, and the cut value is not reported.
    lines = [
        "(APIServer pid=121) INFO 09-03 04:36:09 [utils.py:326] non-default args: {'model_tag': 'Qwen",
        "2-7B-Instruct', 'port': 8081, 'model': 'Qwen2-7B-Instruct', 'max_model_len': 16384}",
        "(APIServer pid=121) INFO 09-03 04:36:10 [api_server.py:1805] args: Namespace(model='Qwen2-7B-Instruct', max_model_len=163",
        "84, block_size=16)",
    ]
    got = _analyze_lines(tmp_path, "w.log", lines)
    seen = got.config.filter(pl.col("status") == "seen")
    assert "Qwen" not in seen.get_column("value").to_list()
    assert "163" not in seen.filter(pl.col("key") == "max_model_len").get_column("value").to_list()


def test_reflowed_v0_warning_counter_six_lines_later(tmp_path):
    lines = [
        "WARNING 05-09 00:49:33 scheduler.py:1077] Sequence group cmpl-5f1c0d3e8a2b4c6d-0 is preempted by",
        "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space.",
        "This can affect the end-to-end performance.",
        "Increase gpu_memory_utilization or",
        "tensor_parallel_size to provide more",
        "KV cache memory.",
        "total_num_cumulative_preemption=101",
    ]
    got = _analyze_lines(tmp_path, "r.log", lines)
    ev = got.events
    assert ev.filter(pl.col("kind") == "logged").height == 1
    assert ev.filter(pl.col("kind").is_in(["logged", "reconstructed"])).height == 101
    row = ev.filter(pl.col("kind") == "logged").row(0, named=True)
    assert row["request_id"] == "cmpl-5f1c0d3e8a2b4c6d-0" and row["cumulative"] == 101
    assert row["event_id"].endswith(":1")  # the record's first physical line


def test_reflowed_bare_warning_without_header(tmp_path):
    lines = [
        "> Sequence group 221 is preempted by PreemptionMode.RECOMPUTE mode because there is not enough",
        "> KV cache space. This can affect the end-to-end performance.",
        "> total_num_cumulative_preemption=51",
    ]
    got = _analyze_lines(tmp_path, "q.md", lines)
    assert got.events.filter(pl.col("kind").is_in(["logged", "reconstructed"])).height == 51


def test_reflow_join_is_bounded_and_stops_at_a_header(tmp_path):
    lines = [
        "WARNING 05-09 00:49:33 scheduler.py:1077] Sequence group a-0 is preempted by",
        "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space.",
        "INFO 05-09 00:49:34 metrics.py:351] something else",
        "total_num_cumulative_preemption=101",
    ]
    got = _analyze_lines(tmp_path, "b.log", lines)
    assert got.events.filter(pl.col("kind").is_in(["logged", "reconstructed"])).height == 1
    far = [lines[0]] + ["more words"] * (reflow.RECORD_JOIN_LINES + 1) + ["total_num_cumulative_preemption=101"]
    got = _analyze_lines(tmp_path, "far.log", far)
    assert got.events.filter(pl.col("kind").is_in(["logged", "reconstructed"])).height == 1


@pytest.mark.parametrize(
    "wrapping",
    [
        lambda ls: ["> " + ln for ln in ls],
        lambda ls: ["> > " + ln for ln in ls],
        lambda ls: ["    " + ln for ln in ls],
        lambda ls: ["Some notes:", "", "```text", *ls, "```", "", "More notes."],
        lambda ls: ["> ```", *["> " + ln for ln in ls], "> ```"],
    ],
    ids=["quote", "nested-quote", "indent4", "fenced", "quoted-fence"],
)
@pytest.mark.parametrize("family", ["kubectl", "iso", "compose", "v0-unbracketed"])
def test_quote_indent_fence_around_real_lines(family, wrapping, tmp_path):
    lines = _family_lines(family)
    base = _analyze_lines(tmp_path, "orig.log", lines)
    got = _analyze_lines(tmp_path, "pasted.md", wrapping(lines))
    assert fingerprint(got) == fingerprint(base)
    if family == "kubectl":
        assert {t.year for t in got.events.get_column("time").to_list()} == {2025}


DMON = [
    "# gpu     sm    mem    enc    dec    jpg    ofa     fb   bar1   ccpm",
    "# Idx      %      %      %      %      %      %     MB     MB     MB",
    "    0     46     26      0      1      0      0  38211      5      0",
    "    0     51     28      0      1      0      0  38300      5      0",
    "    ...",
    "    0     47     22      0      1      0      0  38411      5      0",
]


@pytest.mark.parametrize(
    "wrapping",
    [
        lambda ls: ["> " + ln for ln in ls],
        lambda ls: ["    " + ln for ln in ls],
        lambda ls: ["```bash", "nvidia-smi dmon -s um", "```", "```", *ls, "```"],
        lambda ls: ["> ```", *["> " + ln for ln in ls], "> ```"],
    ],
    ids=["quote", "indent4", "fenced", "quoted-fence"],
)
def test_dmon_quoted_indented_fenced(wrapping, tmp_path):
    got = _analyze_lines(tmp_path, "dmon.txt", wrapping(DMON))
    assert [f.kind for f in got.bundle.files] == ["dmon"]
    dmon = got.frames["dmon"]
    assert dmon.get_column("fb_mb").to_list() == [38211.0, 38300.0, 38411.0]
    assert not any("dmon row" in w for w in got.warnings), got.warnings


def test_prometheus_quoted_and_indented(tmp_path):
    page = [
        "# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.",
        "# TYPE vllm:num_preemptions_total counter",
        'vllm:num_preemptions_total{engine="0",model_name="m"} 7.0',
    ]
    lines = [
        "> # scrape 2026-03-14T10:00:00Z",
        *["> " + x for x in page],
        "> # scrape 2026-03-14T10:00:10Z",
        *["    " + x.replace("7.0", "12.0") for x in page],
    ]
    got = _analyze_lines(tmp_path, "metrics.prom", lines)
    assert [f.kind for f in got.bundle.files] == ["prometheus"]
    assert got.events.filter(pl.col("kind") == "interval").height == 5


def test_plain_log_needs_no_repair(corpus):
    for p in sorted(corpus.glob("*.log")):
        assert not reflow.plan(p).widths, p.name


@pytest.mark.parametrize("family", ["v04", "iso"])
def test_bare_tagged_prints_after_equal_length_lines_are_not_a_wrap(family, tmp_path):
    # A short hook log: three headed [SCHEDULER] lines of one length, each followed by a bare
    # "[BATCH] ..." print (no timestamp). That looks like a capture wrapped at that length, but a
    # line that opens with its own bracketed tag is a record, never the rest of a cut line.
    head = "INFO 05-01 10:00:0{s} scheduler_debug.py:9] " if family == "v04" else "2026-05-01T10:00:0{s} INFO "
    lines = []
    for s, (running, var) in enumerate([(4, 400.0), (4, 100.0), (3, 90.0)], start=1):
        lines.append(head.format(s=s) + f"[SCHEDULER] Available blocks: 100, Pending reqs: 0, Running reqs: {running}")
        lines.append(f"[BATCH] Current variance: {var} (threshold=256)")
    lines.append(head.format(s=4) + "Req-v PREEMPTED")
    path = write_lines(tmp_path / "hooks.log", lines)
    assert not reflow.plan(path).needed
    got = analyze([str(path)], AnalyzeOptions(tz="UTC"))
    assert got.frames["hook_batch"].get_column("variance").to_list() == [400.0, 100.0, 90.0]


def test_one_line_repeated_before_other_output_is_not_a_wrap(tmp_path):
    # The same V0 line three times, each followed by a short line of other output: three lines of
    # one length, each "followed by a continuation", but one line's text repeated is no terminal's
    # width. Read as a wrap, "...=316" + "5nr" made the counter 3165 (found by
    # campaigns/test_header_property.py's noise property).
    v0 = (
        "INFO 01-01 00:00:00 scheduler.py:990] Sequence group ab7 is preempted by PreemptionMode.SWAP mode "
        "because there is not enough KV cache space. total_num_cumulative_preemption=316"
    )
    lines = ["/Y}'M!2k7?", v0, "szCKT", v0, "5nr", v0, "szCKT"]
    path = write_lines(tmp_path / "mixed.log", lines)
    assert not reflow.plan(path).widths
    got = analyze([str(path)], AnalyzeOptions(tz="UTC", year=2024))
    assert got.events.get_column("cumulative").max() == 316
    # three different lines of that length, each followed by its rest, are a wrap
    cut = [v0.replace("ab7", f"a{i}7")[:150] for i in range(3)]
    rests = [v0[150:]] * 3
    wrapped = [x for pair in zip(cut, rests) for x in pair]
    assert reflow.plan(write_lines(tmp_path / "wrapped.log", wrapped)).widths == (150,)
