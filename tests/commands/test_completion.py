"""Shell completion through the installed ``preemptlog`` script, as bash asks for it (click's protocol:
``_PREEMPTLOG_COMPLETE=complete_bash`` with COMP_WORDS / COMP_CWORD): gate names and what-if settings."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from preemptlog.whatif.workload import SETTINGS

SCRIPT = shutil.which("preemptlog", path=str(Path(sys.executable).parent)) or shutil.which("preemptlog")


def _complete(words: str) -> list[str]:
    assert SCRIPT, "the preemptlog script is installed with the package (pip install -e '.[dev]')"
    env = {
        **os.environ,
        "_PREEMPTLOG_COMPLETE": "complete_bash",
        "COMP_WORDS": words,
        "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1)),
    }
    p = subprocess.run([SCRIPT], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert p.returncode == 0, p.stderr
    return p.stdout.split()


@pytest.mark.parametrize(
    ("typed", "want"),
    [("G2", ["G2-batch-variance"]), ("G1", ["G1-kv-space"]), ("und", ["undetermined"]), ("G9", [])],
)
def test_gate_names_complete(typed, want):
    assert _complete(f"preemptlog analyze x.log --gate {typed}") == want


def test_whatif_settings_complete_with_their_equals_sign():
    got = _complete("preemptlog whatif x.log --set max_")
    assert got == [f"{k}=" for k in SETTINGS if k.startswith("max_")] and "max_num_seqs=" in got
    assert _complete("preemptlog whatif x.log --sweep block") == ["block_size="]
    assert sorted(_complete("preemptlog whatif x.log --base ")) == sorted(f"{k}=" for k in SETTINGS)
