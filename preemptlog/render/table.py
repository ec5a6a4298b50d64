"""The terminal table: one row per event, reconstructed / interval runs folded into one row.

Built for a terminal 80 columns wide: times as ``HH:MM:SS`` (the date and zone in a header
line), the event id with the folder given stripped (the id ``preemptlog explain`` takes),
request ids shortened in the middle, the verdict as ``gate/sub-kind``, the confidence. Wider
terminals get longer request ids and full gate names; ``--wide`` adds kind, count and mode,
``--columns`` picks. Taller than the terminal: through ``$PAGER``. A locale that cannot show
box characters (``LC_ALL=C``) gets ASCII.
"""

from __future__ import annotations

import io
import os
from typing import TYPE_CHECKING, BinaryIO

import polars as pl

from ..clock.timebase import zone_info
from ..engines import others
from ..events.visibility import count_visibility
from ..model.events import COUNT_SUFFIX, count_run
from ..outputs.console import text_console
from ..outputs.safe import ascii_text, neutralise, text, unicode_ok
from .pager import page, terminal_size
from .view import check_columns

if TYPE_CHECKING:
    from ..model.result import Analysis

TABLE_COLUMNS = ("time", "event", "n", "request", "verdict", "confidence", "kind", "mode", "where")
DEFAULT_COLUMNS = ("time", "event", "request", "verdict", "confidence")
WIDE_COLUMNS = ("time", "event", "kind", "n", "request", "mode", "verdict", "confidence")
ALIASES = {
    "event_id": "event",
    "request_id": "request",
    "gate": "verdict",
    "sub_kind": "verdict",
    "source": "where",
    "line": "where",
    "count": "n",
}
# Below 110 columns a gate is its id cut after the first word (one rule for all four: a prefix of
# the id ``--gate`` takes, ``G1-kv`` of ``G1-kv-space``); from 110 columns, and with --wide, the id.
SHORT_GATE = {
    "G1-kv-space": "G1-kv",
    "G2-batch-variance": "G2-batch",
    "G3-queue-overflow": "G3-queue",
    "G4-prefix-conflict": "G4-prefix",
}


# What the verdict column's words mean, for the legend under the table (a person does not read gate ids).
GATE_MEANING = {
    "G1-kv-space": "KV space",
    "G2-batch-variance": "batch variance (the guide's patched scheduler)",
    "G3-queue-overflow": "queue overflow or priority",
    "G4-prefix-conflict": "prefix conflict or a prefix-cache reset",
    "undetermined": "no gate fired",
}
SUB_MEANING = {
    "capacity": "fewer free KV blocks than needed",
    "fragmentation": "no contiguous free run as long as needed",
    "cache-reset": "reset_prefix_cache preempted every running request",
}


def verdict_legend(verdicts: list[str], *, full: bool) -> str:
    """``verdict G1-kv/capacity: KV space, fewer free KV blocks than needed (--gate G1-kv-space)``: what
    the verdicts the table shows mean."""
    parts = []
    for v in verdicts:
        gate, _, sub = v.partition("/")
        shown = (gate if full else SHORT_GATE.get(gate, gate)) + (f"/{sub}" if sub else "")
        words = GATE_MEANING.get(gate, gate) + (f", {SUB_MEANING.get(sub, sub)}" if sub else "")
        parts.append(f"{shown}: {words}")
    return "verdict " + "; ".join(parts) + " (explain ID says why)"


