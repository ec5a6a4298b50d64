"""A scheduler's own records explain its own server's events only: two servers side by side.

Two field-guide servers (patched scheduler: ``[SCHEDULER]`` hook lines and ``Req-N PREEMPTED`` lines)
in ``a/`` and ``b/`` both call their only engine "0". Before, the joiner keyed the debug-hook steps,
the block-table records and the configuration on that label alone: server A's preemption cited
server B's hook step (``b/vllm.log``), B's block-table pool and B's ``max_num_seqs``, and was judged
on them. Now each event reads the records under its own server's folder (joiner.common.ServerScope);
records under no server's folder (``records/`` beside ``a/`` and ``b/``) cannot be told to be either
server's and explain neither; with one server, records in a folder of their own still explain it.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import polars as pl
import pytest

from preemptlog import AnalyzeOptions, analyze

OPTS = AnalyzeOptions(tz="UTC", year=2026)


def _log(free: int, seqs: int, rid: str) -> str:
    """A patched server's log: its arguments, a stats line, one scheduler step (``free`` blocks free,
    one pending request needing 40) and the preemption of request ``rid`` two seconds later."""
    return (
        "\n".join(
            [
                f"INFO 11-30 05:10:00 [utils.py:328] non-default args: {{'model': 'm', 'max_num_seqs': {seqs}}}",
                "INFO 11-30 05:10:30 [loggers.py:208] Engine 000: Avg prompt throughput: 1.0 tokens/s, Avg generation "
                "throughput: 2.0 tokens/s, Running: 31 reqs, Waiting: 10 reqs, GPU KV cache usage: 95.0%, "
                "Prefix cache hit rate: 0.0%",
                f"INFO 11-30 05:10:36 [scheduler_debug.py:9] [SCHEDULER] Available blocks: {free}, Pending reqs: 1, "
                "Running reqs: 31",
                "  Req-50: prompt=128, max_out=512, blocks_needed=40",
                f"WARNING 11-30 05:10:38 [scheduler.py:10] Req-{rid} PREEMPTED",
            ]
        )
        + "\n"
    )


def _records(free: int, rid: str) -> str:
    rows = [
        {
            "type": "step",
            "time": "2026-11-30T05:10:37.000Z",
            "step": 1200,
            "block_size": 16,
            "num_total_blocks": 256,
            "num_free_blocks": free,
            "running": 31,
            "waiting": 3,
        },
        {
            "type": "event",
            "time": "2026-11-30T05:10:37.500Z",
            "step": 1201,
            "action": "preempt",
            "request_id": rid,
            "blocks_needed": 40,
            "pool_free_blocks": free,
        },
    ]
    return "".join(json.dumps(r) + "\n" for r in rows)


def _evidence(paths: list[Path]) -> dict[str, dict]:
    a = analyze([str(p) for p in paths], OPTS)
    ev = a.events.select("event_id", "source").join(a.evidence, on="event_id")
    return {r["source"].replace("!", "/").split("/")[-2]: r for r in ev.iter_rows(named=True)}


def _cited(row: dict, skip: tuple[str, ...] = ("code_",)) -> set[str]:
    """Every file an event's evidence cites (but the ``skip`` groups: the code facts are per engine kind,
    read from the whole bundle's configuration: ``code_engine`` names the line that shows V1)."""
    out = set()
    for k, v in row.items():
        if k.endswith("_src") and isinstance(v, str) and not k.startswith(skip):
            out |= {s.strip().split(":")[0] for s in v.split(";")}
    return out


