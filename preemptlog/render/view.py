"""What a command shows of an analysis: event filters and column selection.

Filters (``--since/--until``, ``--gate``, ``--request``, ``--kind``,
``--min-confidence``) apply *after* the analysis: evidence windows, verdicts and
fixes are computed on the whole bundle, then :func:`apply_filters` returns a view
of the Analysis whose events (and their verdict and evidence rows) are the ones
kept, with ``filters`` saying what was dropped (the summary prints it).

Columns (``--columns``, ``--wide``) are chosen on the event frame before it
reaches a formatter (render.event_rows honours ``Analysis.columns``), so every
format selects the same way.
"""

from __future__ import annotations

import dataclasses
import re
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import polars as pl

from .. import engines
from ..clock.timebase import zone_info
from ..errors import UsageError
from ..model.events import EVENT_KINDS, EVENTS_SCHEMA

if TYPE_CHECKING:
    from ..model.result import Analysis

CONFIDENCE = ("none", "low", "medium", "high")
GATES = ("G1-kv-space", "G2-batch-variance", "G3-queue-overflow", "G4-prefix-conflict", "undetermined")

# The default ndjson/csv row (docs/output.md "Event schema"): the public event columns (model.events) without
# the raw line, and the verdict's gate, sub-kind, rule and confidence. --wide (or -f json / parquet)
# gives every column.
COMPACT_COLUMNS = [
    *(c for c in EVENTS_SCHEMA if c != "raw"),
    "gate",
    "sub_kind",
    "rule",
    "confidence",
    "mechanism",  # vLLM's own mechanism, beside the gate
]


def parse_columns(text: str | None) -> list[str] | None:
    """``a,b,c`` (repeatable option values joined) -> names, in order, without duplicates."""
    if not text:
        return None
    out: list[str] = []
    for name in re.split(r"[,\s]+", text.strip()):
        if name and name not in out:
            out.append(name)
    if not out:
        raise UsageError("--columns is empty", hint="e.g. --columns event_id,time,request_id,gate")
    return out


def check_columns(wanted: list[str], available: list[str], *, what: str = "column") -> list[str]:
    unknown = [c for c in wanted if c not in available]
    if unknown:
        import difflib

        hints = []
        for c in unknown[:3]:
            near = difflib.get_close_matches(c, available, n=1)
            if near:
                hints.append(f"{c!r}: did you mean {near[0]!r}?")
        raise UsageError(
            f"--columns: unknown {what}(s) {', '.join(unknown)}",
            hint=("; ".join(hints) + "; " if hints else "")
            + "available: "
            + ", ".join(available[:40])
            + (" ..." if len(available) > 40 else ""),
        )
    return wanted


@dataclasses.dataclass
class Filters:
    since: str | None = None
    until: str | None = None
    gates: list[str] = dataclasses.field(default_factory=list)
    requests: list[str] = dataclasses.field(default_factory=list)
    kinds: list[str] = dataclasses.field(default_factory=list)
    min_confidence: str | None = None

    def active(self) -> bool:
        return bool(self.since or self.until or self.gates or self.requests or self.kinds or self.min_confidence)

    def text(self) -> str:
        parts = []
        if self.since:
            parts.append(f"--since {self.since}")
        if self.until:
            parts.append(f"--until {self.until}")
        parts += [f"--gate {g}" for g in self.gates]
        parts += [f"--request {r}" for r in self.requests]
        parts += [f"--kind {k}" for k in self.kinds]
        if self.min_confidence:
            parts.append(f"--min-confidence {self.min_confidence}")
        return " ".join(parts)


def split_kind_option(items: list[str] | None) -> tuple[list[str], list[str]]:
    """``--kind`` values: ``FILE=KIND`` overrides a file's kind; a bare event kind filters events."""
    overrides, kinds = [], []
    for item in items or []:
        if "=" in item:
            overrides.append(item)
            continue
        k = item.strip().lower()
        if k not in EVENT_KINDS:
            raise UsageError(
                f"--kind expects FILE=KIND or an event kind, got {item!r}",
                hint="event kinds: " + ", ".join(EVENT_KINDS) + "; --file-kind dmon.txt=dmon forces a file's kind",
            )
        kinds.append(k)
    return overrides, kinds


def _gate(value: str) -> str:
    """A gate as any output spells it: the id (``G1-kv-space``), the table's short form (``G1-kv``,
    ``G1``: the id cut at a hyphen) or the summary's words (``G1 KV space``)."""
    v = "-".join(value.strip().lower().split())
    for g in GATES:
        if v and (v == g.lower() or g.lower().startswith(v + "-")):
            return g
    raise UsageError(f"--gate {value!r} is not a gate", hint="one of " + ", ".join(GATES) + " (or G1..G4)")


