"""The requests frame's counts: what the analysis reads of every request line (issue 18).

:class:`RequestStats` folds the Received request rows of a whole requests frame (or of the plugin's
arrival records) to counts, arrivals per 10 s and the prompt-length and max_tokens distributions;
readers take the counts from :func:`stats_of` (or :func:`incident_requests`), never from the
frame's height: a folded frame holds only the rows the analysis names by id. The frame itself is
made by the engine that logs request lines (vllm/requests.py ``parse_with_stats``); the queries
here are over the frame, not over any engine's lines.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import polars as pl

# ----------------------------------------------------------------------------- counts
#
# What the analysis reads of the request lines beyond the rows it names by id (issue 18):
# counts, arrivals per 10 s, the prompt-length and max_tokens distributions, the sources.
# Made from the whole frame (every analysis of a small log) or, when files were folded,
# in the stream from their spill files (:func:`parse_with_stats`): the same numbers.


@dataclass(frozen=True)
class RequestStats:
    """The Received request rows of the whole requests frame, folded to what the analysis reads.

    ``arrivals``: columns ``bucket`` (time truncated to 10 s, UTC) and ``n``, received rows with
    a time; ``prompts``: ``prompt_tokens`` and ``n``, received rows with a prompt count (integers:
    exact quantiles). ``folded``: the requests frame holds only the rows the analysis names
    (finished / aborted rows, the received rows of those requests and of the events' requests,
    prompts longer than the KV cache), see :func:`parse_with_stats`.
    """

    rows: int  # rows of the whole frame (received, finished, aborted; one per id)
    received: int
    distinct: int  # distinct (stream, request_id) among the received rows
    timed: int  # received rows with a time
    arrivals: pl.DataFrame
    prompts: pl.DataFrame
    max_tokens_sum: int
    max_tokens_n: int
    sources: tuple[str, ...]  # sorted
    folded: bool = False
    basis: str = "log"  # "log": Received request lines; "records": the plugin's arrival records
    outputs_sum: int = 0  # output tokens of the finished requests (finish records)
    outputs_n: int = 0
    latency_p95: float | None = None  # arrival -> finish, seconds (records)
    latency_n: int = 0

    @property
    def prompt_n(self) -> int:
        return int(self.prompts.get_column("n").sum()) if self.prompts.height else 0

    def prompt_quantile_higher(self, q: float) -> int | None:
        """polars' ``quantile(q, "higher")`` of the prompt lengths: the value at sorted position
        ``ceil(q * (n - 1))`` (0-based), from the histogram."""
        n = self.prompt_n
        if n == 0:
            return None
        idx = math.ceil(q * (n - 1))
        h = self.prompts.sort("prompt_tokens")
        cum = h.get_column("n").cum_sum()
        pos = int(cum.search_sorted(idx + 1, side="left"))
        return int(h.get_column("prompt_tokens")[pos])

    def prompt_share_le(self, limit: int) -> float | None:
        n = self.prompt_n
        if n == 0:
            return None
        le = self.prompts.filter(pl.col("prompt_tokens") <= limit).get_column("n").sum()
        return float(le / n)

    def peak_per_10s(self) -> int | None:
        return int(self.arrivals.get_column("n").max()) if self.arrivals.height else None  # type: ignore[arg-type]

    def max_tokens_mean(self) -> float | None:
        return self.max_tokens_sum / self.max_tokens_n if self.max_tokens_n else None

    def output_mean(self) -> float | None:
        return self.outputs_sum / self.outputs_n if self.outputs_n else None

    @classmethod
    def of_records(cls, bt: pl.DataFrame) -> RequestStats:
        """From the plugin's request lifecycle records (frame ``bt_requests``): every request the
        engine admitted (``arrival``: time, prompt and max tokens) and finished (``finish``: output
        tokens); a request is (engine, id)."""
        arr = bt.filter(pl.col("phase") == "arrival")
        if arr.height == 0:
            return cls.empty()
        base = cls._of(
            arr.lazy(), arr.height, arr.height, pl.col("prompt_tokens"), distinct_on=["engine", "request_id"]
        )
        fin = bt.filter((pl.col("phase") == "finish") & pl.col("output_tokens").is_not_null())
        keys = ["engine", "request_id"]
        lat = (
            arr.group_by(keys)
            .agg(pl.col("time").min().alias("_t0"))
            .join(fin.group_by(keys).agg(pl.col("time").max().alias("_t1")), on=keys)
            .select(((pl.col("_t1") - pl.col("_t0")).dt.total_microseconds() / 1e6).alias("s"))
            .filter(pl.col("s") >= 0)
            .get_column("s")
        )
        p95 = lat.quantile(0.95, "higher") if lat.len() else None
        return dataclasses.replace(
            base,
            rows=0,
            basis="records",
            outputs_sum=int(fin.get_column("output_tokens").sum()) if fin.height else 0,
            outputs_n=fin.height,
            latency_p95=float(p95) if isinstance(p95, (int, float)) else None,
            latency_n=lat.len(),
        )

    @classmethod
    def of_frame(cls, requests: pl.DataFrame) -> RequestStats:
        """From a whole requests frame (REQUESTS_SCHEMA)."""
        rec = requests.filter(pl.col("action") == "received") if requests.height else requests.clear()
        return cls._of(
            rec.lazy(), requests.height, rec.height, pl.col("prompt_tokens"), distinct_on=["stream", "request_id"]
        )

    @classmethod
    def _of(
        cls, rec: pl.LazyFrame, rows: int, received: int, prompt: pl.Expr, distinct_on: list[str], folded: bool = False
    ) -> RequestStats:
        if received == 0:
            return cls.empty(rows, folded)
        queries = [
            rec.select(distinct_on).unique().select(pl.len().alias("d")),
            rec.filter(pl.col("time").is_not_null())
            .group_by(pl.col("time").dt.truncate("10s").alias("bucket"))
            .agg(pl.len().cast(pl.Int64).alias("n"))
            .sort("bucket"),
            rec.select(prompt.alias("prompt_tokens"))
            .filter(pl.col("prompt_tokens").is_not_null())
            .group_by("prompt_tokens")
            .agg(pl.len().cast(pl.Int64).alias("n"))
            .sort("prompt_tokens"),
            rec.select(
                pl.col("max_tokens").sum().alias("s"),
                pl.col("max_tokens").count().alias("c"),
                pl.col("time").count().alias("t"),
            ),
            rec.select(pl.col("source").unique().drop_nulls()),
        ]
        # One at a time (their hash tables are not held together).
        d, arrivals, prompts, mt, src = (q.collect(engine="streaming") for q in queries)
        return cls(
            rows=rows,
            received=received,
            distinct=int(d.item()),
            timed=int(mt.get_column("t")[0]),
            arrivals=arrivals,
            prompts=prompts,
            max_tokens_sum=int(mt.get_column("s")[0] or 0),
            max_tokens_n=int(mt.get_column("c")[0]),
            sources=tuple(sorted(src.get_column("source").to_list())),
            folded=folded,
        )

    @classmethod
    def empty(cls, rows: int = 0, folded: bool = False) -> RequestStats:
        return cls(
            rows=rows,
            received=0,
            distinct=0,
            timed=0,
            arrivals=pl.DataFrame(schema={"bucket": pl.Datetime("us", "UTC"), "n": pl.Int64}),
            prompts=pl.DataFrame(schema={"prompt_tokens": pl.Int64, "n": pl.Int64}),
            max_tokens_sum=0,
            max_tokens_n=0,
            sources=(),
            folded=folded,
        )


def stats_of(a: Any) -> RequestStats:
    """The analysis' request counts (``a.request_stats``), or made from its requests frame."""
    got = getattr(a, "request_stats", None)
    return got if isinstance(got, RequestStats) else RequestStats.of_frame(a.requests)


