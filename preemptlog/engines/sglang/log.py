"""SGLang's log lines -> retraction events, stats rows and configuration rows.

The single log pass (sources/vllm_log.py ``scan``) reads SGLang's lines with the markers that
sources/sglang_log.py registers; here the records of those kinds become frames. Every line is
read from its ``text`` (the whole line, ANSI codes removed; the message of a JSON line).

**Retraction lines** (scheduler ``update_running_batch``, one family per release line; each
wording read in the released wheels, file and lines in engine_facts.py):

=====================  =======  ==============================================================
versions               level    message
=====================  =======  ==============================================================
0.1.x-0.2.x            INFO     ``decode out of memory happened, #retracted_reqs: N, #new_token_ratio: a -> b``
0.3.0-0.4.6            INFO     ``Decode out of memory happened. #retracted_reqs: N, #new_token_ratio: a -> b``
0.4.7-0.5.5            INFO     ``KV cache pool is full. Retract requests. #retracted_reqs: N, #new_token_ratio: a -> b``
0.5.10+                WARNING  ``KV cache pool is full. Retract requests. #retracted_reqs: N, #new_tokens_gained: G[, #mamba_num_gained: M], #new_token_ratio: a -> b``
0.5.10+ (forced)       WARNING  ``Testing retraction. #retracted_reqs: N, #new_tokens_gained: G`` (``SGLANG_TEST_RETRACT``)
=====================  =======  ==============================================================

Not retractions: ``Decode out of memory. Try to lower your batch size.`` (0.4.x
schedule_batch.py, an allocation error) and 0.1-0.2's ``Decode out of memory. This should never
happen.`` (kind ``sgl_alloc_error``, counted in a note), and the ``server_args`` dump, whose
``retraction_policy='length'`` no marker matches.

**The prefix** (utils ``configure_logger``): ``[%Y-%m-%d %H:%M:%S{.ms}{ DPi}{ PPi}{ TPi}{ EPi}] message``,
full year, no level, no ``file:line`` (0.4.10-0.5.5 order DP TP EP PP; 0.5.10+ DP PP ATTN_CP
MOE_DP TP EP; 0.1-0.2 print the bare message). The single pass reads its time as a full
timestamp (local time, ``--tz``). ``SGLANG_LOGGING_CONFIG_PATH`` can replace the format (a JSON
formatter, an ISO prefix): then the ranks are not in the line and the process (JSON
``processName``/``process``) stands in for the rank.

**TP ranks**: every TP rank of a DP group runs the same scheduler step and prints the same
retraction line (sglang issue #4184: ``TP8`` .. ``TP15``), and so does every PP stage (each runs the
scheduler step, ``PP0 TP0`` and ``PP1 TP0`` are two copies): a process is told by its rank tokens other
than DP (PP, ATTN_CP, MOE_DP, TP, EP; :func:`copy_rank`). Per (stream, DP rank, message), the k-th
line of each TP rank within one burst (lines no more than COPY_WINDOW_US apart: TP copies differ by
a few ms with ``SGLANG_LOG_MS``, or straddle a second boundary without it) are one step, whatever
order the ranks' lines come in; the lowest rank's line is kept. So the count is one event per
retracted request per (step, DP rank), never merged across DP ranks, and a rank that printed the
line twice gives two. Lines without a rank (0.1-0.2's bare messages) collapse by the TP size the
log shows (server_args ``tp_size``, or the ranks its lines name): T identical lines in a row are
one step. Stats lines are grouped the same way.

Frames: ``sgl_retractions`` (:data:`RETRACTIONS_SCHEMA`, one row per kept retraction line),
``sgl_batches`` (:data:`BATCHES_SCHEMA`, one row per kept Decode/Prefill batch line) and
``sgl_config`` (the configuration rows, CONFIG_SCHEMA, also returned as the source's config).
"""

from __future__ import annotations

from typing import Any

import polars as pl

from ...model.containers import log_containers, with_container
from ...model.events import CAPPED_SCHEMA, capped_count, capped_rows, capped_warning
from ...model.evidence import PERCENT_MAX
from ...model.frames import polars_schema
from ...model.schemas import CONFIG_SCHEMA, STATS_SCHEMA
from ..common import arg_pattern as _arg
from ..registry import ServerStart

ENGINE_KIND = "sglang"
RECORD_PREFIX = "sgl_"  # every record kind of SGLang's lines in the single log pass starts with it

# record kinds (sources/sglang_log.py MARKERS)
RETRACT = "sgl_retract"
ALLOC_ERROR = "sgl_alloc_error"
DECODE = "sgl_decode"
PREFILL = "sgl_prefill"
STARTUP = "sgl_startup"
ARGS = "sgl_args"
KV_ALLOC = "sgl_kv_alloc"
WEIGHTS = "sgl_weights"
KINDS = (RETRACT, ALLOC_ERROR, DECODE, PREFILL, STARTUP, ARGS, KV_ALLOC, WEIGHTS)

