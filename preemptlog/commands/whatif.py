"""``preemptlog whatif``: replay the incident's workload under other configurations."""

from __future__ import annotations

import sys
from enum import Enum
from typing import Annotated, Any, BinaryIO

import typer

from ..errors import ExitCode
from .common import DebugOpt, FormatOpt, NoColorOpt, NoPagerOpt, OutputOpt, QuietOpt, default_format
from .options import ANALYSIS, AnalysisArgs, analysis_options
from .runner import guarded, stderr_console, writing_to


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
    no_pager: NoPagerOpt = False,
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
        from ..outputs.outio import check_not_given, open_output
        from ..pipeline.bundle import Workspace
        from ..whatif import expand, whatif
        from ..whatif.workload import parse_sets

        if config and sweep:
            from ..errors import UsageError

            raise UsageError("--config and --sweep do not combine", hint="give several --config instead")
        configs = expand(list(set_ or []), list(sweep or []), list(config or []))
        base_sets = parse_sets(list(base or []), "--base")
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
        if engine is Engine.vllm and py and os.path.exists(py) and not (os.path.isfile(py) and os.access(py, os.X_OK)):
            from ..errors import UsageError

            raise UsageError(f"--vllm-python {py}: not an executable file", hint="give the python of a venv with vLLM")
        check_not_given(output, list(bundle))
        options = analysis.options(debug=debug, keep_request_rows=True)
        with Workspace() as ws:
            a = analyze(list(bundle), options, workspace=ws)
            try:
                res = whatif(
                    a,
                    configs,
                    engine=engine.value,
                    arrivals=arrivals.value if arrivals else None,
                    vllm_python=py,
                    base_sets=base_sets,
                )
            except Exception:
                _damage(a)  # a workload missing because an input was damaged: the damage is said first
                raise
            from ..whatif.sanity import check

            flags = check(res, a)
            head, tail = ([], []) if quiet else _summary_lines(res, a, configs, flags)
            console = stderr_console(no_color)
            on_terminal = fmt.value == "table" and output in (None, "-") and sys.stdout.isatty()
            if not on_terminal:  # what was done and the answer's caveats before the data (a pipe, a file)
                _print(head, console)
            with (
                writing_to(output),
                open_output(
                    output, protect=a.bundle.originals, terminal_text=fmt.value in ("json", "ndjson", "csv")
                ) as out,
            ):
                _write(
                    res,
                    fmt.value,
                    out,
                    no_color,
                    flags=flags,
                    head=_text(head, console) if on_terminal else b"",
                    tail=_text(tail, console) if on_terminal else b"",
                    pager=not no_pager,
                )
            if not on_terminal:
                _print(tail, console)
        if a.partial:  # the replay ran on what could be read: exit 5, as analyze of the bundle
            _damage(a)
            return ExitCode.PARTIAL
        return ExitCode.OK

    guarded(debug, body)


def _damage(a: Any) -> None:
    """The analysis's first warning when some input was damaged or skipped (even with -q: it explains
    exit 5, or a workload that is missing because of it), as analyze -q says it."""
    if not a.partial or not a.warnings:
        return
    from ..outputs.safe import neutralise

    w = a.warnings
    more = f" (and {len(w) - 1} more warning(s): preemptlog analyze shows them)" if len(w) > 1 else ""
    sys.stderr.write(neutralise(f"preemptlog: warning: {' '.join(str(w[0]).split())}{more}") + "\n")


