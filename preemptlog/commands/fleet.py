"""``preemptlog fleet run`` / ``fleet report``: many servers' bundles in one Parquet dataset."""

from __future__ import annotations

import sys
from enum import Enum
from typing import Annotated

import typer

from ..errors import ExitCode
from .common import DebugOpt, NoColorOpt, QuietOpt, command_group
from .options import ANALYSIS, AnalysisArgs, analysis_options
from .runner import guarded, imports_done, stderr_console, writing_to

app = command_group(
    "fleet", "Many servers' incident bundles analysed into one Parquet dataset, and the fleet's report from it."
)


class Engine(str, Enum):
    local = "local"
    spark = "spark"


class ReportFormat(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"
    html = "html"


class By(str, Enum):
    server = "server"
    model = "model"
    version = "version"
    cause = "cause"


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="fleet", short_help="Analyse many bundles into one dataset; the fleet report.")


class _BundleProgress:
    """Bundles done of all, on stderr, on a terminal only (never in a pipe), once the run has taken
    PREEMPTLOG_PROGRESS_AFTER seconds (runner's conventions)."""

    def __init__(self, total: int, quiet: bool, no_color: bool) -> None:
        import time

        from .runner import _progress_after

        try:
            tty = sys.stderr.isatty()
        except (AttributeError, ValueError):
            tty = False
        self.enabled = tty and not quiet and total > 0
        self.total = total
        self.no_color = no_color
        self.bar = None
        self.done = 0
        self.counts = {"ok": 0, "partial": 0, "error": 0, "skipped": 0}
        self.start = time.monotonic()
        self.after = _progress_after()

    def _label(self) -> str:
        c = self.counts
        return (
            f"bundles (ok {c['ok']}, damaged {c['partial']}, failed {c['error']}, "
            f"skipped {c['skipped'] + c.get('duplicate', 0)})"
        )

    def advance(self, outcome: str) -> None:
        import time

        self.done += 1
        self.counts[outcome] = self.counts.get(outcome, 0) + 1
        if not self.enabled:
            return
        if self.bar is None and time.monotonic() - self.start >= self.after:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            from ..outputs.safe import unicode_ok

            bar = [BarColumn()] if unicode_ok() else []
            self.bar = Progress(
                TextColumn("{task.description}", markup=False),
                *bar,
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=stderr_console(self.no_color),
                transient=True,
            )
            self.task = self.bar.add_task(self._label(), total=self.total)
            self.bar.start()
        if self.bar is not None:
            self.bar.update(self.task, completed=self.done, description=self._label())

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


