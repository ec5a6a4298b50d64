"""A file named on the command line is read for what it holds (issue 38, item 4).

A GitHub issue saved as Markdown, its vLLM (or SGLang) log in a fenced code block, is read as the
log it is: only the lines inside the code fences (``` or ~~~, any info string) are records, at the
file's own line numbers, and a note says which lines were read. A pasted reply whose log is in
blockquotes is read the same way. Documents found while walking a folder or an archive stay listed
and unread. Every bundle here is hand-written, in several vLLM header families (0.4-0.7, 0.8+,
process prefixes, kubectl RFC 3339, JSON lines) and for SGLang.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from preemptlog import AnalyzeOptions, analyze
from preemptlog.inputs import reflow

from ..conftest import FIXTURES

_spec = importlib.util.spec_from_file_location("hw_build", FIXTURES / "handwritten" / "build.py")
B = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(B)

V0_WARN = B.V0_WARN


def v0_stats(running: int, pending: int, kv: float) -> str:
    return (
        "Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 800.0 tokens/s, "
        f"Running: {running} reqs, Swapped: 0 reqs, Pending: {pending} reqs, GPU KV cache usage: {kv:.1f}%, "
        "CPU KV cache usage: 0.0%"
    )


# Three V0 preemption warnings between stats lines: 3 events (0.4-0.7 and 0.8+ print the same text).
ROWS = [
    B.log("15:38:14", "INFO", "metrics.py:334", v0_stats(48, 12, 99.1)),
    B.log("15:38:20", "WARNING", "scheduler.py:1089", V0_WARN.format(rid=12, mode="RECOMPUTE", n=1)),
    B.log("15:38:22", "WARNING", "scheduler.py:1089", V0_WARN.format(rid=15, mode="RECOMPUTE", n=2)),
    B.log("15:38:24", "INFO", "metrics.py:334", v0_stats(46, 14, 99.6)),
    B.log("15:38:30", "WARNING", "scheduler.py:1089", V0_WARN.format(rid=21, mode="RECOMPUTE", n=3)),
    B.log("15:38:34", "INFO", "metrics.py:334", v0_stats(45, 15, 99.8)),
]
# A preemption line quoted in the prose: not a record of the log.
PROSE_QUOTE = (
    "Sequence group 99 is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV "
    "cache space. total_num_cumulative_preemption=7"
)

HEAD = """# [Bug]: requests preempted on A100 with Llama-3-8B

### Your current environment

vLLM on one A100 40GB, `--gpu-memory-utilization 0.9`, the default scheduler settings for this model.

### Describe the bug

When I send many long requests, throughput collapses. Here is the server log:

"""
TAIL = f"""
I expected lines like the one below only rarely, but the server printed them all the time:

{PROSE_QUOTE}

