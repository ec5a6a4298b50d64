"""The command line: a thin typer layer over the library.

Data goes to stdout (or ``-o FILE``), the human summary to stderr. Errors are
one line on stderr with a documented exit code (errors.ExitCode); a traceback
only with ``--debug``. polars is imported inside commands so ``--help`` is fast.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Annotated

import typer

from .commands import COMMANDS, register_all
from .commands.coercion import install as install_plain_coercion
from .commands.runner import _is_broken_pipe, _say, _silence, guarded, own_process, progress, stderr_console
from .errors import ExitCode
from .model import VERSION as __version__

__all__ = ["app", "guarded", "main", "progress", "stderr_console"]

app: typer.Typer  # made on first use: see __getattr__ below


def _arguments_show_their_metavar() -> None:
    """Help placeholders name what they want, not a Python type: typer prints ``PATH <list[str]>``
    and ``--title <str>``. An argument shows its metavar (or name) only; an option without a
    metavar shows its own name (``--title TITLE``); choices keep their list (``<table|json>``)."""
    from typer.core import TyperArgument, TyperOption

    opt_original = TyperOption.display_type_rich

    def arg_display(self, ctx):
        return None  # the argument's metavar or name says it

    def opt_display(self, ctx):
        shown = opt_original(self, ctx)
        if self.metavar or self.is_flag or not shown or "|" in shown:  # a metavar, a flag, or choices
            return shown
        longs = [o for o in self.opts if o.startswith("--")]
        return (longs[0][2:] if longs else self.name or "value").upper().replace("-", "_")

    TyperArgument.display_type_rich = arg_display  # type: ignore[method-assign]
    TyperOption.display_type_rich = opt_display  # type: ignore[method-assign]


_arguments_show_their_metavar()
install_plain_coercion()  # option values without importing pydantic where certain (commands/coercion.py)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"preemptlog {__version__}")
        raise typer.Exit()


def _root(
    version: Annotated[
        bool, typer.Option("--version", "-V", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Forensics for vLLM PREEMPTED events."""


def _on_sigterm(signum, frame) -> None:
    raise KeyboardInterrupt


def make_app(names: Sequence[str] = COMMANDS) -> typer.Typer:
    """The typer app with these subcommands (all of them, in --help order, by default)."""
    app = typer.Typer(
        name="preemptlog",
        help=(
            "Forensics for vLLM PREEMPTED events: find every preemption in a vLLM log or incident bundle, "
            "align the evidence around it and name the cause.\n\n"
            "Example: preemptlog analyze vllm.log"
        ),
        add_completion=True,
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
        rich_markup_mode=None,
    )
    app.callback()(_root)
    register_all(app, names)
    return app


_FULL_APP: list[typer.Typer] = []


def __getattr__(name: str) -> typer.Typer:
    """``preemptlog.cli.app``: the app with every command, made on first use (tests, typer's
    tools); main() makes only the one command the command line names."""
    if name == "app":
        if not _FULL_APP:
            _FULL_APP.append(make_app())
        return _FULL_APP[0]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _commands_for(argv: Sequence[str]) -> Sequence[str]:
    """The commands main() must register: only the one named by the first argument (the root
    has no options that take a value, so it is the command), else all (--help, --version, a
    typo, shell completion). Building and importing the other seven cost ~15 ms of each run."""
    if argv and argv[0] in COMMANDS and not any(k.startswith("_") and k.endswith("_COMPLETE") for k in os.environ):
        return [argv[0]]
    return COMMANDS


def own_words(message: str) -> str:
    """A command-line error in the tool's words: ``--format: 'xml' is not one of ...``, not click's
    ``Invalid value for '--format' / '-f': Value error, ...`` (pydantic's prefix, click's framing)."""
    import re

    message = re.sub(r"\b(?:Value|Type|Assertion) error, ", "", message)
    message = re.sub(r"^Invalid value for '([^']+)'(?: / '[^']+')*: ", r"\1: ", message)
    message = re.sub(r"Input should be a valid (\w+)(?:, [^.]*)?", r"not a valid \1", message)
    message = re.sub(r"Input should be ", "should be ", message)
    return message.rstrip(".") if message.count(".") == 1 and message.endswith(".") else message


def main() -> None:
    """The ``preemptlog`` program (the console script and ``python -m preemptlog``)."""
    import gc

    own_process(True)  # runner.imports_done() may freeze the objects of the imports (not under CliRunner)
    try:
        _main()
    finally:
        # The interpreter's last collection walks every object the imports made (~40 ms on a
        # 1 MB log); frozen, they are left to the exit. Nothing here relies on a collection:
        # files and temporary folders are closed by their ``with`` blocks, stdout is flushed.
        gc.freeze()


def _main() -> None:
    import signal

    try:  # a CI timeout (SIGTERM) cleans up like Ctrl-C
        signal.signal(signal.SIGTERM, _on_sigterm)
    except (ValueError, OSError):  # pragma: no cover - not the main thread
        pass
    try:
        code = make_app(_commands_for(sys.argv[1:]))(standalone_mode=False)
    except KeyboardInterrupt:
        _say("preemptlog: interrupted")
        sys.exit(int(ExitCode.INTERRUPTED))
    except BrokenPipeError:
        _silence(1)
        sys.exit(int(ExitCode.PIPE_CLOSED))
    except typer.Abort:
        _say("preemptlog: interrupted")
        sys.exit(int(ExitCode.INTERRUPTED))
    except typer.TyperException as exc:  # bad command line: one line too, not the usage block
        if type(exc).__name__ == "NoArgsIsHelpError" or not hasattr(exc, "format_message"):
            exc.show()  # type: ignore[attr-defined]
            sys.exit(int(getattr(exc, "exit_code", ExitCode.USAGE)))
        from .outputs.safe import neutralise

        ctx = getattr(exc, "ctx", None)
        hint = f" (see {ctx.command_path} --help)" if ctx is not None else ""
        _say(f"preemptlog: error: {neutralise(own_words(exc.format_message()))}{hint}")
        sys.exit(int(getattr(exc, "exit_code", ExitCode.USAGE)))
    except OSError as exc:
        if _is_broken_pipe(exc):  # e.g. `preemptlog --help | head -1`
            _silence(1)
            sys.exit(int(ExitCode.PIPE_CLOSED))
        if exc.filename is not None:
            raise
        # --help or --version written to a full disk (`> /dev/full`): the output's fault, one line
        # (errors.OutputError); what is still buffered is dropped, not written again at exit.
        _silence(1)
        _say(f"preemptlog: error: standard output: cannot write ({exc.strerror or exc}); the output is incomplete")
        sys.exit(int(ExitCode.USAGE))
    sys.exit(int(code or 0))
