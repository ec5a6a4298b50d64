"""The compiled pass (sources/fastscan, issue 36) gives the polars pass's records, row for row.

The polars pass (sources/vllm_log.py's query) is the reference; ``PREEMPTLOG_SCANNER=polars``
forces it. Every input is read by both passes and compared column by column: every fixture,
golden log, sample line and real-log corpus file (the inputs of tests/sources/test_scan_equivalence.py),
hand-written shapes, a request-heavy log read in tiny windows (run carries across windows,
folding), and a hypothesis generator of hostile lines (invalid UTF-8, NUL, CR, ANSI, 0x1F, BOM,
JSON, non-ASCII digits and spaces, wrapped and 1 MB lines). The analysis outputs of the golden
logs are byte-identical under both passes. The regex matcher itself is compared with Python's
``re`` on ASCII text (where the two engines agree). tests/sources/test_fastscan_fuzz.py runs the
coverage-guided fuzzer (differential against this same reference).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from preemptlog import AnalyzeOptions, analyze
from preemptlog.render import OutputFormat, write
from preemptlog.sources import fastscan, vllm_log
from preemptlog.sources.fastscan import regex as fregex

from ..campaigns.test_golden import OPTIONS as GOLDEN_OPTIONS
from ..conftest import ROOT
from . import test_scan_equivalence as eq

BUILT = fastscan._scan is not None
needs_build = pytest.mark.skipif(not BUILT, reason="the compiled pass is not built (no C compiler at install)")


@contextlib.contextmanager
def scanner(name: str | None, **env: str) -> Iterator[None]:
    """PREEMPTLOG_SCANNER (None: the default, compiled) and other variables, for a block."""
    keys = {"PREEMPTLOG_SCANNER": name, **env}
    old = {k: os.environ.get(k) for k in keys}
    try:
        for k, v in keys.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def same_frames(got: pl.DataFrame, want: pl.DataFrame) -> None:
    assert got.columns == want.columns
    for name in want.columns:
        assert_frame_equal(got.select(name), want.select(name), check_dtypes=True, categorical_as_str=True)


def read_both(path: Path) -> None:
    """read() by both passes: the same frame, or the same error."""
    with scanner("polars"):
        try:
            want = vllm_log.read(str(path), 3)
        except pl.exceptions.PolarsError as exc:
            with scanner(None), pytest.raises(type(exc)):
                vllm_log.read(str(path), 3)
            return
    with scanner(None):
        got = vllm_log.read(str(path), 3)
    same_frames(got, want)


def _hot_rows(hot: list, tmp: Path) -> list:
    """What the analysis reads of per-request rows: sizes, flags, rows (folded: read back with their
    runs and ranks located, as vllm/requests.py does)."""
    out = []
    for h in hot:
        rows = h.rows.collect()
        if h.folded:
            kinds = ["req_details"] if h.details else ["req_received", "req_finished", "req_aborted"]
            back = h.locate(h.of_kinds(kinds).collect()).drop("_row")
            rows = rows.with_columns(pl.col("kind").cast(pl.String))
            back = back.with_columns(pl.col("kind").cast(pl.String))
            out.append((h.details, h.height, h.received, h.folded, rows, back, h.runs_received))
        else:
            out.append((h.details, h.height, h.received, h.folded, rows, None, None))
    return out


def split_both(path: Path, tmp: Path, runs: bool = True, fold: bool = True) -> None:
    """read_split() by both passes: the same records and per-request rows."""
    results = []
    for name in ("polars", None):
        spill = tmp / f"spill-{name}-{runs}-{fold}"
        spill.mkdir(exist_ok=True)
        with scanner(name):
            rec, hot = vllm_log.read_split(str(path), 2, runs=runs, spill_dir=str(spill) if fold else None)
            results.append((rec, _hot_rows(hot, tmp)))
        shutil.rmtree(spill, ignore_errors=True)
    (want, want_hot), (got, got_hot) = results
    same_frames(got, want)
    assert len(got_hot) == len(want_hot)
    for g, w in zip(got_hot, want_hot):
        assert g[:4] == w[:4]
        assert_frame_equal(g[4], w[4], categorical_as_str=True)
        if w[5] is not None:
            assert_frame_equal(g[5], w[5], categorical_as_str=True)
            assert (None if g[6] is None else g[6].to_list()) == (None if w[6] is None else w[6].to_list())


# ---------------------------------------------------------------------------- built, and chosen


def _can_compile() -> bool:
    """A C compiler and the Python headers: what setup.py needs to build the compiled pass."""
    import sysconfig

    include = sysconfig.get_paths().get("include", "")
    return bool(shutil.which("cc") or shutil.which("gcc")) and (Path(include) / "Python.h").is_file()


def test_built_where_a_compiler_is() -> None:
    """Where the tree can build the compiled pass (CI, the README's editable install), it is built.

    Otherwise every compiled-pass test here would skip silently: a non-editable install builds the
    extension into site-packages while the tests import the package from this tree.
    """
    if os.environ.get("CI") or _can_compile():
        assert BUILT, (
            "the compiled pass is not built beside its sources: install with `pip install -e '.[dev]'` "
            "(the README's test command) or run `python setup.py build_ext --inplace`"
        )
    else:
        assert fastscan.status().startswith("polars pass")


@needs_build
def test_status_names_the_pass(tmp_path: Path) -> None:
    with scanner(None):
        assert fastscan.enabled()
        assert fastscan.status(vllm_log.fast_spec()).startswith("compiled pass")
    with scanner("polars"):
        assert not fastscan.enabled()
        assert fastscan.status().startswith("polars pass")
        p = tmp_path / "a.log"
        p.write_text("INFO 05-01 10:00:00 [a.py:1] Added request x.\n")
        assert vllm_log.compiled(str(p), 0) is None


@needs_build
def test_spec_compiles() -> None:
    """Every regex and marker of the polars pass is one the compiled pass runs (else it stays off)."""
    spec = vllm_log.fast_spec()
    assert fastscan._config(spec) is not None, fastscan._REFUSED.get(spec)


@needs_build
def test_compressed_and_repaired_files_stay_with_polars(tmp_path: Path) -> None:
    import gzip

    line = "INFO 05-01 10:00:00 [a.py:1] Added request x.\n"
    gz = tmp_path / "a.log.gz"
    gz.write_bytes(gzip.compress(line.encode()))
    assert not fastscan.eligible(str(gz))
    quoted = tmp_path / "q.md"
    quoted.write_text("".join("> " + line for _ in range(20)))
    assert not fastscan.eligible(str(quoted))
    plain = tmp_path / "p.log"
    plain.write_text(line * 3)
    assert fastscan.eligible(str(plain))


# ---------------------------------------------------------------------------- every input


@needs_build
@pytest.mark.parametrize("path", eq.INPUTS, ids=eq._ids(eq.INPUTS))
def test_file_records_same_in_both_passes(path: Path) -> None:
    read_both(path)


HAND_TEXT = "\n".join(eq.HAND + [line for line, _ in vllm_log.SAMPLES]) + "\n"


@needs_build
def test_hand_written_shapes(tmp_path: Path) -> None:
    p = tmp_path / "hand.log"
    p.write_text(HAND_TEXT, encoding="utf-8")
    read_both(p)
    q = tmp_path / "hand-crlf.log"
    q.write_bytes(HAND_TEXT.replace("\n", "\r\n").encode())
    read_both(q)
    b = tmp_path / "hand-bom.log"
    b.write_bytes(b"\xef\xbb\xbf" + HAND_TEXT.encode())
    read_both(b)


# The head cache (scan_core.c head_results) keys a line's five head results by the bytes the head
# programs read: a search that runs to the end of the head without a candidate (memchr/memmem or the
# first-byte scan) read every byte, and a literal cut by the end read its bytes too. Lines that agree
# up to where an earlier line's search gave up must not reuse its results (the fuzzer's case: a
# level spelled "-NFO", then "INFO"; a process prefix, a date or a level later in the head).
HEAD_CACHE_PAIRS = [
    (
        "2024-05-01T10:00:08.5+02:00 -NFO 05-01 10:00:08 [logger.py:1] Added request z.",
        "2024-05-01T10:00:08.5+02:00 INFO 05-01 10:00:08 [logger.py:1] Added request z.",
    ),
    (  # lines of one length: the length does not tell them apart
        "INFO 05-01 10:00:00 [x.py:1] Added request a. " + "x" * len("(EngineCore_DP1 pid=5)"),
        "INFO 05-01 10:00:01 [x.py:1] Added request b. (EngineCore_DP1 pid=5)",
    ),
    (
        "INFO 05-01 10:00:00 [x.py:1] Added request a.",
        "INFO 05-01 10:00:01 [x.py:1] message (EngineCore_DP1 pid=5) Added request b.",
    ),
    (
        "vllm-1  | something 05-01 10:00:00 [x.py:1] Added request a.",
        "vllm-1  | something INFO 05-01 10:00:00 [x.py:1] Added request a.",
    ),
    (
        "[pod/x] Added request a.",
        "[pod/x] Added request a. (VllmWorker pid=9) INFO 05-01 10:00:00 [x.py:1]",
    ),
    ("INFO 05-01 10:00:00 [x.py:1] Added request a", "INFO 05-01 10:00:00 [x.py:1] Added request a."),
]


@needs_build
@pytest.mark.parametrize("first,second", HEAD_CACHE_PAIRS)
def test_head_cache_never_reuses_a_result_past_the_bytes_read(first: str, second: str, tmp_path: Path) -> None:
    for text in (f"{first}\n{second}\n", f"{second}\n{first}\n", f"{first}\n{second}\n{first}\n{second}\n"):
        p = tmp_path / "pair.log"
        p.write_text(text, encoding="utf-8")
        read_both(p)


def _reqlog(tmp: Path, size: str = "600K") -> Path:
    out = tmp / "req.log"
    subprocess.run(
        [sys.executable, str(ROOT / "bench" / "reqlog.py"), str(out), "--size", size, "--preemptions-per-gb", "20000"],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return out


SPLIT_LOGS = sorted((ROOT / "fixtures" / "golden").glob("*.log"))


@needs_build
@pytest.mark.parametrize("path", SPLIT_LOGS, ids=[p.name for p in SPLIT_LOGS])
def test_runs_same_in_both_passes(path: Path, tmp_path: Path) -> None:
    """Request lines as runs (read_split), on every golden log, with runs and folding on at any count."""
    with scanner(None, PREEMPTLOG_REQUEST_RUNS_MIN="0", PREEMPTLOG_REQUEST_FOLD_MIN="0"):
        for runs in (True, False):
            for fold in (True, False):
                split_both(path, tmp_path, runs, fold)


@needs_build
@pytest.mark.parametrize("window", [4096, 65536, 1 << 26])
def test_runs_across_windows(window: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A request-heavy log (bench/reqlog.py) read in windows of every size: runs, ranks and counts
    carried across windows; folded (spill file) and in memory; a threshold crossed mid-file."""
    monkeypatch.setattr(fastscan, "WINDOW_BYTES", window)
    log = _reqlog(tmp_path)
    read_both(log)
    for runs_min, fold_min in (("0", "0"), ("5000", "2000"), ("100000", "20000")):
        with scanner(None, PREEMPTLOG_REQUEST_RUNS_MIN=runs_min, PREEMPTLOG_REQUEST_FOLD_MIN=fold_min):
            split_both(log, tmp_path, True, True)
            split_both(log, tmp_path, True, False)


# ---------------------------------------------------------------------------- hostile lines

# Lines the generator starts from: every sample and hand-written shape, the request lines of a
# busy V1 server, stats, JSON, syslog and RFC 3339 prefixes.
SEEDS = (
    eq.HAND
    + [line for line, _ in vllm_log.SAMPLES]
    + [
        "(APIServer pid=9805) DEBUG 11-20 08:00:00 [entrypoints/logger.py:60] Request chatcmpl-1d2 details: prompt: "
        "'hi, there', prompt_token_ids: [1, 2, 3], prompt_embeds shape: None.",
        "(APIServer pid=9805) INFO 11-20 08:00:00 [entrypoints/logger.py:43] Received request chatcmpl-8315: params: "
        "SamplingParams(n=1, temperature=0.0, max_tokens=256, min_tokens=0), lora_request: None.",
        "(EngineCore_DP1 pid=77) INFO 11-20 08:00:10 [loggers.py:1] Engine 001: Avg prompt throughput: 1.0 tokens/s, "
        "Running: 3 reqs, Waiting: 1 reqs, GPU KV cache usage: 99.0%, Prefix cache hit rate: 1.0%",
        "[2025-08-01 09:58:40 TP0] Decode batch. #running-req: 8, #token: 1000, token usage: 0.98, #queue-req: 2, ",
        "Nov 30 05:10:38 gpu-host vllm[1234]: Sequence group 5 is preempted by PreemptionMode.RECOMPUTE mode",
        "2024/05/01 10:00:00.123 INFO Added request slash-date.",
        'INFO:     127.0.0.1:55352 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
    ]
)
NASTY = [
    b"\x00",
    b"\x00\x00\x00",
    b"\r",
    b"\x1b[32m",
    b"\x1b[0m",
    b"\x1b]8;;http://x\x07",
    b"\x1b[1;36m",
    b"\x1b[0;0m",
    b"\x1b[?25h",
    b"\x1b",
    b"\x1b[",
    b"\x1b[12;",
    b"\x1b]",
    b"\x1b]0;t\x1b\\",
    b"\x1b]0;t\x1bX",
    b"\x1b]0;\xe4\xbd\xa0\x07",
    b"\x1f",
    b"\x1f\x1f",
    b"\xff",
    b"\xc3",
    b"\xe4\xbd",
    b"\xed\xa0\x80",
    b"\xef\xbb\xbf",
    "\u00a0".encode(),
    "\u2003".encode(),
    "\u0663".encode(),  # ARABIC-INDIC DIGIT THREE: \d in the regex crate
    "\uff11".encode(),  # FULLWIDTH DIGIT ONE
    "é".encode(),
    "你好".encode(),
    b"{",
    b'{"asctime": "2026-03-01 10:00:00,500", "levelname": "INFO", "message": "',
    b"]",
    b", prompt_token_ids: [",
    b"], lora_request: ",
    b"max_tokens=",
    b"max_tokens=99999999999999999999999",
    b"(APIServer pid=1) ",
    b"vllm-1  | ",
    b"2024-05-01T10:00:08.5+02:00 ",
    b"PREEMPTED",
    b"Received request ",
    b"Added request ",
    b" details: prompt: ",
    b"Aborted request(s) ",
    b"INFO ",
    b"05-01 10:00:00 ",
    b"[x.py:1] ",
    b",",
    b":",
    b".",
    b" ",
    b"\t",
    b"\n",
]


@st.composite
def hostile_line(draw: st.DrawFn) -> bytes:
    base = bytearray(draw(st.sampled_from(SEEDS)).encode("utf-8"))
    for _ in range(draw(st.integers(0, 4))):
        what = draw(st.integers(0, 5))
        at = draw(st.integers(0, len(base)))
        if what <= 2:
            base[at:at] = draw(st.sampled_from(NASTY))
        elif what == 3 and base:
            end = draw(st.integers(at, len(base)))
            del base[at:end]
        elif what == 4:  # wrapped: cut in two lines
            base[at:at] = b"\n"
        else:
            base[at:at] = draw(st.binary(max_size=6))
    return bytes(base)


@st.composite
def hostile_file(draw: st.DrawFn) -> bytes:
    lines = draw(st.lists(hostile_line(), min_size=1, max_size=12))
    if draw(st.integers(0, 30)) == 0:  # a 1 MB line
        lines.insert(draw(st.integers(0, len(lines))), draw(st.sampled_from(SEEDS)).encode() + b"x, 1" * (1 << 18))
    end = draw(st.sampled_from([b"\n", b"\r\n", b""]))
    return b"\n".join(lines) + end


HOSTILE = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


@needs_build
@HOSTILE
@given(data=hostile_file())
def test_hostile_lines_same_in_both_passes(data: bytes, tmp_path_factory: pytest.TempPathFactory) -> None:
    tmp = tmp_path_factory.mktemp("hostile")
    p = tmp / "h.log"
    p.write_bytes(data)
    read_both(p)
    with scanner(None, PREEMPTLOG_REQUEST_RUNS_MIN="0", PREEMPTLOG_REQUEST_FOLD_MIN="0"):
        split_both(p, tmp, True, True)


@needs_build
@pytest.mark.slow
@settings(max_examples=600, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=hostile_file())
def test_hostile_lines_campaign(data: bytes, tmp_path_factory: pytest.TempPathFactory) -> None:
    tmp = tmp_path_factory.mktemp("hostile")
    p = tmp / "h.log"
    p.write_bytes(data)
    read_both(p)
    with scanner(None, PREEMPTLOG_REQUEST_RUNS_MIN="0", PREEMPTLOG_REQUEST_FOLD_MIN="0"):
        split_both(p, tmp, True, True)
        split_both(p, tmp, True, False)


# ---------------------------------------------------------------------------- the marker search

MARKERS = vllm_log.fast_spec().literals


@st.composite
def marker_line(draw: st.DrawFn) -> str:
    """A line dense in markers and their pieces: whole markers, a marker's head or tail (so one
    marker overlaps the next, or a near miss sits before the real one), at every offset from the
    line's start and end (the compiled pass probes every few bytes: scan_core.c find_marker)."""
    out = draw(st.text(alphabet="x ", max_size=9))
    for _ in range(draw(st.integers(1, 4))):
        m = draw(st.sampled_from(MARKERS))
        cut = draw(st.integers(0, 3))
        if cut == 1:
            m = m[: draw(st.integers(1, len(m) - 1))]
        elif cut == 2:
            m = m[draw(st.integers(1, len(m) - 1)) :]
        out += m + draw(st.text(alphabet="x ", max_size=3))
    return out


def leftmost_marker(line: str) -> str | None:
    """The polars pass's alternation, by hand: the leftmost start, then the earliest in the list."""
    found = [(line.find(m), i) for i, m in enumerate(MARKERS) if m in line]
    return MARKERS[min(found)[1]] if found else None


@needs_build
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(lines=st.lists(marker_line(), min_size=1, max_size=8))
def test_marker_search_is_the_leftmost_first_alternation(
    lines: list[str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    p = tmp_path_factory.mktemp("markers") / "m.log"
    p.write_text("\n".join(lines) + "\n")
    with scanner(None):
        fast = vllm_log.compiled(str(p), 3)
        assert fast is not None
        got = fast.frame()
    want = {n + 1: leftmost_marker(line) for n, line in enumerate(lines)}
    assert dict(
        zip(got.get_column("n").to_list(), got.get_column("marker").cast(pl.String).to_list(), strict=True)
    ) == {n: m for n, m in want.items() if m is not None}
    read_both(p)


@needs_build
@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(
    markers=st.lists(st.text(alphabet="ab", min_size=4, max_size=12), min_size=1, max_size=6, unique=True),
    lines=st.lists(st.text(alphabet="abx", max_size=40), min_size=1, max_size=10),
)
@example(markers=["abab", "ababa"], lines=["ababa", "xababa"])  # one the other's prefix: the earlier in the list
@example(markers=["abcdefghi", "defghijkl"], lines=["_abcdefghijkl"])  # both met by one probe: the leftmost
def test_marker_search_on_overlapping_markers(
    markers: list[str], lines: list[str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Markers are data: any list of them (here overlapping, one the prefix of another, sharing
    4-grams at several offsets) is found as the leftmost-first alternation finds it."""
    spec = dataclasses.replace(vllm_log.fast_spec(), literals=tuple(markers), hot=frozenset())
    p = tmp_path_factory.mktemp("markers") / "m.log"
    p.write_text("\n".join(lines) + "\n")
    fast = fastscan.open_scan(str(p), 3, spec, lambda lf: lf)
    assert fast is not None
    got = fast.frame()
    found = {}
    for n, line in enumerate(lines, 1):
        hits = [(line.find(m), i) for i, m in enumerate(markers) if m in line]
        if hits:
            found[n] = markers[min(hits)[1]]
    assert (
        dict(zip(got.get_column("n").to_list(), got.get_column("marker").cast(pl.String).to_list(), strict=True))
        == found
    )


# ---------------------------------------------------------------------------- the matcher alone


ROLES = {role: pattern for role, pattern, _ in vllm_log.fast_spec().regexes}
ASCII_TEXT = st.text(
    alphabet=st.sampled_from(list("INFOWARNDEBUGC RTZ()[]|:.,-+_/=pidxyz0123456789\t'{}\"")), max_size=60
)


@st.composite
def near_match(draw: st.DrawFn) -> str:
    """ASCII text built around the seeds (so the regexes match often) with random edits."""
    base = list(draw(st.sampled_from([s for s in SEEDS if s.isascii()])))
    for _ in range(draw(st.integers(0, 5))):
        at = draw(st.integers(0, len(base)))
        if draw(st.booleans()) and base:
            del base[at : at + draw(st.integers(1, 4))]
        else:
            base[at:at] = list(draw(ASCII_TEXT))
    return "".join(base)[:600]


@needs_build
@pytest.mark.parametrize("role", list(ROLES))
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(text=st.one_of(ASCII_TEXT, near_match()))
def test_matcher_agrees_with_python_re(role: str, text: str) -> None:
    """On ASCII text without line feeds the regex crate, Python's re and the compiled matcher find the
    same leftmost-first match and groups."""
    text = text.replace("\n", " ")
    pattern = ROLES[role]
    spec = vllm_log.fast_spec()
    cfg = fastscan._config(spec)
    which = fastscan.ROLES.index(role)
    status, slots = fastscan._scan.search(cfg, which, text.encode())
    m = re.search(pattern, text)
    if m is None:
        assert status == 0
        return
    assert status == 1
    for g in range(1, (m.re.groups or 0) + 1):
        a, b = m.span(g)
        assert (slots[2 * g], slots[2 * g + 1]) == ((a, b) if a >= 0 else (-1, -1)), (g, text)
    assert slots[0] == m.start()


@st.composite
def factor_case(draw: st.DrawFn) -> tuple[str, str]:
    """A pattern shaped like the request id's (an alternation of literals that share a run of bytes at
    different places, then an optional piece, a space and a class run) and a text of its pieces: the
    compiled matcher looks for the shared run first (scan_core.c find_factor) and must still find the
    leftmost-first match."""
    mid = draw(st.text(alphabet="abq", min_size=3, max_size=5))
    heads = draw(st.lists(st.text(alphabet="abcq", max_size=6), min_size=1, max_size=4, unique=True))
    tails = draw(st.lists(st.text(alphabet="abcq", max_size=3), min_size=len(heads), max_size=len(heads)))
    alts = [re.escape(h + mid + t) for h, t in zip(heads, tails, strict=True)]
    split = draw(st.integers(0, len(alts)))
    inner = "|".join(alts[:split]) or None
    rest = alts[split:]
    pattern = "(?:" + "|".join(([f"(?:{inner})"] if inner else []) + rest) + ")(?:\\(s\\))? ([^\\s:,]+)"
    pieces = [*heads, mid, *tails, *(h + mid + t for h, t in zip(heads, tails, strict=True)), "(s)", " ", "x", ",", "é"]
    text = "".join(draw(st.lists(st.sampled_from(pieces), max_size=14)))
    return pattern, text


@needs_build
@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(case=factor_case())
@example(case=("(?:baaa|aaa)(?:\\(s\\))? ([^\\s:,]+)", "\u00e9aaa x"))  # the factor's place less fmax: inside é
def test_matcher_with_a_required_factor_agrees_with_python_re(case: tuple[str, str]) -> None:
    pattern, text = case
    spec = vllm_log.fast_spec()
    regexes = tuple((r, pattern if r == "req_id" else p, g) for r, p, g in spec.regexes)
    cfg = fastscan._config(dataclasses.replace(spec, regexes=regexes))
    assert cfg is not None, fastscan._REFUSED
    status, slots = fastscan._scan.search(cfg, fastscan.ROLES.index("req_id"), text.encode())
    m = re.search(pattern, text)
    if m is None:
        assert status == 0, (pattern, text)
        return
    assert status == 1, (pattern, text)
    start = len(text[: m.start()].encode())
    assert slots[0] == start, (pattern, text)
    assert tuple(slots[2:4]) == (len(text[: m.start(1)].encode()), len(text[: m.end(1)].encode())), (pattern, text)


@needs_build
def test_matcher_is_unsure_of_unicode_digits() -> None:
    """A non-ASCII character reaching \\d is left to the polars pass (the regex crate's \\d is Unicode)."""
    cfg = fastscan._config(vllm_log.fast_spec())
    status, _ = fastscan._scan.search(cfg, fastscan.ROLES.index("max_tokens"), "max_tokens=1\u0663".encode())
    assert status == -1
    status, slots = fastscan._scan.search(cfg, fastscan.ROLES.index("req_id"), "Added request a\u00a0b".encode())
    assert status == 1 and slots[3] - slots[2] == 1  # U+00A0 is \s: the id stops there


def test_compiler_refuses_what_it_cannot_run() -> None:
    for bad in (r"(?=x)", r"\bx", r"(a)\1", r"(?i)x", r"(?:a*)*"):
        with pytest.raises(fregex.Unsupported):
            fregex.compile_regex(bad)


# ---------------------------------------------------------------------------- analysis outputs

GOLDEN = ROOT / "fixtures" / "golden"


@needs_build
@pytest.mark.parametrize("path", SPLIT_LOGS, ids=[p.name for p in SPLIT_LOGS])
def test_analysis_outputs_byte_identical(path: Path, in_root: None) -> None:
    outs = []
    for name in ("polars", None):
        with scanner(name):
            result = analyze([str(path)], AnalyzeOptions(tz="UTC", **GOLDEN_OPTIONS.get(path.name, {})))
        buf = io.BytesIO()
        write(result, OutputFormat.ndjson, buf)
        summary = result.summary()
        summary.pop("inputs", None)
        outs.append((buf.getvalue(), json.dumps(summary, sort_keys=True, default=str)))
    assert outs[0] == outs[1]


# ---------------------------------------------------------------------------- ANSI at the head's end


# The header regexes read the head cut at HEAD_CHARS characters and then ANSI-stripped (the polars
# pass's order): a sequence cut by the end of the head stays in it, whole or in part, while the
# text (the whole line, stripped) loses it. Characters before it may be multi-byte.
def _ansi_at_cut(pad: str, seq: str, shift: int) -> str:
    head = "\x1b[1;36m(VllmWorkerProcess pid=1)\x1b[0;0m INFO 05-01 10:00:10 [a.py:1] "
    fill = vllm_log.HEAD_CHARS - len(head) - shift
    return head + (pad * fill)[:fill] + seq + " Sequence group 9 is preempted by PreemptionMode.RECOMPUTE mode"


@needs_build
@pytest.mark.parametrize("pad", ["x", "é", "你"])
@pytest.mark.parametrize("seq", ["\x1b[0;0m", "\x1b]8;;http://x\x07", "\x1b]0;t\x1b\\", "\x1b"])
def test_ansi_cut_by_the_head_end_same_in_both_passes(
    pad: str, seq: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = [_ansi_at_cut(pad, seq, shift) for shift in range(0, len(seq) + 2)]
    p = tmp_path / "cut.log"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    slow: list[int] = []
    real = fastscan.Scan._slow

    def counted(self: fastscan.Scan, buf: memoryview, rows: list) -> pl.DataFrame:
        slow.append(len(rows))
        return real(self, buf, rows)

    monkeypatch.setattr(fastscan.Scan, "_slow", counted)
    read_both(p)
    with scanner(None):
        assert vllm_log.read(str(p), 3).height == len(lines)
    assert sum(slow) == 0  # coloured lines are the compiled pass's own, not handed to polars


# ---------------------------------------------------------------------------- found by the campaign

_RECEIVED = (
    b"INFO 05-01 10:00:00 llm_engine.py:12] Received request 7: prompt: 'x', params: "
    b"SamplingParams(max_tokens=5), prompt_token_ids: [1, 2], lora_request: None."
)
_STATS = (
    b"(APIServer pid=12) INFO 05-01 10:00:15 [loggers.py:208] Engine 000: Avg prompt throughput: 1.0 tokens/s, "
    b"Running: 1 reqs, Waiting: 0 reqs, Preemptions: 2, GPU KV cache usage: 1.0%"
)


@needs_build
@pytest.mark.parametrize(
    "data",
    [
        b"Received request \r" + _STATS + b"\n",
        _RECEIVED + b"\nReceived request \r" + _STATS + b"\n",
        b"hello\nReceived request \r" + _STATS + b"\r\n",
    ],
    ids=["alone", "after-a-request", "crlf"],
)
@pytest.mark.parametrize("fold", [True, False])
def test_a_request_row_and_a_record_of_one_line_keep_their_segment_order(
    data: bytes, fold: bool, tmp_path: Path
) -> None:
    """A line cut by an inner CR into a request row (its first segment) and a stats record (its second):
    the compiled pass's runs merged the request rows back by line number alone, so the stats record came
    first ('seg' 1, 0 against the polars pass's 0, 1; hypothesis's campaign found it)."""
    p = tmp_path / "h.log"
    p.write_bytes(data)
    with scanner(None, PREEMPTLOG_REQUEST_RUNS_MIN="0", PREEMPTLOG_REQUEST_FOLD_MIN="0"):
        split_both(p, tmp_path, True, fold)
