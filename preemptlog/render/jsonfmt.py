"""JSON (one document) and NDJSON (one event per line)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, BinaryIO

from . import SCHEMA_VERSION, event_rows, iso_expr

if TYPE_CHECKING:
    from ..analysis import Analysis


def write_ndjson(analysis: "Analysis", out: BinaryIO) -> None:
    df = event_rows(analysis)
    if df.height:
        df.write_ndjson(out)


def config_rows(analysis: "Analysis") -> list[dict]:
    df = analysis.config.with_columns(iso_expr("time", analysis.tz))
    return df.to_dicts()


def document(analysis: "Analysis") -> dict:
    from .. import __version__

    return {
        "preemptlog": __version__,
        "schema_version": SCHEMA_VERSION,
        "summary": analysis.summary(),
        "config": config_rows(analysis),
        "events": event_rows(analysis).to_dicts(),
    }


def write_json(analysis: "Analysis", out: BinaryIO) -> None:
    text = json.dumps(document(analysis), indent=2, ensure_ascii=False, default=str)
    out.write(text.encode("utf-8"))
    out.write(b"\n")
