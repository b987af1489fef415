"""Grader failures: things that stop a notebook from being graded at all.

Candidate failures (wrong answers, exceptions, timeouts, dead kernels) are never raised
out of the grader; they become outcomes in the report. Everything here is the grader's
own trouble, and each class carries the process exit code the CLI maps it to::

    GraderError (2)
    ├── NotebookError       the file is missing, unreadable, or not a notebook
    ├── ExerciseError       unknown exercise, none / several match the notebook, or the
    │                       exercise's folder could not be loaded (its suite is broken)
    ├── KernelStartError    the kernel (or its sandbox) could not be started
    │   └── KernelDiedAtStart   it started, then exited before it answered
    ├── UsageError          a flag's value makes no sense
    └── GraderBug (3)       a hidden check raised where the candidate is not to blame:
                            a bug in the suite, never reported as the candidate's error
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """What `grade` exits with. A stopping signal N gives 128 + N (143 for SIGTERM)."""

    FULL_MARKS = 0  # or: a command other than grading succeeded
    NOT_FULL_MARKS = 1  # graded, points lost; or `build --check` found stale scaffolds
    CANNOT_GRADE = 2  # a GraderError: bad file, unknown or broken exercise, bad flag, ...
    INTERNAL_ERROR = 3  # a bug in the grader or in a hidden check (GraderBug)
    INTERRUPTED = 130  # Ctrl-C, after cleaning up

    @classmethod
    def stopped_by(cls, signum: int) -> int:
        """The exit code for a stopping signal, as a shell reports it."""
        return 128 + signum


class GraderError(Exception):
    """Base class: grading could not happen. `str(error)` is one line for the user."""

    exit_code = ExitCode.CANNOT_GRADE


class NotebookError(GraderError):
    """The notebook file cannot be read as an nbformat 4 notebook."""

    def __init__(self, path: object, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


class ExerciseError(GraderError):
    """No exercise, or more than one, fits the notebook; or the one it names is broken."""


class KernelStartError(GraderError):
    """The candidate's kernel could not be started."""


class KernelDiedAtStart(KernelStartError):
    """The kernel process started, then exited before it answered its first request:
    nothing of the notebook had run in it (the session starts another, once)."""


class UsageError(GraderError):
    """A command-line value is out of range or inconsistent."""


class GraderBug(GraderError):
    """A hidden check raised an exception the candidate's answers do not explain.

    The original exception is `error` (and `__cause__`); no report is produced.
    """

    exit_code = ExitCode.INTERNAL_ERROR

    def __init__(self, exercise: str, check: str, error: BaseException) -> None:
        text = " ".join(f"{type(error).__name__}: {error}".split())
        super().__init__(
            f"exercise {exercise}, check {check}: the suite raised {text[:300]} "
            "(a bug in the grader's suite, not in the notebook)"
        )
        self.exercise = exercise
        self.check = check
        self.error = error
