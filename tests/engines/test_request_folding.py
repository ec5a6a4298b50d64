"""Request lines folded into counts (issue 18): the analysis is the same as with a row per line.

A file read with runs that has at least ``PREEMPTLOG_REQUEST_FOLD_MIN`` Received lines keeps
its request rows in its spill file (vllm/requests.py ``parse_with_stats``): the counts are
made in the stream and only the rows the analysis names are read back. Every input here is
analysed twice, folded (runs and folding forced) and unfolded (both off), and everything a
consumer reads must agree: the counts, the events, verdicts, findings, summary and the JSON
output; the folded requests frame holds exactly the unfolded frame's rows for the requests it
keeps. The what-if replay is off in both runs (a folded analysis never replays: the workload
needs a row per request).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from preemptlog.analysis import Analysis, AnalyzeOptions, analyze
from preemptlog.engines.vllm.requests import RequestStats, stats_of
from preemptlog.render.jsonfmt import write_json
from preemptlog.whatif import verify

from .test_request_runs import OFF, SHAPES, _hdr

ROOT = Path(__file__).resolve().parents[2]


def _recv(s: int, rid: str, max_tokens: int = 16, ids: str | None = None, frac: str = "") -> str:
    tail = f", prompt_token_ids: [{ids}], lora_request: None." if ids is not None else ", lora_request: None."
    return (
        f"(APIServer pid=7) INFO {_hdr(s, frac)} [logger.py:43] Received request {rid}: params: "
        f"SamplingParams(n=1, max_tokens={max_tokens}){tail}"
    )


def _details(s: int, rid: str, n_ids: int) -> str:
    return (
        f"(APIServer pid=7) DEBUG {_hdr(s)} [entrypoints/logger.py:60] Request {rid} details: prompt: 'x', "
        f"prompt_token_ids: [{', '.join(str(i) for i in range(n_ids))}], prompt_embeds shape: None."
    )


def _stats(s: int, preemptions: int = 0) -> str:
    return (
        f"(APIServer pid=7) INFO {_hdr(s)} [loggers.py:208] Engine 000: Avg prompt throughput: 10.0 tokens/s, "
        f"Avg generation throughput: 2.0 tokens/s, Running: 3 reqs, Waiting: 2 reqs, Preemptions: {preemptions}, "
        "GPU KV cache usage: 99.0%, Prefix cache hit rate: 0.0%"
    )


def _internal_ids() -> list[str]:
    """vLLM 0.14+: details, Finished, Aborted and markers may name the internal id
    (<external>-<8 chars>); a KV cache line makes the never-fits finding keep long prompts."""
    out = ["(EngineCore_DP0 pid=9) INFO 05-01 09:59:58 [kv_cache_utils.py:1] GPU KV cache size: 300 tokens"]
    for s in range(30):
        for k in range(4):
            rid = f"cmpl-{s:02d}{k}-0"
            out.append(_recv(s, rid, max_tokens=8 + k))
            internal = f"{rid}-{s:02d}{k}abcd1"[: len(rid) + 9]
            out.append(_details(s, internal if k % 2 else rid, 10 * (k + 1) + (400 if s == 7 and k == 1 else 0)))
            out.append(f"(APIServer pid=7) INFO {_hdr(s)} [async_llm.py:366] Added request {internal}.")
            if k == 3 and s % 5 == 0:
                out.append(f"(APIServer pid=7) INFO {_hdr(s)} [async_llm.py:499] Finished request {internal}.")
        if s % 6 == 2:
            out.append(
                f"(EngineCore_DP0 pid=9) DEBUG {_hdr(s)} [core.py:1] Request cmpl-{s:02d}1-0-{s:02d}1abcd1 "
                "status: RequestStatus.PREEMPTED"
            )
        if s % 10 == 9:
            out.append(_stats(s, 1))
    return out


def _duplicates_and_lists() -> list[str]:
    """Reused request ids (a client's X-Request-Id), a multi-id Received line, Aborted request(s)
    lists, ids with an edge dot, untimed and fractional lines."""
    out = []
    for s in range(25):
        out.append(_recv(s, f"r{s % 7}", max_tokens=5 + s, ids="1, 2, 3"))  # ids repeat every 7 s
        out.append(_recv(s, f"u{s}", ids=", ".join("9" * (s % 4 + 1))))
        if s % 8 == 4:
            out.append(_recv(s, f"m{s}a,m{s}b", ids="4, 5"))  # a line naming two ids
            out.append(f"(APIServer pid=7) INFO {_hdr(s)} [async_llm.py:499] Aborted request(s) u{s},r{s % 7}.")
            out.append(f"(EngineCore_DP0 pid=9) DEBUG {_hdr(s)} [core.py:1] Req m{s}b PREEMPTED")
        if s % 9 == 1:
            out.append("Received request untimed-" + str(s) + ": params: SamplingParams(max_tokens=3)")
            out.append(_recv(s, f"f{s}", frac=".250"))
        if s % 10 == 9:
            out.append(_stats(s, 2))
    return out


FOLD_SHAPES = {
    **SHAPES,
    "internal-ids": _internal_ids(),
    "duplicates-and-lists": _duplicates_and_lists(),
    # Lines cut right after their verb name no request: each is one row with no id, in both passes
    # (a folded pass once failed on them with a polars ShapeError).
    "id-less": [line for s in range(6) for line in (_recv(s, f"q{s}"), _details(s, f"q{s}", 3))]
    + [
        f"(APIServer pid=7) INFO {_hdr(7)} [async_llm.py:499] Finished request ",
        f"(APIServer pid=7) INFO {_hdr(7)} [async_llm.py:499] Aborted request ",
        f"(APIServer pid=7) INFO {_hdr(8)} [logger.py:43] Received request ",
        f"(APIServer pid=7) DEBUG {_hdr(8)} [entrypoints/logger.py:60] Request  details: prompt: 'x'",
        f"(APIServer pid=7) INFO {_hdr(9)} [async_llm.py:499] Finished request q1.",
    ],
}


def _write(folder: Path, name: str, lines: list[str]) -> Path:
    p = folder / f"{name}.log"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p


def _analyse(paths: list[Path], fold: bool, monkeypatch: pytest.MonkeyPatch, runs: bool | None = None) -> Analysis:
    monkeypatch.setattr(verify, "REPLAY_MAX_REQUESTS", -1)  # replays off in both (see the module docstring)
    monkeypatch.setenv("PREEMPTLOG_REQUEST_RUNS_MIN", "0" if (fold if runs is None else runs) else OFF)
    monkeypatch.setenv("PREEMPTLOG_REQUEST_FOLD_MIN", "0" if fold else OFF)
    return analyze([str(p) for p in paths], AnalyzeOptions(tz="UTC"))


def _same_stats(a: RequestStats, b: RequestStats) -> None:
    for name in ("rows", "received", "distinct", "timed", "max_tokens_sum", "max_tokens_n", "sources"):
        assert getattr(a, name) == getattr(b, name), name
    assert_frame_equal(a.arrivals, b.arrivals)
    assert_frame_equal(a.prompts, b.prompts)


def _rows_match(folded: pl.DataFrame, full: pl.DataFrame) -> None:
    """The folded frame is the full frame's rows of the requests it names, in the same order."""
    ids = folded.get_column("request_id").unique()
    # A line with no id (cut after its verb) is kept by where it is.
    place = pl.concat_str("source", pl.lit(":"), pl.col("line").cast(pl.String))
    nameless = folded.filter(pl.col("request_id").is_null()).select(place.alias("_p")).get_column("_p")
    kept = full.filter(
        pl.col("request_id").is_in(ids.implode()) | (pl.col("request_id").is_null() & place.is_in(nameless.implode()))
    )
    assert_frame_equal(folded, kept, check_dtypes=False)


def _compare(folded: Analysis, full: Analysis) -> None:
    assert stats_of(folded).folded and not stats_of(full).folded
    _same_stats(stats_of(folded), stats_of(full))
    _same_stats(stats_of(full), RequestStats.of_frame(full.requests))
    _rows_match(folded.requests, full.requests)
    assert_frame_equal(folded.events, full.events)
    if full.verdicts is not None:
        assert folded.verdicts is not None
        assert_frame_equal(folded.verdicts, full.verdicts)
    assert folded.summary() == full.summary()
    assert _json(folded) == _json(full)


def _json(a: Analysis) -> bytes:
    """The whole -f json document (summary, findings, fixes, events) as the CLI writes it."""
    buf = io.BytesIO()
    write_json(a, buf)
    return buf.getvalue()


@pytest.mark.parametrize("name", sorted(FOLD_SHAPES))
def test_folding_changes_nothing(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path, name, FOLD_SHAPES[name])
    folded = _analyse([path], True, monkeypatch)
    full = _analyse([path], False, monkeypatch)
    assert stats_of(full).received > 0
    _compare(folded, full)
    # The folded frame holds fewer rows than the whole (it is not a copy of it).
    assert folded.requests.height <= full.requests.height


def test_folded_frame_keeps_what_the_analysis_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path, "internal", FOLD_SHAPES["internal-ids"])
    folded = _analyse([path], True, monkeypatch)
    full = _analyse([path], False, monkeypatch)
    rows = folded.requests
    assert rows.height < full.requests.height
    # every Finished row, with the external id it pairs to
    assert (
        rows.filter(pl.col("action") == "finished").height
        == full.requests.filter(pl.col("action") == "finished").height
    )
    # the received rows of the finished requests and of the preempted ones (named by internal id)
    kept = set(rows.filter(pl.col("action") == "received").get_column("request_id").to_list())
    assert {"cmpl-003-0", "cmpl-203-0"} <= kept  # finished at 0 s and 20 s (internal ids)
    assert {"cmpl-021-0", "cmpl-081-0"} <= kept  # preempted (markers at 2 s and 8 s name internal ids)
    # the prompt longer than the KV cache (300 tokens): details line of cmpl-071-0, internal id
    assert "cmpl-071-0" in kept
    big = rows.filter(pl.col("request_id") == "cmpl-071-0").get_column("prompt_tokens").to_list()
    assert big == [420]
    assert folded.findings is not None and _json(folded) == _json(full)
    never = [i for i in folded.findings.stall["never_fits"]["items"] if i.get("request_id")]
    assert [i["request_id"] for i in never] == ["cmpl-071-0"]


