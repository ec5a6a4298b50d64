"""The incidents of a bundle of several, each analysed on its own, cite every file by the name the whole
analysis gives it: a file found in an archive as ``b.zip!vllm.log``, a file of a folder as
``bundle/a/vllm.log``.

render/each.py split_by_incident built each unit's file list from the paths read: a file of an
archive is read out of the private folder the archive is unpacked into (removed on exit), so the
unit's own analysis (the summary's one line each, ``--each``, ``explain``) cited that folder
(``--max-num-seqs 128 (seen /tmp/preemptlog-1ndpq4dq/archive-0/vllm.log:2) -> 34``), where the same
archive analysed alone cites ``b.zip!vllm.log:2``. A unit now keeps how the whole analysis found each
file (inputs/files.py ``Found``, ``AnalyzeOptions.found``) and its analysis reads it so.

Hand-written logs: a vLLM 0.10.2 V1 log (``max_num_seqs`` 128, the KV cache full with requests
waiting) and an unrelated V0 log of another day (a preemption warning).
"""

from __future__ import annotations

import json
import shutil
import tarfile
import zipfile
from pathlib import Path

import pytest

from preemptlog.analysis import AnalyzeOptions, analyze
from preemptlog.inputs.workspace import Workspace
from preemptlog.render.each import run_each, split_by_incident

from ..conftest import run_cli

V1 = [
    "INFO 11-29 10:00:00 [api_server.py:1805] vLLM API server version 0.10.2",
    "INFO 11-29 10:00:00 [utils.py:328] non-default args: {'model': 'm', 'max_num_seqs': 128}",
    "INFO 11-29 10:00:01 [core.py:76] Initializing a V1 LLM engine (v0.10.2) with config: model='m', "
    "speculative_config=None, max_seq_len=4096, enable_prefix_caching=False",
    *(
        f"INFO 11-29 10:00:{t} [loggers.py:123] Engine 000: Avg prompt throughput: 100.0 tokens/s, Avg generation "
        f"throughput: 200.0 tokens/s, Running: 40 reqs, Waiting: {w} reqs, GPU KV cache usage: 99.0%, "
        "Prefix cache hit rate: 0.0%"
        for t, w in ((10, 10), (20, 12), (30, 14), (40, 15))
    ),
]
V0 = [
    "INFO 12-01 10:00:00 [api_server.py:1] vLLM API server version 0.6.3",
    "WARNING 12-01 10:00:35 [scheduler.py:1560] Sequence group cmpl-x-0 is preempted by PreemptionMode.RECOMPUTE "
    "mode because there is not enough KV cache space. This can affect the end-to-end performance. Increase "
    "gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
    "total_num_cumulative_preemption=1",
]
OPTS = AnalyzeOptions(tz="UTC")
TEMP = "preemptlog-"  # the private folder's name (inputs/workspace.py): never cited


