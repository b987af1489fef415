"""`grade --watch NOTEBOOK`: grade one notebook, then grade it again each time it is saved,
redrawing its card in place. This module owns the flags `--watch` refuses, telling a
finished save from one under way (editors write a file in pieces), the kernel each grading
gets (a fresh one, started ahead of need right after the previous grading), and the status
line after each card, which programs read:

    watching NOTEBOOK: grading N took X.XX s; saved changes are graded again (Ctrl-C to stop)

Ctrl-C or SIGTERM stops it quietly, every kernel closed, with the exit code of the signal
(130, 143); it never ends on its own.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from grader.core.errors import ExitCode, GraderError, NotebookError, UsageError
from grader.core.limits import Limits
from grader.core.signals import Stopped, check

if TYPE_CHECKING:
    from rich.console import Console

    from grader.core.notebook import Notebook
    from grader.core.results import Outcome
    from grader.suite.exercise import Exercise

POLL_S = 0.1  # how often the file is looked at
SETTLE_S = 0.08  # a save is over once the file has not changed for this long
# The outputs a terminal view has no use for (each is one run's, not a save's).
REFUSED = (
    ("json", "--json"),
    ("junit", "--junit"),
    ("gradescope", "--gradescope"),
    ("csv", "--csv"),
    ("output", "--output"),
    ("format", "--format"),
    ("profile_plot", "--profile-plot"),
)

Stamp = tuple[int, int, int] | None  # (mtime_ns, size, inode); None: no such file


def refuse_with_watch(args: argparse.Namespace) -> None:
    """Refuse what `--watch` cannot do, before anything is read or started.

    Raises:
        UsageError: more than one notebook, a folder or `--shard`; an output flag.
    """
    if len(args.paths) != 1 or Path(args.paths[0]).is_dir() or args.shard:
        raise UsageError("--watch follows one notebook file: give one, no folder and no --shard")
    for name, flag in REFUSED:
        if getattr(args, name, None):
            raise UsageError(
                f"--watch and {flag}: --watch redraws the card in the terminal and writes "
                f"nothing else; grade without --watch for {flag}"
            )


def watch(args: argparse.Namespace, limits: Limits) -> int:
    """Grade the notebook at `args.paths[0]`, draw its card, and again after each save,
    until a stopping signal arrives.

    Returns:
        The exit code of the signal that stopped it (130 Ctrl-C, 143 SIGTERM).

    Raises:
        UsageError: `--exercise` names no exercise of the catalog.
    """
    from grader.cli.output import Stdout
    from grader.kernel.launch import warm_up
    from grader.run.pipeline import one_torch_thread
    from grader.suite.exercise import load_catalog, use_exercises

    kernels = _Kernels(limits)
    try:
        use_exercises(args.exercises)
        # The first kernel (or the warm template it forks from) boots while the catalog
        # and torch load, as in `grade_file`.
        warm = warm_up(limits)
        if not warm:
            kernels.start_next()
        with one_torch_thread():
            catalog = load_catalog()
            if warm:
                kernels.start_next()
            if args.exercise and args.exercise not in catalog:
                known = ", ".join(sorted(catalog)) or "none"
                raise UsageError(f"--exercise {args.exercise}: unknown exercise (known: {known})")
            _follow(args.paths[0], Stdout(highlight=False), kernels, catalog, args.exercise)
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED
    except Stopped as e:
        return ExitCode.stopped_by(e.signum)
    finally:
        kernels.close()


def _follow(
    path: str,
    console: Console,
    kernels: _Kernels,
    catalog: Mapping[str, Exercise],
    exercise: str | None,
) -> NoReturn:
    """The loop: wait for a readable version, grade it, draw, wait for the next save."""
    count = 0
    while True:
        stamp, notebook, problem = _settled(path)
        if notebook is None:
            _print(f"waiting: {problem}")
            _wait_for_change(path, stamp, kernels)
            continue
        count += 1
        if count > 1 and console.is_terminal:
            console.print("saved: grading again...", style="dim", highlight=False)
        began = time.monotonic()
        outcome = kernels.grade(path, notebook, catalog, exercise)
        took = time.monotonic() - began
        check()  # a stopping signal whose exception a library swallowed
        kernels.start_next()  # the next grading's kernel boots while we draw and wait
        _draw(console, outcome, count)
        _print(
            f"watching {path}: grading {count} took {took:.2f} s; "
            "saved changes are graded again (Ctrl-C to stop)"
        )
        _wait_for_change(path, stamp, kernels)  # at once if saved during the grading


def _draw(console: Console, outcome: Outcome, count: int) -> None:
    """The card in place of the last one (a terminal), or after a separator (a log)."""
    from grader.report.card import render

    if console.is_terminal:
        console.clear()
    elif count > 1:
        console.rule(characters="=")
    if outcome.report is None:
        console.print(f"cannot grade: {outcome.error}", markup=False, highlight=False)
        return
    render(outcome.report, console)
    if outcome.report.profile:
        from grader.run.profile import render_profile

        render_profile(outcome.report.profile, console)


def _print(line: str) -> None:
    """A status line, whole (never wrapped: programs read it) and flushed."""
    print(line, flush=True)


def _stamp(path: str) -> Stamp:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino


def _settled(path: str) -> tuple[Stamp, Notebook | None, str]:
    """Wait until the file has not changed for SETTLE_S, then read it: its stamp, and the
    notebook, or None and why it cannot be read (a save half written, say)."""
    from grader.core.notebook import read_notebook

    stamp = _stamp(path)
    while True:
        time.sleep(SETTLE_S)
        check()
        if _stamp(path) != stamp:
            stamp = _stamp(path)
            continue
        try:
            notebook: Notebook | None = read_notebook(path)
            problem = ""
        except NotebookError as e:
            notebook, problem = None, str(e)
        if _stamp(path) == stamp:  # else it changed while being read: wait again
            return stamp, notebook, problem
        stamp = _stamp(path)


def _wait_for_change(path: str, seen: Stamp, kernels: _Kernels) -> None:
    """Return once the file is no longer the version `seen`."""
    while _stamp(path) == seen:
        kernels.refresh()
        time.sleep(POLL_S)
        check()


class _Kernels:
    """The kernel each grading gets: a fresh one every time (never one that ran candidate
    code), started ahead of need so that a re-grading does not wait for it to boot. Every
    session opened is on `opened` before it holds anything, and `close` closes them all."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.opened: list[Any] = []
        self.ready: Any = None  # entered, nothing run in it yet

    def start_next(self) -> None:
        """Start the next grading's kernel now (if it will not start, the grading that
        needs it tries again and says why)."""
        if self.ready is None:
            try:
                self.ready = self._enter()
            except GraderError:
                self.ready = None

    def refresh(self) -> None:
        """While the file is unchanged: a kernel that has waited half of `--timeout` is
        replaced (its watchdog ends it past its deadline, counted from its start)."""
        ready = self.ready
        if ready is not None and ready.deadline - time.monotonic() < self.limits.total_timeout / 2:
            self.ready = None
            self._close(ready)
            self.start_next()

    def grade(
        self, path: str, notebook: Notebook, catalog: Mapping[str, Exercise], exercise: str | None
    ) -> Outcome:
        """Grade `notebook` in the kernel started ahead (or a fresh one); the grading
        closes it."""
        from grader.run.pipeline import GradingContext, grade_outcome

        given: list[Any] = []

        def take(_: Limits) -> Any:
            session, self.ready = self.ready, None
            given.append(session if session is not None else self._enter())
            return given[0]

        try:
            return grade_outcome(
                path, GradingContext(catalog, self.limits, exercise, take), notebook
            )
        finally:
            for session in given:
                self._close(session)

    def close(self) -> None:
        """Close every session still open (killing its kernel)."""
        self.ready = None
        for session in list(self.opened):
            self._close(session)

    def _enter(self) -> Any:
        from grader.kernel import Session

        session = Session([], self.limits)
        self.opened.append(session)  # before it holds anything
        try:
            return session.__enter__()
        except BaseException:
            self._close(session)
            raise

    def _close(self, session: Any) -> None:
        session.close()  # closing twice does no harm
        if session in self.opened:
            self.opened.remove(session)
