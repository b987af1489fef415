"""How a cohort did, exercise by exercise: the figures index.html draws and `--json` carries.

For each exercise: its notebooks' scores (as percentages of its maximum, so exercises with
different maxima are never averaged together), the levels they reached, each test's pass
rate with the likely bugs most common among the notebooks that failed it (hardest first),
and the pairs of notebooks whose own code is similar (`grader.report.similarity`).

`to_json_batch` writes them with the notebooks (`--json` of a batch), `tests_csv` and
`pairs_csv` as CSV (--output's tests.csv and similar.csv). Everything here is computed from the notebooks' `--json` entries alone, so `grade merge`
recomputes it over shards and gets what one run would have: except the pairs with the
reference solution, which need the exercise's reference.json and are per notebook, so
the merge keeps those the shards found.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import os
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from grader.core.outcomes import Status
from grader.core.results import CheckResult, CodeLine, GradeReport, Outcome
from grader.core.text import printable
from grader.report.card import encodable_data
from grader.report.documents import notebook_of, sort_outcomes, spreadsheet_safe
from grader.report.similarity import (
    REFERENCE,
    THRESHOLD,
    Pair,
    comparable,
    compare_fingerprints,
)

_BUGS_SHOWN = 2  # likely bugs listed per test


@dataclass(frozen=True)
class TestRate:
    """One test across an exercise's notebooks: how many passed it, of how many graded, and
    the likely bugs most common among those that did not (bug, notebooks)."""

    id: str
    level: int
    level_name: str
    description: str
    passed: int
    taken: int
    bugs: tuple[tuple[str, int], ...] = ()

    @property
    def rate(self) -> float:
        return self.passed / self.taken if self.taken else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "level": self.level,
            "level_name": self.level_name,
            "description": self.description,
            "passed": self.passed,
            "taken": self.taken,
            "pass_rate": round(self.rate, 4),
            "likely_bugs": [{"bug": bug, "notebooks": n} for bug, n in self.bugs],
        }


@dataclass(frozen=True)
class ExerciseStats:
    """An exercise's notebooks (those graded; those that could not be are the cohort's)."""

    id: str
    title: str
    max_score: float
    level_names: tuple[str, ...]
    scores: tuple[float, ...]  # one per notebook, in canonical order
    reached: tuple[int, ...]  # the level each notebook reached (0: none)
    tests: tuple[TestRate, ...]  # hardest first
    compared: int = 0  # notebooks with enough code of their own for the copy check

    @property
    def notebooks(self) -> int:
        return len(self.scores)

    @property
    def percents(self) -> list[float]:
        return [100 * s / self.max_score if self.max_score else 0.0 for s in self.scores]

    @property
    def full_marks(self) -> int:
        return sum(self.max_score > 0 and s >= self.max_score for s in self.scores)

    @property
    def mean_score(self) -> float:
        return statistics.fmean(self.scores) if self.scores else 0.0

    @property
    def mean_percent(self) -> float:
        return statistics.fmean(self.percents) if self.scores else 0.0

    @property
    def median_percent(self) -> float:
        return statistics.median(self.percents) if self.scores else 0.0

    @property
    def level_counts(self) -> list[int]:
        """How many notebooks reached each level, from 0 (none) to the last."""
        counts = Counter(self.reached)
        return [counts.get(level, 0) for level in range(len(self.level_names) + 1)]

    def to_dict(self) -> dict[str, Any]:
        return {
            "exercise": self.id,
            "title": self.title,
            "notebooks": self.notebooks,
            "max_score": self.max_score,
            "mean_score": round(self.mean_score, 3),
            "mean_percent": round(self.mean_percent, 2),
            "median_percent": round(self.median_percent, 2),
            "full_marks": self.full_marks,
            "levels_reached": [
                {"level": level, "name": name, "notebooks": count}
                for level, (name, count) in enumerate(
                    zip(("none", *self.level_names), self.level_counts, strict=True)
                )
            ],
            "tests": [t.to_dict() for t in self.tests],
            "compared": self.compared,
        }


@dataclass(frozen=True)
class Cohort:
    """A run's notebooks as a whole: each exercise's figures, the similar pairs, and the
    code they compare (each notebook's own, each exercise's reference solution's)."""

    exercises: tuple[ExerciseStats, ...]
    pairs: tuple[Pair, ...]
    notebooks: int
    could_not_grade: int
    code: Mapping[str, Sequence[CodeLine]] = field(default_factory=dict)  # by notebook
    references: Mapping[str, Sequence[CodeLine]] = field(default_factory=dict)  # by exercise
    threshold: float = THRESHOLD

    def lines(self, pair: Pair, side: str) -> Sequence[CodeLine]:
        """The own code of one side of `pair` (empty where this run does not have it)."""
        if side == REFERENCE:
            return self.references.get(pair.exercise, ())
        return self.code.get(side, ())

    def to_dict(self) -> dict[str, Any]:
        """What `--json` of a batch carries besides the notebooks' entries."""
        return {
            "exercises": [e.to_dict() for e in self.exercises],
            "similarity_threshold": self.threshold,
            "similar": [p.to_dict(functools.partial(self.lines, p)) for p in self.pairs],
        }


def exercise_stats(reports: Sequence[GradeReport], compared: int = 0) -> ExerciseStats:
    """The figures of one exercise's reports (in canonical order); `compared`: how many
    had enough code of their own for the copy check."""
    first = reports[0]
    failing: dict[str, list[GradeReport]] = defaultdict(list)
    taken: Counter[str] = Counter()
    passed: Counter[str] = Counter()
    rows: dict[str, CheckResult] = {}
    for report in reports:
        for test in report.tests:
            rows.setdefault(test.id, test)
            taken[test.id] += 1
            if test.status == Status.PASSED:
                passed[test.id] += 1
            else:
                failing[test.id].append(report)
    rates = []
    for order, (test_id, test) in enumerate(rows.items()):
        bugs = Counter(hint for report in failing[test_id] for hint in report.hints)
        common = tuple(sorted(bugs.items(), key=lambda b: (-b[1], b[0]))[:_BUGS_SHOWN])
        rate = TestRate(
            test_id, test.level, test.level_name, test.description,
            passed[test_id], taken[test_id], common,
        )  # fmt: skip
        rates.append((rate.rate, test.level, order, rate))
    return ExerciseStats(
        first.exercise,
        first.title,
        first.max_score,
        tuple(level.name for level in first.levels),
        tuple(r.score for r in reports),
        tuple(r.level_reached for r in reports),
        tuple(rate for *_, rate in sorted(rates, key=lambda r: r[:3])),
        compared,
    )


def cohort(
    outcomes: Iterable[Outcome],
    references: Mapping[str, Sequence[CodeLine]] | None = None,
    reference_pairs: Iterable[Pair] = (),
    threshold: float = THRESHOLD,
) -> Cohort:
    """The cohort's figures. `references`: each exercise's reference solution's own code,
    to compare every notebook against (`reference_code`); or, where the caller has no
    reference (`grade merge`), `reference_pairs`: the pairs with it already found."""
    outcomes = sort_outcomes(outcomes)
    by_exercise: dict[str, list[GradeReport]] = defaultdict(list)
    for outcome in outcomes:
        if outcome.report is not None:
            by_exercise[outcome.report.exercise].append(outcome.report)
    pairs = [] if references is not None else list(reference_pairs)
    code: dict[str, Sequence[CodeLine]] = {}
    stats = []
    for exercise, reports in sorted(by_exercise.items()):
        sides = {r.notebook: r.own_code for r in reports}
        code.update(sides)
        prints = comparable(sides)
        stats.append(exercise_stats(reports, len(prints)))
        reference = (references or {}).get(exercise, ())
        if reference:
            prints.update(comparable({REFERENCE: reference}))
        pairs += compare_fingerprints(exercise, prints, threshold)
    pairs.sort(key=lambda p: (p.exercise, -round(p.similarity, 3), p.a, p.b))
    return Cohort(
        tuple(stats),
        tuple(pairs),
        len(outcomes),
        sum(o.report is None for o in outcomes),
        code,
        {e: tuple(lines) for e, lines in (references or {}).items() if e in by_exercise},
        threshold,
    )


def reference_code(exercises: Iterable[str]) -> dict[str, tuple[CodeLine, ...]]:
    """The reference solutions' own code of `exercises`, from their reference.json (an
    exercise without one is left out: its notebooks are compared with each other only)."""
    from grader.suite.exercise import load_catalog
    from grader.verdict.own_code import read_reference

    catalog = load_catalog()
    found = {}
    for exercise in exercises:
        folder = catalog[exercise].folder if exercise in catalog else None
        reference = read_reference(folder) if folder else None
        if reference is not None:
            found[exercise] = reference.solution
    return found


def make_cohort(outcomes: Sequence[Outcome]) -> Cohort:
    """The cohort of a run, compared with the reference solutions of its exercises."""
    exercises = {o.report.exercise for o in outcomes if o.report is not None}
    return cohort(outcomes, reference_code(exercises))


def relative_names(outcomes: Iterable[Outcome], root: str | None = None) -> dict[str, str]:
    """Each notebook's path (`Outcome.notebook`, and its report's) relative to `root`, the
    folder the run was given (`graded_root`; default: the folder that holds them all):
    `/tmp/cohort/alice/hw.ipynb` -> `alice/hw.ipynb`. A notebook outside `root` keeps its
    path as given."""
    outcomes = list(outcomes)
    paths = sorted({o.notebook for o in outcomes} | {notebook_of(o) for o in outcomes})
    if not paths:
        return {}
    base = os.path.abspath(root or common_folder(paths))
    names = {}
    for path in paths:
        full = os.path.abspath(path)
        inside = os.path.commonpath([base, full]) == base if os.path.isabs(full) else False
        names[path] = os.path.relpath(full, base) if inside else path
    return names


def graded_root(paths: Sequence[str]) -> str:
    """The folder a run's notebooks are named relative to: the folder given (or the common
    folder of those given; a file counts as its folder), the same for every shard of it."""
    return common_folder([os.path.join(p, "") if os.path.isdir(p) else p for p in paths])


def common_folder(paths: Sequence[str]) -> str:
    """The folder that holds every file of `paths` (a path ending in a separator is a
    folder); on different drives, the first one's."""
    folders = [
        os.path.dirname(os.path.abspath(p) + (os.sep if p.endswith(os.sep) else "")) for p in paths
    ] or [os.getcwd()]
    try:
        return os.path.commonpath(folders)
    except ValueError:  # on different drives
        return folders[0]


# -- the cohort's documents -----------------------------------------------------------


def to_json_batch(outcomes: Iterable[Outcome], cohort: Cohort) -> str:
    """`--json` of a batch: each notebook's `--json` object (or its error entry) under
    "notebooks", then the cohort's figures (`grader.report.cohort.Cohort.to_dict`)."""
    document = {
        "notebooks": [o.to_dict() for o in sort_outcomes(outcomes)],
        "could_not_grade": cohort.could_not_grade,
        **cohort.to_dict(),
    }
    return json.dumps(encodable_data(document), indent=2)


def tests_csv(cohort: Cohort) -> str:
    """Each test of each exercise, hardest first: how many notebooks passed it, of how
    many, the pass rate, and the likely bugs most common among those that did not."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(
        ["exercise", "test", "level", "level_name", "passed", "taken", "pass_rate", "likely_bugs"]
    )
    for exercise in cohort.exercises:
        for test in exercise.tests:
            bugs = "; ".join(f"{bug} ({n})" for bug, n in test.bugs)
            writer.writerow([
                exercise.id, test.id, test.level, test.level_name, test.passed, test.taken,
                f"{test.rate:.4f}", spreadsheet_safe(printable(bugs)),
            ])  # fmt: skip
    return out.getvalue()


def pairs_csv(cohort: Cohort) -> str:
    """The pairs of similar code: the exercise, the two notebooks (the second may be the
    reference solution), the similarity and each side's share, and where they match
    (`a cell:line-cell:line = b cell:line-cell:line`, runs separated by `; `)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["exercise", "a", "b", "similarity", "a_share", "b_share", "matches"])
    for pair in cohort.to_dict()["similar"]:
        matches = "; ".join(f"{_span(m['a'])} = {_span(m['b'])}" for m in pair["matches"])
        writer.writerow([
            pair["exercise"], spreadsheet_safe(printable(pair["a"])),
            spreadsheet_safe(printable(pair["b"])), pair["similarity"], pair["a_share"],
            pair["b_share"], matches,
        ])  # fmt: skip
    return out.getvalue()


def _span(ends: list[list[int]]) -> str:
    return "-".join(":".join(str(n) for n in end) for end in ends)
