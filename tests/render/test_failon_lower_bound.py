"""``--fail-on`` on a count that is a lower bound (render/failon.py): a count condition that does not
hold on it is said to be judged on a lower bound (a server whose count is not visible beside counted
ones, V0's sampled lines), never passed in silence; one that holds needs no warning."""

from __future__ import annotations

from preemptlog.render import failon

from ..conftest import FIXTURES, run_cli


def _summary(events: int, quality: str | None, visible: bool = True) -> dict:
    return {
        "events": events,
        "count_visible": visible,
        "preemption_rate": None,
        "reconciliation": {"quality": quality, "total": events},
    }


def test_a_condition_short_of_a_lower_bound_warns():
    j = failon.judge(failon.parse(["count>100"]), _summary(40, "lower bound"))
    assert j.met == ()
    assert len(j.warnings) == 1
    assert "count>100 does not hold on the bundle's 40 preemption(s), a lower bound" in j.warnings[0]


def test_a_condition_met_or_an_exact_count_does_not_warn():
    assert failon.judge(failon.parse(["count>10"]), _summary(40, "lower bound")).warnings == ()
    assert failon.judge(failon.parse(["count>100"]), _summary(40, "exact")).warnings == ()
    # any on 0 events of a lower bound: the true count may be 1
    j = failon.judge(failon.parse(["any"]), _summary(0, "lower bound"))
    assert j.met == () and "any does not hold" in j.warnings[0]


def test_each_unit_names_itself_and_a_unit_without_a_server_is_silent():
    j = failon.judge(failon.parse(["count>9"]), _summary(3, "lower bound"), where="b/v0.log")
    assert "on b/v0.log's 3 preemption(s)" in j.warnings[0]
    assert failon.judge(failon.parse(["count>9"]), _summary(3, "lower bound"), server=False).warnings == ()


def test_a_v0_log_beside_a_stock_v1_log_warns_in_a_real_run(tmp_path, corpus):
    b = tmp_path / "b"
    b.mkdir()
    for name in ("vllm-8219-inline-preempt.log", "vllm-v0171-memsuit-stats-waiting.log"):
        (b / name).write_bytes((corpus / name).read_bytes())
    p = run_cli("analyze", str(b), "-q", "-f", "json", "--fail-on", "count>5000")
    assert p.returncode == 0, p.stderr
    assert "count>5000 does not hold on the bundle's 4251 preemption(s), a lower bound" in p.stderr


def test_an_incident_whose_count_is_not_visible_makes_the_total_a_lower_bound(tmp_path):
    """Two servers side by side: a/ counted by its /metrics scrape (242), b/ a stock V1 log alone. The
    bundle's 242 leaves b's preemptions out: a count condition short of it says so, naming b."""
    for name in ("a", "b"):
        (tmp_path / "two" / name).mkdir(parents=True)
    for f in (FIXTURES / "demo").iterdir():
        if f.is_file() and (f.name == "vllm.log" or f.suffix == ".prom"):
            (tmp_path / "two" / "a" / f.name).write_bytes(f.read_bytes())
    # b is another server: the same lines from other processes (a byte-for-byte copy of a's log would be
    # one file found twice, read once)
    own = (FIXTURES / "demo" / "vllm.log").read_bytes().replace(b"pid=30490", b"pid=40490")
    (tmp_path / "two" / "b" / "vllm.log").write_bytes(own)
    args = ["analyze", str(tmp_path / "two"), "--tz", "UTC", "-q", "-f", "json"]
    p = run_cli(*args, "--fail-on", "count>300")
    assert p.returncode == 0, p.stderr
    said = " ".join(p.stderr.split())
    assert "count>300 does not hold on the bundle's 242 preemption(s), a lower bound" in said
    assert "two/b/vllm.log: count not visible" in said
    p = run_cli(*args, "--fail-on", "count>30")
    assert p.returncode == 4 and "lower bound" not in p.stderr
