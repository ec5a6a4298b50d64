"""One preemption count from several sources, without counting anything twice (docs/prometheus.md).

Sources that can count the same preemptions:

- the Prometheus counter ``vllm:num_preemptions_total`` (sources/prometheus/):
  exact in every version; increases between consecutive scrapes;
- the log's V1 ``Preemptions: N`` fields (builds with the fix; kind ``interval``);
- the log's V0 warnings (kind ``logged``, 1 in 50) and the counts reconstructed
  from ``total_num_cumulative_preemption`` (kind ``reconstructed``): a lower
  bound, up to 49 per counter run are invisible;
- per-preemption lines (kind ``marker``: patched schedulers, hooks);
- block-table ``preempt`` records: any frame in ``Analysis.frames`` with
  columns ``time``, ``request_id`` and ``action`` (rows with action
  ``preempt``) or named ``*preempt*`` with ``time`` and ``request_id``.

Rule (per engine label, of its server's folder where the bundle keeps servers apart (:func:`_server_keys`);
events with no engine count as engine 0):

1. Inside the Prometheus scrape window (first to last timed scrape of the
   engine) the counter is authoritative. The log's *count* events
   (``interval``, ``reconstructed``) there are removed from the events frame;
   their number stays in the report. Unless the log's counts *agree* with the
   counter (:func:`_log_timing`, agree.py): the engine has one counter series,
   timed, without a reset, its scrape intervals end to end; no log count with
   preemptions straddles the window's edge (its inside share is an estimate) or
   lacks its interval, none is capped; no block-table records; an aggregated
   (engine ``all``, the Rust frontend's) count only against a counter of one
   engine, with no per-engine count beside it; and the log's count and per-preemption events in the
   window can be placed, each inside its own interval, so that every scrape
   interval receives exactly the counter's increase there (so the totals are
   equal: V0's ``reconstructed`` lower bound only when it is the counter's
   exactly). Then the log's events stand in that engine's window (its ~10 s
   intervals are finer in time than the scrapes') and the counter makes none
   there: the same count, the log's timing (said in a note, the rule, the two
   sources' notes and ``log_timing``). Where they do not agree, the counter's
   intervals stand (a disagreement listed as before; counts that add up but do
   not fit the scrape intervals, a clock offset, in a note).
2. Per-preemption events (``logged``, ``marker``) are always kept: they carry a
   request id and an exact time. In a scrape interval that holds n of them and
   a counter increase of D, the events frame gets max(0, D - n) counter events
   (so the interval's total is D, or n when n > D, which is reported).
3. Outside the window, the log's own events stand.

So ``total`` (= the events frame's height) never holds the same preemption
twice: where the log's counts agree, each scrape interval's increase is matched one to one
with the log's preemptions placed in it, and only the log's are events; its total is the
counter's increase, as under the counter's rule (where every per-preemption line fits its scrape
interval, max(0, D - n) + n = D). Block-table ``preempt`` records (:func:`records_vs_counts`, the last step of
:func:`event_set`; the rule in recordmatch.py) are the events of kind ``record`` over the span
each engine's records cover, and every count there is a cross-check matched against them with
the lag allowed (vLLM counts a preemption when the request is next reported); ``total`` counts
them. For an engine without records, a counter's first reading (a single ``curl /metrics`` taken
after the incident, or the first of a scrape series) counts the preemptions since the engine
started (:func:`since_start`): when the bundle's log shows that start before the reading, what
the log's own events do not already hold of that count becomes events not placed in time
(``time`` null, ``time_precision`` ``unplaced``, the interval from the start to the reading), so
the count is exact; without the start, the reading still counts (since the engine's last start,
which is not in the bundle). A reading that repeats the last reading of the same counter in
another folder is counted once. Disagreements are listed, not resolved away.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from datetime import timedelta
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import polars as pl

from .. import engines
from ..clock.timebase import iso
from ..model import events as ev_mod
from ..model.events import spread_interval
from ..model.places import server_homes
from ..sources import LOG_KINDS
from ..sources.prometheus import counter_events
from .agree import Item, fits
from .overlap import merge
from .pressure import DEFAULT_CEILING, log_capability
from .recordmatch import (
    CLOCK_SLACK_S,
    ServerKeys,
    check_text,
    count_groups,
    coverage,
    cross_check,
    finishes,
    record_events,
    records_as_events,
)
from .scopes import other_servers
from .servers import real_starts

if TYPE_CHECKING:
    from ..model.result import AnalysisView
    from .pressure import LogCapability

COUNT_KINDS = ("interval", "reconstructed")
SWAP_RISES = "log V0 stats lines (rises of Swapped: N reqs)"
PROM_COUNTER = "prometheus counter (vllm:num_preemptions_total)"


def _counter_name(r: dict[str, Any]) -> str:
    """The counter a reading row read, by its own metric name (its sample line's), else the words."""
    m = re.match(r"([^{\s]+)", str(r.get("raw") or ""))
    return m.group(1) if m else "the preemption counter"


def _noun_of(r: dict[str, Any]) -> str:
    """What the engine of a reading row calls its events, plural ("preemption(s)", SGLang's "retraction(s)")."""
    return f"{(engines.find(r.get('engine_kind')) or engines.default()).noun}(s)"


PROM_SINGLE = "prometheus counter, single reading"
PROM_BASELINE = "prometheus counter, baseline reading (the engine started before the log)"
PER_EVENT_KINDS = ("logged", "marker", "record")
LOG_FIELDS = "log 'Preemptions: N' stats fields"


@dataclass(frozen=True)
class EventSet:
    """The event set, decided here and only here (see the module docstring), and what deciding it noted."""

    events: pl.DataFrame
    overlap: dict[str, Any]  # counters["overlap"]: overlap.merge's report
    reconciliation: dict[str, Any]  # counters["reconciliation"]: the report of :func:`reconcile`
    notes: tuple[str, ...] = ()
    # the analysis's frames, counters and configuration without other servers' counter series (scopes.py)
    frames: dict[str, pl.DataFrame] | None = None
    counters: dict[str, Any] | None = None
    config: pl.DataFrame | None = None


def event_set(a: AnalysisView, parts: list[pl.DataFrame]) -> EventSet:
    """The event set from every source's partial event frames: combined (events.combine), marker
    lines merged with the counts they repeat (overlap.merge), counts reconciled across sources and
    block-table preempt records used as events where they are the count (:func:`reconcile`).

    ``a`` gives the rest of the analysis so far (bundle, stats, config, records, frames, counters,
    tz); its ``events`` are not read.
    """

    # Counter series of servers whose log is not the bundle's: neither counted nor judged (scopes.py).
    others = other_servers(a, parts)
    a, parts = others.view, others.parts
    combined = ev_mod.combine(parts)
    notes: list[str] = list(others.notes)
    # Marker lines and counters in the same log describe the same preemptions: once each.
    merged, overlap = merge(combined)
    if overlap["markers_duplicating_warnings"] or overlap["count_events_replaced_by_lines"]:
        notes.append(
            f"PREEMPTED marker lines and counters in the same log: {overlap['markers_duplicating_warnings']} "
            f"marker(s) repeated a V0 warning and were merged into it; {overlap['count_events_replaced_by_lines']} "
            "counted event(s) were replaced by the marker lines that show them (each preemption counted once)"
        )
    draft = dataclasses.replace(a, events=merged)  # type: ignore[type-var]
    cap = log_capability(draft)
    events, report, rec_notes = reconcile(draft, cap)
    if others.found:
        report["other_servers"] = others.found
    return EventSet(
        events=events,
        overlap=overlap,
        reconciliation=report,
        notes=tuple(notes + rec_notes),
        frames=dict(a.frames),
        counters=dict(a.counters),
        config=a.config,
    )


def _sources_of(a: AnalysisView, kind: str) -> list[str]:
    return [f.display for f in a.bundle.of_kind(kind)]


def per_request_records(frames: dict[str, pl.DataFrame]) -> dict[str, pl.DataFrame]:
    """Block-table style preempt records found among the source frames (name -> rows)."""
    out = {}
    for name, df in frames.items():
        if name.startswith("prom_") or name == "pressure_intervals" or df is None:
            continue
        cols = set(df.columns)
        if {"time", "request_id", "action"} <= cols:
            rows = df.filter(pl.col("action") == "preempt")
        elif "preempt" in name.lower() and {"time", "request_id"} <= cols:
            rows = df
        else:
            continue
        if rows.height:
            out[name] = rows
    return out


def reconcile(a: AnalysisView, cap: LogCapability) -> tuple[pl.DataFrame, dict[str, Any], list[str]]:
    """The events of ``a`` with counts reconciled across sources: (events, report, notes)."""

    tz = a.tz
    ev = a.events
    ev0 = ev  # before any rule: each count source on its own, for the cross-checks against records
    prom_src = _sources_of(a, "prometheus")
    is_prom = pl.col("source").is_in(prom_src)
    eng = pl.col("engine").fill_null("0")
    pairs = a.frames.get("prom_preemptions")
    if pairs is None:
        pairs = pl.DataFrame()
    # the key a counter series meets a log's events by: the engine, of its server's folder (_server_keys)
    ekey, keyed, ehome = _server_keys(ev, pairs, [f.display for f in a.bundle.files if f.kind in LOG_KINDS])
    timed = (
        keyed.filter(pl.col("increase").is_not_null() & pl.col("start").is_not_null() & pl.col("end").is_not_null())
        if pairs.height
        else pairs
    )
    disagreements: list[str] = []
    notes: list[str] = []
    sources: list[dict[str, Any]] = []
    orig_kinds = _kind_counts(ev, ~is_prom) if ev.height else {}

    dropped_by_engine: dict[str, dict[str, int]] = {}
    surplus_rows: list[dict[str, Any]] = []
    made_from = keyed  # the pairs the counter's events are made from (less the per-preemption lines below)
    by_log: dict[str, LogTiming] = {}  # engines whose log counts agree with the counter: their timing kept
    if timed.height and ev.height:
        win = timed.group_by("_ekey").agg(pl.col("start").min().alias("_w0"), pl.col("end").max().alias("_w1"))
        ev = ev.with_columns(_eng=ekey).join(win, left_on="_eng", right_on="_ekey", how="left", maintain_order="left")
        # engine "all" (the Rust frontend's line sums every engine): the window of its server's counters
        homes = timed.group_by("_home").agg(pl.col("start").min().alias("_hw0"), pl.col("end").max().alias("_hw1"))
        ev = ev.with_columns(_home=_home_of(pl.col("_eng"))).join(homes, on="_home", how="left", maintain_order="left")
        ev = ev.with_columns(
            _w0=pl.when(pl.col("_home").is_not_null()).then(pl.col("_hw0")).otherwise(pl.col("_w0")),
            _w1=pl.when(pl.col("_home").is_not_null()).then(pl.col("_hw1")).otherwise(pl.col("_w1")),
        ).drop("_home", "_hw0", "_hw1")
        # Where an engine's log counts agree with its counter, scrape interval by scrape interval, the
        # log's events stand (finer in time) and the counter makes none there (_log_timing).
        by_log, timing_notes = _log_timing(ev, keyed.with_columns(engine=pl.col("_ekey")), is_prom, a.frames, tz)
        notes.extend(timing_notes)
        notes.extend(t.words(tz) for t in by_log.values())
        if by_log:
            mine = (
                pl.col("event_id")
                .str.replace(r"~i[0-9]+$", "")
                .is_in(sorted(k for t in by_log.values() for k in t.pair_keys))
            )
            # the counter's increases matched (its one engine's, for the Rust frontend's engine "all")
            ev = ev.filter(~(is_prom & (pl.col("kind") == "interval") & mine))
            used = _pair_key_expr().is_in(sorted(k for t in by_log.values() for k in t.pair_keys))
            made_from = keyed.filter(~(used & pl.col("increase").is_not_null()))
        # A counted interval is judged by its interval, not by where its events were placed:
        # inside the scrape window it is the counter's; straddling the window's edge, only
        # the part outside is kept (issue 19, item 6).
        is_count = ~is_prom & pl.col("kind").is_in(COUNT_KINDS) & ~pl.col("_eng").is_in(list(by_log))
        has_iv = pl.col("interval_start").is_not_null() & pl.col("interval_end").is_not_null()
        in_win = (pl.col("time") > pl.col("_w0")) & (pl.col("time") <= pl.col("_w1"))
        iv_in = (pl.col("interval_start") >= pl.col("_w0")) & (pl.col("interval_end") <= pl.col("_w1"))
        iv_out = (pl.col("interval_end") <= pl.col("_w0")) | (pl.col("interval_start") >= pl.col("_w1"))
        drop = (is_count & pl.when(has_iv).then(iv_in).otherwise(in_win)).fill_null(False)
        straddle = (is_count & has_iv & ~iv_in & ~iv_out).fill_null(False)
        gone = ev.filter(drop)
        for e, k, n in gone.group_by("_eng", "kind").len().iter_rows():
            dropped_by_engine.setdefault(e, {})[k] = n
        edge = ev.filter(straddle)
        ev = ev.filter(~drop & ~straddle)
        kept = None
        if edge.height:
            kept, edge_notes = _straddling(edge, ev, pairs, is_prom, tz, log_start(a), keyed, gone)
            for e, k, n in (
                edge.join(kept.select("event_id"), on="event_id", how="anti").group_by("_eng", "kind").len().iter_rows()
            ):
                dropped_by_engine.setdefault(e, {})[k] = dropped_by_engine.get(e, {}).get(k, 0) + n
            notes.extend(edge_notes)
        ev = ev.drop("_eng", "_w0", "_w1")
        if kept is not None and kept.height:
            ev = ev_mod.combine([ev, kept.drop("_eng", "_w0", "_w1")])

        # Per-preemption lines inside a scrape interval take the place of counter events.
        pr = ev.filter(~is_prom & pl.col("kind").is_in(PER_EVENT_KINDS) & pl.col("time").is_not_null())
        if pr.height:
            allp = made_from.with_row_index("_pid")
            tp = allp.filter(pl.col("_pid").is_in(_timed_pids(allp))).sort("end")
            m = (
                pr.with_columns(_eng=ekey)
                .sort("time")
                .join_asof(
                    tp.select(pl.col("_ekey").alias("_eng"), "start", "end", "_pid"),
                    left_on="time",
                    right_on="end",
                    by="_eng",
                    strategy="forward",
                    check_sortedness=False,
                )
                .filter(pl.col("time") > pl.col("start"))
            )
            per_pair = m.group_by("_pid").len().rename({"len": "_n"})
            if per_pair.height:
                allp = allp.join(per_pair, on="_pid", how="left", maintain_order="left").with_columns(
                    _n=pl.col("_n").fill_null(0)
                )
                for r in allp.filter(pl.col("_n") > pl.col("increase")).iter_rows(named=True):
                    surplus_rows.append(r)
                adjusted = allp.with_columns(
                    increase=pl.when(pl.col("increase").is_not_null())
                    .then((pl.col("increase") - pl.col("_n")).clip(lower_bound=0))
                    .otherwise(pl.col("increase"))
                ).drop("_pid", "_n", "_ekey", "_home")
                made_from = adjusted
                ev = ev_mod.combine([ev.filter(~(is_prom & (pl.col("kind") == "interval"))), counter_events(adjusted)])

    # ---------------- block-table preempt records: the events where they cover (recordmatch.py)
    baselines = (
        pairs.filter(pl.col("increase").is_null() & pl.col("end").is_not_null())
        if pairs.height and "increase" in pairs.columns
        else None
    )
    skeys = _record_server_keys(a)
    ev, rec_used, rec_notes = records_vs_counts(a.frames, ev, tz, baselines=baselines, keys=skeys)
    notes.extend(rec_notes["notes"])
    disagreements.extend(rec_notes["disagreements"])
    rec_engines = set(rec_notes["engines"])
    checks = _record_checks(a, ev0, prom_src, baselines, set(rec_notes["keys"]), skeys) if rec_used else {}
    if checks:
        disagreements.extend(t for t in (check_text(c, tz) for c in checks.values()) if t)

    # ---------------- what each source counted
    final_kinds = _kind_counts(ev, ~is_prom) if ev.height else {}
    prom_in_events = ev.filter(is_prom).height if ev.height else 0
    facts = a.counters.get("prometheus") or {}
    readings = facts.get("counter_totals") or []
    reading_homes = (
        {_pair_key(s, ln, c): h for s, ln, c, h in keyed.select("source", "line", "col", "_home").iter_rows() if h}
        if keyed.height and "_home" in keyed.columns
        else {}
    )
    ev, since = since_start(a, ev, pairs, is_prom, tz, ehome if reading_homes else None, reading_homes)
    notes.extend(since.notes)
    disagreements.extend(since.disagreements)
    # A single reading whose engine started before the log is a baseline (since_start): said, not counted.
    singles = [
        r for r in readings if r["samples"] == 1 and r["from"] not in since.repeats and r["from"] not in since.baselines
    ]
    for b in since.baselines.values():
        sources.append(
            {
                "source": PROM_BASELINE,
                "count": b["value"],
                "window": [iso(b["engine_start"], tz), iso(b["time"], tz)],
                "exact": True,
                "in_events": 0,
                "note": f"engine {b['engine']}: {b['value']} preemption(s) since the engine's start at "
                f"{iso(b['engine_start'], tz)} ({b['engine_start_from']}), by the reading at {iso(b['time'], tz)} "
                f"({b['from']}); the engine started before the log's first line ({iso(b['log_start'], tz)}, "
                f"{b['log_start_from']}): the count before the log, not events of its window "
                f"({b['in_log_events']} of the log's own events by then)",
            }
        )
    for r in singles:
        made = since.made.get(r["from"], 0)
        start = since.starts.get(r["from"])
        sources.append(
            {
                "source": PROM_SINGLE,
                "count": r["value"],
                "window": [iso(start[0], tz) if start else None, iso(r["time"], tz)],
                "exact": start is not None,
                "in_events": made,
                "note": f"engine {r['engine']}: {r['value']} preemption(s) since "
                + (f"the engine's start at {start[1]}" if start else "the engine's last start (not in the bundle)")
                + f", by the reading at {_when(r['time'], tz)} ({r['from']}); "
                + (
                    f"{made} not already in the log's events, not placed in time"
                    if made
                    else "all of them already in the log's events"
                    if r["value"]
                    else "none"
                ),
            }
        )
    if pairs.height and pairs.get_column("increase").is_not_null().any():
        inc_total = int(pairs.get_column("increase").fill_null(0).sum())
        w = facts.get("window")
        sources.append(
            {
                "source": PROM_COUNTER,
                "count": inc_total,
                "window": [iso(w[0], tz), iso(w[1], tz)] if w else None,
                "exact": not _resets(facts),  # across a restart a run's last preemptions are not seen
                "in_events": prom_in_events,
                "note": _prom_note(facts, pairs)
                + "".join(
                    f"; engine {t.engine}: the log's own counts agree with its {t.count} in every one of its "
                    f"{t.scrapes} scrape interval(s): the log's events stand for them (finer in time), none are made "
                    "from the counter there"
                    for t in by_log.values()
                ),
                # the counters it was read from, by name: the key above is the source's kind, whatever the engine
                "metrics": sorted(
                    pairs.select(pl.col("raw").str.extract(r"^([^{\s]+)", 1).drop_nulls().unique())
                    .to_series()
                    .to_list()
                ),
                **_vs_records(checks, PROM_COUNTER),
                # what it counted where the log's counts agree: the log's events stand for those
                **({"same_as_log": sum(t.count for t in by_log.values())} if by_log else {}),
            }
        )
    stats = a.stats
    field_sum = (
        int(stats.get_column("preemptions").fill_null(0).sum())
        if stats.height and "preemptions" in stats.columns
        else 0
    )
    field_lines = stats.filter(pl.col("preemptions").is_not_null()).height if stats.height else 0
    if field_lines:
        sources.append(
            {
                "source": LOG_FIELDS,
                "count": field_sum,
                "window": None,
                "exact": True,
                "in_events": final_kinds.get("interval", 0),
                "note": "counted when the preempted request runs again (lags the preemption)"
                + _kept_words(by_log, "interval"),
                **_vs_records(checks, LOG_FIELDS),
            }
        )
    v0 = a.counters.get("v0", {})
    if v0.get("logged_lines"):
        # the counted preemptions: a jump's unlogged ones whole, never the events capped of them
        n_v0 = orig_kinds.get("logged", 0) + orig_kinds.get("reconstructed", 0) + _not_made(a, "reconstructed")
        runs = v0.get("runs", 0)
        sources.append(
            {
                "source": "log V0 warnings (total_num_cumulative_preemption)",
                "count": n_v0,
                "window": None,
                "exact": False,
                "in_events": final_kinds.get("logged", 0) + final_kinds.get("reconstructed", 0),
                "note": f"lower bound: up to 49 more per counter run ({runs} run(s)) are not visible in the log"
                + _kept_words(by_log, "reconstructed")
                + _continued_words(v0.get("continued") or []),
            }
        )
    if v0.get("swap_rises"):
        swaps = int(v0["swap_rises"])
        sources.append(
            {
                "source": SWAP_RISES,
                "count": swaps,
                "window": None,
                "exact": False,
                "in_events": ev.filter(pl.col("mode") == "SWAP").height if ev.height else 0,
                "note": f"lower bound: the 'Swapped: N reqs' count rose by {swaps} over {v0['swap_lines']} stats "
                f"line(s) (first {v0['swap_first']}, up to {v0['swap_max']} swapped); only a SWAP-mode preemption "
                "swaps a request out, and one swapped out and in between two lines is not seen",
            }
        )
    if orig_kinds.get("marker"):
        sources.append(
            {
                "source": "log lines marked PREEMPTED (patched scheduler, hooks)",
                "count": orig_kinds["marker"],
                "window": None,
                "exact": False,
                "in_events": final_kinds.get("marker", 0),
                "note": "one event per line; completeness depends on what wrote them",
            }
        )
    bt = per_request_records(a.frames)
    bt_total = sum(df.height for df in bt.values())
    for name, df in bt.items():
        sources.append(
            {
                "source": f"block-table preempt records ({name})",
                "count": df.height,
                "window": _span(df, tz),
                "exact": False,
                "in_events": None,
                "note": "one record per preemption, with request id",
            }
        )
    hist = facts.get("histogram")
    hist_check = _histogram_check(a, facts, tz) if hist and rec_used else None
    if hist_check is not None and hist_check.get("disagreement"):
        disagreements.append(hist_check["disagreement"])
    if hist:
        sources.append(
            {
                "source": "prometheus histogram (vllm:request_num_preemptions)",
                "count": int(round(hist["preemptions_of_finished_requests"])),
                "window": None,
                "exact": False,
                "in_events": 0,
                "note": f"preemptions of the {int(hist['finished_requests'])} request(s) that finished "
                + ("since the engine started" if hist.get("since_engine_start") else "between scrapes")
                + "; requests still running or waiting are not in it (a cross-check, not added)",
                **({"vs_records": hist_check} if hist_check is not None else {}),
            }
        )

    # ---------------- disagreements
    log_above: dict[str, int] = {}  # engine -> the V0 warnings' own count in the window, above the counter's
    if timed.height:
        for e, kinds in sorted(dropped_by_engine.items()):
            if e in rec_engines or (_is_all(e) and rec_engines):
                continue  # both are cross-checks against the records (recordmatch.py)
            prom_e = (
                int(timed.filter(pl.col("_ekey") == e).get_column("increase").sum())
                if not _is_all(e)
                else int(timed.filter(pl.col("_home") == _home_of(pl.lit(e))).get_column("increase").sum())
            )
            n_int = kinds.get("interval", 0)
            if n_int and n_int != prom_e:
                disagreements.append(
                    f"engine {e}: the log's 'Preemptions: N' fields add up to {n_int} inside the scrape window, "
                    f"the Prometheus counter rose by {prom_e} (counts near the window's edges can fall into the "
                    "neighbouring stats interval; a larger gap means a clock offset or another engine)"
                )
            n_rec = kinds.get("reconstructed", 0)
            if n_rec:
                # the warnings in the window: a warning before or after it is no part of the counter's increase
                span = timed.filter(pl.col("_ekey") == e)
                in_span = (
                    (pl.col("time") > span.get_column("start").min()) & (pl.col("time") <= span.get_column("end").max())
                    if span.height
                    else pl.lit(True)
                )
                logged_e = (
                    ev.filter(~is_prom & (pl.col("kind") == "logged") & (ekey == e) & in_span.fill_null(False)).height
                    if ev.height
                    else 0
                )
                if n_rec + logged_e > prom_e:
                    log_above[e] = n_rec + logged_e
                    disagreements.append(
                        f"engine {e}: the V0 warnings account for {n_rec + logged_e} preemptions in the scrape window, "
                        f"more than the counter's increase of {prom_e}"
                    )
        for r in surplus_rows:
            disagreements.append(
                f"{r['_n']} per-preemption line(s) between {iso(r['start'], tz)} and {iso(r['end'], tz)} (engine "
                f"{r['engine']}) but the counter rose by {r['increase']} ({r['source']}:{r['line']}): all lines kept; "
                "check the clocks (--offset)"
            )
    for r in singles:
        if str(r["engine"]) in rec_engines:
            continue  # the records lead a count: compared with the lag allowed (recordmatch.py)
        if r["time"] is None:
            continue  # no time: the log's events cannot be ordered with it (since_start takes them all off)
        upto = ev.filter(~is_prom & (eng == r["engine"]) & (pl.col("time") <= r["time"])).height if ev.height else 0
        if upto > r["value"]:
            disagreements.append(
                f"engine {r['engine']}: the log counted {upto} preemption(s) up to {iso(r['time'], tz)}, more than the "
                f"counter's {r['value']} since engine start ({r['from']}): another engine or server, or a clock offset"
            )
    # A count larger than the events made of it (model.events.capped_count: at most MAX_EVENTS_PER_COUNT
    # per count): the count is the counter's, never the cap; the events are a capped part of it.
    # The log's counts likewise (every engine's maker of events from counts lists its capped counts: frame
    # capped_counts), each as far as its events are still the event set's (:func:`_capped_logs`).
    log_capped = _capped_logs(a.frames.get("capped_counts"), a.events, ev, is_prom, timed, rec_engines)
    capped = sorted(_capped(ev, is_prom, made_from, since.made) + log_capped, key=lambda c: (-c["count"], c["from"]))
    withheld = sum(c["count"] - c["events"] for c in capped)
    total = ev.height + withheld
    for entry in sources:
        if entry["source"] == "block-table preempt records (bt_events)":
            entry["in_events"] = rec_used
    if bt_total and bt_total != rec_used and bt_total != total and not rec_notes["disagreements"]:
        spans = [w for w in (_span(df, tz) for df in bt.values()) if w]
        when = f" ({min(w[0] for w in spans)} to {max(w[1] for w in spans)})" if spans else ""
        disagreements.append(
            f"block-table records hold {bt_total} preempt record(s){when}; the reconciled total over the whole "
            f"bundle is {total} (the records may cover only part of the incident)"
        )

    # ---------------- the spans nothing counts
    counted_e = set(timed.get_column("engine").to_list()) if timed.height else set()
    # the log counts its engines in its window (its fields, V0 warnings, SGLang's every retraction)
    log_counts = bool(field_lines or v0.get("logged_lines") or (cap.has_log and cap.counts in ("exact", "sampled")))
    blind = sorted({b["engine"] for b in since.baselines.values()} - counted_e - rec_engines) if not log_counts else []
    # A counter whose readings end before the log does (or begin after it), where the log cannot count:
    # the preemptions of the log's span outside the counter's are counted by nothing (:func:`uncounted`).
    if not log_counts:
        gaps = uncounted(a, keyed, ekey, ehome, since, rec_engines | set(blind))
    else:  # the bundle's logs count, but one server's log never counts another server's span
        quiet = _quiet_homes(a, ev, is_prom, keyed, ehome)
        gaps = uncounted(a, keyed, ekey, ehome, since, rec_engines, homes=quiet) if quiet else []

    # ---------------- the rule used
    counter_only: dict[str, int] = rec_notes.get("counter_only") or {}
    if rec_used:
        # A count's preemptions no record explains are events of their own (counter-only): the total is
        # not below that count, so they leave the count exact.
        agree = all(
            not c.beyond_lag and c.without_record_inside <= counter_only.get(c.engine, 0) for c in checks.values()
        ) and not (hist_check or {}).get("disagreement")
        crossed = sorted({c.source for c in checks.values()} | ({"the histogram"} if hist_check else set()))
        if not crossed and not rec_notes["replaced"]:
            others = sum(final_kinds.get(k, 0) for k in COUNT_KINDS)
            rule = (
                "block-table 'preempt' records (kind record) are the events of the server whose folder holds them; "
                f"the {others} counted preemption(s) of the other servers stand as their logs and scrapes counted them"
                if others
                else "block-table 'preempt' records (kind record): no other source in the bundle counted any preemption"
            )
            quality = "as recorded"
        else:
            rule = (
                "block-table 'preempt' records (kind record, one per preemption with its request id) are the events "
                "over the span they cover; "
                + (", ".join(crossed) or "the counts there")
                + " are cross-checks, matched against them with the lag allowed (vLLM counts a preemption when the "
                "request is next reported), never added"
                + (
                    f"; {rec_notes['kept_outside']} counted preemption(s) outside the records' span are events of "
                    "their own count"
                    if rec_notes["kept_outside"]
                    else ""
                )
                + (
                    f"; {sum(counter_only.values())} counted preemption(s) no record explains are events without a "
                    "record (counter-only): the total is never below vLLM's own count"
                    if counter_only
                    else ""
                )
            )
            quality = "exact" if agree and not _resets(facts) else "as recorded"
    elif timed.height:
        rule = (
            "Prometheus counter increases are authoritative inside the scrape window (per engine): the log's own "
            "counts there are replaced by counter events; per-preemption lines are kept and take the place of "
            "counter events in their scrape interval; outside the window the log's events stand"
        )
        if by_log:
            rule += "; " + _log_timing_words(by_log)
        quality = "exact" if not _resets(facts) else "lower bound"
        if _resets(facts):
            rule += "; " + _across_resets(facts)
        if log_above:
            # vLLM's own total_num_cumulative_preemption says more than the counter rose: the counter and the
            # log are not one count (another server's scrapes, a restart between them), so the counter's
            # count is no exact one
            quality = "lower bound"
            rule += "; " + "; ".join(
                f"engine {e}: its V0 warnings' total_num_cumulative_preemption counts {n} in the scrape window, "
                "more than the counter rose: the two are not one count (another server's scrapes, or a restart), "
                "so the count here is a lower bound"
                for e, n in sorted(log_above.items())
            )
    elif field_lines:
        # The engine says what its fields are and how far they reach (LogCapability.details: a log
        # with lines that cannot count beside them is a lower bound); else a build with the fix.
        rule = f"the log's 'Preemptions: N' stats fields ({cap.details.get('fields') or 'a build with the fix'})"
        quality = cap.details.get("quality") or "exact"
    elif v0.get("logged_lines"):
        rule = "V0 counter deltas: warnings plus reconstructed counts"
        quality = "lower bound"
    elif v0.get("swap_rises") and not orig_kinds.get("marker"):
        rule = (
            f"{SWAP_RISES}: no V0 warning in the log's server run(s), so the rises of 'Swapped: N reqs' are the only "
            "count (vllm/core/scheduler.py: only _preempt_by_swap adds to the swapped queue); RECOMPUTE-mode "
            "preemptions and swaps undone between two lines are not in it"
        )
        quality = "lower bound"
    elif singles:
        what = ", ".join(f"engine {r['engine']}: {r['value']} at {_when(r['time'], tz)}" for r in singles)
        known = all(r["from"] in since.starts for r in singles)
        reach = " up to the reading" if gaps else ""
        dated = all(str(since.starts[r["from"]][1]).endswith("(_created)") for r in singles) if known else False
        rule = (
            f"one /metrics reading per engine counts the preemptions since the engine started ({what}); "
            + (
                f"the counter's _created dates that start, so the count{reach} is exact; "
                if dated
                else f"the log shows that start, so the count{reach} is exact; "
                if known
                else "the start is not in the bundle, so earlier runs are not in it; "
            )
            + "what the log's own events do not hold of it is not placed in time"
        )
        quality = "exact" if known else "lower bound"
    elif cap.has_log and cap.counts == "none" and not total:
        rule = "none: " + cap.reason
        quality = "unknown"
    elif orig_kinds.get("marker"):
        rule = "lines marked PREEMPTED"
        quality = "lower bound"
    elif not total and cap.family == "V0" and cap.counts == "sampled":
        # V0 logs the 1st preemption of a run (total_num_cumulative_preemption=1): read from every
        # run's start banner, a log without the warning had none; else up to 49 went unlogged.
        if _read_from_start(a):
            rule = "V0 logs the first preemption of every server run: no warning since the start banner, none"
            quality = "exact"
        else:
            rule = "V0 warnings (1 in 50): none in this log, which does not begin at a start banner"
            quality = "lower bound"
    elif cap.has_log and cap.counts == "exact":
        # the engine's log prints every preemption (SGLang: every retraction): its count, 0 included
        rule = f"the log's own lines, one per preemption: {cap.reason}"
        quality = "exact"
    else:
        rule = "events found in the inputs"
        quality = "unknown" if not total else "lower bound"
    if quality == "exact" and field_lines and v0.get("logged_lines"):
        # a V0 server beside the counted one: its warnings show 1 preemption in 50
        quality = "lower bound"
        rule += "; plus a V0 server's warnings and reconstructed counts (1 in 50 logged): a lower bound"
    # An engine whose only reading is a baseline (it started before the log) and that nothing else counts
    # in the log's window: its preemptions there are not in the total.
    if blind and quality == "exact":
        quality = "lower bound"
        rule += (
            f"; engine(s) {', '.join(blind)}: a baseline reading only (the engine started before the log), so "
            "their preemptions in the log's window are not counted"
        )
    # A reading without a time whose count is not known to be exact (no _created, or the log's own events of
    # its engine taken off, before or after it: since_start): whatever rule counted the rest.
    untimed = sorted({r["engine"] for r in singles if r["time"] is None and r["from"] not in since.starts})
    if untimed and quality == "exact":
        quality = "lower bound"
        rule += (
            f"; engine(s) {', '.join(untimed)}: a reading at an unknown time, which the log's own events cannot be "
            "ordered with (or whose engine start is not in the bundle)"
        )
    if gaps:
        if quality == "exact":
            quality = "lower bound"
        rule += "; " + "; ".join(_gap_rule(g, tz) for g in gaps)
    uncapped = quality  # the count's own quality, apart from the cap (a V0 log's count is a lower bound)
    if withheld:
        quality = "capped"
        rule += "; " + _capped_words(capped, withheld, ev.height, bool(log_capped), len(log_capped) < len(capped))
        log_kinds = {c["kind"] for c in log_capped}
        for entry in sources:
            if entry["source"] in (PROM_COUNTER, PROM_SINGLE) and len(log_capped) < len(capped):
                entry["exact"] = False
            if entry["source"] == LOG_FIELDS and "interval" in log_kinds:
                entry["exact"] = False
    report: dict[str, Any] = {
        "total": total,
        "events": ev.height,
        "quality": quality,
        "rule": rule,
        "sources": sources,
        "counter_readings": [
            {
                "engine": r["engine"],
                "model_name": r["model_name"],
                "value": r["value"],
                "time": iso(r["time"], tz),
                "samples": r["samples"],
                "from": r["from"],
                "meaning": "preemptions since engine start or the last counter reset",
            }
            for r in readings
        ],
        "single_readings": [
            {
                "engine": r["engine"],
                "value": r["value"],
                "time": iso(r["time"], tz),
                "from": r["from"],
                "engine_start": since.starts[r["from"]][1] if r["from"] in since.starts else None,
                "in_events": since.made.get(r["from"], 0),
            }
            for r in singles
        ],
        "repeated_readings": sorted(since.repeats),
        "log_events_outside_scrape_window": _outside(ev, is_prom, timed) if timed.height else None,
        "disagreements": disagreements,
        "log": cap.as_dict() if cap.has_log else None,
    }
    if since.baselines:  # readings whose engine started before the log: the count before it, said
        report["baseline_readings"] = [
            {
                "engine": b["engine"],
                "value": b["value"],
                "time": iso(b["time"], tz),
                "from": b["from"],
                "engine_start": iso(b["engine_start"], tz),
                "engine_start_from": b["engine_start_from"],
                "log_start": iso(b["log_start"], tz),
                "in_log_events": b["in_log_events"],
            }
            for b in since.baselines.values()
        ]
    if by_log:  # engines whose log counts agree with the counter: the log's events (its timing) kept
        report["log_timing"] = [
            {
                "engine": t.engine,
                "count": t.count,
                "window": [iso(t.window[0], tz), iso(t.window[1], tz)],
                "kinds": dict(sorted(t.kinds.items())),
                "log_counts": t.log_intervals,
                "log_from": list(t.log_from),
                "scrape_intervals": t.scrapes,
                "counter_from": list(t.counter_from),
            }
            for t in by_log.values()
        ]
    if gaps:  # the log's spans before or after the counter's readings, counted by nothing
        report["uncounted_spans"] = [_gap_report(g, tz) for g in gaps]
    if counter_only:  # counted preemptions no record explains: events without a record (recordmatch.py)
        report["counter_only"] = dict(sorted(counter_only.items()))
    if capped:
        report["capped"] = [{k: c[k] for k in ("from", "count", "events")} for c in capped]
        report["count_quality"] = uncapped
    return ev, report, notes


def _capped(
    ev: pl.DataFrame, is_prom: pl.Expr, made_from: pl.DataFrame, singles: dict[str, int]
) -> list[dict[str, Any]]:
    """The counter's counts whose events were capped (model.events.capped_count; :func:`_unplaced`):
    ``[{"from": file:line, "count": what the counter counted there, "events": events made of it}]``. A
    count is the counter's increase between two readings (less the per-preemption lines that take the
    place of its events) or what a first reading counts since the engine's start (``singles``)."""
    counts: dict[str, int] = {}
    if made_from.height and "increase" in made_from.columns:
        for src, line, col, inc in (
            made_from.filter(pl.col("increase") > 0).select("source", "line", "col", "increase").iter_rows()
        ):
            where = f"{src}:{line}" + (f":{col}" if col is not None else "")
            counts[where] = counts.get(where, 0) + int(inc)
    for where, n in singles.items():
        counts[where] = counts.get(where, 0) + int(n)
    big = {w: n for w, n in counts.items() if n > ev_mod.MAX_EVENTS_PER_COUNT}
    mine = ev.filter(is_prom & (pl.col("kind") == "interval")) if ev.height else ev
    full = mine.height >= ev_mod.MAX_EVENTS_FROM_COUNTS  # the cap in all: later counts made fewer, or none
    if not big and not full:
        return []
    made = (
        dict(mine.group_by(pl.col("event_id").str.replace(r"~i[0-9]+$", "").alias("_w")).len().iter_rows())
        if mine.height
        else {}
    )
    out = []
    for where, n in counts.items():
        got = int(made.get(where, 0))
        if got < n and (where in big or full):
            out.append({"from": where, "count": n, "events": got})
    return sorted(out, key=lambda c: (-c["count"], c["from"]))


def _not_made(a: AnalysisView, kind: str) -> int:
    """The preemptions the log's counts of ``kind`` counted beyond the events made of them (capped)."""
    c = a.frames.get("capped_counts")
    if c is None or c.height == 0:
        return 0
    return int(c.filter(pl.col("kind") == kind).select((pl.col("count") - pl.col("events")).sum()).item() or 0)


def _capped_rest(a: AnalysisView, engine: str, hi: Any = None, lo: Any = None) -> int:
    """The preemptions of engine ``engine``'s log counts logged in (lo, hi] that the cap made no event of
    (frame ``capped_counts``): with the log's events, what its counts hold (since_start compares the
    counter's reading with that, not with the events alone)."""
    c = a.frames.get("capped_counts")
    if c is None or c.height == 0:
        return 0
    f = pl.col("engine").fill_null("0") == engine
    if hi is not None:
        f = f & (pl.col("time") <= hi)
    if lo is not None:
        f = f & (pl.col("time") > lo)
    return int(c.filter(f).select((pl.col("count") - pl.col("events")).sum()).item() or 0)


def _capped_logs(
    counts: pl.DataFrame | None,
    before: pl.DataFrame,
    ev: pl.DataFrame,
    is_prom: pl.Expr,
    timed: pl.DataFrame,
    rec_engines: set[str],
) -> list[dict[str, Any]]:
    """The log's counts whose events were capped (frame ``capped_counts``, model.events.CAPPED_SCHEMA: V0
    counter jumps, V1 ``Preemptions: N``, SGLang's ``#retracted_reqs: N``), as far as they are the event
    set's: ``[{"from", "count", "events", "kind"}]``.

    A count's events may have left the event set here (the counter's inside its scrape window, the
    records' where they cover: reconcile's rules) or in part (the kept part of an interval straddling the
    window's edge): the preemptions not made into events go with them, in the same share (all of them when
    every event of the count is kept). A count that made no event (the cap in all reached) stands where
    it is the count: not inside its engine's scrape window, not of an engine whose records are the events.
    """
    if counts is None or counts.height == 0:
        return []
    key = pl.col("event_id").str.replace(r"~[a-z][0-9]+$", "")

    def per_count(df: pl.DataFrame) -> dict[tuple[str, str], int]:
        if df.height == 0:
            return {}
        own = df.filter(~is_prom).select(key.alias("_w"), "kind")
        return {(w, k): n for w, k, n in own.group_by("_w", "kind").len().iter_rows()}

    at_entry, now = per_count(before), per_count(ev)
    win: dict[str, tuple[Any, Any]] = {}
    if timed.height:
        for e, w0, w1 in timed.group_by("engine").agg(pl.col("start").min(), pl.col("end").max()).iter_rows():
            win[str(e)] = (w0, w1)
    out = []
    for where, kind, count, made, engine, time in counts.select(list(ev_mod.CAPPED_SCHEMA)).iter_rows():
        e0, got = at_entry.get((where, kind), 0), now.get((where, kind), 0)
        if e0:
            rest = (count - made) if got == e0 else round((count - made) * got / e0)
        else:
            w = win.get(engine) or (
                (min(v[0] for v in win.values()), max(v[1] for v in win.values())) if engine == "all" and win else None
            )
            inside = w is not None and time is not None and w[0] < time <= w[1]
            rest = 0 if inside or engine in rec_engines else count - made
            got = made if rest else 0
        if rest > 0:
            out.append({"from": where, "count": got + rest, "events": got, "kind": kind})
    return out


def _capped_words(
    capped: list[dict[str, Any]], withheld: int, events: int, logs: bool = False, counter: bool = True
) -> str:
    """The rule's words for a count whose events were capped (the counter's, the log's, or both)."""
    c = capped[0]
    more = f" (and {len(capped) - 1} more count(s))" if len(capped) > 1 else ""
    whose = "the counter's and the log's" if logs and counter else "the log's" if logs else "the counter's"
    return (
        f"the count is {whose} ({events + withheld}), its events capped: at most "
        f"{ev_mod.MAX_EVENTS_PER_COUNT} events are made of one count ({ev_mod.MAX_EVENTS_FROM_COUNTS} in all), so "
        f"{events} event(s) stand for it and {withheld} counted preemption(s) are not events (first: {c['count']} "
        f"counted at {c['from']}, {c['events']} events made){more}; the events are a reconstruction of part of "
        "the count, never all of it"
    )


@dataclass(frozen=True)
class SinceStart:
    """What :func:`since_start` made of the counters' first readings."""

    made: dict[str, int]  # reading (file:line) -> events made from it
    starts: dict[str, tuple[Any, str]]  # reading -> (time, file:line) of the engine start before it
    repeats: frozenset[str]  # readings that repeat another folder's reading of the same counter
    notes: tuple[str, ...]
    disagreements: tuple[str, ...]
    # reading -> what a baseline says: its engine's start (_created) lies before the log, so its count is
    # the count before the log (a number, said), not events of the window
    baselines: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)


