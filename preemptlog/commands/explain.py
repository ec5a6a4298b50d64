"""Placeholder: ``preemptlog explain`` (being written)."""

import typer


def register(app: typer.Typer) -> None:  # noqa: ARG001
    return None
