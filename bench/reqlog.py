#!/usr/bin/env python3
"""A request-heavy vLLM V1 log for the benchmark (GitHub issue 18), independent of the simulator.

    python bench/reqlog.py OUT.log --size 1G [--seed 1] [--preemptions-per-gb 2600]

Shaped like a busy V1 API server (0.11-0.14, ``--enable-log-requests``, DEBUG for
a third of the prompts): per 1.89 M lines about 850 k ``Received request``,
565 k ``Added request``, 282 k ``Request X details: prompt: ...`` lines, 189 k
uvicorn access lines and 4.7 k stats lines, so most records are short request
lines (the simulator's ``large`` log has few, long ones). Rare lines exercise
the paths that need request ids: ``Aborted request`` (1 in 800 requests) and
DEBUG ``RequestStatus.PREEMPTED`` markers (1 in 2 000, ~440 per GB; set with
``--preemptions-per-gb N``: a preemption-heavy log), counted as well in the
stats lines' ``Preemptions:`` field.

Deterministic: the same seed and size give the same bytes. The log stops at the
last whole line that fits in ``--size``; the counts of every line family are
printed as JSON on stdout (and written to ``OUT.json``).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

RATE = 18.0  # requests per second: 850 k requests over ~13 h
STATS_EVERY = 10.0
P_DETAILS = 282 / 850
P_ADDED = 565 / 850
P_ACCESS = 189 / 850
P_ABORT = 1 / 800
P_PREEMPT = 1 / 2000
# Received requests per GB of the default log (seed 1: 873 710), to turn a density per GB into a probability.
REQUESTS_PER_GB = 873_710
CHUNK = 8 << 20

SP = (
    "SamplingParams(n=1, presence_penalty=0.0, frequency_penalty=0.0, repetition_penalty=1.0, "
    "temperature={temp}, top_p=1.0, top_k=0, min_p=0.0, seed=None, stop=[], stop_token_ids=[], bad_words=[], "
    "include_stop_str_in_output=False, ignore_eos=False, max_tokens={mt}, min_tokens=0, logprobs=None, "
    "prompt_logprobs=None, skip_special_tokens=True, spaces_between_special_tokens=True, "
    "truncate_prompt_tokens=None, guided_decoding=None, extra_args=None)"
)
WORDS = (
    "the of and to in is that for it as was with be by on not he this are or his from at which but have an they "
    "you were her she there one all we their can has more will would if when what so no out up into do only time "
    "model token cache block request server queue batch memory prefill decode latency throughput"
).split()


def parse_size(text: str) -> int:
    t = text.strip().upper().removesuffix("B")
    for suffix, m in (("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30)):
        if t.endswith(suffix):
            return int(float(t[:-1]) * m)
    return int(t)


def generate(path: Path, size: int, seed: int = 1, preemptions_per_gb: float | None = None) -> dict:
    """Write the log; ``preemptions_per_gb`` (default: 1 in 2 000 requests, ~440 per GB) sets the
    density of ``RequestStatus.PREEMPTED`` markers (the random stream is the same either way: only
    which draws add a marker line changes)."""
    p_preempt = P_PREEMPT if preemptions_per_gb is None else preemptions_per_gb / REQUESTS_PER_GB
    rng = random.Random(seed)
    pid_api, pid_core = 1000 + rng.randrange(50000), 1000 + rng.randrange(50000)
    api = b"(APIServer pid=%d) " % pid_api
    core = b"(EngineCore_DP0 pid=%d) " % pid_core
    start = datetime(2026, 11, 20, 8, 0, 0, tzinfo=UTC)
    # Pre-rendered variants: (max_tokens, sampling params, prompt repr, token id list).
    variants = []
    for _ in range(64):
        plen = rng.randrange(16, 250)
        mt = rng.choice([64, 128, 256, 512, 1024, 2048, rng.randrange(16, 4096)])
        text = " ".join(rng.choice(WORDS) for _ in range(max(1, int(plen * 0.7))))
        prompt = repr("<|im_start|>user\n" + text + "<|im_end|>\n<|im_start|>assistant\n").encode()
        ids = ("[" + ", ".join(str(rng.randrange(151643)) for _ in range(plen)) + "]").encode()
        sp = SP.format(temp=rng.choice(["0.0", "0.7", "1.0"]), mt=mt).encode()
        variants.append((sp, prompt, ids))
    counts = dict.fromkeys(("received", "details", "added", "access", "stats", "aborted", "preempted"), 0)
    stamps: dict[int, bytes] = {}

    def stamp(t: float) -> bytes:
        s = int(t)
        b = stamps.get(s)
        if b is None:
            if len(stamps) > 64:
                stamps.clear()
            b = stamps[s] = (start + timedelta(seconds=s)).strftime("%m-%d %H:%M:%S").encode()
        return b

    written = 0
    lines = 0
    buf: list[bytes] = []
    buf_size = 0
    full = False
    t = 0.0
    next_stats = STATS_EVERY
    k = 0
    preempted_since = 0
    running = 0
    salt = rng.getrandbits(64)
    with open(path, "wb") as fh:

        def flush(final: bool = False) -> None:
            nonlocal written, lines, buf, buf_size, full
            room = size - written
            if buf_size <= room:
                data, n = b"".join(buf), len(buf)
            else:
                acc, n = 0, 0
                for ln in buf:
                    if acc + len(ln) > room:
                        break
                    acc += len(ln)
                    n += 1
                data = b"".join(buf[:n])
                full = True
            fh.write(data)
            written += len(data)
            lines += n
            for ln in buf[:n]:
                kind = _kind_of(ln)
                if kind:
                    counts[kind] += 1
            buf, buf_size = [], 0

        def add(line: bytes) -> None:
            nonlocal buf_size
            buf.append(line + b"\n")
            buf_size += len(line) + 1

        while not full:
            t += rng.expovariate(RATE)
            while next_stats <= t:
                st = stamp(next_stats)
                add(
                    api + b"INFO " + st + b" [v1/metrics/loggers.py:208] Engine 000: Avg prompt throughput: %.1f "
                    b"tokens/s, Avg generation throughput: %.1f tokens/s, Running: %d reqs, Waiting: %d reqs, "
                    b"Preemptions: %d, GPU KV cache usage: %.1f%%, Prefix cache hit rate: %.1f%%"
                    % (
                        rng.uniform(500, 9000),
                        rng.uniform(500, 4000),
                        min(running, 256),
                        max(0, running - 256),
                        preempted_since,
                        min(100.0, 30 + running / 4),
                        rng.uniform(0, 60),
                    )
                )
                preempted_since = 0
                next_stats += STATS_EVERY
            st = stamp(t)
            rid = b"chatcmpl-%016x%016x" % ((k * 0x9E3779B97F4A7C15 ^ salt) & ((1 << 64) - 1), rng.getrandbits(64))
            k += 1
            sp, prompt, ids = variants[rng.randrange(len(variants))]
            add(
                api
                + b"INFO "
                + st
                + b" [entrypoints/logger.py:43] Received request "
                + rid
                + b": params: "
                + sp
                + b", lora_request: None."
            )
            if rng.random() < P_DETAILS:
                add(
                    api
                    + b"DEBUG "
                    + st
                    + b" [entrypoints/logger.py:60] Request "
                    + rid
                    + b" details: prompt: "
                    + prompt
                    + b", prompt_token_ids: "
                    + ids
                    + b", prompt_embeds shape: None."
                )
            if rng.random() < P_ADDED:
                add(
                    api
                    + b"INFO "
                    + st
                    + b" [v1/engine/async_llm.py:366] Added request "
                    + rid
                    + b"-%08x." % rng.getrandbits(32)
                )
            running = max(0, running + (1 if rng.random() < 0.52 else -1))
            if rng.random() < P_ACCESS:
                add(
                    api
                    + b'INFO:     10.0.%d.%d:%d - "POST /v1/chat/completions HTTP/1.1" 200 OK'
                    % (rng.randrange(256), rng.randrange(256), 30000 + rng.randrange(30000))
                )
            if rng.random() < P_ABORT:
                add(api + b"INFO " + st + b" [v1/engine/async_llm.py:499] Aborted request " + rid + b".")
            if rng.random() < p_preempt:
                preempted_since += 1
                add(
                    core
                    + b"DEBUG "
                    + st
                    + b" [v1/core/sched/scheduler.py:612] Request "
                    + rid
                    + b" status: RequestStatus.PREEMPTED"
                )
            if buf_size >= CHUNK:
                flush()
        if buf and not full:
            flush(True)
    counts["lines"] = lines
    counts["bytes"] = written
    counts["seed"] = seed
    return counts


def _kind_of(line: bytes) -> str | None:
    if b"] Received request " in line:
        return "received"
    if b" details: prompt: " in line:
        return "details"
    if b"] Added request " in line:
        return "added"
    if b'"POST ' in line:
        return "access"
    if b"Avg prompt throughput" in line:
        return "stats"
    if b"] Aborted request " in line:
        return "aborted"
    if b"RequestStatus.PREEMPTED" in line:
        return "preempted"
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="bench/reqlog.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--size", default="1G")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--preemptions-per-gb",
        type=float,
        default=None,
        metavar="N",
        help="RequestStatus.PREEMPTED markers per GB (default: 1 in 2 000 requests, ~440 per GB)",
    )
    args = ap.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(args.out.name + ".part")
    counts = generate(tmp, parse_size(args.size), args.seed, args.preemptions_per_gb)
    tmp.replace(args.out)
    text = json.dumps(counts)
    args.out.with_name(args.out.name + ".json").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
