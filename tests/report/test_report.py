"""``preemptlog report``: one self-contained HTML file, drawn by a real headless browser, offline.

The browser tests run Debian's ``chromium`` (``.ci/run`` installs it) with every
network path closed (host resolver maps every name to nothing, a proxy that
refuses connections) and a probe script injected into a copy of the page that
records every resource the page fetched and every Content-Security-Policy
violation. They skip, with the reason, when chromium is not installed.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

from preemptlog.cli import app
from preemptlog.errors import ExitCode

from ..conftest import FIXTURES
from ..support.browser import chromium_argv, find_chromium

runner = CliRunner()
EVIL = "<script>alert(1)</script>"
OK_CODES = (ExitCode.OK, ExitCode.PARTIAL)


# --------------------------------------------------------------------------- bundles and reports


@pytest.fixture(scope="module")
def evil_bundle(tmp_path_factory) -> Path:
    """The demo bundle plus a log whose lines, file name and config value carry HTML."""
    d = tmp_path_factory.mktemp("evil") / "bundle"
    shutil.copytree(FIXTURES / "guide-demo", d)
    (d / "evil<i>.log").write_text(
        "INFO 11-29 23:58:01 [api_server.py:1091] args: Namespace(model='<img src=x onerror=window.__xss=1>', "
        "served_model_name=None)\n"
        f"WARNING 11-29 23:58:10 [scheduler.py:10] Req-1 PREEMPTED {EVIL}\n"
        'WARNING 11-29 23:58:12 [scheduler.py:10] request_id=7 PREEMPTED <img src=x onerror="window.__xss=1">\n',
        encoding="utf-8",
    )
    return d


def _report(paths: list[str], out: Path, *extra: str) -> Path:
    r = runner.invoke(app, ["report", *paths, "--tz", "UTC", "-o", str(out), *extra])
    assert r.exit_code in OK_CODES, (r.exit_code, r.stderr)
    return out


@pytest.fixture(scope="module")
def evil_report(evil_bundle, tmp_path_factory) -> Path:
    return _report([str(evil_bundle)], tmp_path_factory.mktemp("out") / "report.html")


@pytest.fixture(scope="module")
def demo_report(tmp_path_factory) -> Path:
    return _report([str(FIXTURES / "guide-demo")], tmp_path_factory.mktemp("demo") / "report.html")


def _big_bundle(d: Path, hours: float = 2.0) -> Path:
    """A V0 incident with thousands of reconstructed events, stats every 5 s and 1 Hz dmon for 2 GPUs."""
    d.mkdir(parents=True, exist_ok=True)
    t0 = datetime(2026, 11, 29, 22, 0, 0)
    total = 0
    lines = ["INFO 11-29 22:00:00 api_server.py:528] vLLM API server version 0.6.3.post1"]
    secs = int(hours * 3600)
    for s in range(0, secs, 5):
        ts = (t0 + timedelta(seconds=s)).strftime("%m-%d %H:%M:%S")
        kv = 50 + 49 * ((s // 5) % 40) / 40
        lines.append(
            f"INFO {ts} metrics.py:349] Avg prompt throughput: 500.0 tokens/s, Avg generation throughput: 120.0 "
            f"tokens/s, Running: {10 + s % 37} reqs, Swapped: 0 reqs, Pending: {s % 23} reqs, GPU KV cache usage: "
            f"{kv:.1f}%, CPU KV cache usage: 0.0%."
        )
        if s and s % 60 == 0:
            total += 51 + (s % 7)
            lines.append(
                f"WARNING {ts} scheduler.py:1560] Sequence group chat-{s:08x} is preempted by "
                "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect the "
                "end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size to provide more KV "
                f"cache memory. total_num_cumulative_preemption={total}"
            )
    (d / "vllm.log").write_text("\n".join(lines) + "\n")
    rows = [
        "#Date       Time        gpu    pwr  gtemp  mtemp     sm    mem    enc    dec    jpg    ofa   mclk   pclk     fb   bar1   ccpm ",
        "#YYYYMMDD   HH:MM:SS    Idx      W      C      C      %      %      %      %      %      %    MHz    MHz     MB     MB     MB ",
    ]
    for s in range(secs):
        t = t0 + timedelta(seconds=s)
        for g in range(2):
            rows.append(
                f" {t:%Y%m%d}   {t:%H:%M:%S}      {g}     60     34      -     {(s * 7 + g * 13) % 100}     30      0      0"
                f"      0      0    405    210  {70000 + (s * 31) % 9000}      5      0 "
            )
    (d / "dmon.txt").write_text("\n".join(rows) + "\n")
    return d


@pytest.fixture(scope="module")
def big_bundle(tmp_path_factory) -> Path:
    return _big_bundle(tmp_path_factory.mktemp("big") / "bundle")


# --------------------------------------------------------------------------- static checks of the file


class _Page(HTMLParser):
    """Every tag with its attributes, and the text of every script and style element."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.scripts: list[str] = []
        self.styles: list[str] = []
        self._in: str | None = None

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag in ("script", "style"):
            self._in = tag
            (self.scripts if tag == "script" else self.styles).append("")

    def handle_endtag(self, tag):
        if tag == self._in:
            self._in = None

    def handle_data(self, data):
        if self._in == "script":
            self.scripts[-1] += data
        elif self._in == "style":
            self.styles[-1] += data


