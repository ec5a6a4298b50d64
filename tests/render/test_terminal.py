"""What a person sees (issue 26): on a terminal the answer first (the headline, which says how
many and why, and the top change), then the table (paged only when taller than the screen, the
headline at the top of the paged text), then the rest; a short summary by default (``-v`` the
full one); every line within the terminal's width (80 in a pipe).

Each run is a real ``preemptlog`` process on a pseudo-terminal of a given size (the window size
set with TIOCSWINSZ and COLUMNS/LINES), or on pipes. The pager is ``head -n LINES-1``: what
``less`` shows on its first page, after which the rest of the output follows as it would after
``q``; the first screen is then the first LINES lines the terminal received.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ..campaigns.test_stock_bundles import STOCK, reading, write
from ..conftest import FIXTURES, ROOT
from ..support.ptyrun import run_on_pty

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
SIZES = [(80, 40), (120, 45)]
MAX_SUMMARY = 12


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("PREEMPTLOG_")}
    e.pop("LC_ALL", None)
    e.pop("NO_COLOR", None)
    e |= {"LANG": "C.UTF-8", "PREEMPTLOG_PROGRESS_AFTER": "1000"}
    return e | (extra or {})


def on_terminal(args: list[str], cols: int, rows: int, pager: str | None = None) -> tuple[list[str], int]:
    """``preemptlog ARGS`` on a cols x rows pseudo-terminal: (the lines it wrote, ANSI styles taken
    out, exit code)."""
    env = _env({"TERM": "xterm", "PAGER": pager or f"head -n {rows - 1}"})
    raw, code = run_on_pty(args, cols, rows, env)
    return ANSI.sub("", raw).split("\n"), code


def in_pipes(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "preemptlog", *args], capture_output=True, text=True, env=_env(), cwd=ROOT
    )


def words(lines: list[str]) -> str:
    return " ".join(" ".join(lines).split())


def summary_of(path: str, *extra: str) -> dict:
    p = in_pipes(["analyze", path, "--tz", "UTC", *extra, "-f", "json", "-q"])
    assert p.returncode in (0, 5), p.stderr
    return json.loads(p.stdout)["summary"]


@pytest.fixture(scope="module")
def stock(tmp_path_factory) -> dict[str, Path]:
    """Stock vLLM V1 bundles: the log alone (the count not visible) and the log with one /metrics reading."""
    tmp = tmp_path_factory.mktemp("stock")
    return {
        "log": write(tmp / "log", "v08", STOCK),
        "reading": write(tmp / "reading", "kubectl", STOCK, **{"metrics.prom": reading("10:00:45", 13)}),
    }


def _bundles(stock: dict[str, Path]) -> dict[str, list[str]]:
    return {
        "demo": [str(FIXTURES / "demo")],
        "stock-log": [str(stock["log"]), "--year", "2025"],
        "stock-reading": [str(stock["reading"]), "--year", "2025"],
        "guide-demo": [str(FIXTURES / "guide-demo")],  # a table taller than the screen: paged
    }


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("name", ["demo", "stock-log", "stock-reading", "guide-demo"])
def test_first_screen_shows_the_answer_and_no_line_is_wider_than_the_terminal(stock, name, size):
    cols, rows = size
    args = _bundles(stock)[name]
    s = summary_of(*args)
    lines, code = on_terminal(["analyze", *args, "--tz", "UTC"], cols, rows)
    assert code in (0, 5), lines
    assert all(len(ln) <= cols for ln in lines), max(lines, key=len)
    first = lines[:rows]
    assert words(first).startswith(" ".join(s["headline"].split()))  # how many and why (the cause), first
    if s["fixes"]:
        assert "Top fix: " + s["fixes"][0]["option"] in words(first)
    else:  # nothing to change: what to add to know more is on the first screen
        assert "count: not visible" in words(first) and "/metrics" in words(first)
    # the table follows the answer, and the rest follows the table
    header = next(i for i, ln in enumerate(lines) if re.match(r"\d+ row\(s\), ", ln))
    assert words(lines[:header]).startswith(" ".join(s["headline"].split()))
    rest = [i for i, ln in enumerate(lines) if ln.lstrip().startswith("-v adds:")]
    assert rest or len(lines) >= rows - 1  # paged (the table, the rest and the timeline together): past the first page
    assert not rest or rest[0] > header


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("name", ["demo", "stock-log", "stock-reading", "guide-demo"])
def test_summary_fits_a_screen_without_v_and_v_gives_the_notes(stock, name, size):
    cols, rows = size
    args = _bundles(stock)[name]
    lines, code = on_terminal(["analyze", *args, "--tz", "UTC", "-f", "json", "-o", os.devnull], cols, rows)
    assert code in (0, 5)
    summary = [ln for ln in lines if ln.strip()]
    if any(ln.startswith("Timeline,") for ln in summary):
        summary = summary[: next(i for i, ln in enumerate(summary) if ln.startswith("Timeline,"))]
    assert len(summary) <= MAX_SUMMARY, "\n".join(summary)
    assert all(len(ln) <= cols for ln in lines)
    full, _ = on_terminal(["analyze", *args, "--tz", "UTC", "-f", "json", "-o", os.devnull, "-v"], cols, rows)
    assert len(full) > len(lines) and any("assumed " in ln for ln in full)
    assert all(len(ln) <= cols for ln in full)


@pytest.mark.parametrize("name", ["demo", "stock-log", "stock-reading", "guide-demo"])
def test_in_a_pipe_the_summary_is_wrapped_to_80_at_word_boundaries(stock, name):
    args = _bundles(stock)[name]
    p = in_pipes(["analyze", *args, "--tz", "UTC", "-f", "ndjson", "-v"])
    assert p.returncode in (0, 5), p.stderr
    lines = p.stderr.splitlines()
    assert lines and all(len(ln) <= 80 for ln in lines), max(lines, key=len)
    assert all(ln[:1] != " " or ln.startswith("  ") for ln in lines)  # a hanging indent
    brief = in_pipes(["analyze", *args, "--tz", "UTC", "-f", "ndjson"]).stderr.splitlines()
    assert len(brief) <= MAX_SUMMARY, brief
    # a cut never falls inside a word: every word of the one-line headline is whole in the wrapped lines
    s = summary_of(*args)
    assert words(lines).startswith(" ".join(s["headline"].split()))


def test_the_paged_text_starts_with_the_headline_and_no_pager_prints_it_all(tmp_path):
    seen = tmp_path / "paged.txt"
    pager = f"{sys.executable} -c \"import sys; open({str(seen)!r}, 'w').write(sys.stdin.read())\""
    demo = str(FIXTURES / "guide-demo")
    s = summary_of(demo)
    lines, code = on_terminal(["analyze", demo, "--tz", "UTC"], 80, 40, pager=pager)
    assert code == 0
    paged = ANSI.sub("", seen.read_text()).splitlines()
    assert words(paged[:5]).startswith(" ".join(s["headline"].split()))
    assert any(ln.startswith("Top fix: ") for ln in paged[:8]) and "vllm.log:140" in words(paged)
    assert "vllm.log:140" not in words(lines)  # the table went to the pager
    assert any(ln.lstrip().startswith("-v adds:") for ln in paged)  # the rest after it, paged with it
    seen.unlink()
    lines, code = on_terminal(["analyze", demo, "--tz", "UTC", "--no-pager"], 80, 40, pager=pager)
    assert code == 0 and not seen.exists()
    assert words(lines[:5]).startswith(" ".join(s["headline"].split())) and "vllm.log:140" in words(lines)


def test_a_filtered_headline_has_the_filtered_figures_only(stock):
    demo = str(FIXTURES / "guide-demo")
    p = in_pipes(["analyze", demo, "--tz", "UTC", "--gate", "G3", "-f", "ndjson"])
    assert p.returncode == 0, p.stderr
    text = words(p.stderr.splitlines())
    assert text.startswith("1 of 226 preemptions shown (--gate G3-queue-overflow)")  # shown of how many, first
    assert "per received request" not in text  # the rate divides by the whole bundle's requests
    assert "tokens recomputed" not in text  # the cost is the whole bundle's
    assert "filtered (--gate G3-queue-overflow): 1 of 226 event(s) shown" in text


def test_notes_of_one_kind_are_one_line_with_a_count():
    from preemptlog.render.human import collapse

    notes = [
        "assumed scrape time (a/metrics-1.prom): the file name (1) from 1 of 1 scrape(s)",
        "a different note",
        "assumed scrape time (a/metrics-2.prom): the file name (2) from 1 of 1 scrape(s)",
        "assumed scrape time (b/metrics-30.prom): the file name (30) from 1 of 1 scrape(s)",
    ]
    assert collapse(notes) == [(notes[0], 3), ("a different note", 1)]
    assert collapse([]) == []


def test_wrap_keeps_words_and_gate_names_whole():
    from preemptlog.render.human import wrap

    text = "G1-kv-space " * 20 + "a/very/long/path/" * 10
    lines = wrap(text, 40, indent=2)
    assert all(len(ln) <= 40 for ln in lines)
    assert all(ln.startswith("    ") for ln in lines[1:]) and lines[0].startswith("  G1")
    assert sum(ln.count("G1-kv-space") for ln in lines) == 20


# ------------------------------------------------------------------ ids, verdicts and the legend at any width
SCRAPES = FIXTURES / "prometheus" / "stock-v1"  # one scrape file per 15 s: ids that differ in the middle


@pytest.mark.parametrize("width", [60, 80, 100, 140])
@pytest.mark.parametrize("wide", [False, True])
def test_table_ids_are_distinct_and_the_verdict_is_never_cut(width, wide):
    from preemptlog import AnalyzeOptions, analyze
    from preemptlog.render.table import render_table

    for bundle in (SCRAPES, FIXTURES / "guide-demo"):
        a = analyze([str(bundle)], AnalyzeOptions(tz="UTC"))
        lines = render_table(a, width=width, wide=wide).splitlines()
        assert all(len(ln) <= width for ln in lines), max(lines, key=len)
        rows = [ln.split() for ln in lines if re.match(r"\d\d:\d\d:\d\d", ln)]
        ids = [r[1] for r in rows]
        assert len(set(ids)) == len(ids) == len(rows) > 0  # the id explain takes names one row
        verdicts = {w for r in rows for w in r if w.startswith("G") and w[1].isdigit()}
        assert verdicts and not any("…" in v or ".." in v for v in verdicts)  # spelled whole (short or full)
        assert len({v.split("/")[0].split("-")[0] for v in verdicts}) == len({v.split("/")[0] for v in verdicts})


def test_an_id_cut_to_several_events_is_an_error_listing_them():
    cut = "me…5.prom:35~i*"  # the folded rows of metrics-...475, ...505 and ...535
    p = in_pipes(["explain", cut, str(SCRAPES), "--tz", "UTC", "-f", "json"])
    assert p.returncode == 2, p.stderr  # USAGE: give one of them
    err = p.stderr.strip().splitlines()
    assert len(err) <= 2 and "ambiguous" in err[0] and "matches 3 events" in err[0]
    for name in ("metrics-1773482475.prom:35~i*", "metrics-1773482505.prom:35~i*", "metrics-1773482535.prom:35~i*"):
        assert name in p.stderr
    one = in_pipes(["explain", "me…75.prom:35~i*", str(SCRAPES), "--tz", "UTC", "-f", "json"])
    assert one.returncode == 0, one.stderr
    assert json.loads(one.stdout)["event"]["source"].endswith("metrics-1773482475.prom")


def test_timeline_has_one_line_per_lane_and_fits_the_width():
    lines, _ = on_terminal(
        ["analyze", str(FIXTURES / "guide-demo"), "--tz", "UTC", "-f", "json", "-o", os.devnull], 80, 40
    )
    at = next(i for i, ln in enumerate(lines) if ln.startswith("Timeline,"))
    assert all(len(ln) <= 80 for ln in lines[at:])
    lanes = {ln.split()[0]: ln for ln in lines[at + 1 :] if ln.strip() and not ln.startswith(" ")}
    assert {"G1-kv-space", "G2-batch", "G3-queue", "KV", "waiting"} <= set(lanes)
    assert "G4-prefix" in lanes and "21, up to" in lanes["G4-prefix"]  # one line, its total at its end


# ------------------------------------------------------------------ commands: -q, explain BUNDLE, errors in our words
LEAVES = [
    ["analyze"],
    ["explain"],
    ["report"],
    ["whatif"],
    ["capture"],
    ["simulate"],
    ["rules"],
    ["eval"],
    ["fleet", "run"],
    ["fleet", "report"],
    ["export", "grafana"],
    ["export", "openmetrics"],
    ["watch"],  # its --quiet is the storm's quiet period (issue 35), not the output switch
]


def test_every_command_takes_q():
    from preemptlog.commands import COMMANDS

    assert {c[0] for c in LEAVES} == set(COMMANDS)
    for cmd in LEAVES:
        p = in_pipes([*cmd, "--help"])
        assert p.returncode == 0 and "-q" in p.stdout and "--quiet" in p.stdout, cmd
    rules = in_pipes(["rules", "--check", "-q", "-f", "json"])
    assert rules.returncode == 0 and rules.stderr == ""  # the passed count is summary; -q silences it


def test_explain_bundle_without_an_id_lists_its_top_events():
    p = in_pipes(["explain", str(SCRAPES), "--tz", "UTC", "-q"])
    assert p.returncode == 2 and p.stdout == ""
    err = p.stderr.splitlines()
    assert err[0].startswith("preemptlog: error: no EVENT_ID given: the top 4 of 4 event row(s)")
    assert "give the bundle" not in p.stderr  # it was given
    assert err[-1] == f"explain one with: preemptlog explain ID {SCRAPES}"
    # the error and the hint apart, each within 80 columns but for the path (137 as one line)
    assert max(len(ln) - len(str(SCRAPES)) for ln in err[:1] + err[-1:]) <= 80
    ids = [ln.split()[0] for ln in err[1:-1]]
    assert ids[0] == "stock-v1/metrics-1773482505.prom:35~i*"  # the row holding most events first
    ok = in_pipes(["explain", ids[0], str(SCRAPES), "--tz", "UTC", "-f", "json", "-q"])
    assert ok.returncode == 0 and json.loads(ok.stdout)["event"]["source"].endswith("1773482505.prom")


def test_a_missing_log_names_its_compressed_or_rotated_siblings(tmp_path):
    for name in ("x.log.1", "x.log.2.gz", "y.log", "unrelated.log"):
        (tmp_path / name).write_text("")
    p = in_pipes(["analyze", str(tmp_path / "x.log")])
    assert p.returncode == 3 and len(p.stderr.strip().splitlines()) == 1
    assert f"did you mean {tmp_path / 'x.log.1'}, {tmp_path / 'x.log.2.gz'}?" in p.stderr
    gz = in_pipes(["analyze", str(tmp_path / "y.log.gz")])
    assert f"did you mean {tmp_path / 'y.log'}?" in gz.stderr
    none = in_pipes(["analyze", str(tmp_path / "z.log")])
    assert none.returncode == 3 and "did you mean" not in none.stderr


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["analyze", "x.log", "-f", "xml"], "--format: 'xml' is not one of"),
        (["analyze", "x.log", "--before", "abc"], "--before: not a valid number"),
        (["explain", "x:1", "x.log", "--limit", "-1"], "--limit: should be greater than or equal to 0"),
    ],
)
def test_command_line_errors_are_one_line_in_the_tool_words(args, said):
    p = in_pipes(args)
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and said in p.stderr, p.stderr
    assert "Value error" not in p.stderr and "Invalid value for" not in p.stderr and "Input should" not in p.stderr


# ------------------------------------------------------------------ words
def test_guide_only_factors_only_on_the_guides_evidence():
    from preemptlog import AnalyzeOptions, analyze

    def factors(path: Path) -> set[str]:
        v = analyze([str(path)], AnalyzeOptions(tz="UTC")).verdicts
        return {f["factor"] for fs in v.get_column("contributing_factors").to_list() for f in fs or []}

    assert "effective-budget" not in factors(FIXTURES / "demo")  # stock vLLM: the budget is what it says
    assert "effective-budget" in factors(FIXTURES / "guide-demo")  # the guide's patched scheduler


def test_explain_says_missing_evidence_in_words_and_never_at_at():
    p = in_pipes(["explain", "vllm.log:9799", str(FIXTURES / "guide-demo"), "--tz", "UTC", "-f", "table"])
    assert p.returncode == 0, p.stderr
    assert " at at " not in p.stdout and "fired G1-kv-space" in p.stdout
    for ln in p.stdout.splitlines():
        if "not evaluable:" in ln:
            assert not re.search(r"\b[a-z]+_[a-z_]+\b", ln.split("(needs")[0]), ln  # no column names as prose
    from preemptlog.joiner.schema import evidence_words

    assert evidence_words(["bt_preempt_waiting", "sched_pending"]) == (
        "waiting requests at the decision; that step's pending requests"
    )


def test_the_guide_is_introduced_once_where_its_words_are_used():
    guide = in_pipes(["analyze", str(FIXTURES / "guide-demo"), "--tz", "UTC", "-f", "ndjson", "-v"]).stderr
    assert words(guide.splitlines()).count("the guide: the field guide") == 1
    stock = in_pipes(["analyze", str(FIXTURES / "demo"), "--tz", "UTC", "-f", "ndjson", "-v"]).stderr
    assert "field guide" not in stock or "the guide: the field guide" in words(stock.splitlines())


def test_gates_spelled_one_way_per_width_and_gate_takes_every_spelling():
    p = in_pipes(["analyze", str(FIXTURES / "demo"), "--tz", "UTC", "-f", "ndjson"])
    assert "G1-kv-space" in p.stderr  # the gate is named in a pipe (the headline says vLLM's words)
    for spelling in ("G1", "G1-kv", "G1-kv-space", "G1 KV space", "g1-KV"):
        r = in_pipes(["analyze", str(FIXTURES / "guide-demo"), "--tz", "UTC", "-f", "csv", "-q", "--gate", spelling])
        assert r.returncode == 0 and r.stdout.count("\n") == 161, spelling  # header + 160 G1 events


def test_gate_names_complete_in_the_shell():
    from preemptlog.commands.common import GATE_NAMES
    from preemptlog.render.view import GATES

    assert tuple(GATES) == GATE_NAMES  # the CLI's copy (no polars at --help) is the gates' list
    env = _env(
        {"_PREEMPTLOG_COMPLETE": "complete_bash", "COMP_WORDS": "preemptlog analyze x --gate G", "COMP_CWORD": "4"}
    )
    script = str(Path(sys.executable).parent / "preemptlog")  # completion answers to the program's own name
    p = subprocess.run([script], capture_output=True, text=True, env=env, cwd=ROOT)
    assert p.stdout.split() == list(GATE_NAMES[:4])
    env["COMP_WORDS"] = "preemptlog explain --gate u"
    env["COMP_CWORD"] = "3"
    p = subprocess.run([script], capture_output=True, text=True, env=env, cwd=ROOT)
    assert p.stdout.split() == ["undetermined"]


def test_file_kind_forces_a_file_and_kind_filters_events():
    demo = str(FIXTURES / "demo")
    new = in_pipes(["analyze", demo, "--tz", "UTC", "--file-kind", "demo/NOTES.md=vllm-log", "-f", "csv", "-q"])
    old = in_pipes(["analyze", demo, "--tz", "UTC", "--kind", "demo/NOTES.md=vllm-log", "-f", "csv", "-q"])
    assert new.returncode == old.returncode and new.stdout == old.stdout  # the old spelling still works ...
    assert new.stderr == "" and old.stderr.strip() == (  # ... with a one-line note
        "preemptlog: note: --kind FILE=KIND is --file-kind FILE=KIND now (the old spelling works)"
    )
    bad = in_pipes(["analyze", demo, "--file-kind", "interval"])
    assert bad.returncode == 2 and "--file-kind expects FILE=KIND" in bad.stderr


def test_threshold_is_the_rules_option_and_set_still_works_with_a_note():
    new = in_pipes(["rules", "--threshold", "kv_ceiling=91", "-f", "json"])
    old = in_pipes(["rules", "--set", "kv_ceiling=91", "-f", "json"])
    assert new.returncode == old.returncode == 0 and new.stdout == old.stdout
    kv = next(t for t in json.loads(new.stdout)["thresholds"] if t["name"] == "kv_ceiling")
    assert kv["value"] == 91.0
    assert new.stderr == "" and old.stderr.strip() == (
        "preemptlog: note: a rules threshold is --threshold NAME=VALUE now (--set still works)"
    )
    a = in_pipes(["analyze", str(FIXTURES / "demo"), "--tz", "UTC", "--threshold", "kv_ceiling=90", "-f", "csv", "-q"])
    assert a.returncode == 0 and a.stderr == ""
