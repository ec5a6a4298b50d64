"""Block-table ``preempt`` records are the events; every count is a cross-check against them (issue 31).

vLLM counts a preemption when the preempted request is next reported, not when it is preempted:
``Scheduler._preempt_request`` records ``EngineCoreEventType.PREEMPTED`` on the request
(vllm/v1/core/sched/scheduler.py, 0.12-0.33), the event leaves the engine with the request's next
``EngineCoreOutput`` (``request.take_events()``: when it produces a token again or finishes), and
``IterationStats.update_from_events`` counts it then (vllm/v1/metrics/stats.py). The Prometheus
counter ``vllm:num_preemptions_total``, the ``Preemptions: N`` stats field and the
``vllm:request_num_preemptions`` histogram all read those counts. So a count *lags* the preemption
it counts, by as long as the request waits to run again, and never leads it (beyond the clocks'
slack). A scrape that follows a record can read the counter before it moved: records at 10.2 s,
scrapes reading 0 at 10 s, 0 at 11 s and 3 at 12 s are three preemptions, not six.

The rule, per engine whose records hold preempt events (:func:`records_as_events`; an engine
whose log has per-preemption lines of its own keeps those, with the records as their evidence):

1. **Coverage.** The records cover their engine from its first record of any type (an arrival,
   a step, a table, an event) to its last: that span's events are the records.
2. **Matching.** Every count, oldest first (a Prometheus increase between two scrapes, the first
   reading since engine start, a ``Preemptions: N`` line), takes the oldest records not yet taken
   that are stamped before it, up to :data:`CLOCK_SLACK_S` after it (separate clocks: EngineCore,
   the API server, the scraper). A line stamped to the whole second stands for that second.
3. **A count no record explains** is, inside the coverage, a disagreement and, never below vLLM's
   own count (issue 38), an event without a record: kind ``interval``, id ``<file>:<line>~c<k>``
   (counter-only), placed in the part of its interval inside the coverage (a first reading's: not
   placed, over [engine start, reading]); a `vllm serve` killed mid-storm leaves 102 records and a
   last scrape of 103: 103. Before the first record or after the last (the records stopped: a
   writer that died, a recorder turned on late) it is events of its own kind, placed in the part
   of its interval outside the coverage, and said.
4. **The lag.** Records still not counted at a source's last count are within the lag when their
   request had not finished by then (a finished request's preemptions leave with its last output);
   the others are a disagreement.

Matching is vectorised: with ``C_k`` the counts up to count ``k`` (by time) and ``A_k`` the records
stamped up to its limit, the records taken up to ``k`` are ``C_k + min(0, min_{j<=k}(A_j - C_j))``
(the greedy oldest-first matching in closed form), so no Python loop runs per count or record.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import polars as pl

from ..clock.timebase import iso
from ..model import events as ev_mod
from ..model.frames import provenance_expr
from ..model.places import server_homes

CLOCK_SLACK_S = 3.0  # a count may lead the records it counts by this much (separate clocks, scrape latency)
COUNT_KINDS = ("interval", "reconstructed")
REC_FRAMES = ("bt_events", "bt_steps", "bt_tables", "bt_requests")
_SLACK = timedelta(seconds=CLOCK_SLACK_S)


@dataclass(frozen=True)
class Coverage:
    """What one engine's records cover."""

    engine: str
    first: datetime
    last: datetime
    last_src: str  # file:line of the last record
    preempts: int


@dataclass(frozen=True)
class CrossCheck:
    """One count source against one engine's records (see the module docstring)."""

    engine: str
    source: str
    counted: int  # preemptions the source counted (its first reading since engine start included)
    first: datetime | None
    last: datetime | None  # the last count's time
    records_by_last: int  # preempt records stamped up to the last count (with the slack)
    matched: int
    without_record_inside: int  # counts no record explains, inside the coverage (a disagreement)
    outside: int  # counts no record explains, before or after the coverage (events of their own)
    not_yet_counted: int  # records up to the last count the source had not counted
    within_lag: int  # of those, records of requests still unfinished then: the lag allows them
    beyond_lag: int  # the rest: a disagreement

    @property
    def agrees(self) -> bool:
        return not self.without_record_inside and not self.beyond_lag

    def as_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "counted": self.counted,
            "matched": self.matched,
            "records_by_last_count": self.records_by_last,
            "counts_without_a_record": self.without_record_inside,
            "counts_outside_the_records": self.outside,
            "records_not_yet_counted": self.not_yet_counted,
            "of_which_within_the_lag": self.within_lag,
            "beyond_the_lag": self.beyond_lag,
            "agrees": self.agrees,
        }


