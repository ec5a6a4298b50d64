"""Long terminal output through ``$PAGER`` (default ``less -SR``), only when standard output is a
terminal and the text is taller than it; in a pipe or a file the text is written as is."""

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


def page(data: bytes, out: BinaryIO) -> None:
    """Write ``data`` to ``out``, through the pager when ``out`` is a terminal shorter than the text."""
    size = terminal_size(out)
    if size is None or data.count(b"\n") < size[1] - 1:
        out.write(data)
        return
    cmd = os.environ.get("PAGER", "less -SR").strip()
    if not cmd or cmd == "cat":
        out.write(data)
        return
    env = dict(os.environ)
    env.setdefault("LESS", "FRX")  # quit at the end of a short page, keep colours
    out.flush()
    try:
        proc = subprocess.Popen(cmd, shell=True, stdin=subprocess.PIPE, env=env)
    except OSError:
        out.write(data)
        return
    try:
        assert proc.stdin is not None
        proc.stdin.write(data)
        proc.stdin.close()
    except BrokenPipeError:  # the user quit the pager early
        pass
    proc.wait()
