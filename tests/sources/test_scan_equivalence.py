"""The records scan is exact: the same frame, column by column, as the implementation it replaced.

``tests/support/_vllm_log_reference.py`` is a frozen copy of the scan before issue 18 (classification by
find, compact layout). Every fixture, golden file, sample line and real-log corpus file is read by
both; hand-written inputs add the line shapes the fast path must leave to the full expressions.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from preemptlog.sources import vllm_log

from ..support import _vllm_log_reference as ref

ROOT = Path(__file__).resolve().parents[2]
CORPORA = [Path("/work/shared/corpus"), Path("/work/shared/corpus2")]


def _inputs() -> list[Path]:
    files = sorted(p for p in (ROOT / "fixtures").rglob("*") if p.is_file())
    for c in CORPORA:
        if c.is_dir():
            files += sorted(p for p in c.rglob("*") if p.is_file() and p.suffix != ".md")
    return files


def _same(path: Path) -> None:
    try:
        want = ref.read(str(path), 3)
    except pl.exceptions.PolarsError as exc:
        with pytest.raises(type(exc)):
            vllm_log.read(str(path), 3)
        return
    got = vllm_log.read(str(path), 3)
    # Documented layout change (issue 18): request lines keep no level, process or compose prefix.
    hot = pl.col("kind").is_in(list(vllm_log.HOT_KINDS))
    want = vllm_log.compact(
        want.with_columns(pl.when(~hot).then(pl.col(c)).alias(c) for c in ("level", "proc", "compose"))
    )
    assert got.columns == want.columns
    for name in want.columns:
        assert_frame_equal(got.select(name), want.select(name), check_dtypes=True, categorical_as_str=True)


def _ids(paths):
    return [str(p.relative_to(ROOT) if p.is_relative_to(ROOT) else p) for p in paths]


INPUTS = _inputs()


@pytest.mark.parametrize("path", INPUTS, ids=_ids(INPUTS))
def test_file_records_equal_reference(path: Path) -> None:
    _same(path)


def test_inputs_cover_goldens_and_corpus() -> None:
    names = {p.name for p in INPUTS}
    assert any(n.endswith(".log") for n in names)
    golden = {p.name for p in (ROOT / "fixtures" / "golden").glob("*.log")}
    assert golden and golden <= names


# Hand-written shapes: every header family, prefixes, odd ids, fractions, lone CR, ANSI, JSON.
HAND = [
    "INFO 05-01 10:00:00 llm_engine.py:12] Received request 7: prompt: 'x', params: SamplingParams(max_tokens=5), "
    "prompt_token_ids: [1, 2], lora_request: None.",
    "INFO 05-01 10:00:01 [async_llm.py:12] Added request cmpl-1-0.",
    "(APIServer pid=12) INFO 05-01 10:00:02 [logger.py:43] Received request chatcmpl-ab: params: "
    "SamplingParams(n=1, max_tokens=77), lora_request: None.",
    "(APIServer pid=12) DEBUG 05-01 10:00:02 [entrypoints/logger.py:60] Request chatcmpl-ab details: prompt: "
    "'é ü', prompt_token_ids: [1, 2, 3], prompt_embeds shape: None.",
    "(APIServer pid=12) INFO 05-01 10:00:03 [async_llm.py:366] Added request chatcmpl-ab-0123abcd.",
    "(APIServer pid=12) INFO 05-01 10:00:04 [async_llm.py:499] Aborted request(s) a1,b2.",
    "(APIServer pid=12) INFO 05-01 10:00:04 [async_llm.py:499] Aborted request chatcmpl-ab-0123abcd.",
    "INFO 05-01 10:00:05,123 [async_llm.py:12] Finished request x:y.",
    "INFO 05-01 10:00:05.123456789 [x.py:1] Added request odd.id.",
    "WARNING  05-01 10:00:06 scheduler.py:1 Sequence group 3 is preempted by PreemptionMode.RECOMPUTE mode",
    "vllm-1  | INFO 05-01 10:00:07 [logger.py:1] Received request q: params: SamplingParams(max_tokens=1)",
    "2024-05-01T10:00:08.5+02:00 INFO 05-01 10:00:08 [logger.py:1] Added request z.",
    "[pod/vllm-0/vllm] 2024-05-01T10:00:09Z INFO 05-01 10:00:09 [logger.py:1] Added request k8.",
    "\x1b[32mINFO\x1b[0m 05-01 10:00:10 [loggers.py:1] Added request ansi.",
    # vLLM's coloured worker prefix (V0 multiprocessing, 0.4.3-0.11.2), on a kept and a request line
    "\x1b[1;36m(VllmWorkerProcess pid=56461)\x1b[0;0m INFO 11-29 23:58:06 [model_runner.py:1110] Loading model "
    "weights took 7.1201 GB",
    "\x1b[1;36m(APIServer pid=7)\x1b[0;0m INFO 05-01 10:00:10 [logger.py:43] Received request \x1b[1mcol\x1b[0m: "
    "params: SamplingParams(max_tokens=\x1b[1m5\x1b[0m), prompt_token_ids: [1, 2], lora_request: None.",
    "\x1b]0;title\x07\x1b]8;;http://x\x1b\\INFO 05-01 10:00:10 [a.py:1] Sequence group 9 is preempted by "
    "PreemptionMode.RECOMPUTE mode \x1b]8;;\x1b\\",
    "\x1b[ INFO \x1b]unterminated \x1b[12;?x 05-01 10:00:10 [a.py:1] Added request esc-kept.\x1b",
    "\x1b[0m{not json once stripped?} INFO 05-01 10:00:10 [a.py:1] Added request brace.",
    '\x1b[0m{"asctime": "2026-03-01 10:00:01,500", "levelname": "INFO", "name": "x", "processName": "APIServer", '
    '"process": 7, "message": "Added request j2 (JSON once stripped)."}',
    "INFO 05-01 10:00:11 [a.py:1] Added request cr1.\rINFO 05-01 10:00:12 [a.py:1] Added request cr2.",
    '{"asctime": "2026-03-01 10:00:00,500", "levelname": "INFO", "name": "x", "processName": "APIServer", '
    '"process": 7, "message": "Added request j1."}',
    "MY_PREFIX (EngineCore_DP0 pid=5, ip=10.0.0.1) INFO 05-01 10:00:13 [core.py:1] Added request pre.",
    "INFO 13-45 99:99:99 [a.py:1] Added request garbage-time.",
    "Added request no-header.",
    "Nov 30 05:10:38 host vllm[1]: Added request syslog.",
    "INFO 05-01 10:00:14 [a.py:1] Received request r: prompt: 'Added request inner', params: SamplingParams(max_tokens=3)",
    "(APIServer pid=12) INFO 05-01 10:00:15 [loggers.py:208] Engine 000: Avg prompt throughput: 1.0 tokens/s, "
    "Running: 1 reqs, Waiting: 0 reqs, Preemptions: 2, GPU KV cache usage: 1.0%",
    "INFO 05-01 10:00:16 [x.py:1] UNPREEMPTED thing",
]


def test_hand_written_shapes(tmp_path: Path) -> None:
    text = "\n".join(HAND + [line for line, _ in vllm_log.SAMPLES]) + "\n"
    p = tmp_path / "hand.log"
    p.write_text(text, encoding="utf-8")
    _same(p)
    q = tmp_path / "hand-crlf.log"
    q.write_bytes(text.replace("\n", "\r\n").encode())
    _same(q)


def _analysis_records(path: Path):
    from preemptlog.analysis import AnalyzeOptions, analyze

    return analyze([str(path)], AnalyzeOptions(tz="UTC", rules=False)).records


LOGS = [p for p in INPUTS if p.suffix in (".log", ".gz", ".zst", ".txt") or "vllm" in p.name]


@pytest.mark.parametrize("path", LOGS, ids=_ids(LOGS))
def test_requests_equal_reference(path: Path) -> None:
    from preemptlog.engines.vllm import requests
    from preemptlog.errors import PreemptlogError

    try:
        rec = _analysis_records(path)
    except PreemptlogError:
        return
    assert_frame_equal(requests.parse(rec), _kept(ref.requests_parse(rec)))


def _kept(df):
    """The reference's rows the new frame keeps: Added and details lines are folded in (issue 18).

    Issue 18, round two: ``action`` is Categorical (4 bytes a row; it compares with strings as
    before), so the reference's String column is cast for the comparison.
    """
    return df.filter(pl.col("action").is_in(["received", "finished", "aborted"])).with_columns(
        pl.col("action").cast(pl.Categorical)
    )


def test_requests_hand_written(tmp_path: Path) -> None:
    from preemptlog.engines.vllm import requests

    p = tmp_path / "hand.log"
    p.write_text("\n".join(HAND + [line for line, _ in vllm_log.SAMPLES]) + "\n", encoding="utf-8")
    rec = _analysis_records(p)
    got = requests.parse(rec)
    assert_frame_equal(got, _kept(ref.requests_parse(rec)))
    assert set(got.get_column("action")) == {"received", "finished", "aborted"}
    paired = got.filter(pl.col("internal_id") == "chatcmpl-ab-0123abcd")
    assert paired.get_column("request_id").to_list() == ["chatcmpl-ab"]
    assert paired.get_column("action").to_list() == ["aborted"]
    assert got.filter(pl.col("request_id") == "chatcmpl-ab").get_column("prompt_tokens").to_list() == [
        3,
        3,
    ]  # received, aborted
    assert got.filter(pl.col("action") == "aborted").get_column("request_id").to_list()[:2] == ["a1", "b2"]
