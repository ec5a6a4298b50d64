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


def server_homes(held_by: Iterable[str], logs: Iterable[str], others: Iterable[str] = ()) -> dict[str, str]:
    """The server folder of files of a bundle that keeps servers in folders of their own: each of
    ``held_by`` (scrapes, records) is the logs' under the deepest folder above it that holds one of
    ``logs``, below the folder every one of them shares (that one holds every server); each of ``logs``
    and ``others`` the deepest such folder above it. ``""`` for a file under none; ``{}`` when no file
    of ``held_by`` is in one (nothing to tell apart). reconcile._server_keys (counters) and
    recordmatch.ServerKeys (block-table records) key engines by it."""
    held_by, logs = sorted(set(held_by)), sorted(set(logs))
    where = {x: folders(x) for x in [*logs, *held_by]}
    root = shared_depth(where.values())

    def place(f: list[str]) -> str:
        for k in range(len(f), root, -1):
            if any(where[x][:k] == f[:k] for x in logs):
                return "/".join(f[:k])
        return ""

    at = {x: place(where[x]) for x in held_by}
    held = sorted({p for p in at.values() if p}, key=len, reverse=True)
    if not held:
        return {}

    def home(x: str) -> str:  # the deepest server folder above a file
        f = folders(x)
        return next((p for p in held if f[: p.count("/") + 1] == p.split("/")), "")

    return {**{x: home(x) for x in sorted({*logs, *others})}, **at}
