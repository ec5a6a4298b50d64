"""Stock bundles answered in vLLM's terms (issue 30), on hand-written bundles in several header
families: what a real operator holds (a V1 log, maybe one ``curl /metrics``), judged by vLLM's own
code (preemptlog/engine_facts.py), counted from one /metrics reading, and fixes that are changes
to make. The header families come from fixtures/handwritten/build.py (the same renderer the rules
of evidence use); each bundle is written into the test's own folder.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import polars as pl
import pytest

from preemptlog import AnalyzeOptions, analyze

from ..conftest import FIXTURES

_spec = importlib.util.spec_from_file_location("hw_build", FIXTURES / "handwritten" / "build.py")
B = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(B)

FAMILIES = ["v08", "apiserver", "kubectl", "iso", "json"]
START_V1 = "Initializing a V1 LLM engine (v0.32.0) with config: model='m', speculative_config=None, max_seq_len=2048, enable_prefix_caching=False, enable_chunked_prefill=True"


def stats(t: str, running: int, waiting: int, kv: float, pre: int | None = None) -> dict:
    return B.log(t, "INFO", "loggers.py:335", B.v1_stats("000", running, waiting, kv, pre))


def write(tmp: Path, fam: str, rows: list[dict], **files: str) -> Path:
    b = tmp / fam
    b.mkdir(parents=True, exist_ok=True)
    (b / "vllm.log").write_text("\n".join(B.render(fam, r) for r in rows) + "\n")
    for name, text in files.items():
        p = b / name.replace("__", "/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return b


def reading(t: str, value: int, kv: float = 0.0) -> str:
    """One /metrics reading in preemptlog capture's format (its scrape time on the first line)."""
    return (
        f"# scrape {B.YEAR}-{B.DAY}T{t}+00:00\n"
        "# TYPE vllm:num_preemptions_total counter\n"
        f'vllm:num_preemptions_total{{engine="0",model_name="m"}} {value}.0\n'
        f'vllm:kv_cache_usage_perc{{engine="0",model_name="m"}} {kv}\n'
    )


def run(path: Path):
    return analyze([str(path)], AnalyzeOptions(tz="UTC", year=B.YEAR))


STOCK = [
    B.log("10:00:00", "INFO", "core.py:133", START_V1),
    B.log(
        "10:00:01",
        "INFO",
        "kv_cache_utils.py:2327",
        "GPU KV cache size: 1,024 tokens, Maximum concurrency for 2,048 tokens per request: 0.50x",
    ),
    stats("10:00:10", 6, 0, 60.0),
    stats("10:00:20", 7, 12, 100.0),
    stats("10:00:30", 5, 9, 98.4),
    stats("10:00:40", 0, 0, 0.0),
]


# ------------------------------------------------------------- one /metrics reading counts
@pytest.mark.parametrize("fam", FAMILIES)
def test_one_final_reading_counts_since_the_engine_start_the_log_shows(tmp_path, fam):
    a = run(write(tmp_path, fam, STOCK, **{"metrics.prom": reading("10:00:45", 13)}))
    s = a.summary()
    assert s["count_visible"] and s["events"] == 13
    assert s["reconciliation"]["quality"] == "exact"
    ev = a.events
    assert set(ev.get_column("time_precision").to_list()) == {"unplaced"}
    assert ev.get_column("time").null_count() == 13
    assert ev.get_column("interval_start").unique().to_list()[0].isoformat().startswith("2025-05-01T10:00:00")
    v = a.verdicts
    assert set(v.get_column("gate").to_list()) == {"G1-kv-space"}
    assert set(v.get_column("sub_kind").to_list()) == {"capacity"}
    # the pressure interval of the engine inside [start, reading] corroborates vLLM's code
    assert set(v.get_column("confidence").to_list()) == {"high"}
    assert s["headline"].startswith("13 preemptions since the engine started at 10:00:00")
    assert "KV cache exhausted" in s["headline"] and "vLLM V1 preempts" in s["headline"]


