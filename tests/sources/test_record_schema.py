"""The records frame of sources/vllm_log.py: every column is documented in the module docstring
(name, dtype, meaning), with the dtype it has."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl

from preemptlog.analysis import AnalyzeOptions, analyze
from preemptlog.sources import vllm_log

LINES = (
    "INFO 11-30 05:10:30 [loggers.py:208] Engine 000: Avg prompt throughput: 1.0 tokens/s, Running: 3 reqs, "
    "Waiting: 1 reqs, GPU KV cache usage: 95.0%\n"
    "2026-11-30T05:10:31.250Z WARNING 11-30 05:10:31 [scheduler.py:1] Sequence group 7 is preempted by "
    "PreemptionMode.RECOMPUTE mode\n"
    "(APIServer pid=41) INFO 11-30 05:10:32.125 [logger.py:39] Received request cmpl-1: prompt: 'x', "
    "params: SamplingParams(max_tokens=16), prompt_token_ids: [1, 2, 3], lora_request: None.\n"
    "Nov 30 05:10:33 host vllm[1]: WARNING 11-30 05:10:33 [scheduler.py:2] PREEMPTED req 7\n"
)


def documented() -> dict[str, str]:
    """name -> dtype of the column table in the module docstring."""
    doc = vllm_log.__doc__ or ""
    return dict(re.findall(r"^    ([a-z_]+)\s+([A-Z][A-Za-z0-9]+)\s+\S", doc, re.M))


def test_every_declared_record_column_is_documented_with_its_dtype():
    doc = documented()
    missing = [c for c in vllm_log.RECORD_SCHEMA if c not in doc]
    assert not missing, f"record columns without a line in vllm_log's docstring: {missing}"
    wrong = {c: (t, doc[c]) for c, t in vllm_log.RECORD_SCHEMA.items() if doc[c] != t}
    assert not wrong, f"dtype in RECORD_SCHEMA vs docstring: {wrong}"


def test_every_column_of_the_records_frame_is_documented(tmp_path: Path):
    log = tmp_path / "vllm.log"
    log.write_text(LINES)
    read = vllm_log.read(str(log), 0)
    a = analyze([str(log)], AnalyzeOptions(tz="UTC", year=2026))
    doc = documented()
    for frame in (read, a.records):
        assert frame.height
        for col, dtype in frame.schema.items():
            assert col in doc, f"records column {col!r} is not documented in vllm_log's docstring"
            assert doc[col] == (dtype.base_type().__name__ if isinstance(dtype, pl.Datetime) else str(dtype)), col
    # no stale lines: every documented column is in the records the pipeline keeps
    assert set(doc) == set(a.records.columns)
