"""Per-request lines: Received / Finished / Aborted (Added and details lines folded in).

Schema (``REQUESTS_SCHEMA``): one row per request id per ``Received``,
``Finished`` or ``Aborted`` line (the rows the analysis uses: arrivals, prompt
and output lengths, latencies). ``Added request`` lines carry nothing the
analysis uses and are left out (a third of the request lines of a V1 log);
the DEBUG ``Request X details`` lines give their prompt count to the rows of
their request. ``request_id`` is the external id (as received); an id
``<external>-<8 chars>`` (vLLM 0.14+ internal ids) is paired back to its
``Received request`` id when that id was seen (``internal_id`` keeps it).
``prompt_tokens`` counts ``prompt_token_ids`` (V0 and V1 up to 0.11.0 on the
Received line; 0.11.1+ on the DEBUG ``Request X details`` line; a
``--max-log-len`` cut makes it a lower bound); no vLLM version logs a prompt
length number.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars as pl

REQUESTS_SCHEMA = {
    "time": "Datetime(time_unit='us', time_zone='UTC')",
    "stream": "Int32",
    "seq": "UInt32",
    "action": "String",
    "request_id": "String",
    "internal_id": "String",
    "max_tokens": "Int64",
    "prompt_tokens": "Int64",
    "source": "String",
    "line": "UInt32",
}

_ACTION = {
    "req_received": "received",
    "req_added": "added",
    "req_finished": "finished",
    "req_aborted": "aborted",
    "req_details": "details",  # 0.11.1+ DEBUG "Request X details: prompt: ..., prompt_token_ids: [...]"
}
_KEPT = ("received", "finished", "aborted")  # the actions with rows in the output
_SUFFIX_RE = r"-[0-9A-Za-z]{8}$"


def _narrow(records: "pl.DataFrame", hot: "list[pl.DataFrame] | None") -> "pl.DataFrame":
    """time, stream, seq, kind, req_id, max_tokens, prompt_tokens, source, n of every request line kept.

    Files read with request-line runs (sources/vllm_log.py, issue 18) give their request lines
    in ``hot`` (vllm_log.HOT_ROWS): each takes its run's time, stream and source, and the
    run's ``seq`` plus its rank in the run, i.e. the values its own records row had.
    """
    import polars as pl

    cols = ["time", "stream", "seq", "kind", "req_id", "max_tokens", "prompt_tokens", "source", "n"]
    own = records
    if "rq_count" in records.columns:
        own = records.filter(pl.col("rq_count").is_null()) if hot else records
    narrow = own.select(cols)
    if not hot or "rq_run" not in records.columns:
        return narrow
    runs = records.filter(pl.col("rq_run").is_not_null()).select(
        "file_id", "rq_run", "time", "stream", pl.col("seq").alias("_seq0"), "source"
    )
    parts = []
    for h in hot:
        if h.height == 0:
            continue
        j = h.join(runs, on=["file_id", "rq_run"], how="left", maintain_order="left")
        parts.append(j.select(
            "time", "stream", (pl.col("_seq0") + pl.col("rq_rank")).cast(pl.UInt32).alias("seq"),
            "kind", "req_id", "max_tokens", "prompt_tokens", "source", "n",
        ))
    if not parts:
        return narrow
    both = pl.concat([narrow.filter(pl.col("kind").is_in(list(_ACTION))), *parts], how="vertical")
    order = both.select(pl.arg_sort_by(["stream", "seq"], maintain_order=True, nulls_last=True).alias("o")).get_column("o")
    if not order.equals(pl.int_range(both.height, dtype=order.dtype, eager=True).alias("o")):
        both = both[order]
    return both


def parse(records: "pl.DataFrame", hot: "list[pl.DataFrame] | None" = None) -> "pl.DataFrame":
    """Request rows, one per request id per line, in line order.

    Memory and time (issue 18; a request-heavy 1 GB V1 log has 1.75 M request
    lines): only lines that name several ids (``Aborted request(s) a,b``) are
    split and exploded (a list column for every row cost ~100 MB at 1 GB);
    ids are stripped only when one needs it; internal ids are looked up only
    for the rows that can carry one; the details lookup joins a single key
    column, keeping the left order (``maintain_order="left"``), instead of
    joins that gathered every column twice.
    """
    import polars as pl

    # Narrow first: an eager filter copies every column of the records frame
    # (measured +80 MB at 400 k records), and request lines are most of them.
    narrow = _narrow(records, hot)
    kinds = [k for k, a in _ACTION.items() if a in _KEPT or a == "details"]
    rows = narrow.filter(pl.col("kind").is_in(kinds)).select(
        "time",
        "stream",
        "seq",
        pl.col("kind").replace_strict(_ACTION, return_dtype=pl.String).alias("action"),
        pl.col("req_id").alias("request_id"),
        "max_tokens",
        "prompt_tokens",
        "source",
        pl.col("n").alias("line"),
    )
    multi = pl.col("request_id").str.contains(",", literal=True).fill_null(False)
    if rows.select(multi.any()).item():
        split = rows.filter(multi).with_columns(pl.col("request_id").str.split(",")).explode("request_id")
        rows = pl.concat([rows.filter(~multi), split]).sort("seq", maintain_order=True)
    # The scan keeps no space, colon or trailing dot in an id: strip only what a split left.
    edge = pl.col("request_id").str.contains(r"^[ .:]|[ .:]$").fill_null(False)
    if rows.select(edge.any()).item():
        rows = rows.with_columns(pl.col("request_id").str.strip_chars(" .:"))
    # Internal ids (``<external>-<8 chars>``, 0.14+): only non-received rows whose id has that
    # suffix are candidates, and the received ids are probed against the (few) candidates'
    # bases, not the other way round: no hash set of every received id is built.
    cand = ((pl.col("action") != "received") & pl.col("request_id").str.contains(_SUFFIX_RE)).fill_null(False)
    cand_mask = rows.select(cand.alias("c")).get_column("c")
    paired = None
    if cand_mask.any():
        base = pl.when(cand).then(pl.col("request_id").str.replace(_SUFFIX_RE, ""))
        bases = rows.select(base.alias("_base")).get_column("_base")
        wanted = bases.drop_nulls().unique()
        recv = rows.filter(pl.col("action") == "received").get_column("request_id")
        seen = recv.filter(recv.is_in(wanted.implode())).unique()
        paired = (bases.is_in(seen.implode()) & (bases != rows.get_column("request_id"))).fill_null(False)
    if paired is not None and paired.any():
        rows = rows.with_columns(
            internal_id=pl.when(paired).then(pl.col("request_id")),
            request_id=pl.when(paired).then(bases).otherwise(pl.col("request_id")),
        )
    else:
        rows = rows.with_columns(internal_id=pl.lit(None, pl.String))
    # 0.11.1+: the prompt token count is on the DEBUG details line; give it to the received row too.
    details = (
        rows.filter((pl.col("action") == "details") & pl.col("prompt_tokens").is_not_null())
        .group_by("request_id", maintain_order=True)
        .agg(pl.col("prompt_tokens").first().alias("_pt"))
    )
    rows = rows.filter(pl.col("action").is_in(_KEPT))
    if details.height:
        pt = rows.select("request_id").join(details, on="request_id", how="left", maintain_order="left").get_column("_pt")
        rows = rows.with_columns(prompt_tokens=pl.coalesce(pl.col("prompt_tokens"), pt))
    return rows.select(list(REQUESTS_SCHEMA))
