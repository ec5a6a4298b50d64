"""Exit codes and the one family of errors a user can cause.

Everything that is not a ``PreemptlogError`` is a bug: the CLI shows its
traceback only with ``--debug``.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Process exit codes. The "Exit codes" table of README.md is generated from this."""

    OK = 0
    """Analysis ran; no --fail-on condition was met."""
    INTERNAL = 1
    """A bug in preemptlog (run again with --debug and report the traceback)."""
    USAGE = 2
    """Bad command line: unknown option, bad value, contradictory flags."""
    INPUT = 3
    """No input could be read, or nothing in it was recognisable."""
    FAIL_ON = 4
    """A --fail-on condition was met (the analysis itself succeeded)."""
    PARTIAL = 5
    """The analysis ran, but some input was damaged or skipped (see the warnings)."""
    NOT_VISIBLE = 6
    """--fail-on unknown: the bundle cannot show how many preemptions happened (e.g. a stock V1 log without /metrics scrapes)."""
    CHECK_FAILED = 7
    """`rules --check`: a rule's sample input did not give the verdict it expects (the rules file needs fixing)."""
    NO_WORKLOAD = 8
    """`whatif`: the bundle holds no workload to replay (no request records, no request lines), or an input the replay needs (the KV pool size, the memory lines) is missing."""
    INTERRUPTED = 130
    """Interrupted (Ctrl-C or SIGTERM); no partial output file or temporary file is left behind."""
    PIPE_CLOSED = 141
    """The reader of standard output went away (e.g. `| head -1`); output stopped quietly."""


def documented() -> list[tuple[int, str, str]]:
    """(code, name, meaning) for every exit code, read from the docstrings above (the exit-code table)."""
    import ast
    import inspect

    body = ast.parse(inspect.getsource(ExitCode)).body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for i, node in enumerate(body):
        if isinstance(node, ast.Assign) and i + 1 < len(body) and isinstance(body[i + 1], ast.Expr):
            docs[node.targets[0].id] = body[i + 1].value.value  # type: ignore[attr-defined]
    return [(int(c), c.name, docs[c.name]) for c in ExitCode]


class PreemptlogError(Exception):
    """An error the user can act on: one line on stderr, a documented exit code."""

    exit_code: ExitCode = ExitCode.INTERNAL

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        """The message on one line: what, which file, then what to do (the hint)."""
        text = self.message
        if self.hint:
            text = f"{text} ({self.hint})"
        return " ".join(text.split())


class UsageError(PreemptlogError):
    exit_code = ExitCode.USAGE


class InputError(PreemptlogError):
    exit_code = ExitCode.INPUT


class OutputError(UsageError):
    """The output destination cannot be written (-o folder missing, disk full, not writable)."""

    exit_code = ExitCode.USAGE


class PipeClosed(PreemptlogError):
    """Standard output is closed or its reader went away."""

    exit_code = ExitCode.PIPE_CLOSED
