"""Grading many notebooks: which ones (`collect`, `take_shard`), and a pool of worker
processes that grade them `jobs` at a time (`grade_all`).

The pool is forked from the `grade` process once its suites and torch are loaded, so a
worker starts in milliseconds. Each worker grades one notebook at a time, as the single
`grade` command does, and is the reaper of the processes its kernels leave behind. It
starts each kernel ahead of need: the first as soon as it exists, and the next one while
the notebook in hand runs its suite, so that booting a kernel and importing torch in it
(most of what a grading costs) overlaps with grading. A kernel in which no notebook ran
yet (the notebook could not be read, say) is kept for the next one.

The parent hands out notebooks one at a time, in order, to whichever worker is free, and
collects `Outcome`s: a notebook that cannot be graded, or a worker that dies, is an
outcome with its reason, never the end of the batch.

Stopped at any moment, nothing is left: the parent makes one scratch folder for the batch,
in which every worker's sessions make theirs, and removes it once every worker is gone
(one that was killed cannot remove its own). A worker holds every session it opens in a
list before the session holds anything, and closes them all on its way out.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import shutil
import signal
import tempfile
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from grader.core.errors import ExitCode, GraderError, UsageError
from grader.core.limits import Limits
from grader.core.results import Outcome
from grader.core.signals import check, held

NOTEBOOK_SUFFIX = ".ipynb"
STOP_SECONDS = 15.0  # how long stopped workers have to clean up before they are killed


def collect(paths: Iterable[str]) -> list[str]:
    """The notebooks that `paths` name: each file as given, and every `.ipynb` below each
    folder (skipping folders whose name starts with a dot, `.ipynb_checkpoints` among
    them), each once, sorted.

    Raises:
        UsageError: a path does not exist.
    """
    found: dict[Path, str] = {}
    for given in paths:
        path = Path(given)
        if path.is_dir():
            for notebook in sorted(path.rglob(f"*{NOTEBOOK_SUFFIX}")):
                hidden = any(part.startswith(".") for part in notebook.relative_to(path).parts)
                if not hidden and notebook.is_file():
                    found.setdefault(notebook.resolve(), str(notebook))
        elif path.exists() or path.is_symlink():
            found.setdefault(path.resolve(), given)
        else:
            raise UsageError(f"{given}: no such file or folder")
    return sorted(found.values())


def parse_shard(text: str) -> tuple[int, int]:
    """'2/4' -> (2, 4): the second of four shards.

    Raises:
        UsageError: not I/N with 1 <= I <= N.
    """
    left, _, right = text.partition("/")
    if not (left.strip().isdigit() and right.strip().isdigit()):
        raise UsageError(f"--shard {text}: expected I/N, e.g. 1/4")
    index, count = int(left), int(right)
    if not 1 <= index <= count:
        raise UsageError(f"--shard {text}: I must be between 1 and N")
    return index, count


def take_shard(notebooks: list[str], index: int, count: int) -> list[str]:
    """Shard `index` of `count` (from 1): every count-th notebook of the sorted list,
    starting at the index-th. The same list gives every runner a disjoint share, and the
    shares together are the whole list."""
    return [path for k, path in enumerate(sorted(notebooks)) if k % count == index - 1]


class Events:
    """What the pool reports while it runs (the progress display overrides these)."""

    def started(self, index: int, notebook: str) -> None:
        """Notebook `index` went to a worker."""

    def finished(self, index: int, outcome: Outcome) -> None:
        """Notebook `index` is graded (or could not be)."""

    def tick(self) -> None:
        """Called several times a second while the pool waits."""


@dataclass
class _Worker:
    process: Any  # a multiprocessing Process (fork context)
    conn: Connection
    current: int | None = None
    stopping: bool = False  # told to stop: it is on its way out


def grade_all(
    notebooks: list[str],
    jobs: int,
    limits: Limits,
    catalog: dict[str, Any],
    exercise: str | None = None,
    events: Events | None = None,
) -> list[Outcome]:
    """Grade `notebooks` with up to `jobs` worker processes; the outcomes in their order.

    `catalog` is loaded, and the grader's torch imported, before the workers are forked
    (they inherit both); the warm template their kernels fork from is started here,
    once, if it is not running yet. Interrupted (KeyboardInterrupt, `Stopped`), it stops every worker
    (each cleans up its kernels), kills whatever is left below this process and removes
    the batch's scratch folder.
    """
    from grader.kernel.launch import SCRATCH_NAME_CHARS, scratch_root, warm_up

    events = events or Events()
    warm_up(limits, for_children=True)  # one template for every worker (its owner's children)
    context = multiprocessing.get_context("fork")
    queue = deque(enumerate(notebooks))
    outcomes: dict[int, Outcome] = {}
    workers: dict[Connection, _Worker] = {}
    scratch: Path | None = None

    def spawn() -> None:
        with held():  # a worker forked is a worker known, to be stopped
            ours, theirs = context.Pipe()
            process = context.Process(
                target=_work,
                args=(theirs, limits, catalog, exercise, scratch, os.getpid()),
                name="grade-worker",
            )
            process.start()
            theirs.close()
            workers[ours] = _Worker(process, ours)

    def hand_out(worker: _Worker) -> None:
        with held():  # a message is sent whole
            if not queue:
                worker.current, worker.stopping = None, True
                with contextlib.suppress(OSError):
                    worker.conn.send(("stop",))
                return
            index, notebook = queue.popleft()
            ahead = len(queue) >= len(workers)  # enough left that its next kernel will be used
            worker.current = index
            worker.conn.send(("grade", index, notebook, ahead))
        events.started(index, notebook)

    try:
        with held():
            scratch = scratch_root(room=SCRATCH_NAME_CHARS)
        for _ in range(min(jobs, len(notebooks))):
            spawn()
        while len(outcomes) < len(notebooks):
            check()  # a signal whose exception a library swallowed (torch's import, say)
            for ready in wait(list(workers), timeout=0.25):
                worker = next(w for w in workers.values() if w.conn is ready)
                try:
                    message = worker.conn.recv()
                except (EOFError, OSError):  # the worker died
                    _bury(worker)
                    del workers[worker.conn]
                    if worker.current is not None:
                        index = worker.current
                        outcomes[index] = _died(notebooks[index], worker.process.exitcode)
                        events.finished(index, outcomes[index])
                    if queue:
                        spawn()
                    continue
                if message[0] == "done":
                    _, index, outcome = message
                    outcomes[index] = outcome
                    events.finished(index, outcome)
                hand_out(worker)
            events.tick()
    finally:
        with held():
            _stop(list(workers.values()))
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)
    return [outcomes[index] for index in range(len(notebooks))]


def _died(notebook: str, code: int | None) -> Outcome:
    how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
    return Outcome(
        notebook,
        error=f"internal error: the grading process died ({how})",
        exit_code=ExitCode.INTERNAL_ERROR,
    )


def _bury(worker: _Worker) -> None:
    worker.process.join(1)
    if worker.process.is_alive():
        worker.process.kill()
        worker.process.join()
    worker.conn.close()


def _stop(workers: list[_Worker]) -> None:
    """Stop every worker: one told to stop by closing its pipe, any other (an interrupted
    batch: busy, or still starting) by SIGTERM; each cleans up after itself. Any that
    outlasts STOP_SECONDS is killed, and so is anything left below this process."""
    from grader.kernel import processes as procs

    for worker in workers:
        worker.conn.close()  # a worker waiting for work: the closed pipe ends its wait
        if not worker.stopping and worker.process.is_alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker.process.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_SECONDS
    for worker in workers:
        worker.process.join(max(0.0, deadline - time.monotonic()))
        if worker.process.is_alive():
            worker.process.kill()
            worker.process.join()
        worker.conn.close()
    procs.kill_until_none(procs.adopted)  # what the killed workers left behind


# -- in a worker process ----------------------------------------------------------------


def _work(
    conn: Connection,
    limits: Limits,
    catalog: dict[str, Any],
    exercise: str | None,
    scratch: Path | None,
    parent: int,
) -> None:
    """A worker: grade what the parent sends, one at a time, until told to stop. Its
    sessions make their scratch folders in `scratch`, the batch's."""
    # Forked in a held section: a stopping signal waits here until `forked()` raises it.
    from grader.core.signals import Stopped, forked, ignore_signals
    from grader.kernel.processes import adopt_orphans, keep_private
    from grader.kernel.template import close_all as close_template
    from grader.run.pipeline import one_torch_thread

    sessions: list[Any] = []  # every session opened here and not closed yet
    try:
        forked()
        _die_with(parent)
        tempfile.tempdir = str(scratch) if scratch else None  # this process's own
        adopt_orphans()  # not inherited: the orphans of this worker's kernels stay below it
        keep_private()
        with one_torch_thread():
            session = _launch(limits, sessions)
            conn.send(("ready",))
            while True:
                message = conn.recv()
                if message[0] != "grade":
                    return
                check()
                _, index, notebook, ahead = message
                outcome, session = _grade_one(
                    sessions, session, notebook, limits, catalog, exercise, ahead
                )
                conn.send(("done", index, outcome))
    except (KeyboardInterrupt, Stopped, EOFError, BrokenPipeError):
        return  # stopped, or the parent is gone: clean up below, quietly
    finally:
        with held():
            for opened in sessions:
                opened.close()
            close_template()
            conn.close()
            ignore_signals()  # on its way out, cleaned up: nothing is left to stop


