"""`grade hints`: grade an exercise's mutation corpus and record, next to its suite, each
known bug's failure pattern (``hints.json``), which `grader.verdict.diagnosis` matches a
notebook's failures against; and the checks `grade build --check` makes of that file."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
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
    any module beside it), its corpus (what each mutant writes), the modules shared by the
    exercises of its folder, the check helpers' messages (`grader.suite.checks`,
    `grader.suite.library`) and the solution's code cells. Formatting and comments do
    not change it (syntax trees, as the catalog's digest), nor do an exercise's tags and
    minutes; a reworded message, a changed check or a mutant's new text does."""
    import hashlib

    import nbformat

    from grader.suite import checks, library
    from grader.suite.exercise import code_digest, sources_digest

    assert exercise.folder is not None
    digest = hashlib.sha256(sources_digest(exercise.folder, verdicts=True).encode())
    corpus = exercise.folder / "corpus.py"
    shared = sorted(exercise.folder.parent.glob("*.py"))
    helpers = [Path(checks.__file__), Path(library.__file__)]
    for path in [*([corpus] if corpus.is_file() else []), *shared, *helpers]:
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
            f"{path}: out of date with the suite, corpus or solution: run `grade hints {exercise.id}`"
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


def corpus_warnings(exercise: Exercise) -> list[str]:
    """What `grade hints` and `grade build` warn about, from ``hints.json`` alone (no
    grading): mutants that fail identically (the card cannot tell their hints apart), and
    mutants whose first lost points are at a level other than the one they declare (what
    tests/test_exercises.py would fail on, minutes later)."""
    from grader.suite.corpus import load_corpus

    lines = [
        f"{exercise.id}: mutants {', '.join(twins)} fail identically (the same tests, the "
        "same messages): the card cannot tell their hints apart"
        for twins in same_failures(exercise)
    ]
    declared = {m.name: m.level for m in load_corpus(exercise).mutants}
    for name, _, levels in levels_lost(exercise):
        want = declared.get(name)
        if not levels or want not in exercise.levels:
            continue
        first = exercise.levels[levels[0] - 1]
        if first != want:
            lines.append(
                f"{exercise.id}: mutant {name} first loses points at level {levels[0]} "
                f"({first}), not at its declared level "
                f"{exercise.levels.index(want) + 1} ({want})"
            )
    return lines


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


def _recorded(exercise: Exercise) -> list[tuple[str, str, dict[str, str]]]:
    """(name, hint, failure pattern) of each mutant in the exercise's ``hints.json``."""
    if exercise.folder is None:
        return []
    try:
        document = json.loads((exercise.folder / HINTS_FILE).read_text(encoding="utf-8"))
        return [(str(m["name"]), str(m["hint"]), dict(m["fails"])) for m in document["mutants"]]
    except (OSError, ValueError, KeyError, TypeError):  # `grade build --check` says why
        return []


def levels_lost(exercise: Exercise) -> list[tuple[str, bool, list[int]]]:
    """Each mutant's name, whether it is about one feature (not `Mutant.values`) and the
    levels it loses points at, from ``hints.json``: how far one bug spreads over the card."""
    from grader.suite.corpus import load_corpus

    level_of = {c.id: c.level for c in exercise.checks}
    feature = {m.name: not m.values for m in load_corpus(exercise).mutants}
    return [
        (name, feature.get(name, True), sorted({level_of[t] for t in fails if t in level_of}))
        for name, _, fails in _recorded(exercise)
    ]


@dataclass(frozen=True)
class Measures:
    """What `grade hints` says of an exercise's corpus after grading it."""

    mutants: int
    features: int  # mutants about one feature (not `Mutant.values`)
    median_levels: float  # levels a feature mutant loses points at: median and most
    most_levels: int
    widest: list[str]  # the feature mutants that lose points at the most levels
    named: int  # mutants the card names outright by their own hint (or an identical twin's)
    unseen_quiet: int  # with its own bug left out of the corpus: no hint at all
    unseen_perhaps: int  # ... a "perhaps"
    unseen_wrong: int  # ... another bug named outright

    @property
    def precision(self) -> float:
        """Outright hints that name the graded bug (or one failing identically), of all
        outright hints given, over the corpus graded against itself and left one out."""
        given = self.named + self.unseen_wrong
        return self.named / given if given else 1.0

    def lines(self, name: str) -> list[str]:
        spread = (
            f"{self.features} feature mutants lose points at a median of "
            f"{self.median_levels:g} level(s), at most {self.most_levels}"
            + (f" ({', '.join(self.widest)})" if self.most_levels > 1 else "")
            if self.features
            else "no feature mutants"
        )
        return [
            f"{name}: {self.mutants} mutants; {spread}",
            f"{name}: hint precision {self.precision:.0%}: {self.named} of {self.mutants} "
            "named outright by their own hint (or an identical twin's); with its own bug left "
            f"out of the corpus, {self.unseen_quiet} get no hint, {self.unseen_perhaps} a "
            f"'perhaps', {self.unseen_wrong} another bug named outright",
        ]


def measure(exercise: Exercise) -> Measures:
    """How far each mutant spreads over the levels, and how precise the hints are, from
    the exercise's ``hints.json`` (no grading)."""
    from statistics import median

    from grader.verdict.diagnosis import match

    recorded = _recorded(exercise)
    lost = levels_lost(exercise)
    features = [(n, len(levels)) for n, feature, levels in lost if feature]
    most = max((count for _, count in features), default=0)
    named = quiet = perhaps = wrong = 0
    known = [(f, h) for _, h, f in recorded if h]
    for _, hint, fails in recorded:
        twins = {h for _, h, f in recorded if f == fails}
        said = match(fails, known)
        named += bool(said) and set(said) <= twins and hint in said
        unseen = match(fails, [(f, h) for f, h in known if f != fails])
        outright = [h for h in unseen if not h.startswith("perhaps: ")]
        wrong += bool(outright)
        perhaps += bool(unseen) and not outright
        quiet += not unseen
    return Measures(
        mutants=len(recorded),
        features=len(features),
        median_levels=median(c for _, c in features) if features else 0,
        most_levels=most,
        widest=[n for n, c in features if c == most][:3],
        named=named,
        unseen_quiet=quiet,
        unseen_perhaps=perhaps,
        unseen_wrong=wrong,
    )
