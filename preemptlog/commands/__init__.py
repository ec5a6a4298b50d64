"""Subcommands. Each module defines ``register(app)``; modules import only typer
(and small preemptlog modules) at import time so ``preemptlog --help`` stays fast."""

from __future__ import annotations

import importlib
from collections.abc import Iterable

import typer

# Order is the order in --help.
COMMANDS = [
    "analyze",
    "explain",
    "report",
    "whatif",
    "capture",
    "watch",
    "simulate",
    "rules",
    "eval",
    "fleet",
    "export",
]


def register_all(app: typer.Typer, names: Iterable[str] = COMMANDS) -> None:
    """Register these commands (all by default) on the app, in the given order."""
    for name in names:
        module = importlib.import_module(f"{__name__}.{name}")
        module.register(app)
