"""What the engines share, and the registry's records read: no engine's knowledge is in here.

- :func:`arg_pattern`: a ``key=value`` / ``'key': value`` reader for an engine's argument dumps
  (vLLM's ``non-default args``, ``Namespace(...)``; SGLang's ``server_args=``);
- :class:`LogCapability`: how far an engine's log can count its preemptions (events/pressure.py
  asks the engine whose log the bundle holds);
- the fix helpers every engine's fixes use (:func:`ranked`, :func:`verdict_key_counts`,
  :func:`is_change`, the verdict keys :data:`G1_KEYS`) and :class:`FixPart`, what an engine's fixes
  give the incident's one list (fixes/plan.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

_VAL = r"""(?:'[^']*'|"[^"]*"|[^'",)}\s][^,)}\s]*)"""


def arg_pattern(key: str) -> str:
    """A key in a dict repr ('key': v) or a Namespace / config repr (key=v).

    The value must be closed (its quote, then a delimiter; the group keeps the
    delimiter, which vllm/config.py ``parse`` strips): a number or a quoted text at the very
    end of the text may have been cut (a wrapped or truncated line) and is not
    reported as seen. Only a whole True / False / None may end the text.
    """
    return rf"(?:'{key}':\s*|\b{key}=)((?:True|False|None)$|{_VAL}[,)}}\s])"


@dataclass
class LogCapability:
    """How far the vLLM log itself can count preemptions."""

    has_log: bool
    family: str | None = None  # "V0" | "V1" | None (another engine's log: its display name)
    version: str | None = None
    version_from: str | None = None
    counts: str = "unknown"  # exact | sampled | none | unknown
    reason: str = ""
    remedy: str = ""
    prometheus_metric: bool = True  # does this version expose vllm:num_preemptions_total?
    details: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "family": self.family,
            "version": self.version,
            "version_from": self.version_from,
            "counts": self.counts,
            "reason": self.reason,
            "remedy": self.remedy,
        }


# ------------------------------------------------------------------------------------------ fixes

# The G1 verdict keys (``gate/sub_kind``) a KV-space fix addresses ("capacity": fewer free blocks than
# needed, however it was read; a G1 verdict without a sub-kind is one too).
G1_KEYS = ["G1-kv-space/fragmentation", "G1-kv-space/capacity"]
# A reset of the prefix cache (G4, sub-kind cache-reset) is its own key: the guide's prefix-conflict fixes
# (keyed "G4-prefix-conflict") do not address a call that preempts every running request.
CACHE_RESET_KEY = "G4-prefix-conflict/cache-reset"


def verdict_key(gate: pl.Expr | None = None, sub_kind: pl.Expr | None = None) -> pl.Expr:
    """An event's verdict key: ``gate/sub_kind`` for G1 (no sub-kind: capacity) and for a cache reset,
    else the gate."""
    g = pl.col("gate") if gate is None else gate
    sk = pl.col("sub_kind") if sub_kind is None else sub_kind
    return (
        pl.when(g == "G1-kv-space")
        .then(pl.concat_str([g, pl.lit("/"), sk.fill_null("capacity")]))
        .when(sk == "cache-reset")
        .then(pl.concat_str([g, pl.lit("/"), sk]))
        .otherwise(g)
    )


@dataclass(frozen=True)
class FixPart:
    """One engine's part of the incident's fixes: its changes (ranked, not yet replayed), the fixes
    that address its events but are not changes (they become ``to_know_more``) and the dropped ones."""

    changes: list[dict[str, Any]]
    know: list[dict[str, Any]]
    dropped: list[dict[str, str]]


def is_change(x: dict[str, Any]) -> bool:
    """A change to make: a value computed for a setting (not "add evidence", not "cannot compute")."""
    return x.get("suggested") is not None and x.get("id") != "add_evidence" and x.get("option") != "bundle"


def ranked(fixes: list[dict[str, Any]], counts: dict[str, int], tie_order: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Rank fixes by the events they address (counts per verdict key); on ties, computable ones
    first, then ``tie_order`` (the engine's). Fixes that address no event of this incident are left out."""
    for x in fixes:
        x["events_addressed"] = sum(counts.get(k, 0) for k in x["addresses"])
    keep = [x for x in fixes if x["events_addressed"] > 0]
    keep.sort(
        key=lambda x: (
            -x["events_addressed"],
            x["suggested"] is None,
            tie_order.index(x["id"]) if x["id"] in tie_order else len(tie_order),
        )
    )
    for i, x in enumerate(keep, 1):
        x["rank"] = i
    return keep


def verdict_key_counts(verdicts: pl.DataFrame | None) -> dict[str, int]:
    """Events per verdict key (``gate`` or ``gate/sub_kind`` for G1) of a verdict frame."""
    if verdicts is None or verdicts.height == 0:
        return {}
    key = verdict_key().fill_null("undetermined")
    return {str(k): n for k, n in verdicts.select(key.alias("k")).group_by("k").len().iter_rows()}