Thanks for any hint about tuning this!
"""


def issue(fam: str, fence: str = "```", info: str = "text") -> tuple[str, int, int]:
    """The issue text, and the first and last line (1-based) of the log inside its fence."""
    log = [B.render(fam, r) for r in ROWS]
    first = HEAD.count("\n") + 2  # the fence opens on the line after HEAD
    text = HEAD + f"{fence}{info}\n" + "\n".join(log) + f"\n{fence}\n" + TAIL
    return text, first, first + len(log) - 1


def run(*paths: Path):
    return analyze([str(p) for p in paths], AnalyzeOptions(tz="UTC", year=B.YEAR))


@pytest.mark.parametrize(
    ("fam", "fence", "info"),
    [
        ("v04", "```", "text"),
        ("v08", "~~~", ""),
        ("apiserver", "```", "log"),
        ("kubectl", "````", "console"),
        ("json", "~~~", "json"),
    ],
)
def test_named_markdown_is_read_for_the_log_in_its_fences(tmp_path, fam, fence, info):
    text, first, last = issue(fam, fence, info)
    p = tmp_path / "issue-5123.md"
    p.write_text(text)
    a = run(p)
    assert [f.kind for f in a.bundle.files] == ["vllm-log"]
    ev = a.events.sort("line")
    # the three warnings inside the fence, at the .md's own line numbers; the quoted one in the prose is not one
    assert ev.get_column("line").to_list() == [first + 1, first + 2, first + 4]
    assert set(ev.get_column("source")) == {"issue-5123.md"} or all(
        s.endswith("issue-5123.md") for s in ev.get_column("source")
    )
    note = next(n for n in a.notes if n.startswith("read the vLLM log inside the code fences of"))
    assert f"(lines {first}-{last})" in note
    assert a.summary()["headline"].startswith("at least 3 preemptions")


def test_several_fences_one_log_one_code_snippet(tmp_path):
    snippet = (
        f"~~~python\nfrom vllm import LLM\nllm = LLM('m', gpu_memory_utilization=0.5)\nprint('{PROSE_QUOTE}')\n~~~\n\n"
    )
    text, first, last = issue("v08")
    head_lines = HEAD.count("\n")
    text = HEAD + snippet + text[len(HEAD) :]
    shift = snippet.count("\n")
    p = tmp_path / "issue.md"
    p.write_text(text)
    plan = reflow.plan(p)
    assert plan.only == "fences" and plan.spans == ((first + shift, last + shift),)  # only the block holding the log
    a = run(p)
    assert a.events.height == 3
    assert sorted(a.events.get_column("line").to_list()) == [first + shift + 1, first + shift + 2, first + shift + 4]
    assert head_lines < first


def test_markdown_of_an_sglang_log(tmp_path):
    log = (
        "[2026-01-05 10:00:01 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 2, "
        "#new_token_ratio: 0.0980 -> 0.3000\n"
        "[2026-01-05 10:00:01 TP1] KV cache pool is full. Retract requests. #retracted_reqs: 2, "
        "#new_token_ratio: 0.0980 -> 0.3000\n"
    )
    p = tmp_path / "sglang-issue.md"
    p.write_text(f"SGLang retracts under load:\n\n```\n{log}```\n\nIs `KV cache pool is full` normal?\n")
    a = run(p)
    assert [f.kind for f in a.bundle.files] == ["sglang-log"]
    assert a.events.height == 2
    assert any(n.startswith("read the SGLang log inside the code fences of") and "(lines 4-5)" in n for n in a.notes)


def test_pasted_txt_with_blockquotes(tmp_path):
    log = "\n".join("> " + B.render("v04", r) for r in ROWS[:4])
    text = (
        "Hi team, we are seeing our server slow down badly whenever traffic goes up in the afternoon.\n"
        "Here is what the log said just before the latency spike happened on our production cluster:\n\n"
        f"{log}\n\nIs it expected that the scheduler preempts so often? We thought the memory was fine.\n"
        f"{PROSE_QUOTE}\nThanks a lot for any hint you can give us about tuning this.\n"
    )
    p = tmp_path / "paste.txt"
    p.write_text(text)
    a = run(p)
    assert a.events.height == 2 and sorted(a.events.get_column("line").to_list()) == [5, 6]
    assert any(n.startswith("read the vLLM log inside the blockquotes of") and "(lines 4-7)" in n for n in a.notes)


def test_a_log_with_a_stray_fence_is_read_whole(tmp_path):
    log = [B.render("v08", r) for r in ROWS]
    p = tmp_path / "vllm.log"
    p.write_text("\n".join(log[:2] + ["```", "model output", "```"] + log[2:]) + "\n")
    assert not reflow.plan(p).only
    a = run(p)
    assert a.events.height == 3
    assert not any("inside the code fences" in n for n in a.notes)


def test_documents_in_a_folder_or_archive_stay_listed_and_unread(tmp_path):
    text, _, _ = issue("v08")
    d = tmp_path / "bundle"
    d.mkdir()
    (d / "issue.md").write_text(text)
    (d / "vllm.log").write_text("\n".join(B.render("v08", r) for r in ROWS[:3]) + "\n")
    a = run(d)
    kinds = {f.display: f.kind for f in a.bundle.files}
    assert kinds == {"bundle/issue.md": "document", "bundle/vllm.log": "vllm-log"}
    assert a.events.height == 2  # the log's two warnings; the issue's copies are not read
    tgz = tmp_path / "bundle.tar.gz"
    with tarfile.open(tgz, "w:gz") as tf:
        tf.add(d, arcname="bundle")
    a = run(tgz)
    assert sorted(f.kind for f in a.bundle.files) == ["document", "vllm-log"]
    assert a.events.height == 2


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "preemptlog", *args], capture_output=True, text=True, cwd=cwd, timeout=300
    )


def test_cli_reads_a_named_issue_and_says_so(tmp_path):
    text, first, last = issue("apiserver")
    (tmp_path / "issue-5123.md").write_text(text)
    r = _cli("analyze", "issue-5123.md", "--tz", "UTC", "--year", str(B.YEAR), "-v", "-f", "ndjson", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.splitlines()) == 3
    assert "read the vLLM log inside the code fences of issue-5123.md" in " ".join(r.stderr.split())
    assert f"(lines {first}-{last})" in " ".join(r.stderr.split())


def test_cli_named_document_without_a_log_is_a_document(tmp_path):
    (tmp_path / "notes.md").write_text(
        "# Incident notes\n\nThe server slowed down at noon. We restarted it and the latency went back to normal.\n"
        "Nobody knows yet why the queue grew so quickly during the lunch peak of requests.\n"
    )
    r = _cli("analyze", "notes.md", cwd=tmp_path)
    assert r.returncode == 3
    assert "notes.md (document)" in r.stderr and "Traceback" not in r.stderr


def test_named_markdown_holding_a_bare_log_is_read_whole_and_said(tmp_path):
    p = tmp_path / "log.md"
    p.write_text("\n".join(B.render("v04", r) for r in ROWS) + "\n")
    a = run(p)
    assert a.events.height == 3
    assert any(
        n.endswith("log.md as the vLLM log it holds (a document by its name, a log by its content)") for n in a.notes
    )
