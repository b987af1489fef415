"""Scoring, pure: voiding a grading whose notebook reached for the grader, level
summaries and the level reached, and the headlines a cell's error deserves."""

from __future__ import annotations

import re
from dataclasses import replace

from grader.core.outcomes import Status
from grader.core.records import Finding
from grader.core.results import CellError, CheckResult, LevelSummary


def void(tests: list[CheckResult], findings: list[Finding]) -> list[CheckResult]:
    """No credit for a grading in which the notebook reached for the grader itself (its
    hidden suite, references or record channel): every test keeps its status, scores 0."""
    if not any(f.voids for f in findings):
        return tests
    return [replace(t, score=0) for t in tests]


def summarise(level_names: list[str], tests: list[CheckResult]) -> tuple[list[LevelSummary], int]:
    """Per-level totals, and the highest level reached with every level up to it fully passed."""
    levels = []
    reached = 0
    still_climbing = True
    for number, name in enumerate(level_names, start=1):
        mine = [t for t in tests if t.level == number]
        passed = sum(t.status == Status.PASSED for t in mine)
        levels.append(
            LevelSummary(
                number, name, passed, len(mine),
                sum(t.score for t in mine), sum(t.max_score for t in mine),
            )
        )  # fmt: skip
        if still_climbing and mine and passed == len(mine) and sum(t.score for t in mine) > 0:
            reached = number
        else:
            still_climbing = False
    return levels, reached


# Python's own message, and the kernel guard's for a package outside the environment.
_MISSING_MODULE = re.compile(
    r"^(?:ModuleNotFoundError|ImportError): (?:No module named '(?P<python>[^']+)'"
    r"|(?P<guard>[\w.]+) is not available in the grading environment)"
)


def headlines(cell_errors: list[CellError]) -> list[str]:
    """What to read first, from the cells' errors alone: each module the notebook imports
    that the grading environment lacks, once, at the first cell that imported it (its
    absence is why the tests that need it fail, not 33 separate mistakes)."""
    lines = []
    seen: set[str] = set()
    for error in cell_errors:
        match = _MISSING_MODULE.match(error.message) if error.kind == Status.ERROR else None
        module = match and (match["python"] or match["guard"])
        if not module or module in seen:
            continue
        seen.add(module)
        lines.append(f"cell {error.cell}: `{module}` is not available in the grading environment")
    return lines
