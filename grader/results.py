"""Results of a grading: frozen data, scored and serialised without a kernel."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from grader.outcomes import Status
from grader.records import VOIDING, Finding

STATUSES: tuple[str, ...] = tuple(s.value for s in Status)


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one hidden test."""

    id: str
    level: int
    level_name: str
    status: Status
    score: float
    max_score: float
    message: str = ""
    hidden: bool = True


@dataclass(frozen=True)
class CellError:
    """A candidate cell that raised, ran out of time, or killed the kernel (cell counts from 1)."""

    cell: int
    kind: Status  # never PASSED
    message: str
    output: str = ""
    output_cut: int = 0


@dataclass(frozen=True)
class CutOutput:
    """A cell that printed past the output limits: how its output began, and how much was cut."""

    cell: int
    start: str
    cut: int


@dataclass(frozen=True)
class LevelSummary:
    """Tests passed and points earned on one level."""

    number: int
    name: str
    passed: int
    total: int
    score: float
    max_score: float


@dataclass(frozen=True)
class GradeReport:
    """Everything the report card, the JSON and the JUnit file say."""

    exercise: str
    title: str
    notebook: str
    score: float
    max_score: float
    level_reached: int
    level_reached_name: str
    levels: list[LevelSummary]
    duration_s: float
    tests: list[CheckResult]
    cell_errors: list[CellError]
    headlines: list[str] = field(default_factory=list)
    integrity: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    cut_output: list[CutOutput] = field(default_factory=list)
    torch_version: str = ""
    grader_version: str = ""

    @property
    def full_marks(self) -> bool:
        """True when every point was earned."""
        return self.max_score > 0 and self.score >= self.max_score

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the `--json` schema)."""
        data = asdict(self)
        data["duration_s"] = round(self.duration_s, 3)
        return data


def void(tests: list[CheckResult], findings: list[Finding]) -> list[CheckResult]:
    """No credit for a grading in which the notebook reached for the grader itself (its
    hidden suite, references or record channel): every test keeps its status, scores 0."""
    if not any(f.kind in VOIDING for f in findings):
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
