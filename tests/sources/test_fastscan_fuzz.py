"""The compiled pass under a coverage-guided fuzzer (issue 36): ci/fuzz_fastscan.py in CI.

libFuzzer with AddressSanitizer (and its LeakSanitizer) and UndefinedBehaviorSanitizer runs the C
pass for ``PREEMPTLOG_FUZZ_SECONDS`` (default 60) on the committed seed corpus
(fixtures/fuzz/fastscan/); every input of the merged corpus is then read by both passes. A crash,
a leak, undefined behaviour or a difference fails. Slow: CI runs it (.ci/run installs clang);
without clang it is skipped outside CI and fails in CI.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from ..conftest import ROOT


def _script():
    spec = importlib.util.spec_from_file_location("ci_fuzz_fastscan", ROOT / "ci" / "fuzz_fastscan.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_fuzz_campaign_no_crash_no_leak_no_difference(tmp_path: Path) -> None:
    fuzz = _script()
    if fuzz.clang() is None:
        if os.environ.get("CI"):
            pytest.fail("no clang: .ci/run installs clang-14 and libclang-rt-14-dev for this test")
        pytest.skip("no clang (apt-get install clang-14 libclang-rt-14-dev)")
    seconds = os.environ.get("PREEMPTLOG_FUZZ_SECONDS", "60")
    assert fuzz.main(["--seconds", seconds, "--work", str(tmp_path / "work")]) == 0


def test_seed_corpus_is_read_alike() -> None:
    """The committed seeds themselves (quick: no fuzzer needed)."""
    fuzz = _script()
    from preemptlog.sources import fastscan

    if fastscan._scan is None:
        pytest.skip("the compiled pass is not built")
    seeds = sorted(p for p in (ROOT / "fixtures" / "fuzz" / "fastscan").iterdir() if p.is_file())
    assert seeds
    assert [p.name for p in seeds if fuzz.differ(p)] == []
