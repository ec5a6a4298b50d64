"""OpenMetrics text for backfill: ``promtool tsdb create-blocks-from openmetrics FILE DIR``.

Series (prefix ``preemptlog_``, never ``vllm:``), each carrying the labels vLLM's dashboard
variables select on: ``instance`` (the scrapes' own instance label, else the host the log
names, else the server's name), ``model_name``, ``engine``, and any ``--label`` given (``job``):

- ``preemptlog_preemptions_total{cause, mechanism}``: a counter, the running count at the end
  of each bin (``bin_s`` seconds) with events, from 0 one bin before the first;
- ``preemptlog_recompute_tokens_total``: the tokens the preemptions threw away (known values;
  a lower bound where preemptlog could not measure every event);
- ``preemptlog_count_visible``: 1 when the bundle can show the count, 0 when it cannot (then the
  counters are absent, never 0), at the log's first and last line.

Timestamps are Unix seconds (OpenMetrics 1.0); every family is contiguous, each series in time
order; the text ends with ``# EOF``. Events without a time cannot be placed and are left out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime
from typing import Any

import polars as pl

from ...errors import UsageError
from ..rows import cause_of

LABEL_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def _esc(v: Any) -> str:
    return str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(pairs: Iterable[tuple[str, Any]]) -> str:
    return "{" + ",".join(f'{k}="{_esc(v)}"' for k, v in pairs if v is not None) + "}"


def _ts(t: datetime) -> str:
    s = f"{t.timestamp():.3f}".rstrip("0").rstrip(".")
    return s


def _identity(incidents: pl.DataFrame) -> pl.DataFrame:
    """(bundle_id, server, engine) -> instance, model_name."""
    return incidents.select(
        "bundle_id",
        "server",
        "engine",
        pl.coalesce("instance", "host", "server").alias("instance"),
        pl.col("model").alias("model_name"),
        "count_visible",
        "log_first",
        "log_last",
    )


def render(
    events: pl.DataFrame, incidents: pl.DataFrame, *, bin_s: int = 60, labels: dict[str, str] | None = None
) -> tuple[str, int]:
    """The OpenMetrics text, and how many events had no time (left out)."""
    extra = sorted((labels or {}).items())
    ident = _identity(incidents)
    ev = events.join(
        ident.select("bundle_id", "server", "engine", "instance", "model_name"),
        on=["bundle_id", "server", "engine"],
        how="left",
    )
    untimed = ev.filter(pl.col("time").is_null()).height
    every = f"{bin_s}s"
    ev = ev.filter(pl.col("time").is_not_null()).with_columns(
        cause=cause_of(pl.col("gate"), pl.col("sub_kind")).fill_null("unknown"),
        mechanism=pl.col("mechanism").fill_null("unknown"),
        bin=pl.col("time").dt.truncate(every) + pl.duration(seconds=bin_s),
        instance=pl.coalesce("instance", "server"),
    )
    lines: list[str] = []
    keys = ["instance", "model_name", "engine"]

    def counter(name: str, help_: str, group: list[str], value: pl.Expr, rows: pl.DataFrame) -> None:
        if not rows.height:
            return
        per = (
            rows.group_by([*keys, *group, "bin"])
            .agg(value.alias("v"))
            .sort([*keys, *group, "bin"], nulls_last=True)
            .with_columns(pl.col("v").cum_sum().over([*keys, *group]).alias("total"))
        )
        lines.append(f"# TYPE {name} counter")
        lines.append(f"# HELP {name} {help_}")
        for _, series in per.group_by([*keys, *group], maintain_order=True):
            first = series.row(0, named=True)
            lab = _labels([*extra, *[(k, first[k]) for k in keys], *[(g, first[g]) for g in group]])
            lines.append(f"{name}_total{lab} 0 {_ts(_minus(first['bin'], bin_s))}")
            for r in series.iter_rows(named=True):
                lines.append(f"{name}_total{lab} {int(r['total'])} {_ts(r['bin'])}")

    counter(
        "preemptlog_preemptions",
        "Preemptions found by preemptlog, by cause (gate/sub-kind) and vLLM's mechanism.",
        ["cause", "mechanism"],
        pl.len(),
        ev,
    )
    counter(
        "preemptlog_recompute_tokens",
        "Tokens the preemptions threw away (recomputed on resume), from the known per-event values.",
        [],
        pl.col("recompute_tokens").sum(),
        ev.filter(pl.col("recompute_tokens").is_not_null()),
    )
    vis = (
        ident.filter(pl.col("log_first").is_not_null())
        .unique([*keys, "log_first"])
        .sort([*keys, "log_first"], nulls_last=True)
    )
    if vis.height:
        lines.append("# TYPE preemptlog_count_visible gauge")
        lines.append(
            "# HELP preemptlog_count_visible 1 when the bundle can show how many preemptions happened, 0 when it cannot."
        )
        last: dict[str, str] = {}
        for r in vis.iter_rows(named=True):
            lab = _labels([*extra, *[(k, r[k]) for k in keys]])
            v = 1 if r["count_visible"] else 0
            for t in (r["log_first"], r["log_last"]):
                ts = _ts(t) if t is not None else None
                if ts is None or (lab in last and float(last[lab]) >= float(ts)):
                    continue  # each series strictly in time order
                last[lab] = ts
                lines.append(f"preemptlog_count_visible{lab} {v} {ts}")
    lines.append("# EOF")
    return "\n".join(lines) + "\n", untimed


def _minus(t: datetime, seconds: int) -> datetime:
    from datetime import timedelta

    return t - timedelta(seconds=seconds)


def parse_labels(items: list[str] | None) -> dict[str, str]:

    out: dict[str, str] = {}
    for item in items or []:
        k, sep, v = item.partition("=")
        if not sep or not LABEL_RE.match(k) or k.startswith("__"):
            raise UsageError(
                f"--label {item!r}: expected NAME=VALUE with a Prometheus label name", hint="e.g. job=vllm"
            )
        out[k] = v
    return out
