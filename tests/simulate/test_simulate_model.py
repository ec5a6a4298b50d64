"""The scheduler model behind `preemptlog simulate`: invariants and the truth it records."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from preemptlog.simulate.model import BlockPool, Params, run_model

SIMULATE_DIR = Path(__file__).resolve().parents[2] / "preemptlog" / "simulate"


def _check_truth(sim) -> None:
    """Every truth row agrees with the gate that produced it (numbers at the decision)."""
    p = sim.p
    for i, row in enumerate(sim.truth, 1):
        assert row["n"] == i
        gate, sub = row["gate"], row["sub_kind"]
        phases = {
            "G1-kv-space": ("extend", "admission"),
            "G2-batch-variance": ("batch",),
            "G3-queue-overflow": ("arrival",),
            "G4-prefix-conflict": ("admission",),
        }
        assert row["phase"] in phases[gate]
        if gate == "G1-kv-space":
            assert sub in ("capacity", "fragmentation")
            need = row["needed_blocks"]
            if sub == "capacity":
                assert row["free_blocks"] < need or (
                    p.g1_admission and row["free_blocks"] - need < int(p.watermark * p.num_gpu_blocks)
                )
            else:
                assert row["free_blocks"] >= need
                assert row["largest_free_run"] < need
        elif gate == "G2-batch-variance":
            assert sub is None
            assert row["variance"] > row["variance_threshold"] - 0.05
        elif gate == "G3-queue-overflow":
            assert row["pending"] >= p.max_num_seqs
            assert row["victim_is_requester"]
        elif gate == "G4-prefix-conflict":
            assert row["ref_count"] > 1
            assert row["prefix_id"]
        else:  # pragma: no cover
            raise AssertionError(gate)
        assert row["largest_free_run"] <= row["free_blocks"]
        assert 0 <= row["free_blocks"] <= p.num_gpu_blocks


workloads = st.sampled_from(
    [
        [{"name": "a", "weight": 1.0, "prompt": ["uniform", 4, 200], "output": ["uniform", 1, 120], "prefix": 0.5}],
        [
            {"name": "s", "weight": 0.6, "prompt": ["uniform", 4, 30], "output": ["uniform", 1, 20], "prefix": 0.0},
            {
                "name": "l",
                "weight": 0.4,
                "prompt": ["uniform", 100, 400],
                "output": ["uniform", 50, 300],
                "prefix": 0.8,
            },
        ],
    ]
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    block_size=st.sampled_from([4, 8, 16]),
    blocks=st.integers(24, 160),
    chunk=st.integers(1, 4),
    cap=st.booleans(),
    frag=st.booleans(),
    admission=st.booleans(),
    g2=st.sampled_from(["off", "fixed", "dynamic"]),
    g3=st.booleans(),
    g4=st.booleans(),
    prefix=st.booleans(),
    spec=st.booleans(),
    delayed=st.booleans(),
    workload=workloads,
)
def test_model_invariants_hold_every_step(
    seed, block_size, blocks, chunk, cap, frag, admission, g2, g3, g4, prefix, spec, delayed, workload
):
    p = Params(
        duration=3.0,
        warmup=0.5,
        max_drain=6.0,
        block_size=block_size,
        num_gpu_blocks=blocks,
        max_num_seqs=8,
        max_num_batched_tokens=512,
        max_model_len=1024,
        rate=12.0,
        workload=workload,
        enable_prefix_caching=prefix,
        num_prefixes=3,
        prefix_len=["uniform", 8, 64],
        duplicate_prob=0.3,
        speculative=spec,
        g1_capacity=cap,
        g1_fragmentation=frag,
        g1_admission=admission,
        g2_variance=g2,
        variance_threshold=16.0,
        g3_queue=g3,
        g4_prefix=g4,
        extend_chunk=chunk,
        delayed=delayed,
    )
    sim = run_model(p, seed, check=True)  # BlockPool.check after every step
    _check_truth(sim)
    # After the run every block is back: free + cached, refcounts zero, except the draft reservation.
    assert sim.pool.num_free == p.num_gpu_blocks - len(sim.reserved)
    assert all(r >= 0 for r in sim.pool.ref)
    # every request either finished or was aborted at the drain limit
    assert all(r.state in ("done", "aborted") for r in sim.requests)


def test_block_pool_runs_and_prefix_cache():
    pool = BlockPool(10, 16)
    a = pool.take_run(3)
    b = pool.take_scattered(2)
    assert (a, b) == ([0, 1, 2], [3, 4])
    pool.release([1])
    assert pool.regions() == [(1, 1), (5, 5)]
    assert (pool.largest_run(), pool.num_free) == (5, 6)
    pool.register("p0", [0, 2])
    pool.share([0])
    assert pool.ref[0] == 2
    pool.release([0, 0, 2])  # the shared block needs two releases
    assert (pool.state[0], pool.state[2]) == (2, 2)  # free, still cached
    assert pool.num_free == 8 and pool.lookup("p0") == [0, 2]
    c = pool.take_scattered(1)
    assert c == [1]  # uncached free blocks go first
    d = pool.take_run(3)
    e = pool.take_run(2)
    assert (d, e) == ([5, 6, 7], [8, 9]) and "p0" in pool.prefixes
    f = pool.take_run(1)  # only cached blocks are left: block 0 is evicted with its prefix
    assert f == [0] and "p0" not in pool.prefixes and pool.state[2] == 1
    pool.check([b, c, d, e, f])
    with pytest.raises(RuntimeError):
        pool.release([0, 0])


def test_fragmentation_truth_numbers():
    """G1 fragmentation: enough free blocks in total, but no run as long as needed."""
    from preemptlog.simulate.scenarios import SCENARIOS

    p = Params()
    for k, v in SCENARIOS["g1-fragmentation"].spec()["params"].items():
        setattr(p, k, v)
    p.duration = 45.0
    sim = run_model(p, 0, check=True)
    frag = [r for r in sim.truth if r["sub_kind"] == "fragmentation"]
    assert frag, "the scenario should produce fragmentation preemptions"
    for r in frag:
        assert r["free_blocks"] >= r["needed_blocks"] > r["largest_free_run"]
    assert {r["gate"] for r in sim.truth} == {"G1-kv-space"}


@pytest.mark.parametrize("name", ["g2-variance", "g3-queue", "g4-prefix", "g1-capacity"])
def test_single_gate_scenarios_only_fire_their_gate(name):
    from preemptlog.simulate.scenarios import SCENARIOS

    p = Params()
    for k, v in SCENARIOS[name].spec()["params"].items():
        setattr(p, k, v)
    p.duration = 60.0 if name != "g1-capacity" else 70.0
    sim = run_model(p, 0)
    gates = {r["gate"] for r in sim.truth}
    expected = {
        "g2-variance": "G2-batch-variance",
        "g3-queue": "G3-queue-overflow",
        "g4-prefix": "G4-prefix-conflict",
        "g1-capacity": "G1-kv-space",
    }[name]
    assert gates == {expected}
    _check_truth(sim)


def test_victims_are_the_newest_running_request():
    """G1 and G2 victims are the last (newest) running request, as vLLM's running.pop()."""
    from preemptlog.simulate.model import NullSink, Sim
    from preemptlog.simulate.scenarios import SCENARIOS

    seen = []

    class Probe(NullSink):
        def preempt(self, row, victim, step, t):
            if row["gate"] == "G1-kv-space":
                seen.append(sim.running[-1] is victim)
            elif row["gate"] == "G2-batch-variance":
                seen.append([r for r in sim.running if not r.g2_exempt][-1] is victim)

    p = Params()
    for k, v in SCENARIOS["mixed"].spec()["params"].items():
        setattr(p, k, v)
    p.duration = 40.0
    sim = Sim(p, 3, Probe())
    sim.run()
    assert len(seen) > 10 and all(seen)


def test_simulate_imports_nothing_from_the_analysis_side():
    forbidden = ("preemptlog.rules", "preemptlog.joiner", "preemptlog.analysis")
    # evaluate.py is the scorer: it runs the analysis on the simulated bundles by design; the simulator's
    # own modules (what writes the bundle and its truth) know nothing of the analysis.
    for path in sorted(p for p in SIMULATE_DIR.glob("*.py") if p.name != "evaluate.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                mod = node.module or ""
                if node.level:  # relative: resolve against preemptlog.simulate
                    base = ["preemptlog", "simulate"][: 2 - (node.level - 1)] if node.level <= 2 else []
                    mod = ".".join(base + ([mod] if mod else []))
                names = [mod] + [f"{mod}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for n in names:
                assert not n.startswith(forbidden), f"{path.name} imports {n}"