UNPLACED = "unplaced"


def since_start(
    a: AnalysisView,
    ev: pl.DataFrame,
    pairs: pl.DataFrame,
    is_prom: pl.Expr,
    tz: str,
    home: pl.Expr | None = None,
    homes: dict[str, str] | None = None,
) -> tuple[pl.DataFrame, SinceStart]:
    """The preemptions a counter's first reading counts since the engine started: (events, report).

    ``vllm:num_preemptions_total`` counts from the engine's start (vLLM's PrometheusStatLogger is
    made with the engine). So a series' first reading N, at time T, is N preemptions in (start, T].
    What the bundle's own events of that engine already hold up to T (log lines, records: n) is
    taken off (the log's counts of engine ``all``, the Rust frontend's line of every engine, are some
    engine's own: each reading takes as many of them in its span as its count leaves, each once), and the
    rest, max(0, N - n), are events of kind ``interval`` with no time
    (``time_precision`` ``unplaced``, ``interval_start`` the start, ``interval_end`` T): counted,
    not placed. The start is the last server start the log shows at or before T (servers.starts);
    without one, a reading that is its series' only one still counts (since the engine's last
    start, not in the bundle: earlier runs are not in it), and the first reading of a scrape
    series adds nothing (as before: the scrapes' increases are the count).

    The counter's ``_created`` (prometheus_client's creation time, beside the counter: ``created`` in
    ``prom_preemptions``) *is* that engine's start, per engine: when the scrape exposes it, it decides
    (issue 38). ``_created`` at or after the log's first line (the run it falls in is in the log): the
    reading counts since ``_created``, its events in [``_created``, T]. ``_created`` before the log's
    first line: the reading is a *baseline*, the count before the log (said, never events of the log's
    window). Without a log, a series' only reading counts since ``_created`` and a scrape series' first
    reading is its baseline. No ``_created``: the banner, as above.

    A series with one reading and another series of the same counter (engine and model) in another
    folder, e.g. a final ``curl /metrics`` beside a ``scrapes/`` folder: compared with that series'
    reading at or before it; the same value is the same count (counted once), a larger one adds
    the difference in between (placed like a scrape interval), a smaller one is a disagreement.
    """

    empty = SinceStart({}, {}, frozenset(), (), ())
    if pairs.height == 0 or "increase" not in pairs.columns:
        return ev, empty
    firsts = pairs.filter(pl.col("increase").is_null())
    if firsts.height == 0:
        return ev, empty
    key = ["scope", "engine", "model_name"]
    size = pairs.group_by(key).len().rename({"len": "_samples"})
    firsts = firsts.join(size, on=key, how="left")
    # A series' only reading whose scrape got no time at all (sources/prometheus/scrapetime.py: several
    # scrapes in one file, only the last timed by the mtime): still a count, never a silent 0 (below).
    timeless = firsts.filter(pl.col("end").is_null() & (pl.col("_samples") == 1))
    firsts = firsts.filter(pl.col("end").is_not_null())
    st = real_starts(a.records).filter(pl.col("time").is_not_null()).sort("time")
    log0 = log_start(a)
    log1 = log_end(a)
    baselines: dict[str, dict[str, Any]] = {}
    made: dict[str, int] = {}
    starts: dict[str, tuple[Any, str]] = {}
    repeats: set[str] = set()
    notes: list[str] = []
    disagreements: list[str] = []
    new: list[pl.DataFrame] = []
    eng = pl.col("engine").fill_null("0")
    own = ev.filter(~is_prom) if ev.height else ev
    # a reading's own events are those of its server (``home``: the events' server folder, ``homes``: the
    # readings', by file:line[:col], where the bundle keeps servers in folders of their own: _server_keys)
    own = own.with_columns(_h=home if home is not None and own.height else pl.lit(""))
    homes = homes or {}
    # An engine whose preempt records are its events has its counts as cross-checks (recordmatch.py).
    recorded = (
        set(ev.filter(pl.col("kind") == "record").get_column("engine").fill_null("0").to_list()) if ev.height else set()
    )
    # The log's counts of engine "all" (the Rust frontend's line sums every engine) are some engine's own
    # events: each reading takes off as many of them, in its span, as its count leaves, each taken once.
    every = own.filter(eng == "all") if own.height else own
    absorbed: set[str] = set()

    def of_all(when: pl.Expr, room: int) -> int:
        if room <= 0 or every.height == 0:
            return 0
        ids = [i for i in every.filter(when).get_column("event_id").to_list() if i not in absorbed][:room]
        absorbed.update(ids)
        return len(ids)

    for r in firsts.sort("end").iter_rows(named=True):
        where = f"{r['source']}:{r['line']}" + (f":{r['col']}" if r.get("col") is not None else "")
        if r["engine"] == "all" or r["engine"] in recorded:
            continue
        here = pl.col("_h") == homes.get(where, "")
        if r["_samples"] == 1:
            other = pairs.filter(
                (pl.col("scope") != r["scope"])
                & (pl.col("engine") == r["engine"])
                & (pl.col("model_name") == r["model_name"])
                & pl.col("end").is_not_null()
                & _same_server(homes, homes.get(where, ""))
            )
            if other.height:
                prior = other.filter(pl.col("end") <= r["end"] + _SAME_SECOND).sort("end").tail(1)
                if prior.height == 0:
                    notes.append(
                        f"{where}: a reading of engine {r['engine']}'s counter taken before the scrapes of the same "
                        "counter in another folder: compared, not added"
                    )
                    repeats.add(where)
                    continue
                p = prior.row(0, named=True)
                d = int(round(r["value"] - p["value"]))
                pw = f"{p['source']}:{p['line']}"
                repeats.add(where)
                if d == 0:
                    notes.append(
                        f"{where} repeats the reading of the same counter (engine {r['engine']}, "
                        f"{int(round(r['value']))}) at {pw}: counted once"
                    )
                elif d > 0:
                    notes.append(
                        f"{where} reads engine {r['engine']}'s counter {d} higher than {pw}: {d} preemption(s) "
                        "between the two readings"
                    )
                    new.append(
                        counter_events(
                            pl.DataFrame([{**{k: r[k] for k in pairs.columns}}], schema=pairs.schema).with_columns(
                                start=pl.lit(p["end"]).cast(pairs.schema["start"]),
                                prev_value=pl.lit(p["value"]),
                                increase=pl.lit(d, pl.Int64),
                            )
                        )
                    )
                    made[where] = d
                else:
                    disagreements.append(
                        f"{where} reads engine {r['engine']}'s counter at {int(round(r['value']))}, lower than "
                        f"{int(round(p['value']))} at {pw}: a restart between them or another server's counter; not added"
                    )
                continue
        created = r.get("created")
        start: dict[str, Any] | None
        if created is not None:  # the counter's _created: its engine's start (issue 38)
            cited = f"{r.get('created_src') or where} (_created)"
            # 0 since a start before the log, read at or after the log's last line: none in the whole
            # window either (the reading holds the window), an exact 0, not the count before the log
            zero_after = int(round(r["value"])) == 0 and log1 is not None and r["end"] + _SAME_SECOND_TD >= log1
            if log0 is not None and created + _SAME_SECOND_TD < log0[0] and not zero_after:
                by_then = (pl.coalesce("interval_end", "time") <= r["end"]) & here
                n_log = own.filter((eng == r["engine"]) & by_then).height
                n_log += _capped_rest(a, r["engine"], r["end"])
                n_log += of_all(by_then, int(round(r["value"])) - n_log)
                baselines[where] = {
                    "engine": r["engine"],
                    "value": int(round(r["value"])),
                    "time": r["end"],
                    "from": where,
                    "engine_start": created,
                    "engine_start_from": cited,
                    "log_start": log0[0],
                    "log_start_from": log0[1],
                    "in_log_events": n_log,
                }
                notes.append(
                    f"engine {r['engine']}: the preemption counter read {int(round(r['value']))} at {iso(r['end'], tz)} "
                    f"({where}), counting since the engine's start at {iso(created, tz)} ({cited}), before the log's "
                    f"first line ({iso(log0[0], tz)}, {log0[1]}): a baseline, the count before the log "
                    f"({max(0, int(round(r['value'])) - n_log)} not in the log's events by then), not events of "
                    "this window"
                )
                continue
            if log0 is None and r["_samples"] > 1:
                continue  # a scrape series without a log: its first scrape is the baseline of its increases
            lo = created
            start = {"source": cited, "line": None}
            starts[where] = (lo, cited)
        else:
            before = st.filter(pl.col("time") <= r["end"] + _SAME_SECOND)
            start = before.row(before.height - 1, named=True) if before.height else None
            if start is None and r["_samples"] > 1:
                continue  # a scrape series without the engine's start: its increases are the count
            lo = start["time"] if start is not None else None
            if start is not None:
                starts[where] = (lo, f"{start['source']}:{start['line']}")
        end_t = pl.coalesce("interval_end", "time")
        when = (end_t <= r["end"] + _SAME_SECOND) & here
        if lo is not None:
            when = when & (end_t > lo)
        n_own = own.filter((eng == r["engine"]) & when).height if own.height else 0
        n_own += _capped_rest(a, r["engine"], r["end"] + _SAME_SECOND, lo)
        n = int(round(r["value"]))
        n_own += of_all(when, n - n_own)
        rest = n - n_own
        if rest < 0 and r["_samples"] == 1:
            disagreements.append(
                f"engine {r['engine']}: the log counted {n_own} preemption(s) up to {iso(r['end'], tz)}, more than the "
                f"counter's {n} since engine start ({where}): another engine or server, or a clock offset"
            )
        if rest <= 0:
            continue
        made[where] = rest
        new.append(_unplaced(r, where, rest, lo, n_own))
        span = (
            f"between the engine's start at {iso(lo, tz)} ({starts[where][1]})"
            if start is not None
            else "since the engine's last start (not in the bundle: earlier runs are not in this count)"
        )
        notes.append(
            f"{rest} {_noun_of(r)} of engine {r['engine']} counted by {_counter_name(r)} {span} and "
            f"{iso(r['end'], tz)} ({where}), not in the log's own events: counted, not placed in time"
            + ("" if not n_own else f" ({n_own} of the reading's {n} are the log's own events)")
        )
    for r in timeless.iter_rows(named=True):
        where = f"{r['source']}:{r['line']}" + (f":{r['col']}" if r.get("col") is not None else "")
        if r["engine"] == "all" or r["engine"] in recorded:
            continue
        here = pl.col("_h") == homes.get(where, "")
        n_own = (own.filter((eng == r["engine"]) & here).height if own.height else 0) + _capped_rest(a, r["engine"])
        n_own += of_all(here, int(round(r["value"])) - n_own)
        got = _timeless_reading(r, where, pairs.filter(_same_server(homes, homes.get(where, ""))), n_own, tz)
        notes.extend(got.notes)
        if got.repeat:
            repeats.add(where)
        if got.start is not None:
            starts[where] = got.start
        if got.events is not None:
            made[where] = got.count
            new.append(got.events)
    if new:
        ev = ev_mod.combine([ev, *new])
    return ev, SinceStart(made, starts, frozenset(repeats), tuple(notes), tuple(disagreements), baselines)


