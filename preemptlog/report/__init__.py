"""The incident report: one self-contained HTML file (``preemptlog report``).

:func:`render_html` turns an :class:`~preemptlog.analysis.Analysis` into a
page that opens offline: plotly.js is inlined, nothing is fetched. Stages:

- ``series.py``: every series reduced to what a browser can draw (envelopes,
  event markers or counts per bin);
- ``figure.py``: one plotly figure, stacked panels on one shared time axis;
- ``page.py``: summary, configuration, one card per event (or per group), and
  the page around the figure.

plotly is imported here, never at CLI start-up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..result import Analysis


def plotly_js() -> str:
    """The plotly.js bundle shipped with the plotly package, safe to inline in ``<script>``."""
    from plotly.offline import get_plotlyjs

    js = get_plotlyjs()
    # An HTML parser ends a script at '</script'; inside JS strings and regexes '<\/' means the same.
    return js.replace("</script", "<\\/script").replace("</SCRIPT", "<\\/SCRIPT")


def figure_html(analysis: Analysis) -> str:
    import plotly.io as pio

    from .figure import build_figure
    from .series import plot_data

    fig = build_figure(plot_data(analysis))
    return pio.to_html(
        fig,
        include_plotlyjs=False,
        full_html=False,
        div_id="timeline-plot",
        default_width="100%",
        default_height=f"{fig.layout.height}px",
        config={
            "displaylogo": False,
            "responsive": True,
            "showSendToCloud": False,
            "modeBarButtonsToRemove": ["select2d", "lasso2d"],
            "toImageButtonOptions": {"filename": "preemptlog-timeline"},
        },
    )


def render_html(analysis: Analysis, *, title: str | None = None) -> str:
    from .page import page

    return page(analysis, figure_html(analysis), plotly_js(), title=title)
