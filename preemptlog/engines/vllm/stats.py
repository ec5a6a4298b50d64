"""The periodic stats lines of V0 (metrics.py), V1 (loggers.py) and V1's Rust frontend (log_stats.rs).

Schema of :func:`parse` (``STATS_SCHEMA``): one row per stats line.
``waiting`` is V1 ``Waiting`` or V0 ``Pending`` (both include
recompute-preempted requests). ``kv_usage`` is the device KV cache usage in
percent (GPU, or XPU... from 0.30; the Rust frontend's ``GPU KV cache used``, the engines'
mean). ``preemptions`` is the V1 ``Preemptions:`` field (0.11.1+; stock Python-frontend builds
never print it), null when absent; on a Rust-frontend line it is never null (below).
``prefix_hit`` is V1's ``Prefix cache hit rate`` or the V0 follow-up line
``Prefix cache hit rate: GPU: x%`` joined to its stats line. These percentages are shares of used
blocks (of hit tokens): a value that is not a finite number within [0, 100] (``PERCENT_MAX`` for the
rounding) is no reading, null (``inf%``, ``nan%``, ``250.0%``; never 0, never read from the next
field), and :func:`not_readings_warning` says how many with the first file:line.

**The Rust frontend's line** (``VLLM_USE_RUST_FRONTEND=1``, vLLM 0.33.0 and 0.34.0:
``rust/src/llm/src/log_stats.rs``, the ``vllm-rs`` binary of the wheel, which carries the format
strings below): every ``VLLM_LOG_STATS_INTERVAL`` seconds (10 by default), summed over all
engines, at INFO while busy and DEBUG while idle::

    Avg prompt tput: {:.1} toks/s, Avg generation tput: {:.1} toks/s, Reqs Running: {n}, Waiting: {m}
    [, Deferred: {d} reqs][, Preemptions: {p}], GPU KV cache used: {:.1}%, Prefix cache hit rate: {:.1}%
    [, External prefix cache hit rate: {:.1}%]

``p`` is the increase of the frontend's preemption counter since the previous tick, printed only
when ``p > 0``: a line without it counts 0 (so the line family counts exactly, 0 included; the
Python logger's count is zeroed before it is tested, PR #38452). The line is the message of the
Rust ``tracing`` subscriber, whatever prefix it writes: vLLM's own (``(RustFrontend pid=N) INFO
MM-DD HH:MM:SS [llm/src/log_stats.rs:300]``, read by the single log pass as any vLLM header) or
``tracing``'s default (``2026-12-01T10:00:10.123456Z  INFO vllm_llm::log_stats: ...``, with ANSI
colours on a terminal): the fields are read from the message. Its rows are ``family``
:data:`RUST_FAMILY`, ``engine`` ``"all"`` (the line does not say which engine preempted).
The literal marker joins the single log pass as a record family of the vLLM log
(:data:`RUST_STATS`, registered below with its samples); its records are ``stats`` records.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from ...model.evidence import PERCENT_MAX
from ...sources.registry import RecordFamily, SourceOutput, TimeContext, register_family, register_samples

RUST_MARKER = "Avg prompt tput: "  # the Rust frontend's line (the Python loggers write "throughput")
RUST_FAMILY = "v1-rust"  # the stats frame's family of the Rust frontend's lines ("v0", "v1": the Python loggers')
RUST_STATS = "vllm-rust-stats"  # the record family (sources.registry) of the Rust frontend's line
V1_STATS_FAMILIES = frozenset({"v1", RUST_FAMILY})  # the families a V1 engine writes
RUST_INTERVAL_S = 10  # VLLM_LOG_STATS_INTERVAL's default: the seconds a line's counts cover
RUST_WHOLE_RE = r"KV cache used: [^\s%]*%"  # the field after the Preemptions one: the line was not cut before it

# A percentage field's value as written: what stands up to its "%" (kept: a value cut at the end of
# the line has none).
_PCT = r"([^\s%]*%?)"

# The fields of each line family: column -> (dtype, regex in the Python loggers' line (V0
# metrics.py, V1 loggers.py), regex in the Rust frontend's line; None: the family has no such field).
FIELDS: dict[str, tuple[Any, str | None, str | None]] = {
    "prompt_tput": (pl.Float64, r"Avg prompt throughput: ([\d.]+)", r"Avg prompt tput: ([\d.]+)"),
    "gen_tput": (pl.Float64, r"Avg generation throughput: ([\d.]+)", r"Avg generation tput: ([\d.]+)"),
    "running": (pl.Int64, r"Running: (\d+) reqs", r"Reqs Running: (\d+)"),
    "waiting": (pl.Int64, r"(?:Waiting|Pending): (\d+) reqs", r"Reqs Running: [\d,]+, Waiting: (\d+)"),
    "swapped": (pl.Int64, r"Swapped: (\d+) reqs", None),
    "deferred": (pl.Int64, r"Deferred: (\d+) reqs", r"Deferred: (\d+) reqs"),
    "preemptions": (pl.Int64, r"Preemptions: (\d+)", r"Preemptions: (\d+)"),
    # the percentages: the first field of that name (a V0 line's device usage comes before its CPU
    # one), its whole value (_percent judges it: a value that is no percentage is not a reading)
    "kv_usage": (pl.Float64, rf"[A-Z]+ KV cache usage: {_PCT}", rf"[A-Z]+ KV cache used: {_PCT}"),
    "cpu_kv_usage": (pl.Float64, rf"CPU KV cache usage: {_PCT}", None),
    "prefix_hit": (pl.Float64, rf"Prefix cache hit rate: {_PCT}", rf"Prefix cache hit rate: {_PCT}"),
}
PERCENT_FIELDS = ("kv_usage", "cpu_kv_usage", "prefix_hit")
V0_PREFIX_RX = rf"Prefix cache hit rate: GPU: {_PCT}"  # V0's follow-up line (kind stats_prefix)
# vLLM computes these as shares of used blocks (or of hit tokens): a reading is a finite number in
# [0, 100] (model.evidence.PERCENT_MAX: the rounding of "%.1f").


def _num(text: pl.Expr, rx: str, dtype) -> pl.Expr:
    return text.str.extract(rx, 1).str.replace_all(",", "", literal=True).cast(dtype, strict=False)


def _percent(text: pl.Expr, rx: str) -> tuple[pl.Expr, pl.Expr]:
    """A percentage field (``rx``'s group: its value up to its ``%``) -> (reading, not a reading).

    The reading is the value when it is a finite number within [0, PERCENT_MAX], else null (``inf%``,
    ``nan%``, ``250.0%``, ``-1%``, ``%``: missing, never 0 and never a value). The second is true for
    such a field, false where the line has no such field or ends inside its value (a cut line)."""
    tok = text.str.extract(rx, 1)
    whole = tok.str.ends_with("%")
    num = tok.str.strip_suffix("%").cast(pl.Float64, strict=False)
    ok = (whole & num.is_finite() & num.is_between(0.0, PERCENT_MAX)).fill_null(False)
    cut = (~whole & text.str.strip_chars_end().str.ends_with(tok)).fill_null(False)
    return pl.when(ok).then(num), tok.is_not_null() & ~ok & ~cut


def _value(text: pl.Expr, name: str, rx: str | None, dtype: Any) -> pl.Expr:
    if rx is None:
        return pl.lit(None, dtype)
    return _percent(text, rx)[0] if name in PERCENT_FIELDS else _num(text, rx, dtype)


def _field(name: str, rust: pl.Expr) -> pl.Expr:
    dtype, py_rx, rust_rx = FIELDS[name]
    t = pl.col("text")
    py = _value(t, name, py_rx, dtype)
    rs = _value(t, name, rust_rx, dtype)
    if name == "preemptions":
        # The Rust logger prints the field only when p > 0: no field is 0, on a whole line (one that
        # reaches the KV field after it); a line cut before it says nothing.
        rs = pl.when(t.str.contains(RUST_WHOLE_RE)).then(rs.fill_null(0)).otherwise(rs)
    return pl.when(rust).then(rs).otherwise(py).alias(name)


def parse(records: pl.DataFrame) -> pl.DataFrame:
    rows = records.filter(pl.col("kind") == "stats")
    t = pl.col("text")
    rust = t.str.contains(RUST_MARKER, literal=True)
    engine = (
        pl.when(rust | t.str.contains(r"\d+ Engines Aggregated:"))
        .then(pl.lit("all"))
        .otherwise(t.str.extract(r"Engine (\d+):", 1).cast(pl.Int64, strict=False).cast(pl.String))
        .fill_null("0")
    )
    family = (
        pl.when(rust)
        .then(pl.lit(RUST_FAMILY))
        .when(t.str.contains(r"(?:Pending|Swapped): \d+ reqs"))
        .then(pl.lit("v0"))
        .otherwise(pl.lit("v1"))
    )
    stats = rows.select(
        "time",
        "time_precision",
        "stream",
        "seq",
        engine.alias("engine"),
        # "N Engines Aggregated:" says how many engines it sums; the Rust frontend's line sums every
        # engine without saying (rust/src/llm/src/log_stats.rs): null
        pl.when(rust)
        .then(pl.lit(None, pl.Int64))
        .otherwise(t.str.extract(r"(\d+) Engines Aggregated:", 1).cast(pl.Int64, strict=False).fill_null(1))
        .alias("engines"),
        family.alias("family"),
        *(_field(name, rust) for name in FIELDS),
        "source",
        pl.col("n").alias("line"),
    )
    # V0 0.5.5+: the prefix cache hit rate is a separate line right after the stats line.
    v0_prefix = records.filter(pl.col("kind") == "stats_prefix").select(
        "stream",
        "seq",
        _percent(pl.col("text"), V0_PREFIX_RX)[0].alias("_gpu_hit"),
    )
    if v0_prefix.height and stats.height:
        stats = stats.sort("seq")
        joined = v0_prefix.sort("seq").join_asof(
            stats.select("stream", "seq").with_columns(pl.col("seq").alias("_stats_seq")),
            on="seq",
            by="stream",
            strategy="backward",
            check_sortedness=False,
        )
        joined = (
            joined.filter(pl.col("_stats_seq").is_not_null()).group_by("_stats_seq").agg(pl.col("_gpu_hit").first())
        )
        stats = (
            stats.join(joined, left_on="seq", right_on="_stats_seq", how="left")
            .with_columns(prefix_hit=pl.coalesce("prefix_hit", "_gpu_hit"))
            .drop("_gpu_hit")
        )
    return stats.sort("seq")


# What a note calls each percentage field (the Rust frontend's "KV cache used" is the KV cache usage).
PERCENT_WORDS = {
    "kv_usage": "KV cache usage",
    "cpu_kv_usage": "CPU KV cache usage",
    "prefix_hit": "prefix cache hit rate",
}


_BAD_SCHEMA = {
    "stream": pl.Int64,
    "seq": pl.Int64,
    "source": pl.String,
    "line": pl.Int64,
    "field": pl.String,
    "value": pl.String,
}


def not_readings(records: pl.DataFrame) -> pl.DataFrame:
    """The percentage fields of the stats lines (and of V0's prefix cache line) that are not a reading
    (:func:`_percent`): one row per field, in the bundle's order (``stream``, ``seq``, ``source``, ``line``,
    ``field``, ``value`` as written)."""
    t = pl.col("text")
    rust = t.str.contains(RUST_MARKER, literal=True)
    stats = records.filter(pl.col("kind") == "stats")
    prefix = records.filter(pl.col("kind") == "stats_prefix")
    parts = []
    for name in PERCENT_FIELDS:
        _, py_rx, rust_rx = FIELDS[name]
        for rx, which in ((py_rx, ~rust), (rust_rx, rust)):
            if rx is not None and stats.height:
                parts.append(_bad_rows(stats.filter(which), rx, name))
    if prefix.height:
        parts.append(_bad_rows(prefix, V0_PREFIX_RX, "prefix_hit"))
    if not parts:
        return pl.DataFrame(schema=_BAD_SCHEMA)
    return pl.concat(parts).sort("stream", "seq", maintain_order=True)


def _bad_rows(rows: pl.DataFrame, rx: str, name: str) -> pl.DataFrame:
    t = pl.col("text")
    return rows.filter(_percent(t, rx)[1]).select(
        pl.col("stream").cast(pl.Int64),
        pl.col("seq").cast(pl.Int64),
        pl.col("source").cast(pl.String),
        pl.col("n").cast(pl.Int64).alias("line"),
        pl.lit(name).alias("field"),
        t.str.extract(rx, 1).alias("value"),
    )


def not_readings_warning(records: pl.DataFrame) -> str | None:
    """One warning for every percentage of the stats lines that is not a reading: how many, and the first."""
    bad = not_readings(records)
    if bad.height == 0:
        return None
    first = bad.row(0, named=True)
    value = first["value"] if len(first["value"]) <= 24 else first["value"][:23] + "…"
    lines = bad.select("stream", "seq").n_unique()
    return (
        f"{bad.height} KV cache usage / prefix cache hit rate value(s) in {lines} stats line(s) are not a percentage "
        f"within 0-100 (first: {PERCENT_WORDS[first['field']]} '{value}' at {first['source']}:{first['line']}): "
        "each is read as missing (not evaluable), never as 0 or as a reading"
    )


def rust_note(records: pl.DataFrame) -> SourceOutput:
    """The record family's output: no frame (its lines are the stats frame's, :func:`parse`), one
    note saying what the Rust frontend's counts are."""
    out = SourceOutput()
    if records.height == 0:
        return out
    rows = records.filter((pl.col("kind") == "stats") & pl.col("text").str.contains(RUST_MARKER, literal=True))
    if rows.height == 0:
        return out
    p = rows.get_column("text").str.extract(r"Preemptions: (\d+)", 1).cast(pl.Int64, strict=False)
    shown = p.drop_nulls()
    total = int(shown.sum()) if shown.len() else 0
    out.notes.append(
        f"{rows.height} stats line(s) of vLLM's Rust frontend (VLLM_USE_RUST_FRONTEND=1, rust/src/llm/src/"
        f"log_stats.rs) count {total} preemption(s), exactly: 'Preemptions: p' is the preemptions in the tick of "
        f"its logger before the line (VLLM_LOG_STATS_INTERVAL, {RUST_INTERVAL_S} s by default), printed only when "
        f"p > 0, so the {rows.height - shown.len()} line(s) without it count 0; each line sums every engine, so its "
        "events are engine 'all' (the line does not say which engine preempted) and its KV cache usage is the "
        "engines' mean"
    )
    return out


