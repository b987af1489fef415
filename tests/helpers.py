"""Shared test helpers: grading through the real `grade` CLI, and single-bug mutants."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "solutions"
SCAFFOLDS = ROOT / "notebooks"
WORKERS = max(1, min(4, os.cpu_count() or 1))


@dataclass(frozen=True)
class Graded:
    """What one `grade` run produced."""

    returncode: int
    stdout: str
    stderr: str

    @property
    def report(self) -> dict:
        return json.loads(self.stdout)

    def statuses(self) -> dict[str, str]:
        return {t["id"]: t["status"] for t in self.report["tests"]}

    def failing_levels(self) -> list[str]:
        levels = {
            (t["level"], t["level_name"]) for t in self.report["tests"] if t["status"] != "passed"
        }
        return [name for _, name in sorted(levels)]


def grade(notebook: Path, *args: str, timeout: float = 600) -> Graded:
    """Run `python -m grader.cli NOTEBOOK --json ARGS` and capture everything."""
    command = [sys.executable, "-m", "grader.cli", str(notebook), "--json", *args]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, cwd=notebook.parent
    )
    return Graded(done.returncode, done.stdout, done.stderr)


def grade_many(notebooks: dict[str, Path], *args: str) -> dict[str, Graded]:
    """Grade several notebooks, a few at a time."""
    with ThreadPoolExecutor(WORKERS) as pool:
        futures = {name: pool.submit(grade, path, *args) for name, path in notebooks.items()}
        return {name: future.result() for name, future in futures.items()}


@dataclass(frozen=True)
class Mutant:
    """A single-bug copy of a reference: replace `old` (found exactly once) by `new`.
    `level` is where a person would expect it to first lose points."""

    name: str
    old: str
    new: str
    level: str


def mutate(solution: Path, mutant: Mutant) -> nbformat.NotebookNode:
    """The solution notebook with the mutant's one change applied."""
    nb = nbformat.read(solution, as_version=4)
    hits = [c for c in nb.cells if c.cell_type == "code" and mutant.old in c.source]
    total = sum(c.source.count(mutant.old) for c in hits)
    if total != 1:
        raise AssertionError(f"mutant {mutant.name}: {mutant.old!r} occurs {total} times, want 1")
    hits[0].source = hits[0].source.replace(mutant.old, mutant.new)
    return nb


def write_mutants(solution: Path, mutants: list[Mutant], folder: Path) -> dict[str, Path]:
    """Write every mutant notebook under `folder`; returns name -> path."""
    paths = {}
    for mutant in mutants:
        path = folder / f"{mutant.name}.ipynb"
        nbformat.write(mutate(solution, mutant), path)
        paths[mutant.name] = path
    return paths


def notebook_with(*sources: str, exercise: str | None = None) -> nbformat.NotebookNode:
    """A notebook of code cells built in a test."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    if exercise:
        nb.metadata["grader"] = {"exercise": exercise}
    return nb
