"""The event rows every machine format writes: the public event columns, then the verdict,
then the evidence, times as ISO 8601 text in the output zone (or typed)."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, BinaryIO

import polars as pl

from ..clock.timebase import iso_text, typed_zone
from ..findings import as_dict
from ..model.events import public
from ..rules import mechanisms
from ..rules.engine import evaluate, sample_frame
from ..rules.factors import factors
from ..rules.verdicts import fix_type
from .view import check_columns

if TYPE_CHECKING:
    from ..model.result import Analysis


SCHEMA_VERSION = 2  # 2: evidence named by its source (joiner.RENAMED_IN_2)
TIME_COLUMNS = ("time", "interval_start", "interval_end")


def iso_expr(col: str, tz: str) -> pl.Expr:

    return iso_text(pl.col(col), tz).alias(col)


def event_rows(analysis: Analysis, *, text_times: bool = True) -> pl.DataFrame:
    """The public event columns; times as ISO 8601 strings (or typed, in the output zone)."""

    wanted = getattr(analysis, "columns", None)
    prefixes = None
    if wanted is None or any(c in wanted for c in PREFIX_COLUMNS):  # the compact row pays nothing
        prefixes = (
            _with_prefixes(analysis.events, getattr(analysis, "records", None))
            .select("event_id", *PREFIX_COLUMNS)
            .unique("event_id", keep="first", maintain_order=True)
        )
    df = public(analysis.events)
    # The event columns first and unchanged, then the verdict (rules.verdicts.VERDICT_COLUMNS),
    # then the joiner's evidence (joiner.EVIDENCE_SCHEMA), then the findings' per-event columns,
    # then the added keys of whose the event is (PREFIX_COLUMNS): a column added is added last, so
    # no column a script reads by position (csv --wide) moves.
    # No events: the same columns of the same types as a run with events (one schema for every
    # file of a dataset), so the empty frames are joined too, typed as the rules type them.
    empty = df.height == 0
    verdicts = getattr(analysis, "verdicts", None)
    if _joinable(verdicts, empty):
        if empty:
            verdicts = _typed_like_a_run(verdicts, _verdict_types(analysis))
        df = df.join(verdicts, on="event_id", how="left", maintain_order="left")
    evidence = getattr(analysis, "evidence", None)
    if _joinable(evidence, empty):
        df = df.join(evidence, on="event_id", how="left", maintain_order="left")
    findings = getattr(analysis, "findings", None)  # mechanism and recompute cost, after the evidence
    per_event = findings.per_event if findings is not None else None
    if _joinable(per_event, empty):
        if empty:
            per_event = _typed_like_a_run(per_event, _mechanism_types(analysis))
        df = df.join(per_event, on="event_id", how="left", maintain_order="left")
    if prefixes is not None:
        df = df.join(prefixes, on="event_id", how="left", maintain_order="left")
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


# Added event keys (docs/output.md): the prefixes of the event's log line that say whose it is, where the
# engine index cannot (two pods' logs both say engine "0"): the container (kubectl logs --prefix's pod,
# docker compose's service) and vLLM's process prefix ("APIServer pid=100"). Full rows only (json, parquet,
# --wide, --columns): the compact ndjson/csv row is unchanged.
PREFIX_COLUMNS = {"container": "compose", "process": "proc"}


def _with_prefixes(events: pl.DataFrame, records: pl.DataFrame | None) -> pl.DataFrame:
    """``events`` with :data:`PREFIX_COLUMNS` from the log record each event was made from (same stream
    and seq); null for an event of another source or a line without the prefix."""
    have = records is not None and {"stream", "seq", *PREFIX_COLUMNS.values()} <= set(records.columns)
    if not have or records is None or not {"stream", "seq"} <= set(events.columns):
        return events.with_columns([pl.lit(None, pl.String).alias(k) for k in PREFIX_COLUMNS])
    keys = events.select("stream", "seq").unique()
    prefixes = (
        records.select(
            pl.col("stream").cast(events.schema["stream"]),
            pl.col("seq").cast(events.schema["seq"]),
            *(pl.col(v).cast(pl.String).alias(k) for k, v in PREFIX_COLUMNS.items()),
        )
        .join(keys, on=["stream", "seq"], how="semi")
        .unique(["stream", "seq"], keep="first", maintain_order=True)
    )
    return events.join(prefixes, on=["stream", "seq"], how="left", maintain_order="left")


def _joinable(frame: pl.DataFrame | None, empty: bool) -> bool:
    """Join ``frame`` (verdicts, evidence, per-event findings) to the event rows: when it has rows,
    or when there are no events (its columns give the empty result its full header)."""
    if frame is None or "event_id" not in frame.columns:
        return False
    return empty or frame.height > 0


def _typed_like_a_run(frame: pl.DataFrame, types: dict[str, pl.DataType]) -> pl.DataFrame:
    """An empty frame with the column types a run with events gives (the verdicts of no event are
    typed String, the mechanism's cited values Null: a parquet file of no event would not share the
    schema of the others)."""
    return pl.DataFrame(schema={c: types.get(c, t) for c, t in frame.schema.items()})


def _verdict_types(analysis: Analysis) -> dict[str, pl.DataType]:
    """The verdict columns' types as rules.verdicts gives them on events: the rule engine's columns
    evaluated on zero rows, the factors, the recommendations and the fixes."""
    rs = getattr(analysis, "ruleset", None)
    if rs is None:
        return {}
    frame = sample_frame({}).head(0)
    types: dict[str, pl.DataType] = dict(evaluate(frame, rs).schema)
    types["contributing_factors"] = frame.select(factors(frame, rs).alias("_f")).schema["_f"]
    types["recommendations"] = pl.List(pl.String)
    types["fixes"] = fix_type()
    return types


def _mechanism_types(analysis: Analysis) -> dict[str, pl.DataType]:
    """``mechanism_evidence``'s type as findings.mechanism gives it on events (rules/mechanisms.py);
    the other per-event findings columns are typed already without events."""
    rs = getattr(analysis, "ruleset", None)
    if rs is None or not mechanisms.active(rs):
        return {}
    out = mechanisms.evaluate(mechanisms.sample_frame({}).head(0), rs)
    return {"mechanism_evidence": out.schema["mechanism_evidence"]}


def write_parquet(analysis: Analysis, out: BinaryIO) -> None:
    df = event_rows(analysis, text_times=False)
    meta = _findings_metadata(analysis)  # the incident's findings as file metadata
    # Made in memory, then written: polars' writer reports a failing destination (a full disk, a closed
    # pipe) as its own ComputeError, hiding the OSError the command turns into its exit code.
    buf = io.BytesIO()
    if meta:
        df.write_parquet(buf, metadata=meta)
    else:
        df.write_parquet(buf)
    out.write(buf.getbuffer())


def _findings_metadata(analysis: Analysis) -> dict[str, str] | None:
    """``preemptlog.findings``: the json document's ``findings`` object (docs/findings.md), as JSON text."""
    f = getattr(analysis, "findings", None)
    if f is None:
        return None
    import json

    return {"preemptlog.findings": json.dumps(as_dict(f, analysis.tz), ensure_ascii=False, default=str)}
