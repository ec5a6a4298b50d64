"""``preemptlog explain EVENT_ID PATHS...``: one event's window, from every source."""

from __future__ import annotations

import dataclasses
import json
from enum import Enum
from typing import Annotated

import typer

from ..errors import ExitCode
from .common import (
    DebugOpt,
    GateOpt,
    KindOpt,
    MinConfidenceOpt,
    NoColorOpt,
    NoPagerOpt,
    OutputOpt,
    QuietOpt,
    RequestOpt,
    SinceOpt,
    UntilOpt,
    filters_from,
)
from .options import ANALYSIS, AnalysisArgs, analysis_options
from .runner import guarded, writing_to


class ExplainFormat(str, Enum):
    table = "table"
    json = "json"
    ndjson = "ndjson"


def register(app: typer.Typer) -> None:
    app.command(short_help="Why one preemption happened: verdict, evidence, its lines.")(explain)


@analysis_options()
def explain(
    event_id: Annotated[
        str | None,
        typer.Argument(
            metavar="EVENT_ID",
            help="An event id as analyze prints it: the table's (vllm.log:1234, folded vllm.log:11~r*) or the "
            "ndjson event_id (demo/vllm.log:1234); a file's basename is enough. Omit it with --request.",
            show_default=False,
        ),
    ] = None,
    paths: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="PATH",
            help="vLLM log files, incident bundle folders or archives (.tar.gz, .zip), or - for standard input.",
            show_default=False,
        ),
    ] = None,
    request: RequestOpt = None,
    all_rows: Annotated[
        bool,
        typer.Option(
            "--all",
            help="The whole window from every source, not only the request's own lines "
            "and the decision steps the verdict cites.",
        ),
    ] = False,
    limit: Annotated[
        int | None, typer.Option("--limit", metavar="N", min=0, help="At most N window rows per event.")
    ] = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    gate: GateOpt = None,
    kind: KindOpt = None,
    min_confidence: MinConfidenceOpt = None,
    format: Annotated[
        ExplainFormat | None,
        typer.Option(
            "--format",
            "-f",
            help="table (default on a terminal), json or ndjson (one window row per line).",
            case_sensitive=False,
        ),
    ] = None,
    output: OutputOpt = None,
    analysis: AnalysisArgs = ANALYSIS,  # the analysis options (options.py), here in --help
    quiet: QuietOpt = False,
    no_pager: NoPagerOpt = False,
    no_color: NoColorOpt = False,
    debug: DebugOpt = False,
) -> None:
    """Show why one preemption happened: its verdict, evidence and the lines around it.

    \b
    Examples:
      preemptlog analyze incident/                         # the table lists event ids
      preemptlog explain vllm.log:1234 incident/
      preemptlog explain vllm.log:1234 incident/ --all --before 30 --offset dmon=-2s -f json
      preemptlog explain --request chatcmpl-42 incident/   # every preemption of one request

    By default the window shows the preempted request's own lines, the event's
    line and the rows the verdict and evidence cite (the decision steps);
    --all shows every row of every source in the window, --limit N caps it.
    On a terminal a long explanation goes through $PAGER.
    """

    def body() -> int:
        import os
        import sys

        from ..analysis import analyze as run
        from ..errors import UsageError
        from ..inputs.workspace import Workspace
        from ..outputs.outio import check_not_given, open_output
        from ..render.view import apply_filters

        ident, inputs = event_id, list(paths or [])
        if request and ident is not None and (ident == "-" or os.path.exists(ident)):
            ident, inputs = None, [ident] + inputs  # `explain --request R bundle/`: the first argument is a path
        if ident is None and not request:
            raise UsageError("give an EVENT_ID or --request ID", hint="list the ids with: preemptlog analyze PATHS")
        if ident is not None and not request:
            ident, inputs = _in_order(ident, inputs)
        if not inputs and ident is not None and not request and (ident == "-" or _a_path(ident)):
            inputs = [ident]  # `explain BUNDLE`: the bundle's top events, to pick one (or why it cannot be read)
            ident = None
        if not inputs:
            raise UsageError(
                f"give the bundle or log PATH the event {ident!r} comes from", hint=f"preemptlog explain {ident} PATH"
            )
        overrides, filters = filters_from(
            file_kind=analysis.file_kind,
            kind=kind,
            since=since,
            until=until,
            gate=gate,
            request=None,
            min_confidence=min_confidence,
        )
        fmt = format or (ExplainFormat.table if (output in (None, "-") and sys.stdout.isatty()) else ExplainFormat.json)
        check_not_given(output, inputs)
        with Workspace() as ws:
            options = analysis.options(debug=debug, kinds=overrides)
            from .runner import progress

            with progress(quiet, no_color):
                result = run(inputs, options, workspace=ws)
            if ident is None and not request:
                return _top_events(apply_filters(result, filters), inputs)
            view = apply_filters(result, filters)
            try:
                ids, run_note = resolve_ids(view, ident, list(request or []))
            except UsageError as first:
                # not in the events the filters keep: say so when the bundle has it, never "no event"
                if view.events.height == result.events.height:
                    raise
                try:
                    resolve_ids(result, ident, list(request or []))
                except UsageError as whole:  # the bundle lacks it too: said of the whole bundle (its count)
                    raise whole from first
                given = [
                    f"{name} {getattr(v, 'value', v)}"
                    for name, vals in (
                        ("--since", [since] if since else []),
                        ("--until", [until] if until else []),
                        ("--gate", gate or []),
                        ("--kind", kind or []),
                        ("--min-confidence", [min_confidence] if min_confidence else []),
                    )
                    for v in vals
                ]
                what = f"event {ident!r} is" if not request else f"the preemptions of {', '.join(request)} are"
                raise UsageError(
                    f"{what} left out by the filters ({' '.join(given) or 'given'}): "
                    f"{view.events.height} of the bundle's {result.events.height} event(s) pass them",
                    hint="drop or widen the filters to explain it",
                ) from None
            # every file of the bundle is an input, whichever incident is explained: never written
            protect = list(result.bundle.originals)
            if len(ids) == 1 and not request:  # a bundle of several incidents: the event's own, analysed alone
                result, ids = _own_incident(result, ids[0], inputs, options, ws)
            docs = [build(result, i, options.before, options.after, all_rows=all_rows, limit=limit) for i in ids]
            if run_note:
                docs[0]["run"] = run_note
            with (
                writing_to(output),
                open_output(output, protect=protect, terminal_text=fmt is not ExplainFormat.table) as out,
            ):
                if fmt is ExplainFormat.json:
                    doc = (
                        docs[0]
                        if (len(docs) == 1 and not request)
                        else {"request": list(request or []), "explanations": docs}
                    )
                    out.write(json.dumps(doc, indent=2, ensure_ascii=False, default=str).encode("utf-8") + b"\n")
                elif fmt is ExplainFormat.ndjson:
                    for d in docs:
                        for row in d["window"]:
                            if len(docs) > 1:
                                row = {"event_id": d["event"]["event_id"], **row}
                            out.write(json.dumps(row, ensure_ascii=False, default=str).encode("utf-8") + b"\n")
                else:
                    write_table(docs, out, no_color=no_color, pager=not no_pager)
        return ExitCode.PARTIAL if result.partial else ExitCode.OK

    guarded(debug, body)


