"""The engine registry (preemptlog/engines/registry.py): every engine fills its record, a third engine
is seen by the generic stages without a change to them, and no stage outside engines/ names an engine.

The fake engine ("fakeng", whose preemption is an *eviction*) is registered by a fixture and taken
out again after the test: its metric names reach the Prometheus source through the registry's hook
(sources.registry.MetricTable), its words the headline and the findings' words through model.kinds,
its name the rules' ``engine =`` check and its mechanisms their vocabulary.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import polars as pl
import pytest

from preemptlog import AnalyzeOptions, analyze, engines
from preemptlog.engines import Engine, FixPart, LogCapability, ServerStart
from preemptlog.model import kinds
from preemptlog.model.findings import headline_part
from preemptlog.sources import prometheus as prom
from preemptlog.sources import sniff
from preemptlog.sources.registry import MetricTable, metric_tables

from ..conftest import ROOT

FAKE = "fakeng"


def test_builtin_engines_are_registered_in_order_with_the_default_first():
    assert engines.names()[: len(engines.BUILTIN_ENGINES)] == tuple(engines.BUILTIN_ENGINES)
    assert engines.registered()[0].name == engines.DEFAULT == kinds.default()
    assert engines.get(None) is engines.default()
    assert [t.engine for t in metric_tables()][:2] == list(engines.BUILTIN_ENGINES)


@pytest.mark.parametrize("name", ["vllm", "sglang"])
def test_every_registered_engine_fills_its_record(name):
    e = engines.get(name)
    for f in dataclasses.fields(Engine):
        if f.name in engines.OPTIONAL_FIELDS:
            continue
        value = getattr(e, f.name)
        if f.name == "record_prefix":  # None: the log pass's own record kinds, the default engine's
            assert (value is None) == e.default, name
            continue
        if f.name == "not_replayed":  # None: the what-if model is this engine's scheduler
            assert (value is None) == (e is engines.replayed()), name
            continue
        assert value is not None, f"{name}.{f.name}"
        if isinstance(value, str | tuple | dict | list):
            assert value or f.name in ("fix_tie_order",), f"{name}.{f.name} is empty"
    assert e.metrics.engine == e.name and e.metrics.metrics and e.metrics.prefix
    assert all(n.startswith(e.metrics.prefix + ":") for n in [*e.metrics.metrics, *e.metrics.created])
    assert e.histogram_metric.startswith(e.metrics.prefix + ":")
    assert all(f.engine == e.name for f in e.code_facts) and e.code_facts
    assert "{n}" in e.prom_counter_note
    assert e.plural(1) == e.noun and e.plural(2) == e.noun + "s"
    assert kinds.kind(name).display == e.display


def test_every_optional_contribution_is_made_by_some_engine():
    for f in engines.OPTIONAL_FIELDS:
        assert any(getattr(e, f) is not None for e in engines.registered()), f
    assert engines.log_reader() is engines.default().log_facts
    assert engines.replayed() is engines.default()


def test_the_record_kinds_of_an_engine_are_its_own():
    recs = pl.DataFrame({"kind": ["cfg_engine", "sgl_retract", "stats_v1", "time_only"]})
    own = {e.name: recs.filter(engines.owns(e)).get_column("kind").to_list() for e in engines.registered()}
    assert own["sglang"] == ["sgl_retract"]
    assert own["vllm"] == ["cfg_engine", "stats_v1", "time_only"]
    assert engines.only_log(recs) is None
    assert engines.only_log(recs.filter(pl.col("kind") != "cfg_engine").filter(pl.col("kind") != "stats_v1")).name == (
        "sglang"
    )


# ------------------------------------------------------------------------------ a third engine


def _fake() -> Engine:
    table = MetricTable(
        engine=FAKE,
        prefix=FAKE,
        metrics={
            f"{FAKE}:num_evicted_total": ("preemptions", "counter", 1.0),
            f"{FAKE}:kv_used": ("kv_usage", "gauge", 100.0),
        },
        created={},
        line_starts=(FAKE,),
    )
    return Engine(
        name=FAKE,
        display="FakeEngine",
        noun="eviction",
        verb="evicted",
        log_kinds=(),
        record_prefix="fke_",
        metrics=table,
        histogram_metric=f"{FAKE}:num_evictions",
        mechanisms=("fake-eviction",),
        code_facts=(),
        defaults=lambda seen: [],
        stats_families=(FAKE,),
        server_start=lambda own: ServerStart(start=pl.lit(False), dated=pl.lit(False), version=pl.lit(FAKE)),
        log_capability=lambda a: LogCapability(has_log=True, family="FakeEngine", counts="exact"),
        fixes=lambda a, findings, verdicts: FixPart(changes=[], know=[], dropped=[]),
        fix_tie_order=(),
        prom_counter_note="{n} event(s) come from FakeEngine's eviction counter.",
        not_replayed="the what-if model does not replay FakeEngine",
    )


@pytest.fixture
def fake_engine():
    engines.register_engine(_fake())
    try:
        yield engines.get(FAKE)
    finally:
        engines.unregister_engine(FAKE)
    assert FAKE not in engines.names() and FAKE not in [t.engine for t in metric_tables()]
    assert FAKE not in [k.name for k in kinds.declared()]


def _scrapes(path: Path) -> Path:
    path.write_text(
        f"# scrape 2026-03-14T10:00:00Z\n"
        f'{FAKE}:num_evicted_total{{engine="0"}} 2\n'
        f'{FAKE}:kv_used{{engine="0"}} 0.5\n'
        f"# scrape 2026-03-14T10:00:10Z\n"
        f'{FAKE}_num_evicted_total{{engine="0"}} 5\n'
        f'{FAKE}:kv_used{{engine="0"}} 0.97\n'
    )
    return path


def test_a_third_engine_s_metric_names_are_read_by_the_prometheus_source(fake_engine, tmp_path):
    assert prom.canonical_name(f"ray_{FAKE}_num_evicted_total") == f"{FAKE}:num_evicted_total"
    f = _scrapes(tmp_path / "fake.prom")
    assert sniff(f.read_text())[0] == "prometheus"
    a = analyze([str(f)], AnalyzeOptions())
    ev = a.events
    assert ev.height == 3  # the counter's increase 2 -> 5 (its underscore spelling read as the same name)
    assert set(ev.get_column("engine_kind").to_list()) == {FAKE}
    s = a.summary()
    assert s["engine_kinds"] == {FAKE: 3} and s["engine_kind"] == FAKE
    assert any("FakeEngine's eviction counter" in n for n in a.notes)  # the honesty note in its words
    assert not engines.get("vllm").metrics.metrics.keys() & fake_engine.metrics.metrics.keys()


def test_a_third_engine_s_words_are_the_headline_s(fake_engine):
    from preemptlog.render.summary import headline

    assert engines.noun({FAKE: 3}, 3) == "evictions"
    assert engines.noun({FAKE: 1, "vllm": 1}, 2) == "preemptions/evictions"
    s = {"count_visible": True, "events": 3, "engine_kinds": {FAKE: 3}, "by_kind": {"logged": 3}, "cause": {}}
    assert headline(s).startswith("3 evictions")
    hist = {"requests_preempted_more_than_once": 2, "engine_kind": FAKE}
    f = type("F", (), {"recompute": {}, "thrash": {"histogram": hist}, "stall": {}, "mechanisms": {}})()
    assert "2 requests evicted more than once (FakeEngine's histogram)" in headline_part(f)  # type: ignore[arg-type]


def test_a_third_engine_s_name_and_mechanisms_are_the_rules(fake_engine, tmp_path):
    from preemptlog.rules import load_rules
    from preemptlog.rules.model import RulesError

    rule = (
        "[[mechanism]]\n"
        'id = "fake-evict"\n'
        'mechanism = "fake-eviction"\n'
        'engine = "fakeng"\n'
        'when = "true"\n'
        'description = "a FakeEngine eviction"\n'
    )
    path = tmp_path / "fake.toml"
    path.write_text(rule)
    try:
        load_rules([str(path)])
    except RulesError as exc:  # a complete rule set may want more; never the engine or the mechanism
        assert "engine must be one of" not in str(exc) and "unknown mechanism" not in str(exc), exc
    path.write_text(rule.replace('engine = "fakeng"', 'engine = "nosuch"'))
    with pytest.raises(RulesError, match="engine must be one of vllm, sglang, fakeng"):
        load_rules([str(path)])


# ------------------------------------------------------------------- no engine named outside engines/

# (file, why it names an engine) kept on purpose: not a branch on an event's engine.
ALLOWED = {
    "preemptlog/capture/": "records a running vLLM (its plugin, its CLI, its version): vLLM the program",
    "preemptlog/whatif/core.py": "the what-if's backend choice: the model or a real vLLM process (--engine vllm)",
    "preemptlog/whatif/engine_vllm.py": "the real-vLLM backend of the what-if",
    "preemptlog/commands/whatif.py": "the --engine choice of the what-if backend",
    "preemptlog/fleet/inputs.py": "log file names (vllm.log) a fleet listing recognises",
    "preemptlog/render/each.py": "TODO (helper-2's file): summary engine_kind's fallback should be engines.DEFAULT",
}


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def _engine_literals(
    text: str, names: tuple[str, ...], prefixes: tuple[str, ...], records: tuple[str, ...] = ()
) -> list[tuple[int, str]]:
    """(line, value) of the string constants in code (not docstrings) that are an engine's name, one
    of its metric names (``<prefix>:name``) or one of its record kinds or frames (``records``: the
    engines' ``record_prefix``, e.g. ``sgl_retractions``)."""
    tree = ast.parse(text)
    docs = _docstrings(tree)
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            v = node.value
            if (
                v in names
                or any(v.startswith(p + ":") and " " not in v for p in prefixes)
                or any(v.startswith(r) and " " not in v for r in records)
            ):
                hits.append((node.lineno, v))
    return sorted(hits)


def test_no_module_outside_engines_names_an_engine_in_code():
    names = engines.names()
    prefixes = tuple(e.metrics.prefix for e in engines.registered())
    records = tuple(e.record_prefix for e in engines.registered() if e.record_prefix)
    bad = []
    for path in sorted((ROOT / "preemptlog").rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        if rel.startswith("preemptlog/engines/") or any(rel.startswith(a) for a in ALLOWED):
            continue
        bad += [f"{rel}:{line}: {v!r}" for line, v in _engine_literals(path.read_text(), names, prefixes, records)]
    assert not bad, "engine names in code outside engines/ (ask the registry):\n" + "\n".join(bad)


def test_the_literal_check_sees_a_comparison_and_a_metric_name():
    text = '"""Doc naming vllm."""\nx = kind == "sglang"\ny = "vllm:num_preemptions_total"\nz = "vLLM words"\n'
    got = _engine_literals(text, ("vllm", "sglang"), ("vllm", "sglang"))
    assert got == [(2, "sglang"), (3, "vllm:num_preemptions_total")]
    frames = 'r = a.frames.get("sgl_retractions")\nw = "sgl_ and more words"\n'
    assert _engine_literals(frames, ("vllm", "sglang"), (), ("sgl_",)) == [(1, "sgl_retractions")]


def test_the_capacity_finding_reads_the_keys_its_lever_engine_declares():
    """findings/capacity.py names no engine's configuration key: each engine declares the keys its
    levers read (``capacity_keys``), and the default engine's are read with them (the pool's)."""
    text = (ROOT / "preemptlog/findings/capacity.py").read_text()
    for e in engines.registered():
        for key in e.capacity_keys or ():
            assert f'"{key}"' not in text, key
    assert "max_running_requests" in (engines.get("sglang").capacity_keys or ())
    assert {"gpu_memory_utilization", "max_num_seqs"} <= set(engines.default().capacity_defaults or ())


def test_allowed_files_exist():
    for rel in ALLOWED:
        assert (ROOT / rel).exists(), rel
