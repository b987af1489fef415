"""The pipeline: read the notebook, find the exercise, run its cells, run the hidden checks,
score, and return the report."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import platform
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import grader
from grader.core.limits import Limits
from grader.core.notebook import Notebook, read_notebook
from grader.core.outcomes import Status
from grader.core.records import Finding
from grader.core.results import CellError, CutOutput, GradeReport, headlines, summarise, void
from grader.kernel import CellRun, Session
from grader.kernel.launch import sandboxed
from grader.suite.exercise import (
    Exercise,
    allowed_packages,
    find_exercise,
    load_catalog,
    use_exercises,
)

_START = 200  # characters of a cut cell's output kept in the report


def grade_notebook(
    path: str | Path,
    exercise: str | None = None,
    limits: Limits | None = None,
    catalog: dict[str, Exercise] | None = None,
    exercises: str | Path | None = None,
    notebook: Notebook | None = None,
) -> GradeReport:
    """Grade one notebook file (`notebook`: the file as already read, if it was).

    Raises:
        GraderError: the notebook cannot be graded at all (bad file, unknown or broken
            exercise, kernel that will not start). Everything the candidate's code does is
            a result.
        GraderBug: a hidden check failed through no fault of the candidate (exit 3).

    `exercises` is a folder of exercises to use besides the built-in ones (see
    `grader.suite.exercise.use_exercises`); it is hidden from the kernel like them.
    """
    return grade_with_cells(path, exercise, limits, catalog, exercises, notebook)[0]


def grade_with_cells(
    path: str | Path,
    exercise: str | None = None,
    limits: Limits | None = None,
    catalog: dict[str, Exercise] | None = None,
    exercises: str | Path | None = None,
    notebook: Notebook | None = None,
) -> tuple[GradeReport, list[CellRun]]:
    """`grade_notebook`, with what each cell printed (for the executed notebook)."""
    started = time.monotonic()
    limits = limits or Limits()
    notebook = notebook or read_notebook(path)
    if catalog is None:
        use_exercises(exercises)
    # The kernel boots while the suites (and torch) load here: two seconds saved.
    session = Session([], limits, started + limits.total_timeout)
    try:  # entered inside: a signal at any moment finds it closed on the way out
        session.__enter__()
        with one_torch_thread():
            catalog = load_catalog() if catalog is None else catalog
            chosen = find_exercise(notebook, catalog, exercise)
            return grade_in_session(session, notebook, chosen, limits, started, catalog=catalog)
    finally:
        session.close()


def grade_in_session(
    session: Session,
    notebook: Notebook,
    chosen: Exercise,
    limits: Limits,
    started: float,
    cells_done: Callable[[], None] | None = None,
    catalog: Mapping[str, Exercise] | None = None,
) -> tuple[GradeReport, list[CellRun]]:
    """Grade `notebook` against `chosen` in `session`, an entered session whose kernel
    has run nothing of a notebook yet; close the session. `cells_done` is called once the
    notebook's cells have run (a batch starts the next kernel then). `catalog`: the
    exercises `chosen` was found among, for the card to say which one a notebook that
    does not fit `chosen` looks like."""
    try:
        session.assign(notebook.code_cells, started + limits.total_timeout)
        session.prepare(chosen.watch.kernel_config(), allowed_packages(chosen))
        if cells_done is not None:
            cells_done()
        from grader.suite import checks

        checks.set_device(limits.device)  # the suite compares at the device's tolerances
        tests = _run_suite(chosen, session, limits, session.deadline)
        cells, restarts = session.cells, session.restarts
        session.end_tests()
        profile = _run_profile(chosen, session, limits) if limits.profile else None
    finally:
        session.close()
    duration = time.monotonic() - started
    report = build_report(
        chosen, notebook, tests, cells, restarts, duration, session.findings,
        profile=profile, device=limits.device, sandboxed=sandboxed(limits), catalog=catalog,
    )  # fmt: skip
    return report, cells


def with_source_notes(
    exercise: Exercise, notebook: Notebook, findings: list[Finding]
) -> list[Finding]:
    """The guard's findings, then what the source scan notes (machinery, magics, shell
    commands: never a penalty) where the guard recorded nothing at that cell and line."""
    from grader.suite.scan import scan_cells

    cells = notebook.code_cells
    if not cells:
        return findings
    try:
        notes = scan_cells([s for _, s in cells], exercise.forbidden, exercise.watch.private).notes
    except RecursionError:  # a pathological source: the from-scratch check says so
        return findings
    placed = {(f.cell, f.line) for f in findings if f.cell is not None}
    first: dict[str, Finding] = {}  # one row a message: its first place
    more: dict[str, int] = {}  # and how many more places
    for note in notes:
        cell = cells[note.cell - 1][0] + 1
        if (cell, note.line) in placed:
            continue
        placed.add((cell, note.line))
        if note.message in first:
            more[note.message] = more.get(note.message, 0) + 1
        else:
            first[note.message] = Finding("note", note.message, cell, note.line)
    for message, finding in first.items():
        count = more.get(message, 0)
        if count:
            text = f"{message} (+{count} more place{'s' if count > 1 else ''})"
            finding = Finding("note", text, finding.cell, finding.line)
        findings.append(finding)
    return findings


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


def _run_suite(exercise: Exercise, session: Session, limits: Limits, deadline: float) -> list:
    from grader.run.runner import run_checks
    from grader.suite.handle import Kernel

    return run_checks(exercise, Kernel(session), limits, deadline)


def _run_profile(exercise: Exercise, session: Session, limits: Limits) -> dict[str, Any]:
    """`--profile`: the candidate's forward timed and measured against torch's, after the
    suite (never scored; see grader.run.profile)."""
    from grader.run.profile import run_profile
    from grader.suite.handle import Kernel

    return run_profile(exercise, Kernel(session), limits, deadline=session.deadline)


def build_report(
    exercise: Exercise,
    notebook: Notebook,
    tests: list,
    cells: list[CellRun],
    restarts: int,
    duration: float,
    findings: Sequence[Finding] = (),
    profile: dict[str, Any] | None = None,
    device: str = "cpu",
    sandboxed: bool = False,
    catalog: Mapping[str, Exercise] | None = None,
) -> GradeReport:
    """Score the results (pure: no kernel). Findings that void the grading zero it. A
    notebook that looks like another exercise of `catalog` gets a headline saying so, and
    no hint."""
    from grader.verdict.diagnosis import as_in_the_cell, hints, looks_like_another, root_cause

    findings = with_source_notes(exercise, notebook, list(findings))
    voided = any(f.voids for f in findings)
    tests = void(tests, findings)
    levels, reached = summarise(exercise.levels, tests)
    errors = as_in_the_cell(notebook, [_cell_error(c) for c in cells if c.status != Status.PASSED])
    tests, cause = root_cause(notebook, tests, errors)
    wrong = looks_like_another(exercise, notebook, tests, catalog or {})
    notes = []
    if not notebook.code_cells:
        notes.append("the notebook has no code cells")
    if restarts:
        notes.append(f"the kernel was restarted {restarts} time(s)")
    if device.startswith("cuda"):
        notes.append(
            "on the GPU the address-space cap is off (CUDA needs the address space): "
            "--memory-limit holds only where a memory cgroup could be made"
        )
    if voided:
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
        headlines=[*headlines(errors), *wrong],
        integrity=findings,
        notes=notes,
        cut_output=[
            CutOutput(c.index + 1, c.output[:_START], c.output_cut) for c in cells if c.output_cut
        ],
        torch_version=_torch_version(),
        grader_version=grader.__version__,
        python_version=platform.python_version(),
        suite_hash=suite_hash(exercise),
        device=device,
        sandboxed=sandboxed,
        profile=profile,
        root_cause=cause,
        hints=[] if wrong else hints(exercise, tests, voided),
    )


def suite_hash(exercise: Exercise) -> str:
    """sha256 of what decides an exercise's verdicts: the Python files of its folder and
    the shared modules beside it (`_*.py`); "" for an exercise built in memory."""
    if exercise.folder is None:
        return ""
    return folder_hash(exercise.folder)


@functools.cache
def folder_hash(folder: Path) -> str:
    """`suite_hash` of the exercise in `folder`."""
    from grader.run.catalog import sources_digest

    digest = hashlib.sha256(sources_digest(folder, exact=True).encode())
    for path in sorted(folder.parent.glob("_*.py")):
        digest.update(f"{path.name}\0".encode() + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _torch_version() -> str:
    import torch

    return torch.__version__


def _cell_error(cell: CellRun) -> CellError:
    return CellError(
        cell.index + 1, cell.status, cell.message, cell.output, cell.output_cut, cell.line
    )
