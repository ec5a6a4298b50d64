"""``vllm:request_num_preemptions`` buckets read from the scrape's own ``le`` labels (issue 37 item 5).

vLLM's default bounds are 1, 2, 3, 4, 5, 10, 20; from 0.33 ``--custom-histogram-buckets`` sets them
per deployment. Hand-written scrapes with default, custom, fractional and zero-based bounds: every
figure of the thrash finding's histogram comes from the bounds the scrape holds, none is assumed.
"""

from __future__ import annotations

from pathlib import Path

from preemptlog.analysis import AnalyzeOptions, analyze
from preemptlog.report.findings import section

OPTS = AnalyzeOptions(tz="UTC", year=2026)


def _scrapes(tmp_path: Path, bounds: list[str], first: list[float], last: list[float], name: str = "metrics.prom"):
    """Two scrapes of one engine: cumulative bucket values per bound (the last is +Inf = count)."""
    out = []
    for t, cum in (("2026-12-01T18:00:00Z", first), ("2026-12-01T18:00:30Z", last)):
        out.append(f"# scrape {t}")
        out.append("# TYPE vllm:request_num_preemptions histogram")
        for b, v in zip([*bounds, "+Inf"], cum, strict=True):
            out.append(f'vllm:request_num_preemptions_bucket{{engine="0",le="{b}",model_name="m"}} {v}')
        out.append(f'vllm:request_num_preemptions_count{{engine="0",model_name="m"}} {cum[-1]}')
        out.append(f'vllm:request_num_preemptions_sum{{engine="0",model_name="m"}} {3 * cum[-1]}')
    p = tmp_path / name
    p.write_text("\n".join(out) + "\n")
    return analyze([str(p)], OPTS)


def test_custom_bounds_give_their_own_ranges_and_no_default_figure(tmp_path):
    # --custom-histogram-buckets '{"request_num_preemptions": [2, 8, 32]}'
    a = _scrapes(tmp_path, ["2.0", "8.0", "32.0"], [10, 10, 10, 10], [50, 62, 67, 70])
    h = a.findings.thrash["histogram"]
    assert h["bounds"] == ["2", "8", "32"]
    assert h["requests_finished"] == 60
    assert h["buckets"] == {"0-2": 40, "3-8": 12, "9-32": 5, "33+": 3}
    # 1, 2, 4, 5 are not all bounds of this deployment: these figures are not in its scrape
    assert h["distribution"] is None
    assert h["requests_preempted_more_than_once"] is None and h["requests_preempted_5_or_more"] is None
    assert h["requests_preempted_more_than"] == {"times": 2, "requests": 20}
    assert h["max_preemptions_per_request_at_most"] is None  # 3 requests above the largest bound
    assert "20 requests preempted more than 2 times (vLLM's histogram)" in a.summary()["findings_headline"]
    html = section(a)
    assert "0-2: 40, 3-8: 12, 9-32: 5, 33+: 3" in html and "2, 8, 32" in html


def test_default_bounds_keep_the_distribution(tmp_path):
    bounds = ["1.0", "2.0", "3.0", "4.0", "5.0", "10.0", "20.0"]
    a = _scrapes(tmp_path, bounds, [98, 100, 100, 100, 100, 100, 100, 100], [138, 148, 152, 154, 157, 160, 160, 160])
    h = a.findings.thrash["histogram"]
    assert h["bounds"] == ["1", "2", "3", "4", "5", "10", "20"]
    assert h["distribution"] == {"0-1": 40, "2": 8, "3-5": 9, "6+": 3}
    assert h["buckets"] == {"0-1": 40, "2": 8, "3": 4, "4": 2, "5": 3, "6-10": 3, "11-20": 0, "21+": 0}
    assert h["requests_preempted_more_than_once"] == 20 and h["requests_preempted_5_or_more"] == 6
    assert h["max_preemptions_per_request_at_most"] == 10


def test_custom_bounds_that_hold_1_2_4_and_5_settle_every_figure(tmp_path):
    a = _scrapes(tmp_path, ["1", "2", "4", "5", "50"], [0, 0, 0, 0, 0, 0], [30, 36, 40, 41, 45, 45])
    h = a.findings.thrash["histogram"]
    assert h["distribution"] == {"0-1": 30, "2": 6, "3-5": 5, "6+": 4}
    assert h["requests_preempted_more_than_once"] == 15 and h["requests_preempted_5_or_more"] == 5
    assert h["max_preemptions_per_request_at_most"] == 50
    assert h["buckets"] == {"0-1": 30, "2": 6, "3-4": 4, "5": 1, "6-50": 4, "51+": 0}


def test_fractional_and_zero_based_bounds(tmp_path):
    a = _scrapes(tmp_path, ["0", "0.5", "2.5", "7"], [0, 0, 0, 0, 0], [20, 20, 26, 29, 30])
    h = a.findings.thrash["histogram"]
    # whole preemption counts: le=0.5 adds nothing after le=0; (0.5, 2.5] is 1-2; (2.5, 7] is 3-7
    assert h["buckets"] == {"0": 20, "1-2": 6, "3-7": 3, "8+": 1}
    assert h["bounds"] == ["0", "0.5", "2.5", "7"]
    assert h["distribution"] is None and h["requests_preempted_more_than"] == {"times": 2, "requests": 4}
