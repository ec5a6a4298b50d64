"""The incident's workload and configuration, rebuilt from the bundle for a replay.

Workload, in order of preference:

1. block-table v2 ``request`` lifecycle records (frame ``bt_requests``, the capture plugin):
   arrival time and scheduler step, prompt tokens, max_tokens, priority and, with prefix
   caching, vLLM's prompt block hashes (``arrival``), the output tokens produced (``finish``);
2. the log's request lines (``analysis.requests``): ``Received request ... max_tokens=N``
   (arrival, max_tokens), prompt token counts where ``prompt_token_ids`` were printed
   (``--enable-log-requests``); ``Finished`` / ``Aborted`` lines;
3. neither: :class:`NoWorkload` (exit code 8) naming what is missing.

Whatever the bundle does not hold is an assumption, listed in ``Workload.assumptions``:
output lengths not recorded are taken as ``max_tokens``; prompt lengths not printed are the
mean prompt length the stats lines' prompt throughput implies (sum of throughput x interval /
requests received), and without stats lines the request is refused.

The configuration in force (:func:`observed_config`) comes from ``vllm.config.in_force``; the
KV pool under another ``gpu_memory_utilization`` from the log's memory lines
(:func:`kv_pool`, arithmetic shown).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import polars as pl

from .. import engines
from ..engines import Budget, ReplayVersions, SchedulerVersion
from ..errors import ExitCode, PreemptlogError, UsageError
from ..model.config import in_force
from ..model.requests import stats_of

if TYPE_CHECKING:
    from ..model.result import AnalysisView as Analysis


class NoWorkload(PreemptlogError):
    """The bundle holds no workload to replay (no request records, no request lines)."""

    exit_code = ExitCode.NO_WORKLOAD


@dataclass(frozen=True)
class WRequest:
    """One request of the workload."""

    request_id: str
    arrival_s: float  # seconds after the first arrival
    prompt_tokens: int
    max_tokens: int
    output_tokens: int  # the output length replayed (recorded, else max_tokens)
    priority: int = 0
    arrival_step: int | None = None  # the scheduler step it arrived at (records only)
    block_hashes: tuple[str, ...] | None = None  # vLLM's prompt block hashes (records, prefix caching)


@dataclass
class Workload:
    requests: list[WRequest]
    source: str  # "records" | "log"
    where: str  # the files it came from
    assumptions: list[str] = field(default_factory=list)

    @property
    def has_hashes(self) -> bool:
        """Prefix identity recorded: some request carries vLLM's block hashes."""
        return any(r.block_hashes for r in self.requests)

    @property
    def has_steps(self) -> bool:
        return bool(self.requests) and all(r.arrival_step is not None for r in self.requests)

    def as_dicts(self) -> list[dict[str, Any]]:
        return [
            {
                "id": r.request_id,
                "arrival_s": r.arrival_s,
                "arrival_step": r.arrival_step,
                "prompt": r.prompt_tokens,
                "max_tokens": r.max_tokens,
                "output": r.output_tokens,
                "priority": r.priority,
            }
            for r in self.requests
        ]


