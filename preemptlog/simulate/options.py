"""Checking simulator options: the error they raise, --start, --tz and --set values.

Moved out of simulate/bundle.py so that simulate/large.py uses them without importing the
bundle writer (which imports it).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

DEFAULT_START = "2026-11-29T23:58:00"


class SimulateError(ValueError):
    """A bad option value (the CLI turns it into a UsageError)."""


def parse_start(text: str) -> datetime:
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise SimulateError(f"--start {text!r} is not an ISO date-time (e.g. {DEFAULT_START})") from None
    if dt.tzinfo is not None:
        raise SimulateError("--start is a local wall-clock time without an offset; give the zone with --tz")
    return dt


def check_zone(tz: str) -> None:
    if tz.upper() == "UTC":
        return
    from zoneinfo import ZoneInfo

    try:
        ZoneInfo(tz)
    except Exception:
        raise SimulateError(f"--tz {tz!r} is not an IANA zone name (e.g. UTC, Europe/Berlin)") from None


def coerce(name: str, text: str, current: Any) -> Any:
    """A --set value, typed like the parameter's current value."""
    if isinstance(current, bool):
        low = text.lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise SimulateError(f"--set {name}={text}: expected true or false")
    if isinstance(current, int):
        try:
            return int(text)
        except ValueError:
            raise SimulateError(f"--set {name}={text}: expected an integer") from None
    if isinstance(current, float):
        try:
            return float(text)
        except ValueError:
            raise SimulateError(f"--set {name}={text}: expected a number") from None
    if isinstance(current, (list, dict)):
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            raise SimulateError(f'--set {name}={text}: expected JSON (e.g. ["uniform", 10, 20])') from None
        if not isinstance(value, type(current)):
            raise SimulateError(f"--set {name}: expected a JSON {type(current).__name__}")
        return value
    return text
