"""The command line: a thin typer layer over the library.

Data goes to stdout (or ``-o FILE``), the human summary to stderr. Errors are
one line on stderr with a documented exit code (errors.ExitCode); a traceback
only with ``--debug``. polars is imported inside commands so ``--help`` is fast.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Callable, Optional

import typer

from . import __version__
from .errors import ExitCode, PreemptlogError
from .render import OutputFormat

app = typer.Typer(
    name="preemptlog",
    help=(
        "Forensics for vLLM PREEMPTED events: find every preemption in a vLLM log or incident bundle, "
        "align the evidence around it and name the cause.\n\n"
        "Example: preemptlog analyze vllm.log"
    ),
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"preemptlog {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Forensics for vLLM PREEMPTED events."""


def stderr_console(no_color: bool = False):
    from rich.console import Console

    return Console(
        stderr=True,
        no_color=no_color or bool(os.environ.get("NO_COLOR")),
        highlight=False,
        soft_wrap=True,
    )


def _fail(message: str, code: ExitCode) -> "typer.Exit":
    from .render.safe import neutralise

    sys.stderr.write(f"preemptlog: error: {neutralise(message)}\n")
    sys.stderr.flush()
    return typer.Exit(int(code))


def guarded(debug: bool, body: Callable[[], int]) -> None:
    """Run a command body, mapping every failure to one line and an exit code."""
    try:
        code = body()
    except PreemptlogError as exc:
        if debug:
            raise
        raise _fail(exc.one_line(), exc.exit_code) from None
    except KeyboardInterrupt:
        sys.stderr.write("preemptlog: interrupted\n")
        raise typer.Exit(int(ExitCode.INTERRUPTED)) from None
    except BrokenPipeError:
        _silence_stdout()
        raise typer.Exit(int(ExitCode.PIPE_CLOSED)) from None
    except typer.Exit:
        raise
    except OSError as exc:
        if _is_broken_pipe(exc):
            _silence_stdout()
            raise typer.Exit(int(ExitCode.PIPE_CLOSED)) from None
        if debug:
            raise
        raise _fail(f"{exc.filename or 'I/O'}: {exc.strerror or exc}", ExitCode.INPUT) from None
    except Exception as exc:  # noqa: BLE001 - the last resort; --debug shows it
        if debug:
            raise
        raise _fail(
            f"internal error: {type(exc).__name__}: {exc} (run again with --debug and report the traceback)",
            ExitCode.INTERNAL,
        ) from None
    raise typer.Exit(int(code))


def _is_broken_pipe(exc: BaseException) -> bool:
    import errno

    if isinstance(exc, BrokenPipeError) or getattr(exc, "errno", None) == errno.EPIPE:
        return True
    return "Broken pipe" in str(exc) or "os error 32" in str(exc)


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


from .commands import register_all  # noqa: E402

register_all(app)


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.stderr.write("preemptlog: interrupted\n")
        sys.exit(int(ExitCode.INTERRUPTED))
    except BrokenPipeError:
        _silence_stdout()
        sys.exit(int(ExitCode.PIPE_CLOSED))
