"""model/places.py: the folders of a file's display name and the folders files share (the joiner's
lanes, the pressure intervals' servers and the incidents' other sources all read them)."""

from __future__ import annotations

from preemptlog.model.places import folders, shared_depth


def test_folders_of_files_folders_and_archive_members():
    assert folders("incident/a/logs/vllm.log") == ["incident", "a", "logs"]
    assert folders("/tmp/x/vllm.log") == ["tmp", "x"]
    assert folders("b.tar.gz!dir/vllm.log") == ["b.tar.gz", "dir"]
    assert folders("vllm.log") == [] and folders(None) == []


def test_shared_depth():
    assert shared_depth([folders("x/a/vllm.log"), folders("x/b/metrics.prom")]) == 1
    assert shared_depth([folders("x/a/vllm.log"), folders("x/a/m.prom")]) == 2
    assert shared_depth([folders("x/a/vllm.log"), folders("top.log")]) == 0
    assert shared_depth([]) == 0 and shared_depth([folders("x/a/f")]) == 2
