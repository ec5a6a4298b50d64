"""The README and docs/ stay in step with the code.

The README's set-up commands (and .ci/run), its demo lines, its exit-code table and engine-facts
table; the generated blocks that moved to docs/ with their topic (the accuracy table of
docs/simulate.md, the engine-facts table of docs/engine-facts.md); the README's length; every
relative link of README.md, CONTRIBUTING.md and docs/*.md; docs/index.md lists every page.
docs/cli.md is tests/house/test_cli_docs.py's.
"""

from __future__ import annotations

import re
from pathlib import Path

from preemptlog.errors import documented

from ..conftest import ROOT

README = (ROOT / "README.md").read_text()
DOCS = ROOT / "docs"
README_MAX_LINES = 220  # the README is the front page; the manual is docs/ (issue 34 item 5)


def _setup_commands() -> list[str]:
    section = README.split("## Set up", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.*?)\n```", section, re.S)


def test_exactly_two_setup_commands():
    cmds = _setup_commands()
    assert len(cmds) == 2, cmds
    assert all("\n" not in c for c in cmds)
    assert "preemptlog analyze fixtures/demo" in cmds[0]
    assert "pytest" in cmds[1]


def test_the_test_command_builds_the_compiled_pass_where_the_tests_import_it():
    """The tests import the package from the checkout: only an editable install puts the compiled
    log pass there (a plain `pip install .` builds it into site-packages, and its tests would skip)."""
    assert re.search(r"pip install -e '\.\[dev\]'", _setup_commands()[1])


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
    """docs/simulate.md carries bench/accuracy's per-gate table, as docs/accuracy.md does."""
    page = (DOCS / "simulate.md").read_text()
    block = page.split("<!-- accuracy:", 1)[1].split("<!-- /accuracy -->", 1)[0]
    page_rows = [ln for ln in block.splitlines() if ln.startswith("| G")]
    docs = (DOCS / "accuracy.md").read_text()
    doc_rows = [ln for ln in docs.splitlines() if ln.startswith("| G") and ln.count("|") == 5]
    assert page_rows and page_rows == doc_rows, "the accuracy tables disagree: run bench/accuracy"


def _engine_facts():
    try:
        from preemptlog.engines import facts
    except ImportError:  # before the package restructure
        from preemptlog import engine_facts as facts
    return facts


def test_engine_facts_tables_are_generated_from_the_facts():
    """The README keeps the table (``python -m`` of the facts module writes it there) and
    docs/engine-facts.md has it with the rest of its topic (``write_docs('docs/engine-facts.md')``)."""
    F = _engine_facts()
    table = F.markdown_table()
    assert table in README, f"README's engine-facts table is stale: python -m {F.__name__}"
    page = (DOCS / "engine-facts.md").read_text()
    assert table in page, (
        f"docs/engine-facts.md's table is stale: python -c \"from {F.__name__} import write_docs; "
        "write_docs('docs/engine-facts.md')\""
    )


def test_readme_is_the_front_page_not_the_manual():
    n = len(README.splitlines())
    assert n <= README_MAX_LINES, f"README.md has {n} lines (at most {README_MAX_LINES}): move topics to docs/"


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


# ------------------------------------------------------------------ links and the docs map
def _markdown_files() -> list[Path]:
    return [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted(DOCS.glob("*.md"))]


def _prose(text: str) -> str:
    """The text without fenced code blocks and inline code (their brackets are not links)."""
    text = re.sub(r"^(`{3,}|~{3,}).*?^\1[ \t]*$", "", text, flags=re.M | re.S)
    return re.sub(r"(`+)[^`]*?\1", "", text)


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors of a Markdown file (lower case, punctuation dropped, spaces to
    hyphens, -1, -2... for repeats)."""
    text = re.sub(r"^(`{3,}|~{3,}).*?^\1[ \t]*$", "", path.read_text(), flags=re.M | re.S)
    seen: dict[str, int] = {}
    out = set()
    for title in re.findall(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", text, re.M):
        title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title)
        slug = re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def _links(path: Path) -> list[str]:
    return re.findall(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", _prose(path.read_text()))


def test_every_relative_link_points_to_an_existing_file():
    broken = []
    for md in _markdown_files():
        for target in _links(md):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto:, ...
                continue
            file, _, anchor = target.partition("#")
            dest = (md.parent / file).resolve() if file else md
            where = f"{md.relative_to(ROOT)}: ({target})"
            if not dest.exists():
                broken.append(f"{where}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{where}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_the_link_checker_sees_links():
    links = _links(ROOT / "README.md")
    assert "docs/index.md" in links and "#why-vllms-own-code" in links
    assert "why-vllms-own-code" in _anchors(ROOT / "README.md")


def test_docs_index_lists_every_page():
    index = (DOCS / "index.md").read_text()
    listed = set(_links(DOCS / "index.md"))
    missing = [p.name for p in sorted(DOCS.glob("*.md")) if p.name != "index.md" and p.name not in listed]
    assert not missing, f"docs/index.md has no line for {missing}"
    assert "../README.md" in listed and index.startswith("# ")
