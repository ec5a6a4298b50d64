"""``preemptlog fleet report``: the fleet's questions answered from the dataset (polars, lazy).

Every section is a query over ``scan_parquet(hive_partitioning=True)`` of the tables
(dataset.scan), filtered on the ``day`` partition first (only the days asked for are read):

- ``servers``: servers ranked by preemptions, then by tokens recomputed;
- ``by``: causes and mechanisms per model, version, server, or per cause (``--by``);
- ``trend``: preemptions per day and cause, tokens recomputed per day;
- ``fixes``: the fixes that address most events fleet-wide (summed over servers);
- ``not_visible``: servers whose counts the bundles cannot show, and what to add;
- ``errors``: bundles that failed or were damaged, by exit code;
- ``totals``: bundles by outcome, servers, events, and how much of the preemptions comes from
  damaged bundles read in part (``incidents.partial``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from typing import Any

import polars as pl

from ..errors import InputError, UsageError
from ..model import VERSION as __version__
from . import dataset, schema
from .rows import cause_of

BY = {"server": ["server"], "model": ["model"], "version": ["vllm_version"], "cause": ["cause"]}


@dataclass(frozen=True)
class Window:
    since: datetime | None = None
    until: datetime | None = None

    def days(self) -> pl.Expr:
        c = pl.col(schema.PARTITION)
        cond = pl.lit(True)
        if self.since is not None:
            cond = cond & (c >= self.since.date())
        if self.until is not None:
            cond = cond & (c <= self.until.date())
        return cond

    def times(self, col: str) -> pl.Expr:
        c = pl.col(col)
        cond = pl.lit(True)
        if self.since is not None:
            cond = cond & (c.is_null() | (c >= self.since))
        if self.until is not None:
            cond = cond & (c.is_null() | (c <= self.until))
        return cond

    def text(self) -> str | None:
        if self.since is None and self.until is None:
            return None
        a = self.since.isoformat() if self.since else "the start"
        b = self.until.isoformat() if self.until else "the end"
        return f"{a} to {b}"


def parse_time(text: str | None, flag: str, *, end: bool = False) -> datetime | None:
    """``YYYY-MM-DD`` (the whole day) or an ISO 8601 time; a time without a zone is UTC."""
    if text is None:
        return None
    try:
        if len(text.strip()) == 10:
            d = date.fromisoformat(text.strip())
            return datetime.combine(d, time.max if end else time.min, UTC)
        t = datetime.fromisoformat(text.strip())
    except ValueError:
        raise UsageError(
            f"{flag} {text!r}: not a date or ISO 8601 time", hint="e.g. 2026-11-29 or 2026-11-29T23:58"
        ) from None
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)


def check(out: str) -> None:
    import os

    if not os.path.isdir(out) or not any(dataset.files(out, t) for t in schema.TABLES):
        raise InputError(
            f"{out}: not a fleet dataset (no bundles, incidents or events parts)",
            hint="preemptlog fleet run ... --out DIR writes one",
        )


def _tables(out: str, w: Window) -> dict[str, pl.LazyFrame]:
    return {t: dataset.scan(out, t).filter(w.days()) for t in schema.TABLES}


def servers(inc: pl.LazyFrame) -> pl.LazyFrame:
    """Servers ranked by preemptions, then tokens recomputed (engines and bundles summed)."""
    return (
        inc.group_by("server")
        .agg(
            pl.col("model").drop_nulls().first(),
            pl.col("vllm_version").drop_nulls().first(),
            pl.col("bundle_id").n_unique().alias("bundles"),
            _sum_known("preemptions"),
            pl.col("count_visible").all().alias("count_visible"),
            _sum_known("recompute_tokens"),
            pl.col("recompute_lower_bound").any().alias("recompute_lower_bound"),
            pl.col("first_event").min(),
            pl.col("last_event").max(),
            pl.col("top_cause").sort_by("preemptions", descending=True, nulls_last=True).first(),
            pl.col("top_fix").sort_by("preemptions", descending=True, nulls_last=True).first(),
        )
        .sort(["preemptions", "recompute_tokens", "server"], descending=[True, True, False], nulls_last=True)
    )


def _sum_known(col: str) -> pl.Expr:
    """The sum of the known values; null (not 0) when none is known (a count not visible)."""
    return pl.when(pl.col(col).is_not_null().any()).then(pl.col(col).sum()).alias(col)


def grouped(events: pl.LazyFrame, by: str) -> pl.LazyFrame:
    """Preemptions per group (model, version, server) with the causes and mechanisms in it, or,
    ``by="cause"``, one row per cause with the servers, models and versions it hit."""

    ev = events.with_columns(cause=cause_of(pl.col("gate"), pl.col("sub_kind")))
    if by == "cause":
        return (
            ev.group_by("cause")
            .agg(
                pl.len().alias("preemptions"),
                pl.col("server").n_unique().alias("servers"),
                pl.col("recompute_tokens").sum(),
                pl.col("model").drop_nulls().unique().sort().str.join(", ").alias("models"),
                pl.col("vllm_version").drop_nulls().unique().sort().str.join(", ").alias("versions"),
                _counts("mechanism").alias("mechanisms"),
            )
            .sort(["preemptions", "cause"], descending=[True, False], nulls_last=True)
        )
    keys = BY[by]
    return (
        ev.group_by(keys)
        .agg(
            pl.len().alias("preemptions"),
            pl.col("server").n_unique().alias("servers"),
            pl.col("recompute_tokens").sum(),
            _counts("cause").alias("causes"),
            _counts("mechanism").alias("mechanisms"),
        )
        .sort(["preemptions", *keys], descending=[True] + [False] * len(keys), nulls_last=True)
    )


def _counts(col: str) -> pl.Expr:
    """``key n, key n`` of a column inside a group, most first."""
    vc = pl.col(col).drop_nulls().value_counts(sort=True)
    return (vc.struct.field(col) + pl.lit(" ") + vc.struct.field("count").cast(pl.String)).str.join(", ")


def trend(events: pl.LazyFrame) -> pl.LazyFrame:
    """Per day: preemptions, tokens recomputed, servers, and the count of each gate."""
    gates = ["G1-kv-space", "G2-batch-variance", "G3-queue-overflow", "G4-prefix-conflict", "undetermined"]
    return (
        events.group_by(schema.PARTITION)
        .agg(
            pl.len().alias("preemptions"),
            pl.col("recompute_tokens").sum(),
            pl.col("server").n_unique().alias("servers"),
            *[(pl.col("gate") == g).sum().alias(g) for g in gates],
        )
        .sort(schema.PARTITION)
    )


def fixes(findings: pl.LazyFrame) -> pl.LazyFrame:
    """The fixes ranked by the events they address, summed over every server that got them."""
    f = findings.filter(pl.col("finding") == "fix")
    return (
        f.group_by("key")
        .agg(
            pl.col("count").sum().alias("events_addressed"),
            pl.struct("bundle_id", "server").n_unique().alias("servers"),
            (pl.col("value") == 1).sum().alias("servers_rank_1"),
            pl.col("text").sort_by("count", descending=True, nulls_last=True).first().alias("example"),
        )
        .rename({"key": "option"})
        .sort(["events_addressed", "servers", "option"], descending=[True, True, False], nulls_last=True)
    )


def not_visible(inc: pl.LazyFrame) -> pl.LazyFrame:
    """Servers whose preemption counts the bundles cannot show, with why and what to add."""
    return (
        inc.filter(~pl.col("count_visible"))
        .group_by("server", "model", "vllm_version")
        .agg(
            pl.col("not_visible_reason").drop_nulls().first().alias("reason"),
            pl.col("remedy").drop_nulls().first(),
            pl.col("bundle_id").n_unique().alias("bundles"),
        )
        .sort("server")
    )


def errors(err: pl.LazyFrame) -> pl.LazyFrame:
    return (
        err.group_by("exit_code", "error")
        .agg(
            pl.col("bundle_id").n_unique().alias("bundles"),
            pl.col("path").first().alias("example"),
            pl.col("message").first().alias("message"),
        )
        .sort("exit_code")
    )


def report(out: str, *, by: str = "model", window: Window | None = None) -> dict[str, pl.DataFrame]:
    """Every section as a frame (see the module docstring)."""
    check(out)
    if by not in BY:
        raise UsageError(f"--by {by!r}: one of {', '.join(BY)}")
    w = window or Window()
    t = _tables(out, w)
    inc = t["incidents"].filter(w.times("first_event") & w.times("log_first"))
    ev = t["events"].filter(w.times("time"))
    frames = pl.collect_all(
        [
            servers(inc),
            grouped(ev, by),
            trend(ev),
            fixes(t["findings"]),
            not_visible(inc),
            errors(t["errors"]),
            t["bundles"].select(
                pl.len().alias("bundles"),
                (pl.col("outcome") == "ok").sum().alias("ok"),
                (pl.col("outcome") == "partial").sum().alias("partial"),
                (pl.col("outcome") == "error").sum().alias("error"),
                pl.col("servers").sum().alias("servers"),
                pl.col("events").sum().alias("events"),
            ),
            partial_share(inc),
        ]
    )
    names = ["servers", "by", "trend", "fixes", "not_visible", "errors", "totals", "_partial"]
    secs = dict(zip(names, frames, strict=True))
    part = secs.pop("_partial")
    secs["totals"] = pl.concat([secs["totals"], part], how="horizontal") if secs["totals"].height else secs["totals"]
    return secs


def partial_share(inc: pl.LazyFrame) -> pl.LazyFrame:
    """How much of the totals comes from damaged bundles read in part (``incidents.partial``): their
    preemptions (of the visible counts) and their servers."""
    p = pl.col("partial").fill_null(False)
    return inc.select(
        pl.col("preemptions").filter(p).sum().alias("preemptions_from_partial"),
        pl.col("preemptions").sum().alias("preemptions"),
        pl.struct("bundle_id", "server").filter(p).n_unique().alias("servers_from_partial"),
        pl.col("bundle_id").filter(p).n_unique().alias("partial_bundles_with_rows"),
    )


def as_json(sections: dict[str, pl.DataFrame], *, by: str, window: Window) -> dict[str, Any]:

    def rows(df: pl.DataFrame) -> list[dict[str, Any]]:
        out = []
        for r in df.to_dicts():
            out.append({k: (v.isoformat() if isinstance(v, (datetime, date)) else v) for k, v in r.items()})
        return out

    totals = sections["totals"].to_dicts()[0] if sections["totals"].height else {}
    return {
        "preemptlog": __version__,
        "schema_version": schema.SCHEMA_VERSION,
        "window": window.text(),
        "group_by": by,  # what the "by" section's rows are grouped by (the section keeps its name)
        "totals": totals,
        **{k: rows(v) for k, v in sections.items() if k != "totals"},
    }


def headline(sections: dict[str, pl.DataFrame]) -> str:
    """The report's first line: how many, on how many servers, the top cause and fix."""
    tot = sections["totals"].to_dicts()[0] if sections["totals"].height else {}
    srv = sections["servers"]
    n = int(srv.get_column("preemptions").sum() or 0) if srv.height else 0
    affected = srv.filter(pl.col("preemptions") > 0).height if srv.height else 0
    hidden = sections["not_visible"].height
    trend_ = sections["trend"]
    parts = [f"{n} preemptions on {affected} of {srv.height} server(s) in {tot.get('bundles', 0)} bundle(s)"]
    by_cause = {}
    for g in ("G1-kv-space", "G2-batch-variance", "G3-queue-overflow", "G4-prefix-conflict", "undetermined"):
        if g in trend_.columns:
            by_cause[g] = int(trend_.get_column(g).sum() or 0)
    causes = ", ".join(
        f"{g.split('-')[0] if g != 'undetermined' else g} {k}"
        for g, k in sorted(by_cause.items(), key=lambda x: -x[1])
        if k
    )
    line = parts[0] + (f": {causes}" if causes else "")
    if hidden:
        line += f"; {hidden} server(s) whose count is not visible"
    if tot.get("error") or tot.get("partial"):
        line += f"; {tot.get('error', 0)} bundle(s) failed, {tot.get('partial', 0)} damaged (errors)"
    if tot.get("servers_from_partial"):
        line += (
            f"; {tot.get('preemptions_from_partial') or 0} of the preemptions come from "
            f"{tot.get('partial_bundles_with_rows', 0)} damaged bundle(s) read in part"
        )
    fx = sections["fixes"]
    if fx.height:
        top = fx.row(0, named=True)
        line += f". Top fix fleet-wide: {top['option']} (addresses {top['events_addressed']} event(s) on {top['servers']} server(s))"
    return line
