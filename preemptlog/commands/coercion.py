"""Option values without pydantic where the answer is certain (start-up time).

typer 0.29 converts every option value through a pydantic ``TypeAdapter``, built the first
time the parameter is processed -- also for an option left at its default. Importing pydantic
and building those adapters cost about 0.1 s of every ``preemptlog`` run, more than reading a
1 MB log. :func:`install` wraps typer's ``build_runtime_param`` so that a parameter whose
type is one of ours (str, int, float, bool, an Enum choice, or a list of those, without a
custom parser or clamping) first tries a plain conversion that can only succeed where
typer's own would give the same value: the value already of the exact type and in range, a
plain decimal number, an exact choice. Anything else -- a malformed number, an
out-of-range value, an unknown choice, a type we do not know -- goes to typer's normal
path, built on first need, so every error message and exit code is typer's own.

The patch is guarded: if typer's internals are not the ones this was written against,
:func:`install` does nothing and typer works as shipped; any unexpected exception in the
plain conversion also falls back to the normal path.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from enum import Enum
from typing import Any, get_args, get_origin

__all__ = ["install", "installed"]

_INT = re.compile(r"-?(?:0|[1-9][0-9]{0,17})")
_FLOAT = re.compile(r"-?(?:0|[1-9][0-9]{0,17})(?:\.[0-9]{1,17})?")


class _Slow(Exception):
    """The plain conversion is not certain: typer's normal path decides."""


Leaf = Callable[[Any, Any], Any]  # (value, click context) -> value, or raise _Slow

_state: dict[str, Any] = {"installed": False}


def installed() -> bool:
    """True when the plain conversions are in use (install() succeeded)."""
    return bool(_state["installed"])


def _in_range(value: float, lo: float | None, hi: float | None) -> bool:
    return (lo is None or value >= lo) and (hi is None or value <= hi)


def _leaf(annotation: Any, info: Any, choose: Callable[..., Any]) -> Leaf | None:
    """A plain conversion for one (non-list) annotation, or None when typer's path must do it.
    The order follows typer's build_leaf_adapter: parser, Enum, number, bool, str."""
    if info.parser is not None or getattr(info, "clamp", False):
        return None
    lo, hi = info.min, info.max
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        choices = tuple(annotation)
        case_sensitive = bool(info.case_sensitive)

        def choice(value: Any, ctx: Any) -> Any:
            if not isinstance(value, (str, annotation)):
                raise _Slow
            try:
                return choose(value, choices=choices, case_sensitive=case_sensitive, ctx=ctx)
            except ValueError:  # not one of them: typer's message
                raise _Slow from None

        return choice
    if annotation is int or annotation is float:
        pattern = _INT if annotation is int else _FLOAT

        def number(value: Any, ctx: Any) -> Any:
            if type(value) is annotation:
                parsed = value
            elif type(value) is str and pattern.fullmatch(value):
                parsed = annotation(value)
            else:
                raise _Slow
            if not _in_range(parsed, lo, hi):  # also NaN
                raise _Slow
            return parsed

        return number
    if lo is not None or hi is not None:
        return None
    if annotation is bool or annotation is str:

        def as_is(value: Any, ctx: Any) -> Any:
            if type(value) is not annotation:
                raise _Slow
            return value

        return as_is
    return None


def _plain(annotation: Any, info: Any, choose: Callable[..., Any]) -> Leaf | None:
    if get_origin(annotation) is list:
        args = get_args(annotation)
        if len(args) != 1 or get_origin(args[0]) is not None:
            return None
        one = _leaf(args[0], info, choose)
        if one is None:
            return None
        leaf = one

        def many(value: Any, ctx: Any) -> Any:
            items = value if isinstance(value, (list, tuple)) else [value]
            return [leaf(item, ctx) for item in items]

        return many
    if get_origin(annotation) is not None:
        return None
    return _leaf(annotation, info, choose)


def install() -> bool:
    """Use the plain conversions for the parameters they cover; False (and typer untouched)
    when typer is not the version this was written against."""
    if _state["installed"]:
        return True
    try:
        from dataclasses import dataclass, field, fields

        from typer import core as typer_core
        from typer._coercion import RuntimeParam, TypeDescriptor, build_runtime_param
        from typer._param_types import coerce_cli_choice

        if typer_core.build_runtime_param is not build_runtime_param:  # someone else's patch
            return False
        if [f.name for f in fields(RuntimeParam)] != ["parameter_info", "annotation"]:
            return False
        if not callable(getattr(RuntimeParam, "coerce", None)):
            return False
        if not {"annotation", "parameter_info", "file_annotation"} <= {f.name for f in fields(TypeDescriptor)}:
            return False
        original = build_runtime_param

        @dataclass(frozen=True)
        class PlainRuntimeParam(RuntimeParam):
            descriptor: Any = None
            plain: Any = None
            normal: list[Any] = field(default_factory=list)  # typer's own, built on first need

            def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
                try:
                    return self.plain(value, ctx)
                except _Slow:
                    pass
                except Exception:  # a surprise: typer's path decides
                    pass
                if not self.normal:
                    self.normal.append(original(self.descriptor))
                return self.normal[0]._coerce_value(value, param=param, ctx=ctx)

        def build(descriptor: Any) -> Any:
            try:
                plain = None
                if descriptor.file_annotation is None:
                    plain = _plain(descriptor.annotation, descriptor.parameter_info, coerce_cli_choice)
                if plain is not None:
                    return PlainRuntimeParam(
                        parameter_info=descriptor.parameter_info,
                        annotation=descriptor.annotation,
                        descriptor=descriptor,
                        plain=plain,
                    )
            except Exception:
                pass
            return original(descriptor)

        typer_core.build_runtime_param = build
    except Exception:  # pragma: no cover - another typer: leave it as shipped
        return False
    _state["installed"] = True
    return True
