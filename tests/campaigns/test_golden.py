"""Golden files: one constructed log per format family, expected events and summary.

Inputs are lines built from the format strings on the facts page
(fixtures/golden/*.log). Regenerate after an intended change with
PREEMPTLOG_UPDATE_GOLDEN=1 python -m pytest tests/campaigns/test_golden.py, then review
the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from preemptlog import AnalyzeOptions, analyze
from preemptlog.render import OutputFormat, write

from ..conftest import FIXTURES

GOLDEN = FIXTURES / "golden"
# Per-file options: year-less files get an explicit year so the result does not
# depend on the checkout's mtime.
OPTIONS = {
    "v0-unbracketed-0.6.log": {"year": 2025},
    "v0-bracketed-0.8.log": {"year": 2025},
    "v1-patched-0.14.log": {"year": 2026},
    "v1-0.32-json.log": {},
    "docker-compose-rfc3339.log": {},
    "guide-iso-markers.log": {},
    "kubectl-syslog.log": {},
    # SGLang (issue 29): 0.4.x TP-repeated lines, 0.5.23 behind docker -t with a hybrid pool
    "sglang-0.4-tp.log": {},
    "sglang-0.5.23-docker.log": {},
    # vLLM's Rust frontend (issue 37): its stats line behind vLLM's prefix (0.34, two engines summed)
    # and behind the Rust tracing subscriber's default prefix (with ANSI colours), beside Python lines
    "v1-rust-0.34.log": {"year": 2026},
    "v1-rust-tracing.log": {},
}
VOLATILE_SUMMARY_KEYS = ("inputs",)


def _run(name: str):
    opts = AnalyzeOptions(tz="UTC", **OPTIONS[name])
    return analyze([f"fixtures/golden/{name}"], opts)


def _ndjson(result) -> str:
    import io

    buf = io.BytesIO()
    write(result, OutputFormat.ndjson, buf)
    return buf.getvalue().decode()


def _summary(result) -> str:
    s = result.summary()
    for k in VOLATILE_SUMMARY_KEYS:
        s.pop(k, None)
    return json.dumps(s, indent=2, sort_keys=True, default=str) + "\n"


def _check(path: Path, actual: str) -> None:
    if os.environ.get("PREEMPTLOG_UPDATE_GOLDEN"):
        path.write_text(actual)
        return
    assert path.exists(), f"missing golden file {path}; run with PREEMPTLOG_UPDATE_GOLDEN=1"
    assert actual == path.read_text(), f"{path.name} differs from the golden output"


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_golden_events(name, in_root):
    result = _run(name)
    _check(GOLDEN / (name + ".events.ndjson"), _ndjson(result))


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_golden_summary(name, in_root):
    result = _run(name)
    _check(GOLDEN / (name + ".summary.json"), _summary(result))


def test_every_golden_input_is_covered():
    inputs = {p.name for p in GOLDEN.glob("*.log")}
    assert inputs == set(OPTIONS)