@app.command("run")
@analysis_options()
def run(
    bundles: Annotated[
        list[str],
        typer.Argument(
            help="Bundles (folders, archives, log files) or globs of them (quote the glob: 'week/*/').",
            metavar="BUNDLE_OR_GLOB",
            show_default=False,
        ),
    ],
    out: Annotated[
        str, typer.Option("--out", metavar="DIR", help="The dataset's folder (created; re-runs add to it).")
    ],
    jobs: Annotated[
        int, typer.Option("--jobs", "-j", min=1, metavar="N", help="Worker processes (local engine). Default: 1.")
    ] = 1,
    engine: Annotated[
        Engine,
        typer.Option(
            "--engine",
            help="local: a process pool on this machine; spark: Apache Spark (pip install 'preemptlog[spark]').",
            case_sensitive=False,
        ),
    ] = Engine.local,
    master: Annotated[
        str | None,
        typer.Option(
            "--master", metavar="URL", help="--engine spark: the Spark master (default: local[N], N = --jobs)."
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Analyse every bundle again, even those already in the dataset.")
    ] = False,
    retry_errors: Annotated[
        bool, typer.Option("--retry-errors", help="Analyse again the bundles that failed in an earlier run.")
    ] = False,
    analysis: AnalysisArgs = ANALYSIS,  # the analysis options (options.py), here in --help: for every bundle
    quiet: QuietOpt = False,
    no_color: NoColorOpt = False,
    debug: DebugOpt = False,
) -> None:
    """Analyse every bundle and write one Hive-partitioned Parquet dataset.

    \b
    Examples:
      preemptlog fleet run 'incidents/2026-11-2*/*.tar.gz' --out fleet/ --jobs 2
      preemptlog fleet run srv-*/ --out fleet/ --tz UTC
      preemptlog fleet run 'week/*' --out fleet/ --engine spark --master local[2]

    Tables (docs/fleet.md): events, incidents (one row per bundle x server x
    engine), findings, errors (a bundle that fails or is damaged: its exit
    code and message; the run goes on) and bundles, each in
    DIR/<table>/day=YYYY-MM-DD/part-<bundle digest>.parquet. A bundle whose
    content digest is already in the dataset is skipped, so an interrupted
    run resumes where it stopped. The server is named after the bundle's
    folder or file; a bundle holding several servers is split as analyze
    --each splits one. Exit code 5 when a bundle failed or was damaged.
    Every bundle is analysed with the analysis options (--tz, --offset, ...
    as in analyze); bundles already in the dataset need --force to be
    analysed again with other ones.
    """

    def body() -> int:
        from ..fleet import dataset
        from ..fleet.inputs import expand, outside

        imports_done()
        options = analysis.options(debug=debug)
        paths, dataset_itself = outside(expand(bundles), out)
        if dataset_itself and not quiet:
            from ..outputs.safe import neutralise

            for p in dataset_itself:
                sys.stderr.write(
                    neutralise(f"preemptlog: note: {p}: the dataset itself (--out), not a bundle: skipped") + "\n"
                )
        dataset.check_dataset(out)
        skip: frozenset[str] = frozenset()
        if not force:
            skip = frozenset(dataset.known_ids(out))
            if retry_errors:
                skip = skip - dataset.known_ids(out, outcomes=["error"])
        if engine is Engine.spark:
            return _spark(paths, out, options, skip, master or f"local[{jobs}]", quiet)
        from ..fleet.pool import run as pool_run

        ui = _BundleProgress(len(paths), quiet, no_color)
        try:
            stats = pool_run(
                paths, out, jobs=jobs, options=options, skip=skip, on_outcome=lambda o: ui.advance(o.outcome)
            )
        finally:
            ui.close()
        failed = [o for o in stats.outcomes if o.outcome in ("error", "partial")]
        if not quiet:
            from ..outputs.safe import markup

            console = stderr_console(no_color)
            dups = stats.count("duplicate")
            also = f", {dups} skipped (the same content as another bundle of this run)" if dups else ""
            console.print(
                f"[bold]{stats.count('ok') + stats.count('partial')} bundle(s) analysed, {stats.count('error')} failed, "
                f"{stats.count('skipped')} skipped (already in the dataset){also} in {stats.seconds:.1f} s[/bold]"
            )
            console.print(
                f"wrote {markup(out)}: "
                + ", ".join(f"{t} {stats.rows(t)} row(s)" for t in ("events", "incidents", "findings", "errors"))
            )
        from ..outputs.safe import neutralise as _inert

        for o in [o for o in stats.outcomes if o.outcome == "duplicate"][:5]:  # said even with -q: rows left out
            sys.stderr.write(_inert(f"preemptlog: duplicate: {o.path}: {o.message}: its rows are not added") + "\n")
        for o in failed[:5]:
            from ..outputs.safe import neutralise

            sys.stderr.write(neutralise(f"preemptlog: {o.outcome}: {o.path}: exit {o.exit_code}: {o.message}") + "\n")
        if len(failed) > 5:
            sys.stderr.write(f"preemptlog: and {len(failed) - 5} more bundle(s) in errors/\n")
        return ExitCode.PARTIAL if failed else ExitCode.OK

    guarded(debug, body)


def _spark(paths, out, options, skip, master, quiet) -> int:
    from ..fleet.spark import run as spark_run
    from ..fleet.spark import session

    with session(master) as spark:
        stats = spark_run(spark, paths, out, options=options, skip=skip)
    if not quiet:
        sys.stderr.write(
            f"{stats['analysed']} bundle(s) analysed on Spark ({master}), {stats['failed']} failed or damaged, "
            f"{stats['skipped']} skipped, in {stats['seconds']:.1f} s\n"
        )
    return ExitCode.PARTIAL if stats["failed"] else ExitCode.OK


@app.command("report")
def report(
    dataset_dir: Annotated[
        str, typer.Argument(help="A fleet dataset (fleet run --out).", metavar="DIR", show_default=False)
    ],
    since: Annotated[
        str | None, typer.Option("--since", metavar="TIME", help="From this day or time (YYYY-MM-DD or ISO 8601; UTC).")
    ] = None,
    until: Annotated[
        str | None, typer.Option("--until", metavar="TIME", help="Up to this day or time (as --since).")
    ] = None,
    by: Annotated[
        By,
        typer.Option(
            "--by", help="Group causes and mechanisms by server, model, version, or list causes.", case_sensitive=False
        ),
    ] = By.model,
    format: Annotated[
        ReportFormat | None,
        typer.Option(
            "--format",
            "-f",
            help="table (default on a terminal), json (default otherwise), csv (the --by table), html.",
            case_sensitive=False,
        ),
    ] = None,
    output: Annotated[
        str | None, typer.Option("--output", "-o", metavar="FILE", help="Write here (atomically); - is stdout.")
    ] = None,
    quiet: QuietOpt = False,
    no_color: NoColorOpt = False,
    debug: DebugOpt = False,
) -> None:
    """The fleet's report: which servers preempt, why, what it cost, which change helps most.

    \b
    Examples:
      preemptlog fleet report fleet/
      preemptlog fleet report fleet/ --by version --since 2026-11-23 -f json
      preemptlog fleet report fleet/ -f html -o fleet.html

    Sections: servers ranked by preemptions and tokens recomputed; causes and
    mechanisms per model (--by version, server, or one row per cause); the
    trend per day; the fixes that address most events fleet-wide; servers
    whose counts the bundles cannot show, and what to add; failed bundles.
    """

    def body() -> int:
        import json

        from ..errors import UsageError
        from ..fleet import report as fr
        from ..outputs.outio import open_output

        imports_done()
        window = fr.Window(fr.parse_time(since, "--since"), fr.parse_time(until, "--until", end=True))
        if window.since is not None and window.until is not None and window.since > window.until:
            raise UsageError(
                f"--since {since} is later than --until {until}: no bundle can be shown",
                hint="--since is the start of the window, --until its end",
            )
        fmt = format or (ReportFormat.table if (output in (None, "-") and sys.stdout.isatty()) else ReportFormat.json)
        if fmt is ReportFormat.html and output is None and sys.stdout.isatty():
            raise UsageError("the html report is a file; give -o FILE (or -o - for standard output)")
        sections = fr.report(dataset_dir, by=by.value, window=window)
        with writing_to(output), open_output(output, terminal_text=fmt is not ReportFormat.table) as fh:
            if fmt is ReportFormat.json:
                doc = fr.as_json(sections, by=by.value, window=window)
                fh.write((json.dumps(doc, indent=2, ensure_ascii=False, default=str) + "\n").encode("utf-8"))
            elif fmt is ReportFormat.csv:
                sections["by"].write_csv(fh)
            elif fmt is ReportFormat.html:
                from ..fleet.html import render

                fh.write(render(sections, by=by.value, window=window, source=dataset_dir).encode("utf-8"))
            else:
                from ..fleet.tables import write_tables

                write_tables(sections, fh, by=by.value)
        if not quiet:
            from ..outputs.safe import markup

            stderr_console(no_color).print(f"[bold]{markup(fr.headline(sections))}[/bold]")
        return ExitCode.OK

    guarded(debug, body)
