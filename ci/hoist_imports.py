"""Move ``import polars as pl`` / ``import pyarrow as pa`` from function bodies to module top.

The library imports polars and pyarrow at module top; only the CLI edge (cli.py, commands/,
render/__init__.py, the package __init__) and the capture plugin (it runs inside vLLM) stay
lazy, so ``preemptlog --help`` loads neither (tests/house/test_architecture.py checks it).
Idempotent: run it again after merging a branch that added in-function imports.

    python ci/hoist_imports.py [--keep-bodies FILE ...]

``--keep-bodies`` files get the top-level import but keep their in-function lines (files
another branch is rewriting, to keep the merge small).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "preemptlog"
LAZY = {"cli.py", "__init__.py", "__main__.py", "errors.py", "render/__init__.py", "render/safe.py"}
LAZY_DIRS = ("commands/", "capture/")
IMPORTS = {"polars": "import polars as pl", "pyarrow": "import pyarrow as pa"}


def hoist(path: Path, keep_bodies: bool) -> bool:
    text = path.read_text()
    lines = text.split("\n")
    used = {m for m, stmt in IMPORTS.items() if re.search(rf"^\s+{re.escape(stmt)}\s*$", text, re.M)}
    tc_block = re.compile(r"^if TYPE_CHECKING:\s*$")
    if not used and not any(tc_block.match(ln) for ln in lines):
        return False
    out: list[str] = []
    i = 0
    in_tc = False
    while i < len(lines):
        line = lines[i]
        if tc_block.match(line):
            in_tc = True
        elif in_tc and line and not line.startswith((" ", "\t")):
            in_tc = False
        stripped = line.strip()
        stmt = next((s for s in IMPORTS.values() if stripped == s), None)
        if stmt is not None and line.startswith((" ", "\t")):
            mod = stmt.split()[1]
            if in_tc:
                used.add(mod)
                i += 1
                if i < len(lines) and not lines[i].strip() and (not out or out[-1].strip() == "if TYPE_CHECKING:"):
                    i += 1
                continue
            if not keep_bodies:
                i += 1
                if i < len(lines) and not lines[i].strip():
                    i += 1
                continue
        out.append(line)
        i += 1
    # an emptied `if TYPE_CHECKING:` block
    text2 = re.sub(r"\nif TYPE_CHECKING:\n(?=\S|\n*\Z)", "\n", "\n".join(out))
    text2 = re.sub(r"\nif TYPE_CHECKING:\n\n+(?=\S)", "\n", text2)
    lines = text2.split("\n")
    for mod in sorted(used):
        stmt = IMPORTS[mod]
        if any(ln == stmt for ln in lines):
            continue
        # after the last top-level stdlib/third-party import, before the first relative import
        idx = None
        for k, ln in enumerate(lines):
            if ln.startswith(("from .", "if TYPE_CHECKING")):
                idx = k
                break
            if ln.startswith(("def ", "class ", "@")):
                break
        if idx is None:
            last = max(
                (
                    k
                    for k, ln in enumerate(lines)
                    if ln.startswith(("import ", "from ")) and not ln.startswith("from .")
                ),
                default=0,
            )
            idx = last + 1
            lines[idx:idx] = ["", stmt] if lines[last].startswith("from __future__") else [stmt]
        else:
            prev = idx - 1
            while prev >= 0 and not lines[prev].strip():
                prev -= 1
            if lines[prev].startswith("from __future__"):
                lines[idx:idx] = [stmt, ""]
            else:
                lines[prev + 1 : prev + 1] = [stmt]
    new = "\n".join(lines)
    if "TYPE_CHECKING" in new and not re.search(r"^if TYPE_CHECKING:|TYPE_CHECKING\b(?!,| *$)", new, re.M):
        new = re.sub(r"from typing import TYPE_CHECKING\n", "", new)
        new = re.sub(r"(from typing import .*)\bTYPE_CHECKING, ", r"\1", new)
        new = re.sub(r"(from typing import .*), TYPE_CHECKING\b", r"\1", new)
    if new != text:
        path.write_text(new)
        return True
    return False


def main(argv: list[str]) -> int:
    keep = set()
    if argv[:1] == ["--keep-bodies"]:
        keep = {str((Path.cwd() / a).resolve()) for a in argv[1:]}
    changed = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in LAZY or rel.startswith(LAZY_DIRS):
            continue
        if hoist(path, str(path.resolve()) in keep):
            changed.append(rel)
    print("\n".join(changed))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
