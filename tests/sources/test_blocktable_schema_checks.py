"""Block-table records meet preemptlog/data/blocktable.schema.json on both reads (the columnar one and
the Python one a damaged file takes), and an identical record read twice is one record."""

from __future__ import annotations

import json

import pytest

from preemptlog.analysis import AnalyzeOptions, analyze
from preemptlog.pipeline.bundle import InputFile
from preemptlog.sources import blocktable

from ..conftest import analyze_json, write_lines

TS = 1773482405  # 2026-03-14T10:00:05Z
EVENT = {"type": "event", "ts": TS, "step": 1, "request_id": "r", "action": "preempt"}
STEP = {"type": "step", "ts": TS, "step": 1, "num_free_blocks": 3}
TABLE = {"type": "table", "ts": TS, "step": 1, "request_id": "r", "block_ids": [1, 2]}
REQUEST = {"type": "request", "ts": TS, "step": 0, "request_id": "r", "phase": "arrival"}


def _line(base: dict, **kw) -> str:
    return json.dumps({**base, **kw})


# (record line, whether the schema accepts it)
CASES = [
    (_line(EVENT), True),
    (_line(EVENT, step=-1), False),  # step: minimum 0
    (_line(EVENT, request_id=12345), False),  # request_id: a string
    (_line(EVENT, request_id="12345"), True),
    (_line(EVENT, request_id=True), False),
    (_line(EVENT, reason=5), False),
    (_line(EVENT, reason="a.b. c"), True),
    (_line(EVENT, engine=1), True),  # engine: a string or a whole number >= 0
    (_line(EVENT, engine="1"), True),
    (_line(EVENT, engine=-1), False),
    (_line(EVENT, engine=1.5), False),
    (_line(EVENT, engine=True), False),
    (_line(EVENT, blocks_before=-3), False),
    (_line(EVENT, blocks_after=None), True),  # null: not there
    (_line(EVENT, step=3.0), True),  # JSON Schema: 3.0 is an integer
    (_line(EVENT, step=3.5), False),
    (_line(EVENT, blocks_needed=0.25), False),
    (_line(EVENT, step=True), False),
    (_line(EVENT, ts=True), False),
    (_line(EVENT, ts="1773482405"), False),
    (_line(EVENT, ts=None), False),  # no time
    (_line(EVENT, ts=1e300), False),
    (_line({**EVENT, "ts": None}, time="not a time"), False),
    (_line({**EVENT, "ts": None}, time="2026-03-14T10:00:05.250Z"), True),
    (_line(EVENT, v=2), True),
    (_line(EVENT, v=3), False),
    (_line(EVENT, action="PREEMPT"), False),
    (_line(EVENT, extra={"x": [1.5, True]}, flag=False, ratio=0.5), True),  # extra fields are ignored
    (_line(STEP), True),
    (_line(STEP, num_free_blocks=-1), False),
    (_line(STEP, num_free_blocks=1e300), False),
    (_line(STEP, block_size=0), False),  # minimum 1
    (_line(STEP, running=True), False),
    (_line(STEP, free_regions=[[1, 2], [5, 1]]), True),
    (_line(STEP, free_regions=[[1, 0]]), False),  # a run of length 0
    (_line(STEP, free_regions=[[1]]), False),
    (_line(STEP, free_regions=[[1, 2, 3]]), False),
    (_line(STEP, free_regions=[[1, 2.5]]), False),
    (_line(STEP, free_block_ids=[3, -1]), False),
    (_line(TABLE), True),
    (_line(TABLE, block_ids=[1, -2]), False),
    (_line(TABLE, block_ids=[1, 2.5]), False),
    (_line(TABLE, block_ids=[1, True]), False),
    (_line(TABLE, block_ids=[1, None]), False),
    (_line(TABLE, shared=[{"block_id": 1, "ref_count": 2}]), True),
    (_line(TABLE, shared=[{"block_id": 1, "ref_count": 0}]), False),
    (_line(TABLE, shared=[{"block_id": 1}]), False),  # ref_count required
    (_line(REQUEST), True),
    (_line(REQUEST, block_hashes=["ab", "12"]), True),
    (_line(REQUEST, block_hashes=["ab", 12]), False),
    (_line(REQUEST, prompt_tokens=-5), False),
    (_line(REQUEST, arrival_time="soon"), False),  # arrival_time: a number (not read, still checked)
]


def _read(path, *, repeats: bool = False) -> tuple[int, int]:
    """(records kept, bad lines) of one file; ``repeats``: with the identical records read once."""
    parsed = blocktable.BlockTableParsed([InputFile(0, path, path.name, "blocktable", None, 0, None, None)])
    [(_, df, bad, _)] = parsed.items
    return df.height + (sum(parsed.repeats.values()) if repeats else 0), bad


