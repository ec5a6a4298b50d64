"""SGLang's fixes: its own flags, with SGLang's defaults, computed from the incident's numbers.

The engine's ``fixes`` (:func:`plan_part`), called for the incident's one list of changes by
fixes/plan.py over SGLang's events: SGLang's events get these, vLLM's events vLLM's. Same dict shape as recommend's fixes (``option``, ``current``,
``suggested``, ``inputs``, ``expected_effect``, ``addresses``...), plus ``engine_kind``. They are
not replayed: the what-if model is vLLM's scheduler (whatif/); ``replay`` says so.

- ``--schedule-conservativeness`` (default 1.0): SGLang's docs, frequent "KV cache pool is full.
  Retract requests." -> about 1.3, "~1 time per minute, it is okay". From the incident: the rate of
  retractions, the ones with the new-token ratio at its floor, and the floor and start ratio the
  suggestion gives (sglang/knobs.py); above 1/0.7 the ratio cannot rise further.
- ``--max-running-requests``: the running batch SGLang settled at after retracting (the batch line
  after a retraction, of the same server's log and DP rank: :data:`LINE_KEY`), when it is below the
  limit in force.
- ``--mem-fraction-static``: the start-up line's ``available_gpu_mem`` above the docs' 5-8 GB,
  as a fraction of the memory free before the weights loaded (what SGLang multiplies it by), in
  0.01 steps; its KV gain from the pool's bytes per token ("KV Cache is allocated").
- ``--chunked-prefill-size``: halved (not below the docs' 2048) when a prefill batch of at least
  half a chunk came in the 10 s before a retraction (in the same server's log and DP rank).
- ``--retraction-policy priority``: only where priority scheduling is on and the policy is length.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

import polars as pl

from ...clock.timebase import iso
from ...model.config import cfg_number, cfg_text
from ...model.fixes import fix_record
from ..common import FixPart, is_change, ranked, verdict_key_counts
from . import knobs
from . import summary as sglang_summary
from .log import ENGINE_KIND as SGLANG
from .log import forced

if TYPE_CHECKING:
    from ...model.result import AnalysisView

KEY = "G1-kv-space/capacity"
NOT_REPLAYED = "not replayed: the what-if model is vLLM's scheduler"
PREFILL_WINDOW_S = 10.0


def _fix(
    fid: str, option: str, current: Any, suggested: Any, inputs: list[str], effect: str, *, missing: str | None = None
) -> dict[str, Any]:
    text = (
        f"{option} {current if current is not None else '(not in the log)'} -> {suggested}: {effect}"
        if suggested is not None
        else f"{option}: cannot compute, {missing}"
    )
    return fix_record(
        fid,
        option,
        current,
        suggested,
        inputs,
        effect,
        text + " (SGLang; " + NOT_REPLAYED + ")",
        [KEY],
        missing=missing,
        engine_kind=SGLANG,
        replay=NOT_REPLAYED,
    )


def _events(analysis: AnalysisView) -> pl.DataFrame:
    """SGLang's retractions that KV pressure made: the ones SGLANG_TEST_RETRACT forced ('Testing
    retraction.') are no evidence for a KV fix (log.forced)."""
    ev = analysis.events
    if ev.height == 0:
        return ev
    ev = ev.filter(pl.col("engine_kind") == SGLANG)
    return ev.filter(~forced(ev, analysis.frames.get("sgl_retractions"))) if ev.height else ev


def _per_minute(ev: pl.DataFrame) -> tuple[float | None, float]:
    """Retraction lines per minute (a line's N requests are one: sglang_summary.occurrences) and their span."""
    ev = sglang_summary.occurrences(ev)
    t = ev.filter(pl.col("time").is_not_null()).get_column("time")
    if t.len() < 2:
        return None, 0.0
    span = float(ev.select((pl.col("time").max() - pl.col("time").min()).dt.total_microseconds()).item()) / 1e6
    return t.len() / max(span / 60.0, 1.0), span


