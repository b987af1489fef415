"""The pipeline: one function owns a grading. `grade(notebook, ctx)` finds the exercise,
runs the notebook's cells in a session, runs the hidden checks, builds the report and
closes the session; `ctx` (`GradingContext`) carries everything else a grading needs, so
nothing about a grading lives in a module global. `grade_notebook` (one file, a fresh
kernel), batch workers and the CLI all call `grade`; `grade_outcome` maps its errors to an
`Outcome` (the one place that does).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from grader.core.errors import ExitCode, GraderBug, GraderError
from grader.core.limits import Limits
from grader.core.notebook import Notebook, read_notebook
from grader.core.results import CheckResult, GradeReport, Outcome, exit_code
from grader.kernel import CellRun
from grader.kernel.launch import kernel_user, sandboxed, warm_up
from grader.suite.exercise import (
    Exercise,
    allowed_packages,
    find_exercise,
    load_catalog,
    use_exercises,
)
from grader.suite.handle import Calls
from grader.verdict.build import build_report


class GradingSession(Calls, Protocol):
    """Where the notebook runs and the checks call it: a kernel (`grader.kernel.Session`)
    or this process (`grader.run.inprocess.InProcessSession`, for trusted code)."""

    deadline: float
    cells: list[CellRun]
    restarts: int

    def assign(self, sources: list[tuple[int, str]], deadline: float) -> None: ...

    def prepare(self, watch: dict[str, Any], packages: tuple[str, ...]) -> None: ...

    def end_tests(self) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class GradingContext:
    """Everything one grading needs besides the notebook.

    `catalog`: the exercises to choose from. `exercise`: grade against this one, whatever
    the notebook says. `session`: gives the grading its session, entered (a batch hands
    over a kernel it started ahead of need); the default starts a fresh kernel. The
    grading closes it. `cells_done`: called once the notebook's cells have run (a batch
    starts its next kernel then)."""

    catalog: Mapping[str, Exercise]
    limits: Limits = field(default_factory=Limits)
    exercise: str | None = None
    session: Callable[[Limits], GradingSession] | None = None
    cells_done: Callable[[], None] | None = None
    # when the grading began, for its duration (time.monotonic()): before the kernel's
    # template booted and the suites loaded, where the caller waited for those too
    began: float | None = None


@dataclass(frozen=True)
class Graded:
    """A grading's report, and what each cell printed (for the executed notebook)."""

    report: GradeReport
    cells: list[CellRun]


def grade(notebook: Notebook, ctx: GradingContext) -> Graded:
    """Grade `notebook`: find its exercise in `ctx.catalog`, run its cells and the hidden
    checks in a session from `ctx.session`, score, close the session.

    Raises:
        GraderError: the notebook cannot be graded at all (unknown or broken exercise, a
            kernel that will not start). Everything the candidate's code does is a result.
        GraderBug: a hidden check failed through no fault of the candidate (exit 3).
    """
    started = time.monotonic()
    limits = ctx.limits
    chosen = find_exercise(notebook, ctx.catalog, ctx.exercise)
    session = (ctx.session or _fresh_kernel)(limits)
    try:
        with one_torch_thread(), _on_device(limits.device):
            session.assign(notebook.code_cells, started + limits.total_timeout)
            session.prepare(chosen.watch.kernel_config(), allowed_packages(chosen))
            if ctx.cells_done is not None:
                ctx.cells_done()
            tests = _run_suite(chosen, session, limits, session.deadline)
            cells, restarts = session.cells, session.restarts
            session.end_tests()
            profile = _run_profile(chosen, session, limits) if limits.profile else None
    finally:
        session.close()
    duration = time.monotonic() - min(started, ctx.began or started)
    report = build_report(
        chosen, notebook, tests, cells, restarts, duration, session.findings,
        profile=profile, device=limits.device, sandboxed=sandboxed(limits),
        kernel_user=kernel_user(limits), catalog=ctx.catalog,
    )  # fmt: skip
    return Graded(report, cells)


