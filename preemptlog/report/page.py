"""The report page: summary, timeline, configuration and one card per event (or per group).

Log text is data: every string that reaches the page goes through :func:`e`
(HTML-escaped, control and bidi characters made visible). The page loads
nothing: plotly.js is inlined, there are no web fonts, images or links to
fetch, and a Content-Security-Policy forbids any request should something try.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import polars as pl

from ..engines import DEFAULT, find, get, noun
from ..joiner.schema import evidence_words
from ..model import VERSION as __version__
from ..model.events import COUNT_SUFFIX, COUNT_SUFFIX_RE, EVENTS_SCHEMA, count_run
from ..render import iso_expr
from ..render.summary import fix_line
from ..rules.verdicts import VERDICT_COLUMNS
from .escape import e
from .figure import GATE_COLORS, GATE_ORDER, gate_color
from .findings import section
from .series import ESTIMATED_KINDS, UNDETERMINED

if TYPE_CHECKING:
    from ..model.result import Analysis

MAX_CARDS = 300  # one card per event up to this many events; beyond, one card per group
EXAMPLES = 5  # example event ids per group card

# No request of any kind: scripts and styles only inline, images only data:/blob: (plotly's PNG export).
CSP = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "img-src data: blob:; font-src 'none'; connect-src 'none'; frame-src 'none'; worker-src 'none'; "
    "form-action 'none'; base-uri 'none'"
)

STYLE = """
:root { --fg:#1d2330; --muted:#5b6475; --line:#dde2ea; --bg:#f6f7f9; --card:#fff; }
* { box-sizing: border-box; }
body { margin:0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif;
       color:var(--fg); background:var(--bg); }
header { padding:16px 24px; background:#1d2330; color:#fff; }
header h1 { margin:0 0 4px; font-size:20px; }
header .sub { color:#c8cfdb; font-size:13px; }
main { padding: 8px 24px 40px; max-width: 1600px; margin: 0 auto; }
section { margin: 18px 0; }
h2 { font-size:17px; margin: 18px 0 8px; border-bottom:1px solid var(--line); padding-bottom:4px; }
h3 { font-size:14px; margin: 10px 0 6px; }
.grid { display:grid; grid-template-columns: repeat(auto-fill, minmax(170px, 1fr)); gap:10px; }
.tile { background:var(--card); border:1px solid var(--line); border-radius:6px; padding:10px 12px;
        min-width:0; overflow-wrap:anywhere; }
.tile .n { font-size:22px; font-weight:600; }
.tile .l { color:var(--muted); font-size:12px; }
.chip { display:inline-block; padding:1px 8px; border-radius:10px; color:#fff; font-size:12px; font-weight:600;
        white-space:nowrap; }
.kind { display:inline-block; padding:0 6px; border:1px solid var(--line); border-radius:4px; font-size:12px; }
.kind.est { border-style:dashed; }
table { border-collapse: collapse; background:var(--card); }
th, td { text-align:left; padding:3px 8px; border-bottom:1px solid var(--line); vertical-align:top; }
th { font-size:12px; color:var(--muted); font-weight:600; }
td.t { white-space:nowrap; }
td.num { text-align:right; font-variant-numeric: tabular-nums; }
code, pre, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono", monospace;
                   font-size:12px; }
pre { background:#f0f2f5; padding:6px 8px; border-radius:4px; white-space:pre-wrap; overflow-wrap:anywhere; margin:4px 0; }
ul { margin:4px 0; padding-left:20px; }
.muted { color:var(--muted); }
.warn { color:#a33; }
.status-seen { color:#1a7f37; } .status-derived { color:#8a6100; } .status-default { color:#6e7781; }
#timeline { background:var(--card); border:1px solid var(--line); border-radius:6px; padding:4px; }
.cards { display:grid; grid-template-columns: repeat(auto-fill, minmax(min(520px, 100%), 1fr)); gap:12px; }
.card { background:var(--card); border:1px solid var(--line); border-left:5px solid #999; border-radius:6px;
        padding:10px 12px; overflow-wrap:break-word; min-width:0; }
.card .head { display:flex; flex-wrap:wrap; gap:6px 10px; align-items:center; margin-bottom:6px; }
.card .id { font-weight:600; }
.card table { width:100%; }
details > summary { cursor:pointer; color:var(--muted); }
#verdict { background:var(--card); border:1px solid var(--line); border-radius:6px; padding:12px 16px; }
#verdict .headline { font-size:19px; font-weight:600; margin:0 0 8px; }
#verdict.not-visible { border-left:5px solid #a33; }
#verdict .cols { display:flex; flex-wrap:wrap; gap:12px 28px; }
#verdict .cols > div { min-width:0; flex:1 1 360px; }
#verdict ol { margin:4px 0; padding-left:22px; }
#verdict li { margin:2px 0; }
.scroll { max-width:100%; overflow-x:auto; }
main, section, table, pre { max-width:100%; }
td, th { overflow-wrap:anywhere; }
th, td.num { overflow-wrap:normal; } td.num { white-space:nowrap; }  /* a count or a heading word stays whole */
#verdict .cols > div { flex-basis: min(360px, 100%); }
@media (max-width: 600px) {  /* a phone (390 px): narrower margins, the legend and words inside the screen */
  header { padding:10px 12px; } main { padding: 4px 10px 30px; }
  #verdict { padding:10px; } #verdict .headline { font-size:16px; }
  .grid { grid-template-columns: repeat(auto-fill, minmax(140px, 1fr)); }
  table { display:block; overflow-x:auto; }  /* a wide table scrolls in its box; words stay whole */
  td, th { overflow-wrap:break-word; }
}
.group > h3 { margin-top:16px; }
.legend span { margin-right:10px; }
"""


def chip(gate: str | None) -> str:
    g = gate or UNDETERMINED
    return f'<span class="chip" style="background:{gate_color(g)}">{e(g)}</span>'


def kind_tag(kind: str | None) -> str:
    est = " est" if kind in ESTIMATED_KINDS else ""
    title = "time estimated within an interval" if est else "time of its own line"
    return f'<span class="kind{est}" title="{title}">{e(kind)}</span>'


def page_head(title: str, plotly_js: str) -> list[str]:
    """The lines of a page up to ``<body>``: the policy that lets it fetch nothing, the title, the
    style sheet and plotly.js inlined verbatim (no '</script' inside: report.plotly_js sees to it).
    The incident report and the fleet report share it."""
    return [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<meta name="referrer" content="no-referrer">',
        '<link rel="icon" href="data:,">',
        f"<title>{e(title)}</title>",
        f"<style>{STYLE}</style>",
        f'<script type="text/javascript">{plotly_js}</script>',
        "</head><body>",
    ]


def page(analysis: Analysis, figure_html: str, plotly_js: str, *, title: str | None = None) -> str:

    s = analysis.summary()
    heading = title or "preemptlog incident report"
    parts = [
        *page_head(heading, plotly_js),
        "<header>",
        f"<h1>{e(heading)}</h1>",
        f'<div class="sub">{e(_inputs_line(s))} · times in {e(analysis.tz)} · preemptlog {e(__version__)}</div>',
        "</header><main>",
        _first_screen(s),
        _tiles(s, analysis),
        '<section id="timeline-section"><h2>Timeline</h2>',
        _legend(),
        f'<div id="timeline">{figure_html}</div>',
        "</section>",
        _summary(s, analysis),
        _findings_section(analysis),  # recompute over time, thrash table (report/findings.py)
        _config(s, analysis),
        _events(analysis, s),
        "</main></body></html>",
    ]
    return "\n".join(parts) + "\n"


def _findings_section(analysis: Analysis) -> str:

    return section(analysis)


def _first_screen(s: dict) -> str:
    """What happened, why and what to change: the headline, counts by gate and sub-kind, ranked fixes."""

    cls = "" if s["count_visible"] else ' class="not-visible"'
    out = [f'<section id="verdict"{cls}><p class="headline">{e(s["headline"])}</p>']
    f = s.get("filters")
    if f:
        out.append(f'<p class="muted">Filtered ({e(f["text"])}): {e(f["kept"])} of {e(f["total"])} event(s) shown.</p>')
    out.append('<div class="cols">')
    by_gate = {g: n for g, n in (s.get("by_gate") or {}).items() if n}
    if by_gate:
        out.append(
            "<div><h3>Events by gate and sub-kind</h3><table><tr><th>gate</th><th>sub-kind</th><th>events</th></tr>"
        )
        for g, n in sorted(by_gate.items(), key=lambda gn: -gn[1]):
            subs = (s.get("g1_sub_kinds") or {}) if g == "G1-kv-space" else {}
            if subs:
                for k, m in sorted(subs.items(), key=lambda km: -km[1]):
                    out.append(
                        f'<tr><td>{chip(g)}</td><td>{e(k if k != "None" else "-")}</td><td class="num">{e(m)}</td></tr>'
                    )
            else:
                out.append(f'<tr><td>{chip(g)}</td><td>-</td><td class="num">{e(n)}</td></tr>')
        out.append("</table></div>")
    fixes = s.get("fixes") or []
    if fixes:
        out.append("<div><h3>What to change, by events addressed</h3><ol>")
        for x in fixes[:8]:
            out.append(f"<li>{e(fix_line(x))}</li>")
        out.append("</ol></div>")
    out.append("</div></section>")
    return "\n".join(out)


def _inputs_line(s: dict) -> str:
    files = [f["file"] for f in s["inputs"]]
    shown = ", ".join(files[:6]) + (f" and {len(files) - 6} more" if len(files) > 6 else "")
    return f"{len(files)} input file(s): {shown}" if files else "no input files"


def _legend() -> str:
    gates = " ".join(chip(g) for g in GATE_ORDER)
    return (
        f'<p class="legend muted">Markers by gate: {gates}. Filled markers are events with a line of their own '
        "(logged ●, marker ◆, record ■); open markers are reconstructed (○) or interval (△) events, whose time "
        "is an estimate within an interval. When markers would overlap, bars count events per time bin (hatched: estimated "
        "times). Shaded: suspected KV pressure intervals; a band over the preemption panel: events a counter counts over that span without placing them; dotted line: the KV ceiling. Drag to zoom the time axis "
        "of every panel, double-click to reset; hover shows every panel at that time.</p>"
    )


def _tile(n: Any, label: str, extra: str = "") -> str:
    return f'<div class="tile"><div class="n">{e(n)}</div><div class="l">{e(label)}</div>{extra}</div>'


def _tiles(s: dict, a: Analysis) -> str:
    out = ['<section id="overview"><div class="grid">']
    kinds = ", ".join(f"{n} {k}" for k, n in s["by_kind"].items() if n) or "none"
    if s["count_visible"]:
        word = noun(s.get("engine_kinds") or {}, 1)
        out.append(
            _tile(
                s["events"], f"{word} event(s) ({s.get('engine_kind') or DEFAULT})", f'<div class="l">{e(kinds)}</div>'
            )
        )
    else:
        nv = s.get("not_visible") or {}
        out.append(
            _tile(
                "not visible",
                f"{noun(s.get('engine_kinds') or {}, 2)}: this bundle cannot count them",
                f'<div class="l">{e(nv.get("remedy") or "")}</div>',
            )
        )
    if s["preemption_rate"] is not None:
        out.append(_tile(f"{s['preemption_rate']:.4f}", f"per received request ({s['requests_received']} received)"))
    rec = s.get("reconciliation") or {}
    if rec and s["count_visible"]:
        out.append(_tile(rec.get("total"), f"reconciled count ({rec.get('quality')})"))
    elif not s["count_visible"]:  # no number (a 0 would read as "none happened"): where they can have happened
        piv = s.get("pressure_intervals") or []
        if piv:
            spans = "; ".join(f"{p['start'][11:19]} – {p['end'][11:19]}" for p in piv[:3])
            more = f" and {len(piv) - 3} more" if len(piv) > 3 else ""
            out.append(
                _tile(
                    f"{len(piv)} pressure span(s)",
                    "KV cache at the ceiling with requests waiting: where preemptions can have happened",
                    f'<div class="l">{e(spans + more)}</div>',
                )
            )
    if s["first_event"]:
        span = _span_seconds(a)
        over = f"{span:.0f} s" if span < 120 else f"{span / 60:.0f} min" if span < 7200 else f"{span / 3600:.1f} h"
        rate = f"{s['events'] / (span / 60):.1f} per minute over {over}" if span else ""
        out.append(
            _tile(
                s["first_event"][11:19] + " – " + s["last_event"][11:19],
                f"first to last event ({s['first_event'][:10]})",
                f'<div class="l">{e(rate)}</div>' if rate else "",
            )
        )
    st = s["stats"]
    if st["lines"]:
        kv = "–" if st["max_kv_usage"] is None else f"{st['max_kv_usage']}%"  # no reading: not 0
        out.append(_tile(kv, f"max KV cache usage ({st['lines']} stats lines)"))
        out.append(_tile(st["max_waiting"], "max waiting requests"))
    if s.get("by_gate"):
        top = sorted(((n, g) for g, n in s["by_gate"].items() if n), reverse=True)
        if top:
            n, g = top[0]
            out.append(_tile(n, "events of the most frequent gate", f"<div>{chip(g)}</div>"))
    out.append("</div></section>")
    return "\n".join(out)


def _summary(s: dict, a: Analysis) -> str:
    out = ['<section id="summary"><h2>Summary</h2>']
    rec = s.get("reconciliation") or {}
    if s.get("by_gate"):
        out.append("<h3>By gate</h3><table><tr><th>gate</th><th>events</th></tr>")
        for g, n in s["by_gate"].items():
            out.append(f'<tr><td>{chip(g)}</td><td class="num">{e(n)}</td></tr>')
        out.append("</table>")
        if s.get("g1_sub_kinds"):
            subs = ", ".join(f"{k}: {n}" for k, n in s["g1_sub_kinds"].items())
            out.append(f'<p class="muted">G1 sub-kinds: {e(subs)}</p>')
    if rec:
        out.append(f"<h3>Count reconciliation</h3><p>{e(rec.get('rule'))}</p>")
        srcs = rec.get("sources") or []
        if srcs:
            out.append("<table><tr><th>source</th><th>count</th><th>in the events</th><th>note</th></tr>")
            for x in srcs:
                out.append(
                    f'<tr><td>{e(x["source"])}</td><td class="num">{e(x["count"])}</td>'
                    f'<td class="num">{e(x.get("in_events") if x.get("in_events") is not None else "")}</td>'
                    f"<td>{e(x.get('note'))}</td></tr>"
                )
            out.append("</table>")
    piv = s.get("pressure_intervals") or []
    if piv:
        out.append(
            f'<h3>Suspected pressure intervals ({len(piv)})</h3><p class="muted">KV cache at or above '
            f"{e(s.get('pressure_ceiling'))}% with requests waiting: evidence, not counted.</p>"
            "<table><tr><th>engine</th><th>series</th><th>start</th><th>end</th><th>peak KV %</th>"
            "<th>max waiting</th><th>running</th><th>counted events in it</th><th>evidence</th></tr>"
        )
        for i, r in enumerate(piv[:200]):
            if i == 10:
                out.append(f"</table><details><summary>{min(len(piv), 200) - 10} more</summary><table>")
            ev = r.get("evidence") or []
            cited = ", ".join(ev[:3]) + (f" (+{len(ev) - 3} more)" if len(ev) > 3 else "")
            out.append(
                f'<tr><td>{e(r["engine"])}</td><td>{e(r["series"])}</td><td class="mono t">{e(r["start"])}</td>'
                f'<td class="mono t">{e(r["end"])}</td><td class="num">{e(_num(r["peak_kv_usage"]))}</td>'
                f'<td class="num">{e(r["max_waiting"])}</td><td>{e(_running(r))}</td>'
                f'<td class="num">{e(r.get("counted_events_in_interval"))}</td><td class="mono">{e(cited)}</td></tr>'
            )
        out.append("</table>" + ("</details>" if len(piv) > 10 else ""))
        if len(piv) > 200:
            out.append(f'<p class="muted">… and {len(piv) - 200} more (see analyze -f json).</p>')
    rep = s.get("requests_preempted_more_than_once") or []
    if rep:
        top = ", ".join(f"{r['request_id']} ×{r['count']}" for r in rep[:10])
        more = f" and {len(rep) - 10} more" if len(rep) > 10 else ""
        out.append(f'<h3>Preempted more than once</h3><p class="mono">{e(top)}{e(more)}</p>')
    if s["assumptions"]:
        out.append("<h3>Assumptions</h3><ul>")
        for x in s["assumptions"]:
            scope = f" ({x['scope']})" if x.get("scope") and x["scope"] != "bundle" else ""
            out.append(
                f'<li>{e(x["topic"])}{e(scope)}: <b>{e(x["value"])}</b> <span class="muted">from {e(x["source"])}</span></li>'
            )
        out.append("</ul>")
    if s.get("fixes"):
        out.append("<h3>Fixes, with their formulas and inputs</h3><ol>")
        for x in s["fixes"]:
            inputs = "; ".join(x.get("inputs") or [])
            out.append(
                f"<li>{e(x['text'])}"
                + (f' <span class="muted">(inputs: {e(inputs)})</span>' if inputs else "")
                + "</li>"
            )
        out.append("</ol>")
    if s.get("fixes_dropped"):
        out.append(
            '<p class="muted">Left out: ' + e("; ".join(f"{x['id']}: {x['why']}" for x in s["fixes_dropped"])) + "</p>"
        )
    if s["notes"]:
        out.append("<h3>Notes</h3><ul>" + "".join(f"<li>{e(n)}</li>" for n in s["notes"]) + "</ul>")
    if s["warnings"]:
        out.append("<h3>Warnings</h3><ul>" + "".join(f'<li class="warn">{e(w)}</li>' for w in s["warnings"]) + "</ul>")
    unknown = [f for f in s["inputs"] if f["kind"] in ("unknown", "binary", "empty", "unreadable")]
    out.append("<details><summary>Inputs</summary><table><tr><th>file</th><th>kind</th><th>size</th></tr>")
    for f in s["inputs"]:
        out.append(
            f'<tr><td class="mono">{e(f["file"])}</td><td>{e(f["kind"])}</td><td class="num">{e(f["size"])}</td></tr>'
        )
    out.append("</table></details>")
    if unknown:
        out.append(f'<p class="muted">{len(unknown)} input file(s) not recognised.</p>')
    out.append("</section>")
    return "\n".join(out)


def _span_seconds(a: Analysis) -> float:
    t = a.events.filter(pl.col("time").is_not_null()).get_column("time")
    if t.len() < 2:
        return 0.0
    return (t.max() - t.min()).total_seconds()


def _num(v: Any) -> str:
    return f"{v:.1f}" if isinstance(v, float) else str(v)


def _config(s: dict, a: Analysis) -> str:
    out = [
        '<section id="config"><h2>Configuration in force</h2>',
        '<div class="scroll"><table><tr><th>key</th><th>value</th><th>status</th><th>from</th><th>note</th></tr>',
    ]
    for k, v in (s.get("config") or {}).items():
        status = v.get("status") or ""
        out.append(
            f'<tr><td class="mono">{e(k)}</td><td class="mono">{e(v.get("value"))}</td>'
            f'<td class="status-{e(status)}">{e(status)}</td><td class="mono">{e(v.get("from") or "")}</td>'
            f"<td>{e(v.get('note') or '')}</td></tr>"
        )
    out.append("</table></div>")
    cfg = a.config
    if cfg.height > len(s.get("config") or {}):
        rows = cfg.with_columns(iso_expr("time", a.tz)) if cfg.schema.get("time") == pl.Datetime("us", "UTC") else cfg
        out.append(f"<details><summary>Every configuration row ({cfg.height}), with where it was seen</summary>")
        out.append("<table><tr><th>key</th><th>value</th><th>status</th><th>time</th><th>from</th><th>note</th></tr>")
        for r in rows.head(2000).iter_rows(named=True):
            src = f"{r['source']}:{r['line']}" if r.get("source") else ""
            out.append(
                f'<tr><td class="mono">{e(r["key"])}</td><td class="mono">{e(r["value"])}</td><td>{e(r["status"])}</td>'
                f'<td class="mono">{e(r.get("time") or "")}</td><td class="mono">{e(src)}</td><td>{e(r.get("note") or "")}</td></tr>'
            )
        out.append("</table></details>")
    out.append("</section>")
    return "\n".join(out)


def _event_frame(a: Analysis) -> pl.DataFrame:
    """Events with their verdicts and ISO times, in time order."""

    ev = a.events.select(list(EVENTS_SCHEMA))  # the public event columns
    if a.verdicts is not None and a.verdicts.height and ev.height:
        ev = ev.join(a.verdicts, on="event_id", how="left", maintain_order="left")
    for c in VERDICT_COLUMNS:
        if c not in ev.columns:
            ev = ev.with_columns(pl.lit(None).alias(c))
    return ev.with_columns(
        pl.col("gate").fill_null(UNDETERMINED),
        pl.col("time").alias("_t"),
        iso_expr("time", a.tz),
        iso_expr("interval_start", a.tz),
        iso_expr("interval_end", a.tz),
    )


def _events(a: Analysis, s: dict) -> str:
    ev = _event_frame(a)
    out = ['<section id="events">']
    if ev.height == 0 and not s["count_visible"]:
        nv = s.get("not_visible") or {}
        out.append(
            f"<h2>Events</h2><p>{e(noun(s.get('engine_kinds') or {}, 2).capitalize())} are not visible in this "
            f"bundle ({e(nv.get('reason'))}): "
            f"{e(nv.get('remedy'))}. This is not a count of zero.</p></section>"
        )
        return "\n".join(out)
    if ev.height == 0:
        out.append(
            "<h2>Events</h2><p>No preemption event in this bundle (see the notes above for what the "
            "log can and cannot show).</p></section>"
        )
        return "\n".join(out)
    if ev.height <= MAX_CARDS:
        order = {g: i for i, g in enumerate(GATE_ORDER)}
        groups = (
            ev.group_by("gate", "sub_kind", maintain_order=True)
            .len()
            .with_columns(_o=pl.col("gate").replace_strict(order, default=len(order), return_dtype=pl.Int32))
            .sort(["_o", "len"], descending=[False, True])
        )
        out.append(f"<h2>Events ({ev.height}) by gate and sub-kind</h2>")
        for g in groups.iter_rows(named=True):
            sub = ev.filter((pl.col("gate") == g["gate"]) & pl.col("sub_kind").eq_missing(g["sub_kind"]))
            label = f" / {e(g['sub_kind'])}" if g["sub_kind"] else ""
            out.append(
                f'<div class="group"><h3>{chip(g["gate"])}{label} · {sub.height} event(s)</h3><div class="cards">'
            )
            for r in _fold_counted(sub).iter_rows(named=True):
                out.append(_event_card(r))
            out.append("</div></div>")
    else:
        out.append(_group_cards(ev))
    out.append("</section>")
    return "\n".join(out)


def _fold_counted(ev: pl.DataFrame) -> pl.DataFrame:
    """Events counted on one line (a V0 warning's ``total_num_cumulative_preemption``, a stats line's or a
    /metrics reading's count: kinds ``reconstructed`` and ``interval``; SGLang's ``#retracted_reqs: N``:
    ``logged`` ``~q``; model.events.count_run) are one card, as they are one row of
    the terminal table (render/table.py display_rows): the run's first event, with ``_n`` (how many) and
    ``_last`` (the last one's time); other events are their own card (``_n`` 1)."""
    if ev.height == 0:
        return ev.with_columns(_n=pl.lit(1, pl.UInt32), _last=pl.lit(None, pl.String))
    ev = ev.with_columns(_g=count_run())
    firsts = ev.group_by("_g", "kind", maintain_order=True).agg(
        pl.len().cast(pl.UInt32).alias("_n"),
        pl.col("time").last().alias("_last"),
        pl.col("event_id").first().alias("_id"),
    )
    return (
        ev.join(firsts, on=["_g", "kind"], how="left", maintain_order="left")
        .filter(pl.col("event_id") == pl.col("_id"))
        .drop("_g", "_id")
    )


def _event_card(r: dict) -> str:
    gate = r["gate"] or UNDETERMINED
    n = int(r.get("_n") or 1)
    ident = r["event_id"]
    if n > 1:  # the run's id, as the table shows it (model.events.count_run)
        ident = re.sub(COUNT_SUFFIX_RE, "", str(ident)) + f"~{COUNT_SUFFIX.get(str(r['kind']), 'r')}*"
    head = [
        chip(gate),
        f"<span>{e(r['sub_kind'])}</span>" if r.get("sub_kind") else "",
        kind_tag(r["kind"]),
        f'<span class="id mono">{e(ident)}</span>',
        f'<span class="mono muted">{e(r["time"] or "no time")}</span>',
    ]
    if n > 1:  # one card for the events counted on one line
        head.append(f"<b>{n} events</b>")
    body = [
        f'<div class="card" style="border-left-color:{gate_color(gate)}">',
        '<div class="head">' + "".join(head) + "</div>",
    ]
    facts = []
    if r.get("request_id"):
        facts.append(f'request <b class="mono">{e(r["request_id"])}</b>')
    if r.get("mode"):
        facts.append(f"mode {e(r['mode'])}")
    if r.get("engine_kind"):
        facts.append((find(r["engine_kind"]) or get(None)).display)
    if r.get("engine"):
        facts.append(f"engine {e(r['engine'])}")
    if r.get("cumulative") is not None:
        facts.append(f"cumulative {e(r['cumulative'])}")
    if n > 1:
        facts.append(f"{n} events counted on this line, one verdict (the first shown); -f ndjson lists each")
    if r.get("interval_end"):
        facts.append(f"somewhere in {e(r.get('interval_start') or '?')} .. {e(r['interval_end'])}")
    facts.append(f'<span class="mono">{e(r["source"])}:{e(r["line"])}</span>')
    body.append("<div>" + " · ".join(facts) + "</div>")
    if r.get("raw"):
        body.append(f"<pre>{e(r['raw'])}</pre>")
    body.append(_verdict(r))
    body.append("</div>")
    return "\n".join(body)


def _verdict(r: dict, *, factor_counts: list[tuple[str, int]] | None = None) -> str:
    out = []
    conf = r.get("confidence") or "none"
    rule = r.get("rule") or "-"
    out.append(
        f"<div><b>Verdict</b>: {e(r.get('gate') or UNDETERMINED)}"
        + (f" / {e(r['sub_kind'])}" if r.get("sub_kind") else "")
        + f' <span class="muted">(rule {e(rule)}, confidence {e(conf)})</span></div>'
    )
    fired = [g for g in (r.get("gates_fired") or []) if g != r.get("gate")]
    if fired:
        out.append(f'<div class="muted">Gates that also fired: {e(", ".join(fired))}</div>')
    cited = r.get("evidence") or []
    if cited:
        out.append("<h3>Evidence</h3><table><tr><th>name</th><th>value</th><th>threshold</th><th>from</th></tr>")
        for c in cited:
            out.append(
                f'<tr><td class="mono">{e(c.get("name"))}</td><td class="mono">{e(c.get("value"))}</td>'
                f'<td class="mono">{e(c.get("threshold") or "")}</td><td class="mono">{e(c.get("src") or "-")}</td></tr>'
            )
        out.append("</table>")
    ne = r.get("not_evaluable") or []
    if ne:
        out.append("<h3>Not evaluable</h3><ul>")
        for x in ne:
            missing = evidence_words(x.get("missing") or []) or "its evidence"
            out.append(
                f"<li>{e(x.get('gate'))}: missing {e(missing)} "
                f'<span class="muted">(needs {e(x.get("needs"))})</span></li>'
            )
        out.append("</ul>")
    if factor_counts is not None:  # noqa: SIM102 - "the count is known" apart from "it is non-zero"
        if factor_counts:
            out.append("<h3>Contributing factors (events in the group)</h3><ul>")
            out.extend(f"<li>{e(f)}: {n}</li>" for f, n in factor_counts)
            out.append("</ul>")
    facs = r.get("contributing_factors") or []
    if facs:
        label = "Contributing factors (example event)" if factor_counts is not None else "Contributing factors"
        out.append(f"<h3>{label}</h3><ul>")
        for f in facs:
            src = f' <span class="mono muted">[{e(f.get("src"))}]</span>' if f.get("src") else ""
            out.append(f"<li><b>{e(f.get('factor'))}</b>: {e(f.get('detail'))}{src}</li>")
        out.append("</ul>")
    notes = r.get("notes") or []
    if notes:
        out.append("<h3>Notes</h3><ul>" + "".join(f"<li>{e(n)}</li>" for n in notes) + "</ul>")
    recs = r.get("recommendations") or []
    if recs:
        out.append("<h3>Recommendations</h3><ul>" + "".join(f"<li>{e(x)}</li>" for x in recs) + "</ul>")
    return "\n".join(out)


def _group_cards(ev: pl.DataFrame) -> str:
    keys = ["gate", "sub_kind", "rule", "kind"]
    ev = ev.sort("_t", nulls_last=True, maintain_order=True).with_row_index("_i")
    groups = (
        ev.group_by(keys, maintain_order=True)
        .agg(
            pl.len().alias("count"),
            pl.col("time").drop_nulls().first().alias("first"),
            pl.col("time").drop_nulls().last().alias("last"),
            pl.col("event_id").head(EXAMPLES).alias("examples"),
            pl.col("_i").first().alias("_rep"),
            pl.col("request_id").drop_nulls().n_unique().alias("requests"),
        )
        .with_columns(
            _o=pl.col("gate").replace_strict(
                {g: i for i, g in enumerate(GATE_ORDER)}, default=len(GATE_ORDER), return_dtype=pl.Int32
            )
        )
        .sort(["_o", "count"], descending=[False, True], maintain_order=True)
    )
    factors = _count_factors(ev, keys)
    out = [
        f"<h2>Events ({ev.height}) in {groups.height} group(s)</h2>",
        f'<p class="muted">{ev.height} events are too many for one card each: events with the same gate, sub-kind, '
        "rule and kind share a card, which shows the count, the time range, a few example ids and the full verdict "
        "of the first one. Every event's own verdict is in <code>preemptlog analyze -f ndjson</code>; "
        "<code>preemptlog explain ID</code> shows one event's window.</p>",
        '<div class="cards">',
    ]
    for g in groups.iter_rows(named=True):
        rep = ev.row(g["_rep"], named=True)
        gate = g["gate"] or UNDETERMINED
        head = [
            chip(gate),
            f"<span>{e(g['sub_kind'])}</span>" if g.get("sub_kind") else "",
            kind_tag(g["kind"]),
            f'<span class="id">{g["count"]} event(s)</span>',
            f'<span class="muted">rule {e(g["rule"] or "-")}</span>',
        ]
        body = [
            f'<div class="card" style="border-left-color:{gate_color(gate)}">',
            '<div class="head">' + "".join(head) + "</div>",
        ]
        span = f"{e(g['first'])} .. {e(g['last'])}" if g.get("first") else "no timestamps"
        body.append(f'<div class="mono muted">{span}</div>')
        if g["requests"]:
            body.append(f"<div>{g['requests']} distinct request(s)</div>")
        more = f" and {g['count'] - len(g['examples'])} more" if g["count"] > len(g["examples"]) else ""
        body.append(
            "<div>examples: "
            + ", ".join(f'<span class="mono">{e(x)}</span>' for x in g["examples"])
            + e(more)
            + "</div>"
        )
        body.append(
            f'<div class="muted">example event {e(rep["event_id"])} at <span class="mono">{e(rep["source"])}:{e(rep["line"])}</span></div>'
        )
        if rep.get("raw"):
            body.append(f"<pre>{e(rep['raw'])}</pre>")
        fkey = tuple(g[k] for k in keys)
        body.append(_verdict(rep, factor_counts=factors.get(fkey, [])))
        body.append("</div>")
        out.append("\n".join(body))
    out.append("</div>")
    return "\n".join(out)


def _count_factors(ev: pl.DataFrame, keys: list[str]) -> dict[tuple, list[tuple[str, int]]]:
    """Per group: how many events carry each contributing factor."""
    if ev.schema.get("contributing_factors") is None or not isinstance(ev.schema["contributing_factors"], pl.List):
        return {}
    f = (
        ev.select(keys + ["event_id", "contributing_factors"])
        .explode("contributing_factors")
        .filter(pl.col("contributing_factors").is_not_null())
    )
    if f.height == 0:
        return {}
    f = (
        f.with_columns(pl.col("contributing_factors").struct.field("factor").alias("factor"))
        .group_by(keys + ["factor"])
        .agg(pl.col("event_id").n_unique().alias("n"))
        .sort("n", descending=True)
    )
    out: dict[tuple, list[tuple[str, int]]] = {}
    for r in f.iter_rows(named=True):
        out.setdefault(tuple(r[k] for k in keys), []).append((r["factor"], r["n"]))
    return out


__all__ = ["GATE_COLORS", "MAX_CARDS", "e", "page"]


def _running(r: dict) -> str:
    """An interval's running count, largest to smallest (``96 → 90``); "" where no sample read one (scrapes
    without vllm:num_requests_running), never an arrow between nothing."""
    if r.get("max_running") is None or r.get("min_running") is None:
        return ""
    return f"{r['max_running']} → {r['min_running']}"
