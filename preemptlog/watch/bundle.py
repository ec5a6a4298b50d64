"""Each storm saved as an incident folder that ``preemptlog analyze`` reads: written as the storm
goes, published in one rename when it is over.

While a storm is open its folder grows under ``<out>/.partial-<pid>/<name>/`` (the same file system,
so the publication is one ``rename``: a reader of ``<out>`` sees a whole incident or none):

- ``metrics-<epoch>.prom``: every scrape of the window, in capture's format (the first line the
  time the request was sent, the second capture's mark: the Prometheus source reads that time as
  recorded, capture/scrape.py), from the scrapes just before the storm (the last one is the
  baseline the first increase is counted from) to the one that closed it;
- the log (its own file name): the lines read from the first scrape of the window on;
- the plugin's records (their own file names): the storm's preemptions (see :func:`select_records`)
  and the other records of the window;
- ``capture.jsonl``: capture's session log (start, every gap in which scrapes failed, stop), which
  ``preemptlog analyze`` reports; the stop record holds the storm's facts;
- ``README.md``: how it was taken and what the analysis said.

Disk: one folder per storm and nothing else (no file grows between storms). Inside one, the log
stops at :data:`MAX_LOG_BYTES` and the records at :data:`MAX_RECORD_BYTES` (said in the README);
past :data:`MAX_SCRAPES` scrapes, only the scrapes whose counter moved and the last are kept (the
counter is cumulative, so the count between the kept ones stays exact). Leftovers of a watch that
was killed (``.partial-<pid>`` of a process that is gone) are removed at the next start.

:func:`analyse` runs the analysis (analysis.analyze, the options ``preemptlog analyze`` would use)
on the folder and returns the words ``analyze`` prints: the headline, its cause part, the top fix.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from ..analysis import analyze
from ..capture.scrape import MANIFEST, iso, mark
from ..errors import PreemptlogError
from ..inputs.workspace import Workspace
from ..model import VERSION
from ..model.result import AnalyzeOptions
from ..render.human import fix_brief
from .follow import Line
from .storms import Storm

MAX_LOG_BYTES = 256 << 20
MAX_RECORD_BYTES = 256 << 20
MAX_SCRAPES = 2000
PARTIAL = ".partial-"
GROUP_AT = ("preempt", "shares-victim-blocks")  # a preemption's records (capture/recorder.py write_preempt)


def slug(url: str) -> str:
    """``http://10.0.0.5:8000/metrics`` -> ``10.0.0.5-8000``: a server in a folder name."""
    m = re.match(r"^[a-z]+://([^/?#]+)", url)
    host = m.group(1) if m else url
    return re.sub(r"[^A-Za-z0-9.]+", "-", host).strip("-.") or "server"


