"""``preemptlog whatif``: replay the incident's workload under other configurations."""

from __future__ import annotations

import sys
from enum import Enum
from typing import Annotated, Any, BinaryIO

import typer

from ..errors import ExitCode
from .common import DebugOpt, FormatOpt, NoColorOpt, OutputOpt, QuietOpt, default_format
from .options import ANALYSIS, AnalysisArgs, analysis_options
from .runner import guarded, stderr_console


class Engine(str, Enum):
    model = "model"
    vllm = "vllm"


class Arrivals(str, Enum):
    step = "step"
    time = "time"


def register(app: typer.Typer) -> None:
    app.command(name="whatif", short_help="Replay the incident's workload under another configuration.")(whatif_command)


def complete_setting(incomplete: str) -> list[str]:
    """Shell completion of --set/--sweep/--base: ``NAME=`` of the replay settings that start with what was
    typed (the settings' one home is whatif.workload.SETTINGS; imported only when completing)."""
    from ..whatif.workload import SETTINGS

    return [f"{k}=" for k in SETTINGS if k.startswith(incomplete.split("=", 1)[0].lower())]


@analysis_options(old_set=False)  # --set is a vLLM setting here; the rules threshold is --threshold
def whatif_command(
    bundle: Annotated[
        list[str],
        typer.Argument(
            help="The incident: vLLM logs, bundle folders or archives (as for analyze).",
            metavar="BUNDLE",
            show_default=False,
        ),
    ],
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            metavar="NAME=VALUE",
            autocompletion=complete_setting,
            help="A setting of the asked configuration (repeatable): num_gpu_blocks, gpu_memory_utilization, "
            "block_size, max_num_seqs, max_num_batched_tokens, enable_chunked_prefill, enable_prefix_caching, "
            "scheduling_policy, watermark, long_prefill_token_threshold, max_model_len.",
        ),
    ] = None,
    sweep: Annotated[
        list[str] | None,
        typer.Option(
            "--sweep",
            metavar="NAME=V1,V2,...",
            autocompletion=complete_setting,
            help="One configuration per value (on top of --set; several --sweep: every combination).",
        ),
    ] = None,
    config: Annotated[
        list[str] | None,
        typer.Option(
            "--config",
            metavar="NAME=VALUE[,NAME=VALUE...]",
            help="One asked configuration (repeatable; each on top of --set; not with --sweep).",
        ),
    ] = None,
    base: Annotated[
        list[str] | None,
        typer.Option(
            "--base",
            metavar="NAME=VALUE",
            autocompletion=complete_setting,
            help="A value of the observed configuration the bundle lacks or gets wrong (e.g. "
            "--base num_gpu_blocks=2048); it applies to every replay, the observed one too.",
        ),
    ] = None,
    engine: Annotated[
        Engine,
        typer.Option(
            "--engine",
            help="model: the V1 scheduler model (fast); vllm: the real vLLM scheduler "
            "with a fake executor, the incident's version (needs --vllm-python, or the version's venv in "
            "PREEMPTLOG_VLLM_034_PYTHON and the like, else PREEMPTLOG_VLLM_PYTHON).",
        ),
    ] = Engine.model,
    vllm_python: Annotated[
        str | None,
        typer.Option(
            "--vllm-python",
            metavar="PYTHON",
            help="The python of a venv with vLLM installed; default: env PREEMPTLOG_VLLM_<MMM>_PYTHON of the "
            "incident's version (PREEMPTLOG_VLLM_034_PYTHON for 0.34), else PREEMPTLOG_VLLM_PYTHON (0.32).",
        ),
    ] = None,
    arrivals: Annotated[
        Arrivals | None,
        typer.Option(
            "--arrivals",
            help="step: requests arrive at their recorded scheduler step (records only; "
            "the default with records); time: at their arrival time on the step clock (the default "
            "with request lines).",
        ),
    ] = None,
    format: FormatOpt = None,
    output: OutputOpt = None,
    analysis: AnalysisArgs = ANALYSIS,  # the analysis options (options.py), here in --help
    quiet: QuietOpt = False,
    no_color: NoColorOpt = False,
    debug: DebugOpt = False,
) -> None:
    """Replay the incident's workload under other configurations, side by side with the observed one.

    \b
    Examples:
      preemptlog whatif incident/ --set max_num_seqs=32
      preemptlog whatif incident/ --set gpu_memory_utilization=0.95 --set block_size=32
      preemptlog whatif incident/ --sweep max_num_seqs=16,32,64 -f csv
      preemptlog whatif incident/ --config num_gpu_blocks=4096 --config max_num_seqs=32,watermark=0.01
      preemptlog whatif incident/ --set scheduling_policy=priority --engine vllm \\
          --vllm-python ~/.cache/preemptlog/venv-vllm-0.32.0/bin/python

    The workload (arrival, prompt tokens, max_tokens, output tokens, priority)
    comes from the block-table request records of the preemptlog vLLM plugin,
    else from the log's 'Received request' lines; what the bundle does not hold
    is assumed and said (output lengths: max_tokens). Without either, exit 8.

    The observed configuration is replayed first and its preemption count
    compared with the incident's: within 15 % (or 3 preemptions) the rows are
    "calibrated", else "uncalibrated" (the model does not reproduce this
    incident; read its rows as a direction, not a figure). Every row gives
    preemptions, recomputed tokens, peak running, waiting (mean, p95 per step),
    TTFT and latency p50/p95 and throughput, on a step clock fitted on the
    incident's stats lines. gpu_memory_utilization rescales the KV pool from
    the log's memory lines (the arithmetic is in the notes). docs/whatif.md
    has the model's measured accuracy against the real vLLM scheduler.
    """

    def body() -> int:
        import os
        import re

        from ..analysis import analyze
        from ..outputs.outio import open_output
        from ..pipeline.bundle import Workspace
        from ..whatif import expand, whatif
        from ..whatif.workload import parse_sets

        if config and sweep:
            from ..errors import UsageError

            raise UsageError("--config and --sweep do not combine", hint="give several --config instead")
        configs = expand(list(set_ or []), list(sweep or []), list(config or []))
        base_sets = parse_sets(list(base or []))
        fmt = format or default_format(output)
        py = vllm_python  # else the venv of the incident's version (whatif.engine_vllm.python_for)
        if (
            engine is Engine.vllm
            and not py
            and not any(re.fullmatch(r"PREEMPTLOG_VLLM_\w*PYTHON", k) for k in os.environ)
        ):
            from ..errors import UsageError

            raise UsageError(
                "--engine vllm needs a python with vLLM",
                hint="give --vllm-python PYTHON or set PREEMPTLOG_VLLM_PYTHON (ci/vllm-venv builds 0.32; "
                "PREEMPTLOG_VLLM_034_PYTHON: ci/vllm-034-venv, 0.34)",
            )
        options = analysis.options(debug=debug, keep_request_rows=True)
        with Workspace() as ws:
            a = analyze(list(bundle), options, workspace=ws)
            res = whatif(
                a,
                configs,
                engine=engine.value,
                arrivals=arrivals.value if arrivals else None,
                vllm_python=py,
                base_sets=base_sets,
            )
            with open_output(
                output, protect=a.bundle.originals, terminal_text=fmt.value in ("json", "ndjson", "csv")
            ) as out:
                _write(res, fmt.value, out, no_color)
        if not quiet:
            _summary(res, no_color)
        return ExitCode.OK

    guarded(debug, body)


