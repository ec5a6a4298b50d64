"""``capture.jsonl``: the session log ``preemptlog capture`` writes next to its scrapes.

One JSON object per line with ``"preemptlog_capture": 1`` and a ``type``: ``start`` (time, url,
every_s, log), ``gap`` (start, end, url, failures, error: a span in which every scrape failed),
``stop`` (time, reason, counts). What the analysis gets from it: each gap is a warning (the
metrics are missing for that span, so the run is PARTIAL) and the session a note. The file holds a
handful of lines (one per gap), so it is read with ``json`` line by line.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .registry import SourceKind, SourceOutput, TimeContext, register, register_samples

if TYPE_CHECKING:
    from ..inputs.files import InputFile

KIND = "capture"
MARK = '"preemptlog_capture"'


def _sniff(head: str) -> int:
    lines = [ln for ln in head.splitlines()[:50] if ln.strip()]
    if lines and all(ln.lstrip().startswith("{") and MARK in ln for ln in lines[: min(len(lines), 5)]):
        return 90
    return 0


class CaptureParsed:
    def __init__(self, files: list[InputFile]) -> None:
        self.items: list[tuple[InputFile, list[dict[str, Any]], int]] = []
        for f in files:
            rows, bad = [], 0
            with open(f.path, encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    if not line.strip():
                        continue
                    try:
                        obj = json.loads(line)
                    except ValueError:
                        bad += 1
                        continue
                    if isinstance(obj, dict) and obj.get("preemptlog_capture") and isinstance(obj.get("type"), str):
                        rows.append(obj)
                    else:
                        bad += 1
            self.items.append((f, rows, bad))

    def anchors(self) -> list[tuple[datetime, str]]:
        out = []
        for f, rows, _ in self.items:
            for r in rows:
                if r["type"] == "start" and isinstance(r.get("time"), str):
                    try:
                        out.append((datetime.fromisoformat(r["time"]), f"capture session in {f.display}"))
                    except ValueError:
                        pass
        return out

    def resolve(self, ctx: TimeContext) -> SourceOutput:
        out = SourceOutput()
        for f, rows, bad in self.items:
            if bad:
                out.warnings.append(f"{f.display}: {bad} line(s) are not capture records: skipped")
                out.partial = True
            gaps = [r for r in rows if r["type"] == "gap"]
            start = next((r for r in rows if r["type"] == "start"), None)
            stop = next((r for r in reversed(rows) if r["type"] == "stop"), None)
            if start is not None:
                what = f"{start.get('url')} every {start.get('every_s')} s" if start.get("url") else "no /metrics"
                if start.get("log"):
                    what += f", following {start['log']}"
                span = f"from {start.get('time')}" + (
                    f" to {stop.get('time')}" if stop else " (no stop record: still running or killed)"
                )
                counts = f": {stop.get('scrapes')} scrape(s), {stop.get('failures')} failed" if stop else ""
                out.notes.append(f"capture session ({f.display}): {what} {span}{counts}")
            for n, g in enumerate(gaps, 1):
                out.warnings.append(
                    f"{f.display}: capture gap {n}: no /metrics scrape of {g.get('url')} from {g.get('start')} to "
                    f"{g.get('end')} ({g.get('failures')} failed attempt(s), last: {g.get('error')}); counts and "
                    "gauges are missing in that span"
                )
                out.partial = True
        out.counters["capture"] = [
            {"file": f.display, "gaps": sum(1 for r in rows if r["type"] == "gap")} for f, rows, _ in self.items
        ]
        return out


def _parse(files: list[InputFile]) -> CaptureParsed:
    return CaptureParsed(files)


register(
    SourceKind(name=KIND, description="preemptlog capture session log (capture.jsonl)", sniff=_sniff, parse=_parse)
)

SAMPLES: list[tuple[str, dict[str, Any]]] = [
    (
        '{"preemptlog_capture": 1, "type": "start", "time": "2026-12-01T10:00:00.000+00:00", '
        '"url": "http://127.0.0.1:8000/metrics", "every_s": 10.0, "log": null}',
        {"notes": 1},
    ),
    (
        '{"preemptlog_capture": 1, "type": "gap", "start": "2026-12-01T10:00:10.000+00:00", '
        '"end": "2026-12-01T10:00:40.000+00:00", "url": "http://127.0.0.1:8000/metrics", "failures": 2, '
        '"error": "Connection refused"}',
        {"warnings": 1},
    ),
]

register_samples(KIND, SAMPLES)
