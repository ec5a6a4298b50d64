"""The in-place build (what ``pip install -e``, the README's test command, runs) writes the package's
bytecode as well as the compiled log pass: an editable install compiles no bytecode of its own, and
with ``PYTHONDONTWRITEBYTECODE=1`` (CI runners, containers, this machine) every ``preemptlog``
process compiled its ~200 modules from source, 0.26 -> 0.49 s of imports (setup.py,
docs/performance.md)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

from ..conftest import ROOT


def _tree(dest: Path) -> None:
    """The package's sources and the build files, without any bytecode or built extension."""
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, dest / name)
    shutil.copytree(
        ROOT / "preemptlog",
        dest / "preemptlog",
        ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyd"),
    )


def test_inplace_build_writes_every_modules_bytecode(tmp_path: Path) -> None:
    _tree(tmp_path)
    sources = sorted(tmp_path.joinpath("preemptlog").rglob("*.py"))
    assert len(sources) > 100
    assert not list(tmp_path.rglob("*.pyc"))
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    missing = [
        str(p.relative_to(tmp_path)) for p in sources if not Path(importlib.util.cache_from_source(str(p))).is_file()
    ]
    assert missing == []
    # the extension is built beside its sources, as before
    assert list(tmp_path.joinpath("preemptlog", "sources", "fastscan").glob("_scan*.so"))
