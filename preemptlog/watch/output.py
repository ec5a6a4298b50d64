"""What the watch says: one JSON object per line (``-f ndjson``), or lines for a person (``-f text``).

ndjson: every event is one line on standard output, flushed as it is written (a reader of the pipe
sees it at once), in the schema of docs/watch.md; notes (a log rotated, a records file found) go
to standard error. text: one permanent line per event; on a terminal, below them, one live status
line per server (running, waiting, KV-cache usage, preemptions per minute, state), redrawn in place;
notes are permanent lines too. Text from the server (an error's words) is made inert before it
reaches a terminal (outputs/safe.py).
"""

from __future__ import annotations

import json
import math
import shutil
import sys
from datetime import datetime
from typing import IO, Any, Protocol

from ..outputs.safe import neutralise

FORMATS = ("text", "ndjson")


class Output(Protocol):
    def event(self, obj: dict[str, Any]) -> None: ...

    def note(self, text: str) -> None: ...

    def status(self, rows: list[dict[str, Any]]) -> None: ...

    def close(self) -> None: ...


class NdjsonOutput:
    def __init__(self, out: IO[str] | None = None, err: IO[str] | None = None) -> None:
        self.out = out or sys.stdout
        self.err = err or sys.stderr

    def event(self, obj: dict[str, Any]) -> None:
        self.out.write(json.dumps(finite(obj), ensure_ascii=False, allow_nan=False) + "\n")
        self.out.flush()

    def note(self, text: str) -> None:
        self.err.write(f"preemptlog: watch: {neutralise(text)}\n")
        self.err.flush()

    def status(self, rows: list[dict[str, Any]]) -> None:
        pass  # status lines are events of their own (loop.py writes them every STATUS_S)

    def close(self) -> None:
        self.out.flush()


def finite(v: Any) -> Any:
    """``v`` with every NaN or infinite number made null: JSON has no such numbers (``jq`` rejects a
    line holding one), and a gauge that is not a number says nothing."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {k: finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [finite(x) for x in v]
    return v


def _hms(t: str | None) -> str:
    if not t:
        return "--:--:--"
    try:
        return datetime.fromisoformat(t).astimezone().strftime("%H:%M:%S")
    except ValueError:
        return t


def _num(v: Any, fmt: str = "{:g}") -> str:
    return "?" if v is None else fmt.format(v)


def text_line(obj: dict[str, Any]) -> str | None:
    """The permanent line of an event (None: not shown as a line, e.g. a status)."""
    ev, srv, at = obj.get("event"), obj.get("server", ""), _hms(obj.get("time"))
    if ev == "storm_start":
        kv = f", KV {obj['kv_usage']:.0f} %" if obj.get("kv_usage") is not None else ""
        wait = f", {obj['waiting']:g} waiting" if obj.get("waiting") is not None else ""
        return f"{at} {srv}: STORM: {obj['preemptions']} preemption(s) since {_hms(obj.get('baseline'))}{kv}{wait}"
    if ev == "storm_end":
        how = (
            " (cut: the watch stopped)"
            if obj.get("cut")
            else " (ended by a restart)"
            if obj.get("ended_by") == "restart"
            else ""
        )
        words = obj.get("cause") or obj.get("analysis_error") or ""
        fix = f"; top fix: {obj['fix']}" if obj.get("fix") else ""
        saved = f"saved in {obj['bundle']}" if obj.get("bundle") else f"not saved: {obj.get('bundle_error')}"
        return (
            f"{at} {srv}: storm over{how}: {obj['preemptions']} preemption(s) {_hms(obj.get('start'))}-"
            f"{_hms(obj.get('last_preemption'))}: {words}{fix}; {saved}"
        )
    if ev == "server_down":
        return f"{at} {srv}: DOWN: {obj.get('error')}"
    if ev == "server_up":
        return f"{at} {srv}: up again (down {obj.get('down_s', 0):.0f} s)"
    if ev == "restart":
        return f"{at} {srv}: RESTARTED: {obj.get('why')} (counter {_num(obj.get('counter_before'))} -> {_num(obj.get('counter_after'))})"
    if ev == "start":
        return f"{at} watching {', '.join(obj.get('servers') or [])} every {obj.get('every_s'):g} s; storms saved in {obj.get('out')}"
    if ev == "stop":
        return (
            f"{at} stopped ({obj.get('reason')}): {obj.get('storms', 0)} storm(s), "
            f"{obj.get('preemptions', 0)} preemption(s)"
        )
    return None


def status_text(r: dict[str, Any]) -> str:
    """``http://h:8000/metrics  STORM  running 16  waiting 30  KV 98 %  120/min  counter 242``."""
    state = str(r.get("state", "?"))
    if state == "down":
        return f"{r['server']}  down since {_hms(r.get('down_since'))}: {r.get('error') or ''}"
    if state == "starting":
        return f"{r['server']}  waiting for a first scrape"
    kv = "?" if r.get("kv_usage") is None else f"{r['kv_usage']:.0f} %"
    ppm = "?" if r.get("preemptions_per_min") is None else f"{r['preemptions_per_min']:.0f}"
    return (
        f"{r['server']}  {state.upper() if state == 'storm' else state}  running {_num(r.get('running'))}  "
        f"waiting {_num(r.get('waiting'))}  KV {kv}  {ppm} preemptions/min  counter {_num(r.get('counter'))}"
    )


class TextOutput:
    def __init__(self, out: IO[str] | None = None, *, live: bool | None = None) -> None:
        self.out = out or sys.stdout
        self.live = self.out.isatty() if live is None else live
        self.shown = 0  # status lines on the screen below the permanent ones
        self.rows: list[dict[str, Any]] = []

    def _clear(self) -> None:
        if self.shown:
            self.out.write(f"\x1b[{self.shown}F\x1b[J")
            self.shown = 0

    def _put(self, line: str) -> None:
        self._clear()
        self.out.write(neutralise(line) + "\n")
        self.out.flush()
        self._redraw()

    def event(self, obj: dict[str, Any]) -> None:
        line = text_line(obj)
        if line is not None:
            self._put(line)

    def note(self, text: str) -> None:
        self._put(f"note: {text}")

    def status(self, rows: list[dict[str, Any]]) -> None:
        if not self.live:
            return
        self.rows = rows
        self._clear()
        self._redraw()

    def _redraw(self) -> None:
        if not self.live or not self.rows:
            return
        width = max(20, shutil.get_terminal_size((100, 24)).columns - 1)
        for r in self.rows:
            self.out.write(neutralise(status_text(r))[:width] + "\n")
        self.shown = len(self.rows)
        self.out.flush()

    def close(self) -> None:
        self.out.flush()


def make(fmt: str) -> Output:
    return TextOutput() if fmt == "text" else NdjsonOutput()
