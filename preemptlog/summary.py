"""The per-incident summary and the honesty notes that go with every result."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .analysis import Analysis


def iso(value: datetime | None, tz: str) -> str | None:
    """ISO 8601 with offset in the output zone; seconds unless sub-second data exists."""
    if value is None:
        return None
    from .timebase import zone_info

    local = value.astimezone(zone_info(tz))
    spec = "seconds" if local.microsecond == 0 else "milliseconds" if local.microsecond % 1000 == 0 else "microseconds"
    return local.isoformat(timespec=spec)


def honesty_notes(a: "Analysis") -> list[str]:
    import polars as pl

    from .vllm.config import _version_tuple, in_force

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
        if v0.get("without_counter"):
            notes.append(
                f"{v0['without_counter']} V0 warning(s) had no readable total_num_cumulative_preemption "
                "(cut line): the count around them is a lower bound."
            )
        if v0.get("duplicates"):
            notes.append(f"{v0['duplicates']} duplicated V0 warning line(s) (same counter value) counted once.")
    if counts.get("interval"):
        notes.append(
            "V1 'Preemptions: N' counts are per stats interval and lag: a preempted request is counted when it "
            "produces output again, so the interval can be later than the preemption."
        )
    cfg = in_force(a.config)
    engine = cfg.get("engine", {}).get("value")
    version = cfg.get("vllm_version", {}).get("value")
    v1_stats = a.stats.filter(pl.col("family") == "v1").height if a.stats.height else 0
    has_pre_field = a.stats.filter(pl.col("preemptions").is_not_null()).height if a.stats.height else 0
    if (engine == "V1" or v1_stats) and not has_pre_field and not counts.get("marker"):
        vt = _version_tuple(version) if version else None
        why = (
            f"vLLM {version} (V1) never logs individual preemptions"
            if version
            else "this V1-engine log never logs individual preemptions"
        )
        if vt is None or vt >= (0, 11, 1):
            why += (
                "; its 'Preemptions: N' stats field exists in the code but stock builds never print it "
                "(the counter is reset before it is tested, fixed by vllm-project/vllm PR #38452)"
            )
        notes.append(
            why + ". A count of 0 here means the log cannot show preemptions, not that none happened: add "
            "/metrics scrapes (vllm:num_preemptions_total) to the bundle, or use a build with the fix."
        )
    return notes


def summarize(a: "Analysis") -> dict[str, Any]:
    import polars as pl

    from .vllm.config import in_force

    ev = a.events
    tz = a.tz
    by_kind = {k: 0 for k in ("logged", "reconstructed", "interval", "marker")}
    if ev.height:
        for k, n in ev.group_by("kind").len().iter_rows():
            by_kind[k] = n
    received = (
        a.requests.filter(pl.col("action") == "received").get_column("request_id").n_unique()
        if a.requests.height
        else 0
    )
    total = ev.height
    rate = (total / received) if received else None
    repeated = []
    if ev.height:
        rep = (
            ev.filter(pl.col("request_id").is_not_null())
            .group_by("request_id")
            .len()
            .filter(pl.col("len") > 1)
            .sort(["len", "request_id"], descending=[True, False])
        )
        repeated = [{"request_id": r, "count": n} for r, n in rep.iter_rows()]
    timed = ev.filter(pl.col("time").is_not_null()) if ev.height else ev
    per_minute = []
    if timed.height:
        pm = (
            timed.with_columns(minute=pl.col("time").dt.truncate("1m"))
            .group_by("minute")
            .agg(pl.len().alias("count"), *[(pl.col("kind") == k).sum().alias(k) for k in by_kind])
            .sort("minute")
        )
        per_minute = [
            {"minute": iso(r["minute"], tz), "count": r["count"], **{k: r[k] for k in by_kind}}
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
    return {
        "events": total,
        "by_kind": by_kind,
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
        "inputs": [f.as_dict() for f in a.bundle.files],
        "assumptions": [x.as_dict() for x in a.assumptions],
        "notes": list(a.notes),
        "warnings": list(a.warnings),
        "timezone": tz,
    }
