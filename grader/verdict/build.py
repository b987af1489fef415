"""The report, built from what a grading gathered (pure: no kernel). Findings that void
the grading zero it; the scan's notes join the guard's findings; the root cause, hints and
"looks like another exercise" come from `grader.verdict.diagnosis`."""

from __future__ import annotations

import platform
from collections.abc import Mapping, Sequence
from typing import Any

import grader
from grader.core.notebook import Notebook
from grader.core.outcomes import Status
from grader.core.records import Finding, Kind
from grader.core.results import CellError, CodeLine, CutOutput, GradeReport
from grader.kernel.cells import CellRun
from grader.suite.exercise import Exercise, suite_hash
from grader.verdict.score import headlines, summarise, void

_START = 200  # characters of a cut cell's output kept in the report


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
    kernel_user: str = "",
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
    tests, cause, own = root_cause(notebook, tests, errors)
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
        kernel_user=kernel_user,
        integrity_checks="enforced" if sandboxed else "best effort",
        profile=profile,
        root_cause=cause,
        own_failures=own,
        hints=[] if wrong else hints(exercise, tests, voided),
        own_code=_own_code(exercise, notebook),
    )


def _own_code(exercise: Exercise, notebook: Notebook) -> list[CodeLine]:
    """The candidate's code that is not the scaffold's, for the cohort's copy check (none
    where the exercise has no reference.json to say what the scaffold is)."""
    from grader.verdict.own_code import own_code, read_reference

    reference = read_reference(exercise.folder) if exercise.folder else None
    return own_code(notebook.code_cells, reference.scaffold) if reference else []


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
            first[note.message] = Finding(Kind.NOTE, note.message, cell, note.line)
    for message, finding in first.items():
        count = more.get(message, 0)
        if count:
            text = f"{message} (+{count} more place{'s' if count > 1 else ''})"
            finding = Finding(Kind.NOTE, text, finding.cell, finding.line)
        findings.append(finding)
    return findings


def _torch_version() -> str:
    import torch

    return torch.__version__


def _cell_error(cell: CellRun) -> CellError:
    return CellError(
        cell.index + 1, cell.status, cell.message, cell.output, cell.output_cut, cell.line
    )
