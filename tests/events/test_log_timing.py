"""The log's timing kept where its counts agree with the counter (reconcile rule 1, events/agree.py).

``agree.fits`` on hand-made layouts (one that a prefix-sum comparison would pass though no placement
exists), then a hypothesis property over random layouts of ``Preemptions: N`` stats lines and scrapes
(random boundaries and counts, one or two engines, the counter made from the log's own preemptions or
not): the total is the rule's before this change (``_log_timing`` switched off is that rule), no event
stands twice, and an engine decided for the log keeps exactly the log's own events there (the log-alone
analysis's ids and times), the counter's otherwise.
"""

from __future__ import annotations

import random
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from preemptlog import AnalyzeOptions, analyze
from preemptlog.events import reconcile
from preemptlog.events.agree import Item, fits

T0 = datetime(2026, 3, 14, 10, 0, 0, tzinfo=UTC)


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def iv(s: float, e: float, n: int) -> Item:
    return Item(at(s), at(e), n)


B = [at(s) for s in (0, 15, 30, 45, 60)]


@pytest.mark.parametrize(
    ("increases", "items", "expect"),
    [
        ([0, 3, 4, 0], [iv(10, 20, 3), iv(30, 40, 4)], None),  # (10, 20] gives its 3 to (15, 30]
        ([1, 2, 4, 0], [iv(10, 20, 3), iv(30, 40, 4)], None),  # or 1 before 15 s, 2 after
        ([0, 0, 7, 0], [iv(10, 20, 3), iv(30, 40, 4)], 2),  # nothing of (10, 20] can reach (30, 45]
        ([0, 3, 3, 1], [iv(10, 20, 3), iv(30, 40, 4)], 3),  # (30, 40] cannot give 1 to (45, 60]
        ([0, 3, 4, 0], [iv(10, 20, 3), iv(30, 40, 5)], 4),  # 8 against 7: the totals differ
        ([1, 0, 0, 0], [iv(5, 5, 1)], None),  # a line at 5 s: in (0, 15]
        ([1, 0, 0, 0], [iv(15, 15, 1)], None),  # at 15 s exactly: in (0, 15], the scrape at 15 s read it
        ([0, 1, 0, 0], [iv(0, 0, 1)], 1),  # at the window's first scrape: before it, no interval takes it
        ([1, 0, 0, 0], [iv(-5, 5, 1)], 1),  # across the window's start: not judged
        ([0, 0, 0, 0], [], None),  # nothing on either side
    ],
)
def test_fits_hand_made(increases, items, expect):
    assert fits(B, increases, items) == expect


def test_fits_is_not_a_prefix_comparison():
    """A (0, 30] of 1 and B (10, 20] of 1 against +1, +0, +1 in (0, 10], (10, 20], (20, 30]: every prefix
    of the counter lies between what the log must and may have counted by then (1 in [0, 1], 1 in
    [1, 2], 2 = 2), yet B's preemption must fall in (10, 20], where the counter did not rise."""
    bounds = [at(s) for s in (0, 10, 20, 30)]
    assert fits(bounds, [1, 0, 1], [iv(0, 30, 1), iv(10, 20, 1)]) is not None
    assert fits(bounds, [0, 1, 1], [iv(0, 30, 1), iv(10, 20, 1)]) is None


# ---------------------------------------------------------------- the property, through analyze


def stats_line(sec: int, engine: str, n: int) -> str:
    pre = f"Preemptions: {n}, " if n else ""
    return (
        f"(APIServer pid=7) INFO {at(sec):%m-%d %H:%M:%S} [loggers.py:208] Engine 00{engine}: Avg prompt throughput: "
        f"10.0 tokens/s, Avg generation throughput: 900.0 tokens/s, Running: 30 reqs, Waiting: 5 reqs, {pre}GPU KV "
        "cache usage: 99.0%, Prefix cache hit rate: 12.0%"
    )


def page(sec: int, values: dict[str, int]) -> list[str]:
    out = [f"# scrape {at(sec):%Y-%m-%dT%H:%M:%SZ}", "# TYPE vllm:num_preemptions_total counter"]
    return out + [f'vllm:num_preemptions_total{{engine="{e}",model_name="m"}} {float(v)}' for e, v in values.items()]