def display_rows(analysis: Analysis) -> pl.DataFrame:
    """Events for display: the events of one line's count (model.events.count_run) become one row.

    Columns: time, until (UTC datetimes), event_id (``~r*``/``~i*``/``~q*`` for a folded run), kind,
    count, request_id, mode, source, line, gate, sub_kind, confidence (of the run's first event),
    verdicts (how many distinct gate/sub-kind pairs the run holds).
    """
    ev = analysis.events
    v = getattr(analysis, "verdicts", None)
    if v is not None and v.height and ev.height:
        ev = ev.join(
            v.select("event_id", "gate", "sub_kind", "confidence"), on="event_id", how="left", maintain_order="left"
        )
    else:
        ev = ev.with_columns(
            gate=pl.lit(None, pl.String), sub_kind=pl.lit(None, pl.String), confidence=pl.lit(None, pl.String)
        )
    grouped = ev.with_columns(_g=count_run())
    return (
        grouped.group_by("_g", "kind", maintain_order=True)
        .agg(
            pl.col("time").min().alias("time"),
            pl.col("time").max().alias("until"),
            pl.col("event_id").first(),
            pl.len().cast(pl.UInt32).alias("count"),
            pl.col("request_id").first(),
            pl.col("mode").first(),
            pl.col("source").first(),
            pl.col("line").first(),
            pl.col("gate").first(),
            pl.col("sub_kind").first(),
            pl.col("confidence").first(),
            pl.concat_str([pl.col("gate").fill_null("-"), pl.col("sub_kind").fill_null("-")])
            .n_unique()
            .alias("verdicts"),
        )
        .with_columns(
            event_id=pl.when(pl.col("count") > 1)
            .then(pl.concat_str([pl.col("_g"), pl.lit("~"), pl.col("kind").replace_strict(COUNT_SUFFIX), pl.lit("*")]))
            .otherwise(pl.col("event_id")),
        )
        .drop("_g")
    )


def common_folder(sources: list[str]) -> str:
    """The folder prefix every source shares (``demo/``), or the folder of a single file; '' if none."""
    dirs = {os.path.dirname(s) for s in sources if s and not s.startswith("<")}
    if not dirs:
        return ""
    try:
        common = os.path.commonpath(list(dirs)) if len(dirs) > 1 else dirs.pop()
    except ValueError:  # absolute and relative paths mixed
        return ""
    return common + "/" if common and common != "/" else ""


def shorten(value: str, width: int, ellipsis: str = "…", head: int | None = None) -> str:
    """``value`` cut in the middle to ``width`` characters (the start and the end stay: ids differ at
    both); ``head`` characters of the start are kept (half by default)."""
    if len(value) <= width or width < 5:
        return value
    keep = width - len(ellipsis)
    head = (keep + 1) // 2 if head is None else max(0, min(head, keep))
    return value[:head] + ellipsis + value[len(value) - (keep - head) :]


