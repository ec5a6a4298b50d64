"""The library entry point: ``analyze(paths) -> Analysis``.

bundle -> sources -> one clock -> events -> pressure -> evidence -> verdicts -> Analysis:
the stages are in pipeline.py, the result type in result.py. The CLI only parses options,
calls :func:`analyze` and renders the result.
"""

from __future__ import annotations

from typing import IO

from . import pipeline
from .inputs.workspace import Workspace
from .model.result import Analysis, AnalyzeOptions
from .pipeline import (  # noqa: F401 - moved to pipeline/; importable from here as before
    SMALL_BATCH_BYTES,
    SMALL_LOG_BYTES,
    SMALL_LOG_MIN_FILES,
    _scan_small_files,
)
from .pipeline.profile import Profile

__all__ = ["Analysis", "AnalyzeOptions", "Profile", "analyze"]


def analyze(
    paths: list[str],
    options: AnalyzeOptions | None = None,
    *,
    workspace: Workspace | None = None,
    stdin: IO[bytes] | None = None,
) -> Analysis:
    """Analyse an incident bundle. Raises PreemptlogError subclasses on bad input.

    The caller owns ``workspace`` (temporary files); when omitted, one is
    created and closed before returning.
    """
    options = options or AnalyzeOptions()
    own = workspace is None
    ws = workspace or Workspace()
    try:
        return pipeline.run(paths, options, ws, stdin)
    finally:
        if own:
            ws.close()
