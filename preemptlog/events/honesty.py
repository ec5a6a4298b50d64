"""The honesty notes that go with every result: where each count comes from and what it cannot see."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import polars as pl

from .. import engines
from ..events.pressure import log_capability
from ..events.reconcile import PROM_COUNTER

if TYPE_CHECKING:
    from ..model.result import AnalysisView


def _has_counter(recon: dict[str, Any]) -> bool:

    return any(x.get("source") == PROM_COUNTER for x in recon.get("sources", []))


def honesty_notes(a: AnalysisView) -> list[str]:
    notes: list[str] = []
    kinds = a.events.get_column("kind").value_counts() if a.events.height else None
    counts = {r[0]: r[1] for r in kinds.iter_rows()} if kinds is not None else {}
    v0 = a.counters.get("v0", {})
    if v0.get("logged_lines"):
        runs = v0.get("runs", 0)
        notes.append(
            "vLLM V0 logs only the 1st, 51st, 101st... preemption: "
            f"{counts.get('reconstructed', 0)} events were reconstructed from total_num_cumulative_preemption "
            f"(no request id, time placed in the interval); up to 49 more after the last warning of each of "
            f"{runs} counter run(s) cannot be seen in the log."
        )
        if v0.get("counter_inferred"):
            notes.append(
                f"{v0['counter_inferred']} V0 warning(s) had their total_num_cumulative_preemption cut off; "
                "inferred as the previous logged value + 50 (V0 logs every 50th preemption)."
            )
        if v0.get("counter_out_of_range"):
            n, inferred = v0["counter_out_of_range"], v0.get("counter_out_of_range_inferred", 0)
            how: list[str] = []
            if inferred:
                how.append(f"{inferred} inferred as the previous logged value + 50 (V0 logs every 50th preemption)")
            if n - inferred:
                how.append(f"{n - inferred} left without one (the count around them is a lower bound)")
            notes.append(
                f"{n} V0 warning(s) had a total_num_cumulative_preemption out of range (more digits than a 64-bit "
                f"counter holds: a damaged value, not a count; first at {v0.get('counter_out_of_range_first')}): "
                f"read as a missing counter, {', '.join(how)}."
            )
        if v0.get("counter_unsampled"):
            n, inferred = v0["counter_unsampled"], v0.get("counter_unsampled_inferred", 0)
            notes.append(
                f"{n} V0 warning(s) had a total_num_cumulative_preemption below the one before it and of a form vLLM "
                f"never prints (V0 logs the 1st, 51st, 101st... preemption: 50k + 1; first at "
                f"{v0.get('counter_unsampled_first')}: a line cut inside its digits, not a restart): read as a missing "
                f"counter, {inferred} inferred as the previous logged value + 50"
                + (
                    f", {n - inferred} left without one (the count around them is a lower bound)."
                    if n - inferred
                    else "."
                )
            )
        if v0.get("without_counter"):
            notes.append(
                f"{v0['without_counter']} V0 warning(s) had no readable total_num_cumulative_preemption "
                "(cut line): the count around them is a lower bound."
            )
        if v0.get("duplicates"):
            notes.append(f"{v0['duplicates']} duplicated V0 warning line(s) (same counter value) counted once.")
    log_src = [f.display for f in a.bundle.of_kind("vllm-log")]
    prom_src = [f.display for f in a.bundle.of_kind("prometheus")]
    ev = a.events
    log_interval = (
        ev.filter(
            (pl.col("kind") == "interval")
            & pl.col("source").is_in(log_src)
            & (pl.col("mode") != "SWAP").fill_null(True)
        ).height
        if ev.height
        else 0
    )
    unplaced = (
        ev.filter(pl.col("source").is_in(prom_src) & (pl.col("time_precision") == "unplaced")).height
        if ev.height
        else 0
    )
    prom_events = (ev.filter(pl.col("source").is_in(prom_src)).height if ev.height else 0) - unplaced
    if log_interval:
        notes.append(
            "V1 'Preemptions: N' counts are per stats interval and lag: a preempted request is counted when it "
            "produces output again, so the interval can be later than the preemption."
        )
    # Each engine's scraped events, in its words (Engine.prom_counter_note): the default engine's are
    # every placed scraped event no other engine claims; the unplaced ones (a reading's count since the
    # engine started that no other source places) likewise, each engine's named as its own.
    scraped = ev.filter(pl.col("source").is_in(prom_src)) if ev.height else ev
    placed = scraped.filter(pl.col("time_precision") != "unplaced") if scraped.height else scraped
    away = scraped.filter(pl.col("time_precision") == "unplaced") if scraped.height else scraped

    def per_engine(frame: pl.DataFrame) -> dict[str, int]:
        mine = {
            eng.name: frame.filter(pl.col("engine_kind") == eng.name).height
            if frame.height and "engine_kind" in frame.columns
            else 0
            for eng in engines.others()
        }
        return {engines.DEFAULT: frame.height - sum(mine.values()), **mine}

    placed_by, away_by = per_engine(placed), per_engine(away)
    for eng in engines.registered():
        if placed_by.get(eng.name):  # SGLang's counter counts a retraction when it happens (update_running_batch)
            notes.append(eng.prom_counter_note.format(n=placed_by[eng.name]))
    for eng in engines.registered():
        if away_by.get(eng.name):
            notes.append(
                f"{away_by[eng.name]} event(s) are {eng.plural(2)} {eng.display}'s /metrics counter counted since the "
                "engine started and no other source places: counted, not placed in time (no request id); the "
                "pressure intervals are where they can have happened."
            )

    cap = log_capability(a)
    recon = a.counters.get("reconciliation") or {}
    if cap.has_log and cap.counts == "none" and not counts.get("marker"):
        why = (cap.reason if cap.reason.startswith("vLLM") else cap.reason[0].upper() + cap.reason[1:]) + "."
        singles = recon.get("single_readings") or []
        # Said of the event set, not of the sources present: the kinds the events are.
        if counts.get("record"):
            crossed = " (the Prometheus counter is a cross-check)" if prom_events == 0 and _has_counter(recon) else ""
            why += (
                f" The count here comes from the block-table 'preempt' records in the bundle{crossed}, not from "
                "the log."
            )
        elif prom_events or unplaced or _has_counter(recon):
            why += " The count here comes from the Prometheus counter in the bundle, not from the log."
        elif singles:
            r = singles[0]
            more = f" (and {len(singles) - 1} more series)" if len(singles) > 1 else ""
            why += (
                f" The only count is one Prometheus reading: {r['value']} preemption(s) since the engine's start"
                + (f" ({r['engine_start']})" if r.get("engine_start") else "")
                + f", read at {r['time']} ({r['from']}){more}, a total without timing; add /metrics scrapes taken "
                "during the incident to place them in time."
            )
        else:
            why += (
                " A count of 0 here means the log cannot show preemptions, not that none happened: " + cap.remedy + "."
            )
        piv = a.frames.get("pressure_intervals")
        if piv is not None and piv.height:
            why += (
                f" {piv.height} suspected pressure interval(s) (KV cache at the ceiling with requests waiting) are "
                "listed separately; they are evidence, not a count."
            )
        elif a.stats.height:
            why += " The stats lines show no interval of KV pressure (KV cache at the ceiling with requests waiting)."
        notes.append(why)
    for d in recon.get("disagreements") or []:
        notes.append("sources disagree: " + d)
    return notes
