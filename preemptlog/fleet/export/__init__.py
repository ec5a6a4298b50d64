"""Exports to the dashboards operators already use, from a bundle or a fleet dataset.

- grafana.py: Grafana annotations (one region per server and engine: the incident's span,
  its headline, tags cause/mechanism/server), as a JSON array or posted to Grafana's HTTP API;
- openmetrics.py: derived series (preemptions by cause, mechanism and engine; tokens
  recomputed) for ``promtool tsdb create-blocks-from openmetrics``.

Both read the fleet tables (fleet/schema.py): :func:`load` makes them from a bundle (the fleet's
own per-bundle analysis) or reads them from a dataset. No dependency beyond the standard library.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import polars as pl

from ...errors import ExitCode, PreemptlogError
from ...model.result import AnalyzeOptions
from .. import dataset, schema
from ..inputs import expand
from ..work import analyse_bundle

if TYPE_CHECKING:
    from ...model.result import AnalyzeOptions


@dataclass(frozen=True)
class Tables:
    events: pl.DataFrame
    incidents: pl.DataFrame


class BundleFailed(PreemptlogError):
    """The bundle's analysis failed: its own exit code (errors.ExitCode)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.exit_code = ExitCode(code) if code in ExitCode._value2member_map_ else ExitCode.INTERNAL


def is_dataset(path: str) -> bool:

    return os.path.isdir(path) and (
        os.path.exists(os.path.join(path, schema.MARKER)) or bool(dataset.files(path, "incidents"))
    )


def load(source: str, options: AnalyzeOptions | None = None) -> Tables:
    """The events and incidents rows of a fleet dataset, or of one bundle analysed now."""

    if is_dataset(source):
        return Tables(dataset.scan(source, "events").collect(), dataset.scan(source, "incidents").collect())

    path = expand([source])[0]
    r = analyse_bundle(path, options or AnalyzeOptions())
    if r.outcome == "error":
        raise BundleFailed(r.message or f"{source}: the analysis failed", r.exit_code)
    return Tables(r.tables["events"], r.tables["incidents"])
