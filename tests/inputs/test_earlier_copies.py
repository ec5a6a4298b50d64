"""An earlier copy of a file is read once with it (sources/copies.py ``_earlier_copies``): a log copied
while the server still wrote it (``cp vllm.log vllm.log.bak``, a .gz saved mid-incident and cut where the
saving stopped) holds the log's first bytes and nothing else. Reading both counted every preemption of the
copy twice and called the two "logs of different servers": a V0 log of 251 preemptions beside its copy
taken after 101 said 352 events in ``-f json`` and "Not one incident" on the screen.

Hand-written V0 logs (vLLM 0.6.3's warning, every 50th preemption logged with its cumulative count).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from preemptlog import AnalyzeOptions, analyze

from ..conftest import run_cli

OPTS = AnalyzeOptions(tz="UTC", year=2026)


def v0_log(warnings: int = 6, server: str = "m") -> str:
    lines = [
        "INFO 12-01 10:00:00 api_server.py:585] vLLM API server version 0.6.3",
        f"INFO 12-01 10:00:01 llm_engine.py:237] Initializing an LLM engine (v0.6.3) with config: model='{server}', "
        "max_seq_len=4096, tensor_parallel_size=1, enable_prefix_caching=False",
        "INFO 12-01 10:00:05 gpu_executor.py:122] # GPU blocks: 1000, # CPU blocks: 512",
    ]
    for k in range(warnings):
        t = 10 + 7 * k
        lines.append(
            f"INFO 12-01 10:01:{t:02d} metrics.py:351] Avg prompt throughput: 100.0 tokens/s, Avg generation "
            "throughput: 900.0 tokens/s, Running: 40 reqs, Swapped: 0 reqs, Pending: 3 reqs, GPU KV cache usage: "
            "99.1%, CPU KV cache usage: 0.0%."
        )
        lines.append(
            f"WARNING 12-01 10:01:{t + 2:02d} scheduler.py:1481] Sequence group cmpl-{k}-0 is preempted by "
            "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect the "
            "end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size to provide more KV "
            f"cache memory. total_num_cumulative_preemption={1 + 50 * k}"
        )
    return "\n".join(lines) + "\n"


def _run(root: Path) -> tuple[int, list[str]]:
    a = analyze([str(root)], OPTS)
    said = [w for f in a.bundle.files for w in f.warnings if "an earlier copy" in w]
    return a.events.height, said


def test_a_plain_copy_of_the_first_lines_is_read_once(tmp_path):
    log = v0_log()
    (tmp_path / "vllm.log").write_text(log)
    (tmp_path / "vllm.log.bak").write_text("".join(log.splitlines(keepends=True)[:9]))
    n, said = _run(tmp_path)
    alone = analyze([str(tmp_path / "vllm.log")], OPTS).events.height
    assert n == alone == 251, (n, alone)
    assert len(said) == 1 and "also found as" in said[0] and "vllm.log.bak" in said[0], said


def test_a_gz_saved_mid_write_and_cut_mid_line_is_read_once(tmp_path):
    """A .gz of the log's first bytes whose stream stops in the middle of a line (and of a deflate block):
    what it reads is the log's first bytes."""
    log = v0_log()
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "vllm.log").write_text(log)
    whole = gzip.compress(log.encode()[:900])
    (tmp_path / "saved-vllm.log.gz").write_bytes(whole[: len(whole) - 30])
    n, said = _run(tmp_path)
    assert n == 251 and len(said) == 1 and "saved-vllm.log.gz" in said[0], (n, said)


def test_a_whole_gz_of_an_earlier_state_is_read_once(tmp_path):
    log = v0_log()
    (tmp_path / "vllm.log").write_text(log)
    (tmp_path / "at-10-01-30.log.gz").write_bytes(gzip.compress("".join(log.splitlines(keepends=True)[:7]).encode()))
    n, said = _run(tmp_path)
    assert n == 251 and len(said) == 1, (n, said)


def test_the_copy_may_be_the_longer_file_s_compressed_twin(tmp_path):
    """The longer file compressed, the earlier copy plain: the longer one is read, whichever is compressed."""
    log = v0_log()
    (tmp_path / "vllm.log.gz").write_bytes(gzip.compress(log.encode()))
    (tmp_path / "copy.log").write_text("".join(log.splitlines(keepends=True)[:5]))
    n, said = _run(tmp_path)
    assert n == 251 and len(said) == 1 and "copy.log" in said[0], (n, said)


def test_two_servers_whose_logs_begin_alike_are_both_read(tmp_path):
    """The same first lines (two servers started alike in the same seconds), then other lines: no copy."""
    a = v0_log(warnings=3)
    b = v0_log(warnings=3).replace("cmpl-2-0", "cmpl-9-0").replace("10:01:26", "10:01:27")
    assert a != b and a[:256] == b[:256]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "vllm.log").write_text(a)
    (tmp_path / "b" / "vllm.log").write_text(b)
    n, said = _run(tmp_path)
    assert said == [] and n == 2 * 101, (n, said)


def test_a_file_shorter_than_the_key_is_left_as_it_is(tmp_path):
    log = v0_log()
    (tmp_path / "vllm.log").write_text(log)
    (tmp_path / "head.log").write_text(log[:120])
    _, said = _run(tmp_path)
    assert said == []


def test_through_the_cli_one_incident_and_the_log_s_count(tmp_path):
    log = v0_log()
    (tmp_path / "vllm.log").write_text(log)
    (tmp_path / "vllm-copy.log").write_text("".join(log.splitlines(keepends=True)[:9]))
    p = run_cli("analyze", str(tmp_path), "--tz", "UTC", "-f", "json")
    assert "Traceback" not in p.stderr, p.stderr
    doc = json.loads(p.stdout)
    assert len(doc["events"]) == 251 and doc["summary"]["reconciliation"]["total"] == 251, doc["summary"]["headline"]
    assert not doc["summary"].get("incidents"), doc["summary"]["incidents"]
    assert any("an earlier copy" in w for w in doc["summary"]["warnings"]), doc["summary"]["warnings"]


def test_logs_that_part_within_their_heads_are_never_measured(tmp_path, monkeypatch):
    """Two servers' .gz logs with the same first 256 bytes that part before 64 KiB: neither is
    decompressed to its end to be measured (only a file whose head begins another's is)."""
    from preemptlog.sources import copies

    a = v0_log(warnings=3)
    b = a.replace("cmpl-2-0", "cmpl-9-0")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "vllm.log.gz").write_bytes(gzip.compress(a.encode()))
    (tmp_path / "b" / "vllm.log.gz").write_bytes(gzip.compress(b.encode()))
    measured: list[str] = []
    real = copies._read_size
    monkeypatch.setattr(copies, "_read_size", lambda f: measured.append(f.display) or real(f))
    n, said = _run(tmp_path)
    assert said == [] and measured == [] and n == 2 * 101, (n, said, measured)
