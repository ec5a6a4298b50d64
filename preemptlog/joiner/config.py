"""The configuration in force at each event (seen, derived, or preemptlog's default)."""

from __future__ import annotations

from typing import Any

import polars as pl

from ..model.config import in_force
from .common import asof, src_expr
from .declare import Evidence, cited

EVIDENCE = [
    Evidence(
        "cfg_block_size",
        "Int64",
        "vllm-log, blocktable, prometheus (config)",
        "bundle",
        "block_size in force at t (else for the bundle, else preemptlog's default)",
        status=True,
    ),
    Evidence(
        "cfg_max_num_seqs",
        "Int64",
        "vllm-log, blocktable, prometheus (config)",
        "bundle",
        "max_num_seqs, as above",
        status=True,
    ),
    Evidence(
        "cfg_max_num_batched_tokens",
        "Int64",
        "vllm-log, blocktable, prometheus (config)",
        "bundle",
        "max_num_batched_tokens, as above, never preemptlog's default (it follows a GPU the bundle may not show)",
        status=True,
    ),
    Evidence(
        "cfg_max_model_len",
        "Int64",
        "vllm-log, blocktable, prometheus (config)",
        "bundle",
        "max_model_len, as above",
        status=True,
    ),
    Evidence(
        "cfg_num_gpu_blocks",
        "Int64",
        "vllm-log, blocktable, prometheus (config)",
        "bundle",
        "num_gpu_blocks, as above",
        status=True,
    ),
    Evidence(
        "cfg_gpu_memory_utilization",
        "Float64",
        "vllm-log, blocktable, prometheus (config)",
        "bundle",
        "gpu_memory_utilization, as above",
        status=True,
    ),
    Evidence(
        "cfg_enable_prefix_caching",
        "Boolean",
        "vllm-log, blocktable, prometheus (config)",
        "bundle",
        "prefix caching on, as above",
        status=True,
    ),
    Evidence(
        "cfg_enable_chunked_prefill",
        "Boolean",
        "vllm-log, blocktable, prometheus (config)",
        "bundle",
        "chunked prefill on, as above",
        status=True,
    ),
    Evidence(
        "cfg_speculative",
        "Boolean",
        "vllm-log, blocktable, prometheus (config)",
        "bundle",
        "a speculative model configured, as above",
        status=True,
    ),
    Evidence(
        "cfg_scheduling_policy",
        "String",
        "vllm-log, blocktable, prometheus (config)",
        "bundle",
        "scheduling policy (fcfs / priority), as above",
        status=True,
    ),
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


# Keys whose ``default`` row is not evidence: vLLM's max_num_batched_tokens default follows the GPU's tier
# (engines/vllm/config.py batch_default), which the bundle may not show; the rules read a budget it states.
STATED_ONLY = frozenset({"max_num_batched_tokens"})


def _config_rows(config: pl.DataFrame) -> pl.DataFrame:
    """Config rows for the evidence keys (no default of ``STATED_ONLY``), with a derived boolean
    ``speculative`` key."""
    cfg = config.filter(~(pl.col("key").is_in(list(STATED_ONLY)) & (pl.col("status") == "default")))
    spec_keys = ["speculative_config", "speculative_model", "num_speculative_tokens"]
    val = pl.col("value").str.strip_chars("'\" ")
    spec = cfg.filter(pl.col("key").is_in(spec_keys)).with_columns(
        value=pl.when(pl.col("key") == "num_speculative_tokens")
        .then((val.cast(pl.Int64, strict=False).fill_null(0) > 0).cast(pl.String))
        .otherwise((~val.str.to_lowercase().is_in(["none", "null", "", "{}", "false"])).cast(pl.String)),
        key=pl.lit("speculative"),
    )
    return pl.concat([cfg, spec], how="vertical")


def _cast_cfg(expr: pl.Expr, dtype: str) -> pl.Expr:
    if dtype == "Boolean":
        low = expr.str.strip_chars("'\" ").str.to_lowercase()
        return (
            pl.when(low.is_in(["true", "1", "yes", "on"]))
            .then(True)
            .when(low.is_in(["false", "0", "no", "off", "none"]))
            .then(False)
        )
    if dtype == "String":
        return expr.str.strip_chars("'\" ").str.to_lowercase()
    if dtype == "Int64":
        return expr.str.replace_all(",", "", literal=True).cast(pl.Float64, strict=False).cast(pl.Int64, strict=False)
    return expr.cast(pl.Float64, strict=False)


def event_runs(ev: pl.DataFrame, runs: pl.DataFrame | None) -> pl.DataFrame:
    """Per event (``_i``): the server run it belongs to (``_run``; vllm/runs.py), null when none can
    be told. A log event is in the run of its line's stream; an event of another source (a
    block-table record, a counter increase) in the run of its time, when one log stream has runs."""
    if runs is None or runs.height == 0:
        return ev.select("_i", pl.lit(None, pl.Int32).alias("_run"))
    # A stream of several containers' lines has runs per container (vllm/runs.py): an event is in a run
    # of its own container (``_ct``, model/containers.py).
    ct = pl.col("container") if "container" in runs.columns else pl.lit(None, pl.String)
    runs = runs.with_columns(_ct=ct.cast(pl.String).fill_null(""))
    evc = pl.col("_ct").cast(pl.String) if "_ct" in ev.columns else pl.lit(None, pl.String)
    by_line = asof(
        ev.filter(pl.col("stream").is_not_null() & pl.col("seq").is_not_null()).select(
            "_i", "stream", "seq", evc.fill_null("").alias("_ct")
        ),
        runs.select("stream", "_ct", "first_seq", "run"),
        left_on="seq",
        right_on="first_seq",
        by=["stream", "_ct"],
    ).select("_i", pl.col("run").alias("_run"))
    out = ev.select("_i").join(by_line, on="_i", how="left")
    if runs.select("stream", "_ct").n_unique() == 1:
        starts = runs.filter((pl.col("stream_run") > 0) & pl.col("start").is_not_null()).select("start", "run")
        if starts.height:
            by_time = asof(ev.select("_i", "_t"), starts, left_on="_t", right_on="start").select(
                "_i", pl.col("run").alias("_trun")
            )
            out = out.join(by_time, on="_i", how="left").with_columns(_run=pl.coalesce("_run", "_trun")).drop("_trun")
    return out


_RANK = {"default": 0, "derived": 1, "seen": 2}


def _forced(rows: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """The value in force per group (``vllm.config.in_force``'s order: seen > derived > default, last)."""
    return (
        rows.with_columns(_rk=pl.col("status").replace_strict(_RANK, default=0, return_dtype=pl.Int8))
        .with_row_index("_o")
        .sort("_rk", "_o")
        .group_by(by, maintain_order=True)
        .agg(pl.col("value").last(), pl.col("_csrc").last(), pl.col("status").last())
    )


# Event x key rows a pass of section_config holds (the keys are taken in groups of this many
# rows: all at once for up to ~100 k events, one at a time from ~1 M).
KEY_ROWS = 1 << 20


def section_config(
    ev: pl.DataFrame, config: pl.DataFrame | None, runs: pl.DataFrame | None = None
) -> pl.DataFrame | None:
    """The configuration in force at each event. A server run has its own (issue 25): an event of a
    run reads the values of its run (at or before t, else stated later in the run) and those of
    sources that belong to the whole bundle, else the default; never another run's. An event in
    no run reads the whole bundle's.

    Every key is read in the same few queries (one row per event and key, the as-of joins by key):
    a query per key and step cost ~190 small queries at one event."""

    if config is None or config.height == 0:
        return None
    cfg = _config_rows(config).with_columns(_csrc=pl.when(pl.col("source").is_not_null()).then(src_expr()))
    if "run" not in cfg.columns:
        cfg = cfg.with_columns(run=pl.lit(None, pl.Int32))
    forced = in_force(cfg)
    # Outside any run: the bundle's values (another run's never reach an event of a run).
    forced_free = in_force(cfg.filter(pl.col("run").is_null()))
    evr = ev.select("_i", "_t").join(event_runs(ev, runs), on="_i", how="left", maintain_order="left")
    scoped = bool(evr.get_column("_run").is_not_null().any())
    dtypes = {e.name: e.dtype for e in EVIDENCE}
    names = list(CONFIG_KEYS)
    step = max(1, KEY_ROWS // max(1, evr.height))
    out = ev.select("_i")
    for a in range(0, len(names), step):
        group = names[a : a + step]
        wide = _values(evr, cfg, [CONFIG_KEYS[c] for c in group], forced, forced_free, scoped)
        cols = []
        for j, col in enumerate(group):
            cols += cited(col, _cast_cfg(pl.col(f"_v{j}"), dtypes[col]), pl.col(f"_s{j}"), pl.col(f"_st{j}"))
        out = out.join(wide.select("_i", *cols), on="_i", how="left", maintain_order="left")
    return out


def _lit_row(row: dict[str, Any] | None) -> tuple[str | None, str | None, str | None]:
    val = row["value"] if row else None
    src = f"{row['source']}:{row['line']}" if row and row.get("source") else None
    status = row["status"] if row else None
    return val, src, status


def _values(
    evr: pl.DataFrame,
    cfg: pl.DataFrame,
    keys: list[str],
    forced: dict[str, dict[str, Any]],
    forced_free: dict[str, dict[str, Any]],
    scoped: bool,
) -> pl.DataFrame:
    """Per event (``_i``, one row each): ``_v{j}``, ``_s{j}``, ``_st{j}`` of ``keys[j]``."""
    s = pl.String
    fb = [_lit_row(forced.get(k)) for k in keys]
    free = [_lit_row(forced_free.get(k)) for k in keys]
    stated = cfg.filter(
        pl.col("key").is_in(keys) & (pl.col("status") != "default") & pl.col("time").is_not_null()
    ).select("key", "time", "value", "status", "_csrc", "run")
    has = set(stated.get_column("key").unique().to_list())
    kf = pl.DataFrame(
        {
            "key": keys,
            "_k": list(range(len(keys))),
            "_fv": [x[0] for x in fb],
            "_fs": [x[1] for x in fb],
            "_fst": [x[2] for x in fb],
            "_gv": [x[0] for x in free],
            "_gs": [x[1] for x in free],
            "_gst": [x[2] for x in free],
            "_has": [k in has for k in keys],
        },
        schema={
            "key": s,
            "_k": pl.UInt32,
            "_fv": s,
            "_fs": s,
            "_fst": s,
            "_gv": s,
            "_gs": s,
            "_gst": s,
            "_has": pl.Boolean,
        },
    )
    cols = ["time", "value", "status", "_csrc"]
    # keys by their index (_k): integer groups in the as-of joins, none for one key
    stated = stated.join(kf.select("key", "_k"), on="key", how="left", maintain_order="left")
    by = ["_k"] if len(keys) > 1 else None
    ek = evr.select("_i", "_t", "_run").join(kf.select("_k"), how="cross")
    # An event in no run: the last value at or before t over the whole bundle, else the bundle's.
    x = asof(ek, stated.select("_k", *cols), left_on="_t", right_on="time", by=by).join(kf, on="_k", how="left")
    found = pl.col("time").is_not_null()
    x = x.with_columns(
        pl.when(found).then(pl.col("value")).otherwise(pl.col("_fv")).alias("_v0"),
        pl.when(found).then(pl.col("_csrc")).otherwise(pl.col("_fs")).alias("_s0"),
        pl.when(found).then(pl.col("status")).otherwise(pl.col("_fst")).alias("_st0"),
    )
    if not scoped:
        x = x.select("_i", "_k", pl.col("_v0").alias("_v"), pl.col("_s0").alias("_s"), pl.col("_st0").alias("_st"))
    else:
        x = _scoped(x, cfg, stated, kf, cols, by)
    x = x.sort("_i", "_k")
    n = len(keys)
    picked = [pl.col("_i").gather_every(n)]
    for j in range(n):
        picked += [pl.col(c).gather_every(n, offset=j).alias(f"{c}{j}") for c in ("_v", "_s", "_st")]
    return x.select(picked)


def _scoped(
    x: pl.DataFrame, cfg: pl.DataFrame, stated: pl.DataFrame, kf: pl.DataFrame, cols: list[str], by: list[str] | None
) -> pl.DataFrame:
    """``x`` (per event and key: ``_v0``.., the key's fallbacks) with the values of the event's own
    run: its run's last value at or before t, or the bundle's own sources' (whichever is later),
    else the run's value in force, else the bundle's own, else default. A key stated at no time
    reads the bundle's own value (or default) in every run."""
    in_run = pl.col("_run").is_not_null()
    mine = stated.filter(pl.col("run").is_not_null()).rename({"run": "_run"})
    free = stated.filter(pl.col("run").is_null())
    left = x.filter(in_run)
    r = asof(
        left.select("_i", "_t", "_run", "_k"),
        mine.select("_run", "_k", *cols),
        left_on="_t",
        right_on="time",
        by=[*(by or []), "_run"],
    ).select(
        "_i",
        "_k",
        pl.col("time").alias("_tr"),
        pl.col("value").alias("_vr"),
        pl.col("_csrc").alias("_sr"),
        pl.col("status").alias("_str"),
    )
    f = asof(left.select("_i", "_t", "_k"), free.select("_k", *cols), left_on="_t", right_on="time", by=by).select(
        "_i",
        "_k",
        pl.col("time").alias("_tf"),
        pl.col("value").alias("_vf"),
        pl.col("_csrc").alias("_sf"),
        pl.col("status").alias("_stf"),
    )
    later = cfg.join(kf.select("key", "_k"), on="key", how="inner", maintain_order="left").filter(
        pl.col("run").is_not_null()
    )
    run_forced = (
        _forced(later.rename({"run": "_run"}), ["_k", "_run"]).rename(
            {"value": "_vl", "_csrc": "_sl", "status": "_stl"}
        )
        if later.height
        else pl.DataFrame(
            schema={"_k": pl.UInt32, "_run": pl.Int32, "_vl": pl.String, "_sl": pl.String, "_stl": pl.String}
        )
    )
    x = (
        x.join(r, on=["_i", "_k"], how="left")
        .join(f, on=["_i", "_k"], how="left")
        .join(run_forced, on=["_k", "_run"], how="left")
    )
    use_r = pl.col("_tr").is_not_null() & (pl.col("_tf").is_null() | (pl.col("_tr") >= pl.col("_tf")))
    use_f = pl.col("_tf").is_not_null()
    use_l = pl.col("_vl").is_not_null()

    def pick(a: str, b: str, c: str, d: str, z: str) -> pl.Expr:
        return (
            pl.when(~in_run)
            .then(pl.col(z))
            .when(~pl.col("_has"))
            .then(pl.col(d))
            .when(use_r)
            .then(pl.col(a))
            .when(use_f)
            .then(pl.col(b))
            .when(use_l)
            .then(pl.col(c))
            .otherwise(pl.col(d))
        )

    return x.select(
        "_i",
        "_k",
        pick("_vr", "_vf", "_vl", "_gv", "_v0").alias("_v"),
        pick("_sr", "_sf", "_sl", "_gs", "_s0").alias("_s"),
        pick("_str", "_stf", "_stl", "_gst", "_st0").alias("_st"),
    )
