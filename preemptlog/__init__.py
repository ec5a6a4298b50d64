"""preemptlog: forensics for vLLM PREEMPTED events.

Library use::

    from preemptlog import analyze
    result = analyze(["vllm.log"])
    result.events      # polars DataFrame, one row per preemption
    result.summary()   # dict

polars is imported lazily, so importing this package is cheap.
"""

from .model import VERSION as __version__

__all__ = ["AnalyzeOptions", "__version__", "analyze"]


def __getattr__(name):
    if name in ("analyze", "AnalyzeOptions", "Analysis"):
        from . import analysis
        from .render import summary  # Analysis.summary()

        del summary
        return getattr(analysis, name)
    raise AttributeError(name)
