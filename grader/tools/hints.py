"""`grade hints`: grade an exercise's mutation corpus and record, next to its suite, each
known bug's failure pattern (``hints.json``), which `grader.verdict.diagnosis` matches a
notebook's failures against; and the checks `grade build --check` makes of that file."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from grader.core.limits import Limits
from grader.suite.exercise import Exercise
from grader.verdict.diagnosis import HINTS_FILE, _read, pattern


def hints_document(entries: list[tuple[str, str, dict[str, str]]], sources: str = "") -> str:
    """The text of ``hints.json`` for (mutant name, hint, failure pattern), in order, and
    the digest of what the patterns were graded with (`hints_sources`)."""
    mutants = [{"name": n, "hint": h, "fails": dict(sorted(f.items()))} for n, h, f in entries]
    head = {"python": _PYTHON, "sources": sources} if sources else {}
    return json.dumps({**head, "mutants": mutants}, indent=1, ensure_ascii=False) + "\n"


_PYTHON = "{}.{}".format(*sys.version_info[:2])


def hints_sources(exercise: Exercise) -> str:
    """A digest of what decides the mutants' failure patterns: the exercise's suite (and
    any module beside it), the modules shared by the exercises of its folder, the check
    helpers' messages (`grader.suite.checks`, `grader.suite.library`) and the solution's
    code cells. Formatting and comments do not change it (syntax trees, as the catalog's
    digest); a reworded message or a changed check does."""
    import hashlib

    import nbformat

    from grader.suite import checks, library
    from grader.suite.exercise import code_digest, sources_digest

    assert exercise.folder is not None
    digest = hashlib.sha256(sources_digest(exercise.folder).encode())
    shared = sorted(exercise.folder.parent.glob("*.py"))
    for path in [*shared, Path(checks.__file__), Path(library.__file__)]:
        digest.update(code_digest(path))
    solution = exercise.folder.parent.parent / "solutions" / f"{exercise.id}.ipynb"
    try:
        notebook = nbformat.read(solution, as_version=4)
        digest.update("\0".join(c.source for c in notebook.cells if c.cell_type == "code").encode())
    except (OSError, ValueError):
        digest.update(b"no solution")
    return digest.hexdigest()


def mutant_hints(exercise: Exercise) -> list[tuple[str, str]]:
    """(name, hint) of each mutant in the exercise's corpus, in order."""
    from grader.suite.corpus import load_corpus

    return [(m.name, m.hint) for m in load_corpus(exercise).mutants]


def stale_hints(exercise: Exercise) -> list[str]:
    """Why the exercise's ``hints.json`` does not match its corpus (a mutant without a hint,
    or one added, removed or reworded since `grade hints` ran); [] when it does."""
    mutants = mutant_hints(exercise)
    if not mutants or exercise.folder is None:
        return []
    path = exercise.folder / HINTS_FILE
    lines = [f"{exercise.folder / 'corpus.py'}: {n} has no hint" for n, h in mutants if not h]
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        recorded = [(str(m["name"]), str(m["hint"])) for m in document["mutants"]]
    except (OSError, ValueError, KeyError, TypeError):
        return [*lines, f"{path}: missing or unreadable: run `grade hints {exercise.id}`"]
    if recorded != mutants:
        lines.append(f"{path}: out of date with corpus.py: run `grade hints {exercise.id}`")
    elif document.get("python", _PYTHON) == _PYTHON and document.get("sources") != (
        hints_sources(exercise)
    ):  # the digest is of syntax trees: only comparable on the Python that wrote it
        lines.append(
            f"{path}: out of date with the suite or the solution: run `grade hints {exercise.id}`"
        )
    return lines


def same_failures(exercise: Exercise) -> list[list[str]]:
    """The mutants of the exercise's ``hints.json`` that fail identically (the same tests,
    the same messages), in groups of two or more: a notebook that fails so gets all their
    hints, as the card cannot tell them apart."""
    if exercise.folder is None:
        return []
    try:
        mutants = json.loads((exercise.folder / HINTS_FILE).read_text(encoding="utf-8"))
        failing = [
            (str(m["name"]), json.dumps(m["fails"], sort_keys=True)) for m in mutants["mutants"]
        ]
    except (OSError, ValueError, KeyError, TypeError):  # `grade build --check` says why
        return []
    groups: dict[str, list[str]] = {}
    for name, fails in failing:
        groups.setdefault(fails, []).append(name)
    return [names for names in groups.values() if len(names) > 1]


def write_hints(exercise: Exercise, solution: Path, jobs: int, limits: Limits) -> Path:
    """Grade every mutant of the exercise's corpus (made from `solution`) and write its
    ``hints.json``: each mutant's failure pattern with its hint.

    Raises:
        GraderError: a mutant could not be graded, or one passes every test.
    """
    import tempfile

    import nbformat

    from grader.core.errors import ExerciseError
    from grader.run.batch import grade_all
    from grader.suite.corpus import apply, load_corpus

    assert exercise.folder is not None
    mutants = load_corpus(exercise).mutants
    reference = nbformat.read(solution, as_version=4)
    with tempfile.TemporaryDirectory(prefix="grade-hints-") as folder:
        paths = []
        for mutant in mutants:
            paths.append(str(Path(folder) / f"{mutant.name}.ipynb"))
            nbformat.write(apply(reference, mutant), paths[-1])
        outcomes = grade_all(paths, jobs, limits, {exercise.id: exercise}, exercise.id)
    entries = []
    for mutant, outcome in zip(mutants, outcomes, strict=True):
        if outcome.report is None:
            raise ExerciseError(f"{exercise.id}: mutant {mutant.name}: {outcome.error}")
        fails = pattern(outcome.report.tests)
        if not fails:
            raise ExerciseError(f"{exercise.id}: mutant {mutant.name} passes every test")
        entries.append((mutant.name, mutant.hint, fails))
    path = exercise.folder / HINTS_FILE
    path.write_text(hints_document(entries, hints_sources(exercise)), encoding="utf-8")
    _read.cache_clear()
    return path
