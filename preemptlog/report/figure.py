"""The report's timeline: one plotly figure, stacked panels on one shared time axis.

Every trace uses the same x axis (``x``) and its own y axis; with
``hoversubplots="axis"`` and ``hovermode="x unified"`` hovering one panel
shows the values of every panel at that time, and zooming (drag on the
plot, x only: the y axes are fixed) zooms every panel, as in Grafana.

Log text is data: every string that comes from the input (names, ids, lines)
is HTML-escaped here, because plotly renders hover and legend text as a
small HTML subset. (The JSON itself is also safe inside ``<script>``:
plotly writes ``<``, ``>`` and ``/`` as ``\\u`` escapes.)
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

from ..outputs.safe import neutralise
from .series import ESTIMATED_KINDS, UNDETERMINED, PlotData

if TYPE_CHECKING:
    import plotly.graph_objects as go

GATE_COLORS = {
    "G1-kv-space": "#d62728",
    "G2-batch-variance": "#e6a100",
    "G3-queue-overflow": "#9467bd",
    "G4-prefix-conflict": "#1f77b4",
    UNDETERMINED: "#7f7f7f",
}
GATE_ORDER = list(GATE_COLORS)
KIND_SYMBOLS = {
    "logged": "circle",
    "marker": "diamond",
    "record": "square",
    "reconstructed": "circle-open",
    "interval": "triangle-up-open",
}
PANELS = {
    # name: (title, relative height)
    "events": ("Preemptions by gate", 1.3),
    "kv": ("KV cache usage (%)", 1.0),
    "requests": ("Requests: running / waiting / swapped", 1.0),
    "gpu_mem": ("GPU frame-buffer memory used (MiB, dmon fb)", 0.9),
    "gpu_sm": ("GPU SM utilisation (%, dmon sm)", 0.9),
    "blocks": ("KV blocks: free / largest contiguous free run", 0.9),
}
METRIC_COLORS = {  # none of them a gate's colour: a line is never read as a gate
    "KV cache": "#008b8b",
    "running": "#2ca02c",
    "waiting": "#ff7f0e",
    "swapped": "#8c564b",
    "free blocks": "#17becf",
    "largest free run": "#bcbd22",
}
ENGINE_DASHES = ("solid", "dot", "dashdot", "longdash", "longdashdot")
PX_PER_PANEL = 190
GAP = 0.035


def esc(value) -> str:
    """Log text for plotly labels: HTML-escaped, control characters made visible, kept short."""

    s = neutralise("" if value is None else str(value))
    if len(s) > 240:
        s = s[:240] + "…"
    return html.escape(s, quote=True)


def gate_color(gate: str) -> str:
    return GATE_COLORS.get(gate, "#7f7f7f")


def _domains(panels: list[str]) -> dict[str, tuple[float, float]]:
    weights = [PANELS[p][1] for p in panels]
    usable = 1.0 - GAP * (len(panels) - 1)
    total = sum(weights)
    out: dict[str, tuple[float, float]] = {}
    top = 1.0
    for p, w in zip(panels, weights, strict=False):
        h = usable * w / total
        out[p] = (max(0.0, top - h), top)
        top -= h + GAP
    return out


def build_figure(data: PlotData) -> go.Figure:
    import plotly.graph_objects as go

    panels = ["events"] + [p for p in PANELS if p != "events" and p in data.panels()]
    axis = {p: ("y" if i == 0 else f"y{i + 1}") for i, p in enumerate(panels)}
    domains = _domains(panels)
    fig = go.Figure()

    # Events.
    gates_present: list[str] = []
    if data.markers is not None and data.markers.height:
        m = data.markers
        for (gate, kind), part in sorted(
            m.partition_by(["gate", "kind"], as_dict=True, maintain_order=True).items(),
            key=lambda kv: (GATE_ORDER.index(kv[0][0]) if kv[0][0] in GATE_ORDER else 99, str(kv[0][1])),
        ):
            gates_present.append(gate)
            texts = [_marker_text(r) for r in part.iter_rows(named=True)]
            fig.add_trace(
                go.Scatter(
                    x=part.get_column("time").to_list(),
                    y=[gate] * part.height,
                    mode="markers",
                    name=f"{esc(gate)} · {esc(kind)}",
                    legendgroup=f"gate {gate}",
                    legendgrouptitle_text=esc(gate) if gate not in gates_present[:-1] else None,
                    marker=dict(
                        symbol=KIND_SYMBOLS.get(kind, "x"),
                        color=gate_color(gate),
                        size=9 if kind not in ESTIMATED_KINDS else 7,
                        opacity=1.0 if kind not in ESTIMATED_KINDS else 0.55,
                        line=dict(width=1.2 if kind in ESTIMATED_KINDS else 0.5, color=gate_color(gate)),
                    ),
                    text=texts,
                    hovertemplate="%{text}<extra></extra>",
                    yaxis=axis["events"],
                )
            )
    elif data.bins is not None and data.bins.height:
        b = data.bins
        width_ms = (data.bin_seconds or 60) * 1000
        for (gate, estimated), part in sorted(
            b.partition_by(["gate", "estimated"], as_dict=True, maintain_order=True).items(),
            key=lambda kv: (GATE_ORDER.index(kv[0][0]) if kv[0][0] in GATE_ORDER else 99, bool(kv[0][1])),
        ):
            first = gate not in gates_present
            gates_present.append(gate)
            how = "reconstructed/interval (time estimated)" if estimated else "logged/marker/record"
            fig.add_trace(
                go.Bar(
                    x=part.get_column("time").to_list(),
                    y=part.get_column("count").to_list(),
                    width=width_ms,
                    offset=0,
                    name=f"{esc(gate)} · {'estimated' if estimated else 'exact'}",
                    legendgroup=f"gate {gate}",
                    legendgrouptitle_text=esc(gate) if first else None,
                    marker=dict(
                        color=gate_color(gate),
                        opacity=0.55 if estimated else 0.95,
                        pattern=dict(shape="/" if estimated else "", fgcolor="white", solidity=0.3),
                        line=dict(width=0),
                    ),
                    hovertemplate=f"%{{y}} event(s) per {data.bin_seconds}s · {esc(gate)} · {how}<extra></extra>",
                    yaxis=axis["events"],
                )
            )

    # Lines.
    colorway_i = {}
    engine_dash: dict[str, str] = {}
    # No red, amber, purple or blue of the gates: a GPU line is never mistaken for a gate.
    palette = [  # neither a gate's nor a metric's colour
        "#e377c2",
        "#393b79",
        "#637939",
        "#7b4173",
        "#ad494a",
        "#843c39",
        "#8c6d31",
        "#5254a3",
        "#6b6ecf",
        "#9c9ede",
    ]
    for s in data.series:
        if s.panel not in axis:
            continue
        metric = s.name.split(" (", 1)[0]
        color = METRIC_COLORS.get(metric) if s.panel in ("kv", "requests", "blocks") else None
        if color is None:
            k = colorway_i.setdefault(s.group, len(colorway_i))
            color = palette[k % len(palette)]
        dash = s.dash
        if s.panel in ("kv", "requests", "blocks") and dash == "solid":
            dash = engine_dash.setdefault(s.group, ENGINE_DASHES[len(engine_dash) % len(ENGINE_DASHES)])
        fig.add_trace(
            go.Scatter(
                x=s.points.get_column("time").to_list(),
                y=s.points.get_column("value").to_list(),
                mode="lines",
                line=dict(color=color, dash=dash, width=1.6),
                name=esc(s.name),
                legendgroup=esc(s.group),
                hovertemplate="%{y:.4~g}",
                yaxis=axis[s.panel],
            )
        )

    layout: dict = dict(
        template="plotly_white",
        height=PX_PER_PANEL * len(panels) + 120,
        margin=dict(l=70, r=20, t=30, b=50),
        hovermode="x unified",
        hoversubplots="axis",
        dragmode="zoom",
        barmode="stack",
        bargap=0,
        legend=dict(groupclick="toggleitem", font=dict(size=11), tracegroupgap=6, traceorder="grouped"),
        xaxis=dict(
            type="date",
            title=dict(text=f"time ({esc(data.tz)})"),
            showspikes=True,
            spikemode="across",
            spikesnap="cursor",
            spikethickness=1,
            spikedash="solid",
            spikecolor="#555",
            anchor=axis[panels[-1]],
        ),
    )
    annotations = []
    shapes = []
    for p in panels:
        key = "yaxis" if axis[p] == "y" else f"yaxis{axis[p][1:]}"
        ax: dict = dict(domain=list(domains[p]), fixedrange=True, zeroline=False, automargin=True)
        if p == "events":
            if data.markers is not None:
                present = [g for g in GATE_ORDER if g in gates_present] + [
                    g for g in dict.fromkeys(gates_present) if g not in GATE_ORDER
                ]
                # G1 on top, undetermined at the bottom.
                ax.update(
                    type="category",
                    categoryorder="array",
                    categoryarray=present or [UNDETERMINED],
                    autorange="reversed",
                )
            else:
                ax.update(title=dict(text=f"events / {data.bin_seconds}s"), rangemode="tozero")
        elif p in ("kv", "gpu_sm"):
            ax.update(range=[0, 105])
        else:
            ax.update(rangemode="tozero")
        layout[key] = ax
        annotations.append(
            dict(
                text=f"<b>{PANELS[p][0]}</b>",
                xref="paper",
                yref="paper",
                x=0,
                y=domains[p][1],
                xanchor="left",
                yanchor="bottom",
                showarrow=False,
                font=dict(size=12),
            )
        )
    counted = sum(c for *_, c in data.counted)
    lo, hi = domains["events"]
    for i, (start, end, gate, count) in enumerate(data.counted[:20]):
        # Events a counter (or a stats interval) counts over a span without placing them: one band over
        # the span, its count written on it, never a marker per event at an invented time.
        color = GATE_COLORS.get(gate, GATE_COLORS[UNDETERMINED])
        shapes.append(
            dict(
                type="rect",
                xref="x",
                yref="paper",  # the events panel's band of the page (its axis may hold no trace)
                x0=start,
                x1=end,
                y0=lo + 0.1 * (hi - lo),
                y1=lo + 0.9 * (hi - lo),
                fillcolor=color,
                opacity=0.18,
                line=dict(width=1, color=color, dash="dot"),
                layer="below",
            )
        )
        annotations.append(
            dict(
                text=esc(f"{count} {gate} {start[11:19]}-{end[11:19]}"),
                xref="paper",  # at the panel's left: the span may start before the axis does
                yref="paper",
                x=0.01,
                y=lo + (0.5 - 0.15 * (i % 3)) * (hi - lo),
                xanchor="left",
                showarrow=False,
                font=dict(size=11, color=color),
            )
        )
    if data.untimed:
        annotations.append(
            dict(
                text=(
                    f"{data.untimed} event(s) without a timestamp are not drawn"
                    if not counted
                    else f"{data.untimed} event(s) not placed in time: bands over their spans"
                ),
                xref="paper",
                yref="paper",
                x=1,
                y=domains["events"][1],
                xanchor="right",
                yanchor="bottom",
                showarrow=False,
                font=dict(size=11, color="#a00"),
            )
        )
    if not gates_present and not data.counted:
        annotations.append(
            dict(
                text="no timed preemption event",
                xref="paper",
                yref="paper",
                x=0.5,
                y=sum(domains["events"]) / 2,
                showarrow=False,
                font=dict(size=13, color="#777"),
            )
        )
    target = "kv" if "kv" in axis else "events"
    yref = f"{axis[target]} domain"
    for start, end, label in data.pressure:
        shapes.append(
            dict(
                type="rect",
                xref="x",
                yref=yref,
                x0=start,
                x1=end,
                y0=0,
                y1=1,
                fillcolor="rgba(214,39,40,0.12)",
                line=dict(width=0),
                layer="below",
                name=esc(label),
            )
        )
    if "kv" in axis and data.kv_ceiling is not None:
        shapes.append(
            dict(
                type="line",
                xref="x domain",
                yref=axis["kv"],
                x0=0,
                x1=1,
                y0=data.kv_ceiling,
                y1=data.kv_ceiling,
                line=dict(color="#d62728", width=1, dash="dot"),
            )
        )
    layout["annotations"] = annotations
    layout["shapes"] = shapes
    fig.update_layout(layout)
    return fig


def _marker_text(r: dict) -> str:
    gate = r["gate"] + (f"/{r['sub_kind']}" if r.get("sub_kind") else "")
    parts = [
        f"<b>{esc(r['event_id'])}</b>",
        f"{esc(r['kind'])} · {esc(gate)}"
        + (f" · rule {esc(r['rule'])} ({esc(r['confidence'])})" if r.get("rule") else ""),
    ]
    if r.get("request_id"):
        parts.append(f"request {esc(r['request_id'])}")
    if r.get("interval_end"):
        parts.append(f"somewhere in {esc(r.get('interval_start') or '?')} .. {esc(r['interval_end'])}")
    parts.append(f"{esc(r['source'])}:{r['line']}")
    if r.get("raw"):
        raw = r["raw"] if len(r["raw"]) <= 140 else r["raw"][:140] + "…"
        parts.append(esc(raw))
    return "<br>".join(parts)
