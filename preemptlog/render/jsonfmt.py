"""JSON (one document) and NDJSON (one event per line).

The JSON document is written as a stream: everything but the events is one small dict, and the
``events`` array is written row by row from the event frame, a slice at a time, so memory does
not grow with the number of events (a dict per event for the whole array took ~40 KB per event).
The bytes are those of ``json.dumps(document, indent=2, ensure_ascii=False, default=str)``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, BinaryIO

import polars as pl

from ..findings import as_dict
from ..model import VERSION as __version__
from .rows import SCHEMA_VERSION, event_rows, iso_expr

if TYPE_CHECKING:
    from ..model.result import Analysis

ROWS_PER_SLICE = 2000
_PLACEHOLDER = "\x00preemptlog-events\x00"  # never produced by json.dumps of real data (NUL is escaped)


def write_ndjson(analysis: Analysis, out: BinaryIO) -> None:
    df = event_rows(analysis)
    if df.height:
        df.write_ndjson(out)


def config_rows(analysis: Analysis) -> list[dict]:
    df = analysis.config.with_columns(iso_expr("time", analysis.tz))
    return df.to_dicts()


def head(analysis: Analysis) -> dict:
    """The document without its events."""

    return {
        "preemptlog": __version__,
        "schema_version": SCHEMA_VERSION,
        "summary": analysis.summary(),
        "config": config_rows(analysis),
        "findings": _findings(analysis),  # docs/findings.md
    }


def _findings(analysis: Analysis) -> dict | None:
    f = getattr(analysis, "findings", None)
    if f is None:
        return None

    return as_dict(f, analysis.tz)


def document(analysis: Analysis) -> dict:
    """The whole document in memory (small inputs, tests); write_json streams it."""
    return {**head(analysis), "events": event_rows(analysis).to_dicts()}


def frame_rows(df: pl.DataFrame, rows_per_slice: int = ROWS_PER_SLICE) -> Iterable[dict]:
    """The rows of a frame as dicts, a slice at a time (only one slice is ever materialised)."""
    for offset in range(0, df.height, rows_per_slice):
        yield from df.slice(offset, rows_per_slice).to_dicts()


def write_document(top: dict[str, Any], events: Iterable[dict], out: BinaryIO, *, key: str = "events") -> None:
    """Write ``{**top, key: [*events]}`` as indented JSON, streaming the ``events`` rows."""
    doc = {**top, key: _PLACEHOLDER}
    text = json.dumps(doc, indent=2, ensure_ascii=False, default=str)
    marker = json.dumps(_PLACEHOLDER)
    before, after = text.split(marker, 1)
    out.write(before.encode("utf-8"))
    first = True
    buf: list[str] = []
    size = 0
    for row in events:
        item = json.dumps(row, indent=2, ensure_ascii=False, default=str).replace("\n", "\n    ")
        buf.append(("[\n    " if first else ",\n    ") + item)
        first = False
        size += len(item)
        if size > 1 << 20:
            out.write("".join(buf).encode("utf-8"))
            buf, size = [], 0
    buf.append("[]" if first else "\n  ]")
    out.write("".join(buf).encode("utf-8"))
    out.write(after.encode("utf-8"))
    out.write(b"\n")


def write_json(analysis: Analysis, out: BinaryIO) -> None:
    write_document(head(analysis), frame_rows(event_rows(analysis)), out)