def make_filters(*, since=None, until=None, gate=None, request=None, kinds=None, min_confidence=None) -> Filters:
    if min_confidence is not None and min_confidence.lower() not in CONFIDENCE:
        raise UsageError(f"--min-confidence {min_confidence!r}", hint="one of " + ", ".join(CONFIDENCE))
    for value, name in ((since, "--since"), (until, "--until")):
        if value is not None and not (_relative(value) is not None or _clock(value) or _iso(value, "UTC") is not None):
            raise UsageError(
                f"{name} {value!r} is not a time",
                hint="ISO 8601 (2026-11-29T23:58:20, with or without a zone), HH:MM[:SS] on the last line's day, "
                "or relative to the last line: -30m, -90s, -2h",
            )
    _check_window(since, until)
    return Filters(
        since=since,
        until=until,
        gates=[_gate(g) for g in gate or []],
        requests=list(request or []),
        kinds=list(kinds or []),
        min_confidence=min_confidence.lower() if min_confidence else None,
    )


def _window_error(since: str, until: str) -> UsageError:
    return UsageError(
        f"--since {since} is later than --until {until}: no event can be shown",
        hint="--since is the start of the window, --until its end",
    )


def _check_window(since: str | None, until: str | None) -> None:
    """``--since`` later than ``--until`` is a usage error, here when the two compare without the
    bundle (both relative, both HH:MM[:SS] on the same day, both ISO); else apply_filters checks."""
    if not since or not until:
        return
    rs, ru = _relative(since), _relative(until)
    if rs is not None and ru is not None:
        if rs < ru:  # -30m is later than -90m
            raise _window_error(since, until)
        return
    if _clock(since) and _clock(until):
        if _clock_seconds(since) > _clock_seconds(until):
            raise _window_error(since, until)
        return
    a, b = _iso(since, "UTC"), _iso(until, "UTC")
    if a is not None and b is not None and _has_zone(since) == _has_zone(until) and a > b:
        raise _window_error(since, until)


def _clock_seconds(text: str) -> float:
    parts = [float(x) for x in text.strip().split(":")]
    return parts[0] * 3600 + parts[1] * 60 + (parts[2] if len(parts) > 2 else 0.0)


def _has_zone(text: str) -> bool:
    try:
        return datetime.fromisoformat(text.strip().replace("Z", "+00:00")).tzinfo is not None
    except ValueError:
        return False


def _relative(text: str) -> float | None:
    m = re.fullmatch(r"\s*-(\d+(?:\.\d+)?)\s*(s|m|min|h|d)?\s*", text)
    if not m:
        return None
    return float(m.group(1)) * {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}[m.group(2) or "s"]


def _clock(text: str) -> bool:
    """HH:MM[:SS[.f]], a time of day (24:00 and 12:60 are none)."""
    m = re.fullmatch(r"\s*(\d{1,2}):(\d{2})(?::(\d{2})(\.\d+)?)?\s*", text)
    return m is not None and int(m[1]) < 24 and int(m[2]) < 60 and int(m[3] or 0) < 60


def _iso(text: str, tz: str) -> datetime | None:

    try:
        t = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=zone_info(tz))
    return t


def resolve_time(text: str, analysis: Analysis, last: datetime | None) -> datetime:
    """An absolute instant for a --since/--until value (relative ones count back from ``last``)."""

    rel = _relative(text)
    if rel is not None or _clock(text):
        if last is None:
            raise UsageError(f"{text!r} is relative to the last timed line, and the bundle has none")
        if rel is not None:
            try:
                return last - timedelta(seconds=rel)
            except OverflowError:  # further back than any date (-99999999d): from the start
                return datetime.min.replace(tzinfo=UTC)
        local = last.astimezone(zone_info(analysis.tz))
        parts = [float(x) for x in text.strip().split(":")]
        sec = parts[2] if len(parts) > 2 else 0.0
        day = local.replace(hour=int(parts[0]), minute=int(parts[1]), second=0, microsecond=0)
        return (day + timedelta(seconds=sec)).astimezone(UTC)  # 59.9999999 s rounds up, not past the field
    t = _iso(text, analysis.tz)
    assert t is not None  # checked by make_filters
    return t.astimezone(UTC)


def _last_line_time(analysis: Analysis) -> datetime | None:
    rec = analysis.records
    if rec.height and "time" in rec.columns:
        t = rec.get_column("time").max()
        if t is not None:
            return t
    ev = analysis.events
    return ev.get_column("time").max() if ev.height else None