def incident_requests(a: Any) -> RequestStats:
    """The incident's requests as the best source saw them: the plugin's arrival records when the
    bundle has them (the engine's own view of every request it admitted, with prompt and output
    lengths and finish times), else the log's Received request lines (:func:`stats_of`). The
    request count, the preemption rate and the fixes' inputs read this; ``basis`` says which."""
    frames = getattr(a, "frames", None) or {}
    bt = frames.get("bt_requests")
    if bt is not None and bt.height and (bt.get_column("phase") == "arrival").any():
        return RequestStats.of_records(bt)
    return stats_of(a)


def with_request_key(ev: pl.DataFrame, records: pl.DataFrame | None) -> pl.DataFrame:
    """``ev`` with ``_who`` and ``_proc`` and ``_rkey``: which request an event preempted, a request
    being (server, id). Two servers (or two copies of one log) reuse ids, so ids are told apart per
    stream; within a stream, per process (two Ray workers' sequence group 63 are two): a log event
    takes its process prefix (``Name pid=N``) from its record; an event of another source (no stream)
    is told apart by its source file. ``_rkey`` is null for an event that names no request. Every
    count of a request's preemptions (the summary's, the verdicts', the mechanisms') keys by it."""
    cols = ev.columns
    stream = pl.col("stream") if "stream" in cols else pl.lit(None, pl.Int32)
    from_log = (pl.col("kind").is_in(["logged", "marker"]) & stream.is_not_null()) if "kind" in cols else pl.lit(False)
    if records is not None and records.height and "proc" in records.columns and "stream" in cols and "seq" in cols:
        procs = records.select(
            pl.col("stream").cast(ev.schema["stream"]), pl.col("seq").cast(ev.schema["seq"]), pl.col("proc").alias("_p")
        )
        ev = ev.join(procs, on=["stream", "seq"], how="left", maintain_order="left")
        ev = ev.with_columns(_proc=pl.when(from_log).then(pl.col("_p"))).drop("_p")
    else:
        ev = ev.with_columns(_proc=pl.lit(None, pl.String))
    source = pl.col("source") if "source" in cols else pl.lit(None, pl.String)
    ev = ev.with_columns(_who=pl.when(stream.is_not_null()).then(pl.lit(None, pl.String)).otherwise(source))
    return ev.with_columns(
        _rkey=pl.when(pl.col("request_id").is_not_null()).then(
            pl.concat_str(
                [
                    stream.cast(pl.String).fill_null(""),
                    pl.col("_who").fill_null(""),
                    pl.col("_proc").fill_null(""),
                    pl.col("request_id"),
                ],
                separator="\x1f",
            )
        )
    )
