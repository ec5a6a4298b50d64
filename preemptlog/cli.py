"""The command line: a thin typer layer over the library.

Data goes to stdout (or ``-o FILE``), the human summary to stderr. Errors are
one line on stderr with a documented exit code (errors.ExitCode); a traceback
only with ``--debug``. polars is imported inside commands so ``--help`` is fast.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from . import __version__
from .commands.coercion import install as install_plain_coercion
from .commands.runner import (  # guarded, progress, stderr_console: what commands imported from here
    _is_broken_pipe,
    _say,
    own_process,
    _silence,
    guarded,
    progress,
    stderr_console,
)
from .errors import ExitCode

__all__ = ["app", "guarded", "main", "progress", "stderr_console"]


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


def _version(value: bool) -> None:
    if value:
        typer.echo(f"preemptlog {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", "-V", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Forensics for vLLM PREEMPTED events."""


def _on_sigterm(signum, frame) -> None:
    raise KeyboardInterrupt


from .commands import register_all  # noqa: E402

register_all(app)


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
        code = app(standalone_mode=False)
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
        from .render.safe import neutralise

        ctx = getattr(exc, "ctx", None)
        hint = f" (see {ctx.command_path} --help)" if ctx is not None else ""
        _say(f"preemptlog: error: {neutralise(exc.format_message())}{hint}")
        sys.exit(int(getattr(exc, "exit_code", ExitCode.USAGE)))
    except OSError as exc:
        if _is_broken_pipe(exc):  # e.g. `preemptlog --help | head -1`
            _silence(1)
            sys.exit(int(ExitCode.PIPE_CLOSED))
        raise
    sys.exit(int(code or 0))