def _from_records(records: pl.DataFrame, ctx: TimeContext) -> SourceOutput:
    return rust_note(records)


register_family(RecordFamily(name=RUST_STATS, markers=[(RUST_MARKER, "stats")], from_records=_from_records))

# Lines built from the format strings of log_stats.rs (vllm-rs of the 0.33.0 and 0.34.0 wheels), in
# both prefixes; ``_stats``: the fields of the stats row the line makes (tests/engines/test_rust_frontend.py).
ESC = "\x1b"
SAMPLES: list[tuple[str, dict[str, Any]]] = [
    (
        "(RustFrontend pid=4121) INFO 12-01 10:00:20 [llm/src/log_stats.rs:300] Avg prompt tput: 0.0 toks/s, "
        "Avg generation tput: 2100.1 toks/s, Reqs Running: 55, Waiting: 20, Preemptions: 6, GPU KV cache used: "
        "98.7%, Prefix cache hit rate: 35.2%",
        {
            "kind": "stats",
            "level": "INFO",
            "proc": "RustFrontend pid=4121",
            "mo": 12,
            "ss": 20,
            "_stats": {"family": RUST_FAMILY, "engine": "all", "running": 55, "waiting": 20, "preemptions": 6},
        },
    ),
    (
        "(RustFrontend pid=4121) DEBUG 12-01 10:00:40 [llm/src/log_stats.rs:300] Avg prompt tput: 0.0 toks/s, "
        "Avg generation tput: 0.0 toks/s, Reqs Running: 0, Waiting: 0, GPU KV cache used: 0.0%, Prefix cache hit "
        "rate: 12.5%",
        {
            "kind": "stats",
            "level": "DEBUG",
            "_stats": {"family": RUST_FAMILY, "running": 0, "waiting": 0, "preemptions": 0, "kv_usage": 0.0},
        },
    ),
    (
        "2026-12-01T10:00:30.250117Z  INFO vllm_llm::log_stats: Avg prompt tput: 1536.0 toks/s, Avg generation "
        "tput: 1890.2 toks/s, Reqs Running: 41, Waiting: 23, Deferred: 2 reqs, Preemptions: 3, GPU KV cache "
        "used: 99.2%, Prefix cache hit rate: 12.5%, External prefix cache hit rate: 4.0%",
        {
            "kind": "stats",
            "fdate": "2026-12-01",
            "ftime": "10:00:30",
            "ffrac": "250117",
            "fzone": "Z",
            "_stats": {
                "family": RUST_FAMILY,
                "prompt_tput": 1536.0,
                "running": 41,
                "waiting": 23,
                "deferred": 2,
                "preemptions": 3,
                "kv_usage": 99.2,
                "prefix_hit": 12.5,
            },
        },
    ),
    (
        f"{ESC}[2m2026-12-01T10:00:50.000001Z{ESC}[0m {ESC}[32m INFO{ESC}[0m {ESC}[2mvllm_llm::log_stats{ESC}[0m"
        f"{ESC}[2m:{ESC}[0m Avg prompt tput: 10.0 toks/s, Avg generation tput: 20.0 toks/s, Reqs Running: 7, "
        "Waiting: 0, GPU KV cache used: 41.5%, Prefix cache hit rate: 0.0%",
        {
            "kind": "stats",
            "fdate": "2026-12-01",
            "ftime": "10:00:50",
            "_stats": {"family": RUST_FAMILY, "engine": "all", "running": 7, "preemptions": 0, "kv_usage": 41.5},
        },
    ),
]
register_samples(RUST_STATS, SAMPLES)
