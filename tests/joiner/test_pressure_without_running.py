"""A pressure interval whose samples read no running count (scrapes of the KV and waiting gauges
without ``vllm:num_requests_running``) says nothing of the running count: the event's
``up_pressure`` and the ``-v`` summary's interval line never read ``running None->None``."""

from __future__ import annotations

from pathlib import Path

from preemptlog import AnalyzeOptions, analyze
from preemptlog.events.pressure import running_words
from preemptlog.render.human import summary_lines

T0 = 1796119200  # 2026-12-01 10:00:00 UTC


def _scrapes(tmp: Path) -> Path:
    for i, total in enumerate((3, 7, 10)):
        (tmp / f"metrics-{T0 + 30 * i}.prom").write_text(
            "# TYPE vllm:num_preemptions_total counter\n"
            f'vllm:num_preemptions_total{{engine="0",model_name="m"}} {total}.0\n'
            "# TYPE vllm:kv_cache_usage_perc gauge\n"
            'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.99\n'
            "# TYPE vllm:num_requests_waiting gauge\n"
            'vllm:num_requests_waiting{engine="0",model_name="m"} 4.0\n',
            encoding="utf-8",
        )
    return tmp


def test_the_running_words_are_left_out_without_a_running_count():
    assert running_words(31, 29) == "running 31->29"
    assert running_words(None, None) == ""


def test_an_interval_without_running_gauges_never_says_none(tmp_path):
    a = analyze([str(_scrapes(tmp_path))], AnalyzeOptions(tz="UTC"))
    (iv,) = a.summary()["pressure_intervals"]
    assert iv["max_running"] is None and iv["peak_kv_usage"] == 99.0
    texts = set(a.evidence.get_column("up_pressure").to_list())
    assert texts == {"10:00:00-10:01:00 UTC: peak KV 99.0%, up to 4 waiting"}
    head, rest = summary_lines(a, width=200, verbose=True)
    lines = [t.plain for t in head + rest]
    (line,) = [x for x in lines if x.strip().startswith("engine 0 2026-12-01T10:00:00")]
    assert "None" not in line and "up to 4 waiting; 7 counted event(s) in it" in line


def test_the_report_s_interval_row_has_no_arrow_between_nothing(tmp_path):
    from ..conftest import run_cli

    bundle = tmp_path / "bundle"
    bundle.mkdir()
    out = tmp_path / "report.html"
    p = run_cli("report", str(_scrapes(bundle)), "-o", str(out))
    assert p.returncode in (0, 5), p.stderr
    html = out.read_text(encoding="utf-8")
    row = html[html.index("Suspected pressure intervals") :].split("</tr>")[1]
    assert "→" not in row and "None" not in row and ">99<" in row.replace(".0<", "<"), row
