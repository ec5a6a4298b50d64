"""A bundle of two servers side by side (``a/`` and ``b/``, each a log and its /metrics scrapes, both
started at the same time): each server's scrapes go with its own log's incident (render/each.py
split_by_incident, the nearest folder among the incidents a file meets in time), so the one-line
answers are each server's own count, as ``--each`` gives them; the headline does not say the logs do
not meet in time when they are two servers."""

from __future__ import annotations

import json

from ..conftest import run_cli
from ..joiner.test_code_own_server import _bundle  # a/ at 99 % counting 6, b/ at 40 % counting 1, side by side


def test_each_server_s_scrapes_go_with_its_own_log(tmp_path):
    b = _bundle(tmp_path / "two")
    p = run_cli("analyze", str(b), "--tz", "UTC", "-f", "json")
    assert p.returncode == 0, p.stderr
    s = json.loads(p.stdout)["summary"]
    assert s["incidents"] and len(s["incidents"]) == 2
    assert "of different servers" in s["headline"]
    said = " ".join(p.stderr.split())
    assert "a/vllm.log: 6 preemptions" in said  # before: 7, b's scrape counted with a's
    assert "b/vllm.log: 1 preemption" in said  # before: count not visible


def test_scrapes_as_near_to_two_servers_are_neither_servers(tmp_path):
    """``metrics/`` beside ``a/`` and ``b/`` (one counter, no log of its own): as near to both servers'
    incidents, it is a unit of its own (before: it went with the server that started first, so a's
    answer counted scrapes that may be b's, and b's said nothing of them)."""
    b = _bundle(tmp_path / "two")
    (b / "metrics").mkdir()
    (b / "a" / "metrics.prom").rename(b / "metrics" / "metrics.prom")
    (b / "b" / "metrics.prom").unlink()
    p = run_cli("analyze", str(b), "--tz", "UTC", "-f", "json")
    assert p.returncode == 0, p.stderr
    s = json.loads(p.stdout)["summary"]
    assert s["incidents"] == ["two/a/vllm.log", "two/b/vllm.log", "(other sources)"]
    said = " ".join(p.stderr.split())
    assert "(other sources): 6 preemptions" in said
    assert "two/a/vllm.log: count not visible" in said
    # b's quiet line names it by as much of its path as tells it from a's (before: "vllm.log", both's name)
    assert "no sign of pressure in the others: b/vllm.log -v adds:" in said