def grade_outcome(path: str, ctx: GradingContext, notebook: Notebook | None = None) -> Outcome:
    """`grade` the file at `path` (`notebook`: as already read), as a row of a run: a
    notebook that cannot be graded, or that meets a bug in the grader, is an `Outcome`
    saying why, with the exit code that says whose fault; nothing is raised."""
    try:
        graded = grade(notebook or read_notebook(path), ctx)
    except GraderError as e:
        return cannot_grade(path, e)
    except Exception as e:  # a bug in the grader: this notebook's row says so
        error = f"internal error: {type(e).__name__}: {e}"
        return Outcome(path, error=error, exit_code=ExitCode.INTERNAL_ERROR)
    report = graded.report
    return Outcome(path, report, exit_code=exit_code(report), cells=tuple(graded.cells))


def cannot_grade(notebook: str, error: GraderError) -> Outcome:
    """A notebook that could not be graded, as every output shows it: the reason (a
    `GraderBug`'s says it is internal), with the exit code that says whose fault."""
    reason = f"internal error: {error}" if isinstance(error, GraderBug) else str(error)
    return Outcome(notebook, error=reason, exit_code=error.exit_code)


def grade_notebook(
    path: str | Path,
    exercise: str | None = None,
    limits: Limits | None = None,
    catalog: Mapping[str, Exercise] | None = None,
    exercises: str | Path | None = None,
    notebook: Notebook | None = None,
) -> GradeReport:
    """Grade one notebook file in a fresh kernel (`notebook`: the file as already read).

    `catalog`: the exercises to choose from (default: the built-in ones, with `exercises`,
    a folder of more, in front; see `grader.suite.exercise.use_exercises`).

    Raises:
        GraderError: the notebook cannot be graded at all (bad file, unknown or broken
            exercise, kernel that will not start). Everything the candidate's code does is
            a result.
        GraderBug: a hidden check failed through no fault of the candidate (exit 3).
    """
    return grade_file(path, exercise, limits, catalog, exercises, notebook).report


def grade_file(
    path: str | Path,
    exercise: str | None = None,
    limits: Limits | None = None,
    catalog: Mapping[str, Exercise] | None = None,
    exercises: str | Path | None = None,
    notebook: Notebook | None = None,
    began: float | None = None,
) -> Graded:
    """`grade_notebook`, with what each cell printed. The kernel (or the template it forks
    from) boots while the catalog (and torch) load here: two seconds saved. The report's
    duration counts from `began` (time.monotonic(); default: now): the template's boot and
    the suites' loading included."""
    began = time.monotonic() if began is None else began
    limits = limits or Limits()
    notebook = notebook or read_notebook(path)
    if catalog is None:
        use_exercises(exercises)
    session = _fresh_kernel(limits, enter=False)
    try:  # entered inside: a signal at any moment finds it closed on the way out
        # A kernel forked from the warm template starts in a tenth of a second, once the
        # template is up: start the template now, and fork once the suites are loaded.
        warm = warm_up(limits)
        if not warm:
            session.__enter__()
        with one_torch_thread():
            catalog = load_catalog() if catalog is None else catalog
        if warm:
            session.__enter__()
        context = GradingContext(catalog, limits, exercise, lambda _: session, began=began)
        return grade(notebook, context)
    finally:
        session.close()


def _fresh_kernel(limits: Limits, enter: bool = True) -> Any:
    """A kernel of its own for one grading (`grader.kernel.Session`), entered unless not
    `enter` (the caller then enters it where a signal finds it closed on the way out)."""
    from grader.kernel import Session

    session = Session([], limits)
    return session.__enter__() if enter else session


@contextlib.contextmanager
def _on_device(device: str) -> Iterator[None]:
    """The suite compares at the device's tolerances for this grading only."""
    from grader.suite import checks

    with checks.on_device(device):
        yield


@contextlib.contextmanager
def one_torch_thread() -> Iterator[None]:
    """The grader's own torch on one thread while it grades: verdicts compute with small
    tensors, for which waking a thread pool costs more than the work (milliseconds per op
    on some machines). Imported here, once the kernel is launched."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _run_suite(
    exercise: Exercise, session: GradingSession, limits: Limits, deadline: float
) -> list[CheckResult]:
    from grader.run.runner import run_checks
    from grader.suite.handle import Kernel

    return run_checks(exercise, Kernel(session), limits, deadline)


def _run_profile(exercise: Exercise, session: GradingSession, limits: Limits) -> dict[str, Any]:
    """`--profile`: the candidate's forward timed and measured against torch's, after the
    suite (never scored; see grader.run.profile)."""
    from grader.run.profile import run_profile
    from grader.suite.handle import Kernel

    return run_profile(exercise, Kernel(session), limits, deadline=session.deadline)
