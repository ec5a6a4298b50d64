"""The ``large`` scenario: stream a big, realistic vLLM log fast (benchmarks).

No step model runs here. A few dozen request variants (prompt text, token
ids, sampling params) are rendered once as bytes; each request line is then
glued from a cached header, a fresh request id and one variant, and lines
are written in multi-megabyte chunks. Time advances by Poisson arrivals;
stats lines come on the family's cadence (5 s V0, 10 s V1), uvicorn access
lines when requests finish, and preemptions hit a request with probability
``preempt_prob``: V0 writes the sampled warning (1st, 51st, 101st...), V1
counts them in ``Preemptions: N`` (not on ``--stock``), markers appear with
``--markers`` or in the guide family.

V1 0.11.1 logs prompts only at DEBUG (``Request <id> details: prompt: ...,
prompt_token_ids: [...]``); so the V1 large log is a DEBUG log, and at DEBUG
0.10.2+ prints relative module paths (``[v1/metrics/loggers.py:208]``).

The log stops at the last whole line that fits in ``--size`` bytes. truth.jsonl
has one row per preemption before that point; scenario.json the totals
(``preemptions``, ``v0_warnings_logged``, ``v0_last_logged_total``,
``v1_stats_preemptions_sum``, ``marker_lines``, ``visible_in_log``).
"""

from __future__ import annotations

import heapq
import json
import os
import random
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime
from pathlib import Path

from ..model import VERSION as __version__
from . import families as F
from .model import Params, sample_len
from .options import SimulateError, coerce
from .startup import Startup
from .writers import WORDS

CHUNK = 8 << 20
_REQ = {"kind": "request"}


@dataclass
class LargeParams:
    rate: float = 20.0  # requests per second
    preempt_prob: float = 0.03  # chance that a request is preempted (once)
    prompt: list = field(default_factory=lambda: ["uniform", 600, 3000])
    output: list = field(default_factory=lambda: ["uniform", 64, 1024])
    latency: list = field(default_factory=lambda: ["uniform", 3, 40])  # seconds to the access line
    variants: int = 48
    warmup: float = 12.0
    model: str = "Qwen/Qwen2.5-7B-Instruct"
    tensor_parallel_size: int = 2
    block_size: int = 16
    num_gpu_blocks: int = 8192
    num_cpu_blocks: int = 2048
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    max_model_len: int = 8192

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]


