"""The serving engines, peers behind one registry (vLLM, SGLang; a third engine is a third folder).

Each engine package (``engines/<name>/``) builds its :class:`Engine` record (registry.py: its
words, its names in every input, what it contributes to each stage) and registers it when it is
imported; it also registers its log source kinds and record families into ``sources.registry``
(so the single log pass and sniffing see them). The built-in engines are imported here, by name,
in this order (the order decides sniffing ties between kinds of equal score, and the first is the
default engine, :data:`DEFAULT`). Nothing outside ``engines/`` imports an engine's own modules:
every stage asks the registry (``engines.get(kind)``, ``engines.registered()``...).
"""

from __future__ import annotations

import importlib

from .common import FixPart, LogCapability
from .registry import (
    CONFIG_ENGINE,
    DEFAULT,
    OPTIONAL_FIELDS,
    Budget,
    Engine,
    EvidenceSection,
    LogEvents,
    LogFacts,
    ReplaySetting,
    ReplayVersions,
    SchedulerVersion,
    ServerStart,
    config_engines,
    config_of,
    default,
    engine_kind,
    engine_kinds,
    events_of,
    find,
    get,
    kind_expr,
    log_reader,
    metric_owners,
    names,
    noun,
    of_events,
    only_log,
    others,
    own_view,
    owns,
    possessive,
    register_engine,
    registered,
    replayed,
    shown,
    split_verdicts,
    stats_of,
    tie_order,
    unregister_engine,
)

BUILTIN_ENGINES: list[str] = ["vllm", "sglang"]

for _name in BUILTIN_ENGINES:
    importlib.import_module(f"{__name__}.{_name}")
del _name

__all__ = [
    "BUILTIN_ENGINES",
    "CONFIG_ENGINE",
    "DEFAULT",
    "OPTIONAL_FIELDS",
    "Budget",
    "Engine",
    "EvidenceSection",
    "FixPart",
    "LogCapability",
    "LogEvents",
    "LogFacts",
    "ReplaySetting",
    "ReplayVersions",
    "SchedulerVersion",
    "ServerStart",
    "config_engines",
    "config_of",
    "default",
    "engine_kind",
    "engine_kinds",
    "events_of",
    "find",
    "get",
    "kind_expr",
    "log_reader",
    "metric_owners",
    "names",
    "noun",
    "of_events",
    "only_log",
    "others",
    "own_view",
    "owns",
    "possessive",
    "register_engine",
    "registered",
    "replayed",
    "shown",
    "split_verdicts",
    "stats_of",
    "tie_order",
    "unregister_engine",
]
