"""``--fail-on`` conditions for CI scripts.

Grammar (several conditions may be given; any one that holds fails the run):

- ``any``: at least one preemption event;
- ``count>N`` (also ``>=``): the number of events;
- ``rate>X`` (also ``>=``): preemptions per received request, ``X`` a fraction
  (``0.05``) or a percentage (``5%``); never holds when requests were not logged;
- ``unknown``: the bundle cannot show the count (summary ``count_visible`` false:
  a stock V1 log without /metrics scrapes), or one of its incidents cannot (a bundle of
  several servers: its total is not known then either), or a span of its log cannot (the
  counter's readings end before the log does, or begin after it, and the log cannot count:
  ``reconciliation.uncounted_spans``; the count is a lower bound); exit code NOT_VISIBLE, not FAIL_ON.

With ``--each`` every unit is judged on its own and :func:`decide` combines them with the
precedence of one run: FAIL_ON (a count condition holds in any unit) over NOT_VISIBLE.
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
            return summary.get("count_visible") is False or bool(uncounted(summary))
        if self.what == "count":
            actual = float(summary["events"] or 0)
        else:
            if summary.get("preemption_rate") is None:
                return False
            actual = float(summary["preemption_rate"])
        assert self.value is not None
        return actual > self.value if self.op == ">" else actual >= self.value


def uncounted(summary: dict) -> list[str]:
    """The spans of the log no source counts (``reconciliation.uncounted_spans``: before or after the
    counter's readings, where the log cannot count), in words: ``after 10:00:30 (engine 0: the log runs to
    10:05:40)``."""
    out = []
    for g in (summary.get("reconciliation") or {}).get("uncounted_spans") or []:
        who = f"engine {g['engine']}" + (f" of {g['server']}" if g.get("server") else "")
        if g["side"] == "after":
            out.append(f"after {_hms(g['from'])} ({who}: the log runs to {_hms(g['to'])})")
        else:
            out.append(f"before {_hms(g['to'])} ({who}: the log begins at {_hms(g['from'])})")
    return out


def _hms(t: str | None) -> str:
    return t[11:19] if t and len(t) >= 19 else (t or "?")


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


@dataclass(frozen=True)
class Judged:
    """What the conditions say of one analysis (a bundle, or one unit of ``--each``)."""

    met: tuple[str, ...] = ()  # the conditions on the count (any, count, rate) that hold
    # ``unknown`` holds: () when the analysis's own count is not visible, else the names of its
    # incidents whose counts are not visible (the bundle's total is then not known either); None: it does not.
    not_visible: tuple[str, ...] | None = None
    warnings: tuple[str, ...] = ()
    # ``unknown`` holds on spans of the log nothing counts (:func:`uncounted`), named (with the unit's name)
    uncounted: tuple[str, ...] = ()


def _names(names: list[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def judge(
    conditions: list[Condition],
    summary: dict,
    *,
    not_visible: list[str] | None = None,
    where: str | None = None,
    server: bool = True,
) -> Judged:
    """The conditions on one summary. ``not_visible``: the incidents of a bundle of several whose own
    counts are not visible (each analysed on its own, as the summary's one line each): ``unknown``
    holds then too, though the bundle counted the others. ``where``: the unit's name (``--each``),
    for the warnings. ``server=False``: a unit of ``--each`` that holds no server's log (dmon,
    records) beside units that do: it has no count of its own to hide (as such files are no
    incident's count in one run)."""

    hidden_words = (
        f"the preemption count of {where} is not visible"
        if where
        else "the preemption count is not visible in this bundle"
    )
    lines: list[str] = []
    whole = summary.get("count_visible") is False
    asked = any(c.what == "unknown" for c in conditions)
    if not server:  # no count of its own, nothing to warn of
        whole = False
    elif whole:
        vacuous = [c.text for c in conditions if c.what in ("any", "count", "rate")]
        if vacuous and not asked:
            lines.append(
                f"preemptlog: warning: --fail-on {', '.join(vacuous)} cannot hold: {hidden_words} "
                "(add --fail-on unknown to fail on that)"
            )
    elif summary.get("preemption_rate") is None:
        no_rate = [c.text for c in conditions if c.what == "rate"]
        if no_rate:
            lines.append(
                f"preemptlog: warning: --fail-on {', '.join(no_rate)} cannot hold: "
                + (f"{where} logs" if where else "the bundle logs")
                + " no received requests to divide the preemptions by (use count>N to gate on the count)"
            )
    met = tuple(c.text for c in conditions if c.what != "unknown" and c.holds(summary))
    quality = (summary.get("reconciliation") or {}).get("quality")
    if server and not whole and (quality == "lower bound" or not_visible):
        # the count is a lower bound (a server whose count is not visible beside counted ones: the
        # reconciliation's quality, or an incident of a bundle of several that cannot show its own; or
        # V0's sampled lines): a count condition that does not hold on it may hold on the true count
        short = [c.text for c in conditions if c.what in ("any", "count", "rate") and c.text not in met]
        if short:
            lines.append(
                f"preemptlog: warning: --fail-on {', '.join(short)} does not hold on "
                + (f"{where}'s" if where else "the bundle's")
                + f" {summary.get('events') or 0} preemption(s), a lower bound: the true count may be higher "
                + (
                    f"({_names(not_visible)}: count not visible)"
                    if not_visible and quality != "lower bound"
                    else "(-v: count per source)"
                )
            )
    hidden: tuple[str, ...] | None = None
    gaps: tuple[str, ...] = ()
    if asked and whole:
        hidden = ()
    elif asked and not_visible:
        hidden = tuple(not_visible)
    elif asked and server and (spans := uncounted(summary)):
        gaps = tuple(f"of {where} " + x if where else x for x in spans)
    return Judged(met, hidden, tuple(lines), gaps)


def decide(judged: list[tuple[str | None, Judged]]) -> tuple[int | None, list[str]]:
    """(exit code or None, stderr lines) of one analysis (name None) or of every unit of ``--each``
    (each named), with one precedence: FAIL_ON when a condition on the count holds in any, else
    NOT_VISIBLE when ``unknown`` holds in any; PARTIAL is the caller's, below both."""

    lines = [w for _, j in judged for w in j.warnings]
    met: dict[str, None] = {}
    where: dict[str, None] = {}
    for name, j in judged:
        met.update(dict.fromkeys(j.met))
        if j.met and name is not None:
            where[name] = None
    if met:
        at = f" (server {', '.join(where)})" if where else ""
        lines.append(f"preemptlog: --fail-on {', '.join(met)}: condition met{at}")
        return ExitCode.FAIL_ON, lines
    hidden: dict[str, None] = {}
    whole = False
    for name, j in judged:
        if j.not_visible is None:
            continue
        if j.not_visible:
            hidden.update(dict.fromkeys(j.not_visible))
        elif name is not None:
            hidden[name] = None
        else:
            whole = True
    gaps = [x for _, j in judged for x in j.uncounted]
    if whole:
        lines.append("preemptlog: --fail-on unknown: the preemption count is not visible in this bundle")
    elif hidden:
        total = ", so the bundle's total is not known either" if all(n is None for n, _ in judged) else ""
        lines.append(
            f"preemptlog: --fail-on unknown: the preemption count of {', '.join(hidden)} is not visible{total}"
        )
    elif gaps:
        lines.append(
            f"preemptlog: --fail-on unknown: the preemption count is not visible {'; '.join(gaps)}: nothing in the "
            "bundle counts there, so the count is a lower bound"
        )
    if whole or hidden or gaps:
        return ExitCode.NOT_VISIBLE, lines
    return None, lines


def outcome(
    conditions: list[Condition], summary: dict, *, not_visible: list[str] | None = None
) -> tuple[int | None, list[str]]:
    """(exit code or None, stderr lines) for the conditions: FAIL_ON when a count condition holds,
    NOT_VISIBLE when ``unknown`` holds (the count is not visible, or one incident's of a bundle of
    several: ``not_visible``); a warning when a count condition cannot hold because the count is not
    visible, or a rate condition because no request count divides it. The lines are printed even with
    -q (they explain the exit code)."""

    return decide([(None, judge(conditions, summary, not_visible=not_visible))])