def _files(df: pl.DataFrame) -> str:
    if "source" not in df.columns or df.height == 0:
        return "?"
    names = df.select(pl.col("source").drop_nulls().unique().sort()).get_column("source").to_list()
    return ", ".join(str(n) for n in names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")


def from_records(bt: pl.DataFrame) -> Workload | None:
    """The workload from ``bt_requests`` rows (None when no arrival record has a prompt length)."""
    arr = (
        bt.filter((pl.col("phase") == "arrival") & pl.col("prompt_tokens").is_not_null())
        .sort("time", "step", maintain_order=True)
        .unique("request_id", keep="first", maintain_order=True)
    )
    if arr.height == 0:
        return None
    fin = (
        bt.filter((pl.col("phase") == "finish") & pl.col("output_tokens").is_not_null())
        .group_by("request_id")
        .agg(pl.col("output_tokens").last().alias("_out"))
    )
    rows = arr.join(fin, on="request_id", how="left", maintain_order="left")
    t0 = rows.get_column("time").min()
    rows = rows.with_columns(
        ((pl.col("time") - pl.lit(t0)).dt.total_microseconds() / 1e6).fill_null(0.0).alias("_t"),
    )
    assumptions: list[str] = []
    n_max = rows.get_column("max_tokens").null_count()
    n_out = rows.get_column("_out").null_count()
    if n_max == rows.height:
        raise NoWorkload(
            "the request records carry no max_tokens: cannot size the requests",
            hint="record with the preemptlog vLLM plugin 0.32+ (PREEMPTLOG_RECORD)",
        )
    fill_max = int(rows.get_column("max_tokens").drop_nulls().mean() or 1)  # type: ignore[arg-type]
    if n_max:
        assumptions.append(f"max_tokens of {n_max} request(s) not recorded: taken as the mean {fill_max}")
    if n_out:
        assumptions.append(
            f"output length of {n_out} of {rows.height} request(s) not recorded (no finish record): taken as max_tokens"
        )
    steps_ok = rows.get_column("step").null_count() == 0
    if "block_hashes" not in rows.columns:
        rows = rows.with_columns(block_hashes=pl.lit(None, pl.List(pl.String)))
    reqs = []
    for r in rows.iter_rows(named=True):
        mt = int(r["max_tokens"]) if r["max_tokens"] is not None else fill_max
        out = int(r["_out"]) if r["_out"] is not None else mt
        reqs.append(
            WRequest(
                request_id=str(r["request_id"]),
                arrival_s=float(r["_t"]),
                prompt_tokens=max(1, int(r["prompt_tokens"])),
                max_tokens=mt,
                output_tokens=max(1, out),
                priority=int(r["priority"] or 0),
                arrival_step=int(r["step"]) if steps_ok else None,
                block_hashes=tuple(r["block_hashes"]) if r["block_hashes"] else None,
            )
        )
    return Workload(reqs, "records", _files(arr), assumptions)


def mean_prompt_from_stats(stats: pl.DataFrame, n_requests: int) -> tuple[float, str] | None:
    """Mean prompt length implied by the stats lines: sum(prompt throughput x interval) / requests."""
    if stats is None or stats.height < 2 or n_requests <= 0:
        return None
    s = stats.filter(pl.col("time").is_not_null() & pl.col("prompt_tput").is_not_null()).sort("time")
    if s.height < 2:
        return None
    s = s.with_columns((pl.col("time").diff().dt.total_microseconds() / 1e6).alias("_dt")).filter(pl.col("_dt") > 0)
    total = float(s.select((pl.col("prompt_tput") * pl.col("_dt")).sum()).item() or 0.0)
    if total <= 0:
        return None
    mean = total / n_requests
    return mean, (
        f"sum of prompt throughput x interval over {s.height} stats lines ({_files(stats)}) = {total:.0f} tokens "
        f"/ {n_requests} requests = {mean:.0f} tokens"
    )


def from_log(analysis: Analysis) -> Workload | None:
    """The workload from the log's request lines (None when there is no Received line)."""
    req = analysis.requests
    if req is None or req.height == 0:
        return None
    if stats_of(analysis).folded:  # a frame of the named rows only: not a workload
        raise NoWorkload(
            "the request lines were folded into counts (a large log): the workload needs a row per request",
            hint="analyse with AnalyzeOptions(keep_request_rows=True), as preemptlog whatif does",
        )
    rec = (
        req.filter((pl.col("action") == "received") & pl.col("time").is_not_null())
        .sort("time", "seq", maintain_order=True)
        .unique("request_id", keep="first", maintain_order=True)
    )
    if rec.height == 0:
        return None
    assumptions: list[str] = []
    mt = rec.get_column("max_tokens")
    if mt.null_count() == rec.height:
        raise NoWorkload(
            f"the {rec.height} Received request line(s) print no max_tokens: cannot size the outputs",
            hint="log requests with their SamplingParams (--enable-log-requests)",
        )
    fill_max = round(float(mt.drop_nulls().mean() or 1))  # type: ignore[arg-type]
    if mt.null_count():
        assumptions.append(f"max_tokens of {mt.null_count()} request(s) not printed: taken as the mean {fill_max}")
    pt = rec.get_column("prompt_tokens")
    fill_pt: int | None = None
    if pt.null_count():
        if pt.null_count() < rec.height:
            fill_pt = round(float(pt.drop_nulls().mean() or 1))  # type: ignore[arg-type]
            assumptions.append(
                f"prompt length of {pt.null_count()} of {rec.height} request(s) not printed: taken as the mean "
                f"{fill_pt} of the printed ones"
            )
        else:
            est = mean_prompt_from_stats(analysis.stats, rec.height)
            if est is None:
                raise NoWorkload(
                    f"prompt lengths are not in the bundle ({rec.height} Received line(s) without prompt_token_ids, "
                    "and no stats lines with prompt throughput)",
                    hint="log prompt_token_ids (--enable-log-requests; DEBUG logging from 0.11.1) or record "
                    "requests with the preemptlog vLLM plugin",
                )
            fill_pt = max(1, round(est[0]))
            assumptions.append(
                f"prompt length of every request not printed: taken as {fill_pt} ({est[1]}); errs low where prefix "
                "caching served part of the prompts (vLLM V1 logs prompt throughput from the computed prefill "
                "tokens, vllm/v1/metrics/loggers.py: cache hits are left out), so the replay's demand and "
                "preemptions then err low"
            )
    assumptions.append(
        "output lengths are not in the bundle (Finished lines carry no token count): taken as max_tokens, an upper "
        "bound, so the replay's demand, preemptions and latencies err high"
    )
    t0 = rec.get_column("time").min()
    rec = rec.with_columns(((pl.col("time") - pl.lit(t0)).dt.total_microseconds() / 1e6).alias("_t"))
    reqs = []
    for r in rec.select("request_id", "_t", "max_tokens", "prompt_tokens").iter_rows():
        m = int(r[2]) if r[2] is not None else fill_max
        p = int(r[3]) if r[3] is not None else int(fill_pt or 1)
        reqs.append(WRequest(str(r[0]), float(r[1]), max(1, p), max(1, m), max(1, m)))
    assumptions.append("priority: 0 for every request (request lines print none)")
    return Workload(reqs, "log", _files(rec), assumptions)


def build_workload(analysis: Analysis) -> Workload:
    """Records first, then request lines; else :class:`NoWorkload`."""
    bt = analysis.frames.get("bt_requests")
    if bt is not None and bt.height:
        w = from_records(bt)
        if w is not None:
            return w
    w = from_log(analysis)
    if w is not None:
        return w
    kinds = engines.engine_kinds(analysis.events, analysis.config, analysis.records)
    shown = [e for e in engines.registered() if e.name in kinds]
    if shown and all(e.not_replayed for e in shown):  # only engines whose scheduler the model is not
        raise NoWorkload(
            f"nothing to replay: the bundle is {' and '.join(e.display for e in shown)}'s, and "
            + "; ".join(str(e.not_replayed) for e in shown),
            hint="analyze gives its changes, each with the reason it is not verified by a replay",
        )
    raise NoWorkload(
        "no workload in the bundle: no block-table request records and no 'Received request' lines",
        hint="record requests with the preemptlog vLLM plugin (PREEMPTLOG_RECORD) or log requests "
        "(--enable-log-requests)",
    )


# ------------------------------------------------------------------------------------------ config


@dataclass(frozen=True)
class ReplayConfig:
    """The scheduler settings a replay uses (vLLM names)."""

    num_gpu_blocks: int
    block_size: int = 16
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = False
    scheduling_policy: str = "fcfs"
    watermark: float = 0.0
    long_prefill_token_threshold: int = 0
    max_model_len: int | None = None
    gpu_memory_utilization: float | None = None
    reserve_full_isl: bool = True
    # vLLM 0.34's admission settings (SchedulerConfig); a version without them behaves as their
    # defaults here (the engine registry's SchedulerVersion says which version has which)
    cache_aware_admission_window: int = 0
    cache_aware_admission_threshold: float = 0.5
    max_num_inflight_kv_loads: int | None = None
    # the scheduler version replayed (its behaviours, its settings); None: not in the bundle, the
    # reference version's (engines' SchedulerVersion.replayed)
    vllm_version: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in SETTINGS}


