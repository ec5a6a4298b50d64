"""``preemptlog explain EVENT_ID PATHS...``: one event's window, from every source."""

from __future__ import annotations

import json
from enum import Enum
from typing import Annotated, Optional

import typer

from ..cli import guarded
from ..errors import ExitCode
from .common import (
    analyze_options,
    AfterOpt,
    BeforeOpt,
    DebugOpt,
    KindOpt,
    LookbackOpt,
    RulesOpt,
    SetOpt,
    NoColorOpt,
    OffsetOpt,
    OutputOpt,
    PathsArg,
    TzOpt,
    YearOpt,
)


class ExplainFormat(str, Enum):
    table = "table"
    json = "json"
    ndjson = "ndjson"


def register(app: typer.Typer) -> None:
    app.command()(explain)


def explain(
    event_id: Annotated[
        str, typer.Argument(help="An event id as listed by analyze (event_id column), e.g. vllm.log:1234.")
    ],
    paths: PathsArg,
    format: Annotated[
        Optional[ExplainFormat],
        typer.Option("--format", "-f", help="table (default on a terminal), json or ndjson (one window row per line).",
                     case_sensitive=False),
    ] = None,
    output: OutputOpt = None,
    before: BeforeOpt = 10.0,
    after: AfterOpt = 2.0,
    lookback_steps: LookbackOpt = None,
    rules: RulesOpt = None,
    set_: SetOpt = None,
    offset: OffsetOpt = None,
    year: YearOpt = None,
    tz: TzOpt = None,
    kind: KindOpt = None,
    no_color: NoColorOpt = False,
    debug: DebugOpt = False,
) -> None:
    """Show everything around one preemption: its evidence and every row of every source in its window.

    \b
    Examples:
      preemptlog analyze incident/ -f ndjson | head -1     # find an event id
      preemptlog explain vllm.log:1234 incident/
      preemptlog explain vllm.log:1234 incident/ --before 30 --offset dmon=-2s -f json
    """

    def body() -> int:
        import sys

        from ..analysis import analyze as run
        from ..bundle import Workspace
        from ..errors import UsageError
        from ..outio import open_output

        fmt = format or (ExplainFormat.table if (output in (None, "-") and sys.stdout.isatty()) else ExplainFormat.json)
        with Workspace() as ws:
            options = analyze_options(
                year=year, tz=tz, kind=kind, offset=offset, before=before, after=after,
                lookback_steps=lookback_steps, rules=rules, set_=set_, debug=debug,
            )
            result = run(paths, options, workspace=ws)
            doc = build(result, event_id, before, after)
            if doc is None:
                n = result.events.height
                raise UsageError(
                    f"no event {event_id!r} in this bundle ({n} event(s))",
                    hint="list the ids with: preemptlog analyze PATHS -f ndjson (column event_id); "
                    "folded table rows (~r*, ~i*) stand for ids ending ~r1, ~r2, ...",
                )
            with open_output(
                output, protect=result.bundle.originals, terminal_text=fmt is not ExplainFormat.table
            ) as out:
                if fmt is ExplainFormat.json:
                    out.write(json.dumps(doc, indent=2, ensure_ascii=False, default=str).encode("utf-8") + b"\n")
                elif fmt is ExplainFormat.ndjson:
                    for row in doc["window"]:
                        out.write(json.dumps(row, ensure_ascii=False, default=str).encode("utf-8") + b"\n")
                else:
                    write_table(doc, out, no_color=no_color)
        return ExitCode.PARTIAL if result.partial else ExitCode.OK

    guarded(debug, body)


def build(analysis, event_id: str, before: float, after: float) -> dict | None:
    """The explain document: event, evidence (non-null values with provenance), window rows."""
    import polars as pl

    from ..joiner import VALUE_COLUMNS, window_rows
    from ..render import event_rows, iso_expr

    ev = analysis.events.filter(pl.col("event_id") == event_id)
    if ev.height == 0:
        return None
    saved = analysis.evidence
    analysis.evidence = None
    try:
        event = event_rows(analysis).filter(pl.col("event_id") == event_id).row(0, named=True)
    finally:
        analysis.evidence = saved
    evidence = []
    if saved is not None and saved.height:
        row = saved.filter(pl.col("event_id") == event_id)
        if row.height:
            r = row.row(0, named=True)
            for name in VALUE_COLUMNS:
                if r.get(name) is not None:
                    evidence.append(
                        {"name": name, "value": r[name], "src": r.get(f"{name}_src"), "status": r.get(f"{name}_status")}
                    )
    from ..rules.verdicts import VERDICT_COLUMNS, decided_by

    verdict = {k: event.pop(k) for k in VERDICT_COLUMNS if k in event}
    win = window_rows(analysis, event_id, before, after)
    win = win.with_columns(iso_expr("time", analysis.tz))
    return {
        "event": event,
        "verdict": verdict,
        "decided_by": decided_by(analysis, event_id, event),
        "window_s": {"before": before, "after": after},
        "evidence": evidence,
        "window": win.to_dicts(),
    }


