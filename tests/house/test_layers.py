"""The tree is the data-flow table: a top-level package imports only packages below it.

The order, from the ground floor up, is :data:`LAYERS` (CONTRIBUTING.md "Layout, in the order data
flows" lists the same folders in the same order: a test keeps them equal). Every import of a
preemptlog module counts: at module top, inside a function, and under ``if TYPE_CHECKING:`` (a
type named from above is a dependency on what is above). Inside one package, modules import each
other freely (the cycle test still holds them). Engines are peers behind their registry: nothing
outside ``engines/`` imports a module inside ``engines/vllm/`` or ``engines/sglang/``, and no
engine imports another's modules.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..conftest import ROOT
from .test_architecture import cycles, import_graph

# Bottom to top. Floor modules (preemptlog/*.py) are named by their file; "__init__" is the
# library face (preemptlog/__init__.py).
LAYERS = [
    "errors",
    "inputs",
    "outputs",
    "clock",
    "model",
    "sources",
    "engines",
    "events",
    "joiner",
    "rules",
    "findings",
    "whatif",
    "fixes",
    "pipeline",
    "analysis",
    "render",
    "report",
    "simulate",
    "capture",
    "watch",
    "fleet",
    "__init__",
    "commands",
    "cli",
    "__main__",
]
FLOOR_MAX = 6
ENGINE_PACKAGES = ("preemptlog.engines.vllm", "preemptlog.engines.sglang")


def top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def full_graph() -> dict[str, set[str]]:
    return import_graph(type_checking=True)


def test_every_package_has_a_layer():
    tops = {top(m) for m in full_graph()}
    assert tops <= set(LAYERS), f"not in LAYERS: {sorted(tops - set(LAYERS))}"


def test_packages_import_only_below():
    rank = {name: i for i, name in enumerate(LAYERS)}
    bad = [
        f"{m} ({top(m)}) imports {d} ({top(d)})"
        for m, deps in sorted(full_graph().items())
        for d in sorted(deps)
        if top(d) != top(m) and rank[top(d)] > rank[top(m)]
    ]
    assert not bad, "imports from a layer above:\n" + "\n".join(bad)


def test_no_import_cycles_type_checking_counted():
    found = cycles(full_graph())
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_a_handful_of_modules_on_the_package_floor():
    floor = sorted(p.name for p in (ROOT / "preemptlog").glob("*.py"))
    assert len(floor) <= FLOOR_MAX, floor


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_engines_are_reached_only_through_their_registry():
    bad = []
    for m, deps in sorted(full_graph().items()):
        for d in sorted(deps):
            for pkg in ENGINE_PACKAGES:
                outside = not _inside(m, "preemptlog.engines") or any(_inside(m, o) for o in ENGINE_PACKAGES)
                if _inside(d, pkg) and not _inside(m, pkg) and outside:
                    bad.append(f"{m} imports {d}")
    assert not bad, "engine modules imported from outside their engine:\n" + "\n".join(bad)


def test_layers_match_contributing():
    text = (ROOT / "CONTRIBUTING.md").read_text()
    table = text.split("## Layout, in the order data flows", 1)[1].split("\n## ", 1)[0]
    named = re.findall(r"^\| `([\w.]+)/?`", table, flags=re.M)
    packages = [p for p in LAYERS if (ROOT / "preemptlog" / p).is_dir()]
    assert [n.rstrip("/") for n in named if (ROOT / "preemptlog" / n.rstrip("/")).is_dir()] == packages
    for p in packages:
        assert Path(ROOT / "preemptlog" / p / "__init__.py").exists()


def test_imports_at_module_top_outside_the_cli_edge():
    """The package's own imports sit at module top (the header shows a module's dependencies), except
    at the CLI edge (cli.py, commands/, render/__init__.py: lazy for ``--help``) and capture/ (inside
    vLLM); ci/hoist_own_imports.py moves them and lists the few a hoist would rebind."""
    import subprocess
    import sys

    p = subprocess.run(
        [sys.executable, str(ROOT / "ci" / "hoist_own_imports.py"), "--check"], capture_output=True, text=True
    )
    assert p.returncode == 0, p.stdout + p.stderr