def _write(
    res: Any,
    fmt: str,
    out: BinaryIO,
    no_color: bool,
    *,
    flags: list[str] | None = None,
    head: bytes = b"",
    tail: bytes = b"",
    pager: bool = True,
) -> None:
    import json

    rows = res.rows()
    if fmt == "json":
        doc = res.as_dict()
        doc["sanity"] = list(flags or [])  # replays whose figures cannot be the incident's (whatif/sanity.py)
        out.write((json.dumps(doc, indent=2, ensure_ascii=False, default=str) + "\n").encode())
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
        _table(res, out, no_color, head=head, tail=tail, pager=pager)


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
    ("throughput_tok_s", "throughput tok/s"),
    ("unfinished", "unfinished"),
]
SIDE_BY_SIDE = 3  # up to this many replays side by side (every figure); more: one row each (the key ones)
SWEEP = [
    ("preemptions", "preempt."),
    ("peak_running", "running"),
    ("waiting_p95", "wait p95"),
    ("latency_p95_s", "lat. p95 s"),
]


def _table(
    res: Any, out: BinaryIO, no_color: bool, *, head: bytes = b"", tail: bytes = b"", pager: bool = True
) -> None:
    """The figures side by side, wrapped to the terminal's width (80 in a pipe): when the replays do not
    fit one table, several, each with the row labels and the incident's column. Paged with ``head``
    (what was done) above and ``tail`` (the assumptions) below when taller than the screen."""
    import io
    import os

    from rich.table import Table

    from ..outputs.console import text_console
    from ..outputs.safe import neutralise, table_box, unicode_ok
    from ..render.pager import page, terminal_size

    def cell(v: Any) -> str:
        return "-" if v is None else neutralise(f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v))

    size = terminal_size(out)
    width = size[0] if size else 80
    color = size is not None and not no_color and not os.environ.get("NO_COLOR")
    buf = io.StringIO()
    console = text_console(buf, width=width, color=color)
    seen = res.calibration.get("observed")
    title = f"whatif ({res.engine} engine, {res.arrivals} arrivals)"
    if len(res.scenarios) > SIDE_BY_SIDE:  # a sweep: one row per configuration, the key figures
        from rich import box

        t = Table(
            header_style="bold",
            box=box.SIMPLE_HEAD if unicode_ok() else box.ASCII2,
            title=title,
            pad_edge=False,
            padding=(0, 1),
        )
        longest = max((len(x.strip()) for sc in res.scenarios for x in sc.name.split(",")), default=8)
        t.add_column("replayed", overflow="fold", min_width=min(longest, 24))
        for _, label in SWEEP:
            t.add_column(label, justify="right", no_wrap=True)
        t.add_column("status", no_wrap=True)
        t.add_row(
            "incident",
            *[cell(seen) if k == "preemptions" else "-" for k, _ in SWEEP],
            "measured" if seen is not None else "-",
        )
        for sc in res.scenarios:
            t.add_row(
                "\n".join(x.strip() for x in sc.name.split(",")),  # one setting a line
                *[cell(sc.figures.get(k)) for k, _ in SWEEP],
                cell(sc.status),
            )
        console.print(t, markup=False)
    else:  # side by side, in as many tables as the width needs (each with the labels and the incident)
        heads = [
            "replay: observed" if sc.name == "observed" else "replay: " + sc.name.replace(",", ", ")
            for sc in res.scenarios
        ]
        label_w = max(len(label) for _, label in LABELS)
        inc_w = max(len("incident"), len(cell(seen)) if seen is not None else len("not visible"), len("measured"))

        def col_w(i: int) -> int:
            sc = res.scenarios[i]
            return max([len(heads[i]), len(cell(sc.status))] + [len(cell(sc.figures.get(k))) for k, _ in LABELS])

        groups: list[list[int]] = []
        for i in range(len(res.scenarios)):
            if groups:
                used = label_w + inc_w + sum(col_w(j) for j in groups[-1]) + col_w(i)
                if used + 3 * (len(groups[-1]) + 3) + 1 <= width:
                    groups[-1].append(i)
                    continue
            groups.append([i])
        for part in groups:
            t = Table(
                header_style="bold",
                box=table_box(),  # type: ignore[no-untyped-call]
                title=title
                + (f", replays {part[0] + 1}-{part[-1] + 1} of {len(res.scenarios)}" if len(groups) > 1 else ""),
            )
            t.add_column("", no_wrap=True)
            t.add_column("incident", justify="right", overflow="fold")  # what the bundle shows
            for i in part:
                t.add_column(cell(heads[i]), justify="right", overflow="fold")
            for key, label in LABELS:
                measured = ("not visible" if seen is None else seen) if key == "preemptions" else None
                t.add_row(label, cell(measured), *[cell(res.scenarios[i].figures.get(key)) for i in part])
            t.add_row("status", "measured" if seen is not None else "-", *[cell(res.scenarios[i].status) for i in part])
            console.print(t, markup=False)
    console.print("every row but the incident's is a replay; -f json or csv gives every figure", style="dim") if len(
        res.scenarios
    ) > SIDE_BY_SIDE else None
    page(buf.getvalue().encode(), out, head=head, tail=tail, pager=pager)