def distinct_cut(values: list[str], width: int, ellipsis: str = "…") -> int | None:
    """The number of leading characters to keep so that ``values`` cut to ``width`` stay distinct
    (the middle cut first, then more of the end: scrape files differ in the middle of their names),
    or None when no cut at this width keeps them apart."""
    if len(set(values)) < len(values):
        return (width - len(ellipsis) + 1) // 2  # not distinct whole: nothing to keep apart
    keep = width - len(ellipsis)
    for head in range((keep + 1) // 2, -1, -1):
        if len({shorten(v, width, ellipsis, head) for v in values}) == len(values):
            return head
    return None


def _distinct_events(widths: dict[str, int], body: list[dict[str, str]], ellipsis: str) -> int | None:
    """Widen the event column (narrowing the other columns of SHRINK, never below their label) until
    its cut ids are distinct: the id ``preemptlog explain`` takes must name one row. The head to keep."""
    values = [c["event"] for c in body]
    natural = max((len(v) for v in values), default=0)
    while True:
        head = distinct_cut(values, widths["event"], ellipsis)
        if head is not None or widths["event"] >= natural:
            return head
        donor = next((n for n in SHRINK if n != "event" and n in widths and widths[n] > 8), None)
        if donor is None:
            return None
        widths[donor] -= 1
        widths["event"] += 1


GAP = 3  # between two columns: right padding, the divider, left padding
SHRINK = ("request", "where", "event")  # cut in the middle, in this order, to fit the width
MIN_WIDTH = {"request": 12, "event": 16, "where": 16}
# Never cut: the verdict (its short spelling, ``G1/capacity``, when the full one does not fit) and the
# confidence; the columns dropped, in this order, when the row still does not fit.
DROP = ("mode", "kind", "n", "where", "request")


def _fit(
    names: list[str], labels: dict[str, str], body: list[dict[str, str]], width: int, req_w: int
) -> dict[str, int]:
    """Column widths that fit ``width``: natural widths, the request id capped at ``req_w``, then the
    columns of SHRINK narrowed (never below MIN_WIDTH) until the row fits."""
    w = {n: max([len(labels[n])] + [len(c[n]) for c in body]) for n in names}
    if "request" in w:
        w["request"] = max(len(labels["request"]), min(w["request"], req_w))
    budget = width - GAP * (len(names) - 1)
    for n in SHRINK:
        over = sum(w.values()) - budget
        if over <= 0:
            break
        if n in w:
            w[n] = max(min(MIN_WIDTH[n], w[n]), w[n] - over)
    for n in DROP:  # still too wide: the least needed columns go (rather than a cut verdict)
        if sum(w.values()) <= width - GAP * (len(w) - 1) or len(w) <= 2:
            break
        w.pop(n, None)
    return w


def resolve_columns(columns: list[str] | None, wide: bool) -> list[str]:
    if columns:
        names = []
        for c in columns:
            c = ALIASES.get(c, c)
            if c not in names:
                names.append(c)
        return check_columns(names, list(TABLE_COLUMNS), what="table column")
    return list(WIDE_COLUMNS if wide else DEFAULT_COLUMNS)


def render_table(
    analysis: Analysis,
    *,
    width: int = 80,
    columns: list[str] | None = None,
    wide: bool = False,
    header: bool = True,
    color: bool = False,
    unicode: bool = True,
) -> str:
    """The table as text (ANSI styles only when ``color``)."""
    from rich import box
    from rich.table import Table

    names = resolve_columns(columns, wide)
    rows = display_rows(analysis)
    capped = {
        str(c["from"]): int(c["count"]) for c in (analysis.counters.get("reconciliation") or {}).get("capped") or []
    }
    zone = zone_info(analysis.tz)
    buf = io.StringIO()
    console = text_console(buf, width=width, color=color)
    ell = "…" if unicode else ".."
    sources = rows.get_column("source").unique().to_list() if rows.height else []
    prefix = common_folder(sources)
    times = (
        [t.astimezone(zone) if t is not None else None for t in rows.get_column("time").to_list()]
        if rows.height
        else []
    )
    days = sorted({t.date().isoformat() for t in times if t is not None})
    multi_day = len(days) > 1
    full_gate = width >= 110 or wide
    req_w = 64 if wide else max(12, min(64, width - 62))
    folded = 0
    until = rows.get_column("until").to_list() if rows.height else []
    body: list[dict[str, str]] = []
    verdict_short: dict[str, str] = {}  # full verdict -> its short spelling
    for i, r in enumerate(rows.iter_rows(named=True)):
        t = times[i]
        fold = r["count"] > 1
        folded += fold
        if t is None:
            tcell = "unplaced"  # no time of its own (a count with no time inside it), never a bare "?"
        else:
            tcell = t.strftime("%m-%d %H:%M:%S" if multi_day else "%H:%M:%S")
            if fold and until[i] is not None and until[i] != r["time"]:
                tcell += "+"  # a run: from this time on (the footnote says how it was placed)
        event = r["event_id"] or ""
        if prefix and event.startswith(prefix):
            event = event[len(prefix) :]
        where = f"{r['source']}:{r['line']}"
        if prefix and where.startswith(prefix):
            where = where[len(prefix) :]
        if fold:
            how = {"reconstructed": "from counter", "logged": "on one line"}.get(r["kind"], "in interval")
            req = f"{r['count']} {how}"
            of = capped.get(str(r["event_id"] or "").rsplit("~", 1)[0])
            if of is not None and of > r["count"]:  # a count whose events were capped: never all of it
                req = f"{r['count']} of {of} {how} (capped)"
        else:
            req = r["request_id"] or "-"
        gate = r["gate"]
        if r["verdicts"] > 1:  # the events of a fold do not share one verdict
            verdict = f"{r['verdicts']} verdicts"
        elif gate is None:
            verdict = "-"
        else:
            verdict = gate + (f"/{r['sub_kind']}" if r["sub_kind"] else "")
            short = SHORT_GATE.get(gate, gate) + (f"/{r['sub_kind']}" if r["sub_kind"] else "")
            verdict_short[verdict] = short
            if not full_gate:
                verdict = short
        conf = r["confidence"] if r["confidence"] not in (None, "none") and r["verdicts"] == 1 else "-"
        cells = {
            "time": tcell,
            "event": event,
            "n": str(r["count"]),
            "request": req,
            "verdict": verdict,
            "confidence": conf,
            "kind": r["kind"],
            "mode": r["mode"] or "-",
            "where": where,
        }
        body.append({k: neutralise(v) for k, v in cells.items()})  # widths of what is shown (\x1b is 4 wide)
    labels = {n: n for n in names}
    if "confidence" in labels and width < 100:
        labels["confidence"] = "conf"
    widths = _fit(names, labels, body, width, req_w)
    if full_gate and [n for n in names if n not in widths]:  # the full gate names cost a column: short ones
        for c in body:
            c["verdict"] = verdict_short.get(c["verdict"], c["verdict"])
        widths = _fit(names, labels, body, width, req_w)
    names = [n for n in names if n in widths]
    event_head = _distinct_events(widths, body, ell) if "event" in widths else None
    table = Table(
        box=box.SIMPLE_HEAD if unicode else box.ASCII2,
        show_header=header,
        header_style="bold",
        expand=False,
        show_edge=False,
        pad_edge=False,
        padding=(0, 1),
    )
    for n in names:
        table.add_column(
            labels[n],
            no_wrap=True,
            overflow="ellipsis",
            justify="right" if n == "n" else "left",
            min_width=widths[n],
            max_width=widths[n],
        )
    for cells in body:
        if cells["n"] != "1" and "request" in widths and len(cells["request"]) > widths["request"]:
            cells["request"] = f"{cells['n']} counted"
        table.add_row(*[text(shorten(cells[n], widths[n], ell, event_head if n == "event" else None)) for n in names])
    if header:
        tz = analysis.tz
        day = days[0] if len(days) == 1 else (f"{days[0]} .. {days[-1]}" if days else "no time")
        where = f"; files under {prefix}" if prefix else ""
        ev = analysis.events

        engine = ""
        for eng in others():  # another engine's events in its words (SGLang's retractions)
            k = ev.filter(pl.col("engine_kind") == eng.name).height if ev.height and "engine_kind" in ev.columns else 0
            what = f"{eng.display} {eng.plural(2)}"
            engine += "" if not k else f" ({what})" if k == ev.height else f" ({k} of them {what})"
        console.print(text(f"{rows.height} row(s), {ev.height} event(s){engine}; {day} ({tz}){where}"))
    if header and verdict_short and "verdict" in widths:  # what the verdicts mean, before the rows (paged)
        console.print(text(verdict_legend(sorted(verdict_short), full=full_gate)))
    if rows.height:
        console.print(table)
    else:
        nv = count_visibility(analysis)
        if nv["count_visible"]:
            console.print(text("no preemption events found"))
        else:
            # the summary says it is not visible, and what to add (once)
            console.print(text("no events to list: this bundle does not show preemptions one by one"))
    if header and folded:
        console.print(
            text(
                "an id ending ~r* / ~i* / ~q* is one row for the events counted on one line (V0's cumulative "
                "counter, a stats line, a /metrics reading, SGLang's #retracted_reqs), with no request id each: a "
                "time ending + is the first of them, "
                "'unplaced' a count with no time inside it; `preemptlog explain ID` takes it; -f ndjson lists each "
                "event."
            )
        )
    out = buf.getvalue()
    return out if unicode else ascii_text(out)


def write_table(
    analysis: Analysis,
    out: BinaryIO,
    *,
    width: int | None = None,
    columns: list[str] | None = None,
    wide: bool = False,
    header: bool = True,
    no_color: bool = False,
    head: bytes = b"",
    head_out: BinaryIO | None = None,
    pager: bool = True,
    tail: bytes = b"",
) -> None:
    """The table to ``out``: paged on a terminal when it is taller than the screen with ``head``
    above it and ``tail`` below it (pager.page), plain in a pipe."""

    size = terminal_size(out)
    color = size is not None and not no_color and not os.environ.get("NO_COLOR")
    w = width or (size[0] if size else 200)
    data = render_table(
        analysis, width=w, columns=columns, wide=wide, header=header, color=color, unicode=unicode_ok()
    ).encode("utf-8", "replace")
    page(data, out, head=head, head_out=head_out, pager=pager, tail=tail)
