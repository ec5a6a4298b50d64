"""Long terminal output through ``$PAGER`` (default ``less -SR``), only when standard output is a
terminal and the text is taller than it; in a pipe or a file the text is written as is.

``head`` is what must be read first (the summary's answer): above the paged text when paged,
else written to ``head_out`` (stderr) just before the text."""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import BinaryIO


def terminal_size(out: BinaryIO) -> tuple[int, int] | None:
    """(columns, lines) of the terminal ``out`` writes to, or None when it is not one."""
    if not (hasattr(out, "isatty") and out.isatty()):
        return None
    size = shutil.get_terminal_size((100, 40))
    return size.columns, size.lines


def page(
    data: bytes,
    out: BinaryIO,
    *,
    head: bytes = b"",
    head_out: BinaryIO | None = None,
    pager: bool = True,
    tail: bytes = b"",
) -> None:
    """Write ``data`` to ``out``, through the pager when ``out`` is a terminal shorter than ``head``,
    ``data`` and ``tail`` together (and ``pager``); ``head`` first and ``tail`` last in either case
    (both to ``head_out`` when not paged: the summary's stream). So the answer (``head``) is on the
    first screen whatever is long: the table, or the rest of the summary and the timeline (``tail``)."""
    size = terminal_size(out)
    cmd = os.environ.get("PAGER", "less -SR").strip()
    tall = size is not None and (head + data + tail).count(b"\n") >= size[1] - 1
    if not (pager and tall and cmd and cmd != "cat"):
        _head(head, out, head_out)
        out.write(data)
        if tail:
            out.flush()
            _head(tail, out, head_out)
        return
    env = dict(os.environ)
    env.setdefault("LESS", "FRX")  # quit at the end of a short page, keep colours
    out.flush()
    try:
        proc = subprocess.Popen(cmd, shell=True, stdin=subprocess.PIPE, env=env)
    except OSError:
        _head(head, out, head_out)
        out.write(data)
        return
    try:
        assert proc.stdin is not None
        proc.stdin.write(head + data + tail)
        proc.stdin.close()
    except BrokenPipeError:  # the user quit the pager early
        pass
    proc.wait()


def _head(head: bytes, out: BinaryIO, head_out: BinaryIO | None) -> None:
    if not head:
        return
    target = head_out or out
    target.write(head)
    target.flush()
