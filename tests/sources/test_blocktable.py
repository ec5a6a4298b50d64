"""Block-table JSON Lines and KV cache event batches."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest

from preemptlog.analysis import AnalyzeOptions, analyze
from preemptlog.pipeline.bundle import InputFile
from preemptlog.sources import TimeContext, blocktable, kvevents, sniff

from ..conftest import FIXTURES, write_lines

SCHEMA_FILE = Path(blocktable.__file__).resolve().parents[1] / "data" / "blocktable.schema.json"


def _file(path: Path, kind: str) -> InputFile:
    return InputFile(0, path, path.name, kind, None, path.stat().st_size, None, None)


@pytest.mark.parametrize("i", range(len(blocktable.SAMPLES)))
def test_blocktable_samples(i, tmp_path):
    line, exp = blocktable.SAMPLES[i]
    p = write_lines(tmp_path / "bt.jsonl", [line])
    out = blocktable.BlockTableParsed([_file(p, "blocktable")]).resolve(TimeContext(tz="UTC"))
    if exp.get("_bad"):
        assert out.warnings and "1 of 1 line(s)" in out.warnings[0]
        assert not out.frames or all(df.height == 0 for df in out.frames.values())
        return
    assert not out.warnings
    df = out.frames[exp["frame"]]
    assert df.height == 1
    row = df.row(0, named=True)
    for k, v in exp.items():
        if k != "frame":
            assert row[k] == v, k


def test_schema_examples_parse(tmp_path):
    doc = json.loads(SCHEMA_FILE.read_text())
    lines = [json.dumps(x) for x in doc["examples"]]
    assert sniff("\n".join(lines))[0] == "blocktable"
    p = write_lines(tmp_path / "bt.jsonl", lines)
    out = blocktable.BlockTableParsed([_file(p, "blocktable")]).resolve(TimeContext(tz="UTC"))
    assert not out.warnings
    st = out.frames["bt_steps"].row(0, named=True)
    assert (st["free_blocks"], st["largest_free_run"], st["free_regions"]) == (128, 5, 2)
    ev = out.frames["bt_events"]
    # ts and ISO times in the schema's examples describe the same moment
    assert ev.get_column("time").to_list() == [
        datetime(2026, 11, 30, 5, 10, 38, 200000, tzinfo=UTC),
        datetime(2026, 11, 30, 5, 10, 38, 300000, tzinfo=UTC),
    ]


def test_free_runs_vectorised():
    df = pl.DataFrame(
        {
            "_r": [0, 1, 2, 3],
            "free_regions": [None, None, [[5, 2], [9, 7]], None],
            "free_block_ids": [[7, 1, 2, 3, 9, 10, 3], [], None, [4]],
        },
        schema={"_r": pl.UInt32, "free_regions": pl.List(pl.List(pl.Int64)), "free_block_ids": pl.List(pl.Int64)},
    )
    out = blocktable.free_runs(df).sort("_r")
    assert out.select("largest_free_run", "free_regions_n").rows() == [(3, 3), (0, 0), (7, 2), (1, 1)]


def test_local_time_and_bad_lines_in_a_bundle(tmp_path):
    p = write_lines(
        tmp_path / "bt.jsonl",
        [
            '{"type": "step", "time": "2026-11-30 06:10:38", "step": 1, "num_free_blocks": 3, "free_regions": [[0, 3]]}',
            '{"type": "event", "time": "2026-11-30T06:10:39", "step": 2, "request_id": "r", "action": "preempt"}',
            "garbage",
            "",
        ],
    )
    a = analyze([str(p)], AnalyzeOptions(tz="Europe/Berlin"))
    st = a.frames["bt_steps"]
    assert st.get_column("time").to_list() == [datetime(2026, 11, 30, 5, 10, 38, tzinfo=UTC)]
    assert any("1 of 3 line(s)" in w for w in a.warnings)
    # no vLLM log in the bundle: the preempt record is the event (kind record)
    assert a.events.select("event_id", "kind", "request_id").rows() == [(f"{p}:2", "record", "r")]
    assert a.evidence.height == 1


BT_RECORDS = [
    '{"type": "step", "time": "2026-11-30T05:10:38+00:00", "step": 1, "num_free_blocks": 3, "free_regions": [[0, 3]]}',
    '{"type": "event", "time": "2026-11-30T05:10:39+00:00", "step": 2, "request_id": "r1", "action": "preempt"}',
    '{"type": "event", "time": "2026-11-30T05:10:40+00:00", "step": 3, "request_id": "r2", "action": "preempt"}',
    '{"type": "step", "time": "2026-11-30T05:10:41+00:00", "step": 4, "num_free_blocks": 9, "free_regions": [[0, 9]]}',
]


def _bt_analyze(path: Path, text: str):
    path.write_bytes(text.encode())
    a = analyze([str(path)], AnalyzeOptions(tz="UTC"))
    kept = a.frames["bt_steps"].height + a.frames["bt_events"].height
    return a, kept


def test_a_last_record_cut_mid_write_is_said_as_cut_at_its_line(tmp_path):
    # before: a generic "1 of 4 line(s) are not block-table records ... skipped", beside sniffing's
    # "ends in the middle of a line ...: its last line was read as is" (it was not read)
    p = tmp_path / "bt.jsonl"
    a, kept = _bt_analyze(p, "\n".join(BT_RECORDS[:3]) + "\n" + BT_RECORDS[3][:50])
    assert kept == 3  # the good records are kept
    cut = [w for w in a.warnings if "record is cut" in w]
    assert len(cut) == 1 and cut[0].startswith(f"{p}:4: the last block-table record is cut"), a.warnings
    assert "the 3 record(s) before it were read" in cut[0]
    assert not [w for w in a.warnings if "not block-table records" in w or "read as is" in w], a.warnings
    assert a.partial
    # a damaged line in the middle (a record cut short, good ones after it) is malformed, not cut
    mid = [*BT_RECORDS[:1], BT_RECORDS[1][:50], *BT_RECORDS[2:]]
    a, kept = _bt_analyze(p, "\n".join(mid) + "\n")
    assert kept == 3
    assert any("1 of 4 line(s) are not block-table records" in w for w in a.warnings), a.warnings
    assert not [w for w in a.warnings if "record is cut" in w], a.warnings
    # both: the middle one counted as bad, the last one said as cut
    a, kept = _bt_analyze(p, "\n".join(mid[:3]) + "\n" + BT_RECORDS[3][:50])
    assert kept == 2
    assert any("1 of 3 line(s) are not block-table records" in w for w in a.warnings), a.warnings
    assert [w for w in a.warnings if w.startswith(f"{p}:4: the last block-table record is cut")], a.warnings
    # a whole last record without a line end is read, nothing said; a whole one that breaks the schema is bad
    a, kept = _bt_analyze(p, "\n".join(BT_RECORDS))
    assert kept == 4 and not a.warnings, a.warnings
    a, kept = _bt_analyze(p, "\n".join([*BT_RECORDS[:3], '{"type": "step", "step": 5}']))
    assert kept == 3 and not [w for w in a.warnings if "record is cut" in w], a.warnings
    assert any("1 of 4 line(s) are not block-table records" in w for w in a.warnings), a.warnings


def test_preempt_records_are_evidence_when_the_log_counts(tmp_path):
    a = analyze([str(FIXTURES / "joined")], AnalyzeOptions(tz="UTC", year=2026))
    assert "record" not in a.events.get_column("kind").to_list()
    assert any("evidence, not counted" in n for n in a.notes)


def test_schemas(tmp_path):
    p = write_lines(tmp_path / "bt.jsonl", [s for s, e in blocktable.SAMPLES if not e.get("_bad")])
    out = blocktable.BlockTableParsed([_file(p, "blocktable")]).resolve(TimeContext(tz="UTC"))
    for name, schema in (
        ("bt_steps", blocktable.BT_STEPS_SCHEMA),
        ("bt_tables", blocktable.BT_TABLES_SCHEMA),
        ("bt_events", blocktable.BT_EVENTS_SCHEMA),
    ):
        assert {k: str(v) for k, v in out.frames[name].schema.items()} == schema, name
    assert out.config.row(0, named=True)["key"] == "block_size"


# ---- KV cache events ----


@pytest.mark.parametrize("i", range(len(kvevents.SAMPLES)))
def test_kvevents_samples(i, tmp_path):
    line, exp = kvevents.SAMPLES[i]
    p = write_lines(tmp_path / "kv.jsonl", [line])
    out = kvevents.KvEventsParsed([_file(p, "kvevents")]).resolve(TimeContext(tz="UTC"))
    if exp.get("_bad"):
        assert out.frames["kv_events"].height == 0 and out.warnings
        return
    row = out.frames["kv_events"].row(0, named=True)
    for k, v in exp.items():
        assert row[k] == v, k


def test_kvevents_file_sniff_schema_and_rate(tmp_path):
    lines = [s for s, e in kvevents.SAMPLES if not e.get("_bad")]
    assert sniff("\n".join(lines))[0] == "kvevents"
    p = write_lines(tmp_path / "kv.jsonl", lines)
    parsed = kvevents.KvEventsParsed([_file(p, "kvevents")])
    assert parsed.anchors()[0][0] == datetime(2026, 11, 30, 5, 10, 38, 100000, tzinfo=UTC)
    df = parsed.resolve(TimeContext(tz="UTC")).frames["kv_events"]
    assert {k: str(v) for k, v in df.schema.items()} == kvevents.KV_EVENTS_SCHEMA
    rate = kvevents.per_second(df)
    assert rate.get_column("stored_blocks").sum() == 2 + 0 + 0 + 4 + 2
    assert rate.get_column("cleared").sum() == 2


def test_bundle_kinds_are_sniffed():
    a = analyze([str(FIXTURES / "joined")], AnalyzeOptions(tz="UTC", year=2026))
    kinds = {f.display: f.kind for f in a.bundle.files}
    assert kinds == {
        "joined/blocktable.jsonl": "blocktable",
        "joined/dmon.txt": "dmon",
        "joined/kvevents.jsonl": "kvevents",
        "joined/vllm.log": "vllm-log",
    }