def _write(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def _zip(path: Path, members: dict[str, list[str]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as z:
        for name, lines in members.items():
            z.writestr(name, "\n".join(lines) + "\n")
    return path


def _targz(path: Path, members: dict[str, list[str]], tmp: Path) -> Path:
    with tarfile.open(path, "w:gz") as t:
        for name, lines in members.items():
            t.add(_write(tmp / "src" / name, lines), arcname=name)
    return path


def _inputs(kind: str, tmp: Path) -> tuple[list[str], str, str]:
    """(the paths to analyse, the V1 log's display name, the V0 log's) for each shape of input."""
    other = _write(tmp / "other" / "vllm.log", V0)
    if kind == "zip":
        b = _zip(tmp / "b.zip", {"vllm.log": V1})
        return [str(b), str(other)], f"{b}!vllm.log", str(other)
    if kind == "tar.gz":
        b = _targz(tmp / "b.tar.gz", {"vllm.log": V1}, tmp)
        return [str(b), str(other)], f"{b}!vllm.log", str(other)
    # one folder holding a zip (bundle/z/b.zip) beside a log of its own (bundle/o/vllm.log)
    _zip(tmp / "bundle" / "z" / "b.zip", {"vllm.log": V1})
    shutil.copy(other, _write(tmp / "bundle" / "o" / "vllm.log", []))
    return [str(tmp / "bundle")], "bundle/z/b.zip!vllm.log", "bundle/o/vllm.log"


def _flat(text: str) -> str:
    return "".join(text.split())


KINDS = ["zip", "tar.gz", "folder-with-zip"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("fmt", [[], ["-f", "json"]], ids=["default", "json"])
def test_each_incident_cites_the_archive_s_name(tmp_path, kind, fmt):
    paths, v1, v0 = _inputs(kind, tmp_path)
    p = run_cli("analyze", *paths, "--tz", "UTC", *fmt)
    assert p.returncode == 0, p.stderr
    said = _flat(p.stderr)  # long paths fold anywhere
    assert said.startswith(_flat("Not one incident: 2 logs")), p.stderr
    # the V1 log's own line: its fix cites the line of the archive's log, as the archive alone does
    assert _flat(f"{v1}: count not visible") in said
    assert _flat(f"change: --max-num-seqs 128 (seen {v1}:2) -> 34") in said, p.stderr
    assert _flat(f"{v0}: at least 1 preemption at 10:00:35") in said
    assert TEMP not in p.stdout + p.stderr
    rows = json.loads(p.stdout)["events"] if fmt else [json.loads(x) for x in p.stdout.splitlines()]
    assert [(r["event_id"], r["source"]) for r in rows] == [(f"{v0}:2", v0)]


@pytest.mark.parametrize("kind", KINDS)
def test_each_unit_reads_its_files_as_the_whole_analysis_found_them(tmp_path, kind):
    paths, v1, v0 = _inputs(kind, tmp_path)
    with Workspace() as ws:
        whole = analyze(paths, OPTS, workspace=ws)
        units = split_by_incident(paths, whole)
        assert len(units) == 2
        shown = {f.display: f for f in whole.bundle.files}
        for u in units:
            own = analyze(u.paths, u.options(OPTS), workspace=ws)
            names = [f.display for f in own.bundle.files]
            assert names and set(names) <= {v1, v0}
            for f in own.bundle.files:  # read as found: of a folder or archive, or named on the command line
                assert f.in_bundle == shown[f.display].in_bundle
            # the user's files (the archive, not its unpacked copy) are never written
            assert all(TEMP not in str(p) for p in own.bundle.originals)
            assert set(own.bundle.originals) <= set(whole.bundle.originals)
            cited = {c.split(":")[0] for c in own.events.get_column("event_id").to_list()}
            assert cited <= {v1, v0}


def test_each_of_one_archive_of_two_servers_cites_its_members(tmp_path):
    """``--each`` on one archive holding two servers' logs: split by incident, each unit's rows (ndjson and
    json) cite the archive's members; ``explain`` of the event (its own incident, analysed alone) too."""
    two = _zip(tmp_path / "two.zip", {"a.log": V1, "o.log": V0})
    p = run_cli("analyze", str(two), "--each", "--tz", "UTC", "-f", "ndjson")
    assert p.returncode == 0, p.stderr
    rows = [json.loads(x) for x in p.stdout.splitlines()]
    want = (f"{two}!o.log", f"{two}!o.log:2", f"{two}!o.log")
    assert [(r["server"], r["event_id"], r["source"]) for r in rows] == [want]
    assert _flat(f"(seen {two}!a.log:2) -> 34") in _flat(p.stderr), p.stderr
    assert TEMP not in p.stdout + p.stderr
    p = run_cli("analyze", str(two), "--each", "--tz", "UTC", "-f", "json", "-q")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert [e["event_id"] for e in doc["events"]] == [f"{two}!o.log:2"]
    assert TEMP not in p.stdout
    with Workspace() as ws:
        results = run_each([str(two)], OPTS, ws)
    assert sorted(f.display for _, a in results for f in a.bundle.files) == [f"{two}!a.log", f"{two}!o.log"]
    p = run_cli("explain", f"{two}!o.log:2", str(two), "--tz", "UTC", "-f", "json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["event"]["event_id"] == f"{two}!o.log:2" and doc["event"]["source"] == f"{two}!o.log"
    assert TEMP not in p.stdout


def test_explain_never_writes_into_an_archive_of_the_bundle(tmp_path):
    """``explain`` of an event of one incident of a folder (analysed alone, without the folder's other
    files) refuses ``-o`` naming another file of the folder, as it refuses it for a bundle of one."""
    paths, _, v0 = _inputs("folder-with-zip", tmp_path)
    z = tmp_path / "bundle" / "z" / "b.zip"
    before = z.read_bytes()
    p = run_cli("explain", f"{v0}:2", *paths, "--tz", "UTC", "-f", "json", "-o", str(z))
    assert p.returncode == 2 and "is one of the inputs" in p.stderr, p.stderr
    assert z.read_bytes() == before


def test_each_never_writes_into_a_file_of_the_folder(tmp_path):
    """``--each`` on one folder of two incidents (split by incident: each unit analysed without the
    folder's other files) refuses ``-o`` naming the archive it holds, or a note beside the logs that no
    unit reads, as one run refuses them."""
    folder = tmp_path / "flat"
    z = _zip(folder / "b.zip", {"vllm.log": V1})
    _write(folder / "other.log", V0)
    note = _write(folder / "notes.txt", ["what happened, as the on-call engineer saw it"])
    for target in (z, note):
        before = target.read_bytes()
        p = run_cli("analyze", str(folder), "--each", "--tz", "UTC", "-q", "-f", "json", "-o", str(target))
        assert p.returncode == 2 and "is one of the inputs" in p.stderr, p.stderr
        assert target.read_bytes() == before