# How far a log may run past the counter's readings before that span is a count of its own (or begin
# before them): one stats interval of the log (its lines' median spacing, else vLLM's default of
# VLLM_LOG_STATS_INTERVAL, 10 s). A stats line at t shows the interval (t - interval, t], and whole-second log
# times against a scrape's exact one: within one interval the log shows nothing the reading did not see
# a chance to count; a whole stats interval beyond it is a span of the log the counter never read.
DEFAULT_STATS_INTERVAL_S = 10.0


def uncounted(
    a: AnalysisView,
    keyed: pl.DataFrame,
    ekey: pl.Expr,
    ehome: pl.Expr,
    since: SinceStart,
    skip: set[str],
    homes: set[str] | None = None,
) -> list[dict[str, Any]]:
    """The spans of the log a counter series did not read, per counter key (:func:`_server_keys`): after its
    last reading (to the log's last stats line of that engine and server), and before the start its first
    reading counts from (since_start: the engine's start the log or ``_created`` shows; a scrape series
    without one, or a baseline, counts from its first reading; a series' only reading without one counts
    since the engine's last start, before the log). Only where that span is longer than one stats interval
    (DEFAULT_STATS_INTERVAL_S). The caller asks only when the log cannot count (a log that can counts its
    own spans there, rule 3). Each: the engine, its server folder, the side (``after``/``before``), the
    counter's and the log's ends, and whether the log shows KV pressure there (the ``kv`` flag of
    pressure.py: usage at the ceiling with requests waiting). Engines in ``skip`` (counted by records, or
    a baseline only: said on their own) and the aggregated engine ``all`` are not asked; with ``homes``,
    only the counters of those server folders (:func:`_quiet_homes`)."""
    if not keyed.height or "end" not in keyed.columns or a.records.height == 0:
        return []
    rd = keyed.filter(pl.col("end").is_not_null()).with_columns(pl.col("engine").fill_null("0"))
    if not rd.height:
        return []
    ceiling = float(a.options.kv_ceiling if a.options.kv_ceiling is not None else DEFAULT_CEILING)
    st = a.stats.filter(pl.col("time").is_not_null()) if a.stats.height and "time" in a.stats.columns else None
    if st is not None:
        st = st.with_columns(_k=ekey, _h=ehome)
    rec = a.records.filter(pl.col("time").is_not_null())
    rec = rec.with_columns(_h=ehome) if "source" in rec.columns else rec.with_columns(_h=pl.lit(""))
    out: list[dict[str, Any]] = []
    for (key,), grp in rd.sort("end").group_by("_ekey", maintain_order=True):
        key = str(key)
        r0, r1 = grp.row(0, named=True), grp.row(grp.height - 1, named=True)
        engine = str(r0["engine"])
        if _is_all(key) or engine in skip:
            continue
        home = str(r0.get("_home") or "")
        if homes is not None and home not in homes:
            continue
        w0, w1 = _where(r0), _where(r1)
        if w0 in since.starts:
            c0 = since.starts[w0][0]
        elif grp.height == 1 and w0 not in since.baselines:
            c0 = None  # its only reading counts since the engine's last start: before the log
        else:
            c0 = r0["end"]
        c1 = r1["end"]
        # the log of that engine: its stats lines (an aggregated line is every engine's), else its server's lines
        mine = (
            st.filter(pl.col("_k").is_in([key, "all" if not home else f"all of {home}"]))
            if st is not None
            else pl.DataFrame()
        )
        if mine.height:
            span = mine.sort("time")
            ln = "line"
        else:
            span = rec.filter(pl.col("_h") == home).sort("time")
            ln = "n"
            if not span.height:
                continue
        first, last = span.row(0, named=True), span.row(span.height - 1, named=True)
        gap_s = DEFAULT_STATS_INTERVAL_S
        if mine.height > 1:
            d = mine.get_column("time").unique().sort().diff().drop_nulls().dt.total_microseconds()
            if d.len():
                gap_s = max(1.0, float(d.median()) / 1e6)  # type: ignore[arg-type]
        tol = timedelta(seconds=gap_s) + _SAME_SECOND_TD
        sides = []
        if last["time"] > c1 + tol:
            sides.append(("after", c1, last["time"], w1, last, pl.col("time") > c1))
        if c0 is not None and first["time"] + tol < c0:
            sides.append(("before", first["time"], c0, w0, first, pl.col("time") < c0))
        for side, lo, hi, reading, edge, inside in sides:
            hot = (
                mine.filter(inside & (pl.col("kv_usage") >= ceiling) & (pl.col("waiting").fill_null(0) > 0))
                if mine.height
                else pl.DataFrame()
            )
            out.append(
                {
                    "engine": engine,
                    "server": home or None,
                    "side": side,
                    "from": lo,
                    "to": hi,
                    "reading": reading,
                    "log": f"{edge['source']}:{edge[ln]}",
                    "stats_interval_s": gap_s,
                    "pressure": bool(hot.height) if mine.height else None,
                    "peak_kv_usage": hot.get_column("kv_usage").max() if hot.height else None,
                    "max_waiting": hot.get_column("waiting").max() if hot.height else None,
                    "pressure_lines": (
                        [f"{hot.row(0, named=True)['source']}:{hot.row(0, named=True)['line']}"]
                        + (
                            [
                                f"{hot.row(hot.height - 1, named=True)['source']}:{hot.row(hot.height - 1, named=True)['line']}"
                            ]
                            if hot.height > 1
                            else []
                        )
                    )
                    if hot.height
                    else [],
                }
            )
    return out


