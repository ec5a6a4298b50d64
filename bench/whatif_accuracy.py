"""Accuracy of the whatif model engine against the real vLLM 0.32 scheduler (fake executor).

For each workload and configuration, the same requests go through
``preemptlog.whatif.engine_model.replay`` and through the real EngineCore + Scheduler
(``preemptlog.capture.replay_driver``, one vLLM process per workload), with step arrivals; the
table compares their preemption counts (and peak running). Prints a Markdown table (the one in
docs/whatif.md) and a summary line.

    PREEMPTLOG_VLLM_PYTHON=/root/.cache/preemptlog/venv-vllm-0.32.0/bin/python \\
        python bench/whatif_accuracy.py [--quick] [--write docs/whatif.md]

About 10-20 s per workload (importing vLLM) plus the runs, on a 2-core machine.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from preemptlog.whatif.core import refusal
from preemptlog.whatif.engine_model import StepClock, replay
from preemptlog.whatif.engine_vllm import replay_vllm_many
from preemptlog.whatif.metrics import StepTime
from preemptlog.whatif.workload import ReplayConfig, Workload, WRequest


def pressure(n: int = 24, priority: bool = False) -> Workload:
    """The capture tests' workload: one arrival every 2 steps, prompts 100-136, outputs 60-80."""
    reqs = [
        WRequest(
            f"req-{i}",
            0.0,
            100 + (i % 5) * 9,
            60 + (i % 3) * 10,
            60 + (i % 3) * 10,
            priority=(i % 3) if priority else 0,
            arrival_step=2 * i,
        )
        for i in range(n)
    ]
    return Workload(reqs, "records", "bench")


def mixed(n: int = 160, seed: int = 1) -> Workload:
    """Lognormal prompts and outputs, bursty arrivals (several per step at times)."""
    rng = random.Random(seed)
    reqs, step = [], 0
    for i in range(n):
        step += rng.choice((0, 0, 1, 2, 3, 5))
        p = max(8, min(600, int(rng.lognormvariate(5.0, 0.7))))
        o = max(4, min(300, int(rng.lognormvariate(4.2, 0.7))))
        reqs.append(WRequest(f"req-{i}", 0.0, p, o, o, priority=rng.randint(0, 2), arrival_step=step))
    return Workload(reqs, "records", "bench")


BASE = ReplayConfig(num_gpu_blocks=64, block_size=16, max_num_seqs=16, max_num_batched_tokens=512, max_model_len=1008)
CONFIGS = [
    ("A: 64 blocks", {}),
    # a smaller pool with the max_model_len vLLM accepts on it ((blocks - 1) x block_size): with
    # 1008 it would not start (whatif.core.refusal)
    ("48 blocks, max_model_len 752", {"num_gpu_blocks": 48, "max_model_len": 752}),
    ("96 blocks", {"num_gpu_blocks": 96}),
    ("max_num_seqs 4", {"max_num_seqs": 4}),
    ("max_num_seqs 8", {"max_num_seqs": 8}),
    ("priority", {"scheduling_policy": "priority"}),
    ("budget 256", {"max_num_batched_tokens": 256}),
    ("budget 2048", {"max_num_batched_tokens": 2048}),
    ("block_size 32, 32 blocks, max_model_len 992", {"block_size": 32, "num_gpu_blocks": 32, "max_model_len": 992}),
    ("no chunked prefill, budget 1024", {"enable_chunked_prefill": False, "max_num_batched_tokens": 1024}),
    ("watermark 0.05", {"watermark": 0.05}),
    ("long prefill threshold 64", {"long_prefill_token_threshold": 64}),
    ("reserve_full_isl off", {"reserve_full_isl": False}),
    ("prefix caching on (no shared prompts)", {"enable_prefix_caching": True}),
]
MIXED_BASE = replace(BASE, num_gpu_blocks=160, max_num_seqs=32, max_num_batched_tokens=1024, max_model_len=2048)
MIXED = [
    ("160 blocks", {}),
    ("120 blocks, max_model_len 1904", {"num_gpu_blocks": 120, "max_model_len": 1904}),
    ("240 blocks", {"num_gpu_blocks": 240}),
    ("max_num_seqs 8", {"max_num_seqs": 8}),
    ("priority", {"scheduling_policy": "priority"}),
    ("budget 512", {"max_num_batched_tokens": 512}),
    ("budget 512, reserve_full_isl off", {"max_num_batched_tokens": 512, "reserve_full_isl": False}),
    ("watermark 0.05", {"watermark": 0.05}),
    ("prefix caching on (no shared prompts)", {"enable_prefix_caching": True}),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="only the pressure workload")
    ap.add_argument(
        "--write", metavar="MD", help="replace the table between the whatif-accuracy markers of MD (docs/whatif.md)"
    )
    args = ap.parse_args()
    py = os.environ.get("PREEMPTLOG_VLLM_PYTHON")
    if not py:
        sys.exit("set PREEMPTLOG_VLLM_PYTHON to a vLLM 0.32 venv's python (ci/vllm-venv)")
    st = StepTime(0.03, 0.0, "bench", True)
    suites = [
        ("pressure (24 req)", pressure(), BASE, CONFIGS),
        ("pressure, priorities (24 req)", pressure(priority=True), BASE, CONFIGS[:1] + CONFIGS[5:6]),
    ]
    if not args.quick:
        suites.append(("mixed (160 req)", mixed(), MIXED_BASE, MIXED))
    head = "| workload | configuration | vLLM preemptions | model preemptions | error | vLLM peak running | model peak running |"
    lines = [head, "|---|---|---:|---:|---:|---:|---:|"]
    errs: list[float] = []
    exact = 0
    for wname, wl, base, cfgs in suites:
        confs = [replace(base, **c) for _, c in cfgs]
        real = replay_vllm_many(wl, confs, st, arrivals="step", python=py)
        for (cname, _), cfg, rt in zip(cfgs, confs, real, strict=True):
            if rt.refused or refusal(wl, cfg):
                lines.append(f"| {wname} | {cname} | refused | refused | | | |")
                continue
            mt = replay(wl, cfg, StepClock(0.03, 0.0), arrivals="step")
            a, b = rt.preemptions, mt.preemptions
            err = (b - a) / a if a else (0.0 if b == 0 else 1.0)
            errs.append(abs(err))
            exact += a == b
            lines.append(f"| {wname} | {cname} | {a} | {b} | {err:+.0%} | {max(rt.running)} | {max(mt.running)} |")
    n = len(errs)
    within = sum(e <= 0.15 for e in errs)
    lines += [
        "",
        f"{n} configurations: {exact} exact, {within} within 15 %, mean |error| {sum(errs) / n:.1%}, "
        f"max {max(errs):.0%}",
    ]
    table = "\n".join(lines)
    print(table)
    if args.write:
        doc = Path(args.write)
        text = doc.read_text()
        head, rest = text.split("<!-- whatif-accuracy: written by bench/whatif_accuracy.py -->\n", 1)
        _, tail = rest.split("<!-- /whatif-accuracy -->", 1)
        doc.write_text(
            f"{head}<!-- whatif-accuracy: written by bench/whatif_accuracy.py -->\n{table}\n"
            f"<!-- /whatif-accuracy -->{tail}"
        )


if __name__ == "__main__":
    main()
