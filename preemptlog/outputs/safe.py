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
    """Every control character (C0 but tab, DEL, C1, line/paragraph separators, bidi overrides) as a visible escape."""
    if text is None:
        return ""
    return _CONTROL.sub(_escape, text)


_CONTROL_KEEP_LINES = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def neutralise_lines(text: str) -> str:
    """Like :func:`neutralise` but keeps line ends and tabs (for machine formats shown on a terminal)."""
    text = text.replace("\r\n", "\n")
    return _CONTROL_KEEP_LINES.sub(_escape, text)


def _escape(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 256 else f"\\u{c:04x}"


class TerminalWriter:
    """A binary stream wrapper for text output shown on a terminal: control characters from the
    data (ESC, OSC, C1, bidi overrides) become visible escapes; bytes pass through otherwise."""

    def __init__(self, raw) -> None:
        import codecs

        self._raw = raw
        self._dec = codecs.getincrementaldecoder("utf-8")("replace")

    def write(self, data) -> int:
        text = self._dec.decode(bytes(data))
        if text:
            self._raw.write(neutralise_lines(text).encode("utf-8"))
        return len(data)

    def flush(self) -> None:
        tail = self._dec.decode(b"", final=True)
        if tail:
            self._raw.write(neutralise_lines(tail).encode("utf-8"))
        self._raw.flush()

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def close(self) -> None:
        self.flush()

    @property
    def closed(self) -> bool:
        return False


def markup(text: str | None) -> str:
    """Escape for rich markup *and* neutralise control characters."""
    from rich.markup import escape

    return escape(neutralise(text))


def text(value) -> object:
    """A rich Text cell that shows ``value`` literally."""
    from rich.text import Text

    return Text(neutralise(None if value is None else str(value)))


def unicode_ok() -> bool:
    """Can the terminal's locale show box-drawing and block characters? Python runs in UTF-8 mode
    under LC_ALL=C, so its stream encoding does not tell: the locale variables do (LC_ALL, then
    LC_CTYPE, then LANG; none set is the C locale)."""
    import os

    for name in ("LC_ALL", "LC_CTYPE", "LANG"):
        value = os.environ.get(name)
        if value:
            v = value.lower().replace("-", "")
            return "utf8" in v
    return False


def ascii_text(s: str) -> str:
    """Box, block and ellipsis characters as ASCII look-alikes (the C-locale fallback)."""
    return s.translate(_ASCII)


_ASCII = str.maketrans(
    {
        "…": "..",
        "─": "-",
        "━": "-",
        "│": "|",
        "┃": "|",
        "└": "+",
        "┌": "+",
        "┐": "+",
        "┘": "+",
        "├": "+",
        "┤": "+",
        "┬": "+",
        "┴": "+",
        "┼": "+",
        "█": "#",
        "▓": "%",
        "▒": "=",
        "░": ".",
        "▁": "_",
        "▂": "_",
        "▃": ".",
        "▄": "-",
        "▅": "=",
        "▆": "=",
        "▇": "#",
        "Δ": "d",
        "→": "->",
        "≥": ">=",
        "≤": "<=",
        "·": "-",
        "╳": "x",
    }
)


def table_box():
    """The box style for rich tables: rich's default, or ASCII when the locale cannot show it."""
    from rich import box

    return box.HEAVY_HEAD if unicode_ok() else box.ASCII2
