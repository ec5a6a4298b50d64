"""The event rows every machine format writes: the public event columns, then the verdict,
then the evidence, times as ISO 8601 text in the output zone (or typed)."""

from __future__ import annotations

from typing import TYPE_CHECKING, BinaryIO

import polars as pl

from ..clock.timebase import iso_text, typed_zone
from ..findings import as_dict
from ..model.events import public
from .view import check_columns

if TYPE_CHECKING:
    from ..model.result import Analysis


SCHEMA_VERSION = 2  # 2: evidence named by its source (joiner.RENAMED_IN_2)
TIME_COLUMNS = ("time", "interval_start", "interval_end")


def iso_expr(col: str, tz: str) -> pl.Expr:

    return iso_text(pl.col(col), tz).alias(col)


def event_rows(analysis: Analysis, *, text_times: bool = True) -> pl.DataFrame:
    """The public event columns; times as ISO 8601 strings (or typed, in the output zone)."""

    df = public(analysis.events)
    # The event columns first and unchanged, then the verdict (rules.verdicts.VERDICT_COLUMNS),
    # then the joiner's evidence (joiner.EVIDENCE_SCHEMA).
    verdicts = getattr(analysis, "verdicts", None)
    if verdicts is not None and verdicts.height and df.height:
        df = df.join(verdicts, on="event_id", how="left", maintain_order="left")
    evidence = getattr(analysis, "evidence", None)
    if evidence is not None and evidence.height and df.height:
        df = df.join(evidence, on="event_id", how="left", maintain_order="left")
    findings = getattr(analysis, "findings", None)  # mechanism and recompute cost, after the evidence
    if findings is not None and findings.per_event.height and df.height:
        df = df.join(findings.per_event, on="event_id", how="left", maintain_order="left")
    wanted = getattr(analysis, "columns", None)
    if wanted is not None:  # --columns / the compact default, chosen before any formatter sees the frame
        if df.height == 0:  # no events, so no verdict or evidence columns: the header stays the same
            df = df.with_columns([pl.lit(None, pl.String).alias(c) for c in wanted if c not in df.columns])
        df = df.select(check_columns(wanted, df.columns))
    cols = []
    schema = df.schema  # built once: per column it cost 20 ms on ~100 columns
    utc = pl.Datetime("us", "UTC")

    for c in df.columns:
        if c in TIME_COLUMNS or schema[c] == utc:
            cols.append(
                iso_expr(c, analysis.tz) if text_times else pl.col(c).dt.convert_time_zone(typed_zone(analysis.tz))
            )
        else:
            cols.append(pl.col(c))
    return df.select(cols)


def write_parquet(analysis: Analysis, out: BinaryIO) -> None:
    df = event_rows(analysis, text_times=False)
    meta = _findings_metadata(analysis)  # the incident's findings as file metadata
    if meta:
        df.write_parquet(out, metadata=meta)
    else:
        df.write_parquet(out)


def _findings_metadata(analysis: Analysis) -> dict[str, str] | None:
    """``preemptlog.findings``: the json document's ``findings`` object (docs/findings.md), as JSON text."""
    f = getattr(analysis, "findings", None)
    if f is None:
        return None
    import json

    return {"preemptlog.findings": json.dumps(as_dict(f, analysis.tz), ensure_ascii=False, default=str)}
