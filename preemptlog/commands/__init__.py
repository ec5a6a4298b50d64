"""Subcommands. Each module defines ``register(app)``; modules import only typer
(and small preemptlog modules) at import time so ``preemptlog --help`` stays fast."""

from __future__ import annotations

import importlib

import typer

# Order is the order in --help.
COMMANDS = ["analyze", "explain", "report", "whatif", "capture", "simulate", "rules", "eval"]


def register_all(app: typer.Typer) -> None:
    for name in COMMANDS:
        module = importlib.import_module(f"{__name__}.{name}")
        module.register(app)