def _die_with(parent: int) -> None:
    """Be told to stop (SIGTERM, which cleans up) when the parent dies, however it dies:
    a parent killed outright cannot stop its workers, and their pipes to it do not read
    as closed while another worker holds the parent's ends."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):  # Linux only
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PDEATHSIG
    if os.getppid() != parent:  # it died before the request took
        os.kill(os.getpid(), signal.SIGTERM)


def _enter(limits: Limits, sessions: list[Any]) -> Any:
    """A session entered now (its kernel booting), put on `sessions` before it holds
    anything, so that the worker closes it on its way out whatever happens.

    Raises:
        KernelStartError: the kernel would not start.
    """
    from grader.kernel import Session

    session = Session([], limits)
    sessions.append(session)
    return session.__enter__()


def _launch(limits: Limits, sessions: list[Any]) -> Any:
    """A session entered ahead of need, or None if it would not start (the notebook that
    needs it then says why)."""
    try:
        return _enter(limits, sessions)
    except GraderError:
        return None


def _close(session: Any, sessions: list[Any]) -> None:
    """Close a session of the worker's and forget it (closing twice does no harm)."""
    session.close()
    with contextlib.suppress(ValueError):
        sessions.remove(session)


def _grade_one(
    sessions: list[Any],
    session: Any,
    notebook: str,
    limits: Limits,
    catalog: dict[str, Any],
    exercise: str | None,
    ahead: bool,
) -> tuple[Outcome, Any]:
    """Grade one notebook in `session` (or a fresh one); return its outcome and the
    session for the next notebook (None: start one when needed). Every session it opens
    goes on `sessions`."""
    from grader.run.pipeline import GradingContext, grade_outcome

    given: list[Any] = []  # the session the grading took (it closes it)
    following: list[Any] = []

    def take(_: Limits) -> Any:
        given.append(session if session is not None else _enter(limits, sessions))
        return given[0]

    def cells_done() -> None:
        if ahead:
            following.append(_launch(limits, sessions))

    ctx = GradingContext(catalog, limits, exercise, take, cells_done)
    try:
        outcome = grade_outcome(notebook, ctx)
    finally:
        for opened in given:
            _close(opened, sessions)
    if not given:  # nothing ran in the session (a bad file): keep it for the next one
        return outcome, session
    if following:
        return outcome, following[0]
    return outcome, _launch(limits, sessions) if ahead else None


def worst(outcomes: list[Outcome]) -> int:
    """The batch's exit code: the worst of its notebooks' (0 < 1 < 2 < 3)."""
    return max((o.exit_code for o in outcomes), default=ExitCode.FULL_MARKS)
