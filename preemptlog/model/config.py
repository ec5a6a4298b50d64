"""Reading the configuration frame (``CONFIG_SCHEMA``): the value in force per key, with provenance.

Every engine's configuration rows land in the one frame (seen, derived, default); every stage reads
it through these (moved from vllm/config.py and findings/common.py: nothing here is one engine's).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Protocol

import polars as pl


class HasConfig(Protocol):
    @property
    def config(self) -> pl.DataFrame: ...


def in_force(config: pl.DataFrame) -> dict[str, dict[str, Any]]:
    """Last value per key (seen > derived > default), with its provenance."""
    out: dict[str, dict[str, Any]] = {}
    rank = {"default": 0, "derived": 1, "seen": 2}
    for row in config.iter_rows(named=True):
        cur = out.get(row["key"])
        if cur is None or rank[row["status"]] >= rank[cur["status"]]:
            out[row["key"]] = row
    return out


# A version as an engine writes it: digits and dots, then PEP 440's pre-release, post and dev parts
# and a local part (``0.6.3``, ``0.6.3.post1``, ``0.11.1rc2.dev57+g1234abc``, ``0.8.5+cu121``). A
# version read from a line is the longest prefix of this shape (``0.6.3</title>...`` is 0.6.3); a
# text with none names no version. No look-around: the polars regexes embed it.
VERSION_SHAPE = r"\d+(?:\.\d+)*(?:(?:a|b|rc)\d+)?(?:\.?post\d+)?(?:\.?dev\d+)?(?:\+[A-Za-z0-9]+(?:\.[A-Za-z0-9]+)*)?"


def version_tuple(text: str) -> tuple[int, ...] | None:
    """``0.11.1`` / ``v0.8`` -> (0, 11, 1) / (0, 8, 0); None when the text is not a version."""
    m = re.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not m:
        return None
    return tuple(int(g) if g else 0 for g in m.groups())


def version_text(v: tuple[int, ...] | None) -> str:
    """(0, 34, 0) -> ``0.34.0``; the inverse of :func:`version_tuple` ("" for none)."""
    return ".".join(str(x) for x in v or ())


@dataclass(frozen=True)
class Cfg:
    """A configuration value stated in (or derived from) the bundle; preemptlog's defaults are not evidence."""

    key: str
    value: float
    status: str
    src: str | None

    def cite(self) -> str:
        return f"{self.key}={_num(self.value)} ({self.status}, {self.src or 'no line'})"


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:g}"


def cfg_number(a: HasConfig, key: str) -> Cfg | None:
    """The value in force when it is seen or derived (a default is an assumption: None)."""
    row = in_force(a.config).get(key)
    if row is None or row.get("status") == "default":
        return None
    try:
        val = float(str(row["value"]).replace(",", "").rstrip("x"))
    except (TypeError, ValueError):
        return None
    src = f"{row['source']}:{row['line']}" if row.get("source") else None
    return Cfg(key, val, str(row["status"]), src)


def cfg_text(a: HasConfig, key: str) -> tuple[str, str | None, str] | None:
    """(value, file:line, status) of a configuration key, defaults included (callers decide)."""
    row = in_force(a.config).get(key)
    if row is None:
        return None
    src = f"{row['source']}:{row['line']}" if row.get("source") else None
    return str(row["value"]), src, str(row["status"])
