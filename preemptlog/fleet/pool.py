"""``preemptlog fleet run``'s map on one machine: every bundle analysed in a local process pool.

Each worker process analyses a bundle (work.analyse_bundle: the library call, not a CLI
subprocess) and writes its parts (dataset.write_bundle); what comes back to this process is a
small :class:`Outcome`. Workers are started with ``spawn`` (polars' threads do not survive a
fork). A bundle that crashes its worker (a segfault, the out-of-memory killer) breaks the pool:
the bundles that were in flight are run again one at a time, each in a pool of its own, and the
one that breaks it again becomes an ``errors`` row (exit code 1, the signal or status it died
with); the run goes on with a new pool.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import ExitCode
from ..model.result import AnalyzeOptions
from . import dataset
from .work import analyse_bundle, crashed

if TYPE_CHECKING:
    from ..model.result import AnalyzeOptions
    from .work import BundleResult


@dataclass(frozen=True)
class Outcome:
    path: str
    bundle_id: str | None
    outcome: str  # ok | partial | error | skipped | duplicate (the same content as a bundle of this run)
    exit_code: int = 0
    message: str | None = None
    rows: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    peak_rss_mb: float = 0.0


@dataclass(frozen=True)
class RunStats:
    outcomes: list[Outcome]
    seconds: float

    def count(self, outcome: str) -> int:
        return sum(1 for o in self.outcomes if o.outcome == outcome)

    def rows(self, table: str) -> int:
        return sum(o.rows.get(table, 0) for o in self.outcomes)


Work = Callable[[str, "AnalyzeOptions", frozenset[str]], "BundleResult"]
_STATE: dict[str, Any] = {}


def _init(out: str, options: AnalyzeOptions, skip: frozenset[str], work: Work | None, claims: str | None) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    _STATE.update(out=out, options=options, skip=skip, work=work, claims=claims)


def claim(claims: str | None, bundle_id: str, path: str) -> str | None:
    """Claim ``bundle_id`` for ``path`` in this run: None when it is this path's, else the path of the
    bundle of this run that holds the same content already. A bundle's parts are named by its digest,
    so two copies of one bundle (``srv-1/`` and ``srv-2/``, same bytes) would write the same files: the
    second would replace the first's rows while both were counted as analysed. The claim is a file
    created exclusively (``O_EXCL``) in a folder of the run: atomic between the worker processes."""
    if claims is None:
        return None
    mark = os.path.join(claims, bundle_id)
    try:
        fd = os.open(mark, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        try:
            with open(mark, encoding="utf-8", errors="replace") as fh:
                other = fh.read()
        except OSError:
            other = ""
        return None if other == path else (other or "another bundle of this run")
    with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as fh:
        fh.write(path)
    return None


def _written(result: BundleResult, out: str, started: float, claims: str | None = None) -> Outcome:
    import resource

    if result.outcome != "skipped":
        other = claim(claims, result.bundle_id, result.path)
        if other is not None:  # a copy of a bundle of this run: its rows are the other's, not written twice
            return Outcome(
                path=result.path,
                bundle_id=result.bundle_id,
                outcome="duplicate",
                message=f"the same content as {other} (analysed once, as {other})",
                seconds=time.monotonic() - started,
                peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            )
        dataset.write_bundle(out, result.bundle_id, result.tables)

    return Outcome(
        path=result.path,
        bundle_id=result.bundle_id,
        outcome=result.outcome,
        exit_code=result.exit_code,
        message=result.message,
        rows={t: df.height for t, df in result.tables.items()},
        seconds=time.monotonic() - started,
        peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    )


def _task(path: str) -> Outcome:

    started = time.monotonic()
    work = _STATE["work"] or analyse_bundle
    return _written(work(path, _STATE["options"], _STATE["skip"]), _STATE["out"], started, _STATE.get("claims"))


def _pool(
    jobs: int, out: str, options: AnalyzeOptions, skip: frozenset[str], work: Work | None, claims: str | None = None
) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(
        max_workers=jobs,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_init,
        initargs=(out, options, skip, work, claims),
    )


@contextlib.contextmanager
def _worker_threads(jobs: int) -> Iterator[None]:
    """Each worker's polars uses its share of the cores (POLARS_MAX_THREADS, read when polars
    loads in the worker; workers start on demand, so it is set for the whole run)."""
    if os.environ.get("POLARS_MAX_THREADS") is not None:
        yield
        return
    os.environ["POLARS_MAX_THREADS"] = str(max(1, (os.cpu_count() or 1) // jobs))
    try:
        yield
    finally:
        os.environ.pop("POLARS_MAX_THREADS", None)


def _workers(pool: ProcessPoolExecutor) -> list[Any]:
    """The pool's worker processes, taken while the pool still lists them (after a submit): once the
    pool breaks, its manager thread may have dropped them before the caller looks."""
    return list((getattr(pool, "_processes", None) or {}).values())


def _death(workers: list[Any]) -> str:
    """How the pool's dead worker ended (its exit status or signal), as far as it can be seen."""
    for p in workers:
        # The status is there once the process is reaped, by this thread's join or by the pool's manager
        # thread (whose waitpid can win the race: ours then sees no child and the status lands a moment later).
        deadline = time.monotonic() + 5
        p.join(timeout=5)
        while p.exitcode is None and time.monotonic() < deadline:
            time.sleep(0.01)
        code = p.exitcode
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = str(-code)
            hint = " (the out-of-memory killer?)" if -code == signal.SIGKILL else ""
            return f"killed by signal {-code} {name}{hint}"
        if code:
            return f"exited with status {code}"
    return "ended abruptly"


