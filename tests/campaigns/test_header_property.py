"""Property tests for the vLLM line header parser: any combination of wrappings, same fields."""

from __future__ import annotations

import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from preemptlog import AnalyzeOptions, analyze
from preemptlog.sources import vllm_log

from ..conftest import write_lines

ESC = "\x1b"
ids = st.text(alphabet=string.ascii_lowercase + string.digits + "-", min_size=1, max_size=20).filter(
    lambda s: s[0].isalnum() and s[-1].isalnum()
)
procs = st.sampled_from(
    [
        "APIServer pid=4121",
        "EngineCore_DP0 pid=7",
        "VllmWorker rank=3 pid=771996",
        "Worker_TP1 pid=9",
        "RayWorkerWrapper pid=581, ip=10.225.128.18",
        "VllmWorkerProcess pid=2311",
    ]
)
prefixes = st.text(alphabet=string.ascii_letters + "_:", min_size=0, max_size=8)


@st.composite
def wrapped_lines(draw):
    mo, dd = draw(st.integers(1, 12)), draw(st.integers(1, 28))
    hh, mi, ss = draw(st.integers(0, 23)), draw(st.integers(0, 59)), draw(st.integers(0, 59))
    level = draw(st.sampled_from(["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]))
    src = draw(st.sampled_from(["scheduler.py:1775", "v1/core/sched/scheduler.py:990", "metrics.py:349"]))
    bracket = draw(st.booleans())
    header = f"{level} {mo:02d}-{dd:02d} {hh:02d}:{mi:02d}:{ss:02d} " + (f"[{src}]" if bracket else f"{src}]")
    proc = draw(st.one_of(st.none(), procs))
    colour = draw(st.booleans())
    vprefix = draw(prefixes)
    parts = []
    if proc:
        p = f"({proc})"
        parts.append(f"{ESC}[1;36m{p}{ESC}[0;0m " if colour else p + " ")
    if vprefix:
        parts.append(vprefix + " ")
    kind = draw(st.sampled_from(["v0_preempt", "stats", "marker"]))
    rid = draw(ids)
    if kind == "v0_preempt":
        n = draw(st.integers(1, 5000))  # big counters are tested in test_events; keep examples fast
        msg = (
            f"Sequence group {rid} is preempted by PreemptionMode.SWAP mode because there is not enough KV "
            f"cache space. total_num_cumulative_preemption={n}"
        )
    elif kind == "stats":
        msg = (
            "Engine 000: Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, "
            "Running: 3 reqs, Waiting: 4 reqs, GPU KV cache usage: 5.0%, Prefix cache hit rate: 6.0%"
        )
    else:
        msg = f"Req-{rid} PREEMPTED"
    line = "".join(parts) + header + " " + msg
    outer = draw(st.sampled_from(["none", "compose", "rfc", "compose+rfc", "kubectl"]))
    rfc = None
    if "rfc" in outer:
        rfc = f"2024-{mo:02d}-{dd:02d}T{hh:02d}:{mi:02d}:{ss:02d}.123456789Z"
        line = f"{rfc} {line}"
    if "compose" in outer:
        line = f"vllm-1  | {line}"
    if outer == "kubectl":
        line = f"[pod/vllm-0/vllm] {line}"
    expected = {
        "kind": kind,
        "level": level,
        "mo": mo,
        "dd": dd,
        "hh": hh,
        "mi": mi,
        "ss": ss,
        "proc": proc,
        "fdate": f"2024-{mo:02d}-{dd:02d}" if rfc else None,
        # the container: docker compose's service, kubectl --prefix's pod
        "compose": "vllm-1" if "compose" in outer else "vllm-0" if outer == "kubectl" else None,
    }
    return line, expected, rid


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=wrapped_lines())
def test_header_fields_recovered(tmp_path, case):
    line, expected, _ = case
    path = write_lines(tmp_path / "x.log", [line])
    df = vllm_log.read(str(path), 0)
    assert df.height == 1, line
    row = df.row(0, named=True)
    for key, value in expected.items():
        assert row[key] == value, (key, row[key], value, line)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    cases=st.lists(wrapped_lines(), min_size=1, max_size=8),
    noise=st.lists(st.text(alphabet=string.printable.replace("\n", "").replace("\r", ""), max_size=80), max_size=8),
)
def test_noise_lines_do_not_change_events(tmp_path, cases, noise):
    """Injecting unrelated lines never changes the events found (ids aside)."""
    lines = [c[0] for c in cases]
    noise = [n for n in noise if "PREEMPTED" not in n and "preempted" not in n and "Preemptions" not in n]
    clean = write_lines(tmp_path / "clean.log", lines)
    mixed_lines = []
    for i, ln in enumerate(lines):
        mixed_lines.extend(noise[i % len(noise) :][:1] if noise else [])
        mixed_lines.append(ln)
    mixed = write_lines(tmp_path / "mixed.log", mixed_lines + noise)
    cols = ["kind", "request_id", "mode", "cumulative", "time"]
    a = analyze([str(clean)], AnalyzeOptions(tz="UTC", year=2024)).events.select(cols)
    b = analyze([str(mixed)], AnalyzeOptions(tz="UTC", year=2024)).events.select(cols)
    assert a.equals(b)
