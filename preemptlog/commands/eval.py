"""``preemptlog eval``: score the verdicts against simulated bundles' ground truth."""

from __future__ import annotations

from enum import Enum
from typing import Annotated

import typer

from ..errors import ExitCode
from .common import DebugOpt, QuietOpt
from .options import RulesOpt, ThresholdOpt
from .runner import guarded, writing_to


class EvalFormat(str, Enum):
    table = "table"
    json = "json"


def register(app: typer.Typer) -> None:
    app.command(name="eval", short_help="Score verdicts against a simulated bundle's truth.")(eval_command)


def eval_command(
    bundles: Annotated[list[str], typer.Argument(help="Bundles written by `preemptlog simulate`.", show_default=False)],
    rules: RulesOpt = None,
    set_: ThresholdOpt = None,
    format: Annotated[EvalFormat | None, typer.Option("--format", "-f", help="table or json.")] = None,
    # eval writes nothing on stderr but its errors: -q is accepted like every command's
    quiet: QuietOpt = False,
    debug: DebugOpt = False,
) -> None:
    """Score gate verdicts and event counts against simulated bundles (truth.jsonl).

    \b
    Examples:
      preemptlog simulate mixed -o /tmp/mixed --family guide
      preemptlog eval /tmp/mixed
      bench/accuracy            # the standard scenario suite, table for docs/simulate.md

    Prints, per bundle, event recall (events found / preemptions the log can
    show), gate accuracy on events matched to the truth by their log line, G1
    sub-kind accuracy, and for all bundles together per-gate precision, recall
    and the confusion matrix (rows: truth; columns: verdict).
    """

    def body() -> int:
        import json
        import sys

        from ..simulate.evaluate import aggregate, score_bundle
        from .options import note_old_set

        note_old_set(set_)
        scores = [score_bundle(b, rules_files=list(rules or []), sets=list(set_ or [])) for b in bundles]
        total = aggregate(scores)
        fmt = format or (EvalFormat.table if sys.stdout.isatty() else EvalFormat.json)
        if fmt is EvalFormat.json:
            doc = {"bundles": [s.as_dict() for s in scores], "total": total}
            with writing_to(None):
                sys.stdout.write(json.dumps(doc, indent=2) + "\n")
            return ExitCode.OK
        with writing_to(None):
            _print_tables(scores, total)
        return ExitCode.OK

    guarded(debug, body)


def _print_tables(scores, total) -> None:
    """The tables of ``eval`` on standard output (rich)."""
    from rich.table import Table

    from ..outputs.console import console as make_console
    from ..outputs.safe import table_box, text
    from ..simulate.evaluate import PREDICTED

    console = make_console()
    t = Table(title=text("per bundle"), header_style="bold", box=table_box())
    for c in ("scenario", "family", "truth", "visible", "events", "recall", "matched", "gate acc.", "G1 sub acc."):
        t.add_column(c)
    for s in scores:
        acc = f"{s.accuracy:.1%}" if s.accuracy is not None else "-"
        rec = f"{s.recall_visible:.1%}" if s.recall_visible is not None else "-"
        sub = f"{s.sub_correct / s.sub_total:.1%}" if s.sub_total else "-"
        t.add_row(
            text(s.scenario),
            text(s.family),
            text(s.truth_total),
            text(s.truth_visible),
            text(s.events),
            text(rec),
            text(s.matched),
            text(acc),
            text(sub),
        )
    console.print(t)
    g = Table(title=text("per gate (matched events)"), header_style="bold", box=table_box())
    for c in ("gate", "precision", "recall", "support"):
        g.add_column(c)
    for gate, m in total["per_gate"].items():
        fmt_ = lambda x: f"{x:.1%}" if x is not None else "-"  # noqa: E731
        g.add_row(text(gate), text(fmt_(m["precision"])), text(fmt_(m["recall"])), text(m["support"]))
    console.print(g)
    c = Table(title=text("confusion (rows: truth, columns: verdict)"), header_style="bold", box=table_box())
    c.add_column("truth")
    for p in PREDICTED:
        c.add_column(p)
    for gate, row in total["confusion"].items():
        c.add_row(text(gate), *[text(row[p]) for p in PREDICTED])
    console.print(c)
    acc = total["gate_accuracy"]
    console.print(
        text(
            f"gate accuracy {acc:.1%} over {total['matched_events']} matched events; "
            f"event recall {total['event_recall_visible']:.1%}"
            if acc is not None and total["event_recall_visible"] is not None
            else "no matched events"
        )
    )
