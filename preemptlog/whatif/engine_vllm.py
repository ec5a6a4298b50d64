"""The ``vllm`` engine: the real vLLM scheduler in a subprocess of a vLLM venv (capture/replay_driver.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from pathlib import Path

from ..errors import PreemptlogError, UsageError
from .engine_model import Trace
from .metrics import StepTime
from .workload import ReplayConfig, Workload

DRIVER = (
    Path(__file__).resolve().parent.parent / "capture" / "replay_driver.py"
)  # runs in the vLLM venv: capture/ imports no polars


# The venv of a version: PREEMPTLOG_VLLM_<major><minor:02>_PYTHON first (PREEMPTLOG_VLLM_034_PYTHON:
# ci/vllm-034-venv), then PREEMPTLOG_VLLM_PYTHON (ci/vllm-venv: 0.32, the reference version); a replay
# on another version's scheduler says so (the driver reports the version that ran).
FALLBACK_ENV = ("PREEMPTLOG_VLLM_PYTHON",)


def version_env(version: str | None) -> str | None:
    """``PREEMPTLOG_VLLM_034_PYTHON`` for 0.34.x (None without a version)."""
    m = re.match(r"v?(\d+)\.(\d+)", version or "")
    return f"PREEMPTLOG_VLLM_{int(m.group(1))}{int(m.group(2)):02d}_PYTHON" if m else None


def python_for(python: str | None, version: str | None) -> str | None:
    """The python that replays ``version``'s scheduler: ``--vllm-python``, else the version's own
    venv (``version_env``), else the reference venvs (``FALLBACK_ENV``); None: none is set."""
    if python:
        return python
    names = [n for n in (version_env(version), *FALLBACK_ENV) if n]
    return next((os.environ[n] for n in names if os.environ.get(n)), None)


def check_python(python: str | None, version: str | None = None) -> str:
    py = python_for(python, version)
    if not py:
        own = version_env(version)
        raise UsageError(
            "--engine vllm needs a python with vLLM",
            hint=f"give --vllm-python PYTHON or set {own + ' or ' if own else ''}PREEMPTLOG_VLLM_PYTHON "
            "(ci/vllm-venv builds 0.32, ci/vllm-034-venv 0.34)",
        )
    if not Path(py).exists():
        raise UsageError(f"--vllm-python {py}: no such file")
    return py


def replay_vllm(
    workload: Workload,
    cfg: ReplayConfig,
    st: StepTime,
    *,
    arrivals: str,
    python: str | None,
    timeout: float = 1800.0,
    hash_block_size: int | None = None,
) -> Trace:
    return replay_vllm_many(
        workload, [cfg], st, arrivals=arrivals, python=python, timeout=timeout, hash_block_size=hash_block_size
    )[0]


def replay_vllm_many(
    workload: Workload,
    cfgs: list[ReplayConfig],
    st: StepTime,
    *,
    arrivals: str,
    python: str | None,
    timeout: float = 1800.0,
    hash_block_size: int | None = None,
) -> list[Trace]:
    """Every configuration in one vLLM process per python (vLLM is imported once: ~10 s saved per
    config): each configuration runs on the venv of its scheduler version (``python_for``).
    ``hash_block_size``: the block size the requests' block hashes were computed with (the
    observed one): the driver gives requests sharing a hash the same tokens."""
    groups: dict[str, list[int]] = {}
    for i, c in enumerate(cfgs):
        groups.setdefault(check_python(python, c.vllm_version), []).append(i)
    out: list[Trace | None] = [None] * len(cfgs)
    for py, idx in groups.items():
        traces = _run_driver(
            workload,
            [cfgs[i] for i in idx],
            st,
            arrivals=arrivals,
            py=py,
            timeout=timeout,
            hash_block_size=hash_block_size,
        )
        for i, tr in zip(idx, traces, strict=True):
            out[i] = tr
    return [tr for tr in out if tr is not None]


def _run_driver(
    workload: Workload,
    cfgs: list[ReplayConfig],
    st: StepTime,
    *,
    arrivals: str,
    py: str,
    timeout: float,
    hash_block_size: int | None,
) -> list[Trace]:
    spec = {
        "configs": [c.as_dict() for c in cfgs],
        "requests": [
            {
                "id": r.request_id,
                "index": _index(r.request_id, i),
                "prompt": r.prompt_tokens,
                "output": r.output_tokens,
                "priority": r.priority,
                "arrival_step": r.arrival_step,
                "arrival_s": r.arrival_s,
                "block_hashes": list(r.block_hashes) if r.block_hashes else None,
            }
            for i, r in enumerate(workload.requests)
        ],
        "hash_block_size": hash_block_size,
        "arrivals": arrivals,
        "step_time": [st.base_s, st.per_token_s],
    }
    with tempfile.TemporaryDirectory(prefix="preemptlog-whatif-") as d:
        sp, op = Path(d) / "spec.json", Path(d) / "trace.json"
        sp.write_text(json.dumps(spec))
        env = {k: v for k, v in os.environ.items() if not k.startswith("PREEMPTLOG_")}
        env.update(
            {
                "VLLM_PLUGINS": "",
                "OMP_NUM_THREADS": env.get("OMP_NUM_THREADS", "1"),
                "NO_COLOR": "1",
                "VLLM_LOGGING_LEVEL": "WARNING",
            }
        )
        env.pop("PYTHONPATH", None)
        try:
            p = subprocess.run(
                [py, str(DRIVER), str(sp), str(op)],
                check=False,
                capture_output=True,
                text=True,
                env=env,
                timeout=timeout,
                cwd=d,
            )
        except subprocess.TimeoutExpired:
            raise PreemptlogError(f"the vLLM replay took more than {timeout:g} s") from None
        if p.returncode != 0 or not op.exists():
            raise UsageError(
                f"the vLLM replay failed (exit {p.returncode}): {_tail(p.stderr)}", hint=_hint(p.stderr, py)
            )
        out = json.loads(op.read_text())
    return [_trace(raw) for raw in out["traces"]]


def _tail(stderr: str | None) -> str:
    return " | ".join((stderr or "").strip().splitlines()[-3:])[-400:]


def _hint(stderr: str | None, py: str) -> str:
    """What the failure says about the python given: no vLLM at all, or vLLM's own error."""
    text = stderr or ""
    if "No module named 'vllm'" in text or 'No module named "vllm"' in text:
        return f"{py} has no vLLM: build a venv with ci/vllm-venv (vLLM 0.32)"
    if "No module named" in text:
        return f"{py} has vLLM without a module it imports (the venv of ci/vllm-venv has them all)"
    return f"the error above is vLLM's own, from the replay in {py} (vLLM 0.32; ci/vllm-venv builds one)"


def _trace(raw: dict) -> Trace:  # type: ignore[type-arg]
    tr = Trace(engine="vllm")
    if "refused" in raw:
        tr.refused = str(raw["refused"])
        return tr
    tr.step_tokens, tr.running, tr.waiting, tr.preempted = (
        raw["step_tokens"],
        raw["running"],
        raw["waiting"],
        raw["preempted"],
    )
    tr.arrival_step, tr.first_token_step, tr.finish_step = (
        raw["arrival_step"],
        raw["first_token_step"],
        raw["finish_step"],
    )
    tr.recomputed_tokens, tr.output_tokens = int(raw["recomputed_tokens"]), int(raw["output_tokens"])
    tr.idle_before = {int(k): float(v) for k, v in raw["idle_before"].items()}
    tr.unfinished, tr.wall_s = int(raw["unfinished"]), float(raw["wall_s"])
    tr.scheduler_version = raw.get("vllm_version")
    return tr


def _index(rid: str, i: int) -> int:
    """The token pattern index: ``req-N`` ids (the capture tests' runs) keep their N, so a replay
    of such a run sends the very same token ids; other ids use their position."""
    tail = rid.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else i