URL_ATTRS = {
    "src",
    "href",
    "action",
    "formaction",
    "data",
    "poster",
    "srcset",
    "xlink:href",
    "background",
    "manifest",
    "ping",
    "codebase",
    "cite",
    "longdesc",
    "usemap",
    "icon",
}


def _parse(path: Path) -> tuple[str, _Page]:
    text = path.read_text(encoding="utf-8")
    page = _Page()
    page.feed(text)
    page.close()
    return text, page


def test_report_is_one_self_contained_file(evil_report):
    from preemptlog.report import plotly_js

    text, page = _parse(evil_report)
    assert text.startswith("<!DOCTYPE html>")
    js = plotly_js()
    # plotly.js is inlined verbatim, exactly once, as the text of one <script> element.
    assert [s for s in page.scripts if s == js], "plotly.js is not inlined"
    assert text.count(js[:200]) == 1
    others = [s for s in page.scripts if s != js]
    assert len(others) == 1 and "Plotly.newPlot" in others[0]  # the figure; no other script
    # Not one attribute of any element points anywhere: no src/href/... except data: URIs and fragments.
    for tag, attrs in page.tags:
        for name, value in attrs.items():
            if name in URL_ATTRS or name.startswith("on"):
                assert name in URL_ATTRS, f"<{tag} {name}=...> event handler in the page"
                assert value is None or value.startswith(("data:", "#")), f"<{tag} {name}={value!r}>"
        assert tag not in ("img", "iframe", "object", "embed", "video", "audio", "source", "base", "form"), tag
        if tag == "link":
            assert attrs.get("rel") == "icon" and attrs.get("href", "").startswith("data:"), attrs
        if tag == "script":
            assert "src" not in attrs
    # Styles: no fonts, imports or url() to fetch.
    for css in page.styles:
        assert not re.search(r"url\(|@import|@font-face", css, re.I), css
    # Outside the plotly.js source (whose strings name map tiles and docs it never fetches here),
    # the file holds no http(s) address at all: not in the figure JSON, the page or the scripts.
    rest = text.replace(js, "")
    assert not re.search(r"https?:|//cdn|\bcdn\.", rest, re.I), re.search(r".{60}https?:.{60}", rest)
    # And a Content-Security-Policy forbids every request, should something try.
    csp = next(a["content"] for t, a in page.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy")
    assert "default-src 'none'" in csp and "connect-src 'none'" in csp and "font-src 'none'" in csp


def test_log_text_stays_text(evil_report, evil_bundle):
    from preemptlog.report import plotly_js

    text, page = _parse(evil_report)
    rest = text.replace(plotly_js(), "")  # the library's own source is not log text
    assert EVIL not in text
    # Neither the raw line, nor the config value, nor the file name became markup.
    assert "<img" not in rest and "<i>" not in rest and "<\\/script" not in rest
    # As text in the page (the event card shows the raw line) ...
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "&lt;img src=x onerror=window.__xss=1&gt;" in text  # the config value
    assert "evil&lt;i&gt;.log" in text  # the file name
    # ... and HTML-escaped in the figure's hover text (plotly then writes < > / as \\u escapes).
    figure = next(s for s in page.scripts if "Plotly.newPlot" in s)
    assert "<" not in figure.split("Plotly.newPlot", 1)[1]
    assert "\\u003cscript" not in figure
    # The bundle's events would overlap as markers, so the page counts them per bin; drawn one
    # marker per event (a sparser incident), the hover text of the evil lines is escaped too.
    import plotly.io as pio

    from preemptlog.analysis import AnalyzeOptions, analyze
    from preemptlog.report.figure import build_figure
    from preemptlog.report.series import plot_data

    data = plot_data(analyze([str(evil_bundle)], AnalyzeOptions(tz="UTC")), bin_overlaps=False)
    assert data.markers is not None
    markers = pio.to_html(build_figure(data), include_plotlyjs=False, full_html=False)
    assert "\\u003cscript" not in markers and "<script>alert" not in markers
    assert "&lt;script&gt;alert(1)&lt;\\u002fscript&gt;" in markers
    # The only elements are the page's own: two scripts (plotly.js, the figure), no img/i from the log.
    assert [t for t, _ in page.tags].count("script") == 2
    assert not [t for t, _ in page.tags if t in ("img", "i")]


def test_report_to_stdout(evil_bundle):
    r = runner.invoke(app, ["report", str(evil_bundle), "--tz", "UTC", "-o", "-", "-q"])
    assert r.exit_code in OK_CODES, r.stderr
    assert r.stdout.startswith("<!DOCTYPE html>") and r.stdout.rstrip().endswith("</html>")
    assert r.stderr == ""


def test_report_help_and_lazy_plotly():
    r = runner.invoke(app, ["report", "--help"])
    assert r.exit_code == 0 and "offline" in r.stdout
    code = "import sys, preemptlog.cli; assert 'plotly' not in sys.modules and 'polars' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_large_incident_is_aggregated(big_bundle, tmp_path):
    from preemptlog.analysis import AnalyzeOptions, analyze
    from preemptlog.report import plotly_js
    from preemptlog.report.series import MAX_MARKERS, MAX_POINTS, plot_data

    a = analyze([str(big_bundle)], AnalyzeOptions(tz="UTC"))
    assert a.events.height > MAX_MARKERS  # thousands of reconstructed events
    data = plot_data(a)
    assert data.markers is None and data.bins is not None and data.bin_seconds
    assert data.bins.height <= 3 * 1500
    assert int(data.bins.get_column("count").sum()) == a.events.height
    assert {s.panel for s in data.series} >= {"kv", "requests", "gpu_mem", "gpu_sm"}
    assert all(s.points.height <= MAX_POINTS for s in data.series)
    out = _report([str(big_bundle)], tmp_path / "big.html")
    size = out.stat().st_size
    assert size < len(plotly_js()) + 1_500_000, size
    text = out.read_text()
    assert "group(s)</h2>" in text and "examples:" in text  # one card per group, not per event
    assert text.count('class="card"') < 50


def test_envelope_keeps_the_peaks():

    import polars as pl

    from preemptlog.report.series import envelope

    n = 100_000
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    df = pl.DataFrame(
        {"time": [t0 + timedelta(milliseconds=100 * i) for i in range(n)], "v": [50.0 + (i % 10) for i in range(n)]}
    ).with_columns(pl.when(pl.int_range(pl.len()) == 77_777).then(100.0).otherwise(pl.col("v")).alias("v"))
    out = envelope(df, "v", "UTC", max_points=2000)
    assert out.height <= 2000
    assert out.get_column("value").max() == 100.0 and out.get_column("value").min() == 50.0
    assert out.get_column("time").is_sorted()


def test_grouping_threshold_per_event_cards(demo_report):
    from preemptlog.report.page import MAX_CARDS

    text = demo_report.read_text()
    n = int(re.search(r"<h2>Events \((\d+)\)", text).group(1)) if "<h2>Events (" in text else 0
    if n and n <= MAX_CARDS:
        assert text.count('<div class="card"') == n
    assert "Configuration in force" in text and "status-seen" in text


# --------------------------------------------------------------------------- in a real browser

CHROMIUM = find_chromium()
needs_browser = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (apt-get install chromium; .ci/run installs it)"
)