def parse_size(text: str) -> int:
    """'1G', '500M', '5MB', '64k', '1000000' -> bytes (binary multiples)."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    mult = 1
    for suffix, m in (("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30), ("T", 1 << 40)):
        if t.endswith(suffix):
            t, mult = t[:-1], m
            break
    try:
        value = float(t)
    except ValueError:
        raise ValueError(f"--size {text!r}: expected a size like 1G, 500M, 5MB or a number of bytes") from None
    if value <= 0:
        raise ValueError("--size must be positive")
    return int(value * mult)


class _Out:
    """Chunked writer that can stop at an exact byte budget on a line boundary."""

    def __init__(self, path: Path, limit: int) -> None:
        self.fh = open(path, "wb")  # noqa: SIM115 - closed by close()
        self.limit = limit
        self.written = 0
        self.lines = 0
        self.buf: list[bytes] = []
        self.buf_size = 0
        self.marks: list[tuple[int, dict]] = []  # (index in buf, truth/callback record)
        self.full = False
        self.committed: list[dict] = []

    def add(self, line: bytes) -> int:
        """Queue one line (without newline); return its index in the buffer."""
        self.buf.append(line)
        self.buf_size += len(line) + 1
        return len(self.buf) - 1

    def mark(self, rec: dict) -> None:
        """Attach a record to the next line (committed only if that line is written)."""
        self.marks.append((len(self.buf), rec))

    def maybe_flush(self) -> None:
        if self.buf_size >= CHUNK:
            self.flush()

    def flush(self) -> None:
        if not self.buf:
            return
        room = self.limit - self.written
        if self.buf_size <= room:
            k = len(self.buf)
            data = b"\n".join(self.buf) + b"\n"
        else:
            k, size = 0, 0
            for line in self.buf:
                if size + len(line) + 1 > room:
                    break
                size += len(line) + 1
                k += 1
            data = (b"\n".join(self.buf[:k]) + b"\n") if k else b""
            self.full = True
        self.fh.write(data)
        for idx, rec in self.marks:
            if idx < k or (idx == k and k == len(self.buf)):
                if "_line_offset" in rec:
                    rec["line"] = self.lines + rec.pop("_line_offset") + 1
                self.committed.append(rec)
        self.written += len(data)
        self.lines += k
        self.buf = []
        self.buf_size = 0
        self.marks = []

    def close(self) -> None:
        self.fh.close()


def write_large(sc, opts, fam: F.Family, start: datetime) -> dict:

    lp = LargeParams()
    for k, v in sc.spec()["params"].items():
        setattr(lp, k, v)
    names = set(LargeParams.names())
    for k, text in opts.sets.items():
        if k not in names:
            raise SimulateError(f"--set {k}: not a parameter of the large scenario ({', '.join(sorted(names))})")
        setattr(lp, k, coerce(k, text, getattr(lp, k)))
    if lp.rate <= 0 or not (0 <= lp.preempt_prob <= 1) or lp.variants < 1:
        raise SimulateError("large: rate > 0, 0 <= preempt_prob <= 1 and variants >= 1 are required")
    size = opts.size if opts.size is not None else 100 << 20
    out_dir: Path = opts.out
    rng = random.Random(opts.seed)
    clock = F.Clock(start, opts.tz)
    v1 = fam.engine == "V1"
    hdr = F.Header(fam, clock, ansi=opts.ansi, debug_paths=v1)
    p = Params(
        model=lp.model,
        tensor_parallel_size=lp.tensor_parallel_size,
        block_size=lp.block_size,
        num_gpu_blocks=lp.num_gpu_blocks,
        num_cpu_blocks=lp.num_cpu_blocks,
        max_num_seqs=lp.max_num_seqs,
        max_num_batched_tokens=lp.max_num_batched_tokens,
        max_model_len=lp.max_model_len,
        warmup=lp.warmup,
    )
    out = _Out(out_dir / "vllm.log", size)
    try:
        return _stream(out, sc, opts, fam, lp, p, rng, clock, hdr, out_dir, size)
    finally:
        out.close()


def _stream(
    out: _Out, sc, opts, fam: F.Family, lp: LargeParams, p: Params, rng, clock, hdr, out_dir: Path, size: int
) -> dict:

    v1 = fam.engine == "V1"
    base_pid = 1000 + rng.randrange(60000)
    startup = Startup(fam, hdr, p, rng, opts.ansi)
    startup.assign_pids(base_pid)
    api = "APIServer" if v1 else None
    core = "EngineCore_DP0" if v1 else None
    markers = opts.markers or fam.always_markers
    last_t = 0.0
    for t, line in startup.lines(base_pid):
        out.add(line.encode())
        last_t = t

    # Pre-rendered request variants.
    words = [WORDS[rng.randrange(len(WORDS))] for _ in range(8192)]
    variants = []
    for _ in range(lp.variants):
        plen = sample_len(rng, lp.prompt)
        mt = max(1, sample_len(rng, lp.output))
        n = max(1, int(plen * 0.72))
        off = rng.randrange(4096)
        user = " ".join((words * 2)[off : off + min(n, 8000)])
        prompt = repr(
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
            + user
            + "<|im_end|>\n<|im_start|>assistant\n"
        ).encode()
        ids = ("[" + ", ".join(str(rng.randrange(151643)) for _ in range(plen)) + "]").encode()
        sp = F.sampling_params(fam, mt).encode()
        variants.append((plen, mt, prompt, ids, sp))

    hcache: dict[tuple, bytes] = {}

    def head(level: str, t: float, role: str, proc=None) -> bytes:
        if fam.iso:
            return hdr(level, t, role, proc).encode()
        key = (int(t), level, role, proc)
        h = hcache.get(key)
        if h is None:
            if len(hcache) > 256:
                hcache.clear()
            h = hcache[key] = hdr(level, t, role, proc).encode()
        return h

    api_pre = hdr.proc(api).encode()
    prefix = fam.id_prefix.encode() if fam.id_prefix else b""
    mask = (1 << 128) - 1
    salt = rng.getrandbits(128)
    stats_every = fam.stats_interval
    next_stats = lp.warmup - 2.0 + stats_every
    last_stats = lp.warmup - 2.0
    finishing: list[tuple[float, int, bytes]] = []  # (finish time, request number, id)
    counter = 0
    interval_pre = 0
    interval_rows: list[dict] = []
    prompt_acc = gen_acc = 0
    running = 0
    t = lp.warmup
    i = 0
    truth: list[dict] = []
    stats_sum = 0
    logged_totals: list[int] = []
    marker_lines = 0

    def rid_of(k: int) -> bytes:
        if not prefix:
            return str(k + 1).encode()
        return prefix + b"%032x" % (((k + 1) * 0x9E3779B97F4A7C15F39CC0605CEDC835 ^ salt) & mask)

    while not out.full:
        t += rng.expovariate(lp.rate)
        # stats ticks and finished requests before this arrival
        while True:
            tf = finishing[0][0] if finishing else float("inf")
            if min(tf, next_stats) > t:
                break
            if tf <= next_stats:
                _, fi, _ = heapq.heappop(finishing)
                running -= 1
                port = 30000 + (fi * 7919) % 30000
                out.add(api_pre + b'INFO:     10.0.0.5:%d - "POST /v1/chat/completions HTTP/1.1" 200 OK' % port)
                continue
            ts = next_stats
            dt = ts - last_stats
            last_stats = ts
            next_stats += stats_every
            usage = min(100.0, 40.0 + 60.0 * min(1.0, running / max(1, lp.max_num_seqs)))
            waiting = max(0, running - lp.max_num_seqs)
            if v1:
                shown = 0 if opts.stock else interval_pre
                rec = {"kind": "stats", "count": shown, "_line_offset": len(out.buf), "rows": interval_rows}
                out.mark(rec)
                msg = F.v1_stats(
                    prompt_acc / dt, gen_acc / dt, min(running, lp.max_num_seqs), waiting, shown, usage, 0.0
                )
                out.add(head("INFO", ts, "stats", api) + msg.encode())
                interval_pre = 0
                interval_rows = []
            else:
                msg = F.v0_stats(prompt_acc / dt, gen_acc / dt, min(running, lp.max_num_seqs), 0, waiting, usage)
                out.add(head("INFO", ts, "stats") + msg.encode())
            prompt_acc = gen_acc = 0
        plen, mt, prompt, ids, sp = variants[i % len(variants) if i % 7 else rng.randrange(len(variants))]
        rid = rid_of(i)
        i += 1
        out.mark(_REQ)
        if v1:
            out.add(
                head("INFO", t, "received", api)
                + b"Received request "
                + rid
                + b": params: "
                + sp
                + b", lora_request: None."
            )
            out.add(
                head("DEBUG", t, "details", api)
                + b"Request "
                + rid
                + b" details: prompt: "
                + prompt
                + b", prompt_token_ids: "
                + ids
                + b", prompt_embeds shape: None."
            )
            out.add(head("INFO", t, "added", api) + b"Added request " + rid + b".")
        else:
            out.add(
                head("INFO", t, "received")
                + b"Received request "
                + rid
                + b": prompt: "
                + prompt
                + b", params: "
                + sp
                + b", prompt_token_ids: "
                + ids
                + b", lora_request: None, prompt_adapter_request: None."
            )
            out.add(head("INFO", t, "added") + b"Added request " + rid + b".")
        prompt_acc += plen
        gen_acc += mt
        running += 1
        heapq.heappush(finishing, (t + sample_len(rng, lp.latency), i, rid))
        if rng.random() < lp.preempt_prob:
            counter += 1
            row = {
                "n": counter,
                "request_id": rid.decode(),
                "gate": None,
                "sub_kind": None,
                "decision_time": clock.iso(t),
                "log_warning": False,
                "log_marker": False,
                "log_lines": [],
                "stats_line": None,
            }
            out.mark({"kind": "event", "row": row})
            tw = t + 0.05
            if fam.v0_warnings and (counter - 1) % 50 == 0:
                rec = {"kind": "warning", "row": row, "_line_offset": len(out.buf)}
                out.mark(rec)
                msg = F.V0_PREEMPT_MSG.format(rid=rid.decode(), mode="RECOMPUTE", total=counter)
                out.add(head("WARNING", tw, "preempt") + msg.encode())
            if markers:
                rec = {"kind": "marker", "row": row, "_line_offset": len(out.buf)}
                out.mark(rec)
                out.add(
                    head("WARNING", tw, "marker", core)
                    + F.MARKER_MSG.format(rid=rid.decode(), mode="RECOMPUTE").encode()
                )
            interval_pre += 1
            interval_rows.append(row)
        last_t = t
        out.maybe_flush()
    out.flush()
    out.close()  # before the mtime is set

    # What was written.
    requests = 0
    for rec in out.committed:
        kind = rec["kind"]
        if kind == "request":
            requests += 1
        elif kind == "event":
            truth.append(rec["row"])
        elif kind == "warning":
            rec["row"]["log_lines"].append(rec["line"])
            rec["row"]["log_warning"] = True
            logged_totals.append(rec["row"]["n"])
        elif kind == "marker":
            rec["row"]["log_lines"].append(rec["line"])
            rec["row"]["log_marker"] = True
            marker_lines += 1
        elif kind == "stats":
            stats_sum += rec["count"]
            for r in rec["rows"]:
                r["stats_line"] = rec["line"] if rec["count"] else None
    last_total = max(logged_totals) if logged_totals else 0
    for r in truth:
        r["visible_in_log"] = bool(r["log_marker"] or (fam.v0_warnings and r["n"] <= last_total) or r["stats_line"])
    with open(out_dir / "truth.jsonl", "w", encoding="utf-8", newline="\n") as fh:
        for r in truth:
            fh.write(json.dumps(r) + "\n")
    record = {
        "tool": "preemptlog simulate",
        "preemptlog_version": __version__,
        "scenario": sc.name,
        "description": sc.summary,
        "seed": opts.seed,
        "family": fam.name,
        "engine": fam.engine,
        "vllm_version": fam.version,
        "stock": opts.stock,
        "markers": bool(markers),
        "start": opts.start,
        "tz": opts.tz,
        "end": clock.iso(last_t),
        "size_limit": size,
        "params": asdict(lp),
        "files": ["vllm.log", "truth.jsonl", "scenario.json"],
        "truth": {
            "preemptions": len(truth),
            "requests": requests,
            "v0_warnings_logged": len(logged_totals),
            "v0_logged_totals": logged_totals,
            "v0_last_logged_total": last_total or None,
            "marker_lines": marker_lines,
            "v1_stats_preemptions_sum": stats_sum if v1 else None,
            "visible_in_log": sum(1 for r in truth if r["visible_in_log"]),
            "vllm_log_bytes": out.written,
            "vllm_log_lines": out.lines,
        },
    }
    with open(out_dir / "scenario.json", "w", encoding="utf-8", newline="\n") as fh:
        json.dump(record, fh, indent=2)
        fh.write("\n")
    ts = clock.epoch(last_t)
    for name in record["files"]:
        os.utime(out_dir / name, (ts, ts))
    return record