def _conservativeness(analysis: AnalysisView, ev: pl.DataFrame) -> tuple[dict[str, Any] | None, dict[str, str] | None]:
    got = cfg_text(analysis, "schedule_conservativeness")
    try:
        c = float(got[0]) if got else knobs.DEFAULT_CONSERVATIVENESS
    except ValueError:
        c = knobs.DEFAULT_CONSERVATIVENESS
    how = f"schedule_conservativeness={c:g} ({got[2]}, {got[1] or 'SGLang default'})" if got else "SGLang default 1.0"
    pm, span = _per_minute(ev)
    n = ev.height
    if pm is not None and span >= 60 and pm <= knobs.DOCS_OK_PER_MINUTE:
        return None, {
            "id": "sglang_schedule_conservativeness",
            "why": f"{n} retractions on {sglang_summary.occurrences(ev).height} line(s) in {span / 60:.0f} min "
            f"({pm:.2f} lines per minute): SGLang's docs say about once a minute is okay",
        }
    one = sglang_summary.retraction_rate(analysis, ev)
    if one is not None and one.over == "log" and one.per_minute <= knobs.DOCS_OK_PER_MINUTE:
        # a single retraction is never 'frequent': at most once a minute, over the log's span
        e = ev.row(0, named=True)
        rate = f", {one.per_minute:.2f} per minute" if one.span_s >= 60 else ", at most once a minute"
        return None, {
            "id": "sglang_schedule_conservativeness",
            "why": f"1 retraction ({e['source']}:{e['line']}) in the log's {_duration(one.span_s)} "
            f"({iso(one.first, analysis.tz)} to {iso(one.last, analysis.tz)}){rate}: within what SGLang's docs call okay ('occasionally but "
            "not frequently (~1 time per minute), it is okay'; their --schedule-conservativeness 1.3 is for "
            "frequent retractions)",
        }
    if c >= knobs.MAX_USEFUL_CONSERVATIVENESS - 1e-9:
        return None, {
            "id": "sglang_schedule_conservativeness",
            "why": f"{how} already gives the highest new-token ratio (start 1.0, floor "
            f"{knobs.ratio_floor(c):.4f}): fewer running requests (--max-running-requests) or a larger pool instead",
        }
    sugg = (
        knobs.DOCS_CONSERVATIVENESS
        if c < knobs.DOCS_CONSERVATIVENESS
        else math.ceil(knobs.MAX_USEFUL_CONSERVATIVENESS * 100) / 100
    )
    at_floor = _at_floor(analysis, ev)
    ret = analysis.frames.get("sgl_retractions")
    old = ret is not None and ret.height > 0 and set(ret.get_column("wording").drop_nulls().to_list()) == {"0.1-0.2"}
    lines = sglang_summary.occurrences(ev).height
    inputs = [how, f"{n} retraction(s) on {lines} line(s)" + (f", {pm:.1f} lines per minute" if pm is not None else "")]
    if at_floor:
        inputs.append(f"the new-token ratio at its floor before {at_floor[0]} of them (first {at_floor[1]})")
    effect = (
        f"admission reserves more per running request: new-token ratio floor {knobs.ratio_floor(c, old):.4f} -> "
        f"{knobs.ratio_floor(sugg, old):.4f}, start {knobs.ratio_init(c):.2f} -> {knobs.ratio_init(sugg):.2f} "
        "(SGLang's docs: frequent retractions -> about 1.3)"
    )
    current = got[0] if got else str(c)
    return _fix(
        "sglang_schedule_conservativeness", "--schedule-conservativeness", current, f"{sugg:g}", inputs, effect
    ), None


def _duration(span_s: float) -> str:
    """``10.3 min``, ``40 s``."""
    return f"{span_s / 60:.1f} min" if span_s >= 60 else f"{span_s:.0f} s"


