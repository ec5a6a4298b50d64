"""``preemptlog rules``: the rules, their thresholds and where each default comes from."""

from __future__ import annotations

from enum import Enum
from typing import Annotated

import typer

from ..errors import ExitCode
from .common import DebugOpt, QuietOpt
from .options import RulesOpt, ThresholdOpt
from .runner import guarded, writing_to


class RulesFormat(str, Enum):
    table = "table"
    json = "json"


def register(app: typer.Typer) -> None:
    app.command(name="rules", short_help="List the rules and thresholds; --check runs their samples.")(rules_command)


def rules_command(
    rules: RulesOpt = None,
    set_: ThresholdOpt = None,
    format: Annotated[RulesFormat | None, typer.Option("--format", "-f", help="table or json.")] = None,
    check: Annotated[
        bool, typer.Option("--check", help="Run every rule's sample inputs; exit 7 if one fails.")
    ] = False,
    evidence: Annotated[
        bool, typer.Option("--evidence", help="List the evidence names a rule condition may use.")
    ] = False,
    quiet: QuietOpt = False,
    debug: DebugOpt = False,
) -> None:
    """List the rules, thresholds (with where each default comes from) and precedence.

    \b
    Examples:
      preemptlog rules
      preemptlog rules --rules ours.toml --threshold kv_ceiling=90 --check
      preemptlog rules --evidence
      preemptlog rules -f json | jq '.thresholds'

    Rules live in preemptlog/rules/default.toml. A rules file given with
    --rules overlays it: a rule with the same id replaces the shipped one, new
    ids are added, `enabled = false` switches a rule off. When several rules
    fire for one event, the lowest `priority` gives the verdict (ties: file
    order); every fired gate is still reported. Conditions use a small
    expression language (comparisons, and/or/not, + - * / %, max, min, abs,
    coalesce, ceil, floor, present, $threshold): nothing in a rules file is
    run as code.
    """

    def body() -> int:
        import json
        import sys

        from ..rules import load_rules
        from ..rules.model import known_names
        from ..rules.samples import run_samples
        from .options import note_old_set

        note_old_set(set_)
        rs = load_rules(list(rules or []), list(set_ or []))
        fmt = format or (RulesFormat.table if sys.stdout.isatty() else RulesFormat.json)
        doc = rs.describe()
        results = run_samples(rs) if check else []
        if evidence:
            from ..joiner import EVIDENCE_SCHEMA

            names = sorted(known_names())
            doc = {
                "evidence": [{"name": n, "type": EVIDENCE_SCHEMA.get(n, "event column")} for n in names],
                "derived": rs.derived,
            }
        if check:
            doc["samples"] = [
                {"rule": r.rule, "sample": r.index, "expect": r.expect, "got": r.got, "ok": r.ok} for r in results
            ]
        with writing_to(None):
            if fmt is RulesFormat.json:
                sys.stdout.write(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
            else:
                _print(doc, evidence)
        failed = [r for r in results if not r.ok]
        for r in failed:
            sys.stderr.write(f"preemptlog: rule {r.rule} sample {r.index}: expected {r.expect}, got {r.got}\n")
        if check and not quiet:  # -q: only the failed samples (they explain exit 7)
            rules_n = len({r.rule for r in results})
            sys.stderr.write(
                f"{len(results) - len(failed)} of {len(results)} sample(s) of {rules_n} rule(s) passed"
                + (f", {len(failed)} failed\n" if failed else "\n")
            )
        if failed:
            return ExitCode.CHECK_FAILED
        return ExitCode.OK

    guarded(debug, body)


def _print(doc: dict, evidence: bool) -> None:
    from rich.table import Table

    from ..outputs.console import console as make_console
    from ..outputs.safe import table_box, text

    console = make_console()
    if evidence:
        t = Table(title=text("evidence names"), header_style="bold", box=table_box())
        t.add_column("name")
        t.add_column("type")
        for e in doc["evidence"]:
            t.add_row(text(e["name"]), text(e["type"]))
        console.print(t)
        d = Table(title=text("derived values"), header_style="bold", box=table_box())
        d.add_column("name")
        d.add_column("expression", overflow="fold")
        for k, v in doc["derived"].items():
            d.add_row(text(k), text(v))
        console.print(d)
        return
    t = Table(title=text("thresholds"), header_style="bold", box=table_box())
    for c in ("name", "value", "origin", "where the default comes from"):
        t.add_column(c, overflow="fold")
    for th in doc["thresholds"]:
        t.add_row(text(th["name"]), text(th["value"]), text(th["origin"]), text(th["source"]))
    console.print(t)
    r = Table(title=text("rules, in precedence order"), header_style="bold", box=table_box())
    for c in ("priority", "id", "gate", "on", "condition", "samples"):
        r.add_column(c, overflow="fold")
    for rule in doc["rules"]:
        gate = rule["gate"] + (f"/{rule['sub_kind']}" if rule["sub_kind"] else "")
        r.add_row(
            text(rule["priority"]),
            text(rule["id"]),
            text(gate),
            text("yes" if rule["enabled"] else "no"),
            text(rule["when"]),
            text(rule["samples"]),
        )
    console.print(r)
    for s in doc.get("samples", []):
        mark = "ok" if s["ok"] else "FAIL"
        console.print(text(f"{mark}  {s['rule']} sample {s['sample']}: expected {s['expect']}, got {s['got']}"))
    console.print(text("files: " + ", ".join(doc["files"])))
