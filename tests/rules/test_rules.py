"""The rule engine: every shipped rule's samples, safe rules files, overlays, precedence."""

from __future__ import annotations

import polars as pl
import pytest

from preemptlog.errors import ExitCode, UsageError
from preemptlog.rules import expr as E
from preemptlog.rules import load_rules
from preemptlog.rules.engine import evaluate
from preemptlog.rules.model import RulesError
from preemptlog.rules.samples import run_samples, sample_frame

RS = load_rules()


@pytest.mark.parametrize("result", run_samples(RS), ids=lambda r: f"{r.rule}#{r.index}")
def test_every_shipped_rule_sample(result):
    assert result.ok, f"{result.rule} sample {result.index}: expected {result.expect}, got {result.got}"


def test_every_rule_has_samples_of_each_outcome():
    for rule in RS.rules:
        expects = {s["expect"] for s in rule.samples}
        assert "fired" in expects and "not-fired" in expects, rule.id


def test_every_gate_has_a_rule_and_help():
    gates = {r.gate for r in RS.rules}
    assert gates == {"G1-kv-space", "G2-batch-variance", "G3-queue-overflow", "G4-prefix-conflict"}
    assert set(RS.gates_help) == gates


def _write(tmp_path, text):
    p = tmp_path / "rules.toml"
    p.write_text(text)
    return str(p)


@pytest.mark.parametrize(
    "when",
    [
        "__import__('os').system('touch /tmp/pwned')",
        "open('/etc/passwd')",
        "pool_free_blocks.__class__",
        "eval('1')",
        "lambda: 1",
        "[x for x in y]",
        "pool_free_blocks; import os",
    ],
)
def test_python_code_in_a_rules_file_is_refused(tmp_path, when):
    path = _write(tmp_path, f'[[rule]]\nid = "evil"\ngate = "G1-kv-space"\nwhen = "{when}"\n'.replace('"__', '"__'))
    with pytest.raises(RulesError) as err:
        load_rules([path])
    assert err.value.exit_code == ExitCode.USAGE
    assert "evil" in err.value.one_line() or "rules.toml" in err.value.one_line()


def test_unknown_fields_are_refused(tmp_path):
    path = _write(tmp_path, '[[rule]]\nid = "x"\ngate = "G1-kv-space"\nwhen = "free_blocks > 1"\nexec = "rm -rf /"\n')
    with pytest.raises(RulesError, match="unknown field"):
        load_rules([path])
    path = _write(tmp_path, 'plugins = ["x"]\n')
    with pytest.raises(RulesError, match="unknown field"):
        load_rules([path])


def test_unknown_gate_evidence_and_threshold_are_refused(tmp_path):
    for body, msg in [
        ('gate = "G9"\nwhen = "free_blocks > 1"', "unknown gate"),
        ('gate = "G1-kv-space"\nwhen = "no_such_column > 1"', "unknown name"),
        ('gate = "G1-kv-space"\nwhen = "free_blocks > $nope"', "unknown threshold"),
        ('gate = "G1-kv-space"\nwhen = "free_blocks >"', "unexpected end"),
    ]:
        path = _write(tmp_path, f'[[rule]]\nid = "x"\n{body}\n')
        with pytest.raises(RulesError, match=msg):
            load_rules([path])


def test_invalid_toml_is_refused(tmp_path):
    with pytest.raises(RulesError, match="not valid TOML"):
        load_rules([_write(tmp_path, "[[rule]\n")])


def test_overlay_replaces_adds_and_disables(tmp_path):
    path = _write(
        tmp_path,
        """
[thresholds.kv_ceiling]
value = 90.0
source = "ours"

[[rule]]
id = "G1-kv-exhausted-pressure"
gate = "G1-kv-space"
sub_kind = "kv-exhausted"
priority = 70
requires = ["stats_kv_usage_max"]
when = "stats_kv_usage_max >= $kv_ceiling"

[[rule]]
id = "G2-batch-variance"
gate = "G2-batch-variance"
enabled = false
when = "batch_variance > 1"

[[rule]]
id = "local-G3"
gate = "G3-queue-overflow"
priority = 1
requires = ["stats_waiting_at"]
when = "stats_waiting_at > 1000"
""",
    )
    rs = load_rules([path])
    assert rs.thresholds["kv_ceiling"].value == 90.0 and rs.thresholds["kv_ceiling"].origin == "rules file"
    ids = [r.id for r in rs.active]
    assert "G2-batch-variance" not in ids and ids[0] == "local-G3"
    v = evaluate(sample_frame({"stats_kv_usage_max": 92.0}), rs)
    assert v.get_column("rule")[0] == "G1-kv-exhausted-pressure"


