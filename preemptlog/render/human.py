"""The human summary, for stderr: counts, rate, span, assumptions, notes, warnings."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .safe import markup

if TYPE_CHECKING:
    from rich.console import Console

    from ..result import Analysis


def print_summary(analysis: Analysis, console: Console) -> None:
    from ..summary import fix_line, top_fix

    s = analysis.summary()
    console.print(f"[bold]{markup(s['headline'])}[/bold]")
    top = top_fix(s)
    if top:
        console.print(f"Top fix: {markup(top)}")
    if s.get("to_know_more_line"):
        console.print(markup(s["to_know_more_line"]))
    if s.get("findings_headline"):
        console.print(f"  cost: {markup(s['findings_headline'])}")
    f = s.get("filters")
    if f:
        console.print(f"  filtered ({markup(f['text'])}): {f['kept']} of {f['total']} event(s) shown")
    k = s["by_kind"]
    parts = [f"{k[name]} {name}" for name in ("logged", "reconstructed", "interval", "marker", "record") if k[name]]
    if s["count_visible"]:
        detail = f" ({', '.join(parts)})" if parts else ""
        from ..sglang.summary import noun

        console.print(f"  {s['events']} {noun(s.get('engine_kinds') or {}, 1)} event(s){markup(detail)}")
    for x in (s.get("fixes") or [])[1:5]:
        console.print(f"  fix {x['rank']}: {markup(fix_line(x))}")
    if s["requests_received"]:
        rate = s["preemption_rate"]
        console.print(
            f"  {s['requests_received']} request(s) received; preemptions per received request: {rate:.4f}"
            if rate is not None
            else ""
        )
    if s["first_event"]:
        console.print(f"  events from {markup(s['first_event'])} to {markup(s['last_event'])}")
    unplaced = (s.get("cause") or {}).get("unplaced") or 0
    if s["events_without_time"] - unplaced > 0:
        console.print(f"  {s['events_without_time'] - unplaced} event(s) have no timestamp in the log")
    if unplaced:
        console.print(f"  {unplaced} event(s) counted by vLLM since the engine started, not placed in time")
    rep = s["requests_preempted_more_than_once"]
    if rep:
        top = ", ".join(f"{r['request_id']} x{r['count']}" for r in rep[:5])
        console.print(
            f"  preempted more than once: {markup(top)}" + (f" and {len(rep) - 5} more" if len(rep) > 5 else "")
        )
    st = s["stats"]
    if st["lines"]:
        console.print(
            f"  {st['lines']} stats line(s); max KV cache usage {st['max_kv_usage']}%, max waiting {st['max_waiting']}"
        )
    rec = s.get("reconciliation") or {}
    if len(rec.get("sources") or []) > 1 or any(x["source"].startswith("prometheus") for x in rec.get("sources") or []):
        console.print(f"  reconciled count: {rec['total']} ({markup(rec['quality'])}): {markup(rec['rule'])}")
        for src in rec["sources"]:
            kept = f", {src['in_events']} in the events" if src.get("in_events") is not None else ""
            console.print(f"    {markup(src['source'])}: {src['count']}{kept}; {markup(src['note'])}")
    piv = s.get("pressure_intervals") or []
    if piv:
        console.print(
            f"  [bold]{len(piv)} suspected pressure interval(s)[/bold] (KV cache >= {s['pressure_ceiling']:g}% with "
            "requests waiting; evidence, not counted):"
        )
        for r in piv:
            ev = r["evidence"]
            lines = ", ".join(ev[:3]) + (f" (+{len(ev) - 3} more)" if len(ev) > 3 else "")
            counted = (
                f"; {r['counted_events_in_interval']} counted event(s) in it" if r["counted_events_in_interval"] else ""
            )
            console.print(
                markup(
                    f"    engine {r['engine']} {r['start']} to {r['end']} ({r['series']}): peak KV "
                    f"{r['peak_kv_usage']:.1f}%, up to {r['max_waiting']} waiting, running {r['max_running']}->"
                    f"{r['min_running']}{counted}; {lines}"
                )
            )
    for a in s["assumptions"]:
        scope = f" ({markup(a['scope'])})" if a["scope"] != "bundle" else ""
        console.print(f"  assumed {markup(a['topic'])}{scope}: {markup(str(a['value']))} from {markup(a['source'])}")
    docs = [f["file"] for f in s["inputs"] if f["kind"] == "document"]
    if docs:
        more = f" and {len(docs) - 8} more" if len(docs) > 8 else ""
        console.print(
            f"  not read: {markup(', '.join(docs[:8]))}{more} (a document, not a log: the lines it quotes add no "
            "events; --kind FILE=vllm-log reads one)"
        )
    unknown = [f for f in s["inputs"] if f["kind"] in ("unknown", "binary", "empty", "unreadable")]
    if unknown:
        names = ", ".join(f"{f['file']} ({f['kind']})" for f in unknown[:8])
        more = f" and {len(unknown) - 8} more" if len(unknown) > 8 else ""
        console.print(f"  not recognised: {markup(names)}{more}")
    for note in s["notes"]:
        console.print(f"  [yellow]note:[/yellow] {markup(note)}")
    for w in s["warnings"]:
        console.print(f"  [red]warning:[/red] {markup(w)}")
