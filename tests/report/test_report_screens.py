"""The report on a desktop (1400x900) and a phone (390x844) in headless chromium (issue 26): the
answer on the first screen, nothing wider than the window (the plot's legend included), no
number shown for a count the bundle cannot show, and a screenshot of each.

chromium is a real component: without it the tests skip with the reason, and fail when CI is set.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from ..conftest import FIXTURES
from .test_report import _chromium, _probe, _report

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser") if shutil.which(n)), None)
SCREENS = [(1400, 900), (390, 844)]

PROBE = """<script>window.addEventListener('load', function () { setTimeout(function () {
  var v = document.getElementById('verdict');
  var h = v ? v.querySelector('.headline') : null;
  var wide = Array.prototype.slice.call(document.querySelectorAll('body *')).filter(function (el) {
    var b = el.getBoundingClientRect(); return b.width > 0 && b.right > window.innerWidth + 1 && !el.closest('.scroll')
      && !el.closest('table');
  }).map(function (el) { return el.tagName + '.' + (el.getAttribute('class') || ''); }).slice(0, 5);
  var legend = document.querySelector('#timeline-plot .legend');
  var lb = legend ? legend.getBoundingClientRect() : null;
  var out = {
    inner: window.innerWidth, scroll: document.documentElement.scrollWidth, wide: wide,
    headline: h ? h.textContent : null, headline_bottom: h ? h.getBoundingClientRect().bottom : null,
    tiles: Array.prototype.slice.call(document.querySelectorAll('.tile .n')).map(function (n) { return n.textContent; }),
    legend_right: lb ? lb.right : null, legend_left: lb ? lb.left : null
  };
  parent.postMessage(JSON.stringify(out), '*');
}, 300); });</script>"""
# Headless chromium lays a window out at least 500 px wide: the report is shown in a frame of the
# screen's exact size, and tells the host page what it measured.
HOST = """<!DOCTYPE html><html><head><meta charset="utf-8"></head><body style="margin:0">
<iframe src="{src}" width="{w}" height="{h}" style="border:0;display:block"></iframe>
<script>window.addEventListener('message', function (e) {{
  var el = document.createElement('pre'); el.id = 'probe'; el.textContent = e.data; document.body.appendChild(el);
}});</script></body></html>"""


@pytest.fixture(scope="module")
def browser() -> str:
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed and CI is set: the report's screens are not checked")
        pytest.skip("chromium is not installed (apt-get install chromium; .ci/run installs it)")
    return CHROMIUM


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, Path]:
    sys.path.insert(0, str(FIXTURES.parent))
    from tests.campaigns.test_stock_bundles import STOCK, write

    d = tmp_path_factory.mktemp("screens")
    stock = write(d / "stock", "v08", STOCK)  # a stock V1 log: the count is not visible
    return {
        "guide-demo": _report([str(FIXTURES / "guide-demo")], d / "guide.html"),
        "demo": _report([str(FIXTURES / "demo")], d / "demo.html"),
        "stock": _report([str(stock)], d / "stock.html", "--year", "2025"),
    }


def _screen(page: Path, tmp: Path, width: int, height: int) -> tuple[dict, Path]:
    probed = tmp / f"{page.stem}-{width}.html"
    probed.write_text(page.read_text(encoding="utf-8").replace("<head>", "<head>" + PROBE, 1), encoding="utf-8")
    host = tmp / f"{page.stem}-{width}-host.html"
    host.write_text(HOST.format(src=probed.name, w=width, h=height), encoding="utf-8")
    shot = tmp / f"{page.stem}-{width}x{height}.png"
    size = f"{max(width, 500)},{height}"
    p = _probe(_chromium(host.as_uri(), tmp / f"profile-{page.stem}-{width}", screenshot=shot, size=size))
    return p, shot


@pytest.mark.slow  # a browser per screen
@pytest.mark.parametrize("screen", SCREENS, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("name", ["guide-demo", "demo", "stock"])
def test_report_screens(browser, reports, tmp_path, name, screen):
    width, height = screen
    p, shot = _screen(reports[name], tmp_path, width, height)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    assert p["inner"] == width
    assert p["scroll"] <= p["inner"], p  # no horizontal scrolling
    assert p["wide"] == [], p
    assert p["headline"] and p["headline_bottom"] <= height, p  # the answer on the first screen
    if p["legend_right"] is not None:
        assert p["legend_right"] <= width + 1 and p["legend_left"] >= 0, p  # the plot's legend inside the screen
    if name == "stock":
        assert p["headline"].startswith("Preemptions: not visible")
        assert not any(t.strip().replace(".", "").isdigit() for t in p["tiles"][:2]), p  # no count as a number
        assert any("pressure span" in t for t in p["tiles"]), p


def test_events_that_would_overlap_are_counted_per_bin():
    """160 G1 events in 27 s would be drawn as a handful of markers on each other: bins count them
    (the 27-per-second peak shows); a sparse incident keeps one marker per event."""
    from preemptlog import AnalyzeOptions, analyze
    from preemptlog.report.series import plot_data

    dense = analyze([str(FIXTURES / "guide-demo")], AnalyzeOptions(tz="UTC"))
    d = plot_data(dense)
    assert d.markers is None and d.bins is not None and d.bin_seconds == 1
    assert int(d.bins.get_column("count").sum()) == dense.events.height
    import polars as pl

    per_second = d.bins.group_by("time").agg(pl.col("count").sum()).get_column("count").max()
    assert per_second >= 20
    sparse = plot_data(analyze([str(FIXTURES / "prometheus" / "stock-v1")], AnalyzeOptions(tz="UTC")))
    assert sparse.markers is not None and sparse.markers.height == 25


def test_colours_do_not_repeat_across_panels():
    """A line of one panel never takes a gate's colour, nor another metric's."""
    from preemptlog import AnalyzeOptions, analyze
    from preemptlog.report.figure import GATE_COLORS, METRIC_COLORS, build_figure
    from preemptlog.report.series import plot_data

    assert len(set(METRIC_COLORS.values())) == len(METRIC_COLORS)
    assert not set(METRIC_COLORS.values()) & set(GATE_COLORS.values())
    fig = build_figure(plot_data(analyze([str(FIXTURES / "guide-demo")], AnalyzeOptions(tz="UTC"))))
    lines: dict[str, set[str]] = {}
    for t in fig.data:
        if t.type == "scatter" and t.mode == "lines":
            lines.setdefault(t.line.color, set()).add(t.legendgroup)
    assert lines and not set(lines) & set(GATE_COLORS.values())
    # one colour, one thing: a metric of an engine, or one GPU (the same in its FB and SM panels)
    assert all(len(groups) == 1 for groups in lines.values()), lines
    assert len(lines) >= 8


SCRAPE_SINCE_START = """# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} 7.0
vllm:num_preemptions_total{engine="1",model_name="m"} 3.0
# TYPE vllm:num_preemptions_created gauge
vllm:num_preemptions_created{engine="0",model_name="m"} 1773478800.0
vllm:num_preemptions_created{engine="1",model_name="m"} 1773481500.0
"""


@pytest.mark.parametrize(
    "bundle,want",
    [
        # the demo: one reading of vLLM's counter, since the engine's start (_created)
        ("demo", [("03:09:02", "03:10:48", "G1-kv-space", 242)]),
        # by hand: two engines started at other times, one reading (no log: no cause)
        ("two-engines", [("09:00:00", "10:00:00", "undetermined", 7), ("09:45:00", "10:00:00", "undetermined", 3)]),
    ],
)
def test_events_counted_over_a_span_are_one_band_with_their_count(bundle, want, tmp_path):
    """Events a counter counts since the engine's start are not placed in time: the events panel shows
    one band over each span that counts them, with its count, never 'no timed preemption event'."""
    from preemptlog import AnalyzeOptions, analyze
    from preemptlog.report.figure import build_figure
    from preemptlog.report.series import plot_data

    if bundle == "demo":
        path = FIXTURES / "demo"
    else:
        path = tmp_path / "b"
        path.mkdir()
        (path / "metrics-1773482400.prom").write_text(SCRAPE_SINCE_START)
    d = plot_data(analyze([str(path)], AnalyzeOptions(tz="UTC")))
    got = [(s[11:19], e[11:19], g, n) for s, e, g, n in d.counted]
    assert got == want
    assert d.untimed == sum(n for *_, n in want)
    fig = build_figure(d)
    texts = [a.text for a in fig.layout.annotations]
    assert "no timed preemption event" not in texts
    for start, end, gate, n in want:
        assert f"{n} {gate} {start}-{end}" in texts, texts
        assert any(
            s.type == "rect" and str(s.x0)[11:19] == start and str(s.x1)[11:19] == end for s in fig.layout.shapes
        )


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR", path
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


@pytest.mark.slow  # a report and a browser
def test_the_screenshot_is_regenerated_by_a_script(browser, tmp_path):
    """docs/report-screenshot.png (README, docs/report.md) is what bench/screenshot draws of today's demo."""
    import subprocess

    root = FIXTURES.parent
    out = tmp_path / "shot.png"
    r = subprocess.run(
        [sys.executable, str(root / "bench" / "screenshot"), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert _png_size(out) == (1400, 1880) == _png_size(root / "docs" / "report-screenshot.png")
    assert out.stat().st_size > 50_000  # a drawn page, not a blank one
    readme = (root / "README.md").read_text(encoding="utf-8")
    assert "](docs/report-screenshot.png)" in readme and "bench/screenshot" in readme