TOP_EVENTS = 10


def _own_incident(result, event_id: str, inputs: list[str], options, ws):
    """``(analysis, [id])`` of the event's own incident when the bundle holds several (servers, logs that
    do not meet in time: render/each.py): its version, configuration and evidence are its own file's,
    not another server's. The id is the same event's in that analysis."""
    import polars as pl

    from ..analysis import analyze as run
    from ..render.each import split_by_incident

    if not result.summary().get("incidents"):
        return result, [event_id]
    row = result.events.filter(pl.col("event_id") == event_id)
    if row.height == 0:
        return result, [event_id]
    source = row.get_column("source")[0]
    path = next((str(f.path) for f in result.bundle.files if f.display == source), None)
    if path is None or not event_id.startswith(source):
        return result, [event_id]
    # the incidents holding the event's file (a file of several containers is in one per container): the
    # one whose own analysis has the event
    for unit in (u for u in split_by_incident(inputs, result) if path in u.paths):
        own = run(unit.paths, unit.options(options), workspace=ws)
        # the file as the bundle's analysis found it, by its name there (a file of some containers is read
        # through a copy: its path is not the file's)
        display = next((f.display for f in own.bundle.files if str(f.path) == path or f.display == source), None)
        if display is None:
            continue
        mine = display + event_id[len(source) :]
        if own.events.filter(pl.col("event_id") == mine).height:
            return own, [mine]
    return result, [event_id]


