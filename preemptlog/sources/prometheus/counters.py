"""Prometheus counters and series, across files on the common clock (phase 2's ``combine``): counter
increases between consecutive samples, resets, interval events, the wide series, config rows, facts."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import polars as pl

from ...model.events import capped_count, spread_interval
from ...model.evidence import PERCENT_MAX
from ...model.frames import polars_schema
from ...model.kinds import default as default_kind
from ...model.schemas import CONFIG_SCHEMA
from .names import (
    CONFIG_LABELS,
    CONFIG_SKIP_LABELS,
    COUNTER_FIELDS,
    PLACED,
    RAW_LIMIT,
    PromFiles,
    _label,
    created,
    engine_kind_expr,
    metrics,
)

if TYPE_CHECKING:
    from ...model.frames import Schema
    from ..registry import SourceOutput


PROM_SAMPLES_SCHEMA = {
    "time": "Datetime(time_unit='us', time_zone='UTC')",
    "scope": "String",
    "engine": "String",
    "model_name": "String",
    "metric": "String",
    "field": "String",
    "labels": "String",
    "value": "Float64",
    "source": "String",
    "line": "UInt32",
}


# The series frame's values read from one sample of the scrape (each with its own line, ``<name>_line``).
SERIES_GAUGES = (
    "running",
    "waiting",
    "waiting_capacity",
    "waiting_deferred",
    "swapped",
    "kv_usage",
    "cpu_kv_usage",
    "preemptions_total",
)


PROM_SERIES_SCHEMA = {
    "time": "Datetime(time_unit='us', time_zone='UTC')",
    "scope": "String",
    "engine": "String",
    "model_name": "String",
    "running": "Float64",
    "waiting": "Float64",
    "waiting_capacity": "Float64",
    "waiting_deferred": "Float64",
    "swapped": "Float64",
    "kv_usage": "Float64",  # percent
    "cpu_kv_usage": "Float64",  # percent
    "preemptions_total": "Float64",  # counter value (since engine start or last reset)
    "preemptions": "Int64",  # increase since the previous scrape of the series
    "prefix_hit_rate": "Float64",  # percent, hits/queries increase in the interval (V0: the gauge)
    "finished_requests": "Float64",  # vllm:request_num_preemptions_count increase
    "finished_preemptions": "Float64",  # vllm:request_num_preemptions_sum increase
    "finished_preempted_requests": "Float64",  # count increase - bucket{le="0"} increase: preempted at least once
    "source": "String",
    "line": "UInt32",  # the scrape's first sample line of the engine (order only: cite a value by its own line)
    # Each gauge's own sample line (``<field>_line``, null without the sample): a scrape holds every
    # gauge on a line of its own, so a value is cited by its line, never by ``line``.
    **{f"{f}_line": "UInt32" for f in SERIES_GAUGES},
}


PROM_PREEMPTIONS_SCHEMA = {
    "scope": "String",
    "engine": "String",
    "model_name": "String",
    "start": "Datetime(time_unit='us', time_zone='UTC')",  # previous sample (null for the first)
    "end": "Datetime(time_unit='us', time_zone='UTC')",
    "prev_value": "Float64",
    "value": "Float64",
    "increase": "Int64",  # null for the first sample of a series
    "reset": "Boolean",
    "source": "String",
    "line": "UInt32",
    "col": "UInt32",
    "stream": "Int32",
    "raw": "String",
    "engine_kind": "String",  # vllm | sglang (the metric's prefix): its events carry it
    # the counter's _created at this sample: its engine's start (null when the scrape does not expose it)
    "created": "Datetime(time_unit='us', time_zone='UTC')",
    "created_src": "String",  # file:line of that _created sample
    "restart_dated": "Boolean",  # a reset with a new _created after the previous sample: start is the new _created
}


def _dtypes(schema: dict[str, str]) -> Schema:

    return polars_schema(schema)


PERCENT_GAUGES = ("kv_usage", "cpu_kv_usage", "prefix_hit_rate_gauge")  # fields read in percent


def _combine(parsed: PromFiles, out: SourceOutput) -> SourceOutput:
    """Across files, on the common clock: ranks of one engine, counter increases (a series spans
    files), events, series, config and the counter facts."""
    if PLACED not in out.frames:
        return out
    s = out.frames.pop(PLACED)
    known = metrics()
    s = _one_server(s, out)
    s = _unlabelled(s, out)
    s = s.with_columns(
        _ek=engine_kind_expr(pl.col("name")),
        model_name=pl.col("model_name").fill_null(""),
        field=pl.col("name").replace_strict(
            {k: v[0] for k, v in known.items()} | {k: "created" for k in created()},
            default=None,
            return_dtype=pl.String,
        ),
        value=pl.col("value")
        * pl.col("name").replace_strict({k: v[2] for k, v in known.items()}, default=1.0, return_dtype=pl.Float64),
    )
    # Samples that are no reading: missing (not evaluable), never a value, never the largest of the ranks
    # below. A usage or hit-rate gauge (scaled to percent) that is no percentage (NaN, Inf, 2.5 -> 250 %, a
    # negative value); a counter below 0 (a counter counts up from 0: a damaged or hand-edited page, never a
    # baseline to count from).
    pct = pl.col("field").is_in(PERCENT_GAUGES)
    counter = pl.col("name").replace_strict({k: v[1] for k, v in known.items()}, default=None) == "counter"
    # A usage gauge that is no percentage is damaged input like a counter that is no count (exit 5): vLLM
    # writes the KV pool's used fraction, which is never NaN or outside 0-1. A hit-rate gauge alone is not:
    # it is a ratio that can be 0/0 (no query yet), so what it says is warned and the run is not partial.
    unreadable: tuple[tuple[pl.Expr, float, str, str, pl.Expr], ...] = (
        (
            pct & ~(pl.col("value").is_finite() & pl.col("value").is_between(0.0, PERCENT_MAX)).fill_null(False),
            100.0,
            "usage / hit-rate gauge sample(s) are not a percentage within 0-100",
            "never as 0 or as a reading",
            pl.col("field") != "prefix_hit_rate_gauge",
        ),
        # A counter reading that is no count: NaN, +Inf, -Inf (the exposition format allows them) or below 0
        # (a counter counts up from 0: a damaged or hand-edited page, never a baseline to count from). It is
        # skipped (no reading, never a reset or a jump), said once, and the input is damaged (exit 5).
        (
            (counter & ~(pl.col("value").is_finite() & (pl.col("value") >= 0))).fill_null(False),
            1.0,
            "counter sample(s) are no count (NaN, +Inf, -Inf or negative)",
            "a counter counts up from 0 in whole numbers: skipped, no reading (never a reset or a jump)",
            pl.lit(True),  # damaged input, like a sample line whose value is unreadable (text.py): exit 5
        ),
    )
    for bad, scale, what, why, damaged in unreadable:
        bad_rows = s.filter(bad & pl.col("value").is_not_null())
        if bad_rows.height:
            first = bad_rows.sort("file_id", "n").row(0, named=True)
            out.warnings.append(
                f"Prometheus: {bad_rows.height} {what} (first: {first['name']} {first['value'] / scale:g} at "
                f"{first['source']}:{first['n']}"
                + (f":{first['col']}" if first.get("col") is not None else "")
                + f"): each is read as missing (not evaluable), {why}"
            )
            s = s.with_columns(value=pl.when(bad).then(None).otherwise(pl.col("value")))
            out.partial = out.partial or bool(bad_rows.select(damaged.any()).item())
    # Ranks of one engine (TP/DP workers, API server processes, Ray replicas: series that
    # differ only by a pid / rank / replica label) are one engine: per scrape, a metric's value
    # is the largest of theirs, never their sum (gauges; and a counter counts per engine).
    ranks = ["scope", "scrape_id", "engine", "model_name", "name", "reason", "le"]  # name: one engine kind each
    before = s.height
    # The same series (same labels) twice in one scrape (text.py: between two separators, or with no
    # HELP/TYPE line read again): a duplicated line, another server with the same labels or a second
    # scrape without its separator line; kept like ranks.
    repeats = before - s.select(*ranks, "labels").n_unique() if before else 0
    if repeats:
        out.notes.append(
            f"Prometheus: {repeats} sample(s) repeat a series already read in the same scrape (same labels, "
            "with no separator line and no HELP/TYPE line read again between them: a duplicated line, another "
            "server with the same labels and a second scrape without its own separator line cannot be told "
            "apart): the largest value of each is used; write a separator line before each scrape"
        )
        before -= repeats
    s = (
        s.sort("value", descending=True, nulls_last=True)
        .unique(ranks, keep="first")
        .sort("file_id", "n", "col", nulls_last=True)
    )
    if s.height < before:
        out.notes.append(
            f"Prometheus: {before - s.height} sample(s) of other ranks of the same engine (same metric, engine "
            "and scrape, other labels) were not added: the largest value of each is used"
        )
    samples = s.filter(pl.col("field") != "created")

    # ---- config from vllm:cache_config_info labels, and the engines the metric names' prefixes show
    out.config = pl.concat([_config_rows(samples), _engine_rows(samples)], how="vertical")

    # ---- counters: increases between consecutive samples of a series (a NaN or Inf counter
    # sample is no count: left out, as the facts and events need whole numbers)
    counters = _counter_pairs(
        s.filter(~pl.col("field").is_in(list(COUNTER_FIELDS)) | pl.col("value").is_finite().fill_null(False))
    )
    pre = counters.filter(pl.col("field") == "preemptions")
    # A counter is read after its creation: a _created later than its reading's time (by more than the
    # second a scrape time written to the second can be short by) says the server's clock and the
    # scrape's time disagree (clock skew, or an assumed scrape time). The count since _created stands;
    # where its engine start and events lie against the scrapes does not.
    early = pre.filter((pl.col("created") - pl.col("time") > pl.duration(seconds=1)).fill_null(False)).sort(
        "file_id", "n"
    )
    if early.height:
        r = early.row(0, named=True)
        ahead = (r["created"] - r["time"]).total_seconds()
        out.warnings.append(
            f"Prometheus: {early.height} reading(s) of {r.get('name') or 'the preemption counter'} are dated before "
            "their counter's "
            f"_created (first: engine {r['engine']} read {r['value']:g} at {_t(r['time'])} ({r['source']}:{r['n']}), "
            f"_created {_t(r['created'])} ({r['created_src']}), {ahead:g} s later): a counter is read after it is "
            "created, so the server's clock and the scrape's time disagree (clock skew between the scraping host and "
            "the server, or an assumed scrape time): the count since _created stands; its engine start and the "
            "events' times do not agree with the scrapes (--offset shifts one clock)"
        )
    relabelled = pre.filter(pl.col("model_seen") != pl.col("model_name"))
    if relabelled.height:
        r = relabelled.sort("file_id", "n").row(0, named=True)
        out.notes.append(
            f"Prometheus: {relabelled.height} reading(s) of {r.get('name') or 'the preemption counter'} carry another "
            "model_name than "
            f"their engine's run (first: engine {r['engine']} {r['model_name']!r}, then {r['model_seen']!r} at "
            f"{r['source']}:{r['n']}, one _created {_t(r['created'])} at {r['created_src']}): one process serves one "
            "model, so they are one counter, counted once under the first name"
        )
    # A restart dated by a new _created: the increase counts from the new run's start, so its
    # events lie after it, never in the downtime between the runs (issue 38).
    dated_restart = pl.col("reset") & pl.col("prev_time").is_not_null() & (pl.col("created") > pl.col("prev_time"))
    prom_pre = pre.select(
        "scope",
        "engine",
        "model_name",
        pl.when(dated_restart.fill_null(False)).then(pl.col("created")).otherwise(pl.col("prev_time")).alias("start"),
        pl.col("time").alias("end"),
        "prev_value",
        "value",
        "increase",
        "reset",
        "source",
        pl.col("n").alias("line"),
        "col",
        "stream",
        _raw_expr().alias("raw"),
        pl.col("_ek").alias("engine_kind"),
        "created",
        "created_src",
        dated_restart.fill_null(False).alias("restart_dated"),
    ).cast(_dtypes(PROM_PREEMPTIONS_SCHEMA))
    out.frames["prom_preemptions"] = prom_pre
    made = counter_events(prom_pre)
    out.events.append(made)
    counted = prom_pre.filter(pl.col("increase") > 0).get_column("increase").sum() or 0
    if counted > made.height:  # capped (vllm.preemptions.capped_count): implausible increases
        out.warnings.append(
            f"Prometheus counter increases add up to {counted} preemptions, implausibly many (a damaged value?): "
            f"{made.height} events made from them"
        )
        out.partial = True

    # ---- frames
    out.frames["prom_samples"] = samples.select(
        "time",
        "scope",
        "engine",
        "model_name",
        pl.col("name").alias("metric"),
        "field",
        "labels",
        "value",
        "source",
        pl.col("n").alias("line"),
    ).sort("scope", "engine", "time", "source", "line", nulls_last=False)
    out.frames["prom_series"] = _series(samples, counters)
    out.counters["prometheus"] = facts = _facts(prom_pre, counters, parsed)
    # A run without engine labels beside a labelled one of the same server (_unlabelled: before or after it)
    # is another run: between them the server restarted, so a count across them is a lower bound, like one
    # across a counter reset (what the run before counted after its last reading is not seen).
    runs = prom_pre.filter(pl.col("engine") == UNLABELLED).select("scope", "model_name").unique().height
    facts["resets"] = int(facts.get("resets") or 0) + runs
    resets = prom_pre.filter(pl.col("reset"))
    undated = resets.filter(~pl.col("restart_dated")).height
    if undated:
        out.notes.append(
            f"Prometheus: {undated} counter reset(s) of vllm:num_preemptions_total (engine restart): the increase "
            "after a reset is the value since the restart; preemptions between the last scrape before a restart "
            "and the restart are not visible (a lower bound)."
        )
    dated = pre.filter(pl.col("reset") & dated_restart.fill_null(False))
    for r in dated.head(5).iter_rows(named=True):
        # The value may have fallen or risen: the new _created says the counter started again, whatever
        # its value (a new run can count more than the old one had by its last scrape).
        out.notes.append(
            f"Prometheus: engine {r['engine']} restarted (a counter reset with a new _created: it changed"
            + (f" from {_t(r['prev_created'])}" if r.get("prev_created") is not None else "")
            + f" to {_t(r['created'])}, {r['created_src']}, so the counter started again): the run before last read "
            f"{r['prev_value']:g} at {_t(r['prev_time'])}, the new run read {r['value']:g} at {_t(r['time'])} "
            f"({r['source']}:{r['n']}), counted from its _created; those {r['value']:g} are placed between its start "
            "and that reading, none in the downtime between the runs; what the run before counted after "
            f"{_t(r['prev_time'])} is not visible, so a count across the restart is a lower bound"
        )
    return out


def _one_server(s: pl.DataFrame, out: SourceOutput) -> pl.DataFrame:
    """Two sources of one series are one series. A /metrics page carries no ``instance`` label (Prometheus
    adds it, and ``job``, when it stores a scrape), so a page and a Prometheus answer (query_range, query)
    about the same server had two scopes (the folder; the folder and the instance) and both were counted:
    the preemptions twice. A page's series (name, engine and model labels) that a Prometheus answer in the
    same folder holds for exactly one instance is that instance's series (one scope); with several
    instances it cannot be told whose, and stays apart. Then the readings of a series at the same time from
    two files are one reading where they agree (kept once); said in a note."""
    folder = pl.col("scope").str.split("|").list.first()
    s = s.with_columns(_folder=folder, _ekey=pl.col("engine").fill_null(""), _mkey=pl.col("model_name").fill_null(""))
    k = ["_folder", "name", "_ekey", "_mkey"]
    owners = (
        s.filter(pl.col("instance").is_not_null())
        .group_by(k)
        .agg(pl.col("scope").unique().alias("_owners"))
        .filter(pl.col("_owners").list.len() == 1)
        .with_columns(_owner=pl.col("_owners").list.first())
        .drop("_owners")
    )
    s = s.join(owners, on=k, how="left", maintain_order="left")
    moved = pl.col("instance").is_null() & pl.col("_owner").is_not_null()
    n_moved = s.filter(moved).height
    s = s.with_columns(scope=pl.when(moved).then(pl.col("_owner")).otherwise(pl.col("scope")))
    # The same reading from two files (same series, time and value): one reading.
    same = ["scope", "name", "_ekey", "_mkey", "reason", "le", "time", "value"]
    timed = pl.col("time").is_not_null()
    twice = pl.int_range(pl.len()).over(same) > 0
    dup = s.select((timed & twice & (pl.col("file_id").n_unique().over(same) > 1)).alias("d")).get_column("d")
    n_dup = int(dup.sum())
    s = s.filter(~dup)
    owners_shown = sorted(set(s.filter(moved).get_column("_owner").drop_nulls().to_list()))
    if n_moved:
        out.notes.append(
            f"Prometheus: {n_moved} reading(s) of /metrics pages (no instance label) are of series a Prometheus "
            f"answer in the same folder holds for one instance ({', '.join(o.split('|', 1)[-1] for o in owners_shown)};"
            " same metric, engine and model): two sources of one series, read as one series"
        )
    if n_dup:
        out.notes.append(
            f"Prometheus: {n_dup} reading(s) repeat a reading of the same series at the same time with the same value "
            "in another file (a page and a Prometheus answer, or two copies): read once"
        )
    return s.drop("_folder", "_ekey", "_mkey", "_owner")


# The engine key of a series read without an engine label in a scope (a server) whose other readings of the
# same metric carry one: a series of its own, never engine 0's.
UNLABELLED = "unlabelled"


def _unlabelled(s: pl.DataFrame, out: SourceOutput) -> pl.DataFrame:
    """Each sample's engine key (``engine``): its engine label (SGLang: ``dp_rank``, its DP workers; its TP
    ranks are ranks of one engine), else engine 0, as a server with one engine and no label (V0, an older
    page) is read. But in a scope (one server) where other readings of the same metric label their engine
    (vLLM labels ``engine`` from V1 on), a reading without the label is no reading of engine 0: an older
    vLLM's page (before an upgrade, or after a downgrade) or a relabelled / federated view that dropped the
    label. Read as engine 0 it made a second source of engine 0's series (10, then 3 without the label,
    then 14: a counter reset that never was, and 3 + 11 counted for 4). The rule: such readings are never
    engine 0's. Those within the time span of the labelled readings (or without a time) are a second view of
    the same server's counters, whose engine is unknown: not counted (a relabel that sums the engines would
    count them twice). Those wholly before or after it are another run (an older vLLM has no engine label):
    a series of their own, engine ``unlabelled``, counted by their own increases. Said in a note."""
    lab = pl.coalesce(pl.col("engine"), _label("dp_rank"))
    s = s.with_columns(_lab=lab)
    key = ["scope", "name"]
    mixed = pl.col("_lab").is_null() & pl.col("_lab").is_not_null().any().over(key)
    if not s.select(mixed.any()).item():
        return s.with_columns(engine=pl.col("_lab").fill_null("0")).drop("_lab")
    span = (
        s.filter(pl.col("_lab").is_not_null() & pl.col("time").is_not_null())
        .group_by(key)
        .agg(pl.col("time").min().alias("_t0"), pl.col("time").max().alias("_t1"))
    )
    s = s.join(span, on=key, how="left", maintain_order="left")
    inside = pl.col("time").is_null() | pl.col("_t0").is_null() | pl.col("time").is_between("_t0", "_t1")
    s = s.with_columns(_mixed=mixed, _inside=mixed & inside)
    counted = set(created()) | {k for k, v in metrics().items() if v[1] == "counter"}
    for inside_, words in (
        (
            True,
            "within the time span of the labelled readings (or at no time): a second view of the same server's "
            "counters (a relabelled or federated page that dropped the label), whose engine is unknown: not "
            "counted, never as engine 0's (no reset or double count made of them)",
        ),
        (
            False,
            "outside the time span of the labelled readings: another run (an older vLLM, whose pages have no "
            f"engine label): a series of its own (engine {UNLABELLED!r}), counted by its own increases, never as "
            "engine 0's",
        ),
    ):
        rows = s.filter(pl.col("_mixed") & (pl.col("_inside") == inside_) & pl.col("name").is_in(list(counted)))
        if not rows.height:
            continue
        first = rows.sort("file_id", "n").row(0, named=True)
        labels = sorted(
            set(
                s.filter(pl.col("_lab").is_not_null() & (pl.col("scope") == first["scope"]))
                .get_column("_lab")
                .to_list()
            )
        )
        where = f"{first['source']}:{first['n']}" + (f":{first['col']}" if first.get("col") is not None else "")
        out.notes.append(
            f"Prometheus: {rows.height} counter reading(s) carry no engine label (first: {first['name']} at {where}) "
            f"while the same server's other readings of them label their engine ({', '.join(labels)}): {words}"
        )
    return (
        s.filter(~pl.col("_inside"))
        .with_columns(
            engine=pl.when(pl.col("_mixed")).then(pl.lit(UNLABELLED)).otherwise(pl.col("_lab").fill_null("0"))
        )
        .drop("_lab", "_t0", "_t1", "_mixed", "_inside")
    )


def _t(t: Any) -> str:
    return str(t.isoformat(timespec="milliseconds")) if t is not None else "?"


def _raw_expr() -> pl.Expr:
    return pl.concat_str(
        [pl.col("name"), pl.lit("{"), pl.col("labels"), pl.lit("} "), pl.col("value").cast(pl.String)]
    ).str.slice(0, RAW_LIMIT)


def _counter_pairs(s: pl.DataFrame) -> pl.DataFrame:
    """One row per counter sample, with the previous sample of its series and the increase.

    ``created`` (``created_src`` its file:line): the counter's ``_created`` at that sample (its engine's
    start, prometheus_client's creation time), read in the same scrape, else the latest at or before
    the sample of the same series in another file (a separate query answer); null when not exposed."""
    key = ["scope", "engine", "model_name", "_ek", "field"]
    created_ = (
        s.filter((pl.col("field") == "created") & pl.col("created_at").is_not_null())
        .with_columns(cfield=pl.col("name").replace_strict(created(), default=None, return_dtype=pl.List(pl.String)))
        .explode("cfield")
        .select(
            "scope",
            "scrape_id",
            "engine",
            "model_name",
            "_ek",
            pl.col("cfield").alias("field"),
            pl.col("le").fill_null(""),
            "time",
            pl.col("created_at").alias("created"),
            pl.concat_str([pl.col("source"), pl.lit(":"), pl.col("n").cast(pl.String).fill_null("?")]).alias(
                "created_src"
            ),
        )
        .unique(["scope", "scrape_id", "engine", "model_name", "_ek", "field", "le"], keep="first")
        .filter(pl.col("le") == "")  # the _created of a histogram family has no le: it dates every bucket
        .drop("le")
    )
    c = s.filter(pl.col("field").is_in(list(COUNTER_FIELDS))).with_columns(le=pl.col("le").fill_null(""))
    c = c.join(created_.drop("time"), on=["scrape_id", *key], how="left")
    if created_.height and c.filter(pl.col("created").is_null() & pl.col("time").is_not_null()).height:
        c = c.with_row_index("_ri")
        dated = created_.filter(pl.col("time").is_not_null()).select(
            *key, "time", pl.col("created").alias("_c2"), pl.col("created_src").alias("_cs2")
        )
        got = (
            c.filter(pl.col("created").is_null() & pl.col("time").is_not_null())
            .select("_ri", *key, "time")
            .sort("time")
            .join_asof(dated.sort("time"), on="time", by=key, strategy="backward", check_sortedness=False)
            .select("_ri", "_c2", "_cs2")
        )
        c = (
            c.join(got, on="_ri", how="left")
            .with_columns(created=pl.coalesce("created", "_c2"), created_src=pl.coalesce("created_src", "_cs2"))
            .drop("_ri", "_c2", "_cs2")
        )
    # One run of one engine is one series whatever its model_name says: a process serves one model, so
    # readings of one engine with one _created (its counter's creation time, to the microsecond) are of
    # one counter even when the label changed between scrapes (a relabelling exporter, an edited page):
    # read as two series, each reading counted from 0 (10 then 30 was 40). The name is the run's first
    # (``model_seen`` keeps each reading's own, for the note). Without _created the label tells apart.
    run = ["scope", "field", "engine", "_ek", "le", "created"]
    c = c.with_columns(model_seen=pl.col("model_name")).with_columns(
        model_name=pl.when(pl.col("created").is_not_null())
        .then(pl.col("model_name").sort_by("time", "file_id", "n", nulls_last=True).first().over(run))
        .otherwise(pl.col("model_name"))
    )
    grp = ["scope", "field", "engine", "model_name", "_ek", "le"]
    # Readings of one series at the same time (copies of two files with one mtime, two scrapes within the
    # same second): a counter only rises within one run, so they are ordered by the run (its _created), then
    # by value, before the files' order; readings with no time keep their files' order (the only order known).
    tied = pl.when(pl.col("time").is_not_null())
    c = (
        c.with_columns(_tc=tied.then(pl.col("created")), _tv=tied.then(pl.col("value")))
        .sort([*grp, "time", "_tc", "_tv", "file_id", "n"], nulls_last=False)
        .drop("_tc", "_tv")
        .unique([*grp, "scrape_id"], keep="first", maintain_order=True)
    )
    prev = pl.col("value").shift(1).over(grp)
    prev_created = pl.col("created").shift(1).over(grp)
    moved = ((pl.col("created") - prev_created).abs() > pl.duration(milliseconds=1)).fill_null(False)
    c = c.with_columns(
        prev_value=prev,
        prev_time=pl.col("time").shift(1).over(grp),
        prev_created=prev_created,
        reset=((pl.col("value") < prev) | moved).fill_null(False),
    )
    inc = (
        pl.when(pl.col("prev_value").is_null())
        .then(None)
        .when(pl.col("reset"))
        .then(pl.col("value"))
        .otherwise(pl.col("value") - pl.col("prev_value"))
    )
    return c.with_columns(inc_f=inc, increase=inc.round(0).cast(pl.Int64, strict=False))  # NaN, inf: null


def counter_events(pairs: pl.DataFrame) -> pl.DataFrame:
    """``increase`` interval events per row of a ``prom_preemptions`` frame, spread evenly in (start, end].

    Event k of n is at start + (end - start) * k / n (at ``end`` when the start
    is unknown); ids ``<source>:<line>~i<k>`` (``<source>:<line>:<col>~i<k>`` for
    JSON answers); ``cumulative`` is the counter value after the k-th one.
    """

    p = pairs.filter(pl.col("increase") > 0)
    if p.height == 0:
        return p

    p = p.with_columns(_k=pl.int_ranges(1, capped_count(pl.col("increase")) + 1, dtype=pl.Int64)).explode("_k")
    where = pl.concat_str(
        [
            pl.col("source"),
            pl.lit(":"),
            pl.col("line").cast(pl.String).fill_null("?"),
            pl.when(pl.col("col").is_not_null())
            .then(pl.lit(":") + pl.col("col").cast(pl.String))
            .otherwise(pl.lit("")),
        ]
    )
    base = (pl.col("value") - pl.col("increase")).round(0).cast(pl.Int64)
    return p.with_columns(
        event_id=pl.concat_str([where, pl.lit("~i"), pl.col("_k").cast(pl.String)]),
        kind=pl.lit("interval"),
        time=spread_interval(pl.col("start"), pl.col("end"), pl.col("_k"), pl.col("increase")),
        time_precision=pl.lit("interval"),
        interval_start=pl.col("start"),
        interval_end=pl.col("end"),
        request_id=pl.lit(None, pl.String),
        mode=pl.lit(None, pl.String),
        cumulative=base + pl.col("_k"),
        seq=pl.col("line"),
        _sub=pl.col("_k"),
    )


def _series(samples: pl.DataFrame, counters: pl.DataFrame) -> pl.DataFrame:
    keys = ["scope", "scrape_id", "engine", "model_name"]

    def first(col: str, fld: str, extra: pl.Expr | None = None) -> list[pl.Expr]:
        """The field's value in the scrape and its own sample's line (the same row: ``value`` and ``n``
        filtered alike, in line order)."""
        cond = pl.col("field") == fld
        if extra is not None:
            cond = cond & extra
        return [pl.col("value").filter(cond).first().alias(col), pl.col("n").filter(cond).first().alias(f"{col}_line")]

    g = (
        samples.filter(pl.col("field") != "cache_config")
        .group_by(keys)
        .agg(
            pl.col("time").max(),
            pl.col("source").first(),
            pl.col("n").min().alias("line"),
            *first("running", "running"),
            *first("waiting", "waiting"),
            *first("waiting_capacity", "waiting_by_reason", pl.col("reason") == "capacity"),
            *first("waiting_deferred", "waiting_by_reason", pl.col("reason") == "deferred"),
            *first("swapped", "swapped"),
            *first("kv_usage", "kv_usage"),
            *first("cpu_kv_usage", "cpu_kv_usage"),
            *first("preemptions_total", "preemptions"),
            pl.col("value").filter(pl.col("field") == "prefix_hit_rate_gauge").first().alias("_hit_gauge"),
        )
    )
    le0 = pl.col("le").cast(pl.Float64, strict=False) == 0.0
    cin = counters.filter(
        pl.col("field").is_in(["preemptions", "prefix_queries", "prefix_hits", "hist_count", "hist_sum"])
        | ((pl.col("field") == "hist_bucket") & le0.fill_null(False))
    )
    ci = (
        cin.group_by(keys)
        .agg(
            pl.col("increase").filter(pl.col("field") == "preemptions").first().alias("preemptions"),
            pl.col("inc_f").filter(pl.col("field") == "prefix_queries").first().alias("_dq"),
            pl.col("inc_f").filter(pl.col("field") == "prefix_hits").first().alias("_dh"),
            pl.col("inc_f").filter(pl.col("field") == "hist_count").first().alias("finished_requests"),
            pl.col("inc_f").filter(pl.col("field") == "hist_sum").first().alias("finished_preemptions"),
            pl.col("inc_f").filter(pl.col("field") == "hist_bucket").first().alias("_d_le0"),
        )
        .with_columns(finished_preempted_requests=pl.col("finished_requests") - pl.col("_d_le0"))
    )
    g = g.join(ci, on=keys, how="left").with_columns(
        prefix_hit_rate=pl.coalesce(
            pl.when(pl.col("_dq") > 0).then(pl.col("_dh") / pl.col("_dq") * 100.0), pl.col("_hit_gauge")
        )
    )
    return (
        g.select(list(PROM_SERIES_SCHEMA))
        .cast(_dtypes(PROM_SERIES_SCHEMA))
        .sort("scope", "engine", "time", "source", "line", nulls_last=False)
    )


def _config_rows(samples: pl.DataFrame) -> pl.DataFrame:

    info = samples.filter(pl.col("field") == "cache_config").sort("time", "source", "n", nulls_last=True)
    rows = []
    seen: set[tuple[str, str]] = set()
    for r in info.unique("labels", keep="first", maintain_order=True).iter_rows(named=True):
        for m in re.finditer(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"', r["labels"]):
            key, value = m.group(1), m.group(2).replace('\\"', '"').replace("\\\\", "\\")
            if key in CONFIG_SKIP_LABELS or value in ("None", ""):
                continue
            key = CONFIG_LABELS.get(key, key)
            if (key, value) in seen:
                continue
            seen.add((key, value))
            rows.append(
                {
                    "key": key,
                    "value": value,
                    "status": "seen",
                    "time": r["time"],
                    "source": r["source"],
                    "line": r["n"],
                    "note": f"label of vllm:cache_config_info (engine {r['engine']})",
                }
            )
    return pl.DataFrame(rows, schema=_dtypes(CONFIG_SCHEMA))


def _engine_rows(samples: pl.DataFrame) -> pl.DataFrame:
    """``engine_kind`` rows for the engines whose metric prefix the scrapes carry, when one is not the
    default engine (``sglang:`` names): a bundle of another engine's /metrics alone is that engine's,
    told in its words (registry.shown and engine_kinds read these rows, as they read a log's). The
    first sample of each engine is cited. A bundle of the default engine's names alone gets none (its
    engine is the default already)."""
    if samples.height == 0 or "_ek" not in samples.columns:
        return pl.DataFrame(schema=_dtypes(CONFIG_SCHEMA))
    first = samples.sort("time", "source", "n", nulls_last=True).unique("_ek", keep="first", maintain_order=True)
    if set(first.get_column("_ek").to_list()) <= {default_kind()}:
        return pl.DataFrame(schema=_dtypes(CONFIG_SCHEMA))
    rows = [
        {
            "key": "engine_kind",
            "value": r["_ek"],
            "status": "derived",
            "time": r["time"],
            "source": r["source"],
            "line": r["n"],
            "note": f"the /metrics names' prefix ({r['name'].split(':')[0]}:)",
        }
        for r in first.iter_rows(named=True)
    ]
    return pl.DataFrame(rows, schema=_dtypes(CONFIG_SCHEMA))


def _empty_frames() -> dict[str, Any]:
    return {
        "prom_samples": pl.DataFrame(schema=_dtypes(PROM_SAMPLES_SCHEMA)),
        "prom_series": pl.DataFrame(schema=_dtypes(PROM_SERIES_SCHEMA)),
        "prom_preemptions": pl.DataFrame(schema=_dtypes(PROM_PREEMPTIONS_SCHEMA)),
    }


def _facts(pre: pl.DataFrame | None, counters: pl.DataFrame | None, parsed: PromFiles) -> dict[str, Any]:
    """Counter facts for reconcile.py and the summary (plain Python values)."""
    facts: dict[str, Any] = {
        "files": [fd.file.display for fd in parsed.files],
        "scrapes": sum(fd.n_scrapes for fd in parsed.files),
        "series": 0,
        "increase": 0,
        "resets": 0,
        "resets_dated": 0,
        "window": None,
        "counter_totals": [],
        "histogram": None,
        "retracted_tokens": None,
    }
    if pre is None or pre.height == 0:
        if counters is not None:
            facts["retracted_tokens"] = _retracted_tokens(counters)
        return facts
    grp = ["scope", "engine", "model_name"]
    facts["series"] = pre.select(grp).unique().height
    facts["increase"] = int(pre.get_column("increase").fill_null(0).sum())
    facts["resets"] = pre.filter(pl.col("reset")).height
    facts["resets_dated"] = pre.filter(pl.col("reset") & pl.col("restart_dated")).height  # by a new _created
    placed = pre.filter(pl.col("increase").is_not_null())
    if placed.height:
        facts["window"] = [placed.get_column("start").min(), placed.get_column("end").max()]
    last = pre.group_by(grp, maintain_order=True).agg(
        pl.col("value").last(),
        pl.col("end").last().alias("time"),
        pl.col("source").last(),
        pl.col("line").last(),
        pl.col("col").last(),
        pl.len().alias("samples"),
        pl.col("value").first().alias("first_value"),
        pl.col("end").first().alias("first_time"),
        pl.col("increase").fill_null(0).sum().alias("increase"),
        pl.col("created").first().alias("first_created"),
    )
    facts["counter_totals"] = [
        {
            "scope": r["scope"],
            "engine": r["engine"],
            "model_name": r["model_name"] or None,
            "value": int(round(r["value"])),
            "time": r["time"],
            "from": f"{r['source']}:{r['line']}" + (f":{r['col']}" if r["col"] is not None else ""),
            "samples": r["samples"],
            "first_value": int(round(r["first_value"])),
            "first_time": r["first_time"],
            "increase": int(r["increase"]),
            "first_created": r["first_created"],  # the engine's start the first reading counts from (_created)
        }
        for r in last.sort(grp).iter_rows(named=True)
    ]
    if counters is not None:
        facts["retracted_tokens"] = _retracted_tokens(counters)
        h = counters.filter(pl.col("field").is_in(["hist_sum", "hist_count"]))
        if h.height:
            # A series read once counts since the engine's start (its value); a series read more than
            # once, its increases. An engine's one-reading series beside its multi-reading one (a final
            # `curl /metrics` next to the scrapes) is the same histogram: left out.
            grp = ["scope", "engine", "model_name", "field"]
            h = h.with_columns(_n=pl.len().over(grp))
            multi = set(h.filter(pl.col("_n") > 1).get_column("engine").to_list())
            h = h.filter((pl.col("_n") > 1) | ~pl.col("engine").is_in(list(multi)))
            val = pl.when(pl.col("_n") == 1).then(pl.col("value")).otherwise(pl.col("inc_f")).fill_null(0)
            since_start = bool(h.filter(pl.col("_n") == 1).height)
            facts["histogram"] = {
                "finished_requests": float(h.filter(pl.col("field") == "hist_count").select(val.sum()).item()),
                "preemptions_of_finished_requests": float(
                    h.filter(pl.col("field") == "hist_sum").select(val.sum()).item()
                ),
                "since_engine_start": since_start,
            }
    return facts


def _retracted_tokens(counters: pl.DataFrame) -> dict[str, Any] | None:
    """The input and output tokens of the preempted (retracted) requests, the increase of the counters an
    engine's metric table names ``retracted_input_tokens`` / ``retracted_output_tokens`` (SGLang 0.5.10+'s
    ``sglang:num_retracted_{input,output}_tokens_total``) between the first and last scrape of each series:
    the KV the engine threw away, at most what is recomputed (a prefix cache may keep a prefix). The
    engine's ``recompute_counters`` reads it."""
    t = counters.filter(
        pl.col("field").is_in(["retracted_input_tokens", "retracted_output_tokens"]) & pl.col("inc_f").is_not_null()
    )
    if t.height == 0:
        return None
    src = pl.concat_str([pl.col("source"), pl.lit(":"), pl.col("n").cast(pl.String)])
    t = t.with_columns(_src=src).sort("time")
    inp = t.filter(pl.col("field") == "retracted_input_tokens").get_column("inc_f").sum()
    out = t.filter(pl.col("field") == "retracted_output_tokens").get_column("inc_f").sum()
    return {
        "input_tokens": int(inp or 0),
        "output_tokens": int(out or 0),
        "window": [t.get_column("prev_time").min(), t.get_column("time").max()],
        "first_line": t.get_column("_src")[0],
        "last_line": t.get_column("_src")[-1],
    }
