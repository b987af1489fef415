"""The catalog: every exercise has its two notebooks and its tests, a notebook without
metadata is matched by the names it defines, never ambiguously, a broken exercise folder
is recorded with its reason without stopping the others, and every exercise's packages
are part of the grading environment."""

from __future__ import annotations

import importlib
import importlib.metadata
import re
from dataclasses import replace

import nbformat
import pytest

from grader.core.errors import ExerciseError
from grader.core.notebook import Notebook
from grader.suite.corpus import load_corpus
from grader.suite.exercise import Exercise, allowed_packages, find_exercise, load_catalog
from tests.exercise_packages import (
    BROKEN,
    BROKEN_PROBLEMS,
    GOOD_SUITE,
    exercises_package,
    forget_package,
)
from tests.helpers import ROOT, SCAFFOLDS, SOLUTIONS

CATALOG = load_catalog()


def test_every_solution_belongs_to_an_exercise_and_back():
    solutions = {p.stem for p in SOLUTIONS.glob("*.ipynb")}
    assert solutions == set(CATALOG)
    for exercise_id in CATALOG:
        nb = nbformat.read(SOLUTIONS / f"{exercise_id}.ipynb", as_version=4)
        assert nb.metadata["grader"]["exercise"] == exercise_id
        assert (SCAFFOLDS / f"{exercise_id}.ipynb").exists()
        assert load_corpus(CATALOG[exercise_id]).mutants  # its corpus, for test_exercises.py


@pytest.mark.parametrize("exercise_id", sorted(CATALOG))
def test_exercise_is_well_formed(exercise_id):
    exercise = CATALOG[exercise_id]
    assert exercise.checks and exercise.defines and exercise.seed
    assert len({c.id for c in exercise.checks}) == len(exercise.checks)
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


# -- broken exercise folders ----------------------------------------------------------------


@pytest.fixture
def broken_catalog(tmp_path, monkeypatch):
    """A catalog holding `alpha` and one folder per kind of breakage."""
    yield load_catalog(exercises_package(tmp_path, monkeypatch, {"alpha": GOOD_SUITE, **BROKEN}))
    forget_package(tmp_path)


def test_broken_folders_are_recorded_and_the_others_load(broken_catalog):
    assert list(broken_catalog) == ["alpha"]
    assert set(broken_catalog.broken) == set(BROKEN_PROBLEMS)
    for folder, problem in BROKEN_PROBLEMS.items():
        reason = broken_catalog.broken[folder]
        assert problem in reason and folder in reason and "\n" not in reason, reason


def test_a_notebook_naming_a_broken_exercise_is_refused_naming_folder_and_problem(broken_catalog):
    nb = nbformat.v4.new_notebook(metadata={"grader": {"exercise": "bad_syntax"}})
    with pytest.raises(ExerciseError) as caught:
        find_exercise(Notebook(ROOT / "x.ipynb", nb), broken_catalog)
    message = str(caught.value)
    assert caught.value.exit_code == 2 and "\n" not in message
    assert "bad_syntax" in message and "cannot be loaded" in message and "SyntaxError" in message
    with pytest.raises(ExerciseError, match="cannot be loaded: .*no_suite: no suite.py"):
        find_exercise(Notebook(ROOT / "x.ipynb", nb), broken_catalog, name="no_suite")


def test_a_notebook_for_a_loaded_exercise_is_still_found(broken_catalog):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("def alpha(): pass")])
    assert find_exercise(Notebook(ROOT / "x.ipynb", nb), broken_catalog).id == "alpha"


def test_a_notebook_matching_nothing_hears_which_exercises_are_broken(broken_catalog):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    with pytest.raises(ExerciseError, match="broken, so not considered: bad_import, "):
        find_exercise(Notebook(ROOT / "x.ipynb", nb), broken_catalog)


def test_the_bundled_catalog_has_no_broken_folder():
    assert CATALOG.broken == {}


# -- the grading environment ----------------------------------------------------------------


def _dependencies() -> set[str]:
    """Distribution names in pyproject.toml's [project] dependencies, normalised."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    text = (ROOT / "pyproject.toml").read_text()
    listed = tomllib.loads(text)["project"]["dependencies"]
    return {re.split(r"[\s<>=!~;\[]", d, maxsplit=1)[0].lower().replace("_", "-") for d in listed}


@pytest.mark.parametrize("exercise_id", sorted(CATALOG))
def test_declared_packages_are_installed_and_are_grader_dependencies(exercise_id):
    distributions = importlib.metadata.packages_distributions()
    dependencies = _dependencies()
    for package in allowed_packages(CATALOG[exercise_id]):
        importlib.import_module(package)
        names = {d.lower().replace("_", "-") for d in distributions.get(package, [])}
        assert names & dependencies, f"{package} ({names or 'no distribution'}) not in pyproject"


def test_allowed_packages_are_torch_then_the_exercises_own():
    exercise = Exercise(id="x", title="-", seed="-", levels=["one"], defines=())
    assert exercise.packages == ("numpy", "einops")
    assert allowed_packages(exercise) == ("torch", "numpy", "einops")
    assert allowed_packages(replace(exercise, packages=("torch",))) == ("torch",)
    assert allowed_packages(replace(exercise, packages=())) == ("torch",)


# Topics an interviewer picks by (`grade list --tag`): the built-in exercises use these.
TOPICS = {
    "alignment", "attention", "backward", "convolution", "decoding", "efficiency",
    "fine-tuning", "inference", "losses", "modules", "normalization", "numerics",
    "optimization", "positional", "quantization", "rl", "routing", "sampling",
    "tokenization", "vision",
}  # fmt: skip


@pytest.mark.parametrize("exercise_id", sorted(CATALOG))
def test_every_exercise_has_topics_and_an_expected_time(exercise_id):
    exercise = CATALOG[exercise_id]
    assert exercise.tags and set(exercise.tags) <= TOPICS, exercise.tags
    assert len(set(exercise.tags)) == len(exercise.tags)
    assert exercise.minutes > 0 and exercise.minutes % 5 == 0


@pytest.mark.parametrize("exercise_id", sorted(CATALOG))
def test_the_expected_time_follows_the_documented_estimate(exercise_id):
    """docs/usage.md, "The catalog": ten minutes to read the statement, then a minute per
    line of the reference solution's own code (what `grade build` writes to reference.json),
    rounded to five, at least fifteen."""
    import json

    exercise = CATALOG[exercise_id]
    assert exercise.folder is not None
    lines = len(json.loads((exercise.folder / "reference.json").read_text())["solution"])
    assert exercise.minutes == max(15, 5 * round((10 + lines) / 5)), lines
