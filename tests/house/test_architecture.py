"""The shape of the code: no import cycles, and a CLI that starts without polars.

The import graph is read from the source with ``ast``: every ``import`` of a preemptlog
module that can run counts, at module top or inside a function alike (a lazy import is
still a dependency), and a package that loads its submodules with
``importlib.import_module(f"{__name__}.{name}")`` depends on all of them. Imports under
``if TYPE_CHECKING:`` never run and are left out: a stage may name the type of what it
reads (result.Analysis) without the result depending on the stage.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

from ..conftest import ROOT

PKG = "preemptlog"


def _modules() -> dict[str, tuple[Path, bool]]:
    mods = {}
    for path in sorted((ROOT / PKG).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts = parts[:-1]
        mods[".".join(parts)] = (path, is_pkg)
    return mods


def import_graph(type_checking: bool = False) -> dict[str, set[str]]:
    """Module -> the preemptlog modules it imports (anywhere in the file; under ``if TYPE_CHECKING:``
    too with ``type_checking``)."""
    mods = _modules()
    graph: dict[str, set[str]] = {}
    for name, (path, is_pkg) in mods.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        base = name.split(".") if is_pkg else name.split(".")[:-1]
        type_only = {
            id(inner)
            for node in ast.walk(tree)
            if not type_checking and isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for stmt in node.body
            for inner in ast.walk(stmt)
        }
        deps: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in type_only:
                continue
            if isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name.startswith(PKG))
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    target = ".".join(base[: len(base) - node.level + 1] + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if not target.startswith(PKG):
                    continue
                for a in node.names:
                    deps.add(f"{target}.{a.name}" if f"{target}.{a.name}" in mods else target)
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "import_module"
                and is_pkg
            ):
                deps.update(m for m in mods if m.startswith(name + ".") and m.count(".") == name.count(".") + 1)
        graph[name] = {d for d in deps if d in mods and d != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_graph_sees_imports_of_every_kind():
    g = import_graph()
    assert "preemptlog.commands.analyze" in g["preemptlog.commands"]  # importlib.import_module
    assert "preemptlog.errors" in g["preemptlog.cli"]  # a top-level relative import
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles():
    found = cycles(import_graph())
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def _loaded_after(code: str) -> set[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys\nprint(' '.join(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=True,
    ).stdout
    return set(out.split())


def test_importing_the_cli_loads_no_polars():
    mods = _loaded_after("import preemptlog.cli")
    assert "polars" not in mods and "pyarrow" not in mods


def test_help_loads_no_polars():
    code = (
        "import sys\nsys.argv = ['preemptlog', '--help']\nfrom preemptlog.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
    )
    mods = _loaded_after(code)
    assert "polars" not in mods and "pyarrow" not in mods


def test_the_library_imports_polars_at_module_top():
    """Outside the CLI edge (cli, commands, render/__init__, the package, capture), no function
    imports polars or pyarrow: the library pays for them once, at import."""
    lazy = {"__init__.py", "__main__.py", "cli.py", "errors.py", "render/__init__.py", "render/safe.py"}
    # Files another branch rewrites keep their in-function imports until the merge
    # (ci/hoist_imports.py moves them; the lead removes this set).
    pending: set[str] = set()
    bad = []
    for path in sorted((ROOT / PKG).rglob("*.py")):
        rel = path.relative_to(ROOT / PKG).as_posix()
        if rel in lazy or rel in pending or rel.startswith(("commands/", "capture/")):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for inner in ast.walk(node):
                    if isinstance(inner, ast.Import) and any(a.name in ("polars", "pyarrow") for a in inner.names):
                        bad.append(f"{rel}:{inner.lineno}")
    assert not bad, "in-function polars/pyarrow imports: " + ", ".join(bad)
