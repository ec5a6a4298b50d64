"""The plugin on vLLM versions it was not verified on, and 0.34's resumes, with small fake classes
(issue 37, item 1; no vLLM needed: tests/capture/test_capture_vllm034.py runs the real 0.34.0 scheduler).

A version outside ``recorder.SUPPORTED`` is recorded anyway where its hooks exist: said once as a
warning, and the first record of each file says ``"unverified": true`` beside the version.
"""

from __future__ import annotations

import json
import logging
import sys
import types

import pytest

from preemptlog.capture.recorder import Recorder, hook_plan, install, install_vllm, plan_for

from .test_capture_plugin import Coordinator, drive, make_classes, records


@pytest.mark.parametrize(
    "version,plan",
    [("0.11.0", "inline"), ("0.12.0", "method"), ("0.32.0", "method"), ("0.33.0", "method"), ("0.34.0", "method")],
)
def test_verified_versions_by_number(version, plan):
    assert plan_for(version) == plan
    assert hook_plan(version, None) == (plan, True)


def test_unverified_versions_get_the_plan_their_classes_allow():
    class WithPreempt:
        def schedule(self): ...

        def _preempt_request(self, request, timestamp): ...

    class Inline:
        def schedule(self): ...

    class NoSchedule:
        pass

    assert hook_plan("0.35.0", WithPreempt) == ("method", False)
    assert hook_plan("1.2.0", WithPreempt) == ("method", False)
    assert hook_plan("0.10.2", Inline) == ("inline", False)  # 0.9.2-0.10 preempt inline, as 0.11
    assert hook_plan("0.40.0", Inline) == ("lifecycle", False)  # no preemption hook: the rest only
    assert hook_plan("dev", WithPreempt) == ("method", False)
    assert hook_plan("0.35.0", NoSchedule) == (None, False)


def fake_vllm(monkeypatch, sched_cls, kvm_cls):
    """The two vLLM modules install_vllm imports, holding the fake classes."""
    mods = {
        "vllm": types.ModuleType("vllm"),
        "vllm.v1": types.ModuleType("vllm.v1"),
        "vllm.v1.core": types.ModuleType("vllm.v1.core"),
        "vllm.v1.core.sched": types.ModuleType("vllm.v1.core.sched"),
        "vllm.v1.core.sched.scheduler": types.ModuleType("vllm.v1.core.sched.scheduler"),
        "vllm.v1.core.kv_cache_manager": types.ModuleType("vllm.v1.core.kv_cache_manager"),
        "vllm.v1.core.kv_cache_coordinator": types.ModuleType("vllm.v1.core.kv_cache_coordinator"),
    }
    mods["vllm.v1.core.sched.scheduler"].Scheduler = sched_cls
    mods["vllm.v1.core.sched.scheduler"].time = types.SimpleNamespace(time=lambda: 1796117811.5)
    mods["vllm.v1.core.kv_cache_manager"].KVCacheManager = kvm_cls
    mods["vllm.v1.core.kv_cache_coordinator"].KVCacheCoordinator = Coordinator
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)


