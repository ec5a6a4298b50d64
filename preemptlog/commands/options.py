"""The analysis options: declared once, for every command that analyses a bundle.

analyze, explain, report, whatif, watch, ``fleet run`` and ``export grafana|openmetrics`` take the same
options with the same names and help: --year, --tz, --file-kind, --offset, --before, --after,
--lookback-steps, --rules and --threshold (``--set``, its old spelling, with a note; not in
whatif, where --set is a vLLM setting). ``--kind FILE=KIND``, the old spelling of --file-kind, is
read by the commands that filter events by kind (common.filters_from).

A command names one parameter ``analysis: AnalysisArgs`` where the options go in its --help and is
decorated with :func:`analysis_options`: typer sees the options' parameters in that place, the
command gets one :class:`AnalysisArgs`, and inside its body (under ``guarded``, so that a malformed
value is a one-line error with its exit code) ``analysis.options(debug=debug)`` is the one
``AnalyzeOptions`` it hands on. Nothing here imports polars (``preemptlog --help`` stays fast).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from .common import file_kinds, parse_duration

if TYPE_CHECKING:
    from ..model.result import AnalyzeOptions

F = TypeVar("F", bound=Callable[..., Any])

YearOpt = Annotated[
    int | None,
    typer.Option(
        "--year",
        metavar="YEAR",
        min=1970,
        max=2200,
        help="Year of the first line of each log (vLLM timestamps have none). Default: inferred from full dates "
        "in the bundle, the gzip header or the file mtime.",
    ),
]
TzOpt = Annotated[
    str | None,
    typer.Option(
        "--tz",
        metavar="ZONE",
        help="Zone of timestamps that carry none (IANA name or +HH:MM). Default: this machine's zone.",
    ),
]
FileKindOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--file-kind",
        metavar="FILE=KIND",
        help="Force a file's kind (e.g. dmon.txt=dmon, notes.md=vllm-log) instead of sniffing it. Repeatable.",
    ),
]
OffsetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--offset",
        metavar="SOURCE=DURATION",
        help="Shift a source's clock before joining: KIND_OR_FILE=±DURATION, e.g. dmon=-2s, "
        "blocktable=+0.5s, vllm-log=1m, node1/dmon.txt=-1500ms. Repeatable.",
    ),
]
BeforeOpt = Annotated[
    float, typer.Option("--before", metavar="SECONDS", min=0.0, help="Evidence window: seconds before each event.")
]
AfterOpt = Annotated[
    float, typer.Option("--after", metavar="SECONDS", min=0.0, help="Evidence window: seconds after each event.")
]
LookbackOpt = Annotated[
    int | None,
    typer.Option(
        "--lookback-steps",
        metavar="STEPS",
        min=0,
        help="Scheduler steps to look back from the nearest step (the PREEMPTED line can come 1-3 steps late). "
        "Default: the rules threshold lookback_steps (3).",
    ),
]
RulesOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--rules",
        metavar="FILE",
        help="A TOML rules file overlaid on the shipped rules (same id replaces, new ids add, enabled=false "
        "switches off). Repeatable. See `preemptlog rules`.",
    ),
]
_THRESHOLD = {
    "metavar": "NAME=VALUE",
    "help": "Override a rules threshold (kv_ceiling=90, queue_cap=128, ...) or switch a rule "
    "(G2-batch-variance-dynamic.enabled=true). Repeatable. (--set, the old spelling, still works, with a "
    "note: in whatif --set is a vLLM setting.)",
}
ThresholdOpt = Annotated[list[str] | None, typer.Option("--threshold", "--set", **_THRESHOLD)]
ThresholdNoSetOpt = Annotated[list[str] | None, typer.Option("--threshold", **_THRESHOLD)]  # whatif: --set is vLLM's


def note_old_set(values: list[str] | None) -> None:
    """One line when the rules threshold was given with the old spelling ``--set`` (it means a vLLM
    setting in ``whatif``): the option is ``--threshold`` now."""
    import sys

    if values and any(a == "--set" or a.startswith("--set=") for a in sys.argv[1:]):
        sys.stderr.write("preemptlog: note: a rules threshold is --threshold NAME=VALUE now (--set still works)\n")


MAX_SECONDS = 100 * 365.25 * 86400
"""The longest clock shift (--offset) or evidence window (--before, --after): 100 years, more than
any clock error (a host that booted at 1970) or incident; beyond it the times leave what a
timestamp can hold (an internal error, or a crash of polars), so a longer one is a usage error."""


def check_seconds(option: str, value: float, shown: str | None = None) -> float:
    """``value`` (seconds, of ``option``) when it is a finite number within :data:`MAX_SECONDS`,
    else a UsageError naming the option and the value as given (``shown``)."""
    import math

    from ..errors import UsageError

    if not math.isfinite(value) or abs(value) > MAX_SECONDS:
        raise UsageError(
            f"{option} {shown if shown is not None else f'{value:g}'}: not a number of seconds within 100 years",
            hint=f"at most {MAX_SECONDS:.0f} s",
        )
    return value


def parse_offsets(items: list[str] | None) -> dict[str, float]:
    """``--offset KIND_OR_FILE=±DURATION`` pairs -> {kind or file: seconds}."""
    from ..errors import UsageError

    out: dict[str, float] = {}
    for item in items or []:
        if "=" not in item:
            raise UsageError(f"--offset expects KIND_OR_FILE=DURATION, got {item!r}", hint="e.g. --offset dmon=-2s")
        key, value = item.rsplit("=", 1)
        try:
            seconds = parse_duration(value)
        except ValueError:
            raise UsageError(
                f"--offset {item!r}: {value!r} is not a duration", hint="e.g. -2s, +1.5s, 500ms, -1m"
            ) from None
        out[key.strip()] = check_seconds("--offset", seconds, repr(item))
    return out


@dataclasses.dataclass(frozen=True)
class AnalysisArgs:
    """The analysis options as given on the command line (these defaults are the options')."""

    year: int | None = None
    tz: str | None = None
    file_kind: list[str] | None = None
    offset: list[str] | None = None
    before: float = 10.0
    after: float = 2.0
    lookback_steps: int | None = None
    rules: list[str] | None = None
    threshold: list[str] | None = None
    old_set: bool = dataclasses.field(default=True, repr=False)  # --set spells --threshold (not in whatif)

    def options(self, *, debug: bool = False, kinds: list[str] | None = None, **more: Any) -> AnalyzeOptions:
        """The one AnalyzeOptions of these options. ``kinds``: the file-kind overrides when the
        command has read them already (with ``--kind FILE=KIND``: common.filters_from); ``more``:
        other AnalyzeOptions fields (whatif's keep_request_rows). A malformed value is a UsageError."""
        from ..model.result import AnalyzeOptions

        if self.old_set:
            note_old_set(self.threshold)
        check_seconds("--before", self.before)
        check_seconds("--after", self.after)
        if self.tz is not None and not self.tz.strip():  # --tz "$UNSET": no zone, not this machine's
            from ..errors import UsageError

            raise UsageError(
                "--tz: the zone is empty",
                hint="an IANA name (Europe/Berlin) or +HH:MM; leave --tz out for this machine's",
            )
        return AnalyzeOptions(
            year=self.year,
            tz=self.tz,
            kinds=file_kinds(self.file_kind) if kinds is None else kinds,
            offsets=parse_offsets(self.offset),
            debug=debug,
            before=self.before,
            after=self.after,
            lookback_steps=self.lookback_steps,
            rules_files=list(self.rules or []),
            sets=list(self.threshold or []),
            **more,
        )


ANALYSIS = AnalysisArgs()  # the default of a command's ``analysis`` parameter (the decorator replaces it)


def _parameters(old_set: bool) -> list[inspect.Parameter]:
    """The options' parameters, in --help order, with AnalysisArgs' defaults."""
    types = {
        "year": YearOpt,
        "tz": TzOpt,
        "file_kind": FileKindOpt,
        "offset": OffsetOpt,
        "before": BeforeOpt,
        "after": AfterOpt,
        "lookback_steps": LookbackOpt,
        "rules": RulesOpt,
        "threshold": ThresholdOpt if old_set else ThresholdNoSetOpt,
    }
    defaults = {f.name: f.default for f in dataclasses.fields(AnalysisArgs)}
    assert list(types) == [f.name for f in dataclasses.fields(AnalysisArgs) if f.name != "old_set"]
    return [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=defaults[name], annotation=annotation)
        for name, annotation in types.items()
    ]