def _at_floor(analysis: AnalysisView, ev: pl.DataFrame) -> tuple[int, str] | None:
    e = analysis.evidence
    if e is None or e.height == 0 or "sgl_ratio_before" not in e.columns:
        return None
    j = ev.select("event_id").join(e, on="event_id", how="inner")
    hit = j.filter(pl.col("sgl_ratio_before") <= pl.col("sgl_ratio_floor") + 1e-4)
    if hit.height == 0:
        return None
    return hit.height, str(hit.get_column("sgl_ratio_before_src")[0])


# The key that ties an event to SGLang's batch lines: its server's log (``stream``: a log and its rotated
# parts) and its DP rank (``engine``). Two servers' logs in one folder both have a DP rank 0: one server's
# batch line is never evidence for the other's retraction.
LINE_KEY = ["_stream", "engine"]


def _keyed_events(ev: pl.DataFrame, lines: pl.DataFrame) -> pl.DataFrame:
    """The timed events with :data:`LINE_KEY`. An event of a log has its log's stream; one without a
    stream (a /metrics counter's: no log says whose it is) reads the batch lines only when they all come
    from one log (one server's), and none otherwise."""
    streams = lines.get_column("_stream").drop_nulls().unique() if lines.height else pl.Series([], dtype=pl.Int32)
    sole = int(streams[0]) if streams.len() == 1 else None
    stream = pl.col("stream").cast(pl.Int32) if "stream" in ev.columns else pl.lit(None, pl.Int32)
    return (
        ev.filter(pl.col("time").is_not_null())
        .with_columns(_stream=stream.fill_null(pl.lit(sole, pl.Int32)), engine=pl.col("engine").fill_null("0"))
        .filter(pl.col("_stream").is_not_null())
    )


def _sglang_ranks(analysis: AnalysisView) -> set[str]:
    """The DP ranks (``engine``) of SGLang's retraction events and batch lines in the bundle."""
    out: set[str] = set()
    for df, own in ((analysis.events, pl.col("engine_kind") == SGLANG), (analysis.stats, pl.col("family") == SGLANG)):
        if df.height:
            out |= set(df.filter(own).get_column("engine").fill_null("0").cast(pl.String).to_list())
    return out


def _running_after(analysis: AnalysisView, ev: pl.DataFrame) -> pl.DataFrame:
    """Per event with a time: the first SGLang batch line of its server's log and DP rank after it (running,
    its line; :data:`LINE_KEY`)."""
    st = analysis.stats
    if st.height == 0:
        return pl.DataFrame()
    st = st.filter((pl.col("family") == SGLANG) & pl.col("time").is_not_null() & pl.col("running").is_not_null())
    if st.height == 0:
        return pl.DataFrame()
    s = st.select(
        pl.col("time").alias("_t"),
        pl.col("stream").cast(pl.Int32).alias("_stream"),
        pl.col("engine").fill_null("0"),
        "running",
        pl.concat_str([pl.col("source"), pl.lit(":"), pl.col("line").cast(pl.String)]).alias("_src"),
    ).sort("_t")
    timed = _keyed_events(ev, s).select("event_id", "time", *LINE_KEY)
    if timed.height == 0:
        return pl.DataFrame()
    return (
        timed.sort("time")
        .join_asof(
            s,
            left_on="time",
            right_on="_t",
            by=LINE_KEY,
            strategy="forward",
            allow_exact_matches=False,
            check_sortedness=False,
        )
        .filter(pl.col("running").is_not_null())
    )


def dp_attention(get: Any) -> tuple[int, Any, float | None]:
    """(D, the flag's current value as a Cfg or None, one DP rank's limit or None) of the limit in force.
    ``get(key)`` reads a configuration number (cfg_number). With ``--enable-dp-attention`` and dp_size
    D > 1 (log._dp_attention) SGLang gives each DP rank ``max_running_requests // D``: the batch lines
    and the start-up line are one rank's, the flag is all ranks' (server_args' value, else the start-up
    line's x D). Without DP attention D = 1 and the flag is the limit in force."""
    cur = get("max_running_requests")
    dpa = get("dp_attention_size")
    d = int(dpa.value) if dpa is not None and dpa.value >= 2 else 1
    if d == 1:
        return 1, cur, None if cur is None else cur.value
    flag = get("max_running_requests_flag")
    if cur is not None and flag is not None and cur.src == flag.src:  # no start-up line: the flag is in force
        return d, flag, flag.value // d
    if flag is not None:
        return d, flag, None if cur is None else cur.value
    if cur is not None:  # the start-up line's, one rank's: the flag is D times it
        return (
            d,
            dataclasses.replace(cur, key=f"max_running_requests x {d}", value=cur.value * d, status="derived"),
            cur.value,
        )
    return d, None, None


