"""What-if replays of an incident's workload (``preemptlog whatif``) and verified fixes.

- :mod:`.workload`: the workload and the configuration in force, from the bundle;
- :mod:`.engine_model`: a vLLM V1 scheduler model (pure Python);
- :mod:`.engine_vllm` / :mod:`preemptlog.capture.replay_driver`: the real vLLM EngineCore and Scheduler, driven by a
  fake executor in a subprocess of a vLLM venv;
- :mod:`.metrics`: the step-time model, calibration and figures;
- :mod:`.core`: the observed and the asked configurations side by side;
- :mod:`.verify`: :func:`verify_fixes`, the fixes of ``analyze``/``report`` replayed.
"""

from __future__ import annotations

from .core import WhatIf, expand, whatif
from .verify import verify_fixes
from .workload import NoWorkload, ReplayConfig, Workload, build_workload

__all__ = ["NoWorkload", "ReplayConfig", "WhatIf", "Workload", "build_workload", "expand", "verify_fixes", "whatif"]
