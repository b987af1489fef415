"""The pipeline: read the notebook, find the exercise, run its cells, run the hidden checks,
score, and return the report."""

from __future__ import annotations

import time
from pathlib import Path

import grader
from grader.exercise import Exercise, allowed_packages, find_exercise, load_catalog
from grader.kernel import CellRun, Limits, Session
from grader.notebook import Notebook, read_notebook
from grader.records import VOIDING, Finding
from grader.results import CellError, CutOutput, GradeReport, headlines, summarise, void

_START = 200  # characters of a cut cell's output kept in the report


def grade_notebook(
    path: str | Path,
    exercise: str | None = None,
    limits: Limits | None = None,
    catalog: dict[str, Exercise] | None = None,
) -> GradeReport:
    """Grade one notebook file.

    Raises:
        GraderError: the notebook cannot be graded at all (bad file, unknown or broken
            exercise, kernel that will not start). Everything the candidate's code does is
            a result.
        GraderBug: a hidden check failed through no fault of the candidate (exit 3).
    """
    started = time.monotonic()
    limits = limits or Limits()
    notebook = read_notebook(path)
    deadline = started + limits.total_timeout
    # The kernel boots while the suites (and torch) load here: two seconds saved.
    with Session(notebook.code_cells, limits, deadline) as session:
        chosen = find_exercise(notebook, load_catalog() if catalog is None else catalog, exercise)
        session.prepare(chosen.watch_functions, chosen.watch_ops, allowed_packages(chosen))
        tests = _run_suite(chosen, session, limits, deadline)
        cells, restarts = session.cells, session.restarts
    duration = time.monotonic() - started
    return build_report(chosen, notebook, tests, cells, restarts, duration, session.findings)


def _run_suite(exercise: Exercise, session: Session, limits: Limits, deadline: float) -> list:
    import torch

    from grader.remote import Kernel
    from grader.runner import run_checks

    torch.backends.mha.set_fastpath_enabled(False)  # a deterministic oracle
    return run_checks(exercise, Kernel(session), limits, deadline)


def build_report(
    exercise: Exercise,
    notebook: Notebook,
    tests: list,
    cells: list[CellRun],
    restarts: int,
    duration: float,
    findings: list[Finding] = (),  # type: ignore[assignment]
) -> GradeReport:
    """Score the results (pure: no kernel). Findings that void the grading zero it."""
    findings = list(findings)
    tests = void(tests, findings)
    levels, reached = summarise(exercise.levels, tests)
    errors = [_cell_error(c) for c in cells if c.status != "ok"]
    notes = []
    if not notebook.code_cells:
        notes.append("the notebook has no code cells")
    if restarts:
        notes.append(f"the kernel was restarted {restarts} time(s)")
    if any(f.kind in VOIDING for f in findings):
        notes.append("no credit: the notebook reached for the grader itself (see integrity)")
    cut = sum(c.output_cut for c in cells)
    if cut:
        notes.append(f"{cut:,} characters of cell output were cut")
    return GradeReport(
        exercise=exercise.id,
        title=exercise.title,
        notebook=str(notebook.path),
        score=sum(t.score for t in tests),
        max_score=exercise.max_score,
        level_reached=reached,
        level_reached_name=exercise.levels[reached - 1] if reached else "",
        levels=levels,
        duration_s=duration,
        tests=tests,
        cell_errors=errors,
        headlines=headlines(errors),
        integrity=findings,
        notes=notes,
        cut_output=[
            CutOutput(c.index + 1, c.output[:_START], c.output_cut) for c in cells if c.output_cut
        ],
        torch_version=_torch_version(),
        grader_version=grader.__version__,
    )


def _torch_version() -> str:
    import torch

    return torch.__version__


def _cell_error(cell: CellRun) -> CellError:
    return CellError(cell.index + 1, cell.status, cell.message, cell.output, cell.output_cut)  # type: ignore[arg-type]
