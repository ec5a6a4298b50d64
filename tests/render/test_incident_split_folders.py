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