@dataclass(frozen=True)
class RecordEvents:
    """The event set where records are the events, and what deciding it found."""

    events: pl.DataFrame
    used: int  # records that are events
    replaced: int  # count events dropped (the records are those preemptions)
    kept_outside: int  # count events kept: outside the records' coverage
    coverage: tuple[Coverage, ...] = ()
    checks: tuple[CrossCheck, ...] = ()
    notes: tuple[str, ...] = ()
    disagreements: tuple[str, ...] = ()
    evidence_only: int = 0  # records used as evidence of the log's own per-preemption events
    engines_as_evidence: tuple[str, ...] = field(default_factory=tuple)
    counter_only: dict[str, int] = field(default_factory=dict)  # engine -> counted preemptions without a record


@dataclass(frozen=True)
class ServerKeys:
    """The key records and counts meet by where the bundle keeps servers in folders of their own.

    A record file's server is the logs under the deepest folder above it that holds one (``b/blocktable.jsonl``
    beside ``b/vllm.log``), below the folder every file shares (that one holds every server); every other
    file under such a folder (its logs, its scrapes) is that server's. Their engine label becomes ``0 of
    incident/b``: two servers side by side both call their engine "0", and one's records never take the
    other's counts (as reconcile._server_keys keeps one's counter off the other's counts). Files under no
    such folder keep the plain label. ``homes`` empty: nothing to key (one server, or records beside no log)."""

    homes: dict[str, str] = field(default_factory=dict)  # file display name -> its server folder

    @classmethod
    def of(cls, records: list[str], files: list[str], logs: list[str]) -> ServerKeys:
        homes = server_homes(records, logs, files)
        return cls({x: h for x, h in homes.items() if h})

    def frames(self, frames: dict[str, pl.DataFrame]) -> dict[str, pl.DataFrame]:
        """``frames`` with the record frames (REC_FRAMES) keyed."""
        return {**frames, **{n: self.key_df(frames[n]) for n in REC_FRAMES if frames.get(n) is not None}}

    def key(self, df: pl.DataFrame | None) -> pl.DataFrame | None:
        return None if df is None else self.key_df(df)

    def key_df(self, df: pl.DataFrame) -> pl.DataFrame:
        """``df`` with its ``engine`` (and ``_eng``) keyed by its rows' ``source`` files' server."""
        if not self.homes or "source" not in df.columns or "engine" not in df.columns:
            return df
        of = pl.col("source").cast(pl.String).replace_strict(self.homes, default="", return_dtype=pl.String)
        eng = pl.col("engine").cast(pl.String).fill_null("0")
        keyed = pl.when(of == "").then(eng).otherwise(pl.concat_str([eng, pl.lit(" of "), of]))
        out = df.with_columns(keyed.alias("engine"))
        return out.with_columns(pl.col("engine").alias("_eng")) if "_eng" in df.columns else out

    def label(self, key: str) -> str:
        """The engine label of a key (``0 of incident/b`` -> ``0``)."""
        for h in self.homes.values():
            if key.endswith(" of " + h):
                return key[: -len(" of " + h)]
        return key

    def unkey(self, df: pl.DataFrame) -> pl.DataFrame:
        if not self.homes or "engine" not in df.columns or df.height == 0:
            return df
        alts = "|".join(sorted({re.escape(h) for h in self.homes.values()}, key=len, reverse=True))
        return df.with_columns(pl.col("engine").str.replace(rf" of (?:{alts})$", ""))


def _engine(col: str = "engine") -> pl.Expr:
    return pl.col(col).cast(pl.String).fill_null("0")