# name -> (type, meaning) of every --set key
SETTINGS: dict[str, tuple[str, str]] = {
    "num_gpu_blocks": ("int", "KV blocks in the pool (vLLM --num-gpu-blocks-override)"),
    "gpu_memory_utilization": ("float", "fraction of GPU memory; the pool is recomputed from the log's memory lines"),
    "block_size": ("int", "tokens per KV block; the pool keeps its token capacity"),
    "max_num_seqs": ("int", "most requests running at once"),
    "max_num_batched_tokens": ("int", "token budget of one scheduler step"),
    "enable_chunked_prefill": ("bool", "split long prefills over steps (false: a prefill must fit the budget)"),
    "enable_prefix_caching": (
        "bool",
        "prefix caching (vLLM's cached block pool; prompts shared by their recorded block hashes, if any)",
    ),
    "scheduling_policy": ("choice:fcfs,priority", "victim choice: fcfs (last admitted) or priority"),
    "watermark": ("float", "fraction of blocks kept free when admitting a waiting request (0.32+)"),
    "long_prefill_token_threshold": ("int", "cap on one request's prefill tokens per step (0: off)"),
    "max_model_len": ("int", "longest request (prompt + output), tokens"),
    "reserve_full_isl": (
        "bool",
        (
            "admit a request only when its whole known sequence fits (vLLM "
            "scheduler_reserve_full_isl, from 0.19, on by default)"
        ),
    ),
    "cache_aware_admission_window": (
        "int0",
        "vLLM 0.34+: among the first N waiting requests, those with a cached prefix are admitted first "
        "(fcfs with prefix caching, once the KV cache is cache_aware_admission_threshold used; 0: off)",
    ),
    "cache_aware_admission_threshold": (
        "fraction",
        "vLLM 0.34+: the KV cache usage from which cache_aware_admission_window applies (default 0.5)",
    ),
    "max_num_inflight_kv_loads": (
        "int_or_none",
        "vLLM 0.34+: cap on requests holding KV blocks for an async KV connector load (none: no cap; the "
        "replay has no KV connector, so it changes nothing here)",
    ),
    "vllm_version": (
        "version",
        "the vLLM version whose scheduler is replayed (its settings and behaviours: from 0.33 a priority "
        "request that preempts itself no longer stops the running loop); default: the bundle's",
    ),
}


