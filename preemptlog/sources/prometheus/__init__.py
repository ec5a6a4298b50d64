"""Prometheus ``/metrics`` scrapes and Prometheus HTTP API answers (docs/prometheus.md).

Why: on every stock vLLM V1 build from 0.11.1 to 0.34.0 (Python frontend) the log never prints
a preemption count (facts page section 3b item 7); the Prometheus counter
``vllm:num_preemptions_total`` is the only exact count.

Accepted inputs (recognised by content, see :func:`_sniff`):

- Prometheus text exposition (``curl -s host:8000/metrics > metrics-<time>.prom``)
  and OpenMetrics (``# EOF``, ``_created`` series, exemplars after ``#``);
- several scrapes in one file, split by any of these *separators*:
  a line ``# scrape <time>`` (also ``# scrape: <time>``, ``# scrape_time=<time>``, ``# scraped at <time>``),
  a line ``---`` optionally followed by a time, a bare time line (ISO 8601 as
  ``date -Is`` writes it, epoch seconds as ``date +%s`` writes it, or the
  default ``date`` output), ``# EOF``, and with no separator at all: the repeat
  of a ``# HELP``/``# TYPE`` line or of a series already seen (the next scrape
  began). Where there are separators they decide: from one to the next is one
  scrape, whatever it repeats (two servers' pages appended after one separator;
  a series read twice there keeps its largest value, with a note). A time on a
  separator line applies to the scrape that follows it;
- the JSON of Prometheus's HTTP API ``/api/v1/query_range`` (``matrix``) and
  ``/api/v1/query`` (``vector``), one answer per file or one per line;
- AIPerf ``server_metrics_export.jsonl`` records (:func:`_aiperf_parts`) and
  llm-d-benchmark scrape logs (``# Timestamp:`` / ``# Pod:`` headers);
- every spelling of a name (:func:`canonical_name`: ``vllm_x``, ``ray_vllm:x``);
  series of one engine that differ by other labels (ranks) take the largest
  value per scrape, never the sum.

Scrape time, first that exists: the sample's own timestamp (ms epoch in the
text format; seconds in OpenMetrics and JSON; told apart by magnitude), the
separator line's time, a timestamp in the file name (epoch seconds or
ISO 8601; single-scrape files only), the file mtime (the last scrape of the
file only); on standard input, which has neither name nor mtime, the moment
preemptlog read it (the last scrape was taken no later). Which one was used is an
assumption in the output, per file.

Counters (``vllm:num_preemptions_total``, prefix-cache queries/hits, the
``vllm:request_num_preemptions`` histogram) become per-interval increases
between consecutive samples of the same series (scope, engine, model); a
value that drops, or a changed ``_created``, is a counter reset and the new
value is the increase since the reset; with a new ``_created`` (a restart) it
counts from that ``_created``, never over the downtime. Either way what the run before
counted after its last scrape is not seen: a count across a reset is a lower bound
(events/reconcile.py), one run's count is exact. A counter's ``_created``
is its engine's start (``prom_preemptions.created``, reconcile.since_start). Preemption increases become
``interval`` events (ids ``<file>:<line>~i<k>``, JSON ``<file>:<line>:<col>~i<k>``,
the line of the later sample). A series read only once is a total without
timing: a counter fact (``counters["prometheus"]["counter_totals"]``), never
events.

Series scope: the folder of the file plus the ``instance`` label when present
(Prometheus API answers carry it), so single-scrape files of one server in one
folder form one series and scrapes of different hosts kept in different
folders do not mix.

Frames (schemas declared below): ``prom_samples`` (long), ``prom_series``
(wide, one row per scrape per engine), ``prom_preemptions`` (one row per pair
of consecutive counter samples, the basis of the events and of
reconcile.py).
"""

from __future__ import annotations

import re
from collections.abc import Hashable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import polars as pl

from ..meets import not_meeting
from ..registry import EngineStarts, SourceKind, register, register_samples

# Re-exported: the names other modules and the tests import from ``sources.prometheus``.
from .counters import PROM_PREEMPTIONS_SCHEMA, PROM_SAMPLES_SCHEMA, PROM_SERIES_SCHEMA, _combine, counter_events
from .jsonapi import _is_json, _parse_json
from .names import KIND, _FileData, canonical_name, created, mentions_engine, name_prefix_re
from .scrapetime import _parse_time_text, _place, file_name_time
from .text import _parse_text

if TYPE_CHECKING:
    from ...inputs.files import InputFile
    from ..registry import SourceOutput, TimeContext

__all__ = [
    "KIND",
    "PROM_PREEMPTIONS_SCHEMA",
    "PROM_SAMPLES_SCHEMA",
    "PROM_SERIES_SCHEMA",
    "SAMPLES",
    "PromParsed",
    "canonical_name",
    "counter_events",
    "parse",
]


