"""Findings beyond the field guide (issue 15): a pure function of a finished Analysis.

:func:`compute` reads the Analysis (events, stats, config, requests, the block-table frames, the
rule set) and never changes it. Modules, one per finding:

- recompute.py: tokens each preemption threw away, per minute and for the incident, as a share of
  the tokens processed in the same stats intervals; time each victim spent preempted;
- thrash.py: requests preempted more than once, the distribution per request beside a published
  reference point;
- stall.py: Running 0 or flat while Waiting > 0 and no generation, for >= 2 stats lines; the
  request that can never fit;
- mechanism.py: vLLM's own mechanism per event, from the ``[[mechanism]]`` rules (rules/mechanisms.py);
- capacity.py: the KV pool and the peak demand, and the fixes computed from them
  (rules/recommend.capacity_fixes).

Every value cites its ``file:line`` (or the interval / step); what the bundle cannot show is
``not_evaluable`` with what would show it. The JSON shape is :func:`as_dict` (docs/findings.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

if TYPE_CHECKING:
    from ..model.result import AnalysisView as Analysis

from ..model.findings import EVENT_COLUMNS, FINDINGS_VERSION, Findings, as_dict, headline_part
from . import capacity, mechanism, recompute, stall, thrash

__all__ = ["EVENT_COLUMNS", "FINDINGS_VERSION", "Findings", "as_dict", "compute", "headline_part"]


def compute(analysis: Analysis) -> Findings:

    v = recompute.victims(analysis)
    pe = recompute.per_event(v, analysis)
    rc, pm = recompute.totals(analysis, pe)
    th, table = thrash.compute(analysis, pe)
    sl = stall.compute(analysis)
    mech_ev = mechanism.evidence(analysis, v)
    mech = mechanism.evaluate(analysis, mech_ev)
    if mech is not None:
        pe = mech.join(pe, on="event_id", how="left")
    else:
        pe = pe.with_columns(
            mechanism=pl.lit(None, pl.String),
            mechanism_rule=pl.lit(None, pl.String),
            mechanism_confidence=pl.lit(None, pl.String),
            mechanism_evidence=pl.lit(None),
            mechanism_missing=pl.lit(None, pl.String),
        )
    pe = pe.select(["event_id", *EVENT_COLUMNS])
    cap = capacity.compute(analysis, v)
    return Findings(
        per_event=pe,
        recompute=rc,
        recompute_per_minute=pm,
        thrash=th,
        thrash_table=table,
        stall=sl,
        mechanisms=mechanism.counts(mech),
        capacity=cap,
    )
