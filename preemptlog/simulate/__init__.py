"""The labelled incident simulator behind ``preemptlog simulate``.

A small paged-KV scheduler model (model.py) runs a named scenario
(scenarios.py) and writes a complete incident bundle (bundle.py, writers.py,
dmon.py): a vLLM log in a chosen family (families.py), an executor log,
block-table records, ``nvidia-smi dmon`` output, and the ground truth of
every preemption (``truth.jsonl``) with every parameter (``scenario.json``).
``large.py`` streams multi-GB logs for benchmarks without the model.

This package imports nothing from the analysis side (rules, joiner,
analysis): the truth comes from the model's own state.
"""

from __future__ import annotations

from . import bundle

__all__ = ["Options", "simulate"]


def __getattr__(name):
    if name in ("simulate", "Options"):
        return getattr(bundle, name)
    raise AttributeError(name)