# The bracketed prefix, anywhere in the line (a docker / kubectl / compose prefix may come first).
PREFIX_RE = r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?((?: [A-Z][A-Z_]*\d+)*)\] "
RETRACT_RE = (
    r"(?P<head>KV cache pool is full\. Retract requests\.|Testing retraction\.|Decode out of memory happened\."
    r"|decode out of memory happened,)\s*#retracted_reqs: (?P<n>\d+)"
    r"(?:, #new_tokens_gained: (?P<gained>-?\d+))?"
    r"(?:, #mamba_num_gained: (?P<mamba>-?\d+))?"
    r"(?:, #new_token_ratio: (?P<r0>\d+(?:\.\d+)?) -> (?P<r1>\d+(?:\.\d+)?))?"
)
# A retraction line cut before its count could be read (a truncated capture, a line wrapped at a fixed
# width, a log cut mid-write): SGLang said it retracted, not how many (source.py VERIFY keeps it).
CUT_RE = (
    r"(?:KV cache pool is full\. Retract requests\.|Testing retraction\.|Decode out of memory happened\."
    r"|decode out of memory happened,)\s*(?:#[a-z_]*(?::\s*)?)?$"
)
MESSAGE_RE = r"((?:KV cache pool is full|Testing retraction|[Dd]ecode out of memory happened)\..*|decode out of memory happened,.*)$"
BATCH_MESSAGE_RE = r"((?:Decode|Prefill) batch.*|#running-req: .*)$"

# Version families told by the retraction wording (the scheduler's log call per release).
WORDING = {
    "decode out of memory happened,": "0.1-0.2",
    "Decode out of memory happened.": "0.3.0-0.4.6",
    "KV cache pool is full. Retract requests.": "0.4.7-0.5.5",
    "Testing retraction.": "0.5.10+",
}
NEWEST_WORDING = "0.5.10+"  # the 0.4.7 wording with #new_tokens_gained

RETRACTIONS_SCHEMA = {
    "time": "Datetime(time_unit='us', time_zone='UTC')",
    "time_precision": "String",
    "stream": "Int32",
    "seq": "UInt32",
    "source": "String",
    "line": "UInt32",
    "seg": "UInt32",
    "engine": "String",  # the DP rank ("0" without one): the engine index within the server
    "tp": "Int64",  # the TP rank of the kept line (null: not in the line)
    "ranks": "String",  # the prefix's rank tokens as printed (" DP0 TP3")
    "rank_lines": "UInt32",  # lines of the same retraction printed by other ranks, collapsed into this one
    "wording": "String",  # the version family of the wording (WORDING)
    "kv_full": "Boolean",  # SGLang's own statement: the KV pool could not hold the next decode step
    "retracted": "Int64",  # #retracted_reqs
    "new_tokens_gained": "Int64",  # 0.5.10+: KV tokens freed by the retraction
    "mamba_num_gained": "Int64",  # 0.5.10+ hybrid mamba pools: mamba slots freed
    "ratio_before": "Float64",  # #new_token_ratio a -> b: the admission ratio before the retraction
    "ratio_after": "Float64",  # ... and the batch's own estimate after it
    "raw": "String",
}

BATCHES_SCHEMA = {
    "time": "Datetime(time_unit='us', time_zone='UTC')",
    "time_precision": "String",
    "stream": "Int32",
    "seq": "UInt32",
    "source": "String",
    "line": "UInt32",
    "engine": "String",
    "phase": "String",  # decode | prefill
    "running": "Int64",
    "queue": "Int64",
    "tokens": "Int64",  # #token (or #full token of a hybrid pool)
    "token_usage": "Float64",  # 0-1: the largest usage of the line's pools (SGLang's own max_pool_usage)
    "full_token_usage": "Float64",
    "swa_token_usage": "Float64",
    "mamba_usage": "Float64",
    "gen_tput": "Float64",
    "input_tput": "Float64",
    "new_tokens": "Int64",  # prefill: #new-token
    "cached_tokens": "Int64",  # prefill: #cached-token
    "retracted_queue": "Int64",  # PD decode: #retracted-req (the prealloc queue's retracted requests)
}

RAW_LIMIT = 2000


def _num(text: pl.Expr, rx: str, dtype: Any) -> pl.Expr:
    return text.str.extract(rx, 1).cast(dtype, strict=False)


def _ranks(text: pl.Expr, proc: pl.Expr | None = None) -> tuple[pl.Expr, pl.Expr, pl.Expr]:
    """(rank tokens as printed, DP rank as the engine, TP rank) of a line: from the bracketed
    prefix, 0.2's ``[gpu_id=N]``, 0.1's ``Rank N:``, or (a JSON formatter) the process name SGLang
    gives its schedulers (``sglang::scheduler_DP1_TP2``)."""
    ranks = text.str.extract(PREFIX_RE, 1)
    who = pl.lit(None, pl.String) if proc is None else proc
    dp = pl.coalesce(ranks.str.extract(r"(?:^| )DP(\d+)", 1), _proc_tokens(who).str.extract(r"\bDP(\d+)\b", 1))
    tp = pl.coalesce(
        ranks.str.extract(r"(?:^| )TP(\d+)", 1),
        text.str.extract(r"\[gpu_id=(\d+)\]", 1),
        text.str.extract(r"(?:^|\] )Rank (\d+): ", 1),
        who.str.extract(r"(?:^|[\s_:])TP(\d+)", 1),
    ).cast(pl.Int64, strict=False)
    engine = dp.cast(pl.Int64, strict=False).cast(pl.String).fill_null("0")
    return ranks, engine, tp


# The rank tokens of a scheduler process other than its DP rank (0.5.10+ prefix order DP PP ATTN_CP MOE_DP TP
# EP; 0.4.10-0.5.5 DP TP EP PP): every process of one DP rank runs the same scheduler step (each PP stage
# runs update_running_batch too, scheduler_pp_mixin event_loop_pp) and prints the same line.
COPY_RANKS = ("PP", "ATTNCP", "MOEDP", "TP", "EP")