def _top_events(analysis, inputs: list[str]) -> int:
    """``explain BUNDLE`` without an id: the bundle's top events (the table's rows holding the most
    events, then the earliest), each with the id to give, on stderr; exit 2 (an id is needed)."""
    import shlex
    import sys

    from ..outputs.safe import neutralise
    from ..render.table import display_rows

    rows = display_rows(analysis)
    where = " ".join(shlex.quote(p) for p in inputs)
    if not rows.height:
        sys.stderr.write(f"preemptlog: error: no EVENT_ID given, and {neutralise(where)} holds no preemption event\n")
        return ExitCode.USAGE
    top = rows.sort(["count", "time"], descending=[True, False], nulls_last=True).head(TOP_EVENTS)
    lines = [
        f"preemptlog: error: no EVENT_ID given: the top {top.height} of {rows.height} event row(s) of {neutralise(where)}"
    ]
    for r in top.iter_rows(named=True):
        verdict = (r["gate"] or "-") + (f"/{r['sub_kind']}" if r["sub_kind"] else "")
        n = f"{r['count']} events, " if r["count"] > 1 else ""
        when = r["time"].isoformat(timespec="seconds") if r["time"] is not None else "no time"
        lines.append(f"  {neutralise(r['event_id'])}  ({n}{when}; {verdict}, {r['confidence'] or '-'})")
    lines.append(f"explain one with: preemptlog explain ID {neutralise(where)}")
    sys.stderr.write("\n".join(lines) + "\n")
    return ExitCode.USAGE


def resolve_ids(analysis, given: str | None, requests: list[str]) -> tuple[list[str], dict | None]:
    """The event ids an EVENT_ID or --request stands for, and a note when a folded run was given.

    Accepted: the exact event_id; the table's id (the folder given stripped: a path suffix at a
    ``/``); a folded ``...~r*`` / ``...~i*`` / ``...~q*`` (its first event is explained; the run is noted).
    Unknown: a UsageError with the nearest ids (same file, nearest lines; else similar file names).
    """
    import polars as pl

    from ..errors import UsageError

    ev = analysis.events.select("event_id", "request_id", "source", "line", "kind")
    if requests:
        sel = ev.filter(pl.col("request_id").is_in(requests))
        if given:
            sel = sel.filter(_id_matches(given))
        if sel.height == 0:
            known = ev.get_column("request_id").drop_nulls().unique().to_list()
            import difflib

            near = difflib.get_close_matches(requests[0], known, n=3, cutoff=0.5)
            raise UsageError(
                f"no preemption of request {', '.join(requests)} in this bundle ({ev.height} event(s))",
                hint=("did you mean " + ", ".join(near) + "?") if near else "request ids are in the request_id column",
            )
        return sel.get_column("event_id").to_list(), None
    assert given is not None
    folded = given.endswith(("~r*", "~i*", "~q*"))
    sel = ev.filter(_id_matches(given))
    if sel.height and not folded:
        bases = sel.get_column("event_id").unique().to_list()
        if len(bases) > 1:
            raise _ambiguous(given, sorted(bases))
        return bases, None
    if sel.height and folded:
        from ..model.events import COUNT_SUFFIX_RE

        runs = sel.select(pl.col("event_id").str.replace(COUNT_SUFFIX_RE, "").alias("run")).get_column("run")
        if runs.n_unique() > 1:  # a cut id standing for several runs: never the first of them silently
            raise _ambiguous(given, [f"{r}~{given[-2]}*" for r in runs.unique(maintain_order=True).to_list()])
        ids = sel.get_column("event_id").to_list()
        return [ids[0]], {"given": given, "events": len(ids), "first": ids[0], "last": ids[-1]}
    raise UsageError(
        f"no event {given!r} in this bundle ({ev.height} event(s))",
        hint=_did_you_mean(ev, given)
        + "list the ids with: preemptlog analyze PATHS (table) or -f ndjson (column event_id); "
        "folded table rows (~r*, ~i*, ~q*) stand for ids ending ~r1, ~r2, ...",
    )