PROBE = """<script>(function () {
  var seen = [];
  window.alert = function (m) { seen.push('alert ' + m); };
  document.addEventListener('securitypolicyviolation', function (e) { seen.push(e.violatedDirective + ' ' + e.blockedURI); });
  window.addEventListener('error', function (e) { seen.push('error ' + e.message); });
  window.addEventListener('load', function () { setTimeout(function () {
    var pre = Array.prototype.slice.call(document.querySelectorAll('pre'));
    var out = {
      problems: seen,
      resources: performance.getEntriesByType('resource').map(function (r) { return r.name; }),
      svgs: document.querySelectorAll('#timeline-plot svg.main-svg').length,
      subplots: document.querySelectorAll('#timeline-plot .cartesianlayer .subplot').length,
      traces: document.querySelectorAll('#timeline-plot .scatterlayer .trace, #timeline-plot .barlayer .trace').length,
      points: document.querySelectorAll('#timeline-plot .scatterlayer .point, #timeline-plot .scatterlayer .js-line').length,
      scripts: document.querySelectorAll('script').length,
      imgs: document.querySelectorAll('img').length,
      xss: typeof window.__xss,
      evil_as_text: pre.some(function (p) { return p.textContent.indexOf('<script>alert(1)<\\/script>') >= 0; }),
      cards: document.querySelectorAll('.card').length
    };
    var el = document.createElement('pre'); el.id = 'probe'; el.textContent = JSON.stringify(out);
    document.body.appendChild(el);
  }, 300); });
})();</script>"""