def _proc_tokens(proc: pl.Expr) -> pl.Expr:
    """A scheduler's process name (``sglang::scheduler_DP1_PP0_MOE_DP0_TP2``) or the prefix's rank
    tokens with the two-word tokens joined (``MOE_DP`` -> ``MOEDP``, ``ATTN_CP`` -> ``ATTNCP``) and
    ``_`` read as a space, so ``DP`` is never read out of ``MOE_DP``."""
    return (
        proc.str.replace_all("ATTN_CP", "ATTNCP", literal=True)
        .str.replace_all("MOE_DP", "MOEDP", literal=True)
        .str.replace_all("_", " ", literal=True)
    )


def copy_rank(text: pl.Expr, proc: pl.Expr | None = None) -> pl.Expr:
    """Which process of its DP rank printed the line: its rank tokens other than DP (PP, ATTN_CP,
    MOE_DP, TP, EP) from the bracketed prefix, else from the process name a JSON formatter gives,
    numbers zero-padded so that they sort (``PP000001 TP000000``); null when the line names none."""
    ranks = _proc_tokens(text.str.extract(PREFIX_RE, 1))
    who = pl.lit(None, pl.String) if proc is None else _proc_tokens(proc)
    rx = r"\b(?:" + "|".join(COPY_RANKS) + r")\d+\b"

    def key(s: pl.Expr) -> pl.Expr:
        toks = s.str.extract_all(rx).list.eval(
            pl.element().str.extract(r"^([A-Z]+)", 1) + pl.element().str.extract(r"(\d+)$", 1).str.pad_start(6, "0")
        )
        return pl.when(toks.list.len() > 0).then(toks.list.join(" "))

    return pl.coalesce(key(ranks), key(who))


# TP copies of one scheduler step: a few ms apart with SGLANG_LOG_MS, up to a second apart across a
# second boundary without it. Lines of one message on one DP rank no further apart than this are one burst.
COPY_WINDOW_US = 2_000_000


def tp_sizes(records: pl.DataFrame) -> pl.DataFrame:
    """Per stream, the TP size the log shows (``stream``, ``tp_size``): server_args' ``tp_size``, or
    one more than the largest TP rank any SGLang line names (``TPn``, ``[gpu_id=n]``, ``Rank n:``)."""
    t = pl.col("text")
    _, _, tp = _ranks(t, pl.col("proc") if "proc" in records.columns else None)
    return (
        records.select(
            "stream",
            pl.when(pl.col("kind") == ARGS)
            .then(t.str.extract(r"tp_size['\"]?\s*[=:]\s*(\d+)", 1))
            .cast(pl.Int64, strict=False)
            .alias("_a"),
            (tp + 1).alias("_r"),
        )
        .group_by("stream")
        .agg(pl.max_horizontal(pl.col("_a").max(), pl.col("_r").max()).fill_null(1).alias("tp_size"))
    )