def test_an_unverified_version_records_says_so_once_and_flags_the_header(tmp_path, monkeypatch, caplog):
    Sched, KVM = make_classes()
    Sched.__name__ = "Scheduler"
    fake_vllm(monkeypatch, Sched, KVM)
    baseline = drive(make_classes()[0](24))
    log = logging.getLogger("vllm.preemptlog")
    with caplog.at_level(logging.INFO, logger="vllm.preemptlog"):
        rec = install_vllm(str(tmp_path / "rec-{engine}.jsonl"), "0.35.0", log=log)
        assert rec is not None and rec.unverified
        assert not caplog.records  # nothing said until the recording process writes
        assert drive(Sched(24)) == baseline  # never a changed decision
        drive(Sched(24))  # a second scheduler in the same process: still said once
    said = [r for r in caplog.records if "preemptlog" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.WARNING, [r.getMessage() for r in said]
    msg = said[0].getMessage()
    assert "vLLM 0.35.0 is not a version this plugin was verified on (0.11-0.34): recording anyway" in msg
    assert "Scheduler._preempt_request" in msg
    rs = records(tmp_path / "rec-0.jsonl")
    assert rs[0]["unverified"] is True and rs[0]["vllm_version"] == "0.35.0"
    assert not [r for r in rs[1:] if "unverified" in r or "vllm_version" in r]
    pre = [r for r in rs if r["type"] == "event" and r["action"] == "preempt"]
    truth = [rid for _, p in baseline for rid in p]
    assert len(pre) == 2 * len(truth) > 3  # two runs, every preemption
    rec.close()


def test_a_verified_version_names_itself_in_the_header_and_says_the_info_line(tmp_path, monkeypatch, caplog):
    Sched, KVM = make_classes()
    fake_vllm(monkeypatch, Sched, KVM)
    log = logging.getLogger("vllm.preemptlog")
    with caplog.at_level(logging.INFO, logger="vllm.preemptlog"):
        rec = install_vllm(str(tmp_path / "r.jsonl"), "0.34.0", log=log)
        drive(Sched(24))
    assert rec is not None and not rec.unverified
    said = [r for r in caplog.records if "preemptlog" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.INFO
    assert said[0].getMessage().startswith(f"preemptlog: recording preemptions to {tmp_path / 'r.jsonl'} (vLLM 0.34.0;")
    first = json.loads((tmp_path / "r.jsonl").read_text().splitlines()[0])
    assert first["vllm_version"] == "0.34.0" and "unverified" not in first
    rec.close()


def test_without_a_preemption_hook_the_rest_is_recorded_and_said(tmp_path, monkeypatch, caplog):
    """A later vLLM that renamed _preempt_request: arrivals, admissions, resumes and finishes are
    still recorded, and the warning says preemptions are not."""
    Sched, KVM = make_classes()

    def preempt(self, victim):  # the preemption under another name
        self.kv_cache_manager.free(victim)
        victim.status = type(victim.status)("PREEMPTED")
        victim.num_computed_tokens = 0
        victim.num_preemptions += 1
        self.waiting.insert(0, victim)

    Sched.preempt = preempt
    del Sched._preempt_request
    fake_vllm(monkeypatch, Sched, KVM)
    with caplog.at_level(logging.INFO, logger="vllm.preemptlog"):
        rec = install_vllm(str(tmp_path / "r.jsonl"), "0.40.0", log=logging.getLogger("vllm.preemptlog"))
        steps = drive(Sched(24))
    said = [r.getMessage() for r in caplog.records if "preemptlog" in r.getMessage()]
    assert len(said) == 1 and "preemptions are not recorded" in said[0]
    rs = records(tmp_path / "r.jsonl")
    assert not [r for r in rs if r["type"] == "event"]
    n = sum(len(p) for _, p in steps)
    assert n > 3 and len([r for r in rs if r.get("phase") == "resume"]) == n
    assert rec is not None
    rec.close()


def test_an_unknown_version_whose_scheduler_does_not_import_records_nothing_and_says_why(monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "vllm.v1.core.sched.scheduler", None)  # import fails
    with caplog.at_level(logging.WARNING, logger="vllm.preemptlog"):
        assert install_vllm("/nonexistent/r.jsonl", "0.35.0", log=logging.getLogger("vllm.preemptlog")) is None
    (msg,) = [r.getMessage() for r in caplog.records]
    assert "vLLM 0.35.0 is not a version this plugin knows (verified: 0.11-0.34)" in msg
    assert "recording nothing" in msg


def test_resumes_re_sent_as_new_requests_are_told_by_num_preemptions(tmp_path):
    """0.34: a resumed request comes back in scheduled_new_reqs. One resume record per preemption, after
    it, with the computed tokens the output gives it; a new request is never a resume."""
    Sched, KVM = make_classes()
    rec = Recorder(str(tmp_path / "r.jsonl"), clock=lambda: 1.0)
    install(rec, scheduler_cls=Sched, kv_manager_cls=KVM, coordinator_classes=(Coordinator,), plan="method")
    steps = drive(Sched(24))
    rs = records(tmp_path / "r.jsonl")
    pre = [(r["step"], r["request_id"]) for r in rs if r.get("action") == "preempt"]
    res = [(r["step"], r["request_id"], r["num_computed_tokens"]) for r in rs if r.get("phase") == "resume"]
    assert len(pre) == len(res) == sum(len(p) for _, p in steps) > 3
    for rid in {r for _, r in pre}:
        ps = [s for s, r in pre if r == rid]
        qs = [s for s, r, _ in res if r == rid]
        assert len(ps) == len(qs) and all(p < q for p, q in zip(ps, qs))
    sched = [r["request_id"] for r in rs if r.get("phase") == "scheduled"]
    assert len(sched) == len(set(sched)) == 8
