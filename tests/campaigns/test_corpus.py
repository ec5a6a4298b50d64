"""The real-log corpus (../shared/corpus): counts must equal the ones its SOURCES.md states.

Expected numbers are read from SOURCES.md at test time, not copied here, and the
highest total_num_cumulative_preemption is read from each file itself.
"""

from __future__ import annotations

import re

import polars as pl
import pytest

from preemptlog import AnalyzeOptions, analyze

from ..conftest import corpus_dir


def _rows() -> list[dict]:
    c = corpus_dir()
    if c is None:
        return []
    text = (c / "SOURCES.md").read_text()
    section = text.split("## vLLM excerpts", 1)[1].split("## nvidia-smi dmon", 1)[0]
    lines = [ln for ln in section.splitlines() if ln.startswith("| `")]
    header = next(ln for ln in section.splitlines() if ln.startswith("| file"))
    cols = [c.strip() for c in header.strip("|").split("|")]
    out = []
    for ln in lines:
        cells = [c.strip() for c in ln.strip().strip("|").split("|")]
        row = dict(zip(cols, cells))
        row["name"] = row["file"].strip("`")
        out.append(row)
    return out


ROWS = _rows()
CONFIG_KEYS = {
    "# GPU blocks": "num_gpu_blocks",
    "Maximum concurrency": "max_concurrency",
    "GPU KV cache size": "kv_cache_tokens",
    "Available KV cache memory": "kv_cache_memory_gib",
    "engine config": "engine",
    "num_gpu_blocks": "num_gpu_blocks",
    "server version": "vllm_version",
}


def _first_int(cell: str) -> int:
    m = re.match(r"\s*(\d+)", cell)
    assert m, cell
    return int(m.group(1))


def test_sources_table_was_read(corpus):
    assert len(ROWS) >= 15


@pytest.mark.parametrize("row", ROWS, ids=[r["name"] for r in ROWS])
def test_corpus_file(row, corpus):
    path = corpus / row["name"]
    result = analyze([str(path)], AnalyzeOptions(tz="UTC"))
    ev = result.events
    warn_col = next(k for k in row if k.startswith("preemption warning lines"))
    assert ev.filter(pl.col("kind") == "logged").height == _first_int(row[warn_col])
    stats_col = next(k for k in row if k.startswith("stats lines"))
    assert result.stats.height == _first_int(row[stats_col])

    totals = [int(x) for x in re.findall(r"total_num_cumulative_preemption=(\d+)", path.read_text("utf-8", "replace"))]
    if totals:
        # Exact totals: logged + reconstructed events equal the highest counter value.
        assert ev.filter(pl.col("kind").is_in(["logged", "reconstructed"])).height == max(totals)
        assert ev.get_column("cumulative").max() == max(totals)
    else:
        assert ev.filter(pl.col("kind").is_in(["logged", "reconstructed"])).height == 0

    seen = set(result.config.filter(pl.col("status") == "seen").get_column("key").to_list())
    cfg_cell = row.get("startup/config lines seen", "-")
    for label, key in CONFIG_KEYS.items():
        if label in cfg_cell:
            assert key in seen, (label, key, sorted(seen))
    if "non-default args" in cfg_cell:
        lines_with_args = {
            i + 1 for i, ln in enumerate(path.read_text("utf-8", "replace").splitlines()) if "non-default args" in ln
        }
        from_args = result.config.filter(pl.col("line").is_in(list(lines_with_args)))
        assert from_args.height > 0


def test_v0_known_values(corpus):
    result = analyze([str(corpus / "vllm-8219-inline-preempt.log")], AnalyzeOptions(tz="UTC", year=2024))
    ev = result.events
    logged = ev.filter(pl.col("kind") == "logged").row(0, named=True)
    assert logged["request_id"] == "chat-be1eb78b9aa6437ea54a4490617b7286"
    assert logged["mode"] == "RECOMPUTE"
    assert logged["cumulative"] == 4251
    assert logged["time"].isoformat() == "2024-08-28T10:13:51+00:00"
    assert ev.filter(pl.col("kind") == "reconstructed").height == 4250
    assert ev.filter(pl.col("kind") == "reconstructed").get_column("request_id").null_count() == 4250


def test_bare_message_has_no_time(corpus):
    result = analyze([str(corpus / "vllm-limo29-bare-preempt.log")], AnalyzeOptions(tz="UTC"))
    ev = result.events
    assert ev.height == 101
    row = ev.filter(pl.col("kind") == "logged").row(0, named=True)
    assert row["request_id"] == "221" and row["time"] is None and row["time_precision"] == "unknown"


def test_v1_stats_values(corpus):
    result = analyze([str(corpus / "vllm-v0110-l4-kvfull-waiting-ansi.log")], AnalyzeOptions(tz="UTC", year=2025))
    st = result.stats
    assert st.get_column("kv_usage").max() == 100.0
    assert st.get_column("waiting").max() == 27
    assert set(st.get_column("family").to_list()) == {"v1"}
    assert set(st.get_column("engine").to_list()) == {"0"}


def test_v0_stats_values(corpus):
    result = analyze([str(corpus / "vllm-v063-structrag-vllmworkerprocess-ansi.log")], AnalyzeOptions(tz="UTC"))
    assert set(result.stats.get_column("family").to_list()) == {"v0"}
    cfg = {r["key"]: r["value"] for r in result.config.iter_rows(named=True)}
    assert cfg["num_gpu_blocks"] == "2987" and cfg["num_cpu_blocks"] == "4096"
    assert cfg["block_size"] == "16"  # derived: 1.46 x 32768 / 2987
