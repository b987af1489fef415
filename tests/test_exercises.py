"""Every exercise in the catalog, end to end: its solution earns full marks and its scaffold
earns nothing with every test not implemented (the real `grade` CLI and real kernels), every
correct variant keeps full marks (real kernels), and every single-bug mutant of its corpus
loses points first at the level a person would expect, with its hint on the card.

The mutants are graded in Python processes, through the same pipeline as `grade`
(`grader.run.pipeline.grade` with an `InProcessSession`: the notebook's cells run there, the
suite's calls go through the kernel's own shim): a mutant proves the suite, not the kernel,
and this costs a seventh of a kernel's grading. Those processes (one per core, each a share
of the mutants, at a lower priority) are started when collection ends
(`start_in_background`, tests/conftest.py) and grade them while the other tests run, on
the cores they leave free. The mutants on each exercise's last level
(the from-scratch verdicts, which rest on the kernel's watch) are graded in real kernels
instead, and each exercise's first mutant in both, which must fail the same tests.
Exercises are data here (the catalog and each one's corpus.py): a new exercise needs no
new test file."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from grader.core.notebook import read_notebook
from grader.run.inprocess import InProcessSession
from grader.run.pipeline import GradingContext, grade
from grader.suite.corpus import Mutant, Variant, apply, load_corpus
from grader.suite.exercise import load_catalog
from tests.cohort import Cohort
from tests.helpers import (
    SCAFFOLDS,
    SOLUTIONS,
    Graded,
    InProcesses,
    assert_first_fails_at,
    assert_full_marks,
    assert_nothing_implemented,
)

CATALOG = load_catalog()
EXERCISES = sorted(CATALOG)
CORPORA = {id: load_corpus(CATALOG[id]) for id in EXERCISES}
MUTANTS = [(id, m) for id in EXERCISES for m in CORPORA[id].mutants]
VARIANTS = [(id, v) for id in EXERCISES for v in CORPORA[id].variants]
# The mutants on an exercise's last level ("from scratch") are graded in real kernels: the
# watch that runs there (every thread, aten dispatch, instrumented functions) sees more
# than the in-process one. The others are graded in this process, each exercise's first
# also in a kernel, to show that both fail the same tests.
LAST_LEVEL = [(id, m) for id, m in MUTANTS if m.level == CATALOG[id].levels[-1]]
IN_PROCESS = [case for case in MUTANTS if case not in LAST_LEVEL]
SAMPLE = [next(case for case in IN_PROCESS if case[0] == id) for id in EXERCISES]
KERNEL_MUTANTS = LAST_LEVEL + SAMPLE


def _id(case: tuple[str, Mutant | Variant]) -> str:
    return f"{case[0]}-{case[1].name}"


COHORT = Cohort("exercises")


@COHORT.notebooks
def _solutions_scaffolds_and_corpora(folder: Path) -> dict[str, Path]:
    """Every solution and scaffold, and every entry of every corpus (graded in the test
    run's one batch: see tests/cohort.py)."""
    paths: dict[str, Path] = {}
    for exercise in EXERCISES:
        paths[f"{exercise}/solution"] = SOLUTIONS / f"{exercise}.ipynb"
        paths[f"{exercise}/scaffold"] = SCAFFOLDS / f"{exercise}.ipynb"
        solution = nbformat.read(SOLUTIONS / f"{exercise}.ipynb", as_version=4)
        corpus = CORPORA[exercise]
        kernel_mutants = [m for id, m in KERNEL_MUTANTS if id == exercise]
        for change in [*kernel_mutants, *corpus.variants]:
            path = folder / f"{exercise}__{change.name}.ipynb"
            nbformat.write(apply(solution, change), path)
            paths[f"{exercise}/{change.name}"] = path
    return paths


def graded_in_process(exercise: str, mutant: Mutant, folder: Path) -> Graded:
    """The mutant graded here, as `grade MUTANT --json` would grade it (its report and exit
    code), with the notebook's cells run in this process."""
    solution = nbformat.read(SOLUTIONS / f"{exercise}.ipynb", as_version=4)
    path = folder / f"{exercise}__{mutant.name}.ipynb"
    nbformat.write(apply(solution, mutant), path)
    ctx = GradingContext(catalog=CATALOG, session=lambda limits: InProcessSession([], limits))
    report = grade(read_notebook(path), ctx).report.to_dict()
    code = 0 if report["score"] == report["max_score"] else 1
    return Graded(code, json.dumps(report), "")


@pytest.fixture
def graded(cohort) -> dict[str, Graded]:
    return cohort["exercises"]


def test_the_catalog_holds_every_exercise_with_a_solution_and_a_scaffold():
    assert CATALOG.broken == {}
    assert sorted(p.stem for p in SOLUTIONS.glob("*.ipynb")) == EXERCISES
    assert sorted(p.stem for p in SCAFFOLDS.glob("*.ipynb")) == EXERCISES


@pytest.mark.parametrize("exercise", EXERCISES)
def test_corpus_is_big_enough_and_applies_to_the_solution(exercise):
    corpus = CORPORA[exercise]
    levels = CATALOG[exercise].levels
    assert len(corpus.mutants) >= corpus.min_mutants > 0
    names = [c.name for c in [*corpus.mutants, *corpus.variants]]
    assert len(set(names)) == len(names)
    assert all(m.level in levels for m in corpus.mutants)
    solution = nbformat.read(SOLUTIONS / f"{exercise}.ipynb", as_version=4)
    for change in [*corpus.mutants, *corpus.variants]:
        apply(solution, change)  # raises unless `old` occurs exactly once


@pytest.mark.kernel
@pytest.mark.parametrize("exercise", EXERCISES)
def test_solution_earns_full_marks(graded, exercise):
    report = assert_full_marks(graded[f"{exercise}/solution"])
    assert report["hints"] == [] and report["root_cause"] is None


@pytest.mark.kernel
@pytest.mark.parametrize("exercise", EXERCISES)
def test_scaffold_earns_nothing_and_every_test_is_not_implemented(graded, exercise):
    report = assert_nothing_implemented(graded[f"{exercise}/scaffold"])
    defined = set(CATALOG[exercise].defines)
    for test in report["tests"]:
        stub = test["message"].removeprefix("not implemented: ").split(".")[0]
        assert stub in defined, test


def grade_in_process_mutants(folder: Path | str, shard: int = 0, shards: int = 1) -> None:
    """Grade every `shards`-th mutant of IN_PROCESS from `shard` in this process
    (`graded_in_process`), writing {"exercise/mutant": [returncode, report]} to
    folder/result.json."""
    folder, graded = Path(folder), {}
    for exercise, mutant in IN_PROCESS[shard::shards]:
        entry = graded_in_process(exercise, mutant, folder)
        graded[f"{exercise}/{mutant.name}"] = [entry.returncode, entry.stdout]
    (folder / "result.json").write_text(json.dumps(graded))


def start_in_background(folder: Path) -> InProcesses:
    """The in-process mutants, graded by processes of their own (one per core) while the
    other tests run."""
    return InProcesses(folder, "tests.test_exercises:grade_in_process_mutants")


@pytest.fixture(scope="module")
def in_process(background) -> dict[str, Graded]:
    """Every in-process mutant's grading: {"exercise/mutant": Graded}."""
    return {name: Graded(code, report, "") for name, (code, report) in background.items()}


@pytest.mark.slow
@pytest.mark.parametrize("case", IN_PROCESS, ids=_id)
def test_mutant_loses_points_at_the_expected_level(in_process, case):
    exercise, mutant = case
    assert_caught(exercise, mutant, in_process[f"{exercise}/{mutant.name}"])


@pytest.mark.kernel
@pytest.mark.slow
@pytest.mark.parametrize("case", LAST_LEVEL, ids=_id)
def test_a_from_scratch_mutant_loses_points_in_a_kernel(graded, case):
    exercise, mutant = case
    assert_caught(exercise, mutant, graded[f"{exercise}/{mutant.name}"])


def assert_caught(exercise: str, mutant: Mutant, entry: Graded) -> None:
    report = assert_first_fails_at(entry, mutant)
    # One bug in the candidate's code may fail the notebook's own self-check (its last
    # code cell), never a cell that defines that code.
    last = _last_code_cell(exercise)
    assert all(e["cell"] == last for e in report["cell_errors"]), report["cell_errors"]
    # The card names the bug: the hidden tests fail as this mutant's did when `grade hints`
    # recorded its pattern.
    assert mutant.hint and mutant.hint in report["hints"], report["hints"]


@pytest.mark.kernel
@pytest.mark.slow
@pytest.mark.parametrize("case", SAMPLE, ids=_id)
def test_a_kernel_fails_a_mutant_as_the_in_process_grading_does(graded, in_process, case):
    exercise, mutant = case
    kernel = graded[f"{exercise}/{mutant.name}"]
    here = in_process[f"{exercise}/{mutant.name}"]

    def failing(entry: Graded) -> list[tuple[str, str]]:
        return [(t["id"], t["status"]) for t in entry.report["tests"] if t["status"] != "passed"]

    assert failing(kernel) == failing(here)
    assert kernel.report["hints"] == here.report["hints"]
    assert kernel.returncode == here.returncode == 1


@pytest.mark.kernel
@pytest.mark.slow
@pytest.mark.parametrize("case", VARIANTS, ids=_id)
def test_correct_variant_earns_full_marks(graded, case):
    exercise, variant = case
    entry = graded[f"{exercise}/{variant.name}"]
    report = entry.report
    assert entry.returncode == 0, [t for t in report["tests"] if t["status"] != "passed"]
    assert report["score"] == report["max_score"]
    assert report["hints"] == []


def _last_code_cell(exercise: str) -> int:
    """The number the report gives the solution's last code cell (cells count from 1)."""
    nb = nbformat.read(SOLUTIONS / f"{exercise}.ipynb", as_version=4)
    return max(i for i, c in enumerate(nb.cells, start=1) if c.cell_type == "code")
