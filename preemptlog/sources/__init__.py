"""Source kinds: how a file is recognised by its content, and which parser reads it.

Each source module registers a :class:`SourceKind` with a ``sniff`` function
that looks at the first 64 KiB of decompressed text and returns a score
(0 = not this kind). The highest score wins; ties go to the kind registered
first. ``--kind FILE=KIND`` overrides sniffing.

Two-phase loading (so that every clock can help every other):

1. ``parse(files)`` reads all files of the kind (grouped in streams, oldest
   first) without knowing anything about the rest of the bundle, and returns
   a :class:`Parsed` whose ``anchors()`` are the full timestamps (with a
   year) it saw: they let year-less vLLM timestamps find their year.
2. After the vLLM logs are on the clock, ``resolve(ctx)`` turns the parsed
   rows into frames on the common clock. ``ctx.reference`` is the time span
   of the vLLM logs, for sources whose timestamps have no date (dmon ``-o T``).

*Record families* are line shapes found inside vLLM log files (debug hooks,
text block_table lines): they add literal markers to the single pass over the
log (``vllm_log.EXTRA_MARKERS``) and turn their records into frames.
"""

from __future__ import annotations

import importlib

from . import registry
from .registry import (
    LOG_KINDS,
    CrossFile,
    DatesEngines,
    EngineStarts,
    Parsed,
    RecordFamily,
    Sample,
    SourceKind,
    SourceOutput,
    TimeContext,
    families,
    kinds,
    register,
    register_family,
    register_samples,
    samples,
    sniff,
)

# The built-in source modules, imported once, here; each registers its kinds or families.
# Order matters for sniffing ties (the kind registered first wins), so they are imported
# in this order by name (an import statement would be re-sorted by the linter).
BUILTIN_MODULES: list[str] = [
    "vllm_log",
    "blocktable",
    "kvevents",
    "dmon",
    "prometheus",
    "capture",
    "gpuinfo",
]
# The source kinds whose files the single log pass reads (sources/vllm_log.py ``scan``): every
# engine's log kind registers with ``log_pass`` (their line families are told apart per line, not
# per file); LOG_KINDS (registry.LOG_KINDS) lists them.
for _name in BUILTIN_MODULES:
    importlib.import_module(f"{__name__}.{_name}")
del _name

__all__ = [
    "BUILTIN_MODULES",
    "LOG_KINDS",
    "CrossFile",
    "DatesEngines",
    "EngineStarts",
    "Parsed",
    "RecordFamily",
    "Sample",
    "SourceKind",
    "SourceOutput",
    "TimeContext",
    "families",
    "kinds",
    "register",
    "register_family",
    "register_samples",
    "registry",
    "samples",
    "sniff",
]
