"""A fix: one change to make, as data (the record every engine's fix arithmetic builds, and that the
fix plan ranks, verifies by replay and renders)."""

from __future__ import annotations

from typing import Any


def fix_record(
    fid: str,
    option: str,
    current: Any,
    suggested: Any,
    inputs: list[str],
    effect: str,
    text: str,
    addresses: list[str],
    *,
    missing: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """The fix record: its id, the option and its current and suggested values, the values it was
    computed from (``inputs``), the expected effect, what is missing when it cannot be computed, the
    verdict keys it addresses and its one-line text; ``extra`` fields follow (an engine's own, e.g.
    ``engine_kind`` and ``replay``). The key order is the JSON document's."""
    return {
        "id": fid,
        "option": option,
        "current": current,
        "suggested": suggested,
        "inputs": inputs,
        "expected_effect": effect,
        "missing": missing,
        "addresses": addresses,
        "text": text,
        **extra,
    }
