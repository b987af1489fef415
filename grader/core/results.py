"""Results of a grading: frozen data, scored and serialised without a kernel."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from grader.core.outcomes import Status
from grader.core.records import Finding

STATUSES: tuple[str, ...] = tuple(s.value for s in Status)


# What a test that did not pass ran into, besides its status (`CheckResult.problem`).
class Problem(str, Enum):
    """What a test that did not pass ran into, besides its status."""

    NONE = ""
    INTERFACE = "interface"  # the code does not fit the interface: a name, layer,
    # signature or return type is not what the exercise asks for
    BLOCKED = "blocked"  # it could not run: a name it needs is defined by a cell that failed

    def __str__(self) -> str:
        return self.value


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
    hidden: bool = True  # False: "public", also in the candidate's self-check
    description: str = ""  # the check's docstring, first line
    problem: Problem = Problem.NONE
    blocked_by: int = 0  # for Problem.BLOCKED: the first cell that failed (cells count from 1)
    duration_s: float = 0.0  # how long the check ran

    @property
    def verdict(self) -> str:
        """What happened, as a person reads it: 'wrong answer', 'interface', 'blocked by
        cell 2', 'not implemented', 'error', 'timeout', ..."""
        if self.status == Status.PASSED:
            return "passed"
        if self.problem == Problem.BLOCKED:
            return f"blocked by cell {self.blocked_by}"
        if self.problem == Problem.INTERFACE:
            return Problem.INTERFACE.value
        return _VERDICTS.get(self.status, str(self.status))


_VERDICTS = {Status.FAILED: "wrong answer", Status.NOT_IMPLEMENTED: "not implemented"}


@dataclass(frozen=True)
class CellError:
    """A candidate cell that raised, ran out of time, or killed the kernel (cell counts from 1)."""

    cell: int
    kind: Status  # never PASSED
    message: str
    output: str = ""
    output_cut: int = 0
    line: int = 0  # the line of the cell that raised (0: not known)


@dataclass(frozen=True)
class RootCause:
    """A cell that failed: what it raised, where, and how many tests could not run because
    of it (they need a name that it defines, or should have). The report's root cause is the
    first that blocked a test; its `own_failures` are those that blocked none (`self_check`:
    the cell is the notebook's own check, an assert or the self-check)."""

    cell: int
    kind: Status
    message: str
    line: int = 0
    source: str = ""  # the text of that line
    blocked: int = 0
    self_check: bool = False


@dataclass(frozen=True)
class CodeLine:
    """A line of the candidate's own code (not the scaffold's: `grader.report.similarity`):
    its cell and line, both counting from 1, and its text."""

    cell: int
    line: int
    text: str


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
    python_version: str = ""
    suite_hash: str = ""  # sha256 of the exercise's suite and the shared modules it uses
    device: str = "cpu"  # where the candidate's code ran during the hidden tests
    sandboxed: bool = False  # whether the kernel ran in the sandbox (grader/kernel/sandbox.py)
    # who the kernel ran as, when the grader is root ("uid 61000 (picked: ...)", a
    # --kernel-user, or "root (why)"); "" for the grader's own unprivileged user
    kernel_user: str = ""
    # "enforced" (sandboxed: the operating system refuses what could switch the watch off)
    # or "best effort" (not sandboxed: see docs/security.md)
    integrity_checks: str = "best effort"
    root_cause: RootCause | None = None
    # cells that failed without keeping a hidden test from running (the self-check, a
    # try-out): the candidate's own tests, shown after the hidden tests' diagnosis
    own_failures: list[RootCause] = field(default_factory=list)
    hints: list[str] = field(default_factory=list)  # likely bugs, from the mutation corpus
    profile: dict[str, Any] | None = None  # `--profile`: see grader.run.profile (never scored)
    # the candidate's own code, which the cohort's copy check compares (empty where the
    # exercise has no reference.json: `grade build` writes it)
    own_code: list[CodeLine] = field(default_factory=list)

    @property
    def full_marks(self) -> bool:
        """True when every point was earned."""
        return self.max_score > 0 and self.score >= self.max_score

    @property
    def graded_with(self) -> dict[str, str]:
        """What the result was computed with: enough to tell two gradings apart."""
        return {
            "grader": self.grader_version,
            "exercise": self.exercise,
            "suite_hash": self.suite_hash,
            "torch": self.torch_version,
            "python": self.python_version,
        }

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the `--json` schema)."""
        data = asdict(self)
        data["duration_s"] = round(self.duration_s, 3)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GradeReport:
        """The inverse of `to_dict` (for `grade merge`).

        Raises:
            ValueError: `data` is not a report `to_dict` wrote.
        """
        try:
            fields = dict(data)
            fields["levels"] = [LevelSummary(**d) for d in data["levels"]]
            fields["tests"] = [
                CheckResult(
                    **{**d, "status": Status(d["status"]), "problem": Problem(d.get("problem", ""))}
                )
                for d in data["tests"]
            ]
            fields["cell_errors"] = [
                CellError(**{**d, "kind": Status(d["kind"])}) for d in data["cell_errors"]
            ]
            fields["integrity"] = [Finding(**d) for d in data.get("integrity", [])]
            fields["cut_output"] = [CutOutput(**d) for d in data.get("cut_output", [])]
            cause = data.get("root_cause")
            fields["root_cause"] = cause and RootCause(**{**cause, "kind": Status(cause["kind"])})
            fields["own_failures"] = [
                RootCause(**{**own, "kind": Status(own["kind"])})
                for own in data.get("own_failures", [])
            ]
            fields["own_code"] = [CodeLine(**line) for line in data.get("own_code", [])]
            return cls(**fields)
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"not a grade report: {type(e).__name__}: {e}") from None


@dataclass(frozen=True)
class Outcome:
    """One notebook of a run: its report, or why it could not be graded (`error`, with the
    exit code that says whose fault: 2 the input's, 3 the grader's). `cells` is what each
    cell printed (for `--output`; not serialised)."""

    notebook: str
    report: GradeReport | None = None
    error: str = ""
    exit_code: int = 0
    cells: tuple[Any, ...] = field(default=(), compare=False, repr=False)

    @property
    def score(self) -> float:
        """The report's score; 0 for a notebook that could not be graded."""
        return self.report.score if self.report else 0.0

    def to_dict(self) -> dict[str, Any]:
        """The report's `--json` object; for an error, the notebook, the error, the exit
        code and a zero."""
        if self.report is not None:
            return self.report.to_dict()
        return {
            "notebook": self.notebook,
            "error": self.error,
            "exit_code": self.exit_code,
            "score": 0,
            "max_score": 0,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Outcome:
        """The inverse of `to_dict`.

        Raises:
            ValueError: `data` is neither a report nor an error entry.
        """
        if not isinstance(data, dict) or not isinstance(data.get("notebook"), str):
            raise ValueError("not a grading result (no notebook)")
        if "error" in data:
            code = data.get("exit_code")
            if not isinstance(code, int) or isinstance(code, bool):
                raise ValueError("an error entry without an exit code")
            return cls(data["notebook"], error=str(data["error"]), exit_code=code)
        report = GradeReport.from_dict(data)
        return cls(report.notebook, report, exit_code=exit_code(report))


def exit_code(report: GradeReport) -> int:
    """0 for full marks, 1 for points lost (`grader.core.errors.ExitCode`)."""
    return 0 if report.full_marks else 1