def _quiet_homes(a: AnalysisView, ev: pl.DataFrame, is_prom: pl.Expr, keyed: pl.DataFrame, ehome: pl.Expr) -> set[str]:
    """The server folders (a bundle that keeps servers in folders of their own: :func:`_server_keys`) with
    a counter series whose own logs cannot count, in a bundle whose logs can (rule 3 asks
    :func:`uncounted` only where they cannot): a V0 log's warnings, or a Rust frontend's 'Preemptions: N',
    in one server's folder count that server's preemptions, never those of a stock V1 log beside them
    (which prints no count: vllm-facts §0). A folder counts when its logs made count events of their own
    (not from a scrape, not block-table records), or when the log capability of its own records, stats
    lines and configuration (its engine's, :func:`pressure.log_capability`) says they count."""
    if not keyed.height or "_home" not in keyed.columns:
        return set()
    homes = sorted(set(keyed.get_column("_home").drop_nulls().cast(pl.String).to_list()) - {""})
    out: set[str] = set()
    for h in homes:
        own = ehome == h
        if ev.height and ev.filter(~is_prom & own & (pl.col("kind") != "record")).height:
            continue  # its logs counted (a warning, a stats line's field, a retraction line)

        def mine(df: pl.DataFrame, own: pl.Expr = own) -> pl.DataFrame:
            return df.filter(own) if df.height and "source" in df.columns else df

        view = dataclasses.replace(
            a,  # type: ignore[type-var]
            records=mine(a.records),
            stats=mine(a.stats),
            config=mine(a.config),
            counters={},  # the bundle's facts (a V0 log's warning lines) are not this folder's
        )
        cap = log_capability(view)
        if not (cap.has_log and cap.counts in ("exact", "sampled")):
            out.add(h)
    return out