def coverage(frames: dict[str, pl.DataFrame], rec: pl.DataFrame) -> dict[str, Coverage]:
    """Per engine with preempt records: its first and last record of any type."""
    parts = []
    for name in REC_FRAMES:
        df = frames.get(name)
        if df is not None and df.height and {"time", "source", "line"} <= set(df.columns):
            parts.append(
                df.filter(pl.col("time").is_not_null()).select(
                    _engine().alias("_eng"), "time", pl.col("source").cast(pl.String), pl.col("line").cast(pl.UInt32)
                )
            )
    if not parts:
        return {}
    allr = pl.concat(parts, how="vertical_relaxed")
    n_pre = rec.group_by("_eng").len()
    span = (
        allr.sort("time")
        .group_by("_eng")
        .agg(
            pl.col("time").min().alias("first"),
            pl.col("time").max().alias("last"),
            pl.concat_str([pl.col("source"), pl.lit(":"), pl.col("line").cast(pl.String)]).last().alias("src"),
        )
        .join(n_pre, on="_eng", how="inner")
    )
    return {
        e: Coverage(engine=e, first=f, last=la, last_src=s, preempts=int(n))
        for e, f, la, s, n in span.select("_eng", "first", "last", "src", "len").iter_rows()
    }


def count_groups(
    ev: pl.DataFrame, baselines: pl.DataFrame | None = None, answers: pl.DataFrame | None = None
) -> pl.DataFrame:
    """One row per count: ``_eng, source, line, start, end, n, limit, baseline, answer_s``.

    ``ev``'s count events (kinds interval, reconstructed) folded to the count they were made from;
    ``baselines`` (``engine, end, value``): first readings since engine start (no events, but they
    count the records before them). ``limit``: the latest record time the count can hold.
    ``answers`` (``source, answer_s``: the capture files' frame ``prom_answers``): a scrape stamped
    when its answer arrived, ``answer_s`` after its request; its page was made in between, so the
    requests finished before it was sent are the ones its count surely holds (:func:`_lag`).
    """
    schema: dict[str, Any] = {
        "_eng": pl.String,
        "source": pl.String,
        "line": pl.UInt32,
        "start": pl.Datetime("us", "UTC"),
        "end": pl.Datetime("us", "UTC"),
        "n": pl.Int64,
        "baseline": pl.Boolean,
    }
    parts = [pl.DataFrame(schema=schema)]
    if ev.height:
        c = ev.filter(pl.col("kind").is_in(COUNT_KINDS))
        if c.height:
            parts.append(
                c.with_columns(_eng=_engine(), _end=pl.coalesce("interval_end", "time"))
                .group_by("_eng", "source", "line", "interval_start", "_end", maintain_order=True)
                .agg(pl.len().cast(pl.Int64).alias("n"))
                .select(
                    "_eng",
                    "source",
                    pl.col("line").cast(pl.UInt32),
                    pl.col("interval_start").alias("start"),
                    pl.col("_end").alias("end"),
                    "n",
                    pl.lit(False).alias("baseline"),
                )
            )
    if baselines is not None and baselines.height:
        parts.append(
            baselines.filter(pl.col("end").is_not_null() & (pl.col("value") > 0)).select(
                _engine().alias("_eng"),
                pl.col("source").cast(pl.String),
                pl.col("line").cast(pl.UInt32),
                # since the engine's start: its counter's _created when the scrape exposes it
                (
                    pl.col("created").cast(pl.Datetime("us", "UTC"))
                    if "created" in baselines.columns
                    else pl.lit(None, pl.Datetime("us", "UTC"))
                ).alias("start"),
                pl.col("end"),
                pl.col("value").round(0).cast(pl.Int64).alias("n"),
                pl.lit(True).alias("baseline"),
            )
        )
    g = pl.concat(parts, how="vertical_relaxed").filter(pl.col("end").is_not_null())
    if answers is not None and answers.height:
        g = g.join(answers.unique("source"), on="source", how="left", maintain_order="left")
        g = g.with_columns(pl.col("answer_s").fill_null(0.0))
    else:
        g = g.with_columns(answer_s=pl.lit(0.0))
    whole = pl.col("end").dt.truncate("1s") == pl.col("end")
    widened = pl.when(whole).then(pl.col("end") + pl.duration(microseconds=999_999)).otherwise(pl.col("end"))
    return g.with_columns(limit=widened + pl.duration(microseconds=int(CLOCK_SLACK_S * 1e6))).sort(
        "limit", "baseline", descending=[False, True], maintain_order=True
    )