@st.composite
def layouts(draw):
    """Stats lines of one or two engines (random gaps, counts mostly 0), scrapes at random times, and per
    engine a counter: made from the log's own preemptions at random moments inside their intervals
    (agreeing), then left so, or moved (a clock offset), or given/losing some (a lost line, another
    source), or random."""
    engines = ["0", "1"][: draw(st.integers(1, 2))]
    rnd = random.Random(draw(st.integers(0, 2**32)))
    lines: dict[str, list[tuple[int, int]]] = {}
    for e in engines:
        t, rows = draw(st.integers(1, 30)), []
        for i in range(draw(st.integers(2, 12))):
            # the first line counts since a start not in the log (no interval): mostly 0
            rows.append((t, draw(st.sampled_from([0, 0, 0, 0, 3] if i == 0 else [0, 0, 0, 1, 2, 3, 5, 8]))))
            t += draw(st.sampled_from([5, 10, 10, 10, 15, 20]))
        lines[e] = rows
    s, scr = draw(st.integers(0, 40)), []
    for _ in range(draw(st.integers(2, 7))):
        scr.append(s)
        s += draw(st.integers(3, 50))
    quiet = draw(st.booleans())
    if quiet:
        # quiet edges: no preemption in a log interval across the window's first or last scrape (nor a
        # first line, which has no interval, inside it), where the rule is decided (else the rule before)
        for e in engines:
            rows, prev = [], None
            for t, n in lines[e]:
                cut = scr[0] < t <= scr[-1] if prev is None else prev < scr[0] < t or prev < scr[-1] < t
                rows.append((t, 0 if cut else n))
                prev = t
            lines[e] = rows
    counter: dict[str, list[int]] = {}
    modes: dict[str, str] = {}
    for e in engines:
        moments, prev = [], None
        for t, n in lines[e]:
            # inside the line's own interval as the log reading has it: one tick of vLLM's logger before
            # the line, never the time since the line shown before (idle ticks print DEBUG lines:
            # engines/vllm/preemptions.py _tick_interval_start); the tick is the lines' most common gap
            # (5 s at least here: every gap drawn below is), so the last 5 s are inside it whatever it is
            lo = max(prev, t - 5) if prev is not None else t - 5
            moments += [rnd.uniform(lo, t) if lo < t else t for _ in range(n)]
            prev = t
        how = modes[e] = draw(st.sampled_from(["agree", "agree", "offset", "more", "less", "random"]))
        if how == "offset":
            moments = [m + draw(st.sampled_from([-12, -6, 6, 12])) for m in moments]
        vals = [sum(1 for m in moments if m <= x) for x in scr]
        if how in ("more", "less") and len(vals) > 1:
            k = draw(st.integers(1, len(vals) - 1))
            d = draw(st.integers(1, 4)) * (1 if how == "more" else -1)
            vals = vals[:k] + [max(v + d, vals[k - 1]) for v in vals[k:]]
        if how == "random":
            vals = sorted(draw(st.integers(0, 30)) for _ in scr)
        counter[e] = vals
    return lines, scr, counter, modes, quiet


def _run(folder: Path, log: list[str] | None, prom: list[str] | None):
    folder.mkdir(parents=True)
    paths = []
    if log is not None:
        (folder / "vllm.log").write_text("\n".join(log) + "\n")
        paths.append(str(folder / "vllm.log"))
    if prom is not None:
        (folder / "metrics.prom").write_text("\n".join(prom) + "\n")
        paths.append(str(folder / "metrics.prom"))
    return analyze(paths, AnalyzeOptions(tz="UTC", year=T0.year, rules=False))


def logs_alone(a, engine: str, w0: datetime, w1: datetime) -> pl.DataFrame:
    """The log-alone analysis's count events of ``engine`` whose intervals lie in [w0, w1]."""
    own = a.events.filter((pl.col("engine") == engine) & pl.col("interval_start").is_not_null())
    return own.filter((pl.col("interval_start") >= w0) & (pl.col("interval_end") <= w1))


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(layouts())
def test_the_total_is_the_rules_and_no_event_stands_twice(layout):
    lines, scr, counter, modes, quiet = layout
    log = [stats_line(t, e, n) for e, rows in lines.items() for t, n in rows]
    log.sort(key=lambda ln: ln.split(" [")[0].split("INFO ")[1])
    prom = [ln for i, x in enumerate(scr) for ln in page(x, {e: counter[e][i] for e in counter})]
    with tempfile.TemporaryDirectory() as d:
        new = _run(Path(d) / "new", log, prom)
        with pytest.MonkeyPatch.context() as mp:  # the rule before: no engine's log timing kept
            mp.setattr(reconcile, "_log_timing", lambda *a, **k: ({}, []))
            old = _run(Path(d) / "old", log, prom)
        alone = _run(Path(d) / "alone", log, None)
    rn, ro = new.summary()["reconciliation"], old.summary()["reconciliation"]
    assert rn["total"] == ro["total"] and new.events.height == old.events.height
    assert rn["disagreements"] == ro["disagreements"]
    ids = new.events.get_column("event_id")
    assert ids.n_unique() == ids.len()  # no event twice
    kept = {t["engine"]: t for t in rn.get("log_timing") or []}
    event(f"engines whose log timing is kept: {len(kept)} of {len(counter)}")
    is_prom = pl.col("source").str.ends_with("metrics.prom")
    name = pl.col("event_id").str.replace(r"^.*/", "")
    for e in counter:
        w0, w1 = at(scr[0]), at(scr[-1])
        mine = new.events.filter(pl.col("engine") == e)
        counted = mine.filter(is_prom)
        logs = mine.filter(~is_prom & pl.col("interval_start").is_not_null() & (pl.col("interval_start") >= w0)).filter(
            pl.col("interval_end") <= w1
        )
        if quiet and modes[e] == "agree" and logs_alone(alone, e, w0, w1).height:
            # the counter made of the log's own preemptions, no count across the window's edges: they agree
            assert e in kept
        if e in kept:  # the log's events in the window, none of the counter's
            assert counted.height == 0
            assert kept[e]["count"] == logs.height == sum(counter[e][-1:]) - counter[e][0]
            own = logs_alone(alone, e, w0, w1)
            got = logs.select(name.alias("id"), "time").sort("id")
            assert got.equals(own.select(name.alias("id"), "time").sort("id"))  # the log-alone timing
        else:  # the rule before: the log's counts inside the window are the counter's
            assert logs.height == 0