def _where(r: dict[str, Any]) -> str:
    """A reading's ``file:line[:col]``, as since_start names it."""
    return f"{r['source']}:{r['line']}" + (f":{r['col']}" if r.get("col") is not None else "")


def _gap_rule(g: dict[str, Any], tz: str) -> str:
    """A span of the log the counter did not read, in the rule's words."""
    who = f"engine {g['engine']}" + (f" of {g['server']}" if g.get("server") else "")
    if g["side"] == "after":
        what = (
            f"the counter's last reading at {iso(g['from'], tz)} ({g['reading']}) is before the log's end at "
            f"{iso(g['to'], tz)} ({g['log']})"
        )
    else:
        what = (
            f"the counter counts from {iso(g['to'], tz)} ({g['reading']}), after the log's start at "
            f"{iso(g['from'], tz)} ({g['log']})"
        )
    hot = (
        f", with the KV cache at the ceiling and requests waiting there ({', '.join(g['pressure_lines'])})"
        if g.get("pressure")
        else ""
    )
    return (
        f"{who}: {what}, by more than one stats interval ({g['stats_interval_s']:g} s), and the log cannot count"
        f"{hot}: its preemptions {g['side']} that are not counted, so the count is a lower bound for the log's span"
    )


def _gap_report(g: dict[str, Any], tz: str) -> dict[str, Any]:
    return {**g, "from": iso(g["from"], tz), "to": iso(g["to"], tz)}


@dataclass(frozen=True)
class _Timeless:
    events: pl.DataFrame | None
    start: tuple[Any, str] | None  # the engine start it counts from, when the count is exact
    repeat: bool
    notes: tuple[str, ...]
    count: int = 0  # the preemptions its events stand for (more than the events when capped)