def length_limits(workload: Workload, max_model_len: int | None) -> str | None:
    """What vLLM 0.32 does to the workload's requests under ``max_model_len``, said (None: nothing):
    a prompt of max_model_len tokens or more is refused (vllm/v1/engine/input_processor.py
    ``_validate_model_input``), a longer request is stopped at max_model_len tokens
    (vllm/v1/core/sched/utils.py ``check_stop``: FINISHED_LENGTH_CAPPED). Both engines replay that."""
    if not max_model_len:
        return None
    refused = sum(1 for r in workload.requests if r.prompt_tokens >= max_model_len)
    capped = sum(1 for r in workload.requests if r.prompt_tokens < max_model_len < r.prompt_tokens + r.output_tokens)
    parts = []
    if refused:
        parts.append(
            f"{refused} request(s) with a prompt of {max_model_len} tokens or more are refused by vLLM's input "
            "check (vllm/v1/engine/input_processor.py) and not replayed"
        )
    if capped:
        parts.append(
            f"{capped} request(s) stop at {max_model_len} tokens (vllm/v1/core/sched/utils.py check_stop), "
            "their outputs shortened"
        )
    return f"max_model_len {max_model_len}: " + "; ".join(parts) if parts else None


def parse_value(key: str, text: str, option: str = "--set") -> Any:
    """One ``--set`` value, checked; UsageError names the option it came with (``option``), the key
    and what it takes."""
    if key not in SETTINGS:
        raise UsageError(f"{option} {key}: not a replay setting", hint="one of " + ", ".join(SETTINGS))
    kind = SETTINGS[key][0]
    t = text.strip()
    try:
        if kind == "int_or_none" and t.lower() in ("none", "null", ""):
            return None
        if kind in ("int", "int0", "int_or_none"):
            v: Any = int(t.replace("_", "").replace(",", ""))
            if v < (0 if key == "long_prefill_token_threshold" or kind == "int0" else 1):
                raise ValueError
            return v
        if kind == "fraction":
            f = float(t)
            if not 0.0 <= f <= 1.0:
                raise ValueError
            return f
        if kind == "version":
            if not re.fullmatch(r"v?\d+\.\d+(?:\.\d+)?", t):
                raise ValueError
            return t.lstrip("v")
        if kind == "float":
            f = float(t)
            lo_ok = 0.0 <= f < 1.0 if key == "watermark" else 0.0 < f <= 1.0
            if not lo_ok or math.isnan(f):
                raise ValueError
            return f
        if kind == "bool":
            low = t.lower()
            if low in ("true", "1", "yes", "on"):
                return True
            if low in ("false", "0", "no", "off"):
                return False
            raise ValueError
        choices = kind.split(":", 1)[1].split(",")
        if t.lower() in choices:
            return t.lower()
        raise ValueError
    except ValueError:
        want = {
            "int": "a positive integer",
            "int0": "an integer, 0 or more",
            "int_or_none": "a positive integer or none",
            "fraction": "a number in [0, 1]",
            "version": "a version (0.34.0)",
            "float": "a number in (0, 1]" if key != "watermark" else "a number in [0, 1)",
            "bool": "true or false",
        }.get(kind, "one of " + kind.split(":", 1)[-1])
        raise UsageError(f"{option} {key}={text!r}: not {want}") from None