def _stop(pool: ProcessPoolExecutor) -> None:
    procs = list(getattr(pool, "_processes", {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(timeout=5)


def run(
    paths: list[str],
    out: str,
    *,
    jobs: int = 1,
    options: AnalyzeOptions | None = None,
    skip: frozenset[str] = frozenset(),
    on_outcome: Callable[[Outcome], None] | None = None,
    work: Work | None = None,
) -> RunStats:
    """Analyse ``paths`` in ``jobs`` worker processes and write their parts into ``out``.

    ``skip``: bundle ids already in the dataset (not analysed again). ``work``: the per-bundle
    function (default work.analyse_bundle; a module-level function, as the workers import it)."""

    options = options or AnalyzeOptions()
    jobs = max(1, jobs)
    dataset.check_dataset(out)  # never into a folder that holds something else
    dataset.write_marker(out)
    started = time.monotonic()
    outcomes: list[Outcome] = []

    def done(o: Outcome) -> None:
        outcomes.append(o)
        if on_outcome is not None:
            on_outcome(o)

    import shutil
    import tempfile

    claims = tempfile.mkdtemp(prefix="preemptlog-fleet-claims-")  # the digests of this run (claim)
    try:
        with _worker_threads(jobs):
            _map(paths, out, jobs, options, skip, work, done, claims)
    finally:
        shutil.rmtree(claims, ignore_errors=True)
    return RunStats(outcomes, time.monotonic() - started)


def _map(
    paths: list[str],
    out: str,
    jobs: int,
    options: AnalyzeOptions,
    skip: frozenset[str],
    work: Work | None,
    done: Callable[[Outcome], None],
    claims: str | None = None,
) -> None:

    queue = deque(paths)
    suspects: list[str] = []
    while queue:
        pool = _pool(jobs, out, options, skip, work, claims)
        inflight: dict[Future[Outcome], str] = {}
        try:
            while queue or inflight:
                while queue and len(inflight) < jobs * 2:  # a short look-ahead: memory stays bounded
                    p = queue.popleft()
                    inflight[pool.submit(_task, p)] = p
                finished, _ = wait(inflight, return_when=FIRST_COMPLETED)
                for fut in finished:
                    o = fut.result()  # a broken pool raises here: the bundle stays in flight (a suspect)
                    del inflight[fut]
                    done(o)
        except BrokenProcessPool:
            suspects.extend(inflight.values())
            _stop(pool)
            continue
        except BaseException:
            _stop(pool)
            raise
        pool.shutdown(wait=True)
    for p in suspects:  # alone, each in a pool of its own: the one that breaks it again is the crash
        pool = _pool(1, out, options, skip, work, claims)
        workers: list[Any] = []
        try:
            fut = pool.submit(_task, p)
            workers = _workers(pool)
            done(fut.result())
            pool.shutdown(wait=True)
        except BrokenProcessPool:
            why = _death(workers or _workers(pool))
            _stop(pool)
            result = crashed(p, int(ExitCode.INTERNAL), f"the analysis process died: {why}")
            done(_written(result, out, time.monotonic(), claims))
        except BaseException:
            _stop(pool)
            raise
