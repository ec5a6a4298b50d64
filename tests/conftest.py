"""Shared test fixtures.

The real-log corpus lives beside the checkout (../shared/corpus); tests that
need it skip with a reason when it is absent. It is never copied here.
Set PREEMPTLOG_CORPUS to point elsewhere.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"


def _shared_dir(name: str, env: str, marker: str) -> Path | None:
    """``../shared/<name>`` beside the checkout (``$<env>`` first), when it holds ``marker``."""
    candidates = [Path(os.environ[env])] if os.environ.get(env) else []
    candidates += [ROOT.parent / "shared" / name, Path("/work/shared") / name]
    for c in candidates:
        if (c / marker).is_file():
            return c
    return None


def corpus_dir() -> Path | None:
    return _shared_dir("corpus", "PREEMPTLOG_CORPUS", "SOURCES.md")


def corpus2_dir() -> Path | None:
    """The second real-log corpus (../shared/corpus2, with truth.json); PREEMPTLOG_CORPUS2 overrides."""
    return _shared_dir("corpus2", "PREEMPTLOG_CORPUS2", "truth.json")


@pytest.fixture
def corpus() -> Path:
    c = corpus_dir()
    if c is None:
        pytest.skip("real-log corpus not found (../shared/corpus; set PREEMPTLOG_CORPUS)")
    return c


@pytest.fixture
def corpus2() -> Path:
    c = corpus2_dir()
    if c is None:
        pytest.skip("second real-log corpus not found (../shared/corpus2/truth.json; set PREEMPTLOG_CORPUS2)")
    return c


@pytest.fixture
def in_root(monkeypatch):
    """Run with the repository root as working directory (golden outputs hold relative paths)."""
    monkeypatch.chdir(ROOT)
    return ROOT


def write_lines(path: Path, lines: list[str], newline: str = "\n") -> Path:
    path.write_bytes((newline.join(lines) + newline).encode("utf-8"))
    return path


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``preemptlog ARGS`` as a real process with pipes (text, no colour, TZ=UTC), from the checkout."""
    return subprocess.run(
        [sys.executable, "-m", "preemptlog", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, NO_COLOR="1", TZ="UTC"),
        timeout=300,
        check=False,
    )


def analyze_json(*args: str) -> dict:
    """``preemptlog analyze ARGS --tz UTC -f json`` as a real process (exit 0 asserted): its summary."""
    out = run_cli("analyze", *args, "--tz", "UTC", "-f", "json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["summary"]


# The slowest tests (python -m pytest --durations=40 on two cores: 3 s to 90 s each, about
# half of the suite's time): marked `slow`, so `-m "not slow"` is the fast edit loop.
# .ci/run runs them all. Key: test file -> test function names (every parametrisation).
SLOW: dict[str, set[str]] = {
    "test_capture_vllm.py": {"*"},  # a real vLLM model run
    "test_header_property.py": {"test_noise_lines_do_not_change_events", "test_header_fields_recovered"},
    "test_fuzz_parsers.py": {
        "test_vllm_log_survives_mutations",
        "test_cli_fuzz_documented_exit_codes_and_one_line_errors",
        "test_vllm_noise_lines_change_nothing",
        "test_rotated_parts_read_as_the_whole",
    },
    "test_views.py": {
        "test_explain_is_paged_on_a_terminal",
        "test_table_taller_than_the_terminal_is_paged",
        "test_default_ndjson_and_csv_rows_are_compact_and_wide_is_full",
    },
    "test_bench.py": {"test_bench_quick_writes_its_table"},
    "test_evidence_rules.py": {
        "test_a_second_engine_does_not_change_evidence",
        "test_unrelated_lines_do_not_change_evidence",
        "test_which_lines_carry_timestamps_does_not_change_evidence",
    },
    "test_timebase.py": {
        "test_new_year_reordering",
        "test_rollover_recovered_with_year",
        "test_rollover_recovered_from_mtime",
    },
    "test_capture_command.py": {
        "test_capture_scrapes_records_a_gap_and_analyze_reads_it",
        "test_connection_refused_is_reported_one_line_each_and_exits_3",
    },
    "test_prometheus.py": {"test_property_events_total_equals_sum_of_increases"},
    "test_scrape_timing.py": {"test_v1_fields_beside_scrapes_keep_the_logs_timing"},  # 7 CLI runs, every shape
    # 100000 capped events through the CLI (-f json writes each)
    "test_capped_log_counts.py": {"test_cli_v1_stats_count_beyond_the_cap_is_the_logged_count"},
    "test_report.py": {
        "test_browser_draws_the_plots_offline",
        "test_browser_page_fetches_nothing_even_without_its_csp",
        "test_browser_first_screen_and_no_horizontal_overflow",
        "test_browser_probe_sees_requests",
    },
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        names = SLOW.get(item.path.name, set())
        if "*" in names or getattr(item, "originalname", item.name) in names:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="module", autouse=True)
def _vllm_lock(request, tmp_path_factory):
    """One lock file for the test workers of a run (``-n 2``): a module marked ``real_vllm`` holds it
    shared for its whole run, one marked ``real_vllm_alone`` (it measures wall time against a real
    server) exclusively, so no other vLLM run shares the runner's cores with it. Other modules: nothing."""
    marks = {m.name for m in request.node.iter_markers()}
    if "real_vllm" not in marks and "real_vllm_alone" not in marks:
        yield
        return
    base = tmp_path_factory.getbasetemp()
    lock = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "real-vllm.lock"
    with open(lock, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX if "real_vllm_alone" in marks else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
