"""The time-window joiner: the evidence around every preemption event.

For each event at time ``t`` the window is ``[t - before, t + after]``
(defaults 10 s and 2 s), plus a look-back of K scheduler steps (default 3):
the field guide's delayed preemption prints ``PREEMPTED`` 1 to 3 steps after
the decision, so the scheduler and pool state of the K steps before the
nearest step count too. Every source's clock can be shifted first with
``--offset KIND_OR_FILE=±DURATION`` (applied by the sources).

Outputs:

- :func:`join` -> the **evidence frame**, one row per event, keyed by
  ``event_id``, columns in :data:`EVIDENCE_SCHEMA`. Every value column
  ``<name>`` has ``<name>_src`` (``file:line`` of the row it came from, or
  ``file:a-b`` for a sum over lines a..b; null when there is no value), and
  configuration values also ``<name>_status`` (``seen`` | ``derived`` |
  ``default``). A column whose source is absent from the bundle is null, never
  guessed; a window count over a source that is present but quiet is 0.
- :func:`window_rows` -> for ``explain``: every row of every source inside one
  event's window, time-ordered (time, offset from the event, source kind,
  what, value, file:line).

Definitions (all per event; "as of t" = the last row at or before ``t`` and no
earlier than ``t - before``):

- ``sched_*``: the nearest [SCHEDULER] step at or before the event. Rows are
  ordered by (time, stream, line), so a step printed after the PREEMPTED line
  in the same second of the same file does not count. Taken only when the step
  is within ``before`` seconds.
- ``lookback_*``: over that step and the K steps before it in the same stream
  (hook steps), or the nearest block-table step and the K steps before it
  (same engine). ``lookback_min_free_blocks`` prefers the hook steps.
- ``pending_*``: the ``Req-`` lines of the snapshot step; ``pending_over_free``
  counts those whose ``blocks_needed`` exceeds the step's free blocks.
- ``batch_*``: the [BATCH] line of the snapshot step (the last one if several);
  ``lookback_max_variance`` over the look-back steps.
- ``req_*``: the event's request (exact id match) in the block-table records
  and text ``block_table extend`` lines: the last ``extend`` in the window
  (``req_blocks_before`` -> ``req_blocks_after``), its latest table at or
  before ``t + after`` (blocks held, tokens, shared blocks with ref_count > 1),
  ``prefix_conflict_with``: another request whose table holds one of those
  shared blocks and which extended or allocated in the same scheduler step as
  the request's preempt record or the step before (when the record carries a
  step), else within ``CONFLICT_S`` (1 s) of the decision (gate G4), and
  ``bt_preempt_offset_s``: time of the request's block-table ``preempt``
  record nearest the event, minus the event's time (clock skew evidence).
- ``bt_preempt_*``: the request's block-table ``preempt`` record nearest the
  event: ``blocks_before`` (blocks it held), and when the record says so, what
  the failed allocation asked for (``blocks_needed``) and the pool at that
  moment (``free_blocks``, ``largest_free_run``, ``watermark_blocks``).
- ``batch_max_len``: the longest running request (``num_tokens``) in the
  nearest block-table step at or before t (the guide's dynamic G2 threshold).
- ``pool_*``: the block-table step snapshot as of t.
- ``kv_*_blocks`` / ``kv_cleared``: sums over the window of the KV cache events.
- ``kv_usage_max``: max GPU KV usage (stats lines) in the window;
  ``*_at`` as of t; ``*_delta`` = value as of ``t + after`` minus value as of
  ``t - before`` (or, when no stats line precedes the window, the first one in
  it).
- ``fb_at_mb`` / ``sm_at_pct`` / ``mem_at_pct``: the dmon sample as of t, the
  largest value over the GPUs of that sample; ``fb_jump_mb``: the largest rise
  of one GPU's frame-buffer use between two consecutive samples, for a rise
  sampled in the window, with ``fb_jump_gpu``.
- ``cfg_*``: the last seen/derived value at or before t; when the log states
  it only later (or never), the value in force for the whole bundle (last
  seen, else derived, else preemptlog's default).

Every lookup is a sorted as-of join, a rolling aggregate over a merged
timeline, or a cumulative-sum difference: no Python loop per event.
``bench/joiner_bench.py`` measures it (1 M events against 10 M dmon samples).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import polars as pl

    from .analysis import Analysis

DEFAULT_BEFORE = 10.0
DEFAULT_AFTER = 2.0
DEFAULT_LOOKBACK = 3
CONFLICT_S = 1.0  # G4: how close to the decision the other request's extension must be

# name -> dtype; the _src / _status companions are added by _build_schema.
_VALUES: list[tuple[str, str, bool]] = [  # (name, dtype, is_config)
    ("sched_step", "Int64", False),
    ("sched_free_blocks", "Int64", False),
    ("sched_pending", "Int64", False),
    ("sched_running", "Int64", False),
    ("sched_age_s", "Float64", False),
    ("lookback_steps", "Int64", False),
    ("lookback_min_free_blocks", "Int64", False),
    ("pending_count", "Int64", False),
    ("pending_max_blocks_needed", "Int64", False),
    ("pending_min_blocks_needed", "Int64", False),
    ("pending_over_free", "Int64", False),
    ("batch_variance", "Float64", False),
    ("batch_threshold", "Float64", False),
    ("lookback_max_variance", "Float64", False),
    ("lookback_variance_step", "Int64", False),
    ("lookback_variance_threshold", "Float64", False),
    ("lookback_compared_steps", "Int64", False),
    ("lookback_short_step", "Int64", False),
    ("lookback_short_free_blocks", "Int64", False),
    ("lookback_short_blocks_needed", "Int64", False),
    ("lookback_max_pending", "Int64", False),
    ("lookback_max_pending_step", "Int64", False),
    ("req_blocks_before", "Int64", False),
    ("req_blocks_after", "Int64", False),
    ("req_blocks_held", "Int64", False),
    ("req_num_tokens", "Int64", False),
    ("req_shared_blocks", "Int64", False),
    ("prefix_conflict_with", "String", False),
    ("bt_preempt_offset_s", "Float64", False),
    ("bt_preempt_blocks_before", "Int64", False),
    ("bt_preempt_blocks_needed", "Int64", False),
    ("bt_preempt_free_blocks", "Int64", False),
    ("bt_preempt_largest_free_run", "Int64", False),
    ("bt_preempt_watermark_blocks", "Int64", False),
    ("bt_preempt_waiting", "Int64", False),
    ("batch_max_len", "Int64", False),
    ("pool_free_blocks", "Int64", False),
    ("pool_largest_free_run", "Int64", False),
    ("pool_free_regions", "Int64", False),
    ("pool_block_size", "Int64", False),
    ("pool_total_blocks", "Int64", False),
    ("lookback_min_largest_free_run", "Int64", False),
    ("kv_stored_blocks", "Int64", False),
    ("kv_removed_blocks", "Int64", False),
    ("kv_cleared", "Int64", False),
    ("kv_usage_max", "Float64", False),
    ("kv_usage_at", "Float64", False),
    ("waiting_at", "Int64", False),
    ("waiting_delta", "Int64", False),
    ("running_at", "Int64", False),
    ("running_delta", "Int64", False),
    ("fb_at_mb", "Float64", False),
    ("fb_jump_mb", "Float64", False),
    ("fb_jump_gpu", "Int64", False),
    ("sm_at_pct", "Float64", False),
    ("mem_at_pct", "Float64", False),
    ("cfg_block_size", "Int64", True),
    ("cfg_max_num_seqs", "Int64", True),
    ("cfg_max_num_batched_tokens", "Int64", True),
    ("cfg_max_model_len", "Int64", True),
    ("cfg_num_gpu_blocks", "Int64", True),
    ("cfg_gpu_memory_utilization", "Float64", True),
    ("cfg_enable_prefix_caching", "Boolean", True),
    ("cfg_enable_chunked_prefill", "Boolean", True),
    ("cfg_speculative", "Boolean", True),
    ("cfg_scheduling_policy", "String", True),
]
# config column -> config keys it reads
CONFIG_KEYS = {
    "cfg_block_size": "block_size",
    "cfg_max_num_seqs": "max_num_seqs",
    "cfg_max_num_batched_tokens": "max_num_batched_tokens",
    "cfg_max_model_len": "max_model_len",
    "cfg_num_gpu_blocks": "num_gpu_blocks",
    "cfg_gpu_memory_utilization": "gpu_memory_utilization",
    "cfg_enable_prefix_caching": "enable_prefix_caching",
    "cfg_enable_chunked_prefill": "enable_chunked_prefill",
    "cfg_speculative": "speculative",
    "cfg_scheduling_policy": "scheduling_policy",
}


def _build_schema() -> dict[str, str]:
    out = {"event_id": "String"}
    for name, dtype, is_cfg in _VALUES:
        out[name] = dtype
        out[f"{name}_src"] = "String"
        if is_cfg:
            out[f"{name}_status"] = "String"
    return out


EVIDENCE_SCHEMA: dict[str, str] = _build_schema()
VALUE_COLUMNS: list[str] = [n for n, _, _ in _VALUES]

WINDOW_SCHEMA = {
    "time": "Datetime(time_unit='us', time_zone='UTC')",
    "offset_s": "Float64",
    "kind": "String",
    "what": "String",
    "value": "String",
    "src": "String",
}


def polars_schema() -> dict:
    import polars as pl

    m = {"String": pl.String, "Int64": pl.Int64, "Float64": pl.Float64, "Boolean": pl.Boolean}
    return {k: m[v] for k, v in EVIDENCE_SCHEMA.items()}


# --------------------------------------------------------------------------
# helpers


def _src(source: str = "source", line: str = "line") -> "pl.Expr":
    import polars as pl

    return pl.concat_str([pl.col(source), pl.lit(":"), pl.col(line).cast(pl.String)])


def _us(seconds: float) -> int:
    return int(round(seconds * 1_000_000))


def _frame(frames: dict, name: str) -> "pl.DataFrame | None":
    import polars as pl

    df = frames.get(name)
    if df is None or df.height == 0:
        return None
    if "time" in df.columns:
        df = df.filter(pl.col("time").is_not_null())
    return df if df.height else None


def _asof(
    left: "pl.DataFrame",
    right: "pl.DataFrame",
    *,
    left_on: str,
    right_on: str,
    by: list[str] | None = None,
    strategy: str = "backward",
    tolerance: Any = None,
    allow_exact: bool = True,
) -> "pl.DataFrame":
    """join_asof on explicitly sorted frames; keeps the left order and columns."""
    lsorted = left.sort(left_on, maintain_order=True)
    rsorted = right.sort(right_on, maintain_order=True)
    kw: dict[str, Any] = {}
    if by:
        kw["by_left"] = by
        kw["by_right"] = by
    return lsorted.join_asof(
        rsorted,
        left_on=left_on,
        right_on=right_on,
        strategy=strategy,  # type: ignore[arg-type]
        tolerance=tolerance,
        allow_exact_matches=allow_exact,
        check_sortedness=False,
        coalesce=False,
        **kw,
    )


def _window_max(
    ev: "pl.DataFrame", series: "pl.DataFrame", key: str, width_us: int, by: str | None = None
) -> "pl.DataFrame":
    """Max of the Int64 ``key`` over series rows with time in [_hi - width, _hi], per event (_i, _max).

    A merged timeline: the events' window ends are inserted as rows with a
    null key, a time-based rolling max runs once over everything (per ``by``
    group when given: both frames carry that column).
    """
    import polars as pl

    g = [pl.col(by).alias("_g")] if by else [pl.lit(0, pl.Int8).alias("_g")]
    s = series.select(pl.col("time").alias("_t"), pl.col(key).alias("_k"), pl.lit(None, pl.UInt32).alias("_i"), *g)
    e = ev.select(pl.col("_hi").alias("_t"), pl.lit(None, pl.Int64).alias("_k"), pl.col("_i"), *g)
    if not s.get_column("_t").is_sorted():
        s = s.sort("_t", maintain_order=True)
    e = e.sort("_t", maintain_order=True)
    merged = s.merge_sorted(e, key="_t")
    roll = pl.col("_k").rolling_max_by("_t", window_size=f"{width_us}us", closed="both")
    merged = merged.with_columns(_max=roll.over("_g") if by else roll)
    return merged.filter(pl.col("_i").is_not_null()).select("_i", "_max")


def engine_key(col: str = "engine") -> "pl.Expr":
    """The engine an event or evidence row belongs to: its label, "0" when none (one engine)."""
    import polars as pl

    return pl.col(col).cast(pl.String).fill_null("0")


def _with_eng(df: "pl.DataFrame") -> "pl.DataFrame":
    import polars as pl

    return df.with_columns(_eng=engine_key("engine") if "engine" in df.columns else pl.lit("0"))


def _window_sum(
    ev: "pl.DataFrame", series: "pl.DataFrame", cols: list[str]
) -> "pl.DataFrame":
    """Sums of ``cols`` over series rows with time in [_lo, _hi] (cumulative-sum differences).

    Also returns _first/_last row numbers (``_r``) in the window for provenance.
    """
    import polars as pl

    s = series.sort("time").with_row_index("_r").with_columns(
        [pl.col(c).fill_null(0).cum_sum().alias(f"_c_{c}") for c in cols]
    )
    keep = ["time", "_r"] + [f"_c_{c}" for c in cols]
    hi = _asof(ev.select("_i", "_hi"), s.select(keep), left_on="_hi", right_on="time")
    lo = _asof(ev.select("_i", "_lo"), s.select(keep), left_on="_lo", right_on="time", allow_exact=False)
    first = _asof(
        ev.select("_i", "_lo"), s.select("time", "_r"), left_on="_lo", right_on="time", strategy="forward"
    )
    out = hi.select("_i", pl.col("_r").alias("_last"), *[pl.col(f"_c_{c}").alias(f"_hi_{c}") for c in cols])
    out = out.join(
        lo.select("_i", *[pl.col(f"_c_{c}").alias(f"_lo_{c}") for c in cols]), on="_i", how="left"
    ).join(first.select("_i", pl.col("_r").alias("_first")), on="_i", how="left")
    return out.with_columns(
        [(pl.col(f"_hi_{c}").fill_null(0) - pl.col(f"_lo_{c}").fill_null(0)).alias(c) for c in cols]
    ).with_columns(
        _first=pl.when(pl.col("_first") <= pl.col("_last")).then(pl.col("_first")),
        _last=pl.when(pl.col("_first") <= pl.col("_last")).then(pl.col("_last")),
    ), s


def _rolling_lookback(df: "pl.DataFrame", group: list[str], value: str, k: int, how: str) -> "pl.DataFrame":
    """Min/max of ``value`` over the current row and the k rows before it in ``group``,
    with the row index (``_row``) where it was reached: columns _lb_val, _lb_row, _lb_n."""
    import polars as pl

    big = 1 << 32
    v = pl.col(value).cast(pl.Int64, strict=False)
    v = pl.when(v.abs() < (1 << 30)).then(v)  # absurd values (a damaged line) would overflow the encoding
    if how == "min":
        enc = v * big + (big - 1 - pl.col("_row").cast(pl.Int64))  # ties -> the latest row
        agg = enc.rolling_min(k + 1, min_samples=1).over(group)
        val = agg.floordiv(big)
        row = (big - 1) - (agg - val * big)
    else:
        enc = v * big + pl.col("_row").cast(pl.Int64)
        agg = enc.rolling_max(k + 1, min_samples=1).over(group)
        val = agg.floordiv(big)
        row = agg - val * big
    n = pl.int_range(pl.len()).over(group).clip(upper_bound=k) + 1
    return df.with_columns(_lb_val=val, _lb_row=row, _lb_n=n.cast(pl.Int64))


# --------------------------------------------------------------------------
# sections: each returns a frame keyed by _i with some evidence columns


def _sec_sched(ev: "pl.DataFrame", frames: dict, k: int, before_us: int) -> "pl.DataFrame | None":
    import polars as pl

    steps = _frame(frames, "hook_steps")
    if steps is None:
        return None
    steps = steps.sort("stream", "seq").with_row_index("_row").with_columns(_ssrc=_src())
    # Pending lines per step.
    pend = frames.get("hook_pending")
    if pend is not None and pend.height:
        p = pend.join(steps.select("stream", "step", "free_blocks"), on=["stream", "step"], how="inner")
        pagg = p.sort("stream", "seq").group_by("stream", "step").agg(
            pl.len().cast(pl.Int64).alias("pending_count"),
            pl.col("blocks_needed").max().alias("pending_max_blocks_needed"),
            pl.col("blocks_needed").min().alias("pending_min_blocks_needed"),
            (pl.col("blocks_needed") > pl.col("free_blocks")).sum().cast(pl.Int64).alias("pending_over_free"),
            _src().sort_by(pl.col("blocks_needed"), descending=True).first().alias("_pmax_src"),
            _src().sort_by(pl.col("blocks_needed")).first().alias("_pmin_src"),
        )
        steps = steps.join(pagg, on=["stream", "step"], how="left", maintain_order="left").with_columns(
            pl.col("pending_count").fill_null(0), pl.col("pending_over_free").fill_null(0)
        )
    else:
        steps = steps.with_columns(
            pending_count=pl.lit(0, pl.Int64),
            pending_max_blocks_needed=pl.lit(None, pl.Int64),
            pending_min_blocks_needed=pl.lit(None, pl.Int64),
            pending_over_free=pl.lit(0, pl.Int64),
            _pmax_src=pl.lit(None, pl.String),
            _pmin_src=pl.lit(None, pl.String),
        )
    # Batch line per step (the last one).
    bat = frames.get("hook_batch")
    if bat is not None and bat.height:
        bagg = bat.sort("stream", "seq").group_by("stream", "step").agg(
            pl.col("variance").last().alias("batch_variance"),
            pl.col("threshold").last().alias("batch_threshold"),
            _src().last().alias("_bsrc"),
        )
        steps = steps.join(bagg, on=["stream", "step"], how="left", maintain_order="left")
    else:
        steps = steps.with_columns(
            batch_variance=pl.lit(None, pl.Float64),
            batch_threshold=pl.lit(None, pl.Float64),
            _bsrc=pl.lit(None, pl.String),
        )
    # Look-back over K steps (rows are in step order within a stream).
    steps = _rolling_lookback(steps, ["stream"], "free_blocks", k, "min").rename(
        {"_lb_val": "lookback_min_free_blocks", "_lb_row": "_lbf_row", "_lb_n": "lookback_steps"}
    )
    # Variance look-back (scaled to keep one decimal... use x1000 fixed point).
    var = pl.col("batch_variance")
    steps = steps.with_columns(  # absurd values (inf, 1e300 in a damaged line) left out, not overflowed
        _var_fx=pl.when(var.abs() < 1e6).then(var * 1000).round().cast(pl.Int64, strict=False)
    )
    has_var = steps.get_column("_var_fx").is_not_null().any()
    if has_var:
        steps = _rolling_lookback(
            steps.with_columns(_var_fx=pl.col("_var_fx").fill_null(-(1 << 28))), ["stream"], "_var_fx", k, "max"
        )
        steps = steps.with_columns(
            lookback_max_variance=pl.when(pl.col("_lb_val") > -(1 << 28)).then(pl.col("_lb_val") / 1000.0),
            _lbv_row=pl.when(pl.col("_lb_val") > -(1 << 28)).then(pl.col("_lb_row")),
        )
    else:
        steps = steps.with_columns(lookback_max_variance=pl.lit(None, pl.Float64), _lbv_row=pl.lit(None, pl.Int64))
    srcs = steps.get_column("_ssrc")
    steps = steps.with_columns(_lbf_src=srcs.gather(steps.get_column("_lbf_row").cast(pl.UInt32)))
    steps = _lookback_per_step(steps, k)
    if has_var:
        bsrcs = steps.get_column("_bsrc")
        steps = steps.with_columns(
            _lbv_src=bsrcs.gather(steps.get_column("_lbv_row").fill_null(0).cast(pl.UInt32))
        ).with_columns(_lbv_src=pl.when(pl.col("_lbv_row").is_not_null()).then(pl.col("_lbv_src")))
    else:
        steps = steps.with_columns(_lbv_src=pl.lit(None, pl.String))

    # Order events and steps on one (time, stream, line) timeline, then as-of on the ordinal.
    e = ev.select(pl.col("time").alias("_t"), pl.col("stream").alias("_s"), pl.col("seq").alias("_q"),
                  pl.lit(1, pl.Int8).alias("_isev"), pl.col("_i").cast(pl.Int64).alias("_id"))
    s = steps.select(pl.col("time").alias("_t"), pl.col("stream").alias("_s"), pl.col("seq").alias("_q"),
                     pl.lit(0, pl.Int8).alias("_isev"), pl.col("_row").cast(pl.Int64).alias("_id"))
    tl = pl.concat([e, s]).sort("_t", "_s", "_q", "_isev", nulls_last=True).with_row_index("_ord")
    e_o = tl.filter(pl.col("_isev") == 1).select(pl.col("_id").cast(pl.UInt32).alias("_i"), "_ord", "_t")
    s_o = tl.filter(pl.col("_isev") == 0).select(pl.col("_id").alias("_row"), pl.col("_ord").alias("_sord"))
    steps = steps.with_columns(pl.col("_row").cast(pl.Int64)).join(s_o, on="_row", how="left")
    j = _asof(e_o, steps, left_on="_ord", right_on="_sord")
    age_us = (pl.col("_t") - pl.col("time")).dt.total_microseconds()
    ok = pl.col("time").is_not_null() & (age_us <= before_us)

    def v(expr: "pl.Expr") -> "pl.Expr":
        return pl.when(ok).then(expr)

    src = v(pl.col("_ssrc"))
    return j.select(
        "_i",
        v(pl.col("step")).alias("sched_step"),
        src.alias("sched_step_src"),
        v(pl.col("free_blocks")).alias("sched_free_blocks"),
        src.alias("sched_free_blocks_src"),
        v(pl.col("pending")).alias("sched_pending"),
        src.alias("sched_pending_src"),
        v(pl.col("running")).alias("sched_running"),
        src.alias("sched_running_src"),
        v((age_us / 1e6).round(6)).alias("sched_age_s"),
        src.alias("sched_age_s_src"),
        v(pl.col("lookback_steps")).alias("lookback_steps"),
        src.alias("lookback_steps_src"),
        v(pl.col("lookback_min_free_blocks")).alias("_h_lbmin"),
        v(pl.col("_lbf_src")).alias("_h_lbmin_src"),
        v(pl.col("pending_count")).alias("pending_count"),
        src.alias("pending_count_src"),
        v(pl.col("pending_max_blocks_needed")).alias("pending_max_blocks_needed"),
        v(pl.col("_pmax_src")).alias("pending_max_blocks_needed_src"),
        v(pl.col("pending_min_blocks_needed")).alias("pending_min_blocks_needed"),
        v(pl.col("_pmin_src")).alias("pending_min_blocks_needed_src"),
        v(pl.col("pending_over_free")).alias("pending_over_free"),
        src.alias("pending_over_free_src"),
        v(pl.col("batch_variance")).alias("batch_variance"),
        v(pl.col("_bsrc")).alias("batch_variance_src"),
        v(pl.col("batch_threshold")).alias("batch_threshold"),
        v(pl.when(pl.col("batch_threshold").is_not_null()).then(pl.col("_bsrc"))).alias("batch_threshold_src"),
        v(pl.col("lookback_max_variance")).alias("lookback_max_variance"),
        v(pl.col("_lbv_src")).alias("lookback_max_variance_src"),
        *[v(pl.col(c)).alias(c) for c in LOOKBACK_STEP_COLUMNS],
    )


# Per-step look-back evidence (rule 2 of issue 13): each step is compared with itself.
LOOKBACK_STEP_COLUMNS = [
    "lookback_compared_steps", "lookback_compared_steps_src",
    "lookback_short_step", "lookback_short_step_src",
    "lookback_short_free_blocks", "lookback_short_free_blocks_src",
    "lookback_short_blocks_needed", "lookback_short_blocks_needed_src",
    "lookback_variance_step", "lookback_variance_step_src",
    "lookback_variance_threshold", "lookback_variance_threshold_src",
    "lookback_max_pending", "lookback_max_pending_src",
    "lookback_max_pending_step", "lookback_max_pending_step_src",
]


def _lookback_per_step(steps: "pl.DataFrame", k: int) -> "pl.DataFrame":
    """Look-back evidence where every comparison stays inside one scheduler step.

    Over the snapshot step and the k steps before it (same stream, rows in step order):

    - ``lookback_short_*``: the latest step whose own pending requests (``Req-`` lines)
      need more blocks than that step's free blocks; its step number, free blocks and
      the largest blocks_needed, cited by its [SCHEDULER] and ``Req-`` lines;
    - ``lookback_compared_steps``: how many look-back steps had pending lines to compare
      (null when none had: nothing could be compared);
    - ``lookback_variance_step`` / ``_threshold``: the step of ``lookback_max_variance``
      and the threshold printed on that same [BATCH] line;
    - ``lookback_max_pending`` / ``_step``: the deepest pending queue of the look-back.
    """
    import polars as pl

    row = pl.col("_row").cast(pl.Int64)
    has_p = pl.col("pending_max_blocks_needed").is_not_null()
    short = (pl.col("pending_max_blocks_needed") > pl.col("free_blocks")).fill_null(False)
    steps = steps.with_columns(
        _short_row=pl.when(short).then(row).rolling_max(k + 1, min_samples=1).over("stream"),
        _cmp_n=has_p.cast(pl.Int64).rolling_sum(k + 1, min_samples=1).over("stream"),
    )
    rows = steps.get_column("_short_row").fill_null(0).cast(pl.UInt32)
    ok = steps.get_column("_short_row").is_not_null()

    def at(col: str) -> "pl.Series":
        return steps.get_column(col).gather(rows)

    out = steps.with_columns(
        lookback_compared_steps=pl.when(pl.col("_cmp_n") > 0).then(pl.col("_cmp_n")),
        lookback_compared_steps_src=pl.when(pl.col("_cmp_n") > 0).then(pl.col("_ssrc")),
        lookback_short_step=pl.when(ok).then(at("step")),
        lookback_short_step_src=pl.when(ok).then(at("_ssrc")),
        lookback_short_free_blocks=pl.when(ok).then(at("free_blocks")),
        lookback_short_free_blocks_src=pl.when(ok).then(at("_ssrc")),
        lookback_short_blocks_needed=pl.when(ok).then(at("pending_max_blocks_needed")),
        lookback_short_blocks_needed_src=pl.when(ok).then(at("_pmax_src")),
    )
    vrow = out.get_column("_lbv_row")
    vok = vrow.is_not_null()
    vr = vrow.fill_null(0).cast(pl.UInt32)
    out = out.with_columns(
        lookback_variance_step=pl.when(vok).then(out.get_column("step").gather(vr)),
        lookback_variance_step_src=pl.when(vok).then(out.get_column("_ssrc").gather(vr)),
        lookback_variance_threshold=pl.when(vok).then(out.get_column("batch_threshold").gather(vr)),
        lookback_variance_threshold_src=pl.when(vok).then(out.get_column("_bsrc").gather(vr)),
    )
    out = out.with_columns(
        lookback_variance_threshold_src=pl.when(pl.col("lookback_variance_threshold").is_not_null()).then(
            pl.col("lookback_variance_threshold_src")
        )
    )
    tmp = _rolling_lookback(out.with_columns(_pend=pl.col("pending")), ["stream"], "_pend", k, "max")
    prow = tmp.get_column("_lb_row")
    pok = tmp.get_column("_lb_val").is_not_null()
    pr = prow.fill_null(0).cast(pl.UInt32)
    return out.with_columns(
        lookback_max_pending=tmp.get_column("_lb_val"),
        lookback_max_pending_src=pl.when(pok).then(out.get_column("_ssrc").gather(pr)),
        lookback_max_pending_step=pl.when(pok).then(out.get_column("step").gather(pr)),
        lookback_max_pending_step_src=pl.when(pok).then(out.get_column("_ssrc").gather(pr)),
    )


def _sec_pool(ev: "pl.DataFrame", frames: dict, k: int, before_us: int) -> "pl.DataFrame | None":
    import polars as pl

    st = _frame(frames, "bt_steps")
    if st is None:
        return None
    st = st.sort("engine", "step", "time").with_row_index("_row").with_columns(_psrc=_src())
    st = _rolling_lookback(
        st.with_columns(_fb=pl.col("free_blocks")), ["engine"], "_fb", k, "min"
    ).rename({"_lb_val": "_p_lbmin", "_lb_row": "_p_lbmin_row", "_lb_n": "_p_lbn"})
    st = _rolling_lookback(
        st.with_columns(_lr=pl.col("largest_free_run").fill_null(1 << 30)), ["engine"], "_lr", k, "min"
    ).rename({"_lb_val": "_p_lbrun", "_lb_row": "_p_lbrun_row"})
    srcs = st.get_column("_psrc")
    st = st.with_columns(
        _p_lbmin_src=srcs.gather(st.get_column("_p_lbmin_row").cast(pl.UInt32)),
        _p_lbrun_src=srcs.gather(st.get_column("_p_lbrun_row").cast(pl.UInt32)),
        _p_lbrun=pl.when(pl.col("_p_lbrun") < (1 << 30)).then(pl.col("_p_lbrun")),
    )
    st = _with_eng(st)
    j = _asof(ev.select("_i", "_t", "_eng"), st, left_on="_t", right_on="time", by=["_eng"],
              tolerance=f"{before_us}us")
    s = pl.when(pl.col("time").is_not_null()).then(pl.col("_psrc"))

    def w(col: str, name: str, src: "pl.Expr" = s) -> list["pl.Expr"]:
        return [pl.col(col).alias(name), pl.when(pl.col(col).is_not_null()).then(src).alias(f"{name}_src")]

    return j.select(
        "_i",
        *w("free_blocks", "pool_free_blocks"),
        *w("largest_free_run", "pool_largest_free_run"),
        *w("free_regions", "pool_free_regions"),
        *w("block_size", "pool_block_size"),
        *w("num_total_blocks", "pool_total_blocks"),
        *w("_p_lbrun", "lookback_min_largest_free_run", pl.col("_p_lbrun_src")),
        pl.col("_p_lbmin").alias("_b_lbmin"),
        pl.when(pl.col("_p_lbmin").is_not_null()).then(pl.col("_p_lbmin_src")).alias("_b_lbmin_src"),
        pl.col("_p_lbn").alias("_b_lbn"),
    )


def _sec_batch_len(ev: "pl.DataFrame", frames: dict, before_us: int) -> "pl.DataFrame | None":
    """``batch_max_len``: the longest running request (tokens) in the nearest block-table step."""
    import polars as pl

    tables = _frame(frames, "bt_tables")
    if tables is None or "num_tokens" not in tables.columns:
        return None
    per_step = (
        tables.filter(pl.col("num_tokens").is_not_null())
        .with_columns(_src_=_src())
        .sort("num_tokens", descending=True)
        .pipe(_with_eng)
        .group_by("_eng", "step", maintain_order=True)
        .agg(pl.col("time").max(), pl.col("num_tokens").first().alias("_mx"), pl.col("_src_").first())
        .sort("time")
    )
    if per_step.height == 0:
        return None
    j = _asof(ev.select("_i", "_t", "_eng"), per_step.select("time", "_eng", "_mx", "_src_"), left_on="_t",
              right_on="time", by=["_eng"], tolerance=f"{before_us}us")
    return j.select(
        "_i",
        pl.col("_mx").alias("batch_max_len"),
        pl.when(pl.col("_mx").is_not_null()).then(pl.col("_src_")).alias("batch_max_len_src"),
    )


def _extends(frames: dict) -> "pl.DataFrame | None":
    import polars as pl

    cols = ["time", "step", "request_id", "action", "blocks_before", "blocks_after", "blocks_needed",
            "pool_free_blocks", "pool_largest_free_run", "watermark_blocks", "waiting", "source", "line"]
    parts = []
    for name in ("bt_events", "bt_text"):
        df = _frame(frames, name)
        if df is not None:
            parts.append(df.select([c for c in cols if c in df.columns]))
    if not parts:
        return None
    out = pl.concat(parts, how="diagonal_relaxed")
    for c in cols:
        if c not in out.columns:
            out = out.with_columns(pl.lit(None, pl.Int64).alias(c))
    return out.filter(pl.col("request_id").is_not_null())


def _sec_request(ev: "pl.DataFrame", frames: dict, before_us: int, after_us: int) -> "pl.DataFrame | None":
    import polars as pl

    allev = _extends(frames)
    tables = _frame(frames, "bt_tables")
    if allev is None and tables is None:
        return None
    er = ev.filter(pl.col("request_id").is_not_null()).select("_i", "_t", "_lo", "_hi", "request_id", "kind")
    out = ev.select("_i")
    decision = None
    tol = f"{before_us + after_us}us"
    if allev is not None:
        ext = allev.filter(pl.col("action") == "extend").with_columns(_xsrc=_src())
        j = _asof(er, ext.select("time", "request_id", "blocks_before", "blocks_after", "_xsrc"),
                  left_on="_hi", right_on="time", by=["request_id"], tolerance=tol)
        s = pl.when(pl.col("time").is_not_null()).then(pl.col("_xsrc"))
        out = out.join(
            j.select(
                "_i",
                pl.col("blocks_before").alias("req_blocks_before"),
                pl.when(pl.col("blocks_before").is_not_null()).then(s).alias("req_blocks_before_src"),
                pl.col("blocks_after").alias("req_blocks_after"),
                pl.when(pl.col("blocks_after").is_not_null()).then(s).alias("req_blocks_after_src"),
            ),
            on="_i",
            how="left",
        )
        pre = allev.filter(pl.col("action") == "preempt").with_columns(_psrc=_src())
        if pre.height:
            pcols = ["time", "step", "request_id", "_psrc", "blocks_before", "blocks_needed",
                     "pool_free_blocks", "pool_largest_free_run", "watermark_blocks", "waiting"]
            j = _match_preempts(er, pre.select(pcols), max(before_us, after_us))
            off = ((pl.col("time") - pl.col("_t")).dt.total_microseconds() / 1e6).round(6)
            keep = pl.col("time").is_not_null() & (pl.col("kind") != "record")
            # The decision time: the preempt record's own time when there is one.
            decision = j.select("_i", pl.col("time").alias("_dt"), pl.col("step").alias("_ds"))
            out = out.join(
                j.select(
                    "_i",
                    pl.when(keep).then(off).alias("bt_preempt_offset_s"),
                    pl.when(keep).then(pl.col("_psrc")).alias("bt_preempt_offset_s_src"),
                    # The request's preempt record: the blocks it held, and when an allocation
                    # failed, what it asked for and the pool it asked (G1 evidence at the decision).
                    *[
                        e
                        for col, name in (
                            ("blocks_before", "bt_preempt_blocks_before"),
                            ("blocks_needed", "bt_preempt_blocks_needed"),
                            ("pool_free_blocks", "bt_preempt_free_blocks"),
                            ("pool_largest_free_run", "bt_preempt_largest_free_run"),
                            ("watermark_blocks", "bt_preempt_watermark_blocks"),
                            ("waiting", "bt_preempt_waiting"),
                        )
                        for e in (
                            pl.col(col).cast(pl.Int64).alias(name),
                            pl.when(pl.col(col).is_not_null()).then(pl.col("_psrc")).alias(f"{name}_src"),
                        )
                    ],
                ),
                on="_i",
                how="left",
            )
    if tables is not None:
        tb = tables.with_columns(_tsrc=_src())
        j = _asof(
            er,
            tb.select("time", "request_id", "num_blocks", "num_tokens", "shared_blocks", "shared_block_ids", "_tsrc"),
            left_on="_hi",
            right_on="time",
            by=["request_id"],
            tolerance=tol,
        )
        s = pl.when(pl.col("time").is_not_null()).then(pl.col("_tsrc"))
        out = out.join(
            j.select(
                "_i",
                pl.col("num_blocks").alias("req_blocks_held"),
                s.alias("req_blocks_held_src"),
                pl.col("num_tokens").alias("req_num_tokens"),
                pl.when(pl.col("num_tokens").is_not_null()).then(s).alias("req_num_tokens_src"),
                pl.col("shared_blocks").alias("req_shared_blocks"),
                s.alias("req_shared_blocks_src"),
            ),
            on="_i",
            how="left",
        )
        # G4: another request holding one of those shared blocks, extending (or allocating)
        # within CONFLICT_S seconds of the decision (the preempt record's time, else the event's).
        c_us = _us(CONFLICT_S)
        shared = j.filter(pl.col("shared_blocks") > 0).select(
            "_i", "_t", "request_id", pl.col("shared_block_ids").alias("_b")
        )
        if decision is not None:
            shared = shared.join(decision, on="_i", how="left").with_columns(_dt=pl.coalesce("_dt", "_t"))
        else:
            shared = shared.with_columns(_dt=pl.col("_t"), _ds=pl.lit(None, pl.Int64))
        shared = shared.with_columns(
            _lo=pl.col("_dt") - pl.duration(microseconds=c_us), _hi=pl.col("_dt") + pl.duration(microseconds=c_us)
        ).explode("_b")
        ext = allev.filter(pl.col("action").is_in(["extend", "allocate"])) if allev is not None else None
        if shared.height and ext is not None and ext.height:
            tx = (
                tb.select(pl.col("request_id").alias("_other"), pl.col("time").alias("_tt"), pl.col("block_ids").alias("_b"))
                .explode("_b")
                .join(shared.select("_b").unique(), on="_b", how="semi")
            )
            cand = (
                shared.join(tx, on="_b", how="inner")
                .filter((pl.col("_other") != pl.col("request_id")) & pl.col("_tt").is_between(pl.col("_lo"), pl.col("_hi")))
                .select("_i", "_lo", "_hi", "_other")
                .unique()
            )
            x = ext.select(
                pl.col("request_id").alias("_other"), pl.col("time").alias("_xt"), pl.col("step").alias("_xs"),
                _src().alias("_xsrc"),
            )
            # When the decision has a scheduler step, the other request's extension must be a
            # record of the same step or the one before; else (no steps) within the time window.
            hit = (
                cand.join(shared.select("_i", "_ds").unique(), on="_i", how="left")
                .join(x, on="_other", how="inner")
                .filter(
                    pl.when(pl.col("_ds").is_not_null())
                    .then(pl.col("_xs").is_between(pl.col("_ds") - 1, pl.col("_ds")).fill_null(False))
                    .otherwise(pl.col("_xt").is_between(pl.col("_lo"), pl.col("_hi")))
                )
                .sort("_i", "_xt", "_other")
                .group_by("_i", maintain_order=True)
                .agg(pl.col("_other").first().alias("prefix_conflict_with"), pl.col("_xsrc").first().alias("prefix_conflict_with_src"))
            )
            out = out.join(hit, on="_i", how="left")
    return out


def _match_preempts(er: "pl.DataFrame", pre: "pl.DataFrame", tol_us: int) -> "pl.DataFrame":
    """Each event of a request gets one of that request's preempt records.

    When a request has as many preempt records as events, the k-th event (in
    time, then line order) takes the k-th record: a request preempted several
    times within one second of a second-resolution log would otherwise map every
    line to the same record. Otherwise the nearest record within the tolerance.
    """
    import polars as pl

    ne = er.group_by("request_id").len("_ne")
    nr = pre.group_by("request_id").len("_nr")
    er2 = er.join(ne, on="request_id", how="left").join(nr, on="request_id", how="left")
    same = pl.col("_ne") == pl.col("_nr")
    ordinal_ev = er2.filter(same.fill_null(False)).sort("_t", "_i").with_columns(
        _k=pl.int_range(pl.len()).over("request_id")
    )
    ranked = pre.sort("time").with_columns(_k=pl.int_range(pl.len()).over("request_id"))
    ordinal = ordinal_ev.join(ranked, on=["request_id", "_k"], how="left").filter(
        ((pl.col("time") - pl.col("_t")).abs() <= pl.duration(microseconds=tol_us)).fill_null(False)
    )
    rest = er2.join(ordinal.select("_i"), on="_i", how="anti")
    nearest = _asof(rest, pre, left_on="_t", right_on="time", by=["request_id"], strategy="nearest",
                    tolerance=f"{tol_us}us")
    cols = list(er.columns) + [c for c in pre.columns if c not in er.columns]
    return pl.concat([ordinal.select(cols), nearest.select(cols)], how="vertical_relaxed")


def _sec_kv(ev: "pl.DataFrame", frames: dict) -> "pl.DataFrame | None":
    import polars as pl

    kv = _frame(frames, "kv_events")
    if kv is None:
        return None
    cols = ["stored_blocks", "removed_blocks", "cleared"]
    sums, s = _window_sum(ev, kv, cols)
    srcs = s.select(pl.col("source"), pl.col("line").cast(pl.String))
    first = sums.get_column("_first")
    last = sums.get_column("_last")
    f_src = srcs.get_column("source").gather(first.fill_null(0))
    l_src = srcs.get_column("source").gather(last.fill_null(0))
    f_line = srcs.get_column("line").gather(first.fill_null(0))
    l_line = srcs.get_column("line").gather(last.fill_null(0))
    rng = pl.DataFrame({"_fs": f_src, "_ls": l_src, "_fl": f_line, "_ll": l_line})
    sums = pl.concat([sums, rng], how="horizontal")
    src = pl.when(pl.col("_first").is_not_null()).then(
        pl.when(pl.col("_fs") == pl.col("_ls"))
        .then(pl.concat_str([pl.col("_fs"), pl.lit(":"), pl.col("_fl"), pl.lit("-"), pl.col("_ll")]))
        .otherwise(pl.concat_str([pl.col("_fs"), pl.lit(":"), pl.col("_fl"), pl.lit(".."), pl.col("_ls"), pl.lit(":"), pl.col("_ll")]))
    )
    return sums.select(
        "_i",
        pl.col("stored_blocks").cast(pl.Int64).alias("kv_stored_blocks"),
        src.alias("kv_stored_blocks_src"),
        pl.col("removed_blocks").cast(pl.Int64).alias("kv_removed_blocks"),
        src.alias("kv_removed_blocks_src"),
        pl.col("cleared").cast(pl.Int64).alias("kv_cleared"),
        src.alias("kv_cleared_src"),
    )


def _sec_stats(ev: "pl.DataFrame", stats: "pl.DataFrame | None", before_us: int, after_us: int) -> "pl.DataFrame | None":
    """Stats-line evidence, per engine (rule 4 of issue 13).

    An event only reads stats lines of its own engine (``Engine NNN``; ``N Engines
    Aggregated`` lines are engine ``all``; a line or event without one is engine "0").
    A counted interval event (kind ``interval``) is judged by the interval itself
    (rule 3): the line that reports it (the engine's last line at or before the
    interval's end) and the engine's line before that one, both cited; ``kv_usage_max``
    and ``waiting_at`` are the larger of the two, ``*_at`` otherwise the reporting
    line's, ``*_delta`` reporting minus previous.
    """
    import polars as pl

    if stats is None or stats.height == 0:
        return None
    st = stats.filter(pl.col("time").is_not_null())
    if st.height == 0:
        return None
    st = (
        _with_eng(st)
        .sort("time", "stream", "seq")
        .with_row_index("_row")
        .with_columns(_ssrc=_src())
    )
    tol = f"{before_us}us"
    by = ["_eng"]
    at = _asof(ev.select("_i", "_t", "_eng"), st.select("time", "_eng", "kv_usage", "waiting", "running", "_ssrc"),
               left_on="_t", right_on="time", by=by, tolerance=tol)
    hi = _asof(ev.select("_i", "_hi", "_eng"), st.select("time", "_eng", "waiting", "running", "_ssrc"),
               left_on="_hi", right_on="time", by=by, tolerance=tol)
    lo = _asof(ev.select("_i", "_lo", "_eng"), st.select("time", "_eng", "waiting", "running"),
               left_on="_lo", right_on="time", by=by, tolerance=tol)
    # No stats line before the window: the change is counted from the first one inside it.
    first = _asof(ev.select("_i", "_lo", "_eng"), st.select("time", "_eng", "waiting", "running"),
                  left_on="_lo", right_on="time", by=by, strategy="forward", tolerance=f"{before_us + after_us}us")
    lo = lo.join(first.select("_i", pl.col("waiting").alias("_wf"), pl.col("running").alias("_rf"),
                              pl.col("time").alias("_tf")), on="_i", how="left").with_columns(
        waiting=pl.when(pl.col("time").is_not_null()).then(pl.col("waiting")).otherwise(pl.col("_wf")),
        running=pl.when(pl.col("time").is_not_null()).then(pl.col("running")).otherwise(pl.col("_rf")),
    )
    # Window max of kv_usage: fixed point x1000, encoded with the row for provenance.
    big = 1 << 32
    enc = st.select(
        "time",
        "_eng",
        pl.when(pl.col("kv_usage").is_between(-1e6, 1e6))  # absurd values (1e22 %) would overflow the encoding
        .then((pl.col("kv_usage") * 1000).round().cast(pl.Int64) * big + pl.col("_row").cast(pl.Int64))
        .alias("_enc"),
    )
    mx = _window_max(ev, enc, "_enc", before_us + after_us, by="_eng")
    mx_val = (pl.col("_max").floordiv(big)) / 1000.0
    mx_row = pl.col("_max") - pl.col("_max").floordiv(big) * big
    mx = mx.with_columns(kv_usage_max=mx_val, _mrow=mx_row)
    srcs = st.get_column("_ssrc")
    mx = mx.with_columns(
        kv_usage_max_src=pl.when(pl.col("_max").is_not_null()).then(
            srcs.gather(mx.get_column("_mrow").fill_null(0).cast(pl.UInt32))
        )
    )

    def s(frame: str, col: str) -> "pl.Expr":
        return pl.when(pl.col(col).is_not_null()).then(pl.col(f"_ssrc{frame}"))

    j = (
        ev.select("_i")
        .join(at.select("_i", "kv_usage", "waiting", "running", "_ssrc"), on="_i", how="left")
        .join(hi.select("_i", pl.col("waiting").alias("_wh"), pl.col("running").alias("_rh"), pl.col("_ssrc").alias("_ssrc_h")),
              on="_i", how="left")
        .join(lo.select("_i", pl.col("waiting").alias("_wl"), pl.col("running").alias("_rl")), on="_i", how="left")
        .join(mx.select("_i", "kv_usage_max", "kv_usage_max_src"), on="_i", how="left")
    )
    wd = pl.col("_wh") - pl.col("_wl")
    rd = pl.col("_rh") - pl.col("_rl")
    window = j.select(
        "_i",
        "kv_usage_max",
        "kv_usage_max_src",
        pl.col("kv_usage").alias("kv_usage_at"),
        s("", "kv_usage").alias("kv_usage_at_src"),
        pl.col("waiting").alias("waiting_at"),
        s("", "waiting").alias("waiting_at_src"),
        wd.alias("waiting_delta"),
        pl.when(wd.is_not_null()).then(pl.col("_ssrc_h")).alias("waiting_delta_src"),
        pl.col("running").alias("running_at"),
        s("", "running").alias("running_at_src"),
        rd.alias("running_delta"),
        pl.when(rd.is_not_null()).then(pl.col("_ssrc_h")).alias("running_delta_src"),
    )
    iv = ev.filter(pl.col("_iend").is_not_null())
    if iv.height == 0:
        return window
    # Counted intervals: the reporting line and the engine's line before it.
    st2 = st.sort("stream", "_eng", "seq").with_columns(
        **{f"_p_{c}": pl.col(c).shift(1).over("stream", "_eng") for c in ("kv_usage", "waiting", "running", "_ssrc")}
    )
    r = _asof(iv.select("_i", "_iend", "_eng"),
              st2.select("time", "_eng", "kv_usage", "waiting", "running", "_ssrc",
                         "_p_kv_usage", "_p_waiting", "_p_running", "_p__ssrc"),
              left_on="_iend", right_on="time", by=by, tolerance=tol)
    both = pl.concat_str([pl.col("_p__ssrc"), pl.lit("; "), pl.col("_ssrc")], ignore_nulls=True)

    def cited(value: "pl.Expr", name: str) -> list["pl.Expr"]:
        return [value.alias(name), pl.when(value.is_not_null()).then(both).alias(f"{name}_src")]

    interval = r.select(
        "_i",
        *cited(pl.max_horizontal("_p_kv_usage", "kv_usage"), "kv_usage_max"),
        pl.col("kv_usage").alias("kv_usage_at"),
        pl.when(pl.col("kv_usage").is_not_null()).then(pl.col("_ssrc")).alias("kv_usage_at_src"),
        *cited(pl.max_horizontal("_p_waiting", "waiting"), "waiting_at"),
        *cited(pl.col("waiting") - pl.col("_p_waiting"), "waiting_delta"),
        pl.col("running").alias("running_at"),
        pl.when(pl.col("running").is_not_null()).then(pl.col("_ssrc")).alias("running_at_src"),
        *cited(pl.col("running") - pl.col("_p_running"), "running_delta"),
    )
    interval = interval.select(window.columns).cast(window.schema)
    return pl.concat([window.join(interval.select("_i"), on="_i", how="anti"), interval], how="vertical")


def _sec_dmon(ev: "pl.DataFrame", frames: dict, before_us: int, after_us: int) -> "pl.DataFrame | None":
    import polars as pl

    dm = _frame(frames, "dmon")
    if dm is None:
        return None
    have = [c for c in ("fb_mb", "sm_pct", "mem_pct") if c in dm.columns]
    if not have:
        return None
    dm = dm.select("time", "gpu", *have, "source", "line")
    if not dm.get_column("time").is_sorted():
        dm = dm.sort("time", maintain_order=True)
    dm = dm.with_row_index("_row")
    big = 1 << 34
    row = pl.col("_row").cast(pl.Int64)
    # Values are encoded with their row (fixed point x10) so that max() also says where.
    dm = dm.with_columns(  # absurd values (inf, 1e300 in a damaged line) left out, not overflowed
        [(pl.when(pl.col(c).abs() < 1e7).then(pl.col(c) * 10).round().cast(pl.Int64, strict=False) * big + row)
         .alias(f"_e_{c}") for c in have]
    )
    src_of = dm.select(pl.col("source"), pl.col("line").cast(pl.String), pl.col("gpu"))

    def decode(col: str) -> tuple["pl.Expr", "pl.Expr"]:
        v = pl.col(col).floordiv(big)
        return v, (pl.col(col) - v * big)

    def gather_src(df: "pl.DataFrame", rowcol: str) -> "pl.Series":
        rows = df.get_column(rowcol).fill_null(0).cast(pl.UInt32)
        return pl.select(
            pl.concat_str([src_of.get_column("source").gather(rows), pl.lit(":"), src_of.get_column("line").gather(rows)])
        ).to_series()

    # The sample as of t: the largest value over the GPUs of that timestamp.
    per_t = dm.group_by("time").agg([pl.col(f"_e_{c}").max() for c in have]).sort("time")
    at = _asof(ev.select("_i", "_t"), per_t, left_on="_t", right_on="time", tolerance=f"{before_us}us")
    name = {"fb_mb": "fb_at_mb", "sm_pct": "sm_at_pct", "mem_pct": "mem_at_pct"}
    out = at.select("_i")
    for c in have:
        v, r = decode(f"_e_{c}")
        tmp = at.select(v.alias("_v"), r.alias("_r"))
        ok = tmp.get_column("_v").is_not_null()
        out = out.with_columns(
            pl.Series(name[c], (tmp.get_column("_v") / 10.0)),
            pl.when(ok).then(gather_src(tmp, "_r")).alias(f"{name[c]}_src"),
        )
    if "fb_mb" in have:
        # Largest rise of one GPU's fb between consecutive samples, for a rise sampled in the window.
        jump = pl.col("fb_mb") - pl.col("fb_mb").shift(1).over("gpu")
        jump = pl.when(jump.abs() < 1e8).then(jump).round().cast(pl.Int64, strict=False)
        g = dm.select("time", (jump * big + row).alias("_enc"))
        mx = _window_max(ev, g, "_enc", before_us + after_us)
        v, r = decode("_max")
        mx = mx.with_columns(_jump=v.cast(pl.Float64), _jrow=r)
        rows = mx.get_column("_jrow").fill_null(0).cast(pl.UInt32)
        ok = mx.get_column("_max").is_not_null()
        mx = mx.with_columns(_jgpu=src_of.get_column("gpu").gather(rows).cast(pl.Int64), _jsrc=gather_src(mx, "_jrow"))
        out = out.join(
            mx.select(
                "_i",
                pl.when(ok).then(pl.col("_jump")).alias("fb_jump_mb"),
                pl.when(ok).then(pl.col("_jsrc")).alias("fb_jump_mb_src"),
                pl.when(ok).then(pl.col("_jgpu")).alias("fb_jump_gpu"),
                pl.when(ok).then(pl.col("_jsrc")).alias("fb_jump_gpu_src"),
            ),
            on="_i",
            how="left",
        )
    return out


def _config_rows(config: "pl.DataFrame") -> "pl.DataFrame":
    """Config rows for the evidence keys, with a derived boolean ``speculative`` key."""
    import polars as pl

    cfg = config
    spec_keys = ["speculative_config", "speculative_model", "num_speculative_tokens"]
    val = pl.col("value").str.strip_chars("'\" ")
    spec = cfg.filter(pl.col("key").is_in(spec_keys)).with_columns(
        value=pl.when(pl.col("key") == "num_speculative_tokens")
        .then((val.cast(pl.Int64, strict=False).fill_null(0) > 0).cast(pl.String))
        .otherwise((~val.str.to_lowercase().is_in(["none", "null", "", "{}", "false"])).cast(pl.String)),
        key=pl.lit("speculative"),
    )
    return pl.concat([cfg, spec], how="vertical")


def _cast_cfg(expr: "pl.Expr", dtype: str) -> "pl.Expr":
    import polars as pl

    if dtype == "Boolean":
        low = expr.str.strip_chars("'\" ").str.to_lowercase()
        return pl.when(low.is_in(["true", "1", "yes", "on"])).then(True).when(
            low.is_in(["false", "0", "no", "off", "none"])
        ).then(False)
    if dtype == "String":
        return expr.str.strip_chars("'\" ").str.to_lowercase()
    if dtype == "Int64":
        return expr.str.replace_all(",", "", literal=True).cast(pl.Float64, strict=False).cast(pl.Int64, strict=False)
    return expr.cast(pl.Float64, strict=False)


def _sec_config(ev: "pl.DataFrame", config: "pl.DataFrame | None") -> "pl.DataFrame | None":
    import polars as pl

    from .vllm.config import in_force

    if config is None or config.height == 0:
        return None
    cfg = _config_rows(config).with_columns(
        _csrc=pl.when(pl.col("source").is_not_null()).then(_src())
    )
    forced = in_force(cfg)
    out = ev.select("_i")
    dtypes = {n: d for n, d, _ in _VALUES}
    for col, key in CONFIG_KEYS.items():
        rows = cfg.filter((pl.col("key") == key) & (pl.col("status") != "default") & pl.col("time").is_not_null())
        fb = forced.get(key)
        fb_val = fb["value"] if fb else None
        fb_src = f"{fb['source']}:{fb['line']}" if fb and fb.get("source") else None
        fb_status = fb["status"] if fb else None
        if rows.height:
            j = _asof(ev.select("_i", "_t"), rows.select("time", "value", "status", "_csrc"), left_on="_t", right_on="time")
            j = j.select(
                "_i",
                pl.when(pl.col("time").is_not_null()).then(pl.col("value")).otherwise(pl.lit(fb_val, pl.String)).alias("_v"),
                pl.when(pl.col("time").is_not_null()).then(pl.col("_csrc")).otherwise(pl.lit(fb_src, pl.String)).alias(f"{col}_src"),
                pl.when(pl.col("time").is_not_null()).then(pl.col("status")).otherwise(pl.lit(fb_status, pl.String)).alias(f"{col}_status"),
            )
        else:
            j = ev.select(
                "_i",
                pl.lit(fb_val, pl.String).alias("_v"),
                pl.lit(fb_src, pl.String).alias(f"{col}_src"),
                pl.lit(fb_status, pl.String).alias(f"{col}_status"),
            )
        j = j.with_columns(_cast_cfg(pl.col("_v"), dtypes[col]).alias(col)).drop("_v")
        out = out.join(j, on="_i", how="left")
    return out


# --------------------------------------------------------------------------


def compute(
    events: "pl.DataFrame",
    frames: dict[str, "pl.DataFrame"],
    stats: "pl.DataFrame | None" = None,
    config: "pl.DataFrame | None" = None,
    *,
    before: float = DEFAULT_BEFORE,
    after: float = DEFAULT_AFTER,
    lookback_steps: int = DEFAULT_LOOKBACK,
) -> "pl.DataFrame":
    """The evidence frame for ``events`` (needs event_id, time; uses request_id, stream, seq, kind)."""
    import polars as pl

    schema = polars_schema()
    before_us, after_us = _us(before), _us(after)
    if before_us < 0 or after_us < 0 or lookback_steps < 0:
        raise ValueError("before, after and lookback_steps must not be negative")
    if events.height == 0:
        return pl.DataFrame(schema=schema)
    base = events.with_row_index("_i")
    for c, dt in (("request_id", pl.String), ("stream", pl.Int32), ("seq", pl.UInt32), ("kind", pl.String),
                  ("engine", pl.String), ("interval_start", pl.Datetime("us", "UTC")),
                  ("interval_end", pl.Datetime("us", "UTC"))):
        if c not in base.columns:
            base = base.with_columns(pl.lit(None, dt).alias(c))
    ev = base.filter(pl.col("time").is_not_null()).select(
        "_i",
        "time",
        "request_id",
        "stream",
        "seq",
        "kind",
        engine_key("engine").alias("_eng"),
        pl.when(pl.col("kind") == "interval").then(pl.col("interval_end")).alias("_iend"),
        pl.col("time").alias("_t"),
        (pl.col("time") - pl.duration(microseconds=before_us)).alias("_lo"),
        (pl.col("time") + pl.duration(microseconds=after_us)).alias("_hi"),
    ).sort("_t")
    out = base.select("_i", "event_id")
    if ev.height:
        sections = [
            _sec_sched(ev, frames, lookback_steps, before_us),
            _sec_pool(ev, frames, lookback_steps, before_us),
            _sec_batch_len(ev, frames, before_us),
            _sec_request(ev, frames, before_us, after_us),
            _sec_kv(ev, frames),
            _sec_stats(ev, stats, before_us, after_us),
            _sec_dmon(ev, frames, before_us, after_us),
            _sec_config(ev, config),
        ]
        for sec in sections:
            if sec is not None:
                out = out.join(sec, on="_i", how="left", maintain_order="left")
    # lookback_min_free_blocks: hook steps first, else block-table steps.
    h = [c for c in ("_h_lbmin", "_b_lbmin") if c in out.columns]
    if h:
        out = out.with_columns(
            lookback_min_free_blocks=pl.coalesce(h),
            lookback_min_free_blocks_src=pl.coalesce([f"{c}_src" for c in h]),
        )
        if "lookback_steps" not in out.columns and "_b_lbn" in out.columns:
            out = out.with_columns(
                lookback_steps=pl.col("_b_lbn"),
                lookback_steps_src=pl.when(pl.col("_b_lbn").is_not_null()).then(pl.col("_b_lbmin_src")),
            )
    cols = []
    for name, dtype in schema.items():
        if name in out.columns:
            cols.append(pl.col(name).cast(dtype))
        else:
            cols.append(pl.lit(None, dtype).alias(name))
    return out.sort("_i").select(cols)


def record_events(frames: dict[str, "pl.DataFrame"]) -> "pl.DataFrame | None":
    """Block-table ``preempt`` records as partial event frames (kind ``record``)."""
    import polars as pl

    bt = frames.get("bt_events")
    if bt is None or bt.height == 0:
        return None
    pre = bt.filter(pl.col("action") == "preempt")
    if pre.height == 0:
        return None
    return pre.select(
        pl.concat_str([pl.col("source"), pl.lit(":"), pl.col("line").cast(pl.String)]).alias("event_id"),
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
            [pl.lit("block-table preempt step="), pl.col("step").cast(pl.String),
             pl.when(pl.col("reason").is_not_null()).then(pl.concat_str([pl.lit(" reason="), pl.col("reason")])).otherwise(pl.lit(""))],
        ).alias("raw"),
        pl.lit(None, pl.Int32).alias("stream"),
        pl.lit(None, pl.UInt32).alias("seq"),
        pl.lit(0, pl.Int64).alias("_sub"),
    )


def skew_notes(events: "pl.DataFrame", evidence: "pl.DataFrame") -> list[str]:
    """Clock skew estimates between sources that see the same moments (reported, never applied)."""
    import polars as pl

    notes = []
    if evidence.height and "bt_preempt_offset_s" in evidence.columns:
        pairs = evidence.join(events.select("event_id", "kind", "time_precision"), on="event_id", how="left").filter(
            pl.col("bt_preempt_offset_s").is_not_null() & pl.col("kind").is_in(["logged", "marker"])
        )
        if pairs.height:
            # A line stamped to the whole second happened on average 0.5 s after its stamp.
            corrected = pl.col("bt_preempt_offset_s") - pl.when(pl.col("time_precision") == "1s").then(0.5).otherwise(0.0)
            med = pairs.select(corrected.median()).item()
            if med is not None:
                notes.append(
                    f"clock skew estimate: block-table preempt records are {med:+.3f} s from the log's preemption "
                    f"lines for the same request (median of {pairs.height} pair(s)); not applied. If the block-table "
                    f"clock is off, add --offset blocktable={-med:+.3f}s (lines stamped to the second are taken as "
                    "0.5 s late; a PREEMPTED line printed 1-3 steps after the decision makes the estimate read low)."
                )
    return notes


def finish(analysis: "Analysis", *, before: float, after: float, lookback_steps: int) -> None:
    """Called at the end of analysis: evidence and skew notes.

    Which block-table ``preempt`` records are events (kind ``record``) and which are
    evidence was decided by reconcile.records_vs_counts; records that are evidence
    are matched to the log event of the same request (``bt_preempt_offset_s``).
    """
    import polars as pl

    analysis.evidence = compute(
        analysis.events,
        analysis.frames,
        analysis.stats,
        analysis.config,
        before=before,
        after=after,
        lookback_steps=lookback_steps,
    )
    analysis.notes.extend(skew_notes(analysis.events, analysis.evidence))
    _ = pl


# --------------------------------------------------------------------------
# explain: the long, time-ordered window


def _kv_string(cols: list[str]) -> "pl.Expr":
    import polars as pl

    return pl.concat_str(
        [pl.when(pl.col(c).is_not_null()).then(pl.concat_str([pl.lit(f"{c}="), pl.col(c).cast(pl.String)])) for c in cols],
        separator=" ",
        ignore_nulls=True,
    )


def window_rows(analysis: "Analysis", event_id: str, before: float, after: float) -> "pl.DataFrame":
    """Every row of every source in one event's window, time-ordered (WINDOW_SCHEMA)."""
    import polars as pl

    from .sources import vllm_log

    ev = analysis.events.filter(pl.col("event_id") == event_id)
    schema = {
        "time": pl.Datetime("us", "UTC"),
        "offset_s": pl.Float64,
        "kind": pl.String,
        "what": pl.String,
        "value": pl.String,
        "src": pl.String,
    }
    if ev.height == 0:
        return pl.DataFrame(schema=schema)
    t = ev.get_column("time")[0]
    if t is None:
        return pl.DataFrame(schema=schema)
    lo = pl.lit(t) - pl.duration(microseconds=_us(before))
    hi = pl.lit(t) + pl.duration(microseconds=_us(after))
    inwin = pl.col("time").is_between(lo, hi)
    parts = []

    def add(df: "pl.DataFrame | None", kind: str, what: "pl.Expr", value: "pl.Expr", order: int) -> None:
        if df is None or df.height == 0 or "time" not in df.columns:
            return
        sub = df.filter(inwin)
        if sub.height == 0:
            return
        parts.append(
            sub.select(
                "time",
                pl.lit(kind).alias("kind"),
                what.alias("what"),
                value.alias("value"),
                _src().alias("src"),
                pl.lit(order).alias("_o"),
                pl.col("line").cast(pl.Int64).alias("_l"),
            )
        )

    rec = analysis.records
    if rec.height:
        r = rec.filter(inwin).with_columns(pl.col("n").alias("line"))
        add(
            r,
            vllm_log.KIND,
            pl.col("kind"),
            pl.coalesce(pl.col("text").str.strip_chars().str.slice(0, 300), pl.col("req_id")),
            0,
        )
    f = analysis.frames
    for name, what_col, cols in (
        ("bt_steps", "step", ["step", "free_blocks", "largest_free_run", "free_regions", "block_size", "running", "waiting"]),
        ("bt_tables", "table", ["request_id", "step", "num_blocks", "num_tokens", "shared_blocks", "max_ref_count"]),
        ("bt_events", "event", ["request_id", "action", "step", "blocks_before", "blocks_after", "blocks_needed", "reason"]),
    ):
        df = f.get(name)
        if df is not None:
            add(df, "blocktable", pl.lit(what_col) if name != "bt_events" else pl.concat_str([pl.lit("event "), pl.col("action")]),
                _kv_string([c for c in cols if c in df.columns]), 1)
    kv = f.get("kv_events")
    if kv is not None:
        add(kv, "kvevents", pl.lit("batch"), _kv_string(["stored_blocks", "removed_blocks", "cleared", "dp_rank"]), 2)
    dm = f.get("dmon")
    if dm is not None:
        metrics = [c for c in dm.columns if c not in ("time", "time_precision", "gpu", "source", "line")]
        add(dm, "dmon", pl.concat_str([pl.lit("gpu "), pl.col("gpu").cast(pl.String)]), _kv_string(metrics), 3)
    if not parts:
        return pl.DataFrame(schema=schema)
    out = pl.concat(parts, how="vertical").with_columns(
        offset_s=(pl.col("time") - pl.lit(t)).dt.total_microseconds() / 1e6
    )
    return out.sort("time", "_o", "src", "_l", maintain_order=True).select(list(schema))
