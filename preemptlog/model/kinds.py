"""The serving engines as the frames know them: each engine kind's name and words, and the default.

The registry of engines is ``preemptlog.engines`` (one :class:`~preemptlog.engines.Engine` record per
engine, registered by its package). The layers below it (model, sources) cannot import it, so
``engines.register_engine`` also declares each engine here: the name an event's ``engine_kind``
holds, its display name and words, and which engine a source means when it does not say (the
default: :func:`default`). Nothing here names an engine; everything is filled by the registry.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineKind:
    """An engine as the containers name it (the registry's :class:`Engine` holds the rest)."""

    name: str  # the ``engine_kind`` value
    display: str  # how prose names it
    noun: str  # what it calls a preemption (singular; prose adds the plural "s")
    verb: str  # ... and the past participle ("a request <verb> 5+ times")


_KINDS: dict[str, EngineKind] = {}
_DEFAULT: list[str] = []  # [name] of the default engine, once declared


def declare(kind: EngineKind, *, default: bool = False) -> None:
    """Declare an engine kind (``engines.register_engine`` does; ``default``: the engine a source
    means when it does not say)."""
    _KINDS[kind.name] = kind
    if default:
        _DEFAULT[:] = [kind.name]


def undeclare(name: str) -> None:
    _KINDS.pop(name, None)
    if [name] == _DEFAULT:
        _DEFAULT.clear()


def declared() -> tuple[EngineKind, ...]:
    """Every declared engine kind, in registration order."""
    return tuple(_KINDS.values())


def default() -> str:
    """The name of the default engine (``engine_kind`` where a source does not say)."""
    if not _DEFAULT:
        raise LookupError("no default engine is registered (import preemptlog.engines)")
    return _DEFAULT[0]


def kind(name: str | None) -> EngineKind:
    """The declared kind of ``name`` (None, empty or unknown: the default engine's)."""
    got = _KINDS.get(name) if name else None
    return got if got is not None else _KINDS[default()]
