"""The request stage runs in a thread beside the events, joiner and verdicts (pipeline.Pending).

What it must keep: the same analysis as when it ran in line (the goldens and corpus tests hold that
for every format family), its errors reaching the caller as themselves, and no stage before the
findings reading the requests (they are not there yet: a stage that did would fail loudly here).
"""

from __future__ import annotations

import dataclasses
import threading

import pytest

from preemptlog import AnalyzeOptions, analyze, engines
from preemptlog.errors import InputError
from preemptlog.pipeline import Pending

from ..conftest import FIXTURES

OPTS = AnalyzeOptions(tz="UTC", year=2026)


def test_pending_returns_the_value_and_raises_the_error():
    assert Pending(lambda a, b: a + b, 2, 3).result() == 5

    def boom() -> None:
        raise InputError("x.log: cannot read (gone)")

    p = Pending(boom)
    with pytest.raises(InputError, match="cannot read"):
        p.result()
    p.wait()  # waiting again is harmless


def _patched_requests(monkeypatch, fn):
    facts = engines.log_reader()
    patched = dataclasses.replace(facts, requests=fn)
    monkeypatch.setattr(engines, "log_reader", lambda: patched)
    return facts


def test_an_error_of_the_request_stage_reaches_the_caller(monkeypatch):
    def broken(*args):
        raise InputError("demo/vllm.log: the request rows cannot be read back")

    _patched_requests(monkeypatch, broken)
    with pytest.raises(InputError, match="cannot be read back"):
        analyze([str(FIXTURES / "demo")], OPTS)


def test_the_request_stage_runs_off_the_main_thread_and_is_waited_for(monkeypatch):
    seen: list[str] = []
    facts = engines.log_reader()

    def traced(*args):
        seen.append(threading.current_thread().name)
        return facts.requests(*args)

    _patched_requests(monkeypatch, traced)
    a = analyze([str(FIXTURES / "demo")], OPTS)
    assert seen == ["preemptlog-requests"]
    assert a.request_stats.received == 300 and a.requests.height > 0
    assert a.summary()["requests_received"] == 300


def test_a_failure_after_the_sources_waits_for_the_request_stage(monkeypatch):
    """An error in a later stage leaves only when the request thread is done (its spill files go with
    the workspace)."""
    import preemptlog.pipeline as pipeline

    done = threading.Event()
    facts = engines.log_reader()

    def slow(*args):
        out = facts.requests(*args)
        done.set()
        return out

    _patched_requests(monkeypatch, slow)

    def fails(*args, **kwargs):
        raise RuntimeError("joiner failed")

    monkeypatch.setattr(pipeline, "joiner_evidence", fails)
    with pytest.raises(RuntimeError, match="joiner failed"):
        analyze([str(FIXTURES / "demo")], OPTS)
    assert done.is_set()
