"""SGLang's own statement at the retraction: the event's retraction line, and the ratio's floor.

An SGLang event is one retracted request of a retraction line (log.py): its evidence is
that line (matched by stream and order, never by time: another DP rank's line at the same
second is another engine's) and the configuration in force. The new-token ratio's floor is
``min(0.7 c, 1) x 0.14`` (0.1-0.2: ``min(0.2 c, 1)``, knobs.py) with c the
``schedule_conservativeness`` the ``server_args`` line shows, else SGLang's default 1.0 (status
``default``: an assumption, said so). Registered as the engine's evidence section
(engines.EvidenceSection): the joiner joins it to every event, timed or not.
"""

from __future__ import annotations

import polars as pl

from ...model.config import in_force
from ...model.evidence import Evidence, cited
from ...model.frames import provenance_expr as src_expr
from . import knobs

SOURCE = "sglang-log"
EVIDENCE = [
    Evidence("sgl_retracted_reqs", "Int64", SOURCE, "step", "#retracted_reqs of the event's SGLang retraction line"),
    Evidence(
        "sgl_kv_full",
        "Boolean",
        SOURCE,
        "step",
        "SGLang says the KV pool could not hold the next decode step (false: 'Testing retraction.', forced)",
    ),
    Evidence("sgl_ratio_before", "Float64", SOURCE, "step", "#new_token_ratio before the retraction (admission ratio)"),
    Evidence("sgl_ratio_after", "Float64", SOURCE, "step", "#new_token_ratio after it (the running batch's estimate)"),
    Evidence(
        "sgl_ratio_floor",
        "Float64",
        SOURCE,
        "bundle",
        "where the decaying ratio stops: min(0.7 c, 1) x 0.14 (0.1-0.2: min(0.2 c, 1)), c = schedule_conservativeness",
        status=True,
    ),
    Evidence("sgl_new_tokens_gained", "Int64", SOURCE, "step", "0.5.10+: KV tokens the retraction freed"),
    Evidence("sgl_mamba_num_gained", "Int64", SOURCE, "step", "0.5.10+ hybrid mamba pool: mamba slots it freed"),
    Evidence("sgl_wording", "String", SOURCE, "step", "the SGLang version family the line's wording belongs to"),
    Evidence("sgl_rank_lines", "Int64", SOURCE, "step", "lines of the same retraction other TP ranks printed"),
    Evidence(
        "sgl_hybrid_pool",
        "String",
        SOURCE,
        "bundle",
        "a hybrid KV pool (swa, mamba) shown by the batch lines or the retraction line",
        status=True,
    ),
]


def section(ev: pl.DataFrame, frames: dict[str, pl.DataFrame], config: pl.DataFrame | None) -> pl.DataFrame | None:
    ret = frames.get("sgl_retractions")
    if ret is None or ret.height == 0:
        return None
    cfg = in_force(config) if config is not None and config.height else {}
    c_row = cfg.get("schedule_conservativeness")
    try:
        c = float(c_row["value"]) if c_row else knobs.DEFAULT_CONSERVATIVENESS
    except (TypeError, ValueError):
        c, c_row = knobs.DEFAULT_CONSERVATIVENESS, None
    c_src = f"{c_row['source']}:{c_row['line']}" if c_row and c_row.get("source") else None
    c_status = c_row["status"] if c_row else "default"
    h_row = cfg.get("hybrid_pool")
    h_src = f"{h_row['source']}:{h_row['line']}" if h_row and h_row.get("source") else None
    r = ret.select(
        pl.col("stream").cast(pl.Int32),
        pl.col("seq").cast(pl.UInt32),
        "retracted",
        "kv_full",
        "ratio_before",
        "ratio_after",
        "new_tokens_gained",
        "mamba_num_gained",
        "wording",
        "rank_lines",
        src_expr().alias("_src"),
    )
    j = ev.select("_i", pl.col("stream").cast(pl.Int32), pl.col("seq").cast(pl.UInt32)).join(
        r, on=["stream", "seq"], how="inner"
    )
    if j.height == 0:
        return None
    floor = (
        pl.when(pl.col("wording") == "0.1-0.2")
        .then(pl.lit(knobs.ratio_floor(c, old=True)))
        .otherwise(pl.lit(knobs.ratio_floor(c)))
    )
    src = pl.col("_src")
    return j.select(
        "_i",
        *cited("sgl_retracted_reqs", pl.col("retracted"), src),
        *cited("sgl_kv_full", pl.col("kv_full"), src),
        *cited("sgl_ratio_before", pl.col("ratio_before"), src),
        *cited("sgl_ratio_after", pl.col("ratio_after"), src),
        *cited(
            "sgl_ratio_floor",
            floor.round(6),
            pl.lit(c_src, pl.String),
            pl.lit(c_status, pl.String),
        ),
        *cited("sgl_new_tokens_gained", pl.col("new_tokens_gained"), src),
        *cited("sgl_mamba_num_gained", pl.col("mamba_num_gained"), src),
        *cited("sgl_wording", pl.col("wording"), src),
        *cited("sgl_rank_lines", pl.col("rank_lines").cast(pl.Int64), src),
        *cited(
            "sgl_hybrid_pool",
            pl.lit(h_row["value"] if h_row else None, pl.String),
            pl.lit(h_src, pl.String),
            pl.lit(h_row["status"] if h_row else None, pl.String),
        ),
    )
