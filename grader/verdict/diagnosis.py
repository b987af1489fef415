"""What the report card says first: the root cause of a notebook whose cells failed, which
tests could not run because of it, and the likely bug where the hidden tests fail the way
one of the exercise's known bugs makes them fail.

Known bugs are the exercise's mutation corpus (`grader.suite.corpus`): `grade hints` grades every
mutant and writes, next to the suite, ``hints.json``: each mutant's name, its hint, and its
failure pattern: the tests it does not pass, each with its message, numbers left out
("output: # of # elements outside the tolerance; ..."). A notebook gets a mutant's hint when

1. its tests fail exactly as the mutant's do, messages included: the hint is said outright
   (several bugs can fail identically: each one's hint is given); else
2. the same tests fail, with other messages, or the tests that fail differ from the
   mutant's by at most a fifth of those involved: the hint is asked, "perhaps: ...".

Only an exact match is confident: a bug the corpus does not hold often fails the same
tests as one it does, and says so in its messages (`grade hints` measures how often the
card would name a wrong bug).

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
) -> tuple[list[CheckResult], RootCause | None, list[RootCause]]:
    """Mark the tests that could not run because a cell failed (they miss a name that only a
    failed cell defines, or should have defined: a cell that does not compile defines
    nothing) as Problem.BLOCKED, and return them with the root cause (the first failed cell
    that blocked a test: where, its line, how many tests it blocked) and the cells that
    failed without blocking any (the notebook's own checks: its self-check, a try-out).

    A cell that failed with a NameError for a name that an earlier failed cell defines is
    that cell's consequence, as is a test that raised one: both are put on that cell."""
    if not errors:
        return tests, None, []
    failed = {e.cell: e for e in errors}
    defined_in: dict[str, list[int]] = {}
    for index, source in notebook.code_cells:
        for name in defined_names([source]):
            defined_in.setdefault(name, []).append(index + 1)

    def definer(name: str, before: int) -> int:
        """The last failed cell before `before` that defines `name` (0: none)."""
        cells = [c for c in defined_in.get(name.split(".")[0], []) if c in failed and c < before]
        return cells[-1] if cells else 0

    def origin(cell: int) -> int:
        """The failed cell that `cell`'s failure comes from (itself, unless a NameError)."""
        seen = set()
        while cell not in seen:
            seen.add(cell)
            match = _NAME_ERROR.search(failed[cell].message)
            earlier = definer(match[1], cell) if match else 0
            if not earlier:
                return cell
            cell = earlier
        return cell

    def blocker(test: CheckResult) -> int:
        if test.status != Status.ERROR:
            return 0
        match = UNDEFINED_NAME.match(test.message) or _NAME_ERROR.search(test.message)
        cell = definer(match[1], len(notebook.node.cells) + 1) if match else 0
        return origin(cell) if cell else 0

    marked = []
    for test in tests:
        cell = blocker(test)
        marked.append(replace(test, problem=Problem.BLOCKED, blocked_by=cell) if cell else test)
    count = {e.cell: sum(t.blocked_by == e.cell for t in marked) for e in errors}
    causes = [e for e in errors if count[e.cell]]
    cause = causes[0] if causes else None
    own = [
        _cause(notebook, e, 0)
        for e in errors
        if not count[e.cell] and origin(e.cell) == e.cell and e.kind != Status.SKIPPED
    ]
    return marked, _cause(notebook, cause, count[cause.cell]) if cause else None, own


# Python's message for a name not defined (a failed cell's, or a test's that called into one).
_NAME_ERROR = re.compile(r"NameError: name '(\w+)' is not defined")


def _cause(notebook: Notebook, error: CellError, blocked: int) -> RootCause:
    return RootCause(
        error.cell, error.kind, error.message, error.line, _line(notebook, error), blocked,
        self_check=not blocked and _checks(notebook, error.cell),
    )  # fmt: skip


def _checks(notebook: Notebook, cell: int) -> bool:
    """Whether the cell is the notebook's own check: it asserts, or runs a self-check."""
    cells = notebook.node.cells
    if not 0 < cell <= len(cells):
        return False
    source = str(cells[cell - 1].source)
    return "self_check" in source or re.search(r"^\s*assert\b", source, re.M) is not None


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
    interface = {t.id for t in tests if t.problem == Problem.INTERFACE}
    return match(pattern(tests), known_bugs(exercise), interface)


def match(
    failing: Mapping[str, str],
    known: list[tuple[dict[str, str], str]],
    interface: frozenset[str] | set[str] = frozenset(),
) -> list[str]:
    """The hints of `known` bugs for a failure pattern: said outright only for a known bug
    that fails exactly so (the same tests, the same messages); asked with less confidence
    ("perhaps: ...") where the same tests fail with other messages, or the tests differ by
    at most a fifth; nothing otherwise. Tests in `interface` count only where the known bug
    fails them the same way."""
    same, alike, near = [], [], []
    for bug, hint in known:
        explained = {i: m for i, m in failing.items() if i not in interface or bug.get(i) == m}
        if not explained:
            continue
        ids = explained.keys()
        if bug == explained:
            same.append(hint)
        elif bug.keys() == ids:
            alike.append(f"perhaps: {hint}")
        elif len(bug.keys() & ids) / len(bug.keys() | ids) >= NEAR:
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


# A number, not the digits of a name (float32, conv1d, W_Q2 stay as they are).
_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?![\w.])")


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
