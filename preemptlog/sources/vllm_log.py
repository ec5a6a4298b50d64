"""vLLM server logs (0.4 to 0.34), in every wrapping the field meets.

One lazy polars query per file: a literal pre-filter on the raw line, then
regexes only on the survivors, and fields extracted inside the query so the
raw line column is never collected. Output: a *records* frame, one row per
logical line that carries something preemptlog uses.

Line shapes recognised in front of the message (any combination):

- vLLM's header, every version: ``LEVEL MM-DD HH:MM:SS file.py:N]`` (0.4-0.7),
  ``[file.py:N]`` (0.8+), ``[relative/path.py:N]`` (0.10.2+ at DEBUG);
- ``VLLM_LOGGING_PREFIX`` text and the ``(Name pid=N[, ip=A])`` process prefix,
  before the level (stream prefix, 0.4.3-0.30) or inside the format (0.31+);
- ANSI colour codes (0.4.3-0.11.2 write them into files);
- docker compose ``service-1  | `` and ``docker logs -t`` / ``kubectl logs
  --timestamps`` RFC 3339 prefixes (these carry year, zone, sub-second; their time wins over
  vLLM's year-less header), also after kubectl ``--prefix``'s ``[pod/NAME/CONTAINER] ``;
- containerd's / CRI-O's pod log files (``TIME stdout F text``: the time as above; the partial
  ``P`` records of a line over 16 KiB are joined first, per stream, by inputs/reflow.py);
- journalctl ``-o short-iso`` / ``short-iso-precise`` (``2026-12-01T10:00:00+0000 host vllm[1234]:``,
  the time as above), ``-o short`` / ``short-precise`` (``Dec 01 10:00:00 host vllm[1234]:``, no
  year: the fallback below), ``-o cat`` (bare lines);
- a traceback's exception line behind any of these prefixes (:data:`WRAPPER_PREFIX_RE`, read by
  engines/vllm/trouble.py);
- an RFC 5424 syslog relay's ``<PRI>1 TIME HOST APP PROCID MSGID SD `` (read by inputs/reflow.py as
  ``<TIME> <text>`` lines: its TIME read as above; the hot path's regexes stay as they are);
- BSD (RFC 3164) syslog (``Dec  6 23:11:05 host vllm[1234]:``: the fallback below; rsyslog's
  RSYSLOG_FileFormat ``2026-12-06T23:11:05.123456+00:00 host vllm[1234]:``: the RFC 3339 prefix above),
  its ``<PRI>`` (a forwarder's) removed by inputs/reflow.py;
- docker's json-file records and ``journalctl -o json`` records: read by inputs/reflow.py as
  ``<the record's time> <its text>`` lines (the RFC 3339 prefix above), cut lines joined;
- ISO ``YYYY-MM-DD HH:MM:SS[.,]fff`` prefixes of custom logging configs;
- vLLM 0.32+ JSON lines (``asctime levelname name processName process message``);
- the Rust ``tracing`` subscriber's default prefix (vLLM's Rust frontend, 0.33+:
  ``2026-12-01T10:00:10.123456Z  INFO vllm_llm::log_stats: ...``; its full date is read as the
  RFC 3339 prefix above; :data:`TRACING_LINE_RE` sniffs such a log) and its JSON lines
  (``timestamp level fields.message target``: :data:`TRACING_JSON_RE`);
- other leading date shapes go to python-dateutil (see timebase.py).

Records schema (dtypes declared in :data:`RECORD_SCHEMA`; tests/sources/test_record_schema.py checks
that every column of the records frame has its line here). One line per column: name, dtype,
meaning. Header fields are the raw text of the line's time, read into ``time`` by timebase.py.

    file_id         UInt16   the input file (inputs.InputFile.file_id)
    n               UInt32   line number in the file, 1-based
    seg             UInt32   segment of the line split on a lone CR (tqdm/progress redraws), 0-based
    kind            String   record kind: the marker's kind (MARKERS, EXTRA_MARKERS, families)
    level           String   log level of the vLLM header (DEBUG..CRITICAL, JSON levelname)
    proc            String   process prefix "Name pid=N[, ip=A]" (null on request lines)
    compose         String   docker compose service prefix "svc-1  | " (null on request lines)
    mo              Int8     month of the vLLM header time (MM-DD HH:MM:SS, no year)
    dd              Int8     day of the vLLM header time
    hh              Int8     hour of the vLLM header time
    mi              Int8     minute of the vLLM header time
    ss              Int8     second of the vLLM header time
    hfrac           String   header fraction of a second, digits after "." or "," (0.10+ %f formats)
    fdate           String   full date YYYY-MM-DD of a leading RFC 3339/ISO prefix (docker -t, kubectl)
    ftime           String   HH:MM:SS of that full prefix
    ffrac           String   fraction of a second of that full prefix, digits only
    fzone           String   zone of that full prefix ("Z", "+02:00", "+0200"); null: local time
    fb              String   fallback: another leading date shape, parsed by python-dateutil
    text            String   the message text (null on hot request lines: their fields are extracted)
    req_id          String   request id(s) of a request line (comma-joined for "request(s)")
    max_tokens      Int64    max_tokens=N of a request line
    prompt_tokens   Int64    length of prompt_token_ids of a request-details line

Added after the read (timebase.resolve, frames.with_source, the pipeline):

    stream          Int32    rotation group of the file (inputs.Bundle.streams)
    seq             UInt32   order in the stream (file order, n, seg): sort by (time, stream, seq)
    time            Datetime the record's UTC time on the common clock (--offset applied)
    time_precision  String   how exact ``time`` is ("1s", "ms", "us", "inherited", "unknown", ...)
    source          String   the file's display name (file:line provenance)
    rq_count        UInt32   a run of request lines (see "Request lines as runs" below): its lines; null otherwise
    n_last          UInt32   the run's last line number
    rq_run          UInt32   the run's number in its file
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import polars as pl

from ..inputs import reflow
from ..inputs.textio import split_cr
from . import fastscan
from .registry import SourceKind, families, register, register_samples

KIND = "vllm-log"

# (literal marker, record kind). Classification takes the *leftmost* marker
# in the line, ties to the earlier entry, so a prompt that quotes "PREEMPTED"
# inside a "Received request" line stays a request line.
MARKERS: list[tuple[str, str]] = [
    ("is preempted by", "v0_preempt"),
    ("PREEMPTED", "marker"),
    ("Avg prompt throughput", "stats"),
    ("reqs, Waiting: ", "stats"),  # 0.7.0 V1: "Running: %d reqs, Waiting: %d reqs "
    ("Prefix cache hit rate: GPU:", "stats_prefix"),
    ("Iteration(", "iteration"),
    ("Speculative metrics:", "spec"),
    ("SpecDecoding metrics:", "spec"),
    ("Received request ", "req_received"),
    ("Added request ", "req_added"),
    ("Finished request ", "req_finished"),
    (" details: prompt: ", "req_details"),  # 0.11.1+ DEBUG "Request X details: prompt: ..., prompt_token_ids: [...]"
    ("Aborted request", "req_aborted"),
    ("Failing the request ", "req_failed"),
    ("is too long and exceeds", "prompt_too_long"),
    (" with config: ", "cfg_engine"),
    ("non-default args: ", "cfg_args"),
    ("args: Namespace(", "cfg_args"),
    ("Chunked prefill is enabled with max_num_batched_tokens", "cfg_chunked"),
    (" blocks: ", "cfg_blocks"),
    ("KV cache size: ", "cfg_kv_size"),
    ("Maximum concurrency for ", "cfg_concurrency"),
    ("server version ", "cfg_version"),
    # vLLM's start-up logo (vllm/entrypoints/serve/utils/api_utils.py, common/startup.py in 0.34
    # log_version_and_model: the default, one line per logo row): "▄▄ ▄█ █ ... █  version X"
    ("  version ", "cfg_version"),
    ("Using max model len ", "cfg_max_len"),
    # --max-model-len auto (-1): the length vLLM fitted to the KV cache, logged after "Using max model len"
    # (0.32 v1/core/kv_cache_utils.py, 0.34 v1/core/kv_cache_planning.py _auto_fit_max_model_len)
    ("Auto-fit max_model_len: ", "cfg_autofit"),
    ("--max-model-len auto reduced max_model_len from ", "cfg_autofit"),
    ("num_gpu_blocks is: ", "cfg_num_gpu_blocks"),
    ("max_num_seqs to ", "cfg_max_num_seqs"),
    ("Available KV cache memory: ", "cfg_kv_memory"),
    ("num_gpu_blocks_override=", "cfg_override"),
    # 0.32+ (vllm/platforms/interface.py): the block size the attention backend(s) chose
    ("Setting kv cache block size to ", "cfg_block_size"),
    # ... and the block size a hybrid (mamba) or quantized-KV model forced, over --block-size too
    # ("Setting attention block size to N tokens to ensure that attention page size is >= mamba page size.",
    # "... so the quantized primary KV page covers ...": 0.32 platforms/interface.py; xpu.py's "[XPU]Setting ...")
    ("Setting attention block size to ", "cfg_block_size"),
    # settings vLLM turned off after the config lines were written (0.32-0.34 v1/engine/core.py: a model with
    # non-causal attention or no KV cache; config/vllm.py: an encoder-only instance; attention backends under
    # batch invariance): "Disabling chunked prefill: ..." / "Disabling prefix caching ..."
    ("Disabling chunked prefill", "cfg_disable"),
    ("Disabling prefix caching", "cfg_disable"),
    # 0.34's extensible KV cache turned off at start-up (v1/executor/abstract.py: "Disabling the extensible KV
    # cache: <reason>. ..."; config/vllm.py: "Extensible KV cache off: without an IMEX channel, ...")
    ("Disabling the extensible KV cache", "cfg_disable"),
    ("Extensible KV cache off", "cfg_disable"),
    # the max_num_batched_tokens default, DEBUG (0.20+ engine/arg_utils.py): "Defaulting max_num_batched_tokens
    # to 8192 for openai-api-server usage context." (the INFO chunked-prefill line is absent without it)
    ("Defaulting max_num_batched_tokens to ", "cfg_max_num_seqs"),
    # memory lines for `whatif` (the KV pool under another gpu_memory_utilization, issue 16)
    ("Model loading took ", "cfg_weights"),
    ("Loading model weights took ", "cfg_weights"),
    ("model weights take ", "cfg_total_mem"),
    ("total_gpu_memory (", "cfg_total_mem"),
    # the GPU's name in a fused-MoE config file's name (engines/vllm/config.py, the max_num_seqs default)
    ("device_name=", "cfg_moe_device"),
]

# Extra line families (debug hooks, text block_table lines) register here so
# that the same single pass over a log file feeds them too.
EXTRA_MARKERS: list[tuple[str, str]] = []

# A kind whose marker can occur by accident is confirmed by a regex on the
# message; rows that fail it are dropped.
VERIFY: dict[str, str] = {
    "marker": r"\bPREEMPTED\b",
    "cfg_blocks": r"# \w+ blocks: \d",
    "cfg_version": r"(?:vLLM API server version|vLLM server version|█\s+version) \S",
    "iteration": r"Iteration\(\d+\):",
}

# Hot kinds: numerous (one per request). Their fields are extracted inside the
# query; no text is kept.
HOT_KINDS = ("req_received", "req_added", "req_finished", "req_aborted", "req_details")

ANSI_RE = r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"
HEAD_CHARS = 512

# vLLM header, unanchored so that VLLM_LOGGING_PREFIX / process prefixes may precede it.
VLLM_HEADER_RE = (
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+"
    r"(?:\([^()]*pid=\d+[^()]*\)\s+)?"
    r"(?P<mo>\d\d)-(?P<dd>\d\d) (?P<hh>\d\d):(?P<mi>\d\d):(?P<ss>\d\d)"
    r"(?:[.,](?P<hfrac>\d{1,9}))?\s+"
    r"\[?(?P<src>[^\s\[\]]+?):(?P<srcline>\d+)\]"
)
# Full date at the start of the line, after optional kubectl --prefix and compose "svc | ", or a Ray
# "(Name pid=N, ip=A) " process prefix (SGLang under Ray; SGLang's debug_utils/log_parser.py reads it too),
# or an RFC 5424 syslog header's "<PRI>1 " (its TIMESTAMP follows: a relay's full time).
FULL_TS_RE = (
    r"^(?:\[[^\]]*\]\s*)?(?:[A-Za-z0-9][\w.-]*\s+\|\s*)?(?:\([A-Za-z_][^()]*pid=\d+[^()]*\)\s*)?\[?"
    r"(?P<fdate>\d{4}-\d\d-\d\d)[T ](?P<ftime>\d\d:\d\d:\d\d)"
    r"(?:[.,](?P<ffrac>\d{1,9}))?(?P<fzone>Z|[+-]\d\d:?\d\d)?"
)
# Leading date shapes the fast path does not know: handed to python-dateutil.
FALLBACK_TS_RE = (
    r"^(?:[A-Za-z0-9][\w.-]*\s+\|\s*)?\W{0,3}"
    r"(?P<fb>(?:[A-Z][a-z]{2},?\s+\d{1,2}(?:,?\s+\d{4})?|\d{1,4}[/.]\d{1,2}[/.]\d{1,4}|\d{8})"
    r"[ T,]+\d{1,2}:\d\d(?::\d\d)?(?:[.,]\d{1,9})?(?:\s?(?:Z|[+-]\d\d:?\d\d|UTC))?)"
)
# What a container or service wrapper writes before a line's own text (anchored; each part optional):
# kubectl --prefix's ``[pod/NAME/CONTAINER] ``, compose's ``svc-1  | ``, an RFC 5424 syslog header
# (``<134>1 TIME HOST APP PROCID MSGID SD ``), an RFC 3339 / ISO time (docker -t, kubectl
# --timestamps, journalctl -o short-iso) and containerd's / CRI-O's ``stdout F `` after it. A
# family whose regex reads a line's start (a traceback's exception line) allows this prefix before it.
WRAPPER_PREFIX_RE = (
    r"^(?:\[[^\]]*\]\s*)?(?:[A-Za-z0-9][\w.-]*\s+\|\s*)?"
    r"(?:<\d{1,3}>1\s+\S+\s+\S+\s+\S+\s+\S+\s+\S+\s+(?:-|\[[^\]]*\])\s+"
    r"|\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?\s+(?:(?:stdout|stderr)\s+[PF]\s+)?)?"
)
PROC_RE = r"\(([A-Za-z_][^()]*?pid=\d+(?:,\s*ip=[0-9A-Fa-f.:]+)?)\)"
# The container a line came from: docker compose's ``svc  | `` or kubectl logs --prefix's
# ``[pod/NAME/CONTAINER] `` (the pod: one server of a replicated deployment), as the ``compose`` column.
COMPOSE_RE = r"^(?:\[pod/)?([A-Za-z0-9][\w.-]*)(?:/[^\]\s]*\]|\s+\|)\s"
# The engine a process prefix names (facts page 1b): the data-parallel rank of
# ``EngineCore_DPn``, ``DPEngineCoreActor_DPn``, ``DPn`` and worker ranks ``Worker_DPn_TPm``;
# ``EngineCore_n`` (0.8.5-0.10.1); the one engine of a process without a DP index
# (``EngineCore`` 0.18+, ``Worker_TPm``, ``VllmWorker``, ``VllmWorkerProcess``). Other
# processes (``APIServer``, Ray's actor wrappers) name no engine.
PROC_DP_RE = r"^(?:[A-Za-z]\w*_)?DP(\d+)(?:_|\s|$)"
PROC_ENGINE_INDEX_RE = r"^EngineCore_(\d+)(?:\s|$)"
PROC_ONE_ENGINE_RE = r"^(?:EngineCore|Worker|VllmWorker|VllmWorkerProcess)(?:[_\s]|$)"


def engine_of_proc(proc: pl.Expr) -> pl.Expr:
    """The engine label ("0", "1", ...) a process prefix ``Name pid=N`` names; null when it names none."""
    index = pl.coalesce(proc.str.extract(PROC_DP_RE, 1), proc.str.extract(PROC_ENGINE_INDEX_RE, 1))
    label = index.cast(pl.Int64, strict=False).cast(pl.String)
    return pl.when(label.is_not_null()).then(label).when(proc.str.contains(PROC_ONE_ENGINE_RE)).then(pl.lit("0"))


# Hot-kind field extraction.
REQ_ID_RE = r"(?:(?:Received|Added|Finished|Aborted) request(?:\(s\))?|Request) ([^\s:,]+(?:,[^\s:,]+)*)"
MAX_TOKENS_RE = r"max_tokens=(\d+)"
PROMPT_IDS_START = ", prompt_token_ids: ["
# The list ends where the fixed tail of the line begins (every version's wording).
PROMPT_IDS_END_RE = r"\](?:, prompt_embeds shape: [^,]*)?(?:, lora_request: |\.$)"

# Record schema: column -> polars dtype name. Asserted by the tests.
RECORD_SCHEMA = {
    "file_id": "UInt16",
    "n": "UInt32",
    "seg": "UInt32",
    "kind": "String",
    "level": "String",
    "proc": "String",
    "compose": "String",
    "mo": "Int8",
    "dd": "Int8",
    "hh": "Int8",
    "mi": "Int8",
    "ss": "Int8",
    "hfrac": "String",
    "fdate": "String",
    "ftime": "String",
    "ffrac": "String",
    "fzone": "String",
    "fb": "String",
    "text": "String",
    "req_id": "String",
    "max_tokens": "Int64",
    "prompt_tokens": "Int64",
}


def all_markers() -> list[tuple[str, str]]:

    extra = [m for fam in families().values() for m in fam.markers]
    return MARKERS + EXTRA_MARKERS + extra


def all_verify() -> dict[str, str]:

    out = dict(VERIFY)
    for fam in families().values():
        out.update(fam.verify)
    return out


# A line of vLLM's Rust frontend (``vllm-rs``, 0.33+) in the Rust ``tracing`` subscriber's default format:
# ``2026-12-01T10:00:10.123456Z  INFO vllm_llm::log_stats: message`` (its crates' targets are ``vllm_*``).
TRACING_LINE_RE = (
    r"(?m)^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?\s+(?:TRACE|DEBUG|INFO|WARN|ERROR)\s"
    r".*?\bvllm_[a-z_]+(?:::\w+)*: "
)


# The same subscriber's JSON lines (``tracing_subscriber::fmt().json()``): ``{"timestamp": ...,
# "level": "INFO", "fields": {"message": ...}, "target": "vllm_llm::log_stats"}`` (``message`` at the
# top with ``flatten_event``); keys in any order.
TRACING_JSON_RE = r'(?m)^\{(?=[^\n]*"level"\s*:\s*"(?:TRACE|DEBUG|INFO|WARN|ERROR)")(?=[^\n]*"target"\s*:\s*"vllm_)'


def _sniff(head: str) -> int:
    import re

    if re.search(r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d", head):
        return 50
    if re.search(TRACING_LINE_RE, re.sub(ANSI_RE, "", head) if "\x1b" in head else head):
        return 45
    if re.search(r'^\{.*"levelname".*"message"', head, re.M):
        return 40
    if re.search(TRACING_JSON_RE, head):
        return 40
    if re.match(r'\s*(?:\{|\[\s*(?:[{\["\d-]|$))', head):
        return 0  # a JSON document (or other JSON lines), not a log that merely mentions a marker
    hits = sum(1 for marker, _ in all_markers() if marker in head)
    if hits:
        return 20
    return 0


register(
    SourceKind(
        name=KIND,
        description="vLLM server log (any version 0.4-0.33, any wrapping), with hook lines",
        sniff=_sniff,
        log_pass=True,
        appends=True,
    )
)


def marker_regex(literals: list[str]) -> str:
    """One regex alternation of the literal markers, in list order.

    The regex crate's leftmost-first semantics are those of
    ``extract_many(leftmost=True)`` (the leftmost match; at the same position,
    the marker listed first), but the search stops at the first match instead
    of finding every match in the line. ``(?-u)``: byte matching (the markers
    are ASCII), measured ~25% faster than Unicode mode.
    """
    return "(?-u)(" + "|".join(pl.escape_regex(m) for m in literals) + ")"


def scan(path: str, file_id: int, wraps: bool = True) -> pl.LazyFrame:
    """Lazy records frame for one log file (see RECORD_SCHEMA).

    Measured on a 1 GB V0 log (148 k lines, 99 k kept; request lines of
    ~21 kB make up 99 % of the bytes), see docs/performance.md:

    - classifying with ``replace`` / ``replace_strict`` inside the query makes
      polars fall back to the in-memory engine for the whole pipeline (1.3 GB
      peak instead of 0.4 GB), so the query yields the leftmost marker as an
      ``Enum`` and :func:`finish` maps it to the record kind on the (small)
      collected frame;
    - the leftmost marker comes from one regex alternation (:func:`marker_regex`)
      that stops at the first match: ``extract_many`` found every match in the
      whole line, 12x slower on request lines (their prompts and token ids are
      scanned for nothing);
    - every expensive step on hot (request) rows is computed once, in its own
      ``with_columns``: inside one ``when/then`` chain polars evaluated the
      token-list search three times;
    - counting the prompt token ids (~90 M commas per GB) is the largest cost
      left after reading the file; ``(?-u),`` counts ~30 % faster than
      ``literal=True``.

    A plain file that needs no repair is read by the compiled pass (sources/fastscan, issue 36)
    when it is built: the same records, this query running only on the lines it leaves
    (:func:`compiled`); ``PREEMPTLOG_SCANNER=polars`` keeps this query for every line.
    """

    fast = compiled(path, file_id, wraps)
    if fast is not None:
        return fast.lazy()
    return scan_frame(reflow.scan(path, wraps=wraps), file_id)


@functools.cache
def _find_counts_bytes() -> bool:
    """Whether ``str.find`` reports byte offsets (polars up to 2.1) or character offsets (2.2 on)."""
    return bool(pl.Series(["\u00e9,"]).str.find(",", literal=True).item() == 2)


def _cut_at(s: pl.Expr, at: pl.Expr) -> pl.Expr:
    """``s`` from ``at`` on, ``at`` an offset as ``str.find`` reports it in this polars."""
    if _find_counts_bytes():
        return s.cast(pl.Binary).bin.slice(at).cast(pl.String)
    return s.str.slice(at)


def scan_frame(lines: pl.LazyFrame, file_id: int) -> pl.LazyFrame:
    """The polars pass on an ``(n, line)`` frame (textio.scan_lines' schema): :func:`scan`'s query."""

    markers = all_markers()
    literals = list(dict.fromkeys(m for m, _ in markers))
    kinds: dict[str, str] = {}
    for marker, kind in markers:
        kinds.setdefault(marker, kind)
    hot_markers = [m for m in literals if kinds[m] in HOT_KINDS]
    marker_enum = pl.Enum(literals)
    marker_rx = marker_regex(literals)

    # Literal pre-filter on the raw line (Teddy/SIMD prefilter of the regex crate);
    # wrapped, reflowed, quoted or indented captures are repaired first (reflow.py).
    lf = lines.filter(pl.col("line").str.contains(marker_rx))
    lf = split_cr(lf)
    # Leftmost marker; ties go to the earlier marker in the list.
    first = pl.col("line").str.extract(marker_rx, 1)
    lf = lf.with_columns(marker=first.cast(marker_enum)).filter(pl.col("marker").is_not_null())

    # head(): 2x faster than slice(0, n). The ANSI strip only where the head has an ESC
    # byte (a literal find; most logs have none).
    lf = lf.with_columns(head=pl.col("line").str.head(HEAD_CHARS), _hot=pl.col("marker").is_in(hot_markers))
    has_esc = pl.col("head").str.contains("\x1b", literal=True)
    lf = lf.with_columns(
        head=pl.when(has_esc).then(pl.col("head").str.replace_all(ANSI_RE, "")).otherwise(pl.col("head"))
    )
    is_json = pl.col("head").str.starts_with("{")
    json_line = pl.when(is_json).then(pl.col("line"))
    lf = lf.with_columns(
        hdr=pl.col("head").str.extract_groups(VLLM_HEADER_RE),
        full=pl.col("head").str.extract_groups(FULL_TS_RE),
        fb=pl.col("head").str.extract(FALLBACK_TS_RE, 1),
        # Request lines keep no process or compose prefix (see the select below).
        proc=pl.when(~pl.col("_hot")).then(pl.col("head")).str.extract(PROC_RE, 1),
        compose=pl.when(~pl.col("_hot")).then(pl.col("head")).str.extract(COMPOSE_RE, 1),
        # Python's JSON lines (asctime, levelname, message), else Rust tracing's (timestamp, level,
        # fields.message or a flattened message; its WARN is Python's WARNING).
        j_asctime=pl.coalesce(json_line.str.json_path_match("$.asctime"), json_line.str.json_path_match("$.timestamp")),
        j_level=pl.coalesce(
            json_line.str.json_path_match("$.levelname"),
            json_line.str.json_path_match("$.level").replace({"WARN": "WARNING", "TRACE": "DEBUG"}),
        ),
        j_msg=pl.coalesce(
            json_line.str.json_path_match("$.message"), json_line.str.json_path_match("$.fields.message")
        ),
        j_proc=pl.concat_str(
            [
                json_line.str.json_path_match("$.processName"),
                pl.lit(" pid="),
                json_line.str.json_path_match("$.process"),
            ]
        ),
    ).unnest("hdr", "full")
    j = pl.col("j_asctime").str.extract_groups(
        r"^(?P<jdate>\d{4}-\d\d-\d\d)[T ](?P<jtime>\d\d:\d\d:\d\d)(?:[.,](?P<jfrac>\d+))?(?P<jzone>Z|[+-]\d\d:?\d\d)?"
    )
    lf = lf.with_columns(j=j).unnest("j")

    hot = pl.col("_hot")
    # Rare kinds keep their text: ANSI stripped, JSON decoded, and copied out of
    # the read buffer (concat_str) so the file's bytes are not kept alive.
    text_src = pl.when(is_json & pl.col("j_msg").is_not_null()).then(pl.col("j_msg")).otherwise(pl.col("line"))
    text = pl.when(~hot).then(text_src).str.replace_all(ANSI_RE, "")
    text = pl.concat_str([pl.lit("\x00"), text]).str.slice(1)

    hot_line = pl.when(hot).then(pl.col("line"))
    # Count prompt_token_ids: the commas of the line's tail after the list's
    # start, minus those after its end. The tail is cut at the offset str.find
    # reports, in the unit it reports it (_cut_at: bytes up to polars 2.1,
    # characters from 2.2; a cut in the other unit went wrong after a non-ASCII
    # prompt). Measured on the 99 k survivors of a 1 GB log (single thread,
    # polars 2.1, docs/performance.md): cutting the tail 314 ms, finding the
    # end 69 ms, counting its 94 M commas 706 ms -- the largest cost after
    # reading the file; cutting the list out again before counting: +205 ms.
    ids_at = hot_line.str.find(PROMPT_IDS_START, literal=True) + len(PROMPT_IDS_START)
    lf = lf.with_columns(_tail=_cut_at(hot_line, ids_at))
    lf = lf.with_columns(_ids_len=pl.col("_tail").str.find(PROMPT_IDS_END_RE))
    after = _cut_at(pl.col("_tail"), pl.col("_ids_len"))
    commas = pl.col("_tail").str.count_matches("(?-u),") - after.str.count_matches("(?-u),")
    ids_len = pl.col("_ids_len")
    prompt_tokens = pl.when(ids_len == 0).then(pl.lit(0, pl.Int64)).when(ids_len > 0).then(commas.cast(pl.Int64) + 1)

    def i8(c: str) -> pl.Expr:
        return pl.col(c).cast(pl.Int8, strict=False)

    return lf.select(
        pl.lit(file_id, pl.UInt16).alias("file_id"),
        pl.col("n"),
        pl.col("seg"),
        pl.col("marker"),
        # Request lines keep only what the analysis reads of them (issue 18: ~50 bytes
        # per request line; no stage reads the level, process or compose prefix of one).
        pl.when(~hot).then(pl.coalesce("level", "j_level")).alias("level"),
        pl.when(~hot).then(pl.coalesce("proc", "j_proc")).alias("proc"),
        pl.when(~hot).then(pl.col("compose")).alias("compose"),
        i8("mo").alias("mo"),
        i8("dd").alias("dd"),
        i8("hh").alias("hh"),
        i8("mi").alias("mi"),
        i8("ss").alias("ss"),
        pl.col("hfrac"),
        pl.coalesce("fdate", "jdate").alias("fdate"),
        pl.coalesce("ftime", "jtime").alias("ftime"),
        pl.coalesce("ffrac", "jfrac").alias("ffrac"),
        pl.coalesce("fzone", "jzone").alias("fzone"),
        pl.col("fb"),
        text.alias("text"),
        hot_line.str.extract(REQ_ID_RE, 1).str.strip_chars_end(".:").alias("req_id"),
        hot_line.str.extract(MAX_TOKENS_RE, 1).cast(pl.Int64, strict=False).alias("max_tokens"),
        prompt_tokens.alias("prompt_tokens"),
    )


def finish(df: pl.DataFrame) -> pl.DataFrame:
    """Collected scan output -> records: marker -> kind, kinds confirmed by their regex."""
    kinds: dict[str, str] = {}
    for marker, kind in all_markers():
        kinds.setdefault(marker, kind)
    df = df.with_columns(
        kind=pl.col("marker").cast(pl.String).replace_strict(kinds, default=None, return_dtype=pl.String)
    ).drop("marker")
    verify = None
    for kind, rx in all_verify().items():
        cond = (pl.col("kind") != kind) | pl.col("text").str.contains(rx)
        verify = cond if verify is None else verify & cond
    if verify is not None:
        # Memory: a filter copies every column; most logs drop no row here.
        keep = df.select(verify.fill_null(True).alias("k")).get_column("k")
        if not keep.all():
            df = df.filter(keep)
    df = df.select(list(RECORD_SCHEMA) + [c for c in RUN_KIND_COLUMNS if c in df.columns])
    return compact(df)


def compact(df: pl.DataFrame) -> pl.DataFrame:
    """One chunk per column, and all-null columns stored as a scalar.

    Memory: the streaming collect yields one chunk per morsel (3 000 at 4 GB),
    and an all-null string column still costs 16 bytes per row in every later
    gather (sort, filter, join); most logs leave 6-9 of the 13 string columns
    null (no JSON, no ISO prefix, no process prefix). Measured at 400 k records:
    the timebase went from +186 MB to +85 MB.
    """
    nulls = [name for name in df.columns if df.height and df.get_column(name).null_count() == df.height]
    if nulls:
        df = df.with_columns(pl.lit(None, df.schema[name]).alias(name) for name in nulls)
    return df.rechunk()


def read(path: str, file_id: int, wraps: bool = True) -> pl.DataFrame:
    """Scan, collect and finish one log file."""
    fast = compiled(path, file_id, wraps)
    if fast is not None:
        return finish(compact(fast.frame()))
    return finish(collect(scan(path, file_id, wraps)))


def fast_spec() -> fastscan.Spec:
    """This module's query as data for the compiled pass (markers, regexes, fields: fastscan.Spec)."""
    markers = all_markers()
    literals = tuple(dict.fromkeys(m for m, _ in markers))
    kinds: dict[str, str] = {}
    for marker, kind in markers:
        kinds.setdefault(marker, kind)
    header = ("level", "mo", "dd", "hh", "mi", "ss", "hfrac")
    return fastscan.Spec(
        literals=literals,
        hot=frozenset(m for m in literals if kinds[m] in HOT_KINDS),
        regexes=(
            ("header", VLLM_HEADER_RE, tuple((g, g) for g in header)),
            ("full", FULL_TS_RE, tuple((g, g) for g in ("fdate", "ftime", "ffrac", "fzone"))),
            ("fallback", FALLBACK_TS_RE, (("fb", "fb"),)),
            ("proc", PROC_RE, (("proc", 1),)),
            ("compose", COMPOSE_RE, (("compose", 1),)),
            ("req_id", REQ_ID_RE, (("req_id", 1),)),
            ("max_tokens", MAX_TOKENS_RE, (("max_tokens", 1),)),
            ("ids_end", PROMPT_IDS_END_RE, ()),
        ),
        ids_start=PROMPT_IDS_START,
        strip=".:",
        head_chars=HEAD_CHARS,
    )


def compiled(path: str, file_id: int, wraps: bool = True) -> fastscan.Scan | None:
    """The compiled pass over one file (sources/fastscan), or None: not built, turned off
    (PREEMPTLOG_SCANNER=polars), or a file it does not read (compressed, repaired by reflow.py)."""
    if not fastscan.enabled() or not fastscan.eligible(path, wraps):
        return None
    return fastscan.open_scan(path, file_id, fast_spec(), lambda lines: scan_frame(lines, file_id))


def collect(lf: pl.LazyFrame) -> pl.DataFrame:
    """Collect a scan through a temporary Parquet file (streaming sink), column by column.

    Memory: ``collect()`` gathers one small chunk per morsel, and those
    long-lived fragments sit between the freed read buffers, so the allocator
    cannot give the pages back (issue 6: peak of a 4 GB analysis 470-497 MB
    against 389-406 MB through a sink). The spill file was Arrow IPC until
    issue 18: IPC stores a null string as a 16-byte view, and a request-heavy
    log leaves 10 of the 13 string columns null on most rows, so the IPC file
    of a 1 GB log was 454 MB and reading it back peaked at ~1 GB. Parquet
    stores nulls as bits and repeated values as a dictionary (90 MB), and
    reading it one column at a time lets a column that is null on every row
    become a scalar (:func:`compact`) before the next one is read: the peak of
    this step fell from 994 MB to the records themselves. The sink keeps row
    order. If the spill file cannot be written, or the sink fails for any
    reason, the query is collected in memory: an error of the input itself is
    raised again from there.
    """
    import os
    import tempfile

    try:
        fd, tmp = tempfile.mkstemp(prefix="preemptlog-records.", suffix=".parquet")
        os.close(fd)
    except OSError:
        return compact(lf.collect())
    try:
        try:
            lf.sink_parquet(tmp, compression="lz4", statistics=False)
            names = lf.collect_schema().names()
            series, nulls = [], []
            for name in names:
                col = pl.read_parquet(tmp, columns=[name]).to_series().rechunk()
                if col.len() and col.null_count() == col.len():
                    nulls.append(pl.lit(None, col.dtype).alias(name))
                else:
                    series.append(col)
            if not series:
                return compact(pl.read_parquet(tmp))
            return pl.DataFrame(series).with_columns(nulls).select(names)
        except Exception:
            return compact(lf.collect())
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass


# Sample lines: every kind this module recognises, with the fields the test
# asserts. Lines built from the facts page's format strings (C*) or copied
# from real logs (R*). ESC = "\x1b".
SAMPLES: list[tuple[str, dict[str, Any]]] = [
    (
        "WARNING 05-09 00:49:33 scheduler.py:1077] Sequence group cmpl-5f1c0d3e8a2b4c6d-0 is preempted by "
        "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect the "
        "end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size to provide more KV "
        "cache memory. total_num_cumulative_preemption=51",
        {"kind": "v0_preempt", "level": "WARNING", "mo": 5, "dd": 9, "hh": 0, "mi": 49, "ss": 33},
    ),
    (
        "WARNING 05-02 14:03:11 [scheduler.py:1775] Sequence group 7 is preempted by PreemptionMode.SWAP mode "
        "because there is not enough KV cache space. total_num_cumulative_preemption=1",
        {"kind": "v0_preempt", "mo": 5, "dd": 2, "ss": 11},
    ),
    (
        "(APIServer pid=4121) INFO 11-20 09:14:10 [loggers.py:208] Engine 000: Avg prompt throughput: 812.4 "
        "tokens/s, Avg generation throughput: 2310.9 tokens/s, Running: 58 reqs, Waiting: 17 reqs, "
        "Preemptions: 6, GPU KV cache usage: 98.7%, Prefix cache hit rate: 35.2%",
        {"kind": "stats", "proc": "APIServer pid=4121", "mo": 11, "dd": 20},
    ),
    (
        "\x1b[1;36m(VllmWorkerProcess pid=2311)\x1b[0;0m INFO 08-22 20:52:40 metrics.py:341] Avg prompt "
        "throughput: 0.0 tokens/s, Avg generation throughput: 7220.5 tokens/s, Running: 2 reqs, Swapped: 0 "
        "reqs, Pending: 98 reqs, GPU KV cache usage: 73.8%, CPU KV cache usage: 0.0%.",
        {"kind": "stats", "proc": "VllmWorkerProcess pid=2311", "hh": 20},
    ),
    (
        "\x1b[32mINFO\x1b[0m \x1b[90m11-20 09:14:10\x1b[0m \x1b[90m[loggers.py:208]\x1b[0m Engine 000: Avg "
        "prompt throughput: 1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, Running: 1 reqs, Waiting: "
        "0 reqs, GPU KV cache usage: 1.0%, Prefix cache hit rate: 0.0%",
        {"kind": "stats", "level": "INFO", "mo": 11, "mi": 14},
    ),
    (
        "vllm-1  | 2024-05-01T12:00:03.250Z WARNING 05-01 12:00:03 [scheduler.py:1775] Sequence group 9 is "
        "preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. "
        "total_num_cumulative_preemption=1",
        {"kind": "v0_preempt", "compose": "vllm-1", "fdate": "2024-05-01", "ffrac": "250", "fzone": "Z"},
    ),
    (
        "2024-05-01 12:00:00,123 - vllm.core.scheduler - WARNING - Sequence group 3 is preempted by "
        "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. "
        "total_num_cumulative_preemption=1",
        {"kind": "v0_preempt", "fdate": "2024-05-01", "ftime": "12:00:00", "ffrac": "123", "fzone": None},
    ),
    (
        '{"asctime": "2026-03-01 10:00:00,500", "levelname": "INFO", "name": "vllm.v1.metrics.loggers", '
        '"processName": "APIServer", "process": 77, "message": "Engine 000: Avg prompt throughput: 0.0 '
        "tokens/s, Avg generation throughput: 5.0 tokens/s, Running: 3 reqs, Waiting: 9 reqs, "
        'Preemptions: 2, GPU KV cache usage: 99.0%, Prefix cache hit rate: 0.0%"}',
        {"kind": "stats", "level": "INFO", "fdate": "2026-03-01", "proc": "APIServer pid=77"},
    ),
    (
        "(APIServer pid=90458) INFO 02-13 11:33:33 [logger.py:49] Received request chatcmpl-a269fdcb7c6ce890: "
        "params: SamplingParams(n=1, temperature=0.7, max_tokens=100, min_tokens=0), lora_request: None.",
        {"kind": "req_received", "req_id": "chatcmpl-a269fdcb7c6ce890", "max_tokens": 100, "prompt_tokens": None},
    ),
    (
        "INFO 08-01 10:00:00 [logger.py:41] Received request cmpl-9f0c1d2e3f40-0: prompt: 'Hello "
        "PREEMPTED', params: SamplingParams(n=1, max_tokens=512, min_tokens=0), prompt_token_ids: [9707, 1, 2], "
        "prompt_embeds shape: None, lora_request: None.",
        {"kind": "req_received", "req_id": "cmpl-9f0c1d2e3f40-0", "max_tokens": 512, "prompt_tokens": 3},
    ),
    (
        "(APIServer pid=90458) INFO 02-13 11:33:33 [async_llm.py:382] Added request "
        "chatcmpl-a269fdcb7c6ce890-a8a65d16.",
        {"kind": "req_added", "req_id": "chatcmpl-a269fdcb7c6ce890-a8a65d16"},
    ),
    (
        "(APIServer pid=1) INFO 09-20 10:00:00 [async_llm.py:499] Aborted request(s) "
        "chatcmpl-a1b2c3d4-5e6f7a8b,chatcmpl-c3d4e5f6-0a1b2c3d.",
        {"kind": "req_aborted", "req_id": "chatcmpl-a1b2c3d4-5e6f7a8b,chatcmpl-c3d4e5f6-0a1b2c3d"},
    ),
    (
        "(APIServer pid=1) DEBUG 11-20 09:14:01 [entrypoints/logger.py:60] Request chatcmpl-aaa111 details: "
        "prompt: 'Hi, there', prompt_token_ids: [1, 2, 3, 4], prompt_embeds shape: None.",
        {"kind": "req_details", "req_id": "chatcmpl-aaa111", "prompt_tokens": 4},
    ),
    (
        "INFO 05-31 16:44:58 async_llm_engine.py:553] Received request cee5f47c26914b3f84d43ab1f4745f98: prompt: "
        "None, params: SamplingParams(n=1, best_of=1, stop=[], stop_token_ids=[], max_tokens=1), prompt_token_ids: "
        "[128000, 3947], lora_request: None.",
        {"kind": "req_received", "max_tokens": 1, "prompt_tokens": 2},
    ),
    (
        "INFO 05-31 16:44:58 async_llm_engine.py:553] Received request r9: prompt: 'a], lora_request: x', params: "
        "SamplingParams(max_tokens=7), prompt_token_ids: [], lora_request: None.",
        {"kind": "req_received", "req_id": "r9", "prompt_tokens": 0},
    ),
    (
        # A non-ASCII prompt: the token list is found by byte offset, cut by bytes.
        "INFO 05-31 16:44:58 async_llm_engine.py:553] Received request r10: prompt: 'Grüße, 你好吗, ça va', params: "
        "SamplingParams(max_tokens=9), prompt_token_ids: [7, 8, 9, 10, 11], lora_request: None.",
        {"kind": "req_received", "req_id": "r10", "max_tokens": 9, "prompt_tokens": 5},
    ),
    (
        # An empty list after a non-ASCII prompt (polars 2.2's str.find counts characters: the
        # tail was cut two bytes early and read one token).
        "(APIServer pid=12) DEBUG 05-01 10:00:02 [entrypoints/logger.py:60] Request chatcmpl-ab details: "
        "prompt: '\u00e9 \u00fc', prompt_token_ids: [], lora_request: None.",
        {"kind": "req_details", "req_id": "chatcmpl-ab", "prompt_tokens": 0},
    ),
    (
        "INFO 05-31 16:44:58 async_llm_engine.py:553] Received request r11: prompt: '\u4f60\u597d, ok', params: "
        "SamplingParams(max_tokens=3), prompt_token_ids: [42], lora_request: None.",
        {"kind": "req_received", "req_id": "r11", "max_tokens": 3, "prompt_tokens": 1},
    ),
    (
        "INFO 06-01 12:00:09 async_llm_engine.py:133] Finished request cmpl-77c1e0a4b1e04b3e8c1f0a2d3b4c5d6e.",
        {"kind": "req_finished", "req_id": "cmpl-77c1e0a4b1e04b3e8c1f0a2d3b4c5d6e"},
    ),
    (
        "INFO 03-19 06:35:49 distributed_gpu_executor.py:57] # GPU blocks: 2987, # CPU blocks: 4096",
        {"kind": "cfg_blocks"},
    ),
    (
        "(EngineCore_DP0 pid=1133552) INFO 10-03 16:22:17 [kv_cache_utils.py:864] GPU KV cache size: 42,656 tokens",
        {"kind": "cfg_kv_size", "proc": "EngineCore_DP0 pid=1133552"},
    ),
    (
        "(Worker_TP1 pid=1908386) DEBUG 05-04 05:25:03 [v1/worker/gpu_model_runner.py:3888] Request r-1 "
        "status: RequestStatus.PREEMPTED",
        {"kind": "marker", "level": "DEBUG", "proc": "Worker_TP1 pid=1908386"},
    ),
    (
        "(RayWorkerWrapper pid=581, ip=10.225.128.18) INFO 05-04 05:25:03 [scheduler.py:10] Req-77 PREEMPTED",
        {"kind": "marker", "proc": "RayWorkerWrapper pid=581, ip=10.225.128.18"},
    ),
    (
        "INFO 09-03 16:28:17 [scheduler.py:222] Chunked prefill is enabled with max_num_batched_tokens=2048.",
        {"kind": "cfg_chunked"},
    ),
    (
        # vLLM 0.32 (kv_cache_utils.py): the pool pinned by --num-gpu-blocks-override
        "(EngineCore pid=5521) INFO 12-02 00:39:10 [kv_cache_utils.py:2619] Overriding num_gpu_blocks=8192 with "
        "num_gpu_blocks_override=64",
        {"kind": "cfg_override", "proc": "EngineCore pid=5521"},
    ),
    (
        # vLLM 0.32-0.34 (vllm/platforms/interface.py update_block_size_for_backend, "Setting kv cache block
        # size to %d for %s backend(s)."): the block size the attention backend(s) set, logged when
        # --block-size is not given and the size differs from CacheConfig.DEFAULT_BLOCK_SIZE
        "(EngineCore pid=42) INFO 12-01 09:59:33 [interface.py:787] Setting kv cache block size to 32 for "
        "FLASH_ATTN backend(s).",
        {"kind": "cfg_block_size", "proc": "EngineCore pid=42"},
    ),
    (
        "Nov 30 05:10:38 gpu-host vllm[1234]: Sequence group 5 is preempted by PreemptionMode.RECOMPUTE mode "
        "because there is not enough KV cache space. total_num_cumulative_preemption=1",
        {"kind": "v0_preempt", "fb": "Nov 30 05:10:38", "mo": None},
    ),
    ("INFO 05-04 05:25:03 [x.py:1] UNPREEMPTED_QUEUE size 3", {"_dropped": True}),
    ('INFO:     127.0.0.1:55352 - "POST /v1/chat/completions HTTP/1.1" 200 OK', {"_dropped": True}),
]


def scan_empty() -> pl.DataFrame:
    """An empty records frame with the declared schema."""
    return pl.DataFrame(schema={k: getattr(pl, v) for k, v in RECORD_SCHEMA.items()})


# ---- Request lines as runs (issue 18, round two) ----------------------------------------
#
# A request-heavy log has millions of request lines, and one records row each made memory
# grow with them. Above ``REQUEST_RUNS_MIN`` request lines a file's request lines become
# *runs* instead: a maximal sequence of consecutive request lines (no other record between
# them) with the same time parts is one records row (the run's first line, its request
# fields cleared) with ``rq_count`` (lines in the run, Added and details lines included)
# and ``n_last`` (the run's last line). Every stage that read request rows one by one gets
# the same answer from a run:
#
# - the clock (timebase.resolve): equal consecutive time parts give the same year,
#   rollover, fall-back pass and forward fill; ``seq`` counts ``rq_count`` rows per run,
#   so every other record keeps its number;
# - the line-time pass (linetimes.py): a run's interior has no untimed record;
# - explain's window rows (joiner/explain.py) read the runs' lines again from the file
#   (:func:`reread_runs`);
# - the requests frame (vllm/requests.py) is made from :data:`HOT_ROWS` rows kept per
#   Received / Finished / Aborted / details line (Added lines are only counted), each with
#   its run and its rank in the run (its ``seq`` is the run's plus the rank).
#
# Untimed request lines are runs of one. Rotated sets (a stream of several files) keep
# request rows: their overlap de-duplication compares request lines one by one.

REQUEST_RUNS_MIN = 100_000  # request lines in a file; env PREEMPTLOG_REQUEST_RUNS_MIN overrides
RUN_KIND_COLUMNS = {"rq_count": "UInt32", "n_last": "UInt32", "rq_run": "UInt32"}
# Per-request rows kept beside the records (see above): schema of :func:`read_split`'s second frame.
HOT_ROWS = {
    "file_id": "UInt16",
    "kind": "Enum(HOT_KINDS)",
    "n": "UInt32",
    "rq_run": "UInt32",
    "rq_rank": "UInt32",
    "req_id": "String",
    "max_tokens": "Int64",
    "prompt_tokens": "Int64",
}
_TIME_PARTS = ("mo", "dd", "hh", "mi", "ss", "hfrac", "fdate", "ftime", "ffrac", "fzone", "fb")
_KEPT_HOT = ("req_received", "req_finished", "req_aborted", "req_details")


def HOT_KIND_ENUM() -> pl.Enum:  # a dtype, named like one
    return pl.Enum(list(HOT_KINDS))


def request_runs_min() -> int:
    import os

    raw = os.environ.get("PREEMPTLOG_REQUEST_RUNS_MIN", "").strip()
    try:
        return int(raw) if raw else REQUEST_RUNS_MIN
    except ValueError:
        return REQUEST_RUNS_MIN


def with_run_columns(df: pl.DataFrame) -> pl.DataFrame:
    """Records without runs: the run columns, null (a scalar each)."""
    missing = [c for c in RUN_KIND_COLUMNS if c not in df.columns]
    return df.with_columns(pl.lit(None, getattr(pl, RUN_KIND_COLUMNS[c])).alias(c) for c in missing)


@dataclass(frozen=True)
class HotRows:
    """One file's per-request rows (:data:`HOT_ROWS` columns), in memory or left in its spill file.

    ``folded``: the rows stay in the file's Parquet spill (``read_split(spill_dir=...)``, a file
    with at least :func:`request_fold_min` Received lines) and ``rows`` scans it; vllm/requests.py
    folds them into counts and reads back only the rows the analysis names. Otherwise ``rows``
    is a frame in memory (``.lazy()``).
    """

    file_id: int
    details: bool  # details lines; else Received / Finished / Aborted lines
    rows: pl.LazyFrame
    height: int
    received: int  # Received request lines among the rows
    folded: bool
    spill: str | None = None  # the spill file (folded)
    starts: pl.Series | None = None  # spill row of each run's first row (folded)
    runs_received: pl.Series | None = None  # Received rows of each run (folded)

    def of_kinds(self, kinds: list[str], rows: pl.Series | None = None) -> pl.LazyFrame:
        """A folded file's rows of some kinds, with their spill row ``_row`` instead of
        ``rq_run``/``rq_rank`` (:meth:`locate` adds those to the few rows read back). The
        filter is on the marker column, so the other rows' columns are not decoded; there is
        no run lookup (a Series literal in the query made the streaming engine read whole
        columns)."""
        assert self.spill is not None
        markers = [m for m, k in _kind_of_marker().items() if k in kinds]
        keep = pl.col("marker").is_in(markers)
        if rows is not None:  # only these spill rows (``rows``: their ``_row``)
            keep = keep & pl.col("_row").is_in(rows.implode())
        return (
            _spill_rows(self.spill)
            .filter(keep)
            .select(
                pl.lit(self.file_id, pl.UInt16).alias("file_id"),
                _hot_kind(markers, _kind_of_marker()).alias("kind"),
                "n",
                "_row",
                "req_id",
                "max_tokens",
                "prompt_tokens",
            )
        )

    def locate(self, rows: pl.DataFrame) -> pl.DataFrame:
        """``rq_run`` and ``rq_rank`` of rows read by :meth:`of_kinds` (by their ``_row``)."""
        assert self.starts is not None
        run = self.starts.search_sorted(rows.get_column("_row"), side="right").cast(pl.Int64) - 1
        rank = rows.get_column("_row").cast(pl.Int64) - self.starts.gather(run).cast(pl.Int64)
        return rows.with_columns(rq_run=run.cast(pl.UInt32), rq_rank=rank.cast(pl.UInt32))


def _spill_rows(path: str) -> pl.LazyFrame:
    """A spill file's rows with ``_row``, their position among the file's request rows: the
    compiled pass writes it (its spill holds some kinds only: fastscan/split.py), the polars pass's
    spill holds every row (its row index)."""
    lf = pl.scan_parquet(path)
    return lf if "_row" in lf.collect_schema() else lf.with_row_index("_row")


def _kind_of_marker() -> dict[str, str]:
    kinds: dict[str, str] = {}
    for marker, kind in all_markers():
        kinds.setdefault(marker, kind)
    return kinds


def _hot_query(tmp: str, file_id: int, markers: list[str], starts: pl.Series) -> pl.LazyFrame:
    """HOT_ROWS of the spill rows with one of ``markers``: a row's run is the last run that
    starts at or before it, its rank its distance to that start."""
    run_at = pl.lit(starts).search_sorted(pl.col("_row"), side="right").cast(pl.Int64) - 1
    return (
        _spill_rows(tmp)
        .filter(pl.col("marker").is_in(markers))
        .with_columns(_r=run_at)
        .select(
            pl.lit(file_id, pl.UInt16).alias("file_id"),
            _hot_kind(markers, _kind_of_marker()).alias("kind"),
            "n",
            pl.col("_r").cast(pl.UInt32).alias("rq_run"),
            (pl.col("_row") - pl.lit(starts).gather(pl.col("_r"))).cast(pl.UInt32).alias("rq_rank"),
            "req_id",
            "max_tokens",
            "prompt_tokens",
        )
    )


SMALL_COLLECT_BYTES = 16 << 20  # files up to this size may be collected in memory (read_split)
MIN_REQUEST_LINE_BYTES = 24  # "Added request X." with the shortest header: no request line is shorter
REQUEST_FOLD_MIN = 20_000  # Received lines in a file read with runs; env PREEMPTLOG_REQUEST_FOLD_MIN overrides


def request_fold_min() -> int:
    """Files with at least this many Received lines keep their request rows in the spill file:
    above the what-if replay's bound (whatif/verify.py) analyze needs only counts and the rows it
    names (vllm/requests.py)."""
    import os

    raw = os.environ.get("PREEMPTLOG_REQUEST_FOLD_MIN", "").strip()
    try:
        return int(raw) if raw else REQUEST_FOLD_MIN
    except ValueError:
        return REQUEST_FOLD_MIN


def read_split(
    path: str, file_id: int, wraps: bool = True, runs: bool = True, spill_dir: str | None = None
) -> tuple[pl.DataFrame, list[HotRows]]:
    """Records of one file with request lines as runs, and the per-request rows (HOT_ROWS).

    Without runs (``runs`` False, or fewer request lines than :func:`request_runs_min`)
    this is :func:`read` with null run columns and no per-request rows. Otherwise the
    second item holds one :class:`HotRows` of Received / Finished / Aborted lines and one of
    details lines (when the file has any). With ``spill_dir`` (a private folder that
    outlives the call, e.g. the analysis' workspace), a file with many Received lines
    keeps its spill file there and its rows are ``folded`` (scanned, not read).
    """
    import os
    import tempfile

    fast = compiled(path, file_id, wraps)
    if fast is not None:  # the compiled pass: the same runs, window by window (fastscan/split.py)
        return fastscan.read_split(fast.pairs(), fast.schema, fast_split_context(file_id, runs, spill_dir))
    lf = scan(path, file_id, wraps)
    try:
        size = os.path.getsize(path)
    except OSError:
        size = None
    if size is not None and size <= SMALL_COLLECT_BYTES and size // MIN_REQUEST_LINE_BYTES < request_runs_min():
        # Too small to hold enough request lines for runs: collected in memory (the spill file
        # costs ~30 ms of fixed time and saves nothing at this size).
        return with_run_columns(finish(compact(lf.collect(engine="streaming")))), []
    try:
        fd, tmp = tempfile.mkstemp(prefix="preemptlog-records.", suffix=".parquet", dir=spill_dir)
        os.close(fd)
    except OSError:
        return with_run_columns(finish(collect(lf))), []
    kept = False
    try:
        try:
            lf.sink_parquet(tmp, compression="lz4", statistics=False)
        except Exception:
            return with_run_columns(finish(compact(lf.collect()))), []
        fold = spill_dir is not None
        rec, hot = _split_from(tmp, lf.collect_schema().names(), file_id, runs, fold)
        kept = any(h.folded for h in hot)
        return rec, hot
    finally:
        if not kept:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def fast_split_context(file_id: int, runs: bool, spill_dir: str | None) -> fastscan.SplitContext:
    """What :func:`read_split` decides, for the compiled pass's run finder (fastscan/split.py)."""
    kinds = _kind_of_marker()
    return fastscan.SplitContext(
        file_id=file_id,
        kinds=kinds,
        hot_kinds=HOT_KINDS,
        kept_kinds=_KEPT_HOT,
        time_parts=_TIME_PARTS,
        runs=runs,
        runs_min=request_runs_min(),
        fold_min=request_fold_min(),
        spill_dir=spill_dir,
        finish=finish,
        compact=compact,
        with_run_columns=with_run_columns,
        hot_kind=lambda markers: _hot_kind(markers, kinds),
        hot_query=_hot_query,
        hot_rows=HotRows,
        hot_columns=tuple(HOT_ROWS),
    )


READ_CHUNK_ROWS = 1 << 20


def _read_columns(tmp: str, names: list[str], mask: pl.Series | None) -> pl.DataFrame:
    """The spill file's columns one at a time (rows where ``mask``), all-null ones as scalars.

    Memory: a column is read and filtered a slice of READ_CHUNK_ROWS rows at a time, so a
    column of every row (7 M request ids at 4 GB) is never held whole when most is dropped.
    """
    height = pl.scan_parquet(tmp).select(pl.len()).collect().item()
    series, nulls = [], []
    for name in names:
        if mask is None or height <= READ_CHUNK_ROWS:
            col = pl.read_parquet(tmp, columns=[name]).to_series()
            if mask is not None:
                col = col.filter(mask)
        else:
            chunks = []
            for off in range(0, height, READ_CHUNK_ROWS):
                part = pl.scan_parquet(tmp).select(name).slice(off, READ_CHUNK_ROWS).collect().to_series()
                chunks.append(part.filter(mask.slice(off, READ_CHUNK_ROWS)))
                del part
            col = pl.concat(chunks)
            del chunks
        col = col.rechunk()
        if col.len() and col.null_count() == col.len():
            nulls.append(pl.lit(None, col.dtype).alias(name))
        else:
            series.append(col)
    if not series:
        rows = int(mask.sum()) if mask is not None else height
        base = pl.DataFrame({"_h": pl.Series([None] * rows, dtype=pl.Null)})
        return base.with_columns(nulls).select(names)
    return pl.DataFrame(series).with_columns(nulls).select(names)


@dataclass(frozen=True)
class _RunFlags:
    """Per spill row (bit columns) and per run, from :func:`_run_flags`."""

    hot: pl.Series  # a request row
    start: pl.Series  # the first row of a run
    starts: pl.Series  # UInt32: spill row of each run's first row, in order
    rq_count: pl.Series  # UInt32: rows of each run
    n_last: pl.Series  # UInt32: line number of each run's last row
    rq_recv: pl.Series  # UInt32: Received rows of each run
    n_hot: int
    n_received: int
    n_main: int
    n_det: int


def _run_flags(tmp: str, kinds: dict[str, str]) -> _RunFlags:
    """Runs of request rows, found a slice of READ_CHUNK_ROWS spill rows at a time.

    A run is a maximal block of consecutive request rows with equal time parts (timed ones:
    an untimed request row is a run of one). Memory: only bit columns of every row and
    per-run columns are kept; a narrow frame of every row (marker, line, 11 time parts) was
    ~224 MB at 4 GB of a request-heavy log.
    """
    hot_markers = [m for m, k in kinds.items() if k in HOT_KINDS]
    main_markers = [m for m, k in kinds.items() if k in _KEPT_HOT and k != "req_details"]
    det_markers = [m for m, k in kinds.items() if k == "req_details"]
    recv_markers = [m for m, k in kinds.items() if k == "req_received"]
    is_hot = pl.col("marker").is_in(hot_markers).fill_null(False)
    timed = pl.col("mo").is_not_null() | pl.col("fdate").is_not_null() | pl.col("fb").is_not_null()
    same = pl.lit(True)
    for c in _TIME_PARTS:
        same = same & pl.col(c).eq_missing(pl.col(c).shift(1))
    cont = is_hot & is_hot.shift(1).fill_null(False) & timed & timed.shift(1).fill_null(False) & same.fill_null(False)
    height = pl.scan_parquet(tmp).select(pl.len()).collect().item()
    hots, conts, n_lasts, recv_before = [], [], [], []
    counts = {"hot": 0, "recv": 0, "main": 0, "det": 0}
    carry = 0  # Received rows before the slice
    prev: pl.DataFrame | None = None
    for off in range(0, max(height, 1), READ_CHUNK_ROWS):
        part = pl.scan_parquet(tmp).select("marker", "n", *_TIME_PARTS).slice(off, READ_CHUNK_ROWS).collect()
        ext = part if prev is None else pl.concat([prev, part], how="vertical")
        f = ext.select(
            hot=is_hot,
            cont=cont,
            recv=pl.col("marker").is_in(recv_markers).fill_null(False),
            main=pl.col("marker").is_in(main_markers).fill_null(False),
            det=pl.col("marker").is_in(det_markers).fill_null(False),
            n=pl.col("n"),
        )
        if prev is not None:
            f = f.slice(1)
        # Received rows up to and including each row (to count them per run)
        f = f.with_columns(_c=pl.col("recv").cast(pl.UInt32).cum_sum() + carry)
        if f.height:
            carry = int(f.get_column("_c")[-1])
        recv_before.append(
            f.filter(pl.col("hot") & ~pl.col("cont")).select(pl.col("_c") - pl.col("recv").cast(pl.UInt32))
        )
        for key, col in (("hot", "hot"), ("recv", "recv"), ("main", "main"), ("det", "det")):
            counts[key] += int(f.get_column(col).sum())
        hots.append(f.get_column("hot"))
        conts.append(f.get_column("cont"))
        # A run's last row: a request row whose next row does not continue it (for a slice's
        # last row the next slice decides: it is a candidate, checked against ``end`` below).
        n_lasts.append(
            f.with_row_index("_i", offset=off)
            .filter(pl.col("hot") & ~pl.col("cont").shift(-1).fill_null(False))
            .select("_i", "n", "_c")
        )
        prev = part.tail(1)
        del part, ext, f
    hot = pl.concat(hots).rechunk() if hots else pl.Series("hot", [], dtype=pl.Boolean)
    cont_s = pl.concat(conts).rechunk() if conts else pl.Series("cont", [], dtype=pl.Boolean)
    del hots, conts
    start = hot & ~cont_s
    end = hot & ~cont_s.shift(-1).fill_null(False)
    del cont_s
    starts = start.arg_true().cast(pl.UInt32)
    ends = end.arg_true().cast(pl.UInt32)
    empty = pl.DataFrame(schema={"_i": pl.UInt32, "n": pl.UInt32, "_c": pl.UInt32})
    cand = pl.concat(n_lasts) if n_lasts else empty
    del n_lasts
    cand = cand.filter(end.gather(cand.get_column("_i")))
    n_last = cand.get_column("n").cast(pl.UInt32)
    before = pl.concat(recv_before).to_series() if recv_before else pl.Series([], dtype=pl.UInt32)
    rq_recv = (cand.get_column("_c") - before).cast(pl.UInt32)
    return _RunFlags(
        hot=hot,
        start=start,
        starts=starts,
        rq_count=(ends - starts + 1).cast(pl.UInt32).alias("rq_count"),
        n_last=n_last.alias("n_last"),
        rq_recv=rq_recv.alias("rq_recv"),
        n_hot=counts["hot"],
        n_received=counts["recv"],
        n_main=counts["main"],
        n_det=counts["det"],
    )


def _hot_kind(markers: list[str], kinds: dict[str, str]) -> pl.Expr:
    """The request kind (HOT_KIND_ENUM) of a row with one of ``markers``: a when/then chain
    (``replace_strict`` makes the streaming engine fall back to the in-memory one, which reads
    whole columns of the spill file)."""
    expr: Any = None
    for kind in dict.fromkeys(kinds[m] for m in markers):
        cond = pl.col("marker").is_in([m for m in markers if kinds[m] == kind])
        lit = pl.lit(kind, HOT_KIND_ENUM())
        expr = pl.when(cond).then(lit) if expr is None else expr.when(cond).then(lit)
    out: pl.Expr = expr.otherwise(pl.lit(None, HOT_KIND_ENUM()))
    return out


def _split_from(tmp: str, names: list[str], file_id: int, runs: bool, fold: bool) -> tuple[pl.DataFrame, list[HotRows]]:
    kinds: dict[str, str] = {}
    for marker, kind in all_markers():
        kinds.setdefault(marker, kind)
    kept_markers = [m for m, k in kinds.items() if k in _KEPT_HOT]
    if not runs:
        return with_run_columns(finish(_read_columns(tmp, names, None))), []
    flags = _run_flags(tmp, kinds)
    if flags.n_hot == 0 or flags.n_hot < request_runs_min():
        return with_run_columns(finish(_read_columns(tmp, names, None))), []
    keep = ~flags.hot | flags.start
    starts_kept = flags.start.filter(keep)
    pos = starts_kept.arg_true()
    height = starts_kept.len()
    n_runs = flags.starts.len()
    count = pl.Series("rq_count", [None] * height, dtype=pl.UInt32).scatter(pos, flags.rq_count)
    n_last = pl.Series("n_last", [None] * height, dtype=pl.UInt32).scatter(pos, flags.n_last)
    run_no = pl.Series("rq_run", [None] * height, dtype=pl.UInt32).scatter(
        pos, pl.int_range(n_runs, dtype=pl.UInt32, eager=True)
    )
    del starts_kept, pos
    # The records: the other rows and each run's first row, its request fields cleared. One
    # streaming query (the rows kept: not a request row, or a run's first row); reading each
    # column a slice at a time held ~220 MB more at 4 GB.
    hot_markers = [m for m, k in kinds.items() if k in HOT_KINDS]
    raw = (
        pl.scan_parquet(tmp)
        .with_row_index("_row")
        .filter(~pl.col("marker").is_in(hot_markers).fill_null(False) | pl.col("_row").is_in(flags.starts.implode()))
        .drop("_row")
        .collect(engine="streaming")
    )
    assert raw.height == height
    raw = compact(raw).with_columns(count, n_last, run_no)
    del keep
    not_run = pl.col("rq_count").is_null()
    raw = raw.with_columns(pl.when(not_run).then(pl.col(c)).alias(c) for c in ("req_id", "max_tokens", "prompt_tokens"))
    rec = finish(raw)
    # The per-request rows (Received, Finished, Aborted, details; Added lines are counted only):
    # two queries with a predicate on the spill file (no column of every row is held).
    folded = fold and flags.n_received >= request_fold_min()
    out = []
    main_markers = [m for m in kept_markers if kinds[m] != "req_details"]
    det_markers = [m for m in kept_markers if kinds[m] == "req_details"]
    for group, n_rows, is_det in ((main_markers, flags.n_main, False), (det_markers, flags.n_det, True)):
        if not group or n_rows == 0:
            continue
        lf = _hot_query(tmp, file_id, group, flags.starts)
        received = 0 if is_det else flags.n_received
        if folded:
            out.append(
                HotRows(
                    file_id,
                    is_det,
                    lf,
                    n_rows,
                    received,
                    True,
                    spill=tmp,
                    starts=flags.starts,
                    runs_received=None if is_det else flags.rq_recv,
                )
            )
            continue
        rows = lf.collect(engine="streaming")  # the in-memory engine read whole columns before filtering
        # A column null on every row (prompt_tokens of V1 Received lines, max_tokens of details
        # lines) becomes a scalar; no rechunk (it would copy the ids).
        nulls = [c for c in ("max_tokens", "prompt_tokens") if rows.get_column(c).null_count() == rows.height]
        rows = rows.with_columns(pl.lit(None, pl.Int64).alias(c) for c in nulls)
        out.append(HotRows(file_id, is_det, rows.select(list(HOT_ROWS)).lazy(), rows.height, received, False))
    return rec, out


def reread_runs(path: str, file_id: int, runs: pl.DataFrame, wraps: bool = True) -> pl.DataFrame:
    """The request lines of some runs, read again from the file (for explain's window rows).

    ``runs``: records rows of runs (columns n, n_last, plus any columns to give each line,
    e.g. time and source). Returns one row per request line of those runs, in line order:
    the records columns of the line (as :func:`read` makes them) and the run's given columns.
    """
    runs = runs.sort("n")
    starts = runs.get_column("n").cast(pl.UInt32)
    ends = runs.get_column("n_last").cast(pl.UInt32)
    lf = scan(path, file_id, wraps)
    hot_markers = [m for m, k in dict(reversed(all_markers())).items() if k in HOT_KINDS]
    r = pl.lit(starts).search_sorted(pl.col("n"), side="right").cast(pl.Int64) - 1
    lf = lf.with_columns(_r=r).filter(
        (pl.col("_r") >= 0)
        & (pl.col("n") <= pl.lit(ends).gather(pl.col("_r").clip(lower_bound=0)))
        & pl.col("marker").is_in(hot_markers)
    )
    got = lf.collect()
    idx = got.get_column("_r")
    got = finish(got.drop("_r"))
    assert got.height == idx.len()  # no request kind is verified: finish drops none of these rows
    given = [c for c in runs.columns if c not in RECORD_SCHEMA and c not in RUN_KIND_COLUMNS]
    extra = runs.select(given).with_row_index("_r").with_columns(pl.col("_r").cast(pl.Int64))
    return got.with_columns(idx.alias("_r")).join(extra, on="_r", how="left", maintain_order="left").drop("_r")


register_samples(KIND, SAMPLES)