def _ambiguous(given: str, candidates: list[str]):
    """The error for an id that stands for several events: the candidates, so that one can be given."""
    from ..errors import UsageError

    shown = ", ".join(candidates[:8]) + (f" and {len(candidates) - 8} more" if len(candidates) > 8 else "")
    return UsageError(
        f"event {given!r} is ambiguous: it matches {len(candidates)} events: {shown}",
        hint="give one of them (or more of the id)",
    )


def _in_order(ident: str, inputs: list[str]) -> tuple[str, list[str]]:
    """``explain vllm.log vllm.log:1234`` (the path first): the one argument that is no path but has an
    event id's ending is the id, and the first argument, a path (:func:`_a_path`), one of the paths."""
    if ident == "-" or not _a_path(ident):
        return ident, inputs
    ids = [p for p in inputs if not _a_path(p)]
    if len(ids) != 1:
        return ident, inputs
    return ids[0], [ident, *(p for p in inputs if p != ids[0])]


def _a_path(given: str) -> bool:
    """``explain X`` alone: X is a path when something is there (a broken link too) or when it has
    no event id's ``:LINE`` ending (``vllm.log:1234``, ``…:3~i1``, ``…:7~r*``): a missing path is
    then reported as one, not as an event without its bundle."""
    import os
    import re

    return os.path.lexists(given) or not re.search(r":\d+(?:~[a-z]\w*\*?)?$", given)


def _id_matches(given: str):
    """An expression: event_id is ``given``, or ends with ``/given`` (the table strips the folder given);
    a folded ``~r*`` / ``~i*`` matches its run; an ellipsis (``…``, or ``..`` in ASCII) the table put in
    a long id matches what it stands for."""
    import re

    import polars as pl

    folded = given.endswith(("~r*", "~i*", "~q*"))
    stem = given[:-3] if folded else given
    parts = re.split(r"…|(?<![/.])\.\.(?![/.])", stem)
    body = ".*".join(re.escape(p) for p in parts)
    if folded:  # one line's N retractions: the line's own id is the 1st (model.events.count_run)
        body += "(?:" + re.escape("~" + given[-2]) + r"\d+)" + ("?" if given[-2] == "q" else "")
    return pl.col("event_id").str.contains(f"(^|/){body}$")


def _did_you_mean(ev, given: str) -> str:
    import difflib
    import os

    import polars as pl

    file, _, line = given.partition("~")[0].rpartition(":")
    try:
        n = int(line.split(".")[0])
    except ValueError:
        n = None
    base = os.path.basename(file)
    same = ev.filter(pl.col("source").str.ends_with(base) & (pl.lit(bool(base)))) if base else ev.head(0)
    if same.height and n is not None:
        near = same.with_columns(d=(pl.col("line").cast(pl.Int64) - n).abs()).sort("d").head(3)
        return "did you mean " + ", ".join(near.get_column("event_id").to_list()) + "? "
    sources = ev.get_column("source").unique().to_list()
    close = difflib.get_close_matches(file, sources, n=2, cutoff=0.4) or difflib.get_close_matches(
        base, [os.path.basename(x) for x in sources], n=2, cutoff=0.4
    )
    return ("did you mean a line of " + ", ".join(close) + "? ") if close else ""


