"""What the report card says first: the root cause of a notebook whose cells failed, which
tests could not run because of it, and the likely bug where the hidden tests fail the way
one of the exercise's known bugs makes them fail.

Known bugs are the exercise's mutation corpus (`grader.suite.corpus`): `grade hints` grades every
mutant and writes, next to the suite, ``hints.json``: each mutant's name, its hint, and its
failure pattern: the tests it does not pass, each with its message, numbers left out
("output: # of # elements outside the tolerance; ..."). A notebook gets a mutant's hint when

1. its tests fail exactly as the mutant's do, messages included; else
2. the same tests fail (several bugs can fail the same tests: each one's hint is given);
   else
3. the tests that fail differ from the mutant's by at most a fifth of those involved: a
   weaker "perhaps".

A test that fails for the interface (a name missing, a call that does not fit the
signature, a value not of the kind asked for) is the interface's to explain: it counts
toward a known bug only where that bug fails it the same way, so failures the interface
alone explains get no hint. Nothing is hinted while tests are not implemented, blocked or
skipped: the card's first line already says why those fail.

A notebook graded against the wrong exercise fails on the interface; where it defines
another exercise's names (`Exercise.defines`, as the grader finds a notebook's exercise)
and not all of this one's, the card says which exercise it looks like, and gives no hint.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from grader.core.notebook import Notebook, defined_names
from grader.core.outcomes import UNDEFINED_NAME, Status
from grader.core.results import CellError, CheckResult, Problem, RootCause
from grader.suite.exercise import Exercise

HINTS_FILE = "hints.json"
NEAR = 0.8  # the least overlap (Jaccard) of two failure patterns for a "perhaps" hint
MAX_HINTS = 5  # the most known bugs that share one failure pattern in the corpora
# Statuses that say why a test failed better than a hint could.
_EXPLAINED = frozenset({Status.NOT_IMPLEMENTED, Status.SKIPPED})


def root_cause(
    notebook: Notebook, tests: list[CheckResult], errors: list[CellError]
) -> tuple[list[CheckResult], RootCause | None]:
    """Mark the tests that could not run because a cell failed (they need a name that only a
    failed cell defines) as Problem.BLOCKED, and return them with the root cause: the first cell
    that failed, its line, and how many tests it blocked. A later cell that failed with a
    NameError is taken as a consequence of an earlier one (its names were never defined
    because of it); a later cell that failed otherwise blocks its own tests."""
    if not errors:
        return tests, None
    first = errors[0]
    failed = {e.cell: e for e in errors}
    defined_in: dict[str, list[int]] = {}
    for index, source in notebook.code_cells:
        for name in defined_names([source]):
            defined_in.setdefault(name, []).append(index + 1)

    def blocker(test: CheckResult) -> int:
        match = UNDEFINED_NAME.match(test.message) if test.status == Status.ERROR else None
        if match is None:
            return 0
        cells = [c for c in defined_in.get(match[1].split(".")[0], []) if c in failed]
        if not cells:
            return 0  # defined nowhere: the interface's problem, not a cell's
        cell = cells[-1]
        cascade = failed[cell].message.startswith("NameError") and cell > first.cell
        return first.cell if cascade else cell

    marked = []
    for test in tests:
        cell = blocker(test)
        marked.append(replace(test, problem=Problem.BLOCKED, blocked_by=cell) if cell else test)
    count = sum(t.blocked_by == first.cell for t in marked)
    return marked, RootCause(
        first.cell, first.kind, first.message, first.line, _line(notebook, first), count
    )


def _line(notebook: Notebook, error: CellError) -> str:
    """The text of the line that raised, stripped ("" when not known)."""
    cells = notebook.node.cells
    if not error.line or not 0 < error.cell <= len(cells):
        return ""
    lines = str(cells[error.cell - 1].source).splitlines()
    return lines[error.line - 1].strip() if error.line <= len(lines) else ""


def as_in_the_cell(notebook: Notebook, errors: list[CellError]) -> list[CellError]:
    """`errors` with each line numbered as the cell shows it: IPython drops a cell's leading
    blank lines before it numbers the lines of a traceback."""
    cells = notebook.node.cells
    fixed = []
    for error in errors:
        if error.line and 0 < error.cell <= len(cells):
            lines = str(cells[error.cell - 1].source).splitlines()
            blank = next((i for i, line in enumerate(lines) if line.strip()), 0)
            error = replace(error, line=error.line + blank)
        fixed.append(error)
    return fixed


# -- hints ---------------------------------------------------------------------------


def hints(exercise: Exercise, tests: list[CheckResult], voided: bool = False) -> list[str]:
    """The likely bugs behind `tests`' failures, best first (at most MAX_HINTS): the hints of
    the known bugs whose failure pattern is the notebook's, then ("perhaps: ...") those
    whose pattern is near it. Interface failures count toward a known bug only where it
    fails those tests the same way (see the module docstring)."""
    if voided or any(t.status in _EXPLAINED or t.problem == Problem.BLOCKED for t in tests):
        return []
    failing = pattern(tests)
    interface = {t.id for t in tests if t.problem == Problem.INTERFACE}
    same, alike, near = [], [], []
    for known, hint in known_bugs(exercise):
        explained = {i: m for i, m in failing.items() if i not in interface or known.get(i) == m}
        if not explained:
            continue
        ids = explained.keys()
        if known == explained:
            same.append(hint)
        elif known.keys() == ids:
            alike.append(hint)
        elif len(known.keys() & ids) / len(known.keys() | ids) >= NEAR:
            near.append(f"perhaps: {hint}")
    return list(dict.fromkeys(same or alike or near))[:MAX_HINTS]


def looks_like_another(
    exercise: Exercise,
    notebook: Notebook,
    tests: list[CheckResult],
    catalog: Mapping[str, Exercise],
) -> list[str]:
    """A headline naming the exercises of `catalog` the notebook looks like, when tests fail
    for the interface and the notebook defines another exercise's names
    (`Exercise.defines`) but not all of `exercise`'s; [] otherwise."""
    if not any(t.problem == Problem.INTERFACE and t.status != Status.PASSED for t in tests):
        return []
    names = defined_names([source for _, source in notebook.code_cells])
    missing = [name for name in exercise.defines if name not in names]
    others = [
        e.id
        for e in catalog.values()
        if e.id != exercise.id and e.defines and set(e.defines) <= names
    ]
    if not missing or not others:
        return []
    whose = f"{others[0]}'s" if len(others) == 1 else "their"
    return [
        f"the notebook looks like exercise {' or '.join(others)}, not {exercise.id}: it "
        f"defines {whose} names, not {', '.join(missing)} (graded against the wrong exercise?)"
    ]


def pattern(tests: list[CheckResult]) -> dict[str, str]:
    """The failure pattern of `tests`: each test that did not pass, with its message (its
    numbers left out: they vary with the bug's details, the kind of failure does not)."""
    return {t.id: _NUMBER.sub("#", t.message) for t in tests if t.status != Status.PASSED}


_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def known_bugs(exercise: Exercise) -> list[tuple[dict[str, str], str]]:
    """(failure pattern, hint) of each mutant in the exercise's ``hints.json`` (none when
    it has no such file)."""
    if exercise.folder is None:
        return []
    return _read(exercise.folder / HINTS_FILE)


@functools.cache
def _read(path: Path) -> list[tuple[dict[str, str], str]]:
    try:
        mutants = json.loads(path.read_text(encoding="utf-8"))["mutants"]
        return [(dict(m["fails"]), str(m["hint"])) for m in mutants if m["hint"]]
    except (OSError, ValueError, KeyError, TypeError):  # `grade build --check` says why
        return []