def _chromium(url: str, profile: Path, *, screenshot: Path | None = None, size: str = "1400,2200") -> str:
    """Load ``url`` with every network path closed; return the DOM after scripts ran."""
    profile.mkdir(parents=True, exist_ok=True)
    assert CHROMIUM is not None
    cmd = [*chromium_argv(CHROMIUM, profile, size, screenshot=screenshot, dump_dom=True), url]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=profile)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def _probe(dom: str) -> dict:
    m = re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S)
    assert m, "the probe did not run: " + dom[-500:]
    import html

    return json.loads(html.unescape(m.group(1)))


def _with_probe(src: Path, dest: Path, *, strip_csp: bool = False) -> Path:
    text = src.read_text(encoding="utf-8")
    if strip_csp:
        text, n = re.subn(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", text)
        assert n == 1
    dest.write_text(text.replace("<head>", "<head>" + PROBE, 1), encoding="utf-8")
    return dest


@needs_browser
def test_browser_draws_the_plots_offline(evil_report, tmp_path):
    page = _with_probe(evil_report, tmp_path / "probed.html")
    shot = tmp_path / "report.png"
    started = time.monotonic()
    dom = _chromium(page.as_uri(), tmp_path / "profile", screenshot=shot)
    elapsed = time.monotonic() - started
    p = _probe(dom)
    # Drawn: plotly ran and produced its SVG, one subplot per panel, with traces and points.
    assert 'class="main-svg"' in dom and p["svgs"] >= 1, p
    assert p["subplots"] >= 5, p  # events, KV, requests, GPU memory, SM, blocks (the demo has them all)
    assert p["traces"] >= 8 and p["points"] >= 10, p
    # Offline: nothing was fetched and nothing was blocked trying.
    assert p["resources"] == [], p
    assert p["problems"] == [], p
    # Log text stayed text: no script from the log ran, no element came from it.
    assert p["xss"] == "undefined" and p["scripts"] == 3 and p["imgs"] == 0, p  # probe + plotly.js + figure
    assert p["evil_as_text"] is True
    assert p["cards"] >= 1
    # A screenshot for inspection, under the test's tmp dir.
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    print(f"chromium rendered the report in {elapsed:.1f}s; screenshot {shot}")


@needs_browser
def test_browser_page_fetches_nothing_even_without_its_csp(demo_report, tmp_path):
    """The CSP is a second line: without it, the page still asks the network for nothing."""
    page = _with_probe(demo_report, tmp_path / "nocsp.html", strip_csp=True)
    p = _probe(_chromium(page.as_uri(), tmp_path / "profile"))
    assert p["svgs"] >= 1 and p["subplots"] >= 5, p
    assert p["resources"] == [] and p["problems"] == [], p


@needs_browser
def test_browser_probe_sees_requests(tmp_path):
    """Control: the probe does report fetches and CSP blocks, so empty lists above mean something."""
    (tmp_path / "net.html").write_text(
        '<!DOCTYPE html><html><head><meta charset="utf-8"></head><body>'
        '<img src="https://cdn.example.invalid/x.png"><script>fetch("http://api.example.invalid/").catch(function(){})'
        "</script><div id=timeline-plot></div></body></html>"
    )
    (tmp_path / "csp.html").write_text(
        '<!DOCTYPE html><html><head><meta charset="utf-8">'
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; script-src 'unsafe-inline'\">"
        '</head><body><img src="https://cdn.example.invalid/x.png"></body></html>'
    )
    net = _probe(_chromium(_with_probe(tmp_path / "net.html", tmp_path / "net-p.html").as_uri(), tmp_path / "p1"))
    assert any("cdn.example.invalid" in r for r in net["resources"]), net
    csp = _probe(_chromium(_with_probe(tmp_path / "csp.html", tmp_path / "csp-p.html").as_uri(), tmp_path / "p2"))
    assert any(x.startswith("img-src") for x in csp["problems"]), csp


LAYOUT_PROBE = """<script>window.addEventListener('load', function () { setTimeout(function () {
  var v = document.getElementById('verdict');
  var r = v ? v.getBoundingClientRect() : null;
  var wide = Array.prototype.slice.call(document.querySelectorAll('body *')).filter(function (el) {
    var b = el.getBoundingClientRect(); return b.right > window.innerWidth + 1 && !el.closest('.scroll');
  }).map(function (el) { return el.tagName + '.' + el.className; }).slice(0, 5);
  var out = {
    inner: window.innerWidth, scroll: document.documentElement.scrollWidth, wide: wide,
    verdict_top: r ? r.top : null, verdict_bottom: r ? r.bottom : null,
    headline: v ? v.querySelector('.headline').textContent : null,
    fixes: v ? v.querySelectorAll('ol li').length : 0,
    gate_rows: v ? v.querySelectorAll('table tr').length - 1 : 0,
    groups: document.querySelectorAll('#events .group').length
  };
  var el = document.createElement('pre'); el.id = 'probe'; el.textContent = JSON.stringify(out);
  document.body.appendChild(el);
}, 300); });</script>"""


@needs_browser
@pytest.mark.parametrize("width", [1280, 1920])
def test_browser_first_screen_and_no_horizontal_overflow(demo_report, tmp_path, width):
    """The first screen says what happened, why and what to change; nothing is wider than the window."""
    text = demo_report.read_text(encoding="utf-8").replace("<head>", "<head>" + LAYOUT_PROBE, 1)
    page = tmp_path / "layout.html"
    page.write_text(text, encoding="utf-8")
    shot = tmp_path / f"first-{width}.png"
    p = _probe(_chromium(page.as_uri(), tmp_path / "profile", screenshot=shot, size=f"{width},900"))
    assert p["scroll"] <= p["inner"], p  # no horizontal scrollbar
    assert p["wide"] == [], p
    assert p["headline"].startswith("at least 226 preemptions in 27 s"), p
    assert "G1 KV space 160 (fragmentation 156" in p["headline"]
    assert p["verdict_top"] < 200 and p["verdict_bottom"] <= 900, p  # on the first screen
    assert p["fixes"] >= 3 and p["gate_rows"] >= 4, p
    assert p["groups"] >= 4, p  # events grouped by gate and sub-kind
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_says_not_visible_on_a_stock_v1_log(tmp_path):
    log = tmp_path / "vllm.log"
    log.write_text(
        "INFO 11-30 05:10:00 [core.py:1] Initializing a V1 LLM engine (v0.11.1) with config: model='m'\n"
        "INFO 11-30 05:10:10 [loggers.py:1] Engine 000: Avg prompt throughput: 10.0 tokens/s, Avg generation "
        "throughput: 5.0 tokens/s, Running: 3 reqs, Waiting: 2 reqs, GPU KV cache usage: 99.0%, Prefix cache hit "
        "rate: 0.0%\n"
    )
    out = _report([str(log)], tmp_path / "r.html", "--year", "2026")
    html_text = out.read_text(encoding="utf-8")
    assert "Preemptions: not visible" in html_text and "not a count of zero" in html_text