def _write(res: Any, fmt: str, out: BinaryIO, no_color: bool) -> None:
    import json

    rows = res.rows()
    if fmt == "json":
        out.write((json.dumps(res.as_dict(), indent=2, ensure_ascii=False, default=str) + "\n").encode())
    elif fmt == "ndjson":
        out.write(b"".join((json.dumps(r, ensure_ascii=False, default=str) + "\n").encode() for r in rows))
    elif fmt in ("csv", "parquet"):
        import polars as pl

        df = pl.DataFrame(rows, infer_schema_length=None)
        if fmt == "csv":
            out.write(df.write_csv().encode())
        else:
            df.write_parquet(out)
    else:
        _table(res, out, no_color)


LABELS = [
    ("preemptions", "preemptions"),
    ("recomputed_tokens", "recomputed tokens"),
    ("peak_running", "peak running"),
    ("waiting_mean", "waiting, mean"),
    ("waiting_p95", "waiting, p95"),
    ("ttft_p50_s", "TTFT p50 (s)"),
    ("ttft_p95_s", "TTFT p95 (s)"),
    ("latency_p50_s", "latency p50 (s)"),
    ("latency_p95_s", "latency p95 (s)"),
    ("throughput_tok_s", "throughput (tok/s)"),
    ("unfinished", "unfinished requests"),
]


def _table(res: Any, out: BinaryIO, no_color: bool) -> None:
    import io

    from rich.table import Table

    from ..outputs.console import text_console
    from ..outputs.safe import neutralise, table_box

    def cell(v: Any) -> str:
        return "-" if v is None else neutralise(str(v))

    buf = io.StringIO()
    console = text_console(buf, width=200, color=False)
    t = Table(
        header_style="bold",
        box=table_box(),  # type: ignore[no-untyped-call]
        title=f"whatif ({res.engine} engine, {res.arrivals} arrivals)",
    )
    t.add_column("")
    t.add_column("incident", justify="right")  # what the bundle shows; every other column is a replay
    for s in res.scenarios:
        t.add_column(cell("replay: observed" if s.name == "observed" else f"replay: {s.name}"), justify="right")
    seen = res.calibration.get("observed")
    for key, label in LABELS:
        measured = ("not visible" if seen is None else seen) if key == "preemptions" else None
        t.add_row(label, cell(measured), *[cell(s.figures.get(key)) for s in res.scenarios])
    t.add_row("status", "measured" if seen is not None else "-", *[cell(s.status) for s in res.scenarios])
    console.print(t, markup=False)
    out.write(buf.getvalue().encode())


def _summary(res: Any, no_color: bool) -> None:
    from ..outputs.safe import neutralise

    console = stderr_console(no_color)
    w = res.workload
    cal = res.calibration
    console.print(neutralise(f"workload: {len(w.requests)} request(s) from {w.source} ({w.where})"), markup=False)
    if cal.get("observed") is not None:
        console.print(
            neutralise(
                f"calibration: observed {cal['observed']} preemptions ({res.observed_source}), the replay of the observed "
                f"configuration {cal['replayed']}: {cal['status']} (tolerance {cal['tolerance']})"
            ),
            markup=False,
        )
    else:
        console.print(neutralise(f"calibration: {cal['status']}, {cal['why']}"), markup=False)
    console.print(neutralise(f"step clock: {res.step.how}"), markup=False)
    for a in res.assumed():
        console.print(neutralise(f"assumed: {a}"), markup=False)
    for s in res.scenarios:
        for n in s.notes:
            console.print(neutralise(f"{s.name}: {n}"), markup=False)
    _ = sys
