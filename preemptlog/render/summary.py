"""The per-incident summary and the honesty notes that go with every result."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

import polars as pl

from .. import engines as registry  # ``engines`` is a local name here (a cause's engine labels)
from ..clock.timebase import iso
from ..events.servers import interleaved
from ..events.visibility import count_visibility
from ..joiner.spans import pressure_src
from ..model.config import in_force
from ..model.requests import incident_requests, with_request_key
from ..model.result import SUMMARIZER
from ..rules.verdicts import guide_model
from ..sources.prometheus.scrapetime import FILE_MTIME, STDIN_READ
from .each import split_by_incident
from .view import filtered_headline

if TYPE_CHECKING:
    from ..model.result import Analysis


def _repeated_requests(a: Analysis, ev: pl.DataFrame) -> list[dict[str, Any]]:
    """Requests preempted more than once, a request being (stream, process, id).

    Log events take their process prefix (``Name pid=N``) from their record; events of other
    sources are identified by their source file.
    """
    with_id = ev.filter(pl.col("request_id").is_not_null())
    if not with_id.height:
        return []
    with_id = with_request_key(with_id, a.records)  # the one identity every count of a request keys by
    keys = ["stream", "_who", "_proc", "request_id"]
    rep = (
        with_id.group_by(keys)
        .len()
        .filter(pl.col("len") > 1)
        .sort(["len", "request_id", "stream", "_proc"], descending=[True, False, False, False], nulls_last=True)
    )
    out = []
    for row in rep.iter_rows(named=True):
        src = a.bundle.stream_name(row["stream"]) if row["stream"] is not None else row["_who"]
        out.append({"request_id": row["request_id"], "count": row["len"], "source": src, "process": row["_proc"]})
    return out


def summarize(a: Analysis) -> dict[str, Any]:

    ev = a.events
    tz = a.tz
    by_kind = {k: 0 for k in ("logged", "reconstructed", "interval", "marker", "record")}
    if ev.height:
        for k, n in ev.group_by("kind").len().iter_rows():
            by_kind[k] = n
    # A request is (server, id): two servers (or two copies of one log) reuse ids, so ids are
    # counted per stream; within a stream, per process (two Ray workers' sequence group 63 are two).
    received = incident_requests(a).distinct
    total = ev.height
    rate = (total / received) if received else None
    repeated = _repeated_requests(a, ev)
    gates = ["G1-kv-space", "G2-batch-variance", "G3-queue-overflow", "G4-prefix-conflict", "undetermined"]
    v = a.verdicts
    if v is not None and v.height and ev.height:
        ev = ev.join(v.select("event_id", "gate", "sub_kind", "confidence", "rule"), on="event_id", how="left")
    else:
        ev = ev.with_columns(
            gate=pl.lit(None, pl.String),
            sub_kind=pl.lit(None, pl.String),
            confidence=pl.lit(None, pl.String),
            rule=pl.lit(None, pl.String),
        )
    by_gate: dict[str, Any] = {}
    if v is not None:
        by_gate = {g: 0 for g in gates}
        for g, n in ev.group_by("gate").len().iter_rows():
            if g is not None:
                by_gate[g] = n
    by_sub = {}
    g1 = ev.filter(pl.col("gate") == "G1-kv-space") if ev.height else ev
    if g1.height:
        by_sub = {str(k): n for k, n in g1.group_by("sub_kind").len().sort("sub_kind").iter_rows()}
    by_conf = {}
    if v is not None and ev.height:
        by_conf = {str(k): n for k, n in ev.group_by("confidence").len().sort("confidence").iter_rows()}
    timed = ev.filter(pl.col("time").is_not_null()) if ev.height else ev
    per_minute = []
    if timed.height:
        pm = (
            timed.with_columns(minute=pl.col("time").dt.truncate("1m"))
            .group_by("minute")
            .agg(
                pl.len().alias("count"),
                *[(pl.col("kind") == k).sum().alias(k) for k in by_kind],
                *[(pl.col("gate") == g).sum().alias(g) for g in by_gate],
            )
            .sort("minute")
        )
        per_minute = [
            {
                "minute": iso(r["minute"], tz),
                "count": r["count"],
                **{k: r[k] for k in by_kind},
                **({"by_gate": {g: r[g] for g in by_gate}} if by_gate else {}),
            }
            for r in pm.iter_rows(named=True)
        ]
    rec_t = a.records.get_column("time") if a.records.height else None
    span = {
        "first": iso(rec_t.min(), tz) if rec_t is not None else None,
        "last": iso(rec_t.max(), tz) if rec_t is not None else None,
    }
    stats = a.stats
    stats_summary = {
        "lines": stats.height,
        "max_kv_usage": stats.get_column("kv_usage").max() if stats.height else None,
        "max_waiting": stats.get_column("waiting").max() if stats.height else None,
        "max_running": stats.get_column("running").max() if stats.height else None,
        "preemptions_field_lines": stats.filter(pl.col("preemptions").is_not_null()).height if stats.height else 0,
    }
    cfg = {
        k: {
            "value": v["value"],
            "status": v["status"],
            "from": f"{v['source']}:{v['line']}" if v["source"] else None,
            "note": v["note"],
        }
        for k, v in sorted(in_force(a.config).items())
    }
    rules_info = None
    fixes = None
    if a.ruleset is not None:
        rules_info = {
            "files": list(a.ruleset.files),
            "thresholds": {t.name: {"value": t.value, "origin": t.origin} for t in a.ruleset.thresholds.values()},
            "active": [r.id for r in a.ruleset.active],
        }
        fixes = a.fixes or {"changes": [], "to_know_more": [], "dropped": []}
    visible = count_visibility(a)
    out = {
        "count_visible": visible["count_visible"],
        "not_visible": None if visible["count_visible"] else visible,
        "events": total if visible["count_visible"] else None,  # not visible: no count, not a count of 0
        "by_kind": by_kind,
        "by_gate": by_gate,
        "g1_sub_kinds": by_sub,
        "by_confidence": by_conf,
        "requests_received": received,
        "preemption_rate": rate,
        "first_event": iso(timed.get_column("time").min(), tz) if timed.height else None,
        "last_event": iso(timed.get_column("time").max(), tz) if timed.height else None,
        "events_without_time": ev.height - timed.height,
        "log_span": span,
        "requests_preempted_more_than_once": repeated,
        "per_minute": per_minute,
        "stats": stats_summary,
        "v0_counter": {
            "logged_warnings": a.counters.get("v0", {}).get("logged_lines", 0),
            "runs": a.counters.get("v0", {}).get("runs", 0),
            "last_totals": a.counters.get("v0", {}).get("last_totals", []),
        },
        "config": cfg,
        "reconciliation": a.counters.get("reconciliation"),
        "pressure_intervals": pressure_rows(a),
        "rules": rules_info,
        "fixes": fixes["changes"] if fixes else None,
        "to_know_more": fixes["to_know_more"] if fixes else None,
        "fixes_dropped": fixes["dropped"] if fixes else None,
        "pressure_ceiling": a.options.kv_ceiling,
        "inputs": [f.as_dict() for f in a.bundle.files],
        "assumptions": grouped_assumptions([x.as_dict() for x in a.assumptions]),
        "notes": list(a.notes),
        "warnings": list(a.warnings),
        "timezone": tz,
        "filters": getattr(a, "filters", None),
    }
    out["cause"] = cause(a, ev, out["pressure_intervals"])
    if not visible["count_visible"]:
        out["preemption_rate"] = None  # no count, so no rate (0 / received would read as "none happened")
        if visible.get("remedy") and out["to_know_more"] is not None:
            out["to_know_more"] = [
                {
                    "add": visible["remedy"].removeprefix("add ").removeprefix("Add "),
                    "settles": f"how many {registry.noun(registry.engine_kinds(a.events, a.config, a.records), 2)} happened "
                    "(the count)",
                },
                *out["to_know_more"],
            ]
    gaps = (out["reconciliation"] or {}).get("uncounted_spans") or []
    if gaps and out["to_know_more"] is not None:  # what would count the spans nothing counts
        out["to_know_more"] = [*_gap_remedies(gaps), *out["to_know_more"]]
    f = getattr(a, "findings", None)  # recompute cost, thrash, stall
    out["findings_headline"] = f.top() if f is not None else None
    out.update(_engines(a, f))
    if (np_ := not_a_preemption(f, a.tz)) is not None:  # a stall, not a preemption (issue 38)
        out["not_a_preemption"] = np_
    out["crashes"] = crash_rows(a)
    out["headline"] = headline(out) + crash_words(out)
    if out.get("filters"):  # a filtered view: how many are shown of how many, never the total's quality
        out["headline"] = filtered_headline(out)
    out["incidents"] = incident_names(a)
    if out["incidents"]:  # several servers or runs: one answer each, never one mixed sentence
        out["headline"] = not_one_incident(out["incidents"])
    woven = interleaved(a.records) if not out.get("filters") else []
    if woven:  # several servers' lines in one stream, nothing to tell whose: no count is theirs
        out["headline"] = not_one_server(woven, out.get("events"))
    out["to_know_more_line"] = to_know_more_line(out)
    return out


def incident_names(a: Analysis) -> list[str] | None:
    """The incidents of a bundle that holds more than one (render/each.py split_by_incident: servers,
    and logs that do not meet in time; the containers of a file that holds several), by name; None for
    one incident (or a filtered view: its figures are the whole bundle's)."""

    if getattr(a, "filters", None) or not a.bundle.streams():
        return None
    units = split_by_incident([""], a)
    return [u.name for u in units] if len(units) > 1 else None


def not_one_server(woven: list[dict[str, Any]], events: Any) -> str:
    """The headline of a bundle whose log interleaves several servers' lines (events/servers.py
    ``interleaved``): it names the log and refuses the merged count."""
    f = woven[0]
    how = "(get each pod's log, or kubectl logs --prefix, and analyse with --each)"
    if f["by"] == "pid":
        counted = f"the {events} counted are their sum" if isinstance(events, int) else "no count is visible"
        return (
            f"Not one server: {f['source']} interleaves two or more servers' lines, told apart only by their process "
            f"ids (line {f['line']}); {counted}, the cause and fixes read them mixed {how}"
        )
    counted = f"the {events} counted together are" if isinstance(events, int) else "its count is"
    return (
        f"Not one server: {f['source']} interleaves two or more servers' lines with nothing to tell whose "
        f"(line {f['line']}); {counted} neither one server's nor their sum {how}"
    )


def not_one_incident(names: list[str]) -> str:
    """The headline of a bundle of several incidents."""
    logs = [n for n in names if not n.startswith("(")]
    other = " and other sources" if len(logs) < len(names) else ""
    if len(logs) == 1 and other:  # one log, and files of other kinds that do not meet it in time
        return (
            f"Not one incident: {logs[0]} and other sources that do not meet it in time (another incident: their "
            "counts are not the log's); each one's answer is its own (preemptlog analyze --each)"
        )
    return (
        f"Not one incident: {len(logs)} logs of different servers or of runs that do not meet in time{other}; each one's "
        "answer is its own (preemptlog analyze --each)"
    )


def crash_rows(a: Analysis) -> list[dict[str, Any]]:
    """The exceptions and fatal errors of the logs (engines/vllm/trouble.py ``engine_crashes``)."""
    cr = a.frames.get("engine_crashes")
    if cr is None or cr.height == 0:
        return []
    return [
        {"time": iso(r["time"], a.tz), "what": r["what"], "where": r["where"], "at": f"{r['source']}:{r['line']}"}
        for r in cr.sort("time", "line", nulls_last=True).iter_rows(named=True)
    ]


def crash_words(s: dict[str, Any]) -> str:
    """``; then AssertionError in vllm/core/scheduler.py:1027 _schedule_default at 06:51:31, the second of
    a preemption``: the first crash of the bundle (and how many more), for the headline."""
    cr = s.get("crashes") or []
    if not cr:
        return ""
    x = cr[0]
    inside = f" in {x['where']}" if x.get("where") else ""
    when = f" at {_hms(x['time'])}" if x.get("time") else ""
    same = ""
    first, last = s.get("first_event"), s.get("last_event")
    at, lo, hi = _instant(x.get("time")), _instant(first), _instant(last)
    # compared as instants (a clock read as text sorts 23:59 after 00:01, and repeats an hour in the fall)
    if at is not None and lo is not None and hi is not None and lo <= at <= hi:
        same = ", among the preemptions"
    elif at is not None and _same_second(x.get("time"), last):
        same = ", the second of a preemption"
    more = f" (and {len(cr) - 1} more)" if len(cr) > 1 else ""
    return f"; then {x['what']}{inside}{when}{same}{more}"


def grouped_assumptions(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Assumptions of one kind (topic, value, source) made for several files are one entry:
    ``scope`` says how many and the first and last, ``count`` how many, ``scopes`` which (a bundle
    of 200 scrape files has one line for their scrape times, not 200). A value's per-file detail in
    parentheses (a file's mtime) does not split a kind; the entry says it varies."""
    order: list[tuple[str, str, str]] = []
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for x in items:
        value = str(x["value"])
        base = value.split(" (", 1)[0] if x.get("scope") != "bundle" else value
        key = (str(x["topic"]), base, str(x["source"]))
        if key not in groups:
            order.append(key)
            groups[key] = []
        groups[key].append(x)
    out = []
    for key in order:
        g = groups[key]
        if len(g) == 1:
            out.append(g[0])
            continue
        values = {str(x["value"]) for x in g}
        scopes = [str(x["scope"]) for x in g]
        out.append(
            {
                "topic": key[0],
                "scope": f"{len(g)} files: {scopes[0]} ... {scopes[-1]}",
                "value": g[0]["value"] if len(values) == 1 else key[1] + " (per file)",
                "source": key[2],
                "count": len(g),
                "scopes": scopes,
            }
        )
    return out


def _engines(a: Analysis, f: Any) -> dict[str, Any]:
    """``engine_kind`` (vllm | sglang | sglang+vllm), ``engine_kinds`` (events per engine) and each
    engine's own section under its name (Engine.summary_section: SGLang's ``sglang``)."""
    kinds = registry.engine_kinds(a.events, a.config, a.records)
    own = {
        e.name: e.summary_section(registry.own_view(a, e.name), f)
        for e in registry.registered()
        if e.summary_section is not None
    }
    return {"engine_kind": registry.engine_kind(kinds), "engine_kinds": kinds, **own}


# The field guide's gates, spelled out where a person reads them (one spelling everywhere).
GATE_WORDS = {
    "G1-kv-space": "KV space",
    "G2-batch-variance": "batch variance",
    "G3-queue-overflow": "queue overflow",
    "G4-prefix-conflict": "prefix conflict",
    "undetermined": "undetermined",
}
# What upstream vLLM's own code says, per engine generation (engine_facts.py), for the headline.
CODE_SENTENCE = {
    "V1": "vLLM V1 preempts a running request only when a KV-block allocation fails",
    "V0": "vLLM V0 preempts a running sequence only when it cannot get KV blocks ('not enough KV cache space')",
    None: "vLLM preempts a running request only when it cannot get KV blocks",
}


def cause(a: Analysis, ev: pl.DataFrame, pressure: list[dict[str, Any]]) -> dict[str, Any]:
    """The incident's cause in vLLM's terms (the headline's words; ``summary.cause`` in the JSON)."""

    cfg = in_force(registry.config_of(a.config, registry.DEFAULT))  # the default engine's generation and version
    gen = (cfg.get("engine") or {}).get("value") if (cfg.get("engine") or {}).get("status") != "default" else None
    ver_row = cfg.get("vllm_version")
    version = ver_row["value"] if ver_row and ver_row.get("status") != "default" else None
    rules: dict[str, int] = {}
    if ev.height and "rule" in ev.columns:
        rules = {str(r): n for r, n in ev.group_by("rule").len().sort("rule").iter_rows() if r is not None}
    unplaced = ev.filter(pl.col("time_precision") == "unplaced") if ev.height else ev
    engines = sorted({str(e) for e in ev.get_column("engine").fill_null("0").to_list()}) if ev.height else []
    timed = [p for p in pressure if p.get("start") and p.get("end")]
    spans = _cited_spans(a, ev, timed)
    # The engine the bundle shows (one engine's words; both named for a bundle of two engines).
    shown = [e for e in registry.registered() if e.name in registry.engine_kinds(a.events, a.config, a.records)]
    own = shown[0] if len(shown) == 1 and not shown[0].default else None
    resets = _resets(a, ev)
    return {
        "upstream": not guide_model(a),
        "engine": own.display if own else "+".join(e.display for e in shown) or registry.default().display,
        "generation": gen if own is None else None,
        "version": version if own is None else None,
        # the engine's words given the bundle (a reset of the prefix cache, forced retractions), else its
        # static words, else the default engine's by generation
        "code": next(
            (w for e in shown if e.cause_words is not None and (w := e.cause_words(registry.own_view(a, e.name)))),
            None,
        )
        or ((own.cause_code or CODE_SENTENCE[None]) if own else CODE_SENTENCE.get(gen, CODE_SENTENCE[None])),
        "by_rule": rules,
        "contradicted": sum(n for r, n in rules.items() if r.endswith("-contradicted")),
        "cache_reset": resets["events"],
        "priority_path": rules.get("G3-priority-preemption-v0", 0),
        # the resets of the prefix cache those events came from, in the engine's words (joiner/reset.py)
        **({"resets": resets} if resets["events"] else {}),
        "engines": engines,
        "unplaced": unplaced.height,
        # of them, a log's own count before it began (a V0 log that begins inside a server run)
        "unplaced_before_log": unplaced.filter(pl.col("kind") == "reconstructed").height if unplaced.height else 0,
        "unplaced_span": [
            iso(unplaced.get_column("interval_start").min(), a.tz),
            iso(unplaced.get_column("interval_end").max(), a.tz),
        ]
        if unplaced.height
        else None,
        # each engine's start its unplaced events count from (the counter's _created, or its banner)
        **({"unplaced_starts": _starts(unplaced, a.tz)} if unplaced.height else {}),
        # the reading's time where it is assumed (the file's mtime, the moment standard input was read)
        **({"unplaced_read": how} if unplaced.height and (how := _read_assumed(a, unplaced)) else {}),
        "pressure": _pressure(spans),
        # several engines (data parallel: each its own KV pool and scheduler): each one's events and the
        # pressure its own events cite, so the headline never gives one engine's evidence as another's why
        **({"by_engine": _by_engine(a, ev, timed)} if len(engines) > 1 else {}),
        # no event to cite an interval, intervals of several engines: each engine's pressure on its own
        **({"pressure_by_engine": by} if not ev.height and len(by := _pressure_of_engines(spans)) > 1 else {}),
    }


def _pressure(spans: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The cause's ``pressure``: how many intervals, the first one, the peak KV usage, the most waiting and
    where running fell most, over ``spans`` (pressure rows)."""
    if not spans:
        return None
    return {
        "spans": len(spans),
        "first": [spans[0]["start"], spans[0]["end"]],
        "peak_kv_usage": max((p["peak_kv_usage"] for p in spans if p.get("peak_kv_usage") is not None), default=None),
        "max_waiting": max((p["max_waiting"] for p in spans if p.get("max_waiting") is not None), default=None),
        "running_fell": _running_fell(spans),
    }


def _index_order(i: str) -> tuple[int, int, str]:
    return (0, int(i), i) if i.isdigit() else (1, 0, i)


def _pressure_of_engines(spans: list[dict[str, Any]]) -> dict[str, Any]:
    """Each engine's ``pressure`` (:func:`_pressure`) over its own intervals, by engine index."""
    keys = sorted({str(p.get("engine") or "0") for p in spans}, key=_index_order)
    return {k: _pressure([p for p in spans if str(p.get("engine") or "0") == k]) for k in keys}


def _by_engine(a: Analysis, ev: pl.DataFrame, spans: list[dict[str, Any]]) -> dict[str, Any]:
    """Per engine index of the events (``all``: counted from aggregated lines): its events, G1 (KV space)
    verdicts, resets of the prefix cache, undetermined ones, and the ``pressure`` of the intervals its own
    events cite (``up_pressure_src``, joiner/spans.py: of its engine and server), else of its own
    intervals when the evidence has no such column."""
    evid = a.evidence
    cites = evid is not None and evid.height > 0 and "up_pressure_src" in evid.columns
    x = ev.with_columns(_eng=pl.col("engine").cast(pl.String).fill_null("0"))
    if cites:
        assert evid is not None
        x = x.join(evid.select("event_id", "up_pressure_src"), on="event_id", how="left")
    out: dict[str, Any] = {}
    for eng in sorted(set(x.get_column("_eng").to_list()), key=_index_order):
        mine = x.filter(pl.col("_eng") == eng)
        gate = mine.get_column("gate")
        if cites:
            cited = set(mine.get_column("up_pressure_src").drop_nulls().to_list())
            own = [p for p in spans if pressure_src(list(p.get("evidence") or [])) in cited]
        else:
            own = [p for p in spans if str(p.get("engine") or "0") == eng]
        out[eng] = {
            "events": mine.height,
            "g1": int((gate == "G1-kv-space").sum()),
            "cache_reset": int((mine.get_column("sub_kind") == "cache-reset").sum()),
            "undetermined": int((gate.is_null() | (gate == "undetermined")).sum()),
            "pressure": _pressure(own),
        }
    return out


def _cited_spans(a: Analysis, ev: pl.DataFrame, spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pressure intervals the events' own evidence cites (``up_pressure_src``, joiner/spans.py: each
    event's strongest interval of its engine and server overlapping it), so the cause never quotes
    another engine's, server's or hour's pressure; every interval when there is no event to cite one (a
    count not visible, or 0) or the evidence has no such column."""
    evid = a.evidence
    if not ev.height or evid is None or not evid.height or not {"up_pressure_src", "code_engine"} <= set(evid.columns):
        return spans
    # the events the engine-code section judged (code_engine): the others carry no pressure citation at all
    mine = evid.join(ev.select("event_id"), on="event_id", how="semi").filter(pl.col("code_engine").is_not_null())
    if not mine.height:
        return spans
    cited = set(mine.get_column("up_pressure_src").drop_nulls().to_list())
    return [p for p in spans if pressure_src(list(p.get("evidence") or [])) in cited]


def _resets(a: Analysis, ev: pl.DataFrame) -> dict[str, Any]:
    """The events a reset of the prefix cache explains (sub-kind cache-reset, whatever rule or path gave
    it): how many, the resets (``calls``), the running requests they preempted, the call in the engine's
    words and the lines that show the resets."""
    out: dict[str, Any] = {"events": 0, "calls": 0, "preempted": 0, "call": None, "lines": []}
    if not ev.height or "sub_kind" not in ev.columns:
        return out
    mine = ev.filter(pl.col("sub_kind") == "cache-reset")
    if not mine.height:
        return out
    out["events"] = mine.height
    kinds = {str(k or registry.DEFAULT) for k in mine.get_column("engine_kind").to_list()}
    calls = [e.cache_reset_call for e in registry.registered() if e.name in kinds and e.cache_reset_call]
    out["call"] = " / ".join(calls) if calls else None
    evid = a.evidence
    if evid is not None and evid.height and "reset_calls" in evid.columns:
        per = (
            mine.select("event_id", pl.col("engine").fill_null("0").alias("_eng"))
            .join(evid.select("event_id", "reset_calls", "reset_calls_src", "reset_preempted"), on="event_id")
            .filter(pl.col("reset_calls_src").is_not_null())
            .unique(["_eng", "reset_calls_src"], maintain_order=True)
        )
        out["calls"] = int(per.get_column("reset_calls").sum() or 0)
        out["preempted"] = int(per.get_column("reset_preempted").sum() or 0)
        out["lines"] = per.get_column("reset_calls_src").to_list()[:3]
    return out


def _reset_words(c: dict[str, Any]) -> str:
    """``reset_prefix_cache(reset_running_requests=True) preempted every running request: 3 preempted by
    1 reset (records.jsonl:1)``: the call, how many running requests it preempted; nothing of KV space."""
    r = c.get("resets") or {}
    call = r.get("call") or "a reset of the prefix cache"
    words = f"{call} preempted every running request"
    if r.get("calls"):
        first = (r.get("lines") or [""])[0].split("; ")[0]
        n = r["calls"]
        words += f": {r.get('preempted') or r['events']} preempted by {n} reset{'s' if n > 1 else ''}" + (
            f" ({first}{' ...' if n > 1 or len(r.get('lines') or []) > 1 else ''})" if first else ""
        )
    return words


def _starts(unplaced: pl.DataFrame, tz: str) -> dict[str, str | None]:
    g = (
        unplaced.group_by(pl.col("engine").fill_null("0"))
        .agg(pl.col("interval_start").min())
        .sort("engine")
        .iter_rows()
    )
    return {str(e): iso(t, tz) for e, t in g}


# The scrape-time assumptions (sources/prometheus/scrapetime.py) that put a reading at a time nothing in
# it states, and how the headline says so.
_READ_ASSUMED = {
    FILE_MTIME: "its file's modification time, assumed",
    STDIN_READ: "when preemptlog read it, assumed",
}


def _read_assumed(a: Any, unplaced: pl.DataFrame) -> str | None:
    """How the reading time of the unplaced events' scrapes was assumed (None: stated by the page, its
    name or a separator)."""
    files = set(unplaced.get_column("source").drop_nulls().to_list()) if "source" in unplaced.columns else set()
    for x in getattr(a, "assumptions", None) or []:
        if getattr(x, "topic", None) == "scrape time" and getattr(x, "scope", None) in files:
            for start, words in _READ_ASSUMED.items():
                if str(x.value).startswith(start):
                    return words
    return None


def _when(t: str | None, other: str | None) -> str:
    """``05:05:00``, with its date where ``other`` is on another day (a start a day before its reading)."""
    a, b = _instant(t), _instant(other)
    if a is not None and b is not None and a.date() != b.date():
        return f"{a:%Y-%m-%d %H:%M:%S}"
    return _hms(t)


def _gap_remedies(gaps: list[dict[str, Any]]) -> list[dict[str, str]]:
    """``to_know_more`` items for the spans of the log the counter did not read (reconcile.uncounted)."""
    out = []
    after = [g for g in gaps if g["side"] == "after"]
    before = [g for g in gaps if g["side"] == "before"]
    if after:
        end = max(after, key=lambda g: str(g["to"]))["to"]
        last = min(after, key=lambda g: str(g["from"]))["from"]
        out.append(
            {
                "add": f"a /metrics scrape taken after the log's last line ({_hms(end)}; `preemptlog capture "
                "--metrics URL` beside the server, or a last `curl -s host:8000/metrics` before it stops)",
                "settles": f"the preemptions after the counter's last reading at {_hms(last)} (the count)",
            }
        )
    if before:
        first = min(before, key=lambda g: str(g["from"]))["from"]
        late = max(before, key=lambda g: str(g["to"]))["to"]
        out.append(
            {
                "add": f"the log from the server's start, or /metrics scrapes from the log's first line ({_hms(first)})",
                "settles": f"the preemptions before {_hms(late)}, where the counter does not count (the count)",
            }
        )
    return out


def _uncounted_words(gaps: list[dict[str, Any]], whose: str, read: str | None = None) -> str:
    """``counted by vLLM's counter up to 10:00:30; the log runs to 10:05:40 with the KV cache at the ceiling and
    requests waiting: not counted after``: the spans of the log the counter did not read (reconcile.uncounted),
    the pressure the log shows there said only where it does."""

    def hot(g: dict[str, Any]) -> str:
        return " with the KV cache at the ceiling and requests waiting" if g.get("pressure") else ""

    def who(g: dict[str, Any]) -> str:
        return f"engine {g['engine']}" + (f" of {g['server']}" if g.get("server") else "")

    if len({who(g) for g in gaps}) > 1:  # several engines or servers: each one's own
        return f"not counted by {whose} counter: " + ", ".join(
            f"{who(g)} after {_hms(g['from'])} (the log runs to {_hms(g['to'])}{hot(g)})"
            if g["side"] == "after"
            else f"{who(g)} before {_hms(g['to'])} (the log begins at {_hms(g['from'])}{hot(g)})"
            for g in gaps
        )
    after = next((g for g in gaps if g["side"] == "after"), None)
    before = next((g for g in gaps if g["side"] == "before"), None)
    counted = (
        f"counted by {whose} counter"
        + (f" from {_hms(before['to'])}" if before else "")
        + (f" up to {_hms(after['from'])}" if after else "")
        + (f", {read}" if read else "")
    )
    clauses = []
    if before:
        clauses.append(f"the log begins at {_hms(before['from'])}{hot(before)}: not counted before")
    if after:
        clauses.append(f"the log runs to {_hms(after['to'])}{hot(after)}: not counted after")
    return "; ".join([counted, *clauses])


def _since_words(
    c: dict[str, Any], last_event: str | None, whose: str = "vLLM's", gaps: list[dict[str, Any]] | None = None
) -> str:
    """`` since the engine started at 05:05:00 (vLLM's counter at 05:09:52)``: the span of a count that
    holds unplaced events (a first reading since the engine's start), from that start to the last
    thing counted (issue 38: the span covers exactly what it counts). A start on another day than the
    reading has its date; a reading time nothing states (a file's mtime, the moment standard input
    was read) is said to be assumed."""
    lo, hi = c["unplaced_span"]
    later = bool(last_event and hi and datetime.fromisoformat(last_event) > datetime.fromisoformat(hi))
    end = last_event if later else hi
    starts = {e: t for e, t in (c.get("unplaced_starts") or {}).items() if t}
    if len(set(starts.values())) > 1:
        since = (
            " since the engines started ("
            + ", ".join(f"engine {e} at {_when(t, end)}" for e, t in starts.items())
            + ")"
        )
    else:
        since = f" since the engine started at {_when(lo, end)}" if lo else " since the engine started"
    if later and not gaps:
        return since + f", to {_hms(end)}"
    read = c.get("unplaced_read")
    if gaps:  # the counter stops before the log does (or counts from after its start): said where
        return since + f" ({_uncounted_words(gaps, whose, read)})"
    return since + f" ({whose} counter at {_hms(hi)}" + (f": {read}" if read else "") + ")"


def not_a_preemption(f: Any, tz: str) -> dict[str, Any] | None:
    """A stall in which nothing was preempted (issue 38): the summary's ``not_a_preemption``, from the
    stall finding (findings/stall.py): its longest span, the preemptions counted in the stalls (0) and
    how that is known, what holds the queue with its evidence. None without such a stall."""
    sl = getattr(f, "stall", None) or {}
    spans = [x for x in sl.get("spans") or [] if x.get("seconds") is not None]
    if not sl.get("evaluable") or not spans:
        return None
    if any(x.get("preemptions") or x.get("counter_increase") for x in spans):
        return None  # preempted during a stall: not this case
    longest = max(spans, key=lambda x: x["seconds"])
    longest = {k: (iso(v, tz) if isinstance(v, datetime) else v) for k, v in longest.items()}
    counters = [x for x in spans if x.get("counter_increase") is not None]
    ran = not all(x.get("nothing_ran") for x in spans)
    if counters:
        r = counters[0]["counter_readings"] or []
        basis = "the preemption counter flat over it" + (f": {r[0]} to {r[-1]}" if r else "")
    elif not ran:
        what = "stats lines" if longest["source"] == "log" else "scrapes"
        basis = f"nothing ran: Running 0 and no token computed on its {what}"
    else:
        basis = "no preemption counted in it"

    def overlaps(x: dict[str, Any]) -> bool:  # the same stall seen by another source (log and scrapes)
        lo, hi = spans_by_len[0]["start"], spans_by_len[0]["end"]
        return bool(x["engine"] == spans_by_len[0]["engine"] and x["start"] <= hi and x["end"] >= lo)

    spans_by_len = sorted(spans, key=lambda x: -x["seconds"])
    return {
        "spans": 1 + sum(1 for x in spans_by_len[1:] if not overlaps(x)),
        "longest": longest,
        "preemptions_in_stall": 0,
        "basis": basis,
        "nothing_ran": not ran,
        "holds": sl.get("holds") or [],
        "holds_not_evaluable": sl.get("holds_not_evaluable"),
    }


def _stall_words(np_: dict[str, Any]) -> str:
    """``not a preemption: 14 requests waiting, none running, for 260 s (10:00:30-10:04:50, x.log:7-33);
    held by: <what holds the queue> (<its evidence>)``."""
    sp = np_["longest"]
    secs = sp["seconds"]
    dur = f"{secs:.0f} s" if secs < 120 else f"{secs / 60:.1f} min"
    a, b = sp.get("first_line") or "", sp.get("last_line") or ""
    fa, fb = a.rsplit(":", 1)[0], b.rsplit(":", 1)[0]
    lines = f"{a}-{b.rsplit(':', 1)[-1]}" if fa == fb and a != b else (a if a == b else f"{a}..{b}")
    t0, t1 = str(sp["start"]), str(sp["end"])
    more = f", and {np_['spans'] - 1} more stall(s)" if np_["spans"] > 1 else ""
    words = (
        f"not a preemption: {sp['max_waiting']} request(s) waiting, none running, for {dur} "
        f"({_hms_span(t0, t1)}, {lines}){more}"
    )
    holds = np_.get("holds") or []
    if holds:
        words += "; held by: " + "; ".join(
            h["text"] + (f" ({h['evidence'][0]})" if h.get("evidence") else "") for h in holds[:2]
        )
    else:
        words += "; what holds the queue: not evaluable (nothing in the bundle says it)"
    return words


def _span_text(first: str | None, last: str | None, estimated: bool = False) -> str:
    if not first or not last:
        return ""

    s = (datetime.fromisoformat(last) - datetime.fromisoformat(first)).total_seconds()
    if s < 1:  # one instant: events counted on one line lie before it
        return f" {'by' if estimated else 'at'} {last[11:19]}"
    if s < 120:
        return f" in {s:.0f} s"
    if s < 7200:
        return f" in {s / 60:.0f} min"
    if s < 2 * 86400:
        return f" in {s / 3600:.1f} h"
    return f" in {s / 86400:.0f} days"


def _baseline_words(s: dict[str, Any]) -> str:
    """``; the counter read 24 at 05:09:52 since the engine started at 05:05:00, before the log (not a
    count of its window)``: a first reading whose engine started before the log (reconcile.since_start)."""
    base = (s.get("reconciliation") or {}).get("baseline_readings") or []
    if not base:
        return ""
    parts = [
        f"engine {b['engine']}'s counter read {b['value']} at {_hms(b['time'])} since its start at "
        f"{_hms(b['engine_start'])}"
        for b in base[:3]
    ]
    return "; " + ", ".join(parts) + ", before the log began: the count before it, not a count of its window"


def _hms(t: str | None) -> str:
    return t[11:19] if t and len(t) >= 19 else (t or "?")


def _instant(t: str | None) -> datetime | None:
    try:
        return datetime.fromisoformat(t) if t else None
    except ValueError:
        return None


def _same_second(t0: str | None, t1: str | None) -> bool:
    a, b = _instant(t0), _instant(t1)
    if a is None or b is None:
        return _hms(t0) == _hms(t1)
    return a.replace(microsecond=0) == b.replace(microsecond=0)


def _hms_span(t0: str | None, t1: str | None) -> str:
    """``02:10:00-02:40:00``; with each end's UTC offset when they differ (a span over a DST change:
    ``02:59:40+02:00 to 02:00:00+01:00``, where the wall clock went back), and with dates when the span
    covers more than a day."""
    a, b = _instant(t0), _instant(t1)
    if a is None or b is None:
        return f"{_hms(t0)}-{_hms(t1)}"
    if abs((b - a).total_seconds()) >= 86400:
        return f"{a:%Y-%m-%d %H:%M:%S} to {b:%Y-%m-%d %H:%M:%S}"
    if a.utcoffset() != b.utcoffset():
        return f"{_hms(t0)}{_offset(a)} to {_hms(t1)}{_offset(b)}"
    return f"{_hms(t0)}-{_hms(t1)}"


def _offset(t: datetime) -> str:
    off = t.utcoffset()
    if off is None:
        return ""
    mins = int(off.total_seconds() // 60)
    sign = "+" if mins >= 0 else "-"
    return f"{sign}{abs(mins) // 60:02d}:{abs(mins) % 60:02d}"


def _zero_words(quality: str | None, c: dict[str, Any]) -> str:
    """What a count of 0 means, in words: ``(exact)``, or for a V0 log that only shows a lower bound
    ``logged (V0 logs the 1st, 51st, 101st... preemption: ...)``."""
    if quality == "lower bound" and c.get("generation") == "V0":
        return (
            " logged (vLLM V0 logs only the 1st, 51st, 101st... preemption since the engine started: a log "
            "without its start can miss up to 49)"
        )
    if quality == "lower bound":
        return " counted (more can have happened: the log does not count every one)"
    return f" ({quality})" if quality and quality != "unknown" else ""


def _running_fell(spans: list[dict[str, Any]]) -> list[int] | None:
    """``[from, to]``: the running count of the pressure span where it fell most while waiting rose
    (the ``shuffle`` signal: what a preemption looks like from outside), or None."""
    fell = [
        (p["max_running"] - p["min_running"], p["max_running"], p["min_running"])
        for p in spans
        if "shuffle" in (p.get("signals") or [])
        and p.get("max_running") is not None
        and p.get("min_running") is not None
    ]
    top = max(fell, default=None)
    return [top[1], top[2]] if top and top[0] > 0 else None


def _pressure_words(c: dict[str, Any]) -> str:
    """``usage 100 %, up to 56 waiting, running 66 -> 26, 09:02:29-09:03:09 and 3 more spans``
    (pressure intervals); the intervals of several engines with no event to cite them, each engine's on its
    own: ``engine 0: usage 100 %, ...; engine 1: usage 97 %, ...``."""
    by = c.get("pressure_by_engine")
    if by:
        return "; ".join(f"engine {k}: {w}" for k, p in by.items() if (w := _pressure_words({"pressure": p})))
    p = c.get("pressure")
    if not p:
        return ""
    parts = []
    if p.get("peak_kv_usage") is not None:
        parts.append(f"usage {p['peak_kv_usage']:g} %")
    if p.get("max_waiting"):
        parts.append(f"up to {p['max_waiting']} waiting")
    if p.get("running_fell"):
        parts.append(f"running {p['running_fell'][0]} -> {p['running_fell'][1]}")
    first = p.get("first")
    if first:
        more = p["spans"] - 1
        when = f"at {_hms(first[0])}" if _same_second(first[0], first[1]) else _hms_span(first[0], first[1])
        parts.append(when + (f" and {more} more span{'s' if more > 1 else ''}" if more else ""))
    return ", ".join(parts)


def _engine_whys(by: dict[str, Any]) -> str | None:
    """The why of the KV-space headline when the events are several engines' (``cause.by_engine``) and
    their evidence differs: each engine's own, named (``engine 1: KV cache exhausted, usage 100 %, up to 12
    waiting, at 03:11:00; engine 0: 25 undetermined``), engines with the same why together, those with a
    G1 verdict first; an engine whose events only a reset explains is said by the reset words. None when
    every engine's why is the same (the one why, unnamed, is every engine's)."""
    whys: dict[str, list[str]] = {}
    for eng, r in by.items():
        if r["g1"]:
            pw = _pressure_words({"pressure": r["pressure"]})
            why = "KV cache exhausted" + (f", {pw}" if pw else "") if pw else "KV-block allocations failed"
        elif r["undetermined"] and not r["cache_reset"]:
            why = f"{r['undetermined']} undetermined"
        else:
            continue
        whys.setdefault(why, []).append(eng)
    if len(whys) <= 1 and sum(len(e) for e in whys.values()) == len(by):
        return None
    ordered = sorted(whys.items(), key=lambda w: (w[0].endswith(" undetermined"), _index_order(w[1][0])))
    return "; ".join(
        (f"engine {e[0]}" if len(e) == 1 else "engines " + ", ".join(e)) + f": {why}" for why, e in ordered
    )


# A count of 0 whose quality is unknown (a line that says it happened without saying how often).
UNKNOWN_ZERO = " counted (not known to be all)"


def headline(s: dict[str, Any]) -> str:
    """The first line of the summary: how many, and why in vLLM's words (plain text, no markup)."""
    c = s.get("cause") or {}
    if not s["count_visible"]:
        nv = s["not_visible"] or {}
        reason = nv.get("short") or nv.get("reason") or ""
        pw = _pressure_words(c)
        np_ = s.get("not_a_preemption")
        if np_ and np_.get("nothing_ran"):
            # a stall: nothing ran in it, so nothing was preempted in it; the log counts nothing outside it
            return (
                f"0 preemptions in the stall ({np_['basis']}): "
                + _stall_words(np_)
                + f"; outside it: not visible ({reason})"
            )
        return (
            f"{registry.noun(s.get('engine_kinds') or {}, 2).capitalize()}: not visible ({reason})"
            + _baseline_words(s)
            + (
                f"; KV cache at the ceiling with requests waiting ({pw}): where "
                f"{registry.noun(s.get('engine_kinds') or {}, 2)} can have happened"
                if pw
                else ""
            )
            + (f"; {c['code']}" if c.get("upstream") and c.get("generation") else "")
        )
    noun = registry.noun
    n = s["events"]
    kinds = s.get("engine_kinds") or {registry.DEFAULT: n}
    # the spans of the log the counter did not read, where the log cannot count (reconcile.uncounted)
    gaps = (s.get("reconciliation") or {}).get("uncounted_spans") or []
    if n == 0:
        rec = s.get("reconciliation") or {}
        how = rec.get("quality")
        np_ = s.get("not_a_preemption")
        if gaps and not np_:  # 0 where the counter read, nothing counts the rest
            return (
                "0 "
                + noun(kinds, 0)
                + f" ({_uncounted_words(gaps, registry.possessive(kinds))})"
                + (f"; {c['code']}" if c.get("upstream") and c.get("generation") else "")
            )
        pw = _pressure_words(c)
        if pw and not np_:  # none counted, but the stats lines show the pool at its ceiling
            # an exact 0 says none happened there (requests waited instead); a lower bound leaves room
            ceiling = (
                f"; KV cache at the ceiling with requests waiting ({pw}), and none there: requests waited for KV blocks"
                if how == "exact"
                else f"; KV cache at the ceiling with requests waiting ({pw}): where {noun(kinds, 2)} can have happened"
            )
            return (
                "0 "
                + noun(kinds, 0)
                + _zero_words(how, c)
                + ceiling
                + (f"; {c['code']}" if c.get("upstream") and c.get("generation") else "")
            )
        return (
            "0 "
            + noun(kinds, 0)
            + (_zero_words(how, c) if how and how != "unknown" else UNKNOWN_ZERO if how == "unknown" else "")
            + (": " + _stall_words(np_) if np_ else "")
            + "".join(e.headline_words(s) for e in registry.registered() if e.headline_words is not None)
        )
    word = noun(kinds, n)  # each engine's events in its word (SGLang's retractions)
    k = s.get("by_kind") or {}
    estimated = bool(k.get("reconstructed") or k.get("interval"))
    span = _span_text(s.get("first_event"), s.get("last_event"), estimated)
    if c.get("unplaced") and c.get("unplaced_span"):
        # the count runs from the engine's start: the placed events' own span is inside it
        span = _since_words(c, s.get("last_event"), registry.possessive(kinds), gaps)
    elif gaps:  # what the counter read, and the log's span it did not
        span = f" ({_uncounted_words(gaps, registry.possessive(kinds))})"
    rec = s.get("reconciliation") or {}
    # a count that is a lower bound says so where it is read first (a V0 log's warnings show only the 1st,
    # 51st, 101st... preemption; markers only; a counter reset; a span no counter read)
    least = "at least " if gaps or "lower bound" in (rec.get("quality"), rec.get("count_quality")) else ""
    head = f"{least}{n} {word}{span}"
    if rec.get("capped") and int(rec.get("total") or 0) > n:
        # a count larger than the events made of it (capped): the count is the counter's, never the cap
        head = f"{least}{rec['total']} {noun(kinds, int(rec['total']))}{span} ({n} of them as events, capped)"
    engines = c.get("engines") or []
    where = f" (engine {engines[0]})" if len(engines) == 1 else f" (engines {', '.join(engines)})" if engines else ""
    by_gate = {g: v for g, v in (s.get("by_gate") or {}).items() if v}
    g1 = by_gate.get("G1-kv-space", 0)
    default_only = set(kinds) <= {registry.DEFAULT}  # the cause below is in the default engine's terms
    reset = c.get("cache_reset", 0)
    undet = by_gate.get("undetermined", 0)
    if default_only and reset and not g1 and reset >= n - undet:
        # every event a reset of the prefix cache explains: the call, in the engine's words, and no KV words
        return f"{head}{where}: " + _reset_words(c) + (f"; {undet} undetermined" if undet else "")
    prio = c.get("priority_path", 0)
    if default_only and prio and prio + g1 >= n - undet:  # V0's priority preemption named in the log
        parts = [
            f"{prio} by vLLM V0's priority scheduling (_schedule_priority_preemption, named in the log): it preempts "
            "running requests of lower priority for a higher-priority waiting one; its warning says 'not enough KV "
            "cache space' for every preemption"
        ]
        if g1:
            parts.append(f"{g1} KV-block allocations failed")
        return f"{head}{where}: " + "; ".join(parts)
    if default_only and c.get("upstream") and g1 + reset >= n - undet and g1:
        pw = _pressure_words(c)
        what = "KV cache exhausted" + (f", {pw}" if pw else "") if pw else "KV-block allocations failed"
        what = _engine_whys(c.get("by_engine") or {}) or what
        parts = [what, c.get("code") or CODE_SENTENCE[None]]
        if reset:
            parts.append(f"{reset} by {_reset_words(c)}")
        if c.get("contradicted"):
            parts.append(f"{c['contradicted']} contradicted by the bundle (low confidence: see explain)")
        return f"{head}{where}: " + "; ".join(parts)
    rate = s.get("preemption_rate")
    per = f" ({rate:.2f} per received request)" if rate is not None else ""
    gates = []
    subs = s.get("g1_sub_kinds") or {}
    for g, cnt in sorted(by_gate.items(), key=lambda gk: (-gk[1], gk[0])):
        short = g.split("-")[0] if g != "undetermined" else ""
        part = f"{short} {GATE_WORDS.get(g, g)} {cnt}".strip()
        if g == "G1-kv-space" and subs:
            top = sorted(((v, sk) for sk, v in subs.items() if sk != "None"), reverse=True)
            if top:
                part += " (" + ", ".join(f"{sk} {v}" for v, sk in top) + ")"
        gates.append(part)
    own = "".join(e.headline_words(s) for e in registry.registered() if e.headline_words is not None)
    if reset:
        own += f"; {reset} by {_reset_words(c)}"
    return f"{head}{per}" + (": " + ", ".join(gates) if gates else "") + own


def to_know_more_line(s: dict[str, Any]) -> str | None:
    """``To know more, add: X (settles Y); ...``: the evidence that would settle more, never a fix."""
    items = s.get("to_know_more") or []
    if not items:
        return None
    return "To know more, add: " + "; ".join(f"{x['add']} (would settle {x['settles']})" for x in items)


def _findings_tail(s: dict[str, Any]) -> str:
    """Issue 15: ``; <recompute cost>; <top thrash>; <stall>`` after the headline."""
    part = s.get("findings_headline")
    return f"; {part}" if part else ""


def top_fix(s: dict[str, Any]) -> str | None:
    """``option current -> suggested (addresses N events)`` of the rank-1 fix, or None."""
    fixes = s.get("fixes") or []
    if not fixes:
        return None
    return fix_line(fixes[0])


def fix_line(x: dict[str, Any]) -> str:
    """``option current -> suggested (effect; verification; addresses N events)``; a current value that
    is not seen in the bundle says where it comes from (``assumed (vLLM 0.32.0 default)``)."""
    cur_from = x.get("current_from")
    cur = f"{x['current']}"
    if cur_from and cur_from.startswith("assumed"):
        cur += f" {cur_from}"  # "assumed (vLLM 0.32.0 default)"
    elif cur_from:  # "seen (file:line)" -> "(seen file:line)"
        cur += " (" + cur_from.replace(" (", " ", 1).removesuffix(")") + ")"
    if x["suggested"] is True:
        what = x["option"]
    elif x["suggested"] is None:
        what = f"{x['option']}: cannot compute, {x.get('missing') or 'an input is missing'}"
    elif x["current"] is not None:
        what = f"{x['option']} {cur} -> {x['suggested']}"
    else:
        what = f"{x['option']} {x['suggested']}" if x["option"].startswith("--") else f"{x['option']}: {x['suggested']}"
    effect = str(x.get("expected_effect") or "")
    if x.get("status") == "not verified" and not x.get("verified"):
        rp = x.get("replay") or {}
        effect += f"; not verified ({rp['why']})" if rp.get("why") else "; not verified (no workload to replay)"
    n = x.get("events_addressed")
    return str(what + (f" ({effect}; addresses {n} event(s))" if n else f" ({effect})"))


def pressure_rows(a: Analysis) -> list[dict[str, Any]]:
    """Suspected pressure intervals (pressure.py), with the counted events that fall in each (its engine,
    its time in the interval), for comparison: an event the engine-code section judged counts in the
    interval it cites (``up_pressure_src``: of its own engine and server), none when it cites none;
    another, in an interval of its own log when its log has stats lines (two servers both call their
    engine "0")."""
    piv = a.frames.get("pressure_intervals")
    if piv is None or piv.height == 0:
        return []
    out = []
    ev = a.events.filter(pl.col("time").is_not_null()) if a.events.height else a.events
    evid = a.evidence
    if ev.height and evid is not None and evid.height and {"up_pressure_src", "code_engine"} <= set(evid.columns):
        ev = ev.join(evid.select("event_id", "up_pressure_src", "code_engine"), on="event_id", how="left")
    else:
        ev = ev.with_columns(up_pressure_src=pl.lit(None, pl.String), code_engine=pl.lit(None, pl.String))
    # the log each stats line's file is (source -> stream): an event of a log with stats lines of its own
    # counts only in that log's intervals
    st = a.stats
    logs: dict[str, int] = {}
    if st is not None and st.height and {"source", "stream"} <= set(st.columns):
        pairs = st.select(pl.col("source").cast(pl.String), pl.col("stream").cast(pl.Int64)).unique().drop_nulls()
        logs = dict(pairs.iter_rows())
    ev = ev.with_columns(
        _st=pl.col("stream").cast(pl.Int64) if "stream" in ev.columns else pl.lit(None, pl.Int64),
    ).with_columns(_own=pl.col("_st").is_in(list(set(logs.values()))).fill_null(False))
    for r in piv.iter_rows(named=True):
        lo = r["since"] or r["start"]
        mine = pressure_src(list(r["evidence"] or []))
        first = str((r["evidence"] or [""])[0]).rsplit(":", 1)[0]
        its_log = logs.get(first) if r["series"] == "log" else None
        same_log = ~pl.col("_own") | (pl.col("_st") == its_log) if its_log is not None else ~pl.col("_own")
        # engine "all" (a line summed over every engine, vLLM's Rust frontend) meets every engine's events
        eng = pl.col("engine").fill_null("0")
        same = (eng == r["engine"]) | (eng == "all") | pl.lit(r["engine"] == "all")
        inside = same & (pl.col("time") > lo) & (pl.col("time") <= r["end"])
        counted = (
            ev.filter(
                inside
                & pl.when(pl.col("code_engine").is_not_null())  # judged: the interval it cites, if any
                .then(pl.col("up_pressure_src").fill_null("") == mine)
                .otherwise(same_log)
            ).height
            if ev.height
            else 0
        )
        out.append(
            {
                "series": r["series"],
                "engine": r["engine"],
                "start": iso(r["start"], a.tz),
                "end": iso(r["end"], a.tz),
                "since": iso(r["since"], a.tz),
                "samples": r["samples"],
                "peak_kv_usage": r["peak_kv_usage"],
                "max_waiting": r["max_waiting"],
                "min_running": r["min_running"],
                "max_running": r["max_running"],
                "signals": list(r["signals"]),
                "evidence": list(r["evidence"]),
                "counted_events_in_interval": counted,
            }
        )
    return out


SUMMARIZER[:] = [summarize]  # Analysis.summary() (model/result.py)