def apply_filters(analysis: Analysis, f: Filters | None) -> Analysis:
    """A view of ``analysis`` holding only the events ``f`` keeps (verdicts and evidence follow)."""
    if f is None or not f.active():
        return analysis
    ev = analysis.events
    v = analysis.verdicts
    keep = ev.select("event_id", "time", "kind", "request_id")
    if v is not None and v.height:
        keep = keep.join(v.select("event_id", "gate", "confidence"), on="event_id", how="left", maintain_order="left")
    else:
        keep = keep.with_columns(gate=pl.lit(None, pl.String), confidence=pl.lit(None, pl.String))
    cond = pl.lit(True)
    last = _last_line_time(analysis)
    since = resolve_time(f.since, analysis, last) if f.since else None
    until = resolve_time(f.until, analysis, last) if f.until else None
    if f.since and f.until and since is not None and until is not None and since > until:
        raise _window_error(f.since, f.until)
    if since is not None:
        cond &= pl.col("time") >= pl.lit(since).dt.cast_time_unit("us")
    if until is not None:
        cond &= pl.col("time") <= pl.lit(until).dt.cast_time_unit("us")
    if f.gates:
        cond &= pl.col("gate").fill_null("undetermined").is_in(f.gates)
    if f.requests:
        cond &= pl.col("request_id").is_in(f.requests)
    if f.kinds:
        cond &= pl.col("kind").is_in(f.kinds)
    if f.min_confidence:
        rank = (
            pl.col("confidence")
            .fill_null("none")
            .replace_strict({c: i for i, c in enumerate(CONFIDENCE)}, default=0, return_dtype=pl.Int8)
        )
        cond &= rank >= CONFIDENCE.index(f.min_confidence)
    ids = keep.filter(cond.fill_null(False)).get_column("event_id")
    kept = ev.filter(pl.col("event_id").is_in(ids.implode()))
    view = dataclasses.replace(
        analysis,
        events=kept,
        verdicts=v.filter(pl.col("event_id").is_in(ids.implode())) if v is not None else None,
        evidence=(
            analysis.evidence.filter(pl.col("event_id").is_in(ids.implode())) if analysis.evidence is not None else None
        ),
        filters={"text": f.text(), "kept": kept.height, "total": ev.height},
    )
    return view


def filtered_headline(s: dict[str, Any]) -> str:
    """The first line of a filtered view's summary (``s``: render.summary of the view): how many
    are shown of how many, first (``0 of 5 preemptions shown (--min-confidence high)``), never a
    word that belongs to the whole bundle's count: the quality of a count of 0 (``(exact)``, a V0
    log's ``can miss up to 49``) and the pressure where none is shown are the bundle's, not the
    view's. Without a filter, the summary's own headline."""
    f = s.get("filters")
    h = str(s["headline"])
    if not f:
        return h
    kept, total = int(f["kept"]), int(f["total"])
    kinds = s.get("engine_kinds") or _input_engines(s) or {engines.DEFAULT: total}
    # not visible: no count to be a share of (the events shown are not a count of preemptions)
    what = engines.noun(kinds, total) if s.get("count_visible") else "event(s)"
    shown = f"{kept} of {total} {what} shown ({f['text']})"
    rec = s.get("reconciliation") or {}
    if rec.get("quality") == "capped" and int(rec.get("total") or 0) > total:  # the events are part of the count
        shown = (
            f"{kept} of {total} {what} shown ({f['text']}; {total} of the {rec['total']} counted are events, capped)"
        )
    if h.startswith(shown):  # said already (the summary's own headline, once it says it)
        return h
    if not s.get("count_visible"):
        return f"{shown}; {h}"
    if kept == 0:
        return shown
    lead = f"{kept} {engines.noun(kinds, kept)}"
    if h.startswith(lead):
        return shown + h[len(lead) :]
    return f"{shown}; {h}"


def _input_engines(s: dict[str, Any]) -> dict[str, int]:
    """The engines whose logs are among the inputs (a view that shows no event has no engine of its own)."""
    kinds = {str(x.get("kind")) for x in s.get("inputs") or []}
    return {e.name: 0 for e in engines.registered() if kinds & set(e.log_kinds)}


def with_columns(analysis: Analysis, columns: list[str] | None) -> Analysis:
    """A view of ``analysis`` whose event rows (render.event_rows) hold only ``columns``."""
    if columns is None:
        return analysis
    return dataclasses.replace(analysis, columns=list(columns))


def output_columns(fmt: str, columns: list[str] | None, wide: bool) -> list[str] | None:
    """The event columns a machine format writes: ``--columns``; else all with ``--wide`` and for
    json / parquet; else the compact set (ndjson, csv). None for the table (it has its own)."""
    if fmt == "table":
        return None
    if columns:
        return columns
    if wide or fmt in ("json", "parquet"):
        return None
    return list(COMPACT_COLUMNS)