def _dp(ranks: list[str]) -> str:
    return " and ".join(f"DP{r}" for r in ranks)


def dp_ranks_said(
    d: int, evidence: set[str], lines: set[str], whose: str, lacking: str = "none of them"
) -> tuple[str, list[str]]:
    """Of which DP ranks a limit sized from some ranks' lines is said, with DP attention over ``d`` ranks
    (SGLang gives each ``max_running_requests // d``: the flag sets the same limit on every rank). Returns
    (the words, the ranks it is said of without evidence of their own). ``evidence``: the DP ranks whose
    lines size it (``whose``: which lines, 'whose batch lines the log holds'); ``lines``: the DP ranks
    with any SGLang retraction or batch line in the log; ``lacking``: what the lines of a rank outside
    ``evidence`` do not show. Every rank in ``evidence``: ' on each of the d DP ranks'. Else the ranks it
    is sized on, and of each other rank whether the log holds its lines: one rank's lines never stand
    for another's (before: ' on each of the 2 DP ranks' from DP0's lines alone)."""
    every = [str(i) for i in range(d)]
    others = [r for r in every if r not in evidence]
    if not others:
        return f" on each of the {d} DP ranks", []
    shown = sorted(evidence, key=lambda r: (len(r), r))
    one = len(shown) == 1
    silent = [r for r in others if r not in lines]
    quiet = [r for r in others if r in lines]
    held = [f"the log holds no retraction or batch line from {_dp(silent)}"] if silent else []
    held += [f"{_dp(quiet)}'s lines show {lacking}"] if quiet else []
    return f" on {_dp(shown)} (the only DP rank{'' if one else 's'} {whose}; {'; '.join(held)})", others


def _max_running(analysis: AnalysisView, ev: pl.DataFrame) -> tuple[dict[str, Any] | None, dict[str, str] | None]:
    after = _running_after(analysis, ev)
    d, cur, per_rank = dp_attention(lambda k: cfg_number(analysis, k))
    if after.height == 0:
        return _fix(
            "sglang_max_running_requests",
            "--max-running-requests",
            None if cur is None else f"{cur.value:g}",
            None,
            [cur.cite()] if cur else [],
            "at most the batch the pool holds",
            missing="no SGLang 'Decode batch' line after the retractions (the running count SGLang settled at)",
        ), None
    low = after.sort("running").row(0, named=True)
    rank = max(int(low["running"]), 1)
    sugg = rank * d
    if per_rank is not None and rank >= per_rank:
        return None, {
            "id": "sglang_max_running_requests",
            "why": f"the batch after the retractions ({rank} running, {low['_src']}) is not below the limit in force "
            f"({cur.cite() if cur is not None else ''}"
            + (f", {per_rank:g} per DP rank with DP attention" if d > 1 else "")
            + ")",
        }
    inputs = [f"{rank} running after the retraction ({low['_src']})"] + ([cur.cite()] if cur else [])
    effect = f"no more running requests than the batch SGLang itself shrank to after retracting ({rank})"
    if d > 1:
        inputs.append(f"dp_attention_size={d} (enable_dp_attention: each DP rank gets max_running_requests // {d})")
        said, assumed = dp_ranks_said(
            d,
            set(after.get_column("engine").to_list()),
            _sglang_ranks(analysis),
            "whose retractions the log holds with a batch line after them",
            "no retraction with a batch line after it",
        )
        same = f" sets the same limit on {_dp(assumed)}, assumed to need no more" if assumed else ""
        effect += f"{said}: {rank} x {d} = {sugg}{same} (SGLang divides the flag by dp_size)"
    fix = _fix(
        "sglang_max_running_requests",
        "--max-running-requests",
        None if cur is None else f"{cur.value:g}",
        str(sugg),
        inputs,
        effect,
    )
    # with DP attention the current value is the flag's, not the start-up line's (one rank's): where it is from
    if d > 1 and cur is not None and cur.src:
        if cur.key == "max_running_requests_flag":  # as given in server_args
            fix["current_from"] = f"seen ({cur.src})"
        elif per_rank is not None:  # the start-up line's x D
            fix["current_from"] = f"derived ({per_rank:g} per DP rank x dp_attention_size {d}, {cur.src})"
    return fix, None


