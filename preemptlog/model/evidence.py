"""Evidence declarations: every evidence column is declared once, by the section that fills it.

Here, below the engines, so that an engine can declare the evidence it adds to its events
(engines.EvidenceSection); the joiner (joiner/declare.py) reads the same names.

A declaration names the column, its dtype, the source kind it comes from, what it
belongs to (the scheduler step, the engine, the request, the event's window, the
bundle) and one line of doc. From the declarations come the evidence schema
(``<name>``, ``<name>_src``, and ``<name>_status`` for configuration values), the
names rules may use, and the evidence table of docs/sources.md
(:func:`docs_table`; tests keep it current).

:func:`cited` is the one helper that makes a value's columns: the value, its
``_src`` (null when the value is null) and, for configuration, its ``_status``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import polars as pl

DTYPES = ("String", "Int64", "Float64", "Boolean")
SCOPES = ("step", "engine", "request", "window", "bundle")
DOC_BEGIN = "<!-- evidence: generated from the joiner's declarations (preemptlog/joiner) -->"
DOC_END = "<!-- /evidence -->"


@dataclass(frozen=True)
class Evidence:
    name: str
    dtype: str  # one of DTYPES
    source: str  # the source kind the value comes from (as --kind / docs/sources.md name them)
    scope: str  # what it belongs to: one of SCOPES
    doc: str  # one line
    status: bool = False  # configuration: also a ``_status`` column (seen / derived / default)

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES or self.scope not in SCOPES or not self.doc or "\n" in self.doc:
            raise ValueError(f"bad evidence declaration {self.name!r}")


def cited(name: str, value: pl.Expr, src: pl.Expr, status: pl.Expr | None = None) -> list[pl.Expr]:
    """The value column, its ``_src`` (only where there is a value) and optionally ``_status``."""
    out = [value.alias(name), pl.when(value.is_not_null()).then(src).alias(f"{name}_src")]
    if status is not None:
        out.append(status.alias(f"{name}_status"))
    return out


def schema(declared: list[Evidence]) -> dict[str, str]:
    """``event_id`` then every value with its ``_src`` (and ``_status``), in declaration order."""
    out = {"event_id": "String"}
    seen: set[str] = set()
    for e in declared:
        if e.name in seen:
            raise ValueError(f"evidence {e.name!r} is declared twice")
        seen.add(e.name)
        out[e.name] = e.dtype
        out[f"{e.name}_src"] = "String"
        if e.status:
            out[f"{e.name}_status"] = "String"
    return out


def docs_table(declared: list[Evidence]) -> str:
    """The evidence table of docs/sources.md, between its markers."""
    rows = [
        DOC_BEGIN,
        "| column | type | from | belongs to | meaning |",
        "|---|---|---|---|---|",
    ]
    for e in declared:
        extra = " (+ `_status`)" if e.status else ""
        rows.append(f"| `{e.name}`{extra} | {e.dtype} | {e.source} | {e.scope} | {e.doc} |")
    rows.append(DOC_END)
    return "\n".join(rows)


def write_docs(declared: list[Evidence], path: str | Path) -> bool:
    """Rewrite the table between the markers of ``path``; True when the file changed."""
    p = Path(path)
    text = p.read_text()
    head, _, rest = text.partition(DOC_BEGIN)
    _, _, tail = rest.partition(DOC_END)
    new = head + docs_table(declared) + tail
    if new != text:
        p.write_text(new)
        return True
    return False


# A usage or hit-rate percentage (KV cache usage, prefix cache hit rate: a fraction of blocks) is
# within [0, 100]; up to PERCENT_MAX for the rounding of "%.1f". Any other value (inf, nan, 250 %,
# a gauge of 2.5) is no reading: missing, never 0 and never a value (engines' log stats lines and
# the /metrics gauges read it alike).
PERCENT_MAX = 100.05
