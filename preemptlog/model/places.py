"""Where a file lies in a bundle: its folders, and how many leading folders files share.

A bundle keeps one server's files under one folder (``a/vllm.log`` beside ``a/metrics.prom``), so
the folders of the files' display names tell servers apart where nothing else does (the joiner's
lanes, the pressure intervals' servers, the incidents a folder's other sources join). An archive
member's display name ``x.tar.gz!a/vllm.log`` lies in ``x.tar.gz/a``.
"""

from __future__ import annotations

from collections.abc import Iterable


def folders(display: str | None) -> list[str]:
    """The folders of a file's display name, outermost first (``x/a/vllm.log`` -> ``["x", "a"]``)."""
    return [p for p in (display or "").replace("!", "/").split("/")[:-1] if p]


def shared_depth(paths: Iterable[list[str]]) -> int:
    """How many leading folders every one of ``paths`` (folder lists) shares; 0 for none."""
    parts = list(paths)
    if not parts:
        return 0
    n = 0
    for level in zip(*parts, strict=False):
        if len(set(level)) != 1:
            break
        n += 1
    return n
