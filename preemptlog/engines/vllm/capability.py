"""What a vLLM log can count (moved from events/pressure.py; the engine's ``log_capability``).

V0 logs sample 1 in 50 (facts page section 2a); V1 logs before 0.11.1 have no preemption field;
V1 0.11.1-0.34.0 have a ``Preemptions: N`` field in the Python frontend's code that stock builds
never print (facts page section 3b item 7). A ``Preemptions:`` field seen in a Python-frontend line
means a build with the fix. The Rust frontend's stats line (``VLLM_USE_RUST_FRONTEND=1``, 0.33+,
stats.py) prints its count whenever it is not 0: its lines count exactly, 0 included, wherever
they are; a Python-frontend line beside them still cannot.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from ...model.config import in_force
from ...model.config import version_tuple as _version_tuple
from ..common import LogCapability
from .codefacts import reset_words
from .stats import RUST_FAMILY, V1_STATS_FAMILIES

RUST_SINCE = (0, 33, 0)  # the first release with the Rust frontend

if TYPE_CHECKING:
    from ...model.result import AnalysisView

# What makes a stock V1 log's preemptions countable: scrapes, or preemptlog's vLLM plugin
# (docs/capture.md; it is verified on vLLM 0.11-0.34).
V1_REMEDY_WITH_PLUGIN = (
    "add /metrics scrapes (vllm:num_preemptions_total; `preemptlog capture --metrics URL`) to the bundle, or record "
    "with preemptlog's vLLM plugin (PREEMPTLOG_RECORD=FILE; PREEMPTLOG_FIX_STATS=1 makes the log print "
    "'Preemptions: N')"
)
# From 0.33, also the Rust frontend: its stats line prints the count (stats.py).
RUST_REMEDY = (
    "; or run vLLM's Rust frontend (VLLM_USE_RUST_FRONTEND=1, 0.33+), whose stats line prints 'Preemptions: N'"
)


def log_capability(a: AnalysisView) -> LogCapability:
    """How far a log with vLLM's lines counts preemptions (events/pressure.py ``log_capability``
    asks the engine whose lines the log holds; the records are not empty)."""
    cfg = in_force(a.config)
    ver_row = cfg.get("vllm_version")
    version = ver_row["value"] if ver_row else None
    version_from = f"{ver_row['source']}:{ver_row['line']}" if ver_row and ver_row.get("source") else None
    eng = cfg.get("engine", {}).get("value")
    stats = a.stats
    fams = set(stats.get_column("family").to_list()) if stats.height else set()
    family = eng or ("V1" if fams and fams <= V1_STATS_FAMILIES else "V0" if fams == {"v0"} else None)
    field_lines = stats.filter(pl.col("preemptions").is_not_null()).height if stats.height else 0
    v0_lines = a.counters.get("v0", {}).get("logged_lines", 0)
    vt = _version_tuple(version) if version else None
    cap = LogCapability(has_log=True, family=family, version=version, version_from=version_from)
    vname = f"vLLM {version}" if version else "this log's vLLM (version not in the log)"
    rust = stats.filter(pl.col("family") == RUST_FAMILY) if stats.height else stats
    if rust.height:
        return _rust_capability(cap, stats, rust)
    if field_lines:
        cap.counts = "exact"
        cap.reason = (
            f"the stats lines print 'Preemptions: N' ({field_lines} line(s)): a build with the fix "
            "(vllm-project/vllm PR #38452) or a patched one; N counts a preemption when the request runs again"
        )
        return cap
    if family == "V0" or v0_lines:
        cap.family = cap.family or "V0"
        if vt is not None and vt < (0, 4, 3):
            cap.counts = "none"
            cap.reason = f"{vname} (V0) logs no preemption line before 0.4.3"
            cap.prometheus_metric = False
            cap.remedy = "use Pending/Swapped in the stats lines as indirect evidence, or upgrade"
        else:
            cap.counts = "sampled"
            cap.reason = "vLLM V0 logs only the 1st, 51st, 101st... preemption (total_num_cumulative_preemption)"
            cap.remedy = "add /metrics scrapes (vllm:num_preemptions_total) for the exact count"
        return cap
    if family != "V1":
        # Never a confident 0 from a log that cannot show one: a log that does not say which engine
        # wrote it, with no preemption line and no preemption count, cannot show a count.
        cap.counts = "none"
        cap.reason = (
            "this log shows no preemption line, no stats line with a preemption count, and no line that tells "
            "which vLLM engine (V0 or V1) wrote it"
        )
        cap.remedy = (
            "add the log from the server's start (its version and engine lines) and /metrics scrapes "
            "(vllm:num_preemptions_total; `preemptlog capture --metrics URL`)"
        )
        return cap
    no_stats = (
        " This log has no stats line at all, the only line in which a V1 build can print a preemption count."
        if not stats.height
        else ""
    )
    # V1
    if vt is not None and vt < (0, 11, 1):
        cap.counts = "none"
        cap.reason = f"{vname} (V1) has no preemption field in its stats line and logs no preemption line" + no_stats
        if vt < (0, 8, 0):
            cap.prometheus_metric = False
            cap.remedy = (
                "V1 before 0.8.0 has no preemption metric either: upgrade to >= 0.8.0 and scrape /metrics "
                "(vllm:num_preemptions_total)"
            )
        else:
            cap.remedy = (
                V1_REMEDY_WITH_PLUGIN
                if vt >= (0, 11, 0)
                else "add /metrics scrapes "
                "(vllm:num_preemptions_total; `preemptlog capture --metrics URL`) to the bundle"
            )
    elif vt is not None:
        cap.counts = "none"
        cap.reason = (
            f"{vname} (V1) logs no preemption line, and its 'Preemptions: N' stats field exists in the code but "
            "stock builds never print it (the counter is reset before it is tested; fix: vllm-project/vllm PR #38452)"
            + no_stats
        )
        cap.remedy = V1_REMEDY_WITH_PLUGIN + (RUST_REMEDY if vt >= RUST_SINCE else "")
    else:
        cap.counts = "none"
        cap.reason = (
            "this V1-engine log (version not in the log) logs no preemption line; its stats line has no "
            "'Preemptions: N' field (absent before 0.11.1, never printed by stock 0.11.1-0.34.0 Python-frontend "
            "builds: vllm-project/vllm PR #38452)" + no_stats
        )
        cap.remedy = V1_REMEDY_WITH_PLUGIN
    # A reset of the prefix cache in the log: from 0.12.0 it can preempt every running request too, which
    # the log does not count either (not only a failed KV-block allocation).
    reset = reset_words(a.config, a.frames.get("cache_resets"))
    if reset:
        cap.reason = cap.reason.rstrip(". ") + f". Also, {reset}"
        cap.details["cache_resets"] = reset
    return cap


def _rust_capability(cap: LogCapability, stats: pl.DataFrame, rust: pl.DataFrame) -> LogCapability:
    """A log with the Rust frontend's stats lines: exact where they are (a line without the field
    is 0); the Python frontend's V1 lines beside them count only if they print the field."""
    cap.family = cap.family or "V1"
    cap.counts = "exact"
    shown = rust.filter(pl.col("preemptions") > 0).height
    cap.reason = (
        f"the Rust frontend's stats lines (VLLM_USE_RUST_FRONTEND=1, {rust.height} line(s)) print 'Preemptions: p' "
        f"whenever p > 0 ({shown} line(s) do): p is every engine's preemptions in the tick of its logger before "
        "the line (10 s by default; engine 'all'), and a line without the field counts 0"
    )
    cap.details["fields"] = (
        "the Rust frontend's stats lines: 'Preemptions: p' printed whenever p > 0, so exact, 0 included"
    )
    python_v1 = stats.filter(pl.col("family") == "v1")
    if python_v1.height and python_v1.filter(pl.col("preemptions").is_not_null()).height == 0:
        t0, t1 = rust.get_column("time").min(), rust.get_column("time").max()
        cap.reason += (
            f"; the count is exact only over the Rust frontend's lines ({_hhmmss(t0)} to {_hhmmss(t1)}): the log's "
            f"{python_v1.height} Python-frontend stats line(s) never print a count (stock builds, PR #38452), so "
            "the preemptions in their intervals are not in it"
        )
        cap.details["quality"] = "lower bound"
        cap.remedy = V1_REMEDY_WITH_PLUGIN
    return cap


def _hhmmss(t: object) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S UTC") if hasattr(t, "strftime") else "?"


# A bundle without a vLLM log and without the counter (events/visibility.py, the engine's ``not_visible``).
NO_LOG_NOR_COUNTER = "no vLLM log and no /metrics counter in the bundle"


def not_visible(a: AnalysisView) -> dict[str, str]:
    """Why a bundle with neither a vLLM log nor vLLM's /metrics counter cannot count its preemptions, and
    what to add (the engine's ``not_visible``)."""
    return {
        "short": NO_LOG_NOR_COUNTER,
        "reason": NO_LOG_NOR_COUNTER,
        "remedy": "add the vLLM server log or /metrics scrapes (vllm:num_preemptions_total)",
    }
