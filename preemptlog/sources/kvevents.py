"""vLLM KV cache events (0.9+, ``--kv-events-config``) saved as JSON Lines.

vLLM publishes ``KVEventBatch`` messages over ZMQ (msgspec, ``array_like``):
``[ts, [event, ...], data_parallel_rank?]``, each event a tagged array whose
first element is the class name (facts page section 7)::

    [1796015438.1, [["BlockStored", [101, 102], null, [1, 2, 3], 16, null, "GPU"], ["BlockRemoved", [77], "GPU"]], 0]
    [1796015439.0, [["AllBlocksCleared"]]]

A subscriber that dumps the decoded batches as JSON objects is accepted too::

    {"ts": 1796015438.1, "events": [{"type": "BlockStored", "block_hashes": [101, 102], "block_size": 16}], "data_parallel_rank": 0}

Events carry no request id: this is pool-level evidence only (blocks stored
into / evicted from the prefix cache per second, and resets). A preemption
produces no event. Block counts come from the ``block_hashes`` list (the
first list after the tag in the array form); when hashes are not plain
numbers or strings (e.g. bytes dumped as nested lists) the event still
counts, its blocks do not (``*_blocks`` is then a lower bound, noted).

Reading is vectorised: regexes on each line inside one polars query, no
per-line Python. Lines that are neither shape are counted and reported.

Frame ``kv_events`` (:data:`KV_EVENTS_SCHEMA`), one row per batch line.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import polars as pl

from ..inputs.textio import scan_lines
from .meets import MeetsLog
from .registry import SourceKind, SourceOutput, TimeContext, register, register_samples

if TYPE_CHECKING:
    from ..inputs.files import InputFile

KIND = "kvevents"

KV_EVENTS_SCHEMA = {
    "time": "Datetime(time_unit='us', time_zone='UTC')",
    "time_precision": "String",
    "dp_rank": "Int64",
    "stored_events": "Int64",
    "stored_blocks": "Int64",
    "removed_events": "Int64",
    "removed_blocks": "Int64",
    "cleared": "Int64",
    "source": "String",
    "line": "UInt32",
}

NUM = r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?"
ARRAY_HEAD_RE = rf"^\s*\[\s*({NUM})\s*,\s*\["
DICT_TS_RE = rf'"ts"\s*:\s*({NUM})'
ARRAY_RANK_RE = r"\]\s*,\s*(\d+)\s*\]\s*$"
DICT_RANK_RE = r'"data_parallel_rank"\s*:\s*(\d+)'
TAGS = ("BlockStored", "BlockRemoved", "AllBlocksCleared")
ARRAY_EVENT_RE = r'\[\s*"(?:BlockStored|BlockRemoved)"\s*,\s*\[[^\[\]]*\]'
ARRAY_EVENT_ANY_RE = r'\[\s*"(?:BlockStored|BlockRemoved)"'
DICT_EVENT_RE = r'\{[^{}]*"type"\s*:\s*"(?:BlockStored|BlockRemoved)"[^{}]*\}'
HASHES_ARRAY_RE = r"\[([^\[\]]*)\]$"
HASHES_DICT_RE = r'"block_hashes"\s*:\s*\[([^\[\]]*)\]'


def _sniff(head: str) -> int:
    import re

    lines = [ln for ln in head.splitlines()[:100] if ln.strip()]
    arr = re.compile(rf'^\s*\[\s*{NUM}\s*,\s*\[\s*(?:\]|\[\s*"(?:{"|".join(TAGS)})")')
    dct = re.compile(rf'^\s*\{{.*"events"\s*:\s*\[.*"type"\s*:\s*"(?:{"|".join(TAGS)})"')
    hits = sum(1 for ln in lines if arr.match(ln) or dct.match(ln))
    if hits and hits * 2 >= len(lines):
        return 85
    return 30 if hits else 0


def _count_list(inner: pl.Expr) -> pl.Expr:
    s = inner.str.strip_chars()
    return pl.when(s == "").then(0).otherwise(s.str.count_matches(",", literal=True) + 1).cast(pl.Int64)


def read_file(path: str) -> tuple[pl.DataFrame, dict[str, Any]]:
    """One row per batch line: ts, dp_rank, per-type event and block counts, n."""

    lf = scan_lines(path).filter(pl.col("line").str.strip_chars() != "")
    line = pl.col("line")
    is_dict = line.str.strip_chars_start().str.starts_with("{")
    lf = lf.with_columns(
        _dict=is_dict,
        ts=pl.when(is_dict)
        .then(line.str.extract(DICT_TS_RE, 1))
        .otherwise(line.str.extract(ARRAY_HEAD_RE, 1))
        .cast(pl.Float64, strict=False),
        dp_rank=pl.when(is_dict)
        .then(line.str.extract(DICT_RANK_RE, 1))
        .otherwise(line.str.extract(ARRAY_RANK_RE, 1))
        .cast(pl.Int64, strict=False),
        stored_events=line.str.count_matches(r'"BlockStored"').cast(pl.Int64),
        removed_events=line.str.count_matches(r'"BlockRemoved"').cast(pl.Int64),
        cleared=line.str.count_matches(r'"AllBlocksCleared"').cast(pl.Int64),
        _ev=pl.when(is_dict).then(line.str.extract_all(DICT_EVENT_RE)).otherwise(line.str.extract_all(ARRAY_EVENT_RE)),
        _valid=pl.when(is_dict)
        .then(line.str.contains(r'"events"\s*:\s*\['))
        .otherwise(line.str.contains(ARRAY_HEAD_RE)),
    )
    df = lf.drop("line").collect()
    total = df.height
    # A ts outside 1970-2200 (1e300, inf) is a bad line, like a missing one.
    df = df.filter(pl.col("_valid") & pl.col("ts").is_between(0, 7258118400).fill_null(False))
    bad = total - df.height
    ev = (
        df.select("n", "_dict", "_ev")
        .explode("_ev")
        .drop_nulls("_ev")
        .with_columns(
            _stored=pl.col("_ev").str.contains('"BlockStored"', literal=True),
            _blocks=_count_list(
                pl.when(pl.col("_dict"))
                .then(pl.col("_ev").str.extract(HASHES_DICT_RE, 1))
                .otherwise(pl.col("_ev").str.extract(HASHES_ARRAY_RE, 1))
            ),
        )
    )
    agg = ev.group_by("n").agg(
        pl.col("_blocks").filter(pl.col("_stored")).sum().alias("stored_blocks"),
        pl.col("_blocks").filter(~pl.col("_stored")).sum().alias("removed_blocks"),
        pl.col("_blocks").filter(pl.col("_stored")).count().alias("_stored_counted"),
        pl.col("_blocks").filter(~pl.col("_stored")).count().alias("_removed_counted"),
    )
    df = df.join(agg, on="n", how="left", maintain_order="left").with_columns(
        pl.col("stored_blocks").fill_null(0).cast(pl.Int64),
        pl.col("removed_blocks").fill_null(0).cast(pl.Int64),
    )
    uncounted = df.select(
        (pl.col("stored_events") - pl.col("_stored_counted").fill_null(0)).sum()
        + (pl.col("removed_events") - pl.col("_removed_counted").fill_null(0)).sum()
    ).item()
    facts = {"lines": total, "bad_lines": bad, "events_without_block_count": int(uncounted or 0)}
    return df.drop("_ev", "_valid", "_dict", "_stored_counted", "_removed_counted"), facts


class KvEventsParsed(MeetsLog):
    MEETS_WHAT, MEETS_KIND = "KV cache events", KIND

    def __init__(self, files: list[InputFile]) -> None:
        self.items = []
        for f in files:
            df, facts = read_file(str(f.path))
            self.items.append((f, df, facts))

    def anchors(self) -> list[tuple[datetime, str]]:

        out = []
        for f, df, _ in self.items:
            if df.height:
                ts = df.get_column("ts").min()
                if ts is not None:
                    try:
                        out.append((datetime.fromtimestamp(ts, UTC), f"KV cache events in {f.display}"))  # type: ignore[arg-type]  # polars scalars are typed as every literal
                    except (OverflowError, OSError, ValueError):
                        pass
        return out

    def _resolve(self, ctx: TimeContext) -> SourceOutput:
        out = SourceOutput()
        frames = []
        for f, df, facts in self.items:
            if facts["bad_lines"]:
                out.warnings.append(
                    f"{f.display}: {facts['bad_lines']} of {facts['lines']} line(s) are not KV event batches (skipped)"
                )
                out.partial = True
            if facts["events_without_block_count"]:
                out.notes.append(
                    f"{f.display}: {facts['events_without_block_count']} KV event(s) have block hashes that are not "
                    "plain numbers or strings: they count as events, not as blocks"
                )
            frames.append(
                df.select(
                    pl.from_epoch((pl.col("ts") * 1e6).round().cast(pl.Int64), time_unit="us")
                    .dt.replace_time_zone("UTC")
                    .alias("time"),
                    pl.lit("us").alias("time_precision"),
                    "dp_rank",
                    "stored_events",
                    "stored_blocks",
                    "removed_events",
                    "removed_blocks",
                    "cleared",
                    pl.lit(f.display).alias("source"),
                    pl.col("n").cast(pl.UInt32).alias("line"),
                )
            )
        if frames:
            out.frames["kv_events"] = pl.concat(frames).sort("time", maintain_order=True)
            out.order["kv_events"] = ("time",)
        out.counters["kvevents"] = [facts | {"file": f.display} for f, _, facts in self.items]
        return out


def per_second(kv: pl.DataFrame) -> pl.DataFrame:
    """Stored / removed blocks and clears per second (pool-level rate)."""
    return (
        kv.filter(pl.col("time").is_not_null())
        .group_by(pl.col("time").dt.truncate("1s").alias("second"))
        .agg(
            pl.col("stored_blocks").sum(),
            pl.col("removed_blocks").sum(),
            pl.col("cleared").sum(),
        )
        .sort("second")
    )


def _parse(files: list[InputFile]) -> KvEventsParsed:
    return KvEventsParsed(files)


register(
    SourceKind(
        name=KIND,
        description="vLLM KV cache events (KVEventBatch) saved as JSON Lines",
        sniff=_sniff,
        parse=_parse,
        appends=True,
    )
)

# Accepted shapes: (line, expected row fields, or {"_bad": True}).
SAMPLES: list[tuple[str, dict[str, Any]]] = [
    (
        '[1796015438.1, [["BlockStored", [101, 102], null, [1, 2, 3], 16, null, "GPU"], ["BlockRemoved", [77], "GPU"]], 0]',
        {"stored_events": 1, "stored_blocks": 2, "removed_events": 1, "removed_blocks": 1, "cleared": 0, "dp_rank": 0},
    ),
    ('[1796015439.0, [["AllBlocksCleared"]]]', {"cleared": 1, "stored_blocks": 0, "dp_rank": None}),
    ("[1796015439.5, []]", {"stored_events": 0, "cleared": 0}),
    (
        '[1796015440, [["BlockStored", [1], null, [5], 16, null], ["BlockStored", [2, 3, 4], 1, [6], 16, null]]]',
        {"stored_events": 2, "stored_blocks": 4},
    ),
    (
        '{"ts": 1796015441.25, "events": [{"type": "BlockStored", "block_hashes": [101, 102], "parent_block_hash": null, '
        '"token_ids": [1, 2], "block_size": 16}, {"type": "BlockRemoved", "block_hashes": ["ab", "cd", "ef"]}], '
        '"data_parallel_rank": 1}',
        {"stored_events": 1, "stored_blocks": 2, "removed_events": 1, "removed_blocks": 3, "dp_rank": 1},
    ),
    ('{"ts": 1796015442, "events": [{"type": "AllBlocksCleared"}]}', {"cleared": 1}),
    ("not an event batch", {"_bad": True}),
    ('{"time": "x", "events": []}', {"_bad": True}),
]

register_samples(KIND, SAMPLES)