def analysis_options(*, old_set: bool = True) -> Callable[[F], F]:
    """Give a command the analysis options: its parameter ``analysis`` (an :class:`AnalysisArgs`)
    becomes the options' parameters in --help, in its place. ``old_set=False``: no ``--set`` for
    --threshold (whatif, where --set is a vLLM setting)."""

    def decorate(func: F) -> F:
        try:
            sig = inspect.signature(func, eval_str=True)
        except NameError as exc:  # typer would read them later; here they are read when the module runs
            raise TypeError(
                f"{func.__name__}: its annotations name what is defined below it ({exc}); define that above it"
            ) from exc
        params = list(sig.parameters.values())
        names = [p.name for p in params]
        group = _parameters(old_set)
        clash = {p.name for p in group} & set(names)
        if "analysis" not in names or clash:
            raise TypeError(f"{func.__name__}: needs a parameter 'analysis' and none named {sorted(clash)}")
        at = names.index("analysis")
        keyword = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params]
        shown = keyword[:at] + group + keyword[at + 1 :]

        @functools.wraps(func)
        def command(**kwargs: Any) -> Any:
            given = {p.name: kwargs.pop(p.name, p.default) for p in group}
            return func(analysis=AnalysisArgs(**given, old_set=old_set), **kwargs)

        del command.__wrapped__  # typer reads the signature below, not the function's
        command.__signature__ = sig.replace(parameters=shown)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in shown}
        return command  # type: ignore[return-value]

    return decorate
