"""Every rich Console preemptlog writes through: one home for the settings they share.

House settings: no highlighting of numbers and paths, no emoji codes (log text stays literal).
rich is imported on call, never at start-up (``preemptlog analyze -q`` loads no rich).

- :func:`console`: the one factory; the others are its usual shapes.
- :func:`stderr_console`: the human summary and the progress display, on stderr.
- :func:`text_console`: text into a buffer (tables, summaries, explanations), ANSI styles
  only when asked.
- :func:`binary_console`: text into a binary output (a file or stdout), styled on a terminal.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, TYPE_CHECKING, Any, BinaryIO

if TYPE_CHECKING:
    from rich.console import Console


def console(
    file: IO[str] | None = None,
    *,
    stderr: bool = False,
    width: int | None = None,
    terminal: bool | None = None,
    no_color: bool | None = None,
    color_system: Any = "auto",
    soft_wrap: bool = False,
    legacy_windows: bool | None = None,
) -> Console:
    """A rich Console with the house settings. ``terminal`` forces (True, False) or detects (None)
    a terminal; ``no_color`` None lets rich read NO_COLOR; the rest are rich's own."""
    from rich.console import Console

    return Console(
        file=file,
        stderr=stderr,
        width=width,
        force_terminal=terminal,
        no_color=no_color,
        color_system=color_system,
        highlight=False,
        emoji=False,
        soft_wrap=soft_wrap,
        legacy_windows=legacy_windows,
    )


def stderr_console(no_color: bool = False) -> Console:
    """The console for the human summary: stderr, long lines kept whole, colour unless ``no_color``
    or NO_COLOR."""
    return console(stderr=True, no_color=no_color or bool(os.environ.get("NO_COLOR")), soft_wrap=True)


def text_console(file: IO[str], *, width: int | None, color: bool) -> Console:
    """A console writing text into ``file`` (a buffer), ``width`` columns wide: ANSI styles in the
    16 standard colours when ``color``, plain text otherwise."""
    return console(
        file,
        width=width,
        terminal=color,
        no_color=not color,
        color_system="standard" if color else None,
        legacy_windows=False,
    )


@contextmanager
def binary_console(out: BinaryIO) -> Iterator[Console]:
    """A console writing UTF-8 into the binary ``out``: on a terminal its width and styles (unless
    NO_COLOR), elsewhere 200 columns of plain text. ``out`` is flushed and left open."""
    import io

    wrapper = io.TextIOWrapper(out, encoding="utf-8", errors="replace", write_through=True)
    try:
        is_tty = hasattr(out, "isatty") and out.isatty()
        yield console(
            wrapper,
            width=None if is_tty else 200,
            terminal=is_tty,
            no_color=not is_tty or bool(os.environ.get("NO_COLOR")),
        )
    finally:
        wrapper.flush()
        wrapper.detach()