def _timeless_reading(r: dict[str, Any], where: str, pairs: pl.DataFrame, n_own: int, tz: str) -> _Timeless:
    """A series' only reading whose scrape has no time: vLLM's counter holds the preemptions since the
    engine's start (its ``_created``) whatever the moment it was read, so the value still counts, as
    events not placed in time (``interval_end`` null: the reading's time is unknown). The log's own
    events of that engine cannot be told before or after it: all of them are taken off (nothing counted
    twice), and the count is exact only when ``_created`` dates the start and the log holds none.
    Beside another series of the same counter (another folder) it cannot be ordered: compared, not added."""
    n = int(round(r["value"]))
    other = pairs.filter(
        (pl.col("scope") != r["scope"]) & (pl.col("engine") == r["engine"]) & (pl.col("model_name") == r["model_name"])
    )
    if other.height:
        return _Timeless(
            None,
            None,
            True,
            (
                f"{where}: a reading of engine {r['engine']}'s counter ({n}) whose scrape has no time, beside the "
                "readings of the same counter in another folder: it cannot be ordered with them, so it is not added "
                "(write '# scrape <ISO time>' before each scrape)",
            ),
        )
    created = r.get("created")
    cited = f"{r.get('created_src') or where} (_created)"
    rest = n - n_own
    start = (created, cited) if created is not None and n_own == 0 else None
    span = (
        f"since the engine's start at {iso(created, tz)} ({cited})"
        if created is not None
        else "since the engine's last start (not in the bundle: earlier runs are not in this count)"
    )
    if rest <= 0:
        return _Timeless(
            None,
            start,
            False,
            (
                f"engine {r['engine']}: the preemption counter read {n} {span} at an unknown time ({where}: the scrape "
                "has no time)" + (f"; the log's {n_own} event(s) of that engine hold them" if n_own else ""),
            ),
        )
    return _Timeless(
        _unplaced(r, where, rest, created, n_own),
        start,
        False,
        (
            f"{rest} {_noun_of(r)} of engine {r['engine']} counted by {_counter_name(r)} {span}, read at an "
            f"unknown time ({where}: the scrape has no time): counted, not placed in time"
            + (
                f" (the log's {n_own} event(s) of that engine are taken off, before or after the reading: a lower "
                "bound)"
                if n_own
                else ""
            ),
        ),
        rest,
    )


def _same_server(homes: dict[str, str], home: str) -> pl.Expr:
    """The rows of a counter-pairs frame that may be the same server's counter as a reading of server
    folder ``home`` (``homes``: the readings' server folders, by file:line[:col], :func:`_server_keys`).
    Two scrapes each under its own server's folder (``a/metrics.prom`` beside ``a/vllm.log``,
    ``b/metrics.prom`` beside ``b/vllm.log``) are two servers' counters even where their labels are the
    same (both call their engine "0"): never one series compared or counted once. A scrape under no
    server's folder (``""``: a ``curl /metrics`` beside ``a/`` and ``b/``) may be any of them's, as
    before: compared by its labels."""
    if not home or not homes:
        return pl.lit(True)
    of = _pair_key_expr().replace_strict(homes, default="", return_dtype=pl.String)
    return (of == "") | (of == home)


_SAME_SECOND = pl.duration(microseconds=999_999)
_SAME_SECOND_TD = timedelta(microseconds=999_999)


def _when(t: Any, tz: str) -> str:
    """A reading's time in words: unknown when its scrape has none (never "None")."""
    return iso(t, tz) or "an unknown time"


def log_start(a: AnalysisView) -> tuple[Any, str] | None:
    """(time, file:line) of the log's first timed line (every log stream of the bundle), None without one."""
    r = a.records
    if r.height == 0 or "time" not in r.columns:
        return None
    t = r.filter(pl.col("time").is_not_null())
    if t.height == 0:
        return None
    first = t.sort("time").row(0, named=True)
    line = first.get("n") if first.get("n") is not None else first.get("line")
    return first["time"], f"{first.get('source')}:{line}"


def log_end(a: AnalysisView) -> Any:
    """The time of the log's last timed line (every log stream of the bundle), None without one."""
    r = a.records
    if r.height == 0 or "time" not in r.columns:
        return None
    return r.get_column("time").max()


def _unplaced(r: dict[str, Any], where: str, n: int, start: Any, base: int) -> pl.DataFrame:
    """``n`` interval events of one reading, not placed in time: ids ``<reading>~i<k>``; at most
    ``MAX_EVENTS_PER_COUNT`` of them (model.events: the rest of a larger count is said, :func:`_capped`)."""
    n = min(n, ev_mod.MAX_EVENTS_PER_COUNT)
    k = list(range(1, n + 1))
    dt = pl.Datetime("us", "UTC")
    return pl.DataFrame(
        {
            "event_id": [f"{where}~i{i}" for i in k],
            "time": pl.Series([None] * n, dtype=dt),
            "time_precision": [UNPLACED] * n,
            "interval_start": pl.Series([start] * n, dtype=dt),
            "interval_end": pl.Series([r["end"]] * n, dtype=dt),
            "kind": ["interval"] * n,
            "request_id": pl.Series([None] * n, dtype=pl.String),
            "mode": pl.Series([None] * n, dtype=pl.String),
            "engine": [r["engine"]] * n,
            "engine_kind": pl.Series([r.get("engine_kind")] * n, dtype=pl.String),  # the counter's engine (SGLang's)
            "cumulative": [base + i for i in k],
            "source": [r["source"]] * n,
            "line": pl.Series([r["line"]] * n, dtype=pl.UInt32),
            "raw": [r.get("raw")] * n,
            "stream": pl.Series([r.get("stream")] * n, dtype=pl.Int32),
            "seq": pl.Series([r["line"]] * n, dtype=pl.UInt32),
            "_sub": k,
        }
    )


def _read_from_start(a: AnalysisView) -> bool:
    """Every vLLM log stream of the bundle begins at a server start banner (vllm/runs.py: no run 0)."""
    runs = a.frames.get("server_runs")
    if runs is None or runs.height == 0 or not a.records.height:
        return False
    streams = set(a.records.get_column("stream").unique().to_list())
    begun = set(runs.filter(pl.col("stream_run") == 1).get_column("stream").to_list())
    return streams <= begun and not runs.filter(pl.col("stream_run") == 0).height


def _record_server_keys(a: AnalysisView) -> ServerKeys:
    """How records and counts of servers kept in folders of their own are told apart (ServerKeys)."""
    rec = record_events(a.frames)
    if rec is None or rec.height == 0:
        return ServerKeys()
    files = [f.display for f in a.bundle.files]
    logs = [f.display for f in a.bundle.files if f.kind in LOG_KINDS]
    return ServerKeys.of(sorted(set(rec.get_column("source").drop_nulls().cast(pl.String).to_list())), files, logs)


def records_vs_counts(
    frames: dict[str, pl.DataFrame],
    ev: pl.DataFrame,
    tz: str,
    baselines: pl.DataFrame | None = None,
    keys: ServerKeys | None = None,
) -> tuple[pl.DataFrame, int, dict[str, Any]]:
    """Block-table ``preempt`` records against the counts: (events, records used as events, info).

    Per engine, the records are the events over the span they cover, and every count there
    (``Preemptions: N`` fields, Prometheus increases, the first reading) is matched against them with
    the lag allowed: a disagreement is reported, and a counted preemption no record explains is an event
    without a record (counter-only; recordmatch.py has the rule and why).
    An engine whose log has per-preemption events of its own (V0 warnings, PREEMPTED markers) keeps
    them: its records are their evidence (matched by request id).
    """

    info: dict[str, Any] = {
        "notes": [],
        "disagreements": [],
        "replaced": 0,
        "kept_outside": 0,
        "engines": [],
        "keys": [],
        "counter_only": {},
    }
    # two servers side by side both call their engine "0": each one's records meet its own counts only
    keys = keys or ServerKeys()
    frames = keys.frames(frames)
    rec = record_events(frames)
    if rec is None or rec.height == 0:
        return ev, 0, info
    rec = ev_mod.conform(rec).with_columns(_eng=pl.col("engine").fill_null("0"))
    out = records_as_events(frames, rec, keys.key_df(ev), keys.key(baselines), tz)
    info.update(
        notes=list(out.notes),
        disagreements=list(out.disagreements),
        replaced=out.replaced,
        kept_outside=out.kept_outside,
        engines=sorted({keys.label(c.engine) for c in out.coverage}),
        keys=[c.engine for c in out.coverage],
        counter_only=dict(out.counter_only),
    )
    return keys.unkey(out.events), out.used, info


def _record_checks(
    a: AnalysisView,
    ev0: pl.DataFrame,
    prom_src: list[str],
    baselines: pl.DataFrame | None,
    engines: set[str],
    keys: ServerKeys | None = None,
) -> dict[tuple[str, str], Any]:
    """Each count source on its own (the events before any rule) against each engine's records:
    ``{(engine, source name): recordmatch.CrossCheck}`` (``engines``: keys of ``keys``, the records'
    servers kept apart)."""

    keys = keys or ServerKeys()
    frames = keys.frames(a.frames)
    rec = record_events(frames)
    if rec is None or rec.height == 0 or ev0.height == 0:
        return {}
    rec = ev_mod.conform(rec).with_columns(_eng=pl.col("engine").fill_null("0"))
    cov = coverage(frames, rec)
    fin = finishes(frames)
    ev0 = keys.key_df(ev0)
    baselines = keys.key(baselines)
    is_prom = pl.col("source").is_in(prom_src)
    families = [
        (PROM_COUNTER, ev0.filter(is_prom), baselines),
        (LOG_FIELDS, ev0.filter(~is_prom & (pl.col("kind") == "interval")), None),
    ]
    out: dict[tuple[str, str], Any] = {}
    for name, part, base in families:
        groups = count_groups(part, base, a.frames.get("prom_answers"))
        if groups.height == 0:
            continue
        for eng, c in sorted(cov.items()):
            if eng not in engines:
                continue  # its records are evidence of the log's own events
            mine = rec.filter(pl.col("_eng") == eng)
            chk = cross_check(eng, name, groups.filter(pl.col("_eng") == eng), mine, c, fin)
            if chk is not None:
                out[(eng, name)] = chk
    return out


def _vs_records(checks: dict[tuple[str, str], Any], name: str) -> dict[str, Any]:
    mine = [c.as_dict() for (_, n), c in sorted(checks.items()) if n == name]
    return {"vs_records": mine} if mine else {}


def _histogram_check(a: AnalysisView, facts: dict[str, Any], tz: str) -> dict[str, Any] | None:
    """vLLM's ``vllm:request_num_preemptions`` histogram (requests finished between the first and the
    last scrape, with their preemption counts) against the finish records of the same span
    (``num_preemptions``: vLLM's own ``request.num_preemptions``). A request finishing within the
    clocks' slack of an edge may fall on either side: the records give a range."""

    hist = facts.get("histogram") or {}
    w = facts.get("window")
    br = a.frames.get("bt_requests")
    if not hist or not w or br is None or br.height == 0:
        return None
    fin = br.filter((pl.col("phase") == "finish") & pl.col("num_preemptions").is_not_null())
    if fin.height == 0:
        return None
    slack = pl.duration(microseconds=int(CLOCK_SLACK_S * 1e6))
    w0, w1 = pl.lit(w[0]), pl.lit(w[1])
    sure = fin.filter((pl.col("time") > w0 + slack) & (pl.col("time") <= w1 - slack))
    maybe = fin.filter((pl.col("time") > w0 - slack) & (pl.col("time") <= w1 + slack))

    def total(df: pl.DataFrame) -> int:
        return int(df.get_column("num_preemptions").sum()) if df.height else 0

    lo, hi = total(sure), total(maybe)
    n_lo, n_hi = sure.height, maybe.height
    got, n_got = int(round(hist["preemptions_of_finished_requests"])), int(round(hist["finished_requests"]))
    out: dict[str, Any] = {
        "preemptions": got,
        "records_range": [lo, hi],
        "finished_requests": n_got,
        "finish_records_range": [n_lo, n_hi],
        "agrees": lo <= got <= hi and n_lo <= n_got <= n_hi,
    }
    if not out["agrees"]:
        out["disagreement"] = (
            f"prometheus histogram vllm:request_num_preemptions: {got} preemption(s) of {n_got} request(s) finished "
            f"between {iso(w[0], tz)} and {iso(w[1], tz)}; the finish records of that span hold {lo}-{hi} "
            f"preemption(s) of {n_lo}-{n_hi} request(s) (vLLM's request.num_preemptions): the records are the events"
        )
    return out


