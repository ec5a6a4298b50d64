"""Server runs: which start of a server each log record belongs to.

A restart resets the server's configuration: what a run states (its ``non-default args``,
engine config line, block counts) is that run's, never the next one's. A run begins at a
start banner (the START_RE of vllm/preemptions.py): the API server's version banner where the
stream has one (``vLLM API server version X`` through 0.14; from 0.15 ``vLLM server version X``
or the start-up logo's ``version X`` row; the API server's ``non-default args`` follow it, and
each engine's ``Initializing a ... LLM engine`` line of the same start), else the engine's own
line (offline ``LLM(...)`` use). A banner
opens a run only after some activity of the server since the previous one (stats, requests,
preemptions, hook lines: any record that is not configuration), so banners in a row are one
start. Records before a stream's first banner are its run 0 (the log began mid-run).

Runs are counted per stream (a log file and its rotated siblings), and in a stream of several
containers' lines (docker compose ``svc  | ``, kubectl logs --prefix: model/containers.py) per
container: each container is a server of its own, its banner never starts a run of another's
lines. A stream with no start banner at all has no runs: its records are not scoped (the whole
bundle's configuration applies, as for other sources).

``runs_table`` (``RUNS_SCHEMA``, the frame ``server_runs``): one row per run.
"""

from __future__ import annotations

import polars as pl

from ...model.config import VERSION_SHAPE
from ...model.containers import log_containers, with_container
from ...model.frames import polars_schema
from ..registry import ServerStart
from .preemptions import START_RE

RUNS_SCHEMA = {
    "run": "Int32",  # bundle-wide run number (dense over (stream, run in the stream))
    "stream": "Int32",
    "container": "String",  # the container of a stream of several containers' lines (else null)
    "stream_run": "Int32",  # 0: before the stream's first start banner, then 1, 2, ...
    "first_seq": "UInt32",
    "start": "Datetime(time_unit='us', time_zone='UTC')",  # the time of the run's first record
    "source": "String",  # the run's first banner (file:line), null for run 0
    "line": "UInt32",
}


# The record columns runs are read from (records on one clock: timebase.resolve, with_source).
NEEDS = {"seq", "stream", "time", "source", "n", "kind", "text"}


def record_runs(records: pl.DataFrame) -> pl.DataFrame:
    """Per record of a stream that has a start banner: ``seq`` and its bundle-wide ``run``."""
    if records.height == 0 or not set(records.columns) >= NEEDS:
        return pl.DataFrame(schema={"seq": pl.UInt32, "run": pl.Int32})
    return _numbered(records).select("seq", "run")


def runs_table(records: pl.DataFrame) -> pl.DataFrame:
    """One row per server run (RUNS_SCHEMA)."""

    schema = polars_schema(RUNS_SCHEMA)
    if records.height == 0 or not set(records.columns) >= NEEDS:
        return pl.DataFrame(schema=schema)
    r = _numbered(records)
    out = (
        r.sort("seq")
        .group_by("run", maintain_order=True)
        .agg(
            pl.col("stream").first(),
            pl.when(pl.col("_ct") != "").then(pl.col("_ct")).first().alias("container"),
            pl.col("_srun").first().alias("stream_run"),
            pl.col("seq").first().alias("first_seq"),
            pl.col("time").drop_nulls().first().alias("start"),
            pl.col("source").filter(pl.col("_start")).first(),
            pl.col("n").filter(pl.col("_start")).first().alias("line"),
        )
        .sort("run")
    )
    return out.select(list(RUNS_SCHEMA)).cast(schema)  # type: ignore[arg-type]


def _numbered(records: pl.DataFrame) -> pl.DataFrame:
    kind = pl.col("kind")
    banner = kind.is_in(["cfg_version", "cfg_engine"]) & pl.col("text").str.contains(START_RE).fill_null(False)
    r = records.select(
        "seq",
        "stream",
        "time",
        "source",
        "n",
        _api=(banner & (kind == "cfg_version")).fill_null(False),
        _eng=(banner & (kind == "cfg_engine")).fill_null(False),
        _act=~kind.str.starts_with("cfg_").fill_null(False),
    ).sort("stream", "seq")
    # A stream of several containers' lines: a lane per container ("" where the stream has one or none).
    r = with_container(r, log_containers(records)).with_columns(pl.col("_ct").fill_null(""))
    lane = ["stream", "_ct"]
    # The API server's banner is the start where the stream has one; else the engine's line.
    r = r.with_columns(_start=pl.when(pl.col("_api").any().over(lane)).then(pl.col("_api")).otherwise(pl.col("_eng")))
    # Start groups: a banner and the records up to the next one. A group opens a run when it is
    # the stream's first or the group before it had activity (else both are one start).
    r = r.with_columns(_g=pl.col("_start").cast(pl.Int32).cum_sum().over(lane))
    groups = (
        r.group_by(*lane, "_g")
        .agg(pl.col("_act").any().alias("_ga"))
        .sort(*lane, "_g")
        .with_columns(_prev_act=pl.col("_ga").shift(1).over(lane))
        .with_columns(_new=((pl.col("_g") == 1) | pl.col("_prev_act").fill_null(False)) & (pl.col("_g") > 0))
        .with_columns(_srun=pl.col("_new").cast(pl.Int32).cum_sum().over(lane))
    )
    banner = groups.group_by(lane).agg((pl.col("_g").max() > 0).alias("_banner"))
    r = (
        r.join(groups.select(*lane, "_g", "_srun"), on=[*lane, "_g"], how="left")
        .join(banner, on=lane, how="left")
        .filter(pl.col("_banner"))
    )
    key = pl.struct("stream", "_ct", "_srun")
    return r.with_columns(run=(key.rank("dense") - 1).cast(pl.Int32))


# ---------------------------------------------------------------------- server starts (events/servers.py)

# The version a start names: the longest prefix of VERSION_SHAPE after the words (model.config).
VERSION_RE = rf"(?:server version |█\s+version |LLM engine \(v)v?({VERSION_SHAPE})"


def server_start(own: pl.Expr) -> ServerStart:
    """vLLM's server starts: a version line (``vLLM API server version X``, ``vLLM server version X``),
    or, in a stream without one, the engine's ``Initializing a V1 LLM engine (vX) with config`` line."""
    t = pl.col("text")
    version_line = pl.col("kind") == "cfg_version"
    engine_line = (pl.col("kind") == "cfg_engine") & t.str.contains(r"Initializing an? (?:V[01] )?LLM engine \(v")
    return ServerStart(start=version_line | engine_line, dated=version_line, version=t.str.extract(VERSION_RE, 1))
