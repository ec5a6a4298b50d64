"""The summary's count line names each kind of source once: two engines' single /metrics readings are
'vLLM's counter in one /metrics reading', not that phrase twice. Hand-written scrape."""

from __future__ import annotations

from pathlib import Path

from preemptlog import AnalyzeOptions, analyze
from preemptlog.render.human import summary_lines

T0 = 1796119200  # 2026-12-01 10:00:00 UTC


def test_two_engines_single_readings_are_named_once(tmp_path: Path) -> None:
    page = "# TYPE vllm:num_preemptions_total counter\n"
    for e, v in (("0", 17), ("1", 3)):
        page += f'vllm:num_preemptions_total{{engine="{e}",model_name="m"}} {v}.0\n'
        page += f'vllm:num_preemptions_created{{engine="{e}",model_name="m"}} {T0 - 3600}.0\n'
    (tmp_path / f"metrics-{T0}.prom").write_text(page, encoding="utf-8")
    a = analyze([str(tmp_path)], AnalyzeOptions(tz="UTC"))
    for verbose, name in ((False, "vLLM's counter in one /metrics reading"), (True, "single reading")):
        head, rest = summary_lines(a, width=300, verbose=verbose)
        (line,) = [t.plain for t in head + rest if "preemption event(s)" in t.plain]
        assert line.count(name) == 1, line
