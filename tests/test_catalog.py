"""The catalog: every exercise has its two notebooks and its tests, and a notebook without
metadata is matched by the names it defines, never ambiguously."""

from __future__ import annotations

import nbformat
import pytest

from grader.errors import ExerciseError
from grader.exercise import find_exercise, load_catalog
from grader.notebook import Notebook
from tests.helpers import ROOT, SCAFFOLDS, SOLUTIONS

CATALOG = load_catalog()


def test_every_solution_belongs_to_an_exercise_and_back():
    solutions = {p.stem for p in SOLUTIONS.glob("*.ipynb")}
    assert solutions == set(CATALOG)
    for exercise_id in CATALOG:
        nb = nbformat.read(SOLUTIONS / f"{exercise_id}.ipynb", as_version=4)
        assert nb.metadata["grader"]["exercise"] == exercise_id
        assert (SCAFFOLDS / f"{exercise_id}.ipynb").exists()
        assert (ROOT / "tests" / f"test_{exercise_id}.py").exists()


@pytest.mark.parametrize("exercise_id", sorted(CATALOG))
def test_exercise_is_well_formed(exercise_id):
    exercise = CATALOG[exercise_id]
    assert exercise.checks and exercise.defines and exercise.seed
    assert len({c.id for c in exercise.checks}) == len(exercise.checks)
    assert [c.level for c in exercise.checks] == sorted(c.level for c in exercise.checks)
    assert {c.level for c in exercise.checks} == set(range(1, len(exercise.levels) + 1))


@pytest.mark.parametrize("exercise_id", sorted(CATALOG))
def test_notebook_without_metadata_is_matched_by_its_names(exercise_id):
    nb = nbformat.read(SOLUTIONS / f"{exercise_id}.ipynb", as_version=4)
    del nb.metadata["grader"]
    assert find_exercise(Notebook(SOLUTIONS / "x.ipynb", nb), CATALOG).id == exercise_id


def test_notebook_fitting_several_exercises_is_refused():
    names = sorted({name for e in CATALOG.values() for name in e.defines})
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell("\n".join(f"{n} = None" for n in names))]
    )
    if len(CATALOG) < 2:
        pytest.skip("needs two exercises")
    with pytest.raises(ExerciseError, match="could be any of .*pass --exercise NAME"):
        find_exercise(Notebook(ROOT / "x.ipynb", nb), CATALOG)
