"""Log text in the report's HTML: escaped and neutralised (one home for both report modules)."""

from __future__ import annotations

import html
from typing import Any

from ..outputs.safe import neutralise


def e(value: Any) -> str:
    """Log text (or any value) as inert HTML text."""
    return html.escape(neutralise("" if value is None else str(value)), quote=True)
