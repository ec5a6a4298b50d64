"""The README's set-up commands, its exit-code table, and .ci/run stay in step with the code."""

from __future__ import annotations

import re

from preemptlog.errors import documented

from .conftest import ROOT

README = (ROOT / "README.md").read_text()


def _setup_commands() -> list[str]:
    section = README.split("## Set up", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.*?)\n```", section, re.S)


def test_exactly_two_setup_commands():
    cmds = _setup_commands()
    assert len(cmds) == 2, cmds
    assert all("\n" not in c for c in cmds)
    assert "preemptlog analyze fixtures/demo" in cmds[0]
    assert "pytest" in cmds[1]


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    lines = [ln for ln in ci.splitlines() if ln.strip() and not ln.startswith("#")]
    assert _setup_commands()[1] in lines


def test_demo_bundle_exists():
    demo = ROOT / "fixtures" / "demo"
    assert demo.is_dir() and any(demo.iterdir())


def test_exit_code_table_matches_the_enum():
    block = README.split("<!-- exit-codes", 1)[1].split("<!-- /exit-codes -->", 1)[0]
    rows = re.findall(r"^\| (\d+) \| `(\w+)` \| (.*) \|$", block, re.M)
    expected = [(str(c), n, d.replace("|", "\\|")) for c, n, d in documented()]
    assert rows == expected


def test_accuracy_table_matches_docs():
    block = README.split("<!-- accuracy:", 1)[1].split("<!-- /accuracy -->", 1)[0]
    readme_rows = [ln for ln in block.splitlines() if ln.startswith("| G")]
    docs = (ROOT / "docs" / "accuracy.md").read_text()
    doc_rows = [ln for ln in docs.splitlines() if ln.startswith("| G") and ln.count("|") == 5]
    assert readme_rows and readme_rows == doc_rows


def test_every_command_is_documented():
    from preemptlog.commands import COMMANDS

    for name in COMMANDS:
        assert f"preemptlog {name}" in README, name


def test_the_demo_lines_in_the_readme_are_what_analyze_prints():
    import subprocess
    import sys

    block = README.split("taken after the incident:\n\n```text\n", 1)[1].split("```", 1)[0]
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "preemptlog",
            "analyze",
            "fixtures/demo",
            "--tz",
            "UTC",
            "-f",
            "json",
            "-o",
            "/dev/null",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert p.returncode == 0, p.stderr
    shown = block.strip().splitlines()
    assert p.stderr.splitlines()[: len(shown)] == shown
