"""Counter series of another server beside the bundle's logs (docs/prometheus.md "Another server's counter").

A /metrics page or a Prometheus answer can hold the counters of servers whose logs are not in the bundle:
a query without a ``model_name`` filter, a scrape of the wrong port. Their counts are not the logged
server's, and judging their events on its stats lines explains another server's preemptions by this one's
KV cache. A counter series is **another server's** where the bundle has a log and

- its engine kind (the engine whose metric name it is: ``sglang:`` beside a vLLM log) is the kind of no
  log in the bundle: a log of one engine never shows another engine's server; or
- its ``model_name`` is none of the names the logs of its engine kind state the server serves (an engine
  server process serves one model: vLLM's ``served_model_name=`` of its engine config line, its ``model``;
  SGLang's ``server_args`` ``served_model_name`` / ``model_path``). A log that names no model keeps every
  series of its engine, as before.

Such a series makes no events, is in no count, window or reading of the reconciliation, and its gauges
are no evidence (prom_series rows of its labels): :func:`other_servers` takes it out of the draft before
the event set is decided and says what it counted (``summary.reconciliation.other_servers``: the series,
its count, its first and last sample ``file:line``, why), and a note says the same.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import polars as pl

from .. import engines
from ..sources import LOG_KINDS

if TYPE_CHECKING:
    from ..model.result import AnalysisView

# configuration keys whose value is a name the server serves its model by (its model_name label's value)
SERVED_KEYS = ("served_model_name", "model")
SERIES = ["scope", "engine", "model_name", "engine_kind"]


@dataclass(frozen=True)
class Others:
    """The draft without other servers' series, and what they counted."""

    view: Any  # the AnalysisView with those series taken out of its frames, counters and config
    parts: list[pl.DataFrame]  # the partial event frames without their events
    found: list[dict[str, Any]]  # one entry per series (summary.reconciliation.other_servers)
    notes: list[str]


def _served(a: AnalysisView, logs: list[str]) -> dict[str, dict[str, str]]:
    """Engine kind -> {name the logs state it serves -> the first ``file:line`` stating it}: the names of
    SERVED_KEYS, the served name's rows first (the label's own value)."""
    cfg = a.config
    if cfg is None or cfg.height == 0 or not {"key", "value", "status", "source", "line"} <= set(cfg.columns):
        return {}
    kind = pl.col("engine_kind") if "engine_kind" in cfg.columns else pl.lit(engines.default().name)
    rows = cfg.filter(
        (pl.col("status") == "seen") & pl.col("key").is_in(SERVED_KEYS) & pl.col("source").is_in(logs)
    ).with_columns(
        _kind=kind.fill_null(engines.default().name),
        # a list (--served-model-name a b: ['a', 'b']) serves by its first name (ModelConfig.served_model_name)
        _v=pl.col("value").str.strip_chars(" [").str.split(",").list.first().str.strip_chars(" '\"[],"),
    )
    out: dict[str, dict[str, str]] = {}
    for key in SERVED_KEYS:
        for k, v, src, line in rows.filter(pl.col("key") == key).select("_kind", "_v", "source", "line").iter_rows():
            if v and v != "None":
                out.setdefault(str(k), {}).setdefault(str(v), f"{src}:{line}")
    return out


def _log_kinds(a: AnalysisView) -> dict[str, str]:
    """Engine kind of each log of the bundle -> its first log file (display name)."""
    out: dict[str, str] = {}
    for f in a.bundle.files:
        for e in engines.registered():
            if f.kind in e.log_kinds:
                out.setdefault(e.name, f.display)
    return out


def _series_text(raw: Any) -> str:
    m = re.match(r"\s*([^{\s]+(?:\{[^}]*\})?)", str(raw or ""))
    return m.group(1) if m else str(raw)