def build(
    analysis, event_id: str, before: float, after: float, *, all_rows: bool = True, limit: int | None = None
) -> dict | None:
    """The explain document: event, evidence (non-null values with provenance), window rows.

    ``all_rows`` False keeps the request's own lines, the event's line and the rows the verdict and
    the evidence cite; ``limit`` caps the rows (``window_rows_total`` says how many there were).
    """
    import polars as pl

    from ..joiner import VALUE_COLUMNS, window_rows
    from ..render import event_rows, iso_expr

    ev = analysis.events.filter(pl.col("event_id") == event_id)
    if ev.height == 0:
        return None
    saved = analysis.evidence
    # The event's own columns and verdict; its evidence is listed below, with where it came from.
    event = (
        event_rows(dataclasses.replace(analysis, evidence=None))
        .filter(pl.col("event_id") == event_id)
        .row(0, named=True)
    )
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
    decided = decided_by(analysis, event_id, event)
    # the mechanism rule's words, for the text's mechanism line (the JSON event carries its name and evidence)
    rs = getattr(analysis, "ruleset", None)
    said = {m.id: m.description for m in (rs.mechanisms if rs is not None else [])}
    win = window_rows(analysis, event_id, before, after)
    total = win.height
    if not all_rows and win.height:
        cited = {c.get("src") for c in (verdict.get("evidence") or []) if c.get("src")}
        cited |= {e["src"] for e in evidence if e.get("src")}
        cited |= {line for d in decided for line in d.get("lines") or []}
        own = f"{event['source']}:{event['line']}"
        keep = pl.col("src").is_in(sorted(cited | {own}))
        rid = event.get("request_id")
        if rid:
            # Aho-Corasick, not a regex: a literal regex of a very long id (a 400 k character id
            # in a damaged log) exceeds polars' compiled-regex size limit
            keep |= pl.col("value").str.contains_any([rid])
        win = win.filter(keep)
    scoped = win.height
    if limit is not None:
        win = win.head(limit)
    win = win.with_columns(iso_expr("time", analysis.tz))
    return {
        "event": event,
        "verdict": verdict,
        "decided_by": decided,
        "window_s": {"before": before, "after": after},
        "scope": "all" if all_rows else "request and cited rows",
        "window_rows_total": total,
        "window_rows_in_scope": scoped,
        "evidence": evidence,
        "mechanism_description": said.get(str(event.get("mechanism_rule"))) if event.get("mechanism_rule") else None,
        "window": win.to_dicts(),
    }


def write_table(docs: list[dict], out, *, no_color: bool = False, pager: bool = True) -> None:
    import io
    import os

    from ..outputs.console import text_console
    from ..outputs.safe import ascii_text, unicode_ok
    from ..render.pager import page, terminal_size

    size = terminal_size(out)
    color = size is not None and not no_color and not os.environ.get("NO_COLOR")
    buf = io.StringIO()
    console = text_console(buf, width=size[0] if size else 80, color=color)  # 80 in a pipe, as analyze
    for i, doc in enumerate(docs):
        if i:
            console.print()
        _print_doc(console, doc, unicode=unicode_ok())
    data = buf.getvalue()
    if not unicode_ok():
        data = ascii_text(data)
    page(data.encode("utf-8", "replace"), out, pager=pager)


