"""vLLM: its log record families (debug hooks, engine death), stats lines, configuration and knobs,
requests, preemption events, code facts and fixes."""

from . import enginedeath, hooks

__all__ = ["enginedeath", "hooks"]