@pytest.mark.parametrize("layout", ["folders", "nested", "archive"])
def test_each_server_reads_its_own_hook_steps_records_and_arguments(tmp_path: Path, layout: str) -> None:
    """``a/`` and ``b/`` side by side; ``nested``: under ``node1/`` with the records one folder deeper
    (``b/records/``); ``archive``: the same folders inside a .tar.gz (members ``x.tar.gz!a/vllm.log``)."""
    root = tmp_path / "x"
    top = root / "node1" if layout == "nested" else root
    for name, free, seqs, rid in (("a", 90, 128, "4242"), ("b", 9, 64, "42")):
        (top / name).mkdir(parents=True)
        (top / name / "vllm.log").write_text(_log(free, seqs, rid))
    rec = top / "b" / "records" if layout == "nested" else top / "b"
    rec.mkdir(exist_ok=True)
    (rec / "blocktable.jsonl").write_text(_records(9, "42"))
    target = root
    if layout == "archive":
        target = tmp_path / "x.tar.gz"
        with tarfile.open(target, "w:gz") as tf:
            for name in ("a", "b"):
                tf.add(root / name, arcname=name)
    got = _evidence([target])
    a, b = got["a"], got["b"]
    # A: its own step (90 free), no block-table pool (its folder has no records), its own arguments
    assert a["sched_free_blocks"] == 90 and a["sched_free_blocks_src"].endswith("a/vllm.log:3")
    assert a["pool_free_blocks"] is None
    assert a["cfg_max_num_seqs"] == 128 and a["cfg_max_num_seqs_src"].endswith("a/vllm.log:1")
    assert not any(f.endswith(("b/vllm.log", "blocktable.jsonl")) for f in _cited(a)), _cited(a)
    # B: its own step, its own records, its own arguments
    assert b["sched_free_blocks"] == 9 and b["sched_free_blocks_src"].endswith("b/vllm.log:3")
    assert b["pool_free_blocks"] == 9 and b["pool_free_blocks_src"].endswith("blocktable.jsonl:1")
    assert "/b/" in b["pool_free_blocks_src"].replace("!", "/")
    assert b["cfg_max_num_seqs"] == 64 and b["cfg_max_num_seqs_src"].endswith("b/vllm.log:1")
    assert not any(f.endswith("a/vllm.log") for f in _cited(b)), _cited(b)


def test_records_under_no_servers_folder_explain_neither_of_two(tmp_path: Path) -> None:
    for name, rid in (("a", "42"), ("c", "4242")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "vllm.log").write_text(_log(30, 64, rid))
    (tmp_path / "records").mkdir()
    (tmp_path / "records" / "blocktable.jsonl").write_text(_records(9, "42"))
    got = _evidence([tmp_path])
    for name in ("a", "c"):
        row = got[name]
        assert row["pool_free_blocks"] is None, name
        # the configuration such a file states is the bundle's (cfg_block_size), its pool is no one's
        assert not any("records/" in f for f in _cited(row, ("code_", "cfg_"))), (name, _cited(row))
        assert row["sched_free_blocks"] == 30, name  # its own hook step still
    notes = [n for n in analyze([str(tmp_path)], OPTS).notes if "server folders" in n]
    assert len(notes) == 1
    assert notes[0].startswith(f"{tmp_path.name}/records/blocktable.jsonl: scheduler records under none of the 2 ")
    assert f"({tmp_path.name}/a, {tmp_path.name}/c)" in notes[0]


def test_one_servers_records_in_a_folder_of_their_own_still_explain_it(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "vllm.log").write_text(_log(30, 64, "42"))
    (tmp_path / "records").mkdir()
    (tmp_path / "records" / "blocktable.jsonl").write_text(_records(9, "42"))
    row = _evidence([tmp_path])["logs"]
    assert row["pool_free_blocks"] == 9 and row["pool_free_blocks_src"].endswith("records/blocktable.jsonl:1")
    assert not [n for n in analyze([str(tmp_path)], OPTS).notes if "server folders" in n]


def test_two_servers_in_one_folder_are_not_told_apart_by_folder(tmp_path: Path) -> None:
    """No folder tells two logs in one folder apart: the scope is off (as before), the records beside
    them are read by both."""
    (tmp_path / "a.log").write_text(_log(30, 64, "42"))
    (tmp_path / "c.log").write_text(_log(30, 64, "4242"))
    (tmp_path / "blocktable.jsonl").write_text(_records(9, "42"))
    a = analyze([str(tmp_path)], OPTS)
    ev = a.events.select("event_id").join(a.evidence, on="event_id")
    assert ev.height == 2
    assert ev.get_column("pool_free_blocks").to_list() == [9, 9]
    assert pl.Series(ev.get_column("pool_free_blocks_src")).str.ends_with("blocktable.jsonl:1").all()
