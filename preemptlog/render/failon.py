"""``--fail-on`` conditions for CI scripts.

Grammar (several conditions may be given; any one that holds fails the run):

- ``any``: at least one preemption event;
- ``count>N`` (also ``>=``): the number of events;
- ``rate>X`` (also ``>=``): preemptions per received request, ``X`` a fraction
  (``0.05``) or a percentage (``5%``); never holds when requests were not logged;
- ``unknown``: the bundle cannot show the count (summary ``count_visible`` false:
  a stock V1 log without /metrics scrapes); exit code NOT_VISIBLE, not FAIL_ON.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import ExitCode, UsageError

_RE = re.compile(r"^\s*(any|unknown|count|rate)\s*(?:(>=|>)\s*([0-9.]+%?))?\s*$")


@dataclass(frozen=True)
class Condition:
    what: str
    op: str | None = None
    value: float | None = None
    text: str = ""

    def holds(self, summary: dict) -> bool:
        if self.what == "any":
            return (summary["events"] or 0) > 0
        if self.what == "unknown":
            return summary.get("count_visible") is False
        if self.what == "count":
            actual = float(summary["events"] or 0)
        else:
            if summary.get("preemption_rate") is None:
                return False
            actual = float(summary["preemption_rate"])
        assert self.value is not None
        return actual > self.value if self.op == ">" else actual >= self.value


def parse(items: list[str] | None) -> list[Condition]:
    out = []
    for item in items or []:
        m = _RE.match(item)
        if (
            not m
            or (m.group(1) in ("count", "rate") and m.group(2) is None)
            or (m.group(1) in ("any", "unknown") and m.group(2))
        ):
            raise UsageError(
                f"--fail-on {item!r} is not a condition", hint="use any, unknown, count>N or rate>X (e.g. rate>5%)"
            )
        what, op, raw = m.groups()
        value = None
        if raw is not None:
            try:
                value = float(raw.rstrip("%"))
            except ValueError:
                raise UsageError(f"--fail-on {item!r}: {raw!r} is not a number") from None
            if raw.endswith("%"):
                value /= 100.0
        out.append(Condition(what, op, value, item.strip()))
    return out


def failed(conditions: list[Condition], summary: dict) -> list[str]:
    return [c.text for c in conditions if c.holds(summary)]


def outcome(conditions: list[Condition], summary: dict) -> tuple[int | None, list[str]]:
    """(exit code or None, stderr lines) for the conditions: FAIL_ON when a count condition holds,
    NOT_VISIBLE when ``unknown`` holds; a warning when a count condition cannot hold because the
    count is not visible, or a rate condition because no request count divides it. The lines are printed even with -q (they explain the exit code)."""

    lines: list[str] = []
    hit = [c for c in conditions if c.holds(summary)]
    if summary.get("count_visible") is False:
        vacuous = [c.text for c in conditions if c.what in ("any", "count", "rate")]
        if vacuous and not any(c.what == "unknown" for c in conditions):
            lines.append(
                f"preemptlog: warning: --fail-on {', '.join(vacuous)} cannot hold: the preemption count is not "
                "visible in this bundle (add --fail-on unknown to fail on that)"
            )
    elif summary.get("preemption_rate") is None:
        no_rate = [c.text for c in conditions if c.what == "rate"]
        if no_rate:
            lines.append(
                f"preemptlog: warning: --fail-on {', '.join(no_rate)} cannot hold: the bundle logs no received "
                "requests to divide the preemptions by (use count>N to gate on the count)"
            )
    counted = [c.text for c in hit if c.what != "unknown"]
    if counted:
        lines.append(f"preemptlog: --fail-on {', '.join(counted)}: condition met")
        return ExitCode.FAIL_ON, lines
    if hit:
        lines.append("preemptlog: --fail-on unknown: the preemption count is not visible in this bundle")
        return ExitCode.NOT_VISIBLE, lines
    return None, lines
