"""The evidence schema, from the sections' declarations (moved out of joiner/__init__.py so
that joiner/core.py reads it without importing its own package)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import engines
from ..model.frames import polars_schema as _polars_schema
from . import code, config, dmon, kv, pool, prom, request, reset, sched, stats
from .declare import Evidence, schema

if TYPE_CHECKING:
    from ..model.frames import Schema

# Declaration order is the output column order.
DECLARED: list[Evidence] = (
    sched.EVIDENCE
    + request.EVIDENCE
    + pool.EVIDENCE
    + kv.EVIDENCE
    + reset.EVIDENCE
    + stats.EVIDENCE
    + prom.EVIDENCE
    + dmon.EVIDENCE
    + config.EVIDENCE
    + code.EVIDENCE
    # every engine's own evidence (engines.EvidenceSection), in registration order
    + [e for eng in engines.registered() if eng.evidence is not None for e in eng.evidence.declared]
)
EVIDENCE_SCHEMA: dict[str, str] = schema(DECLARED)
VALUE_COLUMNS: list[str] = [e.name for e in DECLARED]


def polars_schema() -> Schema:

    return _polars_schema(EVIDENCE_SCHEMA)


def evidence_words(names: list[str]) -> str:
    """Evidence names in words for prose (their one-line docs, ``; `` between): a person reads
    "waiting requests at the decision", not ``bt_preempt_waiting``. A name not declared (an event
    column) stays as it is."""
    docs = {e.name: e.doc for e in DECLARED}
    out: list[str] = []
    for n in names:
        w = docs.get(n.removesuffix("_src").removesuffix("_status"), n)
        if w not in out:
            out.append(w)
    return "; ".join(out)
