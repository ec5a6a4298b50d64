"""The fleet report as one offline HTML page (``fleet report -f html``): the report's plotting
(plotly.js inlined, report/page.py's style, its Content-Security-Policy, every value escaped)."""

from __future__ import annotations

from datetime import date, datetime
from typing import TYPE_CHECKING, Any

import polars as pl

from ..model import VERSION as __version__
from ..report import plotly_js
from ..report.escape import e
from ..report.figure import GATE_COLORS
from ..report.page import page_head
from .report import headline
from .tables import TITLES

if TYPE_CHECKING:
    from .report import Window

GATES = ["G1-kv-space", "G2-batch-variance", "G3-queue-overflow", "G4-prefix-conflict", "undetermined"]


def _cell(v: Any) -> str:
    if v is None:
        return '<span class="muted">-</span>'
    if isinstance(v, datetime):
        return e(v.strftime("%Y-%m-%d %H:%M:%S"))
    if isinstance(v, date):
        return e(v.isoformat())
    if isinstance(v, float):
        return e(f"{v:.3g}")
    return e(v)


def _table(df: pl.DataFrame, limit: int = 200) -> str:
    if not df.height:
        return '<p class="muted">none</p>'
    head = "".join(f"<th>{e(c)}</th>" for c in df.columns)
    body = []
    for r in df.head(limit).iter_rows():
        cells = "".join(
            f'<td class="num">{_cell(v)}</td>'
            if isinstance(v, (int, float)) and not isinstance(v, bool)
            else f"<td>{_cell(v)}</td>"
            for v in r
        )
        body.append(f"<tr>{cells}</tr>")
    more = f'<p class="muted">and {df.height - limit} more row(s)</p>' if df.height > limit else ""
    return f'<div class="scroll"><table><tr>{head}</tr>{"".join(body)}</table></div>{more}'


def _figures(sections: dict[str, pl.DataFrame]) -> str:
    import plotly.graph_objects as go
    import plotly.io as pio
    from plotly.subplots import make_subplots

    tr = sections["trend"]
    srv = sections["servers"].filter(pl.col("preemptions") > 0).head(30)
    fig = make_subplots(
        rows=2,
        cols=1,
        subplot_titles=("Preemptions per day, by gate", "Servers with most preemptions"),
        vertical_spacing=0.18,
    )
    days = [d.isoformat() for d in tr.get_column("day").to_list()] if tr.height else []
    for g in GATES:
        if g in tr.columns and tr.height and (tr.get_column(g).sum() or 0):
            fig.add_trace(
                go.Bar(x=days, y=tr.get_column(g).to_list(), name=g, marker_color=GATE_COLORS.get(g, "#7f7f7f")),
                row=1,
                col=1,
            )
    if srv.height:
        fig.add_trace(
            go.Bar(
                x=srv.get_column("server").to_list(),
                y=srv.get_column("preemptions").to_list(),
                name="preemptions",
                marker_color="#1d2330",
                showlegend=False,
            ),
            row=2,
            col=1,
        )
    fig.update_layout(barmode="stack", height=720, margin={"l": 50, "r": 20, "t": 40, "b": 80})
    return pio.to_html(fig, include_plotlyjs=False, full_html=False, div_id="fleet-plot", config={"displaylogo": False})


def render(sections: dict[str, pl.DataFrame], *, by: str, window: Window, source: str) -> str:

    heading = "preemptlog fleet report"
    sub = f"{source} · times in UTC · preemptlog {__version__}" + (f" · {window.text()}" if window.text() else "")
    parts = [
        *page_head(heading, plotly_js()),
        f'<header><h1>{e(heading)}</h1><div class="sub">{e(sub)}</div></header><main>',
        f'<section id="verdict"><p class="headline">{e(headline(sections))}</p></section>',
        f'<section><div id="timeline">{_figures(sections)}</div></section>',
    ]
    for name, title in TITLES.items():
        parts.append(f'<section id="{name}"><h2>{e(title.format(by=by))}</h2>{_table(sections[name])}</section>')
    parts.append("</main></body></html>")
    return "\n".join(parts) + "\n"