def parse_sets(items: list[str], option: str = "--set") -> dict[str, Any]:
    """NAME=VALUE items of ``option`` (--set, --base, --sweep, --config), checked."""
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise UsageError(f"{option} expects NAME=VALUE, got {item!r}", hint=f"e.g. {option} max_num_seqs=32")
        k, v = item.split("=", 1)
        value = parse_value(k.strip(), v, option)
        if k.strip() in out and out[k.strip()] != value:  # which one was meant: said, never picked
            raise UsageError(
                f"{option} {k.strip()} given twice ({out[k.strip()]}, then {value})",
                hint=f"to compare values: --sweep {k.strip()}=V1,V2" if option == "--set" else f"give {k.strip()} once",
            )
        out[k.strip()] = value
    return out


@dataclass
class Observed:
    """The configuration in force, where each value came from, and the memory inputs."""

    config: ReplayConfig
    provenance: dict[str, str]
    memory: dict[str, tuple[float, str]]  # kv_gib, weights_gib, total_gib -> (value, where)
    assumptions: list[str]
    # the option that fixes the KV pool whatever gpu_memory_utilization is, as said with its line
    # ('--num-gpu-blocks-override 40 (vllm.log:2)'); None when the memory profile sizes the pool
    pinned: str | None = None


def replayed_config(analysis: Analysis) -> pl.DataFrame:
    """The configuration rows of the engine the what-if replays (engines.replayed): a bundle of two
    engines holds the other's under the same keys (an SGLang log's max_model_len, kv_cache_tokens)."""
    return engines.config_of(analysis.config, engines.replayed().name)


_MEM_KEYS = {"kv_gib": "kv_cache_memory_gib", "weights_gib": "model_weights_gib", "total_gib": "total_gpu_memory_gib"}


def memory_lines(analysis: Analysis) -> dict[str, tuple[float, str]]:
    """Memory figures of the log (the config rows of vllm/config.py: 'Available KV cache memory',
    'Model loading took', the V0 profiling line), each with its file:line."""

    cfg = in_force(replayed_config(analysis))
    out: dict[str, tuple[float, str]] = {}
    for name, key in _MEM_KEYS.items():
        row = cfg.get(key)
        if row is None:
            continue
        try:
            out[name] = (float(str(row["value"]).replace(",", "")), f"{row['source']}:{row['line']}")
        except ValueError:
            continue
    return out