def _straddling(
    edge: pl.DataFrame,
    rest: pl.DataFrame,
    pairs: pl.DataFrame,
    is_prom: pl.Expr,
    tz: str,
    log0: tuple[Any, str] | None = None,
    keyed: pl.DataFrame | None = None,
    inside: pl.DataFrame | None = None,
) -> tuple[pl.DataFrame, list[str]]:
    """Events of log intervals that straddle an edge of the scrape window: the ones outside it.
    ``inside``: the log's count events inside the window (the counter's there).

    V0's reconstructed events carry their number since the engine started (``cumulative``, from
    the warnings' exact ``total_num_cumulative_preemption``), and the counter counts from the same
    start: where the engine's counter series has no reset and its warnings one counter chain (no PP
    stage beside it, no restart), the events numbered above the counter's last reading are after
    the window, those up to its first reading before it (:func:`_by_number`).

    A log interval (s, e] of N events that overlaps the counter's window (w0, w1] shares its
    preemptions with the counter. At the window's start, when the counter's first reading
    (since engine start) is known, the preemptions before w0 are that reading minus what the
    log counted up to s (clipped to 0..N; a counter of one engine is the Rust frontend's ``all``
    engine's too, and the engines' first readings summed, where every one of them was first read at the
    same scrape, an aggregated line's); otherwise the part outside is N times the share of the interval outside the
    window (rounded). At the window's end, where the counter's increase over the window is known
    (:func:`_window_rise`), the part inside is what the counter counted there that the log's counts
    before the interval do not hold (the counter's value splits the interval, not the time), and the
    rest is after the window. The events kept are re-placed evenly in the outside part of the interval.
    """

    base: dict[Any, tuple[Any, float]] = {}  # engine -> (end, value) of its first reading
    if pairs.height and "increase" in pairs.columns:
        b = pairs.filter(pl.col("increase").is_null() & pl.col("end").is_not_null())
        if log0 is not None and "created" in b.columns:  # a baseline (engine started before the log) is no help
            b = b.filter(pl.col("created").is_null() | (pl.col("created") + _SAME_SECOND >= pl.lit(log0[0])))
        for eng, end, value in b.select("engine", "end", "value").iter_rows():
            if eng not in base or end < base[eng][0]:
                base[eng] = (end, value)
    if len(base) == 1 and "all" not in base:  # one engine's counter: the Rust frontend's "all" is that engine
        (only,) = base
        base["all"] = base[only]
    elif len(base) > 1 and "all" not in base and len({t for t, _ in base.values()}) == 1:
        # several engines (data parallel), every one first read at the same scrape: an aggregated line's
        # ("N Engines Aggregated", engine "all") count before it is their first readings' sum
        base["all"] = (next(iter(base.values()))[0], sum(v for _, v in base.values()))
    kept = []
    notes = []
    groups = edge.group_by(
        "_eng", "source", "line", "interval_start", "interval_end", "_w0", "_w1", maintain_order=True
    )
    # the intervals across the window's start first: their part inside is some of what the counter counted
    # before an interval across its end (_window_rise)
    inside_first: dict[str, int] = {}
    for (eng, src, line, s0, e0, w0, w1), g in sorted(groups, key=lambda kg: not kg[0][3] < kg[0][5]):
        n = g.height
        span = (e0 - s0).total_seconds()
        numbered = _by_number(g, rest, keyed, eng, src, w0 if s0 < w0 else w1)
        if numbered is not None:
            lo, hi = (s0, w0) if s0 < w0 else (w1, e0)
            value, outside = numbered
            out = outside.height
            if s0 < w0:
                inside_first[eng] = inside_first.get(eng, 0) + n - out
            side = "first" if s0 < w0 else "last"
            notes.append(
                f"{src}:{line}: its interval [{iso(s0, tz)}, {iso(e0, tz)}] straddles the Prometheus scrape window "
                f"(engine {eng}); {n - out} of its {n} preemption(s) are the counter's, {out} kept outside it (the "
                f"counter read {value} at its {side} scrape; the V0 warnings' total_num_cumulative_preemption numbers "
                "them since the same start)"
            )
            if out:
                k = outside.sort("_sub").with_row_index("_k", offset=1)
                kept.append(
                    k.with_columns(
                        time=spread_interval(
                            pl.lit(lo), pl.lit(hi), pl.col("_k").cast(pl.Int64), pl.lit(out, pl.Int64)
                        ),
                        interval_start=pl.lit(lo),
                        interval_end=pl.lit(hi),
                    ).drop("_k")
                )
            continue
        if s0 < w0:
            lo, hi = s0, w0
            first = base.get(eng)
            if first is not None and first[0] == w0:
                mine = pl.col("engine").fill_null("0").is_in([eng, "all"] if eng != "all" else list(base))
                before = rest.filter(~is_prom & mine & (pl.col("time") <= s0)).height
                out = max(0, min(n, int(round(first[1])) - before))
                how = (
                    f"the counter read {int(round(first[1]))} at its first scrape, the log had counted {before} before"
                )
            else:
                out = int(round(n * (w0 - s0).total_seconds() / span)) if span > 0 else 0
                how = "by the share of the interval before the first scrape"
            inside_first[eng] = inside_first.get(eng, 0) + n - out
        else:
            lo, hi = w1, e0
            rise = _window_rise(keyed, inside, rest, is_prom, log0, eng, s0, w0, w1, inside_first.get(eng, 0))
            if rise is not None:
                inc, before = rise
                out = max(0, min(n, n - (inc - before)))
                how = (
                    f"the counter rose by {inc} over the window, the log had counted {before} of it before the "
                    "interval; the rest of the interval's are after the last scrape"
                )
            else:
                out = int(round(n * (e0 - w1).total_seconds() / span)) if span > 0 else 0
                how = "by the share of the interval after the last scrape"
        notes.append(
            f"{src}:{line}: its interval [{iso(s0, tz)}, {iso(e0, tz)}] straddles the Prometheus scrape window "
            f"(engine {eng}); {n - out} of its {n} preemption(s) are the counter's, {out} kept outside it ({how})"
        )
        if out:
            k = g.sort("_sub").head(out).with_row_index("_k", offset=1)
            kept.append(
                k.with_columns(
                    time=spread_interval(pl.lit(lo), pl.lit(hi), pl.col("_k").cast(pl.Int64), pl.lit(out, pl.Int64)),
                    interval_start=pl.lit(lo),
                    interval_end=pl.lit(hi),
                ).drop("_k")
            )
    if not kept:
        return edge.head(0), notes
    return pl.concat(kept, how="vertical_relaxed").select(edge.columns), notes


def _window_rise(
    keyed: pl.DataFrame | None,
    inside: pl.DataFrame | None,
    rest: pl.DataFrame,
    is_prom: pl.Expr,
    log0: tuple[Any, str] | None,
    eng: str,
    s0: Any,
    w0: Any,
    w1: Any,
    first_part: int,
) -> tuple[int, int] | None:
    """For a log count (s0, e0] across the scrape window's end w1 (of ``eng``'s key, :func:`_server_keys`):
    (the counter's increase over the window (w0, w1], what the log counted of it before s0), or None where
    that cannot be known. The counter's increase over the window is every preemption in it, so what the
    log's counts before the interval do not hold of it is the interval's part inside; the rest of the
    interval is after the last scrape. The log counted before s0: its count events inside the window
    ending by s0 (``inside``), its per-preemption lines in the window, and the inside part of a count
    across the window's start (``first_part``). Only where the counter's increases of that key are timed,
    of one series per engine, without a reset, make the window (w0, w1] (engine ``all``: its server's
    engines' summed), and the log begins by w0 (else what it did not see before it began falls in the
    interval)."""
    if keyed is None or keyed.height == 0 or "_ekey" not in keyed.columns or log0 is None or log0[0] > w0:
        return None
    if _is_all(eng):
        mine = keyed.filter(pl.col("_home") == ("" if eng == "all" else eng[len("all of ") :]))
    else:
        mine = keyed.filter(pl.col("_ekey") == eng)
    inc = mine.filter(pl.col("increase").is_not_null())
    if inc.height == 0 or inc.filter(pl.col("start").is_null() | pl.col("end").is_null()).height:
        return None
    if mine.get_column("reset").fill_null(False).any():
        return None
    e = pl.col("engine").fill_null("0")
    if mine.select("scope", "model_name", "engine_kind", e).unique().height != mine.select(e).unique().height:
        return None  # two series of one engine: which one the log's counts are is not known
    if inc.get_column("start").min() != w0 or inc.get_column("end").max() != w1:
        return None
    before = first_part
    if inside is not None and inside.height:
        before += inside.filter((pl.col("_eng") == eng) & (pl.coalesce("interval_end", "time") <= s0)).height
    before += rest.filter(
        ~is_prom
        & (pl.col("_eng") == eng)
        & pl.col("kind").is_in(["logged", "marker"])
        & (pl.col("time") > w0)
        & (pl.col("time") <= w1)
    ).height
    return int(inc.get_column("increase").sum()), before


def _by_number(
    g: pl.DataFrame, rest: pl.DataFrame, keyed: pl.DataFrame | None, eng: str, src: str, edge: Any
) -> tuple[int, pl.DataFrame] | None:
    """The events of V0 reconstructed count ``g`` (one warning's, straddling the scrape window's edge at
    ``edge``) outside the window, by their number since the engine's start: (the counter's reading at
    the edge, the events numbered above it after the window's end, or up to it before its start); None
    where numbers and counter cannot be compared. The warning's ``total_num_cumulative_preemption`` is
    vLLM's own count since the engine started, exact, and so is the counter's reading (a lower bound of
    it in between: vLLM adds a step's preemptions to the counter after the step), so the counter's value
    at the edge splits the warning's numbers without an estimate by time. Only where the engine's
    counter series (of its server: ``keyed``'s ``_ekey``) has no reset and a reading at that edge, and
    the warnings of that engine in ``src`` are one chain, each number above the one before (no restart
    between, no pipeline-parallel stage's counter beside it)."""
    if keyed is None or keyed.height == 0 or "_ekey" not in keyed.columns:
        return None
    if "cumulative" not in g.columns or (g.get_column("kind") != "reconstructed").any():
        return None
    if g.get_column("cumulative").null_count():
        return None
    mine = keyed.filter(pl.col("_ekey") == eng)
    if mine.height == 0 or mine.get_column("reset").fill_null(False).any():
        return None
    if mine.select("scope", "model_name", "engine_kind").unique().height != 1:
        return None  # two series under one key: which one numbers the warnings is not known
    at = mine.filter(pl.col("end") == edge)
    if at.height != 1:
        return None
    chain = (
        rest.filter((pl.col("_eng") == eng) & (pl.col("source") == src) & (pl.col("kind") == "logged"))
        .sort("time")
        .get_column("cumulative")
        .drop_nulls()
        .to_list()
    )
    if any(b <= a for a, b in pairwise(chain)):
        return None
    value = int(round(at.get_column("value").item()))
    after = edge == g.get_column("_w1").first()
    num = pl.col("cumulative")
    return value, g.filter(num > value if after else num <= value)


@dataclass(frozen=True)
class LogTiming:
    """One engine whose log counts agree with its counter inside the scrape window (:mod:`.agree`):
    the log's events stand there, the counter makes none."""

    engine: str
    count: int  # the counter's increase over the window = what the log counted there
    window: tuple[Any, Any]
    kinds: dict[str, int]  # the log's events there by kind
    log_intervals: int  # the log's counts there (stats lines, V0 counter jumps)
    log_from: tuple[str, str]  # first and last of them, file:line
    scrapes: int  # the counter's scrape intervals there
    counter_from: tuple[str, str]  # its first and last increase, file:line
    pair_keys: frozenset[str]  # the counter's increases (file:line[:col]): their events are not made

    def words(self, tz: str) -> str:
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(self.kinds.items()))
        lf, ll = self.log_from
        cf, cl = self.counter_from
        return (
            f"engine {self.engine}: inside the Prometheus scrape window ({iso(self.window[0], tz)} to "
            f"{iso(self.window[1], tz)}) the log's own counts agree with the counter: {self.count} ({kinds}; "
            f"{self.log_intervals} count(s), {lf}" + (f" to {ll}" if ll != lf else "") + f"), the counter rose by "
            f"{self.count} over {self.scrapes} scrape interval(s) ({cf}" + (f" to {cl}" if cl != cf else "") + "), "
            "and every scrape interval's increase is matched by the log's preemptions that can fall in it (each "
            "placed once, inside its own interval): the log's events are kept (its intervals are finer in time), no "
            "counter events are made there"
        )


def _log_timing_words(by_log: dict[str, LogTiming]) -> str:
    """The rule's words for the engines whose log counts agree with the counter."""
    what = ", ".join(f"engine {t.engine}: {t.count}" for t in by_log.values())
    return (
        f"where an engine's log counts agree with its counter in every scrape interval ({what}), the log's own "
        "events stand there (finer in time) and the counter makes none"
    )


def _continued_words(pairs: list[str]) -> str:
    """A file without its server's start whose first warning counts on from another file's counter
    (engines/vllm/preemptions.py ``_continued``), in words."""
    if not pairs:
        return ""
    more = f" (+{len(pairs) - 3} more)" if len(pairs) > 3 else ""
    return (
        "; "
        + "; ".join(pairs[:3])
        + more
        + " (a file without a start of its own, after the other ends: its counter is not counted again from 0)"
    )


def _kept_words(by_log: dict[str, LogTiming], kind: str) -> str:
    """A log source's note: the engines where its counts of ``kind`` agreed with the counter (kept)."""
    es = [t.engine for t in by_log.values() if t.kinds.get(kind)]
    if not es:
        return ""
    return (
        f"; inside the scrape window of engine(s) {', '.join(es)} they agree with the Prometheus counter in every "
        "scrape interval: their events are kept there (finer in time than the scrapes)"
    )


def _pair_key_expr() -> pl.Expr:
    """:func:`_pair_key` of each row of a counter-pairs frame."""
    return pl.concat_str(
        [
            pl.col("source").cast(pl.String),
            pl.lit(":"),
            pl.col("line").cast(pl.String).fill_null("?"),
            pl.when(pl.col("col").is_not_null())
            .then(pl.lit(":") + pl.col("col").cast(pl.String))
            .otherwise(pl.lit("")),
        ]
    )


def _pair_key(src: Any, line: Any, col: Any) -> str:
    """A counter increase's events' id before ``~`` (prometheus.counter_events)."""
    return f"{src}:{'?' if line is None else line}" + (f":{col}" if col is not None else "")