def match(groups: pl.DataFrame, times: pl.Series) -> pl.DataFrame:
    """``groups`` (sorted by ``limit``) with ``avail`` (records up to the limit), ``matched`` and
    ``unmatched`` per count: oldest records first (module docstring, closed form)."""
    if groups.height == 0:
        return groups.with_columns(
            avail=pl.lit(0, pl.Int64), matched=pl.lit(0, pl.Int64), unmatched=pl.lit(0, pl.Int64)
        )
    t = times.drop_nulls().sort()
    avail = t.search_sorted(groups.get_column("limit"), side="right").cast(pl.Int64)
    g = groups.with_columns(avail=avail).with_columns(_c=pl.col("n").cum_sum())
    g = g.with_columns(_m=pl.col("_c") + pl.min_horizontal(pl.lit(0), (pl.col("avail") - pl.col("_c")).cum_min()))
    g = g.with_columns(matched=pl.col("_m") - pl.col("_m").shift(1, fill_value=0))
    return g.with_columns(unmatched=pl.col("n") - pl.col("matched")).drop("_c", "_m")


def _where(g: pl.DataFrame, cov: Coverage) -> pl.DataFrame:
    """Where each count's unexplained preemptions fall: ``_pos`` (inside, before or after the
    coverage), ``_out`` (how many of them lie outside it: all for a count wholly outside, its
    interval's share outside for one across an edge), ``_lo``/``_hi`` (the outside part of its
    interval, where those are placed)."""
    r0, r1 = pl.lit(cov.first) - _SLACK, pl.lit(cov.last) + _SLACK
    s, e = pl.col("start"), pl.col("end")
    span = (e - s).dt.total_microseconds()
    after = e > r1
    before = ~after & ((e < r0) | (s.is_not_null() & (s < r0)))
    share = (
        pl.when(after)
        .then(pl.when(s.is_null() | (s >= r1)).then(1.0).otherwise((e - r1).dt.total_microseconds() / span))
        .when(before)
        .then(pl.when(e < r0).then(1.0).otherwise((r0 - s).dt.total_microseconds() / span))
        .otherwise(0.0)
    )
    return g.with_columns(
        _pos=pl.when(after).then(pl.lit("after")).when(before).then(pl.lit("before")).otherwise(pl.lit("inside")),
        _out=(pl.col("unmatched") * share).round(0).cast(pl.Int64),
        _lo=pl.when(after & s.is_not_null()).then(pl.max_horizontal(s, r1)).otherwise(s),
        _hi=pl.when(before).then(pl.min_horizontal(e, r0)).otherwise(e),
        # the part of its interval inside the coverage (where its unexplained, inside preemptions are placed)
        _ilo=pl.when(before).then(pl.max_horizontal(s, r0)).otherwise(s),
        _ihi=pl.when(after).then(pl.min_horizontal(e, r1)).otherwise(e),
    )


def _lag(
    rec: pl.DataFrame, finished: pl.DataFrame, last: datetime | None, not_counted: int, answer_s: float = 0.0
) -> tuple[int, int, int]:
    """(records up to ``last``, within the lag, beyond it) for ``not_counted`` uncounted records.
    A request surely counted is one finished before the last count's page could have been made:
    before its scrape was sent (``answer_s`` before its time, for a scrape stamped at its answer)."""
    if last is None:
        return 0, 0, 0
    upto = rec.filter(pl.col("time") <= last)
    sent = timedelta(seconds=max(0.0, answer_s or 0.0))
    done = finished.filter(pl.col("_ft") <= last - _SLACK - sent).select("request_id").unique()
    pending = upto.join(done, on="request_id", how="anti").height if upto.height else 0
    within = min(not_counted, pending)
    return upto.height, within, max(0, not_counted - pending)


