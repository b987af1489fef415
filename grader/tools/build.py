"""`grade build`: scaffolds in notebooks/ are written from the solutions in solutions/, with
the catalog index and each exercise's hints (`build_project`).

In a solution's code cells, each region between ``# BEGIN SOLUTION`` and ``# END SOLUTION``
becomes ``raise NotImplementedError(...)`` at the marker's indentation (text after
``BEGIN SOLUTION`` becomes the message). Cells tagged ``grader:solution-only`` are dropped.
Outputs and execution counts are cleared; the exercise id stays in the metadata.
"""

from __future__ import annotations

import copy
import json
import os
import re
from pathlib import Path

import nbformat

from grader.core.errors import NotebookError
from grader.core.limits import Limits
from grader.core.notebook import read_notebook

BEGIN = re.compile(r"^(?P<indent>\s*)# BEGIN SOLUTION(?P<message>.*)$")
END = re.compile(r"^\s*# END SOLUTION\s*$")
SOLUTION_ONLY = "grader:solution-only"
DEFAULT_MESSAGE = "replace this line with your implementation"
REFERENCE = "reference.json"  # in each exercise's folder: see `reference_text`


def stub_source(source: str, where: str = "<cell>") -> str:
    """Replace every marked region of a cell's source with a NotImplementedError stub."""
    out: list[str] = []
    inside = False
    for number, line in enumerate(source.splitlines(), start=1):
        begin = BEGIN.match(line)
        if begin:
            if inside:
                raise NotebookError(where, f"line {number}: BEGIN SOLUTION inside another region")
            inside = True
            message = begin.group("message").strip(" :-—") or DEFAULT_MESSAGE
            out.append(f"{begin.group('indent')}raise NotImplementedError({message!r})")
        elif END.match(line):
            if not inside:
                raise NotebookError(where, f"line {number}: END SOLUTION without BEGIN")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise NotebookError(where, "BEGIN SOLUTION is never closed")
    return "\n".join(out)


def scaffold(solution: nbformat.NotebookNode, where: str = "<notebook>") -> nbformat.NotebookNode:
    """The candidate's notebook made from a solution notebook."""
    nb = copy.deepcopy(solution)
    cells = []
    for index, cell in enumerate(nb.cells):
        if SOLUTION_ONLY in cell.get("metadata", {}).get("tags", []):
            continue
        if cell.cell_type == "code":
            cell.source = stub_source(cell.source, f"{where} cell {index + 1}")
            cell.outputs = []
            cell.execution_count = None
        cells.append(cell)
    nb.cells = cells
    return nb


def build_scaffolds(root: Path, check: bool = False) -> list[str]:
    """Write (or, with `check`, compare) every scaffold, and, in the grader's own tree, the
    catalog index `grade list` reads (see grader.run.catalog); returns one line per stale file."""
    lines = _build_index(root, check)
    solutions = sorted((root / "solutions").glob("*.ipynb"))
    if not solutions:
        raise NotebookError(root / "solutions", "no solution notebooks found")
    for path in solutions:
        solution = read_notebook(path).node
        if not solution.metadata.get("grader", {}).get("exercise"):
            raise NotebookError(path, "metadata has no grader.suite.exercise id")
        made = scaffold(solution, str(path))
        targets = [(root / "notebooks" / path.name, nbformat.writes(made) + "\n")]
        folder = root / "exercises" / solution.metadata["grader"]["exercise"]
        if folder.is_dir():  # what the copy check compares (grader.report.similarity)
            targets.append((folder / REFERENCE, reference_text(solution, made)))
        for target, text in targets:
            current = target.read_text() if target.exists() else None
            if current == text:
                continue
            if check:
                lines.append(f"{target}: out of date with {path}; run `grade build`")
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text)
                lines.append(f"wrote {target}")
    return lines


def reference_text(solution: nbformat.NotebookNode, made: nbformat.NotebookNode) -> str:
    """An exercise's `reference.json`: the lines of its scaffold's code cells (what every
    candidate is given) and the solution's own code (its lines not in the scaffold)."""
    from grader.verdict.own_code import own_code

    given = [
        line for cell in made.cells if cell.cell_type == "code" for line in cell.source.splitlines()
    ]
    cells = [(i, c.source) for i, c in enumerate(solution.cells) if c.cell_type == "code"]
    solution_code = [[c.cell, c.line, c.text] for c in own_code(cells, given)]
    return json.dumps({"scaffold": given, "solution": solution_code}, indent=0) + "\n"


def _build_index(root: Path, check: bool) -> list[str]:
    from grader.run.catalog import INDEX, index_text, stale_index
    from grader.suite.exercise import builtin_exercises

    folder = builtin_exercises()
    if (root / "exercises").resolve() != folder:
        return []  # another project: its exercises are loaded with --exercises
    target = folder / INDEX
    if check:
        return [f"{target}: out of date with the suites; run `grade build`"] * stale_index(folder)
    text = index_text(folder)
    if target.exists() and target.read_text() == text:
        return []
    target.write_text(text)
    return [f"wrote {target}"]


def build_project(root: Path, check: bool, jobs: int = 0) -> tuple[list[str], bool]:
    """Build (or check) the project at `root`: scaffolds, the catalog index, and the hints of
    its exercises (those in root/exercises), then what `corpus_warnings` says of each
    corpus, and why an exercise folder cannot be loaded. Returns the lines to print and
    whether anything is out of date or broken (only broken, when writing)."""
    from grader.suite.exercise import (
        builtin_exercises,
        load_catalog,
        not_instrumentable,
        use_exercises,
    )
    from grader.tools.hints import corpus_warnings, stale_hints, write_hints

    folder = (root / "exercises").resolve()
    if folder.is_dir() and folder != builtin_exercises():
        use_exercises(folder)
    lines = build_scaffolds(root, check=check)
    catalog = load_catalog()
    ours = [e for e in catalog.values() if e.folder is not None and e.folder.parent == folder]
    if check:
        lines += [line for e in ours for line in stale_hints(e)]
        stale = bool(lines)
    else:
        stale = False
        for exercise in ours:
            if not stale_hints(exercise):
                continue
            solution = root / "solutions" / f"{exercise.id}.ipynb"
            path = write_hints(exercise, solution, jobs or len(os.sched_getaffinity(0)), Limits())
            lines.append(f"wrote {path}")
    lines += [f"warning: {line}" for e in ours for line in corpus_warnings(e)]
    # an exercise of this project that cannot be loaded builds nothing: said, and a failure
    broken = [p for name, p in sorted(catalog.broken.items()) if (folder / name).is_dir()]
    # what loading a suite leaves unchecked: the entries of modules not imported then
    broken += [
        f"{e.id}: Watch.instrument entry {entry!r}: {problem}"
        for e in ours
        for entry in e.watch.instrument
        if (problem := not_instrumentable(entry, load=True))
    ]
    lines += [f"error: {problem}" for problem in broken]
    return lines, stale or bool(broken)