def observed_config(analysis: Analysis, workload: Workload | None = None, pool: int | None = None) -> Observed:
    """The replay configuration the incident ran with (num_gpu_blocks must be known: from the bundle,
    else ``pool``, the --base value). ``workload``: the replay's, whose longest request bounds an
    unstated max_model_len from below (V0's token budget follows max_model_len)."""

    cfg = in_force(replayed_config(analysis))
    prov: dict[str, str] = {}
    assumptions: list[str] = []

    def get(key: str) -> Any:
        row = cfg.get(key)
        if row is None:
            return None
        prov[key] = (
            f"{row['status']} ({row['source']}:{row['line']})"
            if row.get("source")
            else f"{row['status']}: {row.get('note') or ''}"
        )
        return row["value"]

    def as_int(v: Any) -> int | None:
        try:
            return int(str(v).replace(",", ""))
        except (TypeError, ValueError):
            return None

    def as_bool(v: Any) -> bool | None:
        text = str(v).strip().strip("'\"").lower() if v is not None else "none"
        if text in ("none", ""):
            return None
        return text in ("true", "1", "yes")

    bs = as_int(get("block_size")) or 16
    blocks = as_int(get("num_gpu_blocks_override")) or as_int(get("num_gpu_blocks"))
    if blocks is None:
        tokens = as_int(get("kv_cache_tokens"))
        if tokens is not None:
            blocks = tokens // bs
            prov["num_gpu_blocks"] = f"derived: GPU KV cache size {tokens} tokens / block_size {bs}"
    bt_steps = analysis.frames.get("bt_steps")
    if blocks is None and bt_steps is not None and bt_steps.height and "num_total_blocks" in bt_steps.columns:
        nb = bt_steps.get_column("num_total_blocks").drop_nulls()
        if nb.len():
            blocks = int(nb.max())  # type: ignore[arg-type]
            prov["num_gpu_blocks"] = f"block-table step records (num_total_blocks, {nb.len()} record(s))"
    if blocks is None and pool is not None:
        blocks = pool
        prov["num_gpu_blocks"] = "--base num_gpu_blocks"
        assumptions.append("the KV pool size given on the command line")
    if blocks is None:
        raise NoWorkload(
            "the KV pool size is not in the bundle (no '# GPU blocks', 'GPU KV cache size' line or block-table step "
            "record)",
            hint="give it with --base num_gpu_blocks=N",
        )
    mns = as_int(get("max_num_seqs")) or 256
    # vLLM's default for the GPU (a ``default`` row) is the token budget's own assumption, not a stated value
    mbt_row = cfg.get("max_num_batched_tokens")
    stated_mbt = as_int(get("max_num_batched_tokens")) if mbt_row and mbt_row.get("status") != "default" else None
    stated_chunked = as_bool(get("enable_chunked_prefill"))
    budget_at = len(assumptions)  # where the token budget's assumptions go (it needs max_model_len, read below)
    apc = as_bool(get("enable_prefix_caching")) or False
    pol = str(get("scheduling_policy") or "fcfs").strip("'\"").lower()
    ev = analysis.frames.get("bt_events")
    if (
        prov.get("scheduling_policy", "default").startswith("default")
        and ev is not None
        and ev.height
        and "policy" in ev.columns
    ):
        seen = ev.get_column("policy").drop_nulls()
        if seen.len():
            pol = str(seen[-1])
            prov["scheduling_policy"] = f"block-table preempt records (policy {pol}, {seen.len()} record(s))"
    if pol not in ("fcfs", "priority"):
        pol = "fcfs"
    gmu_raw = get("gpu_memory_utilization")
    try:
        gmu = float(gmu_raw) if gmu_raw is not None else None
    except ValueError:
        gmu = None
    mml = as_int(get("max_model_len"))
    # the token budget the bundle does not state: the defaults of the engine generation it ran (V0's or V1's)
    rv = _replay_versions()
    assert rv.budget is not None, "the replayed engine declares its token budget's defaults"
    longest = max((r.prompt_tokens + r.output_tokens for r in workload.requests), default=None) if workload else None
    budget = rv.budget(replayed_config(analysis), stated_chunked, stated_mbt, mml, longest)
    mbt, chunked = budget.max_num_batched_tokens, budget.enable_chunked_prefill
    assumptions[budget_at:budget_at] = budget.assumptions
    for k in ("block_size", "max_num_seqs"):
        if k in prov and prov[k].startswith("default"):
            assumptions.append(f"{k} not in the bundle: taken as the default ({prov[k]})")
    # the scheduler's version: its admission settings (seen in `non-default args`, else the version's
    # defaults) and its behaviours (the model engine follows them)
    assumptions.extend(rv.caveats(replayed_config(analysis)))
    sv = bundle_scheduler(analysis)
    version = sv.version
    prov["vllm_version"] = sv.how
    if sv.caveat is not None:  # a version newer than the model's
        assumptions.append(sv.caveat)
    if version is None:
        assumptions.append(
            f"the vLLM version is not in the bundle: replayed as vLLM {sv.replayed}'s scheduler "
            "(give --base vllm_version=X for another)"
        )
    stated: dict[str, Any] = {}
    for key, cast in (
        ("reserve_full_isl", as_bool),
        ("watermark", _as_float),
        ("cache_aware_admission_window", as_int),
        ("cache_aware_admission_threshold", _as_float),
        ("max_num_inflight_kv_loads", as_int),
    ):
        v = cast(get(CONFIG_KEYS.get(key, key)))
        if v is not None:
            stated[key] = v
            prov[key] = prov.pop(CONFIG_KEYS.get(key, key))
    conf = ReplayConfig(
        num_gpu_blocks=blocks,
        block_size=bs,
        max_num_seqs=mns,
        max_num_batched_tokens=mbt,
        enable_chunked_prefill=chunked,
        enable_prefix_caching=apc,
        scheduling_policy=pol,
        max_model_len=mml,
        gpu_memory_utilization=gmu,
        vllm_version=version,
    )
    conf, dprov = with_version_defaults(conf, sv, keep=set(stated))
    conf = replace(conf, **stated)
    return Observed(conf, {**prov, **dprov}, memory_lines(analysis), assumptions, pinned_by(cfg))


# The options that size the KV pool themselves: vLLM then ignores gpu_memory_utilization for it
# (kv_cache_utils: num_blocks = num_gpu_blocks_override; --kv-cache-memory-bytes "ignores
# gpu_memory_utilization").
POOL_PINS = (
    ("num_gpu_blocks_override", "--num-gpu-blocks-override"),
    ("kv_cache_memory_bytes", "--kv-cache-memory-bytes"),
)


def pinned_by(cfg: dict[str, dict[str, Any]]) -> str | None:
    """The option in force, seen in the bundle, that pins the KV pool (with its file:line), or None."""
    for key, flag in POOL_PINS:
        row = cfg.get(key)
        if row is None or row.get("status") != "seen":
            continue
        value = str(row.get("value")).strip("'\"")
        if value.lower() in ("", "none", "null"):
            continue
        where = f" ({row['source']}:{row['line']})" if row.get("source") else ""
        return f"{flag} {value}{where}"
    return None