def _sniff(head: str) -> int:
    """Beats the vllm-log kind (at most 50) on anything that looks like Prometheus data."""
    prefix_re = name_prefix_re()
    if re.search(r"^#[ \t]+(?:HELP|TYPE)[ \t]+" + prefix_re, head, re.M):
        return 90
    stripped = head.lstrip()
    if stripped.startswith(("{", "[")) and '"resultType"' in head:
        return 90 if mentions_engine(head) else 60
    if stripped.startswith("{") and '"timestamp_ns"' in head and '"metrics"' in head:
        return 90 if mentions_engine(head) else 60  # AIPerf server_metrics_export.jsonl
    if re.search(
        r"^" + prefix_re + r"[A-Za-z0-9_:]+(?:\{[^\n]*\})?[ \t]+[-+0-9.eENaIinf]+[ \t]*(?:[-0-9.eE+]+)?[ \t]*$",
        head,
        re.M,
    ):
        return 85
    if re.search(r"^# HELP [A-Za-z_:][\w:]* ", head, re.M) and re.search(r"^# TYPE [A-Za-z_:][\w:]* ", head, re.M):
        return 55  # a /metrics page whose vllm: part lies beyond the sniffed head
    return 0


@dataclass
class PromParsed:
    files: list[_FileData]

    def anchors(self) -> list[tuple[datetime, str]]:
        """Full timestamps (with a year) that are exact without knowing the zone."""
        out: list[tuple[datetime, str]] = []
        for fd in self.files:
            s = fd.samples
            if s.height and s.get_column("ts_us").null_count() < s.height:
                us = int(s.get_column("ts_us").min())  # type: ignore[arg-type]  # polars scalars are typed as every literal
                out.append((datetime.fromtimestamp(us / 1e6, UTC), f"a Prometheus sample time in {fd.file.display}"))
                continue
            for _, t in sorted(fd.sep_times.items()):  # the first scrape's (the dict is built in hash order)
                dt, zoned = _parse_time_text(t)
                if dt is not None and zoned:
                    out.append((dt.astimezone(UTC), f"a scrape separator time in {fd.file.display}"))
                    break
            else:
                dt, zoned, _ = file_name_time(fd.file)
                if dt is not None and zoned:
                    out.append((dt.astimezone(UTC), f"the file name of {fd.file.display}"))
        # A counter's _created (seconds since the epoch: exact, with a year) is its engine's start: a
        # year-less log whose server start it meets is of its year (a single reading whose only time is
        # the file's mtime, written long after, dates nothing). After the scrape times: they win a tie.
        names = list(created())
        for fd in self.files:
            s = fd.samples
            if not s.height:
                continue
            got = s.filter(pl.col("name").is_in(names) & pl.col("value").is_finite() & (pl.col("value") > 0))
            if got.height:
                first = float(got.get_column("value").min())  # type: ignore[arg-type]
                try:
                    when = datetime.fromtimestamp(first, UTC)
                except (OverflowError, OSError, ValueError):
                    continue
                out.append((when, f"a counter's engine start (_created) in {fd.file.display}"))
        return out

    def engine_starts(self) -> list[EngineStarts]:
        """Per file: every distinct ``_created`` value (its engine's start, exact) at its first line,
        and the file's exact reading times: every sample timestamp, zoned separator times, a zoned time in
        a single scrape's file name, else the last scrape's file mtime. A local time without a zone
        is no evidence here (it would be read in the zone under test). A file without ``_created``
        is listed too (no starts) when it has exact reading times of its own (not its mtime): a
        scrape read while the logs ran says they are read in the right zone."""
        names = list(created())
        out: list[EngineStarts] = []
        for fd in self.files:
            s = fd.samples
            if not s.height:
                continue
            got = (
                s.filter(pl.col("name").is_in(names) & pl.col("value").is_finite() & (pl.col("value") > 0))
                .group_by("value")
                .agg(pl.col("n").min())
                .sort("value")
            )
            starts: list[tuple[datetime, str]] = []
            for value, n in got.iter_rows():
                try:
                    starts.append((datetime.fromtimestamp(value, UTC), f"{fd.file.display}:{n}"))
                except (OverflowError, OSError, ValueError):
                    continue
            readings: list[datetime] = []
            # Every sample time (to the second), not only the first and last: an answer over the hours
            # around a log meets it by its middle samples.
            ts = (s.get_column("ts_us").drop_nulls() // 1_000_000).unique().sort()
            readings += [datetime.fromtimestamp(int(v), UTC) for v in ts.filter((ts > 0) & (ts < 253_402_300_800))]
            for t in fd.sep_times.values():
                dt, zoned = _parse_time_text(t)
                if dt is not None and zoned:
                    readings.append(dt.astimezone(UTC))
            if not readings and fd.n_scrapes == 1:
                ndt, nzoned, _ = file_name_time(fd.file)
                if ndt is not None and nzoned:
                    readings.append(ndt.astimezone(UTC))
            if not readings and not starts:
                continue  # a file mtime (a copy's, perhaps) says nothing of its own
            if not readings and (written := fd.file.written_at()) is not None:
                readings.append(datetime.fromtimestamp(written, UTC))
            out.append(EngineStarts(fd.file.display, tuple(starts), tuple(readings)))
        return out

    def resolve(self, ctx: TimeContext) -> SourceOutput:
        return self.combine(self.place(ctx))

    def place(self, ctx: TimeContext) -> SourceOutput:
        self._ctx = ctx
        return _place(self, ctx)

    def combine(self, placed: SourceOutput) -> SourceOutput:
        out = _combine(self, placed)
        # Scrapes on another clock (a zone) or of another day: said, never silently counted (meets.py).
        why = (
            "their gauges explain none of the log's preemptions, and their counter's increases (and the engine "
            "start it counts from) lie where the log has no line"
        )
        out.warnings.extend(not_meeting(out, getattr(self, "_ctx", None), "scrapes (and counter starts)", KIND, why))
        return out


def _parse_one(f: InputFile) -> _FileData:
    return _parse_json(f) if _is_json(f) else _parse_text(f)


def parse(files: list[InputFile]) -> PromParsed:
    return PromParsed([_parse_one(f) for f in files])


def _name_time_of(f: InputFile) -> Hashable | None:
    """What dates a file's one scrape when its content does not (``SourceKind.name_time``): the time in
    its name (or another of its names), read when neither a sample timestamp nor a separator line dates
    its scrape; a file of several scrapes is dated by its content, else its mtime (never its name)."""
    fd = _parse_one(replace(f, file_id=0))  # called before the bundle numbers its files
    s = fd.samples
    if fd.n_scrapes != 1 or not s.height or s.get_column("ts_us").null_count() < s.height:
        return None
    if _parse_time_text(fd.sep_times.get(0, ""))[0] is not None:
        return None
    dt, zoned, _ = file_name_time(f)
    return None if dt is None else (dt, zoned)


register(
    SourceKind(
        name=KIND,
        description="Prometheus /metrics scrapes (text, OpenMetrics) or Prometheus API query JSON with vllm: metrics",
        sniff=_sniff,
        parse=parse,
        # A text page's cut last line: text.py judges its sample (a value that may be cut is no reading);
        # a cut JSON line does not parse (jsonapi.py skips it, said).
        judges_last_line=True,
        # An untimed page is dated by its name: identical pages named by two times are two readings
        name_time=_name_time_of,
    )
)


# Sample inputs (tests/sources/test_samples.py): a whole scrape file each; ``expect`` names a frame and
# the fields of one of its rows, and the events the counter increases make.
SAMPLES: list[tuple[str, dict[str, Any]]] = [
    (
        "# scrape 2026-03-14T10:00:00Z\n"
        "# TYPE vllm:num_preemptions_total counter\n"
        'vllm:num_preemptions_total{engine="0",model_name="m"} 10.0\n'
        'vllm:num_requests_waiting{engine="0",model_name="m"} 3.0\n'
        'vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.97\n'
        "# scrape 2026-03-14T10:00:10Z\n"
        "# TYPE vllm:num_preemptions_total counter\n"
        'vllm:num_preemptions_total{engine="0",model_name="m"} 14.0\n'
        'vllm:num_requests_waiting{engine="0",model_name="m"} 5.0\n'
        'vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.99\n',
        {"frame": "prom_preemptions", "engine": "0", "increase": 4, "value": 14.0, "_events": 4},
    ),
    (
        "# scrape 2026-03-14T10:00:10Z\n"
        'vllm:num_requests_waiting{engine="0",model_name="m"} 5.0\n'
        'vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.99\n',
        {"frame": "prom_series", "engine": "0", "waiting": 5.0, "kv_usage": 99.0, "_events": 0},
    ),
    (
        '{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"__name__":'
        '"vllm:num_preemptions_total","engine":"0","model_name":"m"},"values":[[1773482400,"10"],'
        '[1773482410,"12"]]}]}}\n',
        {"frame": "prom_preemptions", "engine": "0", "increase": 2, "value": 12.0, "_events": 2},
    ),
    (
        '{"status":"success","data":{"resultType":"vector","result":[{"metric":{"__name__":'
        '"vllm:num_preemptions_total","engine":"0","model_name":"m"},"value":[1773483900.781,"422"]}]}}\n',
        # one reading: the preemptions since the engine's last start (reconcile.since_start), not placed in time
        {"frame": "prom_preemptions", "engine": "0", "value": 422.0, "_events": 422},
    ),
]


register_samples(KIND, SAMPLES)