def _mem_fraction(analysis: AnalysisView) -> tuple[dict[str, Any] | None, dict[str, str] | None]:
    f = cfg_number(analysis, "mem_fraction_static")
    total = cfg_number(analysis, "total_gpu_memory_gib")
    avail = cfg_number(analysis, "available_gpu_mem_gib")
    if avail is not None and avail.value <= knobs.DOCS_KEEP_AVAILABLE_GB:
        return None, {
            "id": "sglang_mem_fraction_static",
            "why": f"{avail.cite()}: at or below SGLang's 5-8 GB guidance, no room to raise --mem-fraction-static",
        }
    missing = [
        name
        for name, m in (
            ("mem_fraction_static (the server_args line)", f),
            ("the memory free before the weights load ('Load weight begin. avail mem=')", total),
            ("available_gpu_mem (the start-up pool line)", avail),
        )
        if m is None
    ]
    if missing:
        return _fix(
            "sglang_mem_fraction_static",
            "--mem-fraction-static",
            None if f is None else f"{f.value:g}",
            None,
            [m.cite() for m in (f, total, avail) if m is not None],
            "a larger KV pool while 5-8 GB stay free",
            missing="not in the log: " + ", ".join(missing),
        ), None
    assert f is not None and total is not None and avail is not None
    headroom = avail.value - knobs.DOCS_KEEP_AVAILABLE_GB
    steps = math.floor(headroom / total.value / knobs.DOCS_MEM_FRACTION_STEP + 1e-9)
    if steps < 1:
        return None, {
            "id": "sglang_mem_fraction_static",
            "why": f"{avail.cite()} leaves less than one 0.01 step ({total.value * 0.01:.2f} GB) above 8 GB",
        }
    delta = steps * knobs.DOCS_MEM_FRACTION_STEP
    sugg = round(f.value + delta, 2)
    gib = delta * total.value
    kvg = cfg_number(analysis, "kv_cache_memory_gib")
    kvt = cfg_number(analysis, "kv_pool_tokens_per_rank") or cfg_number(analysis, "kv_cache_tokens")
    gain = ""
    inputs = [f.cite(), total.cite(), avail.cite()]
    if kvg is not None and kvt is not None and kvg.value > 0:
        gain = f", about +{int(gib * kvt.value / kvg.value):,} KV tokens per rank"
        inputs += [kvg.cite(), kvt.cite()]
    effect = (
        f"+{gib:.1f} GB of KV pool{gain}; available_gpu_mem {avail.value:g} -> {avail.value - gib:.1f} GB "
        "(SGLang's docs: keep 5-8 GB, raise in 0.01 steps)"
    )
    return _fix(
        "sglang_mem_fraction_static", "--mem-fraction-static", f"{f.value:g}", f"{sugg:g}", inputs, effect
    ), None


