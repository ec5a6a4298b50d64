"""Whose line a line is in a log that holds several servers' lines, each behind its container's prefix.

docker compose writes ``svc  | `` before every line of a service, kubectl logs --prefix
``[pod/NAME/CONTAINER] `` (the records' ``compose`` column, sources/vllm_log.py ``COMPOSE_RE``): one file
is then two servers, both calling their engine "0". Wherever a log's own lines are a lane of evidence
(the joiner's stats lanes, the pressure intervals' series, the configuration a server states), the
container is part of that lane exactly as the log's stream is: one container's lines never explain
another's events. A log of one container, or none, is read as it always was.
"""

from __future__ import annotations

import polars as pl

# The container of each line of a log that holds several servers' lines, each behind its container's prefix
# (docker compose ``svc  | ``, kubectl logs --prefix ``[pod/NAME/CONTAINER] ``: the records' ``compose``).
CONTAINERS_SCHEMA = {
    "stream": pl.Int32,
    "seq": pl.UInt32,
    "source": pl.String,
    "line": pl.UInt32,
    "container": pl.String,
}


def log_containers(records: pl.DataFrame) -> pl.DataFrame:
    """The frame ``log_containers`` (CONTAINERS_SCHEMA): the container of every record (stream, seq; its
    file and line) of the log streams whose lines come from two or more containers (render/each.py
    container_parts: the same streams). A line without a prefix is its container's before it (a wrapped
    line, a request line the pass keeps no prefix of: pipeline/bundle.py line_container). A stream of
    one container, or none, has no rows: its lines are one server's, as a file's are."""
    empty = pl.DataFrame(schema=CONTAINERS_SCHEMA)
    if records.height == 0 or not {"compose", "stream", "seq", "source", "n"} <= set(records.columns):
        return empty
    if records.get_column("compose").drop_nulls().n_unique() < 2:  # one column: cheap on a large log
        return empty
    many = (
        records.filter(pl.col("compose").is_not_null())
        .group_by("stream")
        .agg(pl.col("compose").n_unique().alias("_n"))
        .filter(pl.col("_n") >= 2)
        .get_column("stream")
    )
    if many.len() == 0:
        return empty
    return (
        records.filter(pl.col("stream").is_in(many.implode()))
        .select("stream", "seq", "source", pl.col("n").alias("line"), "compose")
        .sort("stream", "seq", maintain_order=True)
        .unique(["stream", "seq"], keep="first", maintain_order=True)
        .with_columns(container=pl.col("compose").forward_fill().over("stream"))
        .filter(pl.col("container").is_not_null())
        .select(list(CONTAINERS_SCHEMA))
        .cast(CONTAINERS_SCHEMA)  # type: ignore[arg-type]
    )


def with_container(df: pl.DataFrame, containers: pl.DataFrame | None, by: str = "seq") -> pl.DataFrame:
    """``df`` with ``_ct``: the container of its row's line (``log_containers``), by its ``stream`` and
    ``seq`` (``by="seq"``) or its ``source`` and ``line`` (``by="line"``: configuration rows); null for a row
    of a stream of one container or none, and of another source. The container is part of a log's lane
    like its stream: one container's lines never explain another's events."""
    keys = ["stream", "seq"] if by == "seq" else ["source", "line"]
    if "_ct" in df.columns:
        df = df.drop("_ct")
    if containers is None or containers.height == 0 or not set(keys) <= set(df.columns):
        return df.with_columns(_ct=pl.lit(None, pl.String))
    right = containers.select(*keys, pl.col("container").alias("_ct")).unique(keys, keep="first")
    cast = {k: right.schema[k] for k in keys}
    left = df.with_columns(pl.col(k).alias(f"_k{i}") for i, k in enumerate(keys))
    left = left.with_columns(pl.col(f"_k{i}").cast(cast[k], strict=False) for i, k in enumerate(keys))
    return left.join(
        right.rename({k: f"_k{i}" for i, k in enumerate(keys)}),
        on=[f"_k{i}" for i in range(len(keys))],
        how="left",
        maintain_order="left",
    ).drop([f"_k{i}" for i in range(len(keys))])


def stream_lane(stream: str = "stream", container: str = "_ct") -> pl.Expr:
    """A log's lane: its stream, and the line's container where the stream holds several (``0/vllm-a-1``);
    the stream alone otherwise (``0``)."""
    s = pl.col(stream).cast(pl.String)
    return (
        pl.when(pl.col(container).is_not_null()).then(pl.concat_str([s, pl.lit("/"), pl.col(container)])).otherwise(s)
    )
