"""Running a command body: errors to one line and an exit code, progress, the stderr console.

Moved out of cli.py so that the command modules (commands/*.py) import it downwards; cli.py
only builds the typer app and registers the commands. Nothing here imports polars.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from ..errors import ExitCode, PreemptlogError
from ..outputs.console import stderr_console  # the summary's console (also for the commands and cli.py)

if TYPE_CHECKING:
    from rich.console import Console


_OWN_PROCESS = False


def own_process(value: bool) -> None:
    """cli.main() runs the whole process: imports_done() may then tune the garbage collector."""
    global _OWN_PROCESS
    _OWN_PROCESS = value


def imports_done() -> None:
    """A command's heavy imports (polars, the pipeline) are done: when preemptlog is the whole
    process, move their objects out of the collector's sight (gc.freeze), so the collections
    during the run walk only what the run makes (start-up time). Under a test runner
    that calls the app in its own process nothing changes."""
    if _OWN_PROCESS:
        import gc

        gc.freeze()


class _Progress:
    """A rich progress display on stderr, shown only once a run has taken a second (_progress_after):
    bytes of the vLLM logs read, then the stage being worked on (analysis.Profile tells it)."""

    def __init__(self, console: Console) -> None:
        import threading

        self.console = console
        self.lock = threading.Lock()
        self.bar = None
        self.total = 0
        self.done = 0
        self.label = "reading the bundle"
        delay = _progress_after()
        self.timer: threading.Timer | None = threading.Timer(delay, self._show)
        self.timer.daemon = True
        if delay <= 0:  # at once, before the first stage can change the label (no thread to wait for)
            self._show()
        else:
            self.timer.start()

    def _show(self) -> None:
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

        with self.lock:
            if self.timer is None:
                return
            from ..outputs.safe import unicode_ok

            bar = [BarColumn()] if unicode_ok() else []  # the C locale: no block characters
            self.bar = Progress(
                TextColumn("{task.description}", markup=False),
                *bar,
                DownloadColumn(),
                TimeElapsedColumn(),
                console=self.console,
                transient=True,
            )
            self.task = self.bar.add_task(self.label, total=self.total or None, completed=self.done)
            self.bar.start()

    def files(self, total: int) -> None:
        with self.lock:
            self.total = total
            self.label = "reading the vLLM logs"
            if self.bar is not None:
                self.bar.update(self.task, total=total or None, description=self.label)

    def file_done(self, size: int, name: str = "") -> None:
        from ..outputs.safe import neutralise

        with self.lock:
            self.done += size
            if name:
                self.label = f"read {neutralise(name)[-40:]}"
            if self.bar is not None:
                self.bar.update(self.task, completed=self.done, description=self.label)

    def stage(self, name: str) -> None:
        with self.lock:
            self.label = f"analysing (done: {name.split(' (')[0]})"
            if self.bar is not None:
                self.bar.update(self.task, description=self.label)

    def close(self) -> None:
        with self.lock:
            timer, self.timer = self.timer, None
            if timer is not None:
                timer.cancel()
            if self.bar is not None:
                self.bar.stop()
                self.bar = None


def _progress_after() -> float:
    """Seconds before the progress display appears (env PREEMPTLOG_PROGRESS_AFTER, default 1)."""
    try:
        return max(0.0, float(os.environ.get("PREEMPTLOG_PROGRESS_AFTER", "1")))
    except ValueError:
        return 1.0


@contextlib.contextmanager
def progress(quiet: bool = False, no_color: bool = False) -> Iterator[None]:
    """Show progress on stderr while the body runs, when stderr is a terminal and not ``quiet``."""
    try:
        tty = sys.stderr.isatty()
    except (AttributeError, ValueError):
        tty = False
    if quiet or not tty:
        yield
        return
    from ..pipeline import profile

    ui = _Progress(stderr_console(no_color))
    profile.PROGRESS = ui
    try:
        yield
    finally:
        profile.PROGRESS = None
        ui.close()


def _say(line: str) -> None:
    """One line on stderr; silent if stderr itself is gone."""
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        _silence(2)


def _fail(message: str, code: ExitCode) -> typer.Exit:
    from ..outputs.safe import neutralise

    _say(f"preemptlog: error: {neutralise(message)}")
    return typer.Exit(int(code))


def guarded(debug: bool, body: Callable[[], int]) -> None:
    """Run a command body, mapping every failure to one line on stderr and an exit code.

    PreemptlogError: its message and code. Ctrl-C / SIGTERM: "interrupted", 130
    (temporary and partial output files are removed by the ``with`` blocks on the
    way out). The reader of stdout gone: silent, 141. The reader of stderr gone:
    the summary is dropped, the exit code is kept. Anything else is a bug: one
    line, 1; ``--debug`` shows the traceback.
    """
    _quiet_broken_pipes()
    _closed_std_streams()
    import warnings

    try:
        with warnings.catch_warnings():
            if not debug:  # library warnings (polars) are for developers: --debug shows them
                warnings.simplefilter("ignore")
            code = body()
    except PreemptlogError as exc:
        if debug:
            raise
        raise _fail(exc.one_line(), exc.exit_code) from None
    except KeyboardInterrupt:
        _say("preemptlog: interrupted")
        raise typer.Exit(int(ExitCode.INTERRUPTED)) from None
    except typer.Exit:
        raise
    except OSError as exc:
        if _is_broken_pipe(exc):
            _silence(1)
            raise typer.Exit(int(ExitCode.PIPE_CLOSED)) from None
        if debug:
            raise
        if exc.filename:
            raise _fail(f"{exc.filename}: {exc.strerror or exc}", ExitCode.INPUT) from None
        raise _fail(
            f"I/O error: {exc.strerror or exc} (check the free space and permissions of TMPDIR and of -o)",
            ExitCode.INPUT,
        ) from None
    except Exception as exc:
        if _is_broken_pipe(exc):
            _silence(1)
            raise typer.Exit(int(ExitCode.PIPE_CLOSED)) from None
        if debug:
            raise
        detail = str(exc).splitlines()[0] if str(exc) else ""
        raise _fail(
            f"internal error: {type(exc).__name__}: {detail} (run again with --debug and report the traceback)",
            ExitCode.INTERNAL,
        ) from None
    raise typer.Exit(int(code))


@contextlib.contextmanager
def writing_to(target: str | None) -> Iterator[None]:
    """Around the writing of a command's data to ``target`` (``-o FILE``; None or ``-``: standard
    output): a write that fails there (disk full, quota, I/O error: an OSError without a file
    name) is the destination's fault, an OutputError naming it (exit 2, as for a regular ``-o``
    file), not a failure to read the input. A reader gone away stays a broken pipe (exit 141).
    Standard output is flushed inside, so its last buffered bytes fail here too, not at exit."""
    stdout = target in (None, "-")
    try:
        yield
        if stdout and sys.stdout is not None:
            sys.stdout.flush()
    except OSError as exc:
        if _is_broken_pipe(exc) or exc.filename is not None:
            raise
        from ..errors import OutputError

        reason = exc.strerror or (os.strerror(exc.errno) if exc.errno else str(exc))
        if stdout:
            _silence(1)  # what is still buffered must not fail again at exit
            raise OutputError(f"standard output: cannot write ({reason}); the output is incomplete") from None
        raise OutputError(f"-o {target}: cannot write ({reason})") from None


@contextlib.contextmanager
def writing_into(folder: Path, *, unnamed: bool = True) -> Iterator[None]:
    """Around a command that writes files into the folder ``folder`` (``-o DIR``: simulate, capture):
    an OSError on the folder, a folder on the way to it or a file in it (cannot be created, not a
    folder, not writable, disk full), and with ``unnamed`` one without a file name (a write that failed
    on a full disk), is the destination's fault: an OutputError naming ``-o`` (exit 2), never the exit of
    an input that cannot be read (3). Any other OSError (an input's) passes on unchanged."""
    try:
        yield
    except OSError as exc:
        if _is_broken_pipe(exc):
            raise
        if exc.filename is None:
            if not unnamed:
                raise
            what = "cannot write"
        else:
            name = os.fsdecode(exc.filename)
            path, dest = Path(os.path.abspath(name)), Path(os.path.abspath(folder))
            if dest in path.parents:
                what = f"cannot write {name}"
            elif path == dest or path in dest.parents:
                what = "cannot create or open the folder" + ("" if path == dest else f" ({name})")
            else:
                raise
        from ..errors import OutputError

        reason = exc.strerror or (os.strerror(exc.errno) if exc.errno else str(exc))
        raise OutputError(f"-o {folder}: {what} ({reason})") from None


def _is_broken_pipe(exc: BaseException) -> bool:
    import errno

    if isinstance(exc, BrokenPipeError) or getattr(exc, "errno", None) == errno.EPIPE:
        return True
    text = str(exc)
    return "Broken pipe" in text or "os error 32" in text


def _silence(fd: int) -> None:
    """Point ``fd`` (1 or 2) at /dev/null so later writes and the final flush succeed quietly."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, fd)
        finally:
            if devnull != fd:
                os.close(devnull)
    except (OSError, ValueError):
        pass


def _silence_stdout() -> None:
    _silence(1)


_RICH_PATCHED = False


def _quiet_broken_pipes() -> None:
    """rich answers a broken pipe with SystemExit(1); make it a BrokenPipeError on stdout
    (-> exit 141) and a silent no-op on stderr (the exit code is kept).

    rich is imported only by the outputs that use it (the summary, the table, progress):
    when it is not loaded yet, the patch is applied the moment ``rich.console`` is imported
    (_PatchRichOnImport), so ``analyze -q -f ndjson`` does not pay for rich (~15 ms)."""
    global _RICH_PATCHED
    if _RICH_PATCHED:
        return
    _RICH_PATCHED = True
    module = sys.modules.get("rich.console")
    if module is not None:
        _patch_console(module)
        return
    try:
        sys.meta_path.insert(0, _PatchRichOnImport())
    except Exception:  # pragma: no cover - an unusual import system: patch now
        try:
            import rich.console
        except ImportError:
            return
        _patch_console(rich.console)


def _patch_console(module: Any) -> None:
    def on_broken_pipe(self: Any) -> None:
        if getattr(self, "stderr", False) or getattr(self, "file", None) is sys.__stderr__:
            _silence(2)
            self.quiet = True
            return
        _silence(1)
        raise BrokenPipeError(32, "Broken pipe")

    module.Console.on_broken_pipe = on_broken_pipe


class _PatchRichOnImport:
    """A meta-path finder that steps aside after one use: it finds ``rich.console`` through the
    other finders and patches the module right after it has run (_patch_console)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != "rich.console":
            return None
        import importlib.util

        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        loader = getattr(spec, "loader", None)
        if spec is None or loader is None or not hasattr(loader, "exec_module"):
            return spec
        spec.loader = _PatchingLoader(loader)
        return spec


class _PatchingLoader:
    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.loader.exec_module(module)
        _patch_console(module)

    def __getattr__(self, name: str) -> Any:  # get_resource_reader, is_package, ...
        return getattr(self.loader, name)


class _ClosedStdout:
    """Stands for a standard output closed by the caller (``>&-``): not a terminal, no buffer
    (outio then says so), so ``-o FILE`` still works."""

    buffer = None

    def isatty(self) -> bool:
        return False

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass

    def fileno(self) -> int:
        raise OSError("standard output is closed")


def _closed_std_streams() -> None:
    if sys.stdout is None:
        sys.stdout = _ClosedStdout()
    if sys.stderr is None:  # 2>&-: messages go nowhere, exit codes still tell
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115