def _chunked_prefill(analysis: AnalysisView, ev: pl.DataFrame) -> tuple[dict[str, Any] | None, dict[str, str] | None]:
    chunk = cfg_number(analysis, "chunked_prefill_size")
    b = analysis.frames.get("sgl_batches")
    if chunk is None or chunk.value <= knobs.DOCS_CHUNKED_PREFILL_FLOOR or b is None or b.height == 0:
        return None, None
    pre = b.filter((pl.col("phase") == "prefill") & pl.col("time").is_not_null() & pl.col("new_tokens").is_not_null())
    if pre.height == 0:
        return None, None
    p = pre.select(
        pl.col("time").alias("_t"),
        pl.col("stream").cast(pl.Int32).alias("_stream"),
        pl.col("engine").fill_null("0"),
        "new_tokens",
        pl.concat_str([pl.col("source"), pl.lit(":"), pl.col("line").cast(pl.String)]).alias("_src"),
    ).sort("_t")
    timed = _keyed_events(ev, p).select("time", *LINE_KEY)
    if timed.height == 0:
        return None, None
    near = (
        timed.sort("time")
        .join_asof(
            p,
            left_on="time",
            right_on="_t",
            by=LINE_KEY,
            strategy="backward",
            tolerance=f"{int(PREFILL_WINDOW_S)}s",
            check_sortedness=False,
        )
        .filter(pl.col("new_tokens") >= chunk.value / 2)
    )
    if near.height == 0:
        return None, {
            "id": "sglang_chunked_prefill_size",
            "why": f"no prefill batch of half a chunk ({chunk.value / 2:g} tokens) in the {PREFILL_WINDOW_S:g} s before "
            "a retraction",
        }
    big = near.sort("new_tokens", descending=True).row(0, named=True)
    sugg = max(int(chunk.value // 2), knobs.DOCS_CHUNKED_PREFILL_FLOOR)
    inputs = [chunk.cite(), f"a prefill batch of {big['new_tokens']} new tokens before a retraction ({big['_src']})"]
    effect = "smaller prefill steps: the pool fills more slowly between decode steps (SGLang's docs: 4096 or 2048)"
    return _fix(
        "sglang_chunked_prefill_size", "--chunked-prefill-size", f"{chunk.value:g}", str(sugg), inputs, effect
    ), None


def _retraction_policy(analysis: AnalysisView) -> tuple[dict[str, Any] | None, dict[str, str] | None]:
    pol = cfg_text(analysis, "retraction_policy")
    prio = cfg_text(analysis, "enable_priority_scheduling")
    on = prio is not None and prio[0].strip("'\"").lower() == "true"
    if not on:
        return None, {
            "id": "sglang_retraction_policy",
            "why": "--retraction-policy priority needs --enable-priority-scheduling and request priorities; the log "
            "shows neither",
        }
    if pol is not None and pol[0] == "priority":
        return None, None
    assert prio is not None
    inputs = [f"enable_priority_scheduling=True ({prio[1]})"] + (
        [f"retraction_policy={pol[0]} ({pol[2]})"] if pol else []
    )
    return _fix(
        "sglang_retraction_policy",
        "--retraction-policy",
        pol[0] if pol else "length",
        "priority",
        inputs,
        "lower-priority requests are retracted first, not the shortest-output ones (0.5.23+)",
    ), None


def candidates(analysis: AnalysisView) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """SGLang's fixes for its events (unranked: fixes.plan ranks them) and the dropped ones."""
    ev = _events(analysis)
    fixes: list[dict[str, Any]] = []
    dropped: list[dict[str, str]] = []
    if ev.height:
        for got in (
            _conservativeness(analysis, ev),
            _max_running(analysis, ev),
            _mem_fraction(analysis),
            _chunked_prefill(analysis, ev),
            _retraction_policy(analysis),
        ):
            fix, why = got
            if fix is not None:
                fixes.append(fix)
            if why is not None:
                dropped.append(why)
    return fixes, dropped


# SGLang's scheduler forces a retraction every SGLANG_TEST_RETRACT_INTERVAL steps while this test switch is on
# (0.5.10+ scheduler.py update_running_batch: 'Testing retraction.'; environ.py EnvVars.SGLANG_TEST_RETRACT)
TEST_RETRACT = "SGLANG_TEST_RETRACT"


def _test_retract(analysis: AnalysisView) -> dict[str, Any] | None:
    """Turning SGLang's test switch off, where its lines say it forced retractions ('Testing retraction.'):
    those retractions are its code's, whatever the pool held, so no KV lever addresses them. It addresses
    exactly the forced events (``events_addressed``), their verdict the one no gate explains."""
    ev = analysis.events
    if ev.height == 0:
        return None
    ev = ev.filter(pl.col("engine_kind") == SGLANG)
    mine = ev.filter(forced(ev, analysis.frames.get("sgl_retractions"))) if ev.height else ev
    if mine.height == 0:
        return None
    first = mine.sort("time", "source", "line", nulls_last=True).row(0, named=True)
    where = f"{first['source']}:{first['line']}"
    fix = _fix(
        "sglang_test_retract",
        TEST_RETRACT,
        "on",
        "unset",
        [f"{mine.height} 'Testing retraction.' line(s), first {where}"],
        f"SGLang stops forcing a retraction every SGLANG_TEST_RETRACT_INTERVAL steps: {mine.height} retraction(s) "
        "here were its test switch's, not KV pressure (a test setting left on in serving)",
    )
    fix.update(addresses=["undetermined"], basis=f"the retraction lines themselves ({where})")
    fix["events_addressed"] = mine.height
    return fix


def plan_part(analysis: AnalysisView, findings: Any, verdicts: Any) -> FixPart:
    """SGLang's changes for its events (the engine's ``fixes``): its candidates ranked over its
    events' verdicts; only the changes (a fix it cannot compute is not listed). Without a retraction
    KV pressure made, the changes the pressure its batch lines show supports (:func:`_pressure_part`).
    Retractions its test switch forced put turning it off (:func:`_test_retract`) among them by the
    events it addresses."""
    if _events(analysis).height == 0:
        part = _pressure_part(analysis, findings)
    else:
        found, dropped = candidates(analysis)
        changes = [x for x in ranked(found, verdict_key_counts(verdicts)) if is_change(x)]
        part = FixPart(changes=changes, know=[], dropped=dropped)
    test = _test_retract(analysis)
    if test is None:
        return part
    changes = sorted([test, *part.changes], key=lambda x: -int(x.get("events_addressed") or 0))
    for i, x in enumerate(changes, 1):
        x["rank"] = i
    return dataclasses.replace(part, changes=changes)


# ------------------------------------------------------------- no retraction: the pressure of the batch lines

# The share of the pool the running set keeps free to grow into when a running limit is estimated from the
# batch lines (preemptlog's estimate, the same room as vLLM's held levers; SGLang's own admission reserves
# by its new-token ratio instead).
GROWTH_ROOM = 0.15
# What would show how far the running requests grow (SGLang's request log; preemptlog does not read it).
# (no ': ' nor '; ' in it: fixes/plan.to_know_more splits a fix's ``missing`` on them)
REQUEST_LOG = (
    "SGLang's request log (--log-requests, with --log-requests-level 1 or more for max_new_tokens), each "
    "request's prompt_tokens and completion_tokens in its 'Finish' line"
)


# the configuration keys its capacity lever reads (the limit in force; with DP attention the flag and D, dp_attention)
CAPACITY_KEYS = ("max_running_requests", "dp_attention_size", "max_running_requests_flag")


def capacity_fixes(c: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """SGLang's levers of the capacity finding (the engine's ``capacity_fixes``, findings/capacity.py, for
    a bundle of SGLang's lines alone): where the batch lines show the pool holding back waiting requests
    (``held``: token usage >= 85 % with #queue-req > 0), ``--max-running-requests floor(100 / (share x
    1.15))``, as many requests as fill the pool to 1 / 1.15 at the share one running request held
    (offered when it lowers the most running requests the pool held and the limit in force). Estimated,
    never verified (not replayed: the what-if model is vLLM's)."""
    held = c.get("held")
    if not held:
        return [], []
    fid = "sglang_capacity_max_running_requests"
    cfg = c.get("cfg") or {}
    d, cur, per_rank = dp_attention(cfg.get)  # the batch lines are one DP rank's: the flag is D times a rank's
    share, room = float(held["share"]), 1 + GROWTH_ROOM
    seen = held["text"]
    fit = int(100 // (share * room)) if share > 0 else 0
    if fit < 1:
        return [], [{"id": fid, "why": f"one running request holds {share:.0f} % of the KV pool ({seen})"}]
    if fit >= held["running_max"] or (per_rank is not None and fit >= per_rank):
        return [], [
            {
                "id": fid,
                "why": f"--max-running-requests {fit * d} would not lower the up to {held['running_max']} running the "
                f"pool held ({seen})" + (f" or the limit in force ({cur.cite()})" if cur is not None else ""),
            }
        ]
    ran = (
        f"{held['running_min']}-{held['running_max']}"
        if held["running_min"] != held["running_max"]
        else str(held["running"])
    )
    per_dp = ""
    if d > 1:
        # the batch lines the fix is sized from: of the engines the bundle holds lines from (capacity.compute);
        # per engine (several), the capacity finding says whose figures size it (_sized_for)
        seen = set(c.get("engine_indices") or [str(i) for i in range(d)])
        said, assumed = dp_ranks_said(d, seen, seen, "whose batch lines the log holds")
        if assumed:
            per_dp = (
                f"{said}: {fit} x {d} sets the same limit on {_dp(assumed)}, assumed alike (SGLang gives each "
                f"max_running_requests // {d})"
            )
        else:
            per_dp = f"{said} (SGLang gives each max_running_requests // {d}: {fit} x {d})"
    fix = _fix(
        fid,
        "--max-running-requests",
        None if cur is None else f"{cur.value:g}",
        str(fit * d),
        [seen, *([cur.cite()] if cur is not None else [])],
        f"{fit} running requests at {share:.1f} % of the KV pool each fill {fit * share:.0f} % of it and have room "
        f"to grow{per_dp}: fewer retractions, more requests waiting",
    )
    fix.update(
        basis=f"estimated from the batch lines, {ran} running at {share:g} % of the KV pool each",
        formula=f"--max-running-requests {fit * d} = floor(100 % / ({share:.1f} % per running request x {room:g}))"
        + (f" x {d} DP ranks" if d > 1 else ""),
        estimated="batch lines",
        pressure=True,
    )
    return [fix], []


def _pressure_part(analysis: AnalysisView, findings: Any) -> FixPart:
    """No retraction KV pressure made: the changes the batch lines' pressure supports (the capacity
    finding's SGLang levers, :func:`capacity_fixes`; ``--mem-fraction-static`` when the start-up line
    leaves room for it), addressing no event; and what would settle the estimate (SGLang's request log)."""
    cap = (getattr(findings, "capacity", None) if findings is not None else None) or {}
    computed = [dict(x) for x in cap.get("fixes") or [] if x.get("engine_kind") == SGLANG and x.get("pressure")]
    dropped = [d for d in cap.get("dropped") or [] if str(d.get("id", "")).startswith(SGLANG)]
    if not computed:
        return FixPart(changes=[], know=[], dropped=dropped)
    mem, why = _mem_fraction(analysis)
    if mem is not None and is_change(mem):
        computed.append({**mem, "pressure": True})
    if why is not None:
        dropped.append(why)
    for i, x in enumerate(computed, 1):
        x["events_addressed"] = 0
        x["rank"] = i
    know = {
        "id": "sglang_request_log",
        "option": "--max-running-requests",
        "suggested": None,
        "missing": REQUEST_LOG,
        "expected_effect": "how far the running requests grow past the share of the pool the batch lines show, "
        "read by hand: preemptlog does not parse SGLang's request lines yet",
    }
    return FixPart(changes=computed, know=[know], dropped=dropped)