def incident_name(url: str, start: float) -> str:
    return datetime.fromtimestamp(start, UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + slug(url)


def staging_root(out: Path) -> Path:
    return out / f"{PARTIAL}{os.getpid()}"


def clean_leftovers(out: Path) -> list[Path]:
    """Remove the staging folders of watches that are gone (killed before they could publish)."""
    removed = []
    for p in out.glob(f"{PARTIAL}*"):
        try:
            pid = int(p.name[len(PARTIAL) :])
        except ValueError:
            continue
        if pid == os.getpid() or _alive(pid):
            continue
        shutil.rmtree(p, ignore_errors=True)
        removed.append(p)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def record_time(obj: dict[str, Any]) -> float | None:
    """A record's time: the plugin's ``ts`` (epoch seconds) or an ISO ``time``."""
    ts = obj.get("ts")
    if isinstance(ts, (int, float)):
        return float(ts)
    t = obj.get("time")
    if isinstance(t, str):
        try:
            d = datetime.fromisoformat(t.replace("Z", "+00:00"))
        except ValueError:
            return None
        return (d if d.tzinfo else d.replace(tzinfo=UTC)).timestamp()
    return None


def _is_preempt(obj: dict[str, Any]) -> bool:
    return obj.get("type") == "event" and obj.get("action") == "preempt"


def _in_group(obj: dict[str, Any]) -> bool:
    return _is_preempt(obj) or obj.get("at") in GROUP_AT


@dataclass
class Incident:
    """One storm's folder while it is written (see the module docstring)."""

    out: Path
    server: str
    storm: Storm
    every: float
    quiet: float
    log: Path | None = None
    records: str | None = None
    name: str = ""
    dir: Path = field(default_factory=Path)
    scrapes: int = 0
    scrape_times: list[float] = field(default_factory=list)  # first and last only (see add_scrape)
    log_lines: int = 0
    log_bytes: int = 0
    log_cut: bool = False
    record_bytes: int = 0
    records_cut: bool = False
    failures: int = 0
    gaps: list[dict[str, Any]] = field(default_factory=list)
    gap: dict[str, Any] | None = None
    held: tuple[float, bytes, float | None] | None = None  # past MAX_SCRAPES: the latest scrape not written yet
    last_total: float | None = None
    _log_fh: IO[bytes] | None = None
    _raw: dict[str, IO[bytes]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.name = incident_name(self.server, self.storm.start)
        root = staging_root(self.out)
        self.dir = root / self.name
        k = 1
        while self.dir.exists() or (self.out / self.name).exists():
            k += 1
            self.name = f"{incident_name(self.server, self.storm.start)}-{k}"
            self.dir = root / self.name
        self.dir.mkdir(parents=True)
        (self.dir / ".records").mkdir()

    # -- while the storm is open --------------------------------------------------------------

    def add_scrape(self, t: float, body: bytes, total: float | None, took: float | None = None) -> None:
        """One scrape of the window. Past MAX_SCRAPES, a scrape whose counter did not move is held
        (only the latest: it is written when the next one moves, or at the end)."""
        moved = total != self.last_total
        self.last_total = total
        if self.scrapes >= MAX_SCRAPES and not moved:
            self.held = (t, body, took)
            return
        if self.held is not None:
            self._write_scrape(*self.held)
            self.held = None
        self._write_scrape(t, body, took)
        if self.gap is not None:
            self._close_gap(t)

    def _write_scrape(self, t: float, body: bytes, took: float | None = None) -> None:
        name = f"metrics-{int(t)}.prom"
        k = 0
        while (self.dir / name).exists():
            k += 1
            name = f"metrics-{int(t)}-{k}.prom"
        with open(self.dir / name, "wb") as fh:
            fh.write(f"# scrape {iso(t)}\n{mark(took)}\n".encode())
            fh.write(body if body.endswith(b"\n") or not body else body + b"\n")
        self.scrapes += 1
        if not self.scrape_times:
            self.scrape_times.append(t)
        self.scrape_times[1:] = [t]

    def fail(self, t: float, error: str | None) -> None:
        """A scrape that failed while the storm is open: a gap in capture.jsonl."""
        self.failures += 1
        if self.gap is None:
            self.gap = {"start": t, "failures": 0}
        self.gap["failures"] += 1
        self.gap["error"] = error

    def _close_gap(self, end: float) -> None:
        g = self.gap
        assert g is not None
        self.gaps.append(
            {
                "type": "gap",
                "start": iso(g["start"]),
                "end": iso(end),
                "url": self.server,
                "failures": g["failures"],
                "error": g.get("error"),
            }
        )
        self.gap = None

    def add_log(self, lines: Iterable[Line]) -> None:
        if self.log is None or self.log_cut:
            return
        for ln in lines:
            if self.log_bytes + len(ln.data) > MAX_LOG_BYTES:
                self.log_cut = True
                return
            if self._log_fh is None:  # opened at the first line: no empty log file in the folder
                self._log_fh = open(self.dir / self.log.name, "ab")  # noqa: SIM115 - open while the storm lasts
            self._log_fh.write(ln.data)
            self.log_bytes += len(ln.data)
            self.log_lines += 1

    def add_records(self, name: str, lines: Iterable[Line]) -> None:
        if self.records_cut:
            return
        base = os.path.basename(name)
        for ln in lines:
            if self.record_bytes + len(ln.data) > MAX_RECORD_BYTES:
                self.records_cut = True
                return
            fh = self._raw.get(base)
            if fh is None:
                fh = self._raw[base] = open(self.dir / ".records" / base, "ab")  # noqa: SIM115
            fh.write(ln.data)
            self.record_bytes += len(ln.data)

    def flush(self) -> None:
        for f in [self._log_fh, *self._raw.values()]:
            if f is not None:
                f.flush()

    # -- at the end -----------------------------------------------------------------------------

    def finish(self) -> dict[str, Any]:
        """Close the files, keep the storm's records, write capture.jsonl: the folder is complete
        (but for the README). Returns the facts the README and the storm_end line report."""
        s = self.storm
        end = s.end if s.end is not None else time.time()
        if self.held is not None:
            self._write_scrape(*self.held)
            self.held = None
        if self.gap is not None:
            self._close_gap(end)
        for f in [self._log_fh, *self._raw.values()]:
            if f is not None:
                f.close()
        self._log_fh = None
        raw = {name: self.dir / ".records" / name for name in self._raw}
        self._raw = {}
        window = self.scrape_times[0] if self.scrape_times else s.start
        kept = select_records(raw, self.dir, s.preemptions, s.last_increase, window, end)
        shutil.rmtree(self.dir / ".records", ignore_errors=True)
        facts = {
            "server": self.server,
            "start": iso(s.start),
            "end": iso(end),
            "baseline": iso(s.baseline_t) if s.baseline_t is not None else None,
            "last_increase": iso(s.last_increase),
            "preemptions": s.preemptions,
            "counter_start": s.counter_start,
            "counter_end": s.counter_end,
            "at_restart": s.at_restart,
            "ended_by": s.ended_by,
            "cut": s.cut,
            "scrapes": self.scrapes,
            "failures": self.failures,
            "gaps": len(self.gaps),
            "log": str(self.log) if self.log else None,
            "log_lines": self.log_lines,
            "log_bytes": self.log_bytes,
            "log_cut": self.log_cut,
            "records": kept,
            "records_cut": self.records_cut,
            "window_start": iso(window),
        }
        reason = {
            "quiet": f"storm over: {self.quiet:g} s without an increase",
            "restart": "the server restarted",
            "stop": "cut: the watch stopped",
        }.get(s.ended_by or "", s.ended_by or "")
        rows: list[dict[str, Any]] = [
            {
                "type": "start",
                "time": iso(window),
                "url": self.server,
                "every_s": self.every,
                "log": str(self.log) if self.log else None,
                "by": "preemptlog watch",
            },
            *self.gaps,
            {
                "type": "stop",
                "time": iso(end),
                "reason": reason,
                "scrapes": self.scrapes,
                "failures": self.failures,
                "gaps": len(self.gaps),
                "log_bytes": self.log_bytes,
                "storm": facts,
            },
        ]
        with open(self.dir / MANIFEST, "w", encoding="utf-8") as fh:
            for r in rows:
                fh.write(json.dumps({"preemptlog_capture": 1, **r}) + "\n")
        return facts

    def publish(self, facts: dict[str, Any], words: dict[str, Any], how: str) -> Path:
        """Write the README and move the folder to ``<out>/<name>`` in one rename."""
        (self.dir / "README.md").write_text(readme(self.name, facts, words, how), encoding="utf-8")
        final = self.out / self.name
        k = 1
        while final.exists():  # another watch's incident of the same second and server
            k += 1
            final = self.out / f"{self.name}-{k}"
        os.rename(self.dir, final)
        try:
            self.dir.parent.rmdir()  # the staging root, when it holds nothing else
        except OSError:
            pass
        return final

    def discard(self) -> None:
        for f in [self._log_fh, *self._raw.values()]:
            if f is not None:
                f.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def select_records(
    raw: dict[str, Path], into: Path, n: int, last_increase: float, window: float, end: float
) -> dict[str, Any]:
    """Write the storm's records into ``into``: per source file, the preemptions the counter counted
    in the storm and the other records of the window. vLLM counts a preemption when the preempted
    request is next reported, so the counter lags the records: the storm's ``n`` preemptions are the
    ``n`` latest preempt records at or before the scrape that showed its last increase (one may be
    stamped just before the baseline scrape; one stamped after that scrape is not counted yet). A
    preemption's step and table records go with it; the other records (arrivals, finishes, steps)
    are kept from the window's start (or the earliest kept preemption) to the storm's end."""
    stamps: list[float] = []
    bad = 0
    for path in raw.values():
        with open(path, "rb") as fh:
            for line in fh:
                obj = _record(line)
                if obj is None:
                    continue
                t = record_time(obj)
                if t is not None and _is_preempt(obj) and t <= last_increase + 0.5:
                    stamps.append(t)
    stamps.sort()
    chosen = set(stamps[-n:]) if n > 0 else set()
    lo = min(min(chosen, default=window), window)
    kept: dict[str, int] = {}
    preempts = 0
    for name, path in raw.items():
        count = 0
        with open(path, "rb") as src, open(into / name, "wb") as dst:
            for line in src:
                obj = _record(line)
                if obj is None:
                    bad += 1
                    continue
                t = record_time(obj)
                if t is None:
                    bad += 1
                    continue
                if _in_group(obj):
                    keep = t in chosen
                    preempts += 1 if keep and _is_preempt(obj) else 0
                else:
                    keep = lo <= t <= end
                if keep:
                    dst.write(line if line.endswith(b"\n") else line + b"\n")
                    count += 1
        if count:
            kept[name] = count
        else:
            (into / name).unlink()
    return {"files": kept, "preemptions": preempts, "skipped": bad}


def _record(line: bytes) -> dict[str, Any] | None:
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def analyse(path: Path, options: AnalyzeOptions, *, debug: bool = False) -> dict[str, Any]:
    """What ``preemptlog analyze <path>`` says, in its own words: the headline (``cause``: its part
    after the count), the top fix as analyze prints it (``Top fix: ...``) or why there is none."""
    try:
        with Workspace() as ws:
            a = analyze([str(path)], options, workspace=ws)
            s = a.summary()
            partial = bool(a.partial)
    except PreemptlogError as exc:
        return {"error": exc.one_line()}
    except Exception as exc:
        if debug:
            raise
        return {"error": f"internal error: {type(exc).__name__}: {exc} (run with --debug for the traceback)"}
    headline = str(s["headline"])
    fixes = s.get("fixes") or []
    fix = fix_brief(fixes[0]) if fixes else None
    return {
        "events": s["events"],
        "count_visible": s["count_visible"],
        "headline": headline,
        "cause": headline.split(": ", 1)[1] if ": " in headline else headline,
        "fix": fix,
        "fix_none_why": None if fix else why_no_fix(s),
        "warnings": list(s["warnings"]),
        "requests_received": s["requests_received"],
        "preemption_rate": s["preemption_rate"],
        "partial": partial,
    }


def why_no_fix(s: dict[str, Any]) -> str:
    """Why analyze ranks no change for this bundle, in a few words."""
    if s.get("fixes") is None:
        return "no rules were loaded"
    if not s.get("count_visible"):
        return "the preemption count is not visible in the bundle"
    if not s.get("events"):
        return "the bundle holds no preemption"
    dropped = s.get("fixes_dropped") or []
    if dropped:
        parts = [f"{d.get('id')}: {d.get('why')}" for d in dropped[:2]]
        more = f" and {len(dropped) - 2} more" if len(dropped) > 2 else ""
        return "every change was dropped (" + "; ".join(parts) + more + ")"
    if s.get("to_know_more_line"):
        return f"no change in the server's options addresses these preemptions; {s['to_know_more_line']}"
    return "no change in the server's options addresses these preemptions"


def readme(name: str, facts: dict[str, Any], words: dict[str, Any], how: str) -> str:
    """The incident's README: how it was taken, what is in it, what analyze said."""
    rec = facts.get("records") or {}
    lines = [
        f"# Preemption storm on {facts['server']}",
        "",
        f"{facts['preemptions']} preemption(s) from {facts['start']} to {facts['last_increase']} (the scrapes that "
        f"showed the first and the last increase of vllm:num_preemptions_total), "
        + {
            "quiet": f"over at {facts['end']}.",
            "restart": f"ended at {facts['end']} by a restart of the server.",
            "stop": f"cut at {facts['end']}: the watch stopped while it lasted.",
        }.get(str(facts.get("ended_by")), f"ended at {facts['end']}."),
        "",
        f"Saved on its own by `preemptlog watch` (preemptlog {VERSION}): {how}",
        "",
        "## What is here",
        "",
        f"- `metrics-*.prom`: {facts['scrapes']} scrape(s) of `{facts['server']}` from {facts['window_start']}, each "
        "headed by the time the request was sent; the first is the baseline the count starts from"
        + (
            " (the counter restarted at 0: the storm opened at the restarted server's first reading)"
            if facts.get("at_restart")
            else ""
        )
        + f"; counter {facts['counter_start']:g} -> {facts['counter_end']:g}.",
    ]
    if facts.get("log"):
        lines.append(
            f"- `{Path(facts['log']).name}`: {facts['log_lines']} line(s) ({facts['log_bytes']} bytes) read from "
            f"`{facts['log']}` from the first scrape of the window to the end"
            + (" (stopped at the size limit)" if facts.get("log_cut") else "")
            + "."
        )
    if rec.get("files"):
        files = ", ".join(f"`{n}` ({c})" for n, c in sorted(rec["files"].items()))
        lines.append(
            f"- records of preemptlog's vLLM plugin: {files}: the {rec['preemptions']} preemption(s) the counter "
            "counted in the storm (it counts one when the request is next reported, so the latest ones at or before "
            "the last increase) and the other records of the window"
            + (" (stopped at the size limit)" if facts.get("records_cut") else "")
            + "."
        )
    lines.append(
        f"- `{MANIFEST}`: the session (start, {facts['gaps']} gap(s) in which scrapes failed, stop with these facts)."
    )
    lines += ["", "## What `preemptlog analyze` says", ""]
    if words.get("error"):
        lines.append(f"The analysis failed: {words['error']}")
    else:
        lines.append(str(words.get("headline")))
        lines.append("")
        lines.append(f"Top fix: {words['fix']}" if words.get("fix") else f"No fix: {words.get('fix_none_why')}")
    lines += ["", f"Again, in full: `preemptlog analyze {name}`", ""]
    return "\n".join(lines)