# The configuration frame's names of the replay settings that differ (vLLM's)
CONFIG_KEYS = {"reserve_full_isl": "scheduler_reserve_full_isl"}
# The settings whose existence and default depend on the scheduler's version (SchedulerVersion.settings)
VERSIONED = (
    "reserve_full_isl",
    "watermark",
    "cache_aware_admission_window",
    "cache_aware_admission_threshold",
    "max_num_inflight_kv_loads",
)


def _as_float(v: Any) -> float | None:
    try:
        return float(str(v).strip("'\"")) if v is not None else None
    except ValueError:
        return None


def _replay_versions() -> ReplayVersions:
    rv = engines.replayed().replay_versions
    assert rv is not None, "the replayed engine declares its scheduler's versions"
    return rv


def budget_given(analysis: Analysis, obs: Observed, given: dict[str, Any], workload: Workload) -> Budget | None:
    """The token budget again when ``given`` (--base) sets what its unstated default follows
    (max_model_len, enable_chunked_prefill: V0's) but not max_num_batched_tokens, which the bundle does
    not state either; None: nothing to redo."""
    if "max_num_batched_tokens" in given or "max_num_batched_tokens" in obs.provenance:
        return None
    if not {"max_model_len", "enable_chunked_prefill"} & set(given):
        return None
    stated = "enable_chunked_prefill" in given or "enable_chunked_prefill" in obs.provenance
    rv = _replay_versions()
    assert rv.budget is not None, "the replayed engine declares its token budget's defaults"
    return rv.budget(
        replayed_config(analysis),
        given.get("enable_chunked_prefill", obs.config.enable_chunked_prefill) if stated else None,
        None,
        given.get("max_model_len", obs.config.max_model_len),
        max((r.prompt_tokens + r.output_tokens for r in workload.requests), default=None),
    )


def bundle_scheduler(analysis: Analysis) -> SchedulerVersion:
    """The scheduler version of the bundle (the version it names, where; else the reference one)."""
    rv = _replay_versions()
    return rv.scheduler(*rv.of_bundle(replayed_config(analysis)))


def scheduler_of(cfg: ReplayConfig, where: str = "asked") -> SchedulerVersion:
    """The scheduler version a configuration replays (its ``vllm_version``; None: the reference one)."""
    return _replay_versions().scheduler(cfg.vllm_version, where)


def with_version_defaults(
    cfg: ReplayConfig, sv: SchedulerVersion, keep: set[str]
) -> tuple[ReplayConfig, dict[str, str]]:
    """``cfg`` with the versioned settings not in ``keep`` at ``sv``'s defaults (a version without a
    setting: what it did before the setting came), and where each came from."""
    vals: dict[str, Any] = {}
    prov: dict[str, str] = {}
    for key in VERSIONED:
        st = sv.setting(key)
        if st is None or key in keep:
            continue
        if sv.has(key):
            vals[key] = st.default
            prov[key] = f"default: vLLM {sv.replayed} default ({st.where})"
        else:
            since = ".".join(str(x) for x in st.since or ())
            vals[key] = st.absent
            prov[key] = f"vLLM {sv.replayed} has no {st.flag} (from {since}): as it behaved before it came"
    return replace(cfg, **vals), prov


