"""``preemptlog simulate``: write a labelled incident bundle from a scheduler model."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .common import DebugOpt, NoColorOpt, QuietOpt
from .runner import guarded, stderr_console, writing_into, writing_to

# Kept literal so that --help does not import the simulator (tests check it
# matches preemptlog.simulate.families.FAMILIES).
FAMILY_NAMES = ["v0-0.6", "v0-0.8", "v1-0.11", "guide"]
DMON_SELECTS = ["u", "m", "pucm", "um", "pu", "p", "c", "pm", "cm", "ucm", "pum"]


def register(app: typer.Typer) -> None:
    app.command(short_help="Write a simulated incident bundle and its ground truth.")(simulate)


def simulate(
    scenario: Annotated[
        str | None,
        typer.Argument(help="Scenario name (see --list).", show_default=False),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", "-o", help="Folder to write the bundle into; created, and it must be empty unless --force."
        ),
    ] = None,
    list_: Annotated[
        bool, typer.Option("--list", help="List the scenarios (with SCENARIO: describe that one) and exit.")
    ] = False,
    seed: Annotated[
        int, typer.Option("--seed", help="Random seed; same arguments and seed give byte-identical files.")
    ] = 0,
    family: Annotated[
        str | None,
        typer.Option(
            "--family",
            help="Log family: v0-0.6 (vLLM 0.6.3 V0), v0-0.8 (0.8.5 V0), v1-0.11 (0.11.1 V1), guide (the field "
            "guide's ISO-timestamped world with PREEMPTED markers). Default: the scenario's.",
            show_default=False,
        ),
    ] = None,
    duration: Annotated[
        float | None,
        typer.Option("--duration", help="Seconds of request arrivals (the run then drains). Default: the scenario's."),
    ] = None,
    size: Annotated[
        str | None, typer.Option("--size", help="large only: log size, e.g. 1G, 500M, 5MB (default 100M).")
    ] = None,
    markers: Annotated[
        bool,
        typer.Option("--markers", help="Also write a 'Req-<id> PREEMPTED' line per preemption (a patched scheduler)."),
    ] = False,
    stock: Annotated[
        bool,
        typer.Option("--stock", help="v1-0.11: a stock build, whose stats never print 'Preemptions: N' (vLLM bug)."),
    ] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Write into a non-empty folder (bundle files are overwritten).")
    ] = False,
    start: Annotated[
        str, typer.Option("--start", help="Local wall-clock time of the first log line (ISO, no offset).")
    ] = "2026-11-29T23:58:00",
    tz: Annotated[
        str, typer.Option("--tz", help="Zone of that wall clock (IANA name); offsets in truth.jsonl follow it.")
    ] = "UTC",
    hooks: Annotated[
        bool,
        typer.Option("--hooks/--no-hooks", help="Print the guide's [SCHEDULER]/[BATCH] debug hook before each round."),
    ] = True,
    hook_headers: Annotated[
        bool, typer.Option("--hook-headers", help="Give the hook lines a vLLM header (default: bare print() output).")
    ] = False,
    delayed: Annotated[
        bool | None,
        typer.Option(
            "--delayed/--no-delayed",
            help="Delayed preemption: log lines 1-3 steps after the decision.",
            show_default=False,
        ),
    ] = None,
    ansi: Annotated[
        bool, typer.Option("--ansi/--no-ansi", help="Colour process prefixes as vLLM <= 0.11 does, even into files.")
    ] = True,
    dmon_select: Annotated[
        str, typer.Option("--dmon-select", help="nvidia-smi dmon -s letters: " + ", ".join(DMON_SELECTS) + ".")
    ] = "pucm",
    dmon_dates: Annotated[
        bool, typer.Option("--dmon-dates/--no-dmon-dates", help="dmon -o DT (date and time columns) or no time at all.")
    ] = True,
    dmon_header_every: Annotated[
        int, typer.Option("--dmon-header-every", min=1, help="Repeat the dmon header rows every N samples.")
    ] = 20,
    skew: Annotated[
        list[str] | None,
        typer.Option("--skew", help="SOURCE=SECONDS: a source's clock error (dmon, executor, blocktable). Repeatable."),
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="KEY=VALUE: override a model parameter (see scenario.json 'params'). Repeatable."),
    ] = None,
    quiet: QuietOpt = False,
    no_color: NoColorOpt = False,
    debug: DebugOpt = False,
) -> None:
    """Write a simulated incident bundle whose every preemption is labelled with its cause.

    A small paged-KV scheduler model (numbered blocks that fragment, prefix
    sharing, speculative decoding, the field guide's four gates) runs a named
    scenario and writes: vllm.log (in the chosen vLLM family, with the
    guide's debug hook), executor.log (block_table extend lines),
    blocktable.jsonl, dmon.txt (nvidia-smi dmon), truth.jsonl (gate, sub-kind,
    times and numbers of every preemption) and scenario.json (every
    parameter, the seed, totals).

    \b
    Examples:
      preemptlog simulate --list
      preemptlog simulate g1-fragmentation --list
      preemptlog simulate mixed -o incident/ --seed 7
      preemptlog simulate v0-sampled -o v0/ && preemptlog analyze v0/
      preemptlog simulate g3-queue -o q/ --family v1-0.11 --stock
      preemptlog simulate long-generation -o lg/ --set g2_variance=dynamic
      preemptlog simulate skewed-clocks -o sk/ --skew dmon=+3.5 --no-dmon-dates
      preemptlog simulate large -o big/ --size 1G --family v1-0.11

    V0 families log only the 1st, 51st, 101st... preemption, so truth.jsonl
    says for each one whether a log line exists and whether a log-only
    analysis can count it (visible_in_log).
    """

    def body() -> int:
        import math

        from ..errors import UsageError
        from .options import check_seconds

        if list_:
            with writing_to(None):
                return _list(scenario)
        if scenario is None:
            raise UsageError("missing SCENARIO", hint="see preemptlog simulate --list")
        if output is None:
            raise UsageError("missing --output/-o DIR (the folder to write the bundle into)")
        from ..simulate.bundle import Options, SimulateError
        from ..simulate.bundle import simulate as run
        from ..simulate.scenarios import SCENARIOS

        if scenario not in SCENARIOS:
            raise UsageError(f"unknown scenario {scenario!r}", hint="one of " + ", ".join(SCENARIOS))
        if family is not None and family not in FAMILY_NAMES:
            raise UsageError(f"--family {family!r}: one of {', '.join(FAMILY_NAMES)}")
        if dmon_select not in DMON_SELECTS:
            raise UsageError(f"--dmon-select {dmon_select!r}: one of {', '.join(DMON_SELECTS)}")
        nbytes = None
        if size is not None:
            if SCENARIOS[scenario].kind != "large":
                raise UsageError("--size applies to the large scenario only (others use --duration)")
            from ..simulate.large import parse_size

            try:
                nbytes = parse_size(size)
            except ValueError as exc:
                raise UsageError(str(exc)) from None
        elif duration is not None and SCENARIOS[scenario].kind == "large":
            raise UsageError("the large scenario is sized with --size, not --duration")
        if duration is not None and not (math.isfinite(duration) and duration > 0):
            raise UsageError(f"--duration {duration:g}: not a positive number of seconds", hint="e.g. --duration 120")
        skews = _pairs(skew, "--skew", float)
        for name, seconds in skews.items():
            check_seconds("--skew", seconds, repr(f"{name}={seconds:g}"))
        opts = Options(
            scenario=scenario,
            out=output,
            seed=seed,
            family=family,
            duration=duration,
            size=nbytes,
            markers=markers,
            stock=stock,
            force=force,
            start=start,
            tz=tz,
            hooks=hooks,
            hook_headers=hook_headers,
            delayed=delayed,
            ansi=ansi,
            dmon_select=dmon_select,
            dmon_dates=dmon_dates,
            dmon_header_every=dmon_header_every,
            skews=skews,
            sets=_pairs(set_, "--set", str),
        )
        try:
            # every file it writes is in -o: a folder that cannot be created or written is an output error
            with writing_into(output):
                record = run(opts)
        except SimulateError as exc:
            raise UsageError(str(exc)) from None
        if not quiet:
            _report(record, output, no_color)
        return 0

    guarded(debug, body)


def _pairs(items: list[str] | None, flag: str, conv) -> dict:
    from ..errors import UsageError

    out: dict = {}
    for item in items or []:
        if "=" not in item:
            raise UsageError(f"{flag} expects KEY=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        try:
            out[k.strip()] = conv(v.strip())
        except ValueError:
            raise UsageError(f"{flag} {item!r}: {v!r} is not a number") from None
    return out


def _list(name: str | None) -> int:
    from ..errors import UsageError
    from ..simulate.scenarios import SCENARIOS

    if name is not None:
        sc = SCENARIOS.get(name)
        if sc is None:
            raise UsageError(f"unknown scenario {name!r}", hint="one of " + ", ".join(SCENARIOS))
        typer.echo(f"{sc.name}  (default family {sc.family})\n")
        typer.echo(sc.doc)
        params = sc.spec()["params"]
        if params:
            typer.echo("\nParameters set by the scenario (override with --set KEY=VALUE):")
            for k, v in params.items():
                typer.echo(f"  {k} = {v!r}")
        return 0
    width = max(len(n) for n in SCENARIOS)
    for sc in SCENARIOS.values():
        typer.echo(f"{sc.name:<{width}}  {sc.family:<7}  {sc.summary}")
    return 0


def _report(record: dict, output: Path, no_color: bool) -> None:
    console = stderr_console(no_color)
    t = record["truth"]
    sizes = []
    for name in record["files"]:
        try:
            n = (output / name).stat().st_size
        except OSError:
            continue
        sizes.append(f"{name} {_human(n)}")
    from ..outputs.safe import markup

    console.print(f"wrote {markup(str(output))}: " + markup(", ".join(sizes)))
    if record["scenario"] == "large":
        console.print(
            f"{t['requests']} requests, {t['preemptions']} preemptions; the log shows "
            f"{t['visible_in_log']} ({record['family']})"
        )
        return
    gates = ", ".join(f"{g} {n}" for g, n in t["by_gate"].items() if n)
    console.print(
        f"{t['preemptions']} preemptions for {t['requests']} requests"
        + (f" ({gates})" if gates else "")
        + f"; a log-only analysis can count {t['visible_in_log']}"
    )
    if t.get("v0_last_logged_total") and t["v0_last_logged_total"] < t["preemptions"]:
        console.print(
            f"V0 logs 1 preemption in 50: the last warning says total={t['v0_last_logged_total']}, "
            f"the truth is {t['preemptions']}"
        )


def _human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)
