"""docs/cli.md is every command's --help (ci/gen_cli_docs.py), and every command has its line in the README."""

from __future__ import annotations

import difflib
import importlib.util
import re
from types import ModuleType

import pytest

from ..conftest import ROOT

REGENERATE = "run python ci/gen_cli_docs.py"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_cli_docs", ROOT / "ci" / "gen_cli_docs.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


GEN = _generator()


@pytest.fixture(scope="module")
def tree() -> list[tuple[tuple[str, ...], str]]:
    """Every command path with its --help, as the generator sees them (one run of each)."""
    return GEN.command_tree()


def _top_level_commands(tree: list[tuple[tuple[str, ...], str]]) -> list[str]:
    names = GEN.subcommands(dict(tree)[()])
    assert "analyze" in names, names
    return names


def test_docs_cli_md_is_up_to_date(tree):
    want = GEN.render(tree=tree)
    have = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    if have != want:
        diff = difflib.unified_diff(have.splitlines(), want.splitlines(), "docs/cli.md", "generated", lineterm="", n=1)
        shown = "\n".join(list(diff)[:60])
        pytest.fail(f"docs/cli.md is stale: {REGENERATE}\n{shown}")


def test_generation_is_deterministic(tree):
    assert GEN.render(tree=GEN.command_tree()) == GEN.render(tree=tree), (
        "two runs of ci/gen_cli_docs.py gave different text"
    )


def test_every_command_and_subcommand_has_a_section_in_docs_cli_md(tree):
    doc = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    sections = re.findall(r"^## `(preemptlog[^`]*)`$", doc, re.M)
    want = [" ".join(("preemptlog", *path)) for path, _ in tree]
    missing = [c for c in want if c not in sections]
    assert not missing, f"no section in docs/cli.md for {missing}: {REGENERATE}"
    extra = [c for c in sections if c not in want]
    assert not extra, f"docs/cli.md documents commands the CLI does not have {extra}: {REGENERATE}"
    # the groups' sub-commands are there too (fleet run, export grafana, ...)
    assert any(len(path) == 2 for path, _ in tree)


def _readme_command_rows() -> dict[str, str]:
    """README's command table: command name -> the docs page its row links to."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Commands\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `preemptlog ([\w-]+)` \|.*\]\((docs/[^)#]+)(?:#[^)]*)?\) \|$", section, re.M)
    names = [n for n, _ in rows]
    assert len(names) == len(set(names)), f"a command has two rows in README's command table: {names}"
    return dict(rows)


def test_every_command_has_one_line_in_the_readme_command_table(tree):
    commands = _top_level_commands(tree)
    rows = _readme_command_rows()
    missing = [c for c in commands if c not in rows]
    assert not missing, f"README's command table has no line for {missing} (a row linking its page under docs/)"
    extra = [c for c in rows if c not in commands]
    assert not extra, f"README's command table lists commands `preemptlog --help` does not have: {extra}"
    for name, page in rows.items():
        assert (ROOT / page).is_file(), f"README's row of {name} links to {page}, which does not exist"
