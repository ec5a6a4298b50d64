"""A UTF-8 byte-order mark at the start of a file (a Windows editor's save, PowerShell's ``Out-File``)
changes nothing but a note: every source kind reads the file as it reads it without the mark.

Before: a dmon capture whose header row came behind the mark was ``unknown`` (its GPU evidence lost,
silently), and so was a Prometheus ``query_range`` answer (the only count of a stock V1 log: 'not
visible', exit 0).
"""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from preemptlog import AnalyzeOptions, analyze

from ..conftest import run_cli
from ..support.stock_v1 import V1_LOG

BOM = b"\xef\xbb\xbf"
T0 = datetime(2026, 12, 2, 10, 0, 0, tzinfo=UTC).timestamp()

DMON = "\n".join(
    [
        "#Date       Time        gpu     fb   bar1     sm    mem",
        "#YYYYMMDD   HH:MM:SS    Idx     MB     MB      %      %",
        *(f" 20261202   10:00:{s:02d}      0  {30000 + 100 * s}      5     90     60" for s in range(0, 50, 5)),
    ]
)


def _query_range() -> str:
    vals = [[T0 + 10 * (i + 1), str(float(i))] for i in range(4)]  # 0, 1, 2, 3 at 10:00:10 .. :40
    series = {"metric": {"__name__": "vllm:num_preemptions_total", "engine": "0", "model_name": "m"}, "values": vals}
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": [series]}})


def _records() -> str:
    out = []
    for i, rid in enumerate(("r1", "r2")):
        ts = T0 + 15 + 10 * i
        out.append(
            {"type": "event", "ts": ts, "step": 10 + i, "engine": "0", "request_id": rid, "action": "preempt",
             "blocks_before": 5, "blocks_after": 0, "blocks_needed": 4, "pool_free_blocks": 2, "v": 2}
        )  # fmt: skip
    return "".join(json.dumps(o) + "\n" for o in out)


FILES = {
    "vllm.log": V1_LOG + "\n",
    "dmon.txt": DMON + "\n",
    "query_range.json": _query_range(),  # one line, no line end: a whole JSON answer
    "preempt-1.jsonl": _records(),  # the first line is a preempt record
}


def _bundle(root: Path, bom: set[str], gz: set[str] = frozenset()) -> Path:
    root.mkdir()
    for name, text in FILES.items():
        data = (BOM if name in bom else b"") + text.encode()
        if name in gz:
            (root / (name + ".gz")).write_bytes(gzip.compress(data))
        else:
            (root / name).write_bytes(data)
    return root


def _run(root: Path):
    return analyze([str(root)], AnalyzeOptions(tz="UTC", rules=True))


def _answer(r) -> tuple:
    s = r.summary()
    kinds = sorted((Path(f.display).name.removesuffix(".gz"), f.kind) for f in r.bundle.files)
    ev = r.events.select("time", "kind", "request_id").rows()
    gates = r.verdicts.get_column("gate").to_list()
    gpu = r.evidence.select("dmon_fb_at_mb", "dmon_fb_jump_mb").rows()
    return s["events"], s["count_visible"], kinds, ev, gates, gpu


@pytest.mark.parametrize("name", sorted(FILES))
@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
def test_a_file_behind_a_utf8_bom_is_read_as_without_it(tmp_path, name, gz):
    plain = _answer(_run(_bundle(tmp_path / "plain", set(), {name} if gz else set())))
    r = _run(_bundle(tmp_path / "bom", {name}, {name} if gz else set()))
    assert _answer(r) == plain
    assert plain[0] == 3 and plain[1]  # 2 records, the counter explains them and counts 1 more
    notes = [w for w in r.warnings if "byte-order mark" in w]
    assert len(notes) == 1 and Path(notes[0].split(":")[0]).name.startswith(name)
    assert not r.partial  # nothing damaged: a one-line JSON answer behind the mark is whole


def test_cli_counts_a_query_range_answer_behind_a_bom(tmp_path):
    """The contract: a stock V1 log's only count comes from the answer; the mark must not make it 'not visible'."""
    root = _bundle(tmp_path / "b", {"query_range.json", "dmon.txt"})
    (root / "preempt-1.jsonl").unlink()
    p = run_cli("analyze", str(root), "-f", "json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["summary"]["count_visible"] is True and doc["summary"]["events"] == 3
    kinds = {Path(i["file"]).name: i["kind"] for i in doc["summary"]["inputs"]}
    assert kinds["query_range.json"] == "prometheus" and kinds["dmon.txt"] == "dmon"
    assert "Traceback" not in p.stderr