def finishes(frames: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """``request_id, _ft``: each request's finish record (not aborted: an aborted preempted request
    may never be reported)."""
    br = frames.get("bt_requests")
    schema: dict[str, Any] = {"request_id": pl.String, "_ft": pl.Datetime("us", "UTC")}
    if br is None or br.height == 0:
        return pl.DataFrame(schema=schema)
    return (
        br.filter((pl.col("phase") == "finish") & ~pl.col("finish_reason").fill_null("").str.contains("abort"))
        .group_by("request_id")
        .agg(pl.col("time").min().alias("_ft"))
        .select(list(schema))
    )


def cross_check(
    engine: str, source: str, groups: pl.DataFrame, rec: pl.DataFrame, cov: Coverage, finished: pl.DataFrame
) -> CrossCheck | None:
    """One count source's counts (``groups`` of one engine) against that engine's records."""
    if groups.height == 0:
        return None
    m = _where(match(groups, rec.get_column("time")), cov)
    outside = int(m.get_column("_out").sum())
    inside = int(m.get_column("unmatched").sum()) - outside
    counts = m.filter(~pl.col("baseline"))
    last_row = m.tail(1).row(0, named=True)
    last = last_row["limit"]
    not_counted = int(last_row["avail"]) - int(m.get_column("matched").sum())
    upto, within, beyond = _lag(rec, finished, last, max(not_counted, 0), float(last_row["answer_s"] or 0.0))
    return CrossCheck(
        engine=engine,
        source=source,
        counted=int(m.get_column("n").sum()),
        first=counts.get_column("end").min() if counts.height else None,  # type: ignore[arg-type]  # polars scalars are typed as every literal
        last=m.get_column("end").max(),  # type: ignore[arg-type]  # polars scalars are typed as every literal
        records_by_last=upto,
        matched=int(m.get_column("matched").sum()),
        without_record_inside=inside,
        outside=outside,
        not_yet_counted=max(not_counted, 0),
        within_lag=within,
        beyond_lag=beyond,
    )


def check_text(c: CrossCheck, tz: str) -> str | None:
    """The disagreement a cross-check shows, in one sentence (None when it agrees)."""

    parts = []
    if c.without_record_inside:
        parts.append(
            f"{c.without_record_inside} of its {c.counted} counted preemption(s) have no preempt record before them "
            "(a count never leads the preemption it counts: records lost, another engine, or a clock offset)"
        )
    if c.beyond_lag:
        parts.append(
            f"{c.beyond_lag} preempt record(s) up to its last count ({iso(c.last, tz)}) are not in it although their "
            "requests had finished by then (a finished request's preemptions are counted with its last output)"
        )
    if not parts:
        return None
    return f"engine {c.engine}: {c.source}: " + "; ".join(parts) + "; the records are the events"


def records_as_events(
    frames: dict[str, pl.DataFrame],
    rec: pl.DataFrame,
    ev: pl.DataFrame,
    baselines: pl.DataFrame | None,
    tz: str,
) -> RecordEvents:
    """The event set where the records are the events (module docstring, rules 1-3).

    ``rec``: the record events (conformed, with ``_eng``); ``ev``: the event set so far (count events
    and per-preemption log events); ``baselines``: first Prometheus readings (``engine, end, value,
    source, line``). Engines whose log has per-preemption events (V0 warnings, PREEMPTED markers)
    keep them; their records are evidence.
    """

    cov = coverage(frames, rec)
    per_event = (
        ev.filter(pl.col("kind").is_in(["logged", "marker"])).select(_engine().alias("_eng")).unique()
        if ev.height
        else pl.DataFrame(schema={"_eng": pl.String})
    )
    as_evidence = set(per_event.get_column("_eng").to_list())
    if "all" in as_evidence:
        as_evidence |= set(cov)
    engines = [e for e in sorted(cov) if e not in as_evidence]
    notes: list[str] = []
    disagreements: list[str] = []
    evidence_only = rec.filter(pl.col("_eng").is_in(sorted(as_evidence))).height
    if evidence_only:
        notes.append(
            f"{evidence_only} block-table 'preempt' record(s) are used as evidence, not counted: the log's own "
            "per-preemption lines are the count there (no double counting)."
        )
    if not engines:
        return RecordEvents(ev, 0, 0, 0, notes=tuple(notes), evidence_only=evidence_only)
    groups = count_groups(ev, _baselines_for(ev, baselines), frames.get("prom_answers"))
    drop: list[pl.DataFrame] = []
    kept: list[pl.DataFrame] = []
    counter_only: dict[str, int] = {}
    replaced = kept_n = 0
    used = [rec.filter(pl.col("_eng").is_in(engines))]
    # 'N Engines Aggregated' counts (engine "all") are matched with every engine's records.
    passes = [(e, cov[e], rec.filter(pl.col("_eng") == e)) for e in engines]
    if (groups.get_column("_eng") == "all").any():
        passes.append(("all", union(cov[e] for e in engines), used[0]))
    for eng, c, mine in passes:
        g = groups.filter(pl.col("_eng") == eng)
        if g.height == 0:
            if eng != "all":
                notes.append(
                    f"engine {eng}: {mine.height} preemption(s) from block-table 'preempt' records (kind record), "
                    f"from {iso(c.first, tz)} to {iso(c.last, tz)}; nothing else in the bundle counts this engine's "
                    "preemptions"
                )
            continue
        mm = _where(match(g, mine.get_column("time")), c)
        m = mm.filter(~pl.col("baseline"))
        keys = ["source", "line", "start", "end"]
        cev = (
            ev.filter(pl.col("kind").is_in(COUNT_KINDS) & (_engine() == eng))
            .with_columns(_end=pl.coalesce("interval_end", "time"))
            .join(
                m.select(*keys, "_out", "unmatched", "_pos", "_lo", "_hi", "_ilo", "_ihi"),
                left_on=["source", "line", "interval_start", "_end"],
                right_on=keys,
                how="left",
                nulls_equal=True,
            )
        )
        drop.append(cev.select("event_id"))
        ranked = cev.sort("_sub").with_columns(
            _k=pl.int_range(1, pl.len() + 1).over(["source", "line", "interval_start", "_end"])
        )
        k = ranked.filter((pl.col("_out") > 0) & (pl.col("_k") <= pl.col("_out")))
        if k.height:
            k = k.with_columns(
                time=ev_mod.spread_interval(
                    pl.col("_lo"), pl.col("_hi"), pl.col("_k").cast(pl.Int64), pl.col("_out").cast(pl.Int64)
                ),
                interval_start=pl.col("_lo"),
                interval_end=pl.col("_hi"),
            )
            kept.append(k.select(ev.columns))
            kept_n += k.height
            for pos, n in k.group_by("_pos").len().sort("_pos").iter_rows():
                where = (
                    f"before its first record ({iso(c.first, tz)})"
                    if pos == "before"
                    else f"after its last record ({iso(c.last, tz)}, {c.last_src})"
                )
                notes.append(
                    f"engine {eng}: {n} counted preemption(s) fall {where}, where no record can explain them: they "
                    "are events of the count that made them (no request id)"
                )
            if (k.get_column("_pos") == "after").any():
                disagreements.append(
                    f"engine {eng}: the block-table records stop at {iso(c.last, tz)} ({c.last_src}) while the counts "
                    "go on: the decision-time evidence ends there (a recorder that died or was turned off)"
                )
        # Never below vLLM's own count: a counted preemption no record explains, inside the records'
        # span, is still a preemption: an event without a record (counter-only, id ``~c<k>``), placed
        # in the part of its count's interval inside the span.
        co = _counter_only(ranked, mm.filter(pl.col("baseline")), ev.columns)
        is_co = pl.col("event_id").str.contains(r"~c\d+$")
        n_co = co.filter(is_co).height
        if co.height:
            kept.append(co)
        if co.height > n_co:  # a first reading's part before the records' span: events of its count
            kept_n += co.height - n_co
            notes.append(
                f"engine {eng}: {co.height - n_co} preemption(s) counted since the engine's start fall before its first "
                f"record ({iso(c.first, tz)}): events of the reading that counted them, not placed in time"
            )
        if n_co:
            counter_only[eng] = counter_only.get(eng, 0) + n_co
            srcs = (
                co.filter(is_co)
                .select(pl.concat_str([pl.col("source"), pl.lit(":"), pl.col("line").cast(pl.String)]))
                .unique(maintain_order=True)
            )
            notes.append(
                f"engine {eng}: {n_co} counted preemption(s) that no block-table 'preempt' record explains "
                f"({', '.join(srcs.to_series().head(3).to_list())}{', ...' if srcs.height > 3 else ''}) are events "
                "without a record (counter-only, ids ~c<k>, no request id): vLLM counted them, the records do not hold "
                "them (a recorder that stopped or was killed before writing them, or a clock offset: --offset)"
            )
        replaced += cev.height - k.height - co.filter(pl.col("time_precision") != "unplaced").height
        notes.append(
            f"engine {eng}: {mine.height} block-table 'preempt' record(s) from {iso(c.first, tz)} to "
            f"{iso(c.last, tz)} are the events (kind record, each with its request id); the {cev.height} counted "
            "preemption(s) of this engine there are cross-checks, matched with the lag allowed (a count follows the "
            "preemption it counts), never added twice"
        )
    notes.extend(_death_notes(frames, [cov[e] for e in engines], tz))
    gone = pl.concat(drop).get_column("event_id") if drop else pl.Series("event_id", [], pl.String)
    rest = ev.filter(~pl.col("event_id").is_in(gone.implode())) if ev.height else ev
    recs = pl.concat(used, how="vertical_relaxed").drop("_eng").unique("event_id", keep="first", maintain_order=True)
    out_ev = ev_mod.combine([rest, *kept, recs])
    return RecordEvents(
        events=out_ev,
        used=recs.height,
        replaced=replaced,
        kept_outside=kept_n,
        coverage=tuple(cov[e] for e in engines),
        notes=tuple(notes),
        disagreements=tuple(disagreements),
        evidence_only=evidence_only,
        engines_as_evidence=tuple(sorted(as_evidence)),
        counter_only=counter_only,
    )


def _counter_only(ranked: pl.DataFrame, base: pl.DataFrame, columns: list[str]) -> pl.DataFrame:
    """The counted preemptions no record explains (module docstring, rule 3), as events.

    ``ranked``: one engine's count events with their count's ``_out``, ``unmatched`` and the inside
    part of its interval (``_ilo``, ``_ihi``), ranked ``_k`` in their count: those past the outside
    ones, up to ``unmatched``, spread evenly over the inside part. ``base``: first readings since the
    engine's start (no events of their own) with unmatched counts: events not placed in time over
    [engine start, reading], the part before the records' span first (``~i<k>``), then the rest
    (``~c<k>``)."""
    dt = pl.Datetime("us", "UTC")
    stem = pl.col("event_id").str.replace(r"~[a-z]\d+$", "")
    parts = []
    inside = ranked.filter((pl.col("_k") > pl.col("_out").fill_null(0)) & (pl.col("_k") <= pl.col("unmatched")))
    if inside.height:
        j = (pl.col("_k") - pl.col("_out").fill_null(0)).cast(pl.Int64)
        n_in = (pl.col("unmatched") - pl.col("_out").fill_null(0)).cast(pl.Int64)
        parts.append(
            inside.with_columns(
                event_id=pl.concat_str([stem, pl.lit("~c"), j.cast(pl.String)]),
                time=ev_mod.spread_interval(pl.col("_ilo"), pl.col("_ihi"), j, n_in),
                interval_start=pl.col("_ilo"),
                interval_end=pl.col("_ihi"),
                time_precision=pl.lit("interval"),
                _sub=j,
            ).select(columns)
        )
    b = base.filter(pl.col("unmatched") > 0)
    if b.height:
        where = pl.concat_str([pl.col("source"), pl.lit(":"), pl.col("line").cast(pl.String)])
        rows = (
            b.with_columns(_k=pl.int_ranges(1, ev_mod.capped_count(pl.col("unmatched")) + 1, dtype=pl.Int64))
            .explode("_k")
            .with_columns(_o=pl.col("_out").fill_null(0).cast(pl.Int64))
        )
        parts.append(
            ev_mod.conform(
                rows.select(
                    pl.when(pl.col("_k") <= pl.col("_o"))
                    .then(pl.concat_str([where, pl.lit("~i"), pl.col("_k").cast(pl.String)]))
                    .otherwise(pl.concat_str([where, pl.lit("~c"), (pl.col("_k") - pl.col("_o")).cast(pl.String)]))
                    .alias("event_id"),
                    pl.lit(None, dt).alias("time"),
                    pl.lit("unplaced").alias("time_precision"),
                    pl.col("start").cast(dt).alias("interval_start"),
                    pl.col("end").cast(dt).alias("interval_end"),
                    pl.lit("interval").alias("kind"),
                    pl.col("_eng").alias("engine"),
                    "source",
                    "line",
                    pl.col("line").alias("seq"),
                    pl.col("_k").alias("_sub"),
                )
            ).select(columns)
        )
    if not parts:
        return pl.DataFrame(schema=ev_mod.polars_schema()).select(columns)
    return pl.concat(parts, how="vertical_relaxed")


def _death_notes(frames: dict[str, pl.DataFrame], covs: list[Coverage], tz: str) -> list[str]:
    """Where each engine's records stop, beside the log's engine death (sources/enginedeath.py)."""

    deaths = frames.get("engine_deaths")
    if deaths is None or deaths.height == 0 or not covs:
        return []
    d = deaths.filter(pl.col("time").is_not_null()).sort("time")
    if d.height == 0:
        return []
    first = d.row(0, named=True)
    return [
        f"engine {c.engine}: its block-table records stop at {iso(c.last, tz)} ({c.last_src}); the log says the engine "
        f"died at {iso(first['time'], tz)} ({first['source']}:{first['line']}): the records are the events up to there"
        for c in covs
    ]


def union(covs: Any) -> Coverage:
    """One coverage spanning several engines' (for counts of all engines together)."""
    cs = list(covs)
    last = max(cs, key=lambda c: c.last)
    return Coverage(
        engine="all",
        first=min(c.first for c in cs),
        last=last.last,
        last_src=last.last_src,
        preempts=sum(c.preempts for c in cs),
    )


def _baselines_for(ev: pl.DataFrame, baselines: pl.DataFrame | None) -> pl.DataFrame | None:
    """First readings that take part in matching: those of engines with no count before them (a
    log count before the first scrape counts the same preemptions as that reading)."""
    if baselines is None or baselines.height == 0:
        return None
    if ev.height == 0:
        return baselines
    c = ev.filter(pl.col("kind").is_in(COUNT_KINDS)).with_columns(
        _eng=_engine(), _end=pl.coalesce("interval_end", "time")
    )
    first = c.group_by("_eng").agg(pl.col("_end").min().alias("_first"))
    b = baselines.with_columns(_eng=_engine()).join(first, on="_eng", how="left")
    return b.filter(pl.col("_first").is_null() | (pl.col("_first") >= pl.col("end"))).drop("_eng", "_first")


def record_events(frames: dict[str, pl.DataFrame]) -> pl.DataFrame | None:
    """Block-table ``preempt`` records as partial event frames (kind ``record``)."""
    bt = frames.get("bt_events")
    if bt is None or bt.height == 0:
        return None
    pre = bt.filter(pl.col("action") == "preempt")
    if pre.height == 0:
        return None
    return pre.select(
        provenance_expr().alias("event_id"),
        "time",
        "time_precision",
        pl.lit(None, pl.Datetime("us", "UTC")).alias("interval_start"),
        pl.lit(None, pl.Datetime("us", "UTC")).alias("interval_end"),
        pl.lit("record").alias("kind"),
        "request_id",
        pl.lit(None, pl.String).alias("mode"),
        "engine",
        pl.lit(None, pl.Int64).alias("cumulative"),
        "source",
        "line",
        pl.concat_str(
            [
                pl.lit("block-table preempt step="),
                pl.col("step").cast(pl.String),
                pl.when(pl.col("reason").is_not_null())
                .then(pl.concat_str([pl.lit(" reason="), pl.col("reason")]))
                .otherwise(pl.lit("")),
            ],
        ).alias("raw"),
        pl.lit(None, pl.Int32).alias("stream"),
        pl.lit(None, pl.UInt32).alias("seq"),
        pl.lit(0, pl.Int64).alias("_sub"),
    )