def _print_doc(console, doc: dict, *, unicode: bool = True) -> None:
    """One explanation as wrapped lines of words, about a screen at 80 columns: the event and its own
    line whole, the verdict and why, vLLM's code cited once (the version of the event's own file), the
    evidence in words (each source cited once), the change, the window's rows."""
    from ..outputs.safe import text
    from ..render.human import wrap

    width = console.width

    def put(value: str, indent: int = 0, hang: int = 2, style: str | None = None) -> None:
        for ln in wrap(value, width, indent=indent, hang=hang):
            console.print(text(ln), style=style, highlight=False)

    e = doc["event"]
    who = f"request {e['request_id']}" if e.get("request_id") else "a request the line does not name"
    how = f" by {e['mode']}" if e.get("mode") else ""
    when = e.get("time") or "a time the bundle does not give"
    put(f"{e['event_id']}: {who} preempted{how} at {when}", style="bold")
    if e.get("raw"):  # the event's own line, whole
        put(str(e["raw"]), indent=2, hang=2)
    run = doc.get("run")
    if run:
        put(
            f"{run['given']} folds {run['events']} events ({run['first']} .. {run['last']}); this is the first, "
            "the others share its line and verdict",
            indent=2,
        )
    verdict = doc.get("verdict") or {}
    print_verdict(console, {k: v for k, v in verdict.items() if k != "recommendations"}, put=put)
    for d in doc.get("decided_by") or []:
        sub = f" / {d['sub_kind']}" if d.get("sub_kind") else ""
        model = "" if d.get("verdict_eligible") else " (on the guide's model only)"
        where = str(d["where"])
        where = where if where.startswith(("at ", "in ", "before ", "after ")) else f"at {where}"
        lines = [x for x in d.get("lines") or [] if not str(x).startswith("vLLM source:")]
        put(f"fired {d['gate']}{sub}{model}: rule {d['rule']} {where}; lines {', '.join(lines) or '-'}", indent=2)
    _print_mechanism(e, doc.get("mechanism_description"), put)
    _print_evidence(doc["evidence"], put)
    for r in verdict.get("recommendations") or []:
        put(f"fix: {r}", indent=2, hang=4)
    w = doc["window_s"]
    shown, scoped, total = (
        len(doc["window"]),
        doc.get("window_rows_in_scope", len(doc["window"])),
        doc.get("window_rows_total", len(doc["window"])),
    )
    scope = doc.get("scope", "all")
    title = f"Window -{w['before']:g} s .. +{w['after']:g} s: {shown} of {total} row(s)"
    if scope != "all":
        title += " (the request's lines and the cited rows; --all for every row)"
    put(title, style="bold")
    own = f"{e.get('source')}:{e.get('line')}"
    delta = "Δ" if unicode else "d"
    for r in doc["window"]:
        off = f"{r['offset_s']:+.3f} s" if r["offset_s"] is not None else "?"
        value = "the event's line (above)" if r["src"] == own else str(r["value"])
        put(f"{str(r['time'])[11:19] or '?'} {delta}{off} {r['kind']}: {value} ({r['src']})", indent=2, hang=4)
    if doc["window"]:
        if shown < scoped:
            put(f"{scoped - shown} more row(s) in scope: raise --limit", indent=2)
    else:
        put("no rows from any source in the window" + ("" if scope == "all" else " in scope (try --all)"), indent=2)


def _print_mechanism(e: dict, description: str | None, put) -> None:
    """The engine's own mechanism for the event (rules/mechanisms.py): its name, confidence and rule,
    the rule's words and the values it cited; where none was found, what would tell it."""
    mech = e.get("mechanism")
    if not mech:
        return
    rule = e.get("mechanism_rule")
    how = f" ({e.get('mechanism_confidence') or 'none'}; rule {rule})" if rule else ""
    put(f"mechanism: {mech}{how}" + (f": {description}" if description else ""), style="bold")
    cited = e.get("mechanism_evidence") or []
    if cited:
        srcs = list(dict.fromkeys(str(c["src"]) for c in cited if c.get("src")))
        parts = [f"{c['name']} {c['value']}" for c in cited]
        put("cited: " + "; ".join(parts) + (f" ({', '.join(srcs)})" if srcs else ""), indent=2, hang=4)
    if e.get("mechanism_missing"):
        put(f"would tell it: {e['mechanism_missing']}", indent=2, hang=4)