def other_servers(a: AnalysisView, parts: list[pl.DataFrame]) -> Others:
    """Take the counter series of other servers (the module docstring) out of ``a`` and ``parts``."""
    pairs = a.frames.get("prom_preemptions")
    logs = [f.display for f in a.bundle.files if f.kind in LOG_KINDS]
    if pairs is None or pairs.height == 0 or not logs or "engine_kind" not in pairs.columns:
        return Others(a, parts, [], [])
    kinds = _log_kinds(a)
    served = _served(a, logs)
    p = pairs.with_columns(pl.col("engine_kind").fill_null(engines.default().name), pl.col("model_name").fill_null(""))
    found: list[dict[str, Any]] = []
    foreign: list[tuple[str, str, str, str]] = []
    for (scope, engine, model, kind), grp in p.group_by(SERIES, maintain_order=True):
        e = engines.get(str(kind))
        if kind not in kinds:
            others = ", ".join(f"{engines.get(k).display} ({f})" for k, f in kinds.items())
            why = (
                f"a counter of {e.display}, whose log is not in the bundle: the bundle's logs are {others}'s, and a "
                f"log of one engine never shows another engine's server"
            )
        elif model and served.get(kind) and model not in served[kind]:
            names = "; ".join(f"{n} ({w})" for n, w in served[kind].items())
            why = (
                f"model_name {model!r}, while the {e.display} log states the server serves {names}: one "
                f"{e.display} server process serves one model"
            )
        else:
            continue
        grp = grp.sort("end", nulls_last=True)
        inc = grp.get_column("increase")
        first, last = grp.row(0, named=True), grp.row(grp.height - 1, named=True)
        count = int(inc.fill_null(0).sum()) if inc.is_not_null().any() else int(round(last["value"] or 0))
        cite = [f"{r['source']}:{r['line']}" + (f":{r['col']}" if r["col"] is not None else "") for r in (first, last)]
        found.append(
            {
                "series": _series_text(last["raw"]),
                "engine_kind": str(kind),
                "engine": engine,
                "model_name": model or None,
                "scope": scope,
                "count": count,
                "samples": grp.height,
                "from": cite,
                "why": why,
            }
        )
        foreign.append((str(scope), str(engine), str(model), str(kind)))
    if not found:
        return Others(a, parts, [], [])
    bad = pl.DataFrame(foreign, schema=SERIES, orient="row")
    out_pairs = p.join(bad, on=SERIES, how="anti").with_columns(
        pl.when(pl.col("model_name") == "").then(None).otherwise(pl.col("model_name")).alias("model_name")
    )
    # the events their increases and readings made (prometheus.counter_events: "<file>:<line>[:<col>]~i<k>")
    gone = p.join(bad, on=SERIES, how="semi")
    keys = sorted(
        {
            f"{s}:{'?' if ln is None else ln}" + (f":{c}" if c is not None else "")
            for s, ln, c in gone.select("source", "line", "col").iter_rows()
        }
    )
    prom_src = [f.display for f in a.bundle.of_kind("prometheus")]
    mine = pl.col("source").is_in(prom_src) & pl.col("event_id").str.replace(r"~[a-z][0-9]+$", "").is_in(keys)
    new_parts = [df.filter(~mine) if df.height and {"source", "event_id"} <= set(df.columns) else df for df in parts]
    frames = dict(a.frames)
    frames["prom_preemptions"] = out_pairs.select(pairs.columns).cast(pairs.schema)  # type: ignore[arg-type]
    # the gauges of another model's series are that server's too (an engine kind's gauges are its own names)
    models = bad.filter(pl.col("engine_kind").is_in(list(kinds))).select("scope", "engine", "model_name").unique()
    for name in ("prom_series", "prom_samples"):
        df = frames.get(name)
        if df is not None and df.height and models.height and {"scope", "engine", "model_name"} <= set(df.columns):
            frames[name] = df.join(
                models,
                left_on=["scope", "engine", pl.col("model_name").fill_null("")],
                right_on=list(models.columns),
                how="anti",
            ).select(df.columns)
    counters = dict(a.counters)
    facts = dict(counters.get("prometheus") or {})
    if facts:
        cited = {
            f"{r['source']}:{r['line']}" + (f":{r['col']}" if r["col"] is not None else "")
            for r in gone.iter_rows(named=True)
        }
        facts["counter_totals"] = [r for r in facts.get("counter_totals") or [] if r.get("from") not in cited]
        kept = frames["prom_preemptions"]
        facts["series"] = kept.select("scope", "engine", "model_name").unique().height
        facts["increase"] = int(kept.get_column("increase").fill_null(0).sum()) if kept.height else 0
        facts["resets"] = kept.filter(pl.col("reset")).height if kept.height else 0
        if "restart_dated" in kept.columns:
            facts["resets_dated"] = kept.filter(pl.col("reset") & pl.col("restart_dated")).height if kept.height else 0
        placed = kept.filter(pl.col("increase").is_not_null())
        facts["window"] = [placed.get_column("start").min(), placed.get_column("end").max()] if placed.height else None
        counters["prometheus"] = facts
    config = a.config
    gone_kinds = {k for _, _, _, k in foreign} - set(kinds)
    if gone_kinds and config is not None and config.height and "engine_kind" in config.columns:
        # an engine kind's configuration rows of the /metrics page (its prefix) are that other server's
        # (and the row saying the bundle is that engine's: key engine_kind, derived from the names' prefix)
        theirs = pl.col("engine_kind").is_in(sorted(gone_kinds)) | (
            (pl.col("key") == "engine_kind") & pl.col("value").is_in(sorted(gone_kinds))
        )
        config = config.filter(~(theirs & pl.col("source").is_in(prom_src)).fill_null(False))
    view = dataclasses.replace(a, frames=frames, counters=counters, config=config)  # type: ignore[type-var]
    notes = [
        f"{o['series']} ({o['from'][0]} to {o['from'][1]}): {o['count']} {engines.get(o['engine_kind']).noun}(s) "
        f"of another {engines.get(o['engine_kind']).display} server ({o['why']}): not this server's count, and not "
        "judged on its evidence"
        for o in found
    ]
    return Others(view, new_parts, found, notes)
