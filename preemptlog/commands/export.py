"""``preemptlog export grafana|openmetrics SOURCE``: to the dashboards operators already use."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from ..errors import ExitCode
from .common import DebugOpt, QuietOpt, command_group
from .options import ANALYSIS, AnalysisArgs, analysis_options
from .runner import guarded, imports_done, writing_to

app = command_group(
    "export", "Export a bundle's or a fleet dataset's preemptions: Grafana annotations, OpenMetrics for backfill."
)

SourceArg = Annotated[
    str,
    typer.Argument(
        help="An incident bundle (folder, archive, log), analysed with the analysis options (as analyze), or a "
        "fleet dataset (fleet run --out).",
        metavar="SOURCE",
        show_default=False,
    ),
]
OutOpt = Annotated[
    str | None,
    typer.Option("--output", "-o", metavar="FILE", help="Write here (atomically); - is stdout (the default)."),
]


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="export", short_help="Grafana annotations or OpenMetrics series from a bundle or dataset.")


def _load(source: str, analysis: AnalysisArgs, debug: bool):
    """The rows of a fleet dataset, or of a bundle analysed now with the analysis options."""
    from ..fleet.export import load

    return load(source, analysis.options(debug=debug))


@app.command("grafana")
@analysis_options()
def grafana(
    source: SourceArg,
    output: OutOpt = None,
    dashboard_uid: Annotated[
        str,
        typer.Option(
            "--dashboard-uid", metavar="UID", help="The dashboard to pin them to; '' for org-wide annotations."
        ),
    ] = "vllm-kv-cache",
    panel_id: Annotated[
        int | None,
        typer.Option("--panel-id", metavar="ID", help="The panel (default 10: vLLM's 'Preemptions / s by engine')."),
    ] = 10,
    url: Annotated[
        str | None, typer.Option("--url", metavar="URL", help="Post them to this Grafana (POST URL/api/annotations).")
    ] = None,
    token_env: Annotated[
        str,
        typer.Option(
            "--token-env", metavar="NAME", help="The environment variable holding the Grafana service-account token."
        ),
    ] = "GRAFANA_TOKEN",
    analysis: AnalysisArgs = ANALYSIS,  # the analysis options (options.py), here in --help: for a bundle
    quiet: QuietOpt = False,
    debug: DebugOpt = False,
) -> None:
    """Grafana annotations: one region per server and engine, the headline as text.

    \b
    Examples:
      preemptlog export grafana incident/ -o annotations.json
      preemptlog export grafana fleet/ --url https://grafana.example.com
      curl -H "Authorization: Bearer $GRAFANA_TOKEN" -H 'Content-Type: application/json' \\
           -d "$(preemptlog export grafana incident/ | jq -c '.[0]')" https://grafana.example.com/api/annotations

    Each annotation spans the incident's events (time/timeEnd in epoch ms),
    tagged preemptlog, server:, engine:, cause:, mechanism:, model:; its text
    is the headline and the top fix. By default they are pinned to vLLM's
    KV-cache dashboard (uid vllm-kv-cache), panel 10 ('Preemptions / s by
    engine'). With --url they are posted with the token in $GRAFANA_TOKEN.
    """

    def body() -> int:
        import json

        from ..errors import UsageError
        from ..fleet.export import grafana as g
        from ..outputs.outio import open_output

        imports_done()
        token = None
        if url is not None:
            token = os.environ.get(token_env)
            if not token:
                raise UsageError(
                    f"--url needs a Grafana token in ${token_env}",
                    hint="a service-account token with the Editor role, or --token-env NAME",
                )
        t = _load(source, analysis, debug)
        items = g.make_annotations(t.incidents, dashboard_uid=dashboard_uid or None, panel_id=panel_id)
        if url is not None:
            ids = g.post(items, url, token)
            if not quiet:
                sys.stderr.write(
                    f"posted {len(items)} annotation(s) to {url} (ids {', '.join(map(str, ids)) or '-'})"
                    f"{g.left_out(t.incidents)}\n"
                )
            if output is None:
                return ExitCode.OK
        with writing_to(output), open_output(output, terminal_text=True) as fh:
            fh.write((json.dumps(items, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))
        if not quiet and url is None:
            sys.stderr.write(f"{len(items)} annotation(s){g.left_out(t.incidents)}\n")
        return ExitCode.OK

    guarded(debug, body)


@app.command("openmetrics")
@analysis_options()
def openmetrics(
    source: SourceArg,
    output: OutOpt = None,
    bin_: Annotated[int, typer.Option("--bin", metavar="SECONDS", min=1, help="Counter resolution in seconds.")] = 60,
    label: Annotated[
        list[str] | None,
        typer.Option("--label", metavar="NAME=VALUE", help="A label on every series (e.g. job=vllm). Repeatable."),
    ] = None,
    analysis: AnalysisArgs = ANALYSIS,  # the analysis options (options.py), here in --help: for a bundle
    quiet: QuietOpt = False,
    debug: DebugOpt = False,
) -> None:
    """OpenMetrics series for backfill into Prometheus.

    \b
    Examples:
      preemptlog export openmetrics incident/ -o incident.om
      promtool tsdb create-blocks-from openmetrics incident.om ./data
      preemptlog export openmetrics fleet/ --label job=vllm -o fleet.om

    Series: preemptlog_preemptions_total{cause, mechanism}, preemptlog_recompute_tokens_total
    and preemptlog_count_visible (0 when the bundle cannot show the count), each with
    instance (the scrapes' own label, else the server's name), model_name and engine;
    timestamps in Unix seconds; the text ends with # EOF.
    """

    def body() -> int:
        from ..fleet.export import openmetrics as om
        from ..outputs.outio import open_output

        imports_done()
        labels = om.parse_labels(label)
        t = _load(source, analysis, debug)
        text, untimed = om.render(t.events, t.incidents, bin_s=bin_, labels=labels)
        with writing_to(output), open_output(output, terminal_text=True) as fh:
            fh.write(text.encode("utf-8"))
        if not quiet and untimed:
            sys.stderr.write(f"preemptlog: {untimed} event(s) without a time left out (they cannot be placed)\n")
        return ExitCode.OK

    guarded(debug, body)