def _summary_lines(res: Any, a: Any, configs: list[dict[str, Any]], flags: list[str]) -> tuple[list[str], list[str]]:
    """(head, tail): what was replayed and how far its figures hold (the calibration, explained; any
    absurd replay), then the workload's assumptions and the notes."""
    w = res.workload
    cal = res.calibration
    head: list[str] = []
    asked = [s for s in res.scenarios if s.name != "observed"]
    did = f"replayed {len(w.requests)} request(s) from {w.source} ({w.where}) under the observed configuration" + (
        f" and {len(asked)} asked one(s)" if asked else ""
    )
    head.append(did)
    if not configs or not asked:
        hint = _suggest(a)
        head.append(
            "nothing asked (--set NAME=VALUE, --sweep NAME=V1,V2, --config): only the observed configuration was "
            "replayed" + (f"; to replay the analysis's top change: preemptlog whatif BUNDLE {hint}" if hint else "")
        )
    if cal.get("observed") is not None:
        obs, rep = cal["observed"], cal["replayed"]
        diff = (rep or 0) - obs
        rel = f" ({diff / obs:+.0%})" if obs else ""
        why = ""
        if diff:
            why = (
                "; they differ because the replay is not the incident: its workload is rebuilt from the bundle "
                "(the assumptions below: outputs taken as max_tokens err high, prompts from the stats lines err low "
                "under prefix caching) and its clock is fitted, not measured"
            )
        within = "within" if cal["status"] == "calibrated" else "beyond"
        head.append(
            f"the incident shows {obs} preemptions ({res.observed_source}); the replay of its own configuration "
            f"gives {rep}{rel}{why}; {within} the tolerance ({cal['tolerance']}), so the replays are "
            f"{cal['status']}: compare replay with replay, not with the incident"
        )
    else:
        head.append(f"calibration: {cal['status']}, {cal['why']}")
    for f in flags:
        head.append(f"warning: {f}")
    tail = [f"step clock: {res.step.how}"]
    tail += [f"assumed: {x}" for x in res.assumed()]
    for s in res.scenarios:
        tail += [f"{s.name}: {n}" for n in s.notes]
    return head, tail


def _suggest(a: Any) -> str | None:
    """``preemptlog whatif ... --set max_num_seqs=4`` of the analysis's top change, when it is a setting."""
    from ..whatif.verify import setting_for

    for x in (a.fixes or {}).get("changes") or []:
        key = setting_for(str(x.get("option") or ""))
        if key and x.get("suggested") not in (None, True):
            return f"--set {key}={x['suggested']}"
    return None


def _print(lines: list[str], console: Any) -> None:
    from ..render.human import PIPE_WIDTH, wrap

    width = console.width if console.is_terminal else PIPE_WIDTH
    for ln in lines:
        for part in wrap(ln, width):
            console.print(part, markup=False, highlight=False)


def _text(lines: list[str], console: Any) -> bytes:
    from ..render.human import wrap

    width = console.width if console.is_terminal else 80
    return "".join(part + "\n" for ln in lines for part in wrap(ln, width)).encode("utf-8", "replace")
