""" "To know more" never asks for evidence the bundle already holds.

A bundle of block-table records alone (the vLLM plugin's: a pool step with 2 free blocks, the victim's
extend there, then three steps with 30 free and its preempt record at the last): the preemption is
undetermined (no shortage at its own step). Before, the summary said "To know more, add: the field
guide's evidence (its scheduler debug-hook lines, block-table records, nvidia-smi dmon)"; the records
are the bundle. Now it names only the kinds the bundle lacks (fixes/plan.py ``_guide_evidence``).
"""

from __future__ import annotations

import json

from preemptlog import AnalyzeOptions, analyze

ROWS = [
    {"type": "step", "time": "2025-05-09T10:00:03.000+00:00", "step": 20, "num_free_blocks": 2},
    {
        "type": "event",
        "time": "2025-05-09T10:00:03.000+00:00",
        "step": 20,
        "request_id": "r7",
        "action": "extend",
        "blocks_before": 8,
        "blocks_after": 12,
    },
    *(
        {"type": "step", "time": f"2025-05-09T10:00:03.{3 * i}00+00:00", "step": 20 + i, "num_free_blocks": 30}
        for i in (1, 2, 3)
    ),
    {
        "type": "event",
        "time": "2025-05-09T10:00:03.950+00:00",
        "step": 23,
        "request_id": "r7",
        "action": "preempt",
        "blocks_before": 12,
        "blocks_after": 0,
    },
]


def _know_more(tmp_path, extra: dict[str, str]) -> list[str]:
    b = tmp_path / "b"
    b.mkdir()
    (b / "blocktable.jsonl").write_text("\n".join(json.dumps(r) for r in ROWS) + "\n")
    for name, text in extra.items():
        (b / name).write_text(text)
    a = analyze([str(b)], AnalyzeOptions(tz="UTC"))
    assert a.events.height == 1
    assert a.verdicts is not None and a.verdicts.get_column("gate").to_list() == ["undetermined"]
    return [x["add"] for x in a.summary()["to_know_more"]]


def test_records_alone_are_not_asked_for(tmp_path):
    adds = [x for x in _know_more(tmp_path, {}) if "field guide" in x]
    assert adds == ["the field guide's evidence (its scheduler debug-hook lines, nvidia-smi dmon)"]


def test_records_and_dmon_leave_the_hook_lines(tmp_path):
    dmon = (
        "#Date       Time        gpu    pwr  gtemp  mtemp     sm    mem    enc    dec\n"
        "#YYYYMMDD   HH:MM:SS    Idx      W      C      C      %      %      %      %\n"
        "20250509   10:00:03      0    250     60      -     90     70      0      0\n"
    )
    adds = [x for x in _know_more(tmp_path, {"dmon.txt": dmon}) if "field guide" in x]
    assert adds == ["the field guide's evidence (its scheduler debug-hook lines)"]