def write_table(doc: dict, out, *, no_color: bool = False) -> None:
    import io
    import os

    from rich.console import Console
    from rich.table import Table

    from ..render.safe import text

    wrapper = io.TextIOWrapper(out, encoding="utf-8", errors="replace", write_through=True)
    try:
        is_tty = hasattr(out, "isatty") and out.isatty()
        console = Console(
            file=wrapper,
            width=None if is_tty else 200,
            force_terminal=is_tty,
            no_color=no_color or not is_tty or bool(os.environ.get("NO_COLOR")),
            highlight=False,
            soft_wrap=False,
        )
        e = doc["event"]
        head = Table(show_header=False, box=None)
        head.add_column("k", style="bold")
        head.add_column("v", overflow="fold")
        for k in ("event_id", "time", "kind", "request_id", "mode", "source", "line", "raw"):
            if e.get(k) is not None:
                head.add_row(text(k), text(e[k]))
        console.print(head)
        print_verdict(console, doc.get("verdict") or {})
        for d in doc.get("decided_by") or []:
            sub = f" / {d['sub_kind']}" if d.get("sub_kind") else ""
            model = "" if d.get("verdict_eligible") else " (on the guide's model only)"
            console.print(text(f"  fired {d['gate']}{sub}{model}: rule {d['rule']} at {d['where']}; "
                               f"lines {', '.join(d['lines']) or '-'}"))
        ev = Table(title=text("evidence"), header_style="bold")
        for name in ("name", "value", "status", "from"):
            ev.add_column(name, overflow="fold")
        for item in doc["evidence"]:
            ev.add_row(text(item["name"]), text(item["value"]), text(item["status"] or ""), text(item["src"] or "-"))
        if doc["evidence"]:
            console.print(ev)
        w = doc["window_s"]
        win = Table(title=text(f"window -{w['before']:g}s .. +{w['after']:g}s"), header_style="bold")
        for name in ("time", "Δs", "source", "what", "value", "file:line"):
            win.add_column(name, overflow="fold", no_wrap=name == "time")
        for r in doc["window"]:
            win.add_row(
                text(r["time"]),
                text(f"{r['offset_s']:+.3f}" if r["offset_s"] is not None else "?"),
                text(r["kind"]),
                text(r["what"]),
                text(r["value"]),
                text(r["src"]),
            )
        if doc["window"]:
            console.print(win)
        else:
            console.print(text("no rows from any source in the window"))
    finally:
        wrapper.flush()
        wrapper.detach()


def print_verdict(console, v: dict) -> None:
    """The verdict block: gate, cited evidence, not-evaluable gates, factors, fixes (log text kept inert)."""
    from rich.table import Table

    from ..render.safe import text

    if not v:
        return
    gate = v.get("gate") or "undetermined"
    sub = f" / {v['sub_kind']}" if v.get("sub_kind") else ""
    conf = v.get("confidence") or "none"
    console.print(text(f"verdict: {gate}{sub} (confidence {conf}; rule {v.get('rule') or '-'})"))
    fired = v.get("gates_fired") or []
    if len(fired) > 1:
        console.print(text("  gates that also fired: " + ", ".join(g for g in fired if g != gate)))
    cited = v.get("evidence") or []
    if cited:
        t = Table(title=text("cited"), header_style="bold")
        for name in ("name", "value", "threshold", "from"):
            t.add_column(name, overflow="fold")
        for c in cited:
            t.add_row(text(c["name"]), text(c["value"]), text(c.get("threshold") or ""), text(c.get("src") or "-"))
        console.print(t)
    for ne in v.get("not_evaluable") or []:
        missing = ", ".join(ne.get("missing") or []) or "its evidence"
        console.print(text(f"  not evaluable: {ne['gate']}: no {missing} (needs {ne['needs']})"))
    for f in v.get("contributing_factors") or []:
        src = f" [{f['src']}]" if f.get("src") else ""
        console.print(text(f"  factor {f['factor']}: {f['detail']}{src}"))
    for n in v.get("notes") or []:
        console.print(text(f"  note: {n}"))
    for r in v.get("recommendations") or []:
        console.print(text(f"  fix: {r}"))