def test_two_files_one_folded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A folded log beside a small one (no runs there) whose details line names a request received
    in the folded log, and whose own requests reuse ids of the other server."""
    big = _write(tmp_path, "a", FOLD_SHAPES["busy"])
    small_lines = [
        _recv(3, "chatcmpl-0031", max_tokens=7, ids="1, 2"),
        _details(4, "chatcmpl-0041", 12),  # received in a.log only (cross-file, as the full parse joins)
        _recv(5, "other-1"),
        _stats(9, 0),
    ]
    small = _write(tmp_path, "b", small_lines)
    monkeypatch.setattr(verify, "REPLAY_MAX_REQUESTS", -1)
    # runs for a.log only: the minimum lies between the two files' request line counts
    monkeypatch.setenv("PREEMPTLOG_REQUEST_RUNS_MIN", "10")
    monkeypatch.setenv("PREEMPTLOG_REQUEST_FOLD_MIN", "0")
    folded = analyze([str(big), str(small)], AnalyzeOptions(tz="UTC"))
    monkeypatch.setenv("PREEMPTLOG_REQUEST_RUNS_MIN", OFF)
    monkeypatch.setenv("PREEMPTLOG_REQUEST_FOLD_MIN", OFF)
    full = analyze([str(big), str(small)], AnalyzeOptions(tz="UTC"))
    assert folded.records.get_column("rq_count").drop_nulls().len() > 0
    _compare(folded, full)
    assert stats_of(full).distinct == stats_of(full).received  # ids counted per stream


def test_fold_minimum(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path, "busy", FOLD_SHAPES["busy"])
    received = sum(1 for line in FOLD_SHAPES["busy"] if "Received request" in line)
    monkeypatch.setenv("PREEMPTLOG_REQUEST_RUNS_MIN", "0")
    monkeypatch.setenv("PREEMPTLOG_REQUEST_FOLD_MIN", str(received + 1))
    assert not stats_of(analyze([str(path)], AnalyzeOptions(tz="UTC"))).folded
    monkeypatch.setenv("PREEMPTLOG_REQUEST_FOLD_MIN", str(received))
    assert stats_of(analyze([str(path)], AnalyzeOptions(tz="UTC"))).folded
    # whatif's analysis keeps a row per request line
    a = analyze([str(path)], AnalyzeOptions(tz="UTC", keep_request_rows=True))
    assert not stats_of(a).folded and a.requests.filter(pl.col("action") == "received").height == received


def test_folded_analysis_does_not_replay(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from preemptlog.whatif.workload import NoWorkload, from_log

    path = _write(tmp_path, "busy", FOLD_SHAPES["busy"])
    monkeypatch.setenv("PREEMPTLOG_REQUEST_RUNS_MIN", "0")
    monkeypatch.setenv("PREEMPTLOG_REQUEST_FOLD_MIN", "0")
    a = analyze([str(path)], AnalyzeOptions(tz="UTC"))
    with pytest.raises(NoWorkload, match="folded"):
        from_log(a)
    fixes = [{"option": "--max-num-seqs", "suggested": 8}]
    kept, dropped = verify.verify_fixes(a, fixes)
    assert dropped == [] and kept[0]["replay"]["status"] == "skipped" and "folded" in kept[0]["replay"]["why"]


def test_folded_cli_output_is_byte_identical(tmp_path: Path) -> None:
    path = _write(tmp_path, "internal", FOLD_SHAPES["internal-ids"])
    outs = []
    for fold in (True, False):
        env = dict(
            os.environ,
            PREEMPTLOG_REQUEST_RUNS_MIN="0" if fold else OFF,
            PREEMPTLOG_REQUEST_FOLD_MIN="0" if fold else OFF,
            TZ="UTC",
        )
        env.pop("PREEMPTLOG_FORMAT", None)
        got = subprocess.run(
            [sys.executable, "-m", "preemptlog", "analyze", str(path), "-f", "ndjson", "-q"],
            env=env,
            capture_output=True,
            check=False,
            cwd=ROOT,
        )
        assert got.returncode == 0, got.stderr
        outs.append(got.stdout)
    assert outs[0] == outs[1] and outs[0].count(b"\n") > 3
    assert json.loads(outs[0].splitlines()[0])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=60), min_size=1, max_size=80), st.floats(0.0, 1.0))
def test_histogram_quantile_is_polars_quantile(values: list[int], q: float) -> None:
    """The counts' quantile ("higher") and shares equal polars' on the prompt lengths themselves."""
    s = pl.Series("prompt_tokens", values, dtype=pl.Int64)
    stats = RequestStats.of_frame(
        pl.DataFrame(
            {
                "time": pl.Series([None] * len(values), dtype=pl.Datetime("us", "UTC")),
                "stream": 0,
                "action": "received",
                "request_id": [f"r{i}" for i in range(len(values))],
                "max_tokens": s,
                "prompt_tokens": s,
                "source": "x.log",
            }
        )
    )
    assert stats.prompt_quantile_higher(q) == int(s.quantile(q, "higher"))  # type: ignore[arg-type]
    assert stats.prompt_share_le(30) == float((s <= 30).mean())  # type: ignore[arg-type]
    assert stats.max_tokens_mean() == float(s.mean())  # type: ignore[arg-type]


# Every line any shape here holds: the property below cuts, repeats and reorders them.
_POOL = sorted({line for lines in FOLD_SHAPES.values() for line in lines})


@st.composite
def _mangled_log(draw: st.DrawFn) -> list[str]:
    """A request-heavy log whose lines are cut anywhere (an id cut short or gone, a number cut),
    repeated, reordered, or joined; at least one intact Received line, so the file folds."""
    received = [line for line in _POOL if "Received request" in line]
    out = [draw(st.sampled_from(received))]
    for _ in range(draw(st.integers(1, 25))):
        line = draw(st.sampled_from(_POOL))
        how = draw(st.integers(0, 4))
        if how == 1:
            line = line[: draw(st.integers(0, len(line)))]
        elif how == 2:
            at = draw(st.integers(0, len(line)))
            line = line[:at] + draw(st.sampled_from([" ", ",", ", ", ".", "", "-0123abcd"])) + line[at:]
        elif how == 3 and out:
            line = out[-1] + line  # two lines joined (a lost line feed)
        out.insert(draw(st.integers(0, len(out))), line)
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(lines=_mangled_log())
def test_folding_changes_nothing_on_mangled_lines(lines: list[str], tmp_path_factory: pytest.TempPathFactory) -> None:
    path = _write(tmp_path_factory.mktemp("mangled"), "m", lines)
    with pytest.MonkeyPatch.context() as mp:
        folded = _analyse([path], True, mp)
        full = _analyse([path], False, mp)
    if stats_of(full).received:
        _compare(folded, full)
    else:  # every Received line was mangled away: nothing folds, both the same
        assert _json(folded) == _json(full)
