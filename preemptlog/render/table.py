"""The terminal table: one row per event, reconstructed / interval runs folded into one row."""

from __future__ import annotations

import io
import os
from typing import TYPE_CHECKING, BinaryIO

from .safe import text

if TYPE_CHECKING:
    import polars as pl

    from ..analysis import Analysis


def display_rows(analysis: "Analysis") -> "pl.DataFrame":
    """Events for display: each run of reconstructed/interval events from one line becomes one row."""
    import polars as pl

    from . import iso_expr

    ev = analysis.events
    v = getattr(analysis, "verdicts", None)
    if v is not None and v.height and ev.height:
        ev = ev.join(v.select("event_id", "gate", "sub_kind", "confidence"), on="event_id", how="left", maintain_order="left")
    else:
        ev = ev.with_columns(gate=pl.lit(None, pl.String), sub_kind=pl.lit(None, pl.String), confidence=pl.lit(None, pl.String))
    if ev.height == 0:
        return pl.DataFrame(
            schema={
                "time": pl.String,
                "event_id": pl.String,
                "kind": pl.String,
                "count": pl.UInt32,
                "request_id": pl.String,
                "mode": pl.String,
                "where": pl.String,
                "until": pl.String,
                "verdict": pl.String,
            }
        )
    grouped = ev.with_columns(
        _g=pl.when(pl.col("kind").is_in(["reconstructed", "interval"]))
        .then(pl.col("event_id").str.replace(r"~[ri]\d+$", ""))
        .otherwise(pl.col("event_id"))
    )
    rows = (
        grouped.group_by("_g", "kind", maintain_order=True)
        .agg(
            pl.col("time").min().alias("time"),
            pl.col("time").max().alias("until"),
            pl.col("event_id").first(),
            pl.len().alias("count"),
            pl.col("request_id").first(),
            pl.col("mode").first(),
            pl.col("source").first(),
            pl.col("line").first(),
            pl.col("gate").first(),
            pl.col("sub_kind").first(),
            pl.col("confidence").first(),
        )
        .with_columns(
            where=pl.concat_str([pl.col("source"), pl.lit(":"), pl.col("line").cast(pl.String)]),
            event_id=pl.when(pl.col("count") > 1)
            .then(pl.concat_str([pl.col("_g"), pl.lit("~"), pl.col("kind").str.slice(0, 1), pl.lit("*")]))
            .otherwise(pl.col("event_id")),
        )
    )
    return rows.select(
        iso_expr("time", analysis.tz),
        "event_id",
        "kind",
        "count",
        "request_id",
        "mode",
        "where",
        iso_expr("until", analysis.tz),
        pl.concat_str(
            [
                pl.col("gate"),
                pl.when(pl.col("sub_kind").is_not_null()).then(pl.concat_str([pl.lit("/"), pl.col("sub_kind")])).otherwise(pl.lit("")),
                pl.when(pl.col("confidence").is_not_null() & (pl.col("confidence") != "none"))
                .then(pl.concat_str([pl.lit(" ("), pl.col("confidence"), pl.lit(")")]))
                .otherwise(pl.lit("")),
            ]
        ).alias("verdict"),
    )


def write_table(analysis: "Analysis", out: BinaryIO, *, width: int | None = None) -> None:
    from rich.console import Console
    from rich.table import Table

    wrapper = io.TextIOWrapper(out, encoding="utf-8", errors="replace", write_through=True)
    try:
        is_tty = hasattr(out, "isatty") and out.isatty()
        console = Console(
            file=wrapper,
            width=width or (None if is_tty else 200),
            force_terminal=is_tty,
            no_color=not is_tty or bool(os.environ.get("NO_COLOR")),
            highlight=False,
            soft_wrap=False,
        )
        rows = display_rows(analysis)
        table = Table(title=None, show_lines=False, header_style="bold", expand=False)
        for name in ("time", "event", "kind", "n", "request", "mode", "verdict", "source:line"):
            table.add_column(name, no_wrap=name in ("time", "event"), overflow="fold")
        for r in rows.iter_rows(named=True):
            time = r["time"] or "?"
            if r["count"] > 1 and r["until"] and r["until"] != r["time"]:
                time = f"{time} .. {r['until']}"
            table.add_row(
                text(time),
                text(r["event_id"]),
                text(r["kind"]),
                text(r["count"]),
                text(r["request_id"] or "-"),
                text(r["mode"] or "-"),
                text(r["verdict"] or "-"),
                text(r["where"]),
            )
        if rows.height:
            console.print(table)
        else:
            console.print(text("no preemption events found"))
    finally:
        wrapper.flush()
        wrapper.detach()
