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

from .figure import build_figure
from .page import page
from .series import plot_data

if TYPE_CHECKING:
    from ..model.result import Analysis


def plotly_js() -> str:
    """The plotly.js bundle shipped with the plotly package, safe to inline in ``<script>``."""
    from plotly.offline import get_plotlyjs

    js = get_plotlyjs()
    # An HTML parser ends a script at '</script'; inside JS strings and regexes '<\/' means the same.
    return js.replace("</script", "<\\/script").replace("</SCRIPT", "<\\/SCRIPT")


def figure_html(analysis: Analysis) -> str:
    import plotly.io as pio

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
        post_script=NARROW_SCRIPT,
    )


# On a narrow screen (a phone, 390 px) the legend goes under the plot, across, so that it stays
# inside the screen and the plot keeps the width; the margins shrink, and the panel titles start at
# the screen's left edge (a long one on two lines). No less-than sign in it: the test of the figure
# script (log text escaped) finds none.
NARROW_SCRIPT = """if (600 > window.innerWidth) {
  var gd = document.getElementById('{plot_id}');
  Plotly.relayout(gd, {'legend.orientation': 'h', 'legend.x': 0, 'legend.y': -0.08, 'legend.yanchor': 'top',
                       'margin.l': 44, 'margin.r': 8});
  var size = gd._fullLayout && gd._fullLayout._size, upd = {};
  (gd.layout.annotations || []).forEach(function (a, i) {
    if (a.xref !== 'paper' || a.x !== 0 || !size) { return; }
    upd['annotations[' + i + '].x'] = -(size.l - 4) / size.w;
    if (a.text.length > 40 && a.text.indexOf(' (') > 0) { upd['annotations[' + i + '].text'] = a.text.replace(' (', '\\u003cbr\\u003e('); }
  });
  Plotly.relayout(gd, upd);
}"""


def render_html(analysis: Analysis, *, title: str | None = None) -> str:

    return page(analysis, figure_html(analysis), plotly_js(), title=title)
