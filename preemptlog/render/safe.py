"""Log text is data: make it inert before it reaches a terminal.

Control characters (C0 except tab, DEL, C1) become visible ``\\xNN`` escapes,
so ANSI/OSC sequences from a log cannot move the cursor, retitle the window
or hide text. Rich markup is never interpreted: cells are ``rich.text.Text``
objects, and strings passed to markup-aware calls go through ``markup``.
"""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def neutralise(text: str | None) -> str:
    if text is None:
        return ""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 256 else f"\\u{ord(m.group()):04x}", text)


def markup(text: str | None) -> str:
    """Escape for rich markup *and* neutralise control characters."""
    from rich.markup import escape

    return escape(neutralise(text))


def text(value) -> "object":
    """A rich Text cell that shows ``value`` literally."""
    from rich.text import Text

    return Text(neutralise(None if value is None else str(value)))
