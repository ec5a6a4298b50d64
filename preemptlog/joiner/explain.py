"""For ``explain``: every row of every source inside one event's window, time-ordered."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from .. import engines
from ..model.frames import PolarsType
from ..sources import vllm_log
from .common import src_expr, us

if TYPE_CHECKING:
    from ..model.result import AnalysisView

WINDOW_SCHEMA = {
    "time": "Datetime(time_unit='us', time_zone='UTC')",
    "offset_s": "Float64",
    "kind": "String",
    "what": "String",
    "value": "String",
    "src": "String",
}


def _kv_string(cols: list[str]) -> pl.Expr:
    return pl.concat_str(
        [
            pl.when(pl.col(c).is_not_null()).then(pl.concat_str([pl.lit(f"{c}="), pl.col(c).cast(pl.String)]))
            for c in cols
        ],
        separator=" ",
        ignore_nulls=True,
    )


def _log_kind() -> pl.Expr:
    """A log record's source kind, by the engine whose record kinds it is (``sglang-log`` for an
    SGLang line): the engine's first log kind, the single log pass's own where no engine claims it."""
    out: pl.Expr = pl.lit(vllm_log.KIND)
    for e in engines.registered():
        if e.record_prefix is not None and e.log_kinds:
            out = pl.when(engines.owns(e)).then(pl.lit(e.log_kinds[0])).otherwise(out)
    return out


def _with_run_lines(analysis: AnalysisView, r: pl.DataFrame) -> pl.DataFrame:
    """Records of a window with each request-line run (sources/vllm_log.py, issue 18) replaced by
    its lines, read again from the file: the rows one record per line would have given."""

    if "rq_count" not in r.columns or r.get_column("rq_count").null_count() == r.height:
        return r
    is_run = pl.col("rq_count").is_not_null()
    parts = [r.filter(~is_run)]
    paths = {f.file_id: f.path for f in analysis.bundle.files}
    given = [c for c in r.columns if c not in vllm_log.RECORD_SCHEMA and c not in vllm_log.RUN_KIND_COLUMNS]
    for (fid,), runs in r.filter(is_run).group_by("file_id", maintain_order=True):
        lines = vllm_log.reread_runs(str(paths[fid]), int(fid), runs.select("n", "n_last", *given))
        parts.append(vllm_log.with_run_columns(lines).select(r.columns))
    return pl.concat(parts, how="vertical").sort("file_id", "n", "seg", maintain_order=True)


def window_rows(analysis: AnalysisView, event_id: str, before: float, after: float) -> pl.DataFrame:
    """Every row of every source in one event's window, time-ordered (WINDOW_SCHEMA)."""

    ev = analysis.events.filter(pl.col("event_id") == event_id)
    schema: dict[str, PolarsType] = {
        "time": pl.Datetime("us", "UTC"),
        "offset_s": pl.Float64,
        "kind": pl.String,
        "what": pl.String,
        "value": pl.String,
        "src": pl.String,
    }
    if ev.height == 0:
        return pl.DataFrame(schema=schema)
    t = ev.get_column("time")[0]
    if t is None:
        return pl.DataFrame(schema=schema)
    lo = pl.lit(t) - pl.duration(microseconds=us(before))
    hi = pl.lit(t) + pl.duration(microseconds=us(after))
    inwin = pl.col("time").is_between(lo, hi)
    parts = []

    def add(df: pl.DataFrame | None, kind: str | pl.Expr, what: pl.Expr, value: pl.Expr, order: int) -> None:
        if df is None or df.height == 0 or "time" not in df.columns:
            return
        sub = df.filter(inwin)
        if sub.height == 0:
            return
        parts.append(
            sub.select(
                "time",
                (pl.lit(kind) if isinstance(kind, str) else kind).alias("kind"),
                what.alias("what"),
                value.alias("value"),
                src_expr().alias("src"),
                pl.lit(order).alias("_o"),
                pl.col("line").cast(pl.Int64).alias("_l"),
            )
        )

    rec = analysis.records
    if rec.height:
        r = _with_run_lines(analysis, rec.filter(inwin)).with_columns(pl.col("n").alias("line"))
        add(
            r,
            _log_kind(),
            pl.col("kind"),
            pl.coalesce(pl.col("text").str.strip_chars().str.slice(0, 300), pl.col("req_id")),
            0,
        )
    f = analysis.frames
    for name, what_col, cols in (
        (
            "bt_steps",
            "step",
            ["step", "free_blocks", "largest_free_run", "free_regions", "block_size", "running", "waiting"],
        ),
        ("bt_tables", "table", ["request_id", "step", "num_blocks", "num_tokens", "shared_blocks", "max_ref_count"]),
        (
            "bt_events",
            "event",
            ["request_id", "action", "step", "blocks_before", "blocks_after", "blocks_needed", "reason"],
        ),
    ):
        df = f.get(name)
        if df is not None:
            add(
                df,
                "blocktable",
                pl.lit(what_col) if name != "bt_events" else pl.concat_str([pl.lit("event "), pl.col("action")]),
                _kv_string([c for c in cols if c in df.columns]),
                1,
            )
    kv = f.get("kv_events")
    if kv is not None:
        add(kv, "kvevents", pl.lit("batch"), _kv_string(["stored_blocks", "removed_blocks", "cleared", "dp_rank"]), 2)
    dm = f.get("dmon")
    if dm is not None:
        metrics = [c for c in dm.columns if c not in ("time", "time_precision", "gpu", "source", "line")]
        add(dm, "dmon", pl.concat_str([pl.lit("gpu "), pl.col("gpu").cast(pl.String)]), _kv_string(metrics), 3)
    if not parts:
        return pl.DataFrame(schema=schema)
    out = pl.concat(parts, how="vertical").with_columns(
        offset_s=(pl.col("time") - pl.lit(t)).dt.total_microseconds() / 1e6
    )
    return out.sort("time", "_o", "src", "_l", maintain_order=True).select(list(schema))