def kv_pool(obs: Observed, gmu_new: float) -> tuple[int, str]:
    """Blocks under another gpu_memory_utilization, and the arithmetic.

    KV memory grows by (new - old) x total GPU memory; the pool grows in proportion:
    blocks_new = floor(blocks_old x kv_new / kv_old). Total GPU memory comes from the profiling
    line; without it, it is estimated as (KV memory + weights) / old utilization (a lower bound:
    activations and non-torch memory are left out) and said so.
    """
    c = obs.config
    old = c.gpu_memory_utilization
    if obs.pinned is not None:
        was = f"{old:g}" if old is not None else "the observed value"
        return c.num_gpu_blocks, (
            f"the KV pool is pinned by {obs.pinned}: gpu_memory_utilization {was} -> {gmu_new:g} does not "
            f"change it ({c.num_gpu_blocks} blocks)"
        )
    if old is None:
        raise NoWorkload(
            "gpu_memory_utilization in force is not in the bundle: cannot rescale the KV pool",
            hint="give num_gpu_blocks instead",
        )
    kv = obs.memory.get("kv_gib")
    if kv is None:
        raise NoWorkload(
            "the KV cache memory is not in the log ('Available KV cache memory: X GiB'): cannot rescale the KV pool",
            hint="give num_gpu_blocks instead",
        )
    total = obs.memory.get("total_gib")
    weights = obs.memory.get("weights_gib")
    if total is not None:
        tot, tot_how = total[0], f"total GPU memory {total[0]:g} GiB ({total[1]})"
    elif weights is not None:
        tot = (kv[0] + weights[0]) / old
        tot_how = (
            f"total GPU memory estimated as (KV {kv[0]:g} + weights {weights[0]:g} GiB ({weights[1]})) / "
            f"{old:g} = {tot:.2f} GiB (a lower bound: activations left out)"
        )
    else:
        raise NoWorkload(
            "neither total GPU memory nor model weights memory is in the log: cannot rescale the KV pool",
            hint="give num_gpu_blocks instead",
        )
    kv_new = kv[0] + (gmu_new - old) * tot
    if kv_new <= 0:
        raise UsageError(f"--set gpu_memory_utilization={gmu_new}: leaves no KV cache memory ({kv_new:.2f} GiB)")
    blocks = math.floor(c.num_gpu_blocks * kv_new / kv[0])
    how = (
        f"KV {kv[0]:g} GiB ({kv[1]}) + ({gmu_new:g} - {old:g}) x {tot_how} = {kv_new:.2f} GiB; "
        f"blocks = floor({c.num_gpu_blocks} x {kv_new:.2f} / {kv[0]:g}) = {blocks}"
    )
    return blocks, how


def apply_settings(obs: Observed, sets: dict[str, Any]) -> tuple[ReplayConfig, list[str]]:
    """The observed configuration with ``sets`` applied; notes say how derived values came out."""
    c = obs.config
    notes: list[str] = []
    if "gpu_memory_utilization" in sets and "num_gpu_blocks" not in sets:
        blocks, how = kv_pool(obs, float(sets["gpu_memory_utilization"]))
        c = replace(c, num_gpu_blocks=blocks, gpu_memory_utilization=float(sets["gpu_memory_utilization"]))
        notes.append(how)
    if "block_size" in sets and "num_gpu_blocks" not in sets:
        bs = int(sets["block_size"])
        blocks = (c.num_gpu_blocks * c.block_size) // bs
        notes.append(
            f"block_size {c.block_size} -> {bs}: the pool keeps its {c.num_gpu_blocks * c.block_size} tokens "
            f"= {blocks} blocks"
        )
        c = replace(c, num_gpu_blocks=blocks)
    rest = {k: v for k, v in sets.items() if k != "gpu_memory_utilization" or "num_gpu_blocks" in sets}
    c = replace(c, **rest)
    if "vllm_version" in sets and sets["vllm_version"] != obs.config.vllm_version:
        # another version: the settings the bundle did not state take that version's defaults
        stated = {
            k for k in VERSIONED if k in sets or not obs.provenance.get(k, "default").startswith(("default", "vLLM"))
        }
        sv = scheduler_of(c)
        c, _ = with_version_defaults(c, sv, keep=stated)
        notes.append(
            f"{sv.caveat}; the settings the bundle does not state take {sv.replayed}'s defaults"
            if sv.caveat is not None  # a version newer than the model's
            else f"replayed as vLLM {sv.replayed}'s scheduler: the settings the bundle does not state take its defaults"
        )
    return c, notes


def version_refusal(obs: Observed, sets: dict[str, Any], cfg: ReplayConfig) -> str | None:
    """``vLLM X would not start: "<vLLM's own words>"`` when ``cfg``'s scheduler version does not have a
    setting asked in ``sets`` (or, asked for another version, one the bundle states), else None."""
    sv = scheduler_of(cfg)
    asked = [k for k in sets if k in VERSIONED]
    if "vllm_version" in sets:
        asked += [
            k
            for k in VERSIONED
            if k not in sets and not obs.provenance.get(k, "default").startswith(("default", "vLLM"))
        ]
    # a value that is what the version does without the setting asks for nothing it lacks (the way to
    # drop a stated setting when asking for an older version)
    why = [
        w
        for k in asked
        if (st := sv.setting(k)) is not None
        and getattr(cfg, k) != st.absent
        and (w := sv.refusal(k, getattr(cfg, k))) is not None
    ]
    if not why:
        return None
    hint = (
        " (the bundle does not name its vLLM version; --base vllm_version=X replays another)"
        if cfg.vllm_version is None
        else ""
    )
    return f"vLLM {sv.replayed} would not start: " + "; ".join(why) + hint


_ = re  # regexes are compiled by polars