def _log_timing(
    ev: pl.DataFrame, pairs: pl.DataFrame, is_prom: pl.Expr, frames: dict[str, pl.DataFrame], tz: str
) -> tuple[dict[str, LogTiming], list[str]]:
    """The engines whose log counts agree with their counter inside the scrape window (rule 1):
    ``({engine: LogTiming}, notes)``. ``ev``: the events with ``_eng``, ``_w0``, ``_w1`` (the engine's
    scrape window).

    An engine is judged only where the comparison is exact, else today's rule stands for it: one
    counter series (one scope, model and engine kind), every increase timed, no counter reset (across
    one the counter misses what the run before counted after its last scrape), scrape intervals end to
    end; no log interval with preemptions across the window's edge (its inside share is an estimate),
    no count without an interval inside the window, no count capped (model.events: the events are
    fewer than the count), no block-table records (recordmatch.py decides there), no counter capped; a log count of engine ``all``
    (the Rust frontend's line sums every engine) only against a counter whose series are of one engine (the
    same preemptions; with several the counter's engines stand) and with no per-engine count beside it. Then the log's count
    events in the window (grouped per count) and its per-preemption events there must fit the scrape
    intervals (agree.fits): the totals equal and each scrape interval's increase exactly what the
    log's intervals can have in it.
    """

    out: dict[str, LogTiming] = {}
    notes: list[str] = []
    if ev.height == 0 or pairs.height == 0 or "increase" not in pairs.columns:
        return out, notes
    own = ev.filter(~is_prom)
    counts = own.filter(pl.col("kind").is_in(COUNT_KINDS))
    if counts.height == 0:
        return out, notes
    aggregated = any(_is_all(e) for e in counts.get_column("_eng").unique().to_list())
    if aggregated and counts.get_column("_eng").n_unique() > 1:
        return out, notes  # an aggregated line beside per-engine counts: which counts which is not known
    pos = pl.col("increase").clip(lower_bound=0)
    if pairs.select((pos.max() > ev_mod.MAX_EVENTS_PER_COUNT) | (pos.sum() > ev_mod.MAX_EVENTS_FROM_COUNTS)).item():
        return out, notes  # the counter's events capped: its count is not all events, its cap not all engines
    rec = record_events(frames)
    recorded = set(rec.get_column("engine").fill_null("0").to_list()) if rec is not None else set()
    if "all" in recorded:
        return out, notes
    capped = frames.get("capped_counts")
    capped_e = (
        set(capped.get_column("engine").fill_null("0").to_list()) if capped is not None and capped.height else set()
    )
    eng = pl.col("engine").fill_null("0")
    for e in sorted(set(counts.get_column("_eng").to_list())):
        # engine "all" (the Rust frontend's line sums every engine) is the one engine's count where the
        # counter's series are of one engine: the same preemptions (with several, the counter's engines stand)
        mine = pairs.filter(pl.col("_home") == _home_of(pl.lit(e))) if _is_all(e) else pairs.filter(eng == e)
        if e in recorded or e in capped_e or mine.height == 0 or (_is_all(e) and (recorded or capped_e)):
            continue
        if (
            mine.select("scope", "model_name", "engine_kind", eng).unique().height != 1
            or mine.get_column("reset").any()
        ):
            continue
        inc = mine.filter(pl.col("increase").is_not_null())
        if inc.height == 0 or inc.filter(pl.col("start").is_null() | pl.col("end").is_null()).height:
            continue
        inc = inc.sort("end")
        starts, ends = inc.get_column("start").to_list(), inc.get_column("end").to_list()
        if any(s != p for s, p in zip(starts[1:], ends, strict=False)):
            continue  # not end to end
        bounds = [starts[0], *ends]
        increases = [int(x) for x in inc.get_column("increase").to_list()]
        w0, w1 = bounds[0], bounds[-1]
        c = counts.filter(pl.col("_eng") == e)
        has_iv = pl.col("interval_start").is_not_null() & pl.col("interval_end").is_not_null()
        inside = has_iv & (pl.col("interval_start") >= w0) & (pl.col("interval_end") <= w1)
        apart = has_iv & ((pl.col("interval_end") <= w0) | (pl.col("interval_start") >= w1))
        bare = ~has_iv & (pl.col("time") > w0) & (pl.col("time") <= w1)
        if c.filter((has_iv & ~inside & ~apart) | bare).height:
            continue  # across the window's edge, or a count without its interval inside: not exact
        c = c.filter(inside)
        if c.height == 0:
            continue
        groups = (
            c.with_columns(_w=pl.col("event_id").str.replace(r"~[a-z][0-9]+$", ""))
            .group_by("_w", "kind", "interval_start", "interval_end")
            .agg(pl.len().alias("n"), pl.col("source").first(), pl.col("line").first())
            .sort("interval_end", "source", "line")
        )
        per = own.filter(
            (pl.col("_eng") == e)
            & pl.col("kind").is_in(["logged", "marker"])
            & (pl.col("time") > w0)
            & (pl.col("time") <= w1)
        )
        items = [Item(s, t, n) for s, t, n in groups.select("interval_start", "interval_end", "n").iter_rows()]
        items += [Item(t, t, 1) for t in per.get_column("time").to_list()]
        where = fits(bounds, increases, items)
        n_log = c.height + per.height
        if where is None:
            kinds = {k: n for k, n in pl.concat([c, per]).group_by("kind").len().iter_rows()}
            lines = [f"{s}:{ln}" for s, ln in groups.select("source", "line").iter_rows()]
            r0, r1 = inc.row(0, named=True), inc.row(inc.height - 1, named=True)
            out[e] = LogTiming(
                engine=e,
                count=sum(increases),
                window=(w0, w1),
                kinds=kinds,
                log_intervals=groups.height,
                log_from=(lines[0], lines[-1]),
                scrapes=len(increases),
                counter_from=(f"{r0['source']}:{r0['line']}", f"{r1['source']}:{r1['line']}"),
                pair_keys=frozenset(
                    _pair_key(s, ln, cl) for s, ln, cl in inc.select("source", "line", "col").iter_rows()
                ),
            )
        elif n_log == sum(increases):
            r = inc.row(min(where, inc.height) - 1, named=True)
            notes.append(
                f"engine {e}: inside the Prometheus scrape window the log's own counts add up to the counter's "
                f"increase ({n_log}) but do not fit its scrape intervals (first at the one from "
                f"{iso(r['start'], tz)} to {iso(r['end'], tz)}, {r['source']}:{r['line']}, +{r['increase']}): a clock "
                "offset between the log and the scrapes (--offset)? The counter's intervals are the events there"
            )
    return out, notes


def _server_keys(ev: pl.DataFrame, pairs: pl.DataFrame, logs: list[str]) -> tuple[pl.Expr, pl.DataFrame, pl.Expr]:
    """The key a counter series and the events meet by (rules 1 and 2, per engine): (the events' key, the
    pairs with it as ``_ekey`` and their server folder as ``_home``, the events' server folder: ``""`` for
    none); ``logs``: the display names of the bundle's log files.

    The key is the engine label, and, for a server the bundle keeps in a folder of its own, that folder
    (``0 of incident/b``). A scrape file's server is the logs under the deepest folder above it that holds
    one (``b/metrics.prom`` beside ``b/vllm.log``; ``a/metrics/`` beside ``a/logs/``), below the folder
    every file shares (that one holds every server). Every other file under such a folder (its logs, its
    records) is that server's; the rest meet the counters of no folder. Two servers side by side both call
    their engine "0": one's counter never replaces the other's counts."""
    eng = pl.col("engine").fill_null("0")
    plain = (eng, pairs.with_columns(_ekey=eng, _home=pl.lit("")) if pairs.height else pairs, pl.lit(""))
    if pairs.height == 0 or "source" not in pairs.columns:
        return plain
    scrapes = sorted(set(pairs.get_column("source").drop_nulls().cast(pl.String).to_list()))
    others = (
        set(ev.get_column("source").drop_nulls().cast(pl.String).to_list())
        if ev.height and "source" in ev.columns
        else set()
    )
    own = server_homes(scrapes, logs, others)
    if not own:
        return plain

    def key(place: pl.Expr) -> pl.Expr:
        return pl.when(place == "").then(eng).otherwise(pl.concat_str([eng, pl.lit(" of "), place]))

    of = pl.col("source").cast(pl.String).replace_strict(own, default="", return_dtype=pl.String)
    return key(of), pairs.with_columns(_ekey=key(of), _home=of), of


def _is_all(key: str) -> bool:
    """A key of :func:`_server_keys` for engine ``all`` (the Rust frontend's line of every engine)."""
    return key == "all" or key.startswith("all of ")


def _home_of(key: pl.Expr) -> pl.Expr:
    """The server folder of an engine ``all`` key (``""`` for the bundle's own), null for an engine's."""
    return (
        pl.when(key == "all")
        .then(pl.lit(""))
        .when(key.str.starts_with("all of "))
        .then(key.str.slice(len("all of ")))
        .otherwise(pl.lit(None, pl.String))
    )


def _timed_pids(allp: pl.DataFrame) -> list[int]:
    ok = allp.filter(pl.col("increase").is_not_null() & pl.col("start").is_not_null() & pl.col("end").is_not_null())
    return ok.get_column("_pid").to_list()


def _kind_counts(ev: pl.DataFrame, cond: pl.Expr) -> dict[str, int]:
    return {k: n for k, n in ev.filter(cond).group_by("kind").len().iter_rows()}


def _span(df: pl.DataFrame, tz: str) -> list[Any] | None:

    t = df.get_column("time").drop_nulls() if "time" in df.columns else None
    if t is None or t.len() == 0:
        return None
    return [iso(t.min(), tz), iso(t.max(), tz)]  # type: ignore[arg-type]  # polars scalars are typed as every literal


def _resets(facts: dict[str, Any]) -> int:
    """Counter resets (engine restarts) inside the scrape window, dated by a new ``_created`` or not.
    Either way what the run before counted after its last scrape is not visible (the counter starts
    again at the restart), so a count across a reset is a lower bound; one run's count is exact."""
    return int(facts.get("resets") or 0)


def _across_resets(facts: dict[str, Any]) -> str:
    n = _resets(facts)
    return (
        f"the window spans {n} counter reset(s) (engine restarts): what a run counted after its last scrape "
        "before the restart is not visible, so the total is a lower bound"
    )


def _undated_resets(facts: dict[str, Any]) -> int:
    """Counter resets not dated by a new ``_created``: the preemptions between the last reading before
    them and the restart are unknown (a dated restart's first value counts from its new start)."""
    return int(facts.get("resets") or 0) - int(facts.get("resets_dated") or 0)


def _prom_note(facts: dict[str, Any], pairs: pl.DataFrame) -> str:
    parts = [f"{facts.get('scrapes', 0)} scrape(s), {facts.get('series', 0)} series"]
    base = pairs.filter(pl.col("increase").is_null())
    if base.height:
        # each series' first reading counts since its engine's start: before that reading, which is the first
        # scrape only for a series the first scrape holds (an engine first seen later counts up to its own)
        per = (
            base.group_by(pl.col("engine").fill_null("0").alias("e")).agg(pl.col("value").sum()).sort("e")
            if "engine" in base.columns
            else base.select(pl.lit("0").alias("e"), pl.col("value").sum())
        )
        by = " (" + ", ".join(f"engine {e}: {int(v)}" for e, v in per.iter_rows()) + ")" if per.height > 1 else ""
        parts.append(
            f"{int(per.get_column('value').sum())} preemption(s) before each series' first reading{by} (since its "
            "engine's start, not placed)"
        )
    if _undated_resets(facts):
        parts.append(
            f"{_undated_resets(facts)} counter reset(s): preemptions between the last scrape before a restart and the "
            "restart are lost"
        )
    if facts.get("resets_dated"):
        parts.append(
            f"{facts['resets_dated']} restart(s) dated by a new _created: each new run's first value counts from its "
            "start, none placed in the downtime between the runs; what the run before counted after its last scrape "
            "is not visible"
        )
    untimed = pairs.filter(pl.col("increase").is_not_null() & (pl.col("start").is_null() | pl.col("end").is_null()))
    if untimed.height:
        parts.append(
            f"{int(untimed.get_column('increase').sum())} counted in scrapes without a time (events without time)"
        )
    return "; ".join(parts)


def _outside(ev: pl.DataFrame, is_prom: pl.Expr, timed: pl.DataFrame) -> int:
    """Log events of an engine that stand outside that engine's scrape window (kept, from the log's own count)."""
    if ev.height == 0:
        return 0
    win = timed.group_by("engine").agg(pl.col("start").min().alias("_w0"), pl.col("end").max().alias("_w1"))
    e = (
        ev.filter(~is_prom)
        .with_columns(_eng=pl.col("engine").fill_null("0"))
        .join(win, left_on="_eng", right_on="engine", how="left")
    )
    return e.filter(
        pl.col("_w0").is_null() | (pl.col("time") <= pl.col("_w0")) | (pl.col("time") > pl.col("_w1"))
    ).height
