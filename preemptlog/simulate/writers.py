"""The files of a simulated incident bundle, written while the model runs.

- ``vllm.log``: the server log of the chosen family (families.py), with the
  debug-hook lines and, when asked, PREEMPTED marker lines;
- ``executor.log``: ``block_table extend req=<id> 8->12`` lines with the
  family's header (the guide's "executor log");
- ``blocktable.jsonl``: records in preemptlog's block-table schema
  (``preemptlog/data/blocktable.schema.json``): a ``step`` snapshot of the
  pool at the start of every scheduling round (what the scheduler saw),
  ``table`` records for block tables that changed in the round (and every
  ``table_every`` steps for all running requests), ``event`` records for
  allocate / extend / free / preempt;
- ``dmon.txt``: ``nvidia-smi dmon`` output (dmon.py).

The startup banners of each family (server version, args, engine config, KV size, routes) are
startup.py's :class:`Startup`; this module is the sink that writes the files while the model runs.

Sources may run on skewed clocks (``skews``: dmon, executor, blocktable ->
seconds added to that source's clock).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from . import families as F
from .dmon import Dmon
from .startup import Startup

if TYPE_CHECKING:
    from .model import Params, Request, Sim

WORDS = (  # noqa: SIM905
    "the of and to in a is that for it as was with be by on not he this are or his from at which but have "
    "an they you were her she there been one all we their has would when if so no what up out more can "
    "said who about into only other time new some could these two may first then do any like my now over "
    "such our man me even most made after also did many before must through back years where much your "
    "way well down should because each just those people how too little state good very make world still "
    "own see men work long get here between both life being under never day same another know while last "
    "might us great old year off come since against go came right used take three summary report cache "
    "block kernel batch request token memory scheduler latency throughput prefix decode prompt model "
    "server cluster region shard queue"
).split()


@dataclass
class Output:
    family: F.Family
    start: datetime
    tz: str = "UTC"
    stock: bool = False
    markers: bool = False
    hooks: bool = True
    hook_headers: bool = False
    ansi: bool = True
    dmon_select: str = "pucm"
    dmon_dates: bool = True
    dmon_header_every: int = 20
    skews: dict = field(default_factory=dict)
    table_every: int = 100
    access_log: bool = True


class BundleSink:
    """Implements the model's Sink protocol; writes the four evidence files."""

    def __init__(self, out_dir: Path, o: Output, p: Params, seed: int) -> None:
        self.dir = out_dir
        self.o = o
        self.p = p
        self.fam = o.family
        self.seed = seed
        self.rng = random.Random(f"{seed}:log")
        self.clock = F.Clock(o.start, o.tz)
        self.hdr = F.Header(self.fam, self.clock, ansi=o.ansi)
        self.exec_hdr = F.Header(self.fam, F.Clock(o.start, o.tz, float(o.skews.get("executor", 0.0))), ansi=o.ansi)
        self.dmon_clock = F.Clock(o.start, o.tz, float(o.skews.get("dmon", 0.0)))
        self.bt_clock = F.Clock(o.start, o.tz, float(o.skews.get("blocktable", 0.0)))
        # Open for the whole run; close() (also called by finish()) closes them.
        self.f_log = open(out_dir / "vllm.log", "w", encoding="utf-8", newline="\n")  # noqa: SIM115
        self.f_exec = open(out_dir / "executor.log", "w", encoding="utf-8", newline="\n")  # noqa: SIM115
        self.f_bt = open(out_dir / "blocktable.jsonl", "w", encoding="utf-8", newline="\n")  # noqa: SIM115
        self.f_dmon = open(out_dir / "dmon.txt", "w", encoding="utf-8", newline="\n")  # noqa: SIM115
        self.log_lines = 0
        self.exec_lines = 0
        self.last_time = {"vllm.log": 0.0, "executor.log": 0.0, "blocktable.jsonl": 0.0, "dmon.txt": 0.0}
        self.dmon = Dmon(
            o.dmon_select,
            o.dmon_dates,
            max(2, p.tensor_parallel_size),
            o.dmon_header_every,
            seed,
            active=p.tensor_parallel_size,
        )
        self.delayed: dict[int, list[tuple[dict, list[tuple[str, str]]]]] = {}
        self.changed: dict[int, Request] = {}
        self.sim: Sim | None = None
        # stats state
        self.next_dmon = 0.0
        self.last_stats = 0.0
        self.next_timer = 0.0
        self.prev_idle = False
        self.mark = {"prompt": 0, "gen": 0, "drafted": 0, "accepted": 0}
        self.interval_preemptions = 0
        self.interval_rows: list[int] = []
        self.stats_lines = 0
        self.stats_preemptions_total = 0
        self.logged_warnings: list[int] = []
        self.marker_lines = 0
        words = [WORDS[self.rng.randrange(len(WORDS))] for _ in range(8192)]
        self.words = words + words
        self.tok = [str(self.rng.randrange(151643)) for _ in range(1 << 16)]
        self.tok2 = self.tok + self.tok

    # ------------------------------------------------------------------ output
    def _log(self, t: float, text: str) -> int:
        self.f_log.write(text)
        self.f_log.write("\n")
        self.log_lines += 1
        self.last_time["vllm.log"] = t
        return self.log_lines

    def _line(self, level: str, t: float, role: str, msg: str, proc: str | None = None) -> int:
        return self._log(t, self.hdr(level, t, role, proc) + msg)

    # ---------------------------------------------------------------- startup
    def start(self, sim: Sim) -> None:
        self.sim = sim
        p, fam = self.p, self.fam
        base_pid = 1000 + self.rng.randrange(60000)
        startup = Startup(fam, self.hdr, p, self.rng, self.o.ansi)
        startup.assign_pids(base_pid)
        self.exec_hdr.pids.update(self.hdr.pids)
        self.api = "APIServer" if fam.engine == "V1" else None
        self.core = "EngineCore_DP0" if fam.engine == "V1" else None
        for t, line in startup.lines(base_pid):
            self._log(t, line)
        self.next_timer = 10.0 if fam.engine == "V0" else self.p.warmup - 2.0 + 10.0
        self.last_stats = self.p.warmup - 2.0

    # ---------------------------------------------------------- time-driven
    def until(self, t: float) -> None:
        """Emit dmon samples and timer-driven stats lines with time <= t."""
        while True:
            nd = self.next_dmon
            nt = self.next_timer
            if min(nd, nt) > t:
                return
            if nd <= nt:
                self._dmon_sample(nd)
                self.next_dmon += 1.0
            else:
                self._timer(nt)
                self.next_timer += 10.0

    def _timer(self, t: float) -> None:
        if self.fam.engine == "V1" or t - self.last_stats > 5.0:
            self._stats(t)

    def _stats(self, t: float) -> None:
        sim, p, fam = self.sim, self.p, self.fam
        assert sim is not None
        dt = max(1e-9, t - self.last_stats)
        dp = sim.prompt_tokens - self.mark["prompt"]
        dg = sim.gen_tokens - self.mark["gen"]
        idle = dp == 0 and dg == 0
        ddraft = sim.spec_drafted - self.mark["drafted"]
        dacc = sim.spec_accepted - self.mark["accepted"]
        self.mark = {
            "prompt": sim.prompt_tokens,
            "gen": sim.gen_tokens,
            "drafted": sim.spec_drafted,
            "accepted": sim.spec_accepted,
        }
        self.last_stats = t
        skip = fam.idle_debug and idle and self.prev_idle
        self.prev_idle = idle
        gpu = 100.0 * sim.pool.used / p.num_gpu_blocks
        hit = (100.0 * sim.prefix_hits / sim.prefix_queries) if sim.prefix_queries else 0.0
        if fam.engine == "V1":
            n = self.interval_preemptions
            rows = self.interval_rows
            self.interval_preemptions = 0
            self.interval_rows = []
            shown = 0 if self.o.stock else n
            if skip and n == 0:
                return
            self.stats_lines += 1
            self.stats_preemptions_total += shown
            msg = F.v1_stats(dp / dt, dg / dt, len(sim.running), len(sim.waiting), shown, gpu, hit)
            line_no = self._line("INFO", t, "stats", msg, self.api)
            for ti in rows:
                sim.truth[ti]["stats_t"] = t
                sim.truth[ti]["stats_line"] = line_no if shown else None
            if p.speculative and ddraft:
                k = max(1, p.num_speculative_tokens)
                steps = max(1, ddraft // k)
                per_pos = [x / max(1, sim.spec_steps) for x in sim.spec_pos_accepted[:k]]
                self._line(
                    "INFO",
                    t,
                    "stats_spec",
                    F.v1_spec_stats(1 + dacc / steps, dacc / dt, ddraft / dt, dacc, ddraft, per_pos),
                    self.api,
                )
            return
        if skip:
            return
        self.stats_lines += 1
        msg = F.v0_stats(dp / dt, dg / dt, len(sim.running), 0, len(sim.waiting), gpu)
        self._line("INFO", t, "stats", msg)
        if p.enable_prefix_caching:
            self._line("INFO", t, "stats_prefix", f"Prefix cache hit rate: GPU: {hit:.2f}%, CPU: 0.00%")
        if p.speculative and sim.spec_drafted:
            k = max(1, p.num_speculative_tokens)
            acc = sim.spec_accepted / sim.spec_drafted
            emitted = sim.spec_accepted + sim.spec_steps
            eff = emitted / max(1, sim.spec_steps * (k + 1))
            self._line(
                "INFO", t, "stats_spec", F.v0_spec_stats(acc, eff, k, sim.spec_accepted, sim.spec_drafted, emitted)
            )

    def _dmon_sample(self, t: float) -> None:
        sim, p = self.sim, self.p
        assert sim is not None
        if t < p.warmup - 4:
            used_mb = 0.0
            base = 600.0 + (7300.0 * max(0.0, t - 4.0) / max(1.0, p.warmup - 8.0) if t > 4.0 else 0.0)
            state = {"load": 0.0, "used_mb": 0.0, "regions": 0, "spike": False, "base_mb": base}
        else:
            busy = bool(sim.running)
            load = min(1.0, sim.step_tokens / float(sim.full_budget)) if busy else 0.0
            if busy:
                load = max(load, 0.15)
            mb_per_block = p.block_size * 57344 / p.tensor_parallel_size / (1 << 20)
            used_mb = sim.pool.used * mb_per_block
            spike = sim.last_preempt_time is not None and t - 1.0 < sim.last_preempt_time <= t
            regions = len(sim.pool.regions()) if busy else 1
            state = {"load": load, "used_mb": used_mb, "regions": regions, "spike": spike, "base_mb": 8500.0}
        local = self.dmon_clock.local(t)
        rows = self.dmon.sample(local.strftime("%Y%m%d"), local.strftime("%H:%M:%S"), state)
        self.f_dmon.write("\n".join(rows) + "\n")
        self.last_time["dmon.txt"] = t

    # ---------------------------------------------------------- request lines
    def _prompt_text(self, req: Request) -> str:
        n = max(1, min(6000, int(req.prompt_len * 0.72)))
        off = (req.prefix_off if req.prefix_id else req.body_off) % 8192
        user = " ".join(self.words[off : off + n])
        return (
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
            + user
            + "<|im_end|>\n<|im_start|>assistant\n"
        )

    def _token_ids(self, req: Request) -> str:
        size = 1 << 16
        parts = []
        if req.prefix_id and req.prefix_len:
            a = req.prefix_off % size
            parts.append(", ".join(self.tok2[a : a + req.prefix_len]))
        body = req.prompt_len - (req.prefix_len if req.prefix_id else 0)
        if body > 0:
            a = req.body_off % size
            parts.append(", ".join(self.tok2[a : a + body]))
        return "[" + ", ".join(parts) + "]"

    def received(self, req: Request, t: float) -> None:
        fam = self.fam
        sp = F.sampling_params(fam, req.max_out)
        if fam.engine == "V1":
            self._line(
                "INFO", t, "received", f"Received request {req.rid}: params: {sp}, lora_request: None.", self.api
            )
            self._line("INFO", t, "added", f"Added request {req.rid}.", self.api)
            return
        prompt = F.py_repr_str(self._prompt_text(req))
        self._line(
            "INFO",
            t,
            "received",
            f"Received request {req.rid}: prompt: {prompt}, params: {sp}, prompt_token_ids: {self._token_ids(req)}, "
            f"lora_request: None, prompt_adapter_request: None.",
        )
        self._line("INFO", t, "added", f"Added request {req.rid}.")

    # ------------------------------------------------------------- step hooks
    def step_begin(self, step: int, t: float) -> None:
        sim, p = self.sim, self.p
        assert sim is not None
        if self.fam.engine == "V0" and t - self.last_stats > 5.0:
            self._stats(t)
        for due in sorted(k for k in self.delayed if k <= step):
            for row, lines in self.delayed.pop(due):
                self._emit_preempt_lines(row, lines, t, step)
        if self.o.hooks:
            pending = list(sim.waiting)
            lines = F.hook_lines(sim.pool.num_free, pending, len(sim.running), p.block_size)
            pre = self._hook_prefix(t)
            for ln in lines:
                self._log(t, pre + ln)
        rec = {
            "type": "step",
            "time": self.bt_clock.iso(t),
            "step": step,
            "block_size": p.block_size,
            "num_total_blocks": p.num_gpu_blocks,
            "num_free_blocks": sim.pool.num_free,
            "free_regions": [list(x) for x in sim.pool.regions()],
            "running": len(sim.running),
            "waiting": len(sim.waiting),
        }
        self._bt(rec, t)
        if self.o.table_every and step % self.o.table_every == 0:
            for r in sim.running:
                self._table(r, step, t)

    def _hook_prefix(self, t: float) -> str:
        if self.o.hook_headers:
            return self.hdr("INFO", t, "hook", self.core)
        return self.hdr.proc(self.core)

    def batch_check(self, step: int, t: float, variance: float, threshold: float) -> None:
        if self.o.hooks:
            self._log(t, self._hook_prefix(t) + F.batch_line(variance, threshold))

    def _bt(self, rec: dict, t: float) -> None:
        self.f_bt.write(json.dumps(rec))
        self.f_bt.write("\n")
        self.last_time["blocktable.jsonl"] = t

    def _table(self, r: Request, step: int, t: float) -> None:
        sim = self.sim
        assert sim is not None
        rec = {
            "type": "table",
            "time": self.bt_clock.iso(t),
            "step": step,
            "request_id": r.rid,
            "block_ids": list(r.table),
            "num_tokens": r.tokens,
        }
        shared = [{"block_id": b, "ref_count": sim.pool.ref[b]} for b in r.table if sim.pool.ref[b] > 1]
        if shared:
            rec["shared"] = shared
        if r.prefix_id:
            rec["prefix_id"] = r.prefix_id
        self._bt(rec, t)

    def _event(
        self, r: Request, action: str, before: int, after: int, step: int, t: float, needed=None, extra=None
    ) -> None:
        rec = {
            "type": "event",
            "time": self.bt_clock.iso(t),
            "step": step,
            "request_id": r.rid,
            "action": action,
            "blocks_before": before,
            "blocks_after": after,
        }
        if needed is not None:
            rec["blocks_needed"] = needed
        if extra:
            rec.update(extra)
        self._bt(rec, t)

    def allocate(self, req: Request, blocks: list[int], step: int, t: float) -> None:
        self._event(req, "allocate", 0, len(blocks), step, t, needed=len(blocks))
        self.changed[req.idx] = req

    def extend(self, req: Request, before: int, after: int, needed: int, step: int, t: float) -> None:
        self._event(req, "extend", before, after, step, t, needed=needed)
        self.changed[req.idx] = req
        line = self.exec_hdr("INFO", t, "executor", "Worker_TP0" if self.fam.engine == "V1" else None)
        self.f_exec.write(f"{line}block_table extend req={req.rid} {before}->{after}\n")
        self.exec_lines += 1
        self.last_time["executor.log"] = t

    def finished(self, req: Request, step: int, t: float) -> None:
        self._event(req, "free", len(req.table), 0, step, t)
        self.changed.pop(req.idx, None)
        if self.o.access_log:
            port = 30000 + self.rng.randrange(30000)
            pre = self.hdr.proc(self.api)
            self._log(t, pre + f'INFO:     10.0.0.5:{port} - "POST /v1/chat/completions HTTP/1.1" 200 OK')

    def preempt(self, row: dict, req: Request, step: int, t: float) -> None:
        fam = self.fam
        # What an instrumented allocator knows when an allocation fails: what it asked for and
        # the pool it asked (no cause label: finding the gate is preemptlog's job).
        extra = {"waiting": row["pending"]}  # the pending queue at the decision
        if row.get("needed_blocks") is not None:
            extra |= {
                "pool_free_blocks": row["free_blocks"],
                "pool_largest_free_run": row["largest_free_run"],
            }
            if row.get("phase") == "admission":
                extra["watermark_blocks"] = int(self.p.watermark * self.p.num_gpu_blocks)
        self._event(req, "preempt", len(req.table), 0, step, t, needed=row.get("needed_blocks"), extra=extra)
        self.changed.pop(req.idx, None)
        lines: list[tuple[str, str]] = []
        row["log_warning"] = False
        row["log_marker"] = False
        if fam.v0_warnings and (row["n"] - 1) % 50 == 0:
            msg = F.V0_PREEMPT_MSG.format(rid=req.rid, mode=row["mode"], total=row["n"])
            lines.append(("preempt", msg))
            row["log_warning"] = True
        if fam.always_markers or self.o.markers:
            lines.append(("marker", F.MARKER_MSG.format(rid=req.rid, mode=row["mode"])))
            row["log_marker"] = True
        row["log_lines"] = []
        row["logged_t"] = None
        if row["delay_steps"] > 0:
            self.delayed.setdefault(row["logged_step"], []).append((row, lines))
        else:
            self._emit_preempt_lines(row, lines, t, step)

    def _emit_preempt_lines(self, row: dict, lines: list[tuple[str, str]], t: float, step: int) -> None:
        row["logged_t"] = t
        row["logged_step"] = step
        for role, msg in lines:
            n = self._line("WARNING", t, role, msg, self.core)
            row["log_lines"].append(n)
            if role == "preempt":
                self.logged_warnings.append(row["n"])
            else:
                self.marker_lines += 1

    def counted(self, truth_idx: int, t: float) -> None:
        sim = self.sim
        assert sim is not None
        self.interval_preemptions += 1
        self.interval_rows.append(truth_idx)
        sim.truth[truth_idx]["counted_t"] = t

    def step_end(self, step: int, t: float) -> None:
        for r in self.changed.values():
            if r.state == "running":
                self._table(r, step, t)
        self.changed.clear()

    def finish(self, t: float) -> None:
        sim = self.sim
        assert sim is not None
        for due in sorted(self.delayed):
            for row, lines in self.delayed.pop(due):
                self._emit_preempt_lines(row, lines, t, sim.step)
        # Run the clocks to the first stats line after the end, so the last
        # interval (V1 'Preemptions: N') is written.
        end = t + (self.fam.stats_interval if self.fam.engine == "V0" else 10.0) + 0.5
        self.until(end)
        self.end_t = end
        self.close()

    def close(self) -> None:
        for f in (self.f_log, self.f_exec, self.f_bt, self.f_dmon):
            f.close()