def test_set_overrides_threshold_and_enables_rule():
    rs = load_rules(sets=["kv_ceiling=99", "G2-batch-variance-dynamic.enabled=true"])
    assert rs.thresholds["kv_ceiling"].value == 99.0 and rs.thresholds["kv_ceiling"].origin == "--set"
    assert any(r.id == "G2-batch-variance-dynamic" for r in rs.active)
    for bad in ["nope=1", "kv_ceiling=abc", "noeq", "G2-batch-variance.enabled=maybe"]:
        with pytest.raises(UsageError):
            load_rules(sets=[bad])


def test_precedence_and_all_fired_gates():
    ev = {
        "req_shared_blocks": 2,
        "prefix_conflict_with": "r9",
        "pool_free_blocks": 128,
        "pool_largest_free_run": 4,
        "bt_preempt_blocks_needed": 8,
        "batch_variance": 400.0,
        "sched_pending": 300,
        "req_blocks_held": 0,
        "kind": "marker",
    }
    v = evaluate(sample_frame(ev), RS).row(0, named=True)
    assert v["gate"] == "G4-prefix-conflict"
    assert v["gates_fired"] == ["G1-kv-space", "G2-batch-variance", "G3-queue-overflow", "G4-prefix-conflict"]
    assert v["not_evaluable"] == []
    # vLLM V0 says it preempted a running sequence: it held blocks, so no queue overflow.
    ev.pop("req_blocks_held")
    v = evaluate(sample_frame(ev | {"kind": "logged"}), RS).row(0, named=True)
    assert "G3-queue-overflow" not in v["gates_fired"]


def test_undetermined_lists_what_is_missing():
    v = evaluate(sample_frame({"kind": "marker"}), RS).row(0, named=True)
    assert v["gate"] == "undetermined" and v["confidence"] == "none"
    missing = {x["gate"]: x["missing"] for x in v["not_evaluable"]}
    assert set(missing) == {"G1-kv-space", "G2-batch-variance", "G3-queue-overflow", "G4-prefix-conflict"}
    assert "batch_variance" in missing["G2-batch-variance"]


def test_evidence_cites_values_thresholds_and_provenance():
    ev = {
        "pool_free_blocks": 128,
        "pool_free_blocks_src": "bt.jsonl:4",
        "pool_largest_free_run": 5,
        "pool_largest_free_run_src": "bt.jsonl:4",
        "bt_preempt_blocks_needed": 8,
        "bt_preempt_blocks_needed_src": "bt.jsonl:9",
    }
    v = evaluate(sample_frame(ev), RS).row(0, named=True)
    assert v["rule"] == "G1-fragmentation" and v["sub_kind"] == "fragmentation"
    cited = {e["name"]: e for e in v["evidence"]}
    assert cited["largest_free_run"]["value"] == "5"
    assert cited["largest_free_run"]["threshold"] == "< 8 (needed_blocks)"
    assert cited["largest_free_run"]["src"] == "bt.jsonl:4; bt.jsonl:9"
    assert cited["free_blocks"]["src"] == "bt.jsonl:4; bt.jsonl:9"  # the value, then what it is compared with
    assert any("contiguous" in n for n in v["notes"])


def test_assumed_default_lowers_confidence():
    ev = {
        "sched_pending": 300,
        "bt_preempt_blocks_before": 0,
        "cfg_max_num_seqs": 256,
        "cfg_max_num_seqs_status": "default",
    }
    v = evaluate(sample_frame(ev), RS).row(0, named=True)
    assert v["gate"] == "G3-queue-overflow" and v["confidence"] == "low"
    assert any("assumed default" in n for n in v["notes"])
    ev["cfg_max_num_seqs_status"] = "seen"
    assert evaluate(sample_frame(ev), RS).row(0, named=True)["confidence"] == "medium"


def test_evaluation_is_columnwise_over_many_events():
    rows = [sample_frame({"sched_free_blocks": i, "bt_preempt_blocks_needed": 4}) for i in range(1000)]
    frame = pl.concat(rows).with_columns(event_id=pl.int_range(pl.len()).cast(pl.String))
    v = evaluate(frame, RS)
    assert v.filter(pl.col("rule") == "G1-capacity").height == 4  # free 0..3 < 4


def test_expression_language():
    assert E.names(E.parse("coalesce(a, b) > $t and not c is null")) == ({"a", "b", "c"}, {"t"})
    for bad in ["a +", "max()", "foo(a)", "a ** 2", "a[0]", "a.b", "1 2"]:
        with pytest.raises(E.ExprError):
            E.parse(bad)
    df = pl.DataFrame({"a": [1, None, 5], "b": [2, 3, None]})
    expr = E.compile_expr(E.parse("coalesce(a, b) * 2 >= $t"), pl.col, {"t": 4})
    assert df.select(expr).to_series().to_list() == [False, True, True]