@pytest.mark.parametrize("line,ok", CASES, ids=[f"{i}-{'ok' if ok else 'bad'}" for i, (_, ok) in enumerate(CASES)])
@pytest.mark.parametrize("damaged", [False, True], ids=["columnar", "python"])
def test_the_schema_decides_on_both_reads(tmp_path, line, ok, damaged):
    good = _line(EVENT, request_id="other", step=7)
    lines = [good, line] + (["{not json"] if damaged else [])  # a bad JSON line: the Python read
    kept, bad = _read(write_lines(tmp_path / "bt.jsonl", lines))
    expected = (2, 0) if ok else (1, 1)
    if damaged:
        expected = (expected[0], expected[1] + 1)
    assert (kept, bad) == expected


def test_b03_shape_rejects_every_violation_in_one_warning(tmp_path):
    lines = [
        _line(EVENT, request_id="ok-1", blocks_before=2, blocks_after=0),
        _line(EVENT, request_id=12345, step=4),
        _line(EVENT, request_id="r10", step=-1),
        _line(EVENT, request_id="r8", blocks_before=-3, blocks_after=None),
        _line(EVENT, request_id="r11", engine=1, step=9),
    ]
    a = analyze([str(write_lines(tmp_path / "bt.jsonl", lines))], AnalyzeOptions(tz="UTC"))
    assert sorted(a.events.get_column("request_id").to_list()) == ["ok-1", "r11"]
    bad = [w for w in a.warnings if "not block-table records" in w]
    assert len(bad) == 1 and "3 of 5 line(s)" in bad[0]
    assert a.partial


def test_the_same_record_twice_is_one_preemption(tmp_path):
    rec = _line(EVENT, request_id="d1", blocks_before=2, blocks_after=0)
    lines = [rec, rec, _line(EVENT, request_id="d2", step=2, ts=TS + 1)]
    a = analyze([str(write_lines(tmp_path / "dup.jsonl", lines))], AnalyzeOptions(tz="UTC"))
    assert sorted(a.events.get_column("request_id").to_list()) == ["d1", "d2"]
    assert any("1 block-table record(s) identical to an earlier one" in n for n in a.notes)
    assert a.summary()["requests_preempted_more_than_once"] == []


def test_records_that_differ_in_any_field_stay_apart(tmp_path):
    base = dict(EVENT, request_id="d1", blocks_before=2, blocks_after=0)
    lines = [json.dumps(base)] + [
        json.dumps({**base, **change})
        for change in ({"blocks_before": 3}, {"step": 2}, {"ts": TS + 0.001}, {"engine": "1"}, {"reason": "x"})
    ]
    a = analyze([str(write_lines(tmp_path / "bt.jsonl", lines))], AnalyzeOptions(tz="UTC"))
    assert a.events.height == 6
    assert not any("identical to an earlier one" in n for n in a.notes)


def test_records_of_two_files_are_never_merged(tmp_path):
    """Two files holding equal records (two servers' captures, hand-written variants of one incident)
    keep each its own: evidence of one server never stands for another's."""
    recs = [_line(EVENT, request_id=f"q{i}", step=i, ts=TS + i) for i in range(4)]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = write_lines(tmp_path / "a" / "rec.jsonl", recs[:3])
    second = write_lines(tmp_path / "b" / "rec.jsonl", recs[1:])
    a = analyze([str(first), str(second)], AnalyzeOptions(tz="UTC"))
    assert sorted(a.events.get_column("request_id").to_list()) == ["q0", "q1", "q1", "q2", "q2", "q3"]
    assert not any("identical to an earlier one" in n for n in a.notes)


def test_a_line_written_twice_in_one_file_is_one_record(tmp_path):
    recs = [_line(EVENT, request_id=f"q{i}", step=i, ts=TS + i) for i in range(3)]
    p = write_lines(tmp_path / "rec.jsonl", [recs[0], recs[1], recs[1], recs[2], recs[0]])
    a = analyze([str(p)], AnalyzeOptions(tz="UTC"))
    assert sorted(a.events.get_column("request_id").to_list()) == ["q0", "q1", "q2"]
    assert any(n.startswith(f"{p}: 2 block-table record(s) identical") for n in a.notes)


def test_cli_counts_a_duplicated_preempt_line_once(tmp_path):
    rec = _line(EVENT, request_id="d1", blocks_before=2, blocks_after=0)
    p = write_lines(tmp_path / "dup.jsonl", [rec, rec, _line(EVENT, request_id="d2", step=2, ts=TS + 1)])
    summary = analyze_json(str(p))
    assert summary["events"] == 2
    assert summary["requests_preempted_more_than_once"] == []
    assert any("identical to an earlier one" in n for n in summary["notes"])


def test_schema_says_engine_may_be_a_number():
    doc = json.loads(blocktable.resources.files("preemptlog").joinpath("data/blocktable.schema.json").read_text())
    assert doc["properties"]["engine"]["type"] == ["string", "integer"]


def test_a_python_read_and_a_columnar_read_keep_the_same_rows(tmp_path):
    lines = [line for line, _ in CASES]
    kept, bad = _read(write_lines(tmp_path / "col.jsonl", lines), repeats=True)
    kept2, bad2 = _read(write_lines(tmp_path / "py.jsonl", [*lines, "{not json"]), repeats=True)
    assert (kept, bad + 1) == (kept2, bad2)
    assert kept == sum(ok for _, ok in CASES)