@pytest.mark.parametrize("fam", ["apiserver", "json"])
def test_the_table_says_unplaced_for_a_count_with_no_time_inside_it(tmp_path, fam):
    """The table's time cell of a single reading's count row is 'unplaced', never a bare '?' (issue 26)."""
    import subprocess
    import sys

    b = write(tmp_path, fam, STOCK, **{"metrics.prom": reading("10:00:45", 13)})
    p = subprocess.run(
        [sys.executable, "-m", "preemptlog", "analyze", str(b), "--tz", "UTC", "--year", str(B.YEAR), "-f", "table"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert p.returncode == 0, p.stderr
    row = next(ln for ln in p.stdout.splitlines() if "metrics.prom" in ln)
    assert row.split()[0] == "unplaced" and "13 in interval" in row
    assert not any(ln.split()[:1] == ["?"] for ln in p.stdout.splitlines())


@pytest.mark.parametrize("fam", ["v08", "kubectl"])
def test_a_reading_of_zero_after_the_start_is_an_exact_zero(tmp_path, fam):
    rows = [STOCK[0], stats("10:00:10", 2, 0, 20.0)]
    s = run(write(tmp_path, fam, rows, **{"metrics.prom": reading("10:00:45", 0)})).summary()
    assert s["count_visible"] is True and s["events"] == 0
    assert s["headline"].startswith("0 preemptions")


@pytest.mark.parametrize("fam", ["v08", "json"])
def test_without_the_start_the_reading_is_a_lower_bound(tmp_path, fam):
    a = run(write(tmp_path, fam, STOCK[2:], **{"metrics.prom": reading("10:00:45", 7)}))
    s = a.summary()
    assert s["events"] == 7 and s["reconciliation"]["quality"] == "lower bound"
    assert a.events.get_column("interval_start").null_count() == 7
    assert any("not in the bundle" in n for n in s["notes"])


@pytest.mark.parametrize("fam", ["v08", "apiserver"])
def test_the_log_own_counts_are_taken_off_the_reading(tmp_path, fam):
    rows = [STOCK[0], stats("10:00:10", 6, 0, 60.0), stats("10:00:20", 7, 12, 100.0, 3)]
    a = run(write(tmp_path, fam, rows, **{"metrics.prom": reading("10:00:45", 5)}))
    kinds = a.events.group_by("time_precision").len().sort("time_precision").rows()
    assert dict(kinds) == {"interval": 3, "unplaced": 2}  # the log's 3 placed, the counter's other 2 not
    assert a.summary()["events"] == 5


def test_a_restart_counts_from_the_last_start_before_the_reading(tmp_path):
    rows = [STOCK[0], stats("10:00:10", 7, 12, 100.0), B.log("10:00:20", "INFO", "core.py:133", START_V1)]
    rows += [stats("10:00:30", 7, 12, 100.0)]
    a = run(write(tmp_path, "v08", rows, **{"metrics.prom": reading("10:00:45", 4)}))
    assert a.events.height == 4
    assert a.events.get_column("interval_start").max().isoformat().startswith("2025-05-01T10:00:20")


def test_a_reading_beside_a_scrapes_folder_that_repeats_its_last_is_counted_once(tmp_path):
    scrapes = {
        "scrapes__metrics-1.prom": reading("10:00:12", 0, 0.6),
        "scrapes__metrics-2.prom": reading("10:00:22", 6, 1.0),
        "scrapes__metrics-3.prom": reading("10:00:32", 9, 0.98),
    }
    a = run(write(tmp_path, "v08", STOCK, **scrapes, **{"metrics.prom": reading("10:00:45", 9)}))
    assert a.events.height == 9
    rec = a.summary()["reconciliation"]
    assert rec["repeated_readings"] and any("counted once" in n for n in a.notes)
    # a later reading higher than the last scrape adds the difference, placed between the two
    b = run(write(tmp_path / "b", "v08", STOCK, **scrapes, **{"metrics.prom": reading("10:00:45", 11)}))
    assert b.events.height == 11
    late = b.events.filter(pl.col("source").str.ends_with("v08/metrics.prom"))
    assert late.height == 2 and late.get_column("time").null_count() == 0


# ------------------------------------------------------------- never a confident 0
@pytest.mark.parametrize(
    "rows",
    [
        # a V1 log without a stats line (engine-core process names, a 0.12 startup)
        [
            B.log("10:00:00", "INFO", "core.py:93", "Initializing a V1 LLM engine (v0.12.0) with config: model='m'"),
            B.log("10:00:01", "INFO", "kv_cache_utils.py:1", "GPU KV cache size: 42,656 tokens"),
        ],
        # a V1 log whose stats lines have no Preemptions field
        [STOCK[0], stats("10:00:10", 6, 0, 60.0), stats("10:00:20", 7, 12, 100.0)],
        # request lines that do not say which engine wrote them
        [
            B.log(
                "10:00:00",
                "INFO",
                "logger.py:49",
                "Received request cmpl-1: params: SamplingParams(n=1, max_tokens=10), lora_request: None.",
            )
        ],
    ],
    ids=["v1-no-stats", "v1-stats-no-field", "no-engine"],
)
@pytest.mark.parametrize("fam", ["v08", "apiserver", "iso"])
def test_a_log_that_cannot_show_a_count_is_not_visible(tmp_path, fam, rows):
    s = run(write(tmp_path, fam, rows)).summary()
    assert s["count_visible"] is False and s["events"] is None
    assert s["headline"].startswith("Preemptions: not visible")
    assert s["to_know_more"] and "/metrics" in s["to_know_more"][0]["add"]


def test_the_public_logs_without_a_stats_line_are_not_visible(corpus, corpus2):
    for path in (
        corpus / "vllm-v0100-vllmworker-rank-ansi.log",
        corpus2 / "vllm-v0120-verl-nested-ray-numpreempted.log",
    ):
        a = analyze([str(path)], AnalyzeOptions(tz="UTC", year=2025))
        s = a.summary()
        assert s["count_visible"] is False, path.name
        assert s["config"]["engine"]["value"] == "V1", path.name


def test_a_v0_log_is_visible_by_its_sampled_warnings(tmp_path):
    rows = [
        B.log(
            "10:00:00",
            "INFO",
            "metrics.py:341",
            "Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 70.5 tokens/s, Running: 2 reqs, "
            "Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 9.2%, CPU KV cache usage: 0.0%.",
        )
    ]
    s = run(write(tmp_path, "v04", rows)).summary()
    assert s["count_visible"] is True and s["events"] == 0


# ------------------------------------------------------------- documents are not logs
@pytest.mark.parametrize("fam", ["v08", "kubectl", "json"])
def test_documents_in_a_bundle_are_not_read_and_their_quotes_add_no_events(tmp_path, fam):
    rows = [STOCK[0], stats("10:00:10", 6, 0, 60.0), stats("10:00:20", 7, 12, 100.0, 3)]
    quoted = "\n".join(B.render(fam, r) for r in rows[1:])
    notes = (
        f"# What happened\n\nThe server preempted. The stats lines said:\n\n```\n{quoted}\n```\n\nWe think it was KV.\n"
    )
    prose = (
        "The on-call engineer copied these logs from the node on Tuesday morning after the alert fired.\n"
        "The server was restarted once, at about ten, and the queue drained within a few minutes.\n"
        "Nothing else was changed on the host while the incident was open, as far as we can tell.\n"
    )
    b = write(tmp_path, fam, rows, **{"NOTES.md": notes, "SOURCES.md": notes, "notes.txt": prose})
    a = run(b)
    assert a.summary()["events"] == 3
    kinds = {f.display.rsplit("/", 1)[-1]: f.kind for f in a.bundle.files}
    assert kinds == {"vllm.log": "vllm-log", "NOTES.md": "document", "SOURCES.md": "document", "notes.txt": "document"}
    # a document given by name is read as what its content is
    forced = analyze([str(b / "NOTES.md")], AnalyzeOptions(tz="UTC", year=B.YEAR))
    assert forced.events.height == 3


def test_a_dmon_capture_named_txt_stays_dmon(tmp_path):
    b = tmp_path / "b"
    b.mkdir()
    (b / "gpu.txt").write_text(
        "# gpu     sm    mem    enc    dec     fb\n# Idx      %      %      %      %     MB\n"
        + "".join(f"    0     4{i}     26      0      1  3821{i}\n" for i in range(5))
    )
    (b / "vllm.log").write_text("\n".join(B.render("v08", r) for r in STOCK) + "\n")
    a = run(b)
    assert {f.display.rsplit("/", 1)[-1]: f.kind for f in a.bundle.files}["gpu.txt"] == "dmon"


# ------------------------------------------------------------- vLLM's code settles the gate
def test_v0_warning_is_capacity_in_vllm_words(tmp_path):
    rows = [B.log("10:00:03", "WARNING", "scheduler.py:1483", B.V0_WARN.format(rid="c-1", mode="RECOMPUTE", n=1))]
    a = run(write(tmp_path, "v04", rows))
    r = a.verdicts.row(0, named=True)
    assert (r["gate"], r["sub_kind"], r["confidence"]) == ("G1-kv-space", "capacity", "high")
    assert {x["gate"] for x in r["not_in_upstream"]} == {"G2-batch-variance", "G3-queue-overflow", "G4-prefix-conflict"}
    assert r["not_evaluable"] == []


def test_a_count_contradicted_by_the_engine_kv_usage_is_low_and_says_why(tmp_path):
    rows = [STOCK[0], stats("10:00:10", 6, 0, 20.0), stats("10:00:20", 7, 0, 30.0, 2)]
    a = run(write(tmp_path, "v08", rows))
    v = a.verdicts
    assert set(v.get_column("rule").to_list()) == {"G1-capacity-vllm-code-contradicted"}
    assert set(v.get_column("confidence").to_list()) == {"low"}
    cited = {c["name"]: c for c in v.row(0, named=True)["evidence"]}
    assert cited["up_kv_max_before"]["value"] == "30" and cited["up_kv_max_before"]["src"].endswith("vllm.log:3")
    assert "contradicted" in a.summary()["headline"]


def test_a_cache_reset_in_the_kv_events_is_not_kv_pressure(tmp_path):
    rows = [STOCK[0], stats("10:00:10", 6, 0, 60.0), stats("10:00:20", 0, 6, 10.0, 1)]
    kv = "\n".join(  # KV cache events (vLLM's KVEventBatch as JSON lines): 10:00:12 and 10:00:15
        json.dumps(x)
        for x in (
            [1746093612.0, [["BlockStored", [1, 2], None, [1, 2, 3], 16, None]]],
            [1746093615.0, [["AllBlocksCleared"]]],
        )
    )
    a = run(write(tmp_path, "v08", rows, **{"kvevents.jsonl": kv + "\n"}))
    v = a.verdicts
    assert set(v.get_column("rule").to_list()) == {"G4-cache-reset"}, v.get_column("rule").to_list()
    assert set(a.findings.per_event.get_column("mechanism").to_list()) == {"prefix-cache-reset"}


# ------------------------------------------------------------- fixes are changes to make
def test_a_pinned_pool_is_moved_by_num_gpu_blocks_override_and_defaults_say_assumed(tmp_path):
    rows = [
        STOCK[0],
        B.log(
            "10:00:01",
            "INFO",
            "kv_cache_utils.py:2619",
            "Overriding num_gpu_blocks=8192 with num_gpu_blocks_override=64",
        ),
        B.log("10:00:01", "INFO", "kv_cache_utils.py:2327", "GPU KV cache size: 1,024 tokens"),
        *STOCK[2:],
    ]
    prom = reading("10:00:45", 13) + (
        'vllm:request_prompt_tokens_sum{engine="0",model_name="m"} 2814.0\n'
        'vllm:request_prompt_tokens_count{engine="0",model_name="m"} 24.0\n'
        'vllm:request_generation_tokens_sum{engine="0",model_name="m"} 1680.0\n'
        'vllm:request_generation_tokens_count{engine="0",model_name="m"} 24.0\n'
    )
    a = run(write(tmp_path, "v08", rows, **{"metrics.prom": prom}))
    s = a.summary()
    options = [x["option"] for x in s["fixes"]]
    assert options[0] == "--num-gpu-blocks-override" and "--gpu-memory-utilization" not in options
    top = s["fixes"][0]
    assert (top["current"], top["suggested"]) == (64, 84)  # 7 running x ceil(187 / 16) = 12 blocks
    assert all(x["suggested"] is not None for x in s["fixes"])
    assert s["config"]["gpu_memory_utilization"]["value"] == "0.92"  # vLLM 0.32.0's own default
    mns = next(x for x in s["fixes"] if x["option"] == "--max-num-seqs")
    assert mns["current_from"] == "assumed (vLLM 0.32.0 default)"
    assert s["to_know_more"] and all(x["add"] for x in s["to_know_more"])
    # one value per lever: explain and the events carry the summary's changes
    ev_fix = a.verdicts.row(0, named=True)["fixes"][0]
    assert (ev_fix["option"], ev_fix["suggested"]) == ("--num-gpu-blocks-override", "84")