def _print_evidence(items: list[dict], put) -> None:
    """The evidence in words (each column's one-line doc, not its name), grouped by where it comes
    from, each source cited once; vLLM's code facts as one sentence."""
    from ..joiner.schema import evidence_words

    if not items:
        return
    put("Evidence:", style="bold")
    code = {i["name"]: i for i in items if i["name"].startswith("code_")}
    if "code_trigger" in code:
        c = code["code_trigger"]
        engine = code.get("code_engine", {}).get("value")
        src = str(c.get("src") or "").removeprefix("vLLM source: ")
        put(f"vLLM's code ({engine or 'this engine'}): {c['value']} [{src}]", indent=2, hang=4)
    groups: dict[str, list[str]] = {}
    for i in items:
        if i["name"] in ("code_trigger", "code_kv", "code_reset", "code_engine", "code_not_gates"):
            continue
        if i["name"].startswith("cfg_"):  # a setting: its own name is the word
            status = " (assumed: vLLM's default)" if i.get("status") == "default" else ""
            said = f"{i['name'].removeprefix('cfg_')} {i['value']}{status}"
        else:
            status = f", {i['status']}" if i.get("status") and i["status"] != "seen" else ""
            said = f"{evidence_words([i['name']])}: {i['value']}{status}"
        groups.setdefault(str(i.get("src") or "-"), []).append(said)
    for src, said in groups.items():
        put("; ".join(said) + (f" ({src})" if src != "-" else ""), indent=2, hang=4)
    if "code_not_gates" in code:
        put(f"not in this engine's code: {str(code['code_not_gates']['value']).replace(',', ', ')}", indent=2, hang=4)


def print_verdict(console, v: dict, *, box_style=None, put=None) -> None:
    """The verdict block: gate and why, cited evidence in words, not-evaluable gates, factors, the
    changes (log text kept inert)."""
    from ..outputs.safe import text

    if not v:
        return
    if put is None:

        def put(value: str, indent: int = 0, hang: int = 2, style: str | None = None) -> None:
            console.print(text(" " * indent + value), style=style, highlight=False)

    from ..joiner.schema import evidence_words

    gate = v.get("gate") or "undetermined"
    sub = f" / {v['sub_kind']}" if v.get("sub_kind") else ""
    conf = v.get("confidence") or "none"
    put(f"verdict: {gate}{sub} (confidence {conf}; rule {v.get('rule') or '-'})", style="bold")
    fired = v.get("gates_fired") or []
    if len(fired) > 1:
        put("gates that also fired: " + ", ".join(g for g in fired if g != gate), indent=2)
    cited = v.get("evidence") or []
    if cited:
        parts = []
        for c in cited:
            thr = f" (threshold {c['threshold']})" if c.get("threshold") not in (None, "") else ""
            parts.append(f"{evidence_words([str(c['name'])])}: {c['value']}{thr}")
        srcs = list(dict.fromkeys(str(c.get("src")) for c in cited if c.get("src")))
        put("cited: " + "; ".join(parts) + (f" ({', '.join(srcs)})" if srcs else ""), indent=2, hang=4)
    for ne in v.get("not_evaluable") or []:
        missing = evidence_words(ne.get("missing") or []) or "its evidence"
        put(f"not evaluable: {ne['gate']}: missing {missing} (needs {ne['needs']})", indent=2, hang=4)
    for f in v.get("contributing_factors") or []:
        src = f" [{f['src']}]" if f.get("src") else ""
        put(f"factor {f['factor']}: {f['detail']}{src}", indent=2, hang=4)
    for n in v.get("notes") or []:
        put(f"note: {n}", indent=2, hang=4)
    for r in v.get("recommendations") or []:
        put(f"fix: {r}", indent=2, hang=4)
