"""Move the package's own imports from function bodies to module top (issue 34: no hidden graph).

Outside the CLI edge (cli.py, commands/, the package __init__/__main__) and capture/ (it runs
inside vLLM and loads only what a hook needs), a module imports the package's modules at its top,
so its header shows its dependencies. An in-function ``from .x import y`` (or ``import
preemptlog.x``) is removed and the same statement is added after the module's top imports, unless
hoisting would change what a name means: the local name is bound otherwise at module level, or two
functions bind it to different things (such imports stay, and are listed). Idempotent.

    python ci/hoist_own_imports.py [--check]
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "preemptlog"
EDGE_FILES = {"cli.py", "__init__.py", "__main__.py", "render/__init__.py"}  # render/__init__: OutputFormat for --help
EDGE_DIRS = ("commands/", "capture/")


def own(node: ast.AST) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").split(".")[0] == "preemptlog"
    if isinstance(node, ast.Import):
        return all(a.name.split(".")[0] == "preemptlog" for a in node.names)
    return False


def bound(node: ast.Import | ast.ImportFrom) -> dict[str, str]:
    """Local name -> what it binds (the statement's text for that alias)."""
    out = {}
    for a in node.names:
        if isinstance(node, ast.ImportFrom):
            out[a.asname or a.name] = f"{'.' * node.level}{node.module or ''}:{a.name}"
        else:
            out[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
    return out


def module_names(tree: ast.Module) -> dict[str, str]:
    names: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update(bound(node))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = "<def>"
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        names[n.id] = "<assign>"
        elif isinstance(node, ast.If):  # TYPE_CHECKING blocks: names for annotations only
            for sub in node.body:
                if isinstance(sub, (ast.Import, ast.ImportFrom)):
                    names.update({k: "tc:" + v for k, v in bound(sub).items()})
    return names


def hoist(path: Path, write: bool = True) -> tuple[bool, list[str]]:
    src = path.read_text()
    tree = ast.parse(src)
    top = module_names(tree)
    inner: list[ast.Import | ast.ImportFrom] = []
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)) and own(node):
                    inner.append(node)
    if not inner:
        return False, []
    wanted: dict[str, str] = {}
    clash: set[str] = set()
    for node in inner:
        for name, what in bound(node).items():
            if wanted.get(name, what) != what:
                clash.add(name)
            wanted[name] = what
    kept: list[str] = []
    move: list[ast.Import | ast.ImportFrom] = []
    for node in inner:
        names = bound(node)
        ok = all(n not in clash and (top.get(n) in (None, w) or top.get(n) == "tc:" + w) for n, w in names.items())
        if ok:
            move.append(node)
        else:
            kept.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}: {ast.unparse(node)}")
    if not move:
        return False, kept
    lines = src.split("\n")
    drop: set[int] = set()
    add: list[str] = []
    for node in move:
        for ln in range(node.lineno, node.end_lineno + 1):
            drop.add(ln - 1)
        stmt = ast.unparse(node)
        names = bound(node)
        if not all(top.get(n) == w for n, w in names.items()) and stmt not in add:
            add.append(stmt)
    # a function body left empty by the removal keeps a `pass`... never the case for imports
    # followed by code; drop a blank line that directly followed a removed import
    out = []
    for i, line in enumerate(lines):
        if i in drop:
            continue
        if i - 1 in drop and line.strip() == "" and out and out[-1].strip().endswith(":") is False:
            prev_code = out[-1] if out else ""
            if prev_code.strip() and not prev_code.strip().startswith(("def ", "async def ")):
                pass
            if i + 1 < len(lines) and lines[i + 1].strip() == "":
                continue
        out.append(line)
    # insertion point: after the last top-level import (outside `if TYPE_CHECKING`)
    last = 0
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            last = node.end_lineno
    if last == 0:  # after the docstring / __future__
        last = tree.body[0].end_lineno if tree.body and isinstance(tree.body[0], ast.Expr) else 0
    removed_before = sum(1 for d in drop if d < last)
    at = last - removed_before
    out[at:at] = add
    if write:
        path.write_text("\n".join(out))
    return True, kept


def edge(rel: str) -> bool:
    return rel in EDGE_FILES or rel.startswith(EDGE_DIRS)


def main(argv: list[str]) -> int:
    changed, kept = [], []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if edge(rel):
            continue
        if "--check" in argv:  # reads only: never writes a file
            did, k = hoist(path, write=False)
            if did:
                changed.append(rel)
        else:
            did, k = hoist(path)
            if did:
                changed.append(rel)
        kept += k
    for k in kept:
        print("kept in its function:", k)
    print(f"{len(changed)} file(s) {'would change' if '--check' in argv else 'changed'}")
    return 1 if ("--check" in argv and changed) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