def _one_per_rank_group(df: pl.DataFrame, message: str, sizes: pl.DataFrame | None = None) -> tuple[pl.DataFrame, int]:
    """One line per scheduler step of a DP rank: the copies its TP ranks printed collapse into the
    lowest rank's line. Returns the kept rows (``rank_lines``: copies of it printed by other ranks)
    and how many lines were collapsed.

    Every TP rank (and PP stage) of a DP group prints the same line in the same step, so the k-th line
    of a message from each process of a DP rank (:func:`copy_rank`; per stream) within one burst (lines of that message no more than
    COPY_WINDOW_US apart) are copies of one step, whatever order the ranks' lines come in and whether
    the stamps carry milliseconds (``SGLANG_LOG_MS``) or straddle a second; never across DP ranks. A
    rank that printed the line twice in a burst printed two steps. Lines that name no rank (0.1-0.2's
    bare messages) are copies when the log shows a TP size T > 1 (``sizes``): each run of T identical
    lines (same message and time, one after the other) is one step.
    """
    if df.height == 0:
        return df.with_columns(rank_lines=pl.lit(0, pl.UInt32)), 0
    who = pl.coalesce(
        pl.col("_copy"), pl.col("tp").cast(pl.String).str.pad_start(6, "0"), pl.col("proc"), pl.lit("")
    )  # zero-padded: TP10 sorts after TP9
    key = ["stream", "engine", message]
    t = pl.col("time")
    prev = t.shift(1).over(key)
    new_burst = (
        (t.is_null() != prev.is_null())
        | ((t - prev).dt.total_microseconds() > COPY_WINDOW_US).fill_null(False)
        | (pl.int_range(pl.len()).over(key) == 0)
    )
    d = (
        df.with_columns(_who=who, _i=pl.int_range(pl.len(), dtype=pl.UInt32))
        .sort("stream", "seq")
        .with_columns(_burst=new_burst.cum_sum().over(key))
        .with_columns(_k=pl.int_range(pl.len()).over([*key, "_burst", "_who"]))
    )
    # Lines without a rank: runs of identical lines (same message and time) of T copies each.
    ranked = d.filter(pl.col("_who") != "")
    bare = d.filter(pl.col("_who") == "")
    if bare.height:
        size = (
            bare.join(sizes, on="stream", how="left").get_column("tp_size").fill_null(1)
            if sizes is not None and sizes.height
            else pl.Series([1] * bare.height)
        )
        bare = bare.with_columns(_T=pl.Series(size.to_list(), dtype=pl.Int64))
        same = (pl.col(message) == pl.col(message).shift(1)).fill_null(False) & (
            (t == t.shift(1)).fill_null(False) | (t.is_null() & t.shift(1).is_null())
        )
        bare = bare.with_columns(_run=(~same).cum_sum().over("stream", "engine")).with_columns(
            _pos=pl.int_range(pl.len()).over("stream", "engine", "_run"),
            _len=pl.len().over("stream", "engine", "_run"),
        )
        bare = bare.with_columns(
            _k=(pl.col("_pos") // pl.col("_T")).cast(pl.Int64),
            _burst=pl.col("_run").cast(d.schema["_burst"]),
        ).drop("_T", "_pos", "_len", "_run")
    d = pl.concat([ranked, bare.select(ranked.columns)], how="vertical") if bare.height else ranked
    group = [*key, "_bare", "_burst", "_k"]
    d = d.with_columns(_bare=pl.col("_who") == "").with_columns(_n=pl.len().over(group))
    kept = (
        d.sort("_who", "_i")
        .unique(group, keep="first", maintain_order=True)
        .sort("_i")
        .with_columns(rank_lines=(pl.col("_n") - 1).cast(pl.UInt32))
    )
    return kept.drop("_who", "_i", "_burst", "_k", "_n", "_bare"), df.height - kept.height


def retractions(records: pl.DataFrame) -> tuple[pl.DataFrame, dict[str, int]]:
    """The kept retraction lines (RETRACTIONS_SCHEMA) and counts for the notes."""
    t = pl.col("text")
    rows = records.filter(pl.col("kind") == RETRACT)
    facts: dict[str, Any] = {"lines": rows.height, "collapsed": 0, "test": 0, "zero": 0, "cut": 0, "cut_first": None}
    ranks, engine, tp = _ranks(t, pl.col("proc"))
    f = t.str.extract_groups(RETRACT_RE)
    df = rows.select(
        "time",
        "time_precision",
        "stream",
        "seq",
        "source",
        pl.col("n").alias("line"),
        pl.col("seg"),
        engine.alias("engine"),
        tp.alias("tp"),
        ranks.alias("ranks"),
        pl.col("proc"),
        copy_rank(t, pl.col("proc")).alias("_copy"),
        f.struct.field("head").alias("_head"),
        f.struct.field("n").cast(pl.Int64, strict=False).alias("retracted"),
        f.struct.field("gained").cast(pl.Int64, strict=False).alias("new_tokens_gained"),
        f.struct.field("mamba").cast(pl.Int64, strict=False).alias("mamba_num_gained"),
        f.struct.field("r0").cast(pl.Float64, strict=False).alias("ratio_before"),
        f.struct.field("r1").cast(pl.Float64, strict=False).alias("ratio_after"),
        t.str.extract(MESSAGE_RE, 1).alias("_msg"),
        t.str.strip_chars().str.slice(0, RAW_LIMIT).alias("raw"),
    )
    # Lines cut before their #retracted_reqs: no count to add (how many is unknown), said in a note and
    # in the count's label (summary.log_capability: a lower bound), never dropped without a word.
    # A cut copy of a line another rank of its DP rank printed whole (COPY_WINDOW_US apart) loses nothing.
    cut = df.filter(pl.col("retracted").is_null() & pl.col("raw").str.contains(CUT_RE))
    whole = df.filter(pl.col("retracted").is_not_null())
    if cut.height and whole.height:
        rank = pl.coalesce(pl.col("_copy"), pl.col("tp").cast(pl.String), pl.col("proc"), pl.lit(""))
        near = (
            cut.with_columns(_r=rank)
            .join(whole.with_columns(_r=rank), on=["stream", "engine"], how="inner", suffix="_w")
            .filter(
                (pl.col("_r") != pl.col("_r_w"))
                & ((pl.col("time") - pl.col("time_w")).dt.total_microseconds().abs() <= COPY_WINDOW_US).fill_null(False)
            )
        )
        cut = cut.join(near.select("stream", "seq").unique(), on=["stream", "seq"], how="anti")
    if cut.height:
        first = cut.sort("stream", "seq").row(0, named=True)
        facts["cut"] = cut.height
        facts["cut_first"] = f"{first['source']}:{first['line']}"
    df = df.filter(pl.col("retracted").is_not_null())
    df, facts["collapsed"] = _one_per_rank_group(df, "_msg", tp_sizes(records))
    wording = (
        pl.when(pl.col("_head").str.starts_with("KV cache pool") & pl.col("new_tokens_gained").is_not_null())
        .then(pl.lit(NEWEST_WORDING))
        .otherwise(pl.col("_head").replace_strict(WORDING, default=None, return_dtype=pl.String))
    )
    df = df.with_columns(wording=wording, kv_full=pl.col("_head") != "Testing retraction.")
    # 'Testing retraction.' lines that retracted requests (one that retracted none is counted in "zero"
    # alone: the summary's retraction lines are the ones that retracted some, forced ones among them)
    facts["test"] = df.filter(~pl.col("kv_full") & (pl.col("retracted") > 0)).height
    facts["zero"] = df.filter(pl.col("retracted") == 0).height
    out = df.select(list(RETRACTIONS_SCHEMA)).cast(polars_schema(RETRACTIONS_SCHEMA)).sort("stream", "seq")
    return out, facts


def events(ret: pl.DataFrame) -> pl.DataFrame:
    """One event per retracted request (``#retracted_reqs: N`` is N events) at the line's time.

    Kind ``logged`` (the line states the retraction and its time), no request id (SGLang's line
    names none); ids ``<file>:<line>`` for the first, ``<file>:<line>~q<k>`` for the k-th of the
    line's N; ``cumulative``: requests retracted so far by the engine (DP rank) in the stream.
    """

    return events_and_capped(ret)[0]


def _where() -> pl.Expr:
    """A retraction line's place, ``<file>:<line>[.<seg>]``: its first event's id, the others' before ``~``."""
    return pl.concat_str(
        [
            pl.col("source"),
            pl.lit(":"),
            pl.col("line").cast(pl.String),
            pl.when(pl.col("seg") > 0)
            .then(pl.concat_str([pl.lit("."), pl.col("seg").cast(pl.String)]))
            .otherwise(pl.lit("")),
        ]
    )


def events_and_capped(ret: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """:func:`events` and the lines whose retractions were more than the events made of them
    (model.events.capped_count; events.CAPPED_SCHEMA): the count is the line's N, said whole."""
    r = ret.filter(pl.col("retracted") > 0)
    if r.height == 0:
        return r, pl.DataFrame(schema=CAPPED_SCHEMA)
    r = r.sort("stream", "seq").with_columns(
        _before=(pl.col("retracted").cum_sum() - pl.col("retracted")).over("stream", "engine"),
        _n=capped_count(pl.col("retracted")),
    )
    capped = capped_rows(r, _where(), "logged", pl.col("retracted"), pl.col("_n"))
    r = r.with_columns(_k=pl.int_ranges(1, pl.col("_n") + 1, dtype=pl.Int64)).explode("_k")
    where = _where()
    out = r.select(
        pl.when(pl.col("_k") == 1)
        .then(where)
        .otherwise(pl.concat_str([where, pl.lit("~q"), pl.col("_k").cast(pl.String)]))
        .alias("event_id"),
        "time",
        "time_precision",
        pl.lit(None, pl.Datetime("us", "UTC")).alias("interval_start"),
        pl.lit(None, pl.Datetime("us", "UTC")).alias("interval_end"),
        pl.lit("logged").alias("kind"),
        pl.lit(None, pl.String).alias("request_id"),
        pl.lit(None, pl.String).alias("mode"),
        "engine",
        pl.lit(ENGINE_KIND).alias("engine_kind"),
        (pl.col("_before") + pl.col("_k")).alias("cumulative"),
        "source",
        "line",
        pl.when(pl.col("_k") == 1).then(pl.col("raw")).alias("raw"),
        "stream",
        "seq",
        pl.col("_k").alias("_sub"),
    )
    return out, capped


def forced(events: pl.DataFrame, ret: pl.DataFrame | None) -> pl.Series:
    """Per row of ``events``: whether it is a retraction SGLANG_TEST_RETRACT forced (its line says
    ``Testing retraction.``, ``kv_full`` false), matched to its retraction line by stream and order
    (evidence.py does the same). False for every other row (another engine's, a counter's): those
    say nothing of a forced retraction."""
    if (
        events.height == 0
        or ret is None
        or ret.height == 0
        or not {"stream", "seq", "engine_kind"} <= set(events.columns)
    ):
        return pl.Series("forced", [False] * events.height, dtype=pl.Boolean)
    lines = ret.filter(~pl.col("kv_full")).select(
        pl.col("stream").cast(pl.Int32), pl.col("seq").cast(pl.UInt32), pl.lit(True).alias("_forced")
    )
    j = events.select(
        (pl.col("engine_kind") == ENGINE_KIND).fill_null(False).alias("_own"),
        pl.col("stream").cast(pl.Int32),
        pl.col("seq").cast(pl.UInt32),
    ).join(lines.unique(["stream", "seq"]), on=["stream", "seq"], how="left", maintain_order="left")
    return (j.get_column("_own") & j.get_column("_forced").fill_null(False)).alias("forced")


def batches(records: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """Decode and Prefill batch lines (BATCHES_SCHEMA), one TP rank's per (second, engine, message)."""
    t = pl.col("text")
    rows = records.filter(pl.col("kind").is_in([DECODE, PREFILL]))
    _, engine, tp = _ranks(t, pl.col("proc"))
    usages = t.str.extract_all(r"(?:token usage|mamba usage): (\d+(?:\.\d+)?)").list.eval(
        pl.element().str.extract(r"(\d+(?:\.\d+)?)$", 1).cast(pl.Float64, strict=False)
    )
    df = rows.select(
        "time",
        "time_precision",
        "stream",
        "seq",
        "source",
        pl.col("n").alias("line"),
        engine.alias("engine"),
        tp.alias("tp"),
        pl.col("proc"),
        copy_rank(t, pl.col("proc")).alias("_copy"),
        pl.when(pl.col("kind") == DECODE).then(pl.lit("decode")).otherwise(pl.lit("prefill")).alias("phase"),
        _num(t, r"#running-req: (\d+)", pl.Int64).alias("running"),
        _num(t, r"#queue-req: (\d+)", pl.Int64).alias("queue"),
        _num(t, r"#(?:full )?token: (\d+)", pl.Int64).alias("tokens"),
        usages.list.max().alias("token_usage"),
        _num(t, r"full token usage: (\d+(?:\.\d+)?)", pl.Float64).alias("full_token_usage"),
        _num(t, r"swa token usage: (\d+(?:\.\d+)?)", pl.Float64).alias("swa_token_usage"),
        _num(t, r"mamba usage: (\d+(?:\.\d+)?)", pl.Float64).alias("mamba_usage"),
        _num(t, r"gen throughput \(token/s\): (\d+(?:\.\d+)?)", pl.Float64).alias("gen_tput"),
        _num(t, r"input throughput \(token/s\): (\d+(?:\.\d+)?)", pl.Float64).alias("input_tput"),
        _num(t, r"#new-token: (\d+)", pl.Int64).alias("new_tokens"),
        _num(t, r"#cached-token: (\d+)", pl.Int64).alias("cached_tokens"),
        _num(t, r"#retracted-req: (\d+)", pl.Int64).alias("retracted_queue"),
        t.str.extract(BATCH_MESSAGE_RE, 1).alias("_msg"),
    ).filter(pl.col("running").is_not_null())
    df, collapsed = _one_per_rank_group(df, "_msg")
    return df.select(list(BATCHES_SCHEMA)).cast(polars_schema(BATCHES_SCHEMA)).sort("stream", "seq"), collapsed


def stats_rows(b: pl.DataFrame) -> pl.DataFrame:
    """Batch lines as rows of the stats frame (vllm/stats.py STATS_SCHEMA, family ``sglang``):
    running = #running-req, waiting = #queue-req, kv_usage = token usage in percent, gen_tput
    (decode lines), prompt_tput (prefill lines' input throughput, 0.5.x)."""

    s = b.select(
        "time",
        "time_precision",
        "stream",
        "seq",
        "engine",
        pl.lit(1, pl.Int64).alias("engines"),  # a batch line is one DP rank's scheduler
        pl.lit(ENGINE_KIND).alias("family"),
        pl.col("input_tput").alias("prompt_tput"),
        pl.col("gen_tput"),
        "running",
        pl.col("queue").alias("waiting"),
        pl.lit(None, pl.Int64).alias("swapped"),
        pl.lit(None, pl.Int64).alias("deferred"),
        pl.lit(None, pl.Int64).alias("preemptions"),
        # a fraction of the pool; one beyond [0, 1] (a damaged line) is no reading (model.evidence)
        pl.when((pl.col("token_usage") * 100.0).is_between(0.0, PERCENT_MAX))
        .then(pl.col("token_usage") * 100.0)
        .alias("kv_usage"),
        pl.lit(None, pl.Float64).alias("cpu_kv_usage"),
        pl.lit(None, pl.Float64).alias("prefix_hit"),
        "source",
        "line",
    )
    return s.cast(polars_schema(STATS_SCHEMA))


# ---------------------------------------------------------------------------- configuration

# server_args keys -> config keys (the vLLM path's key where the meaning is the same).
ARG_KEYS = {
    "model_path": "model",
    "served_model_name": "served_model_name",
    "tp_size": "tensor_parallel_size",
    "dp_size": "data_parallel_size",
    "pp_size": "pipeline_parallel_size",
    "mem_fraction_static": "mem_fraction_static",
    "max_running_requests": "max_running_requests",
    "max_total_tokens": "max_total_tokens",
    "chunked_prefill_size": "chunked_prefill_size",
    "max_prefill_tokens": "max_prefill_tokens",
    "schedule_conservativeness": "schedule_conservativeness",
    "schedule_policy": "schedule_policy",
    "retraction_policy": "retraction_policy",
    "page_size": "page_size",
    "enable_dp_attention": "enable_dp_attention",
    "enable_priority_scheduling": "enable_priority_scheduling",
    "speculative_algorithm": "speculative_algorithm",
    "disaggregation_mode": "disaggregation_mode",
    "kv_cache_dtype": "kv_cache_dtype",
    "disable_radix_cache": "disable_radix_cache",
}
# (record kind, config key, regex with one group)
LINE_KEYS: list[tuple[str, str, str]] = [
    (STARTUP, "kv_cache_tokens", r"max_total_num_tokens?=(\d+)"),  # 0.1.x: max_total_num_token=
    (STARTUP, "chunked_prefill_size", r"chunked_prefill_size=(-?\d+)"),
    (STARTUP, "max_prefill_tokens", r"max_prefill_(?:num_)?tokens?=(\d+)"),
    (STARTUP, "max_running_requests", r"max_running_requests=(\d+)"),
    (STARTUP, "max_model_len", r"context_len=(\d+)"),
    (STARTUP, "available_gpu_mem_gib", r"available_[gc]pu_mem=(\d+(?:\.\d+)?) GB"),
    (KV_ALLOC, "kv_pool_tokens_per_rank", r"#tokens: (\d+)"),
    (KV_ALLOC, "kv_cache_memory_gib", r"KV size: (\d+(?:\.\d+)?) GB"),
    (KV_ALLOC, "_k_gib", r"K size: (\d+(?:\.\d+)?) GB"),
    (KV_ALLOC, "_v_gib", r"V size: (\d+(?:\.\d+)?) GB"),
    (WEIGHTS, "total_gpu_memory_gib", r"Load weight begin\. avail mem=(\d+(?:\.\d+)?) GB"),
]
_NOTES = {
    "kv_cache_tokens": "SGLang max_total_num_tokens: the KV pool in tokens (scheduler start-up line)",
    "max_model_len": "SGLang context_len",
    "available_gpu_mem_gib": "GPU memory left after the KV pool (SGLang's docs: keep 5-8 GB)",
    "total_gpu_memory_gib": "free GPU memory before the weights load: what --mem-fraction-static is a fraction of",
    "kv_pool_tokens_per_rank": "tokens of one rank's KV pool ('KV Cache is allocated')",
    "kv_cache_memory_gib": "one rank's KV pool size (K + V)",
}


def config_rows(records: pl.DataFrame, ret: pl.DataFrame, b: pl.DataFrame) -> pl.DataFrame:
    """Configuration rows (vllm/config.py CONFIG_SCHEMA) from the start-up, KV-pool, weight-loading
    and server_args lines, and the derived engine kind, version family and hybrid pool."""

    schema = polars_schema(CONFIG_SCHEMA)
    parts = []
    base: list[str | pl.Expr] = ["time", "source", pl.col("n").alias("line")]
    for kind, key, rx in LINE_KEYS + [(ARGS, k, _arg(a)) for a, k in ARG_KEYS.items()]:
        sub = records.filter(pl.col("kind") == kind)
        if sub.height == 0:
            continue
        parts.append(
            sub.select(
                pl.lit(key).alias("key"),
                pl.col("text").str.extract(rx, 1).alias("value"),
                pl.lit("seen").alias("status"),
                *base,
                pl.lit(_NOTES.get(key), pl.String).alias("note"),
            ).filter(pl.col("value").is_not_null())
        )
    seen = pl.concat(parts) if parts else pl.DataFrame(schema=schema)
    # _arg values end with their delimiter and may be quoted (vllm.config.parse does the same).
    seen = seen.with_columns(
        value=pl.col("value").str.replace(r"[,)}\s]$", "").str.strip_chars("'\""),
    ).filter(pl.col("value") != "None")
    # "K size: a GB, V size: b GB" -> kv_cache_memory_gib = a + b
    k = seen.filter(pl.col("key") == "_k_gib")
    v = seen.filter(pl.col("key") == "_v_gib")
    kv = []
    if k.height and v.height:
        kv.append(
            k.join(v.select("source", "line", pl.col("value").alias("_v")), on=["source", "line"]).select(
                pl.lit("kv_cache_memory_gib").alias("key"),
                (pl.col("value").cast(pl.Float64) + pl.col("_v").cast(pl.Float64)).round(2).cast(pl.String),
                "status",
                "time",
                "source",
                "line",
                pl.lit(_NOTES["kv_cache_memory_gib"]).alias("note"),
            )
        )
    seen = pl.concat([seen.filter(~pl.col("key").str.starts_with("_")), *kv], how="vertical")
    # one row per value stated, per container of a log of several containers' lines (model/containers.py):
    # each container's server states its own, and its events read those
    seen = with_container(seen, log_containers(records), by="line")
    seen = seen.unique(["key", "value", "_ct"], keep="first", maintain_order=True).drop("_ct")
    derived = pl.concat([_derived(records, ret, b), _dp_attention(seen)], how="vertical")
    # SGLang's configuration is the bundle's (no server run of its own: vllm/runs.py numbers vLLM's)
    seen, derived = (x if "run" in x.columns else x.with_columns(run=pl.lit(None, pl.Int32)) for x in (seen, derived))
    return pl.concat([seen.cast(schema), derived.cast(schema)], how="vertical").select(list(CONFIG_SCHEMA))


def _derived(records: pl.DataFrame, ret: pl.DataFrame, b: pl.DataFrame) -> pl.DataFrame:

    rows: list[dict[str, Any]] = []

    def add(key: str, value: str, row: dict[str, Any], note: str) -> None:
        rows.append(
            {
                "key": key,
                "value": value,
                "status": "derived",
                "time": row["time"],
                "source": row["source"],
                "line": row["line"],
                "note": note,
            }
        )

    first = records.filter(pl.col("kind").is_in(list(KINDS))).sort("seq").head(1)
    if first.height:
        r = first.row(0, named=True)
        add("engine_kind", ENGINE_KIND, {**r, "line": r["n"]}, "SGLang's line shapes (sources/sglang_log.py)")
    if ret.height:
        fam = ret.filter(pl.col("wording").is_not_null())
        if fam.height:
            last = fam.row(fam.height - 1, named=True)
            add(
                "sglang_version",
                last["wording"],
                last,
                "the version family of the retraction line's wording (scheduler update_running_batch per release)",
            )
    hybrid = b.filter(pl.col("swa_token_usage").is_not_null() | pl.col("mamba_usage").is_not_null())
    mamba = ret.filter(pl.col("mamba_num_gained").is_not_null())
    if hybrid.height or mamba.height:
        src = (hybrid if hybrid.height else mamba).row(0, named=True)
        kinds = []
        if hybrid.filter(pl.col("swa_token_usage").is_not_null()).height:
            kinds.append("swa")
        if hybrid.filter(pl.col("mamba_usage").is_not_null()).height or mamba.height:
            kinds.append("mamba")
        add(
            "hybrid_pool",
            "+".join(kinds),
            src,
            "a hybrid KV pool: the batch line's swa/mamba usage or the retraction line's #mamba_num_gained",
        )
    return pl.DataFrame(rows, schema=polars_schema(CONFIG_SCHEMA))


def _dp_attention(seen: pl.DataFrame) -> pl.DataFrame:
    """With ``--enable-dp-attention`` and ``--dp-size D`` > 1 SGLang gives each DP rank
    ``max_running_requests // D`` (scheduler / model_runner): the start-up line's
    ``max_running_requests`` is one rank's, the flag is D times it. Rows ``dp_attention_size`` (D) and
    ``max_running_requests_flag`` (the server_args value, when it names one), cited at the server_args
    line; none without DP attention."""
    schema = polars_schema(CONFIG_SCHEMA)
    on = seen.filter((pl.col("key") == "enable_dp_attention") & (pl.col("value").str.to_lowercase() == "true"))
    if on.height == 0:
        return pl.DataFrame(schema=schema).select(list(CONFIG_SCHEMA))
    at = on.select("source", "line")
    args = seen.join(at, on=["source", "line"], how="semi")
    dp = args.filter(pl.col("key") == "data_parallel_size").get_column("value").cast(pl.Int64, strict=False)
    if dp.len() == 0 or dp.max() is None or int(dp.max()) < 2:  # type: ignore[arg-type]
        return pl.DataFrame(schema=schema).select(list(CONFIG_SCHEMA))
    d = int(dp.max())  # type: ignore[arg-type]
    row = on.row(0, named=True)
    rows = [
        {
            **{k: row[k] for k in ("time", "source", "line")},
            "key": "dp_attention_size",
            "value": str(d),
            "status": "derived",
            "note": f"enable_dp_attention with dp_size {d}: SGLang gives each DP rank max_running_requests // {d} "
            "(the start-up line's max_running_requests is one rank's)",
        }
    ]
    flag = args.filter(pl.col("key") == "max_running_requests")
    if flag.height:
        f = flag.row(0, named=True)
        rows.append(
            {
                **{k: f[k] for k in ("time", "source", "line")},
                "key": "max_running_requests_flag",
                "value": f["value"],
                "status": "derived",
                "note": "--max-running-requests as given (server_args): all DP ranks together with DP attention",
            }
        )
    out = pl.DataFrame(rows).with_columns(run=pl.lit(None, pl.Int32))
    return out.cast({k: v for k, v in schema.items() if k in out.columns}).select(list(CONFIG_SCHEMA))


def from_records(records: pl.DataFrame) -> dict[str, Any]:
    """Everything the SGLang lines of the records give: frames, events, stats rows, config rows, notes."""
    rec = records.filter(pl.col("kind").is_in(list(KINDS)))
    ret, facts = retractions(rec)
    b, collapsed_stats = batches(rec)
    cfg = config_rows(rec, ret, b)
    notes: list[str] = []
    if facts["collapsed"]:
        notes.append(
            f"SGLang: {facts['collapsed']} retraction line(s) repeated by other TP ranks of the same DP rank "
            "(the same message in the same scheduler step, a few ms or a second boundary apart) were counted once: "
            "every TP rank prints the scheduler's line"
        )
    if collapsed_stats:
        notes.append(f"SGLang: {collapsed_stats} batch stats line(s) repeated by other TP ranks were read once")
    if facts["test"]:
        notes.append(
            f"SGLang: {facts['test']} 'Testing retraction.' line(s): retractions forced by SGLANG_TEST_RETRACT, "
            "not KV pressure"
        )
    if facts["cut"]:
        notes.append(
            f"SGLang: {facts['cut']} retraction line(s) cut before their #retracted_reqs (first: {facts['cut_first']}): "
            "SGLang retracted there, how many is not in the line, so they are not counted and the count is a lower bound"
        )
    if facts["zero"]:
        notes.append(f"SGLang: {facts['zero']} retraction line(s) retracted no request (#retracted_reqs: 0)")
    alloc = rec.filter(pl.col("kind") == ALLOC_ERROR).height
    if alloc:
        notes.append(
            f"SGLang: {alloc} 'Decode out of memory.' error line(s): failed allocations, not retractions (not counted)"
        )
    bad = b.filter((pl.col("token_usage") * 100.0 > PERCENT_MAX).fill_null(False))
    if bad.height:
        first = bad.sort("stream", "seq").row(0, named=True)
        notes.append(
            f"SGLang: {bad.height} batch line(s) with a token usage beyond 1.0 (first: {first['token_usage']:g} at "
            f"{first['source']}:{first['line']}): read as missing (not evaluable), never as a reading"
        )
    made, capped = events_and_capped(ret)
    return {
        "frames": {"sgl_retractions": ret, "sgl_batches": b, "sgl_config": cfg},
        "events": made,
        "capped": capped,
        "warnings": [capped_warning("retraction")] if capped.height else [],
        "stats": stats_rows(b),
        "config": cfg,
        "notes": notes,
        "counters": {"sglang": {**facts, "alloc_errors": alloc, "batch_lines_collapsed": collapsed_stats}},
    }


def server_start(own: pl.Expr) -> ServerStart:
    """SGLang's server starts (events/servers.py): its ``server_args=`` line (SGLang prints no version:
    the version is ``sglang``). A stream without one (a log cut after start-up) still is a server of
    its own: its first SGLang line stands for the start (another engine's log is never the same
    server), marked ``stands_in``: it dates no start, and beside another SGLang stream it is no second
    server (a rotated or continued file without the line). Every SGLang line names the version (the
    stream's other engines' undated starts go)."""
    args = pl.col("kind") == ARGS
    first = own & (pl.int_range(pl.len()).over("stream", own) == 0) & ~args.any().over("stream")
    return ServerStart(start=args | first, dated=own, version=pl.lit(ENGINE_KIND), stands_in=first)
